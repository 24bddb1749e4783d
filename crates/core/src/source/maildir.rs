//! Maildir stores on disk as a [`Source`]: finding accounts and folders, listing message
//! files (with [`super::listing`]), parsing Maildir file names, and [`MaildirSource`], which backs them up through
//! the one pipeline ([`crate::ops::backup::run`]). Writing Maildirs is the restore's.
//!
//! A mail store is `ROOT/<domain>/<user>/Maildir` (Dovecot's `/var/vmail/%d/%n/Maildir`;
//! `ROOT/<domain>/<user>` holding `cur/` directly works too); a directory with `cur/` or
//! `new/` is a single Maildir, one account. Folders are Maildir++: the root is INBOX, each
//! `.Name.Sub` directory is the folder `Name/Sub`.

use super::listing::{entry_type, list_in, FileRef, Listing};
pub use super::listing::{
    list_messages, list_messages_with, MessageFile, MessageFiles, LIST_ATTEMPTS,
};
use super::walk::{self, Dir, FileType};
use super::RunOptions;
use super::{
    AccountListing, Failures, FileData, FolderFile, FolderWriter, MessageMeta, NewMessage,
    Parallelism, Samples, Source,
};
use crate::error::{Error, Result};
use crate::mail::maildir::folder_name;
use crate::repo::tree::{DirEntry, DirStamp, MessageEntry};
use crate::source::parent::KeyLookup;
use rayon::prelude::*;
use std::fs;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// One account found in a store (its `path` is the Maildir).
pub type AccountSource = super::Account;

/// One folder of a Maildir (its `path` is the folder's directory).
pub type FolderSource = super::Folder;

pub use super::FileMeta;

/// Whether a directory is a Maildir: it has `cur/` or `new/` (a link there counts: the
/// listing reports it rather than follow it).
fn is_maildir_at(dir: &Dir) -> bool {
    [&b"cur"[..], b"new"].iter().any(|n| {
        dir.stat(n).is_ok_and(|st| {
            matches!(
                walk::file_type(&st),
                FileType::Directory | FileType::Symlink
            )
        })
    })
}

/// Whether the link `name` of `dir` points to a directory (its target is `stat`'ed, never
/// read): a folder or an account put there as a link, which is reported.
fn links_to_dir(dir: &Dir, name: &[u8]) -> bool {
    std::fs::metadata(dir.join(name)).is_ok_and(|m| m.is_dir())
}

/// The subdirectories of `dir` (not hidden ones), sorted; a link to a directory is not
/// followed, and said ([`refuse_link`]). Its files are the store's own, kept with
/// [`Source::store`].
fn sorted_dirs(dir: &Dir, store: &Path, failures: &Failures) -> Result<Vec<Vec<u8>>> {
    let mut out = Vec::new();
    for (name, t) in dir.entries().map_err(|e| Error::io(dir.path(), e))? {
        if name.starts_with(b".") {
            continue;
        }
        match entry_type(dir, &name, t) {
            Some(FileType::Directory) => out.push(name),
            Some(FileType::Symlink) if links_to_dir(dir, &name) => {
                refuse_link(dir, &name, store, failures)
            }
            _ => {}
        }
    }
    out.sort();
    Ok(out)
}

/// A domain, user or `Maildir` directory of the store that is a symbolic link: never
/// followed. One that leads into the store (`store`, canonical) is an alias (a domain
/// alias, a user's second name): its mail is backed up where it leads, and it is a
/// warning, so that such a store does not fail every night. One that leads out of the
/// store is a failure.
fn refuse_link(dir: &Dir, name: &[u8], store: &Path, failures: &Failures) {
    let path = dir.join(name);
    match fs::canonicalize(&path) {
        Ok(to) if to.starts_with(store) => failures.warn(
            path.display(),
            format_args!(
                "a symbolic link to {} in the store: not followed (its mail is backed up there)",
                to.display()
            ),
        ),
        _ => failures.fail(path.display().to_string(), walk::LINK_REFUSED),
    }
}

/// Opens the subdirectory `name` of `dir` (one at a time: a store may have more accounts
/// than a process may hold open files); `None` if gone, or refused (reported).
fn open_sub(dir: &Dir, name: &[u8], failures: &Failures) -> Option<Dir> {
    match dir.sub(name) {
        Ok(d) => Some(d),
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) => {
            failures.fail(dir.join(name).display().to_string(), e);
            None
        }
    }
}

/// Finds the accounts of a store, or the single Maildir at `root`.
///
/// `accounts` narrows a store to those accounts; for a single Maildir its one entry is the
/// account's name (else the name is taken from the directory).
pub fn discover(root: &Path, accounts: &[String]) -> Result<Vec<AccountSource>> {
    discover_reporting(root, accounts, &Failures::default())
}

