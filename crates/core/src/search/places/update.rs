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

/// A folder's chunks against the snapshot before's: `None` when its chunk list is the
/// same; else its list's identity, its chunks, and those the folder did not have before.
type Changed = Option<Result<((ChunksOf, Vec<ChunkRef>), Vec<ChunkRef>)>>;

fn changed_chunks(repo: &Repository, prev: Option<&TipFolder>, node: &FolderNode) -> Changed {
    let of = match node.chunk_tree {
        Some(id) => ChunksOf::Tree(id),
        None => ChunksOf::Inline(node.chunks.clone()),
    };
    if prev.is_some_and(|p| p.of == of) {
        return None;
    }
    Some(repo.folder_chunks(node).map(|refs| {
        let had: std::collections::HashSet<&ChunkRef> = prev
            .iter()
            .flat_map(|p| p.chunks.iter().map(|c| &c.0))
            .collect();
        let new = refs.iter().filter(|r| !had.contains(r)).copied().collect();
        ((of, refs), new)
    }))
}

/// New chunks a batch of folders gathers before they are read in parallel, and the most
/// a folder may bring to it (a larger folder's chunks are read in turn, bounding memory).
const PREREAD_BATCH: usize = 256;
const PREREAD_FOLDER: usize = 1024;

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
            let (t, before) = (std::time::Instant::now(), self.len());
            self.fold(repo, q, s)?;
            tracing::debug!(
                "places: snapshot {} folded in {:?}, {} records added",
                s.id.short(),
                t.elapsed(),
                self.len() - before
            );
            self.changed = true;
            self.grown = true;
        }
        Ok(true)
    }

    /// Folds snapshot `snap` into sequence `q`, after its newest.
    fn fold(&mut self, repo: &Repository, q: usize, snap: &Snapshot) -> Result<()> {
        let seqs = self.seqs.len();
        let records = self.len();
        let mut old = std::mem::take(&mut self.tips.decode(seqs, records)?[q].folders);
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
        let mut trees = Vec::with_capacity(root.accounts.len());
        for acc in &root.accounts {
            match repo.read_tree::<AccountTree>(&acc.tree) {
                Ok(t) => trees.push((acc.name.clone(), t)),
                Err(e) => {
                    let item = format!("{item}: {}", acc.name);
                    self.seqs[q].failures.push((idx, item, e.to_string()));
                }
            }
        }
        let folders: Vec<(&str, &FolderNode)> = (trees.iter())
            .flat_map(|(name, t)| t.folders.iter().map(move |n| (name.as_str(), n)))
            .collect();
        // A batch of folders at a time: the chunks they do not share with the snapshot
        // before are read in parallel first (decrypting and decoding them is most of the
        // work), then folded in order.
        let mut rest = &folders[..];
        while !rest.is_empty() {
            let mut batch = Vec::new();
            let mut missing = Vec::new();
            while let Some((&(account, node), more)) = rest.split_first() {
                rest = more;
                let f = self.folder_index(account, node);
                let prev = old.remove(&f);
                let refs = changed_chunks(repo, prev.as_ref(), node);
                if let Some(Ok((_, new))) = &refs {
                    if new.len() <= PREREAD_FOLDER {
                        missing.extend(new.iter().copied());
                    }
                }
                batch.push((account, node, f, prev, refs));
                if missing.len() >= PREREAD_BATCH {
                    break;
                }
            }
            tracing::trace!(
                "places: {} folders, {} chunks to read",
                batch.len(),
                missing.len()
            );
            let mut read: HashMap<ChunkRef, Result<Vec<Prepared>>> = {
                use rayon::prelude::*;
                (missing.into_par_iter())
                    .map(|r| (r, prepared_chunk(repo, &r)))
                    .collect()
            };
            for (account, node, f, prev, refs) in batch {
                match self.fold_folder((q, idx), f, prev, refs, &mut read, repo) {
                    Ok(t) => {
                        tip.insert(f, t);
                    }
                    Err(e) => {
                        let item = format!("{item}: {account}: {}", folder_name(node));
                        self.seqs[q].failures.push((idx, item, e.to_string()));
                    }
                }
            }
        }
        let records = self.len();
        self.tips.decode(seqs, records)?[q].folders = tip;
        Ok(())
    }

    /// The number of a folder (added when new), its keywords file noted.
    fn folder_index(&mut self, account: &str, node: &FolderNode) -> u32 {
        let key = FolderKey {
            account: account.to_string(),
            folder: folder_name(node).into_owned(),
        };
        if self.folder_ids.len() != self.folders.len() {
            self.folder_ids = (self.folders.iter().enumerate())
                .map(|(i, k)| (k.clone(), i as u32))
                .collect();
        }
        let f = match self.folder_ids.get(&key) {
            Some(&f) => f as usize,
            None => {
                self.folder_ids
                    .insert(key.clone(), self.folders.len() as u32);
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
    /// sequence's previous snapshot had it and [`changed_chunks`]' answer; chunks in `read`
    /// were read already.
    fn fold_folder(
        &mut self,
        at: (usize, u32),
        f: u32,
        prev: Option<TipFolder>,
        changed: Changed,
        read: &mut HashMap<ChunkRef, Result<Vec<Prepared>>>,
        repo: &Repository,
    ) -> Result<TipFolder> {
        let Some(changed) = changed else {
            // The chunk list the snapshot before had.
            let p = prev.expect("an unchanged folder has a previous one");
            for (_, recs) in &p.chunks {
                self.extend(recs, at.1);
            }
            return Ok(p);
        };
        let (of, refs) = changed?.0;
        let mut old: HashMap<ChunkRef, Vec<u32>> = prev
            .map(|p| p.chunks.into_iter().collect())
            .unwrap_or_default();
        let kept: Vec<Option<Vec<u32>>> = refs.iter().map(|r| old.remove(r)).collect();
        // The entries of the chunks the folder no longer has, by key: a new chunk's
        // entries are mostly theirs (a flag changed, a neighbour came or went).
        let mut loose: Loose = HashMap::new();
        for r in old.into_values().flatten() {
            let (key, entry) = (self.cols.key[r as usize], self.cols.entry[r as usize]);
            loose.entry(key).or_default().push((r, entry));
        }
        let mut chunks = Vec::with_capacity(refs.len());
        for (r, k) in refs.into_iter().zip(kept) {
            let recs = match k {
                Some(recs) => {
                    self.extend(&recs, at.1);
                    recs
                }
                None => {
                    let entries = match read.remove(&r) {
                        Some(got) => got?,
                        None => prepared_chunk(repo, &r)?,
                    };
                    (entries.into_iter())
                        .map(|e| self.place(at, f, e, &mut loose))
                        .collect()
                }
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
    /// entry (the same key, the same bytes: compared by their hashes, without reading the
    /// old entry) extended, or a new one.
    fn place(&mut self, at: (usize, u32), f: u32, p: Prepared, loose: &mut Loose) -> u32 {
        if let Some(same) = loose.get_mut(&p.key) {
            if let Some(i) = same.iter().position(|&(_, h)| h == p.entry) {
                let (r, _) = same.swap_remove(i);
                self.cols.last[r as usize] = at.1;
                return r;
            }
        }
        self.push(at, f, &p)
    }

    /// A new record of entry `e` in folder `f`, from snapshot `at`.
    fn push(&mut self, at: (usize, u32), f: u32, p: &Prepared) -> u32 {
        let e = &p.e;
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
        c.key.push(p.key);
        c.date.push(e.date.unwrap_or(e.mtime.secs));
        c.entry.push(p.entry);
        self.blob.mem.extend_from_slice(&p.bytes);
        self.cols.offsets.push(self.blob.len());
        r
    }
}

/// The first 8 bytes of the BLAKE3 of a Maildir key.
pub fn key_hash(key: &[u8]) -> u64 {
    hash64(key)
}

/// The first 8 bytes of the BLAKE3 of `bytes`.
fn hash64(bytes: &[u8]) -> u64 {
    let h = blake3::hash(bytes);
    u64::from_le_bytes(h.as_bytes()[..8].try_into().expect("8 bytes"))
}

/// An entry read, with what folding it in needs (computed where chunks are read in
/// parallel): its bytes as the map keeps them, their hash, its key's hash.
struct Prepared {
    e: MessageEntry,
    bytes: Vec<u8>,
    entry: u64,
    key: u64,
}

/// The entries of chunk `r`, prepared.
fn prepared_chunk(repo: &Repository, r: &ChunkRef) -> Result<Vec<Prepared>> {
    Ok((repo.read_chunk(r)?.into_iter())
        .map(|e| {
            let bytes = postcard::to_stdvec(&e).expect("an entry serializes");
            Prepared {
                entry: hash64(&bytes),
                key: key_hash(&e.key),
                bytes,
                e,
            }
        })
        .collect())
}

/// The records of the chunks a folder no longer has: by key hash, each with its entry's
/// hash.
type Loose = HashMap<u64, Vec<(u32, u64)>>;
