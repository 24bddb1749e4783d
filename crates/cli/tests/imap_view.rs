//! `mailvault serve --imap` (issue 29, first increment): the real binary on 127.0.0.1 with
//! ports the system chose, over a backup of a small generated Maildir account (three
//! folders, one nested; flags and a keyword; CRLF, LF and mixed line endings; 8-bit bytes)
//! and a second account that must stay out of reach. Real clients judge it: mbsync pulls
//! the latest view into a Maildir, which must hold every message and flag of the source;
//! Python's imaplib (tests/imap_view/probe.py) checks the read-only refusals, sections and
//! partial fetches, exact bytes, logins, hostile mailbox names, and that UIDs and
//! UIDVALIDITY stay the same across sessions and a restart. Dovecot judges it too: it
//! pulls the view (`doveadm backup -R` from `imapc:`) and the restore tests' Dovecot judge
//! compares what it got with the backed-up store; its SEARCH and BODYSTRUCTURE answers
//! for the same messages must be the view's.
#![allow(clippy::unwrap_used)]

mod common;
mod judge;

use common::serve::{token_file, Server, TOKEN};
use common::Env;
use serde_json::Value;
use std::collections::BTreeMap;
use std::fs;
use std::io::{BufRead, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

const ACCOUNT: &str = "alice@example.org";

/// The first message of INBOX (UID 1: the oldest mtime), CRLF.
const FIRST: &[u8] =
    b"From: Bob <bob@example.org>\r\nTo: alice@example.org\r\nSubject: first one\r\n\
Date: Mon, 01 Jan 2024 10:00:00 +0000\r\nX-Long: a\r\n  folded\r\n\r\nhello over CRLF\r\n";

/// Dovecot's UIDs of INBOX's messages (in their order), its UIDVALIDITY, and the file
/// names they are listed under.
const INBOX_UIDS: [(u32, &str); 4] = [
    (5, "1704103200.M1P1.host"),
    (7, "1704189600.M2P1.host"),
    (9, "1704276000.M3P1.host"),
    (12, "1704362400.M6P1.host"),
];
const INBOX_UIDVALIDITY: u32 = 1_700_000_000;

/// A version-3 `dovecot-uidlist` of `uids`.
fn uidlist(uids: &[(u32, &str)]) -> String {
    let next = uids.last().map_or(1, |u| u.0 + 1);
    // Dovecot refuses a mailbox GUID that is not 32 hex digits (and numbers anew).
    let mut s = format!("3 V{INBOX_UIDVALIDITY} N{next} G0123456789abcdef0123456789abcdef\n");
    for (uid, name) in uids {
        s += &format!("{uid} :{name}\n");
    }
    s
}

/// A message of three parts, the last an attached message (Archive's second).
const MULTIPART: &[u8] = b"From: E <e@example.org>\r\nSubject: parts\r\nMIME-Version: 1.0\r\n\
Content-Type: multipart/mixed; boundary=\"XX\"\r\n\r\n--XX\r\n\
Content-Type: text/plain; charset=utf-8\r\n\r\npart one\r\n--XX\r\n\
Content-Type: application/octet-stream; name=\"b.bin\"\r\nContent-Transfer-Encoding: base64\r\n\r\n\
AAEC\r\n--XX\r\nContent-Type: message/rfc822\r\n\r\n\
Subject: inner\r\nFrom: f@example.org\r\n\r\ninner body\r\n--XX--\r\n";

/// The source: (folder dir, file name, bytes, mtime).
fn messages() -> Vec<(&'static str, &'static str, Vec<u8>, i64)> {
    let lf = b"From: Carol <c@example.org>\nSubject: lf only\n\nline one\nline two\n".to_vec();
    let mut eight =
        b"From: D <d@example.org>\r\nSubject: 8bit\r\nContent-Transfer-Encoding: 8bit\n\n".to_vec();
    eight.extend((0x80u8..=0xff).chain(b"\r\nmixed\nends\r\n".iter().copied()));
    let archived = b"Subject: archived\r\n\r\nkept\r\n".to_vec();
    let parts = MULTIPART.to_vec();
    let nested = b"Subject: in 2023\n\nnested body\n".to_vec();
    vec![
        (
            "",
            "1704103200.M1P1.host:2,Sa",
            FIRST.to_vec(),
            1_704_103_200,
        ),
        ("", "1704189600.M2P1.host:2,RS", lf, 1_704_189_600),
        ("", "1704276000.M3P1.host:2,F", eight, 1_704_276_000),
        (
            ".Archive",
            "1700000000.M4P1.host:2,ST",
            archived,
            1_700_000_000,
        ),
        (".Archive", "1700100000.M8P1.host:2,S", parts, 1_700_100_000),
        (
            ".Archive.2023",
            "1690000000.M5P1.host",
            nested,
            1_690_000_000,
        ),
    ]
}

/// Writes the source store: alice's messages (the one without flags in `new/`), her
/// `dovecot-keywords` (`a` = `Important`) and `subscriptions` (INBOX and Archive/2023),
/// and bob's account with a folder of his own.
fn write_source(root: &Path) {
    let md = root.join("example.org/alice/Maildir");
    for (dir, name, data, mtime) in messages() {
        let sub = if name.contains(":2,") { "cur" } else { "new" };
        common::put_msg(&md, dir, sub, name, &data, mtime);
    }
    fs::write(md.join("dovecot-keywords"), "0 Important\n").unwrap();
    fs::write(md.join("subscriptions"), "V\t2\n\nINBOX\nArchive\t2023\n").unwrap();
    fs::write(md.join("dovecot-uidlist"), uidlist(&INBOX_UIDS[..3])).unwrap();
    let bob = b"From: x@example.org\r\nSubject: bob's secret\r\n\r\nsecret\r\n";
    common::maildir_message(root, "bob@example.org", "", "1.M1.h:2,S", bob);
    common::maildir_message(root, "bob@example.org", ".BobOnly", "2.M1.h:2,", bob);
}

/// A repository with two snapshots of the store (the second with one more message in
/// INBOX), and the token file.
fn repository() -> Env {
    let e = Env::new();
    let mail = e.path("mail");
    write_source(&mail);
    let src = format!("maildir:{}", mail.display());
    e.ok(&["init"]);
    e.ok(&["backup", &src]);
    common::at_rest();
    common::maildir_message(
        &mail,
        ACCOUNT,
        "",
        "1704362400.M6P1.host:2,S",
        b"Subject: later\r\n\r\nadded before the second backup\r\n",
    );
    // As Dovecot numbers a new message: the next UID, the same UIDVALIDITY.
    let md = mail.join("example.org/alice/Maildir");
    fs::write(md.join("dovecot-uidlist"), uidlist(&INBOX_UIDS)).unwrap();
    e.ok(&["backup", &src]);
    token_file(&e, 0o600);
    e
}

fn start(e: &Env) -> Server {
    start_with(e, &[])
}

/// `mailvault serve --imap` on ports the system chose, with `extra` arguments.
fn start_with(e: &Env, extra: &[&str]) -> Server {
    let mut args = vec!["--imap", "127.0.0.1:0"];
    args.extend_from_slice(extra);
    common::serve::start(e, &args)
}

/// The token in a file only its owner reads, as clients are given it (never in argv).
fn password_file(e: &Env) -> PathBuf {
    let p = e.path("imap-pass");
    fs::write(&p, format!("{TOKEN}\n")).unwrap();
    fs::set_permissions(&p, fs::Permissions::from_mode(0o600)).unwrap();
    p
}

/// Line endings as mbsync writes a Maildir: CRLF as LF.
fn lf(data: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(data.len());
    for (i, &b) in data.iter().enumerate() {
        if !(b == b'\r' && data.get(i + 1) == Some(&b'\n')) {
            out.push(b);
        }
    }
    out
}

/// A message as mbsync stored it, less the `X-TUID:` header line it adds to every
/// message it copies.
fn without_tuid(data: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(data.len());
    let mut in_header = true;
    for line in data.split_inclusive(|&b| b == b'\n') {
        if in_header && line.starts_with(b"X-TUID: ") {
            continue;
        }
        in_header &= line != b"\n";
        out.extend_from_slice(line);
    }
    out
}

/// The system flag letters of a Maildir file name, sorted.
fn flag_letters(name: &str) -> String {
    let info = name.split_once(":2,").map_or("", |(_, i)| i);
    let mut l: Vec<char> = info.chars().filter(|c| c.is_ascii_uppercase()).collect();
    l.sort();
    l.into_iter().collect()
}

/// Folder -> sorted (length, hash, flag letters) of the messages of a Maildir whose
/// folders are directories named by `name_of` (None: not a folder).
fn maildir_messages(
    dirs: &[(String, PathBuf)],
    norm: fn(&[u8]) -> Vec<u8>,
) -> BTreeMap<String, Vec<(usize, String, String)>> {
    let mut out = BTreeMap::new();
    for (name, dir) in dirs {
        let mut v = Vec::new();
        for sub in ["cur", "new"] {
            for f in fs::read_dir(dir.join(sub)).into_iter().flatten() {
                let f = f.unwrap();
                let data = norm(&fs::read(f.path()).unwrap());
                let fname = f.file_name().to_string_lossy().into_owned();
                v.push((
                    data.len(),
                    blake3::hash(&data).to_hex().to_string(),
                    flag_letters(&fname),
                ));
            }
        }
        v.sort();
        out.insert(name.clone(), v);
    }
    out
}

#[test]
fn mbsync_pulls_the_latest_view_with_every_message_and_flag() {
    let e = repository();
    let s = start(&e);
    let pass = password_file(&e);
    let out = e.path("pulled");
    fs::create_dir_all(&out).unwrap();
    let rc = e.path("mbsyncrc");
    fs::write(
        &rc,
        format!(
            "IMAPAccount view\nHost 127.0.0.1\nPort {}\nUser {ACCOUNT}*admin\n\
             PassCmd \"cat {}\"\nSSLType None\nAuthMechs LOGIN\n\n\
             IMAPStore far\nAccount view\n\n\
             MaildirStore near\nPath {o}/\nInbox {o}/INBOX\nSubFolders Verbatim\n\n\
             Channel pull\nFar :far:\nNear :near:\nPatterns * !Snapshots*\n\
             Create Near\nSync Pull\nSyncState *\n",
            s.imap_port,
            pass.display(),
            o = out.display()
        ),
    )
    .unwrap();
    let run = Command::new("mbsync")
        .arg("-c")
        .arg(&rc)
        .arg("-a")
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "mbsync failed:\n{}\n{}",
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&run.stderr)
    );
    let src = e.path("mail/example.org/alice/Maildir");
    let want_dirs = [
        ("INBOX".to_string(), src.clone()),
        ("Archive".to_string(), src.join(".Archive")),
        ("Archive/2023".to_string(), src.join(".Archive.2023")),
    ];
    let got_dirs: Vec<(String, PathBuf)> = want_dirs
        .iter()
        .map(|(n, _)| (n.clone(), out.join(n)))
        .collect();
    let want = maildir_messages(&want_dirs, lf);
    let got = maildir_messages(&got_dirs, without_tuid);
    assert_eq!(got, want, "the pulled Maildir differs from the source");
    assert_eq!(want.values().map(Vec::len).sum::<usize>(), 7);
    // The folder set: exactly the three folders (no other account's, no snapshot's), and
    // the mailbox of deleted messages (empty: nothing was deleted).
    let mut pulled = Vec::new();
    for d in common::named(&out, "") {
        if d.join("cur").is_dir() {
            pulled.push(d.strip_prefix(&out).unwrap().display().to_string());
        }
    }
    pulled.sort();
    assert_eq!(pulled, ["Archive", "Archive/2023", "Deleted", "INBOX"]);
}

