//! `mailvault migrate`: rewrites a format-1 repository as format 2 (`crate::repo::format`).
//!
//! What is rewritten is the metadata: every tree blob is read, verified against its id
//! and sealed again into new format-2 tree packs (bound to its kind and id); dictionaries,
//! snapshots and the index are written again as format-2 files (named by the keyed hash
//! of their content, which their seal binds). Snapshots keep their content, at `version`
//! 2, with `parent` and `original` mapped to the new ids. Data packs are kept as they are:
//! the new config says `format1_packs`, the new index lists them as format-1 packs, and
//! their blobs keep being hashed against their ids when read. Nothing is re-chunked.
//!
//! Crash safety. `migrate/state` (a sealed record of the process) is written first and
//! removed last; while it is there, readers skip files of the other format quietly
//! ([`Repository::migration_leftover`]) and backups and repairs refuse to run.
//! 1. the format-2 files are written next to the format-1 ones (content-named, they do
//!    not collide) and made durable;
//! 2. commit: `config` is replaced by the format-2 config in one atomic, durable step
//!    ([`crate::store::Store::replace`]);
//! 3. the format-1 index files, snapshots, dictionaries and tree packs are removed, then
//!    `migrate/state`.
//!
//! Killed before the commit, the repository opens as format 1 and the next run removes
//! what the killed one staged first; killed after, it opens as format 2 and the next run
//! removes the leftovers. A failure before the commit (a tree blob that does not verify)
//! removes what was staged and the record, leaving the repository as it was.

use crate::error::{Error, Result};
use crate::repo::format::BlobKind;
use crate::repo::format::{Object, Version};
use crate::repo::id::Id;
use crate::repo::lock::LockKind;
use crate::repo::lock::WriterRecord;
use crate::repo::named::{seal_config, Named};
use crate::repo::pack::{self, IndexedPack, PackEntry};
use crate::repo::seal::{open_as, seal_as};
use crate::repo::snapshot::Snapshot;
use crate::repo::writer::BlobSaver;
use crate::repo::{file_id, Repository, MIGRATE_STATE};
use crate::store::put_content_named;
use crate::store::Store;
use rayon::prelude::*;
use serde::Serialize;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Instant;

#[derive(Clone, Debug, Default)]
pub struct MigrateOptions {
    /// Compute and report the plan; write and delete nothing.
    pub dry_run: bool,
    /// This host's state directory: the old snapshot ids leave its record of the
    /// repository (they are replaced, not rolled back) and the record notes format 2.
    pub state: Option<crate::host::seen::StateDir>,
}

/// What [`migrate`] did (or, in a dry run, would do).
#[derive(Clone, Debug, Default, Serialize)]
pub struct MigrateReport {
    pub dry_run: bool,
    /// The format found, and the one the repository is in afterwards.
    pub from_version: u32,
    pub to_version: u32,
    /// Files a killed earlier run left (staged, or not yet removed) that this run removed.
    pub leftovers_removed: u64,
    /// Snapshots written again in format 2.
    pub snapshots: u64,
    /// Each snapshot's old id and its new one (a snapshot's format-2 id is the keyed hash
    /// of its content).
    pub renamed: Vec<Renamed>,
    /// Dictionaries written again in format 2.
    pub dictionaries: u64,
    /// Index files replaced, and the format-2 index files written (one).
    pub index_files_replaced: u64,
    pub index_files_written: u64,
    /// Tree blobs read, verified and sealed again; the format-1 packs they were in and
    /// the format-2 packs they are in now, with their bytes.
    pub tree_blobs: u64,
    pub tree_packs_replaced: u64,
    pub tree_pack_bytes_read: u64,
    pub tree_packs_written: u64,
    pub tree_pack_bytes_written: u64,
    /// Data packs kept as they are (format 1), and their bytes.
    pub data_packs_kept: u64,
    pub data_pack_bytes_kept: u64,
    pub elapsed_secs: f64,
}

/// A snapshot's id before and after the migration (hex).
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct Renamed {
    pub old: String,
    pub new: String,
}

