//! mbox files as a [`Source`]: a spool (`/var/mail`, one file per user, each the user's
//! INBOX), one mbox file as one folder of an account, or a mail client's folder tree of
//! mbox files (Thunderbird's `Archive.sbd/2023`, mutt's and Dovecot's plain directories).
//! The codec is [`crate::mail::mbox`]; this module finds the files and keeps the books.
//!
//! Each message goes to the pipeline with its flags, keywords and internal date
//! ([`MessageMeta::Flags`]): its Maildir key is made from the folder, the date, its number
//! in the file (`uid`) and a `validity` that changes whenever the numbers are given anew.
//!
//! Incremental: the folder's state file ([`STATE_FILE`]) keeps the file's size, the hashes
//! of its head and of the bytes before its end ([`MboxState`]), the number of messages and
//! the validity. A file that only grew is read from its old end (the report's
//! `bytes_read` counts only the new bytes) and the parent's entries are kept; an unchanged
//! one is not read at all, nor are its entries (the parent's chunks are kept by id); a rewritten one (an expunge) is read again under a new
//! validity: its messages get new keys, but their content, already in the repository, is
//! not stored again.

use super::NewMessage;
use super::RunOptions;
use super::{Account, AccountListing, Failures, Folder, FolderWriter, MessageId, MessageMeta};
use super::{Parallelism, Samples, Source};
use crate::error::{Error, Result};
use crate::mail::layout::{self, Tree};
use crate::mail::mbox::{Change, MboxMessage, MboxReader, MboxState};
use crate::mail::MailError;
use crate::repo::lock;
use crate::repo::tree::MessageEntry;
use crate::report::Failure;
use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::fs::File;
use std::io::BufReader;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// The folder file in which an mbox backup keeps a folder's [`FolderState`].
pub const STATE_FILE: &[u8] = b"mailvault-mbox-state";

/// Messages stored in parallel at a time, at most (and at most [`BATCH_BYTES`]); the next
/// batch is read meanwhile.
const BATCH_MESSAGES: usize = 256;
const BATCH_BYTES: usize = 8 << 20;

/// What is backed up.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MboxLayout {
    /// A spool directory: each file is a user's INBOX, the account `user@domain` (`user`
    /// without a domain).
    Spool { domain: Option<String> },
    /// One mbox file: one folder of one account.
    File { account: String, folder: String },
    /// A mail client's folder tree of one account.
    Tree { account: String },
    /// A store of folder trees, `<domain>/<user>/` (as `restore --target mbox:` writes a
    /// snapshot of a Maildir store): each is the account `user@domain`.
    Store,
}

/// What to back up and how.
#[derive(Clone, Debug)]
pub struct MboxOptions {
    /// The spool directory, the file or the tree.
    pub path: PathBuf,
    pub layout: MboxLayout,
    /// Worker threads; 0 means one per core.
    pub jobs: usize,
    pub run: RunOptions,
}

/// A folder's sync state, kept in [`STATE_FILE`] (JSON).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct FolderState {
    pub version: u32,
    /// Numbers the messages' keys; a new one whenever the file is read from the start
    /// again after it changed.
    pub validity: u32,
    pub mbox: MboxState,
}

/// mbox files as a [`Source`].
#[derive(Clone, Debug)]
pub struct MboxSource {
    path: PathBuf,
    layout: MboxLayout,
    jobs: usize,
    /// Folder trees walked by [`Source::samples`]: [`Source::folders`] takes them instead
    /// of walking each tree again.
    walked: Arc<Mutex<HashMap<PathBuf, Walked>>>,
    /// What [`Source::accounts`] found and did not take (a directory or a link in a spool,
    /// a file among a store's domains): reported by the first [`Source::folders`].
    passed_over: Arc<Mutex<Vec<Failure>>>,
}

/// An account's folder tree as walked (by account path): its folders and what failed.
type Walked = (Vec<Folder>, Vec<Failure>);