/// [`discover`], reporting to `failures` the domain, user and `Maildir` directories below
/// `root` that are symbolic links to directories: never followed (the store's own
/// directories are read; an alias made with a link is the account it points to, backed up
/// under its own name).
pub fn discover_reporting(
    root: &Path,
    accounts: &[String],
    failures: &Failures,
) -> Result<Vec<AccountSource>> {
    let meta = fs::metadata(root).map_err(|e| Error::io(root, e))?;
    if !meta.is_dir() {
        return Err(Error::InvalidInput(format!(
            "{} is not a directory",
            root.display()
        )));
    }
    let top = Dir::open(root).map_err(|e| Error::io(root, e))?;
    if is_maildir_at(&top) {
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
    let store = fs::canonicalize(root).map_err(|e| Error::io(root, e))?;
    for domain in sorted_dirs(&top, &store, failures)? {
        let Some(ddir) = open_sub(&top, &domain, failures) else {
            continue;
        };
        for user in sorted_dirs(&ddir, &store, failures)? {
            let Some(udir) = open_sub(&ddir, &user, failures) else {
                continue;
            };
            let maildir = match udir.stat(b"Maildir").map(|st| walk::file_type(&st)) {
                Ok(FileType::Directory) => udir.sub(b"Maildir").ok(),
                Ok(FileType::Symlink) if links_to_dir(&udir, b"Maildir") => {
                    refuse_link(&udir, b"Maildir", &store, failures);
                    continue;
                }
                _ => None,
            };
            let (path, rel) = if maildir.as_ref().is_some_and(is_maildir_at) {
                (
                    udir.join(b"Maildir"),
                    [&domain[..], b"/", &user, b"/Maildir"].concat(),
                )
            } else if is_maildir_at(&udir) {
                (
                    udir.path().to_path_buf(),
                    [&domain[..], b"/", &user].concat(),
                )
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
    let dir = Dir::open(maildir).map_err(|e| Error::io(maildir, e))?;
    folders_in(&dir, &Failures::default())
}

/// [`folders`] of an open Maildir; a folder directory that is a symbolic link to a
/// directory (or was swapped for one) is reported to `failures`, never followed.
fn folders_in(maildir: &Dir, failures: &Failures) -> Result<Vec<FolderSource>> {
    let mut out = vec![FolderSource {
        name: "INBOX".into(),
        dir: Vec::new(),
        path: maildir.path().to_path_buf(),
    }];
    let mut subs = Vec::new();
    for (name, t) in maildir
        .entries()
        .map_err(|e| Error::io(maildir.path(), e))?
    {
        if name.len() < 2 || name[0] != b'.' || name == b".." {
            continue;
        }
        let path = maildir.join(&name);
        match entry_type(maildir, &name, t) {
            Some(FileType::Directory) => match maildir.sub(&name) {
                Ok(d) if is_maildir_at(&d) => subs.push(FolderSource {
                    name: folder_name(&name),
                    dir: name,
                    path,
                }),
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => failures.fail(path.display().to_string(), e),
            },
            // `.Folder -> /elsewhere`; not `.dovecot.sieve -> sieve/x.sieve`.
            Some(FileType::Symlink) if links_to_dir(maildir, &name) => {
                failures.fail(path.display().to_string(), walk::LINK_REFUSED)
            }
            _ => {}
        }
    }
    subs.sort_by(|a, b| a.dir.cmp(&b.dir));
    out.extend(subs);
    Ok(out)
}

/// Files of a folder directory that are kept with it: everything but the message
/// directories and the caches Dovecot rebuilds (`dovecot.index*`, `dovecot.list.index*`,
/// `dovecot.mailbox.log*`, `maildirsize`, lock files).
pub fn list_folder_files(folder: &Path) -> Result<Vec<(Vec<u8>, FileMeta)>> {
    folder_files_in(&Dir::open(folder).map_err(|e| Error::io(folder, e))?)
}

/// [`list_folder_files`] of an open folder directory.
fn folder_files_in(folder: &Dir) -> Result<Vec<(Vec<u8>, FileMeta)>> {
    let mut out = Vec::new();
    for (name, t) in folder.entries().map_err(|e| Error::io(folder.path(), e))? {
        let skip = name.starts_with(b"dovecot.index")
            || name.starts_with(b"dovecot.list.index")
            || name.starts_with(b"dovecot.mailbox.log")
            || name == b"maildirsize"
            || name.ends_with(b".lock");
        // The type from readdir first: `cur`, `new`, `tmp` and, in INBOX, every `.Folder`
        // directory are skipped without a stat (three to four per folder).
        if skip || !matches!(t, FileType::RegularFile | FileType::Unknown) {
            continue;
        }
        match folder.stat(&name) {
            Ok(st) if walk::file_type(&st) == FileType::RegularFile => {
                out.push((name, FileMeta::of_stat(&st)))
            }
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(Error::io(folder.join(&name), e)),
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}

/// Reads the directories of a store (accounts, folders, their files; `cur/` and `new/`
/// stat'ed, and listed too when `listings`) on `threads` threads and throws what it read
/// away, so that the kernel has it cached. The CLI runs it while it derives the
/// repository key (Argon2id, CPU-bound) and loads the index: on a cold cache the walk of
/// an incremental backup is mostly waiting for the disk, and this overlaps that wait with
/// the start-up (BENCHMARKS.md). Without `listings` the message directories are only
/// stat'ed, as an incremental backup does for a folder unchanged since the parent
/// (docs/format.md, *Folders taken unchanged*): the listings of the folders that changed
/// are left to the backup, rather than every folder listed for nothing; with `--rescan`,
/// `--force` or `--stat-unchanged` every folder is listed. Errors are ignored here; the
/// backup's own walk reports them.
pub fn warm_directories(root: &Path, accounts: &[String], threads: usize, listings: bool) {
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
                    if listings {
                        let _ = list_messages(&f.path);
                    } else {
                        let _ = fs::symlink_metadata(f.path.join("new"));
                        let _ = fs::symlink_metadata(f.path.join("cur"));
                    }
                }
            });
        }
    });
}

