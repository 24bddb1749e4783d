//! Backup of a Maildir store into a repository.
//!
//! Accounts, folders and new messages are processed in parallel on a thread pool of
//! `jobs` threads; every worker reads a message, splits it ([`crate::repo::split`]), and hands
//! the pieces to the shared [`BlobSaver`], which deduplicates, compresses, seals and
//! writes full packs. Messages whose Maildir key, size and mtime match the parent
//! snapshot are not read at all: a flag change (a rename), a move from `new/` to `cur/` or
//! to another folder keeps the key. Memory holds the index, one account's parent entries
//! per worker, and the packs being filled.

use crate::error::{Error, Result};
use crate::maildir::{self, AccountSource, FolderSource, MessageFile};
use crate::repo::compress::Compression;
use crate::repo::id::Id;
use crate::repo::pack::{BlobKind, PackList};
use crate::repo::snapshot::{Snapshot, SnapshotSummary};
use crate::repo::tree::{
    self, AccountRef, AccountTree, ChunkRef, DirEntry, FileEntry, FolderNode, MessageChunk,
    MessageEntry, NameChunk, OwnerNames, RootTree,
};
use crate::repo::{lock, BlobSaver, Repository, WriterMark};
use crate::report::{per_sec, ratio, Failure, Progress};
use rayon::prelude::*;
use serde::Serialize;
use std::collections::{BTreeSet, HashMap};
use std::io::ErrorKind;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::Instant;

/// What to back up and how.
#[derive(Clone, Debug)]
pub struct BackupOptions {
    /// A store root (`/var/vmail`) or a single Maildir.
    pub source: PathBuf,
    /// The account name of a single Maildir, or the accounts of a store to back up.
    pub accounts: Vec<String>,
    /// Worker threads; 0 means one per core.
    pub jobs: usize,
    /// Overrides the repository's compression for this run.
    pub compression: Option<Compression>,
    pub tags: Vec<String>,
    pub hostname: String,
    /// Read every message even if the parent snapshot has it.
    pub force: bool,
    /// Also stat messages the parent snapshot has, and read them again when their size or
    /// mtime changed (for stores whose files are edited in place, against Maildir's rules).
    pub stat_unchanged: bool,
}

/// The end-of-run summary.
#[derive(Clone, Debug, Serialize)]
pub struct BackupReport {
    pub snapshot: String,
    pub parent: Option<String>,
    pub accounts: u64,
    pub folders: u64,
    /// Messages in the snapshot plus those that failed.
    pub items_total: u64,
    /// Messages read from disk (new or changed).
    pub items_new: u64,
    /// Messages taken from the parent snapshot without reading them.
    pub items_unchanged: u64,
    pub items_failed: u64,
    /// Logical size of all messages in the snapshot.
    pub bytes_total: u64,
    /// Bytes read from the mail store.
    pub bytes_read: u64,
    /// Bytes written to the repository (packs, index, snapshot).
    pub bytes_added: u64,
    /// Bytes read / new unique bytes stored (before compression); null when nothing new.
    pub dedup_ratio: Option<f64>,
    /// New unique bytes / their stored size; null when nothing new.
    pub compression_ratio: Option<f64>,
    pub packs_written: u64,
    /// Packs left by an interrupted backup and reused by this one.
    pub packs_resumed: u64,
    pub elapsed_secs: f64,
    /// items_total / elapsed.
    pub items_per_sec: f64,
    /// bytes_read / elapsed, in MB (10^6 bytes) per second.
    pub mb_per_sec: f64,
    pub failures: Vec<Failure>,
}

/// What a backup run of any source counts as it goes.
#[derive(Default)]
pub(crate) struct Counters {
    pub(crate) folders: AtomicU64,
    pub(crate) new: AtomicU64,
    pub(crate) unchanged: AtomicU64,
    pub(crate) bytes_read: AtomicU64,
    pub(crate) bytes_total: AtomicU64,
}

/// The snapshot fields a backup run of any source decides up front.
pub(crate) struct RunMeta {
    pub(crate) started: Instant,
    pub(crate) time: (i64, u32),
    pub(crate) hostname: String,
    pub(crate) source: String,
    pub(crate) tags: Vec<String>,
    pub(crate) parent: Option<Snapshot>,
    pub(crate) packs_resumed: u64,
    /// This run's lock: still good when the snapshot is saved, or no snapshot.
    pub(crate) lock: crate::repo::lock::LockWatch,
}

