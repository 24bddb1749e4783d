//! The backup pipeline, one for every [`Source`] (Maildir, IMAP; docs/architecture.md).
//!
//! A source finds accounts and folders, decides what is unchanged since the parent
//! snapshot and reads what is new; everything else is here, once: the parent snapshot
//! (same source label and host) and its account trees, the writer record and lock, the
//! compression dictionary, the [`BlobSaver`] (dedup, compression, packs) every message
//! and folder file goes through ([`store_content`]), the Maildir names of messages given
//! by flags ([`FolderWriter::store`]), folder entries cut into tree chunks
//! ([`save_entries`]), owners, counters, progress, failures, the [`BackupReport`] and the
//! snapshot. Accounts and folders run in parallel as the source's [`Parallelism`] says:
//! on a rayon pool of `jobs` threads, or over sessions (connections) per account.

use crate::error::{Error, Result};
use crate::repo::compress::Compression;
use crate::repo::format::BlobKind;
use crate::repo::id::Id;
use crate::repo::pack::PackList;
use crate::repo::snapshot::{Snapshot, SnapshotSummary};
use crate::repo::tree::{
    self, AccountRef, AccountTree, DirEntry, FileEntry, FolderNode, MessageEntry, OwnerNames,
    RootTree, Timestamp,
};
use crate::repo::writer::content::{save_entries, store_content, store_large, StoredLarge};
use crate::repo::writer::records::WriterMark;
use crate::repo::writer::BlobSaver;
use crate::repo::{lock, Repository};
use crate::report::{per_sec, ratio, Failure, Progress};
use crate::source::walk::Dir;
use crate::source::{
    Account, Failures, FileData, FileMeta, Folder, FolderFile, FolderWriter, MessageId,
    MessageMeta, NewMessage, Parallelism, ParentAccount, Samples, Source,
};
use mailvault_imap::maildir_flags::{imap_to_maildir, KeywordTable};
use rayon::prelude::*;
use serde::Serialize;
use std::collections::{BTreeSet, HashMap, VecDeque};
use std::io::ErrorKind;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

/// What the pipeline needs besides the source.
#[derive(Clone, Debug)]
pub struct RunOptions {
    /// Overrides the repository's compression for this run.
    pub compression: Option<Compression>,
    pub tags: Vec<String>,
    pub hostname: String,
    /// No parent snapshot: read every message.
    pub force: bool,
}

impl RunOptions {
    /// A run from `hostname` with the repository's compression, no tags, and a parent
    /// when there is one.
    pub fn new(hostname: impl Into<String>) -> RunOptions {
        RunOptions {
            compression: None,
            tags: Vec::new(),
            hostname: hostname.into(),
            force: false,
        }
    }
}

/// The end-of-run summary.
#[derive(Clone, Debug, Serialize)]
pub struct BackupReport {
    pub snapshot: String,
    /// The snapshot's source label (`maildir:/var/vmail`, `file:/srv/db`).
    pub source: String,
    pub parent: Option<String>,
    pub accounts: u64,
    pub folders: u64,
    /// Messages in the snapshot plus those that failed.
    pub items_total: u64,
    /// Messages read from disk (new or changed).
    pub items_new: u64,
    /// Messages taken from the parent snapshot without reading them.
    pub items_unchanged: u64,
    /// Other names of a hard-linked file (`file:`) read once, under its first name.
    pub files_linked: u64,
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
    /// What was left out on purpose and is worth saying (a store's alias links): the
    /// exit code does not change.
    pub warnings: Vec<String>,
}

/// What a backup run of any source counts as it goes.
#[derive(Default)]
pub(crate) struct Counters {
    pub(crate) folders: AtomicU64,
    pub(crate) new: AtomicU64,
    pub(crate) unchanged: AtomicU64,
    pub(crate) bytes_read: AtomicU64,
    pub(crate) bytes_total: AtomicU64,
    /// Files of a `file:` backup (new or unchanged): items of the report like messages.
    pub(crate) files: AtomicU64,
    /// Names of a hard-linked file whose content was read under another name.
    pub(crate) linked: AtomicU64,
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
    warnings: Vec<String>,
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
    let items_total = messages + n.files.load(Relaxed) + failures.len() as u64;
    let report = BackupReport {
        snapshot: id.to_hex(),
        source: snap.source.clone(),
        parent: meta.parent.map(|p| p.id.to_hex()),
        accounts: summary.accounts,
        folders: summary.folders,
        items_total,
        items_new: summary.messages_new,
        items_unchanged: n.unchanged.load(Relaxed),
        files_linked: n.linked.load(Relaxed),
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
        warnings,
    };
    Ok((report, written))
}

