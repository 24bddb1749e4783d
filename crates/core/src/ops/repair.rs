//! Repairs, the answers to what `check` finds.
//!
//! - [`repair_index`] rebuilds the index from the packs themselves (as restic's `repair
//!   index` does): every pack in `data/` is read whole and every blob verified (opened,
//!   decompressed, hashed against its id) before it is listed; the new index file is made
//!   durable before the old ones are deleted, so a repair killed at any point leaves a
//!   repository that opens (at worst with both the old and the new index files).
//! - [`repair_snapshots`] replaces each snapshot that needs blobs that cannot be read
//!   (not in the index, in a missing or damaged pack, compressed with a missing
//!   dictionary) by one without the messages, folder files, message lists or accounts that
//!   cannot be restored: tagged `repaired`, with the replaced snapshot's id in `original`.
//!   The new snapshot is durable before the old one is removed; a killed repair leaves
//!   both, and running it again finds the replacement and only removes the old one.
//!   Snapshot files that cannot be read at all are moved to `damaged/snapshots/`.
//!
//! - [`repair_overwrites`] puts back the original of every object someone overwrote, from
//!   the older versions a versioned bucket keeps.
//!
//! Each has a dry run that computes the same plan and writes nothing.

mod overwrites;
use crate::error::{Error, Result};
use crate::repo::format::BlobKind;
use crate::repo::id::Id;
use crate::repo::pack::PackList;
use crate::repo::snapshot::Snapshot;
use crate::repo::tree::{self, AccountTree, ChunkRef, FolderNode, MessageEntry, RootTree};
use crate::repo::writer::content::save_entries;
use crate::repo::writer::records::PackVerdict;
use crate::repo::writer::BlobSaver;
use crate::repo::{file_id, ChunkTreeVisitor, Repository};
use crate::report::Failure;
use crate::store::Store;
pub use overwrites::{repair_overwrites, OverwritesRepair};
use rayon::prelude::*;
use serde::Serialize;
use std::collections::HashSet;

/// The tag of snapshots written by [`repair_snapshots`].
pub const REPAIRED_TAG: &str = "repaired";

/// Where [`repair_snapshots`] moves snapshot files that cannot be read.
pub const DAMAGED_DIR: &str = "damaged/";

#[derive(Clone, Debug, Default)]
pub struct RepairOptions {
    /// Compute and report the plan; write and delete nothing.
    pub dry_run: bool,
    /// This host's state directory: the snapshots `repair snapshots` removes are taken out
    /// of its record of the repository ([`crate::host::seen`]), so they are not reported missing.
    pub state: Option<crate::host::seen::StateDir>,
}

/// What [`repair_index`] did (or, in a dry run, would do).
#[derive(Clone, Debug, Default, Serialize)]
pub struct IndexRepair {
    pub dry_run: bool,
    /// Packs listed by the new index, and their blobs.
    pub packs: u64,
    pub blobs: u64,
    /// Packs the old index did not list (a killed backup's, or ones whose index was lost).
    pub packs_added: u64,
    /// Packs the old index listed that are not in `data/`.
    pub packs_missing: u64,
    /// Files in `data/` not indexed at all, and why.
    pub packs_skipped: Vec<Failure>,
    /// Blobs left out because they do not verify, and why.
    pub blobs_skipped: Vec<Failure>,
    /// Packs whose bytes do not match their name (their good blobs are indexed).
    pub packs_damaged: Vec<String>,
    pub index_written: Option<String>,
    pub index_removed: Vec<String>,
    /// Splits of the search index that cannot be read or verified, moved to `damaged/`
    /// (the next `index` indexes their contents again).
    pub search_damaged: Vec<String>,
}

/// The lock a repair takes: exclusive, shared for a dry run (which only reads).
fn repair_lock(opts: &RepairOptions) -> crate::repo::lock::LockKind {
    match opts.dry_run {
        true => crate::repo::lock::LockKind::Shared,
        false => crate::repo::lock::LockKind::Exclusive,
    }
}

