//! `ls --deleted` and `undelete`: a Maildir store backed up three times while messages are
//! deleted, moved to another folder, re-flagged, deleted and delivered again, and deleted
//! from one folder while a copy stays in another. Only the deleted ones are listed and
//! come back, each once, byte for byte with its last flags and its mtime, to a Maildir and
//! into a real Dovecot (judged by what Dovecot answers to FETCH); a second undelete adds
//! nothing. The Dovecot test fails (does not skip) without Dovecot unless
//! MAILVAULT_SKIP_DOVECOT=1.
#![allow(clippy::unwrap_used)]

mod common;

use common::{files, Env};
use mailvault_imap::testing::DovecotServer;
use mailvault_imap::{FetchQuery, SearchKey, SeqSet};
use serde_json::Value;
use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

const ACCOUNT: &str = "bob@example.org";

/// A message: its file's folder directory (`""` INBOX, `.Archive`), `cur`/`new`, name,
/// bytes and mtime.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Msg {
    dir: &'static str,
    sub: &'static str,
    name: String,
    data: Vec<u8>,
    mtime: i64,
}

fn body(n: u32, subject: &str) -> Vec<u8> {
    format!(
        "From: Alice Example <alice@example.org>\nTo: {ACCOUNT}\nSubject: {subject}\n\
         Date: Tue, 14 Nov 2023 22:13:{n:02} +0000\nMessage-ID: <m{n}@example.org>\n\n\
         Body of message {n}.\nSecond line.\n"
    )
    .into_bytes()
}

fn msg(dir: &'static str, sub: &'static str, name: &str, n: u32) -> Msg {
    Msg {
        dir,
        sub,
        name: name.into(),
        data: body(n, &format!("message {n}")),
        mtime: 1_700_000_000 + i64::from(n) * 3600,
    }
}

/// The account's Maildir below a mail root.
fn maildir(root: &Path) -> PathBuf {
    root.join("example.org/bob/Maildir")
}

fn path(root: &Path, m: &Msg) -> PathBuf {
    maildir(root).join(m.dir).join(m.sub).join(&m.name)
}

fn put(root: &Path, m: &Msg) {
    let p = path(root, m);
    fs::write(&p, &m.data).unwrap();
    let t = SystemTime::UNIX_EPOCH + Duration::from_secs(m.mtime as u64);
    let f = fs::File::options().write(true).open(&p).unwrap();
    f.set_times(fs::FileTimes::new().set_modified(t).set_accessed(t))
        .unwrap();
}

fn rm(root: &Path, m: &Msg) {
    fs::remove_file(path(root, m)).unwrap();
}

/// `m` renamed (a new name, another folder or both), as a mail server does.
fn mv(root: &Path, m: &Msg, dir: &'static str, name: &str) -> Msg {
    let to = Msg {
        dir,
        name: name.into(),
        ..m.clone()
    };
    fs::rename(path(root, m), path(root, &to)).unwrap();
    to
}

/// The store, its three backups, and what the test expects.
struct History {
    e: Env,
    src: PathBuf,
    /// Snapshot ids, oldest first.
    snaps: Vec<String>,
    /// The deleted messages as the newest snapshot that held them has them, and the
    /// first and last snapshot (indexes into `snaps`) that held them.
    deleted: Vec<(Msg, usize, usize)>,
}

