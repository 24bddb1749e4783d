//! The backup pipeline, one for every [`Source`] (Maildir, IMAP; docs/architecture.md).
//!
//! A source finds accounts and folders, decides what is unchanged since the parent
//! snapshot and reads what is new; everything else is here, once: the parent snapshot
//! (same source label and host) and its account trees, the writer record and lock, the
//! compression dictionary, the [`BlobSaver`] (dedup, compression, packs) every message
//! and folder file goes through ([`crate::repo::writer::content::store_content`]), the Maildir names of messages given
//! by flags ([`FolderWriter::store`]), folder entries cut into tree chunks
//! ([`crate::repo::writer::content::save_entries`]), owners, counters, progress, failures, the [`BackupReport`] and the
//! snapshot. Accounts and folders run in parallel as the source's [`Parallelism`] says:
//! on a rayon pool of `jobs` threads, or over sessions (connections) per account.

use crate::error::{Error, Result};
use crate::repo::compress::Compression;
use crate::repo::format::BlobKind;
use crate::repo::id::Id;
use crate::repo::index::INDEX_FILE_ENTRIES;
use crate::repo::pack::PackList;
use crate::repo::snapshot::{Snapshot, SnapshotSummary};
use crate::repo::tree::{self, AccountRef, AccountTree, FolderNode, FolderScan, RootTree};
use crate::repo::writer::content::NewContents;
use crate::repo::writer::records::WriterMark;
use crate::repo::writer::BlobSaver;
use crate::repo::{lock, Repository};
use crate::report::{per_sec, ratio, Failure, Progress};
use crate::source::parent::ParentAccount;
use crate::source::writer::{Counters, Ctx, Entries, OwnerIds};
use crate::source::Source;
use crate::source::{
    home, Account, Failures, Folder, FolderWriter, Home, Parallelism, RunOptions, Samples,
};
use mailvault_imap::maildir_flags::KeywordTable;
use rayon::prelude::*;
use serde::Serialize;
use std::collections::{HashMap, VecDeque};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

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
    /// Files of the accounts' homes beside their Maildirs (sieve scripts), new or
    /// unchanged: not items (a failed one is, with its path).
    pub home_files: u64,
    /// Of those, read this run (new or changed).
    pub home_files_new: u64,
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
    /// `backup --index`: what was indexed as it was read (absent without it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub index: Option<crate::search::build::IndexReport>,
}

/// The snapshot fields a backup run of any source decides up front.
pub(crate) struct RunMeta {
    pub(crate) started: Instant,
    pub(crate) time: (i64, u32),
    pub(crate) hostname: String,
    pub(crate) source: String,
    pub(crate) tags: Vec<String>,
    pub(crate) parent: Option<Snapshot>,
    /// [`Snapshot::started`].
    pub(crate) clock: tree::Timestamp,
    pub(crate) packs_resumed: u64,
    /// This run's lock: still good when the snapshot is saved, or no snapshot.
    pub(crate) lock: crate::repo::lock::LockWatch,
}

/// After a backup run of any source has saved its snapshot: its packs join the
/// in-memory index (those of the index files written during the run read back) and its
/// record in `writers/` goes.
pub(crate) fn end_run(repo: &mut Repository, written: &Written, mark: WriterMark) {
    if let Err(e) = repo.add_written(&written.0, &written.1) {
        // The snapshot and its index files are saved: only this process's view lacks them.
        tracing::warn!("could not read back this backup's index files: {e}");
    }
    if let Err(e) = repo.end_backup(mark) {
        // Only costs the next backup a look for unindexed packs.
        tracing::warn!("could not remove this backup's record in writers/: {e}");
    }
}

/// What a backup run wrote, for [`end_run`]: the packs of its last index file, and its
/// index files written before.
pub(crate) type Written = (PackList, Vec<Id>);

