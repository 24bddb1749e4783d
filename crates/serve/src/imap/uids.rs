//! The derived UIDs of a folder that neither a complete `dovecot-uidlist` nor an IMAP
//! backup's keys number (docs/imap-view.md, "How UIDs are derived"), worked out from the
//! snapshots that hold the account, oldest first, up to the one viewed; nothing is stored.
//!
//! The first snapshot that holds the folder numbers its messages 1..N in the order a
//! restore writes them in ([`mailvault_core::restore::arrival_order`]), and UIDVALIDITY is
//! the hash of its keys in that order ([`uidvalidity_of`]). Each later snapshot keeps the
//! UID of every key the one before it held, and gives the keys it did not hold the next
//! UIDs after the highest given so far, in arrival order. A key that comes back after
//! it was gone is a new message, with a new UID: IMAP gives every message added to a
//! mailbox a higher UID than those added before it. A later backup that adds messages
//! so keeps the numbering and UIDVALIDITY, and a snapshot's numbering depends on the
//! snapshots up to it alone, so later backups never change it.
//!
//! The cost: an account tree is read only when it differs from the previous snapshot's,
//! and of a folder only the chunks that the previous snapshot did not have (a chunk's
//! keys are its `entries` blob's: a flag change does not touch them); keys are kept in
//! hash maps, so a walk costs the chunks read, not the folder's size times the snapshots.

use mailvault_core::model::folder_name;
use mailvault_core::repo::forgotten::forgotten_since;
use mailvault_core::repo::id::IdMap;
use mailvault_core::repo::tree::{
    AccountTree, ChunkRef, FolderNode, MessageChunk, MessageEntry, Timestamp,
};
use mailvault_core::{Error, Id, Repository, Result};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// A snapshot that holds the account: its full id (hex), its time (Unix seconds) and the
/// account's tree in it.
#[derive(Clone, Debug)]
pub struct Held {
    pub snapshot: String,
    pub time: i64,
    pub tree: Id,
}

/// A folder's numbering as of one snapshot.
pub struct Numbering {
    pub uidvalidity: u32,
    /// The UID of each key the folder holds in that snapshot.
    pub uids: HashMap<Vec<u8>, u32>,
}

/// What a message's place in the arrival order is worked out from.
struct Arrival {
    key: Vec<u8>,
    mtime: Timestamp,
}

/// The numbering of folder `folder` (its [`folder_name`]) as of snapshot `snapshot`, from
/// `history`: the snapshots that hold the account, oldest first.
pub fn numbering(
    repo: &Repository,
    history: &[Held],
    snapshot: &str,
    folder: &str,
) -> Result<Numbering> {
    let Some(end) = history.iter().position(|h| h.snapshot == snapshot) else {
        return Err(Error::NotFound(format!(
            "no snapshot {} holds the account",
            &snapshot[..8.min(snapshot.len())]
        )));
    };
    let mut walk = Walk::default();
    let mut last_tree = None;
    let mut first = None;
    for h in &history[..=end] {
        // The same account tree: the same folders, the same keys.
        if last_tree == Some(h.tree) {
            continue;
        }
        last_tree = Some(h.tree);
        let tree: AccountTree = repo.read_tree(&h.tree)?;
        let node = tree.folders.iter().find(|f| folder_name(f) == folder);
        walk.step(repo, node)?;
        if first.is_none() && walk.uidvalidity.is_some() {
            first = Some(h.time);
        }
    }
    let mut uidvalidity = walk.uidvalidity.unwrap_or(1);
    if let Some(since) = first {
        uidvalidity = with_forgotten(uidvalidity, &forgotten_since(repo, since)?);
    }
    Ok(Numbering {
        uidvalidity,
        uids: walk.uids,
    })
}

/// UIDVALIDITY `v` changed by the snapshots forgotten since the folder's first snapshot
/// (`v` itself when there are none). The numbering of a later snapshot depends on every
/// snapshot before it: one forgotten in between may have been where messages arrived,
/// and the walk without it numbers them otherwise. Their ids are gone with them, so
/// every snapshot forgotten since the folder first appeared counts (one forgotten before
/// was older than the folder): a client then fetches the folder again, rather than see
/// another message under a UID it knew.
fn with_forgotten(v: u32, forgotten: &std::collections::BTreeSet<Id>) -> u32 {
    if forgotten.is_empty() {
        return v;
    }
    let mut h = blake3::Hasher::new();
    h.update(&v.to_be_bytes());
    for id in forgotten {
        h.update(&id.0);
    }
    let b = h.finalize();
    u32::from_be_bytes([
        b.as_bytes()[0],
        b.as_bytes()[1],
        b.as_bytes()[2],
        b.as_bytes()[3],
    ])
    .max(1)
}