/// After a backup run of any source has saved its snapshot: its packs join the
/// in-memory index and its record in `writers/` goes.
pub(crate) fn end_run(repo: &mut Repository, written: &PackList, mark: WriterMark) {
    repo.add_packs(written);
    if let Err(e) = repo.end_backup(mark) {
        // Only costs the next backup a look for unindexed packs.
        tracing::warn!("could not remove this backup's record in writers/: {e}");
    }
}

/// Ends a backup run of any source: saves the root tree, writes the last packs and the
/// index, then the snapshot, and builds the report. Returns the packs written, for
/// [`Repository::add_packs`].
pub(crate) fn finish_run(
    saver: &BlobSaver,
    n: &Counters,
    mut failures: Vec<Failure>,
    root: RootTree,
    meta: RunMeta,
) -> Result<(BackupReport, PackList)> {
    let repo = saver.repo();
    let root_id = saver.save(BlobKind::Tree, &tree::encode(&root))?;
    let written = saver.finish()?;
    failures.sort_by(|a, b| a.item.cmp(&b.item));
    let st = &saver.stats;
    let messages: u64 = root.accounts.iter().map(|a| a.messages).sum();
    let elapsed = meta.started.elapsed().as_secs_f64();
    let mut snap = Snapshot {
        id: Id::default(),
        version: saver.repo().version().number(),
        time: meta.time.0,
        time_nanos: meta.time.1,
        hostname: meta.hostname,
        source: meta.source,
        tags: meta.tags,
        parent: meta.parent.as_ref().map(|p| p.id),
        root: root_id,
        summary: SnapshotSummary {
            accounts: root.accounts.len() as u64,
            folders: n.folders.load(Relaxed),
            messages,
            bytes: n.bytes_total.load(Relaxed),
            messages_new: n.new.load(Relaxed),
            bytes_added: st.bytes_written.load(Relaxed),
            failed: failures.len() as u64,
            elapsed_secs: elapsed,
        },
        original: None,
    };
    // A lock that may have been taken for stale (not refreshed for long) may have let a
    // prune delete packs this run deduplicated against: no snapshot then.
    meta.lock.verify()?;
    let id = repo.save_snapshot_counted(&mut snap)?;
    let summary = snap.summary;
    let bytes_read = n.bytes_read.load(Relaxed);
    let new_raw = st.data_raw.load(Relaxed);
    let items_total = messages + failures.len() as u64;
    let report = BackupReport {
        snapshot: id.to_hex(),
        parent: meta.parent.map(|p| p.id.to_hex()),
        accounts: summary.accounts,
        folders: summary.folders,
        items_total,
        items_new: summary.messages_new,
        items_unchanged: n.unchanged.load(Relaxed),
        items_failed: failures.len() as u64,
        bytes_total: summary.bytes,
        bytes_read,
        bytes_added: summary.bytes_added,
        dedup_ratio: ratio(bytes_read, new_raw),
        compression_ratio: ratio(new_raw, st.data_stored.load(Relaxed)),
        packs_written: st.packs_written.load(Relaxed),
        packs_resumed: meta.packs_resumed,
        elapsed_secs: elapsed,
        items_per_sec: per_sec(items_total, elapsed),
        mb_per_sec: per_sec(bytes_read, elapsed) / 1e6,
        failures,
    };
    Ok((report, written))
}

struct Ctx<'a> {
    saver: BlobSaver<'a>,
    failures: Mutex<Vec<Failure>>,
    n: Counters,
    progress: &'a dyn Progress,
    /// `--stat-unchanged`: known messages are stat'ed and folder files read again.
    stat_unchanged: bool,
    /// Every uid and gid recorded, for the snapshot's table of owner names.
    owners: Mutex<Owners>,
}

/// The uids and gids seen by a backup.
#[derive(Default)]
pub(crate) struct Owners {
    pub(crate) uids: BTreeSet<u32>,
    pub(crate) gids: BTreeSet<u32>,
}

impl Owners {
    pub(crate) fn add(&mut self, uid: u32, gid: u32) {
        self.uids.insert(uid);
        self.gids.insert(gid);
    }
    /// The names this system gives those ids (ids without a name are left out).
    pub(crate) fn names(&self) -> OwnerNames {
        use nix::unistd::{Gid, Group, Uid, User};
        OwnerNames {
            users: (self.uids.iter())
                .filter_map(|&u| Some((u, User::from_uid(Uid::from_raw(u)).ok()??.name)))
                .collect(),
            groups: (self.gids.iter())
                .filter_map(|&g| Some((g, Group::from_gid(Gid::from_raw(g)).ok()??.name)))
                .collect(),
        }
    }
}