/// Ends a backup run of any source: saves the root tree, writes the last packs and the
/// index, then the snapshot, and builds the report. Returns what was written, for
/// [`Repository::add_written`].
pub(crate) fn finish_run(
    saver: &BlobSaver,
    (n, home): (&Counters, &Counters),
    mut failures: Vec<Failure>,
    warnings: Vec<String>,
    root: RootTree,
    meta: RunMeta,
) -> Result<(BackupReport, Written)> {
    let repo = saver.repo();
    let root_id = saver.save(BlobKind::Tree, &tree::encode(&root))?;
    let written = (saver.finish()?, saver.index_files_written());
    failures.sort_by(|a, b| a.item.cmp(&b.item));
    let st = &saver.stats;
    let messages: u64 = root.accounts.iter().map(|a| a.messages).sum();
    let elapsed = meta.started.elapsed().as_secs_f64();
    // Read from the store: its mail and its homes (whose new bytes are in `new_raw`).
    let bytes_read = n.bytes_read.load(Relaxed) + home.bytes_read.load(Relaxed);
    let new_raw = st.data_raw.load(Relaxed);
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
            dedup_ratio: ratio(bytes_read, new_raw),
            compression_ratio: ratio(new_raw, st.data_stored.load(Relaxed)),
        },
        original: None,
        started: Some(meta.clock),
    };
    // A lock that may have been taken for stale (not refreshed for long) may have let a
    // prune delete packs this run deduplicated against: no snapshot then.
    meta.lock.verify()?;
    let id = repo.save_snapshot_counted(&mut snap)?;
    let summary = snap.summary;
    let items_total = messages + n.files.load(Relaxed) + failures.len() as u64;
    let report = BackupReport {
        index: None,
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
        home_files: home.files.load(Relaxed),
        home_files_new: home.new.load(Relaxed),
        bytes_total: summary.bytes,
        bytes_read,
        bytes_added: summary.bytes_added,
        dedup_ratio: summary.dedup_ratio,
        compression_ratio: summary.compression_ratio,
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

/// Backs `source` up into `repo` and writes a snapshot dated `time` (Unix seconds and
/// nanoseconds; `backup --time`, else [`crate::now`]). The one backup pipeline.
pub fn run<S: Source>(
    repo: &mut Repository,
    source: &S,
    opts: &RunOptions,
    time: (i64, u32),
    progress: &dyn Progress,
) -> Result<BackupReport> {
    let started = Instant::now();
    let label = source.label();
    let found = Failures::default();
    let accounts = source.accounts_reporting(&found)?;
    // Before any folder is looked at (tests set it below the first account's path).
    let clock =
        crate::source::unchanged::clock(accounts.first().map_or(Path::new(""), |a| &a.path));
    let (resumed, mark) = repo.begin_backup()?;
    let compression = opts.compression.unwrap_or(repo.config().compression);
    if compression == Compression::Zstd && !repo.has_dictionary() {
        train_dictionary(repo, source, &accounts)?;
    }
    let parent = if opts.force {
        None
    } else {
        repo.snapshots()?
            .into_iter()
            .rev()
            .find(|s| s.source == label && s.hostname == opts.hostname)
    };
    let parent_root = match &parent {
        Some(p) => repo.read_tree::<RootTree>(&p.root)?,
        None => RootTree::default(),
    };
    let parent_store = parent_root.store;
    let parent_accounts: HashMap<String, AccountRef> = (parent_root.accounts.into_iter())
        .map(|a| (a.name.clone(), a))
        .collect();
    let prefetch = !parent_accounts.is_empty();
    let (inline, index_warning) = start_indexing(repo, opts);
    let (run, sealed) = std::thread::scope(|s| {
        if prefetch {
            std::thread::Builder::new()
                .name("prefetch".into())
                .spawn_scoped(s, || repo.prefetch_trees(TREE_PREFETCH_BUDGET))
                .ok();
        }
        let repo: &Repository = repo;
        let packs_resumed = resumed.len() as u64;
        let ctx = Ctx {
            saver: BlobSaver::new(repo, compression).index_every(INDEX_FILE_ENTRIES),
            failures: found,
            n: Counters::default(),
            home: Counters::default(),
            progress,
            owners: Mutex::new(OwnerIds::default()),
            time: time.0,
            process_owner: OnceLock::new(),
            state_file: source.state_file(),
            rescan: opts.rescan,
            parent_started: parent.as_ref().and_then(|p| p.started),
            new_contents: inline.as_ref().map(|i| i as &dyn NewContents),
        };
        ctx.saver.adopt(resumed);
        let accounts = backup_accounts(&ctx, source, &accounts, &parent_accounts)?;
        let store = backup_store(&ctx, source, parent_store.as_ref())?;
        // Every new content is given: its index is committed and sealed while the trees
        // and the snapshot are written, and stored once the snapshot is saved.
        let sealing = (inline.as_ref()).map(|i| s.spawn(move || i.seal(repo)));
        let root = RootTree {
            accounts,
            owners: lock(&ctx.owners).names(),
            store,
        };
        let meta = RunMeta {
            started,
            time,
            hostname: opts.hostname.clone(),
            source: label,
            tags: opts.tags.clone(),
            parent,
            clock,
            packs_resumed,
            lock: mark.watch(),
        };
        let (failures, warnings) = (ctx.failures.take(), ctx.failures.take_warnings());
        let run = finish_run(
            &ctx.saver,
            (&ctx.n, &ctx.home),
            failures,
            warnings,
            root,
            meta,
        )?;
        let sealed = sealing.map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)));
        Ok::<_, Error>((run, sealed))
    })?;
    let (mut report, written) = run;
    finish_indexing(repo, opts, inline.zip(sealed), index_warning, &mut report);
    end_run(repo, &written, mark);
    Ok(report)
}

