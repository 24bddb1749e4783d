#![allow(clippy::unwrap_used)]
//! The mbox codec against a real Dovecot: Dovecot's `imap` (pre-authenticated on stdin,
//! no server) opens an mbox our writer wrote and FETCHes the same bytes, flags, keywords
//! and INTERNALDATEs; after Dovecot has rewritten the file (its `X-UID:`, `X-IMAPbase:`
//! and a STORE), our reader reads the same messages with the new flags.
//! Dovecot missing: the test fails, unless `MAILVAULT_SKIP_DOVECOT=1`.

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use mailvault_core::mail::{MboxReader, MboxWriter, Meta};
use mailvault_imap::InternalDate;

fn imap_binary() -> Option<PathBuf> {
    let found = [
        "/usr/lib/dovecot",
        "/usr/libexec/dovecot",
        "/usr/local/libexec/dovecot",
    ]
    .iter()
    .map(|d| Path::new(d).join("imap"))
    .find(|p| p.is_file());
    if found.is_none() {
        assert!(
            std::env::var("MAILVAULT_SKIP_DOVECOT").is_ok_and(|v| v == "1"),
            "Dovecot's imap binary is missing: run scripts/setup.sh (Debian package dovecot-imapd)"
        );
        eprintln!("skipped: Dovecot's imap binary is missing");
    }
    found
}

/// uid and gid of `nobody`, for Dovecot's `mail_uid` when the test runs as root (Dovecot
/// refuses mail access as root).
fn nobody() -> (u32, u32) {
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap();
    let line = passwd
        .lines()
        .find(|l| l.starts_with("nobody:"))
        .expect("a nobody user");
    let f: Vec<&str> = line.split(':').collect();
    (f[2].parse().unwrap(), f[3].parse().unwrap())
}

