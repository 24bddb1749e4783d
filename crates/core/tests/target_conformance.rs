//! The restore targets' conformance suite (issue 14): one snapshot with nested and
//! non-ASCII folders, system flags, keywords (two folders giving the same letter different
//! names), internal dates, a message in `new/` and subscriptions, restored through the one
//! restore pipeline into every target; what each target gives back, read through the
//! target's own means (the Maildir files; an IMAP client on a real Dovecot), is the same
//! mail: bytes, flags, keywords, internal dates, folders and subscriptions. A second run
//! adds nothing. A new target joins by adding one [`Case`].
//! Fails (does not skip) without Dovecot unless MAILVAULT_SKIP_DOVECOT=1.
#![allow(clippy::unwrap_used)]

mod common;

use common::{imap_restore_opts, init_repo, maildir_backup, put_msg};
use mailvault_core::imap::names::parse_subscriptions;
use mailvault_core::ops::restore::imap as imap_restore;
use mailvault_core::ops::restore::{restore, RestoreOptions, Selection};
use mailvault_core::report::NoProgress;
use mailvault_core::Repository;
use mailvault_imap::maildir_flags::{maildir_to_imap, KeywordTable};
use mailvault_imap::testing::DovecotServer;
use mailvault_imap::{FetchQuery, SeqSet};
use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

const ACCOUNT: &str = "bob@example.org";

/// A message as every target must give it back: bytes (LF line ends), flags and keywords
/// (sorted), internal date (seconds).
type Msg = (Vec<u8>, Vec<String>, i64);

/// What a target holds: folders (by name) and their messages, and the subscriptions.
#[derive(Debug, PartialEq, Eq, Default)]
struct Mail {
    folders: BTreeMap<String, BTreeSet<Msg>>,
    subscriptions: BTreeSet<String>,
}

/// The Maildir++ directories of the source and their folder names.
const FOLDERS: [(&str, &str); 4] = [
    ("", "INBOX"),
    (".Archive", "Archive"),
    (".Archive.2023", "Archive/2023"),
    (".Entw&APw-rfe", "Entwürfe"),
];

fn body(folder: &str, n: usize) -> Vec<u8> {
    format!(
        "From: Alice <alice@example.org>\nTo: bob@example.org\nSubject: {folder} {n}\n\
         Date: Mon, 1 Jan 2024 10:00:00 +0000\nMessage-ID: <{n}.{}@example.org>\n\n\
         Message {n} of {folder}.\nGr\u{fc}\u{df}e\n",
        folder.replace('/', ".")
    )
    .into_bytes()
}

/// The source account: per folder, messages with these Maildir flags (lower case:
/// keywords of the folder's `dovecot-keywords`), one in `new/`, each its own date.
fn source(maildir: &Path) {
    let flags = ["S", "RS", "FS", "DS", "PS", "Sa", "Sab", "T", ""];
    let mut date = 1_700_000_000;
    for (dir, name) in FOLDERS {
        for (n, f) in flags.iter().enumerate() {
            date += 3_600;
            let (sub, file) = if f.is_empty() {
                ("new", format!("{date}.M{n}P1.mail"))
            } else {
                ("cur", format!("{date}.M{n}P1.mail:2,{f}"))
            };
            put_msg(maildir, dir, sub, &file, &body(name, n), date);
        }
        let at = maildir.join(dir);
        // The same letter means different keywords in different folders.
        let keywords = if dir.is_empty() {
            "0 $Label1\n1 Work\n"
        } else {
            "0 Work\n1 $Junk\n"
        };
        fs::write(at.join("dovecot-keywords"), keywords).unwrap();
        if !dir.is_empty() {
            fs::write(at.join("maildirfolder"), "").unwrap();
        }
    }
    fs::write(
        maildir.join("subscriptions"),
        "V\t2\n\nArchive\nArchive\t2023\nEntw&APw-rfe\n",
    )
    .unwrap();
}