/// The state a backup run shares between its workers.
pub(crate) struct Ctx<'a> {
    saver: BlobSaver<'a>,
    failures: Failures,
    n: Counters,
    progress: &'a dyn Progress,
    /// Every uid and gid recorded, for the snapshot's table of owner names.
    owners: Mutex<OwnerIds>,
    /// The snapshot's time (seconds): the mtime of folder files a source makes up.
    time: i64,
    /// The user running the backup, owner of what a source makes up.
    process_owner: OnceLock<(u32, u32)>,
    /// [`Source::state_file`].
    state_file: Option<&'static [u8]>,
}

impl Ctx<'_> {
    fn process_owner(&self) -> (u32, u32) {
        *self.process_owner.get_or_init(|| {
            use std::os::unix::fs::MetadataExt;
            std::fs::metadata("/proc/self")
                .map(|m| (m.uid(), m.gid()))
                .unwrap_or((0, 0))
        })
    }
}

/// The uids and gids seen by a backup.
#[derive(Default)]
pub(crate) struct OwnerIds {
    pub(crate) uids: BTreeSet<u32>,
    pub(crate) gids: BTreeSet<u32>,
}

impl OwnerIds {
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

/// Backs `source` up into `repo` and writes a snapshot dated `time` (Unix seconds and
/// nanoseconds; `backup --time`, else [`crate::now`]). The one backup pipeline.
pub fn run<S: Source>(
    repo: &mut Repository,
    source: &S,
    opts: &RunOptions,
    time: (i64, u32),
    progress: &dyn Progress,
) -> Result<BackupReport, S::Error> {
    let started = Instant::now();
    let label = source.label();
    let found = Failures::default();
    let accounts = source.accounts_reporting(&found)?;
    let (resumed, mark) = repo.begin_backup()?;
    let compression = opts.compression.unwrap_or(repo.config().compression);
    if compression == Compression::Zstd && !repo.has_dictionary() {
        let samples = Samples {
            chunker: repo.chunker(),
            total: AtomicU64::new(0),
            out: Mutex::new(Vec::new()),
        };
        source.samples(&accounts, &samples);
        let samples = samples.out.into_inner().unwrap_or_else(|p| p.into_inner());
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
        let repo: &Repository = repo;
        let packs_resumed = resumed.len() as u64;
        let ctx = Ctx {
            saver: BlobSaver::new(repo, compression),
            failures: found,
            n: Counters::default(),
            progress,
            owners: Mutex::new(OwnerIds::default()),
            time: time.0,
            process_owner: OnceLock::new(),
            state_file: source.state_file(),
        };
        ctx.saver.adopt(resumed);
        let accounts = backup_accounts(&ctx, source, &accounts, &parent_accounts)?;
        let root = RootTree {
            accounts,
            owners: lock(&ctx.owners).names(),
        };
        let meta = RunMeta {
            started,
            time,
            hostname: opts.hostname.clone(),
            source: label,
            tags: opts.tags.clone(),
            parent,
            packs_resumed,
            lock: mark.watch(),
        };
        let (failures, warnings) = (ctx.failures.take(), ctx.failures.take_warnings());
        finish_run(&ctx.saver, &ctx.n, failures, warnings, root, meta).map_err(S::Error::from)
    })?;
    end_run(repo, &written, mark);
    Ok(report)
}

/// At most this many bytes of tree packs are read ahead for an incremental backup.
const TREE_PREFETCH_BUDGET: u64 = 256 << 20;

