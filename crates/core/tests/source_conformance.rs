//! The conformance suite of the [`Source`] trait: one small mail set (folders, a nested
//! and a non-ASCII one among them, flags, keywords, internal dates, subscriptions) is put
//! into each kind of source, backed up through the one pipeline
//! ([`mailvault_core::ops::backup::run`]), and every snapshot must hold the same
//! messages (bytes), flags, keywords, internal dates, folders and subscriptions; then an
//! incremental backup with nothing changed must read nothing and store no message again.
//!
//! A new source joins by adding one test: put [`mail_set`] into it, build the source,
//! call [`conforms`] ([`MemorySource`] is the smallest example). IMAP runs against a real Dovecot (fails without one unless
//! MAILVAULT_SKIP_DOVECOT=1).
#![allow(clippy::unwrap_used)]

mod common;

use common::{backup_opts, imap_backup_opts, init_repo, put_msg, test_run};
use mailvault_core::imap::names::{
    imap_folder_name, maildir_dir, parse_subscriptions, subscriptions_file,
};
use mailvault_core::mail::maildir::split_name;
use mailvault_core::model::assemble::assemble;
use mailvault_core::ops::backup::run;
use mailvault_core::repo::tree::{AccountTree, RootTree};
use mailvault_core::report::NoProgress;
use mailvault_core::source::imap::ImapSource;
use mailvault_core::source::maildir::MaildirSource;
use mailvault_core::source::{
    Account, AccountListing, Failures, Folder, FolderWriter, MessageId, MessageMeta, NewMessage,
    Parallelism, Source,
};
use mailvault_core::Repository;
use mailvault_imap::maildir_flags::{imap_to_maildir, maildir_to_imap, KeywordTable};
use mailvault_imap::testing::DovecotServer;
use mailvault_imap::{to_crlf, AppendMsg, InternalDate};
use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

const ACCOUNT: &str = "bob@example.org";
const REL_PATH: &str = "example.org/bob/Maildir";
const FOLDERS: [&str; 4] = ["INBOX", "Sent", "Archive/2023", "Entwürfe"];
const SUBSCRIBED: [&str; 3] = ["Archive/2023", "Entwürfe", "Sent"];

/// One message of the mail set.
struct Mail {
    folder: &'static str,
    flags: Vec<&'static str>,
    date: i64,
    data: Vec<u8>,
}

