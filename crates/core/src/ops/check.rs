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
//! record of the repository ([`crate::repo::seen`]): snapshots this host saw that are gone are a
//! rollback error until they are accepted as removed on purpose (`accept_removed`).

use crate::error::{Error, Result};
use crate::repo::compress::{self, Codec};
use crate::repo::id::Id;
use crate::repo::index::Location;
use crate::repo::pack::{self, PackEntry};
use crate::repo::seen::{self, StateDir};
use crate::repo::tree::{AccountTree, ChunkRef, RootTree};
use crate::repo::{file_id, lock, Repository};
use crate::report::Failure;
use rayon::prelude::*;
use serde::Serialize;
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
    /// record of the repository and recorded there ([`crate::repo::seen`]). `None`: no record is
    /// read or kept.
    pub state: Option<StateDir>,
    /// Snapshots the record has and `snapshots/` no longer has were removed on purpose
    /// (on another host): drop them from the record instead of reporting a rollback.
    pub accept_removed: bool,
}

/// What a [`CheckError`] is about.
#[derive(Clone, Copy, Debug, Serialize, PartialEq, Eq, Hash)]
#[serde(rename_all = "lowercase")]
pub enum DamageKind {
    /// An index file that is unreadable or damaged, or entries that disagree with a pack.
    Index,
    /// A pack that is missing, damaged, or holds blobs that do not verify.
    Pack,
    /// A dictionary file that is unreadable or damaged, or one that blobs need and that
    /// is missing.
    Dictionary,
    /// A file in `snapshots/` that cannot be read.
    Snapshot,
    /// Blobs that snapshots need and that no index lists.
    Unindexed,
    /// A tree blob that is there but cannot be decoded.
    Tree,
    /// Messages whose blobs do not add up to their size.
    Size,
    /// A damaged key file (the repository opened with another).
    Key,
    /// Snapshots this host saw in the repository that are gone from `snapshots/`: deleted,
    /// or an older copy of the repository put back.
    Rollback,
}

/// One problem found, with what it costs.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct CheckError {
    pub kind: DamageKind,
    /// The repository file concerned, if any.
    pub file: Option<String>,
    /// The one blob concerned, if the problem is about one blob.
    pub blob: Option<String>,
    pub error: String,
    /// Blobs that cannot be read because of it.
    pub blobs: u64,
    /// Snapshots (short ids) with content that cannot be restored because of it.
    pub snapshots: Vec<String>,
    /// Messages (counted once per snapshot) that cannot be restored because of it.
    pub messages: u64,
    /// Every message, folder file or tree concerned: `snapshot <id> account <a> folder <f>
    /// message <key>` (the text output shows a few).
    pub affected: Vec<String>,
    /// Ids of the blobs concerned.
    pub blob_ids: Vec<String>,
    /// Per-blob details (`blob <id>: content does not match its id`).
    pub details: Vec<String>,
    /// What to run about it.
    pub repair: Option<String>,
}

impl CheckError {
    fn new(kind: DamageKind, file: Option<&str>, error: impl std::fmt::Display) -> CheckError {
        let error = error.to_string();
        // The file is its own field: an error that names it first says it once.
        let error = match file.and_then(|f| error.strip_prefix(f)?.strip_prefix(": ")) {
            Some(rest) => rest.to_string(),
            None => error,
        };
        CheckError {
            kind,
            file: file.map(str::to_string),
            blob: None,
            error,
            blobs: 0,
            snapshots: Vec::new(),
            messages: 0,
            affected: Vec::new(),
            blob_ids: Vec::new(),
            details: Vec::new(),
            repair: None,
        }
    }
}

#[derive(Clone, Debug, Serialize, Default)]
pub struct CheckReport {
    pub files_checked: u64,
    pub bytes_checked: u64,
    pub packs: u64,
    pub blobs: u64,
    pub blobs_verified: u64,
    /// Blobs compressed with a dictionary whose dictionary was found.
    pub dictionary_blobs: u64,
    pub snapshots: u64,
    pub messages: u64,
    pub errors: Vec<CheckError>,
    /// Things that are not damage: packs a killed backup left, unreadable-but-unused files.
    pub warnings: Vec<String>,
    pub elapsed_secs: f64,
}

impl CheckReport {
    pub fn ok(&self) -> bool {
        self.errors.is_empty()
    }
}

/// What a seen message chunk turned out to hold, kept so that every snapshot sharing the
/// chunk is told what it loses.
struct ChunkOutcome {
    messages: u64,
    /// Messages with content that cannot be read: key and the errors concerned.
    bad: Vec<(String, Vec<usize>)>,
}

