//! `mailvault prune`: removes the packs and blobs no snapshot uses.
//!
//! Under the repository's exclusive lock (`crate::repo::lock`), so that no backup, restore or
//! check runs meanwhile: every snapshot's trees are walked for the blob ids they use (ids
//! only); each pack listed by the index is then kept, deleted (no used blob) or repacked
//! (more than `max_unused` percent of its blob bytes unused: its used blobs are read,
//! verified and written, still sealed, into new packs of the same format); packs no index
//! lists (left by killed backups) are deleted. The order makes a kill at any point safe:
//!
//! 1. the new packs are written and made durable;
//! 2. new index files listing every kept pack (and the new ones) are written, durable;
//! 3. the index files they replace are deleted (durable);
//! 4. only then are the packs deleted (durable).
//!
//! Until step 3 ends the old index files still list every old pack, which is still there;
//! after it the new ones list only packs that are there. A kill leaves packs no index
//! lists (new ones before step 2, old ones after step 3), which `check` reports as a
//! warning and the next prune deletes.

use crate::error::{Error, Result};
use crate::repo::format::BlobKind;
use crate::repo::format::Version;
use crate::repo::id::Id;
use crate::repo::index::{index_chunks, BlobSet};
use crate::repo::lock::{Found, LockKind, RepoLock};
use crate::repo::pack::{self, IndexedPack, PackBuilder, PackEntry};
use crate::repo::snapshot::Snapshot;
use crate::repo::tree::{AccountTree, ChunkRef, MessageChunk, RootTree};
use crate::repo::{file_id, lock, ChunkTreeVisitor, Repository, Snapshots, MIGRATE_STATE};
use crate::report::Progress;
use crate::search::merge::SplitsPruned;
use crate::store::{ObjectInfo, Store};
use serde::Serialize;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Instant;

/// What to prune.
#[derive(Clone, Debug)]
pub struct PruneOptions {
    /// A pack whose unused blob bytes exceed this share (percent) of its blob bytes is
    /// repacked.
    pub max_unused: f64,
    /// Plan only: change nothing.
    pub dry_run: bool,
    /// With `dry_run`: plan as if these snapshots were gone (`forget --prune --dry-run`
    /// shows what the prune after the forget would free, as restic does).
    pub as_if_gone: Vec<crate::repo::id::Id>,
    /// Apply the forget requests of append-only hosts
    /// ([`crate::ops::forget::apply_requests`]); without it they are only reported.
    pub apply_requests: bool,
}

impl Default for PruneOptions {
    fn default() -> Self {
        PruneOptions {
            max_unused: 5.0,
            dry_run: false,
            as_if_gone: Vec::new(),
            apply_requests: false,
        }
    }
}

/// What a prune did (or, with `dry_run`, would do).
#[derive(Clone, Debug, Default, Serialize)]
pub struct PruneReport {
    pub dry_run: bool,
    /// Snapshots whose blobs were kept.
    pub snapshots: u64,
    /// Packs listed by the index before.
    pub packs_before: u64,
    /// Packs deleted because none of their blobs is used.
    pub packs_deleted: u64,
    /// Packs whose used blobs were written again, then deleted.
    pub packs_repacked: u64,
    /// Packs kept as they are.
    pub packs_kept: u64,
    /// Packs no index listed (left by killed backups or prunes), deleted.
    pub packs_unindexed: u64,
    /// New packs written by repacking.
    pub packs_written: u64,
    /// Blobs the snapshots use.
    pub blobs_used: u64,
    /// Blobs (copies) removed.
    pub blobs_removed: u64,
    /// Blobs written again into new packs.
    pub blobs_repacked: u64,
    /// Index files written, and index files deleted.
    pub index_files_written: u64,
    pub index_files_deleted: u64,
    /// Bytes of packs and index files written.
    pub bytes_written: u64,
    /// Bytes of packs and index files deleted.
    pub bytes_deleted: u64,
    /// `size_before - size_after`.
    pub bytes_freed: u64,
    /// The repository's size (packs, index files, snapshots, dictionaries, search index
    /// splits) before and
    /// after (with `dry_run`: as it would be, from the plan).
    pub size_before: u64,
    pub size_after: u64,
    pub elapsed_secs: f64,
    /// The search index: splits merged to drop what no snapshot holds, superseded splits
    /// deleted.
    pub search: SplitsPruned,
    /// The forget requests of append-only hosts: applied, or waiting and why.
    pub forget_requests: crate::ops::forget::RequestsApplied,
    /// Records of locks that are over (left by append-only hosts), deleted.
    pub lock_records_removed: u64,
    /// On a bucket with Object Lock: retentions extended, versions of deleted objects
    /// removed for good or kept until their retention ends (`crate::ops::object_lock`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub object_lock: Option<crate::ops::object_lock::LockReport>,
}

/// The search index's part of a prune ([`crate::search::merge::prune_splits`]), its
/// splits copied to a temporary directory.
fn prune_search(repo: &Repository, dry_run: bool) -> Result<SplitsPruned> {
    let tmp = tempfile::Builder::new()
        .prefix("mailvault-prune-search-")
        .tempdir()
        .map_err(|e| Error::io(std::env::temp_dir(), e))?;
    crate::search::merge::prune_splits(repo, tmp.path(), dry_run)
}

