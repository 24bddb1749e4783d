//! The conformance suite of the [`Source`] trait: one small mail set (folders, a nested
//! and a non-ASCII one among them, flags, keywords, internal dates, subscriptions) is put
//! into each kind of source — a Maildir store, an IMAP server (a real Dovecot), an mbox
//! store (`backup mbox:DIR`: `<domain>/<user>/` Thunderbird trees, flags in `Status:`,
//! `X-Status:` and `X-Keywords:` headers), an EML tree (`backup eml:DIR --account A`,
//! flags in `.mailvault-flags`) and a source written against the trait alone — backed up
//! through the one pipeline ([`mailvault_core::ops::backup::run`]), and every snapshot
//! must hold the same messages (bytes), flags, keywords, internal dates, folders and
//! subscriptions, less what the source declares its format does not keep ([`Keeps`]: mbox
//! and EML trees hold no subscriptions, an EML account has no place in a store, a
//! directory of the EML tree is a folder); then an incremental backup with nothing
//! changed must read nothing and store no message again.
//!
//! The `file:` source holds files, not mail, so [`conforms`] does not fit it:
//! [`file_source_conforms`] backs the mail set's Maildir up as files and checks that the
//! snapshot holds every file (bytes, mtime, mode) and no message, and that an incremental
//! with nothing changed reads nothing; the `dir:` case of the target suite
//! (`tests/target_conformance.rs`) restores a `file:` snapshot file by file.
//!
//! A new source joins by adding one test: put [`mail_set`] into it, build the source,
//! call [`conforms`] ([`MemorySource`] is the smallest example). IMAP runs against a real
//! Dovecot (fails without one unless MAILVAULT_SKIP_DOVECOT=1, which `.ci/run` unsets: in
//! CI the IMAP case always runs).
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
use mailvault_core::source::eml::{EmlOptions, EmlSource};
use mailvault_core::source::file::{FileOptions, FileSource};
use mailvault_core::source::imap::ImapSource;
use mailvault_core::source::maildir::MaildirSource;
use mailvault_core::source::mbox::{MboxLayout, MboxOptions, MboxSource};
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

/// What a source's format keeps of the mail set, as docs/mail-formats.md says: what it
/// does not keep is left out of what its snapshot must show, so that the difference is
/// stated here rather than hidden. Bytes, flags, keywords, dates and the folders of the
/// mail set every source keeps.
struct Keeps {
    /// The account's subscriptions.
    subscriptions: bool,
    /// Where the account lives in the store (`rel_path`): an mbox store's
    /// `<domain>/<user>` is named as a Maildir store's; one EML tree has none.
    rel_path: &'static str,
    /// Folders the source holds beyond the mail set's, empty: an EML tree's directory
    /// holding only another folder's directory (`Archive/` of `Archive/2023/`) is a
    /// folder.
    extra_folders: &'static [&'static str],
}

impl Keeps {
    const ALL: Keeps = Keeps {
        subscriptions: true,
        rel_path: REL_PATH,
        extra_folders: &[],
    };
}