impl MboxSource {
    pub fn new(opts: &MboxOptions) -> Result<MboxSource> {
        let path = std::path::absolute(&opts.path).map_err(|e| Error::io(&opts.path, e))?;
        let meta = std::fs::metadata(&path).map_err(|e| Error::io(&path, e))?;
        match (&opts.layout, meta.is_dir()) {
            (MboxLayout::File { .. }, true) => {
                return Err(Error::InvalidInput(format!(
                    "{} is a directory: name a file, or back up the folder tree with --account only",
                    path.display()
                )))
            }
            (MboxLayout::Spool { .. } | MboxLayout::Tree { .. } | MboxLayout::Store, false) => {
                return Err(Error::InvalidInput(format!(
                    "{} is not a directory: a spool or a folder tree is a directory (one mbox file needs --account)",
                    path.display()
                )))
            }
            _ => {}
        }
        if let Some(m) = maildir_within(&path, &opts.layout) {
            return Err(Error::InvalidInput(format!(
                "{} is a Maildir, not mbox files: back it up as maildir:{}",
                m.display(),
                path.display()
            )));
        }
        Ok(MboxSource {
            path,
            layout: opts.layout.clone(),
            jobs: opts.jobs,
            walked: Arc::default(),
            passed_over: Arc::default(),
        })
    }

    /// The folders of an account: its tree's as [`Source::samples`] walked it, if it did,
    /// else walked now.
    fn list_folders(&self, account: &Account, failures: &Failures) -> Vec<Folder> {
        match &self.layout {
            MboxLayout::Spool { .. } => take_file(&account.path, failures)
                .then(|| Folder::named("INBOX", account.path.clone()))
                .into_iter()
                .collect(),
            MboxLayout::File { folder: f, .. } => take_file(&account.path, failures)
                .then(|| Folder::named(f, account.path.clone()))
                .into_iter()
                .collect(),
            MboxLayout::Tree { .. } | MboxLayout::Store => {
                if let Some((folders, failed)) = lock(&self.walked).remove(&account.path) {
                    failures.extend(failed);
                    return folders;
                }
                let mut out = Vec::new();
                walk_tree(&account.path, Path::new(""), &mut out, failures);
                out
            }
        }
    }
}

/// `<domain>/<user>/Maildir` of an account, where a restore into a store puts it.
fn rel_path(account: &str) -> Vec<u8> {
    super::imap::account_rel_path(account)
}

/// Whether `dir` is a Maildir (has `cur/` and `new/`).
fn is_maildir(dir: &Path) -> bool {
    dir.join("cur").is_dir() && dir.join("new").is_dir()
}

/// A Maildir where the layout expects mbox files: the tree itself, or an account of a
/// store (`<domain>/<user>/` or its `Maildir/`).
fn maildir_within(path: &Path, layout: &MboxLayout) -> Option<PathBuf> {
    match layout {
        MboxLayout::Tree { .. } => is_maildir(path).then(|| path.to_path_buf()),
        MboxLayout::Store => sub_dirs(path)
            .ok()?
            .into_iter()
            .flat_map(|(_, d)| sub_dirs(&d).unwrap_or_default())
            .flat_map(|(_, u)| [u.clone(), u.join("Maildir")])
            .find(|d| is_maildir(d)),
        _ => None,
    }
}

