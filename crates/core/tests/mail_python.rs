#![allow(clippy::unwrap_used)]
//! The mbox codec against an independent implementation: Python's `mailbox` writes mbox
//! files (flags through `mboxMessage.set_flags`) that our reader reads with the same
//! messages, flags and dates; Python's `mailbox` and `email` read files our writer wrote
//! and find the same bytes, flags, keywords and dates (compared on Python's side).
//! Without python3 the tests are skipped, except under `MAILVAULT_CI`, where they fail.

use std::path::Path;
use std::process::Command;

use mailvault_core::mail::{MboxReader, MboxWriter, Meta};

fn python3() -> bool {
    let there = Command::new("python3")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        there || std::env::var_os("MAILVAULT_CI").is_none(),
        "python3 is missing: run scripts/setup.sh (Debian package python3)"
    );
    if !there {
        eprintln!("skipped: python3 is missing (Debian package python3)");
    }
    there
}

/// Runs `script` with `args`; its stdout, or a panic with its stderr.
fn run_python(script: &str, args: &[&Path]) -> String {
    let out = Command::new("python3")
        .arg("-c")
        .arg(script)
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "python3 failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Python writes an mbox with `mailbox.mbox`, then reads it back and prints, per message,
/// what a reader must find: the bytes (hex, `Status:`/`X-Status:` removed and its mboxo
/// `>From ` quoting undone), the flags as IMAP names, and the From line's date as Unix
/// seconds.
const PYTHON_WRITES: &str = r#"
import calendar, json, mailbox, re, sys, time
path = sys.argv[1]
box = mailbox.mbox(path)
cases = [
    (b"Subject: plain\n\nhello\n", "", ("alice@example.org", 1795503600)),
    (b"Subject: seen\nTo: b@example.org\n\nFrom the start\nmore\n", "RO", ("bob", 1795503601)),
    (b"Subject: all\n\nbody\n\nFrom x Tue Nov 24 07:00:00 2026\n", "RODFAT", (None, 0)),
    (b"Subject: answered flagged\n\nno final newline", "AF", ("c@d", 951782400)),
    (b"Subject: nul\n\nbin\x00ary\n", "D", ("d", 1)),
]
for body, flags, (sender, t) in cases:
    m = mailbox.mboxMessage(body)
    m.set_flags(flags)
    if sender is not None:
        m.set_from(sender, time.gmtime(t))
    else:
        m.set_from("MAILER-DAEMON", time.gmtime(t))
    box.add(m)
box.flush()
box.close()
names = {"R": "\\Seen", "A": "\\Answered", "F": "\\Flagged", "D": "\\Deleted", "T": "\\Draft"}
order = ["\\Seen", "\\Answered", "\\Flagged", "\\Deleted", "\\Draft"]
out = []
box = mailbox.mbox(path)
for key in box.keys():
    msg = box.get_message(key)
    raw = box.get_bytes(key)
    head, sep, rest = raw.partition(b"\n\n")
    head = b"\n".join(l for l in head.split(b"\n") if not re.match(rb"(?i)(x-)?status:", l))
    raw = head + sep + rest
    raw = re.sub(rb"(?m)^>From ", b"From ", raw)
    flags = [n for n in order if any(names.get(c) == n for c in msg.get_flags())]
    date = calendar.timegm(time.strptime(msg.get_from().split(None, 1)[1], "%a %b %d %H:%M:%S %Y"))
    out.append({"bytes": raw.hex(), "flags": flags, "date": date, "sender": msg.get_from().split()[0]})
print(json.dumps(out))
"#;

#[test]
fn python_mailbox_writes_we_read() {
    if !python3() {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let path = t.path().join("python.mbox");
    let expected: serde_json::Value =
        serde_json::from_str(&run_python(PYTHON_WRITES, &[&path])).unwrap();
    let expected = expected.as_array().unwrap();
    let file = std::fs::read(&path).unwrap();
    let got: Vec<_> = MboxReader::new(&file[..])
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(got.len(), expected.len());
    assert_eq!(got.len(), 5);
    for (g, e) in got.iter().zip(expected) {
        let want = hex::decode(e["bytes"].as_str().unwrap()).unwrap();
        assert_eq!(
            String::from_utf8_lossy(&g.bytes),
            String::from_utf8_lossy(&want)
        );
        assert_eq!(g.bytes, want);
        let flags: Vec<&str> = e["flags"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f.as_str().unwrap())
            .collect();
        assert_eq!(g.meta.flags, flags);
        assert!(g.meta.keywords.is_empty());
        assert_eq!(g.meta.internal_date, e["date"].as_i64());
        assert_eq!(g.sender.as_deref(), e["sender"].as_str());
    }
    // The third message: every flag; its body's `From ` lines stayed in it.
    assert_eq!(got[2].meta.flags.len(), 5);
    assert!(got[2]
        .bytes
        .ends_with(b"\n\nFrom x Tue Nov 24 07:00:00 2026\n"));
}

/// Python reads the mbox our writer wrote (argv 1) and checks each message against the
/// expectations (argv 2, JSON): bytes (after removing the metadata headers the writer
/// adds and undoing mboxrd quoting, which `mailbox` leaves to its caller), flags from
/// `get_flags()`, keywords from `X-Keywords:`, the date from `get_from()`, and that
/// `email` parses the message to the same Subject. Prints "ok N".
const PYTHON_READS: &str = r#"
import calendar, email, email.policy, json, mailbox, re, sys, time
box = mailbox.mbox(sys.argv[1])
want = json.load(open(sys.argv[2]))
keys = box.keys()
assert len(keys) == len(want), (len(keys), len(want))
letters = {"\\Seen": "R", "\\Answered": "A", "\\Flagged": "F", "\\Deleted": "D", "\\Draft": "T"}
for i, (key, w) in enumerate(zip(keys, want)):
    msg = box.get_message(key)
    raw = box.get_bytes(key)
    head, sep, rest = raw.partition(b"\n\n")
    lines = head.split(b"\n")
    meta = re.compile(rb"(?i)(status|x-status|x-keywords|x-mailvault-no-final-newline):")
    kept = [l for l in lines if not meta.match(l)]
    no_nl = any(l.lower().startswith(b"x-mailvault-no-final-newline:") for l in lines)
    raw = b"\n".join(kept) + sep + rest
    raw = re.sub(rb"(?m)^>(>*From )", rb"\1", raw)
    if no_nl:
        assert raw.endswith(b"\n"), i
        raw = raw[:-1]
    orig = bytes.fromhex(w["bytes"])
    assert raw == orig, (i, raw, orig)
    flags = set(msg.get_flags()) - {"O"}
    assert flags == {letters[f] for f in w["flags"]}, (i, msg.get_flags(), w["flags"])
    kw = msg.get("X-Keywords")
    assert (kw.split() if kw else []) == w["keywords"], (i, kw, w["keywords"])
    date = calendar.timegm(time.strptime(msg.get_from().split(None, 1)[1], "%a %b %d %H:%M:%S %Y"))
    assert date == w["date"], (i, msg.get_from(), w["date"])
    parsed = email.message_from_bytes(orig, policy=email.policy.compat32)
    assert parsed.get("Subject") == msg.get("Subject"), (i, parsed.get("Subject"), msg.get("Subject"))
print("ok", len(keys))
"#;

/// Bytes, flags, keywords, internal date.
type Case = (&'static [u8], Vec<&'static str>, Vec<&'static str>, i64);

#[test]
fn our_mbox_is_read_by_python_mailbox_and_email() {
    if !python3() {
        return;
    }
    let cases: Vec<Case> =
        vec![
        (b"Subject: one\n\nhello\n", vec![], vec![], 1795503600),
        (
            b"Subject: quoted\nTo: b@example.org\n\nFrom the start\n>From a reply\n>>From deeper\n",
            vec!["\\Seen", "\\Answered"],
            vec!["$Forwarded", "Junk"],
            1795503601,
        ),
        (
            b"Subject: every flag\n\nbody\n",
            vec!["\\Seen", "\\Answered", "\\Flagged", "\\Deleted", "\\Draft"],
            vec!["$Label1"],
            0,
        ),
        (b"Subject: no final newline\n\nlast line", vec!["\\Flagged"], vec![], 951782400),
        (b"Subject: nul\n\nbin\0ary\n\n\n", vec!["\\Draft"], vec![], 4102444800),
        (b"Subject: empty body\n\n", vec![], vec![], 86400),
    ];
    let mut w = MboxWriter::new(Vec::new());
    let mut want = Vec::new();
    for (bytes, flags, keywords, date) in &cases {
        let meta = Meta {
            flags: flags.iter().map(|s| s.to_string()).collect(),
            keywords: keywords.iter().map(|s| s.to_string()).collect(),
            internal_date: Some(*date),
        };
        assert!(!w.write(bytes, &meta, None).unwrap().lossy);
        want.push(serde_json::json!({
            "bytes": hex::encode(bytes),
            "flags": flags,
            "keywords": keywords,
            "date": date,
        }));
    }
    let t = tempfile::tempdir().unwrap();
    let mbox = t.path().join("ours.mbox");
    let json = t.path().join("want.json");
    let file = w.finish().unwrap();
    std::fs::write(&mbox, &file).unwrap();
    std::fs::write(&json, serde_json::to_vec(&want).unwrap()).unwrap();
    assert_eq!(
        run_python(PYTHON_READS, &[&mbox, &json]).trim(),
        format!("ok {}", cases.len())
    );
    // And our reader gives them all back.
    let back: Vec<_> = MboxReader::new(&file[..])
        .collect::<Result<_, _>>()
        .unwrap();
    for (b, (bytes, flags, keywords, date)) in back.iter().zip(&cases) {
        assert_eq!(&b.bytes, bytes);
        assert_eq!(b.meta.flags, *flags);
        assert_eq!(b.meta.keywords, *keywords);
        assert_eq!(b.meta.internal_date, Some(*date));
    }
}

/// Python reads an EML export laid out by our codecs (argv 1: the tree; argv 2: the
/// expectations, JSON: folder path, subject, date, flags per message): `email` parses
/// each file, names sort by date, the sidecar names every file. Prints "ok N".
const PYTHON_READS_EML: &str = r##"
import email, email.policy, json, os, sys
root, want = sys.argv[1], json.load(open(sys.argv[2]))
seen = 0
for folder, msgs in want.items():
    d = os.path.join(root, folder)
    names = sorted(n for n in os.listdir(d) if n.endswith(".eml"))
    assert len(names) == len(msgs), (folder, names)
    by_date = sorted(msgs, key=lambda m: m["date"])
    side = {}
    for line in open(os.path.join(d, ".mailvault-flags"), encoding="ascii"):
        if line.startswith("#"):
            continue
        name, date, *flags = line.split()
        side[name] = (int(date), flags)
    for name, m in zip(names, by_date):
        with open(os.path.join(d, name), "rb") as f:
            raw = f.read()
        assert raw == bytes.fromhex(m["bytes"]), (name, raw)
        parsed = email.message_from_bytes(raw, policy=email.policy.default)
        assert parsed["Subject"] == m["subject"], (name, parsed["Subject"], m["subject"])
        assert side[name] == (m["date"], m["flags"]), (name, side[name], m)
        seen += 1
print("ok", seen)
"##;

#[test]
fn our_eml_export_is_read_by_python_email() {
    use mailvault_core::mail::layout::{folder_to_path, path_to_folder, Tree};
    use mailvault_core::mail::{EmlNames, Sidecar, SidecarEntry};

    if !python3() {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("eml");
    let msgs: [(&str, &str, i64, &[&str]); 5] = [
        ("INBOX", "first", 1795503600, &["\\Seen"]),
        (
            "INBOX",
            "second, earlier",
            1795500000,
            &["\\Seen", "\\Flagged", "$Label1"],
        ),
        ("INBOX", "second, earlier", 1795500000, &[]),
        ("Archive/2023", "Grüße", 1700000000, &["\\Answered"]),
        ("../escape", "stays inside", 1, &["\\Deleted", "\\Draft"]),
    ];
    let mut want: std::collections::BTreeMap<String, Vec<serde_json::Value>> = Default::default();
    let mut trees: std::collections::BTreeMap<String, (EmlNames, Sidecar)> = Default::default();
    for (folder, subject, date, flags) in msgs {
        let bytes = format!("Subject: {subject}\r\nFrom: a@example.org\r\n\r\nbody\r\n");
        let bytes = if subject.is_ascii() {
            bytes.into_bytes()
        } else {
            b"Subject: =?utf-8?q?Gr=C3=BC=C3=9Fe?=\r\n\r\nbody\r\n".to_vec()
        };
        let rel = folder_to_path(folder, Tree::Eml);
        assert_eq!(path_to_folder(&rel, Tree::Eml).as_deref(), Some(folder));
        let dir = root.join(&rel);
        assert!(dir.starts_with(&root));
        std::fs::create_dir_all(&dir).unwrap();
        let (names, sidecar) = trees.entry(rel.to_string_lossy().into_owned()).or_default();
        let name = names.name(date, &bytes);
        std::fs::write(dir.join(&name), &bytes).unwrap();
        let meta = Meta::from_imap(flags, Some(date));
        sidecar.entries.push(SidecarEntry {
            name: name.clone().into_bytes(),
            meta: meta.clone(),
        });
        want.entry(rel.to_string_lossy().into_owned())
            .or_default()
            .push(serde_json::json!({
                "bytes": hex::encode(&bytes),
                "subject": subject,
                "date": date,
                "flags": meta.imap_list(),
            }));
    }
    for (rel, (_, sidecar)) in &trees {
        std::fs::write(root.join(rel).join(".mailvault-flags"), sidecar.to_bytes()).unwrap();
    }
    let json = t.path().join("want.json");
    std::fs::write(&json, serde_json::to_vec(&want).unwrap()).unwrap();
    assert_eq!(
        run_python(PYTHON_READS_EML, &[&root, &json]).trim(),
        format!("ok {}", msgs.len())
    );
    assert!(root.join("%2E.").join("escape").is_dir());
}

/// Python's `email.header` encodes a subject in every charset of the WHATWG encoding
/// standard that Python has a codec for (and a few words written by hand: unpadded base64,
/// Q with underscores, words split mid-character across lines), prints each header with
/// its own decoding, and `ls`'s header summary must decode it to the same text.
const PYTHON_HEADERS: &str = r#"
import json
from email.header import Header, decode_header, make_header
cases = [
    ("utf-8", "Grüße aus Köln ✓"),
    ("ibm866", "Привет"), ("iso-8859-2", "Zażółć gęślą"), ("iso-8859-3", "Ġħ"),
    ("iso-8859-4", "Ķīļ"), ("iso-8859-5", "Привет"), ("iso-8859-6", "مرحبا"),
    ("iso-8859-7", "Καλημέρα"), ("iso-8859-8", "שלום"), ("iso-8859-10", "Ŋŧ"),
    ("iso-8859-13", "Ąčę"), ("iso-8859-14", "Ḃḟ"), ("iso-8859-15", "€uro"),
    ("iso-8859-16", "Șț"), ("koi8-r", "Привет"), ("koi8-u", "Привіт"),
    ("macintosh", "Café"), ("windows-874", "สวัสดี"), ("windows-1250", "Zażółć"),
    ("windows-1251", "Привет"), ("windows-1252", "Café “quoted”"), ("windows-1253", "Καλημέρα"),
    ("windows-1254", "Günaydın"), ("windows-1255", "שלום"), ("windows-1256", "مرحبا"),
    ("windows-1257", "Ąčę"), ("windows-1258", "Xin chào"), ("x-mac-cyrillic", "Привет"),
    ("gbk", "你好世界"), ("gb2312", "你好世界"), ("gb18030", "你好世界𠀀"), ("big5", "你好世界"),
    ("euc-jp", "こんにちは世界"), ("iso-2022-jp", "こんにちは世界"), ("shift_jis", "こんにちは世界"),
    ("euc-kr", "안녕하세요"),
]
py_codec = {"ibm866": "cp866", "x-mac-cyrillic": "mac_cyrillic", "macintosh": "mac_roman",
            "windows-874": "cp874"}
out = []
for charset, text in cases:
    # The charset label as a mail carries it, the bytes as Python's codec makes them.
    raw = text.encode(py_codec.get(charset, charset))
    import base64
    h = "=?%s?B?%s?=" % (charset, base64.b64encode(raw).decode())
    # email.header splits the word; a label Python's codecs lack (windows-874) is
    # decoded with the codec of the same encoding.
    (data, cs), = decode_header(h)
    out.append((h, data.decode(py_codec.get(cs, cs))))
for h in [
    "=?utf-8?B?eHB0bw?=",          # unpadded base64: 'xpto'
    "=?utf-8?B?eA?=",              # 'x'
    "=?UTF-8?b?w6k?= and =?utf-8?B?w6nDqQ?=",
    "=?iso-8859-1?Q?caf=E9_cr=E8me?=",
    "=?utf-8?B?5L2g5aW9?= =?utf-8?B?5LiW55WM?=",
    str(Header("Ünïcödé " * 12, "utf-8").encode()),
    str(Header("日本語の件名です" * 6, "iso-2022-jp").encode()),
]:
    out.append((h, str(make_header(decode_header(h)))))
print(json.dumps(out))
"#;

#[test]
fn encoded_words_decode_as_pythons_email_header_does() {
    if !python3() {
        return;
    }
    let cases: Vec<(String, String)> =
        serde_json::from_str(&run_python(PYTHON_HEADERS, &[])).unwrap();
    assert!(cases.len() > 40, "{}", cases.len());
    let mut wrong = Vec::new();
    for (header, expected) in &cases {
        let msg = format!("From: a@example.org\nSubject: {header}\n\nbody\n");
        let (_, subject, _) = mailvault_core::mail::summary::header_summary(msg.as_bytes());
        // The summary is cut at 160 characters; compare what it keeps.
        let expected: String = expected.trim().chars().take(160).collect();
        if subject.trim_end_matches('…') != expected {
            wrong.push(format!(
                "{header}\n  python: {expected:?}\n  ours:   {subject:?}"
            ));
        }
    }
    assert!(
        wrong.is_empty(),
        "{} differ:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
}
