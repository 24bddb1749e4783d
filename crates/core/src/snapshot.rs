//! Snapshots: one sealed JSON object per backup. Format 1 names it by the BLAKE3 of its
//! file, format 2 by the keyed BLAKE3 of its JSON, bound into its seal (`crate::repo`).

use crate::error::{Error, Result};
use crate::format::Version;
use crate::id::Id;
use serde::{Deserialize, Serialize};

/// A finished backup.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Snapshot {
    /// Set from the file name when loaded; not stored.
    #[serde(skip)]
    pub id: Id,
    /// The repository's format number (set when saved).
    pub version: u32,
    /// Unix seconds when the backup started.
    pub time: i64,
    /// Nanoseconds within that second, so two backups in one second keep their order.
    #[serde(default)]
    pub time_nanos: u32,
    pub hostname: String,
    /// The source as the user gave it: `maildir:/var/vmail`.
    pub source: String,
    #[serde(default)]
    pub tags: Vec<String>,
    /// The snapshot used to skip unchanged messages, if any.
    pub parent: Option<Id>,
    pub root: Id,
    pub summary: SnapshotSummary,
    /// Set on a snapshot written by `repair snapshots`: the id of the damaged snapshot it
    /// replaces (whose unrestorable messages it leaves out).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub original: Option<Id>,
}

/// Totals kept in the snapshot for `snapshots` and `stats`.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct SnapshotSummary {
    pub accounts: u64,
    pub folders: u64,
    pub messages: u64,
    pub bytes: u64,
    pub messages_new: u64,
    pub bytes_added: u64,
    pub failed: u64,
    pub elapsed_secs: f64,
}

impl Snapshot {
    pub fn path(id: &Id) -> String {
        format!("snapshots/{}", id.to_hex())
    }

    /// Reads a snapshot's JSON (the opened content of `path`) in a repository of format
    /// `format`, whose number the snapshot's `version` must be; the id is left unset.
    pub fn from_json(json: &[u8], format: Version, path: &str) -> Result<Snapshot> {
        let s: Snapshot =
            serde_json::from_slice(json).map_err(|e| Error::corrupt(path, e.to_string()))?;
        if s.version != format.number() {
            return Err(Error::corrupt(
                path,
                format!(
                    "snapshot version {} in a format-{format} repository",
                    s.version
                ),
            ));
        }
        Ok(s)
    }
}
