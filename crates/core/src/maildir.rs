//! Maildir stores on disk: finding accounts and folders, listing message files, parsing
//! Maildir file names. Reading and writing message bytes is left to backup and restore.
//!
//! A mail store is `ROOT/<domain>/<user>/Maildir` (Dovecot's `/var/vmail/%d/%n/Maildir`;
//! `ROOT/<domain>/<user>` holding `cur/` directly works too); a directory with `cur/` or
//! `new/` is a single Maildir, one account. Folders are Maildir++: the root is INBOX, each
//! `.Name.Sub` directory is the folder `Name/Sub`.

use crate::error::{Error, Result};
use crate::repo::tree::Timestamp;
use std::ffi::OsStr;
use std::fs;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// One account found in a store.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AccountSource {
    /// `user@domain`, or the name given for a single Maildir.
    pub name: String,
    /// The Maildir below the store root (empty for a single Maildir), raw bytes.
    pub rel_path: Vec<u8>,
    pub path: PathBuf,
}

/// One folder of a Maildir.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FolderSource {
    pub name: String,
    pub dir: Vec<u8>,
    pub path: PathBuf,
}

/// One message file as listed: its name and place, no `stat(2)` (see [`list_messages`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MessageFile {
    pub name: Vec<u8>,
    pub new: bool,
}

/// What `stat(2)` says of a message file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileMeta {
    pub size: u64,
    pub mtime: Timestamp,
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
}

impl FileMeta {
    pub fn of(m: &fs::Metadata) -> FileMeta {
        FileMeta {
            size: m.len(),
            mtime: timestamp(m),
            mode: m.mode() & 0o7777,
            uid: m.uid(),
            gid: m.gid(),
        }
    }
}

impl MessageFile {
    pub fn path(&self, folder: &Path) -> PathBuf {
        folder
            .join(if self.new { "new" } else { "cur" })
            .join(OsStr::from_bytes(&self.name))
    }
    pub fn key(&self) -> &[u8] {
        split_name(&self.name).0
    }
}

/// Splits a Maildir file name into its key and its info (flags and keywords after `:2,`).
pub fn split_name(name: &[u8]) -> (&[u8], &[u8]) {
    if let Some(pos) = name.windows(3).rposition(|w| w == b":2," || w == b":1,") {
        (&name[..pos], &name[pos + 3..])
    } else {
        (name, b"")
    }
}

/// The display name of a Maildir++ folder directory (`.Archive.2023` -> `Archive/2023`).
pub fn folder_name(dir: &[u8]) -> String {
    if dir.is_empty() {
        return "INBOX".into();
    }
    let inner = dir.strip_prefix(b".").unwrap_or(dir);
    String::from_utf8_lossy(inner).replace('.', "/")
}

fn is_dir(p: &Path) -> bool {
    p.is_dir()
}

fn is_maildir(p: &Path) -> bool {
    is_dir(&p.join("cur")) || is_dir(&p.join("new"))
}

fn sorted_dirs(p: &Path) -> Result<Vec<(Vec<u8>, PathBuf)>> {
    let mut out = Vec::new();
    for ent in fs::read_dir(p).map_err(|e| Error::io(p, e))? {
        let ent = ent.map_err(|e| Error::io(p, e))?;
        let name = ent.file_name().as_bytes().to_vec();
        if name.starts_with(b".") {
            continue;
        }
        if ent.file_type().map(|t| t.is_dir()).unwrap_or(false) {
            out.push((name, ent.path()));
        }
    }
    out.sort();
    Ok(out)
}