/// How a file starts, taken as an mbox ([`mbox_start`]).
#[derive(Debug, PartialEq, Eq)]
enum Start {
    /// An mbox: empty, or its first line that is not empty is a `From ` line, after
    /// `skip` bytes of empty lines (not a message: reported).
    Mbox { skip: u64 },
    /// Not an mbox, and why (reported; the file is not backed up).
    Not(&'static str),
}

/// The bytes of a file's head looked at for its first line that is not empty.
const HEAD: usize = 64 * 1024;

/// How the file `f` starts: an mbox when its first line that is not empty (`\n` or
/// `\r\n`) is a `From ` line without a NUL byte; binary data (a NUL byte before that
/// line ends) or any other first line is not an mbox.
fn mbox_start(f: &File) -> std::io::Result<Start> {
    let mut head = vec![0u8; HEAD];
    let mut n = 0;
    while n < head.len() {
        match f.read_at(&mut head[n..], n as u64)? {
            0 => break,
            k => n += k,
        }
    }
    let head = &head[..n];
    let mut p = 0;
    while head[p..].starts_with(b"\n") || head[p..].starts_with(b"\r\n") {
        p += if head[p] == b'\n' { 1 } else { 2 };
    }
    let line = &head[p..];
    let line = memchr::memchr(b'\n', line).map_or(line, |i| &line[..i]);
    Ok(if memchr::memchr(0, &head[..p + line.len()]).is_some() {
        Start::Not("binary data (a NUL byte in its first line): not an mbox file, not backed up")
    } else if p == n || line.starts_with(b"From ") {
        Start::Mbox { skip: p as u64 }
    } else {
        Start::Not(
            "not an mbox file (its first line that is not empty does not start with `From `): not backed up",
        )
    })
}

/// Whether the file at `path` is taken as an mbox ([`mbox_start`]); what is not, and
/// empty lines before its first `From ` line, are reported to `failures`.
fn take_file(path: &Path, failures: &Failures) -> bool {
    let start = File::open(path).and_then(|f| mbox_start(&f));
    match start {
        Ok(Start::Mbox { skip }) => {
            if skip > 0 {
                failures.fail(path.display().to_string(), leading(skip));
            }
            true
        }
        Ok(Start::Not(why)) => {
            failures.fail(path.display().to_string(), why);
            false
        }
        Err(e) => {
            failures.fail(path.display().to_string(), e);
            false
        }
    }
}

/// What is said of `skip` bytes of empty lines before a file's first `From ` line.
fn leading(skip: u64) -> String {
    format!("bytes 0..{skip} before its first `From ` line are empty lines: not a message, not backed up (the messages after them are)")
}

/// The mbox files of a folder tree below `dir` (`rel`: the path so far), as folders;
/// symbolic links and special files are reported and left out.
fn walk_tree(root: &Path, rel: &Path, out: &mut Vec<Folder>, failures: &Failures) {
    let dir = root.join(rel);
    let entries = match std::fs::read_dir(&dir) {
        Ok(e) => e,
        Err(e) => {
            failures.fail(dir.display().to_string(), e);
            return;
        }
    };
    let mut names = Vec::new();
    for e in entries {
        match e {
            Ok(e) => names.push(e),
            // An entry that cannot be read is reported, not skipped.
            Err(e) => failures.fail(dir.display().to_string(), e),
        }
    }
    names.sort_by_key(|e| e.file_name());
    for e in names {
        let name = e.file_name();
        let rel = rel.join(&name);
        let path = root.join(&rel);
        let ft = match e.file_type() {
            Ok(ft) => ft,
            Err(err) => {
                failures.fail(e.path().display().to_string(), err);
                continue;
            }
        };
        if ft.is_dir() {
            if is_maildir(&path) {
                failures.fail(
                    path.display().to_string(),
                    "a Maildir inside an mbox tree: not backed up (back it up with maildir:)",
                );
            } else {
                walk_tree(root, &rel, out, failures);
            }
        } else if ft.is_file() {
            use std::os::unix::ffi::OsStrExt;
            if layout::is_index_file(name.as_bytes()) {
                continue;
            }
            if !take_file(&path, failures) {
                continue;
            }
            match layout::path_to_folder(&rel, Tree::Mbox) {
                Some(f) => out.push(Folder::in_tree(&f, path)),
                None => failures.fail(path.display().to_string(), "not a folder name"),
            }
        } else if !layout::is_index_file(std::os::unix::ffi::OsStrExt::as_bytes(name.as_os_str())) {
            failures.fail(
                path.display().to_string(),
                "not a regular file or directory (a symbolic link or a special file): not backed up",
            );
        }
    }
}

/// The directories directly below `dir` whose names are UTF-8 (sorted), with their paths;
/// symbolic links are not followed.
fn sub_dirs(dir: &Path) -> Result<Vec<(String, PathBuf)>> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).map_err(|e| Error::io(dir, e))? {
        let e = e.map_err(|e| Error::io(dir, e))?;
        if !e.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        if let Ok(name) = e.file_name().into_string() {
            if !name.starts_with('.') {
                out.push((name, e.path()));
            }
        }
    }
    out.sort();
    Ok(out)
}

