//! The restore targets' conformance suite (issue 14, issue 25): one snapshot with nested
//! and non-ASCII folders, system flags, keywords (two folders giving the same letter
//! different names), internal dates, a message in `new/` and subscriptions, restored
//! through the one restore pipeline into every target — Maildir, IMAP (a real Dovecot),
//! mbox (`restore --target mbox:`) and EML (`--target eml:`); what each target gives
//! back, read through independent means (the Maildir files; an IMAP client; Python's
//! `mailbox` module for the mbox files; the `.eml` files and their `.mailvault-flags`
//! sidecar), is the same mail: bytes, flags, keywords, internal dates, folders and
//! subscriptions, less what the case declares its format does not keep ([`Keeps`]: IMAP,
//! mbox and EML keep dates to the second, mbox and EML no subscriptions;
//! docs/mail-formats.md). A second run adds nothing.
//! A new target joins by adding one [`Case`].
//!
//! The `dir:` target (the Maildir target made plain, for `file:` backups) holds files, not
//! mail: [`dir_target_gives_back_the_same_files`] backs up a small tree (nested
//! directories, a file of several content-defined chunks, a symbolic link, a hard link
//! pair, modes, mtimes with nanoseconds) with the `file:` source and compares what the
//! restore writes file by file (kind, bytes, mode, owner, mtime, link target, one inode
//! for the hard link pair); a second run writes nothing.
//!
//! Fails (does not skip) without python3, and without Dovecot unless
//! MAILVAULT_SKIP_DOVECOT=1, which `.ci/run` unsets: in CI every case runs.
#![allow(clippy::unwrap_used)]

mod common;

use common::{imap_restore_opts, init_repo, maildir_backup, put_msg, python3, test_run};
use mailvault_core::dest::eml::EmlTarget;
use mailvault_core::dest::maildir::MaildirTarget;
use mailvault_core::dest::mbox::MboxTarget;
use mailvault_core::dest::owners::RestoreOwners;
use mailvault_core::imap::names::parse_subscriptions;
use mailvault_core::ops::restore::imap as imap_restore;
use mailvault_core::ops::restore::{restore, run, RestoreOptions};
use mailvault_core::report::NoProgress;
use mailvault_core::restore::{Request, RestoreReport, Selection};
use mailvault_core::source::file::{FileOptions, FileSource};
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
/// (sorted), internal date (seconds, nanoseconds).
type Msg = (Vec<u8>, Vec<String>, (i64, i64));

/// Adds a message read from a target to its folder's; every message of the source is
/// distinct, so one read twice (a re-run that duplicated it) fails the test.
fn add(msgs: &mut BTreeSet<Msg>, m: Msg) {
    let subject = String::from_utf8_lossy(&m.0)
        .lines()
        .find(|l| l.starts_with("Subject:"))
        .map(str::to_string);
    assert!(msgs.insert(m), "a message given back twice: {subject:?}");
}

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
            // Dates below the second, where a Maildir keeps them (its files' mtimes).
            let nanos = (n as u32 * 111_111_111) % 1_000_000_000;
            let t = std::time::UNIX_EPOCH + std::time::Duration::new(date as u64, nanos);
            let p = maildir.join(dir).join(sub).join(&file);
            let f = fs::File::options().write(true).open(p).unwrap();
            f.set_modified(t).unwrap();
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
                let flags = maildir_flags(&file, &keywords);
                add(&mut msgs, (data, flags, (m.mtime(), m.mtime_nsec())));
            }
        }
        mail.folders.insert(name.to_string(), msgs);
    }
    if let Ok(data) = fs::read(maildir.join("subscriptions")) {
        mail.subscriptions = parse_subscriptions(&data).into_iter().collect();
    }
    mail
}

/// What a target's format keeps of the mail, as docs/mail-formats.md says; what it does
/// not keep is left out of what the case must give back, so that the difference is stated
/// here rather than hidden. Bytes, flags, keywords, dates to the second and folders every
/// target keeps.
struct Keeps {
    /// The account's subscriptions (mbox and EML trees have no place for them).
    subscriptions: bool,
    /// Dates below the second (an IMAP internal date, an mbox From line and an EML
    /// sidecar are to the second).
    subsecond_dates: bool,
}

