//! Hostile input through the `mailvault` binary (issue 27): a Maildir store of messages
//! made to hurt an indexer, generated here beside an ordinary one: 1 MB of one token,
//! 100,000 tiny MIME parts, HTML nested 200,000 deep, HTML of 480,000 character references
//! and 50,000 attributes, megabytes of `<style>` and `<script>`, bogus charsets,
//! multiparts nested 5,000 deep, a digest of 300,000 messages, and (indexed by a second,
//! incremental run) forwarded messages nested 100,000 deep, and 50,000 deep in a base64
//! encoded one. `index` indexes every one in bounded time and memory, each is found by its
//! subject and by the words of its readable parts (and not by what the caps drop), `show`
//! prints each (its text, never a style sheet or a script), and `check` passes.
#![allow(clippy::unwrap_used)]

mod common;

use common::Env;
use mailvault_core::search::extract::{MAX_HTML_PART, MAX_NESTING, MAX_PARTS};
use mailvault_core::search::schema::MAX_TOKEN;
use serde_json::Value;
use std::collections::BTreeSet;
use std::fs;
use std::path::Path;
use std::time::{Duration, Instant};

/// Each `index` (and `show`) run must end within this: the hostile messages take under a
/// second in a debug build on 2 cores; quadratic work on any of them would take minutes.
const INDEX_TIME: Duration = Duration::from_secs(10);
/// Peak resident memory of each `index` run: about 80 MiB, what any command opening the
/// repository takes (its key's Argon2 uses 64 MiB), at any thread count. Were the parser
/// given the whole of the digest, the first run would take 190.
const INDEX_RSS: u64 = 160 << 20;
/// Peak resident memory of `show` on the deepest message and on the digest, which it parses
/// whole: about 165 and 180 MiB.
const SHOW_RSS: u64 = 360 << 20;

const HEAD: &str = "From: Mallory <mallory@example.com>\r\nTo: alice@example.org\r\n\
                    Date: Mon, 15 Jan 2024 10:00:00 +0000\r\nMIME-Version: 1.0\r\n";

/// A message: its Maildir key and bytes.
struct Hostile {
    key: &'static str,
    data: Vec<u8>,
}

fn message(key: &'static str, head: String, body: &[u8]) -> Hostile {
    let mut data = format!("{HEAD}Message-ID: <{key}@example.com>\r\n{head}\r\n").into_bytes();
    data.extend_from_slice(body);
    Hostile { key, data }
}

/// A multipart/mixed body of `parts` (each its own header lines, a blank line, its body)
/// and the Content-Type announcing it.
fn multipart(parts: &[Vec<u8>]) -> (String, Vec<u8>) {
    let mut body = Vec::new();
    for p in parts {
        body.extend_from_slice(b"--BOUND\r\n");
        body.extend_from_slice(p);
        body.extend_from_slice(b"\r\n");
    }
    body.extend_from_slice(b"--BOUND--\r\n");
    (
        "Content-Type: multipart/mixed; boundary=\"BOUND\"\r\n".into(),
        body,
    )
}

/// The word of `len` bytes made of `c` after one letter `first`.
fn long_word(first: char, c: char, len: usize) -> String {
    std::iter::once(first)
        .chain(std::iter::repeat_n(c, len - 1))
        .collect()
}