/// Runs probe.py against the server; its JSON.
fn probe(s: &Server, e: &Env) -> Value {
    let pass = password_file(e);
    script(
        "probe.py",
        &[&s.imap_port.to_string(), path_str(&pass), ACCOUNT],
    )
}

/// Runs `name` (in `tests/imap_view/`) with `args`, which must succeed; its JSON.
fn script(name: &str, args: &[&str]) -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/imap_view")
        .join(name);
    let mut all = vec![path_str(&path)];
    all.extend(args);
    serde_json::from_slice(&common::python(&all)).unwrap()
}

fn path_str(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn hexs(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[test]
fn imaplib_sees_a_read_only_view_of_one_account_that_stays_the_same() {
    let e = repository();
    let s = start(&e);
    let v = probe(&s, &e);
    let text = |k: &str| v[k].as_str().unwrap_or_default().to_string();
    assert!(
        text("wrong_login").contains("[AUTHENTICATIONFAILED]"),
        "{v}"
    );
    let caps: Vec<&str> = (v["capability"].as_array().unwrap().iter())
        .map(|c| c.as_str().unwrap())
        .collect();
    for c in [
        "IMAP4REV1",
        "AUTH=PLAIN",
        "IDLE",
        "NAMESPACE",
        "UNSELECT",
        "SPECIAL-USE",
    ] {
        assert!(caps.contains(&c), "{caps:?}");
    }
    assert_eq!(v["select_readonly"], true, "SELECT answers [READ-ONLY]");
    assert_eq!(text("examine"), "OK");
    for (cmd, answer) in v["refusals"].as_object().unwrap() {
        let a = answer.as_str().unwrap();
        assert!(a.starts_with("NO") && a.contains("read-only"), "{cmd}: {a}");
    }
    assert_eq!(text("partial"), hexs(&FIRST[..10]));
    assert_eq!(
        text("header_fields"),
        hexs(b"From: Bob <bob@example.org>\r\nSubject: first one\r\n\r\n")
    );
    let head_end = FIRST.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    assert_eq!(text("header"), hexs(&FIRST[..head_end]));
    assert_eq!(
        text("search_all"),
        "5 7 9 12",
        "UID SEARCH answers Dovecot's UIDs"
    );
    assert_eq!(text("search_uids"), "9 12");
    assert_eq!(text("search_seqs"), "1 2 3 4");
    assert_eq!(
        text("search_unseen"),
        "3",
        "only the \\Flagged one is unseen"
    );
    let env = text("envelope");
    assert!(
        env.starts_with("OK") && env.contains(r#"ENVELOPE ("Mon, 01 Jan 2024 10:00:00 +0000" "first one" (("Bob" NIL "bob" "example.org"))"#),
        "{env}"
    );
    assert!(
        text("fetch_all").contains("ENVELOPE ("),
        "{}",
        text("fetch_all")
    );
    assert_eq!(text("search_text"), "1");
    assert_eq!(text("search_from"), "2");
    assert_eq!(text("search_subject_or"), "1 3");
    assert_eq!(text("search_body_not"), "5 9 12");
    assert_eq!(text("search_sent"), "1", "the one Date header, 1 January");
    // The parts of a multipart message with an attached one, and their sections.
    // As Dovecot 2.3 answers, but for "TEXT" and "MESSAGE" "RFC822" in upper case.
    let inner = r#"(NIL "inner" ((NIL NIL "f" "example.org")) ((NIL NIL "f" "example.org")) ((NIL NIL "f" "example.org")) NIL NIL NIL NIL NIL) ("TEXT" "plain" ("charset" "us-ascii") NIL NIL "7bit" 10 0 NIL NIL NIL NIL) 3"#;
    let want = format!(
        r#"2 (BODYSTRUCTURE (("TEXT" "plain" ("charset" "utf-8") NIL NIL "7bit" 8 0 NIL NIL NIL NIL)("application" "octet-stream" ("name" "b.bin") NIL NIL "base64" 4 NIL NIL NIL NIL)("MESSAGE" "RFC822" NIL NIL NIL "7bit" 49 {inner} NIL NIL NIL NIL) "mixed" ("boundary" "XX") NIL NIL NIL))"#
    );
    assert_eq!(text("bodystructure"), want);
    let part = |s: &str| v["parts"][s].as_str().unwrap().to_string();
    let inner_msg: &[u8] = b"Subject: inner\r\nFrom: f@example.org\r\n\r\ninner body";
    assert_eq!(part("1"), hexs(b"part one"));
    assert_eq!(
        part("2.MIME"),
        hexs(b"Content-Type: application/octet-stream; name=\"b.bin\"\r\nContent-Transfer-Encoding: base64\r\n\r\n")
    );
    assert_eq!(part("3"), hexs(inner_msg));
    assert_eq!(part("3.HEADER"), hexs(&inner_msg[..inner_msg.len() - 10]));
    assert_eq!(part("3.1"), hexs(b"inner body"));
    assert_eq!(part("3.TEXT"), hexs(b"inner body"));
    assert_eq!(
        (part("4"), part("1.HEADER")),
        (String::new(), String::new())
    );
    // Every message of the latest INBOX byte for byte, with its flags and date.
    let inbox = &v["folders"]["INBOX"]["messages"];
    let src = messages();
    for (i, (_, name, data, mtime)) in src.iter().filter(|m| m.0.is_empty()).enumerate() {
        let m = &inbox[i];
        assert_eq!(m[0], INBOX_UIDS[i].0, "UIDs from the dovecot-uidlist");
        assert_eq!(m[2], data.len() as u64, "RFC822.SIZE of {name}");
        assert_eq!(m[3], data.len() as u64, "BODY[] length of {name}");
        let got = hash_of_hex(m[4].as_str().unwrap());
        assert_eq!(
            got,
            blake3::hash(data).to_hex().to_string(),
            "BODY[] bytes of {name}"
        );
        let date = jiff::Timestamp::from_second(*mtime)
            .unwrap()
            .strftime("%d-%b-%Y %H:%M:%S +0000");
        assert_eq!(m[5], date.to_string(), "INTERNALDATE of {name}");
    }
    let flags = |i: usize| {
        inbox[i][1]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f.as_str().unwrap().to_string())
            .collect::<Vec<_>>()
    };
    assert_eq!(flags(0), ["Important", "\\Seen"]);
    assert_eq!(flags(1), ["\\Answered", "\\Seen"]);
    assert_eq!(flags(2), ["\\Flagged"]);
    let archive = &v["folders"]["Archive"]["messages"][0][1];
    assert_eq!(archive, &serde_json::json!(["\\Deleted", "\\Seen"]));
    assert!(text("status").contains("MESSAGES 1"), "{}", text("status"));
    // Two snapshots, each with its folders; the older INBOX without the later message.
    let names: Vec<String> = (v["names"].as_array().unwrap().iter())
        .map(|n| n[0].as_str().unwrap().to_string())
        .collect();
    let snap_inboxes: Vec<&String> = names
        .iter()
        .filter(|n| n.starts_with("Snapshots/") && n.ends_with("/INBOX"))
        .collect();
    assert_eq!(snap_inboxes.len(), 2, "{names:?}");
    let mut counts: Vec<usize> = snap_inboxes
        .iter()
        .map(|n| {
            v["folders"][n.as_str()]["messages"]
                .as_array()
                .unwrap()
                .len()
        })
        .collect();
    counts.sort();
    assert_eq!(counts, [3, 4], "{names:?}");
    // Dovecot's numbering in every snapshot: the later message has a higher UID under the
    // same UIDVALIDITY; a folder without a uidlist is numbered 1..N.
    let uids = |f: &str| -> Vec<u64> {
        (v["folders"][f]["messages"].as_array().unwrap().iter())
            .map(|m| m[0].as_u64().unwrap())
            .collect()
    };
    let mut seen: Vec<Vec<u64>> = snap_inboxes.iter().map(|n| uids(n)).collect();
    seen.sort();
    assert_eq!(seen, [vec![5, 7, 9], vec![5, 7, 9, 12]]);
    for f in snap_inboxes.iter().map(|n| n.as_str()).chain(["INBOX"]) {
        let uv = &v["folders"][f]["uidvalidity"];
        assert_eq!(uv, &INBOX_UIDVALIDITY.to_string(), "{f}");
    }
    assert_eq!(uids("Archive"), [1, 2]);
    assert_ne!(
        v["folders"]["Archive"]["uidvalidity"],
        v["folders"]["Archive/2023"]["uidvalidity"]
    );
    // Only alice's folders; hostile names reach nothing.
    assert!(names.iter().all(|n| !n.contains("Bob")), "{names:?}");
    assert_eq!(v["list_bob"], 0);
    for (name, typ) in v["hostile"].as_object().unwrap() {
        let t = typ.as_str().unwrap();
        assert!(
            t.starts_with("NO") || t.starts_with("BAD"),
            "SELECT {name:?}: {t}"
        );
    }
    assert!(v["list"]
        .as_array()
        .unwrap()
        .iter()
        .any(|l| l.as_str().unwrap().contains("\\Archive")));
    for k in ["NOOP", "CHECK", "CLOSE", "authenticate"] {
        assert_eq!(text(k), "OK", "{k}");
    }
    assert!(
        text("raw_login").starts_with("a OK"),
        "{}",
        text("raw_login")
    );
    assert!(
        text("idle_continue").starts_with('+'),
        "{}",
        text("idle_continue")
    );
    assert!(
        text("idle_done").starts_with("b OK"),
        "{}",
        text("idle_done")
    );
    assert!(
        v["enable"][1].as_str().unwrap().starts_with("c OK"),
        "{}",
        v["enable"]
    );
    assert!(text("unknown").starts_with("d BAD"), "{}", text("unknown"));
    assert!(
        v["logout"][0].as_str().unwrap().starts_with("* BYE"),
        "{}",
        v["logout"]
    );

    // Hostile input is answered and the session goes on.
    let last = |k: &str| {
        let l = v[k].as_array().unwrap();
        l[l.len() - 1].as_str().unwrap().to_string()
    };
    assert_eq!(last("garbage"), "z1 OK done", "{}", v["garbage"]);
    assert!(
        last("nonsync").starts_with("z5 OK") && v["nonsync"].as_array().unwrap().len() == 1,
        "a LITERAL- literal is taken without a continuation: {}",
        v["nonsync"]
    );
    assert!(
        last("nonsync_long").starts_with("z6 BAD"),
        "{}",
        v["nonsync_long"]
    );
    assert_eq!(
        last("nonsync_after"),
        "z7 OK done",
        "{}",
        v["nonsync_after"]
    );
    assert!(
        last("long_literal").starts_with("z2 BAD literal too long"),
        "{}",
        v["long_literal"]
    );
    assert!(
        last("auth_bad_base64").starts_with("z3 BAD"),
        "{}",
        v["auth_bad_base64"]
    );
    assert_eq!(last("after"), "z4 OK done");

    // The same UIDs and UIDVALIDITY in another session, and after a restart.
    let again = probe(&s, &e);
    assert_eq!(again["folders"], v["folders"]);
    drop(s);
    let s = start(&e);
    let restarted = probe(&s, &e);
    assert_eq!(restarted["folders"], v["folders"]);
    for f in v["folders"].as_object().unwrap().values() {
        assert!(f["uidvalidity"].as_str().unwrap().parse::<u32>().unwrap() > 0);
    }
}

/// The BLAKE3 hash (hex) of the bytes hex string `h` stands for.
fn hash_of_hex(h: &str) -> String {
    let bytes: Vec<u8> = (0..h.len() / 2)
        .map(|i| u8::from_str_radix(&h[2 * i..2 * i + 2], 16).unwrap())
        .collect();
    blake3::hash(&bytes).to_hex().to_string()
}

#[test]
fn imap_on_a_public_address_without_tls_is_refused() {
    let e = Env::new();
    let p = e.path("token");
    fs::write(&p, format!("{TOKEN}\n")).unwrap();
    fs::set_permissions(&p, fs::Permissions::from_mode(0o600)).unwrap();
    let token = p.display().to_string();
    let out = e.expect(
        2,
        &[
            "serve",
            "--imap",
            "0.0.0.0:1143",
            "--admin-token-file",
            &token,
        ],
    );
    assert!(out.contains("not a loopback address"), "{out}");
}

/// The store `mail` backed up into a new repository in `e`, served, and a connection
/// logged in as the admin on `ACCOUNT`.
fn backed_up_and_logged_in(e: &Env, mail: &Path) -> (Server, Line) {
    e.ok(&["init"]);
    e.ok(&["backup", &format!("maildir:{}", mail.display())]);
    token_file(e, 0o600);
    let s = start(e);
    let mut c = Line::open(s.imap_port);
    c.login();
    (s, c)
}

/// A plain IMAP connection: commands as lines, answers up to the tagged one.
struct Line {
    r: std::io::BufReader<std::net::TcpStream>,
    w: std::net::TcpStream,
}

impl Line {
    fn open(port: u16) -> Line {
        let w = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        w.set_read_timeout(Some(std::time::Duration::from_secs(30)))
            .unwrap();
        let mut r = std::io::BufReader::new(w.try_clone().unwrap());
        let mut greeting = String::new();
        r.read_line(&mut greeting).unwrap();
        assert!(greeting.starts_with("* OK"), "{greeting}");
        Line { r, w }
    }
    /// Logs in as the admin on `ACCOUNT`, which must work.
    fn login(&mut self) {
        let login = self.cmd("login", &format!("LOGIN \"{ACCOUNT}*admin\" \"{TOKEN}\""));
        assert!(login.last().unwrap().starts_with("login OK"), "{login:?}");
    }
    /// Sends `tag command`; the lines answered, the tagged one last.
    fn cmd(&mut self, tag: &str, command: &str) -> Vec<String> {
        use std::io::Write;
        write!(self.w, "{tag} ").unwrap();
        self.cmd_rest(tag, command)
    }
    /// Sends the rest of the command tagged `tag` (its tag already sent); the lines
    /// answered, the tagged one last.
    fn cmd_rest(&mut self, tag: &str, rest: &str) -> Vec<String> {
        use std::io::Write;
        write!(self.w, "{rest}\r\n").unwrap();
        let mut lines = Vec::new();
        loop {
            let mut l = String::new();
            assert!(
                self.r.read_line(&mut l).unwrap() > 0,
                "closed after {lines:?}"
            );
            let done = l.starts_with(&format!("{tag} "));
            lines.push(l.trim_end().to_string());
            if done {
                return lines;
            }
        }
    }
}

/// Issue 29: one `LIST "" "*" RETURN (STATUS ...)` opens at most 256 mailboxes (every
/// folder of every snapshot would be read for one command): the latest view's folders
/// and `Deleted` get their STATUS first, then the snapshots' in the listing's order; the
/// others are listed and answer a STATUS of their own.
#[test]
fn a_list_status_opens_a_bounded_number_of_mailboxes() {
    let e = Env::new();
    let mail = e.path("mail");
    let inbox = b"Subject: in\r\n\r\nx\r\n";
    common::maildir_message(&mail, ACCOUNT, "", "1.M1P1.host:2,S", inbox);
    for i in 0..140 {
        let body = format!("Subject: {i}\r\n\r\nx\r\n");
        let name = format!("{}.M1P1.host:2,", 2 + i);
        common::maildir_message(&mail, ACCOUNT, &format!(".f{i:03}"), &name, body.as_bytes());
    }
    let (_s, mut c) = backed_up_and_logged_in(&e, &mail);
    let all = c.cmd("a", "LIST \"\" \"*\" RETURN (STATUS (MESSAGES))");
    assert!(all.last().unwrap().starts_with("a OK"), "{:?}", all.last());
    let lists = all.iter().filter(|l| l.starts_with("* LIST ")).count();
    let status: Vec<&String> = all.iter().filter(|l| l.starts_with("* STATUS ")).collect();
    assert!(lists > 2 * 141, "{lists}");
    assert_eq!(status.len(), 256);
    // INBOX, the 140 folders and Deleted first, whatever the listing's order.
    let latest = (status.iter())
        .filter(|l| !l.contains("Snapshots/"))
        .count();
    assert_eq!(latest, 142, "{status:?}");
    // The last listed folder answers a STATUS of its own.
    let last = (all.iter().rev())
        .find(|l| l.starts_with("* LIST ") && l.ends_with("f139\""))
        .unwrap();
    let name = &last[last.find("\"Snapshots/").unwrap()..];
    let one = c.cmd("b", &format!("STATUS {name} (MESSAGES)"));
    assert!(one[0].ends_with("(MESSAGES 1)"), "{one:?}");
    assert!(!status.iter().any(|l| l.contains(name)), "{name}");
}

#[test]
fn an_idle_session_lets_a_prune_run_and_sees_a_later_backup() {
    let e = repository();
    let s = start_with(&e, &["--idle-close", "2s", "--recheck", "0s"]);
    let mut c = Line::open(s.imap_port);
    c.login();
    let snapshots = |c: &mut Line, tag: &str| {
        let l = c.cmd(tag, "LIST \"\" \"Snapshots/%\"");
        assert!(l.last().unwrap().starts_with(&format!("{tag} OK")), "{l:?}");
        l.len() - 1
    };
    assert_eq!(snapshots(&mut c, "b"), 2);
    let sel = c.cmd("c", "EXAMINE INBOX");
    assert!(sel.iter().any(|l| l == "* 4 EXISTS"), "{sel:?}");
    // The session idles (logged in, a mailbox selected): the repository is closed, its
    // read lock given back, and a prune runs.
    std::thread::sleep(std::time::Duration::from_secs(4));
    e.ok(&["prune", "--retry-lock", "3s"]);
    // A later backup shows in the same session.
    common::at_rest();
    common::maildir_message(
        &e.path("mail"),
        ACCOUNT,
        "",
        "1704448800.M7P1.host:2,",
        b"Subject: third\r\n\r\nthird backup\r\n",
    );
    e.ok(&["backup", &format!("maildir:{}", e.path("mail").display())]);
    assert_eq!(snapshots(&mut c, "d"), 3);
    let st = c.cmd("e", "STATUS INBOX (MESSAGES)");
    assert!(st[0].contains("MESSAGES 5"), "{st:?}");
    let fetch = c.cmd("f", "FETCH 1:* (FLAGS)");
    assert_eq!(
        fetch.len(),
        5,
        "the selected mailbox keeps what it was opened with"
    );
}

/// Issue 29: the `Deleted` mailbox holds what older snapshots held that the latest no
/// longer holds: a message alice deleted is there with its flags and text, one she moved
/// to another folder is not (matched by content, as `undelete` does), and the folders of
/// the latest view no longer have the deleted one. LSUB gives the latest folders her
/// Dovecot `subscriptions` names, and every mailbox of the backups.
#[test]
fn the_deleted_mailbox_holds_what_the_latest_snapshot_lost() {
    let e = repository();
    let md = e.path("mail").join("example.org/alice/Maildir");
    fs::remove_file(md.join("cur/1704189600.M2P1.host:2,RS")).unwrap();
    fs::rename(
        md.join(".Archive/cur/1700000000.M4P1.host:2,ST"),
        md.join("cur/1700000000.M4P1.host:2,ST"),
    )
    .unwrap();
    fs::write(md.join("subscriptions"), "V\t2\n\nArchive\n").unwrap();
    common::at_rest();
    e.ok(&["backup", &format!("maildir:{}", e.path("mail").display())]);
    let s = start(&e);
    let mut c = Line::open(s.imap_port);
    c.login();
    let lsub = c.cmd("l", "LSUB \"\" \"*\"");
    let listed = |name: &str| lsub.iter().any(|l| l.ends_with(&format!("\"/\" {name}")));
    for name in ["INBOX", "Archive", "Deleted", "Snapshots"] {
        assert!(listed(name), "{name}: {lsub:?}");
    }
    assert!(!listed("Archive/2023"), "not subscribed: {lsub:?}");
    assert!(
        lsub.iter().any(|l| l.ends_with("/Archive/2023\"")),
        "a snapshot's: {lsub:?}"
    );
    let list = c.cmd("b", "LIST \"\" \"%\"");
    assert!(
        list.iter().any(|l| l.ends_with("\"/\" Deleted")),
        "{list:?}"
    );
    let sel = c.cmd("c", "EXAMINE Deleted");
    assert!(sel.iter().any(|l| l == "* 1 EXISTS"), "{sel:?}");
    assert!(sel.last().unwrap().contains("READ-ONLY"), "{sel:?}");
    let fetch = c.cmd("d", "FETCH 1 (FLAGS BODY.PEEK[])").join("\n");
    assert!(
        fetch.contains("\\Answered") && fetch.contains("\\Seen"),
        "{fetch}"
    );
    assert!(
        fetch.contains("lf only") && fetch.contains("line two"),
        "{fetch}"
    );
    assert!(
        !fetch.contains("archived"),
        "a moved message is not deleted: {fetch}"
    );
    let sel = c.cmd("e", "EXAMINE INBOX");
    assert!(sel.last().unwrap().starts_with("e OK"), "{sel:?}");
    let inbox = c.cmd("f", "SEARCH SUBJECT \"lf only\"");
    assert_eq!(inbox[0], "* SEARCH", "no longer in INBOX: {inbox:?}");
    let moved = c.cmd("g", "SEARCH SUBJECT \"archived\"");
    assert!(
        moved[0].starts_with("* SEARCH ") && moved.len() == 2,
        "moved into INBOX: {moved:?}"
    );
}

/// Issue 29: STARTTLS on the plain listener. With a certificate, `--imap` may listen on
/// an address that is not loopback; it then announces STARTTLS and LOGINDISABLED, refuses
/// logins before TLS, and after Python's imaplib upgrades (trusting the test certificate
/// alone) announces AUTH=PLAIN without either, and takes the login. Commands a client
/// pipelines after STARTTLS in plain text are dropped, not run over TLS.
#[test]
fn starttls_upgrades_the_plain_listener_and_drops_what_was_pipelined() {
    let e = repository();
    let (cert, key) = common::serve::certificate(&e);
    let (cert_s, key_s) = (cert.to_str().unwrap(), key.to_str().unwrap());
    let s = common::serve::start(
        &e,
        &[
            "--imap",
            "0.0.0.0:0",
            "--tls-cert",
            cert_s,
            "--tls-key",
            key_s,
        ],
    );
    let pass = password_file(&e);
    let port = s.imap_port.to_string();
    let v = script(
        "starttls.py",
        &[&port, path_str(&cert), path_str(&pass), ACCOUNT],
    );
    let strs = |k: &str| -> Vec<String> {
        (v[k].as_array().unwrap().iter())
            .map(|c| c.as_str().unwrap().to_string())
            .collect()
    };
    let greeting = v["greeting"].as_str().unwrap();
    assert!(
        greeting.contains("STARTTLS") && greeting.contains("LOGINDISABLED"),
        "{greeting}"
    );
    assert!(!greeting.contains("AUTH=PLAIN"), "{greeting}");
    for k in ["login_before_tls", "authenticate_before_tls"] {
        let last = strs(k).pop().unwrap();
        assert!(last.contains("NO [PRIVACYREQUIRED]"), "{k}: {last}");
    }
    let before = strs("before");
    assert!(
        before.contains(&"STARTTLS".into()) && before.contains(&"LOGINDISABLED".into()),
        "{before:?}"
    );
    let after = strs("after");
    assert!(after.contains(&"AUTH=PLAIN".into()), "{after:?}");
    assert!(
        !after.contains(&"STARTTLS".into()) && !after.contains(&"LOGINDISABLED".into()),
        "{after:?}"
    );
    assert!(
        v["starttls_again"]
            .as_str()
            .unwrap()
            .contains("over TLS already"),
        "{v}"
    );
    assert_eq!(v["login"], "OK");
    assert!(
        strs("list").iter().any(|l| l.ends_with("INBOX")),
        "{}",
        v["list"]
    );
    let starttls = strs("starttls");
    assert!(
        starttls.len() == 1 && starttls[0].starts_with("a OK"),
        "{starttls:?}"
    );
    // Neither `b CAPABILITY` nor `c LOGOUT` ran: the first answer over TLS is NOOP's.
    assert_eq!(
        strs("after_injection").len(),
        1,
        "pipelined commands ran after TLS: {}",
        v["after_injection"]
    );
    assert!(strs("after_injection")[0].starts_with("d OK"), "{v}");
}

/// Issue 29: ESEARCH (RFC 4731). `SEARCH RETURN (...)` and `UID SEARCH RETURN (...)` are
/// answered with one `* ESEARCH` line carrying the command's tag; MIN, MAX and ALL are
/// left out when nothing matched; `RETURN ()` is ALL; a literal in the criteria works;
/// SAVE (SEARCHRES, not offered) is refused.
#[test]
fn search_return_is_answered_with_esearch() {
    use std::io::Write;
    let e = repository();
    let s = start(&e);
    let mut c = Line::open(s.imap_port);
    let caps = c.cmd("a", "CAPABILITY");
    assert!(caps[0].contains(" ESEARCH"), "{caps:?}");
    c.login();
    c.cmd("c", "EXAMINE INBOX");
    assert_eq!(
        c.cmd("s1", "UID SEARCH RETURN (MIN MAX COUNT ALL) ALL"),
        [
            "* ESEARCH (TAG \"s1\") UID MIN 5 MAX 12 COUNT 4 ALL 5,7,9,12",
            "s1 OK SEARCH done"
        ]
    );
    assert_eq!(
        c.cmd("s2", "search return () UNSEEN"),
        ["* ESEARCH (TAG \"s2\") ALL 3", "s2 OK SEARCH done"]
    );
    assert_eq!(
        c.cmd(
            "s3",
            "SEARCH RETURN (MIN MAX COUNT) SUBJECT nothing-has-this"
        ),
        ["* ESEARCH (TAG \"s3\") COUNT 0", "s3 OK SEARCH done"]
    );
    assert_eq!(
        c.cmd("s4", "SEARCH RETURN (COUNT MAX) 1:3 SEEN"),
        ["* ESEARCH (TAG \"s4\") MAX 2 COUNT 2", "s4 OK SEARCH done"]
    );
    // A literal in the criteria: the command is read whole, then split.
    write!(c.w, "s5 UID SEARCH RETURN (ALL) SUBJECT {{9}}\r\n").unwrap();
    let mut cont = String::new();
    c.r.read_line(&mut cont).unwrap();
    assert!(cont.starts_with('+'), "{cont}");
    assert_eq!(
        c.cmd_rest("s5", "first one"),
        ["* ESEARCH (TAG \"s5\") UID ALL 5", "s5 OK SEARCH done"]
    );
    let save = c.cmd("s6", "SEARCH RETURN (SAVE) ALL");
    assert!(save.len() == 1 && save[0].starts_with("s6 BAD"), "{save:?}");
    // A plain SEARCH is answered as before.
    assert_eq!(
        c.cmd("s7", "SEARCH SEEN"),
        ["* SEARCH 1 2 4", "s7 OK SEARCH done"]
    );
}

/// Messages whose words show only once decoded (INBOX of the mail root `search-mail`, in
/// this order): an encoded-word subject and From with a base64 body; a quoted-printable
/// body in ISO-8859-1 with a soft line break; a plain one.
const DECODED: [&[u8]; 3] = [
    b"From: =?utf-8?q?J=C3=B6rg?= <joerg@example.org>\r\nTo: alice@example.org\r\n\
Subject: =?utf-8?b?SGlkZGVuIHRyZWFzdXJlIG1hcA==?= =?utf-8?q?_Gr=C3=BC=C3=9Fe?=\r\n\
X-Note: =?iso-8859-1?q?caf=E9?=\r\nDate: Mon, 01 Jan 2024 10:00:00 +0000\r\n\
MIME-Version: 1.0\r\nContent-Type: text/plain; charset=utf-8\r\n\
Content-Transfer-Encoding: base64\r\n\r\ndGhlIHNlY3JldCB3b3JkIGlzIHBpbmVhcHBsZQ==\r\n",
    b"From: Bob <bob@example.org>\r\nTo: alice@example.org\r\nSubject: fruit\r\n\
MIME-Version: 1.0\r\nContent-Type: text/plain; charset=iso-8859-1\r\n\
Content-Transfer-Encoding: quoted-printable\r\n\r\nstraw=\r\nberry and =DCberraschung\r\n",
    b"From: Carol <carol@example.org>\r\nTo: alice@example.org\r\nSubject: plain\r\n\r\n\
nothing encoded here\r\n",
];

/// Backs `messages` up (one INBOX), serves them, and runs script `name` (in
/// `tests/imap_view/`) with the view's port, the token file, the account, `dovecot`'s port
/// and password and the messages as files (for it to give Dovecot too); its JSON.
fn beside_dovecot(
    dovecot: &mailvault_imap::testing::DovecotServer,
    messages: &[&[u8]],
    name: &str,
) -> Value {
    let e = Env::new();
    let mail = e.path("mail");
    let mut files = Vec::new();
    for (i, m) in messages.iter().enumerate() {
        let name = format!("{}.M{i}P1.host:2,S", 1_704_103_200 + i);
        let md = mail.join("example.org/alice/Maildir");
        common::put_msg(&md, "", "cur", &name, m, 1_704_103_200 + i as i64);
        let f = e.path(&format!("msg{i}.eml"));
        fs::write(&f, m).unwrap();
        files.push(f);
    }
    e.ok(&["init"]);
    e.ok(&["backup", &format!("maildir:{}", mail.display())]);
    token_file(&e, 0o600);
    let s = start(&e);
    let pass = password_file(&e);
    let (port, dport) = (s.imap_port.to_string(), dovecot.port().to_string());
    let mut args = vec![
        port.as_str(),
        path_str(&pass),
        ACCOUNT,
        &dport,
        dovecot.password(),
    ];
    args.extend(files.iter().map(|f| path_str(f)));
    script(name, &args)
}

/// Issue 29: SEARCH matches decoded text. Subjects, From and other fields match with
/// their encoded words decoded, BODY and TEXT the text once quoted-printable and base64
/// are undone and the charset converted, in any case (Unicode), never the encoded form;
/// Dovecot, given the same messages, answers every query the same (Python's imaplib asks
/// both).
#[test]
fn search_matches_decoded_headers_and_bodies_as_dovecot_does() {
    let Some(dovecot) = mailvault_imap::testing::DovecotServer::start_or_skip().unwrap() else {
        return;
    };
    let v = beside_dovecot(&dovecot, &DECODED, "search_decoded.py");
    let ours = |q: &str| v[q][0].as_str().unwrap().to_string();
    // Found only once decoded.
    for (q, want) in [
        ("SUBJECT treasure", "OK 1"),
        ("SUBJECT TREASURE MAP", "OK 1"),
        ("SUBJECT GRÜ", "OK 1"),
        ("FROM jörg", "OK 1"),
        ("BODY PINEAPPLE", "OK 1"),
        ("BODY strawberry", "OK 2"),
        ("BODY Überraschung", "OK 2"),
        ("TEXT treasure", "OK 1"),
        ("TEXT pineapple", "OK 1"),
        ("HEADER X-Note café", "OK 1"),
        ("TO alice", "OK 1 2 3"),
    ] {
        assert_eq!(ours(q), want, "{q}: {v}");
    }
    // The encoded forms match nothing; BODY is not the header.
    for q in [
        "SUBJECT SGlkZGVu",
        "BODY dGhlIHNl",
        "BODY straw=",
        "BODY treasure",
    ] {
        assert_eq!(ours(q), "OK ", "{q}: {v}");
    }
    for (q, both) in v.as_object().unwrap() {
        assert_eq!(both[0], both[1], "{q}: mailvault, then Dovecot");
    }
}

/// The folders of the LIST-EXTENDED test's account (Maildir++ directories, special-use
/// names among them) and how many messages each holds, the first one `\Seen`.
const LISTED: [(&str, usize); 8] = [
    ("", 2),
    (".Archive", 1),
    (".Archive.2023", 2),
    (".Sent", 1),
    (".Drafts", 1),
    (".Trash", 1),
    (".Work", 1),
    (".Work.Projects", 3),
];

/// Issue 29: LIST-EXTENDED (RFC 5258), LIST-STATUS (RFC 5819) and SPECIAL-USE's LIST
/// options (RFC 6154). Dovecot serving the Maildir the view backed up (special-use
/// folders by the harness's configuration, subscriptions in the Maildir: INBOX,
/// Archive/2023, Sent, Drafts and Work/Projects, so Archive and Work are parents of
/// subscribed folders without being subscribed) answers every command of
/// `list_extended.py` as the view does: selection options SUBSCRIBED, REMOTE,
/// RECURSIVEMATCH (CHILDINFO) and SPECIAL-USE, several patterns, RETURN (SUBSCRIBED
/// CHILDREN SPECIAL-USE STATUS (...)), a literal pattern, and the `BAD`s (a lone
/// RECURSIVEMATCH, unknown options); what the view adds is left out as the script says.
/// Then on the view alone: a `\Noselect` level gets no STATUS, the CHILDINFO line as
/// RFC 5258 writes it, and the plain LIST is answered as before.
#[test]
fn list_extended_answers_as_dovecot_does() {
    let e = Env::new();
    let mail = e.path("mail");
    let md = mail.join("example.org/alice/Maildir");
    let mut t = 1_704_103_200;
    for (dir, n) in LISTED {
        for i in 0..n {
            t += 60;
            let flags = if i == 0 { "S" } else { "" };
            let body = format!("Subject: {dir} {i}\r\n\r\nbody\r\n");
            let name = format!("{t}.M{i}P1.host:2,{flags}");
            common::put_msg(&md, dir, "cur", &name, body.as_bytes(), t);
        }
    }
    let subs = "V\t2\n\nINBOX\nArchive\t2023\nSent\nDrafts\nWork\tProjects\n";
    fs::write(md.join("subscriptions"), subs).unwrap();
    e.ok(&["init"]);
    e.ok(&["backup", &format!("maildir:{}", mail.display())]);
    token_file(&e, 0o600);
    let s = start(&e);
    let store = e.path("mail-as-backed-up");
    common::copy_tree(&mail, &store);
    judge::chown_tree(&store, judge::mail_owner());
    let Some(dovecot) = judge::dovecot(Some(store), String::new()) else {
        return;
    };
    let pass = password_file(&e);
    let (port, dport) = (s.imap_port.to_string(), dovecot.port().to_string());
    let args = [&port, path_str(&pass), ACCOUNT, &dport, dovecot.password()];
    let v = script("list_extended.py", &args);
    let answer = |c: &str, who: usize| -> Vec<String> {
        (v[c][who].as_array().unwrap().iter())
            .map(|x| x.as_str().unwrap().to_string())
            .collect()
    };
    // Not a comparison of two empty answers.
    let dove = answer("LIST (SUBSCRIBED RECURSIVEMATCH) \"\" \"%\"", 1);
    assert_eq!(dove.len(), 6, "{dove:?}");
    assert_eq!(dove[1], "Archive () (CHILDINFO (SUBSCRIBED))", "{dove:?}");
    let status = answer("LIST \"\" \"*\" RETURN (STATUS (MESSAGES UNSEEN))", 1);
    assert!(
        status.contains(&"Work/Projects ()  STATUS (MESSAGES 3 UNSEEN 2)".to_string()),
        "{status:?}"
    );
    assert_eq!(answer("LIST (FOO) \"\" \"*\"", 1), ["BAD"]);
    for (c, both) in v.as_object().unwrap() {
        assert_eq!(both[0], both[1], "{c}: mailvault, then Dovecot");
    }
    // The view alone: its own mailboxes.
    let mut c = Line::open(s.imap_port);
    let caps = c.cmd("a", "CAPABILITY");
    for cap in [" LIST-EXTENDED", " LIST-STATUS", " SPECIAL-USE"] {
        assert!(caps[0].contains(cap), "{cap}: {caps:?}");
    }
    c.login();
    let snaps = c.cmd(
        "b",
        "LIST \"\" (Snapshots Nothing*) RETURN (STATUS (MESSAGES))",
    );
    assert_eq!(
        snaps,
        [
            "* LIST (\\Noselect \\HasChildren) \"/\" Snapshots",
            "b OK LIST done"
        ]
    );
    let info = c.cmd("c", "LIST (SUBSCRIBED RECURSIVEMATCH) \"\" Work");
    assert_eq!(
        info,
        [
            "* LIST (\\HasChildren) \"/\" Work (\"CHILDINFO\" (\"SUBSCRIBED\"))",
            "c OK LIST done"
        ]
    );
    let plain = c.cmd("d", "LIST \"\" Work*");
    assert_eq!(
        plain,
        [
            "* LIST (\\HasChildren) \"/\" Work",
            "* LIST (\\HasNoChildren) \"/\" Work/Projects",
            "d OK LIST done"
        ]
    );
    // mailvault's own IMAP client, as a backup of the view lists it: one LIST with
    // RETURN (SUBSCRIBED SPECIAL-USE STATUS (...)), no LSUB.
    let ep = mailvault_imap::Endpoint::parse(&format!("imap://127.0.0.1:{port}")).unwrap();
    let client = mailvault_imap::Client::new(mailvault_imap::ClientOptions::new(ep)).unwrap();
    let mut imap = client
        .login(&mailvault_imap::Credentials::User {
            user: format!("{ACCOUNT}*admin"),
            password: TOKEN.into(),
        })
        .unwrap();
    let folders = imap.list_with_status().unwrap();
    let folder = |n: &str| folders.iter().find(|f| f.name == n).unwrap();
    let (projects, work, snaps) = (folder("Work/Projects"), folder("Work"), folder("Snapshots"));
    assert!(projects.subscribed && !work.subscribed && !snaps.selectable);
    let st = projects.status.as_ref().unwrap();
    assert_eq!((st.messages, st.unseen), (Some(3), None));
    assert!(st.uidvalidity.is_some() && st.highestmodseq.is_some());
    assert!(snaps.status.is_none() && work.status.is_some());
    assert_eq!(
        folder("Sent").special_use,
        Some(mailvault_imap::SpecialUse::Sent)
    );
    let _ = imap.logout();
}

/// Issue 29: Dovecot as a second judge of the view. A throw-away Dovecot pulls the latest
/// view (`doveadm backup -R` from an `imapc:` location, its imapc settings in its
/// configuration, the token too) with the account's own folders alone (`-x Snapshots*`,
/// `-x Deleted`), twice (the second pull adds nothing); the Dovecot judge (imap_judge.py,
/// as the restore tests use it) then finds in it what a Dovecot serving the backed-up
/// store finds there: the same folders, messages (bytes with Dovecot's CRLF line endings,
/// sizes), flags, keywords, internal dates and subscriptions, INBOX with Dovecot's own
/// UIDs and UIDVALIDITY. The pulled Maildir files hold the source's bytes (line endings
/// aside: Dovecot stores LF).
#[test]
fn dovecot_pulls_the_latest_view_and_the_judge_sees_the_snapshot() {
    let e = repository();
    let s = start(&e);
    // The store as the latest snapshot has it, served by a Dovecot of its own.
    let store = e.path("mail-as-backed-up");
    common::copy_tree(&e.path("mail"), &store);
    judge::chown_tree(&store, judge::mail_owner());
    let Some(source) = judge::dovecot(Some(store), String::new()) else {
        return;
    };
    let imapc = format!(
        "imapc_host = 127.0.0.1\nimapc_port = {}\nimapc_user = {ACCOUNT}*admin\n\
         imapc_password = {TOKEN}\n",
        s.imap_port
    );
    let pulled = judge::dovecot(None, imapc).unwrap();
    let conf = pulled.root().join("dovecot.conf");
    // Twice: the second pull finds every message there already (imapc has no GUIDs: by
    // UID and a hash of the Date and Message-ID fields, which it fetches from the view)
    // and adds nothing (the judge would see a message twice).
    for _ in 0..2 {
        let o = Command::new("doveadm")
            .arg("-c")
            .arg(&conf)
            .args(["backup", "-R", "-x", "Snapshots*", "-x", "Deleted"])
            .args(["-u", ACCOUNT, "imapc:"])
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "doveadm backup -R failed ({}):\n{}{}\nthe view's log:\n{}",
            o.status,
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr),
            fs::read_to_string(e.path("serve.err")).unwrap_or_default()
        );
    }
    let login = |d: &mailvault_imap::testing::DovecotServer| judge::Login {
        port: d.port(),
        admin: d.master_user().into(),
        password: d.master_password().into(),
    };
    let before = judge::record(&login(&source), ACCOUNT).unwrap();
    let mut after = judge::record(&login(&pulled), ACCOUNT).unwrap();
    eprintln!("source: {}\npulled: {}", before.summary(), after.summary());
    assert_eq!(before.messages(), 7, "{before:?}");
    assert_eq!(before.with_keyword("Important"), 1, "{before:?}");
    assert_eq!(before.subscriptions.len(), 2, "{before:?}");
    // The view subscribes every mailbox of the backups (so that clients showing
    // subscribed folders show them), and dsync copies the subscriptions of the mailboxes
    // it was told to leave out as well: those are not the account's.
    after
        .subscriptions
        .retain(|n| n != "Deleted" && !n.starts_with("Snapshots/"));
    judge::assert_none(
        "the pulled view against the store",
        &judge::compare(&before, &after, judge::Fidelity::SameOrder),
    );
    // INBOX has Dovecot's UIDs from the backed-up dovecot-uidlist: exactly the same.
    let inbox = |st: &judge::State| judge::State {
        folders: st
            .folders
            .iter()
            .filter(|(n, _)| *n == "INBOX")
            .map(|(n, f)| (n.clone(), f.clone()))
            .collect(),
        ..st.clone()
    };
    judge::assert_none(
        "INBOX, UIDs included",
        &judge::compare(&inbox(&before), &inbox(&after), judge::Fidelity::Exact),
    );
    // The files Dovecot wrote: the source's bytes, LF line endings on both sides.
    let src = e.path("mail/example.org/alice/Maildir");
    let dst = pulled.maildir(ACCOUNT);
    let dirs = |root: &Path| {
        [
            ("INBOX", ""),
            ("Archive", ".Archive"),
            ("Archive/2023", ".Archive.2023"),
        ]
        .map(|(n, d)| (n.to_string(), root.join(d)))
    };
    let want = maildir_messages(&dirs(&src), lf);
    assert_eq!(maildir_messages(&dirs(&dst), lf), want);
    assert_eq!(want.values().map(Vec::len).sum::<usize>(), 7);
}