/// The numbering as the snapshots walked so far left it.
#[derive(Default)]
struct Walk {
    /// Set by the first snapshot that holds the folder.
    uidvalidity: Option<u32>,
    /// The highest UID given so far.
    last: u32,
    /// The UID of each key the folder holds in the last snapshot walked.
    uids: HashMap<Vec<u8>, u32>,
    /// The keys of each chunk of the folder in the last snapshot walked, by the id of
    /// the chunk's `entries` blob.
    chunks: IdMap<Arc<Vec<Arrival>>>,
    /// The chunks and chunk tree of the folder's node in the last snapshot walked.
    last_node: Option<(Vec<ChunkRef>, Option<Id>)>,
}

impl Walk {
    /// Takes the next snapshot, whose folder is `node` (`None`: it has no such folder).
    fn step(&mut self, repo: &Repository, node: Option<&FolderNode>) -> Result<()> {
        // The same chunks as the previous snapshot's folder: the same keys (a large
        // folder's chunk tree is not walked again).
        let chunks = node.map(|n| (n.chunks.clone(), n.chunk_tree));
        if self.uidvalidity.is_some() && chunks.is_some() && chunks == self.last_node {
            return Ok(());
        }
        self.last_node = chunks;
        let refs = match node {
            Some(n) => repo.folder_chunks(n)?,
            None => Vec::new(),
        };
        let mut kept: IdMap<Arc<Vec<Arrival>>> = IdMap::default();
        let mut added = Vec::new();
        for c in &refs {
            if kept.contains_key(&c.entries) {
                continue;
            }
            let keys = match self.chunks.remove(&c.entries) {
                Some(k) => k,
                None => {
                    let m: MessageChunk = repo.read_tree(&c.entries)?;
                    let k: Vec<Arrival> = (m.entries.into_iter())
                        .map(|s| Arrival {
                            key: s.key,
                            mtime: s.mtime,
                        })
                        .collect();
                    let k = Arc::new(k);
                    added.push(k.clone());
                    k
                }
            };
            kept.insert(c.entries, keys);
        }
        let removed = std::mem::replace(&mut self.chunks, kept);
        // Keys of a chunk gone that are in a chunk come (chunk boundaries move) stay.
        let added_keys: HashSet<&[u8]> = (added.iter())
            .flat_map(|c| c.iter().map(|a| a.key.as_slice()))
            .collect();
        for a in removed.values().flat_map(|c| c.iter()) {
            if !added_keys.contains(a.key.as_slice()) {
                self.uids.remove(&a.key);
            }
        }
        let mut new: Vec<&Arrival> = (added.iter().flat_map(|c| c.iter()))
            .filter(|a| !self.uids.contains_key(&a.key))
            .collect();
        if !new.is_empty() {
            let uidlist = match node {
                Some(n) => {
                    mailvault_core::model::assemble::folder_file(repo, n, b"dovecot-uidlist")?
                }
                None => None,
            };
            let map = (uidlist.as_deref()).map(mailvault_core::imap::names::parse_uidlist);
            new.sort_by_cached_key(|a| arrival_order(map.as_ref(), a));
            new.dedup_by(|a, b| a.key == b.key);
        }
        if node.is_some() && self.uidvalidity.is_none() {
            self.uidvalidity = Some(uidvalidity_of(new.iter().map(|a| a.key.as_slice())));
        }
        for a in new {
            self.last = self
                .last
                .checked_add(1)
                .ok_or_else(|| Error::Internal("a folder's derived UIDs ran past 2^32".into()))?;
            self.uids.insert(a.key.clone(), self.last);
        }
        Ok(())
    }
}

/// [`mailvault_core::restore::arrival_order`] of the message `a` is about.
fn arrival_order(uidlist: Option<&HashMap<Vec<u8>, u32>>, a: &Arrival) -> (u8, i64, u32, Vec<u8>) {
    let e = MessageEntry {
        key: a.key.clone(),
        name: Vec::new(),
        new: false,
        size: 0,
        mtime: a.mtime,
        mode: 0,
        uid: 0,
        gid: 0,
        hash: Id::default(),
        content: Vec::new(),
        from: String::new(),
        subject: String::new(),
        date: None,
    };
    mailvault_core::restore::arrival_order(uidlist, &e)
}

/// The UIDVALIDITY of a numbering whose first keys are `keys`, in UID order: the first
/// four bytes (big-endian; 1 if they are 0) of the BLAKE3 hash of the keys, each preceded
/// by its length (a u64, big-endian).
pub fn uidvalidity_of<'a>(keys: impl Iterator<Item = &'a [u8]>) -> u32 {
    let mut h = blake3::Hasher::new();
    for k in keys {
        h.update(&(k.len() as u64).to_be_bytes());
        h.update(k);
    }
    let hash = h.finalize();
    let b = hash.as_bytes();
    u32::from_be_bytes([b[0], b[1], b[2], b[3]]).max(1)
}