impl Ctx<'_> {
    fn fail(&self, item: impl Into<String>, e: impl std::fmt::Display) {
        lock(&self.failures).push(Failure::new(item, e));
    }
}

/// Backs up `opts.source` into `repo` and writes a snapshot, dated now.
pub fn backup(
    repo: &mut Repository,
    opts: &BackupOptions,
    progress: &dyn Progress,
) -> Result<BackupReport> {
    backup_at(repo, opts, crate::now(), progress)
}

/// [`backup`] with the snapshot dated `time` (Unix seconds and nanoseconds) instead of
/// now: `backup --time`, for imports of old stores and tests of forget policies.
pub fn backup_at(
    repo: &mut Repository,
    opts: &BackupOptions,
    time: (i64, u32),
    progress: &dyn Progress,
) -> Result<BackupReport> {
    let started = Instant::now();
    let source = std::path::absolute(&opts.source).map_err(|e| Error::io(&opts.source, e))?;
    let label = format!("maildir:{}", source.display());
    let accounts = maildir::discover(&source, &opts.accounts)?;
    let (resumed, mark) = repo.begin_backup()?;
    let compression = opts.compression.unwrap_or(repo.config().compression);
    if compression == Compression::Zstd && !repo.has_dictionary() {
        let samples = sample_blobs(&accounts, repo.chunker());
        if let Some(dict) = crate::repo::compress::train(&samples) {
            repo.add_dictionary(&dict)?;
        }
    }

    let parent = if opts.force {
        None
    } else {
        repo.snapshots()?
            .into_iter()
            .rev()
            .find(|s| s.source == label && s.hostname == opts.hostname)
    };
    let parent_accounts: HashMap<String, AccountRef> = match &parent {
        Some(p) => repo
            .read_tree::<RootTree>(&p.root)?
            .accounts
            .into_iter()
            .map(|a| (a.name.clone(), a))
            .collect(),
        None => HashMap::new(),
    };

    let prefetch = !parent_accounts.is_empty();
    let (report, written) = std::thread::scope(|s| {
        if prefetch {
            std::thread::Builder::new()
                .name("prefetch".into())
                .spawn_scoped(s, || repo.prefetch_trees(TREE_PREFETCH_BUDGET))
                .ok();
        }
        run(
            repo,
            opts,
            started,
            time,
            label,
            parent,
            parent_accounts,
            accounts,
            resumed,
            mark.watch(),
            progress,
        )
    })?;
    end_run(repo, &written, mark);
    Ok(report)
}

/// At most this many bytes of tree packs are read ahead for an incremental backup.
const TREE_PREFETCH_BUDGET: u64 = 256 << 20;

#[allow(clippy::too_many_arguments)]
fn run(
    repo: &Repository,
    opts: &BackupOptions,
    started: Instant,
    time: (i64, u32),
    label: String,
    parent: Option<Snapshot>,
    parent_accounts: HashMap<String, AccountRef>,
    accounts: Vec<AccountSource>,
    resumed: PackList,
    watch: crate::repo::lock::LockWatch,
    progress: &dyn Progress,
) -> Result<(BackupReport, PackList)> {
    let packs_resumed = resumed.len() as u64;
    let ctx = Ctx {
        saver: BlobSaver::new(repo, opts.compression.unwrap_or(repo.config().compression)),
        failures: Mutex::new(Vec::new()),
        n: Counters::default(),
        progress,
        stat_unchanged: opts.stat_unchanged,
        owners: Mutex::new(Owners::default()),
    };
    ctx.saver.adopt(resumed);
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(opts.jobs)
        .build()
        .map_err(|e| {
            Error::InvalidInput(format!("cannot start {} worker threads: {e}", opts.jobs))
        })?;
    // Largest accounts first (by the parent's count; new accounts last), one task each:
    // a large account started last would leave one worker finishing it alone.
    let mut order: Vec<usize> = (0..accounts.len()).collect();
    order.sort_by_key(|&i| {
        std::cmp::Reverse(
            parent_accounts
                .get(&accounts[i].name)
                .map_or(0, |r| r.messages),
        )
    });
    let mut refs: Vec<(usize, Option<AccountRef>)> = pool.install(|| {
        order
            .par_iter()
            .with_max_len(1)
            .map(|&i| {
                let a = &accounts[i];
                let r = match backup_account(&ctx, a, parent_accounts.get(&a.name)) {
                    Ok(r) => Some(r),
                    Err(e) => {
                        ctx.fail(format!("account {}", a.name), e);
                        None
                    }
                };
                (i, r)
            })
            .collect()
    });
    refs.sort_unstable_by_key(|(i, _)| *i);
    let root = RootTree {
        accounts: refs.into_iter().filter_map(|(_, r)| r).collect(),
        owners: lock(&ctx.owners).names(),
    };
    let failures = std::mem::take(&mut *lock(&ctx.failures));
    let meta = RunMeta {
        started,
        time,
        hostname: opts.hostname.clone(),
        source: label,
        tags: opts.tags.clone(),
        parent,
        packs_resumed,
        lock: watch,
    };
    finish_run(&ctx.saver, &ctx.n, failures, root, meta)
}

