//! Issue 14: mail in and out of mbox and EML through the `mailvault` binary. Round trips
//! Maildir -> mbox/EML export -> import -> Maildir; exports read (and mbox files written)
//! by Python's `mailbox` and `email`, independent parsers; a spool of 12 users and its
//! incrementals; mbox variants and malformed files backed up and restored byte-exact.
#![allow(clippy::unwrap_used)]

mod common;

use common::Env;
use mailvault_core::mail::MboxReader;
use serde_json::Value;
use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;

fn put(maildir: &Path, folder: &str, sub: &str, name: &str, body: &[u8], mtime: i64) {
    let dir = maildir.join(folder);
    for s in ["cur", "new", "tmp"] {
        fs::create_dir_all(dir.join(s)).unwrap();
    }
    let p = dir.join(sub).join(name);
    fs::write(&p, body).unwrap();
    set_mtime(&p, mtime);
}

fn set_mtime(p: &Path, mtime: i64) {
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_secs(mtime as u64);
    fs::File::options()
        .write(true)
        .open(p)
        .unwrap()
        .set_modified(t)
        .unwrap();
}

fn msg(subject: &str, body: &str) -> Vec<u8> {
    format!(
        "From: Team <team@example.org>\nTo: bob@example.org\nSubject: {subject}\nDate: Tue, 2 Jan 2024 00:00:00 +0000\nMessage-ID: <{}@example.org>\n\n{body}",
        subject.replace(' ', ".")
    )
    .into_bytes()
}

/// One account's Maildir: INBOX (flags, keywords, a `From ` line and a `>From ` line in a
/// body, a message in `new/`), Sent, Archive and Archive/2023 (nested), Entwürfe
/// (non-ASCII, `&APw-` in modified UTF-7), and Trash, empty.
fn account(md: &Path) {
    for sub in ["cur", "new", "tmp"] {
        fs::create_dir_all(md.join(".Trash").join(sub)).unwrap();
    }
    let flags = ["S", "RS", "FS", "DS", "ST", "PS", "Sab", "b", ""];
    for (n, f) in flags.iter().enumerate() {
        let body = format!("line one of {n}\nFrom the start, a body line\n>From quoted\nend\n");
        put(
            md,
            "",
            "cur",
            &format!("17000{n:05}.M{n}P1.mx:2,{f}"),
            &msg(&format!("inbox {n}"), &body),
            1_700_000_000 + 1000 * n as i64,
        );
    }
    fs::write(md.join("dovecot-keywords"), "0 $Label1\n1 Work\n").unwrap();
    put(
        md,
        "",
        "new",
        "1700100000.M9P9.mx",
        &msg("new one", "fresh\n"),
        1_700_100_000,
    );
    for (folder, subject, t) in [
        (".Sent", "sent", 1_700_200_000),
        (".Archive", "archive", 1_600_000_000),
        (".Archive.2023", "archive 2023", 1_672_531_200),
        (".Entw&APw-rfe", "entwurf", 1_700_300_000),
    ] {
        for n in 0..3 {
            put(
                md,
                folder,
                "cur",
                &format!("{t}.M{n}P2.mx:2,S"),
                &msg(&format!("{subject} {n}"), &format!("text {n}\n")),
                t + n,
            );
        }
    }
}

/// A message as every format keeps it: bytes, system flags (Maildir letters), keyword
/// names, internal date.
type Kept = (String, String, Vec<String>, i64);

/// A Maildir's messages by folder directory (`""` is INBOX), sorted: what a round trip
/// must keep.
fn view(md: &Path) -> BTreeMap<String, Vec<Kept>> {
    let mut out = BTreeMap::new();
    let mut dirs = vec![(String::new(), md.to_path_buf())];
    for e in fs::read_dir(md).unwrap() {
        let e = e.unwrap();
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') && e.path().is_dir() {
            dirs.push((name, e.path()));
        }
    }
    for (folder, dir) in dirs {
        let kw: Vec<(char, String)> = fs::read_to_string(dir.join("dovecot-keywords"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| {
                let (i, n) = l.split_once(' ')?;
                Some(((b'a' + i.parse::<u8>().ok()?) as char, n.to_string()))
            })
            .collect();
        let mut msgs = Vec::new();
        for sub in ["cur", "new"] {
            let Ok(rd) = fs::read_dir(dir.join(sub)) else {
                continue;
            };
            for f in rd {
                let f = f.unwrap();
                let name = f.file_name().to_string_lossy().into_owned();
                let info = name.split_once(":2,").map_or("", |x| x.1);
                let mut sys: Vec<char> = info
                    .chars()
                    .filter(|c| c.is_ascii_uppercase() && *c != 'P')
                    .collect();
                sys.sort();
                // Maildir's P is the keyword $Forwarded (as Dovecot has it): either way.
                let mut kws: Vec<String> = info
                    .chars()
                    .filter(|c| c.is_ascii_lowercase() || *c == 'P')
                    .map(|c| match c {
                        'P' => "$Forwarded".to_string(),
                        c => kw.iter().find(|k| k.0 == c).unwrap().1.clone(),
                    })
                    .collect();

                kws.sort();
                kws.dedup();
                let m = f.metadata().unwrap();
                msgs.push((
                    String::from_utf8(fs::read(f.path()).unwrap()).unwrap(),
                    sys.into_iter().collect(),
                    kws,
                    m.mtime(),
                ));
            }
        }
        msgs.sort();
        out.insert(folder, msgs);
    }
    out
}

/// `got` has the messages, flags, keywords and dates of `want`, folder by folder.
#[track_caller]
fn same_view(got: &Path, want: &Path) {
    let (got, want) = (view(got), view(want));
    let show = |v: &BTreeMap<String, Vec<Kept>>| -> Vec<String> {
        v.iter()
            .flat_map(|(f, msgs)| {
                msgs.iter().map(move |m| {
                    let subject =
                        m.0.lines()
                            .find(|l| l.starts_with("Subject:"))
                            .unwrap_or("");
                    format!(
                        "{f} {subject} [{}] {:?} {} ({} bytes)",
                        m.1,
                        m.2,
                        m.3,
                        m.0.len()
                    )
                })
            })
            .collect()
    };
    assert_eq!(show(&got), show(&want));
    assert_eq!(got, want);
}

/// The messages of an mbox file as the codec reads them.
fn read_mbox(p: &Path) -> Vec<Vec<u8>> {
    let f = fs::File::open(p).unwrap();
    MboxReader::new(std::io::BufReader::new(f))
        .map(|m| m.unwrap().bytes)
        .collect()
}

/// Every file below `root` (relative paths), sorted.
fn tree(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push(p.strip_prefix(root).unwrap().to_string_lossy().into_owned());
            }
        }
    }
    out.sort();
    out
}

fn init(e: &Env) {
    e.ok(&["init"]);
}