/// A chunk's outcome, or the errors that make it unreadable.
type ChunkResult = Result<ChunkOutcome, Vec<usize>>;

struct State {
    errors: Mutex<Vec<CheckError>>,
    /// Grouped errors by key (`dict:<id>`, `pack:<path>`, ...).
    groups: Mutex<HashMap<String, usize>>,
    /// Blobs that cannot be read back, with the error they belong to.
    bad_blobs: Mutex<HashMap<Id, usize>>,
    files: AtomicU64,
    bytes: AtomicU64,
    verified: AtomicU64,
    dict_blobs: AtomicU64,
}

impl State {
    fn push(&self, e: CheckError) -> usize {
        let mut errs = lock(&self.errors);
        errs.push(e);
        errs.len() - 1
    }

    fn error(&self, kind: DamageKind, file: Option<&str>, error: impl std::fmt::Display) -> usize {
        self.push(CheckError::new(kind, file, error))
    }

    /// The error of group `key`, made by `make` the first time.
    fn group(&self, key: String, make: impl FnOnce() -> CheckError) -> usize {
        let mut g = lock(&self.groups);
        if let Some(&i) = g.get(&key) {
            return i;
        }
        let i = self.push(make());
        g.insert(key, i);
        i
    }

    /// Counts `blob` as lost to error `idx`, with an optional detail.
    fn lose(&self, idx: usize, blob: &Id, detail: Option<String>) {
        if lock(&self.bad_blobs).insert(*blob, idx).is_some() {
            return;
        }
        let mut errs = lock(&self.errors);
        let e = &mut errs[idx];
        e.blobs += 1;
        e.blob_ids.push(blob.to_hex());
        if let Some(d) = detail {
            e.details.push(d);
        }
    }

    fn set_repair(&self, idx: usize, repair: &str) {
        lock(&self.errors)[idx].repair = Some(repair.to_string());
    }
}

const REPAIR_INDEX: &str = "mailvault repair index";
const REPAIR_SNAPSHOTS: &str = "mailvault repair snapshots";
const REPAIR_BOTH: &str = "mailvault repair index, then mailvault repair snapshots";
const ACCEPT_REMOVED: &str = "mailvault check --accept-removed";

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

