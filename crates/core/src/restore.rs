//! Restore of a snapshot (or part of it) to a Maildir tree.
//!
//! The selected messages are sorted by where their first blob lies in the repository, so
//! packs are read front to back, then restored in parallel. Every message is reassembled,
//! checked against its whole-message hash, written as an unnamed file (or, where that is
//! not supported, in the folder's `tmp/`), given its mode, owner (when permitted) and mtime,
//! and linked into `cur/` or `new/` under its original name, never replacing a file. A
//! message whose key is already in the target folder is skipped when the bytes are
//! identical and reported as a conflict otherwise.

use crate::error::{Error, Result};
use crate::id::Id;
use crate::maildir::{self, safe_component, safe_relative};
use crate::model::{folder_selected, message_selected, select_accounts};
use crate::repo::{lock, Repository};
use crate::report::{per_sec, Failure, Progress};
use crate::tree::{
    AccountRef, AccountTree, FileEntry, FolderNode, MessageEntry, RootTree, Timestamp,
};
use rayon::prelude::*;
use serde::Serialize;
use std::collections::HashMap;
use std::ffi::OsStr;
use std::fs::{self, File};
use std::io::{ErrorKind, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

/// What to restore and where.
#[derive(Clone, Debug, Default)]
pub struct RestoreOptions {
    /// `latest` or a snapshot id prefix.
    pub snapshot: String,
    /// The directory to restore into: accounts go to their place below it
    /// (`<domain>/<user>/Maildir`); a single-Maildir snapshot restores into it directly.
    pub target: PathBuf,
    /// Only these accounts (all when empty).
    pub accounts: Vec<String>,
    /// Only these folders and their subfolders (`Sent`, `Archive/2023`; all when empty).
    pub folders: Vec<String>,
    /// Only these messages, by Maildir key or file name (all when empty).
    pub messages: Vec<String>,
    /// Worker threads; 0 means one per core.
    pub jobs: usize,
}

/// The end-of-run summary.
#[derive(Clone, Debug, Serialize, Default)]
pub struct RestoreReport {
    pub snapshot: String,
    pub accounts: u64,
    pub folders: u64,
    /// Messages selected for restore.
    pub items_total: u64,
    /// Messages written.
    pub items_restored: u64,
    /// Messages already in the target with identical bytes.
    pub items_unchanged: u64,
    pub items_failed: u64,
    /// Bytes of messages written.
    pub bytes_written: u64,
    pub elapsed_secs: f64,
    pub items_per_sec: f64,
    pub mb_per_sec: f64,
    pub failures: Vec<Failure>,
}

struct Ctx<'a> {
    repo: &'a Repository,
    failures: Mutex<Vec<Failure>>,
    restored: AtomicU64,
    unchanged: AtomicU64,
    bytes: AtomicU64,
    progress: &'a dyn Progress,
}

impl Ctx<'_> {
    fn fail(&self, item: impl Into<String>, e: impl std::fmt::Display) {
        lock(&self.failures).push(Failure::new(item, e));
    }
}

