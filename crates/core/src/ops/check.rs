//! Verification of a repository.
//!
//! `check` reads every repository file and compares it with its name (packs, index files,
//! dictionaries, snapshots and key files are named by the BLAKE3 of their bytes), so any
//! flipped byte anywhere is found and the file named; it opens every pack header and
//! compares it with the index; for every blob compressed with a dictionary it reads the
//! dictionary id from the blob's zstd frame header and checks that the dictionary is
//! there; it opens every snapshot and walks every tree, so every blob a snapshot needs is
//! known to be in the index, in a pack that is there and whole. With `read_data` it also
//! decrypts, decompresses and verifies every blob against its id (so does plain check for
//! the blobs of a pack whose bytes do not match its name: to tell which of them are lost).
//!
//! Problems are grouped: one error per damaged or missing file, per missing dictionary,
//! and one for all blobs missing from the index, each with how many blobs it costs and
//! which snapshots and messages lose content (all of them in the report, a few in the
//! CLI's text), and the `mailvault repair` command that deals with it.
//!
//! With a state directory it also compares the snapshots in `snapshots/` with this host's
//! record of the repository ([`crate::host::seen`]): snapshots this host saw that are gone are a
//! rollback error until they are accepted as removed on purpose (`accept_removed`).

mod damage;
mod packs;
mod trees;

pub use damage::{CheckError, CheckReport, DamageKind};

use crate::error::{Error, Result};
use crate::host::seen::{self, StateDir};
use crate::ops::check::damage::{
    new_state, rollback_error, short_ids, State, REPAIR_BOTH, REPAIR_INDEX, REPAIR_SNAPSHOTS,
};
use crate::ops::check::packs::{check_packs, verify_named_file};
use crate::ops::check::trees::{Affected, Walk};
use crate::repo::id::Id;
use crate::repo::snapshot::Snapshot;
use crate::repo::{lock, Repository};
use crate::report::Failure;
use crate::store::ObjectInfo;
use crate::store::Store;
use rayon::prelude::*;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::atomic::Ordering::Relaxed;
use std::time::Instant;

#[derive(Clone, Debug, Default)]
pub struct CheckOptions {
    /// Decrypt and verify every blob too.
    pub read_data: bool,
    /// Worker threads; 0 means one per core.
    pub jobs: usize,
    /// This host's state directory: the snapshots in `snapshots/` are compared with its
    /// record of the repository and recorded there ([`crate::host::seen`]). `None`: no record is
    /// read or kept.
    pub state: Option<StateDir>,
    /// Snapshots the record has and `snapshots/` no longer has were removed on purpose
    /// (on another host): drop them from the record instead of reporting a rollback.
    pub accept_removed: bool,
}

/// Checks the repository.
pub fn check(repo: &Repository, opts: &CheckOptions) -> Result<CheckReport> {
    let started = Instant::now();
    // A shared lock: no prune deletes a pack while it is checked.
    let _lock = repo.lock_for_reading("check")?;
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(opts.jobs)
        .build()
        .map_err(|e| {
            Error::InvalidInput(format!("cannot start {} worker threads: {e}", opts.jobs))
        })?;
    pool.install(|| check_inner(repo, opts, started))
}

/// The blobs that cannot be read back (missing, damaged, in a missing pack, needing a
/// missing dictionary; with `read_data`, failing verification), as `check` finds them,
/// without walking the snapshots: for `repair snapshots`.
pub(crate) fn unreadable_blobs(repo: &Repository, read_data: bool) -> Result<HashSet<Id>> {
    let st = new_state();
    let mut warnings = Vec::new();
    check_packs(repo, &st, read_data, &mut warnings)?;
    let bad = lock(&st.bad_blobs).keys().copied().collect();
    Ok(bad)
}

fn check_inner(repo: &Repository, opts: &CheckOptions, started: Instant) -> Result<CheckReport> {
    let st = new_state();
    let mut warnings = Vec::new();
    check_named(repo, &st, &mut warnings)?;
    let packs = check_packs(repo, &st, opts.read_data, &mut warnings)?;
    if repo.unfinished_migration() {
        warnings.push(format!(
            "{}; until then files of the other format are its leftovers and are skipped",
            crate::repo::UNFINISHED_MIGRATION
        ));
    }

    // Snapshots: one error per file that cannot be read. This host's record is loaded
    // before the listing, so that a snapshot written meanwhile is not taken for a missing one.
    let mut record = opts.state.as_ref().map(|s| seen::Record::of(s, repo));
    let snaps = repo.store().list("snapshots/")?;
    let missing = match &mut record {
        Some(r) => r.observe_in(repo, seen::ids_in(snaps.iter().map(|f| f.path.as_str()))),
        None => Vec::new(),
    };
    let snapshots = load_snapshots(repo, &st, &snaps);

    // Trees: every blob each snapshot needs.
    let walk = Walk::new(repo, &st);
    for s in &snapshots {
        walk.snapshot(s);
    }
    let (messages, affected) = walk.finish();
    if let Some(why) = repo.index().damage() {
        st.error(
            DamageKind::Index,
            None,
            format!("the index's local table could not be read ({why}): its blobs looked absent to this check, so run it again (it reads the index files)"),
        );
    }

    let search = check_search(repo, &st, &mut warnings)?;
    let object_lock = check_object_lock(repo, &mut warnings);
    let mut errors = settle_errors(&st, affected, &mut warnings);
    if let Some(record) = record {
        settle_record(
            record,
            &missing,
            opts.accept_removed,
            &mut errors,
            &mut warnings,
        );
    }
    Ok(CheckReport {
        files_checked: st.files.load(Relaxed),
        bytes_checked: st.bytes.load(Relaxed),
        packs,
        blobs: repo.index().len() as u64,
        blobs_verified: st.verified.load(Relaxed),
        dictionary_blobs: st.dict_blobs.load(Relaxed),
        snapshots: snapshots.len() as u64,
        messages,
        errors,
        warnings,
        search,
        object_lock,
        elapsed_secs: started.elapsed().as_secs_f64(),
    })
}