/// Maildir -> backup -> restore --target mbox:OUT -> backup mbox:OUT --account A ->
/// restore --target maildir:BACK: the same messages, flags, keywords, dates and folders;
/// a second export into the same place writes nothing and duplicates nothing.
#[test]
fn maildir_to_mbox_and_back() {
    let e = Env::new();
    init(&e);
    let md = e.path("src/example.org/bob/Maildir");
    account(&md);
    e.ok(&["backup", "src"]);
    let r = e.json(0, &["restore", "latest", "--target", "mbox:out"]);
    assert_eq!(r["items_restored"], 22, "{r}");
    let acc = e.path("out/example.org/bob");
    assert_eq!(
        tree(&acc),
        [
            "Archive",
            "Archive.sbd/2023",
            "Entwürfe",
            "Inbox",
            "Sent",
            "Trash"
        ],
        "Thunderbird's layout, one mbox file per folder, no temporary left"
    );
    let inbox = fs::read(acc.join("Inbox")).unwrap();
    let text = String::from_utf8_lossy(&inbox);
    assert!(text.starts_with("From MAILER-DAEMON "), "{text}");
    assert!(text.contains("\n>From the start"), "mboxrd quoting: {text}");
    assert!(text.contains("\n>>From quoted"), "mboxrd quoting: {text}");
    assert!(text.contains("X-Keywords: $Label1 Work"), "{text}");
    assert!(text.contains("X-IMAPbase: "), "keywords declared: {text}");

    // A re-run appends nothing.
    let r = e.json(0, &["restore", "latest", "--target", "mbox:out"]);
    assert_eq!(
        (r["items_restored"].as_u64(), r["items_unchanged"].as_u64()),
        (Some(0), Some(22)),
        "{r}"
    );
    assert_eq!(fs::read(acc.join("Inbox")).unwrap(), inbox);

    // A file that lost its last message gets just that one back, where it was.
    let last = text.rfind("\n\nFrom MAILER-DAEMON ").unwrap() + 2;
    fs::write(acc.join("Inbox"), &inbox[..last]).unwrap();
    // A file that is not the export's: kept, appended to.
    let foreign = b"From someone Mon Jan  1 00:00:00 2024\nSubject: mine\n\nkeep me".to_vec();
    fs::write(acc.join("Sent"), &foreign).unwrap();
    let r = e.json(0, &["restore", "latest", "--target", "mbox:out"]);
    assert_eq!(
        (r["items_restored"].as_u64(), r["items_unchanged"].as_u64()),
        (Some(4), Some(18)),
        "{r}"
    );
    assert_eq!(fs::read(acc.join("Inbox")).unwrap(), inbox);
    let sent = read_mbox(&acc.join("Sent"));
    assert_eq!(sent.len(), 4);
    assert_eq!(sent[0], b"Subject: mine\n\nkeep me\n");
    // The export's own Sent again, for the import below.
    fs::remove_file(acc.join("Sent")).unwrap();
    e.ok(&[
        "restore", "latest", "--target", "mbox:out", "--folder", "Sent",
    ]);

    e.ok(&[
        "backup",
        "mbox:out/example.org/bob",
        "--account",
        "bob@example.org",
    ]);
    e.ok(&["restore", "latest", "--target", "maildir:back"]);
    same_view(&e.path("back"), &md);
}

/// The same round trip through EML: one file per message, dated, flags in the sidecar.
#[test]
fn maildir_to_eml_and_back() {
    let e = Env::new();
    init(&e);
    let md = e.path("src/example.org/bob/Maildir");
    account(&md);
    e.ok(&["backup", "src"]);
    let r = e.json(0, &["restore", "latest", "--target", "eml:out"]);
    assert_eq!(r["items_restored"], 22, "{r}");
    let acc = e.path("out/example.org/bob");
    let files = tree(&acc);
    let emls: Vec<&String> = files.iter().filter(|f| f.ends_with(".eml")).collect();
    assert_eq!(emls.len(), 22, "{files:?}");
    for dir in ["INBOX", "Sent", "Archive", "Archive/2023", "Entwürfe"] {
        assert!(
            files.contains(&format!("{dir}/.mailvault-flags")),
            "{dir}: {files:?}"
        );
    }
    assert!(!files.iter().any(|f| f.ends_with(".tmp")), "{files:?}");
    // A re-run writes nothing new.
    let r = e.json(0, &["restore", "latest", "--target", "eml:out"]);
    assert_eq!(r["items_unchanged"], 22, "{r}");
    assert_eq!(tree(&acc), files);
    // A file of someone else's, with its sidecar line: kept.
    let mine = b"mine.eml 1700000000 \\Flagged Mine\n";
    let mut sidecar = fs::read(acc.join("Sent/.mailvault-flags")).unwrap();
    sidecar.extend_from_slice(mine);
    fs::write(acc.join("Sent/.mailvault-flags"), &sidecar).unwrap();
    fs::write(acc.join("Sent/mine.eml"), msg("mine", "mine\n")).unwrap();
    fs::remove_file(
        acc.join(
            files
                .iter()
                .find(|f| f.starts_with("Sent/") && f.ends_with(".eml"))
                .unwrap(),
        ),
    )
    .unwrap();
    let r = e.json(0, &["restore", "latest", "--target", "eml:out"]);
    assert_eq!(r["items_restored"], 1, "{r}");
    let now = String::from_utf8(fs::read(acc.join("Sent/.mailvault-flags")).unwrap()).unwrap();
    assert!(
        now.starts_with(&String::from_utf8_lossy(&sidecar).into_owned()),
        "merged: {now}"
    );
    fs::remove_file(acc.join("Sent/mine.eml")).unwrap();
    fs::write(
        acc.join("Sent/.mailvault-flags"),
        now.replace(std::str::from_utf8(mine).unwrap(), ""),
    )
    .unwrap();

    // One file and a sidecar lost: that file comes back, the sidecar is whole again.
    let sidecar = fs::read(acc.join("INBOX/.mailvault-flags")).unwrap();
    let gone = files
        .iter()
        .find(|f| f.starts_with("INBOX/") && f.ends_with(".eml"))
        .unwrap();
    fs::remove_file(acc.join(gone)).unwrap();
    fs::write(acc.join("INBOX/.mailvault-flags"), b"").unwrap();
    let r = e.json(0, &["restore", "latest", "--target", "eml:out"]);
    assert_eq!(
        (r["items_restored"].as_u64(), r["items_unchanged"].as_u64()),
        (Some(1), Some(21)),
        "{r}"
    );
    assert_eq!(tree(&acc), files);
    let lines = |b: &[u8]| {
        let mut l: Vec<String> = String::from_utf8_lossy(b)
            .lines()
            .map(String::from)
            .collect();
        l.sort();
        l
    };
    assert_eq!(
        lines(&fs::read(acc.join("INBOX/.mailvault-flags")).unwrap()),
        lines(&sidecar)
    );
    // Dates: each file's mtime is its message's internal date.
    let want = view(&md);
    for f in files
        .iter()
        .filter(|f| f.starts_with("Sent/") && f.ends_with(".eml"))
    {
        let m = fs::metadata(acc.join(f)).unwrap();
        let bytes = String::from_utf8(fs::read(acc.join(f)).unwrap()).unwrap();
        let orig = want[".Sent"].iter().find(|k| k.0 == bytes).unwrap();
        assert_eq!(m.mtime(), orig.3, "{f}");
    }

    e.ok(&[
        "backup",
        "eml:out/example.org/bob",
        "--account",
        "bob@example.org",
    ]);
    e.ok(&["restore", "latest", "--target", "maildir:back"]);
    same_view(&e.path("back"), &md);
}