/// [`sub_dirs`], with what else `dir` holds added to `passed_over`: files and links
/// (index, lock and hidden files aside, [`layout::is_index_file`]), and names that are not
/// UTF-8.
fn sub_dirs_reporting(
    dir: &Path,
    passed_over: &mut Vec<Failure>,
) -> Result<Vec<(String, PathBuf)>> {
    for e in std::fs::read_dir(dir).map_err(|e| Error::io(dir, e))? {
        let e = e.map_err(|e| Error::io(dir, e))?;
        use std::os::unix::ffi::OsStrExt;
        if layout::is_index_file(e.file_name().as_bytes()) {
            continue;
        }
        let why = if !e.file_type().is_ok_and(|t| t.is_dir()) {
            "not a directory (a store holds <domain>/<user>/ folder trees): not backed up"
        } else if e.file_name().to_str().is_none() {
            "a name that is not UTF-8, so not a domain or user: not backed up"
        } else {
            continue;
        };
        passed_over.push(Failure::new(e.path().display().to_string(), why));
    }
    sub_dirs(dir)
}

/// Whether `dir` looks like a store of `<domain>/<user>/` folder trees rather than a
/// spool: it has directories and no regular files other than index and lock files.
pub fn is_store(dir: &Path) -> Result<bool> {
    let (mut dirs, mut files) = (0, 0);
    for e in std::fs::read_dir(dir).map_err(|e| Error::io(dir, e))? {
        let e = e.map_err(|e| Error::io(dir, e))?;
        let Ok(t) = e.file_type() else { continue };
        if t.is_dir() {
            dirs += 1;
        } else if t.is_file() && layout::spool_user(&e.file_name()).is_some() {
            files += 1;
        }
    }
    Ok(dirs > 0 && files == 0)
}

impl Source for MboxSource {
    type Session = ();

    fn label(&self) -> String {
        format!("mbox:{}", self.path.display())
    }

    fn parallelism(&self) -> Parallelism {
        Parallelism::Pool { jobs: self.jobs }
    }

    fn accounts(&self) -> Result<Vec<Account>> {
        match &self.layout {
            MboxLayout::Spool { domain } => {
                let mut out = Vec::new();
                let entries =
                    std::fs::read_dir(&self.path).map_err(|e| Error::io(&self.path, e))?;
                let mut passed_over = Vec::new();
                for e in entries {
                    let e = e.map_err(|e| Error::io(&self.path, e))?;
                    let Some(user) = layout::spool_user(&e.file_name()) else {
                        continue;
                    };
                    if !e.file_type().is_ok_and(|t| t.is_file()) {
                        passed_over.push(Failure::new(
                            e.path().display().to_string(),
                            "not a regular file (a directory, a symbolic link or a special file) in a spool: not backed up",
                        ));
                        continue;
                    }
                    let name = match domain {
                        Some(d) => format!("{user}@{d}"),
                        None => user,
                    };
                    out.push(Account {
                        rel_path: rel_path(&name),
                        name,
                        path: e.path(),
                    });
                }
                out.sort_by(|a, b| a.name.cmp(&b.name));
                lock(&self.passed_over).extend(passed_over);
                if out.is_empty() {
                    return Err(Error::InvalidInput(format!(
                        "{}: no mbox file in this spool directory (a store of folder trees holds <domain>/<user>/ directories)",
                        self.path.display()
                    )));
                }
                Ok(out)
            }
            MboxLayout::Store => {
                let mut out = Vec::new();
                let mut passed_over = Vec::new();
                for (domain, dpath) in sub_dirs_reporting(&self.path, &mut passed_over)? {
                    for (user, upath) in sub_dirs_reporting(&dpath, &mut passed_over)? {
                        let name = format!("{user}@{domain}");
                        out.push(Account {
                            rel_path: rel_path(&name),
                            name,
                            path: upath,
                        });
                    }
                }
                lock(&self.passed_over).extend(passed_over);
                Ok(out)
            }
            MboxLayout::File { account, .. } | MboxLayout::Tree { account } => Ok(vec![Account {
                name: account.clone(),
                rel_path: Vec::new(),
                path: self.path.clone(),
            }]),
        }
    }