fn messages() -> Vec<Hostile> {
    let mut v = vec![message(
        "ordinary",
        "Subject: ordinary tidings\r\n".into(),
        b"an ordinary marmalade note\r\n",
    )];

    // One token of a megabyte, readable words on either side of it, and words of exactly
    // the longest indexed length and one byte more.
    let body = format!(
        "beforetoken {} aftertoken {} {}\r\n",
        "q".repeat(1_000_000),
        long_word('k', '7', MAX_TOKEN),
        long_word('m', '7', MAX_TOKEN + 1),
    );
    v.push(message(
        "bigtoken",
        "Subject: bigtoken\r\n".into(),
        body.as_bytes(),
    ));

    // 100,000 tiny parts: the first MAX_PARTS (the multipart itself among them) are read.
    let parts: Vec<Vec<u8>> = (0..100_000)
        .map(|i| format!("\r\ntinypart{i}").into_bytes())
        .collect();
    let (ct, body) = multipart(&parts);
    v.push(message(
        "parts",
        format!("Subject: partsbomb\r\n{ct}"),
        &body,
    ));

    // HTML nested 200,000 deep.
    let n = 200_000;
    let html = format!("{}nestedword{}", "<div>".repeat(n), "</div>".repeat(n));
    v.push(message(
        "htmlnest",
        "Subject: nestbomb\r\nContent-Type: text/html; charset=utf-8\r\n".into(),
        html.as_bytes(),
    ));

    // 480,000 character references, good and bad, then a tag of 50,000 attributes: all
    // within the HTML read of one part.
    let mut html = String::from("<p>entityhead &nosuch; ");
    html.push_str(&"&amp;&lt;&#233;&#xFFFFFFFF;&#;&".repeat(80_000));
    html.push_str("</p><p ");
    for i in 0..50_000 {
        html.push_str(&format!("a{i}=\"attrvalueword\" "));
    }
    html.push_str(">entitytail</p>");
    assert!(html.len() < MAX_HTML_PART);
    v.push(message(
        "entities",
        "Subject: entitybomb\r\nContent-Type: text/html\r\n".into(),
        html.as_bytes(),
    ));

    // Megabytes of style sheet and script: none of it is text.
    let html = format!(
        "<html><head><title>titleword</title></head><body>\
         <style type=\"text/css\">{}</style><p>visibleword</p>\
         <script type=\"text/javascript\">{}</script><p>closingword</p></body></html>",
        ".styleword { color: red }\n".repeat(100_000),
        "var scriptword = 1;\n".repeat(50_000),
    );
    v.push(message(
        "styles",
        "Subject: stylebomb\r\nContent-Type: text/html\r\n".into(),
        html.as_bytes(),
    ));

    // Charsets that are unknown, misapplied or broken: read as far as they can be.
    let charset = |name: &str, body: &[u8]| {
        let mut p = format!("Content-Type: text/plain; charset=\"{name}\"\r\n\r\n").into_bytes();
        p.extend_from_slice(body);
        p
    };
    let parts = [
        charset("x-nonsense", b"nonsenseword caf\xe9"),
        charset("utf-7", b"utfsevenword +AGEAYgBj- +++---+"),
        charset("utf-8", b"\xff\xfe\xc3 brokenword \xe2\x82"),
        charset(
            "iso-2022-jp",
            b"jisword \x1b$B\x1b(Z%F\x1b$(\x1b(J\x1b\x1b$B%9",
        ),
        charset(&"z".repeat(10_000), b"longcharsetword"),
        charset("utf-16", b"odd"),
    ];
    let (ct, body) = multipart(&parts);
    v.push(message(
        "charsets",
        format!(
            "Subject: =?x-nonsense?B?aGVsbG8=?= charsetbomb =?utf-8?B?////?= \
             =?iso-2022-jp?B?GyRCGyha?=\r\n{ct}"
        ),
        &body,
    ));

    // A digest of 300,000 messages, all empty but the first: each costs the parser a
    // message, read up to MAX_STRUCTURE_LINES boundaries.
    let mut parts = vec![b"\r\nSubject: digestfirst\r\n\r\ndigestbodyword".to_vec()];
    parts.resize(300_000, Vec::new());
    let (ct, body) = multipart(&parts);
    let ct = ct.replace("multipart/mixed", "multipart/digest");
    v.push(message(
        "digest",
        format!("Subject: digestbomb\r\n{ct}"),
        &body,
    ));

    // Multiparts in multiparts, 5,000 deep (fewer than MAX_PARTS parts in all).
    let mut body = String::new();
    for i in 0..5_000 {
        body.push_str(&format!(
            "--b{i}\r\nContent-Type: multipart/mixed; boundary=\"b{}\"\r\n\r\n",
            i + 1
        ));
    }
    body.push_str("--b5000\r\nContent-Type: text/plain\r\n\r\nmultibottomword\r\n");
    v.push(message(
        "multinest",
        "Subject: deepmultipart\r\nContent-Type: multipart/mixed; boundary=\"b0\"\r\n".into(),
        body.as_bytes(),
    ));
    v
}