/// Finds the accounts of a store, or the single Maildir at `root`.
///
/// `accounts` narrows a store to those accounts; for a single Maildir its one entry is the
/// account's name (else the name is taken from the directory).
pub fn discover(root: &Path, accounts: &[String]) -> Result<Vec<AccountSource>> {
    let meta = fs::metadata(root).map_err(|e| Error::io(root, e))?;
    if !meta.is_dir() {
        return Err(Error::InvalidInput(format!(
            "{} is not a directory",
            root.display()
        )));
    }
    if is_maildir(root) {
        let name = match accounts {
            [] => default_account_name(root),
            [one] => one.clone(),
            _ => {
                return Err(Error::InvalidInput(format!(
                    "{} is a single Maildir: give one --account",
                    root.display()
                )))
            }
        };
        return Ok(vec![AccountSource {
            name,
            rel_path: Vec::new(),
            path: root.to_path_buf(),
        }]);
    }
    let mut out = Vec::new();
    for (domain, dpath) in sorted_dirs(root)? {
        for (user, upath) in sorted_dirs(&dpath)? {
            let (path, rel) = if is_maildir(&upath.join("Maildir")) {
                (
                    upath.join("Maildir"),
                    [&domain[..], b"/", &user, b"/Maildir"].concat(),
                )
            } else if is_maildir(&upath) {
                (upath.clone(), [&domain[..], b"/", &user].concat())
            } else {
                continue;
            };
            let name = format!(
                "{}@{}",
                String::from_utf8_lossy(&user),
                String::from_utf8_lossy(&domain)
            );
            out.push(AccountSource {
                name,
                rel_path: rel,
                path,
            });
        }
    }
    if out.is_empty() {
        return Err(Error::InvalidInput(format!(
            "no Maildir found in {}: expected {0}/<domain>/<user>/Maildir, or a Maildir (with cur/ and new/)",
            root.display()
        )));
    }
    if !accounts.is_empty() {
        for a in accounts {
            if !out.iter().any(|s| &s.name == a) {
                return Err(Error::InvalidInput(format!(
                    "no account {a:?} in {}",
                    root.display()
                )));
            }
        }
        out.retain(|s| accounts.contains(&s.name));
    }
    Ok(out)
}

fn default_account_name(root: &Path) -> String {
    let abs = fs::canonicalize(root).unwrap_or_else(|_| root.to_path_buf());
    let mut parts = abs
        .components()
        .rev()
        .map(|c| c.as_os_str().to_string_lossy().to_string());
    match parts.next() {
        Some(last) if last == "Maildir" => parts.next().unwrap_or(last),
        Some(last) => last,
        None => "maildir".into(),
    }
}

/// The folders of a Maildir: INBOX (the root) first, then `.Name` directories by name.
pub fn folders(maildir: &Path) -> Result<Vec<FolderSource>> {
    let mut out = vec![FolderSource {
        name: "INBOX".into(),
        dir: Vec::new(),
        path: maildir.to_path_buf(),
    }];
    let mut subs = Vec::new();
    for ent in fs::read_dir(maildir).map_err(|e| Error::io(maildir, e))? {
        let ent = ent.map_err(|e| Error::io(maildir, e))?;
        let name = ent.file_name().as_bytes().to_vec();
        if name.len() < 2 || name[0] != b'.' || name == b".." {
            continue;
        }
        let path = ent.path();
        if ent.file_type().map(|t| t.is_dir()).unwrap_or(false) && is_maildir(&path) {
            subs.push(FolderSource {
                name: folder_name(&name),
                dir: name,
                path,
            });
        }
    }
    subs.sort_by(|a, b| a.dir.cmp(&b.dir));
    out.extend(subs);
    Ok(out)
}

pub(crate) fn timestamp(m: &fs::Metadata) -> Timestamp {
    Timestamp {
        secs: m.mtime(),
        nanos: m.mtime_nsec().clamp(0, 999_999_999) as u32,
    }
}

/// Lists the message files of a folder (`cur/` and `new/`; `tmp/` is skipped) from the
/// directories alone: no `stat(2)` per file (the file type comes from `readdir`), so an
/// incremental backup touches nothing but the directories for messages it already has.
/// Entries that cannot be listed or are not regular files come back as errors naming
/// their path.
///
/// The mail server renames files while we list (flag changes, `new/` to `cur/`), and
/// `readdir` promises nothing for an entry renamed during it: it may be missed under both
/// names. So `new/` is listed before `cur/` (a message moved between the two listings is
/// seen in `new/`), and a directory that changed during its listing (its ctime is not
/// older than the listing's start, within the clock's granularity) is listed again, up
/// to [`LIST_ATTEMPTS`] times; every name seen is kept, one per key (the last seen), so a
/// message present throughout is never left out. A stale name is resolved by key when the
/// file is read.
pub fn list_messages(folder: &Path) -> (Vec<MessageFile>, Vec<Error>) {
    list_messages_with(folder, &mut |_, _| {})
}

/// Listings of a directory that changed during them before the names seen are taken.
pub const LIST_ATTEMPTS: u32 = 5;