/// What to back up and how.
#[derive(Clone, Debug)]
pub struct BackupOptions {
    /// A store root (`/var/vmail`) or a single Maildir.
    pub source: PathBuf,
    /// The account name of a single Maildir, or the accounts of a store to back up.
    pub accounts: Vec<String>,
    /// Worker threads; 0 means one per core.
    pub jobs: usize,
    /// Also stat messages the parent snapshot has, and read them again when their size or
    /// mtime changed (for stores whose files are edited in place, against Maildir's rules).
    pub stat_unchanged: bool,
    pub run: RunOptions,
}

/// A Maildir store (or one Maildir) as a [`Source`]. Accounts, folders and new messages
/// are read in parallel on the pipeline's pool. A message whose Maildir key the parent
/// snapshot has is neither read nor stat'ed: Maildir files never change once delivered,
/// so a flag change (a rename), a move from `new/` to `cur/` or to another folder keeps
/// the key, and only the entry's name and place change.
#[derive(Clone, Debug)]
pub struct MaildirSource {
    /// The store root or the Maildir, absolute.
    root: PathBuf,
    /// Where it is read: `root`, or the same directory in a filesystem snapshot.
    read: PathBuf,
    /// The filesystem snapshot it is read from: (the live filesystem's root, the
    /// snapshot's root).
    view: Option<(PathBuf, PathBuf)>,
    accounts: Vec<String>,
    jobs: usize,
    /// `--stat-unchanged`: known messages are stat'ed and folder files read again.
    stat_unchanged: bool,
}

impl MaildirSource {
    pub fn new(opts: &BackupOptions) -> Result<MaildirSource> {
        let root = std::path::absolute(&opts.source).map_err(|e| Error::io(&opts.source, e))?;
        Ok(MaildirSource {
            read: root.clone(),
            root,
            view: None,
            accounts: opts.accounts.clone(),
            jobs: opts.jobs,
            stat_unchanged: opts.stat_unchanged,
        })
    }

    /// Reads the store from a filesystem snapshot: `read_from` is (the live filesystem's
    /// root, the snapshot's root), as [`super::fs_snapshot::FsSnapshot::read_from`] gives
    /// them. The snapshot records the live paths (its label, the account names), so that
    /// it is as if taken from them.
    pub fn read_from(&mut self, read_from: &(PathBuf, PathBuf)) -> Result<()> {
        let real = fs::canonicalize(&self.root).map_err(|e| Error::io(&self.root, e))?;
        let rel = real.strip_prefix(&read_from.0).map_err(|_| {
            Error::InvalidInput(format!(
                "{}: not on the filesystem snapshotted for the backup",
                self.root.display()
            ))
        })?;
        self.read = read_from.1.join(rel);
        self.view = Some(read_from.clone());
        Ok(())
    }
}

/// Times in a row a folder is listed again for messages renamed before they could be
/// read without reading any of them: a server renaming faster than the messages are read
/// (a client toggling flags on a whole folder) is followed as long as each listing gets
/// some of them read, and at least [`VANISHED_TIME`] after the last that did (ten
/// listings can pass in a few milliseconds on a busy machine).
const VANISHED_ROUNDS: u32 = 10;
/// See [`VANISHED_ROUNDS`].
const VANISHED_TIME: std::time::Duration = std::time::Duration::from_secs(3);

impl Source for MaildirSource {
    type Session = ();

    fn label(&self) -> String {
        format!("maildir:{}", self.root.display())
    }

    fn parallelism(&self) -> Parallelism {
        Parallelism::Pool { jobs: self.jobs }
    }