/// Backs up every account, in parallel as the source allows; their refs in `accounts`
/// order (failed ones left out and reported).
fn backup_accounts<S: Source>(
    ctx: &Ctx,
    source: &S,
    accounts: &[Account],
    parents: &HashMap<String, AccountRef>,
) -> Result<Vec<AccountRef>, S::Error> {
    // Largest accounts first (by the parent's count; new accounts last): a large account
    // started last would leave one worker finishing it alone.
    let mut order: Vec<usize> = (0..accounts.len()).collect();
    order.sort_by_key(|&i| {
        std::cmp::Reverse(parents.get(&accounts[i].name).map_or(0, |r| r.messages))
    });
    let one = |i: usize| -> Option<AccountRef> {
        let a = &accounts[i];
        match backup_account(ctx, source, a, parents.get(&a.name)) {
            Ok(r) => Some(r),
            Err(e) => {
                ctx.failures.fail(format!("account {}", a.name), e);
                None
            }
        }
    };
    let mut refs: Vec<(usize, Option<AccountRef>)> = match source.parallelism() {
        Parallelism::Pool { jobs } => {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(jobs)
                .build()
                .map_err(|e| {
                    Error::InvalidInput(format!("cannot start {jobs} worker threads: {e}"))
                })?;
            pool.install(|| {
                order
                    .par_iter()
                    .with_max_len(1)
                    .map(|&i| (i, one(i)))
                    .collect()
            })
        }
        Parallelism::Sessions { accounts: n, .. } => {
            let slots: Vec<Mutex<Option<AccountRef>>> =
                accounts.iter().map(|_| Mutex::new(None)).collect();
            crate::parallel::for_each_parallel(order.len(), n, "imap-account", |k| {
                let i = order[k];
                *lock(&slots[i]) = one(i);
            });
            slots
                .into_iter()
                .map(|m| m.into_inner().unwrap_or_else(|p| p.into_inner()))
                .enumerate()
                .collect()
        }
    };
    refs.sort_unstable_by_key(|(i, _)| *i);
    Ok(refs.into_iter().filter_map(|(_, r)| r).collect())
}

fn backup_account<S: Source>(
    ctx: &Ctx,
    source: &S,
    acc: &Account,
    parent: Option<&AccountRef>,
) -> Result<AccountRef, S::Error> {
    let repo = ctx.saver.repo();
    let mut session = source.open(acc)?;
    let listing = match source.folders(acc, &mut session, &ctx.failures) {
        Ok(l) => l,
        Err(e) => {
            source.close(session);
            return Err(e);
        }
    };
    let parent = parent_account(ctx, acc, parent);
    if source.keys_across_folders() {
        parent.load_keys(repo, &ctx.failures, &acc.name);
    }
    let subscriptions = listing.subscriptions.as_deref();
    let folder = |session: &mut S::Session, f: &Folder| -> Option<FolderNode> {
        let subs = subscriptions.filter(|_| f.dir.is_empty());
        match backup_folder(ctx, source, session, acc, f, &parent, subs) {
            Ok(n) => Some(n),
            Err(e) => {
                ctx.failures.fail(source.folder_item(acc, f), e);
                None
            }
        }
    };
    let mut folders: Vec<FolderNode> = match source.parallelism() {
        Parallelism::Pool { .. } => {
            source.close(session);
            (listing.folders.par_iter())
                .filter_map(|f| match source.open(acc) {
                    Ok(mut s) => {
                        let n = folder(&mut s, f);
                        source.close(s);
                        n
                    }
                    Err(e) => {
                        ctx.failures.fail(source.folder_item(acc, f), e);
                        None
                    }
                })
                .collect()
        }
        Parallelism::Sessions { sessions, .. } => folders_over_sessions(
            ctx,
            source,
            acc,
            session,
            &listing.folders,
            sessions,
            &folder,
        ),
    };
    // INBOX first, then by directory.
    folders.sort_by(|a, b| (!a.dir.is_empty(), &a.dir).cmp(&(!b.dir.is_empty(), &b.dir)));
    let t = AccountTree { folders };
    let messages = t.folders.iter().map(|f| f.messages).sum();
    let bytes = t.folders.iter().map(|f| f.bytes).sum();
    let tree = ctx.saver.save(BlobKind::Tree, &tree::encode(&t))?;
    {
        let mut owners = lock(&ctx.owners);
        for d in &listing.dirs {
            owners.add(d.uid, d.gid);
        }
    }
    Ok(AccountRef {
        name: acc.name.clone(),
        rel_path: acc.rel_path.clone(),
        tree,
        messages,
        bytes,
        dirs: listing.dirs,
    })
}

