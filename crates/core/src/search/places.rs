//! Where each message is: the compact map from message content to the places that held
//! it (account, folder, file name, flags) over runs of consecutive snapshots.
//!
//! The search index holds a document per message *content*; where it is comes from the
//! snapshots, so that forgetting a snapshot takes its places out of every answer at once
//! and the index is never rewritten for it. Reading every snapshot's entries for each
//! search grew with the snapshots kept (100,000 messages in 30 snapshots: 5 s and 1.6 GB),
//! so the snapshots are folded into *records*: one per message file (the same entry, in
//! the same folder) for as long as consecutive snapshots of one host and source hold it
//! unchanged. A message kept a year in daily backups is one record; a flag change starts
//! another. A new snapshot is folded in by what changed: a folder whose chunk tree is the
//! one before extends its records without being read, a chunk the folder had extends its
//! records, and only new chunks are read (`update.rs`).
//!
//! The records are derived from the repository alone and kept in the local cache beside
//! the splits (`<cache>/<repository id>/search/places`, readable by its owner alone;
//! `file.rs`); a host without it, or with an unreadable one, folds every snapshot again.
//! A snapshot forgotten since is left out when the records are read (a record holds the
//! live snapshots of its run), so a forget costs nothing here; when most records belong
//! to forgotten snapshots, the map is built again.

mod file;
mod types;
mod update;

pub use types::{flag, FolderKey, Places, SnapHead};
use types::{Blob, Columns, Tips};

use crate::error::{Error, Result};
use crate::repo::id::{Id, IdSet};
use crate::repo::snapshot::Snapshot;
use crate::repo::tree::MessageEntry;
use crate::repo::{Repository, Snapshots};
use crate::report::Failure;
use mailvault_imap::maildir_flags::KeywordTable;
use std::collections::HashMap;
use std::path::Path;

/// Which snapshots a search covers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Scope {
    /// The newest snapshot of each host and source: the mail servers as they are now.
    Latest,
    /// Every snapshot.
    All,
    /// One snapshot (an id prefix, or `latest`).
    One(String),
}

/// The snapshots of `scope`, oldest first, and the snapshot files that cannot be read.
pub fn scoped(repo: &Repository, scope: &Scope) -> Result<(Vec<Snapshot>, Vec<Failure>)> {
    let Snapshots { mut list, damaged } = repo.snapshots()?;
    let failures = (damaged.into_iter())
        .map(|d| Failure::new(d.path, d.error))
        .collect();
    list.sort_by_key(|s| (s.time, s.time_nanos));
    let list = match scope {
        Scope::All => list,
        Scope::One(which) => vec![repo.find_snapshot(which)?],
        Scope::Latest => {
            let mut newest: HashMap<(&str, &str), usize> = HashMap::new();
            for (i, s) in list.iter().enumerate() {
                newest.insert((&s.hostname, &s.source), i);
            }
            let mut keep: Vec<usize> = newest.into_values().collect();
            keep.sort_unstable();
            keep.into_iter().map(|i| list[i].clone()).collect()
        }
    };
    Ok((list, failures))
}

/// The cache file's name in the search cache directory.
const FILE_NAME: &str = "places";

impl Places {
    /// The map of every snapshot of the repository, read from the cache directory `cache`
    /// (when given) and brought up to date, with [`flag::INDEXED`] set against `splits`
    /// (when given); kept there again when it changed.
    pub fn open(
        repo: &Repository,
        cache: Option<&Path>,
        splits: Option<&[super::split::LocalSplit]>,
    ) -> Result<Places> {
        let t = std::time::Instant::now();
        let Snapshots { list, damaged } = repo.snapshots()?;
        tracing::debug!(
            "places: {} snapshots listed in {:?}",
            list.len(),
            t.elapsed()
        );
        let path = cache.map(|c| c.join(FILE_NAME));
        let kept = path.as_deref().and_then(file::read);
        tracing::debug!("places: read in {:?}", t.elapsed());
        let mut p = match kept {
            Some(p) => p,
            None => Places::empty(),
        };
        p.path = path;
        p.damaged = (damaged.into_iter())
            .map(|d| Failure::new(d.path, d.error))
            .collect();
        let kept = p.path.is_some() && !p.grown;
        let folded = match p.update(repo, &list) {
            // A kept map that cannot be brought up to date (its tips damaged): built
            // again, as a missing one; an error of the repository's comes back then too.
            Err(e) if kept => {
                tracing::warn!("search places set aside: {e}");
                false
            }
            other => other?,
        };
        if !folded {
            // A snapshot older than what the map holds of its host and source (copied in,
            // or written again by `repair`), or mostly forgotten ones: built again.
            let (path, damaged) = (p.path.take(), std::mem::take(&mut p.damaged));
            p = Places::empty();
            p.path = path;
            p.damaged = damaged;
            if !p.update(repo, &list)? {
                return Err(Error::corrupt("search places", "snapshots out of order"));
            }
        }
        if p.grown {
            p.finish();
        }
        if let Some(splits) = splits {
            p.mark_indexed(splits)?;
        }
        p.save();
        Ok(p)
    }