/// Pieces of a spread of messages across the store, to train the compression dictionary
/// on: up to 4000 messages or 8 MiB, taken round-robin over folders and accounts.
fn sample_blobs(accounts: &[AccountSource], chunker: &crate::repo::split::Chunker) -> Vec<Vec<u8>> {
    const MAX_FILES: usize = 4000;
    const MAX_BYTES: u64 = 8 << 20;
    let mut folders: Vec<Vec<PathBuf>> = Vec::new();
    let mut candidates = 0;
    'outer: for acc in accounts {
        for f in maildir::folders(&acc.path).unwrap_or_default() {
            let (files, _) = maildir::list_messages(&f.path);
            let paths: Vec<PathBuf> = files.iter().take(256).map(|m| m.path(&f.path)).collect();
            candidates += paths.len();
            folders.push(paths);
            if candidates >= MAX_FILES * 4 {
                break 'outer;
            }
        }
    }
    let mut picked = Vec::new();
    let mut round = 0;
    while picked.len() < MAX_FILES {
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
    picked.truncate(MAX_FILES);
    // Read in parallel until the budget is spent; only what is kept stays in memory.
    let total = AtomicU64::new(0);
    let out = Mutex::new(Vec::new());
    picked.par_iter().for_each(|p| {
        if total.load(Relaxed) >= MAX_BYTES {
            return;
        }
        let Ok(data) = std::fs::read(p) else { return };
        for r in crate::repo::split::split(&data, chunker) {
            if r.len() <= crate::repo::compress::DICT_MAX_BLOB
                && total.fetch_add(r.len() as u64, Relaxed) < MAX_BYTES
            {
                lock(&out).push(data[r].to_vec());
            }
        }
    });
    out.into_inner().unwrap_or_else(|p| p.into_inner())
}

/// The parent snapshot's view of one account.
#[derive(Default)]
struct ParentAccount {
    by_key: HashMap<Vec<u8>, MessageEntry>,
    /// Folder files by folder dir, then file name.
    files: HashMap<Vec<u8>, HashMap<Vec<u8>, FileEntry>>,
}

fn load_parent(repo: &Repository, r: &AccountRef) -> Result<ParentAccount> {
    let t: AccountTree = repo.read_tree(&r.tree)?;
    let mut p = ParentAccount::default();
    for f in &t.folders {
        for c in &f.chunks {
            for e in repo.read_chunk(c)? {
                p.by_key.insert(e.key.clone(), e);
            }
        }
        p.files.insert(
            f.dir.clone(),
            f.files
                .iter()
                .map(|e| (e.name.clone(), e.clone()))
                .collect(),
        );
    }
    Ok(p)
}