/// The parent snapshot's tree of an account, indexed by folder directory; empty when
/// there is none or it cannot be read.
fn parent_account(ctx: &Ctx, acc: &Account, parent: Option<&AccountRef>) -> ParentAccount {
    let Some(r) = parent else {
        return ParentAccount::default();
    };
    match ctx.saver.repo().read_tree::<AccountTree>(&r.tree) {
        Ok(t) => ParentAccount {
            by_dir: (t.folders.iter().enumerate())
                .map(|(i, f)| (f.dir.clone(), i))
                .collect(),
            folders: t.folders,
            by_key: OnceLock::new(),
        },
        Err(e) => {
            // A damaged parent only costs speed: read everything again.
            ctx.failures
                .fail(format!("account {} (parent snapshot)", acc.name), &e);
            ParentAccount::default()
        }
    }
}

/// Backs up an account's folders over up to `sessions` sessions at once, each lane taking
/// the next folder from a queue and opening a new session when its own is unusable; the
/// account's first session goes to the first lane.
fn folders_over_sessions<S: Source>(
    ctx: &Ctx,
    source: &S,
    acc: &Account,
    session: S::Session,
    folders: &[Folder],
    sessions: usize,
    folder: &(dyn Fn(&mut S::Session, &Folder) -> Option<FolderNode> + Sync),
) -> Vec<FolderNode> {
    let queue: Mutex<VecDeque<&Folder>> = Mutex::new(folders.iter().collect());
    let nodes: Mutex<Vec<FolderNode>> = Mutex::new(Vec::new());
    let lanes = sessions.clamp(1, folders.len().max(1));
    let first = Mutex::new(Some(session));
    std::thread::scope(|sc| {
        for _ in 0..lanes {
            sc.spawn(|| {
                let mut session: Option<S::Session> = lock(&first).take();
                loop {
                    let Some(f) = lock(&queue).pop_front() else {
                        break;
                    };
                    if session.as_ref().is_none_or(|s| !source.usable(s)) {
                        match source.open(acc) {
                            Ok(s) => session = Some(s),
                            Err(e) => {
                                ctx.failures.fail(source.folder_item(acc, f), e);
                                continue;
                            }
                        }
                    }
                    let Some(s) = session.as_mut() else { continue };
                    if let Some(n) = folder(s, f) {
                        lock(&nodes).push(n);
                    }
                }
                if let Some(s) = session {
                    source.close(s);
                }
            });
        }
    });
    nodes.into_inner().unwrap_or_else(|p| p.into_inner())
}

fn backup_folder<S: Source>(
    ctx: &Ctx,
    source: &S,
    session: &mut S::Session,
    acc: &Account,
    folder: &Folder,
    parent: &ParentAccount,
    subscriptions: Option<&[String]>,
) -> Result<FolderNode, S::Error> {
    let parent_folder = match parent.by_dir.get(&folder.dir) {
        Some(&i) => parent.folders.get(i),
        // Found by name when its directory is spelled otherwise now.
        None => parent.folders.iter().find(|f| f.name == folder.name),
    };
    let mut out = FolderWriter {
        ctx,
        account: &acc.name,
        folder,
        parent_account: parent,
        parent: parent_folder,
        entries: Vec::new(),
        files: Vec::new(),
        dirs: Vec::new(),
        mtime: None,
        keywords: Mutex::new(KeywordTable::new()),
    };
    source.backup_folder(session, acc, folder, &mut out)?;
    Ok(out.finish(subscriptions)?)
}

impl ParentAccount {
    /// Every message of the account by key, read on the first call (a damaged parent is
    /// reported and only costs speed: everything is read again).
    fn load_keys(
        &self,
        repo: &Repository,
        failures: &Failures,
        account: &str,
    ) -> &HashMap<Vec<u8>, MessageEntry> {
        self.by_key.get_or_init(|| {
            let mut by_key = HashMap::new();
            for f in &self.folders {
                for c in &f.chunks {
                    match repo.read_chunk(c) {
                        Ok(es) => by_key.extend(es.into_iter().map(|e| (e.key.clone(), e))),
                        Err(e) => {
                            failures.fail(format!("account {account} (parent snapshot)"), &e);
                            return HashMap::new();
                        }
                    }
                }
            }
            by_key
        })
    }
}

/// The pipeline's side of [`Source::backup_folder`].
impl<'a> FolderWriter<'a> {
    /// The account being backed up.
    pub fn account(&self) -> &str {
        self.account
    }

    /// The failure list (a message or file that could not be read; the folder goes on).
    pub fn failures(&self) -> &Failures {
        &self.ctx.failures
    }

    /// Records a failure; see [`Failures::fail`].
    pub fn fail(&self, item: impl Into<String>, e: impl std::fmt::Display) {
        self.ctx.failures.fail(item, e);
    }