/// Restores a snapshot to a Maildir tree.
pub fn restore(
    repo: &Repository,
    opts: &RestoreOptions,
    progress: &dyn Progress,
) -> Result<RestoreReport> {
    let started = Instant::now();
    let snap = repo.find_snapshot(&opts.snapshot)?;
    let root: RootTree = repo.read_tree(&snap.root)?;
    let accounts = select_accounts(root, &opts.accounts)?;
    let ctx = Ctx {
        repo,
        failures: Mutex::new(Vec::new()),
        restored: AtomicU64::new(0),
        unchanged: AtomicU64::new(0),
        bytes: AtomicU64::new(0),
        progress,
    };
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(opts.jobs)
        .build()
        .map_err(|e| {
            Error::InvalidInput(format!("cannot start {} worker threads: {e}", opts.jobs))
        })?;
    let mut total = 0u64;
    let mut folders = 0u64;
    let mut folder_matched = opts.folders.is_empty();
    for acc in &accounts {
        let (n, f) = pool.install(|| restore_account(&ctx, acc, opts))?;
        total += n;
        folders += f;
        folder_matched |= f > 0;
    }
    if !folder_matched {
        return Err(Error::InvalidInput(format!(
            "no folder matches {:?} in the selected accounts",
            opts.folders
        )));
    }
    if !opts.messages.is_empty() && total == 0 {
        return Err(Error::InvalidInput(format!(
            "no message matches {:?}",
            opts.messages
        )));
    }
    let mut failures = std::mem::take(&mut *lock(&ctx.failures));
    failures.sort_by(|a, b| a.item.cmp(&b.item));
    let elapsed = started.elapsed().as_secs_f64();
    let bytes = ctx.bytes.load(Relaxed);
    Ok(RestoreReport {
        snapshot: snap.id.to_hex(),
        accounts: accounts.len() as u64,
        folders,
        items_total: total,
        items_restored: ctx.restored.load(Relaxed),
        items_unchanged: ctx.unchanged.load(Relaxed),
        items_failed: failures.len() as u64,
        bytes_written: bytes,
        elapsed_secs: elapsed,
        items_per_sec: per_sec(total, elapsed),
        mb_per_sec: per_sec(bytes, elapsed) / 1e6,
        failures,
    })
}

struct Job<'a> {
    folder: &'a Path,
    entry: MessageEntry,
    /// A file with the same key already in the target folder.
    existing: Option<PathBuf>,
}

fn restore_account(ctx: &Ctx, acc: &AccountRef, opts: &RestoreOptions) -> Result<(u64, u64)> {
    if !safe_relative(&acc.rel_path) {
        return Err(Error::corrupt(
            format!("account {}", acc.name),
            "unsafe path in snapshot",
        ));
    }
    let dest = opts.target.join(OsStr::from_bytes(&acc.rel_path));
    let tree: AccountTree = ctx.repo.read_tree(&acc.tree)?;
    let selected: Vec<(PathBuf, &FolderNode)> = tree
        .folders
        .iter()
        .filter(|f| folder_selected(f, &opts.folders))
        .map(|f| (dest.join(OsStr::from_bytes(&f.dir)), f))
        .collect();
    let mut jobs = Vec::new();
    for (fdir, node) in &selected {
        if !(node.dir.is_empty() || safe_component(&node.dir)) {
            ctx.fail(
                format!("{}: {}", acc.name, node.name),
                "unsafe folder directory in snapshot; skipped",
            );
            continue;
        }
        for sub in ["cur", "new", "tmp"] {
            fs::create_dir_all(fdir.join(sub)).map_err(|e| Error::io(fdir.join(sub), e))?;
        }
        let existing = existing_keys(fdir);
        for c in &node.chunks {
            let chunk = ctx.repo.read_chunk(c)?;
            for entry in chunk
                .into_iter()
                .filter(|e| message_selected(e, &opts.messages))
            {
                if !safe_component(&entry.name) {
                    ctx.fail(
                        format!("{}: {}", acc.name, String::from_utf8_lossy(&entry.name)),
                        "unsafe file name in snapshot; skipped",
                    );
                    continue;
                }
                let existing = existing.get(&entry.key).cloned();
                jobs.push(Job {
                    folder: fdir,
                    entry,
                    existing,
                });
            }
        }
        if opts.messages.is_empty() {
            // An IMAP backup's sync state is for the next IMAP backup, not for a Maildir.
            for f in node
                .files
                .iter()
                .filter(|f| f.name != crate::imap::names::STATE_FILE)
            {
                restore_file(ctx, fdir, f);
            }
        }
    }
    let n = jobs.len() as u64;
    ctx.progress
        .add_total(n, jobs.iter().map(|j| j.entry.size).sum());
    // Read packs front to back: order by the location of each message's first blob.
    let index = ctx.repo.index();
    jobs.sort_by_cached_key(|j| {
        j.entry
            .content
            .first()
            .and_then(|id| index.get(id))
            .map(|l| (l.pack, l.offset))
            .unwrap_or((u32::MAX, 0))
    });
    jobs.par_iter().for_each(|j| {
        let item = j
            .folder
            .join(if j.entry.new { "new" } else { "cur" })
            .join(OsStr::from_bytes(&j.entry.name));
        if let Err(e) = restore_message(ctx, j) {
            ctx.fail(format!("{} ({})", item.display(), acc.name), e);
        }
        ctx.progress.advance(1, j.entry.size);
    });
    Ok((n, selected.len() as u64))
}