/// Messages with MIME structure for BODYSTRUCTURE (INBOX of the mail root `mime-mail`,
/// in this order), all CRLF: Dovecot counts sizes with CRLF line endings, the view as
/// stored.
const STRUCTURED: [&[u8]; 7] = [
    MULTIPART,
    b"From: A <a@example.org>\r\nSubject: report\r\nMIME-Version: 1.0\r\n\
Content-Type: Multipart/Mixed; boundary=\"=_outer\"; charset=UTF-8\r\n\
Content-Language: en (English), de-AT\r\n\r\npreamble\r\n--=_outer\r\n\
Content-Type: TEXT/Plain; charset=utf-8; format=flowed\r\nContent-Disposition: inline\r\n\
Content-Language: en\r\nContent-ID:  <text@example.org> \r\n\
Content-Description: the text\r\nContent-MD5: Q2hlY2sgSW50ZWdyaXR5IQ==\r\n\r\n\
see the report\r\nattached\r\n--=_outer\r\n\
Content-Type: application/pdf; name=\"report 2024.pdf\"\r\n\
Content-Disposition: Attachment; filename=\"report 2024.pdf\"; size=4\r\n\
Content-Location: http://example.org/reports/\r\n 2024.pdf\r\n\
Content-Transfer-Encoding: BASE64\r\n\r\nAAEC\r\n--=_outer\r\nContent-Type: message/rfc822\r\n\
Content-Disposition: attachment; filename=fwd.eml\r\n\r\n\
From: B <b@example.org>\r\nTo: a@example.org\r\nSubject: forwarded\r\n\
Content-Type: multipart/alternative; boundary=alt\r\n\r\n--alt\r\n\r\nplain text\r\n--alt\r\n\
Content-Type: text/html\r\n\r\n<p>html</p>\r\n--alt--\r\n\r\n--=_outer--\r\nepilogue\r\n",
    b"From: C <c@example.org>\r\nSubject: rfc 2231\r\nMIME-Version: 1.0\r\n\
Content-Type: multipart/mixed; boundary=b\r\n\r\n--b\r\n\
Content-Type: application/octet-stream; name*=utf-8''%C3%A4rger.bin\r\n\
Content-Disposition: attachment; filename*0=\"a long \\\"quoted\\\" \"; filename*1=name.bin\r\n\
\r\nx\r\n--b\r\nContent-Type: text/plain; Format=flowed; title*0*=us-ascii'en'a%20b;\r\n\
\x20title*1=c; charset=\"iso-8859-1\"\r\nContent-Disposition: inline; x=\"\"\r\n\r\ny\r\n--b--\r\n",
    b"From: D <d@example.org>\r\nSubject: digest\r\nMIME-Version: 1.0\r\n\
Content-Type: multipart/digest; boundary=\"d\"\r\nContent-Disposition: inline\r\n\
Content-Location: digest\r\n\r\n--d\r\n\r\nSubject: one\r\nFrom: e@example.org\r\n\r\nfirst\r\n\
--d\r\nContent-Type: text/plain\r\n\r\nnot a message\r\n--d--\r\n",
    b"From: E <e@example.org>\r\nSubject: related\r\nMIME-Version: 1.0\r\n\
Content-Type: multipart/related; type=\"multipart/alternative\"; boundary=r\r\n\r\n--r\r\n\
Content-Type: multipart/alternative; boundary=a2\r\n\r\n--a2\r\nContent-Type: text/plain;\r\n\
\tcharset=us-ascii\r\nContent-Transfer-Encoding: quoted-printable\r\n\r\nsoft=\r\nbreak\r\n\
--a2\r\nContent-Type: text/html; charset=utf-8\r\n\r\n<img src=\"cid:i@x\">\r\n--a2--\r\n\
--r\r\nContent-Type: image/png\r\nContent-ID: <i@x>\r\nContent-Disposition: inline\r\n\
Content-Transfer-Encoding: base64\r\n\r\niVBORw0K\r\n--r--\r\n",
    b"From: F <f@example.org>\r\nSubject: no type\r\n\r\njust text\r\nin two lines\r\n",
    b"From: G <g@example.org>\r\nTo: undisclosed-recipients:;\r\n\
Cc: Team: a@example.org, \"B, C\" <b@example.org>;, c@example.org\r\n\
Bcc: Empty:;, Other: d@example.org;\r\nDate: Mon, 01 Jan 2024 10:00:00 +0000\r\n\
Message-ID: <g@example.org>\r\nIn-Reply-To: <f@example.org>\r\nSubject: groups\r\n\r\nx\r\n",
];