fn new_state() -> State {
    State {
        errors: Mutex::new(Vec::new()),
        groups: Mutex::new(HashMap::new()),
        bad_blobs: Mutex::new(HashMap::new()),
        files: AtomicU64::new(0),
        bytes: AtomicU64::new(0),
        verified: AtomicU64::new(0),
        dict_blobs: AtomicU64::new(0),
    }
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
    warnings.extend(crate::ops::forget::forgotten(repo)?.1);

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

/// The error for snapshots this host saw that are gone.
fn rollback_error(missing: &[Id]) -> CheckError {
    let mut e = CheckError::new(
        DamageKind::Rollback,
        None,
        format!(
            "rollback: {} snapshots this host saw in the repository are gone from snapshots/ ({}): deleted, or an older copy of the repository put back; if they were removed on purpose (on another host), accept that with `{ACCEPT_REMOVED}`",
            missing.len(),
            short_ids(missing)
        ),
    );
    e.affected = missing.iter().map(|id| format!("snapshot {id}")).collect();
    e.repair = Some(ACCEPT_REMOVED.into());
    e
}

/// A few short ids, for a message (`--json` has them all).
fn short_ids(ids: &[Id]) -> String {
    const SHOWN: usize = 5;
    let mut s: Vec<String> = ids.iter().take(SHOWN).map(Id::short).collect();
    if ids.len() > SHOWN {
        s.push(format!("and {} more", ids.len() - SHOWN));
    }
    s.join(", ")
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

/// Checks every pack the index names and every pack in `data/`; fills the state's bad
/// blobs. Returns the number of files in `data/`.
fn check_packs(
    repo: &Repository,
    st: &State,
    read_data: bool,
    warnings: &mut Vec<String>,
) -> Result<u64> {
    let store = repo.store();
    let index = repo.index();
    let mut by_pack: HashMap<Id, Vec<(Id, Location)>> = HashMap::new();
    for (id, loc) in index.iter() {
        by_pack
            .entry(index.pack_id(loc.pack))
            .or_default()
            .push((*id, *loc));
    }
    let packs = store.list("data/")?;
    let present: HashSet<Id> = packs.iter().filter_map(|p| file_id(&p.path).ok()).collect();
    for pack_id in index.packs() {
        if !present.contains(pack_id) {
            let path = pack::pack_path(pack_id);
            let blobs = by_pack.get(pack_id).map(Vec::as_slice).unwrap_or_default();
            let i = st.error(
                DamageKind::Pack,
                Some(&path),
                "pack is missing from the repository",
            );
            st.set_repair(i, REPAIR_BOTH);
            for (id, _) in blobs {
                st.lose(i, id, None);
            }
        }
    }
    let unindexed: Vec<&str> = packs
        .iter()
        .filter(|p| {
            file_id(&p.path).is_ok_and(|id| {
                !index.has_pack(&id) && !repo.migration_leftover_pack(&p.path, p.size)
            })
        })
        .map(|p| p.path.as_str())
        .collect();
    // A file in data/ that no index lists is what a killed backup leaves, or something that
    // does not belong: it is read and verified (as a backup would before reusing it), so
    // the advice fits what it is.
    let verdicts: Vec<String> = unindexed
        .par_iter()
        .map(|path| match repo.verify_pack(path, &[repo.version()]) {
            Ok(v) if v.name_matches && v.bad.is_empty() => format!(
                "{path}: pack not in any index (left by an interrupted backup or prune; the next backup reuses it when a killed backup left its lock, `mailvault prune` deletes it, or run `{REPAIR_INDEX}` to index it now)"
            ),
            verdict => {
                let why = match verdict {
                    Ok(v) if !v.name_matches => "its bytes do not match its name".to_string(),
                    Ok(v) => v.bad.first().map_or_else(String::new, |(_, e)| e.to_string()),
                    Err(e) => e.to_string(),
                };
                format!(
                    "{path}: not a pack of this repository, and no index lists it ({why}): it was copied into data/ or damaged, not left by a backup; no snapshot needs it. `mailvault prune` deletes it: move it out of the repository first if it is yours"
                )
            }
        })
        .collect();
    warnings.extend(verdicts);
    for p in &packs {
        if file_id(&p.path).is_err() {
            warnings.push(format!(
                "{}: not a repository file (its name is not a pack id): it does not belong in data/; move it out of the repository",
                p.path
            ));
        }
    }
    packs.par_iter().for_each(|p| {
        if let Ok(id) = file_id(&p.path) {
            if index.has_pack(&id) {
                check_pack(
                    repo,
                    st,
                    &p.path,
                    &id,
                    by_pack.get(&id).map(Vec::as_slice).unwrap_or_default(),
                    read_data,
                );
            }
        }
    });
    Ok(packs.len() as u64)
}

/// Reads a content-named file and checks it against its name
/// ([`Repository::verify_name`]): its bytes, or `None` for a leftover of an unfinished
/// migration (a file of the other format, skipped); on failure the number of the error
/// recorded.
fn verify_named_file(
    repo: &Repository,
    st: &State,
    path: &str,
    kind: DamageKind,
) -> std::result::Result<Option<Vec<u8>>, usize> {
    let data = match repo.store().get(path) {
        Ok(d) => d,
        Err(e) => return Err(st.error(kind, Some(path), e)),
    };
    let verdict = repo.verify_name(path, &data);
    if verdict.as_ref().is_err_and(|e| repo.migration_leftover(e)) {
        return Ok(None);
    }
    st.files.fetch_add(1, Relaxed);
    st.bytes.fetch_add(data.len() as u64, Relaxed);
    match verdict {
        Ok(()) => Ok(Some(data)),
        Err(e) => Err(st.error(kind, Some(path), e)),
    }
}

fn check_pack(
    repo: &Repository,
    st: &State,
    path: &str,
    id: &Id,
    indexed: &[(Id, Location)],
    read_data: bool,
) {
    let lose_all = |idx: usize| {
        for (b, _) in indexed {
            st.lose(idx, b, None);
        }
    };
    let (bytes, damaged) = match verify_named_file(repo, st, path, DamageKind::Pack) {
        Ok(Some(b)) => (b, None),
        // Packs are named by their bytes' hash whatever their format: never a leftover.
        Ok(None) => return,
        Err(idx) => match repo.store().get(path) {
            // Damaged: find out which of its blobs are lost by reading each.
            Ok(b) => (b, Some(idx)),
            Err(_) => return lose_all(idx),
        },
    };
    if let Some(i) = damaged {
        st.set_repair(i, REPAIR_BOTH);
    }
    let (version, header): (_, Vec<PackEntry>) =
        match pack::header_of(&bytes, repo.key(), path, repo.pack_versions()) {
            Ok(h) => h,
            Err(e) => {
                let idx = damaged.unwrap_or_else(|| st.error(DamageKind::Pack, Some(path), e));
                st.set_repair(idx, REPAIR_BOTH);
                return lose_all(idx);
            }
        };
    // The index says which format the pack is in; its header must agree.
    if let Some((_, loc)) = indexed.first() {
        let listed = repo.index().pack_version(loc.pack);
        if listed != version {
            let idx = damaged.unwrap_or_else(|| {
                st.error(
                    DamageKind::Index,
                    Some(path),
                    format!("the index lists it as a format-{listed} pack; it is format {version}"),
                )
            });
            st.set_repair(idx, REPAIR_INDEX);
            return lose_all(idx);
        }
    }
    let in_header: HashMap<Id, &PackEntry> = header.iter().map(|e| (e.id, e)).collect();
    let group = |what: &str, error: &str, kind: DamageKind, repair: &str| {
        damaged.unwrap_or_else(|| {
            st.group(format!("{what}:{path}"), || {
                let mut e = CheckError::new(kind, Some(path), error);
                e.repair = Some(repair.into());
                e
            })
        })
    };
    for (blob, loc) in indexed {
        let ok = in_header.get(blob).is_some_and(|e| {
            e.offset == loc.offset
                && e.stored_len == loc.stored_len
                && e.raw_len == loc.raw_len
                && e.codec == loc.codec
        });
        if !ok {
            let i = group(
                "header",
                &format!(
                    "index entries do not match the header of pack {}",
                    id.short()
                ),
                DamageKind::Index,
                REPAIR_INDEX,
            );
            st.lose(
                i,
                blob,
                Some(format!(
                    "blob {}: index entry does not match the pack header",
                    blob.short()
                )),
            );
        }
    }
    let sealed_of = |loc: &Location| {
        let start = loc.offset as usize;
        bytes.get(start..start + loc.stored_len as usize)
    };
    // Blobs compressed with a dictionary: the dictionary their frame names must be there.
    // Their first bytes are decrypted without the tag check, which the pack's hash makes
    // unnecessary (and which `read_data` does anyway).
    for (blob, loc) in indexed {
        if loc.codec != Codec::ZstdDict || damaged.is_some() {
            continue;
        }
        let Some(sealed) = sealed_of(loc) else {
            continue;
        };
        let what = format!("blob {} in {path}", blob.short());
        let dict = repo
            .key()
            .peek_unauthenticated(sealed, compress::FRAME_HEADER_MAX, &what)
            .ok()
            .and_then(|start| compress::frame_dictionary(&start));
        match dict {
            Some(d) if repo.dictionaries().has(d) => {
                st.dict_blobs.fetch_add(1, Relaxed);
            }
            Some(d) => {
                let i = st.group(format!("dict:{d:08x}"), || {
                    let mut e = CheckError::new(
                        DamageKind::Dictionary,
                        None,
                        format!("zstd dictionary {d:08x} is missing from dicts/ (no dictionary file holds it)"),
                    );
                    e.repair = Some(REPAIR_SNAPSHOTS.into());
                    e
                });
                st.lose(i, blob, None);
            }
            None => {
                let i = group(
                    "nodict",
                    "blobs stored as dictionary-compressed name no dictionary",
                    DamageKind::Pack,
                    REPAIR_BOTH,
                );
                st.lose(
                    i,
                    blob,
                    Some(format!("{what}: zstd frame names no dictionary")),
                );
            }
        }
    }
    if read_data || damaged.is_some() {
        let bad_already: HashSet<Id> = {
            let bad = lock(&st.bad_blobs);
            indexed
                .iter()
                .filter(|(b, _)| bad.contains_key(b))
                .map(|(b, _)| *b)
                .collect()
        };
        for (blob, loc) in indexed {
            if bad_already.contains(blob) {
                continue;
            }
            let Some(sealed) = sealed_of(loc) else {
                let i = group(
                    "blobs",
                    "blobs do not verify",
                    DamageKind::Pack,
                    REPAIR_BOTH,
                );
                st.lose(
                    i,
                    blob,
                    Some(format!("blob {}: past the end of the pack", blob.short())),
                );
                continue;
            };
            match repo.decode_blob(blob, loc, version, sealed, path) {
                Ok(_) => {
                    st.verified.fetch_add(1, Relaxed);
                }
                Err(e) => {
                    let i = group(
                        "blobs",
                        "blobs do not verify",
                        DamageKind::Pack,
                        REPAIR_BOTH,
                    );
                    st.lose(i, blob, Some(e.to_string()));
                }
            }
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