/// python3, or `None` (the test is skipped) unless MAILVAULT_CI is set (then it fails).
fn python() -> Option<PathBuf> {
    let ok = Command::new("python3")
        .arg("-c")
        .arg("import mailbox, email")
        .status()
        .is_ok_and(|s| s.success());
    if ok {
        return Some(PathBuf::from("python3"));
    }
    assert!(
        std::env::var_os("MAILVAULT_CI").is_none(),
        "python3 with mailbox and email is needed (MAILVAULT_CI is set)"
    );
    eprintln!("python3 not found: skipped");
    None
}

fn run_python(py: &Path, script: &str, args: &[&Path]) -> Value {
    let o = Command::new(py)
        .arg("-c")
        .arg(script)
        .args(args)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&o.stdout).unwrap()
}

/// Reads every mbox file given with Python's `mailbox.mbox`: per message its bytes (hex,
/// mboxrd unquoted, the writer's metadata headers dropped), `get_flags()` and the From
/// line's date.
const READ_MBOX: &str = r#"
import calendar, json, mailbox, re, sys, time
out = []
for path in sys.argv[1:]:
    for m in mailbox.mbox(path, create=False):
        pass
    box = mailbox.mbox(path, create=False)
    for key in box.keys():
        raw = box.get_bytes(key)
        msg = box.get_message(key)
        head, sep, body = raw.partition(b"\n\n")
        lines = [l for l in head.split(b"\n") if not re.match(rb"(?i)(status|x-status|x-keywords|x-imapbase|x-mailvault-no-final-newline):", l)]
        data = b"\n".join(lines) + sep + body
        data = re.sub(rb"(?m)^>(>*From )", rb"\1", data)
        date = msg.get_from().split(" ", 1)[1]
        secs = calendar.timegm(time.strptime(date, "%a %b %d %H:%M:%S %Y"))
        out.append([data.hex(), "".join(sorted(msg.get_flags())), secs])
print(json.dumps(out))
"#;

/// Parses every `.eml` file given with Python's `email`: its subject, and whether the
/// parser found defects.
const READ_EML: &str = r#"
import email, email.policy, json, sys
out = []
for path in sys.argv[1:]:
    with open(path, "rb") as f:
        m = email.message_from_binary_file(f, policy=email.policy.default)
    out.append([str(m["subject"]), len(m.defects), m.get_content().count("\n")])
print(json.dumps(sorted(out)))
"#;

/// Writes an mbox with Python's `mailbox`: three messages with flags and dates.
const WRITE_MBOX: &str = r#"
import json, mailbox, sys, time
box = mailbox.mbox(sys.argv[1])
for i, flags in enumerate(["RO", "ROAF", "O"]):
    m = mailbox.mboxMessage(b"From: a@example.org\nSubject: py %d\n\nbody %d\n" % (i, i))
    m.set_flags(flags)
    m.set_from("a@example.org", time.gmtime(1700000000 + 3600 * i))
    box.add(m)
box.flush()
box.close()
print("[]")
"#;

/// Python's `mailbox` reads every mbox file of an export (bytes, flags, From-line
/// dates as the Maildir had them), `email` parses every `.eml` file, and an mbox that
/// `mailbox` writes is imported with its flags and dates.
#[test]
fn exports_read_and_written_by_python() {
    let Some(py) = python() else { return };
    let e = Env::new();
    init(&e);
    let md = e.path("src/example.org/bob/Maildir");
    account(&md);
    e.ok(&["backup", "src"]);
    e.ok(&["restore", "latest", "--target", "mbox:out"]);
    e.ok(&["restore", "latest", "--target", "eml:eml"]);

    // What python must find: every message, its system flags as mbox letters, its date.
    let mut want: Vec<(String, String, i64)> = Vec::new();
    for msgs in view(&md).values() {
        for (bytes, sys, _, mtime) in msgs {
            let mut f: Vec<char> = sys
                .chars()
                .filter_map(|c| match c {
                    'S' => Some('R'),
                    'R' => Some('A'),
                    'F' => Some('F'),
                    'T' => Some('D'),
                    'D' => Some('T'),
                    _ => None,
                })
                .collect();
            f.push('O');
            f.sort();
            want.push((hex(bytes.as_bytes()), f.into_iter().collect(), *mtime));
        }
    }
    want.sort();
    let acc = e.path("out/example.org/bob");
    let files: Vec<PathBuf> = tree(&acc).iter().map(|f| acc.join(f)).collect();
    let paths: Vec<&Path> = files.iter().map(|p| p.as_path()).collect();
    let got = run_python(&py, READ_MBOX, &paths);
    let mut got: Vec<(String, String, i64)> = got
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m[0].as_str().unwrap().to_string(),
                m[1].as_str().unwrap().to_string(),
                m[2].as_i64().unwrap(),
            )
        })
        .collect();
    got.sort();
    assert_eq!(got, want);

    let eml = e.path("eml/example.org/bob");
    let files: Vec<PathBuf> = tree(&eml)
        .iter()
        .filter(|f| f.ends_with(".eml"))
        .map(|f| eml.join(f))
        .collect();
    let paths: Vec<&Path> = files.iter().map(|p| p.as_path()).collect();
    let got = run_python(&py, READ_EML, &paths);
    assert_eq!(got.as_array().unwrap().len(), 22);
    for m in got.as_array().unwrap() {
        assert_eq!(m[1], 0, "defects: {m}");
    }
    assert!(got
        .as_array()
        .unwrap()
        .iter()
        .any(|m| m[0] == "Entwurf 0" || m[0] == "entwurf 0"));

    // Python writes, mailvault imports.
    run_python(&py, WRITE_MBOX, &[&e.path("py.mbox")]);
    e.ok(&["backup", "mbox:py.mbox", "--account", "alice@example.org"]);
    e.ok(&["restore", "latest", "--target", "maildir:pyback"]);
    let v = view(&e.path("pyback"));
    let inbox = &v[""];
    let got: Vec<(String, i64)> = inbox.iter().map(|m| (m.1.clone(), m.3)).collect();
    let mut want = vec![
        ("S".to_string(), 1_700_000_000),
        ("FRS".to_string(), 1_700_003_600),
        (String::new(), 1_700_007_200),
    ];
    want.sort();
    let mut got = got;
    got.sort();
    assert_eq!(got, want);
    for (i, m) in inbox.iter().enumerate() {
        let text = &m.0;
        assert!(
            text.starts_with("From: a@example.org\nSubject: py "),
            "{i}: {text}"
        );
        assert!(
            !text.contains("Status:"),
            "metadata headers removed: {text}"
        );
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|c| format!("{c:02x}")).collect()
}