impl Keeps {
    const ALL: Keeps = Keeps {
        subscriptions: true,
        subsecond_dates: true,
    };

    /// What of `mail` a target keeping this gives back.
    fn of(&self, mail: &Mail) -> Mail {
        let to_second = |msgs: &BTreeSet<Msg>| {
            (msgs.iter())
                .map(|(data, flags, (secs, _))| (data.clone(), flags.clone(), (*secs, 0)))
                .collect()
        };
        Mail {
            folders: (mail.folders.iter())
                .map(|(name, msgs)| match self.subsecond_dates {
                    true => (name.clone(), msgs.clone()),
                    false => (name.clone(), to_second(msgs)),
                })
                .collect(),
            subscriptions: match self.subscriptions {
                true => mail.subscriptions.clone(),
                false => BTreeSet::new(),
            },
        }
    }
}

/// A restore target under test.
trait Case {
    fn name(&self) -> &str;
    /// What its format keeps.
    fn keeps(&self) -> Keeps {
        Keeps::ALL
    }
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
    fn keeps(&self) -> Keeps {
        Keeps {
            subsecond_dates: false,
            ..Keeps::ALL
        }
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
                add(&mut msgs, (lf.into_bytes(), flags, (date, 0)));
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

/// The counts of an mbox or EML restore: (messages written, messages found already there).
fn counts(r: RestoreReport) -> (u64, u64) {
    assert!(r.failures.is_empty(), "{:?}", r.failures);
    (r.items_restored, r.items_unchanged)
}

/// The latest snapshot, all of it, through the one restore pipeline.
fn latest() -> Selection {
    Selection {
        snapshot: "latest".into(),
        ..Default::default()
    }
}

/// `restore --target mbox:DIR`.
fn restore_mbox(repo: &Repository, dir: &Path) -> RestoreReport {
    run(repo, Request::Selection(latest()), &NoProgress, |_| {
        MboxTarget::open(dir, 2)
    })
    .unwrap()
    .0
}

/// `restore --target eml:DIR`.
fn restore_eml(repo: &Repository, dir: &Path) -> RestoreReport {
    run(repo, Request::Selection(latest()), &NoProgress, |_| {
        EmlTarget::open(dir, 2)
    })
    .unwrap()
    .0
}

/// `restore --target dir:DIR` (the Maildir target made plain, as the CLI opens it).
fn restore_dir(repo: &Repository, dir: &Path) -> RestoreReport {
    let open = |o: mailvault_core::ops::restore::Opening<'_>| {
        MaildirTarget::plain(dir, RestoreOwners::ByName, o.owners, 2)
    };
    run(repo, Request::Selection(latest()), &NoProgress, open)
        .unwrap()
        .0
}

/// Where an mbox or EML export puts the account `example.org/bob/Maildir` below its root.
const ACCOUNT_DIR: &str = "example.org/bob";

/// Every file below `root` that is not hidden, by path relative to `root`.
fn files_below(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in fs::read_dir(&dir).unwrap() {
            let e = e.unwrap();
            let name = e.file_name().into_string().unwrap();
            assert!(
                !name.contains('%'),
                "an escaped name: {}",
                e.path().display()
            );
            if name.starts_with('.') {
                continue;
            }
            if e.file_type().unwrap().is_dir() {
                stack.push(e.path());
            } else {
                out.push(e.path().strip_prefix(root).unwrap().to_path_buf());
            }
        }
    }
    out.sort();
    out
}