    fn accounts(&self) -> Result<Vec<AccountSource>> {
        self.accounts_reporting(&Failures::default())
    }

    fn accounts_reporting(&self, failures: &Failures) -> Result<Vec<AccountSource>> {
        if self.read == self.root {
            return discover_reporting(&self.root, &self.accounts, failures);
        }
        // Read from a snapshot: found there, named and shown as the live store.
        let found = discover_reporting(&self.read, &self.accounts, failures)?;
        let live = |p: &Path| match p.strip_prefix(&self.read) {
            Ok(rel) => self.root.join(rel),
            Err(_) => p.to_path_buf(),
        };
        Ok((found.into_iter())
            .map(|mut a| {
                a.path = live(&a.path);
                if a.rel_path.is_empty() && self.accounts.is_empty() {
                    a.name = default_account_name(&self.root);
                }
                a
            })
            .collect())
    }

    fn open(&self, _account: &AccountSource) -> Result<()> {
        Ok(())
    }

    fn home(&self, account: &AccountSource, _: &Failures) -> Option<super::Home> {
        super::home::of(&self.root, self.view.as_ref(), account)
    }

    /// A store's root and domain directories (a single Maildir has none).
    fn store(&self) -> Option<super::Home> {
        let top = Dir::open(&self.read).ok()?;
        (!is_maildir_at(&top)).then(|| super::Home::Dir {
            dir: self.root.clone(),
            view: self.view.clone(),
        })
    }

    fn folders(
        &self,
        acc: &AccountSource,
        _session: &mut (),
        failures: &Failures,
    ) -> Result<AccountListing> {
        let dir = Dir::open_below_as(&self.read, &self.root, &acc.rel_path)
            .map_err(|(p, e)| Error::io(p, e))?;
        let folders = folders_in(&dir, failures)?;
        // The directories above the Maildir, from the top: `acc.path` minus the components
        // of `rel_path` still to come.
        let parts: Vec<&[u8]> = if acc.rel_path.is_empty() {
            Vec::new()
        } else {
            acc.rel_path.split(|&c| c == b'/').collect()
        };
        let mut dirs = Vec::with_capacity(parts.len());
        for (i, name) in parts.iter().enumerate() {
            let path = acc.path.ancestors().nth(parts.len() - 1 - i);
            if let Some(d) = path.and_then(|p| dir_entry(failures, name, p)) {
                dirs.push(d);
            }
        }
        Ok(AccountListing {
            folders,
            dirs,
            subscriptions: None,
        })
    }

    fn keys_across_folders(&self) -> bool {
        true
    }

    /// The stamps of `new/` and `cur/` (the ones there), from the folder's directory
    /// opened below the root (no link followed); `None` with `--stat-unchanged` (every
    /// message is stat'ed: listed), or when one cannot be stat'ed or is not a directory
    /// (the listing reports it).
    fn folder_stamps(&self, acc: &AccountSource, f: &FolderSource) -> Option<Vec<DirStamp>> {
        if self.stat_unchanged {
            return None;
        }
        let rel = [&acc.rel_path[..], b"/", &f.dir].concat();
        let dir = Dir::open_below_as(&self.read, &self.root, &rel).ok()?;
        let mut out = Vec::new();
        for sub in [&b"new"[..], b"cur"] {
            out.extend(super::unchanged::stamp(&dir, sub).ok()?);
        }
        Some(out)
    }

    fn backup_folder(
        &self,
        _session: &mut (),
        acc: &AccountSource,
        f: &FolderSource,
        out: &mut FolderWriter<'_>,
    ) -> Result<()> {
        // Opened from the root one directory at a time, none through a link: a folder
        // swapped for one since it was listed is refused.
        let rel = [&acc.rel_path[..], b"/", &f.dir].concat();
        let dir = Dir::open_below_as(&self.read, &self.root, &rel).map_err(|(p, e)| {
            let at = (p != f.path).then(|| format!("{}: ", p.display()));
            Error::InvalidInput(format!("{}{e}", at.unwrap_or_default()))
        })?;
        if !out.messages_kept() {
            self.backup_messages(acc, f, &dir, out);
        }
        folder_files(out, &dir, self.stat_unchanged)?;
        folder_dirs(out, &dir);
        Ok(())
    }