/// The mail set: 12 messages over the four folders, every system flag but `\Deleted`,
/// three keywords (one with upper case), distinct dates, an 8-bit header, a message
/// without a body.
fn mail_set() -> Vec<Mail> {
    let flag_sets: [&[&'static str]; 6] = [
        &[],
        &["\\Seen"],
        &["\\Seen", "\\Answered"],
        &["\\Flagged", "$Label1"],
        &["\\Draft", "Work"],
        &["\\Seen", "$Forwarded", "Work", "$Label1"],
    ];
    (0..12)
        .map(|i| {
            let folder = FOLDERS[i % FOLDERS.len()];
            let data = match i {
                7 => "Subject: caf\u{e9} \u{fc}ber\nFrom: a@example.org\n\nOl\u{e9}\n"
                    .as_bytes()
                    .to_vec(),
                9 => b"Subject: no body\nFrom: a@example.org\n\n".to_vec(),
                _ => format!(
                    "From: Alice <alice@example.org>\nTo: {ACCOUNT}\nSubject: message {i}\nMessage-ID: <m{i}@example.org>\n\n{}\n",
                    "text ".repeat(20 * i + 1)
                )
                .into_bytes(),
            };
            Mail {
                folder,
                flags: flag_sets[i % flag_sets.len()].to_vec(),
                date: 1_600_000_000 + i as i64 * 86_407,
                data,
            }
        })
        .collect()
}

/// A message as the suite compares it: bytes, flags and keywords (lower case), date.
type Msg = (Vec<u8>, BTreeSet<String>, i64);

/// A snapshot as the suite compares it.
#[derive(Debug, PartialEq)]
struct View {
    /// (account, rel path) -> folder name -> messages.
    accounts: BTreeMap<(String, String), BTreeMap<String, BTreeSet<Msg>>>,
    /// (account) -> subscribed folders.
    subscriptions: BTreeMap<String, BTreeSet<String>>,
}

fn lower(flags: &[impl AsRef<str>]) -> BTreeSet<String> {
    flags.iter().map(|f| f.as_ref().to_lowercase()).collect()
}

/// What every snapshot of [`mail_set`] must show.
fn expected() -> View {
    let mut folders: BTreeMap<String, BTreeSet<Msg>> = FOLDERS
        .iter()
        .map(|f| (f.to_string(), BTreeSet::new()))
        .collect();
    for m in mail_set() {
        let entry = (m.data.clone(), lower(&m.flags), m.date);
        folders.get_mut(m.folder).unwrap().insert(entry);
    }
    View {
        accounts: [((ACCOUNT.to_string(), REL_PATH.to_string()), folders)].into(),
        subscriptions: [(
            ACCOUNT.to_string(),
            SUBSCRIBED.iter().map(|s| s.to_string()).collect(),
        )]
        .into(),
    }
}

/// Reads snapshot `id` back as a [`View`].
fn view(repo: &Repository, id: &str) -> View {
    let snap = repo.find_snapshot(id).unwrap();
    let root: RootTree = repo.read_tree(&snap.root).unwrap();
    let mut v = View {
        accounts: BTreeMap::new(),
        subscriptions: BTreeMap::new(),
    };
    for a in &root.accounts {
        let t: AccountTree = repo.read_tree(&a.tree).unwrap();
        let mut folders = BTreeMap::new();
        for f in &t.folders {
            let file = |name: &[u8]| {
                f.files
                    .iter()
                    .find(|e| e.name == name)
                    .map(|e| assemble(repo, &e.content, e.size, None).unwrap())
            };
            let kw = file(b"dovecot-keywords")
                .map(|d| KeywordTable::parse(&String::from_utf8_lossy(&d)))
                .unwrap_or_default();
            if f.dir.is_empty() {
                let subs = file(b"subscriptions").unwrap_or_default();
                v.subscriptions.insert(
                    a.name.clone(),
                    parse_subscriptions(&subs)
                        .iter()
                        .map(|s| imap_folder_name(s))
                        .collect(),
                );
            }
            let mut msgs = BTreeSet::new();
            for c in &f.chunks {
                for e in repo.read_chunk(c).unwrap() {
                    let data = assemble(repo, &e.content, e.size, Some(&e.hash)).unwrap();
                    let letters = String::from_utf8_lossy(split_name(&e.name).1).to_string();
                    let mapped = maildir_to_imap(&letters, &kw);
                    assert!(mapped.unmapped.is_empty(), "{:?}", mapped.unmapped);
                    msgs.insert((data, lower(&mapped.flags), e.mtime.secs));
                }
            }
            folders.insert(imap_folder_name(&f.name), msgs);
        }
        let rel = String::from_utf8_lossy(&a.rel_path).to_string();
        v.accounts.insert((a.name.clone(), rel), folders);
    }
    v
}

/// Backs `source` up twice into a new repository in `dir` through the one pipeline and
/// checks both snapshots against [`expected`]; the second (nothing changed) must read
/// nothing and store no message again.
fn conforms<S: Source>(source: &S, dir: &Path)
where
    S::Error: std::fmt::Debug,
{
    let mut repo = init_repo(&dir.join("repo"));
    let opts = test_run();
    let first = run(&mut repo, source, &opts, mailvault_core::now(), &NoProgress).unwrap();
    assert!(first.failures.is_empty(), "{:?}", first.failures);
    let n = mail_set().len() as u64;
    assert_eq!(
        (
            first.accounts,
            first.folders,
            first.items_total,
            first.items_new
        ),
        (1, FOLDERS.len() as u64, n, n)
    );
    assert_eq!(view(&repo, &first.snapshot), expected());

    let second = run(&mut repo, source, &opts, mailvault_core::now(), &NoProgress).unwrap();
    assert!(second.failures.is_empty(), "{:?}", second.failures);
    assert_eq!(second.parent.as_deref(), Some(&first.snapshot[..]));
    assert_eq!(
        (second.items_new, second.items_unchanged, second.bytes_read),
        (0, n, 0),
        "an incremental with nothing changed read something: {second:?}"
    );
    assert_eq!(view(&repo, &second.snapshot), expected());
}

/// The mail set as a Maildir store: `root/example.org/bob/Maildir`, Maildir++ folders
/// (`.Entw&APw-rfe`), flag and keyword letters in the names, `dovecot-keywords`,
/// `subscriptions`, mtime = internal date.
fn write_maildir(root: &Path) {
    let md = root.join(REL_PATH);
    let mut tables: BTreeMap<&str, KeywordTable> = BTreeMap::new();
    for (i, m) in mail_set().into_iter().enumerate() {
        let table = tables.entry(m.folder).or_default();
        let letters = imap_to_maildir(&m.flags, table).letters;
        let dir = String::from_utf8(maildir_dir(m.folder)).unwrap();
        let name = format!("{}.M{i}P1.conformance:2,{letters}", m.date);
        put_msg(&md, &dir, "cur", &name, &m.data, m.date);
    }
    for (folder, table) in tables {
        let dir = md.join(String::from_utf8(maildir_dir(folder)).unwrap());
        fs::write(dir.join("dovecot-keywords"), table.to_file_string()).unwrap();
    }
    let subs: Vec<String> = SUBSCRIBED.iter().map(|s| s.to_string()).collect();
    fs::write(md.join("subscriptions"), subscriptions_file(&subs)).unwrap();
}

#[test]
fn maildir_source_conforms() {
    let t = tempfile::tempdir().unwrap();
    let store = t.path().join("vmail");
    write_maildir(&store);
    let source = MaildirSource::new(&backup_opts(&store, vec![])).unwrap();
    conforms(&source, t.path());
}

#[test]
fn imap_source_conforms() {
    let Some(server) = DovecotServer::start_or_skip().expect("dovecot") else {
        return;
    };
    let mut s = server.client().login(&server.user(ACCOUNT)).unwrap();
    for f in FOLDERS.iter().filter(|f| **f != "INBOX") {
        s.create(f, None).unwrap();
    }
    for f in SUBSCRIBED {
        s.subscribe(f).unwrap();
    }
    for m in mail_set() {
        let crlf = to_crlf(&m.data);
        let msg = AppendMsg {
            flags: m.flags.iter().map(|f| f.to_string()).collect(),
            internal_date: Some(InternalDate::from((m.date, 0))),
            data: &crlf,
        };
        s.append(m.folder, &msg).unwrap();
    }
    s.logout().unwrap();
    let t = tempfile::tempdir().unwrap();
    let opts = imap_backup_opts(&server, vec![ACCOUNT.into()]);
    let source = ImapSource::new(&opts).unwrap();
    conforms(&source, t.path());
}

/// A source written against the trait alone, as the mbox and EML sources are: in
/// memory, messages given by flags and keywords under its own keys
/// ([`MessageId::Key`]), a sync state file, subscriptions; unchanged messages found
/// among the parent folder's entries.
struct MemorySource;

impl Source for MemorySource {
    type Session = ();
    type Error = mailvault_core::Error;

    fn label(&self) -> String {
        "memory:conformance".into()
    }

    fn parallelism(&self) -> Parallelism {
        Parallelism::Pool { jobs: 2 }
    }

    fn accounts(&self) -> mailvault_core::Result<Vec<Account>> {
        Ok(vec![Account {
            name: ACCOUNT.into(),
            rel_path: REL_PATH.into(),
            path: PathBuf::new(),
        }])
    }

    fn open(&self, _account: &Account) -> mailvault_core::Result<()> {
        Ok(())
    }

    fn folders(
        &self,
        _account: &Account,
        _session: &mut (),
        _failures: &Failures,
    ) -> mailvault_core::Result<AccountListing> {
        Ok(AccountListing {
            folders: (FOLDERS.iter())
                .map(|f| Folder {
                    name: f.to_string(),
                    dir: maildir_dir(f),
                    path: PathBuf::new(),
                })
                .collect(),
            dirs: Vec::new(),
            subscriptions: Some(SUBSCRIBED.iter().map(|s| s.to_string()).collect()),
        })
    }

    fn state_file(&self) -> Option<&'static [u8]> {
        Some(b"memory-state")
    }

    fn backup_folder(
        &self,
        _session: &mut (),
        _account: &Account,
        folder: &Folder,
        out: &mut FolderWriter<'_>,
    ) -> mailvault_core::Result<()> {
        let mut known = BTreeMap::new();
        if out.parent_state().as_deref() == Some(b"v1") {
            out.resume_keywords();
            known = (out.parent_entries()?.into_iter())
                .map(|e| (e.key.clone(), e))
                .collect();
        }
        for (i, m) in mail_set().iter().enumerate() {
            if m.folder != folder.name {
                continue;
            }
            let key = format!("{}.mem{i}", m.date).into_bytes();
            match known.remove(&key) {
                Some(e) => out.unchanged(e),
                None => out.message(NewMessage {
                    data: &m.data,
                    read: m.data.len() as u64,
                    meta: MessageMeta::Flags {
                        flags: &m.flags,
                        internal_date: m.date,
                        id: MessageId::Key(key),
                    },
                })?,
            }
        }
        out.set_state(b"v1".to_vec())
    }
}

