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

pub use damage::{CheckError, CheckReport, DamageKind};

use crate::error::{Error, Result};
use crate::host::seen::{self, StateDir};
use crate::ops::check::damage::{
    new_state, rollback_error, short_ids, ChunkOutcome, ChunkResult, State, REPAIR_BOTH,
    REPAIR_INDEX, REPAIR_SNAPSHOTS,
};
use crate::ops::check::packs::{check_packs, verify_named_file};
use crate::repo::id::Id;
use crate::repo::tree::{AccountTree, ChunkRef, RootTree};
use crate::repo::{lock, Repository};
use crate::report::Failure;
use rayon::prelude::*;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
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
    let store = repo.store();
    let index = repo.index();

    // Index files, dictionaries and key files: the ones that did not open, and every
    // one's bytes against its name.
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
            match verify_named_file(repo, &st, &f.path, kind) {
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

    // Forget records (crate::ops::forget): one that does not open is named.
    warnings.extend(crate::repo::forgotten::forgotten(repo)?.1);

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
    let snaps = store.list("snapshots/")?;
    let missing = match &mut record {
        Some(r) => r.observe_in(repo, seen::ids_in(snaps.iter().map(|f| f.path.as_str()))),
        None => Vec::new(),
    };
    let loaded: Vec<Option<crate::repo::snapshot::Snapshot>> = snaps
        .par_iter()
        .map(|f| {
            verify_named_file(repo, &st, &f.path, DamageKind::Snapshot)
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

    // Trees: every blob each snapshot needs.
    let messages = AtomicU64::new(0);
    let chunks: Mutex<HashMap<ChunkRef, Arc<ChunkResult>>> = Mutex::new(HashMap::new());
    // (error, snapshot, what, messages)
    let affected: Mutex<Vec<(usize, String, String, u64)>> = Mutex::new(Vec::new());
    let attribute = |idx: usize, snap: &str, what: String, n: u64| {
        lock(&affected).push((idx, snap.to_string(), what, n));
    };
    // The errors that make blob `id` unreadable, if any.
    let blob_errors = |id: &Id| -> Option<usize> {
        if let Some(&i) = lock(&st.bad_blobs).get(id) {
            return Some(i);
        }
        if index.contains(id) {
            return None;
        }
        let i = st.group("unindexed".into(), || {
            CheckError::new(
                DamageKind::Unindexed,
                None,
                "blobs the snapshots need are not in the index",
            )
        });
        st.lose(i, id, None);
        Some(i)
    };
    // A tree blob that could not be read: its error, or a new one.
    let tree_error = |id: &Id, what: &str, e: Error| -> usize {
        blob_errors(id).unwrap_or_else(|| {
            let mut err = CheckError::new(DamageKind::Tree, None, format!("{what}: {e}"));
            err.blob = Some(id.to_hex());
            let i = st.push(err);
            st.lose(i, id, None);
            st.set_repair(i, REPAIR_SNAPSHOTS);
            i
        })
    };
    for s in &snapshots {
        let sid = s.id.short();
        let sname = format!("snapshot {sid}");
        let root: RootTree = match repo.read_tree(&s.root) {
            Ok(r) => r,
            Err(e) => {
                let i = tree_error(&s.root, &format!("root tree of {sname}"), e);
                attribute(i, &sid, format!("{sname} (all of it)"), s.summary.messages);
                continue;
            }
        };
        for acc in &root.accounts {
            let aname = format!("{sname} account {}", acc.name);
            let t: AccountTree = match repo.read_tree(&acc.tree) {
                Ok(t) => t,
                Err(e) => {
                    let i = tree_error(&acc.tree, &format!("tree of {aname}"), e);
                    attribute(i, &sid, format!("{aname} (all of it)"), acc.messages);
                    continue;
                }
            };
            t.folders.par_iter().for_each(|f| {
                let fname = format!("{aname} folder {}", f.name);
                for file in &f.files {
                    let what = || format!("{fname} file {}", String::from_utf8_lossy(&file.name));
                    // A large file's ids are in content lists: each read (and so checked).
                    let mut ids = file.content.clone();
                    for l in &file.lists {
                        match repo.read_tree::<crate::repo::tree::ContentList>(l) {
                            Ok(list) => ids.extend(list.ids),
                            Err(e) => attribute(tree_error(l, &what(), e), &sid, what(), 0),
                        }
                    }
                    for id in &ids {
                        if let Some(i) = blob_errors(id) {
                            attribute(i, &sid, what(), 0);
                        }
                    }
                }
                for c in &f.chunks {
                    let cached = lock(&chunks).get(c).cloned();
                    let outcome = match cached {
                        Some(o) => o,
                        None => {
                            let o = Arc::new(check_chunk(repo, &st, c, &blob_errors, &tree_error));
                            if let Ok(ok) = &*o {
                                messages.fetch_add(ok.messages, Relaxed);
                            }
                            lock(&chunks).insert(*c, o.clone());
                            o
                        }
                    };
                    match &*outcome {
                        Ok(o) => {
                            for (key, idxs) in &o.bad {
                                for &i in idxs {
                                    attribute(i, &sid, format!("{fname} message {key}"), 1);
                                }
                            }
                        }
                        Err(idxs) => {
                            for &i in idxs {
                                attribute(
                                    i,
                                    &sid,
                                    format!(
                                        "{fname} (a message list, of its {} messages)",
                                        f.messages
                                    ),
                                    0,
                                );
                            }
                        }
                    }
                }
            });
        }
    }

    let mut errors = std::mem::take(&mut *lock(&st.errors));
    let mut snaps_of: HashMap<usize, BTreeSet<String>> = HashMap::new();
    for (i, sid, what, n) in std::mem::take(&mut *lock(&affected)) {
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
    let mut errors: Vec<CheckError> = errors
        .into_iter()
        .enumerate()
        .filter(|(i, _)| !unused.contains(i))
        .map(|(_, e)| e)
        .collect();
    if let Some(mut record) = record {
        if !missing.is_empty() && opts.accept_removed {
            record.forget(&missing);
            warnings.push(format!(
                "{} snapshots this host saw are gone and accepted as removed on purpose: {}",
                missing.len(),
                short_ids(&missing)
            ));
        } else if !missing.is_empty() {
            errors.push(rollback_error(&missing));
        }
        record.save();
        for w in record.take_warnings() {
            // A forget record that does not open is named once.
            if !warnings.contains(&w) {
                warnings.push(w);
            }
        }
    }
    Ok(CheckReport {
        files_checked: st.files.load(Relaxed),
        bytes_checked: st.bytes.load(Relaxed),
        packs,
        blobs: index.len() as u64,
        blobs_verified: st.verified.load(Relaxed),
        dictionary_blobs: st.dict_blobs.load(Relaxed),
        snapshots: snapshots.len() as u64,
        messages: messages.load(Relaxed),
        errors,
        warnings,
        elapsed_secs: started.elapsed().as_secs_f64(),
    })
}

/// Reads one message chunk and finds its messages whose blobs cannot be read.
fn check_chunk(
    repo: &Repository,
    st: &State,
    c: &ChunkRef,
    blob_errors: &(dyn Fn(&Id) -> Option<usize> + Sync),
    tree_error: &(dyn Fn(&Id, &str, Error) -> usize + Sync),
) -> ChunkResult {
    let chunk = match repo.read_chunk(c) {
        Ok(ch) => ch,
        Err(e) => {
            let mut idxs: Vec<usize> = [c.entries, c.names]
                .iter()
                .filter_map(blob_errors)
                .collect();
            if idxs.is_empty() {
                idxs.push(tree_error(&c.entries, "message list", e));
            }
            idxs.dedup();
            return Err(idxs);
        }
    };
    let index = repo.index();
    let mut out = ChunkOutcome {
        messages: chunk.len() as u64,
        bad: Vec::new(),
    };
    for m in &chunk {
        let key = String::from_utf8_lossy(&m.key).to_string();
        let mut idxs: Vec<usize> = m.content.iter().filter_map(blob_errors).collect();
        if idxs.is_empty() {
            let raw: u64 = m
                .content
                .iter()
                .map(|id| index.get(id).map_or(0, |l| u64::from(l.raw_len)))
                .sum();
            if raw != m.size {
                idxs.push(st.group("size".into(), || {
                    let mut e = CheckError::new(
                        DamageKind::Size,
                        None,
                        "their blobs do not add up to their size",
                    );
                    e.repair = Some(REPAIR_SNAPSHOTS.into());
                    e
                }));
            }
        }
        idxs.sort_unstable();
        idxs.dedup();
        if !idxs.is_empty() {
            out.bad.push((key, idxs));
        }
    }
    Ok(out)
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