    /// Up to [`Samples::MAX_MESSAGES`] messages taken round-robin over folders and
    /// accounts, read in parallel until the budget is spent.
    fn samples(&self, accounts: &[AccountSource], samples: &Samples) {
        let max = Samples::MAX_MESSAGES;
        // Each message by its directory below the root (`cur/`, `new/` included) and name:
        // read from there, never through a link.
        let mut folders: Vec<Vec<(Vec<u8>, Vec<u8>)>> = Vec::new();
        let mut candidates = 0;
        'outer: for acc in accounts {
            let Ok(adir) = Dir::open_below(&self.read, &acc.rel_path) else {
                continue;
            };
            for f in folders_in(&adir, &Failures::default()).unwrap_or_default() {
                let listed = if f.dir.is_empty() {
                    list_in(&adir, &mut |_, _| {})
                } else {
                    match adir.sub(&f.dir) {
                        Ok(d) => list_in(&d, &mut |_, _| {}),
                        Err(_) => continue,
                    }
                };
                let files = listed.files;
                let at = |m: FileRef<'_>| {
                    let sub: &[u8] = if m.new { b"new" } else { b"cur" };
                    let dir = [&acc.rel_path[..], b"/", &f.dir, b"/", sub].concat();
                    (dir, m.name.to_vec())
                };
                let found: Vec<_> = files.iter().take(256).map(at).collect();
                candidates += found.len();
                folders.push(found);
                if candidates >= max * 4 {
                    break 'outer;
                }
            }
        }
        let mut picked = Vec::new();
        let mut round = 0;
        while picked.len() < max {
            let before = picked.len();
            for f in &folders {
                if let Some(p) = f.get(round) {
                    picked.push(p.clone());
                }
            }
            if picked.len() == before {
                break;
            }
            round += 1;
        }
        picked.truncate(max);
        // Only what is kept stays in memory.
        picked.par_iter().for_each(|(dir, name)| {
            if samples.full() {
                return;
            }
            let Ok(dir) = Dir::open_below(&self.read, dir) else {
                return;
            };
            if let Ok(Checked::Read(data, _)) = read_checked(&dir, name) {
                samples.offer(&data);
            }
        });
    }
}

impl MaildirSource {
    /// Lists the folder's messages and keeps those the parent has, reading the others;
    /// a window of [`WINDOW`] at a time in key order, so that the folder's entries go to
    /// its chunks as they come ([`FolderWriter::in_key_order`]).
    fn backup_messages(
        &self,
        acc: &AccountSource,
        f: &FolderSource,
        dir: &Dir,
        out: &mut FolderWriter<'_>,
    ) {
        let mut listing = list_in(dir, &mut |_, _| {});
        let (files, errors) = (
            std::mem::take(&mut listing.files),
            std::mem::take(&mut listing.errors),
        );
        for e in errors {
            match e {
                Error::Io { path, source } => out.fail(path.display().to_string(), source),
                e => out.fail(format!("{}: {}", acc.name, f.name), e),
            }
        }
        out.expect(files.len() as u64);
        out.in_key_order();
        let mut parent = out.parent_keys();
        let mut files = files.iter().peekable();
        while files.peek().is_some() {
            // Each file: the parent's entry kept, or its place in `to_read`.
            let mut window: Vec<Result<MessageEntry, usize>> = Vec::new();
            let mut to_read = Vec::new();
            for file in files.by_ref().take(WINDOW) {
                match self.kept_entry(&mut parent, &listing, file) {
                    Some(e) => window.push(Ok(e)),
                    None => {
                        window.push(Err(to_read.len()));
                        to_read.push(file.owned());
                    }
                }
            }
            let mut read = read_new(out, dir, &mut listing, to_read, f);
            for w in window {
                match w {
                    Ok(e) => out.unchanged(e),
                    Err(i) => {
                        if let Some(e) = read[i].take() {
                            out.add(e);
                        }
                    }
                }
            }
        }
    }

    /// The parent's entry of `file`, as it is now (renamed or moved), when it is kept
    /// without reading. Maildir files never change once delivered: the same key is the
    /// same message, whatever its flags (name) or place. With `stat_unchanged` a changed
    /// size or mtime makes us read it again anyway, for stores edited in place.
    fn kept_entry(
        &self,
        parent: &mut KeyLookup<'_>,
        listing: &Listing,
        file: FileRef<'_>,
    ) -> Option<MessageEntry> {
        let mut e = parent.get(file.key())?;
        if self.stat_unchanged {
            let st = listing.dir(file.new)?.stat(file.name).ok()?;
            let m = FileMeta::of_stat(&st);
            if (m.size, m.mtime) != (e.size, e.mtime) {
                return None;
            }
            (e.mode, e.uid, e.gid) = (m.mode, m.uid, m.gid);
        }
        e.name.clear();
        e.name.extend_from_slice(file.name);
        e.new = file.new;
        Some(e)
    }
}

/// Messages listed, read and saved at a time: a window's entries are held until all of
/// it is read (in parallel), then saved in key order. 4,096 entries are about 1.5 MB,
/// and far more files than the threads that read them.
const WINDOW: usize = 4096;