/// One mbox message as written by a delivery agent: about 12 KiB that compress little,
/// so that storing one again would show in `bytes_added`.
fn spool_msg(user: &str, n: usize, t: i64) -> Vec<u8> {
    let date = mailvault_core::mail::mbox::asctime(t).unwrap();
    // xorshift64, seeded by the message: text that compresses little.
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15 ^ (t as u64) ^ ((n as u64) << 32);
    for b in user.bytes() {
        x = x.rotate_left(8) ^ u64::from(b);
    }
    let mut body = String::new();
    for _ in 0..192 {
        for _ in 0..4 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            body.push_str(&format!("{x:016x}"));
        }
        body.push('\n');
    }
    format!(
        "From sender@example.net {date}\nFrom: sender@example.net\nTo: {user}@example.org\nSubject: {user} {n}\n\n{body}\n"
    )
    .into_bytes()
}

/// A spool of 12 users: 12 accounts. Messages appended to 3 of them: the incremental
/// reads exactly the appended bytes. One mbox rewritten with a message removed (an
/// expunge): the next backup has the right messages and stores no kept message again.
#[test]
fn spool_of_twelve_users_and_its_incrementals() {
    let e = Env::new();
    init(&e);
    let spool = e.path("spool");
    fs::create_dir(&spool).unwrap();
    let users: Vec<String> = (0..12).map(|i| format!("user{i:02}")).collect();
    let mut boxes: BTreeMap<String, Vec<Vec<u8>>> = BTreeMap::new();
    for (i, u) in users.iter().enumerate() {
        let msgs: Vec<Vec<u8>> = (0..3 + i % 4)
            .map(|n| spool_msg(u, n, 1_700_000_000 + 60 * n as i64))
            .collect();
        fs::write(spool.join(u), msgs.concat()).unwrap();
        boxes.insert(u.clone(), msgs);
    }
    let r = e.json(0, &["backup", "mbox:spool", "--domain", "example.org"]);
    assert_eq!(r["accounts"], 12, "{r}");
    let total: usize = boxes.values().map(|m| m.len()).sum();
    assert_eq!(r["items_total"], total as u64, "{r}");

    // Appends to three of them.
    let mut appended = 0u64;
    for u in ["user01", "user05", "user09"] {
        let extra = spool_msg(u, 50, 1_800_000_000);
        appended += extra.len() as u64;
        let mut f = fs::OpenOptions::new()
            .append(true)
            .open(spool.join(u))
            .unwrap();
        std::io::Write::write_all(&mut f, &extra).unwrap();
        boxes.get_mut(u).unwrap().push(extra);
    }
    let r = e.json(0, &["backup", "mbox:spool", "--domain", "example.org"]);
    assert_eq!(
        r["bytes_read"], appended,
        "only the appended bytes are read: {r}"
    );
    assert_eq!(r["items_total"], total as u64 + 3, "{r}");

    // user05 loses its second message, as after an expunge.
    let msgs = boxes.get_mut("user05").unwrap();
    let removed = msgs.remove(1);
    fs::write(spool.join("user05"), msgs.concat()).unwrap();
    let r = e.json(0, &["backup", "mbox:spool", "--domain", "example.org"]);
    assert_eq!(r["items_total"], total as u64 + 2, "{r}");
    let added = r["bytes_added"].as_u64().unwrap();
    assert!(
        added < removed.len() as u64 / 2,
        "the kept messages are not stored again: {added} bytes added: {r}"
    );

    // And the snapshot has exactly the messages of the files.
    e.ok(&["restore", "latest", "--target", "mbox:back"]);
    // The export is a store of <domain>/<user>/ trees: backed up again, the same accounts.
    let r = e.json(0, &["backup", "mbox:back"]);
    assert_eq!(r["accounts"], 12, "{r}");
    assert_eq!(r["items_total"], total as u64 + 2, "{r}");
    for (u, msgs) in &boxes {
        let f = fs::File::open(e.path(&format!("back/example.org/{u}/Inbox"))).unwrap();
        let got: Vec<Vec<u8>> = MboxReader::new(std::io::BufReader::new(f))
            .map(|m| m.unwrap().bytes)
            .collect();
        let want: Vec<Vec<u8>> = msgs.iter().map(|m| body_of(m)).collect();
        assert_eq!(got, want, "{u}");
    }
}

/// What the mbox reader makes of one delivered message: without its From line (and the
/// final empty line, which belongs to the separator).
fn body_of(m: &[u8]) -> Vec<u8> {
    let start = m.iter().position(|&c| c == b'\n').unwrap() + 1;
    let mut b = m[start..].to_vec();
    if b.ends_with(b"\n\n") {
        b.pop();
    }
    b
}