/// The history of the module's documentation.
fn history(e: Env) -> History {
    let src = e.path("src");
    let md = maildir(&src);
    for d in ["", ".Archive", ".Lists"] {
        for sub in ["cur", "new", "tmp"] {
            fs::create_dir_all(md.join(d).join(sub)).unwrap();
        }
    }
    fs::write(md.join("dovecot-keywords"), "0 $Label1\n").unwrap();
    // Another folder, another table: its `a` is another keyword.
    fs::write(md.join(".Lists/dovecot-keywords"), "0 Project-X\n").unwrap();
    fs::write(md.join(".Archive/maildirfolder"), "").unwrap();
    fs::write(md.join(".Lists/maildirfolder"), "").unwrap();
    let m1 = Msg {
        // A subject with a terminal control sequence: `ls` shows it escaped.
        data: body(1, "hello \u{1b}[2J there"),
        ..msg("", "cur", "1700000001.M1P1.host:2,S", 1)
    };
    let m2 = msg("", "cur", "1700000002.M2P1.host:2,S", 2);
    let m3 = msg("", "cur", "1700000003.M3P1.host:2,S", 3);
    let m4 = msg("", "cur", "1700000004.M4P1.host:2,", 4);
    let m5 = msg("", "cur", "1700000005.M5P1.host:2,S", 5);
    let m6 = msg("", "cur", "1700000006.M6P1.host:2,S", 6);
    let m7 = msg("", "new", "1700000007.M7P1.host", 7);
    let a1 = msg(".Archive", "cur", "1700000011.M11P1.host:2,S", 11);
    // In a folder that does not change until it is deleted: the second snapshot shares
    // the first's list of it.
    let l1 = msg(".Lists", "cur", "1700000031.M31P1.host:2,RSa", 31);
    // One message in two folders.
    let c8 = msg("", "cur", "1700000008.M8P1.host:2,S", 8);
    let c8a = Msg {
        dir: ".Archive",
        name: "1700000018.M18P1.host:2,S".into(),
        ..c8.clone()
    };
    for m in [&m1, &m2, &m3, &m4, &m5, &m6, &m7, &a1, &l1, &c8, &c8a] {
        put(&src, m);
    }
    e.ok(&["init"]);
    let backup = |e: &Env| {
        // Snapshot times a second apart at least, for the --since test.
        std::thread::sleep(Duration::from_millis(1100));
        e.ok(&["backup", &format!("maildir:{}", src.display()), "-q"]);
    };
    backup(&e); // S0
    rm(&src, &m1); // deleted
    mv(&src, &m2, ".Archive", &m2.name); // moved
    mv(&src, &m3, "", "1700000003.M3P1.host:2,RS"); // re-flagged
    let m5 = mv(&src, &m5, "", "1700000005.M5P1.host:2,FSa"); // re-flagged, deleted next
    rm(&src, &m6); // deleted, delivered again next
    backup(&e); // S1
    rm(&src, &m5);
    rm(&src, &a1);
    rm(&src, &m7);
    rm(&src, &l1);
    let m6b = Msg {
        name: "1700000026.M26P1.host:2,S".into(),
        ..m6.clone()
    };
    put(&src, &m6b);
    rm(&src, &c8a); // the INBOX copy stays
    backup(&e); // S2, the latest
    let snaps: Vec<String> = e
        .json(0, &["snapshots"])
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(snaps.len(), 3);
    History {
        e,
        src,
        snaps,
        deleted: vec![(m1, 0, 0), (m5, 0, 1), (m7, 0, 1), (a1, 0, 1), (l1, 0, 1)],
    }
}

impl History {
    fn new() -> History {
        history(Env::new())
    }

    /// `ls --deleted --json` with `extra`: (folder, key, flags, first, last) of each, sorted.
    fn listed(&self, extra: &[&str]) -> Vec<(String, String, String, String, String)> {
        let mut args = vec!["ls", "--deleted", "--account", ACCOUNT];
        args.extend_from_slice(extra);
        let v = self.e.json(0, &args);
        let mut out: Vec<_> = v["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| {
                let s = |k: &str| m[k].as_str().unwrap().to_string();
                (
                    s("folder"),
                    s("key"),
                    s("flags"),
                    s("first_snapshot"),
                    s("last_snapshot"),
                )
            })
            .collect();
        out.sort();
        out
    }

    /// What `listed` should give for the deleted messages `which` (by their index in
    /// `deleted`), with `first` no older than snapshot `from`.
    fn expected(
        &self,
        which: &[usize],
        from: usize,
    ) -> Vec<(String, String, String, String, String)> {
        let mut out: Vec<_> = which
            .iter()
            .map(|&i| {
                let (m, first, last) = &self.deleted[i];
                let (key, flags) = match m.name.split_once(":2,") {
                    Some((k, f)) => (k.to_string(), f.to_string()),
                    None => (m.name.clone(), String::new()),
                };
                let folder = m.dir.strip_prefix('.').unwrap_or("INBOX");
                (
                    folder.to_string(),
                    key,
                    flags,
                    self.snaps[(*first).max(from)].clone(),
                    self.snaps[*last].clone(),
                )
            })
            .collect();
        out.sort();
        out
    }

    fn undelete(&self, code: i32, target: &Path, extra: &[&str]) -> Value {
        let t = format!("maildir:{}", target.display());
        let mut args = vec!["undelete", "--account", ACCOUNT, "--target", &t, "-q"];
        args.extend_from_slice(extra);
        self.e.json(code, &args)
    }
}