/// Python's `mailbox` reads each mbox file (argv) and prints, per file, per message: the
/// bytes with the metadata headers that close its header block removed (the writer
/// appends them there; docs/mail-formats.md), the flags from `get_flags()` as IMAP names
/// and the keywords of `X-Keywords:`, and the From line's date (UTC) as Unix seconds.
const PYTHON_READS_MBOX: &str = r#"
import calendar, json, mailbox, re, sys, time
names = {"R": "\\Seen", "A": "\\Answered", "F": "\\Flagged", "D": "\\Deleted", "T": "\\Draft"}
meta = re.compile(rb"(?i)(status|x-status|x-keywords|x-imapbase|x-uid|content-length|x-mailvault-[a-z-]*):")
out = {}
for path in sys.argv[1:]:
    box = mailbox.mbox(path, create=False)
    msgs = []
    for key in box.keys():
        msg = box.get_message(key)
        raw = box.get_bytes(key)
        head, sep, rest = raw.partition(b"\n\n")
        lines = head.split(b"\n")
        while lines and meta.match(lines[-1]):
            lines.pop()
        raw = b"\n".join(lines) + sep + rest
        flags = sorted({names[c] for c in msg.get_flags() if c in names})
        kw = (msg.get("X-Keywords") or "").replace(",", " ").split()
        date = calendar.timegm(time.strptime(msg.get_from().split(None, 1)[1], "%a %b %d %H:%M:%S %Y"))
        msgs.append({"bytes": raw.hex(), "flags": sorted(flags + kw), "date": date})
    out[path] = msgs
print(json.dumps(out))
"#;

/// The mbox target: a Thunderbird folder tree (`Inbox`, `Archive`, `Archive.sbd/2023`).
struct MboxCase {
    root: PathBuf,
}

impl Case for MboxCase {
    fn name(&self) -> &str {
        "mbox"
    }
    fn keeps(&self) -> Keeps {
        Keeps {
            subscriptions: false,
            subsecond_dates: false,
        }
    }
    fn restore(&self, repo: &Repository) -> (u64, u64) {
        counts(restore_mbox(repo, &self.root))
    }
    fn read(&self) -> Mail {
        let base = self.root.join(ACCOUNT_DIR);
        let files = files_below(&base);
        let paths: Vec<PathBuf> = files.iter().map(|f| base.join(f)).collect();
        let paths: Vec<&Path> = paths.iter().map(|p| p.as_path()).collect();
        let read: serde_json::Value =
            serde_json::from_str(&common::run_python(PYTHON_READS_MBOX, &paths)).unwrap();
        let mut mail = Mail::default();
        for f in &files {
            // `Archive.sbd/2023` is the folder `Archive/2023`; `Inbox` is INBOX.
            let levels: Vec<&str> = (f.iter())
                .map(|l| l.to_str().unwrap().trim_end_matches(".sbd"))
                .collect();
            let name = match levels.join("/") {
                n if n == "Inbox" => "INBOX".to_string(),
                n => n,
            };
            let mut msgs = BTreeSet::new();
            for m in read[base.join(f).to_str().unwrap()].as_array().unwrap() {
                let flags = (m["flags"].as_array().unwrap().iter())
                    .map(|f| f.as_str().unwrap().to_string())
                    .collect();
                let data = hex::decode(m["bytes"].as_str().unwrap()).unwrap();
                add(&mut msgs, (data, flags, (m["date"].as_i64().unwrap(), 0)));
            }
            mail.folders.insert(name, msgs);
        }
        mail
    }
}

/// The EML target: a directory per folder (`INBOX/`, `Archive/2023/`), one `.eml` file
/// per message, the flags, keywords and dates in each directory's `.mailvault-flags`.
struct EmlCase {
    root: PathBuf,
}

/// `%XX` escapes undone.
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            out.push(u8::from_str_radix(&s[i + 1..i + 3], 16).unwrap());
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).unwrap()
}

/// A folder's `.mailvault-flags`: file name -> (date, sorted flags and keywords).
fn sidecar(dir: &Path) -> BTreeMap<String, (i64, Vec<String>)> {
    let text = fs::read_to_string(dir.join(".mailvault-flags")).unwrap_or_default();
    let mut out = BTreeMap::new();
    for line in text.lines() {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let mut words = line.split(' ');
        let name = unescape(words.next().unwrap());
        let date = words.next().unwrap().parse().unwrap();
        let mut flags: Vec<String> = words.map(unescape).collect();
        flags.sort();
        out.insert(name, (date, flags));
    }
    out
}