/// [`list_messages`] with a hook called after each listing of `new` or `cur` (with the
/// attempt number), for tests that rename files at the worst moment.
pub fn list_messages_with(
    folder: &Path,
    after_listing: &mut dyn FnMut(&str, u32),
) -> (Vec<MessageFile>, Vec<Error>) {
    // Modifications up to this long before a listing starts may not show in the
    // directory's ctime yet (the kernel's coarse clock).
    const GRANULARITY: std::time::Duration = std::time::Duration::from_millis(50);
    let mut by_key: std::collections::HashMap<Vec<u8>, usize> = Default::default();
    let mut files: Vec<MessageFile> = Vec::new();
    let mut errors = Vec::new();
    for (sub, new) in [("new", true), ("cur", false)] {
        let dir = folder.join(sub);
        for attempt in 1..=LIST_ATTEMPTS {
            let start = std::time::SystemTime::now();
            let listed = match list_dir(&dir, &mut errors) {
                Some(l) => l,
                None => break,
            };
            after_listing(sub, attempt);
            for name in listed {
                let f = MessageFile { name, new };
                match by_key.get(f.key()) {
                    Some(&i) => files[i] = f,
                    None => {
                        by_key.insert(f.key().to_vec(), files.len());
                        files.push(f);
                    }
                }
            }
            let changed = match fs::metadata(&dir) {
                Ok(m) => {
                    let ctime = std::time::UNIX_EPOCH
                        + std::time::Duration::new(
                            m.ctime().max(0) as u64,
                            m.ctime_nsec().clamp(0, 999_999_999) as u32,
                        );
                    ctime + GRANULARITY >= start
                }
                Err(_) => false,
            };
            if !changed {
                break;
            }
        }
    }
    (files, errors)
}

/// The regular files of one directory; `None` if it does not exist.
fn list_dir(dir: &Path, errors: &mut Vec<Error>) -> Option<Vec<Vec<u8>>> {
    let rd = match fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return None,
        Err(e) => {
            errors.push(Error::io(dir, e));
            return None;
        }
    };
    let mut out = Vec::new();
    for ent in rd {
        let ent = match ent {
            Ok(e) => e,
            Err(e) => {
                errors.push(Error::io(dir, e));
                continue;
            }
        };
        match ent.file_type() {
            Ok(t) if t.is_file() => {}
            // Renamed or deleted by the mail server since the listing: not an error.
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => {
                errors.push(Error::io(ent.path(), e));
                continue;
            }
            Ok(_) => {
                errors.push(Error::io(
                    ent.path(),
                    io::Error::new(io::ErrorKind::InvalidInput, "not a regular file; skipped"),
                ));
                continue;
            }
        }
        out.push(ent.file_name().as_bytes().to_vec());
    }
    Some(out)
}

/// Files of a folder directory that are kept with it: everything but the message
/// directories and the caches Dovecot rebuilds (`dovecot.index*`, `dovecot.list.index*`,
/// `dovecot.mailbox.log*`, `maildirsize`, lock files).
pub fn list_folder_files(folder: &Path) -> Result<Vec<(Vec<u8>, fs::Metadata)>> {
    let mut out = Vec::new();
    for ent in fs::read_dir(folder).map_err(|e| Error::io(folder, e))? {
        let ent = ent.map_err(|e| Error::io(folder, e))?;
        let name = ent.file_name().as_bytes().to_vec();
        let skip = name.starts_with(b"dovecot.index")
            || name.starts_with(b"dovecot.list.index")
            || name.starts_with(b"dovecot.mailbox.log")
            || name == b"maildirsize"
            || name.ends_with(b".lock");
        if skip {
            continue;
        }
        // The type from readdir first: `cur`, `new`, `tmp` and, in INBOX, every `.Folder`
        // directory are skipped without a stat (three to four per folder).
        match ent.file_type() {
            Ok(t) if t.is_file() => {}
            Ok(_) => continue,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(Error::io(ent.path(), e)),
        }
        match ent.metadata() {
            Ok(m) if m.is_file() => out.push((name, m)),
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(Error::io(ent.path(), e)),
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}

/// Reads every directory of a store (accounts, folders, their files, `cur/`, `new/`) on
/// `threads` threads and throws the listings away, so that the kernel has them cached.
/// The CLI runs it while it derives the repository key (Argon2id, CPU-bound) and loads the
/// index: on a cold cache the walk of an incremental backup is mostly waiting for the
/// disk, and this overlaps that wait with the start-up (BENCHMARKS.md). Errors are
/// ignored here; the backup's own walk reports them.
pub fn warm_directories(root: &Path, accounts: &[String], threads: usize) {
    let Ok(found) = discover(root, accounts) else {
        return;
    };
    let next = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..threads.clamp(1, 64) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(acc) = found.get(i) else { break };
                for f in folders(&acc.path).unwrap_or_default() {
                    let _ = list_folder_files(&f.path);
                    let _ = list_messages(&f.path);
                }
            });
        }
    });
}

/// Checks that a name from a repository is a single, safe path component.
pub fn safe_component(name: &[u8]) -> bool {
    !name.is_empty() && name != b"." && name != b".." && !name.contains(&b'/') && !name.contains(&0)
}