    /// `n` messages more to read (progress).
    pub fn expect(&self, n: u64) {
        self.ctx.progress.add_total(n, 0);
    }

    /// A message expected and not stored (gone meanwhile, or failed): progress only.
    pub fn skipped(&self) {
        self.ctx.progress.advance(1, 0);
    }

    /// `n` bytes read from the source besides what [`NewMessage::read`] and
    /// [`FileData::Path`] count (an mbox's bytes between messages, a scan).
    pub fn count_read(&self, n: u64) {
        self.ctx.n.bytes_read.fetch_add(n, Relaxed);
    }

    /// The parent snapshot's folder of the same `dir` (or name), if any.
    pub fn parent(&self) -> Option<&'a FolderNode> {
        self.parent
    }

    /// The parent snapshot's entry of the message with Maildir key `key`, in any folder
    /// of the account (a Maildir message moved between folders keeps its key). The
    /// account's entries are read on the first call.
    pub fn parent_by_key(&self, key: &[u8]) -> Option<&'a MessageEntry> {
        let pa = self.parent_account;
        pa.load_keys(self.ctx.saver.repo(), &self.ctx.failures, self.account)
            .get(key)
    }

    /// The parent folder's entries ([`parent`](Self::parent)); none without one.
    pub fn parent_entries(&self) -> Result<Vec<MessageEntry>> {
        let mut out = Vec::new();
        for c in self.parent.iter().flat_map(|p| &p.chunks) {
            out.extend(self.ctx.saver.repo().read_chunk(c)?);
        }
        Ok(out)
    }

    /// The parent folder's file `name`.
    pub fn parent_file(&self, name: &[u8]) -> Option<&'a FileEntry> {
        self.parent?.files.iter().find(|f| f.name == name)
    }

    /// The content of the parent folder's file `name` (`None` if it cannot be read).
    pub fn parent_file_data(&self, name: &[u8]) -> Option<Vec<u8>> {
        let f = self.parent_file(name)?;
        crate::model::assemble::assemble_file(self.ctx.saver.repo(), f).ok()
    }

    /// The sync state the source kept in the parent folder ([`Source::state_file`]).
    pub fn parent_state(&self) -> Option<Vec<u8>> {
        self.parent_file_data(self.ctx.state_file?)
    }

    /// Keeps this folder's sync state, read back by the next backup's
    /// [`parent_state`](Self::parent_state).
    pub fn set_state(&mut self, data: Vec<u8>) -> Result<()> {
        let Some(name) = self.ctx.state_file else {
            return Err(Error::InvalidInput(
                "a source without a state file kept a sync state".into(),
            ));
        };
        self.file(FolderFile {
            name: name.to_vec(),
            data: FileData::Bytes(data),
            meta: None,
        })
    }

    /// Starts the folder's keyword letters from the parent's `dovecot-keywords`, so that
    /// the names of the parent's entries keep their meaning (call it when entries of the
    /// parent are kept).
    pub fn resume_keywords(&mut self) {
        if let Some(d) = self.parent_file_data(b"dovecot-keywords") {
            *lock(&self.keywords) = KeywordTable::parse(&String::from_utf8_lossy(&d));
        }
    }

    /// The Maildir name of a message with key `key` and IMAP `flags`: `key:2,` and the
    /// letters (keywords get theirs from the folder's table, new ones added in call
    /// order). Flags without a letter are dropped, with a warning.
    pub fn maildir_name(&self, key: &[u8], flags: &[&str]) -> Vec<u8> {
        let mapped = imap_to_maildir(flags, &mut lock(&self.keywords));
        if !mapped.unmapped.is_empty() {
            tracing::warn!(
                "{}: {}: {}: flags without a Maildir letter dropped: {:?}",
                self.account,
                self.folder.name,
                String::from_utf8_lossy(key),
                mapped.unmapped
            );
        }
        [key, b":2,", mapped.letters.as_bytes()].concat()
    }

    /// Keeps a message the parent has (its entry, renamed or moved as it is now)
    /// without reading it.
    pub fn unchanged(&mut self, e: MessageEntry) {
        self.ctx.n.unchanged.fetch_add(1, Relaxed);
        self.ctx.progress.advance(1, e.size);
        self.entries.push(e);
    }

    /// Stores a new message's content and makes its entry, for [`add`](Self::add); may be
    /// called from several threads at once (messages read in parallel).
    pub fn store(&self, msg: NewMessage<'_>) -> Result<MessageEntry> {
        let ctx = self.ctx;
        let data = msg.data;
        ctx.n.bytes_read.fetch_add(msg.read, Relaxed);
        ctx.n.new.fetch_add(1, Relaxed);
        let content = store_content(&ctx.saver, data)?;
        let hash = ctx.saver.repo().key().blob_id(data);
        let size = data.len() as u64;
        let (key, name, new, mtime, (mode, uid, gid)) = match msg.meta {
            MessageMeta::Maildir { name, new, file } => (
                crate::mail::maildir::split_name(&name).0.to_vec(),
                name,
                new,
                file.mtime,
                (file.mode, file.uid, file.gid),
            ),
            MessageMeta::Flags {
                flags,
                internal_date,
                id,
            } => {
                let key = match id {
                    MessageId::Uid { uid, validity } => crate::imap::names::synth_key(
                        &self.folder.name,
                        internal_date,
                        uid,
                        validity,
                        size,
                    )
                    .into_bytes(),
                    MessageId::Key(k) => k,
                };
                let name = self.maildir_name(&key, flags);
                let (u, g) = ctx.process_owner();
                let mtime = Timestamp {
                    secs: internal_date,
                    nanos: 0,
                };
                (key, name, false, mtime, (0o600, u, g))
            }
        };
        let (from, subject, date) = header_summary(data);
        Ok(MessageEntry {
            key,
            name,
            new,
            size,
            mtime,
            mode,
            uid,
            gid,
            hash,
            content,
            from,
            subject,
            date,
        })
    }

    /// Adds a message stored by [`store`](Self::store).
    pub fn add(&mut self, e: MessageEntry) {
        self.ctx.progress.advance(1, e.size);
        self.entries.push(e);
    }

    /// Stores a new message and adds it: [`store`](Self::store) then [`add`](Self::add).
    pub fn message(&mut self, msg: NewMessage<'_>) -> Result<()> {
        let e = self.store(msg)?;
        self.add(e);
        Ok(())
    }

    /// Stores a folder file. One given by path is read whole (a file gone by then is left
    /// out; one that cannot be read is reported and left out); a large one in windows
    /// ([`FileData::Large`]).
    pub fn file(&mut self, f: FolderFile) -> Result<()> {
        if let Some(e) = self.store_file(f)? {
            self.files.push(e);
        }
        Ok(())
    }

    /// Stores a folder file and makes its entry, for [`keep_file`](Self::keep_file); may
    /// be called from several threads at once. `None`: gone, or reported as failed. A
    /// [`FileData::Large`] file counts as an item of the report (a `file:` backup's).
    pub fn store_file(&self, f: FolderFile) -> Result<Option<FileEntry>> {
        let ctx = self.ctx;
        let skip = |path: &std::path::Path, e: std::io::Error| {
            if e.kind() != ErrorKind::NotFound {
                self.fail(path.display().to_string(), e);
            }
            Ok(None)
        };
        let mut link = None;
        let mut meta = f.meta;
        let (size, content, lists) = match f.data {
            FileData::Bytes(b) => (b.len() as u64, store_content(&ctx.saver, &b)?, Vec::new()),
            FileData::Link(target) => {
                link = Some(target);
                ctx.n.new.fetch_add(1, Relaxed);
                ctx.n.files.fetch_add(1, Relaxed);
                ctx.progress.advance(1, 0);
                (0, Vec::new(), Vec::new())
            }
            FileData::Path(path) => match std::fs::read(&path) {
                Ok(d) => {
                    ctx.n.bytes_read.fetch_add(d.len() as u64, Relaxed);
                    (d.len() as u64, store_content(&ctx.saver, &d)?, Vec::new())
                }
                Err(e) => return skip(&path, e),
            },
            FileData::Large { dir, name } => {
                let path = dir.join(&name);
                let read = match self.read_large(&dir, &name, &path) {
                    Ok(r) => r,
                    // The repository's own errors end the folder; the file's are its own.
                    Err(Error::Io { path: p, source }) if p == path => return skip(&path, source),
                    Err(e) => return Err(e),
                };
                let (stored, at) = match read {
                    LargeRead::Read(stored, at) => (stored, at),
                    LargeRead::Torn(stored, at) => {
                        // Kept as the parent has it, if it does: a version read whole.
                        let parent = (self.parent_file(&f.name)).filter(|p| p.link.is_none());
                        if let Some(p) = parent {
                            self.fail(
                                path.display().to_string(),
                                format!(
                                    "{CHANGED_WHILE_READ}; the previous snapshot's version is kept"
                                ),
                            );
                            ctx.n.files.fetch_add(1, Relaxed);
                            ctx.n.bytes_total.fetch_add(p.size, Relaxed);
                            ctx.progress.advance(1, p.size);
                            return Ok(Some(p.clone()));
                        }
                        self.fail(path.display().to_string(), format!("{CHANGED_WHILE_READ}; stored as read (it may not be consistent), read again by the next backup"));
                        (stored, at)
                    }
                };
                // The file's `stat` as it was when read.
                if let Some(m) = meta.as_mut() {
                    (m.size, m.mtime, m.inode) = (at.size, at.mtime, at.inode);
                }
                ctx.n.new.fetch_add(1, Relaxed);
                ctx.n.files.fetch_add(1, Relaxed);
                ctx.n.bytes_total.fetch_add(stored.size, Relaxed);
                ctx.progress.advance(1, stored.size);
                (stored.size, stored.content, stored.lists)
            }
        };
        let (mtime, mode, uid, gid, (inode, dev, nlink)) = match meta {
            Some(m) => (m.mtime, m.mode, m.uid, m.gid, (m.inode, m.dev, m.nlink)),
            None => {
                let (u, g) = ctx.process_owner();
                let mtime = Timestamp {
                    secs: ctx.time,
                    nanos: 0,
                };
                (mtime, 0o600, u, g, (0, 0, 0))
            }
        };
        Ok(Some(FileEntry {
            name: f.name,
            size,
            mtime,
            mode,
            uid,
            gid,
            content,
            lists,
            inode,
            link,
            dev,
            nlink,
        }))
    }

    /// Reads and stores a large file, checking that it did not change while it was read
    /// (as restic and borg do): its size, mtime and ctime on the open file before and
    /// after, and the path's `stat` after (the same file, the same times). One that
    /// changed is read again once; changed again, it is [`LargeRead::Torn`].
    fn read_large(&self, dir: &Dir, name: &[u8], path: &Path) -> Result<LargeRead> {
        let ctx = self.ctx;
        let mut attempt = 0;
        loop {
            attempt += 1;
            let (file, before) = dir.open_file(name).map_err(|e| Error::io(path, e))?;
            let reader = crate::source::walk::Reading::new(&file, path);
            let stored = store_large(&ctx.saver, reader, path, &ctx.n.bytes_read)?;
            let after = rustix::fs::fstat(&file).map_err(|e| Error::io(path, e.into()))?;
            let now = dir.stat(name).map_err(|e| Error::io(path, e))?;
            let at = FileMeta::of_stat(&before);
            let same = crate::source::walk::same_file_state;
            if same(&before, &after) && same(&before, &now) && stored.size == at.size {
                return Ok(LargeRead::Read(stored, at));
            }
            if attempt == 2 {
                return Ok(LargeRead::Torn(stored, at));
            }
        }
    }

    /// Keeps a file of a `file:` backup the parent has (same size, mtime and inode)
    /// without reading it, counted as an unchanged item.
    pub fn unchanged_file(&mut self, e: FileEntry) {
        self.count_file(&self.ctx.n.unchanged, e);
    }

    /// Keeps a file of a `file:` backup not read, counted as an item and in `as_`.
    fn count_file(&mut self, as_: &AtomicU64, e: FileEntry) {
        as_.fetch_add(1, Relaxed);
        self.ctx.n.files.fetch_add(1, Relaxed);
        self.ctx.n.bytes_total.fetch_add(e.size, Relaxed);
        self.ctx.progress.advance(1, e.size);
        self.files.push(e);
    }

    /// Keeps another name of a hard-linked file this run read under a first name (its
    /// entry, with this name), counted as an item neither new nor unchanged: linked.
    pub fn linked_file(&mut self, e: FileEntry) {
        self.count_file(&self.ctx.n.linked, e);
    }

    /// Keeps a folder file the parent has, unchanged (with its owner and mode as they
    /// are now).
    pub fn keep_file(&mut self, e: FileEntry) {
        self.files.push(e);
    }

    /// Records the folder directory's mtime (a `file:` backup's directories: restored
    /// once their content is in).
    pub fn dir_mtime(&mut self, mtime: Timestamp) {
        self.mtime = Some(mtime);
    }

    /// Records a directory of the folder (its owner and mode; `name` empty for the folder
    /// itself).
    pub fn dir(&mut self, d: DirEntry) {
        self.dirs.push(d);
    }

    /// Ends the folder: the generated files, the entries cut into tree chunks, its node.
    fn finish(mut self, subscriptions: Option<&[String]>) -> Result<FolderNode> {
        let ctx = self.ctx;
        let kw = lock(&self.keywords).to_file_string();
        if !kw.is_empty() {
            self.file(FolderFile {
                name: b"dovecot-keywords".to_vec(),
                data: FileData::Bytes(kw.into_bytes()),
                meta: None,
            })?;
        }
        if let Some(subs) = subscriptions {
            self.file(FolderFile {
                name: b"subscriptions".to_vec(),
                data: FileData::Bytes(crate::imap::names::subscriptions_file(subs)),
                meta: None,
            })?;
        }
        let messages = self.entries.len() as u64;
        let bytes: u64 = self.entries.iter().map(|e| e.size).sum();
        ctx.n.bytes_total.fetch_add(bytes, Relaxed);
        let mut owners = OwnerIds::default();
        for e in &self.entries {
            owners.add(e.uid, e.gid);
        }
        for e in &self.files {
            owners.add(e.uid, e.gid);
        }
        for d in &self.dirs {
            owners.add(d.uid, d.gid);
        }
        {
            let mut all = lock(&ctx.owners);
            all.uids.append(&mut owners.uids);
            all.gids.append(&mut owners.gids);
        }
        let chunks = save_entries(&ctx.saver, self.entries)?;
        self.files.sort_by(|a, b| a.name.cmp(&b.name));
        ctx.n.folders.fetch_add(1, Relaxed);
        Ok(FolderNode {
            name: self.folder.name.clone(),
            dir: self.folder.dir.clone(),
            files: self.files,
            chunks,
            messages,
            bytes,
            dirs: self.dirs,
            mtime: self.mtime,
        })
    }
}