/// Maildir keys already present in a target folder.
fn existing_keys(folder: &Path) -> HashMap<Vec<u8>, PathBuf> {
    let (files, _) = maildir::list_messages(folder);
    files
        .into_iter()
        .map(|f| (f.key().to_vec(), f.path(folder)))
        .collect()
}

/// Reassembles content from its blobs and checks it against the recorded hash and size.
pub fn assemble(
    repo: &Repository,
    content: &[Id],
    size: u64,
    hash: Option<&Id>,
) -> Result<Vec<u8>> {
    // With a whole-content hash to check, the blobs need not be hashed one by one too;
    // if the whole does not match, read them again verified to name the culprit.
    let mut data = Vec::with_capacity(size as usize);
    for id in content {
        let blob = match hash {
            Some(_) => repo.read_blob_unverified(id)?,
            None => repo.read_blob(id)?,
        };
        data.extend_from_slice(&blob);
    }
    if data.len() as u64 != size || hash.is_some_and(|h| repo.key().blob_id(&data) != *h) {
        for id in content {
            repo.read_blob(id)?;
        }
        return Err(Error::corrupt(
            "message",
            "reassembled content does not match its hash",
        ));
    }
    Ok(data)
}

fn restore_message(ctx: &Ctx, j: &Job) -> Result<()> {
    let e = &j.entry;
    let data = assemble(ctx.repo, &e.content, e.size, Some(&e.hash))?;
    if let Some(existing) = &j.existing {
        return match fs::read(existing) {
            Ok(have) if have == data => {
                ctx.unchanged.fetch_add(1, Relaxed);
                Ok(())
            }
            Ok(_) => Err(Error::InvalidInput(format!(
                "{} already exists with other content: not overwritten",
                existing.display()
            ))),
            Err(err) => Err(Error::io(existing, err)),
        };
    }
    let dest = j
        .folder
        .join(if e.new { "new" } else { "cur" })
        .join(OsStr::from_bytes(&e.name));
    write_new_file(
        &j.folder.join("tmp"),
        &dest,
        &data,
        Attrs {
            mode: e.mode,
            mtime: e.mtime,
            owner: Some((e.uid, e.gid)),
        },
    )?;
    ctx.restored.fetch_add(1, Relaxed);
    ctx.bytes.fetch_add(data.len() as u64, Relaxed);
    Ok(())
}

/// Writes `data` to `dest` atomically and without replacing anything, with mode, owner
/// (best effort: only root may give files away) and mtime set before the file appears.
///
/// Where the file system allows, the file is created unnamed (`O_TMPFILE`) in `dest`'s
/// directory and linked to its name once complete: one directory operation per message
/// instead of the create in `tmp/` plus the rename, and a killed restore leaves nothing
/// behind. Elsewhere (NFS, no `/proc`), a temporary file in `tmp_dir` renamed into place.
fn write_new_file(tmp_dir: &Path, dest: &Path, data: &[u8], attrs: Attrs) -> Result<()> {
    use std::sync::atomic::AtomicBool;
    static NO_TMPFILE: AtomicBool = AtomicBool::new(false);
    let result = if NO_TMPFILE.load(Relaxed) {
        Err(None)
    } else {
        write_unnamed(dest, data, attrs)
    };
    let result = match result {
        Ok(()) => Ok(()),
        Err(Some(e)) => Err(e),
        Err(None) => {
            NO_TMPFILE.store(true, Relaxed);
            write_renamed(tmp_dir, dest, data, attrs)
        }
    };
    result.map_err(|e| {
        if e.kind() == ErrorKind::AlreadyExists {
            Error::InvalidInput(format!(
                "{} already exists: not overwritten",
                dest.display()
            ))
        } else {
            Error::io(dest, e)
        }
    })
}