/// The repository's first zstd backup: trains its compression dictionary on the
/// messages the source offers ([`Source::samples`]).
fn train_dictionary<S: Source>(
    repo: &mut Repository,
    source: &S,
    accounts: &[Account],
) -> Result<()> {
    let samples = Samples {
        chunker: repo.chunker(),
        total: AtomicU64::new(0),
        out: Mutex::new(Vec::new()),
    };
    source.samples(accounts, &samples);
    let samples = samples.out.into_inner().unwrap_or_else(|p| p.into_inner());
    if let Some(dict) = crate::repo::compress::train(&samples) {
        repo.add_dictionary(&dict)?;
    }
    Ok(())
}

/// `backup --index`: the indexer the run gives its new contents, or why there is none. A
/// backup never fails for its index: what is not indexed here, `index` indexes.
fn start_indexing(
    repo: &Repository,
    opts: &RunOptions,
) -> (Option<crate::search::inline::Inline>, Option<String>) {
    match &opts.index {
        Some(how) => match crate::search::inline::Inline::new(repo, how) {
            Ok(i) => (Some(i), None),
            Err(e) => (None, Some(format!("indexing during the backup: {e}"))),
        },
        None => (None, None),
    }
}

/// Once the snapshot is saved (and while this run's record in `writers/` still stands):
/// the splits in `sealed` (the run's indexer and what it sealed) stored, and said in
/// `report` (an index report whenever `--index` was asked, for the rest to be indexed
/// after the backup).
fn finish_indexing(
    repo: &Repository,
    opts: &RunOptions,
    sealed: Option<(
        crate::search::inline::Inline,
        Result<Vec<crate::search::build::Sealed>>,
    )>,
    mut warning: Option<String>,
    report: &mut BackupReport,
) {
    if let Some((inline, sealed)) = sealed {
        match sealed.and_then(|s| inline.store(repo, s)) {
            Ok(r) => report.index = Some(r),
            Err(e) => warning = Some(format!("saving what this backup indexed: {e}")),
        }
    }
    report.warnings.extend(warning);
    if opts.index.is_some() {
        report.index.get_or_insert_with(Default::default);
    }
}

/// At most this many bytes of tree packs are read ahead for an incremental backup.
const TREE_PREFETCH_BUDGET: u64 = 256 << 20;