/// Migrates the repository to format 2, or finishes a migration a killed run left.
/// A format-2 repository without an unfinished migration is an error (nothing to do).
pub fn migrate(repo: &mut Repository, opts: &MigrateOptions) -> Result<MigrateReport> {
    repo.refuse_if_append_only("migrate")?;
    let started = Instant::now();
    let mut rep = MigrateReport {
        dry_run: opts.dry_run,
        from_version: repo.version().number(),
        to_version: Version::V2.number(),
        ..Default::default()
    };
    match (repo.version(), repo.unfinished_migration()) {
        (Version::V2, false) => {
            return Err(Error::InvalidInput(format!(
                "{} is already format 2: nothing to migrate",
                repo.store().location()
            )))
        }
        (Version::V2, true) => {
            // Killed after the commit: only the leftovers are to go.
            let lock = match opts.dry_run {
                true => crate::repo::lock::RepoLock::none(),
                false => repo.lock(LockKind::Exclusive, "migrate")?,
            };
            take_over(repo, opts.dry_run, lock.path().as_deref())?;
            rep.leftovers_removed = remove_leftovers(repo, opts.dry_run)?;
            if !opts.dry_run {
                note_in_record(opts, repo, &[]);
                finish(repo)?;
            }
        }
        (Version::V1, _) => {
            refuse_unless_clean(repo)?;
            let plan = plan(repo)?;
            plan.report(&mut rep);
            if opts.dry_run {
                rep.leftovers_removed = leftovers(repo)?.len() as u64;
            } else {
                // Exclusive: a backup that begins now waits for the migration to end (and
                // one running now makes this wait), whatever the order of their checks.
                let lock = repo.lock(LockKind::Exclusive, "migrate")?;
                take_over(repo, false, lock.path().as_deref())?;
                rep.leftovers_removed = remove_leftovers(repo, false)?;
                match stage(repo, &plan, &mut rep) {
                    Ok(()) => {}
                    Err(e) => {
                        // Nothing refers to what was staged: remove it, and the record.
                        repo.reload()?;
                        remove_leftovers(repo, false)?;
                        finish(repo)?;
                        return Err(e);
                    }
                }
                // The old snapshot ids leave this host's record before the commit, so
                // that their removal is never taken for a rollback.
                let old: Vec<crate::Id> = rep
                    .renamed
                    .iter()
                    .filter_map(|r| crate::Id::from_hex(&r.old))
                    .collect();
                note_in_record(opts, repo, &old);
                // The commit point.
                let v2 = repo.migrated_view();
                repo.store()
                    .replace("config", &seal_config(repo.key(), v2.config())?)?;
                repo.reload()?;
                note_in_record(opts, repo, &[]);
                remove_leftovers(repo, false)?;
                finish(repo)?;
            }
        }
    }
    rep.elapsed_secs = started.elapsed().as_secs_f64();
    Ok(rep)
}

/// Takes the snapshots `replaced` out of this host's record of the repository and notes
/// its format version there (see `crate::host::seen`); a failure is a warning.
fn note_in_record(opts: &MigrateOptions, repo: &Repository, replaced: &[crate::Id]) {
    let Some(state) = &opts.state else {
        return;
    };
    let mut record = crate::host::seen::Record::of(state, repo);
    record.forget(replaced);
    record.save();
    for w in record.take_warnings() {
        tracing::warn!("{w}");
    }
}