/// What a restored file gets besides its bytes.
#[derive(Clone, Copy)]
struct Attrs {
    mode: u32,
    mtime: Timestamp,
    /// (uid, gid); set where permitted.
    owner: Option<(u32, u32)>,
}

/// Mode, owner and times of a file being written.
fn set_attributes(f: &File, attrs: Attrs) -> std::io::Result<()> {
    let Attrs { mode, mtime, owner } = attrs;
    if mode != 0 {
        f.set_permissions(fs::Permissions::from_mode(mode))?;
    }
    if let Some((uid, gid)) = owner {
        match std::os::unix::fs::fchown(f, Some(uid), Some(gid)) {
            Err(e) if e.kind() == ErrorKind::PermissionDenied => {}
            other => other?,
        }
    }
    let t = if mtime.secs < 0 {
        SystemTime::UNIX_EPOCH - Duration::new(mtime.secs.unsigned_abs(), 0)
    } else {
        SystemTime::UNIX_EPOCH
            .checked_add(Duration::new(mtime.secs as u64, mtime.nanos))
            .unwrap_or(SystemTime::UNIX_EPOCH)
    };
    f.set_times(fs::FileTimes::new().set_modified(t).set_accessed(t))
}

/// `O_TMPFILE` in the destination directory, then `linkat` through `/proc/self/fd` (which
/// fails if the name exists: nothing is replaced). `Err(None)`: not supported here.
fn write_unnamed(
    dest: &Path,
    data: &[u8],
    attrs: Attrs,
) -> std::result::Result<(), Option<std::io::Error>> {
    use rustix::fs::{linkat, openat, AtFlags, Mode, OFlags, CWD};
    use rustix::io::Errno;
    let dir = dest.parent().unwrap_or(Path::new("."));
    let fd = match openat(
        CWD,
        dir,
        OFlags::TMPFILE | OFlags::WRONLY | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o600),
    ) {
        Ok(fd) => fd,
        Err(e) if e == Errno::OPNOTSUPP || e == Errno::ISDIR || e == Errno::INVAL => {
            return Err(None)
        }
        Err(e) => return Err(Some(e.into())),
    };
    let mut f = File::from(fd);
    f.write_all(data).map_err(Some)?;
    set_attributes(&f, attrs).map_err(Some)?;
    let proc_path = format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&f));
    match linkat(CWD, proc_path.as_str(), CWD, dest, AtFlags::SYMLINK_FOLLOW) {
        Ok(()) => Ok(()),
        // No /proc: the caller writes the file again the other way.
        Err(e) if e == Errno::NOENT && !dir.as_os_str().is_empty() && dir.is_dir() => Err(None),
        Err(e) => Err(Some(e.into())),
    }
}