/// An error for a prune that must not go on, naming what stops it.
/// Refuses when the index's local table failed to be read since the repository was
/// opened: what it holds looked absent, so a plan made meanwhile could remove what
/// snapshots use. The table is removed by then; the next prune reads the index files.
fn refuse_if_index_damaged(repo: &Repository) -> Result<()> {
    match repo.index().damage() {
        Some(why) => Err(refused(
            "the index's local table",
            format!("could not be read ({why}): run prune again, which reads the index files"),
        )),
        None => Ok(()),
    }
}

fn refused(what: impl Into<String>, reason: impl Into<String>) -> Error {
    Error::PruneRefused {
        what: what.into(),
        reason: reason.into(),
    }
}

/// What happens to one pack.
enum Action {
    Keep,
    Delete,
    /// Its used blobs (entries) are written again.
    Repack(Vec<PackEntry>),
}

struct PackPlan {
    id: Id,
    version: Version,
    size: u64,
    action: Action,
}

/// Test hook: with `MAILVAULT_PRUNE_KILL_AFTER=k` in the environment, the process sends
/// itself SIGKILL right after the k-th change prune makes to the repository (a put or a
/// delete): for the crash tests. Never set it otherwise.
pub const KILL_AFTER_ENV: &str = "MAILVAULT_PRUNE_KILL_AFTER";

/// Counts prune's changes to the repository, for [`KILL_AFTER_ENV`].
struct Mutations {
    done: AtomicU64,
    kill_after: Option<u64>,
}

impl Mutations {
    fn new() -> Self {
        Mutations {
            done: AtomicU64::new(0),
            kill_after: std::env::var(KILL_AFTER_ENV)
                .ok()
                .and_then(|v| v.parse().ok()),
        }
    }

    fn one(&self) {
        let done = self.done.fetch_add(1, Ordering::SeqCst) + 1;
        if self.kill_after == Some(done) {
            let _ = rustix::process::kill_process(
                rustix::process::getpid(),
                rustix::process::Signal::KILL,
            );
        }
    }
}

/// Removes what no snapshot uses (see the module docs). Refuses, changing nothing, when a
/// snapshot, an index file or a tree cannot be read (what they use cannot be known), while
/// a migration is unfinished, or when a used blob's pack is missing.
pub fn prune(
    repo: &mut Repository,
    opts: &PruneOptions,
    progress: &dyn Progress,
) -> Result<PruneReport> {
    let started = Instant::now();
    if !(0.0..=100.0).contains(&opts.max_unused) {
        return Err(Error::InvalidInput(format!(
            "--max-unused {}: give a percentage from 0 to 100",
            opts.max_unused
        )));
    }
    repo.refuse_if_migrating()?;
    if !opts.dry_run {
        repo.refuse_if_append_only("prune")?;
    }
    let kind = match opts.dry_run {
        true => LockKind::Shared,
        false => LockKind::Exclusive,
    };
    let lock = repo.lock(kind, "prune")?;
    // What refuses a prune refuses it before anything is removed, requests included.
    let mut snaps = snapshots_under_lock(repo, opts)?;
    // Then the requests: the snapshots they remove free their blobs in this prune.
    let forget_requests = match repo.append_only() {
        true => Default::default(),
        false => crate::ops::forget::apply_requests(repo, opts.apply_requests && !opts.dry_run)?,
    };
    if !forget_requests.applied.is_empty() {
        snaps = snapshots_under_lock(repo, opts)?;
    }
    let lock_records_removed = match opts.dry_run {
        true => 0,
        false => crate::repo::lock::remove_over(&repo.lock_store(), repo.lock_options().stale)?,
    };
    let mut rep = PruneReport {
        dry_run: opts.dry_run,
        snapshots: snaps.len() as u64,
        forget_requests,
        lock_records_removed,
        ..Default::default()
    };
    let used = used_blobs(repo, &snaps, progress);
    // A blob the index's table could not give fails the walk as a lost one would: said
    // as what it is.
    refuse_if_index_damaged(repo)?;
    let used = used?;
    rep.blobs_used = used.len() as u64;
    // `data/` listed once for the size, the plan and the packs no index lists (on object
    // storage a listing is a request per 1,000 packs).
    let packs = repo.store().list("data/")?;
    rep.size_before = repository_size(repo, Some(&packs))?;
    rep.search = prune_search(repo, opts.dry_run)?;

    let plans = plan(repo, &packs, &used, opts.max_unused, &mut rep)?;
    // Blobs the index's table could not give looked unused: nothing is removed.
    refuse_if_index_damaged(repo)?;
    let unindexed = unindexed_packs(repo, packs);
    rep.packs_unindexed = unindexed.len() as u64;
    let nothing_to_do = unindexed.is_empty()
        && plans
            .iter()
            .all(|p| matches!(p.action, Action::Keep) && p.size > 0);
    if nothing_to_do {
        rep.size_after = match rep.search.merged + rep.search.deleted {
            0 => rep.size_before,
            _ if opts.dry_run => rep.size_before,
            _ => repository_size(repo, None)?,
        };
        rep.bytes_freed = rep.size_before.saturating_sub(rep.size_after);
        rep.object_lock = object_lock_steps(repo, &snaps, opts.dry_run)?;
        rep.elapsed_secs = started.elapsed().as_secs_f64();
        return Ok(rep);
    }
    let removed_bytes: u64 = (plans.iter())
        .filter(|p| !matches!(p.action, Action::Keep))
        .map(|p| p.size)
        .sum::<u64>()
        + unindexed.iter().map(|u| u.1).sum::<u64>();
    if opts.dry_run {
        estimate(&mut rep, &plans, removed_bytes);
        rep.elapsed_secs = started.elapsed().as_secs_f64();
        return Ok(rep);
    }
    apply(repo, &lock, &plans, unindexed, &mut rep, progress)?;
    drop(lock);
    repo.reload_index()?;
    rep.object_lock = object_lock_steps(repo, &snaps, false)?;
    rep.size_after = repository_size(repo, None)?;
    rep.bytes_freed = rep.size_before.saturating_sub(rep.size_after);
    rep.elapsed_secs = started.elapsed().as_secs_f64();
    Ok(rep)
}