/// Issue 29: BODYSTRUCTURE with its extension data (Content-MD5, disposition, language,
/// location; a multipart's parameters), BODY and ENVELOPE, as Dovecot answers for the
/// same messages (Python's imaplib asks both): nested and attached messages, dispositions
/// with file names, RFC 2231 parameters, a digest, types and names as written, groups.
#[test]
fn bodystructure_is_dovecots() {
    let Some(dovecot) = mailvault_imap::testing::DovecotServer::start_or_skip().unwrap() else {
        return;
    };
    let v = beside_dovecot(&dovecot, &STRUCTURED, "bodystructure.py");
    let answers = v.as_array().unwrap();
    assert_eq!(answers.len(), 3 * STRUCTURED.len());
    let mut differ = Vec::new();
    for a in answers {
        if a[1] != a[2] {
            differ.push(format!(
                "{}:\n  mailvault {}\n  Dovecot   {}",
                a[0], a[1], a[2]
            ));
        }
    }
    assert!(differ.is_empty(), "{}", differ.join("\n"));
    // The answers carry what was asked about (not both empty, say).
    let all = answers
        .iter()
        .map(|a| a[1].as_str().unwrap())
        .collect::<String>();
    for want in [
        r#"("Attachment" ("filename" "report 2024.pdf" "size" "4"))"#,
        r#""Q2hlY2sgSW50ZWdyaXR5IQ==" ("inline" NIL) ("en") NIL"#,
        r#""Mixed" ("boundary" "=_outer" "charset" "UTF-8") NIL ("en" "de-AT") NIL"#,
        r#""http://example.org/reports/ 2024.pdf""#,
        r#"("filename" "a long \"quoted\" name.bin")"#,
        r#""digest" ("boundary" "d") ("inline" NIL) NIL "digest""#,
        r#"("Format" "flowed" "charset" "iso-8859-1" "title*" "us-ascii'en'a%20bc")"#,
        r#"((NIL NIL "undisclosed-recipients" NIL)(NIL NIL NIL NIL))"#,
        r#"((NIL NIL "Team" NIL)(NIL NIL "a" "example.org")("B, C" NIL "b" "example.org")(NIL NIL NIL NIL)(NIL NIL "c" "example.org"))"#,
    ] {
        assert!(all.contains(want), "{want} in {all}");
    }
}