/// mbox variants and malformed files through the CLI: each backed up and restored
/// byte-exact (to a Maildir and to mbox again), as the codec reads them, nothing lost.
#[test]
fn mbox_variants_and_malformed_files_round_trip() {
    let e = Env::new();
    init(&e);
    let d = "Tue Nov 24 07:00:00 2026";
    let cases: Vec<(&str, Vec<u8>)> = vec![
        (
            "mboxo",
            format!("From a@b {d}\nSubject: o\n\nbody\n>From quoted by mboxo\n\nFrom a@b {d}\nSubject: o2\n\nx\n\n").into_bytes(),
        ),
        (
            "mboxcl2",
            {
                let body = "From inside the body\n\nFrom here too\n";
                format!("From a@b {d}\nSubject: cl2\nContent-Length: {}\n\n{body}\nFrom a@b {d}\nSubject: next\n\ny\n", body.len()).into_bytes()
            },
        ),
        (
            "crlf",
            format!("From a@b {d}\r\nSubject: crlf\r\n\r\nline\r\n\r\nFrom a@b {d}\r\nSubject: crlf2\r\n\r\nz\r\n").into_bytes(),
        ),
        (
            "no-final-newline",
            format!("From a@b {d}\nSubject: nfn\n\nfirst\n\nFrom a@b {d}\nSubject: nfn2\n\nno newline at the end").into_bytes(),
        ),
        (
            "nul",
            format!("From a@b {d}\nSubject: nul\n\nbefore\0after\n\0\n").into_bytes(),
        ),
        (
            "truncated",
            format!("From a@b {d}\nSubject: whole\n\nfine\n\nFrom a@b {d}\nSubject: cut\nContent-Length: 5000\n\npartial bo").into_bytes(),
        ),
    ];
    for (name, data) in &cases {
        let file = e.path(&format!("{name}.mbox"));
        fs::write(&file, data).unwrap();
        let want: Vec<Vec<u8>> = MboxReader::new(&data[..])
            .map(|m| m.unwrap())
            .filter(|m| !m.folder_internal)
            .map(|m| m.bytes)
            .collect();
        assert!(want.len() >= 2 || *name == "nul", "{name}: {want:?}");
        let account = format!("{name}@example.org");
        let r = e.json(
            0,
            &[
                "backup",
                &format!("mbox:{name}.mbox"),
                "--account",
                &account,
            ],
        );
        assert_eq!(r["items_total"], want.len() as u64, "{name}: {r}");
        // To a Maildir: each message's file is the message, byte for byte.
        let back = format!("back-{name}");
        e.ok(&[
            "restore",
            "latest",
            "--account",
            &account,
            "--target",
            &format!("maildir:{back}"),
        ]);
        let mut got: Vec<Vec<u8>> = view(&e.path(&back))[""]
            .iter()
            .map(|m| m.0.clone().into_bytes())
            .collect();
        let mut sorted_want = want.clone();
        got.sort();
        sorted_want.sort();
        assert_eq!(got, sorted_want, "{name}");
        // To mbox again, and read back: the same messages in the same order.
        let out = format!("out-{name}");
        e.ok(&[
            "restore",
            "latest",
            "--account",
            &account,
            "--target",
            &format!("mbox:{out}"),
        ]);
        let f = fs::File::open(e.path(&format!("{out}/Inbox"))).unwrap();
        let again: Vec<Vec<u8>> = MboxReader::new(std::io::BufReader::new(f))
            .map(|m| m.unwrap().bytes)
            .collect();
        assert_eq!(again, want, "{name}");
    }
}

/// Issue 24, item 10: a message that an mbox cannot give back exactly (here its own
/// `Content-Length:` lands on the end of the quoted body, so every mbox reader takes the
/// body as it stands, `>From ` quoting included) is written, but the restore reports it
/// as failed, naming it, and exits 1; a re-run does not write it again and reports it
/// again.
#[test]
fn lossy_mbox_messages_are_reported() {
    let e = Env::new();
    init(&e);
    let md = e.path("src");
    put(
        &md,
        "",
        "cur",
        "1700000000.M1P1.mx:2,S",
        b"Subject: cl\nContent-Length: 11\n\nFrom a\nxx\n",
        1_700_000_000,
    );
    put(
        &md,
        "",
        "cur",
        "1700000001.M2P1.mx:2,S",
        &msg("fine", "x\n"),
        1_700_000_001,
    );
    e.ok(&["backup", "maildir:src", "--account", "bob@example.org"]);
    let r = e.json(1, &["restore", "latest", "--target", "mbox:out"]);
    assert_eq!(
        (r["items_restored"].as_u64(), r["items_failed"].as_u64()),
        (Some(1), Some(1)),
        "{r}"
    );
    let f = r["failures"].to_string();
    assert!(
        f.contains("1700000000.M1P1.mx") && f.contains("Inbox") && f.contains("exactly"),
        "{f}"
    );
    assert_eq!(read_mbox(&e.path("out/Inbox")).len(), 2);
    // A re-run does not write it again, and says so again.
    let before = fs::read(e.path("out/Inbox")).unwrap();
    let r = e.json(1, &["restore", "latest", "--target", "mbox:out"]);
    assert_eq!(
        (r["items_unchanged"].as_u64(), r["items_failed"].as_u64()),
        (Some(1), Some(1)),
        "{r}"
    );
    assert_eq!(fs::read(e.path("out/Inbox")).unwrap(), before);
}

/// A symbolic link planted in the target is not written through: the account fails,
/// named, and nothing lands where the link points.
#[test]
fn links_in_the_target_are_not_followed() {
    let e = Env::new();
    init(&e);
    account(&e.path("src/example.org/bob/Maildir"));
    e.ok(&["backup", "src"]);
    for scheme in ["mbox", "eml"] {
        let out = e.path(&format!("{scheme}-out"));
        let elsewhere = e.path(&format!("{scheme}-elsewhere"));
        fs::create_dir_all(&out).unwrap();
        fs::create_dir_all(&elsewhere).unwrap();
        std::os::unix::fs::symlink(&elsewhere, out.join("example.org")).unwrap();
        let r = e.json(
            1,
            &[
                "restore",
                "latest",
                "--target",
                &format!("{scheme}:{scheme}-out"),
            ],
        );
        assert_eq!(r["items_failed"], 22, "{r}");
        assert!(r["failures"].to_string().contains("symbolic link"), "{r}");
        assert_eq!(fs::read_dir(&elsewhere).unwrap().count(), 0, "{scheme}");
    }
}