/// Rebuilds the index from the packs in `data/`.
pub fn repair_index(repo: &Repository, opts: &RepairOptions) -> Result<IndexRepair> {
    repo.refuse_if_migrating()?;
    repo.refuse_if_append_only("repair index")?;
    // Alone in the repository: no backup writes packs meanwhile, no prune deletes them.
    let _lock = repo.lock(repair_lock(opts), "repair")?;
    let store = repo.store();
    // Index files first, then packs: every pack an index listed now is seen below (packs
    // are durable before their index), so deleting these loses nothing.
    let old_index = store.list("index/")?;
    let files = store.list("data/")?;
    let verdicts = pack_verdicts(repo, &files, opts.dry_run);
    let mut rep = IndexRepair {
        dry_run: opts.dry_run,
        ..Default::default()
    };
    let mut packs: PackList = Vec::new();
    let mut present = HashSet::new();
    for (path, r) in verdicts {
        match r {
            Ok((id, v)) => {
                present.insert(id);
                if !v.name_matches {
                    rep.packs_damaged.push(path.clone());
                }
                if let Ok(file) = file_id(&path) {
                    present.insert(file);
                }
                for (e, err) in v.bad {
                    rep.blobs_skipped
                        .push(Failure::new(format!("blob {} in {path}", e.id), err));
                }
                if v.good.is_empty() {
                    rep.packs_skipped
                        .push(Failure::new(&path, "no blob in it verifies"));
                    continue;
                }
                if !repo.index().has_pack(&id) {
                    rep.packs_added += 1;
                }
                rep.blobs += v.good.len() as u64;
                packs.push(crate::repo::pack::IndexedPack {
                    id,
                    version: v.version,
                    entries: v.good,
                });
            }
            Err(e) => rep.packs_skipped.push(Failure::new(&path, e)),
        }
    }
    rep.packs = packs.len() as u64;
    rep.packs_missing = repo
        .index()
        .packs()
        .iter()
        .filter(|p| !present.contains(*p))
        .count() as u64;
    packs.sort_by_key(|p| p.id);
    rep.search_damaged = crate::search::verify::set_aside_damaged(repo, opts.dry_run, |p| {
        move_to_damaged(store, p)
    })?;
    if opts.dry_run {
        return Ok(rep);
    }
    let written = if packs.is_empty() {
        None
    } else {
        let (id, _) = repo.write_index(&packs)?;
        Some(format!("index/{id}"))
    };
    // The new index durable before any old one goes.
    store.flush()?;
    for f in old_index {
        if Some(&f.path) != written.as_ref() {
            store.delete(&f.path)?;
            rep.index_removed.push(f.path);
        }
    }
    rep.index_written = written;
    for p in &rep.packs_damaged {
        move_to_damaged(store, p)?;
    }
    Ok(rep)
}

/// Each pack of `files` verified, with the id the index lists it under. A pack whose bytes
/// do not match its name has its good blobs copied into a new pack (written now, unless
/// `dry_run`, before the index that lists it); the damaged one is moved aside once the new
/// index is durable.
fn pack_verdicts(
    repo: &Repository,
    files: &[crate::store::ObjectInfo],
    dry_run: bool,
) -> Vec<(String, Result<(Id, PackVerdict)>)> {
    files
        .par_iter()
        .map(|f| {
            let r = file_id(&f.path).and_then(|id| {
                let mut v = repo.verify_pack(&f.path, repo.pack_versions())?;
                match v.damaged_bytes.take() {
                    Some(bytes) if !v.good.is_empty() => {
                        let (new, entries) = salvage(repo, &bytes, &v.good, v.version, dry_run)?;
                        v.good = entries;
                        Ok((new, v))
                    }
                    _ => Ok((id, v)),
                }
            });
            (f.path.clone(), r)
        })
        .collect()
}

/// Copies the blobs `good` of a damaged pack's `bytes` (verified) into a new pack, one per
/// blob kind, and writes it (unless a dry run); returns its id and entries. One kind per
/// pack is what backups write, so there is one pack.
fn salvage(
    repo: &Repository,
    bytes: &[u8],
    good: &[crate::repo::pack::PackEntry],
    version: crate::repo::format::Version,
    dry_run: bool,
) -> Result<(Id, Vec<crate::repo::pack::PackEntry>)> {
    let mut b = crate::repo::pack::PackBuilder::default();
    for e in good {
        let start = e.offset as usize;
        let sealed = bytes
            .get(start..start + e.stored_len as usize)
            .ok_or_else(|| Error::corrupt("pack", "blob past the end of the pack"))?;
        b.add(e.id, e.kind, e.codec, e.raw_len as usize, sealed);
    }
    // The blobs keep their sealing, so the new pack is of the damaged one's format.
    let p = b.finish(repo.key(), version)?;
    if !dry_run {
        crate::store::put_content_named(
            repo.store(),
            &crate::repo::pack::pack_path(&p.id),
            &p.bytes()?,
        )?;
    }
    Ok((p.id, p.entries))
}