#[test]
fn a_source_written_against_the_trait_alone_conforms() {
    let t = tempfile::tempdir().unwrap();
    conforms(&MemorySource, t.path());
}

/// The trees are the same as before the sources moved onto the trait: an incremental of
/// `common::small_store` on `fixtures/repo-v2` (made on 2026-11-23 by the Maildir backup
/// of that time, from `/tmp/.tmpwWjU1a/vmail`) reads no message and gives every folder
/// the very message chunks (so entries, names, keys, dates, modes, owners) and
/// directories of the old snapshot; only the folder files, made again now, differ in
/// mtime.
#[test]
fn maildir_trees_match_a_repository_made_before_the_trait() {
    use common::backup;
    use common::{open_repo, small_store};
    let t = tempfile::tempdir().unwrap();
    let repo_dir = t.path().join("repo");
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/repo-v2");
    let ok = std::process::Command::new("cp")
        .arg("-a")
        .arg(&fixture)
        .arg(&repo_dir)
        .status()
        .unwrap();
    assert!(ok.success());
    // The fixture's source label names this path.
    let base = Path::new("/tmp/.tmpwWjU1a");
    let _ = fs::remove_dir_all(base);
    let src = base.join("vmail");
    small_store(&src);
    // Entries record owners and modes: the fixture's are root's, under umask 022.
    let m = fs::metadata(src.join("example.org/bob/Maildir/subscriptions")).unwrap();
    if (m.uid(), m.mode() & 0o777) != (0, 0o644) {
        eprintln!("skipped: needs root and umask 022, as when the fixture was made");
        let _ = fs::remove_dir_all(base);
        return;
    }
    let mut repo = open_repo(&repo_dir);
    let mut opts = backup_opts(&src, vec![]);
    opts.run.hostname = "fixture".into();
    let rep = backup(&mut repo, &opts, &NoProgress);
    let _ = fs::remove_dir_all(base);
    let rep = rep.unwrap();
    assert!(rep.failures.is_empty(), "{:?}", rep.failures);
    assert_eq!((rep.items_new, rep.items_unchanged), (0, 74), "{rep:?}");
    let snaps = repo.snapshots().unwrap();
    let old: RootTree = repo.read_tree(&snaps[0].root).unwrap();
    let new: RootTree = repo.read_tree(&snaps[1].root).unwrap();
    assert_eq!(new.owners, old.owners);
    assert_eq!(new.accounts.len(), old.accounts.len());
    for (a, b) in old.accounts.iter().zip(&new.accounts) {
        assert_eq!(
            (&a.name, &a.rel_path, &a.dirs),
            (&b.name, &b.rel_path, &b.dirs)
        );
        let ta: AccountTree = repo.read_tree(&a.tree).unwrap();
        let tb: AccountTree = repo.read_tree(&b.tree).unwrap();
        assert_eq!(ta.folders.len(), tb.folders.len());
        for (fa, fb) in ta.folders.iter().zip(&tb.folders) {
            assert_eq!((&fa.name, &fa.dir), (&fb.name, &fb.dir));
            assert_eq!(fa.chunks, fb.chunks, "{}: {}", a.name, fa.name);
            assert_eq!(fa.dirs, fb.dirs, "{}: {}", a.name, fa.name);
            let names = |f: &mailvault_core::repo::tree::FolderNode| {
                f.files
                    .iter()
                    .map(|e| (e.name.clone(), e.size, e.content.clone()))
                    .collect::<Vec<_>>()
            };
            assert_eq!(names(fa), names(fb), "{}: {}", a.name, fa.name);
        }
    }
}