/// Message files below a mail root: relative path -> (bytes, mtime).
fn messages(root: &Path) -> BTreeMap<String, (Vec<u8>, i64)> {
    files(root)
        .into_iter()
        .filter(|(k, _)| k.contains("/cur/") || k.contains("/new/"))
        .collect()
}

fn relative(m: &Msg, dir: &str) -> String {
    let mut p = PathBuf::from("example.org/bob/Maildir");
    p.push(dir);
    p.push(m.sub);
    p.push(&m.name);
    p.display().to_string()
}

#[test]
fn ls_deleted_lists_exactly_the_deleted_messages() {
    let h = History::new();
    assert_eq!(h.listed(&[]), h.expected(&[0, 1, 2, 3, 4], 0));
    assert_eq!(h.listed(&["--folder", "Archive"]), h.expected(&[3], 0));
    assert_eq!(
        h.listed(&["--within", "1d"]),
        h.expected(&[0, 1, 2, 3, 4], 0)
    );
    // A window that starts with the second snapshot: the message only the first held is
    // not in it.
    let snaps = h.e.json(0, &["snapshots"]);
    let t = snaps[1]["time"].as_i64().unwrap();
    let since = jiff::Timestamp::from_second(t).unwrap().to_string();
    assert_eq!(h.listed(&["--since", &since]), h.expected(&[1, 2, 3, 4], 1));
    let v = h.e.json(0, &["ls", "--deleted", "--account", ACCOUNT]);
    assert_eq!(v["latest"], h.snaps[2].as_str());
    assert_eq!(v["compared"], serde_json::json!([h.snaps[0], h.snaps[1]]));

    // The text listing: date, from, subject (escaped), folder, first and last snapshot.
    let out = h.e.ok(&["ls", "--deleted", "--account", ACCOUNT]);
    assert!(!out.contains('\u{1b}'), "{out}");
    let line = out.lines().find(|l| l.contains("hello")).unwrap();
    for part in [
        "2023-11-14 23:13:20",
        "Alice Example",
        "hello \\x1b[2J there",
        "INBOX",
        &h.snaps[0][..8],
    ] {
        assert!(line.contains(part), "{part:?} not in {line:?}");
    }
    assert!(
        out.contains(&format!("deleted from {ACCOUNT}: 5 messages")),
        "{out}"
    );

    // No snapshot argument with --deleted; an unknown account is an error naming it.
    h.e.expect(2, &["ls", "latest", "--deleted", "--account", ACCOUNT]);
    let err =
        h.e.expect(2, &["ls", "--deleted", "--account", "eve@example.org"]);
    assert!(err.contains("eve@example.org"), "{err}");
}