fn backup_account(
    ctx: &Ctx,
    acc: &AccountSource,
    parent: Option<&AccountRef>,
) -> Result<AccountRef> {
    let repo = ctx.saver.repo();
    let parent = match parent {
        Some(r) => match load_parent(repo, r) {
            Ok(p) => p,
            Err(e) => {
                // A damaged parent only costs speed: read everything again.
                ctx.fail(format!("account {} (parent snapshot)", acc.name), &e);
                ParentAccount::default()
            }
        },
        None => ParentAccount::default(),
    };
    let folders = maildir::folders(&acc.path)?;
    let nodes: Vec<Option<FolderNode>> = folders
        .par_iter()
        .map(|f| match backup_folder(ctx, acc, f, &parent) {
            Ok(n) => Some(n),
            Err(e) => {
                ctx.fail(f.path.display().to_string(), e);
                None
            }
        })
        .collect();
    let t = AccountTree {
        folders: nodes.into_iter().flatten().collect(),
    };
    let messages = t.folders.iter().map(|f| f.messages).sum();
    let bytes = t.folders.iter().map(|f| f.bytes).sum();
    let tree = ctx.saver.save(BlobKind::Tree, &tree::encode(&t))?;
    // The directories above the Maildir, from the top: `acc.path` minus the components of
    // `rel_path` still to come.
    let parts: Vec<&[u8]> = if acc.rel_path.is_empty() {
        Vec::new()
    } else {
        acc.rel_path.split(|&c| c == b'/').collect()
    };
    let mut dirs = Vec::with_capacity(parts.len());
    for (i, name) in parts.iter().enumerate() {
        let path = acc.path.ancestors().nth(parts.len() - 1 - i);
        if let Some(d) = path.and_then(|p| dir_entry(ctx, name, p)) {
            dirs.push(d);
        }
    }
    Ok(AccountRef {
        name: acc.name.clone(),
        rel_path: acc.rel_path.clone(),
        tree,
        messages,
        bytes,
        dirs,
    })
}

/// Owner and mode of a directory, recorded as `name`; `None` (reported) if it cannot be
/// stat'ed.
fn dir_entry(ctx: &Ctx, name: &[u8], path: &Path) -> Option<DirEntry> {
    match std::fs::metadata(path) {
        Ok(m) => {
            lock(&ctx.owners).add(m.uid(), m.gid());
            Some(DirEntry {
                name: name.to_vec(),
                mode: m.mode() & 0o7777,
                uid: m.uid(),
                gid: m.gid(),
            })
        }
        Err(e) if e.kind() == ErrorKind::NotFound => None,
        Err(e) => {
            ctx.fail(path.display().to_string(), e);
            None
        }
    }
}

fn backup_folder(
    ctx: &Ctx,
    acc: &AccountSource,
    f: &FolderSource,
    parent: &ParentAccount,
) -> Result<FolderNode> {
    let (files, errors) = maildir::list_messages(&f.path);
    for e in errors {
        ctx.fail(format!("{}: {}", acc.name, f.name), e);
    }
    ctx.progress.add_total(files.len() as u64, 0);
    let mut entries = Vec::with_capacity(files.len());
    let mut to_read = Vec::new();
    for file in files {
        let Some(pe) = parent.by_key.get(file.key()) else {
            to_read.push(file);
            continue;
        };
        // Maildir files never change once delivered: the same key is the same message,
        // whatever its flags (name) or place. With `stat_unchanged` a changed size or mtime
        // makes us read it again anyway, for stores edited in place.
        let mut e = pe.clone();
        if ctx.stat_unchanged {
            match std::fs::metadata(file.path(&f.path)).map(|m| maildir::FileMeta::of(&m)) {
                Ok(m) if m.size == pe.size && m.mtime == pe.mtime => {
                    (e.mode, e.uid, e.gid) = (m.mode, m.uid, m.gid);
                }
                _ => {
                    to_read.push(file);
                    continue;
                }
            }
        }
        e.name = file.name;
        e.new = file.new;
        ctx.n.unchanged.fetch_add(1, Relaxed);
        ctx.progress.advance(1, e.size);
        entries.push(e);
    }
    // A file gone when opened was renamed by the server (flag change, new/ -> cur/) or
    // deleted since the listing: the folder is listed again and the renamed ones read
    // under their new names; a key found nowhere was deleted, which is not an error.
    let mut pending = to_read;
    for round in 1..=VANISHED_ROUNDS {
        let read: Vec<Read> = pending
            .into_par_iter()
            .map(|file| match read_message(ctx, f, file) {
                Ok(r) => r,
                Err(e) => {
                    ctx.fail(e.0.display().to_string(), e.1);
                    Read::Failed
                }
            })
            .collect();
        let mut vanished = Vec::new();
        for r in read {
            match r {
                Read::Entry(e) => {
                    ctx.progress.advance(1, e.size);
                    entries.push(e);
                }
                Read::Vanished(file) => vanished.push(file),
                Read::Failed => ctx.progress.advance(1, 0),
            }
        }
        if vanished.is_empty() {
            break;
        }
        let (now, _) = maildir::list_messages(&f.path);
        let mut now: HashMap<Vec<u8>, MessageFile> =
            now.into_iter().map(|m| (m.key().to_vec(), m)).collect();
        pending = Vec::new();
        for file in vanished {
            match now.remove(file.key()) {
                Some(renamed) if round < VANISHED_ROUNDS => pending.push(renamed),
                Some(renamed) => ctx.fail(
                    renamed.path(&f.path).display().to_string(),
                    "renamed again each time it was read; not in this snapshot",
                ),
                None => ctx.progress.advance(1, 0),
            }
        }
    }
    let messages = entries.len() as u64;
    let bytes: u64 = entries.iter().map(|e| e.size).sum();
    ctx.n.bytes_total.fetch_add(bytes, Relaxed);
    let mut owners = Owners::default();
    for e in &entries {
        owners.add(e.uid, e.gid);
    }
    let chunks = save_entries(&ctx.saver, entries)?;
    let files = folder_files(ctx, f, parent)?;
    for e in &files {
        owners.add(e.uid, e.gid);
    }
    {
        let mut all = lock(&ctx.owners);
        all.uids.append(&mut owners.uids);
        all.gids.append(&mut owners.gids);
    }
    let dirs = [&b""[..], b"cur", b"new", b"tmp"]
        .iter()
        .filter_map(|&d| dir_entry(ctx, d, &f.path.join(std::ffi::OsStr::from_bytes(d))))
        .collect();
    ctx.n.folders.fetch_add(1, Relaxed);
    Ok(FolderNode {
        name: f.name.clone(),
        dir: f.dir.clone(),
        files,
        chunks,
        messages,
        bytes,
        dirs,
    })
}