/// On a bucket with Object Lock, prune's last steps: the retention of what the
/// repository keeps extended, the versions of what it deleted removed once their
/// retention has ended (`crate::ops::object_lock`).
fn object_lock_steps(
    repo: &Repository,
    snaps: &[Snapshot],
    dry_run: bool,
) -> Result<Option<crate::ops::object_lock::LockReport>> {
    use crate::ops::object_lock as ol;
    let Some((lock, policy)) = repo.object_lock()? else {
        return Ok(None);
    };
    if dry_run {
        return ol::audit(repo.store(), lock, policy).map(Some);
    }
    let mut rep = ol::LockReport::new(policy);
    let holds = held_objects(repo, snaps)?;
    ol::extend(repo.store(), lock, policy, &holds, &mut rep)?;
    ol::sweep(lock, &mut rep)?;
    Ok(Some(rep))
}

/// The objects the snapshots under legal hold need (`tag hold`): their files, the packs
/// holding their blobs (each blob's copy the index gives), the keys and the config. On a
/// bucket with Object Lock they get S3's legal hold.
fn held_objects(repo: &Repository, snaps: &[Snapshot]) -> Result<HashSet<String>> {
    let held: Vec<Snapshot> = (snaps.iter())
        .filter(|s| s.tags.iter().any(|t| t == crate::ops::forget::HOLD_TAG))
        .cloned()
        .collect();
    let mut out = HashSet::new();
    if held.is_empty() {
        return Ok(out);
    }
    let used = used_blobs(repo, &held, &crate::report::NoProgress)?;
    let index = repo.index();
    for (id, loc) in index.iter() {
        if used.contains(&id) {
            out.insert(pack::pack_path(&index.pack_id(loc.pack)));
        }
    }
    refuse_if_index_damaged(repo)?;
    out.extend(held.iter().map(|s| Snapshot::path(&s.id)));
    out.extend(repo.store().list("keys/")?.into_iter().map(|o| o.path));
    out.insert("config".to_string());
    Ok(out)
}

/// The snapshots prune keeps what they use of, read under the lock once the index is
/// reloaded; an error, changing nothing, when what they use cannot be known.
fn snapshots_under_lock(repo: &mut Repository, opts: &PruneOptions) -> Result<Snapshots> {
    // What is there now that no one writes: the index as it is under the lock.
    repo.reload_index()?;
    if !matches!(repo.store().stat(MIGRATE_STATE), Err(Error::NotFound(_))) {
        return Err(refused(
            MIGRATE_STATE,
            "a migration is unfinished: run `mailvault migrate` first",
        ));
    }
    if let Some((path, e)) = repo.index_errors().first() {
        return Err(refused(
            path.as_str(),
            format!("cannot be read ({e}): its packs would look unused; run `mailvault repair index` first"),
        ));
    }
    let mut snaps = repo.snapshots()?;
    if opts.dry_run {
        snaps.list.retain(|s| !opts.as_if_gone.contains(&s.id));
    }
    if let Some(d) = snaps.damaged.first() {
        return Err(refused(
            d.path.as_str(),
            format!("cannot be read ({}): the blobs it uses cannot be known; run `mailvault repair snapshots` first", d.error),
        ));
    }
    Ok(snaps)
}

/// The packs in `data/` (`packs`, as listed) no index lists, with their sizes.
fn unindexed_packs(repo: &Repository, packs: Vec<ObjectInfo>) -> Vec<(String, u64)> {
    (packs.into_iter())
        .filter_map(|o| {
            let id = file_id(&o.path).ok()?;
            (!repo.index().has_pack(&id)).then_some((o.path, o.size))
        })
        .collect()
}

/// A dry run's figures: the blobs repacked are written again, with new headers.
fn estimate(rep: &mut PruneReport, plans: &[PackPlan], removed_bytes: u64) {
    let rewritten: u64 = (plans.iter())
        .map(|p| match &p.action {
            Action::Repack(keep) => keep.iter().map(|e| e.stored_len as u64 + 42).sum(),
            _ => 0,
        })
        .sum();
    rep.bytes_deleted = removed_bytes;
    rep.bytes_written = rewritten;
    rep.size_after = (rep.size_before + rewritten).saturating_sub(removed_bytes);
    rep.bytes_freed = rep.size_before.saturating_sub(rep.size_after);
}