/// A format-1 repository must be whole to be migrated: what cannot be read cannot be
/// rewritten, and a running (or killed) backup would write format-1 packs no index of the
/// migration lists.
fn refuse_unless_clean(repo: &Repository) -> Result<()> {
    let location = repo.store().location();
    if let Some(w) = first_record(repo, None)? {
        return Err(Error::InvalidInput(format!(
            "{location}: a backup is running or was killed, or another command holds a lock ({w}): let it finish, or run a backup to take over what a killed one left (`mailvault unlock` removes stale locks), then migrate"
        )));
    }
    if let Some((path, e)) = repo.index_errors().first() {
        return Err(Error::InvalidInput(format!(
            "{location}: index file {path} cannot be read ({e}): run `mailvault repair index` first"
        )));
    }
    if let Some((path, e)) = repo.dictionary_errors().first() {
        return Err(Error::InvalidInput(format!(
            "{location}: dictionary {path} cannot be read ({e}): put it back from a copy of the repository, or run `mailvault repair snapshots` first"
        )));
    }
    if let Some(d) = repo.snapshots()?.damaged.first() {
        return Err(Error::InvalidInput(format!(
            "{location}: snapshot file {} cannot be read ({}): run `mailvault repair snapshots` first",
            d.path, d.error
        )));
    }
    Ok(())
}

/// What the migration of a format-1 repository reads, keeps and rewrites.
struct Plan {
    /// Every tree blob, in the first pack an index file lists it in.
    trees: BTreeMap<Id, Vec<PackEntry>>,
    /// Packs with data blobs: kept, listed with their data blobs.
    kept: Vec<IndexedPack>,
    kept_bytes: u64,
    /// Packs with tree blobs only: replaced.
    replaced: u64,
    replaced_bytes: u64,
    index_files: u64,
    dictionaries: Vec<String>,
    snapshots: Vec<Snapshot>,
}

impl Plan {
    fn report(&self, rep: &mut MigrateReport) {
        rep.snapshots = self.snapshots.len() as u64;
        rep.dictionaries = self.dictionaries.len() as u64;
        rep.index_files_replaced = self.index_files;
        rep.tree_blobs = self.trees.values().map(|v| v.len() as u64).sum();
        rep.tree_packs_replaced = self.replaced;
        rep.tree_pack_bytes_read = self.replaced_bytes;
        rep.data_packs_kept = self.kept.len() as u64;
        rep.data_pack_bytes_kept = self.kept_bytes;
    }
}

fn plan(repo: &Repository) -> Result<Plan> {
    let store = repo.store();
    let sizes: HashMap<Id, u64> = store
        .list("data/")?
        .into_iter()
        .filter_map(|f| Some((file_id(&f.path).ok()?, f.size)))
        .collect();
    // Every pack with the union of what the index files list of it.
    let mut packs: BTreeMap<Id, BTreeMap<Id, PackEntry>> = BTreeMap::new();
    for id in repo.index_files() {
        let (_, list) = repo.read_index_file(&format!("index/{id}"))?;
        for p in list {
            let e = packs.entry(p.id).or_default();
            for entry in p.entries {
                e.entry(entry.id).or_insert(entry);
            }
        }
    }
    let mut plan = Plan {
        trees: BTreeMap::new(),
        kept: Vec::new(),
        kept_bytes: 0,
        replaced: 0,
        replaced_bytes: 0,
        index_files: repo.index_files().len() as u64,
        dictionaries: Vec::new(),
        snapshots: repo.snapshots()?.list,
    };
    let mut seen = HashSet::new();
    for (pack_id, entries) in packs {
        let size = sizes.get(&pack_id).copied().unwrap_or(0);
        let (trees, data): (Vec<PackEntry>, Vec<PackEntry>) = entries
            .into_values()
            .partition(|e| e.kind == BlobKind::Tree);
        let trees: Vec<PackEntry> = trees.into_iter().filter(|e| seen.insert(e.id)).collect();
        if !trees.is_empty() {
            plan.trees.insert(pack_id, trees);
        }
        if data.is_empty() {
            plan.replaced += 1;
            plan.replaced_bytes += size;
        } else {
            plan.kept_bytes += size;
            plan.kept.push(IndexedPack {
                id: pack_id,
                version: Version::V1,
                entries: data,
            });
        }
    }
    let leftovers: HashSet<&String> = repo.migration_leftovers().iter().collect();
    plan.dictionaries = store
        .list("dicts/")?
        .into_iter()
        .map(|f| f.path)
        .filter(|p| !leftovers.contains(p))
        .collect();
    plan.dictionaries.sort();
    Ok(plan)
}