/// The folder's own files; one unchanged since the parent (same size and mtime) is not
/// read again.
fn folder_files(ctx: &Ctx, f: &FolderSource, parent: &ParentAccount) -> Result<Vec<FileEntry>> {
    let dir = &f.path;
    let known = parent.files.get(&f.dir).filter(|_| !ctx.stat_unchanged);
    let mut out = Vec::new();
    for (name, meta) in maildir::list_folder_files(dir)? {
        let mtime = maildir::timestamp(&meta);
        if let Some(pf) = known.and_then(|k| k.get(&name)) {
            if pf.size == meta.len() && pf.mtime == mtime {
                let mut e = pf.clone();
                (e.mode, e.uid, e.gid) = (meta.mode() & 0o7777, meta.uid(), meta.gid());
                out.push(e);
                continue;
            }
        }
        let path = dir.join(std::ffi::OsStr::from_bytes(&name));
        let data = match std::fs::read(&path) {
            Ok(d) => d,
            Err(e) if e.kind() == ErrorKind::NotFound => continue,
            Err(e) => {
                ctx.fail(path.display().to_string(), e);
                continue;
            }
        };
        ctx.n.bytes_read.fetch_add(data.len() as u64, Relaxed);
        let content = save_content(ctx, &data)?;
        out.push(FileEntry {
            name,
            size: data.len() as u64,
            mtime,
            mode: meta.mode() & 0o7777,
            uid: meta.uid(),
            gid: meta.gid(),
            content,
        });
    }
    Ok(out)
}

use std::os::unix::ffi::OsStrExt;

fn save_content(ctx: &Ctx, data: &[u8]) -> Result<Vec<Id>> {
    store_content(&ctx.saver, data)
}

/// Splits a message (or any file) into blobs ([`crate::repo::split`]) and saves them; returns
/// the content ids in order. For every kind of source.
pub fn store_content(saver: &BlobSaver, data: &[u8]) -> Result<Vec<Id>> {
    let mut ids = Vec::new();
    for r in crate::repo::split::split(data, saver.repo().chunker()) {
        ids.push(saver.save(BlobKind::Data, &data[r])?);
    }
    Ok(ids)
}