/// A temporary file in `tmp_dir` renamed to `dest` (renameat2 NOREPLACE).
fn write_renamed(tmp_dir: &Path, dest: &Path, data: &[u8], attrs: Attrs) -> std::io::Result<()> {
    let tmp = tmp_dir.join(format!(".mailvault-{:016x}", rand::random::<u64>()));
    let result = (|| -> std::io::Result<()> {
        let mut f = File::create_new(&tmp)?;
        f.write_all(data)?;
        set_attributes(&f, attrs)?;
        drop(f);
        rename_noreplace(&tmp, dest)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

/// Moves `from` to `to` unless `to` exists: renameat2(RENAME_NOREPLACE), one directory
/// operation where link + unlink are two; falls back to those on file systems without it.
fn rename_noreplace(from: &Path, to: &Path) -> std::io::Result<()> {
    use rustix::fs::{renameat_with, RenameFlags, CWD};
    match renameat_with(CWD, from, CWD, to, RenameFlags::NOREPLACE) {
        Ok(()) => Ok(()),
        Err(e) if e == rustix::io::Errno::INVAL || e == rustix::io::Errno::NOSYS => {
            fs::hard_link(from, to)?;
            fs::remove_file(from)
        }
        Err(e) => Err(e.into()),
    }
}

fn restore_file(ctx: &Ctx, folder: &Path, f: &FileEntry) {
    let dest = folder.join(OsStr::from_bytes(&f.name));
    let item = dest.display().to_string();
    if !safe_component(&f.name) {
        ctx.fail(item, "unsafe file name in snapshot; skipped");
        return;
    }
    let data = match assemble(ctx.repo, &f.content, f.size, None) {
        Ok(d) => d,
        Err(e) => return ctx.fail(item, e),
    };
    match fs::read(&dest) {
        Ok(have) if have == data => return,
        Ok(_) => return ctx.fail(item, "already exists with other content: not overwritten"),
        Err(e) if e.kind() == ErrorKind::NotFound => {}
        Err(e) => return ctx.fail(item, e),
    }
    if let Err(e) = write_new_file(
        &folder.join("tmp"),
        &dest,
        &data,
        Attrs {
            mode: f.mode,
            mtime: f.mtime,
            owner: None,
        },
    ) {
        ctx.fail(item, e);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    fn check_written(path: &Path, data: &[u8]) {
        assert_eq!(fs::read(path).unwrap(), data);
        let m = fs::metadata(path).unwrap();
        assert_eq!(m.mode() & 0o7777, 0o640);
        assert_eq!((m.mtime(), m.mtime_nsec()), (1_000_000_000, 5));
    }

    /// Both ways of writing a message: complete with mode and mtime, never replacing a
    /// file, and nothing left in `tmp/`.
    #[test]
    fn writes_never_replace_and_leave_nothing() {
        let dir = tempfile::tempdir().unwrap();
        for sub in ["tmp", "cur"] {
            fs::create_dir(dir.path().join(sub)).unwrap();
        }
        let t = Timestamp {
            secs: 1_000_000_000,
            nanos: 5,
        };
        let t = Attrs {
            mode: 0o640,
            mtime: t,
            owner: None,
        };
        let tmp = dir.path().join("tmp");
        let a = dir.path().join("cur/a");
        match write_unnamed(&a, b"unnamed", t) {
            Ok(()) => {
                check_written(&a, b"unnamed");
                let again = write_unnamed(&a, b"other", t);
                assert!(matches!(again, Err(Some(e)) if e.kind() == ErrorKind::AlreadyExists));
                check_written(&a, b"unnamed");
            }
            Err(None) => eprintln!("O_TMPFILE not supported here; only the fallback is tested"),
            Err(Some(e)) => panic!("{e}"),
        }
        let b = dir.path().join("cur/b");
        write_renamed(&tmp, &b, b"renamed", t).unwrap();
        check_written(&b, b"renamed");
        let again = write_renamed(&tmp, &b, b"other", t).unwrap_err();
        assert_eq!(again.kind(), ErrorKind::AlreadyExists);
        check_written(&b, b"renamed");
        assert_eq!(fs::read_dir(&tmp).unwrap().count(), 0);
        // And through the caller, the error names the file.
        let err = write_new_file(&tmp, &b, b"x", t).unwrap_err();
        assert!(err.to_string().contains("cur/b"), "{err}");
    }
}