/// Carries the plans out under the exclusive `lock`: new packs, the new index, then the
/// index files and packs it replaces, each step durable before the next.
fn apply(
    repo: &Repository,
    lock: &RepoLock,
    plans: &[PackPlan],
    unindexed: Vec<(String, u64)>,
    rep: &mut PruneReport,
    progress: &dyn Progress,
) -> Result<()> {
    let m = Mutations::new();
    // 1. New packs, durable.
    let written = repack(repo, plans, &m, rep, progress)?;
    repo.store().flush()?;
    // 2. The new index: every kept pack as the index listed it (read from the index files
    // again, a file's worth at a time: not every entry of the repository held), and the
    // new packs.
    let kept: HashSet<Id> = (plans.iter())
        .filter(|p| matches!(p.action, Action::Keep))
        .map(|p| p.id)
        .collect();
    let mut new_files = HashSet::new();
    let mut write = |packs: &[IndexedPack]| -> Result<()> {
        let (id, size) = repo.write_index(packs)?;
        m.one();
        new_files.insert(id);
        rep.index_files_written += 1;
        rep.bytes_written += size;
        Ok(())
    };
    let mut listed: Vec<IndexedPack> = Vec::new();
    each_listed_pack(repo, |packs| {
        listed.extend(packs.into_iter().filter(|p| kept.contains(&p.id)));
        // Every full index file's worth written; the rest waits for more.
        let chunks = index_chunks(&listed);
        let full = chunks.len().saturating_sub(1);
        let done: usize = chunks[..full].iter().map(|c| c.len()).sum();
        for chunk in &chunks[..full] {
            write(chunk)?;
        }
        listed.drain(..done);
        Ok(())
    })?;
    listed.extend(written);
    for chunk in index_chunks(&listed) {
        write(chunk)?;
    }
    repo.store().flush()?;
    // 3. The index files the new ones replace. A backup of an older mailvault does not
    // look for locks: one that began meanwhile stops the prune before it deletes anything
    // (best effort: every host should run a mailvault that locks before prune is used).
    lock.verify()?;
    if let Some(w) = (repo.lock_store().list_writers()?.into_iter()).find(|w| {
        !matches!(w.found, Found::Unreadable(_)) && !w.is_stale(repo.lock_options().stale)
    }) {
        return Err(refused(
            w.path,
            "a backup of an older mailvault began during the prune: nothing was deleted; run prune again once it has ended",
        ));
    }
    let old: Vec<(String, u64)> = (repo.index_files().iter())
        .filter(|id| !new_files.contains(*id))
        .map(|id| {
            let path = format!("index/{id}");
            let size = repo.store().stat(&path).unwrap_or(0);
            (path, size)
        })
        .collect();
    rep.index_files_deleted = old.len() as u64;
    rep.bytes_deleted += delete_all(repo, old, &m)?;
    repo.store().flush()?;
    // 4. The packs: none is listed by an index any more.
    lock.verify()?;
    let doomed = (plans.iter())
        .filter(|p| !matches!(p.action, Action::Keep))
        .map(|p| (pack::pack_path(&p.id), p.size))
        .chain(unindexed)
        .collect();
    rep.bytes_deleted += delete_all(repo, doomed, &m)?;
    repo.store().flush()?;
    Ok(())
}

/// Every blob id the snapshots use: their trees (root, account and chunk trees) and the
/// content the trees name. Each tree is read once however many snapshots share it (the
/// account trees in parallel); a tree that cannot be read stops the prune, naming the
/// snapshot.
fn used_blobs<'r>(
    repo: &'r Repository,
    snaps: &[Snapshot],
    progress: &dyn Progress,
) -> Result<BlobSet<'r>> {
    use rayon::prelude::*;
    let unknown = |snapshot: &Id, tree: &Id, e: Error| {
        refused(
            format!("snapshot {}", snapshot.short()),
            format!("its tree {} cannot be read ({e}): the blobs it uses cannot be known; run `mailvault check`", tree.short()),
        )
    };
    repo.index().will_need();
    let used = Mutex::new(BlobSet::new(repo.index()));
    // The account trees not seen yet, with the snapshot that names them.
    let mut accounts: Vec<(Id, Id)> = Vec::new();
    progress.add_total(snaps.len() as u64, 0);
    for s in snaps {
        if lock(&used).insert(s.root) {
            let root: RootTree = repo
                .read_tree(&s.root)
                .map_err(|e| unknown(&s.id, &s.root, e))?;
            let mut u = lock(&used);
            // The accounts' trees, and the store's files' (a tree of the same form).
            for tree in root.accounts.iter().map(|a| a.tree).chain(root.store) {
                if u.insert(tree) {
                    accounts.push((s.id, tree));
                }
            }
        }
        progress.advance(1, 0);
    }
    accounts.par_iter().try_for_each(|(snapshot, tree)| {
        let t: AccountTree = repo
            .read_tree(tree)
            .map_err(|e| unknown(snapshot, tree, e))?;
        for f in t.folders.into_iter().chain(t.home) {
            // A large file's content lists, and the data blobs they name.
            let mut listed = Vec::new();
            for file in &f.files {
                for l in &file.lists {
                    let list: crate::repo::tree::ContentList =
                        repo.read_tree(l).map_err(|e| unknown(snapshot, l, e))?;
                    listed.extend(list.ids);
                }
            }
            // The chunk tree's nodes, each read once for all snapshots that share it.
            let mut walk = UsedNodes {
                used: &used,
                chunks: f.chunks,
            };
            if let Some(root) = &f.chunk_tree {
                repo.walk_chunk_tree(root, &mut walk)
                    .map_err(|e| unknown(snapshot, root, e))?;
            }
            let mut chunks = Vec::new();
            {
                let mut u = lock(&used);
                for id in listed {
                    u.insert(id);
                }
                for file in f.files {
                    for id in file.content.into_iter().chain(file.lists) {
                        u.insert(id);
                    }
                }
                for c in walk.chunks {
                    u.insert(c.names);
                    if u.insert(c.entries) {
                        chunks.push(c.entries);
                    }
                }
            }
            for c in chunks {
                let m: MessageChunk = repo.read_tree(&c).map_err(|e| unknown(snapshot, &c, e))?;
                let mut u = lock(&used);
                for id in m.entries.into_iter().flat_map(|e| e.content) {
                    u.insert(id);
                }
            }
        }
        Ok::<(), Error>(())
    })?;
    Ok(used.into_inner().unwrap_or_else(|p| p.into_inner()))
}