/// A restore killed while writing an mbox leaves no half file under the folder's name
/// (it is written under a temporary name and renamed when complete); a re-run writes it
/// whole.
#[test]
fn a_killed_mbox_restore_leaves_no_half_file() {
    let e = Env::new();
    init(&e);
    let md = e.path("src");
    let n = 3000;
    for i in 0..n {
        put(
            &md,
            "",
            "cur",
            &format!("{}.M{i}P1.mx:2,S", 1_700_000_000 + i),
            &msg(
                &format!("bulk {i}"),
                &format!("{i} {}\n", "x".repeat(70)).repeat(50),
            ),
            1_700_000_000 + i as i64,
        );
    }
    e.ok(&["backup", "maildir:src", "--account", "bob@example.org"]);
    let mut child = e
        .cmd(&["restore", "latest", "--target", "mbox:out", "--quiet"])
        .spawn()
        .unwrap();
    let out = e.path("out");
    let started = std::time::Instant::now();
    let seen = loop {
        let names: Vec<String> = fs::read_dir(&out)
            .map(|d| {
                d.map(|x| x.unwrap().file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        if !names.is_empty() {
            break names;
        }
        assert!(started.elapsed().as_secs() < 60, "nothing written");
        std::thread::sleep(std::time::Duration::from_millis(1));
    };
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(
        !seen.iter().any(|n| n == "Inbox") && !out.join("Inbox").exists(),
        "a half mbox under the folder's name: {seen:?}"
    );
    let r = e.json(0, &["restore", "latest", "--target", "mbox:out"]);
    assert_eq!(r["items_restored"], n, "{r}");
    assert_eq!(read_mbox(&out.join("Inbox")).len(), n as usize);
}

/// Exports from a repository on object storage (MinIO): the same trees, read back the
/// same.
#[test]
fn exports_from_an_s3_repository() {
    let e = Env::s3("formats-export");
    init(&e);
    let md = e.path("src/example.org/bob/Maildir");
    account(&md);
    e.ok(&["backup", "src"]);
    for scheme in ["mbox", "eml"] {
        let r = e.json(
            0,
            &[
                "restore",
                "latest",
                "--target",
                &format!("{scheme}:{scheme}-out"),
            ],
        );
        assert_eq!(r["items_restored"], 22, "{scheme}: {r}");
    }
    e.ok(&["backup", "mbox:mbox-out"]);
    e.ok(&["restore", "latest", "--target", "maildir:back"]);
    same_view(&e.path("back/example.org/bob/Maildir"), &md);
    e.ok(&[
        "backup",
        "eml:eml-out/example.org/bob",
        "--account",
        "bob@example.org",
    ]);
    e.ok(&["restore", "latest", "--target", "maildir:back-eml"]);
    same_view(&e.path("back-eml"), &md);
}

/// Runs `cmd` to its end and gives its exit code and its peak resident memory in bytes
/// (the kernel's `ru_maxrss` of that one child, from wait4(2)).
#[allow(unsafe_code)]
fn peak_rss(mut cmd: Command) -> (i32, u64) {
    let child = cmd
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::inherit())
        .spawn()
        .unwrap();
    let pid = child.id() as libc::pid_t;
    let mut status: libc::c_int = 0;
    // SAFETY: an all-zero rusage is a valid value of the plain C struct.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `pid` is our child, not yet waited for (`child` is dropped without waiting,
    // which does not reap it); both pointers are to live locals of the right types.
    let r = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    assert_eq!(r, pid, "wait4: {}", std::io::Error::last_os_error());
    drop(child);
    let code = if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else {
        -1
    };
    (code, usage.ru_maxrss as u64 * 1024)
}

/// Whether two mbox files hold the same messages, byte for byte, read side by side one
/// message at a time; and how many.
fn same_messages(a: &Path, b: &Path) -> u64 {
    let open = |p: &Path| MboxReader::new(std::io::BufReader::new(fs::File::open(p).unwrap()));
    let (mut a, mut b) = (open(a), open(b));
    let mut n = 0;
    loop {
        match (a.next(), b.next()) {
            (None, None) => return n,
            (Some(x), Some(y)) => {
                let (x, y) = (x.unwrap(), y.unwrap());
                assert!(
                    x.bytes == y.bytes,
                    "message {n} at byte {} differs",
                    x.offset
                );
                n += 1;
            }
            (x, y) => panic!(
                "after {n} messages: {:?} against {:?}",
                x.is_some(),
                y.is_some()
            ),
        }
    }
}

/// Issue 14: "a 2 GB file ... memory stays bounded whatever the file size". An mbox of
/// MAILVAULT_BIG_MBOX_MB MiB (256 by default; made in a second of repeated lines: 60 KiB
/// messages that differ in their trace header, so they deduplicate, and one message of
/// 1/32 of the file made of lines) is backed up with a peak RSS under half its size and
/// under 400 MB: the reader holds one message, not the file. Restored to mbox, it reads
/// back as the same messages, byte for byte (compared side by side, streamed).
#[test]
fn a_large_mbox_is_backed_up_in_bounded_memory() {
    use std::io::Write;
    let mib = common::env_mib("MAILVAULT_BIG_MBOX_MB", 256) as u64;
    let size = mib << 20;
    let e = Env::new();
    init(&e);
    let file = e.path("big.mbox");
    let mut w = std::io::BufWriter::with_capacity(1 << 20, fs::File::create(&file).unwrap());
    let line = b"All work and no play makes Jack a dull boy, all work and no play.\n";
    let body: Vec<u8> = line.repeat(60 * 1024 / line.len());
    let (mut written, mut n) = (0u64, 0u64);
    let big_at = size / 3;
    while written < size {
        let head = format!(
            "From sender@example.org Tue Nov 24 07:00:00 2026\nReceived: from mx by mail id {n}\nFrom: a@example.org\nSubject: the same\n\n"
        );
        w.write_all(head.as_bytes()).unwrap();
        let mut len = head.len() as u64;
        if written < big_at && written + 2 * body.len() as u64 >= big_at {
            // The huge one: its lines vary, so that it is chunked, not deduplicated.
            for k in 0..(size / 32) / 80 {
                let l = format!("{k:>12} lines of the one big message, numbered all along\n");
                w.write_all(l.as_bytes()).unwrap();
                len += l.len() as u64;
            }
        } else {
            w.write_all(&body).unwrap();
            len += body.len() as u64;
        }
        w.write_all(b"\n").unwrap();
        written += len + 1;
        n += 1;
    }
    w.flush().unwrap();
    drop(w);
    let started = std::time::Instant::now();
    let (code, rss) = peak_rss(e.cmd(&["backup", "mbox:big.mbox", "--account", "a@b"]));
    eprintln!(
        "backup of a {mib} MiB mbox ({n} messages): {:.1} s, peak RSS {} MB",
        started.elapsed().as_secs_f64(),
        rss >> 20
    );
    assert_eq!(code, 0);
    assert!(
        rss < size / 2 && rss < 400 << 20,
        "peak RSS {} MB for a {mib} MiB mbox",
        rss >> 20
    );
    e.ok(&["restore", "latest", "--target", "mbox:out"]);
    assert_eq!(same_messages(&file, &e.path("out/Inbox")), n);
}

/// The failures of a `--json` report, as one string.
fn failures(r: &Value) -> String {
    r["failures"].to_string()
}

/// Issue 24, item 8: an mbox source takes a file only when its first line that is not
/// empty is a `From ` line without binary data; anything else is reported with its path
/// and why, and the run exits 1. Empty lines before the first `From ` line of an mbox are
/// reported with their byte range, and its messages are backed up.
#[test]
fn files_that_are_not_mbox_files_are_reported() {
    let e = Env::new();
    init(&e);
    let d = "Tue Nov 24 07:00:00 2026";
    fs::write(
        e.path("notmbox.txt"),
        format!("Subject: hello\n\nnot an mbox\n\nFrom a@b {d}\nSubject: x\n\ny\n"),
    )
    .unwrap();
    fs::write(
        e.path("junk.bin"),
        b"From \x00\x00\x00\x01\x02\xff\xfe\n\x00\x00\x7fELF\n",
    )
    .unwrap();
    for (file, why) in [("notmbox.txt", "not an mbox"), ("junk.bin", "binary")] {
        let r = e.json(
            1,
            &[
                "backup",
                &format!("mbox:{file}"),
                "--account",
                "a@example.org",
            ],
        );
        // The report is the file's one item: failed, no folder.
        assert_eq!(
            (r["folders"].as_u64(), r["items_failed"].as_u64()),
            (Some(0), Some(1)),
            "{file}: {r}"
        );
        let f = failures(&r);
        assert!(f.contains(file) && f.contains(why), "{file}: {f}");
    }

    fs::write(
        e.path("lead.mbox"),
        format!("\n\r\n\nFrom a@b {d}\nSubject: lead\n\nbody\n"),
    )
    .unwrap();
    let r = e.json(
        1,
        &["backup", "mbox:lead.mbox", "--account", "lead@example.org"],
    );
    assert_eq!(
        (r["items_total"].as_u64(), r["items_failed"].as_u64()),
        (Some(2), Some(1)),
        "the message, and the report of the empty lines: {r}"
    );
    let f = failures(&r);
    assert!(f.contains("lead.mbox") && f.contains("bytes 0..4"), "{f}");
    e.ok(&[
        "restore",
        "latest",
        "--account",
        "lead@example.org",
        "--target",
        "maildir:lead",
    ]);
    let got: Vec<String> = view(&e.path("lead"))[""]
        .iter()
        .map(|m| m.0.clone())
        .collect();
    assert_eq!(got, ["Subject: lead\n\nbody\n"]);

    // A spool: the user whose file is not an mbox is reported, the others backed up.
    fs::create_dir(e.path("spool")).unwrap();
    fs::write(
        e.path("spool/alice"),
        format!("From a@b {d}\nSubject: a\n\nx\n"),
    )
    .unwrap();
    fs::write(e.path("spool/bob"), b"PK\x03\x04\x00\x00binary\n").unwrap();
    // A link and a directory in a spool are not mail files: reported, not followed.
    std::os::unix::fs::symlink(e.path("lead.mbox"), e.path("spool/carol")).unwrap();
    fs::create_dir(e.path("spool/dave")).unwrap();
    fs::write(e.path("spool/alice.lock"), b"").unwrap();
    let r = e.json(1, &["backup", "mbox:spool", "--domain", "example.org"]);
    assert_eq!(
        (r["items_total"].as_u64(), r["items_failed"].as_u64()),
        (Some(4), Some(3)),
        "{r}"
    );
    let f = failures(&r);
    for reported in ["spool/bob", "spool/carol", "spool/dave"] {
        assert!(f.contains(reported), "{reported}: {f}");
    }
    assert!(!f.contains("alice"), "{f}");
}

/// Issue 24, item 8: an EML source reports every file it does not take (but its own
/// `.mailvault-flags` and hidden or index files), and a symbolic link to a directory is
/// reported, not followed.
#[test]
fn an_eml_source_reports_what_it_does_not_take() {
    let e = Env::new();
    init(&e);
    let tree = e.path("eml");
    fs::create_dir_all(tree.join("INBOX")).unwrap();
    fs::create_dir_all(e.path("elsewhere")).unwrap();
    fs::write(tree.join("INBOX/1.eml"), msg("taken", "x\n")).unwrap();
    fs::write(tree.join("INBOX/notes.txt"), b"a note\n").unwrap();
    fs::write(tree.join("INBOX/message.msg"), msg("not eml", "x\n")).unwrap();
    fs::write(tree.join("INBOX/.mailvault-flags"), b"").unwrap();
    fs::write(tree.join("INBOX/.hidden"), b"").unwrap();
    fs::write(tree.join("README"), b"top\n").unwrap();
    fs::write(e.path("elsewhere/2.eml"), msg("elsewhere", "y\n")).unwrap();
    std::os::unix::fs::symlink(e.path("elsewhere"), tree.join("Linked")).unwrap();
    let r = e.json(1, &["backup", "eml:eml", "--account", "a@example.org"]);
    assert_eq!(
        (r["items_total"].as_u64(), r["items_failed"].as_u64()),
        (Some(5), Some(4)),
        "one message taken, four files reported: {r}"
    );
    let f = failures(&r);
    for reported in ["notes.txt", "message.msg", "README", "Linked"] {
        assert!(f.contains(reported), "{reported}: {f}");
    }
    for quiet in [".mailvault-flags", ".hidden", "1.eml"] {
        assert!(!f.contains(quiet), "{quiet}: {f}");
    }
    assert!(f.contains("symbolic link"), "{f}");
}

/// Subjects of each mbox file given (`mailbox.mbox`) or `.eml` file (`email`), as
/// `[path, [subjects...]]`: what another reader sees of the headers.
const READ_SUBJECTS: &str = r#"
import email, email.policy, json, mailbox, sys
out = []
for path in sys.argv[1:]:
    if path.endswith(".eml"):
        with open(path, "rb") as f:
            out.append([path, [str(email.message_from_binary_file(f)["subject"])]])
    else:
        out.append([path, [str(m["subject"]) for m in mailbox.mbox(path, create=False)]])
print(json.dumps(out))
"#;

/// Issue 24, item 10: messages with header lines of their own named like mbox metadata
/// (`Status:`, `X-Keywords:`, at the end or the start of their header block, in CRLF, or
/// beside a marker of the writer's own name) and a message whose first line is a `From `
/// line go through mbox export -> mbox backup -> restore byte for byte, with their flags;
/// Python's `mailbox` sees every message's headers in the export.
#[test]
fn a_message_s_own_metadata_headers_and_from_line_come_back_exact() {
    let e = Env::new();
    init(&e);
    let md = e.path("src");
    let msgs: Vec<(&str, &[u8], &str)> = vec![
        ("own status", b"Subject: own status\nStatus: RO\nX-Keywords: mine\n\nbody 1\n", "S"),
        (
            "opens with metadata",
            b"X-Status: A\nX-Keywords: first\nSubject: opens with metadata\n\nbody 2\n",
            "RS",
        ),
        (
            "starts with From",
            b"From someone@example.org Mon Jan  1 00:00:00 2024\nSubject: starts with From\nFrom: a@example.org\n\nbody 3\nFrom here\n",
            "",
        ),
        (
            "marker of its own",
            b"Subject: marker of its own\nX-Mailvault-Added: Status\n\nbody 4\n",
            "F",
        ),
        ("crlf", b"Subject: crlf\r\nStatus: R\r\n\r\nbody 5\r\n", "S"),
        ("plain", b"Subject: plain\n\nbody 6\n", "S"),
    ];
    for (n, (_, data, flags)) in msgs.iter().enumerate() {
        put(
            &md,
            "",
            "cur",
            &format!("{}.M{n}P1.mx:2,{flags}", 1_700_000_000 + n),
            data,
            1_700_000_000 + n as i64,
        );
    }
    e.ok(&["backup", "maildir:src", "--account", "bob@example.org"]);
    let r = e.json(0, &["restore", "latest", "--target", "mbox:out"]);
    assert_eq!(r["items_restored"], msgs.len() as u64, "{r}");
    assert_eq!(r["warnings"].as_array().map_or(0, |w| w.len()), 0, "{r}");
    e.ok(&["backup", "mbox:out", "--account", "bob@example.org"]);
    e.ok(&["restore", "latest", "--target", "maildir:back"]);
    same_view(&e.path("back"), &md);

    let Some(py) = python() else { return };
    let got = run_python(&py, READ_SUBJECTS, &[&e.path("out/Inbox")]);
    let mut subjects: Vec<String> = got[0][1]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap().to_string())
        .collect();
    subjects.sort();
    let mut want: Vec<String> = msgs.iter().map(|m| m.0.to_string()).collect();
    want.sort();
    assert_eq!(subjects, want);
}

/// Issue 24, item 12: folder names map one to one in mbox and EML exports: `Inbox` beside
/// `INBOX`, and `Foo.sbd` beside `Foo/Bar`, each get a file or directory of their own
/// (never merged, never a raw OS error), which the source and Python read back as they
/// were. A place taken by something else is reported, naming the folder.
#[test]
fn export_folder_names_map_one_to_one() {
    let e = Env::new();
    init(&e);
    let md = e.path("src");
    for (dir, subject) in [
        ("", "the inbox"),
        (".Inbox", "a folder named Inbox"),
        (".Foo", "a folder named Foo"),
        (".Foo\\2esbd", "a folder named Foo.sbd"),
        (".Foo.Bar", "a folder Bar in Foo"),
    ] {
        put(
            &md,
            dir,
            "cur",
            "1700000000.M1P1.mx:2,S",
            &msg(subject, "x\n"),
            1_700_000_000,
        );
    }
    e.ok(&["backup", "maildir:src", "--account", "bob@example.org"]);

    let r = e.json(0, &["restore", "latest", "--target", "mbox:out"]);
    assert_eq!(r["items_restored"], 5, "{r}");
    let files = tree(&e.path("out"));
    assert_eq!(
        files,
        ["%49nbox", "Foo", "Foo%2Esbd", "Foo.sbd/Bar", "Inbox"]
    );
    let r = e.json(0, &["restore", "latest", "--target", "eml:eml"]);
    assert_eq!(r["items_restored"], 5, "{r}");
    let emls = tree(&e.path("eml"));
    let dirs: Vec<&str> = emls
        .iter()
        .filter(|f| f.ends_with(".eml"))
        .map(|f| f.rsplit_once('/').unwrap().0)
        .collect();
    assert_eq!(dirs, ["%49nbox", "Foo.sbd", "Foo", "Foo/Bar", "INBOX"]);

    // Read back by the sources: the same folders and messages.
    e.ok(&["backup", "mbox:out", "--account", "bob@example.org"]);
    e.ok(&["restore", "latest", "--target", "maildir:back-mbox"]);
    same_view(&e.path("back-mbox"), &md);
    e.ok(&["backup", "eml:eml", "--account", "bob@example.org"]);
    e.ok(&["restore", "latest", "--target", "maildir:back-eml"]);
    same_view(&e.path("back-eml"), &md);

    // Places taken by something else: reported with the folder, the rest restored.
    fs::create_dir_all(e.path("taken/Inbox")).unwrap();
    fs::create_dir_all(e.path("taken-eml")).unwrap();
    fs::write(e.path("taken-eml/INBOX"), b"a file\n").unwrap();
    for (scheme, out, what) in [
        ("mbox", "taken", "a directory"),
        ("eml", "taken-eml", "not a directory"),
    ] {
        let r = e.json(
            1,
            &["restore", "latest", "--target", &format!("{scheme}:{out}")],
        );
        assert_eq!(r["items_failed"], 1, "{scheme}: {r}");
        assert_eq!(r["items_restored"], 4, "{scheme}: {r}");
        let f = failures(&r);
        assert!(
            f.contains("folder INBOX") && f.contains(what) && !f.contains("os error"),
            "{scheme}: {f}"
        );
    }

    let Some(py) = python() else { return };
    let mut paths: Vec<PathBuf> = files.iter().map(|f| e.path("out").join(f)).collect();
    paths.extend(
        emls.iter()
            .filter(|f| f.ends_with(".eml"))
            .map(|f| e.path("eml").join(f)),
    );
    let refs: Vec<&Path> = paths.iter().map(|p| p.as_path()).collect();
    let got = run_python(&py, READ_SUBJECTS, &refs);
    let seen: Vec<(String, Vec<String>)> = got
        .as_array()
        .unwrap()
        .iter()
        .map(|x| {
            let p = Path::new(x[0].as_str().unwrap());
            let rel = p
                .strip_prefix(e.dir.path())
                .unwrap()
                .to_string_lossy()
                .into_owned();
            let s = x[1]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| s.as_str().unwrap().to_string())
                .collect();
            (rel, s)
        })
        .map(|(p, s)| (p.rsplit_once('/').map_or(p.clone(), |x| x.0.to_string()), s))
        .collect();
    let want = |s: &str| vec![s.to_string()];
    assert_eq!(
        seen,
        [
            ("out".to_string(), want("a folder named Inbox")),
            ("out".to_string(), want("a folder named Foo")),
            ("out".to_string(), want("a folder named Foo.sbd")),
            ("out/Foo.sbd".to_string(), want("a folder Bar in Foo")),
            ("out".to_string(), want("the inbox")),
            ("eml/%49nbox".to_string(), want("a folder named Inbox")),
            ("eml/Foo.sbd".to_string(), want("a folder named Foo.sbd")),
            ("eml/Foo".to_string(), want("a folder named Foo")),
            ("eml/Foo/Bar".to_string(), want("a folder Bar in Foo")),
            ("eml/INBOX".to_string(), want("the inbox")),
        ]
    );
}