/// Reads one IMAP response from `r`: its lines with every literal's bytes in place.
fn response(r: &mut impl BufRead) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let mut line = Vec::new();
        assert!(r.read_until(b'\n', &mut line).unwrap() > 0, "closed");
        out.extend_from_slice(&line);
        let literal = (line.ends_with(b"}\r\n"))
            .then(|| line.iter().rposition(|&b| b == b'{'))
            .flatten()
            .and_then(|i| {
                std::str::from_utf8(&line[i + 1..line.len() - 3])
                    .ok()?
                    .parse()
                    .ok()
            });
        match literal {
            Some(n) => {
                let mut lit = vec![0u8; n];
                r.read_exact(&mut lit).unwrap();
                out.extend_from_slice(&lit);
            }
            None => return out,
        }
    }
}

/// A FETCH of more than one part's bytes (the view sends a large FETCH in parts of about
/// 2 MiB, each made once the one before went out) answers every message whole and in
/// order, and commands the client sent behind it meanwhile are answered after it.
#[test]
fn a_large_fetch_goes_out_in_parts_and_commands_behind_it_wait_their_turn() {
    let e = Env::new();
    let mail = e.path("mail");
    let mut want = Vec::new();
    for i in 0..60 {
        let mut m = format!("Subject: big {i}\r\n\r\n").into_bytes();
        while m.len() < 300_000 {
            m.extend_from_slice(format!("line {} of message {i}\r\n", m.len()).as_bytes());
        }
        let name = format!("{}.M{i}P1.host:2,S", 1_700_000_000 + i);
        common::maildir_message(&mail, ACCOUNT, "", &name, &m);
        want.push(m);
    }
    e.ok(&["init"]);
    e.ok(&["backup", &format!("maildir:{}", mail.display())]);
    token_file(&e, 0o600);
    let s = start(&e);
    let mut l = Line::open(s.imap_port);
    l.login();
    assert!(l
        .cmd("a2", "EXAMINE INBOX")
        .last()
        .unwrap()
        .starts_with("a2 OK"));
    // The second and third command arrive while the first's parts are going out (18 MB,
    // more than the sockets' buffers hold).
    l.w.write_all(b"a3 FETCH 1:* (UID BODY.PEEK[])\r\n")
        .unwrap();
    let mut got = Vec::new();
    let mut seen = Vec::new();
    loop {
        let r = response(&mut l.r);
        if seen.is_empty() {
            l.w.write_all(b"a4 UID FETCH 1:* (UID)\r\na5 NOOP\r\n")
                .unwrap();
        }
        let text = String::from_utf8_lossy(&r[..r.len().min(40)]).to_string();
        if r.starts_with(b"* ") && r.windows(6).any(|w| w == b"BODY[]") {
            let open = r.iter().position(|&b| b == b'}').unwrap() + 3;
            got.push(r[open..r.len() - 3].to_vec());
            seen.push("body".to_string());
        } else {
            seen.push(text.clone());
        }
        if text.starts_with("a5 ") {
            break;
        }
    }
    assert_eq!(got.len(), 60, "every message answered");
    assert!(got == want, "every message whole, in order");
    let at = |p: &str| seen.iter().position(|x| x.starts_with(p)).unwrap();
    assert!(seen[..at("a3 OK")].iter().filter(|x| *x == "body").count() == 60);
    let uids = seen
        .iter()
        .filter(|x| x.starts_with("* ") && x.contains("FETCH (UID"))
        .count();
    assert_eq!(uids, 60);
    assert!(
        at("a3 OK") < at("a4 OK") && at("a4 OK") < at("a5 OK"),
        "{seen:?}"
    );
    assert!(
        seen[..at("a3 OK")]
            .iter()
            .all(|x| x == "body" || x.starts_with("* ")),
        "nothing of a4 or a5 before a3 is done: {seen:?}"
    );
}