/// A walk of a folder's chunk tree for [`used_blobs`]: its nodes marked used, the chunks
/// of those not seen before collected.
struct UsedNodes<'a, 'i> {
    used: &'a Mutex<BlobSet<'i>>,
    chunks: Vec<ChunkRef>,
}

impl ChunkTreeVisitor for UsedNodes<'_, '_> {
    fn enter(&mut self, id: &Id) -> bool {
        lock(self.used).insert(*id)
    }
    fn chunk(&mut self, c: &ChunkRef) {
        self.chunks.push(*c);
    }
}

/// The size of what the repository holds: packs, index files, snapshots, dictionaries,
/// search splits; `packs`: `data/` as just listed.
fn repository_size(repo: &Repository, packs: Option<&[ObjectInfo]>) -> Result<u64> {
    let mut n = match packs {
        Some(p) => p.iter().map(|o| o.size).sum::<u64>(),
        None => repo
            .store()
            .list("data/")?
            .iter()
            .map(|o| o.size)
            .sum::<u64>(),
    };
    for dir in ["index/", "snapshots/", "dicts/", "search/"] {
        n += repo.store().list(dir)?.iter().map(|o| o.size).sum::<u64>();
    }
    Ok(n)
}

/// Decides each indexed pack's fate. A used blob counts in the one pack the in-memory
/// index gives for it; its other copies are unused.
fn plan(
    repo: &Repository,
    packs: &[ObjectInfo],
    used: &BlobSet<'_>,
    max_unused: f64,
    rep: &mut PruneReport,
) -> Result<Vec<PackPlan>> {
    let sizes: HashMap<Id, u64> = (packs.iter())
        .filter_map(|o| Some((file_id(&o.path).ok()?, o.size)))
        .collect();
    let index = repo.index();
    let mut plans = Vec::new();
    each_listed_pack(repo, |packs| {
        for p in packs {
            let canonical = |e: &PackEntry| {
                used.contains(&e.id)
                    && index
                        .get(&e.id)
                        .is_some_and(|l| index.pack_id(l.pack) == p.id && l.offset == e.offset)
            };
            let keep: Vec<PackEntry> = p.entries.iter().filter(|e| canonical(e)).copied().collect();
            let total: u64 = p.entries.iter().map(|e| e.stored_len as u64).sum();
            let used_bytes: u64 = keep.iter().map(|e| e.stored_len as u64).sum();
            let size = sizes.get(&p.id).copied();
            let action = match size {
                None if !keep.is_empty() => {
                    return Err(refused(
                        pack::pack_path(&p.id),
                        format!("is missing, and holds {} blobs snapshots use: run `mailvault check`, then `mailvault repair index` and `mailvault repair snapshots`", keep.len()),
                    ))
                }
                // Missing and unused: only its index entries go.
                None => Action::Delete,
                Some(_) if keep.is_empty() => Action::Delete,
                Some(_) if (total - used_bytes) as f64 > total as f64 * max_unused / 100.0 => {
                    Action::Repack(keep.clone())
                }
                Some(_) => Action::Keep,
            };
            match &action {
                Action::Keep => rep.packs_kept += 1,
                Action::Delete => rep.packs_deleted += 1,
                Action::Repack(_) => rep.packs_repacked += 1,
            }
            if !matches!(action, Action::Keep) {
                rep.blobs_removed += (p.entries.len() - keep.len()) as u64;
            }
            plans.push(PackPlan {
                id: p.id,
                version: p.version,
                size: size.unwrap_or(0),
                action,
            });
        }
        Ok(())
    })?;
    rep.packs_before = plans.len() as u64;
    Ok(plans)
}