#[test]
fn undelete_to_a_maildir_brings_back_the_deleted_ones_once() {
    let h = History::new();
    let want: BTreeMap<String, (Vec<u8>, i64)> = h
        .deleted
        .iter()
        .map(|(m, _, _)| (relative(m, m.dir), (m.data.clone(), m.mtime)))
        .collect();

    // A dry run writes nothing.
    let target = h.e.path("t");
    let v = h.undelete(0, &target, &["--dry-run"]);
    assert_eq!(v["deleted"]["messages"].as_array().unwrap().len(), 5);
    assert!(v["restore"].is_null());
    assert!(!target.exists());

    // Into an empty directory: exactly the deleted messages, byte for byte, with the
    // last version's name (flags), place (`new/`) and mtime.
    let v = h.undelete(0, &target, &[]);
    let r = &v["restore"];
    assert_eq!(r["items_total"], 5, "{v}");
    assert_eq!(r["items_restored"], 5, "{v}");
    assert_eq!(messages(&target), want);
    // The keyword letter `a` of the re-flagged message keeps its meaning.
    let kw = fs::read_to_string(maildir(&target).join("dovecot-keywords")).unwrap();
    assert!(kw.contains("0 $Label1"), "{kw}");
    assert!(maildir(&target).join(".Archive/maildirfolder").exists());

    // Again: nothing added, every message already there.
    let v = h.undelete(0, &target, &[]);
    assert_eq!(v["restore"]["items_restored"], 0, "{v}");
    assert_eq!(v["restore"]["items_unchanged"], 5, "{v}");
    assert_eq!(messages(&target), want);

    // Into the live store: the deleted messages come back beside what is there, which
    // is left as it was.
    let live = h.e.path("live");
    common::copy_tree(&h.src, &live);
    let before = messages(&live);
    let v = h.undelete(0, &live, &[]);
    assert_eq!(v["restore"]["items_restored"], 5, "{v}");
    let mut expect = before.clone();
    expect.extend(want.clone());
    assert_eq!(messages(&live), expect);
    let v = h.undelete(0, &live, &[]);
    assert_eq!(v["restore"]["items_restored"], 0, "{v}");
    assert_eq!(messages(&live), expect);

    // --into-folder: all in one folder, whose keyword table gets both folders'
    // keywords: the letter `a` of the one from Lists becomes `b`. --folder: only the
    // messages of that folder.
    let into = h.e.path("into");
    let v = h.undelete(0, &into, &["--into-folder", "Restored"]);
    assert_eq!(v["restore"]["items_restored"], 5, "{v}");
    let got = messages(&into);
    let want_into: BTreeMap<_, _> = h
        .deleted
        .iter()
        .map(|(m, _, _)| {
            let m = Msg {
                name: m.name.replace(":2,RSa", ":2,RSb"),
                ..m.clone()
            };
            (relative(&m, ".Restored"), (m.data.clone(), m.mtime))
        })
        .collect();
    assert_eq!(got, want_into);
    let kw = fs::read_to_string(maildir(&into).join(".Restored/dovecot-keywords")).unwrap();
    assert_eq!(kw, "0 $Label1\n1 Project-X\n");
    let only = h.e.path("only");
    let v = h.undelete(0, &only, &["--folder", "Archive"]);
    assert_eq!(v["restore"]["items_restored"], 1, "{v}");
    let a1 = &h.deleted[3].0;
    assert_eq!(
        messages(&only).into_keys().collect::<Vec<_>>(),
        vec![relative(a1, ".Archive")]
    );
}

/// (folder, body with LF line endings, sorted flags) of every message of the account's
/// folders, as Dovecot answers FETCH.
fn server_state(server: &DovecotServer) -> Vec<(String, Vec<u8>, Vec<String>)> {
    let mut s = server.client().login(&server.user(ACCOUNT)).unwrap();
    let mut out = Vec::new();
    let names: Vec<String> = s.list().unwrap().into_iter().map(|f| f.name).collect();
    for folder in ["INBOX", "Archive", "Lists", "Restored"] {
        if !names.iter().any(|n| n == folder) {
            continue;
        }
        s.examine(folder).unwrap();
        let uids = s.uid_search(&SearchKey::All).unwrap();
        let q = FetchQuery {
            flags: true,
            body: true,
            ..FetchQuery::default()
        };
        s.fetch::<mailvault_imap::Error, _>(&SeqSet::from_ids(&uids), &q, |m| {
            let mut flags: Vec<String> = (m.flags.unwrap_or_default().iter())
                .filter(|f| **f != "\\Recent")
                .map(|f| f.to_string())
                .collect();
            flags.sort();
            let body = mailvault_imap::from_crlf(m.body.unwrap_or_default());
            out.push((folder.to_string(), body.into_owned(), flags));
            Ok(())
        })
        .unwrap();
    }
    out.sort();
    out
}