/// Issue 24, item 12: two folders never land in one file, even where the file system
/// gives two names one file (here a hard link; a case-insensitive file system does the
/// same with `Foo` and `foo`): the second folder is refused, naming both, and nothing of
/// it is appended to the first's file.
#[test]
fn two_folders_never_land_in_one_file() {
    let e = Env::new();
    init(&e);
    let md = e.path("src");
    for (dir, subject) in [("", "inbox"), (".Sent", "sent"), (".Trash", "trash")] {
        put(
            &md,
            dir,
            "cur",
            "1700000000.M1P1.mx:2,S",
            &msg(subject, "x\n"),
            1_700_000_000,
        );
    }
    e.ok(&["backup", "maildir:src", "--account", "bob@example.org"]);
    fs::create_dir_all(e.path("out")).unwrap();
    fs::write(e.path("out/Sent"), b"").unwrap();
    fs::hard_link(e.path("out/Sent"), e.path("out/Trash")).unwrap();
    let r = e.json(1, &["restore", "latest", "--target", "mbox:out"]);
    assert_eq!(
        (r["items_restored"].as_u64(), r["items_failed"].as_u64()),
        (Some(2), Some(1)),
        "{r}"
    );
    let f = failures(&r);
    assert!(f.contains("never merged"), "{f}");
    assert_eq!(read_mbox(&e.path("out/Sent")).len(), 1);
}