/// Every pack the index files list, once (its first listing: the one the in-memory index
/// loaded), handed over an index file's packs at a time, in the files' order: the plan and
/// the new index read them so, not all held at once.
fn each_listed_pack(
    repo: &Repository,
    mut f: impl FnMut(Vec<IndexedPack>) -> Result<()>,
) -> Result<()> {
    let mut seen = HashSet::new();
    for file in repo.index_files() {
        let (_, packs) = repo.read_index_file(&format!("index/{file}"))?;
        f(packs.into_iter().filter(|p| seen.insert(p.id)).collect())?;
    }
    Ok(())
}

/// What [`repack`] wrote, shared by its threads.
struct Repacked<'a> {
    repo: &'a Repository,
    m: &'a Mutations,
    /// Packs being filled, by kind and format.
    builders: Mutex<HashMap<(BlobKind, Version), PackBuilder>>,
    written: Mutex<Vec<IndexedPack>>,
    bytes: AtomicU64,
    blobs: AtomicU64,
}

impl Repacked<'_> {
    fn write(&self, b: PackBuilder, kind: BlobKind, version: Version) -> Result<()> {
        let p = b.finish(self.repo.key(), version)?;
        match (self.repo.store()).put_pack(&pack::pack_path(&p.id), &p.bytes()?, kind.into()) {
            Ok(()) | Err(Error::AlreadyExists(_)) => {}
            Err(e) => return Err(e),
        }
        self.m.one();
        self.bytes.fetch_add(p.size(), Ordering::Relaxed);
        lock(&self.written).push(IndexedPack {
            id: p.id,
            version: p.version,
            entries: p.entries,
        });
        Ok(())
    }

    /// Reads, verifies and adds the used blobs `keep` of one pack.
    fn pack(&self, p: &PackPlan, keep: &[PackEntry], progress: &dyn Progress) -> Result<()> {
        let path = pack::pack_path(&p.id);
        let target = self.repo.config().pack_size as usize;
        let mut keep = keep.to_vec();
        keep.sort_by_key(|e| e.offset);
        progress.add_total(keep.len() as u64, 0);
        // Runs of blobs that follow each other, read at once.
        let mut i = 0;
        while i < keep.len() {
            let start = keep[i].offset;
            let mut end = i + 1;
            while end < keep.len()
                && keep[end].offset == keep[end - 1].offset + keep[end - 1].stored_len
            {
                end += 1;
            }
            let run = &keep[i..end];
            let last = run[run.len() - 1];
            let len = (last.offset + last.stored_len - start) as u64;
            let bytes =
                (self.repo.store()).get_pack_range(&path, start as u64, len, run[0].kind.into())?;
            for e in run {
                let at = (e.offset - start) as usize;
                let sealed = bytes
                    .get(at..at + e.stored_len as usize)
                    .ok_or_else(|| Error::corrupt(&path, "shorter than its index says"))?;
                self.repo
                    .decode_entry_in(e, p.version, &bytes, start, &path)
                    .map_err(|err| {
                        refused(
                            format!("blob {} in {path}", e.id.short()),
                            format!("does not verify ({err}), and snapshots use it: nothing was deleted; run `mailvault check --read-data`"),
                        )
                    })?;
                let full = {
                    let mut builders = lock(&self.builders);
                    let b =
                        (builders.entry((e.kind, p.version))).or_insert_with(PackBuilder::spilling);
                    b.add(e.id, e.kind, e.codec, e.raw_len as usize, sealed);
                    (b.len() >= target).then(|| std::mem::replace(b, PackBuilder::spilling()))
                };
                self.blobs.fetch_add(1, Ordering::Relaxed);
                if let Some(b) = full {
                    self.write(b, e.kind, p.version)?;
                }
                progress.advance(1, e.stored_len as u64);
            }
            i = end;
        }
        Ok(())
    }
}

/// Writes the used blobs of the packs to repack into new packs (several packs at once):
/// each read (only the used blobs, contiguous ones in one read), verified (opened,
/// decompressed, hashed against its id) and copied sealed as it is into a pack of the same
/// format and kind, so that a format-1 pack of a migrated repository is repacked into
/// format-1 packs. Returns the new packs.
fn repack(
    repo: &Repository,
    plans: &[PackPlan],
    m: &Mutations,
    rep: &mut PruneReport,
    progress: &dyn Progress,
) -> Result<Vec<IndexedPack>> {
    use rayon::prelude::*;
    let r = Repacked {
        repo,
        m,
        builders: Mutex::new(HashMap::new()),
        written: Mutex::new(Vec::new()),
        bytes: AtomicU64::new(0),
        blobs: AtomicU64::new(0),
    };
    let work: Vec<(&PackPlan, &Vec<PackEntry>)> = (plans.iter())
        .filter_map(|p| match &p.action {
            Action::Repack(keep) => Some((p, keep)),
            _ => None,
        })
        .collect();
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(REPACKERS)
        .build()
        .map_err(|e| Error::InvalidInput(format!("cannot start {REPACKERS} threads: {e}")))?;
    pool.install(|| {
        work.par_iter()
            .try_for_each(|(p, keep)| r.pack(p, keep, progress))
    })?;
    let mut rest: Vec<_> = (r.builders.lock().map(|mut b| std::mem::take(&mut *b)))
        .unwrap_or_default()
        .into_iter()
        .filter(|(_, b)| !b.is_empty())
        .collect();
    rest.sort_by_key(|((kind, version), _)| (*kind as u8, version.number()));
    for ((kind, version), b) in rest {
        r.write(b, kind, version)?;
    }
    rep.bytes_written += r.bytes.load(Ordering::Relaxed);
    rep.blobs_repacked = r.blobs.load(Ordering::Relaxed);
    let written = r.written.into_inner().unwrap_or_else(|p| p.into_inner());
    rep.packs_written = written.len() as u64;
    Ok(written)
}

