//! Folding snapshots into the records: a new snapshot of a host and source extends the
//! records its predecessor held unchanged and starts records for what changed, reading
//! only the chunks it does not share with its predecessor.

use super::types::{flag, ChunksOf, FolderKey, Places, Seq, SnapHead, TipFolder};
use crate::error::Result;
use crate::model::folder_name;
use crate::repo::id::IdSet;
use crate::repo::snapshot::Snapshot;
use crate::repo::tree::{AccountTree, ChunkRef, FolderNode, MessageEntry, RootTree};
use crate::repo::Repository;
use mailvault_imap::maildir_flags::KeywordTable;
use std::collections::HashMap;

/// Records above which a map mostly of forgotten snapshots is built again.
const COMPACT_ABOVE: usize = 10_000;

impl Places {
    /// Folds the repository's snapshots `list` in: marks the forgotten ones, adds the new
    /// ones. `false` when the map must be built again instead (a new snapshot older than
    /// the newest of its host and source, or most records forgotten).
    pub(super) fn update(&mut self, repo: &Repository, list: &[Snapshot]) -> Result<bool> {
        let live: IdSet = list.iter().map(|s| s.id).collect();
        let mut known = IdSet::default();
        let mut forgotten = false;
        for s in &mut self.seqs {
            s.live = s.snaps.iter().map(|h| live.contains(&h.id)).collect();
            forgotten |= s.live.iter().any(|l| !l);
            known.extend(s.snaps.iter().map(|h| h.id));
        }
        if forgotten && self.len() > COMPACT_ABOVE {
            let dead = (0..self.len()).filter(|&r| !self.alive(r)).count();
            if dead * 2 > self.len() {
                return Ok(false);
            }
        }
        let mut new: Vec<&Snapshot> = list.iter().filter(|s| !known.contains(&s.id)).collect();
        new.sort_by_key(|s| (s.time, s.time_nanos));
        for s in new {
            let q = match (self.seqs.iter())
                .position(|q| q.hostname == s.hostname && q.source == s.source)
            {
                Some(q) => q,
                None => {
                    self.seqs.push(Seq {
                        hostname: s.hostname.clone(),
                        source: s.source.clone(),
                        snaps: Vec::new(),
                        failures: Vec::new(),
                        live: Vec::new(),
                    });
                    self.seqs.len() - 1
                }
            };
            if let Some(h) = self.seqs[q].snaps.last() {
                if (h.time, h.nanos) >= (s.time, s.time_nanos) {
                    return Ok(false);
                }
            }
            self.fold(repo, q, s)?;
            self.changed = true;
            self.grown = true;
        }
        Ok(true)
    }

    /// Folds snapshot `snap` into sequence `q`, after its newest.
    fn fold(&mut self, repo: &Repository, q: usize, snap: &Snapshot) -> Result<()> {
        let seqs = self.seqs.len();
        let mut old = std::mem::take(&mut self.tips.decode(seqs)?[q].folders);
        let idx = self.seqs[q].snaps.len() as u32;
        self.seqs[q].snaps.push(SnapHead {
            id: snap.id,
            time: snap.time,
            nanos: snap.time_nanos,
        });
        self.seqs[q].live.push(true);
        let mut tip = HashMap::new();
        let item = format!("snapshot {}", snap.id.short());
        let root: RootTree = match repo.read_tree(&snap.root) {
            Ok(r) => r,
            Err(e) => {
                self.seqs[q].failures.push((idx, item, e.to_string()));
                return Ok(());
            }
        };
        for acc in &root.accounts {
            let tree: AccountTree = match repo.read_tree(&acc.tree) {
                Ok(t) => t,
                Err(e) => {
                    let item = format!("{item}: {}", acc.name);
                    self.seqs[q].failures.push((idx, item, e.to_string()));
                    continue;
                }
            };
            for node in &tree.folders {
                let f = self.folder_index(&acc.name, node);
                let prev = old.remove(&f);
                match self.fold_folder(repo, (q, idx), f, prev, node) {
                    Ok(t) => {
                        tip.insert(f, t);
                    }
                    Err(e) => {
                        let item = format!("{item}: {}: {}", acc.name, folder_name(node));
                        self.seqs[q].failures.push((idx, item, e.to_string()));
                    }
                }
            }
        }
        self.tips.decode(seqs)?[q].folders = tip;
        Ok(())
    }

    /// The number of a folder (added when new), its keywords file noted.
    fn folder_index(&mut self, account: &str, node: &FolderNode) -> u32 {
        let key = FolderKey {
            account: account.to_string(),
            folder: folder_name(node).into_owned(),
        };
        let f = match self.folders.iter().position(|k| *k == key) {
            Some(f) => f,
            None => {
                self.folders.push(key);
                self.keyword_files.push(None);
                self.folders.len() - 1
            }
        };
        if let Some(k) = node.files.iter().find(|f| f.name == b"dovecot-keywords") {
            self.keyword_files[f] = Some(k.clone());
        }
        f as u32
    }