impl Case for EmlCase {
    fn name(&self) -> &str {
        "eml"
    }
    fn keeps(&self) -> Keeps {
        Keeps {
            subscriptions: false,
            subsecond_dates: false,
        }
    }
    fn restore(&self, repo: &Repository) -> (u64, u64) {
        counts(restore_eml(repo, &self.root))
    }
    fn read(&self) -> Mail {
        let base = self.root.join(ACCOUNT_DIR);
        let mut mail = Mail::default();
        let mut sidecars = BTreeMap::new();
        for f in files_below(&base) {
            assert_eq!(f.extension().unwrap(), "eml", "{}", f.display());
            let dir = f.parent().unwrap();
            let flags =
                (sidecars.entry(dir.to_path_buf())).or_insert_with(|| sidecar(&base.join(dir)));
            let file = f.file_name().unwrap().to_str().unwrap();
            let (date, flags) = flags
                .get(file)
                .cloned()
                .unwrap_or_else(|| panic!("{}: not in its folder's .mailvault-flags", f.display()));
            let m = fs::metadata(base.join(&f)).unwrap();
            assert_eq!(m.mtime(), date, "{}: mtime and sidecar date", f.display());
            let data = fs::read(base.join(&f)).unwrap();
            let name = dir.to_str().unwrap().to_string();
            add(
                mail.folders.entry(name).or_default(),
                (data, flags, (date, 0)),
            );
        }
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

    python3();
    let mut cases: Vec<Box<dyn Case>> = vec![
        Box::new(MaildirCase {
            root: dir.path().join("maildir"),
        }),
        Box::new(MboxCase {
            root: dir.path().join("mbox"),
        }),
        Box::new(EmlCase {
            root: dir.path().join("eml"),
        }),
    ];
    match DovecotServer::start_or_skip().expect("dovecot") {
        Some(server) => cases.push(Box::new(DovecotCase {
            server,
            journal: dir.path().join("journal"),
        })),
        None => eprintln!("no Dovecot: the IMAP target is not run"),
    }
    for case in &cases {
        let name = case.name();
        let want = case.keeps().of(&want);
        assert_eq!(case.restore(&repo), (total, 0), "{name}: first run");
        assert_eq!(case.read(), want, "{name}: what it gives back");
        assert_eq!(case.restore(&repo), (0, total), "{name}: a second run");
        assert_eq!(case.read(), want, "{name}: after a second run");
    }
}

/// A small tree for the `dir:` target: nested directories with their own modes and
/// mtimes, a file of several content-defined chunks, an empty file, an executable, a
/// relative and a dangling symbolic link, a hard link pair ([`HARD_LINK`]), mtimes with
/// nanoseconds. Directory mtimes are set last.
fn file_tree(root: &Path) {
    use mailvault_core::source::file::testdata::database_like;
    use std::os::unix::fs::{symlink, PermissionsExt};
    let chmod = |p: &str, mode| {
        fs::set_permissions(root.join(p), fs::Permissions::from_mode(mode)).unwrap()
    };
    let mtime = |p: &str, secs, nanos| {
        let t = std::time::UNIX_EPOCH + std::time::Duration::new(secs, nanos);
        fs::File::open(root.join(p))
            .unwrap()
            .set_modified(t)
            .unwrap()
    };
    fs::create_dir_all(root.join("db/index/deep")).unwrap();
    fs::create_dir_all(root.join("etc")).unwrap();
    fs::write(root.join("db/mail.nsf"), database_like(3 << 20, 7)).unwrap();
    fs::write(
        root.join("db/index/deep/terms.idx"),
        database_like(40_000, 9),
    )
    .unwrap();
    fs::write(root.join("db/empty"), "").unwrap();
    fs::write(root.join("etc/server.conf"), "listen = 993\n").unwrap();
    chmod("etc/server.conf", 0o640);
    fs::write(root.join("etc/hook.sh"), "#!/bin/sh\nexit 0\n").unwrap();
    chmod("etc/hook.sh", 0o755);
    fs::hard_link(root.join(HARD_LINK.0), root.join(HARD_LINK.1)).unwrap();
    symlink("index/deep/terms.idx", root.join("db/current")).unwrap();
    symlink("gone.db", root.join("db/dangling")).unwrap();
    mtime("db/mail.nsf", 1_600_000_000, 123_456_789);
    mtime("etc/server.conf", 978_307_200, 5);
    chmod("db/index", 0o750);
    chmod("etc", 0o700);
    mtime("db/index/deep", 1_000_000_000, 0);
    mtime("db/index", 1_100_000_000, 7);
}

/// The two names of one file in [`file_tree`].
const HARD_LINK: (&str, &str) = ("etc/server.conf", "db/server.conf.bak");

/// What the `dir:` target must give back of a node: kind, mode, owner, mtime (seconds,
/// nanoseconds), bytes of a file or target of a link.
type Node = (&'static str, u32, (u32, u32), (i64, i64), Vec<u8>);

/// Every node below `root` (`""` is `root` itself) by relative path.
fn nodes(root: &Path) -> BTreeMap<String, Node> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(p) = stack.pop() {
        let m = fs::symlink_metadata(&p).unwrap();
        let (kind, data) = if m.is_dir() {
            for e in fs::read_dir(&p).unwrap() {
                stack.push(e.unwrap().path());
            }
            ("dir", Vec::new())
        } else if m.is_symlink() {
            let t = fs::read_link(&p).unwrap();
            ("symlink", t.into_os_string().into_encoded_bytes())
        } else {
            ("file", fs::read(&p).unwrap())
        };
        let rel = p.strip_prefix(root).unwrap().to_str().unwrap().to_string();
        let node = (
            kind,
            m.mode() & 0o7777,
            (m.uid(), m.gid()),
            (m.mtime(), m.mtime_nsec()),
            data,
        );
        out.insert(rel, node);
    }
    out
}

/// Backs `tree` up with the `file:` source (`backup file:TREE`) into `repo`.
fn file_backup(repo: &mut Repository, tree: &Path) {
    let opts = FileOptions {
        paths: vec![tree.to_path_buf()],
        include: Vec::new(),
        exclude: Vec::new(),
        jobs: 2,
        depth: None,
        read_from: Vec::new(),
        run: test_run(),
    };
    let source = FileSource::new(&opts).unwrap();
    let now = mailvault_core::now();
    let r = mailvault_core::ops::backup::run(repo, &source, &opts.run, now, &NoProgress);
    let r = r.unwrap();
    assert!(r.failures.is_empty(), "{:?}", r.failures);
}

#[test]
fn dir_target_gives_back_the_same_files() {
    let dir = tempfile::tempdir().unwrap();
    let tree = dir.path().canonicalize().unwrap().join("tree");
    file_tree(&tree);
    let mut repo = init_repo(&dir.path().join("repo"));
    file_backup(&mut repo, &tree);
    let out = dir.path().join("out");
    // The account is the tree's absolute path: it comes back at OUT/<path without />.
    let back = out.join(tree.strip_prefix("/").unwrap());
    let want = nodes(&tree);
    let files = want.values().filter(|n| n.0 != "dir").count() as u64;

    let r = restore_dir(&repo, &out);
    assert!(r.failures.is_empty(), "{:?}", r.failures);
    // The hard link's second name is linked, not written again.
    assert_eq!((r.files_restored, r.files_linked), (files - 1, 1), "{r:?}");
    assert_eq!(nodes(&back), want, "dir: what it gives back");
    let (a, b) = (back.join(HARD_LINK.0), back.join(HARD_LINK.1));
    let (ma, mb) = (fs::metadata(a).unwrap(), fs::metadata(b).unwrap());
    assert_eq!(
        (ma.ino(), ma.nlink()),
        (mb.ino(), 2),
        "dir: the hard link pair"
    );

    let r = restore_dir(&repo, &out);
    assert!(r.failures.is_empty(), "{:?}", r.failures);
    assert_eq!(
        (r.files_restored, r.files_linked, r.file_bytes_written),
        (0, 0, 0),
        "dir: a second run: {r:?}"
    );
    assert_eq!(nodes(&back), want, "dir: after a second run");
}