/// Accounts, and folders of an account, backed up at once on a [`Parallelism::Pool`]: two
/// a core, at least 4, whatever the pool's threads. Each holds its folder's listing (40 MB
/// for 600,000 messages); the threads beyond them read the messages of their windows
/// (`Source::backup_folder`), which mostly wait for the disk. On a cold cache a backup of
/// one account of 1.5 million messages took 54-58 s with 4 threads, 38-46 s with 32; with
/// every one of its 7 folders at once, 169 MB instead of 137 MB (BENCHMARKS.md).
fn at_once() -> usize {
    (2 * crate::repo::cores()).clamp(4, 64)
}

/// Backs up every account, in parallel as the source allows; their refs in `accounts`
/// order (failed ones left out and reported).
fn backup_accounts<S: Source>(
    ctx: &Ctx,
    source: &S,
    accounts: &[Account],
    parents: &HashMap<String, AccountRef>,
) -> Result<Vec<AccountRef>> {
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
    // An account a thread (or session) at a time, largest first.
    let run = |k: usize| one(order[k]).map(|r| (order[k], r));
    let mut refs: Vec<(usize, AccountRef)> = match source.parallelism() {
        Parallelism::Pool { jobs } => {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(jobs)
                .build()
                .map_err(|e| {
                    Error::InvalidInput(format!("cannot start {jobs} worker threads: {e}"))
                })?;
            pool.install(|| crate::parallel::map_in_pool(order.len(), at_once(), run))
        }
        Parallelism::Sessions { accounts: n, .. } => {
            crate::parallel::map_parallel(order.len(), n, "imap-account", run)
        }
    }
    .into_iter()
    .flatten()
    .collect();
    refs.sort_unstable_by_key(|(i, _)| *i);
    Ok(refs.into_iter().map(|(_, r)| r).collect())
}