    /// Keeps the map in the cache when it changed. A cache: a host that cannot keep it
    /// builds it again next time.
    pub fn save(&mut self) {
        if !self.changed {
            return;
        }
        if let Some(path) = &self.path {
            if let Err(e) = file::write(self, path) {
                tracing::warn!("cannot keep the search places in {}: {e}", path.display());
            }
        }
        self.changed = false;
    }

    /// The snapshots the repository has.
    pub fn live_snapshots(&self) -> usize {
        (self.seqs.iter())
            .map(|s| s.live.iter().filter(|&&l| l).count())
            .sum()
    }

    fn empty() -> Places {
        Places {
            seqs: Vec::new(),
            folders: Vec::new(),
            folder_ids: HashMap::new(),
            keyword_files: Vec::new(),
            splits: Vec::new(),
            cols: Columns {
                offsets: vec![0],
                ..Columns::default()
            },
            by_content: Vec::new(),
            blob: Blob {
                file: None,
                mem: Vec::new(),
            },
            tips: Tips::default(),
            damaged: Vec::new(),
            path: None,
            changed: true,
            grown: true,
        }
    }

    /// Sorts the records by content after a change.
    fn finish(&mut self) {
        let mut order: Vec<u32> = (0..self.len() as u32).collect();
        order.sort_unstable_by_key(|&r| self.cols.content[r as usize]);
        self.by_content = order;
    }

    /// Sets [`flag::INDEXED`] on the records whose content a split of `splits` holds.
    pub fn mark_indexed(&mut self, splits: &[super::split::LocalSplit]) -> Result<()> {
        let mut ids: Vec<Id> = splits.iter().map(|s| s.id).collect();
        ids.sort_unstable();
        if ids == self.splits && !self.grown {
            return Ok(());
        }
        let indexed: IdSet = (super::split::indexed_contents(splits)?)
            .into_iter()
            .collect();
        for (f, c) in self.cols.flags.iter_mut().zip(&self.cols.content) {
            match indexed.contains(c) {
                true => *f |= flag::INDEXED,
                false => *f &= !flag::INDEXED,
            }
        }
        self.splits = ids;
        self.changed = true;
        Ok(())
    }