/// Step 1: writes the format-2 dictionaries, tree packs, index and snapshots, and makes
/// them durable.
fn stage(repo: &Repository, plan: &Plan, rep: &mut MigrateReport) -> Result<()> {
    let store = repo.store();
    let v2 = repo.migrated_view();
    for path in &plan.dictionaries {
        let plain = repo.read_dictionary_file(path)?;
        let (id, sealed) = v2.seal_named(Named::Dictionary, &plain);
        put_content_named(store, &format!("dicts/{id}"), &sealed)?;
    }
    // Tree blobs: each pack read once, every blob verified against its id (a format-1
    // blob has nothing else proving it) before it is sealed bound to that id.
    let saver = BlobSaver::new(&v2, repo.config().compression);
    saver.adopt(plan.kept.clone());
    plan.trees
        .par_iter()
        .try_for_each(|(pack_id, entries)| -> Result<()> {
            let path = pack::pack_path(pack_id);
            let bytes = store.get(&path)?;
            for e in entries {
                let raw = repo.decode_entry(e, Version::V1, &bytes, &path)?;
                saver.save_with_id(BlobKind::Tree, e.id, &raw)?;
            }
            Ok(())
        })?;
    // The packs, then one index file listing them and the kept data packs.
    let written = saver.finish()?;
    rep.index_files_written = u64::from(!written.is_empty());
    for p in written.iter().filter(|p| p.version == Version::V2) {
        rep.tree_packs_written += 1;
        rep.tree_pack_bytes_written += store.stat(&pack::pack_path(&p.id))?;
    }
    // Snapshots, parents before the snapshots that name them.
    let by_id: HashMap<Id, &Snapshot> = plan.snapshots.iter().map(|s| (s.id, s)).collect();
    let mut new_ids: HashMap<Id, Id> = HashMap::new();
    for s in &plan.snapshots {
        let new = write_snapshot(&v2, s, &by_id, &mut new_ids)?;
        rep.renamed.push(Renamed {
            old: s.id.to_hex(),
            new: new.to_hex(),
        });
    }
    store.flush()
}

/// Writes `s` in format 2 after the snapshots it names (so their new ids are known);
/// returns its new id. Ids of snapshots that are not there stay as they are.
fn write_snapshot(
    v2: &Repository,
    s: &Snapshot,
    by_id: &HashMap<Id, &Snapshot>,
    new_ids: &mut HashMap<Id, Id>,
) -> Result<Id> {
    if let Some(id) = new_ids.get(&s.id) {
        return Ok(*id);
    }
    let map = |old: Option<Id>, new_ids: &mut HashMap<Id, Id>| -> Result<Option<Id>> {
        match old.and_then(|o| by_id.get(&o).filter(|_| o != s.id)) {
            Some(named) => write_snapshot(v2, named, by_id, new_ids).map(Some),
            None => Ok(old),
        }
    };
    let mut new = s.clone();
    new.parent = map(s.parent, new_ids)?;
    new.original = map(s.original, new_ids)?;
    new.version = Version::V2.number();
    let json = serde_json::to_vec(&new).map_err(|e| Error::corrupt("snapshot", e.to_string()))?;
    let (id, sealed) = v2.seal_named(Named::Snapshot, &json);
    put_content_named(v2.store(), &Snapshot::path(&id), &sealed)?;
    new_ids.insert(s.id, id);
    Ok(id)
}

/// The first record of a command that locks the repository (`locks/`, other than `mine`)
/// or of a backup of an older mailvault (`writers/`), if any, that stops a migration: a
/// live lock, or a killed backup's (its packs are for a backup to take over first), or a
/// file that is not a record; the stale lock of another killed command (a migration
/// stopped here) is no matter.
fn first_record(repo: &Repository, mine: Option<&str>) -> Result<Option<String>> {
    let stale = repo.lock_options().stale;
    let found = repo.lock_store().list(mine, true)?;
    let blocking = found.into_iter().find(|f| match &f.found {
        crate::repo::lock::Found::Lock(r) => r.operation == "backup" || !f.is_stale(stale),
        _ => true,
    });
    Ok(blocking.map(|f| f.path))
}