/// Forwarded messages in forwarded messages, 100,000 deep. The index's parser reads the
/// first MAX_STRUCTURE_LINES levels, extraction MAX_NESTING of them; `show` parses all and
/// drops them one level at a time (dropped the recursive way, they overflow the stack).
fn forwarded() -> Hostile {
    let mut body = String::new();
    for i in 0..100_000 {
        body.push_str(&format!(
            "Subject: forwardlevel{i}\r\nContent-Type: message/rfc822\r\n\r\n"
        ));
    }
    body.push_str("Subject: bottom\r\n\r\nforwardbottomword\r\n");
    message(
        "forwarded",
        "Subject: deepforward\r\nContent-Type: message/rfc822\r\n".into(),
        body.as_bytes(),
    )
}

/// `data` in base64, in lines of 76 characters.
fn base64(data: &[u8]) -> String {
    const TABLE: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for line in data.chunks(57) {
        for c in line.chunks(3) {
            let n = c
                .iter()
                .enumerate()
                .fold(0u32, |n, (i, &b)| n | (b as u32) << (16 - 8 * i));
            for k in 0..4 {
                out.push(match k <= c.len() {
                    true => TABLE[(n >> (18 - 6 * k) & 63) as usize] as char,
                    false => '=',
                });
            }
        }
        out.push_str("\r\n");
    }
    out
}

/// A forwarded message sent base64 encoded (RFC 2046 forbids it), 50,000 levels of them
/// inside: read as an attachment. Parsed, it would overflow the stack (mail-parser recurses
/// through the levels to copy them, the decoded bytes once per level).
fn encoded() -> Hostile {
    let inner = format!(
        "Subject: innersubject\r\n{}",
        "Content-Type:message/rfc822\n\n".repeat(50_000)
    );
    message(
        "encoded",
        "Subject: encodedforward\r\nContent-Type: message/rfc822\r\n\
         Content-Transfer-Encoding: base64\r\n"
            .into(),
        base64(inner.as_bytes()).as_bytes(),
    )
}

/// Writes `h` into the folder `dir` (`""` INBOX) of alice@example.org under `root`.
fn write(root: &Path, dir: &str, h: &Hostile) {
    let folder = root.join("example.org/alice/Maildir").join(dir);
    for sub in ["cur", "new", "tmp"] {
        fs::create_dir_all(folder.join(sub)).unwrap();
    }
    fs::write(folder.join("cur").join(format!("{}:2,S", h.key)), &h.data).unwrap();
}

/// What one run of `mailvault` did: its exit code, stdout, wall time and peak resident
/// memory in bytes.
struct Measured {
    code: i32,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    time: Duration,
    peak_rss: u64,
}