/// On a bucket with Object Lock, the retention of what the repository keeps: an object
/// nothing protects any more is a warning (the next prune on the maintenance host gives
/// it the whole period again). Not asked on an append-only host, whose credentials need
/// not read retentions; a failure to ask is a warning, not the check's end.
fn check_object_lock(
    repo: &Repository,
    warnings: &mut Vec<String>,
) -> Option<crate::ops::object_lock::LockReport> {
    if repo.append_only() {
        return None;
    }
    let asked = repo.object_lock().and_then(|l| match l {
        Some((lock, policy)) => {
            crate::ops::object_lock::audit(repo.store(), lock, policy).map(Some)
        }
        None => Ok(None),
    });
    let rep = match asked {
        Ok(r) => r?,
        Err(e) => {
            warnings.push(format!(
                "object lock: the retentions could not be read: {e}"
            ));
            return None;
        }
    };
    if !rep.unprotected.is_empty() {
        let shown: Vec<&str> = rep.unprotected.iter().take(5).map(String::as_str).collect();
        warnings.push(format!(
            "object lock: {} objects the repository keeps have no retention left ({}{}): run `mailvault prune` on the maintenance host, which gives them {} days again",
            rep.unprotected.len(),
            shown.join(", "),
            if rep.unprotected.len() > 5 { ", …" } else { "" },
            rep.days
        ));
    }
    Some(rep)
}

/// The search index: a split that does not verify is an error (`repair index` sets it
/// aside); messages not indexed and indexed contents no snapshot holds are warnings.
fn check_search(
    repo: &Repository,
    st: &State,
    warnings: &mut Vec<String>,
) -> Result<crate::search::verify::SplitsChecked> {
    let r = crate::search::verify::check_splits(repo)?;
    for f in &r.damaged {
        let i = st.error(DamageKind::Search, Some(&f.item), &f.error);
        st.set_repair(i, REPAIR_INDEX);
    }
    if r.not_indexed > 0 {
        warnings.push(format!(
            "search index: {} messages of the snapshots are not indexed: run `mailvault index`",
            r.not_indexed
        ));
    }
    if r.dead > 0 {
        warnings.push(format!(
            "search index: {} indexed messages are held by no snapshot: the next prune drops them",
            r.dead
        ));
    }
    Ok(r)
}

/// Index files, dictionaries and key files: the ones that did not open, and every one's
/// bytes against its name; writer records and forget records that do not open are named.
fn check_named(repo: &Repository, st: &State, warnings: &mut Vec<String>) -> Result<()> {
    let store = repo.store();
    let unreadable: HashSet<&str> = repo
        .index_errors()
        .iter()
        .chain(repo.dictionary_errors())
        .map(|(p, _)| p.as_str())
        .collect();
    for (path, e) in repo.index_errors() {
        let i = st.error(DamageKind::Index, Some(path), e);
        st.set_repair(i, REPAIR_INDEX);
    }
    for (path, e) in repo.dictionary_errors() {
        let i = st.error(DamageKind::Dictionary, Some(path), e);
        st.set_repair(i, REPAIR_SNAPSHOTS);
    }
    let mut named = store.list("index/")?;
    named.extend(store.list("dicts/")?);
    named.extend(store.list("keys/")?);
    named.par_iter().for_each(|f| {
        let kind = if f.path.starts_with("index/") {
            DamageKind::Index
        } else if f.path.starts_with("dicts/") {
            DamageKind::Dictionary
        } else {
            DamageKind::Key
        };
        if !unreadable.contains(f.path.as_str()) {
            match verify_named_file(repo, st, &f.path, kind) {
                Err(i) if kind == DamageKind::Index => st.set_repair(i, REPAIR_INDEX),
                // A key file must also be one this mailvault can use.
                Ok(Some(bytes)) if kind == DamageKind::Key => {
                    if let Err(e) = crate::repo::crypto::KeyFile::parse(&bytes, &f.path) {
                        st.error(kind, Some(&f.path), e);
                    }
                }
                _ => {}
            }
        }
    });
    for w in store.list("writers/")? {
        if let Err(e) = repo.open_writer_record(&w.path) {
            warnings.push(format!(
                "{}: not a writer record ({e}): backups ignore it; remove it",
                w.path
            ));
        }
    }
    // Forget records (crate::repo::forgotten): one that does not open is named.
    warnings.extend(crate::repo::forgotten::forgotten(repo)?.1);
    // Audit records (crate::repo::audit): each opened; one that does not is named.
    warnings.extend(crate::repo::audit::records(repo)?.1);
    Ok(())
}