/// Writes this process's record to `migrate/state`, after making sure no other migrate
/// is running (a record of a live process) and, once it is written, that no backup began
/// meanwhile (a backup checks for the record after writing its own in `writers/`).
fn take_over(repo: &Repository, dry_run: bool, my_lock: Option<&str>) -> Result<()> {
    let store = repo.store();
    let key = repo.key();
    let obj = Object::Writer(MIGRATE_STATE);
    let existing = match store.get(MIGRATE_STATE) {
        Ok(b) => Some(b),
        Err(Error::NotFound(_)) => None,
        Err(e) => return Err(e),
    };
    if let Some(b) = &existing {
        let b = b.clone();
        let rec = open_as(key, Version::V2, obj, b, MIGRATE_STATE)
            .ok()
            .and_then(|b| serde_json::from_slice::<WriterRecord>(&b).ok());
        // A record of this very process is a run of ours that stopped: taken over.
        let me = WriterRecord::this_process();
        let mine = |r: &WriterRecord| r.hostname == me.hostname && r.pid == me.pid;
        let live = |r: &WriterRecord| !(r.gone() || mine(r));
        if let Some(r) = rec.filter(live) {
            return Err(Error::InvalidInput(format!(
                "{}: a migration is running (process {} on {}, since {}): let it finish",
                store.location(),
                r.pid,
                r.hostname,
                r.started
            )));
        }
    }
    if dry_run {
        return Ok(());
    }
    let json = serde_json::to_vec(&WriterRecord::this_process())
        .map_err(|e| Error::corrupt(MIGRATE_STATE, e.to_string()))?;
    let sealed = seal_as(key, Version::V2, obj, &json);
    match existing {
        // Taking over a stopped run's record.
        Some(_) => store.replace(MIGRATE_STATE, &sealed)?,
        // Put-if-absent: of two migrates started at once, one gets here first.
        None => store.put(MIGRATE_STATE, &sealed).map_err(|e| match e {
            Error::AlreadyExists(_) => Error::InvalidInput(format!(
                "{}: another migration began just now: let it finish",
                store.location()
            )),
            e => e,
        })?,
    }
    store.flush()?;
    if let Some(w) = first_record(repo, my_lock)? {
        if !repo.unfinished_migration() {
            store.delete(MIGRATE_STATE)?;
        }
        return Err(Error::InvalidInput(format!(
            "{}: a backup began ({w}): let it finish, then migrate",
            store.location(),
        )));
    }
    Ok(())
}

/// The files of the other format an unfinished migration left: index files,
/// dictionaries, snapshots, and tree packs no index lists.
fn leftovers(repo: &Repository) -> Result<Vec<String>> {
    let store = repo.store();
    let mut out: Vec<String> = repo.migration_leftovers().to_vec();
    out.extend(
        store
            .list("snapshots/")?
            .into_par_iter()
            .filter(|f| repo.migration_leftover_file(&f.path))
            .map(|f| f.path)
            .collect::<Vec<_>>(),
    );
    out.extend(
        store
            .list("data/")?
            .into_par_iter()
            .filter(|f| {
                file_id(&f.path).is_ok_and(|id| !repo.index().has_pack(&id))
                    && repo.migration_leftover_pack(&f.path, f.size)
            })
            .map(|f| f.path)
            .collect::<Vec<_>>(),
    );
    Ok(out)
}

/// Removes the [`leftovers`] (unless a dry run) and makes that durable; returns how many.
fn remove_leftovers(repo: &Repository, dry_run: bool) -> Result<u64> {
    let files = leftovers(repo)?;
    if !dry_run {
        for f in &files {
            repo.store().delete(f)?;
        }
        repo.store().flush()?;
    }
    Ok(files.len() as u64)
}

/// Removes `migrate/state` and reopens the repository without it.
fn finish(repo: &mut Repository) -> Result<()> {
    repo.store().delete(MIGRATE_STATE)?;
    repo.store().flush()?;
    repo.reload()
}