/// Runs `mailvault ARGS` with its peak resident memory counted by the kernel for that one
/// process (`ru_maxrss` from wait4(2)), killed (and the test failed) past `limit`.
#[allow(unsafe_code)]
fn measured(e: &Env, args: &[&str], limit: Duration) -> Measured {
    let out = tempfile::tempfile().unwrap();
    let err = tempfile::tempfile().unwrap();
    let start = Instant::now();
    let mut child = e
        .cmd(args)
        .stdout(out.try_clone().unwrap())
        .stderr(err.try_clone().unwrap())
        .spawn()
        .unwrap();
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // SAFETY: an all-zero rusage is a valid value of the plain C struct.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let mut killed = false;
    loop {
        // SAFETY: `pid` is our child, not yet reaped (`child` is never waited for: it is
        // only killed, which is sound before the reaping); both pointers are to live locals
        // of the right types.
        let r = unsafe { libc::wait4(pid, &mut status, libc::WNOHANG, &mut usage) };
        assert!(r >= 0, "wait4: {}", std::io::Error::last_os_error());
        if r == pid {
            break;
        }
        if !killed && start.elapsed() > limit {
            child.kill().unwrap();
            killed = true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let time = start.elapsed();
    // Reaped above; dropping a Child does not wait.
    drop(child);
    assert!(!killed, "mailvault {args:?} still running after {limit:?}");
    let read = |mut f: fs::File| {
        use std::io::{Read, Seek};
        f.rewind().unwrap();
        let mut v = Vec::new();
        f.read_to_end(&mut v).unwrap();
        v
    };
    Measured {
        code: if libc::WIFEXITED(status) {
            libc::WEXITSTATUS(status)
        } else {
            -libc::WTERMSIG(status)
        },
        stdout: read(out),
        stderr: read(err),
        time,
        // Linux counts it in KiB.
        peak_rss: usage.ru_maxrss as u64 * 1024,
    }
}

/// The keys of the messages a search (`--json`) finds.
fn found(e: &Env, query: &str) -> BTreeSet<String> {
    let v = e.json(0, &["search", "--limit", "1000", query]);
    v["hits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["key"].as_str().unwrap().to_string())
        .collect()
}

/// Runs `index --json` within [`INDEX_TIME`] and [`INDEX_RSS`] of peak memory; its report,
/// which must name no failure.
fn index_bounded(e: &Env) -> Value {
    let run = measured(e, &["index", "--json"], INDEX_TIME);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.code, 0, "index failed:\n{stderr}");
    let rep: Value = serde_json::from_slice(&run.stdout).unwrap();
    eprintln!(
        "index: {:.1} s, peak RSS {} MiB",
        run.time.as_secs_f64(),
        run.peak_rss >> 20
    );
    assert_eq!(rep["failures"].as_array().unwrap().len(), 0, "{rep}");
    assert!(
        run.peak_rss < INDEX_RSS,
        "index peaked at {} MiB (bound {} MiB)",
        run.peak_rss >> 20,
        INDEX_RSS >> 20
    );
    rep
}

#[test]
fn hostile_messages_are_indexed_in_bounded_time_and_memory() {
    let e = Env::new();
    let store = e.path("mail");
    let all = messages();
    for h in &all {
        write(&store, "", h);
    }
    let src = format!("maildir:{}", store.display());
    e.ok(&["init"]);
    e.ok(&["backup", &src]);

    let rep = index_bounded(&e);
    assert_eq!(rep["indexed"], all.len(), "every message indexed: {rep}");
    // Those cut at a cap are counted (the ordinary one is whole).
    let cut = rep["truncated"].as_u64().unwrap();
    assert!(cut >= 1 && cut < all.len() as u64, "{rep}");

    // The deepest ones on their own, in a folder of their own, by an incremental run.
    write(&store, ".Deep", &forwarded());
    write(&store, ".Deep", &encoded());
    e.ok(&["backup", &src]);
    let rep = index_bounded(&e);
    assert_eq!(rep["indexed"], 2, "{rep}");
    assert_eq!(rep["already_indexed"], all.len(), "{rep}");

    let one = |k: &str| BTreeSet::from([k.to_string()]);
    let none = BTreeSet::new();
    let p = |i: usize| format!("tinypart{i}");
    let level = |i: usize| format!("forwardlevel{i}");
    let cases: Vec<(String, BTreeSet<String>)> = vec![
        // Each message by its subject.
        ("subject:ordinary".into(), one("ordinary")),
        ("subject:bigtoken".into(), one("bigtoken")),
        ("subject:partsbomb".into(), one("parts")),
        ("subject:nestbomb".into(), one("htmlnest")),
        ("subject:entitybomb".into(), one("entities")),
        ("subject:stylebomb".into(), one("styles")),
        ("subject:charsetbomb".into(), one("charsets")),
        ("subject:deepforward".into(), one("forwarded")),
        ("subject:deepmultipart".into(), one("multinest")),
        ("marmalade".into(), one("ordinary")),
        // Around the megabyte token, which is no term; the longest indexed word length.
        ("beforetoken".into(), one("bigtoken")),
        ("aftertoken".into(), one("bigtoken")),
        ("qqqqqqqqqq*".into(), none.clone()),
        (long_word('k', '7', MAX_TOKEN), one("bigtoken")),
        (long_word('m', '7', MAX_TOKEN + 1), none.clone()),
        ("m777*".into(), none.clone()),
        // The parts read, up to the cap (the multipart itself is the first).
        (p(0), one("parts")),
        (p(MAX_PARTS - 2), one("parts")),
        (p(MAX_PARTS - 1), none.clone()),
        (p(99_999), none.clone()),
        // A phrase in the body: the message is read again and its parts checked.
        (format!("\"{} {}\"", p(0), p(1)), one("parts")),
        (format!("\"{} {}\"", p(1), p(0)), none.clone()),
        // HTML: the text, not the markup.
        ("nestedword".into(), one("htmlnest")),
        ("div".into(), none.clone()),
        ("entityhead".into(), one("entities")),
        ("entitytail".into(), one("entities")),
        ("attrvalueword".into(), none.clone()),
        ("nosuch".into(), one("entities")),
        ("visibleword".into(), one("styles")),
        ("closingword".into(), one("styles")),
        ("styleword".into(), none.clone()),
        ("scriptword".into(), none.clone()),
        ("titleword".into(), none.clone()),
        // Bogus charsets: what can be read is.
        ("nonsenseword".into(), one("charsets")),
        ("utfsevenword".into(), one("charsets")),
        ("brokenword".into(), one("charsets")),
        ("jisword".into(), one("charsets")),
        ("longcharsetword".into(), one("charsets")),
        // Forwarded messages: MAX_NESTING levels read, the deeper ones not.
        (level(0), one("forwarded")),
        (level(MAX_NESTING - 1), one("forwarded")),
        (level(MAX_NESTING), none.clone()),
        ("forwardbottomword".into(), none.clone()),
        ("multibottomword".into(), one("multinest")),
        // An encoded forwarded message: an attachment.
        ("subject:encodedforward".into(), one("encoded")),
        ("innersubject".into(), none.clone()),
        // A digest: its first message read.
        ("subject:digestbomb".into(), one("digest")),
        ("digestfirst".into(), one("digest")),
        ("digestbodyword".into(), one("digest")),
    ];
    for (q, want) in &cases {
        assert_eq!(&found(&e, q), want, "query {q:?}");
    }

    // `show` parses each message whole (the same parser): it ends, and fast.
    for subject in [
        "bigtoken",
        "partsbomb",
        "nestbomb",
        "entitybomb",
        "stylebomb",
        "charsetbomb",
        "deepforward",
        "deepmultipart",
        "digestbomb",
        "encodedforward",
    ] {
        let hits = e.json(0, &["search", &format!("subject:{subject}")]);
        let id = hits["hits"][0]["id"].as_str().unwrap();
        let shown = measured(&e, &["show", &id[..16]], INDEX_TIME);
        let out = String::from_utf8_lossy(&shown.stdout);
        assert_eq!(shown.code, 0, "show {subject}: {out}");
        assert!(out.contains(subject), "show {subject}: {out:.2000}");
        if subject == "stylebomb" {
            // The text a reader sees: never a style sheet or a script.
            assert!(out.contains("visibleword"), "{out:.2000}");
            assert!(!out.contains("styleword"), "{out:.2000}");
        }
        let max_rss = match subject {
            "deepforward" | "digestbomb" => SHOW_RSS,
            _ => INDEX_RSS,
        };
        assert!(
            shown.peak_rss < max_rss,
            "show {subject}: {} MiB",
            shown.peak_rss >> 20
        );
    }

    let check = e.json(0, &["check"]);
    assert_eq!(check["errors"].as_array().unwrap().len(), 0, "{check}");
    assert_eq!(check["search"]["not_indexed"], 0, "{}", check["search"]);
}