fn backup_account<S: Source>(
    ctx: &Ctx,
    source: &S,
    acc: &Account,
    parent: Option<&AccountRef>,
) -> Result<AccountRef> {
    let repo = ctx.saver.repo();
    let mut session = source.open(acc)?;
    let listing = match source.folders(acc, &mut session, &ctx.failures) {
        Ok(l) => l,
        Err(e) => {
            source.close(session);
            return Err(e);
        }
    };
    let (mut parent, parent_home) = parent_account(ctx, acc, parent);
    let looks = look_at_folders(ctx, source, acc, &listing.folders, &mut parent);
    let listed = |f: &Folder| !looks.get(&f.dir[..]).is_some_and(|(_, kept)| *kept);
    if source.keys_across_folders() && listing.folders.iter().any(listed) {
        parent.load_keys(repo, &ctx.failures, &acc.name);
    }
    let subscriptions = listing.subscriptions.as_deref();
    let folder = |session: &mut S::Session, f: &Folder| -> Option<FolderNode> {
        let subs = subscriptions.filter(|_| f.dir.is_empty());
        let look = looks.get(&f.dir[..]).cloned();
        match backup_folder(ctx, source, session, (acc, f, &ctx.n), &parent, subs, look) {
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
            // A folder a thread at a time: each holds its folder's listing.
            let nodes = crate::parallel::map_in_pool(listing.folders.len(), at_once(), |i| {
                let f = &listing.folders[i];
                match source.open(acc) {
                    Ok(mut s) => {
                        let n = folder(&mut s, f);
                        source.close(s);
                        n
                    }
                    Err(e) => {
                        ctx.failures.fail(source.folder_item(acc, f), e);
                        None
                    }
                }
            });
            nodes.into_iter().flatten().collect()
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
    let home = match source.home(acc, &ctx.failures) {
        Some(Home::Dir { dir, view }) => match home::source(&dir, view.as_ref()) {
            Ok(home) => backup_home(ctx, &home, &parent_home),
            Err(e) => {
                ctx.failures
                    .fail(format!("account {} (its home)", acc.name), e);
                Vec::new()
            }
        },
        Some(Home::Files(files)) => backup_home(ctx, &home::Served::new(files), &parent_home),
        None => Vec::new(),
    };
    let t = AccountTree { folders, home };
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

/// The parent snapshot's tree of an account, indexed by folder directory: its folders,
/// and its home's directories. Empty when there is none or it cannot be read.
fn parent_account(
    ctx: &Ctx,
    acc: &Account,
    parent: Option<&AccountRef>,
) -> (ParentAccount, ParentAccount) {
    let Some(r) = parent else {
        return Default::default();
    };
    match ctx.saver.repo().read_tree::<AccountTree>(&r.tree) {
        Ok(t) => (ParentAccount::of(t.folders), ParentAccount::of(t.home)),
        Err(e) => {
            // A damaged parent only costs speed: read everything again.
            ctx.failures
                .fail(format!("account {} (parent snapshot)", acc.name), &e);
            Default::default()
        }
    }
}

/// Backs up the store's own files ([`Source::store`]) as the home of no account, its
/// parent's tree `parent` (unchanged files are not read again): the tree's id, `None`
/// when there are none. Only directories holding files are kept (not every domain's).
fn backup_store<S: Source>(ctx: &Ctx, source: &S, parent: Option<&Id>) -> Result<Option<Id>> {
    let Some(Home::Dir { dir, view }) = source.store() else {
        return Ok(None);
    };
    let parent = match parent.map(|id| ctx.saver.repo().read_tree::<AccountTree>(id)) {
        Some(Ok(t)) => ParentAccount::of(t.home),
        Some(Err(e)) => {
            // A damaged parent only costs speed: read everything again.
            ctx.failures.fail("the store's files (parent snapshot)", &e);
            ParentAccount::default()
        }
        None => ParentAccount::default(),
    };
    let mut home = match home::store_source(&dir, view.as_ref()) {
        Ok(store) => backup_home(ctx, &store, &parent),
        Err(e) => {
            ctx.failures
                .fail(format!("{} (the store's own files)", dir.display()), e);
            return Ok(None);
        }
    };
    home.retain(|n| !n.files.is_empty());
    if home.is_empty() {
        return Ok(None);
    }
    let t = AccountTree {
        folders: Vec::new(),
        home,
    };
    Ok(Some(ctx.saver.save(BlobKind::Tree, &tree::encode(&t))?))
}

/// Backs up an account's home (see [`Source::home`]) with the `file:` source, or the
/// source of a home a server gave ([`home::Served`]): its directories, in order, as the
/// account tree keeps them; the parent's home files whose size, mtime and inode are
/// unchanged are not read again. Problems are the run's failures, named by path; the
/// account goes on.
fn backup_home<S: Source<Session = ()>>(
    ctx: &Ctx,
    home: &S,
    parent: &ParentAccount,
) -> Vec<FolderNode> {
    let acc = match home.accounts() {
        Ok(mut a) if a.len() == 1 => a.remove(0),
        Ok(_) => return Vec::new(),
        Err(e) => {
            ctx.failures.fail(home.label(), e);
            return Vec::new();
        }
    };
    let listing = match home.folders(&acc, &mut (), &ctx.failures) {
        Ok(l) => l,
        Err(e) => {
            ctx.failures.fail(acc.path.display().to_string(), e);
            return Vec::new();
        }
    };
    let mut nodes: Vec<FolderNode> = (listing.folders.iter())
        .filter_map(|f| {
            match backup_folder(ctx, home, &mut (), (&acc, f, &ctx.home), parent, None, None) {
                Ok(n) => Some(n),
                Err(e) => {
                    ctx.failures.fail(home.folder_item(&acc, f), e);
                    None
                }
            }
        })
        .collect();
    // A home of nothing but the Maildir is none.
    if nodes.iter().all(|n| n.files.is_empty()) {
        return Vec::new();
    }
    nodes.sort_by(|a, b| a.dir.cmp(&b.dir));
    nodes
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

/// The parent's folder of `folder`, and its index in `parent.folders`.
fn parent_folder<'a>(
    parent: &'a ParentAccount,
    folder: &Folder,
) -> Option<(usize, &'a FolderNode)> {
    match parent.by_dir.get(&folder.dir) {
        Some(&i) => parent.folders.get(i).map(|f| (i, f)),
        // Found by name when its directory is spelled otherwise now.
        None => (parent.folders.iter().enumerate()).find(|(_, f)| f.name == folder.name),
    }
}

/// What the pipeline found of a folder before its backup: its scan (the stamps of its
/// directories), and whether its messages are the parent's, kept unlisted.
type Look = (FolderScan, bool);

/// Reads the stamps of each folder's directories, before anything of it is listed
/// ([`Source::folder_stamps`]), and decides which folders' messages are kept from
/// the parent without a listing ([`crate::source::unchanged::proven_unchanged`]; not with
/// `--rescan`, nor when a tree blob of the parent's folder is not in the index): those
/// are marked in `parent.kept`, so that their entries are not read. By folder directory;
/// folders of a source without stamps are not there.
fn look_at_folders<'f, S: Source>(
    ctx: &Ctx,
    source: &S,
    acc: &Account,
    folders: &'f [Folder],
    parent: &mut ParentAccount,
) -> HashMap<&'f [u8], Look> {
    use crate::source::unchanged;
    let index = ctx.saver.repo().index();
    let parent_ref: &ParentAccount = parent;
    let looks: Vec<(&[u8], Option<usize>, Look)> = (folders.par_iter())
        .filter_map(|f| {
            let dirs = source.folder_stamps(acc, f)?;
            let p = parent_folder(parent_ref, f);
            let proven = |ps: &FolderScan| {
                (ctx.parent_started).is_some_and(|t| unchanged::proven_unchanged(ps, t, &dirs))
            };
            let kept = !ctx.rescan
                && p.and_then(|(_, p)| p.scan.as_ref()).is_some_and(proven)
                && p.is_some_and(|(_, p)| {
                    // The chunk tree by its root: its nodes are written before it.
                    (p.chunks.iter())
                        .all(|c| index.contains(&c.entries) && index.contains(&c.names))
                        && p.chunk_tree.is_none_or(|root| index.contains(&root))
                });
            let scan = FolderScan {
                dirs,
                ..FolderScan::default()
            };
            Some((&f.dir[..], p.map(|(i, _)| i).filter(|_| kept), (scan, kept)))
        })
        .collect();
    parent.kept = vec![false; parent.folders.len()];
    for i in looks.iter().filter_map(|l| l.1) {
        parent.kept[i] = true;
    }
    looks.into_iter().map(|(d, _, l)| (d, l)).collect()
}

fn backup_folder<S: Source>(
    ctx: &Ctx,
    source: &S,
    session: &mut S::Session,
    (acc, folder, n): (&Account, &Folder, &Counters),
    parent: &ParentAccount,
    subscriptions: Option<&[String]>,
    look: Option<Look>,
) -> Result<FolderNode> {
    let parent_folder = parent_folder(parent, folder);
    let (scan, kept) = match look {
        Some((scan, kept)) => (Some(scan), kept),
        None => (None, false),
    };
    let mut out = FolderWriter {
        ctx,
        n,
        account: &acc.name,
        folder,
        parent_account: parent,
        parent: parent_folder.map(|(_, f)| f),
        parent_index: parent_folder.map(|(i, _)| i),
        entries: Entries::Held(Vec::new()),
        owners: OwnerIds::default(),
        files: Vec::new(),
        dirs: Vec::new(),
        mtime: None,
        keywords: Mutex::new(KeywordTable::new()),
        scan,
        kept: false,
        failed: Default::default(),
    };
    if kept {
        out.keep_parent_messages();
    }
    source.backup_folder(session, acc, folder, &mut out)?;
    out.finish(subscriptions)
}