    fn open(&self, _account: &Account) -> Result<()> {
        Ok(())
    }

    fn folders(
        &self,
        account: &Account,
        _session: &mut (),
        failures: &Failures,
    ) -> Result<AccountListing> {
        failures.extend(std::mem::take(&mut *lock(&self.passed_over)));
        Ok(AccountListing {
            folders: self.list_folders(account, failures),
            dirs: Vec::new(),
            subscriptions: None,
        })
    }

    fn state_file(&self) -> Option<&'static [u8]> {
        Some(STATE_FILE)
    }

    fn samples(&self, accounts: &[Account], samples: &Samples) {
        for a in accounts {
            let failures = Failures::default();
            let folders = self.list_folders(a, &failures);
            if matches!(self.layout, MboxLayout::Tree { .. } | MboxLayout::Store) {
                lock(&self.walked).insert(a.path.clone(), (folders.clone(), failures.take()));
            }
            for f in &folders {
                let Ok(file) = File::open(&f.path) else {
                    continue;
                };
                for m in MboxReader::new(BufReader::new(file)).take(64).flatten() {
                    if samples.full() {
                        return;
                    }
                    samples.offer(&m.bytes);
                }
            }
        }
    }

    fn backup_folder(
        &self,
        _session: &mut (),
        account: &Account,
        folder: &Folder,
        out: &mut FolderWriter<'_>,
    ) -> Result<()> {
        let path = &folder.path;
        let file = File::open(path).map_err(|e| Error::io(path, e))?;
        let meta = file.metadata().map_err(|e| Error::io(path, e))?;
        let size = meta.len();
        let mtime = meta.mtime();
        let read_at = |off: u64, buf: &mut [u8]| file.read_exact_at(buf, off);
        let parent: Option<FolderState> = out
            .parent_state()
            .and_then(|d| serde_json::from_slice(&d).ok());
        let change = match &parent {
            Some(p) if out.parent().is_some() => p
                .mbox
                .compare(size, read_at)
                .map_err(|e| Error::io(path, e))?,
            _ => Change::Rewritten,
        };
        let (validity, first_uid, from) = match (&parent, change) {
            (Some(p), Change::Unchanged | Change::Grown { .. }) => {
                // The parent's messages stay as they were: their keys, names and keyword
                // letters; unchanged, the parent's node's chunks as they are (unread).
                out.resume_keywords();
                if matches!(change, Change::Unchanged) {
                    out.keep_parent_messages();
                } else {
                    for e in out.parent_entries()? {
                        out.unchanged(e);
                    }
                }
                let from = match change {
                    Change::Grown { from } => from,
                    _ => size,
                };
                (p.validity, p.mbox.messages as u32 + 1, from)
            }
            (p, _) => {
                // Read from its first `From ` line: empty lines before it are not a
                // message (the listing reported them).
                let skip = match mbox_start(&file).map_err(|e| Error::io(path, e))? {
                    Start::Mbox { skip } => skip,
                    Start::Not(why) => {
                        // Changed since it was listed.
                        out.fail(path.display().to_string(), why);
                        return Ok(());
                    }
                };
                (
                    p.as_ref().map_or(1, |p| p.validity.wrapping_add(1).max(1)),
                    1,
                    skip,
                )
            }
        };
        let count = u64::from(first_uid - 1);
        // Where what was read ends: the state describes exactly that much of the file, so
        // that bytes appended while it was read are read by the next backup, not twice.
        let (count, complete, end_read) = match from < size {
            true => read_from(out, account, folder, &file, from, (validity, mtime), count)?,
            false => (count, true, size),
        };
        if complete {
            let state = FolderState {
                version: 1,
                validity,
                mbox: MboxState::of(end_read, count, |off, buf| file.read_exact_at(buf, off))
                    .map_err(|e| Error::io(path, e))?,
            };
            let data = serde_json::to_vec(&state)
                .map_err(|e| Error::Internal(format!("mbox state: {e}")))?;
            out.set_state(data)?;
        }
        Ok(())
    }
}