/// Sorts a folder's entries, cuts them into chunks and saves them as tree blobs. For
/// every kind of source.
pub fn save_entries(saver: &BlobSaver, mut entries: Vec<MessageEntry>) -> Result<Vec<ChunkRef>> {
    entries.sort_by(|a, b| (&a.key, &a.name).cmp(&(&b.key, &b.name)));
    let mut chunks = Vec::new();
    for r in tree::chunk_boundaries(&entries) {
        let (stored, names): (Vec<_>, Vec<_>) =
            entries[r].iter().map(MessageEntry::to_parts).unzip();
        let entries = saver.save(
            BlobKind::Tree,
            &tree::encode(&MessageChunk { entries: stored }),
        )?;
        let names = saver.save(BlobKind::Tree, &tree::encode(&NameChunk { names }))?;
        chunks.push(ChunkRef { entries, names });
    }
    Ok(chunks)
}

/// Times a folder is listed again for messages renamed before they could be read.
const VANISHED_ROUNDS: u32 = 10;

/// What reading a listed message gave.
enum Read {
    Entry(MessageEntry),
    /// Not there under its listed name any more (renamed or deleted).
    Vanished(MessageFile),
    /// Reported.
    Failed,
}

/// Reads one message and stores its content.
fn read_message(
    ctx: &Ctx,
    folder: &FolderSource,
    file: MessageFile,
) -> Result<Read, (PathBuf, Error)> {
    let path = file.path(&folder.path);
    let (data, meta) = match read_with_meta(&path) {
        Ok(d) => d,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(Read::Vanished(file)),
        Err(e) => return Err((path.clone(), Error::io(&path, e))),
    };
    ctx.n.bytes_read.fetch_add(data.len() as u64, Relaxed);
    ctx.n.new.fetch_add(1, Relaxed);
    let content = save_content(ctx, &data).map_err(|e| (path.clone(), e))?;
    let (from, subject, date) = header_summary(&data);
    Ok(Read::Entry(MessageEntry {
        key: file.key().to_vec(),
        name: file.name.clone(),
        new: file.new,
        size: data.len() as u64,
        mtime: meta.mtime,
        mode: meta.mode,
        uid: meta.uid,
        gid: meta.gid,
        hash: ctx.saver.repo().key().blob_id(&data),
        content,
        from,
        subject,
        date,
    }))
}

/// Reads a whole file with one open and one fstat.
fn read_with_meta(path: &Path) -> std::io::Result<(Vec<u8>, maildir::FileMeta)> {
    use std::io::Read;
    let mut f = std::fs::File::open(path)?;
    let meta = maildir::FileMeta::of(&f.metadata()?);
    let mut data = Vec::with_capacity(meta.size as usize);
    f.read_to_end(&mut data)?;
    Ok((data, meta))
}

/// From, Subject and Date of a message, decoded, for listings. Parses only the header.
pub fn header_summary(data: &[u8]) -> (String, String, Option<i64>) {
    let head = summary_fields(data);
    let Some(msg) = mail_parser::MessageParser::new().parse_headers(&head[..]) else {
        return (String::new(), String::new(), None);
    };
    let from = msg
        .from()
        .and_then(|a| a.first())
        .map(|a| match (&a.name, &a.address) {
            (Some(n), Some(ad)) => format!("{n} <{ad}>"),
            (None, Some(ad)) => ad.to_string(),
            (Some(n), None) => n.to_string(),
            (None, None) => String::new(),
        })
        .unwrap_or_default();
    let subject = msg.subject().unwrap_or_default();
    (
        shorten(&from),
        shorten(subject),
        msg.date().map(|d| d.to_timestamp()),
    )
}

/// The From, Subject and Date fields of the header (with their continuation lines), so the
/// parser does not spend its time on `Received` chains and DKIM signatures.
fn summary_fields(data: &[u8]) -> Vec<u8> {
    const MAX_HEADER: usize = 256 * 1024;
    let head = &data[..data.len().min(MAX_HEADER)];
    let mut out = Vec::with_capacity(512);
    let mut keep = false;
    for line in head.split_inclusive(|&c| c == b'\n') {
        if line == b"\n" || line == b"\r\n" {
            break;
        }
        if matches!(line.first(), Some(b' ' | b'\t')) {
            if keep {
                out.extend_from_slice(line);
            }
            continue;
        }
        let name = line.split(|&c| c == b':').next().unwrap_or_default();
        keep = [&b"from"[..], b"subject", b"date"]
            .iter()
            .any(|f| name.eq_ignore_ascii_case(f));
        if keep {
            out.extend_from_slice(line);
        }
    }
    out.extend_from_slice(b"\n");
    out
}

fn shorten(s: &str) -> String {
    const MAX: usize = 160;
    let s = s.trim();
    match s.char_indices().nth(MAX) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_string(),
    }
}