/// Owner and mode of a directory, recorded as `name`; `None` (reported unless it is
/// missing) if it cannot be stat'ed.
fn dir_entry(failures: &Failures, name: &[u8], path: &Path) -> Option<DirEntry> {
    match fs::metadata(path) {
        Ok(m) => Some(DirEntry {
            name: name.to_vec(),
            mode: m.mode() & 0o7777,
            uid: m.uid(),
            gid: m.gid(),
        }),
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) => {
            failures.fail(path.display().to_string(), e);
            None
        }
    }
}
/// Reads the messages not kept from the parent, in parallel: the entry of each, in the
/// order of `to_read`, `None` for one not stored (reported, or gone). A file gone when
/// opened was renamed by the server (flag change, new/ -> cur/) or deleted since the
/// listing: the folder is listed again (`listing` with it) and the renamed ones read
/// under their new names; a key found nowhere was deleted, which is not an error.
fn read_new(
    out: &FolderWriter<'_>,
    dir: &Dir,
    listing: &mut Listing,
    to_read: Vec<MessageFile>,
    f: &FolderSource,
) -> Vec<Option<MessageEntry>> {
    let mut entries: Vec<Option<MessageEntry>> = vec![None; to_read.len()];
    let mut pending: Vec<(usize, MessageFile)> = to_read.into_iter().enumerate().collect();
    let mut fruitless = 0;
    let mut progress = std::time::Instant::now();
    loop {
        let before = pending.len();
        let l: &Listing = listing;
        let read: Vec<(usize, Read)> = pending
            .into_par_iter()
            .map(|(i, file)| match read_message(out, l, file) {
                Ok(r) => (i, r),
                Err((path, e)) => {
                    out.fail(path.display().to_string(), e);
                    (i, Read::Failed)
                }
            })
            .collect();
        let mut vanished = Vec::new();
        for (i, r) in read {
            match r {
                Read::Entry(e) => entries[i] = Some(e),
                Read::Vanished(file) => vanished.push((i, file)),
                Read::Failed => out.skipped(),
            }
        }
        if vanished.is_empty() {
            break;
        }
        fruitless = match vanished.len() < before {
            true => {
                progress = std::time::Instant::now();
                0
            }
            false => fruitless + 1,
        };
        let follow = fruitless < VANISHED_ROUNDS || progress.elapsed() < VANISHED_TIME;
        *listing = list_in(dir, &mut |_, _| {});
        let now = std::mem::take(&mut listing.files);
        pending = Vec::new();
        for (i, file) in vanished {
            match now.find(file.key()).map(|f| f.owned()) {
                Some(renamed) if follow => pending.push((i, renamed)),
                Some(renamed) => out.fail(
                    renamed.path(&f.path).display().to_string(),
                    "renamed again each time it was read; not in this snapshot",
                ),
                None => out.skipped(),
            }
        }
    }
    entries
}