/// Reads and stores the messages of an mbox folder from byte `from` on, in batches (the
/// next batch is read while this one is stored), numbering them after `count` under
/// `validity`, stamped with the file's `mtime`: the count
/// then, whether the whole rest was read, and where the reading ended.
fn read_from(
    out: &mut FolderWriter<'_>,
    account: &Account,
    folder: &Folder,
    file: &File,
    from: u64,
    (validity, mtime): (u32, i64),
    mut count: u64,
) -> Result<(u64, bool, u64)> {
    let path = &folder.path;
    let mut complete = true;
    // The same open file as the size and the state describe (a second open could
    // find another file, renamed into place meanwhile).
    let mut reader = file.try_clone().map_err(|e| Error::io(path, e))?;
    use std::io::Seek;
    reader
        .seek(std::io::SeekFrom::Start(from))
        .map_err(|e| Error::io(path, e))?;
    let mut messages = MboxReader::at(BufReader::with_capacity(1 << 20, reader), from);
    // The next batch is read while this one is stored.
    let mut next = Some(read_batch(&mut messages, out));
    while let Some((batch, failed, end)) = next.take() {
        let w: &FolderWriter = out;
        let stored = if end {
            store_batch(w, &batch, validity, count, mtime)
        } else {
            let (stored, n) = rayon::join(
                || store_batch(w, &batch, validity, count, mtime),
                || read_batch(&mut messages, w),
            );
            next = Some(n);
            stored
        };
        add_batch(out, account, folder, &batch, stored)?;
        count += batch.len() as u64;
        if let Some(e) = failed {
            // What was read is kept; the next backup reads the file again.
            complete = false;
            out.fail(path.display().to_string(), e);
        }
    }
    Ok((count, complete, messages.position()))
}

/// Reads the next messages of a folder, up to [`BATCH_MESSAGES`] and [`BATCH_BYTES`]: them,
/// the error that ended the reading, if any, and whether the reading ended.
fn read_batch<R: std::io::BufRead>(
    messages: &mut MboxReader<R>,
    out: &FolderWriter<'_>,
) -> (Vec<MboxMessage>, Option<MailError>, bool) {
    let mut batch = Vec::new();
    let mut bytes = 0;
    loop {
        match messages.next() {
            None => return (batch, None, true),
            Some(Err(e)) => return (batch, Some(e), true),
            Some(Ok(m)) if m.folder_internal => out.count_read(m.end - m.offset),
            Some(Ok(m)) => {
                bytes += m.bytes.len();
                batch.push(m);
                if batch.len() >= BATCH_MESSAGES || bytes >= BATCH_BYTES {
                    return (batch, None, false);
                }
            }
        }
    }
}

/// Stores a batch of messages in parallel (`before` messages of the file came before it).
fn store_batch(
    out: &FolderWriter<'_>,
    batch: &[MboxMessage],
    validity: u32,
    before: u64,
    file_mtime: i64,
) -> Vec<Result<MessageEntry>> {
    out.expect(batch.len() as u64);
    batch
        .par_iter()
        .enumerate()
        .map(|(i, m)| {
            let list = m.meta.imap_list();
            let flags: Vec<&str> = list.iter().map(String::as_str).collect();
            out.store(NewMessage {
                data: &m.bytes,
                read: m.end - m.offset,
                meta: MessageMeta::Flags {
                    flags: &flags,
                    internal_date: m.meta.internal_date.unwrap_or(file_mtime),
                    id: MessageId::Uid {
                        uid: (before + i as u64 + 1) as u32,
                        validity,
                    },
                },
            })
        })
        .collect()
}