/// Runs IMAP `commands` in a pre-authenticated Dovecot session on the mbox `dir/inbox`;
/// the session's output.
fn dovecot_session(imap: &Path, dir: &Path, commands: &str) -> Vec<u8> {
    let conf = dir.join("dovecot.conf");
    std::fs::write(
        &conf,
        "log_path = /dev/stderr\nssl = no\nmbox_lock_timeout = 10 secs\n",
    )
    .unwrap();
    let mail = dir.join("mail");
    let mut cmd = Command::new(imap);
    cmd.env_clear()
        .env("HOME", dir)
        .env(
            "MAIL",
            format!(
                "mbox:{}:INBOX={}",
                mail.display(),
                mail.join("inbox").display()
            ),
        )
        .arg("-c")
        .arg(&conf);
    if rustix::process::getuid().is_root() {
        let (uid, gid) = nobody();
        cmd.env("USER", "nobody").args([
            "-o",
            &format!("mail_uid={uid}"),
            "-o",
            &format!("mail_gid={gid}"),
        ]);
    } else {
        cmd.env(
            "USER",
            std::env::var("USER").unwrap_or_else(|_| "user".into()),
        );
    }
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(commands.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "dovecot imap failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// One message of a FETCH: its sequence number, flags, internal date and `BODY[]`.
#[derive(Debug, Default)]
struct Fetched {
    flags: Vec<String>,
    date: Option<i64>,
    body: Option<Vec<u8>>,
}

/// Parses the untagged FETCH responses of `out` (FLAGS, INTERNALDATE, BODY[] literal).
fn fetches(out: &[u8]) -> Vec<Fetched> {
    let mut msgs: Vec<Fetched> = Vec::new();
    let mut p = 0;
    while let Some(i) = find(&out[p..], b" FETCH (") {
        let start = p + i;
        let line_start = out[..start]
            .iter()
            .rposition(|&b| b == b'\n')
            .map_or(0, |i| i + 1);
        let seq: usize = std::str::from_utf8(&out[line_start + 2..start])
            .unwrap()
            .parse()
            .unwrap();
        if msgs.len() < seq {
            msgs.resize_with(seq, Fetched::default);
        }
        let m = &mut msgs[seq - 1];
        let mut q = start + 8;
        loop {
            let rest = &out[q..];
            if rest.starts_with(b"FLAGS (") {
                let e = find(rest, b")").unwrap();
                m.flags = std::str::from_utf8(&rest[7..e])
                    .unwrap()
                    .split_whitespace()
                    .map(String::from)
                    .collect();
                q += e + 1;
            } else if rest.starts_with(b"INTERNALDATE \"") {
                let e = find(&rest[14..], b"\"").unwrap() + 14;
                let d = InternalDate::parse_imap(std::str::from_utf8(&rest[14..e]).unwrap());
                m.date = Some(d.unwrap().secs);
                q += e + 1;
            } else if rest.starts_with(b"BODY[] {") {
                let e = find(rest, b"}\r\n").unwrap();
                let n: usize = std::str::from_utf8(&rest[8..e]).unwrap().parse().unwrap();
                m.body = Some(rest[e + 3..e + 3 + n].to_vec());
                q += e + 3 + n;
            } else if rest.starts_with(b" ") {
                q += 1;
            } else {
                break;
            }
        }
        p = q;
    }
    msgs
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

fn crlf(b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    for &c in b {
        if c == b'\n' {
            out.push(b'\r');
        }
        out.push(c);
    }
    out
}

#[test]
fn dovecot_reads_our_mbox_and_we_read_dovecots() {
    let Some(imap) = imap_binary() else {
        return;
    };
    let t = tempfile::tempdir().unwrap();
    let dir = t.path();
    let mail = dir.join("mail");
    std::fs::create_dir_all(&mail).unwrap();
    let msgs: [(&[u8], &[&str], i64); 4] = [
        (
            b"Subject: one\nTo: b@example.org\n\nhello\n",
            &["\\Seen"],
            1795503600,
        ),
        (
            b"Subject: two\n\nbody\n\n-- \nsig\n",
            &["\\Seen", "\\Answered", "\\Flagged", "$Label1", "Junk"],
            1700000000,
        ),
        (b"Subject: three\n\nx\n", &["\\Draft", "Junk"], 951782400),
        (b"Subject: four\n\ny\n", &[], 86400),
    ];
    let mut w = MboxWriter::new(Vec::new())
        .declare_keywords(1795503600, &["$Label1", "Junk"])
        .unwrap();
    for (bytes, flags, date) in msgs {
        let meta = Meta::from_imap(flags, Some(date));
        assert!(!w.write(bytes, &meta, None).unwrap().lossy);
    }
    std::fs::write(mail.join("inbox"), w.finish().unwrap()).unwrap();
    for p in [dir, &mail, &mail.join("inbox")] {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o777)).unwrap();
    }

    let out = dovecot_session(
        &imap,
        dir,
        "a select INBOX\r\nb fetch 1:* (flags internaldate body.peek[])\r\nc logout\r\n",
    );
    let got = fetches(&out);
    assert_eq!(got.len(), msgs.len(), "{}", String::from_utf8_lossy(&out));
    for (g, (bytes, flags, date)) in got.iter().zip(msgs) {
        let mut want: Vec<&str> = flags.to_vec();
        let mut have: Vec<&str> = g.flags.iter().map(String::as_str).collect();
        want.sort_unstable();
        have.sort_unstable();
        assert_eq!(have, want);
        assert_eq!(g.date, Some(date));
        assert_eq!(g.body.as_deref(), Some(&crlf(bytes)[..]));
    }

    // Dovecot rewrites the file: its headers, and the flags STOREs change.
    dovecot_session(
        &imap,
        dir,
        "a select INBOX\r\nb store 4 +flags (\\Deleted Junk)\r\n\
         c store 1 -flags (\\Seen)\r\nd logout\r\n",
    );
    let file = std::fs::read(mail.join("inbox")).unwrap();
    assert!(
        find(&file, b"X-UID: ").is_some(),
        "{}",
        String::from_utf8_lossy(&file)
    );
    let back: Vec<_> = MboxReader::new(&file[..])
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(back.len(), msgs.len());
    let stored: [&[&str]; 4] = [&[], msgs[1].1, msgs[2].1, &["\\Deleted", "Junk"]];
    for ((b, (bytes, _, date)), flags) in back.iter().zip(msgs).zip(stored) {
        assert_eq!(b.bytes, bytes, "{}", String::from_utf8_lossy(&b.bytes));
        assert_eq!(b.meta, Meta::from_imap(flags, Some(date)));
    }
}