/// What [`repair_snapshots`] did (or would do) to one snapshot.
#[derive(Clone, Debug, Default, Serialize)]
pub struct SnapshotRepair {
    /// The damaged snapshot.
    pub snapshot: String,
    /// The snapshot that replaces it (none in a dry run, or when nothing of it is left).
    pub replaced_by: Option<String>,
    pub messages_dropped: u64,
    pub files_dropped: u64,
    /// Folder message lists, account trees or the root that could not be read.
    pub trees_dropped: u64,
    /// What was dropped: `account <a> folder <f> message <key>` ...
    pub dropped: Vec<String>,
}

/// What [`repair_snapshots`] did (or, in a dry run, would do).
#[derive(Clone, Debug, Default, Serialize)]
pub struct SnapshotsRepair {
    pub dry_run: bool,
    pub snapshots_checked: u64,
    pub repaired: Vec<SnapshotRepair>,
    /// Snapshot files that cannot be read, moved to `damaged/snapshots/`.
    pub moved: Vec<Failure>,
}

/// Replaces snapshots that need blobs that cannot be read by ones without what is lost.
pub fn repair_snapshots(repo: &mut Repository, opts: &RepairOptions) -> Result<SnapshotsRepair> {
    repo.refuse_if_migrating()?;
    repo.refuse_if_append_only("repair snapshots")?;
    let _lock = repo.lock(repair_lock(opts), "repair")?;
    if !repo.index_is_current()? {
        repo.reload_index()?;
    }
    refuse_unindexed_usable(repo)?;
    let bad = crate::ops::check::unreadable_blobs(repo, false)?;
    let usable = |id: &Id| repo.index().contains(id) && !bad.contains(id);
    let snaps = repo.snapshots()?;
    let mut rep = SnapshotsRepair {
        dry_run: opts.dry_run,
        snapshots_checked: snaps.len() as u64,
        ..Default::default()
    };
    for d in &snaps.damaged {
        rep.moved.push(Failure::new(&d.path, &d.error));
    }
    let saver = BlobSaver::new(repo, repo.config().compression);
    let mut plans = Vec::new();
    for s in snaps.iter() {
        let mut r = SnapshotRepair {
            snapshot: s.id.to_hex(),
            ..Default::default()
        };
        let new_root = rebuild_root(repo, &saver, s, &usable, &mut r, opts.dry_run)?;
        if r.messages_dropped + r.files_dropped + r.trees_dropped > 0 {
            plans.push((s.clone(), new_root, r));
        }
    }
    if opts.dry_run {
        rep.repaired = plans.into_iter().map(|(_, _, r)| r).collect();
        return Ok(rep);
    }
    // Removed on purpose: out of this host's record before they go.
    if let Some(state) = &opts.state {
        let mut record = crate::host::seen::Record::of(state, repo);
        let mut removing: Vec<Id> = plans.iter().map(|(s, _, _)| s.id).collect();
        removing.extend(crate::host::seen::ids_in(
            snaps.damaged.iter().map(|d| d.path.as_str()),
        ));
        record.forget(&removing);
        record.save();
        for w in record.take_warnings() {
            tracing::warn!("{w}");
        }
    }
    let written = saver.finish()?;
    drop(saver);
    repo.add_packs(&written);
    let store = repo.store();
    for (old, root, mut r) in plans {
        if let Some((root, messages, bytes)) = root {
            let existing = snaps
                .iter()
                .find(|x| x.original == Some(old.id) && x.root == root);
            let id = match existing {
                // A repair killed after writing the replacement: only the old one is left
                // to remove.
                Some(x) => x.id,
                None => {
                    let mut new = old.clone();
                    new.root = root;
                    new.original = Some(old.id);
                    if !new.tags.iter().any(|t| t == REPAIRED_TAG) {
                        new.tags.push(REPAIRED_TAG.into());
                    }
                    new.summary.messages = messages;
                    new.summary.bytes = bytes;
                    new.summary.failed += r.messages_dropped;
                    repo.save_snapshot(&new)?
                }
            };
            r.replaced_by = Some(id.to_hex());
        }
        // The replacement is durable (save_snapshot flushes): the damaged one can go.
        move_to_damaged(store, &Snapshot::path(&old.id))?;
        rep.repaired.push(r);
    }
    for d in &snaps.damaged {
        move_to_damaged(store, &d.path)?;
    }
    Ok(rep)
}