/// Stores the folder's own files (listed every time: they are few, and Dovecot replaces
/// `dovecot-uidlist` and `dovecot-keywords` by a rename, which changes the folder's
/// directory, not `cur/` or `new/`); one unchanged since the parent (same size, mtime and
/// inode, its mtime proven older than the parent's start: [`super::unchanged::file_proven`])
/// is not read again.
fn folder_files(out: &mut FolderWriter<'_>, dir: &Dir, stat_unchanged: bool) -> Result<()> {
    let known = out.parent().filter(|_| !stat_unchanged);
    let started = out.parent_started();
    let same = |pf: &&crate::repo::tree::FileEntry, meta: &FileMeta| {
        (pf.size, pf.mtime) == (meta.size, meta.mtime)
            && (pf.inode == 0 || pf.inode == meta.inode)
            && super::unchanged::file_proven(pf.mtime, started)
    };
    for (name, meta) in folder_files_in(dir)? {
        let pf = known.and_then(|k| k.files.iter().find(|e| e.name == name));
        if let Some(pf) = pf.filter(|pf| same(pf, &meta)) {
            let mut e = pf.clone();
            (e.mode, e.uid, e.gid) = (meta.mode, meta.uid, meta.gid);
            out.keep_file(e);
            continue;
        }
        // Read from the folder's directory, never through a link.
        let data = match read_checked(dir, &name) {
            Ok(Checked::Read(data, _)) => data,
            Ok(Checked::Changed) => {
                let path = dir.join(&name);
                let e = Error::ChangedWhileRead { path: path.clone() };
                out.fail(path.display().to_string(), e);
                continue;
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => {
                out.fail(dir.join(&name).display().to_string(), e);
                continue;
            }
        };
        out.count_read(data.len() as u64);
        out.file(FolderFile {
            name,
            data: FileData::Bytes(data),
            meta: Some(meta),
        })?;
    }
    Ok(())
}

/// Records the folder's directory and its `cur`, `new` and `tmp` subdirectories.
fn folder_dirs(out: &mut FolderWriter<'_>, dir: &Dir) {
    for d in [&b""[..], b"cur", b"new", b"tmp"] {
        let st = if d.is_empty() {
            dir.fstat()
        } else {
            dir.stat(d)
        };
        match st {
            Ok(st) if walk::file_type(&st) == FileType::Directory => {
                let m = FileMeta::of_stat(&st);
                out.dir(DirEntry {
                    name: d.to_vec(),
                    mode: m.mode,
                    uid: m.uid,
                    gid: m.gid,
                });
            }
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => out.fail(dir.join(d).display().to_string(), e),
        }
    }
}

/// What reading a listed message gave.
enum Read {
    Entry(MessageEntry),
    /// Not there under its listed name any more (renamed or deleted).
    Vanished(MessageFile),
    /// Reported.
    Failed,
}

/// Reads one message and stores it.
fn read_message(
    out: &FolderWriter,
    listing: &Listing,
    file: MessageFile,
) -> Result<Read, (PathBuf, Error)> {
    let Some(dir) = listing.dir(file.new) else {
        return Ok(Read::Vanished(file));
    };
    let path = dir.join(&file.name);
    let (data, meta) = match read_checked(dir, &file.name) {
        Ok(Checked::Read(data, meta)) => (data, meta),
        Ok(Checked::Changed) => {
            let e = Error::ChangedWhileRead { path: path.clone() };
            return Err((path, e));
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Read::Vanished(file)),
        Err(e) => return Err((path.clone(), Error::io(&path, e))),
    };
    let msg = NewMessage {
        data: &data,
        read: data.len() as u64,
        meta: MessageMeta::Maildir {
            name: file.name,
            new: file.new,
            file: meta,
        },
    };
    match out.store(msg) {
        Ok(e) => Ok(Read::Entry(e)),
        Err(e) => Err((path, e)),
    }
}

/// A file read whole by [`read_checked`].
enum Checked {
    Read(Vec<u8>, FileMeta),
    /// It changed while read, twice.
    Changed,
}

/// Reads the file `name` of `dir` whole (opened relative to `dir`, never through a link),
/// with its `stat`: one whose size, mtime or ctime changed while it was read is read
/// again once, then [`Checked::Changed`].
fn read_checked(dir: &Dir, name: &[u8]) -> io::Result<Checked> {
    use std::io::Read;
    for _ in 0..2 {
        let (f, before) = dir.open_file(name)?;
        let size = before.st_size.max(0) as u64;
        let mut data = Vec::with_capacity(size as usize);
        // The path is for the test hook only: no allocation per message otherwise.
        let path = if cfg!(any(test, feature = "testing")) {
            dir.join(name)
        } else {
            PathBuf::new()
        };
        // Up to the size `fstat` gave, not on to a read that returns 0 (a syscall per
        // message): a file that grew meanwhile shows in the second `fstat`.
        walk::Reading::new(&f, &path)
            .take(size)
            .read_to_end(&mut data)?;
        let after = rustix::fs::fstat(&f)?;
        if walk::same_file_state(&before, &after) && data.len() as u64 == before.st_size as u64 {
            return Ok(Checked::Read(data, FileMeta::of_stat(&before)));
        }
    }
    Ok(Checked::Changed)
}

/// Reads a whole file with one open and one fstat.
pub(crate) fn read_with_meta(path: &Path) -> io::Result<(Vec<u8>, FileMeta)> {
    use std::io::Read;
    let mut f = fs::File::open(path)?;
    let meta = FileMeta::of(&f.metadata()?);
    let mut data = Vec::with_capacity(meta.size as usize);
    f.read_to_end(&mut data)?;
    Ok((data, meta))
}

#[cfg(test)]
mod tests {
    use super::*;

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

        // The store's own files are kept by the store source: discovering accounts says
        // nothing of them.
        fs::write(t.path().join("shared-mailboxes"), b"dict").unwrap();
        fs::write(t.path().join("a.org/notes.txt"), b"x").unwrap();
        let failures = Failures::default();
        assert_eq!(
            discover_reporting(t.path(), &[], &failures).unwrap().len(),
            3
        );
        assert!(failures.take_warnings().is_empty());
        assert!(failures.take().is_empty());
        let src = |root: &Path| {
            MaildirSource::new(&BackupOptions {
                source: root.to_path_buf(),
                accounts: Vec::new(),
                jobs: 1,
                stat_unchanged: false,
                run: RunOptions::new("h"),
            })
            .unwrap()
        };
        assert!(matches!(
            src(t.path()).store(),
            Some(super::super::Home::Dir { .. })
        ));
        assert!(src(&t.path().join("a.org/bob/Maildir")).store().is_none());
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

    /// Regression (issue 24, item 4): `cur/` swapped for a link to another tree while the
    /// backup runs (after the folder was found, before `cur/` is opened) is refused and
    /// reported, and the other tree's messages are not backed up.
    #[test]
    fn a_cur_swapped_for_a_link_during_the_backup_is_refused() {
        use crate::source::walk::{hook, Event};
        let t = tempfile::tempdir().unwrap();
        let md = t.path().join("Maildir");
        let elsewhere = t.path().join("elsewhere");
        for d in ["cur", "new", "tmp", ".F3/cur", ".F3/new", ".F3/tmp"] {
            fs::create_dir_all(md.join(d)).unwrap();
        }
        fs::create_dir_all(&elsewhere).unwrap();
        fs::write(md.join(".F3/cur/1.M1P1.h:2,S"), b"Subject: mine\n\nx\n").unwrap();
        fs::write(elsewhere.join("2.M1P1.h:2,S"), b"Subject: not mine\n\ny\n").unwrap();
        let cur = md.join(".F3/cur");
        let _hook = {
            let (cur, elsewhere) = (cur.clone(), elsewhere.clone());
            let done = std::sync::atomic::AtomicBool::new(false);
            hook::set(&md, move |e: &Event<'_>| {
                if matches!(e, Event::Open(p) if *p == cur)
                    && !done.swap(true, std::sync::atomic::Ordering::SeqCst)
                {
                    fs::remove_dir_all(&cur).unwrap();
                    std::os::unix::fs::symlink(&elsewhere, &cur).unwrap();
                }
            })
        };
        let mut repo = crate::repo::memory_repository();
        let opts = BackupOptions {
            source: md.clone(),
            accounts: vec!["a".into()],
            jobs: 1,
            stat_unchanged: false,
            run: RunOptions::new("h"),
        };
        let r = crate::ops::backup::run(
            &mut repo,
            &MaildirSource::new(&opts).unwrap(),
            &opts.run,
            (1_000, 0),
            &crate::report::NoProgress,
        )
        .unwrap();
        assert_eq!(r.items_new, 0, "{r:?}");
        assert_eq!(r.failures.len(), 1, "{:?}", r.failures);
        assert_eq!(r.failures[0].item, cur.display().to_string());
        assert!(
            r.failures[0].error.contains("symbolic link"),
            "{:?}",
            r.failures
        );
    }

    /// Regression (issue 24, item 7): a message rewritten in place while it was read was
    /// stored torn. Read again once; changed again, it is reported and left out (the next
    /// backup reads it: a Maildir key the snapshot has is never read again).
    #[test]
    fn a_message_changed_while_read_is_read_again_then_reported() {
        use crate::source::walk::{hook, Event};
        use std::sync::atomic::{AtomicBool, AtomicU32, Ordering::SeqCst};
        let t = tempfile::tempdir().unwrap();
        let md = t.path().join("Maildir");
        for d in ["cur", "new", "tmp"] {
            fs::create_dir_all(md.join(d)).unwrap();
        }
        let m = md.join("cur/1.M1P1.h:2,S");
        fs::write(&m, b"Subject: mine\n\nx\n").unwrap();
        let appends = std::sync::Arc::new(AtomicU32::new(0));
        let _hook = {
            let (m, appends, armed) = (m.clone(), appends.clone(), AtomicBool::new(false));
            hook::set(&md, move |e: &Event<'_>| match e {
                Event::Open(p) if *p == m => armed.store(true, SeqCst),
                Event::Read { path, .. }
                    if *path == m && armed.swap(false, SeqCst) && appends.load(SeqCst) > 0 =>
                {
                    appends.fetch_sub(1, SeqCst);
                    let mut f = fs::OpenOptions::new().append(true).open(&m).unwrap();
                    std::io::Write::write_all(&mut f, b"more\n").unwrap();
                }
                _ => {}
            })
        };
        let backup = |n: u32| {
            appends.store(n, SeqCst);
            let mut repo = crate::repo::memory_repository();
            let opts = BackupOptions {
                source: md.clone(),
                accounts: vec!["a".into()],
                jobs: 1,
                stat_unchanged: false,
                // No dictionary: its samples would read the message first.
                run: RunOptions {
                    compression: Some(crate::repo::compress::Compression::None),
                    ..RunOptions::new("h")
                },
            };
            crate::ops::backup::run(
                &mut repo,
                &MaildirSource::new(&opts).unwrap(),
                &opts.run,
                (1_000, 0),
                &crate::report::NoProgress,
            )
            .unwrap()
        };
        let once = backup(1);
        assert!(once.failures.is_empty(), "{:?}", once.failures);
        assert_eq!(once.items_new, 1);
        let twice = backup(2);
        assert_eq!(twice.items_new, 0, "{twice:?}");
        assert_eq!(twice.failures.len(), 1, "{:?}", twice.failures);
        assert_eq!(twice.failures[0].item, m.display().to_string());
        assert!(twice.failures[0].error.contains("changed while read"));
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
        assert_eq!(files.get(0).unwrap().name, b"1.M1P1.h:2,S");
    }
}