/// Packs repacked at once (reads, verification and writes overlap; on object storage
/// the store's connection limit applies).
const REPACKERS: usize = 4;

/// Deletes in parallel: this many at once (on object storage each is a request; the
/// store's connection limit applies).
const DELETERS: usize = 8;

/// Deletes the objects (path, size); returns the bytes deleted.
fn delete_all(repo: &Repository, objects: Vec<(String, u64)>, m: &Mutations) -> Result<u64> {
    use rayon::prelude::*;
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(DELETERS)
        .build()
        .map_err(|e| Error::InvalidInput(format!("cannot start {DELETERS} threads: {e}")))?;
    pool.install(|| {
        objects
            .par_iter()
            .map(|(path, size)| {
                repo.store().delete(path)?;
                m.one();
                Ok(*size)
            })
            .sum()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::repo::compress::Compression;
    use crate::repo::crypto::KdfParams;
    use crate::repo::lock::LockOptions;
    use crate::repo::writer::BlobSaver;
    use crate::repo::InitOptions;
    use crate::report::NoProgress;
    use crate::store::{Backend, ByteRange, Handle, Hint, Listing, MemoryStore, Store, WriteMode};
    use std::sync::Arc;

    fn init() -> Arc<MemoryStore> {
        let store = Arc::new(MemoryStore::new());
        let opts = InitOptions {
            kdf: KdfParams::FOR_TESTS,
            pack_size: 512,
            ..Default::default()
        };
        Repository::init(store.clone(), b"pw", &opts).unwrap();
        store
    }

    fn open(store: &Arc<MemoryStore>) -> Repository {
        Repository::open(store.clone(), b"pw").unwrap()
    }

    /// A data blob in an indexed pack that no snapshot uses.
    fn unused_blob(repo: &Repository) -> Id {
        let saver = BlobSaver::new(repo, Compression::Lz4);
        let id = saver.save(BlobKind::Data, &[9u8; 4000]).unwrap();
        saver.finish().unwrap();
        id
    }

    #[test]
    fn a_restore_holding_its_lock_blocks_prune_until_it_ends() {
        let store = init();
        let reader = open(&store);
        unused_blob(&reader);
        let held = reader.lock_for_reading("restore").unwrap();
        let mut pruner = open(&store);
        let e = prune(&mut pruner, &PruneOptions::default(), &NoProgress)
            .unwrap_err()
            .to_string();
        assert!(e.contains("locked by restore on host"), "{e}");
        assert_eq!(
            store.list("data/").unwrap().len(),
            1,
            "prune deleted a pack"
        );
        // A dry run only reads: it goes alongside.
        let dry = PruneOptions {
            dry_run: true,
            ..Default::default()
        };
        assert_eq!(
            prune(&mut pruner, &dry, &NoProgress).unwrap().packs_deleted,
            1
        );
        drop(held);
        let rep = prune(&mut pruner, &PruneOptions::default(), &NoProgress).unwrap();
        assert_eq!(rep.packs_deleted, 1);
        assert!(store.list("data/").unwrap().is_empty());
        assert!(store.list("locks/").unwrap().is_empty());
    }

    /// A backup or a restore whose repository was opened before a prune: the backup reads
    /// the index again once it holds its lock (so it never deduplicates against a blob
    /// the prune removed), a restore or check is refused.
    #[test]
    fn commands_opened_before_a_prune_do_not_use_its_removed_packs() {
        let store = init();
        let mut backup = open(&store);
        let blob = unused_blob(&backup);
        let mut reader = open(&store);
        reader.reload_index().unwrap();
        backup.reload_index().unwrap();
        assert!(backup.index().contains(&blob));
        let mut pruner = open(&store);
        prune(&mut pruner, &PruneOptions::default(), &NoProgress).unwrap();
        let (_, mark) = backup.begin_backup().unwrap();
        assert!(
            !backup.index().contains(&blob),
            "the index was not read again"
        );
        backup.end_backup(mark).unwrap();
        let e = reader.lock_for_reading("restore").unwrap_err();
        assert!(matches!(e, Error::IndexChanged { .. }), "{e}");
        assert!(store.list("locks/").unwrap().is_empty());
    }

    #[test]
    fn a_stale_lock_does_not_stop_prune_and_a_live_one_does() {
        let store = init();
        let mut repo = open(&store);
        unused_blob(&repo);
        repo.set_lock_options(LockOptions::default());
        // A killed backup's lock (its process gone): stale at once.
        let dead = crate::repo::lock::LockRecord {
            hostname: crate::hostname(),
            pid: 4_000_000_000,
            time: crate::now_unix(),
            created: crate::now_unix(),
            exclusive: false,
            operation: "backup".into(),
            lock: "1".into(),
            released: false,
            refresh_secs: 0,
        };
        let json = serde_json::to_vec(&dead).unwrap();
        store
            .put(
                "locks/dead",
                &repo.seal_object(crate::repo::format::Object::Writer("locks/dead"), &json),
            )
            .unwrap();
        // A backup on another host that refreshed its lock a minute ago.
        let live = crate::repo::lock::LockRecord {
            hostname: "elsewhere".into(),
            pid: 1,
            time: crate::now_unix() - 60,
            lock: "2".into(),
            ..dead.clone()
        };
        let json = serde_json::to_vec(&live).unwrap();
        store
            .put(
                "locks/live",
                &repo.seal_object(crate::repo::format::Object::Writer("locks/live"), &json),
            )
            .unwrap();
        let e = prune(&mut repo, &PruneOptions::default(), &NoProgress)
            .unwrap_err()
            .to_string();
        assert!(e.contains("by backup on host elsewhere (pid 1)"), "{e}");
        store.delete("locks/live").unwrap();
        assert_eq!(
            prune(&mut repo, &PruneOptions::default(), &NoProgress)
                .unwrap()
                .packs_deleted,
            1
        );
    }

    /// `--no-lock` lets a restore or check read beside an exclusive lock (read-only
    /// credentials); a backup takes its lock whatever the option says.
    #[test]
    fn no_lock_is_for_reading_only() {
        let store = init();
        let pruner = open(&store);
        let held = pruner.lock(LockKind::Exclusive, "prune").unwrap();
        let mut reader = open(&store);
        let e = reader.lock_for_reading("restore").unwrap_err();
        assert!(matches!(e, Error::Locked { .. }), "{e}");
        reader.set_lock_options(LockOptions {
            no_lock: true,
            ..Default::default()
        });
        let l = reader.lock_for_reading("restore").unwrap();
        assert!(l.path().is_none());
        assert_eq!(store.list("locks/").unwrap().len(), 1);
        let e = reader.begin_backup().unwrap_err();
        assert!(matches!(e, Error::Locked { .. }), "{e}");
        drop(held);
        let (_, mark) = reader.begin_backup().unwrap();
        reader.end_backup(mark).unwrap();
    }

    /// A store where a record appears in `writers/` (as an older mailvault's backup
    /// starting) once that directory has been listed once after `record` was set: after
    /// the prune took its lock.
    struct OlderBackupStarts {
        inner: Arc<MemoryStore>,
        record: Mutex<Option<Vec<u8>>>,
        listed: Mutex<u32>,
    }

    impl Backend for OlderBackupStarts {
        fn write(&self, h: Handle<'_>, data: &[u8], mode: WriteMode) -> Result<()> {
            self.inner.write(h, data, mode)
        }
        fn read(&self, h: Handle<'_>, range: Option<ByteRange>) -> Result<Vec<u8>> {
            self.inner.read(h, range)
        }
        fn listing(&self, prefix: &str, from: Listing) -> Result<Vec<crate::store::ObjectInfo>> {
            let mut record = lock(&self.record);
            if prefix == "writers/" && record.is_some() {
                let mut n = lock(&self.listed);
                *n += 1;
                if *n == 2 {
                    if let Some(r) = record.take() {
                        self.inner.put("writers/w1", &r)?;
                    }
                }
            }
            drop(record);
            self.inner.listing(prefix, from)
        }
        fn remove(&self, h: Handle<'_>) -> Result<()> {
            self.inner.remove(h)
        }
        fn size(&self, h: Handle<'_>) -> Result<u64> {
            self.inner.size(h)
        }
        fn location(&self) -> String {
            self.inner.location()
        }
        fn flush(&self) -> Result<()> {
            self.inner.flush()
        }
        fn local_dir(&self) -> Option<std::path::PathBuf> {
            self.inner.local_dir()
        }
        fn hint(&self, hint: Hint<'_>) {
            self.inner.hint(hint)
        }
    }

    #[test]
    fn an_older_mailvaults_backup_starting_during_prune_stops_it_before_any_delete() {
        let store = init();
        let repo = open(&store);
        unused_blob(&repo);
        let rec = serde_json::to_vec(&crate::repo::lock::WriterRecord::this_process()).unwrap();
        let sealed = repo.seal_object(crate::repo::format::Object::Writer("w1"), &rec);
        let wrapped = Arc::new(OlderBackupStarts {
            inner: store.clone(),
            record: Mutex::new(None),
            listed: Mutex::new(0),
        });
        // A second pack, so that the prune writes an index file.
        let mut repo = Repository::open(wrapped.clone(), b"pw").unwrap();
        let saver = BlobSaver::new(&repo, Compression::Lz4);
        saver.save(BlobKind::Data, &[1u8; 3000]).unwrap();
        saver.finish().unwrap();
        drop(saver);
        repo.reload_index().unwrap();
        let packs = store.list("data/").unwrap().len();
        let index = store.list("index/").unwrap().len();
        *lock(&wrapped.record) = Some(sealed);
        let e = prune(&mut repo, &PruneOptions::default(), &NoProgress).unwrap_err();
        assert!(
            matches!(&e, Error::PruneRefused { what, .. } if what == "writers/w1"),
            "{e}"
        );
        assert_eq!(
            store.list("data/").unwrap().len(),
            packs,
            "a pack was deleted"
        );
        assert!(
            store.list("index/").unwrap().len() >= index,
            "an index file was deleted"
        );
    }
}
