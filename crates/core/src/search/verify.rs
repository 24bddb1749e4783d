//! The search index checked against the repository (`check`) and its damaged splits set
//! aside (`repair index`).
//!
//! Every split is read, opened under its name, unpacked into a temporary directory and
//! opened by tantivy, whose files' checksums are verified. Then the live splits' contents
//! are compared with the snapshots' messages: a message no live split holds is *not
//! indexed* (the next `index` adds it), a content no snapshot holds is *dead* (the next
//! prune drops it). Neither is damage; a split that does not open is, and `repair index`
//! moves it to `damaged/`, after which `index` indexes its contents again.

use super::places::{scoped, Scope};
use super::split::{list_splits, open_split, split_contents, split_path};
use super::split::{local_split, LocalSplit};
use crate::error::{Error, Result};
use crate::repo::id::Id;
use crate::repo::tree::{AccountTree, RootTree};
use crate::repo::Repository;
use crate::report::Failure;
use serde::Serialize;
use std::collections::{BTreeSet, HashSet};

/// What `check` found of the search index.
#[derive(Clone, Debug, Default, Serialize)]
pub struct SplitsChecked {
    /// Splits in `search/`, and of them those no other supersedes.
    pub splits: u64,
    pub live: u64,
    /// Splits that cannot be read, opened or verified.
    pub damaged: Vec<Failure>,
    /// Distinct messages of the snapshots that no live split holds.
    pub not_indexed: u64,
    /// Contents live splits hold that no snapshot holds.
    pub dead: u64,
}

/// Checks every split and the live ones' coverage of the snapshots (see the module).
pub fn check_splits(repo: &Repository) -> Result<SplitsChecked> {
    let mut out = SplitsChecked::default();
    let present = list_splits(repo)?;
    out.splits = present.len() as u64;
    if present.is_empty() {
        return Ok(out);
    }
    let tmp = tempfile::Builder::new()
        .prefix("mailvault-check-search-")
        .tempdir()
        .map_err(|e| Error::io(std::env::temp_dir(), e))?;
    let mut good: Vec<(LocalSplit, HashSet<Id>)> = Vec::new();
    for id in &present {
        match verified(repo, tmp.path(), id) {
            Ok(s) => good.push(s),
            Err(e) => out.damaged.push(Failure::new(split_path(id), e)),
        }
    }
    let superseded: BTreeSet<Id> = (good.iter())
        .flat_map(|(s, _)| s.header.supersedes.iter().copied())
        .collect();
    good.retain(|(s, _)| !superseded.contains(&s.id));
    out.live = good.len() as u64;
    let indexed: HashSet<Id> = good.into_iter().flat_map(|(_, c)| c).collect();
    let held = snapshot_contents(repo)?;
    out.not_indexed = held.iter().filter(|h| !indexed.contains(*h)).count() as u64;
    out.dead = indexed.iter().filter(|h| !held.contains(*h)).count() as u64;
    Ok(out)
}

/// Split `id` copied out and verified: sealed under its name, well formed, every file's
/// checksum right, its header file (if any) of its contents; and the contents it holds.
fn verified(
    repo: &Repository,
    dir: &std::path::Path,
    id: &Id,
) -> Result<(LocalSplit, HashSet<Id>)> {
    // A fresh directory: the split is read, opened under its name and unpacked here.
    let s = local_split(repo, dir, id)?;
    let index = open_split(&s)?;
    let contents: HashSet<Id> = split_contents(&s)?.into_iter().collect();
    if let Some(h) = super::headers::HeaderFile::open(&s.dir)? {
        h.verify(&contents)
            .map_err(|why| Error::corrupt(split_path(id), why))?;
    }
    let bad = index
        .validate_checksum()
        .map_err(|e| Error::search("verifying checksums", e))?;
    if !bad.is_empty() {
        let mut names: Vec<String> = bad.iter().map(|p| p.display().to_string()).collect();
        names.sort();
        return Err(Error::corrupt(
            split_path(id),
            format!("damaged files: {}", names.join(", ")),
        ));
    }
    Ok((s, contents))
}

/// The contents every snapshot holds (a chunk shared by snapshots read once).
pub fn snapshot_contents(repo: &Repository) -> Result<HashSet<Id>> {
    let (snapshots, _) = scoped(repo, &Scope::All)?;
    let mut out = HashSet::new();
    let mut seen_chunks = HashSet::new();
    for snap in &snapshots {
        let Ok(root) = repo.read_tree::<RootTree>(&snap.root) else {
            continue;
        };
        for acc in &root.accounts {
            let Ok(tree) = repo.read_tree::<AccountTree>(&acc.tree) else {
                continue;
            };
            for node in &tree.folders {
                for c in repo.folder_chunks(node).unwrap_or_default() {
                    if !seen_chunks.insert(c.entries) {
                        continue;
                    }
                    if let Ok(entries) = repo.read_chunk(&c) {
                        out.extend(entries.iter().map(|e| e.hash));
                    }
                }
            }
        }
    }
    Ok(out)
}

/// `repair index`'s part: the splits that cannot be read or verified, moved to
/// `damaged/search/` (unless `dry_run`); their paths.
pub fn set_aside_damaged(
    repo: &Repository,
    dry_run: bool,
    move_to_damaged: impl Fn(&str) -> Result<()>,
) -> Result<Vec<String>> {
    let tmp = tempfile::Builder::new()
        .prefix("mailvault-repair-search-")
        .tempdir()
        .map_err(|e| Error::io(std::env::temp_dir(), e))?;
    let mut out = Vec::new();
    for id in list_splits(repo)? {
        if verified(repo, tmp.path(), &id).is_err() {
            let path = split_path(&id);
            if !dry_run {
                move_to_damaged(&path)?;
            }
            out.push(path);
        }
    }
    Ok(out)
}