/// The snapshots of `snaps` that open, oldest first; an error for each that does not.
fn load_snapshots(repo: &Repository, st: &State, snaps: &[ObjectInfo]) -> Vec<Snapshot> {
    let loaded: Vec<Option<Snapshot>> = snaps
        .par_iter()
        .map(|f| {
            verify_named_file(repo, st, &f.path, DamageKind::Snapshot)
                .map_err(|i| st.set_repair(i, REPAIR_SNAPSHOTS))
                .ok()??;
            match repo.snapshots_one(&f.path) {
                Ok(s) => Some(s),
                Err(e) => {
                    let i = st.error(DamageKind::Snapshot, Some(&f.path), e);
                    st.set_repair(i, REPAIR_SNAPSHOTS);
                    None
                }
            }
        })
        .collect();
    let mut snapshots: Vec<_> = loaded.into_iter().flatten().collect();
    snapshots.sort_by_key(|s| (s.time, s.time_nanos, s.id));
    snapshots
}

/// The errors found, each told what it affects (`affected`: error, snapshot, what,
/// messages) and with its final wording; a missing dictionary no snapshot needs becomes
/// a warning.
fn settle_errors(
    st: &State,
    affected: Vec<Affected>,
    warnings: &mut Vec<String>,
) -> Vec<CheckError> {
    let mut errors = std::mem::take(&mut *lock(&st.errors));
    let mut snaps_of: HashMap<usize, BTreeSet<String>> = HashMap::new();
    for (i, sid, what, n) in affected {
        snaps_of.entry(i).or_default().insert(sid);
        errors[i].messages += n;
        errors[i].affected.push(what);
    }
    // A missing dictionary that no snapshot needs (their messages dropped by a repair)
    // costs nothing restorable: a warning.
    let mut unused = HashSet::new();
    for (i, e) in errors.iter().enumerate() {
        if e.kind == DamageKind::Dictionary && e.file.is_none() && !snaps_of.contains_key(&i) {
            warnings.push(format!(
                "{} ({} blobs need it; no snapshot needs them)",
                e.error, e.blobs
            ));
            unused.insert(i);
        }
    }
    let unindexed_packs = warnings.iter().any(|w| w.contains("not in any index"));
    for (i, e) in errors.iter_mut().enumerate() {
        e.affected.sort();
        e.affected.dedup();
        e.details.sort();
        e.snapshots = snaps_of
            .remove(&i)
            .unwrap_or_default()
            .into_iter()
            .collect();
        if e.kind == DamageKind::Unindexed {
            e.error = format!("{} blobs the snapshots need are not in the index", e.blobs);
            e.repair = Some(
                if unindexed_packs {
                    REPAIR_BOTH
                } else {
                    REPAIR_SNAPSHOTS
                }
                .into(),
            );
        }
        if e.kind == DamageKind::Size {
            e.error = format!("{} messages: {}", e.affected.len(), e.error);
        }
    }
    errors
        .into_iter()
        .enumerate()
        .filter(|(i, _)| !unused.contains(i))
        .map(|(_, e)| e)
        .collect()
}

/// Settles this host's record: snapshots it saw that are gone are a rollback error, or
/// with `accept_removed` dropped from it; the record is saved and its warnings added.
fn settle_record(
    mut record: seen::Record,
    missing: &[Id],
    accept_removed: bool,
    errors: &mut Vec<CheckError>,
    warnings: &mut Vec<String>,
) {
    if !missing.is_empty() && accept_removed {
        record.forget(missing);
        warnings.push(format!(
            "{} snapshots this host saw are gone and accepted as removed on purpose: {}",
            missing.len(),
            short_ids(missing)
        ));
    } else if !missing.is_empty() {
        errors.push(rollback_error(missing));
    }
    record.save();
    for w in record.take_warnings() {
        // A forget record that does not open is named once.
        if !warnings.contains(&w) {
            warnings.push(w);
        }
    }
}

/// Turns a report's errors into failures for a generic listing.
pub fn failures(r: &CheckReport) -> Vec<Failure> {
    r.errors
        .iter()
        .map(|e| {
            Failure::new(
                e.file
                    .clone()
                    .or_else(|| e.blob.clone())
                    .unwrap_or_default(),
                &e.error,
            )
        })
        .collect()
}