    /// Folds folder `f` of snapshot `at` (sequence, index) in, given the folder as the
    /// sequence's previous snapshot had it.
    fn fold_folder(
        &mut self,
        repo: &Repository,
        at: (usize, u32),
        f: u32,
        prev: Option<TipFolder>,
        node: &FolderNode,
    ) -> Result<TipFolder> {
        let of = match node.chunk_tree {
            Some(id) => ChunksOf::Tree(id),
            None => ChunksOf::Inline(node.chunks.clone()),
        };
        if let Some(p) = prev.as_ref().filter(|p| p.of == of) {
            for (_, recs) in &p.chunks {
                self.extend(recs, at.1);
            }
            return Ok(p.clone());
        }
        let refs = repo.folder_chunks(node)?;
        let mut old: HashMap<ChunkRef, Vec<u32>> = prev
            .map(|p| p.chunks.into_iter().collect())
            .unwrap_or_default();
        let kept: Vec<Option<Vec<u32>>> = refs.iter().map(|r| old.remove(r)).collect();
        // The entries of the chunks the folder no longer has, by key: a new chunk's
        // entries are mostly theirs (a flag changed, a neighbour came or went).
        let mut loose: HashMap<Vec<u8>, Vec<(u32, MessageEntry)>> = HashMap::new();
        for r in old.into_values().flatten() {
            let e = self.entry(r as usize)?;
            loose.entry(e.key.clone()).or_default().push((r, e));
        }
        let mut chunks = Vec::with_capacity(refs.len());
        for (r, k) in refs.into_iter().zip(kept) {
            let recs = match k {
                Some(recs) => {
                    self.extend(&recs, at.1);
                    recs
                }
                None => (repo.read_chunk(&r)?.into_iter())
                    .map(|e| self.place(at, f, e, &mut loose))
                    .collect(),
            };
            chunks.push((r, recs));
        }
        Ok(TipFolder { of, chunks })
    }

    fn extend(&mut self, recs: &[u32], idx: u32) {
        for &r in recs {
            self.cols.last[r as usize] = idx;
        }
    }

    /// The record of entry `e` of folder `f` in snapshot `at`: a loose record of the same
    /// entry extended, or a new one.
    fn place(
        &mut self,
        at: (usize, u32),
        f: u32,
        e: MessageEntry,
        loose: &mut HashMap<Vec<u8>, Vec<(u32, MessageEntry)>>,
    ) -> u32 {
        if let Some(same) = loose.get_mut(&e.key) {
            if let Some(i) = same.iter().position(|(_, old)| *old == e) {
                let (r, _) = same.swap_remove(i);
                self.cols.last[r as usize] = at.1;
                return r;
            }
        }
        self.push(at, f, &e)
    }

    /// A new record of entry `e` in folder `f`, from snapshot `at`.
    fn push(&mut self, at: (usize, u32), f: u32, e: &MessageEntry) -> u32 {
        let r = self.len() as u32;
        let m = crate::dest::meta(e, &KeywordTable::new()).flags;
        let bits = [
            (m.seen, flag::SEEN),
            (m.answered, flag::ANSWERED),
            (m.flagged, flag::FLAGGED),
            (m.deleted, flag::DELETED),
            (m.draft, flag::DRAFT),
            (e.flags().contains(&b'P'), flag::FORWARDED),
        ];
        let letters = (e.flags().iter())
            .filter(|c| c.is_ascii_lowercase())
            .fold(0u32, |acc, c| acc | 1 << (c - b'a'));
        let c = &mut self.cols;
        c.content.push(e.hash);
        c.seq.push(at.0 as u32);
        c.folder.push(f);
        c.first.push(at.1);
        c.last.push(at.1);
        c.flags
            .push(bits.iter().filter(|b| b.0).fold(0, |acc, b| acc | b.1));
        c.letters.push(letters);
        c.key.push(key_hash(&e.key));
        c.date.push(e.date.unwrap_or(e.mtime.secs));
        let bytes = postcard::to_stdvec(e).expect("an entry serializes");
        self.blob.mem.extend_from_slice(&bytes);
        self.cols.offsets.push(self.blob.len());
        r
    }
}

/// The first 8 bytes of the BLAKE3 of a Maildir key.
pub fn key_hash(key: &[u8]) -> u64 {
    let h = blake3::hash(key);
    u64::from_le_bytes(h.as_bytes()[..8].try_into().expect("8 bytes"))
}