/// The UIDVALIDITY EXAMINE answers for `mailbox`, and the UID of the message of each
/// subject of `subjects` (0: none).
fn numbering(c: &mut Line, mailbox: &str, subjects: &[&str]) -> (String, Vec<u64>) {
    let sel = c.cmd("n1", &format!("EXAMINE \"{mailbox}\""));
    assert!(sel.last().unwrap().starts_with("n1 OK"), "{sel:?}");
    let uidvalidity = (sel.iter())
        .find_map(|l| l.strip_prefix("* OK [UIDVALIDITY "))
        .and_then(|l| l.split(']').next())
        .unwrap()
        .to_string();
    let uids = (subjects.iter())
        .map(|s| {
            let found = c.cmd("n2", &format!("UID SEARCH SUBJECT \"{s}\""));
            let uids: Vec<u64> = (found[0].strip_prefix("* SEARCH").unwrap())
                .split_whitespace()
                .map(|u| u.parse().unwrap())
                .collect();
            assert!(uids.len() <= 1, "{s}: {found:?}");
            uids.first().copied().unwrap_or(0)
        })
        .collect();
    (uidvalidity, uids)
}

/// Issue 29: a folder without a `dovecot-uidlist` (Archive) keeps its UIDs and
/// UIDVALIDITY after a later backup in which a message was deleted and two came (one
/// with an older internal date than every other): those two get higher UIDs, in arrival
/// order, and the older snapshot's view of the folder does not change. The deleted one,
/// back in a third backup, is a new message with a new, higher UID.
#[test]
fn a_folder_without_a_uidlist_keeps_its_uids_when_messages_come_and_go() {
    let e = repository();
    let subjects = ["archived", "parts", "older one", "newer one"];
    let s = start(&e);
    let mut c = Line::open(s.imap_port);
    c.login();
    let levels = c.cmd("b", "LIST \"\" \"Snapshots/%\"");
    let second = levels[levels.len() - 2].rsplit_once("\"/\" ").unwrap().1;
    let second = format!("{}/Archive", second.trim_matches('"'));
    let before = numbering(&mut c, "Archive", &subjects);
    assert_eq!(before.1, [1, 2, 0, 0]);
    let snapshot_before = numbering(&mut c, &second, &subjects);
    assert_eq!(snapshot_before, before, "the latest view is its snapshot's");
    drop(c);
    drop(s);

    let md = e.path("mail").join("example.org/alice/Maildir");
    fs::remove_file(md.join(".Archive/cur/1700000000.M4P1.host:2,ST")).unwrap();
    common::put_msg(
        &md,
        ".Archive",
        "cur",
        "1710000000.M9P1.host:2,S",
        b"Subject: newer one\r\n\r\nnew\r\n",
        1_710_000_000,
    );
    common::put_msg(
        &md,
        ".Archive",
        "cur",
        "1600000000.M10P1.host:2,S",
        b"Subject: older one\r\n\r\nold, moved in\r\n",
        1_600_000_000,
    );
    common::at_rest();
    e.ok(&["backup", &format!("maildir:{}", e.path("mail").display())]);

    let s = start(&e);
    let mut c = Line::open(s.imap_port);
    c.login();
    let after = numbering(&mut c, "Archive", &subjects);
    assert_eq!(after.0, before.0, "the same UIDVALIDITY");
    assert_eq!(
        after.1,
        [0, 2, 3, 4],
        "the kept one keeps its UID, new ones above"
    );
    assert_eq!(numbering(&mut c, &second, &subjects), before, "{second}");
    let sel = c.cmd("e", "EXAMINE Archive");
    assert!(
        sel.iter().any(|l| l == "* OK [UIDNEXT 5] next UID"),
        "{sel:?}"
    );
    let fetch = c.cmd("f", "FETCH 1:* (UID)");
    assert_eq!(
        fetch[..3],
        [
            "* 1 FETCH (UID 2)",
            "* 2 FETCH (UID 3)",
            "* 3 FETCH (UID 4)"
        ]
    );
    drop(c);
    drop(s);

    // The deleted message comes back (its key again): a new message to IMAP, with a new,
    // higher UID, not its old one.
    common::put_msg(
        &md,
        ".Archive",
        "cur",
        "1700000000.M4P1.host:2,ST",
        b"Subject: archived\r\n\r\nkept\r\n",
        1_700_000_000,
    );
    common::at_rest();
    e.ok(&["backup", &format!("maildir:{}", e.path("mail").display())]);
    let s = start(&e);
    let mut c = Line::open(s.imap_port);
    c.login();
    let back = numbering(&mut c, "Archive", &subjects);
    assert_eq!(back, (before.0.clone(), vec![5, 2, 3, 4]));
    drop(c);
    drop(s);

    // The snapshot where the message was gone is forgotten: walked without it, the
    // message never left and keeps UID 1. The numbering changed, so UIDVALIDITY must.
    let snaps: Value = serde_json::from_str(&e.ok(&["snapshots", "--json"])).unwrap();
    let mut snaps: Vec<(i64, String)> = (snaps.as_array().unwrap().iter())
        .map(|s| {
            (
                s["time"].as_i64().unwrap(),
                s["id"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    snaps.sort();
    assert_eq!(snaps.len(), 4);
    e.ok(&["forget", &snaps[2].1]);
    let s = start(&e);
    let mut c = Line::open(s.imap_port);
    c.login();
    let after = numbering(&mut c, "Archive", &subjects);
    assert_ne!(
        after.0, before.0,
        "a new numbering under a new UIDVALIDITY: {after:?}"
    );
    assert_eq!(after.1, [1, 2, 3, 4]);
}

/// Issue 29: an account with a folder of its own named `Snapshots` (and one below it)
/// keeps both as they are; the snapshots' levels go below `Snapshots (backups)`, where
/// each snapshot has the account's `Snapshots` folders too.
#[test]
fn a_folder_named_snapshots_moves_the_snapshots_root_aside() {
    let e = Env::new();
    let mail = e.path("mail");
    let msg = |dir: &str, name: &str, subject: &str| {
        let data = format!("Subject: {subject}\r\n\r\nbody\r\n");
        common::maildir_message(&mail, ACCOUNT, dir, name, data.as_bytes());
    };
    msg("", "1.M1P1.host:2,S", "in inbox");
    msg(".Snapshots", "2.M2P1.host:2,S", "own snapshots folder");
    msg(".Snapshots.Old", "3.M3P1.host:2,S", "own old one");
    let (_s, mut c) = backed_up_and_logged_in(&e, &mail);
    let below = c.cmd("b", "LIST \"\" \"Snapshots/%\"");
    assert_eq!(below.len(), 2, "the account's own alone: {below:?}");
    assert!(below[0].ends_with("\"/\" Snapshots/Old"), "{below:?}");
    let roots = c.cmd("c", "LIST \"\" \"%\"");
    let root = |name: &str| roots.iter().find(|l| l.ends_with(&format!("\"/\" {name}")));
    assert!(
        !root("Snapshots").unwrap().contains("Noselect"),
        "{roots:?}"
    );
    assert!(
        root("\"Snapshots (backups)\"")
            .unwrap()
            .contains("Noselect"),
        "{roots:?}"
    );
    for (mailbox, subject) in [
        ("Snapshots", "own snapshots folder"),
        ("Snapshots/Old", "own old one"),
    ] {
        let sel = c.cmd("d", &format!("EXAMINE \"{mailbox}\""));
        assert!(sel.iter().any(|l| l == "* 1 EXISTS"), "{mailbox}: {sel:?}");
        let found = c.cmd("e", &format!("SEARCH SUBJECT \"{subject}\""));
        assert_eq!(found[0], "* SEARCH 1", "{mailbox}: {found:?}");
    }
    let levels = c.cmd("f", "LIST \"\" \"Snapshots (backups)/%/Snapshots/Old\"");
    assert_eq!(levels.len(), 2, "{levels:?}");
    let name = levels[0].rsplit_once("\"/\" ").unwrap().1.trim_matches('"');
    let sel = c.cmd("g", &format!("EXAMINE \"{name}\""));
    assert!(sel.iter().any(|l| l == "* 1 EXISTS"), "{name}: {sel:?}");
}

/// Issue 29, CONDSTORE (RFC 7162) by Python's imaplib (tests/imap_view/condstore.py):
/// announced and enabled; every message of a mailbox has the mod-sequence of its
/// snapshot (its time in nanoseconds), so an older snapshot's INBOX has a lower one than
/// the latest's; SELECT, STATUS, FETCH MODSEQ, CHANGEDSINCE and SEARCH MODSEQ agree.
#[test]
fn condstore_gives_each_snapshot_its_mod_sequence() {
    let e = repository();
    let s = start(&e);
    let pass = password_file(&e);
    let v = script(
        "condstore.py",
        &[&s.imap_port.to_string(), path_str(&pass), ACCOUNT],
    );
    let s = |k: &str| v[k].as_str().unwrap().to_string();
    assert!(
        v["capability"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c == "CONDSTORE"),
        "{v}"
    );
    assert!(s("enable").starts_with("OK"), "{v}");
    assert_eq!(s("enabled"), "CONDSTORE");
    assert!(s("select_condstore").starts_with("OK"), "{v}");
    assert!(
        s("select_qresync").contains("BAD") || s("select_qresync").starts_with("error"),
        "{v}"
    );
    let h: u64 = s("highestmodseq").parse().unwrap();
    let old: u64 = s("old_highestmodseq").parse().unwrap();
    assert!(old < h, "an older snapshot, a lower mod-sequence: {v}");
    // The mod-sequence is the snapshot's time: the minute its level is named after.
    let snaps = v["snapshots"].as_array().unwrap();
    assert_eq!(snaps.len(), 2, "{v}");
    for (snap, modseq) in snaps.iter().zip([old, h]) {
        let (name, status) = (snap[0].as_str().unwrap(), snap[1].as_str().unwrap());
        assert!(
            status.contains(&format!("HIGHESTMODSEQ {modseq}")),
            "{status}"
        );
        let t = jiff::Timestamp::from_second((modseq / 1_000_000_000) as i64).unwrap();
        let minute = t.strftime("%Y-%m-%d %H:%M").to_string();
        assert!(
            name.starts_with(&format!("Snapshots/{minute}")),
            "{name} {minute}"
        );
    }
    assert!(
        s("status_inbox").contains(&format!("HIGHESTMODSEQ {h}")),
        "{v}"
    );
    let fetched = v["fetch_modseq"].as_array().unwrap();
    assert_eq!(fetched.len(), 4, "{v}");
    for f in fetched {
        assert!(
            f.as_str().unwrap().contains(&format!("MODSEQ ({h})")),
            "{f}"
        );
    }
    let below = v["changedsince_below"].as_array().unwrap();
    assert_eq!(below.len(), 4, "{v}");
    assert!(
        below[0].as_str().unwrap().contains("MODSEQ"),
        "implied: {v}"
    );
    assert_eq!(
        v["changedsince_highest"].as_array().unwrap().len(),
        0,
        "{v}"
    );
    assert_eq!(s("search_highest"), format!("OK 1 2 3 4 (MODSEQ {h})"));
    assert_eq!(s("search_above"), "OK ");
    assert_eq!(s("search_not"), "OK ");
    assert!(s("old_fetch").contains(&format!("MODSEQ ({old})")), "{v}");
}

/// SEARCH BODY and TEXT through the search index: in an indexed repository the index
/// names the candidates (a phrase, its last word a prefix) and only they are read, so a
/// string that starts inside a word is not found; without the index every message is
/// read and it is.
/// `init`, one backup of `mail` (`--index` or not) and `serve --imap`; a session logged in
/// as the admin with INBOX examined.
fn inbox_of_one_backup(e: &Env, mail: &Path, index: bool) -> (Server, Line) {
    e.ok(&["init"]);
    let src = format!("maildir:{}", mail.display());
    match index {
        true => e.ok(&["backup", "--index", &src]),
        false => e.ok(&["backup", &src]),
    };
    token_file(e, 0o600);
    let s = start(e);
    let mut c = Line::open(s.imap_port);
    c.login();
    let examined = c.cmd("b", "EXAMINE INBOX");
    assert!(examined.last().unwrap().starts_with("b OK"), "{examined:?}");
    (s, c)
}

#[test]
fn body_and_text_searches_go_through_the_search_index_when_it_holds_the_snapshot() {
    let run = |index: bool| -> Vec<(String, Vec<String>)> {
        let e = Env::new();
        let mail = e.path("mail");
        for (name, data) in [
            (
                "1.M1P1.host:2,S",
                "Subject: one\r\n\r\nthe spamassassin quarterly report\r\n",
            ),
            ("2.M2P1.host:2,S", "Subject: two\r\n\r\nnothing here\r\n"),
            (
                "3.M3P1.host:2,S",
                "Subject: quarterly\r\n\r\nother words\r\n",
            ),
        ] {
            common::maildir_message(&mail, ACCOUNT, "", name, data.as_bytes());
        }
        let (_s, mut c) = inbox_of_one_backup(&e, &mail, index);
        let queries = [
            "BODY \"quarterly rep\"",
            "TEXT quarterly",
            "BODY quarterly",
            "BODY assassin",
            "SEEN BODY \"THE SPAM\"",
            "OR BODY nothing BODY other",
            "BODY \"!!\"",
        ];
        (queries.iter().enumerate())
            .map(|(i, q)| {
                let out = c.cmd(&format!("s{i}"), &format!("SEARCH {q}"));
                assert!(
                    out.last().unwrap().starts_with(&format!("s{i} OK")),
                    "{q}: {out:?}"
                );
                (q.to_string(), out[..out.len() - 1].to_vec())
            })
            .collect()
    };
    let want = |assassin: &str| -> Vec<(String, Vec<String>)> {
        [
            ("BODY \"quarterly rep\"", "* SEARCH 1"),
            ("TEXT quarterly", "* SEARCH 1 3"),
            ("BODY quarterly", "* SEARCH 1"),
            ("BODY assassin", assassin),
            ("SEEN BODY \"THE SPAM\"", "* SEARCH 1"),
            ("OR BODY nothing BODY other", "* SEARCH 2 3"),
            ("BODY \"!!\"", "* SEARCH"),
        ]
        .iter()
        .map(|(q, a)| (q.to_string(), vec![a.to_string()]))
        .collect()
    };
    assert_eq!(run(true), want("* SEARCH"), "through the index");
    assert_eq!(run(false), want("* SEARCH 1"), "every message read");
}

/// A message list (a first sync's header fields) of a snapshot `backup --index` indexed
/// comes from the splits' header files: no message is read, after any restart. Without
/// the index the messages are read once, then answered from the in-memory cache.
/// `/metrics` counts where each compact header came from.
#[test]
fn a_message_list_of_an_indexed_snapshot_reads_no_message() {
    let run = |index: bool| -> Vec<String> {
        let e = Env::new();
        let mail = e.path("mail");
        for i in 1..=3 {
            let data = format!("Subject: number {i}\r\nX-Other: {i}\r\n\r\nbody {i}\r\n");
            let name = format!("{i}.M{i}P1.host:2,S");
            common::maildir_message(&mail, ACCOUNT, "", &name, data.as_bytes());
        }
        let (s, mut c) = inbox_of_one_backup(&e, &mail, index);
        for round in 0..2 {
            let out = c.cmd(
                "f",
                "UID FETCH 1:* (BODY.PEEK[HEADER.FIELDS (SUBJECT)] ENVELOPE)",
            );
            assert!(out.last().unwrap().starts_with("f OK"), "{out:?}");
            let text = out.join("\n");
            for i in 1..=3 {
                assert!(
                    text.contains(&format!("Subject: number {i}")),
                    "{round}: {text}"
                );
                assert!(text.contains(&format!("\"number {i}\"")), "{round}: {text}");
            }
        }
        let scrape = (s.http.get(s.url("/metrics")))
            .header("Authorization", format!("Bearer {TOKEN}"))
            .send()
            .unwrap()
            .text()
            .unwrap();
        (scrape.lines())
            .filter(|l| l.starts_with("mailvault_imap_compact_headers_total{"))
            .map(str::to_string)
            .collect()
    };
    let counts = |index: u32, cache: u32, read: u32| -> Vec<String> {
        [("index", index), ("cache", cache), ("read", read)]
            .iter()
            .map(|(from, n)| format!("mailvault_imap_compact_headers_total{{from=\"{from}\"}} {n}"))
            .collect()
    };
    assert_eq!(run(true), counts(6, 0, 0), "from the splits' header files");
    assert_eq!(
        run(false),
        counts(0, 3, 3),
        "read once, then from the cache"
    );
}