#[test]
fn undelete_into_dovecot_appends_the_deleted_ones_once() {
    let Some(server) = DovecotServer::start_or_skip().expect("dovecot") else {
        return;
    };
    let h = History::new();
    fs::write(h.e.path("imap-pass"), server.master_password()).unwrap();
    let url = format!("imap://127.0.0.1:{}", server.port());
    let pass = h.e.path("imap-pass").display().to_string();
    let imap = [
        "--target",
        &url,
        "--imap-master-user",
        server.master_user(),
        "--imap-password-file",
        &pass,
        "-q",
    ];
    // The server holds the account as the latest snapshot has it.
    let mut args = vec!["restore", "latest"];
    args.extend_from_slice(&imap);
    h.e.ok(&args);
    let before = server_state(&server);
    assert_eq!(before.len(), 5, "{before:?}");

    let mut args = vec!["undelete", "--account", ACCOUNT];
    args.extend_from_slice(&imap);
    let v = h.e.json(0, &args);
    let r = &v["restore"];
    assert_eq!(r["items_total"], 5, "{v}");
    assert_eq!(r["items_appended"], 5, "{v}");
    let after = server_state(&server);
    // What Dovecot has now is what it had and the deleted messages, with the flags and
    // keywords of their last version (one from new/ has none).
    let flags = |f: &[&str]| f.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let (m1, m5, m7, a1, l1) = (
        &h.deleted[0].0,
        &h.deleted[1].0,
        &h.deleted[2].0,
        &h.deleted[3].0,
        &h.deleted[4].0,
    );
    let mut want = before.clone();
    want.extend([
        ("INBOX".to_string(), m1.data.clone(), flags(&["\\Seen"])),
        (
            "INBOX".to_string(),
            m5.data.clone(),
            flags(&["$Label1", "\\Flagged", "\\Seen"]),
        ),
        ("INBOX".to_string(), m7.data.clone(), Vec::new()),
        ("Archive".to_string(), a1.data.clone(), flags(&["\\Seen"])),
        (
            "Lists".to_string(),
            l1.data.clone(),
            flags(&["Project-X", "\\Answered", "\\Seen"]),
        ),
    ]);
    want.sort();
    assert_eq!(after, want);

    // Again: the journal says they are there, and the server still has them.
    let v = h.e.json(0, &args);
    assert_eq!(v["restore"]["items_appended"], 0, "{v}");
    assert_eq!(v["restore"]["items_journaled"], 5, "{v}");
    assert_eq!(server_state(&server), want);

    // --into-folder: a new folder gets them all, each with its own flags and keywords
    // (the keyword letters of each source folder's own table); again, nothing added.
    args.extend_from_slice(&["--into-folder", "Restored"]);
    let v = h.e.json(0, &args);
    assert_eq!(v["restore"]["items_appended"], 5, "{v}");
    let mut want_into = want.clone();
    want_into.extend(
        (want.iter())
            .filter(|m| !before.contains(m))
            .map(|(_, body, flags)| ("Restored".to_string(), body.clone(), flags.clone())),
    );
    want_into.sort();
    assert_eq!(server_state(&server), want_into);
    let v = h.e.json(0, &args);
    assert_eq!(v["restore"]["items_appended"], 0, "{v}");
    assert_eq!(server_state(&server), want_into);
}

/// The same on object storage (the test MinIO): the listing and a Maildir undelete.
#[test]
fn undelete_from_s3() {
    let h = history(Env::s3("undelete"));
    assert_eq!(h.listed(&[]), h.expected(&[0, 1, 2, 3, 4], 0));
    let target = h.e.path("t");
    let v = h.undelete(0, &target, &[]);
    assert_eq!(v["restore"]["items_restored"], 5, "{v}");
    let want: BTreeMap<String, (Vec<u8>, i64)> = h
        .deleted
        .iter()
        .map(|(m, _, _)| (relative(m, m.dir), (m.data.clone(), m.mtime)))
        .collect();
    assert_eq!(messages(&target), want);
}

/// A snapshot file that cannot be read is reported (exit code 1) and the others are
/// still compared: only what that snapshot alone held is missing from the list.
#[test]
fn a_damaged_snapshot_is_reported_and_the_others_compared() {
    let h = History::new();
    let f = h.e.repo().join("snapshots").join(&h.snaps[0]);
    let b = fs::read(&f).unwrap();
    fs::write(&f, &b[..b.len() / 2]).unwrap();
    let v = h.e.json(1, &["ls", "--deleted", "--account", ACCOUNT]);
    let failures = v["failures"].as_array().unwrap();
    assert_eq!(failures.len(), 1, "{v}");
    assert!(
        failures[0]["item"].as_str().unwrap().contains(&h.snaps[0]),
        "{v}"
    );
    let mut listed: Vec<String> = v["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["key"].as_str().unwrap().to_string())
        .collect();
    let mut want: Vec<String> = (h.expected(&[1, 2, 3, 4], 1).into_iter())
        .map(|m| m.1)
        .collect();
    listed.sort();
    want.sort();
    assert_eq!(listed, want);
    let target = h.e.path("t");
    let v = h.undelete(1, &target, &[]);
    assert_eq!(v["restore"]["items_restored"], 4, "{v}");
}