/// Packs in no index may hold what the snapshots need: their good blobs must be indexed
/// first. (A pack `repair index` left out has no blob that verifies.) An error when one does.
fn refuse_unindexed_usable(repo: &Repository) -> Result<()> {
    let unindexed: Vec<String> = repo
        .store()
        .list("data/")?
        .into_iter()
        .filter(|f| file_id(&f.path).is_ok_and(|id| !repo.index().has_pack(&id)))
        .map(|f| f.path)
        .collect();
    let usable_elsewhere: Vec<&String> = unindexed
        .par_iter()
        .filter(|path| {
            repo.verify_pack(path, repo.pack_versions())
                .is_ok_and(|v| v.good.iter().any(|e| !repo.index().contains(&e.id)))
        })
        .collect();
    if let Some(first) = usable_elsewhere.first() {
        return Err(Error::InvalidInput(format!(
            "{} packs in no index ({first} ...) hold blobs that verify: they may be what the snapshots need; run `mailvault repair index` first",
            usable_elsewhere.len(),
        )));
    }
    Ok(())
}

/// Copies a repository file below `damaged/` (durably), then removes it.
pub(crate) fn move_to_damaged(store: &dyn crate::store::Backend, path: &str) -> Result<()> {
    let bytes = store.get(path)?;
    match store.put(&format!("{DAMAGED_DIR}{path}"), &bytes) {
        Ok(()) | Err(Error::AlreadyExists(_)) => {}
        Err(e) => return Err(e),
    }
    store.flush()?;
    store.delete(path)
}

/// The store's files' tree `id` ([`RootTree::store`]) without what cannot be restored,
/// saved through `saver` when something was dropped (unless a dry run); `None` when its
/// tree is lost.
fn rebuild_store(
    repo: &Repository,
    saver: &BlobSaver,
    id: Id,
    usable: &dyn Fn(&Id) -> bool,
    r: &mut SnapshotRepair,
    dry_run: bool,
) -> Result<Option<Id>> {
    let t: AccountTree = match repo.read_tree(&id) {
        Ok(t) if usable(&id) => t,
        _ => {
            r.trees_dropped += 1;
            r.dropped.push("the store's own files (their tree)".into());
            return Ok(None);
        }
    };
    let before = (r.files_dropped, r.trees_dropped);
    let home = (t.home.into_iter())
        .map(|f| rebuild_folder(repo, saver, "(the store)", f, usable, r, dry_run))
        .collect::<Result<Vec<_>>>()?;
    if before == (r.files_dropped, r.trees_dropped) {
        return Ok(Some(id));
    }
    let tree = tree::encode(&AccountTree {
        folders: Vec::new(),
        home,
    });
    Ok(Some(match dry_run {
        true => repo.key().blob_id(&tree),
        false => saver.save(BlobKind::Tree, &tree)?,
    }))
}

/// The root tree of `s` without what cannot be restored, saved through `saver` (unless a
/// dry run), with the messages and bytes it keeps; `None` when nothing is left.
fn rebuild_root(
    repo: &Repository,
    saver: &BlobSaver,
    s: &Snapshot,
    usable: &dyn Fn(&Id) -> bool,
    r: &mut SnapshotRepair,
    dry_run: bool,
) -> Result<Option<(Id, u64, u64)>> {
    let root: RootTree = match repo.read_tree(&s.root) {
        Ok(t) if usable(&s.root) => t,
        _ => {
            r.trees_dropped += 1;
            r.messages_dropped += s.summary.messages;
            r.dropped.push("the whole snapshot (its root tree)".into());
            return Ok(None);
        }
    };
    let mut accounts = Vec::new();
    for acc in root.accounts {
        let t: AccountTree = match repo.read_tree(&acc.tree) {
            Ok(t) if usable(&acc.tree) => t,
            _ => {
                r.trees_dropped += 1;
                r.messages_dropped += acc.messages;
                r.dropped.push(format!("account {} (its tree)", acc.name));
                continue;
            }
        };
        let before = (r.messages_dropped, r.files_dropped, r.trees_dropped);
        // Its folders, then its home's directories.
        let mut rebuilt = |nodes: Vec<FolderNode>| -> Result<Vec<FolderNode>> {
            (nodes.into_iter())
                .map(|f| rebuild_folder(repo, saver, &acc.name, f, usable, r, dry_run))
                .collect()
        };
        let (folders, home) = (rebuilt(t.folders)?, rebuilt(t.home)?);
        let mut acc = acc;
        if before != (r.messages_dropped, r.files_dropped, r.trees_dropped) {
            acc.messages = folders.iter().map(|f| f.messages).sum();
            acc.bytes = folders.iter().map(|f| f.bytes).sum();
            let tree = tree::encode(&AccountTree { folders, home });
            acc.tree = if dry_run {
                repo.key().blob_id(&tree)
            } else {
                saver.save(BlobKind::Tree, &tree)?
            };
        }
        accounts.push(acc);
    }
    let store = match root.store {
        Some(id) => rebuild_store(repo, saver, id, usable, r, dry_run)?,
        None => None,
    };
    let messages = accounts.iter().map(|a| a.messages).sum();
    let bytes = accounts.iter().map(|a| a.bytes).sum();
    let tree = tree::encode(&RootTree {
        accounts,
        owners: root.owners,
        store,
    });
    let id = if dry_run {
        repo.key().blob_id(&tree)
    } else {
        saver.save(BlobKind::Tree, &tree)?
    };
    Ok(Some((id, messages, bytes)))
}

