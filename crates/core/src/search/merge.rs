//! Merging splits: several splits made one (fewer indexes to open per search), without the
//! documents of contents no snapshot holds any more; and `prune`'s part, deleting the
//! splits a merge superseded.
//!
//! The splits' segments are put side by side in one directory (hard links of the local
//! copies) under a `meta.json` that lists them all, opened as one tantivy index, the dead
//! contents' documents deleted by their `hash` term, and the segments merged into one by
//! tantivy. The new split names the merged ones in `supersedes`: from then on readers skip
//! them, and prune deletes them. Nothing is deleted by `index` itself, so a host that may
//! only add objects to the repository can index it.

use super::schema;
use super::split::split_contents;
use super::split::{list_splits, live_splits, private_dir, split_path, write_split};
use super::split::{LocalSplit, SplitHeader};
use crate::error::{Error, Result};
use crate::repo::id::Id;
use crate::repo::Repository;
use crate::store::Store;
use std::collections::{BTreeSet, HashSet};
use std::fs;
use std::path::Path;

/// More live splits than this are merged into one by the next `index` run.
pub const MERGE_AT: usize = 8;

/// Merges `splits` into one new split that supersedes them, keeping only the documents
/// of contents in `keep`. Returns the new split's id, or `None` when no document is left
/// (the splits are then superseded by an empty split all the same).
pub fn merge_splits(
    repo: &Repository,
    cache: &Path,
    splits: &[LocalSplit],
    keep: &HashSet<Id>,
) -> Result<Id> {
    private_dir(cache)?;
    let dir = tempfile::Builder::new()
        .prefix(".merge-")
        .tempdir_in(cache)
        .map_err(|e| Error::io(cache, e))?;
    let mut meta: Option<serde_json::Value> = None;
    let mut segments = Vec::new();
    let mut opstamp = 0u64;
    for s in splits {
        let text = fs::read(s.dir.join("meta.json")).map_err(|e| Error::io(&s.dir, e))?;
        let m: serde_json::Value = serde_json::from_slice(&text)
            .map_err(|e| Error::search(format!("split {}: meta.json", s.id.short()), e))?;
        segments.extend(m["segments"].as_array().cloned().unwrap_or_default());
        opstamp = opstamp.max(m["opstamp"].as_u64().unwrap_or(0));
        meta.get_or_insert(m);
        for e in fs::read_dir(&s.dir).map_err(|e| Error::io(&s.dir, e))? {
            let e = e.map_err(|e| Error::io(&s.dir, e))?;
            let name = e.file_name();
            let to = dir.path().join(&name);
            let plain = name
                .to_str()
                .is_some_and(|n| n.contains('.') && n != "meta.json" && n != super::headers::FILE);
            if plain && fs::hard_link(e.path(), &to).is_err() {
                fs::copy(e.path(), &to).map_err(|err| Error::io(&to, err))?;
            }
        }
    }
    let mut meta = meta.unwrap_or_default();
    meta["segments"] = serde_json::Value::Array(segments);
    meta["opstamp"] = opstamp.into();
    let json = serde_json::to_vec(&meta).map_err(|e| Error::search("meta.json", e))?;
    fs::write(dir.path().join("meta.json"), json).map_err(|e| Error::io(dir.path(), e))?;

    let index = tantivy::Index::open_in_dir(dir.path())
        .map_err(|e| Error::search("opening the splits to merge", e))?;
    schema::register(&index);
    let fields = schema::schema().1;
    let mut writer: tantivy::IndexWriter = index
        .writer_with_num_threads(1, 32 << 20)
        .map_err(|e| Error::search("starting a merge", e))?;
    // Segments are merged once, explicitly, at the end: a merge policy's own merges in
    // the background would take them from under that one.
    writer.set_merge_policy(Box::new(tantivy::indexer::NoMergePolicy));
    let mut docs = 0u64;
    let mut headers = Vec::new();
    for s in splits {
        headers.extend(super::headers::HeaderFile::open(&s.dir)?);
        for h in split_contents(s)? {
            match keep.contains(&h) {
                true => docs += 1,
                false => {
                    writer.delete_term(tantivy::Term::from_field_bytes(fields.hash, &h.0));
                }
            }
        }
    }
    writer
        .commit()
        .map_err(|e| Error::search("deleting dead documents", e))?;
    let ids = index
        .searchable_segment_ids()
        .map_err(|e| Error::search("listing segments", e))?;
    if !ids.is_empty() {
        writer
            .merge(&ids)
            .wait()
            .map_err(|e| Error::search("merging splits", e))?;
    }
    writer
        .wait_merging_threads()
        .map_err(|e| Error::search("merging splits", e))?;
    // Splits written before header files had none: their contents get none here either.
    super::split::write_header_file(dir.path(), super::headers::merged(&headers, keep))?;
    let header = SplitHeader {
        hostname: crate::hostname(),
        time: crate::now_unix(),
        docs,
        supersedes: splits.iter().map(|s| s.id).collect(),
        ..SplitHeader::default()
    };
    let id = write_split(repo, cache, &index, dir, header)?;
    repo.store().flush()?;
    Ok(id)
}

/// What prune did to the search index.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct SplitsPruned {
    /// Splits merged into a new one because they held documents of contents no snapshot
    /// holds.
    pub merged: u64,
    /// Superseded splits deleted.
    pub deleted: u64,
}

/// `prune`'s part (under its exclusive lock): when a live split holds contents no snapshot
/// holds, the live splits are merged without them; then every superseded split is deleted.
pub fn prune_splits(repo: &Repository, cache: &Path, dry_run: bool) -> Result<SplitsPruned> {
    let mut out = SplitsPruned::default();
    if list_splits(repo)?.is_empty() {
        return Ok(out);
    }
    let live = live_splits(repo, cache)?;
    let keep = super::verify::snapshot_contents(repo)?;
    let mut dead = false;
    for s in &live {
        dead |= split_contents(s)?.iter().any(|h| !keep.contains(h));
    }
    if dead && !dry_run {
        merge_splits(repo, cache, &live, &keep)?;
        out.merged = live.len() as u64;
    }
    let present = list_splits(repo)?;
    let live: BTreeSet<Id> = live_splits(repo, cache)?.iter().map(|s| s.id).collect();
    for id in present.difference(&live) {
        if !dry_run {
            match repo.store().delete(&split_path(id)) {
                Ok(()) | Err(Error::NotFound(_)) => {}
                Err(e) => return Err(e),
            }
        }
        out.deleted += 1;
    }
    Ok(out)
}