    /// Records, alive or not.
    pub fn len(&self) -> usize {
        self.cols.content.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn content(&self, r: usize) -> &Id {
        &self.cols.content[r]
    }

    pub fn folder(&self, r: usize) -> u32 {
        self.cols.folder[r]
    }

    pub fn flags(&self, r: usize) -> u8 {
        self.cols.flags[r]
    }

    /// The keyword letters of record `r` (`a`..`z`: bits 0..25).
    pub fn letters(&self, r: usize) -> u32 {
        self.cols.letters[r]
    }

    pub fn key_hash(&self, r: usize) -> u64 {
        self.cols.key[r]
    }

    pub fn date(&self, r: usize) -> i64 {
        self.cols.date[r]
    }

    /// The records of content `id`.
    pub fn records_of<'a>(&'a self, id: &'a Id) -> impl Iterator<Item = usize> + 'a {
        let start = self
            .by_content
            .partition_point(|&r| self.cols.content[r as usize] < *id);
        (self.by_content[start..].iter())
            .map(|&r| r as usize)
            .take_while(move |&r| self.cols.content[r] == *id)
    }

    /// Record numbers in content order (a content's records together).
    pub fn by_content(&self) -> &[u32] {
        &self.by_content
    }

    /// The entry of record `r`.
    pub fn entry(&self, r: usize) -> Result<MessageEntry> {
        let (a, b) = (self.cols.offsets[r], self.cols.offsets[r + 1]);
        let bytes = self.blob.read(a, b)?;
        postcard::from_bytes(&bytes).map_err(|e| Error::corrupt("search places", e.to_string()))
    }

    /// Snapshot files and trees that could not be read: their messages are missing.
    pub fn failures(&self) -> Vec<Failure> {
        let mut out = self.damaged.clone();
        for s in &self.seqs {
            for (i, item, error) in &s.failures {
                if s.live.get(*i as usize) == Some(&true) {
                    out.push(Failure::new(item.clone(), error.clone()));
                }
            }
        }
        out
    }

    /// Per folder, the keywords its `dovecot-keywords` names (none when it has none or it
    /// cannot be read).
    pub fn keywords(&self, repo: &Repository) -> Vec<KeywordTable> {
        let mut read: HashMap<Vec<Id>, KeywordTable> = HashMap::new();
        (self.keyword_files.iter())
            .map(|f| {
                let Some(f) = f else {
                    return KeywordTable::new();
                };
                let table = read.entry(f.content.clone()).or_insert_with(|| {
                    crate::model::assemble::assemble_file(repo, f)
                        .map(|d| KeywordTable::parse(&String::from_utf8_lossy(&d)))
                        .unwrap_or_default()
                });
                table.clone()
            })
            .collect()
    }

    /// The snapshots `scope` covers, and for each record where its run meets them.
    pub fn view(&self, repo: &Repository, scope: &Scope) -> Result<View> {
        let one = match scope {
            Scope::One(which) => Some(repo.find_snapshot(which)?.id),
            _ => None,
        };
        let mut v = View::default();
        let mut order = Vec::new();
        for (q, s) in self.seqs.iter().enumerate() {
            let newest = s.live.iter().rposition(|&l| l);
            let inside: Vec<bool> = (0..s.snaps.len())
                .map(|i| {
                    s.live[i]
                        && match scope {
                            Scope::All => true,
                            Scope::Latest => Some(i) == newest,
                            Scope::One(_) => Some(s.snaps[i].id) == one,
                        }
                })
                .collect();
            order.extend((0..s.snaps.len()).filter(|&i| inside[i]).map(|i| (q, i)));
            v.newest.push(newest.map_or(u32::MAX, |n| n as u32));
            v.next.push(nearest(&inside, false));
            v.prev.push(nearest(&inside, true));
        }
        order.sort_by_key(|&(q, i)| {
            let h = &self.seqs[q].snaps[i];
            (h.time, h.nanos)
        });
        v.rank = (self.seqs.iter())
            .map(|s| vec![u32::MAX; s.snaps.len()])
            .collect();
        for (k, &(q, i)) in order.iter().enumerate() {
            v.rank[q][i] = k as u32;
        }
        v.snapshots = (order.iter())
            .map(|&(q, i)| self.seqs[q].snaps[i].clone())
            .collect();
        Ok(v)
    }

    /// Where record `r`'s run meets `v`: the ranks (in [`View::snapshots`]) of the first
    /// and the last snapshot of the view that hold it, or `None`.
    pub fn span(&self, v: &View, r: usize) -> Option<(u32, u32)> {
        let q = self.cols.seq[r] as usize;
        let (first, last) = (self.cols.first[r] as usize, self.cols.last[r] as usize);
        let a = v.next[q][first];
        if a == u32::MAX || a as usize > last {
            return None;
        }
        let b = v.prev[q][last];
        Some((v.rank[q][a as usize], v.rank[q][b as usize]))
    }

    /// Whether record `r` is in the newest snapshot of its host and source.
    pub fn in_newest(&self, v: &View, r: usize) -> bool {
        let q = self.cols.seq[r] as usize;
        let n = v.newest[q];
        n != u32::MAX && self.cols.first[r] <= n && n <= self.cols.last[r]
    }

    /// The first snapshot of record `r`'s host and source after its run that the
    /// repository still has and whose folder no longer held the content (deleted, or
    /// moved to another folder; a flag change is a new record of the same content, which
    /// holds it on); `None` while the newest still holds it.
    pub fn gone_in(&self, r: usize) -> Option<&SnapHead> {
        let (c, f) = (&self.cols.content[r], self.cols.folder[r]);
        self.gone_after(c, f, (self.cols.seq[r], self.cols.last[r]))
    }

    /// Where snapshot `id` is in the map: its sequence (host and source) and its index
    /// there; `None` when the map does not have it.
    pub fn snapshot_at(&self, id: &Id) -> Option<(u32, u32)> {
        self.seqs.iter().enumerate().find_map(|(q, s)| {
            let i = s.snaps.iter().position(|h| h.id == *id)?;
            Some((q as u32, i as u32))
        })
    }

    /// The number of folder `folder` of `account` in [`Places::folders`], if it has one.
    pub fn folder_number(&self, account: &str, folder: &str) -> Option<u32> {
        (self.folders.iter())
            .position(|k| k.account == account && k.folder == folder)
            .map(|f| f as u32)
    }

    /// The first snapshot after `at` (sequence, index) of that sequence that the
    /// repository still has and whose folder `f` does not hold content `c`: where a
    /// message that snapshot `at` holds there was gone (deleted, or moved); `None` while
    /// every later snapshot holds it, or when `at` itself does not (the map knows nothing
    /// of it). A few records per content (found by a binary search): a page's rows cost
    /// microseconds, whatever the size of the folder.
    pub fn gone_after(&self, c: &Id, f: u32, (seq, at): (u32, u32)) -> Option<&SnapHead> {
        let s = self.seqs.get(seq as usize)?;
        let runs: Vec<(u32, u32)> = (self.records_of(c))
            .filter(|&r| self.cols.seq[r] == seq && self.cols.folder[r] == f)
            .map(|r| (self.cols.first[r], self.cols.last[r]))
            .collect();
        let held_to = |i: u32| {
            (runs.iter())
                .filter(|&&(a, b)| a <= i && i <= b)
                .map(|&(_, b)| b)
                .max()
        };
        let mut i = held_to(at)? + 1;
        while (i as usize) < s.snaps.len() {
            match held_to(i) {
                Some(b) => i = b + 1,
                None if s.live[i as usize] => return Some(&s.snaps[i as usize]),
                None => i += 1,
            }
        }
        None
    }

    /// Whether record `r` is in a snapshot the repository still has.
    pub fn alive(&self, r: usize) -> bool {
        let s = &self.seqs[self.cols.seq[r] as usize];
        let (first, last) = (self.cols.first[r] as usize, self.cols.last[r] as usize);
        s.live[first..=last].iter().any(|&l| l)
    }

    /// Per record: its account no longer holds its content in the newest snapshot of any
    /// host and source (the undelete set).
    pub fn deleted(&self, v: &View) -> Vec<bool> {
        let mut accounts: HashMap<&str, u32> = HashMap::new();
        let account_of: Vec<u32> = (self.folders.iter())
            .map(|f| {
                let n = accounts.len() as u32;
                *accounts.entry(&f.account).or_insert(n)
            })
            .collect();
        let mut out = vec![false; self.len()];
        let mut held = Vec::new();
        for group in self.content_groups() {
            held.clear();
            held.extend(
                (group.iter())
                    .filter(|&&r| self.in_newest(v, r as usize))
                    .map(|&r| account_of[self.cols.folder[r as usize] as usize]),
            );
            for &r in group {
                let a = account_of[self.cols.folder[r as usize] as usize];
                out[r as usize] = !held.contains(&a);
            }
        }
        out
    }

    /// The records of each content, together.
    pub fn content_groups(&self) -> impl Iterator<Item = &[u32]> + '_ {
        self.by_content
            .chunk_by(move |&a, &b| self.cols.content[a as usize] == self.cols.content[b as usize])
    }
}

/// Per sequence snapshot index, the nearest index at or after it (or at or before it,
/// with `back`) that is true in `inside`; `u32::MAX` when none.
fn nearest(inside: &[bool], back: bool) -> Vec<u32> {
    let mut out = vec![u32::MAX; inside.len()];
    let mut at = u32::MAX;
    let idx: Box<dyn Iterator<Item = usize>> = match back {
        true => Box::new(0..inside.len()),
        false => Box::new((0..inside.len()).rev()),
    };
    for i in idx {
        if inside[i] {
            at = i as u32;
        }
        out[i] = at;
    }
    out
}

/// The snapshots a search covers, and how records' runs meet them.
#[derive(Default)]
pub struct View {
    /// Oldest first.
    pub snapshots: Vec<SnapHead>,
    /// Per sequence and snapshot index: its rank in `snapshots` (`u32::MAX` outside).
    rank: Vec<Vec<u32>>,
    next: Vec<Vec<u32>>,
    prev: Vec<Vec<u32>>,
    /// Per sequence, the index of its newest live snapshot (`u32::MAX`: none).
    newest: Vec<u32>,
}

#[cfg(test)]
mod tests;