/// One folder without what cannot be restored; unchanged when nothing is lost.
fn rebuild_folder(
    repo: &Repository,
    saver: &BlobSaver,
    account: &str,
    mut f: FolderNode,
    usable: &dyn Fn(&Id) -> bool,
    r: &mut SnapshotRepair,
    dry_run: bool,
) -> Result<FolderNode> {
    let fname = format!("account {account} folder {}", f.name);
    let mut changed = false;
    f.files.retain(|file| {
        // A large file's content lists must be usable and readable, and their ids too.
        let ok = file.lists.iter().all(usable)
            && repo
                .file_content(file)
                .is_ok_and(|ids| ids.iter().all(usable));
        if !ok {
            changed = true;
            r.files_dropped += 1;
            r.dropped.push(format!(
                "{fname} file {}",
                String::from_utf8_lossy(&file.name)
            ));
        }
        ok
    });
    // The chunks: the node's own, or those of the chunk tree's nodes that are usable
    // and read (a damaged node costs the chunks below it).
    let chunks = if let Some(root) = f.chunk_tree {
        let mut walk = TreeWalk {
            usable,
            chunks: Vec::new(),
            damaged: 0,
        };
        repo.walk_chunk_tree(&root, &mut walk)?;
        if walk.damaged > 0 {
            changed = true;
            r.trees_dropped += walk.damaged;
            r.dropped.push(format!("{fname} (a list of message lists)"));
        }
        walk.chunks
    } else {
        std::mem::take(&mut f.chunks)
    };
    let mut kept: Vec<MessageEntry> = Vec::new();
    for c in &chunks {
        let chunk = match repo.read_chunk(c) {
            Ok(ch) if usable(&c.entries) && usable(&c.names) => ch,
            _ => {
                changed = true;
                r.trees_dropped += 1;
                r.dropped.push(format!("{fname} (a message list)"));
                continue;
            }
        };
        for m in chunk {
            if m.content.iter().all(usable) {
                kept.push(m);
            } else {
                changed = true;
                r.messages_dropped += 1;
                r.dropped.push(format!(
                    "{fname} message {}",
                    String::from_utf8_lossy(&m.key)
                ));
            }
        }
    }
    if !changed {
        if f.chunk_tree.is_none() {
            f.chunks = chunks;
        }
        return Ok(f);
    }
    f.messages = kept.len() as u64;
    f.bytes = kept.iter().map(|m| m.size).sum();
    let saved = match dry_run {
        true => Default::default(),
        false => save_entries(saver, kept)?,
    };
    (f.chunks, f.chunk_tree) = (saved.chunks, saved.chunk_tree);
    Ok(f)
}

/// A walk of a chunk tree for [`rebuild_folder`]: the chunks below usable nodes that
/// read, and how many nodes did not.
struct TreeWalk<'a> {
    usable: &'a dyn Fn(&Id) -> bool,
    chunks: Vec<ChunkRef>,
    damaged: u64,
}

impl ChunkTreeVisitor for TreeWalk<'_> {
    fn enter(&mut self, id: &Id) -> bool {
        let ok = (self.usable)(id);
        self.damaged += u64::from(!ok);
        ok
    }
    fn chunk(&mut self, c: &ChunkRef) {
        self.chunks.push(*c);
    }
    fn damaged(&mut self, _id: &Id, _e: crate::Error) -> Result<()> {
        self.damaged += 1;
        Ok(())
    }
}