/// Checks a relative path from a repository: no absolute path, no `..`.
pub fn safe_relative(path: &[u8]) -> bool {
    path.is_empty() || (path[0] != b'/' && path.split(|&c| c == b'/').all(safe_component))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert_eq!(
            split_name(b"123.M1P2.host,S=99:2,RS"),
            (&b"123.M1P2.host,S=99"[..], &b"RS"[..])
        );
        assert_eq!(
            split_name(b"123.M1P2.host"),
            (&b"123.M1P2.host"[..], &b""[..])
        );
        assert_eq!(split_name(b"a:2,b:2,S"), (&b"a:2,b"[..], &b"S"[..]));
        assert_eq!(folder_name(b""), "INBOX");
        assert_eq!(folder_name(b".Archive.2023"), "Archive/2023");
        assert!(safe_relative(b"example.org/bob/Maildir"));
        assert!(!safe_relative(b"../etc"));
        assert!(!safe_relative(b"/etc"));
        assert!(!safe_component(b"a/b"));
    }

    #[test]
    fn discover_store_and_single() {
        let t = tempfile::tempdir().unwrap();
        for p in [
            "a.org/bob/Maildir/cur",
            "a.org/carol/Maildir/new",
            "b.org/dave/cur",
            "b.org/junk/x",
        ] {
            fs::create_dir_all(t.path().join(p)).unwrap();
        }
        let accs = discover(t.path(), &[]).unwrap();
        let names: Vec<_> = accs.iter().map(|a| a.name.as_str()).collect();
        assert_eq!(names, ["bob@a.org", "carol@a.org", "dave@b.org"]);
        assert_eq!(accs[0].rel_path, b"a.org/bob/Maildir");
        assert_eq!(accs[2].rel_path, b"b.org/dave");
        let one = discover(&t.path().join("a.org/bob/Maildir"), &[]).unwrap();
        assert_eq!(one[0].name, "bob");
        assert!(discover(t.path(), &["nobody@x".into()]).is_err());
        let empty = tempfile::tempdir().unwrap();
        assert!(discover(empty.path(), &[]).is_err());
    }

    fn folder_with(names: &[(&str, &str)]) -> tempfile::TempDir {
        let t = tempfile::tempdir().unwrap();
        for s in ["cur", "new", "tmp"] {
            fs::create_dir(t.path().join(s)).unwrap();
        }
        for (sub, name) in names {
            fs::write(t.path().join(sub).join(name), b"x").unwrap();
        }
        // Make the directories look old, as in a store at rest.
        for s in ["cur", "new"] {
            let old = filetime::FileTime::from_unix_time(1_600_000_000, 0);
            filetime::set_file_mtime(t.path().join(s), old).unwrap();
        }
        // And their ctime (which cannot be set) older than the clock's granularity.
        std::thread::sleep(std::time::Duration::from_millis(120));
        t
    }

    /// Regression (issue 10, item 21): a message moved from `new/` to `cur/` between the
    /// listings of the two directories was in neither listing.
    #[test]
    fn a_message_moved_to_cur_during_the_listing_is_listed() {
        let t = folder_with(&[("new", "1.M1P1.h"), ("cur", "2.M1P1.h:2,S")]);
        let p = t.path().to_path_buf();
        let mut first = true;
        let (files, errors) = list_messages_with(&p, &mut |_, _| {
            if std::mem::take(&mut first) {
                fs::rename(p.join("new/1.M1P1.h"), p.join("cur/1.M1P1.h:2,S")).unwrap();
            }
        });
        assert!(errors.is_empty(), "{errors:?}");
        let mut keys: Vec<&[u8]> = files.iter().map(|f| f.key()).collect();
        keys.sort();
        assert_eq!(keys, [&b"1.M1P1.h"[..], b"2.M1P1.h"], "{files:?}");
    }

    /// A directory renamed in during its listing is listed again, and the message is
    /// kept once, under its name of the last listing.
    #[test]
    fn a_directory_changed_during_its_listing_is_listed_again() {
        let t = folder_with(&[("cur", "1.M1P1.h:2,")]);
        let p = t.path().to_path_buf();
        let mut calls = Vec::new();
        let (files, _) = list_messages_with(&p, &mut |sub, attempt| {
            calls.push((sub.to_string(), attempt));
            if sub == "cur" && attempt == 1 {
                fs::rename(p.join("cur/1.M1P1.h:2,"), p.join("cur/1.M1P1.h:2,S")).unwrap();
            }
        });
        assert!(calls.contains(&("cur".into(), 2)), "{calls:?}");
        assert_eq!(files.len(), 1, "{files:?}");
        assert_eq!(files[0].name, b"1.M1P1.h:2,S");
    }
}