/// What the source holds, as every target must give it back.
fn expected(maildir: &Path) -> Mail {
    let mut mail = maildir_mail(maildir);
    // `new/` is not a flag a target keeps; the rest is as read.
    mail.subscriptions = ["Archive", "Archive/2023", "Entwürfe"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    mail
}

/// Sorted flags and keywords of a Maildir file name, through its folder's keywords.
fn maildir_flags(name: &str, keywords: &KeywordTable) -> Vec<String> {
    let letters = name.split_once(":2,").map(|(_, f)| f).unwrap_or("");
    let mut flags = maildir_to_imap(letters, keywords).flags;
    flags.sort();
    flags
}

/// The mail of a Maildir, read from its files.
fn maildir_mail(maildir: &Path) -> Mail {
    let mut mail = Mail::default();
    let dirs: BTreeSet<String> = fs::read_dir(maildir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.starts_with('.'))
        .collect();
    let known: BTreeSet<String> = FOLDERS.iter().skip(1).map(|(d, _)| d.to_string()).collect();
    assert_eq!(dirs, known, "the folders of {}", maildir.display());
    for (dir, name) in FOLDERS {
        let at = maildir.join(dir);
        let keywords = fs::read_to_string(at.join("dovecot-keywords")).unwrap_or_default();
        let keywords = KeywordTable::parse(&keywords);
        let mut msgs = BTreeSet::new();
        for sub in ["cur", "new"] {
            for e in fs::read_dir(at.join(sub)).unwrap() {
                let e = e.unwrap();
                let file = e.file_name().into_string().unwrap();
                let m = e.metadata().unwrap();
                let data = fs::read(e.path()).unwrap();
                msgs.insert((data, maildir_flags(&file, &keywords), m.mtime()));
            }
        }
        mail.folders.insert(name.to_string(), msgs);
    }
    if let Ok(data) = fs::read(maildir.join("subscriptions")) {
        mail.subscriptions = parse_subscriptions(&data).into_iter().collect();
    }
    mail
}

/// A restore target under test.
trait Case {
    fn name(&self) -> &str;
    /// Restores the latest snapshot into the target: (messages written, messages found
    /// already there).
    fn restore(&self, repo: &Repository) -> (u64, u64);
    /// What the target holds, read through its own means.
    fn read(&self) -> Mail;
}

struct MaildirCase {
    root: PathBuf,
}

impl Case for MaildirCase {
    fn name(&self) -> &str {
        "maildir"
    }
    fn restore(&self, repo: &Repository) -> (u64, u64) {
        let opts = RestoreOptions {
            select: Selection {
                snapshot: "latest".into(),
                ..Default::default()
            },
            target: self.root.clone(),
            jobs: 2,
            ..Default::default()
        };
        let r = restore(repo, &opts, &NoProgress).unwrap();
        assert!(r.failures.is_empty(), "{:?}", r.failures);
        (r.items_restored, r.items_unchanged)
    }
    fn read(&self) -> Mail {
        maildir_mail(&self.root.join("example.org/bob/Maildir"))
    }
}

struct DovecotCase {
    server: DovecotServer,
    journal: PathBuf,
}

impl Case for DovecotCase {
    fn name(&self) -> &str {
        "dovecot"
    }
    fn restore(&self, repo: &Repository) -> (u64, u64) {
        let mut opts = imap_restore_opts(&self.server, &self.journal);
        opts.batch_messages = 4;
        let r = imap_restore(repo, &opts, &NoProgress).unwrap();
        assert!(r.failures.is_empty(), "{:?}", r.failures);
        (r.items_appended, r.items_journaled + r.items_existing)
    }
    fn read(&self) -> Mail {
        let mut s = self
            .server
            .client()
            .login(&self.server.master(ACCOUNT))
            .unwrap();
        let mut mail = Mail::default();
        let listed = s.list().unwrap();
        for f in &listed {
            if f.subscribed {
                mail.subscriptions.insert(f.name.clone());
            }
            s.examine(&f.name).unwrap();
            let mut msgs = BTreeSet::new();
            s.fetch::<mailvault_imap::Error, _>(&SeqSet::all(), &FetchQuery::full(), |m| {
                let data = m.body.unwrap_or_default();
                let lf = String::from_utf8_lossy(data).replace("\r\n", "\n");
                let mut flags: Vec<String> = (m.flags.unwrap_or_default().iter())
                    .filter(|f| !f.eq_ignore_ascii_case("\\Recent"))
                    .map(|f| f.to_string())
                    .collect();
                flags.sort();
                let date = m.internal_date.map(|d| d.secs).unwrap_or(0);
                msgs.insert((lf.into_bytes(), flags, date));
                Ok(())
            })
            .unwrap();
            s.unselect().unwrap();
            // Folders the server makes on its own (none here) hold nothing.
            if !msgs.is_empty() || FOLDERS.iter().any(|(_, n)| *n == f.name) {
                mail.folders.insert(f.name.clone(), msgs);
            }
        }
        for sub in s.lsub().unwrap() {
            mail.subscriptions.insert(sub.name);
        }
        let _ = s.logout();
        mail
    }
}

#[test]
fn every_target_gives_back_the_same_mail() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    let maildir = src.join("example.org/bob/Maildir");
    source(&maildir);
    let want = expected(&maildir);
    let total: u64 = want.folders.values().map(|m| m.len() as u64).sum();
    let mut repo = init_repo(&dir.path().join("repo"));
    maildir_backup(&mut repo, &src, vec![]);

    let mut cases: Vec<Box<dyn Case>> = vec![Box::new(MaildirCase {
        root: dir.path().join("maildir"),
    })];
    match DovecotServer::start_or_skip().expect("dovecot") {
        Some(server) => cases.push(Box::new(DovecotCase {
            server,
            journal: dir.path().join("journal"),
        })),
        None => eprintln!("no Dovecot: only the Maildir target is run"),
    }
    for case in &cases {
        let name = case.name();
        assert_eq!(case.restore(&repo), (total, 0), "{name}: first run");
        assert_eq!(case.read(), want, "{name}: what it gives back");
        assert_eq!(case.restore(&repo), (0, total), "{name}: a second run");
        assert_eq!(case.read(), want, "{name}: after a second run");
    }
}