/// What a file that changed while it was read is reported with.
pub const CHANGED_WHILE_READ: &str = "changed while read, twice (a file being written to: back up from a filesystem snapshot, see docs/consistent-sources.md)";

/// A large file as [`FolderWriter::read_large`] read it, with its `stat` from before.
enum LargeRead {
    /// Unchanged while read.
    Read(StoredLarge, FileMeta),
    /// Changed while read, on both tries: the second try.
    Torn(StoredLarge, FileMeta),
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
    pad_base64_words(&out)
}

/// `head` with every base64 encoded word (`=?cs?B?...?=`) padded with `=` to a multiple of
/// four characters. Written by hand because mail-parser 0.11 drops the last one or two
/// bytes of an unpadded word (`=?utf-8?B?eHB0bw?=` gives `xpt`), which RFC 2047 writers
/// such as Python's `email` and many MUAs produce; everything else is left as it is.
fn pad_base64_words(head: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(head.len() + 8);
    let mut rest = head;
    while let Some(start) = find(rest, b"=?") {
        out.extend_from_slice(&rest[..start]);
        let word = &rest[start..];
        // =?charset?B?payload?=
        let parsed = (|| {
            let cs_end = 2 + find(&word[2..], b"?")?;
            let enc = word.get(cs_end + 1..cs_end + 3)?;
            if !enc.eq_ignore_ascii_case(b"B?") {
                return None;
            }
            let payload = cs_end + 3;
            let end = payload + find(&word[payload..], b"?=")?;
            Some((payload, end))
        })();
        let Some((payload, end)) = parsed else {
            out.extend_from_slice(b"=?");
            rest = &word[2..];
            continue;
        };
        let body = &word[payload..end];
        out.extend_from_slice(&word[..end]);
        let significant = body.iter().filter(|c| !c.is_ascii_whitespace()).count();
        if !body.contains(&b'=') && significant % 4 != 0 {
            out.extend(std::iter::repeat_n(b'=', 4 - significant % 4));
        }
        out.extend_from_slice(b"?=");
        rest = &word[end + 2..];
    }
    out.extend_from_slice(rest);
    out
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

fn shorten(s: &str) -> String {
    const MAX: usize = 160;
    let s = s.trim();
    match s.char_indices().nth(MAX) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_string(),
    }
}