/// Adds a stored batch in file order.
fn add_batch(
    out: &mut FolderWriter<'_>,
    account: &Account,
    folder: &Folder,
    batch: &[MboxMessage],
    stored: Vec<Result<MessageEntry>>,
) -> Result<()> {
    for (m, r) in batch.iter().zip(stored) {
        match r {
            Ok(e) => out.add(e),
            Err(e @ Error::Io { .. }) => {
                out.fail(
                    format!(
                        "{}: {}: byte {}",
                        account.name,
                        folder.path.display(),
                        m.offset
                    ),
                    e,
                );
                out.skipped();
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::repo::split::{Chunker, ChunkerParams};
    use std::sync::atomic::AtomicU64;

    /// Issue 24, item 8: what is an mbox, from a file's head.
    #[test]
    fn files_that_start_as_mbox() {
        let dir = tempfile::tempdir().unwrap();
        let start = |data: &[u8]| {
            let p = dir.path().join("f");
            std::fs::write(&p, data).unwrap();
            mbox_start(&File::open(&p).unwrap()).unwrap()
        };
        let d = "Tue Nov 24 07:00:00 2026";
        assert_eq!(start(b""), Start::Mbox { skip: 0 });
        assert_eq!(
            start(format!("From a {d}\nx\0y\n").as_bytes()),
            Start::Mbox { skip: 0 }
        );
        assert_eq!(
            start(format!("\n\r\nFrom a {d}\n").as_bytes()),
            Start::Mbox { skip: 3 }
        );
        assert_eq!(start(b"\n\n"), Start::Mbox { skip: 2 });
        for not in [
            &b"Subject: x\n\nFrom a\n"[..],
            b"\nFrom: a@b\n",
            b" From a\n",
            b"PK\x03\x04",
        ] {
            assert!(
                matches!(start(not), Start::Not(w) if w.contains("not an mbox")),
                "{not:?}"
            );
        }
        assert!(matches!(start(b"From \0\x01\n"), Start::Not(w) if w.contains("binary")));
        assert!(matches!(start(b"\0\0From a\n"), Start::Not(w) if w.contains("binary")));
    }

    /// The dictionary's samples and the backup share one walk of a folder tree: after
    /// `samples`, `folders` gives the listing samples made (with what failed there)
    /// without reading the tree again; without `samples`, it walks the tree.
    #[test]
    fn samples_and_folders_walk_the_tree_once() {
        let dir = tempfile::tempdir().unwrap();
        let tree = dir.path().join("tree");
        std::fs::create_dir_all(tree.join("Archive.sbd")).unwrap();
        let m = b"From a Tue Nov 24 07:00:00 2026\nSubject: x\n\nbody\n\n";
        std::fs::write(tree.join("Inbox"), m).unwrap();
        std::fs::write(tree.join("Archive.sbd").join("2023"), m).unwrap();
        std::fs::write(tree.join("notes.txt"), b"not mbox").unwrap();
        let source = MboxSource::new(&MboxOptions {
            path: tree.clone(),
            layout: MboxLayout::Tree {
                account: "a@b".into(),
            },
            jobs: 1,
            run: RunOptions::new("h"),
        })
        .unwrap();
        let accounts = source.accounts().unwrap();
        let chunker = Chunker::public(ChunkerParams::default());
        let samples = Samples {
            chunker: &chunker,
            total: AtomicU64::new(0),
            out: Mutex::new(Vec::new()),
        };
        source.samples(&accounts, &samples);
        assert_eq!(lock(&samples.out).len(), 2);
        // The tree is gone now: the listing is still the one samples made.
        std::fs::rename(&tree, dir.path().join("moved")).unwrap();
        let failures = Failures::default();
        let listing = source.folders(&accounts[0], &mut (), &failures).unwrap();
        let names: Vec<&str> = listing.folders.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(names, ["Archive/2023", "INBOX"]);
        let failed = failures.take();
        assert_eq!(failed.len(), 1, "{failed:?}");
        assert!(failed[0].item.ends_with("notes.txt"), "{failed:?}");
        // Taken once: asked again, it walks the tree (gone).
        let listing = source.folders(&accounts[0], &mut (), &failures).unwrap();
        assert!(listing.folders.is_empty());
        assert_eq!(failures.take().len(), 1);
    }
}
