//! Repository statistics: what is stored, and how much deduplication and compression save.

use crate::error::Result;
use crate::repo::format::BlobKind;
use crate::repo::Repository;
use crate::report::ratio;
use crate::store::Store;
use serde::Serialize;

#[derive(Clone, Debug, Serialize)]
pub struct Stats {
    /// The repository's format (1 or 2).
    pub format_version: u32,
    /// Whether its blobs are padded to size buckets (`init --pad`).
    pub padded: bool,
    pub snapshots: u64,
    pub packs: u64,
    pub index_files: u64,
    pub data_blobs: u64,
    pub tree_blobs: u64,
    /// Unique message content before compression.
    pub data_raw_bytes: u64,
    /// The same, as stored (compressed and sealed).
    pub data_stored_bytes: u64,
    pub tree_stored_bytes: u64,
    /// Size of all files in the repository.
    pub repository_bytes: u64,
    pub latest_messages: u64,
    /// Logical size of the latest snapshot's messages.
    pub latest_bytes: u64,
    /// Logical size of every snapshot added up.
    pub all_snapshots_bytes: u64,
    /// latest_bytes / data_raw_bytes.
    pub dedup_ratio: Option<f64>,
    /// data_raw_bytes / data_stored_bytes.
    pub compression_ratio: Option<f64>,
    /// all_snapshots_bytes / repository_bytes: what keeping every snapshot costs.
    pub space_saving_ratio: Option<f64>,
}

pub fn stats(repo: &Repository) -> Result<Stats> {
    let snaps = repo.snapshots()?;
    let (mut data_blobs, mut tree_blobs, mut raw, mut stored, mut tree_stored) = (0, 0, 0, 0, 0);
    for (_, loc) in repo.index().iter() {
        match loc.kind {
            BlobKind::Data => {
                data_blobs += 1;
                raw += u64::from(loc.raw_len);
                stored += u64::from(loc.stored_len);
            }
            BlobKind::Tree => {
                tree_blobs += 1;
                tree_stored += u64::from(loc.stored_len);
            }
        }
    }
    let mut repository_bytes = 0;
    for prefix in [
        "keys/",
        "index/",
        "snapshots/",
        "data/",
        "dicts/",
        "forgotten/",
        "search/",
        "audit/",
    ] {
        repository_bytes += repo
            .store()
            .list(prefix)?
            .iter()
            .map(|o| o.size)
            .sum::<u64>();
    }
    repository_bytes += repo.store().stat("config").unwrap_or(0);
    let latest = snaps.last();
    let latest_bytes = latest.map_or(0, |s| s.summary.bytes);
    let all: u64 = snaps.iter().map(|s| s.summary.bytes).sum();
    Ok(Stats {
        format_version: repo.version().number(),
        padded: repo.config().pad,
        snapshots: snaps.len() as u64,
        packs: repo.index().packs().len() as u64,
        index_files: repo.index_files().len() as u64,
        data_blobs,
        tree_blobs,
        data_raw_bytes: raw,
        data_stored_bytes: stored,
        tree_stored_bytes: tree_stored,
        repository_bytes,
        latest_messages: latest.map_or(0, |s| s.summary.messages),
        latest_bytes,
        all_snapshots_bytes: all,
        dedup_ratio: ratio(latest_bytes, raw),
        compression_ratio: ratio(raw, stored),
        space_saving_ratio: ratio(all, repository_bytes),
    })
}