/// What a snapshot of [`mail_set`] from a source keeping `keeps` must show (every
/// source's: `Keeps::ALL`).
fn expected_of(keeps: &Keeps) -> View {
    let mut folders: BTreeMap<String, BTreeSet<Msg>> = FOLDERS
        .iter()
        .map(|f| (f.to_string(), BTreeSet::new()))
        .collect();
    for m in mail_set() {
        let entry = (m.data.clone(), lower(&m.flags), m.date);
        folders.get_mut(m.folder).unwrap().insert(entry);
    }
    for f in keeps.extra_folders {
        folders.insert(f.to_string(), BTreeSet::new());
    }
    let subscribed = match keeps.subscriptions {
        true => SUBSCRIBED.iter().map(|s| s.to_string()).collect(),
        false => BTreeSet::new(),
    };
    View {
        accounts: [((ACCOUNT.to_string(), keeps.rel_path.to_string()), folders)].into(),
        subscriptions: [(ACCOUNT.to_string(), subscribed)].into(),
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
            for c in &repo.folder_chunks(f).unwrap() {
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
/// checks both snapshots against [`expected_of`] all the mail set; the second (nothing changed) must read
/// nothing and store no message again.
fn conforms<S: Source>(source: &S, dir: &Path) {
    conforms_keeping(source, dir, &Keeps::ALL)
}

/// [`conforms`] for a source keeping what `keeps` says.
fn conforms_keeping<S: Source>(source: &S, dir: &Path, keeps: &Keeps) {
    let want = expected_of(keeps);
    let folders = FOLDERS.len() + keeps.extra_folders.len();
    let _at_rest = common::at_rest(dir);
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
        (1, folders as u64, n, n)
    );
    assert_eq!(view(&repo, &first.snapshot), want);

    let second = run(&mut repo, source, &opts, mailvault_core::now(), &NoProgress).unwrap();
    assert!(second.failures.is_empty(), "{:?}", second.failures);
    assert_eq!(second.parent.as_deref(), Some(&first.snapshot[..]));
    assert_eq!(
        (second.items_new, second.items_unchanged, second.bytes_read),
        (0, n, 0),
        "an incremental with nothing changed read something: {second:?}"
    );
    assert_eq!(view(&repo, &second.snapshot), want);
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

/// `secs` (UTC) as an mbox From line writes it: `Mon Sep 14 12:26:40 2020`.
fn asctime(secs: i64) -> String {
    const DAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Days since 1970-01-01 to a civil date (H. Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{} {} {day:2} {:02}:{:02}:{:02} {year}",
        DAYS[days.rem_euclid(7) as usize],
        MONTHS[month as usize - 1],
        rem / 3_600,
        rem / 60 % 60,
        rem % 60
    )
}

/// The mail set as an mbox store (`backup mbox:DIR`): `root/example.org/bob/` a
/// Thunderbird folder tree (`Inbox`, `Sent`, `Archive.sbd/2023`, `Entwürfe`), each
/// message after its From line (sender and date), its flags in `Status:` (`R`),
/// `X-Status:` (`A`, `F`, `T`) and keywords in `X-Keywords:` appended to its header block
/// as mutt and Dovecot write them. Written here, not by the crate's mbox writer.
fn write_mbox_store(root: &Path) {
    let tree = root.join("example.org/bob");
    let mut files: BTreeMap<PathBuf, Vec<u8>> = BTreeMap::new();
    for m in mail_set() {
        let file = match m.folder {
            "INBOX" => PathBuf::from("Inbox"),
            "Archive/2023" => PathBuf::from("Archive.sbd/2023"),
            f => PathBuf::from(f),
        };
        let has = |f: &str| m.flags.contains(&f);
        let status = if has("\\Seen") { "RO" } else { "O" };
        let x_status: String = [("\\Answered", 'A'), ("\\Flagged", 'F'), ("\\Draft", 'T')]
            .iter()
            .filter(|(f, _)| has(f))
            .map(|(_, c)| *c)
            .collect();
        let keywords: Vec<&str> = (m.flags.iter().copied())
            .filter(|f| !f.starts_with('\\'))
            .collect();
        let mut added = format!("Status: {status}\n");
        if !x_status.is_empty() {
            added += &format!("X-Status: {x_status}\n");
        }
        if !keywords.is_empty() {
            added += &format!("X-Keywords: {}\n", keywords.join(" "));
        }
        let end = m.data.windows(2).position(|w| w == b"\n\n").unwrap() + 1;
        let out = files.entry(file).or_default();
        out.extend_from_slice(format!("From alice@example.org {}\n", asctime(m.date)).as_bytes());
        out.extend_from_slice(&m.data[..end]);
        out.extend_from_slice(added.as_bytes());
        out.extend_from_slice(&m.data[end..]);
        out.push(b'\n');
    }
    for (file, data) in files {
        let path = tree.join(file);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, data).unwrap();
    }
}

/// The mail set as an EML tree (`backup eml:DIR --account A`): a directory per folder
/// (`INBOX/`, `Sent/`, `Archive/2023/`, `Entwürfe/`), one `.eml` file per message with
/// the internal date as its mtime, and each directory's `.mailvault-flags` naming the
/// file's date, flags and keywords. Written here, not by the crate's EML writer.
fn write_eml_tree(root: &Path) {
    let mut sidecars: BTreeMap<PathBuf, String> = BTreeMap::new();
    for (i, m) in mail_set().into_iter().enumerate() {
        let dir = root.join(m.folder);
        fs::create_dir_all(&dir).unwrap();
        let name = format!("message-{i}.eml");
        let path = dir.join(&name);
        fs::write(&path, &m.data).unwrap();
        let t = std::time::UNIX_EPOCH + std::time::Duration::from_secs(m.date as u64);
        fs::File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_modified(t)
            .unwrap();
        let line = sidecars
            .entry(dir)
            .or_insert_with(|| "# mailvault flags 1\n".to_string());
        *line += &format!("{name} {} {}\n", m.date, m.flags.join(" "));
    }
    for (dir, text) in sidecars {
        fs::write(dir.join(".mailvault-flags"), text).unwrap();
    }
}

/// `backup mbox:DIR` of a store of `<domain>/<user>/` trees.
fn mbox_source(root: &Path) -> MboxSource {
    MboxSource::new(&MboxOptions {
        path: root.to_path_buf(),
        layout: MboxLayout::Store,
        jobs: 2,
        run: test_run(),
    })
    .unwrap()
}

/// `backup eml:DIR --account ACCOUNT`.
fn eml_source(root: &Path) -> EmlSource {
    EmlSource::new(&EmlOptions {
        path: root.to_path_buf(),
        account: ACCOUNT.into(),
        jobs: 2,
        run: test_run(),
    })
    .unwrap()
}

#[test]
fn mbox_source_conforms() {
    let t = tempfile::tempdir().unwrap();
    let store = t.path().join("mbox");
    write_mbox_store(&store);
    let keeps = Keeps {
        subscriptions: false,
        ..Keeps::ALL
    };
    conforms_keeping(&mbox_source(&store), t.path(), &keeps);
}

#[test]
fn eml_source_conforms() {
    let t = tempfile::tempdir().unwrap();
    let tree = t.path().join("eml");
    write_eml_tree(&tree);
    // Every directory of an EML tree is a folder: `Archive/`, made to hold
    // `Archive/2023/`, is backed up as an empty folder `Archive` that the mail set does
    // not have (a Maildir's `.Archive.2023` alone makes no `Archive`).
    let keeps = Keeps {
        subscriptions: false,
        rel_path: "",
        extra_folders: &["Archive"],
    };
    conforms_keeping(&eml_source(&tree), t.path(), &keeps);
}

/// `backup file:PATH` of one path; fails the test on any failure.
fn file_backup(repo: &mut Repository, path: &Path) -> mailvault_core::ops::backup::BackupReport {
    let opts = FileOptions {
        paths: vec![path.to_path_buf()],
        include: Vec::new(),
        exclude: Vec::new(),
        jobs: 2,
        depth: None,
        read_from: Vec::new(),
        run: test_run(),
    };
    let source = FileSource::new(&opts).unwrap();
    let r = run(repo, &source, &opts.run, mailvault_core::now(), &NoProgress).unwrap();
    assert!(r.failures.is_empty(), "{:?}", r.failures);
    r
}

/// The files of the one account of snapshot `id` (a `file:` backup), as
/// `common::tree_snapshot` gives a tree's: relative path -> (bytes, mtime, mode); it holds
/// no message.
fn files_of(repo: &Repository, id: &str) -> BTreeMap<Vec<u8>, (Vec<u8>, i64, u32)> {
    let snap = repo.find_snapshot(id).unwrap();
    let root: RootTree = repo.read_tree(&snap.root).unwrap();
    assert_eq!(root.accounts.len(), 1);
    let t: AccountTree = repo.read_tree(&root.accounts[0].tree).unwrap();
    let mut out = BTreeMap::new();
    for f in &t.folders {
        assert!(
            f.chunks.is_empty() && f.chunk_tree.is_none(),
            "{}: messages in a file: backup",
            f.name
        );
        for e in &f.files {
            let content = repo.file_content(e).unwrap();
            let data = assemble(repo, &content, e.size, None).unwrap();
            let mut path = f.dir.clone();
            if !path.is_empty() {
                path.push(b'/');
            }
            path.extend_from_slice(&e.name);
            out.insert(path, (data, e.mtime.secs, e.mode & 0o7777));
        }
    }
    out
}

/// The `file:` source: the mail set's Maildir backed up as files (each directory a
/// folder, its regular files the folder's files) holds every file with its bytes, mtime
/// and mode, and no message; an incremental with nothing changed reads nothing.
#[test]
fn file_source_conforms() {
    let t = tempfile::tempdir().unwrap();
    let store = t.path().canonicalize().unwrap().join("vmail");
    write_maildir(&store);
    let md = store.join(REL_PATH);
    let want = common::tree_snapshot(&md);
    assert_eq!(want.len(), mail_set().len() + 1 + FOLDERS.len());
    let _at_rest = common::at_rest(&store);
    let mut repo = init_repo(&t.path().join("repo"));
    let first = file_backup(&mut repo, &md);
    assert_eq!(files_of(&repo, &first.snapshot), want);
    let second = file_backup(&mut repo, &md);
    assert_eq!(second.parent.as_deref(), Some(&first.snapshot[..]));
    assert_eq!(
        second.bytes_read, 0,
        "an incremental read something: {second:?}"
    );
    assert_eq!(files_of(&repo, &second.snapshot), want);
}

/// A source written against the trait alone, as the mbox and EML sources are: in
/// memory, messages given by flags and keywords under its own keys
/// ([`MessageId::Key`]), a sync state file, subscriptions; unchanged messages found
/// among the parent folder's entries.
struct MemorySource;

impl Source for MemorySource {
    type Session = ();

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
            assert_eq!(
                (&fa.chunks, fa.chunk_tree),
                (&fb.chunks, fb.chunk_tree),
                "{}: {}",
                a.name,
                fa.name
            );
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
