//! What `check` finds: the damage kinds, the grouped errors and the report, and the
//! state the checks of packs and trees fill while they run.

use crate::repo::id::Id;
use crate::repo::lock;
use serde::Serialize;
use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::Mutex;

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
    /// A split of the search index (`search/`) that cannot be read or verified.
    Search,
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
    pub(crate) fn new(
        kind: DamageKind,
        file: Option<&str>,
        error: impl std::fmt::Display,
    ) -> CheckError {
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
    /// The search index's splits and their coverage of the snapshots.
    pub search: crate::search::verify::SplitsChecked,
    /// On a bucket with Object Lock: the retentions asked, and what nothing protects.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub object_lock: Option<crate::ops::object_lock::LockReport>,
    pub elapsed_secs: f64,
}

impl CheckReport {
    pub fn ok(&self) -> bool {
        self.errors.is_empty()
    }
}

/// What a seen message chunk turned out to hold, kept so that every snapshot sharing the
/// chunk is told what it loses.
pub(crate) struct ChunkOutcome {
    pub(crate) messages: u64,
    /// Messages with content that cannot be read: key and the errors concerned.
    pub(crate) bad: Vec<(String, Vec<usize>)>,
}

/// A chunk's outcome, or the errors that make it unreadable.
pub(crate) type ChunkResult = Result<ChunkOutcome, Vec<usize>>;

pub(crate) struct State {
    pub(crate) errors: Mutex<Vec<CheckError>>,
    /// Grouped errors by key (`dict:<id>`, `pack:<path>`, ...).
    pub(crate) groups: Mutex<HashMap<String, usize>>,
    /// Blobs that cannot be read back, with the error they belong to.
    pub(crate) bad_blobs: Mutex<HashMap<Id, usize>>,
    pub(crate) files: AtomicU64,
    pub(crate) bytes: AtomicU64,
    pub(crate) verified: AtomicU64,
    pub(crate) dict_blobs: AtomicU64,
}

impl State {
    pub(crate) fn push(&self, e: CheckError) -> usize {
        let mut errs = lock(&self.errors);
        errs.push(e);
        errs.len() - 1
    }

    pub(crate) fn error(
        &self,
        kind: DamageKind,
        file: Option<&str>,
        error: impl std::fmt::Display,
    ) -> usize {
        self.push(CheckError::new(kind, file, error))
    }

    /// The error of group `key`, made by `make` the first time.
    pub(crate) fn group(&self, key: String, make: impl FnOnce() -> CheckError) -> usize {
        let mut g = lock(&self.groups);
        if let Some(&i) = g.get(&key) {
            return i;
        }
        let i = self.push(make());
        g.insert(key, i);
        i
    }

    /// Counts `blob` as lost to error `idx`, with an optional detail.
    pub(crate) fn lose(&self, idx: usize, blob: &Id, detail: Option<String>) {
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

    pub(crate) fn set_repair(&self, idx: usize, repair: &str) {
        lock(&self.errors)[idx].repair = Some(repair.to_string());
    }
}

pub(crate) const REPAIR_INDEX: &str = "mailvault repair index";
pub(crate) const REPAIR_SNAPSHOTS: &str = "mailvault repair snapshots";
pub(crate) const REPAIR_BOTH: &str = "mailvault repair index, then mailvault repair snapshots";
pub(crate) const ACCEPT_REMOVED: &str = "mailvault check --accept-removed";

pub(crate) fn new_state() -> State {
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

/// The error for snapshots this host saw that are gone.
pub(crate) fn rollback_error(missing: &[Id]) -> CheckError {
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
pub(crate) fn short_ids(ids: &[Id]) -> String {
    const SHOWN: usize = 5;
    let mut s: Vec<String> = ids.iter().take(SHOWN).map(Id::short).collect();
    if ids.len() > SHOWN {
        s.push(format!("and {} more", ids.len() - SHOWN));
    }
    s.join(", ")
}
