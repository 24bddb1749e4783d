//! The parent snapshot's side of a backup of one account: its folders ([`ParentAccount`]),
//! and its messages by Maildir key ([`ParentKeys`], looked up through a [`KeyLookup`]),
//! which a Maildir backup keeps without reading them again.
//!
//! The keys are held compactly, not as entries: 16 bytes a message (a 64-bit hash of its
//! key, and the folder and chunk that hold it), so that a backup's memory does not grow
//! with the parent's entries (an account of 1.5 million messages: 24 MB, where a map of
//! its entries took some 400 bytes a message). An entry is read from its chunk when it
//! is looked up, a few chunks of them kept at a time: the keys of a folder's listing are
//! looked up in key order, the chunks' order, so each chunk is read about once.
//!
//! When the folder being backed up is the only one of the account's that is listed (the
//! others kept unread: a message delivered to one folder, the common nightly change), a
//! key not in it can be in no folder the lookup would search, and the keys are not read at
//! all: the lookup walks the folder's own chunks alongside its listing ([`Walk`]), so each
//! chunk is read once, not twice (once for its keys, once for its entries).

use super::Failures;
use crate::error::Result;
use crate::repo::tree::{ChunkRef, FolderNode, MessageEntry};
use crate::repo::Repository;
use rayon::prelude::*;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::OnceLock;

/// The parent snapshot's view of one account, as the pipeline loaded it.
#[derive(Default)]
pub(crate) struct ParentAccount {
    /// Its folders, in the tree's order.
    pub(crate) folders: Vec<FolderNode>,
    /// Index in `folders` by `dir`.
    pub(crate) by_dir: HashMap<Vec<u8>, usize>,
    /// Every message of the account's listed folders by key, read on first use.
    pub(crate) by_key: OnceLock<ParentKeys>,
    /// By index in `folders`: the folders this backup keeps without a listing, whose
    /// entries are not read into `by_key` (a message moved out of one would have changed
    /// its directories). Shorter than `folders`: the others are not kept.
    pub(crate) kept: Vec<bool>,
}

/// The keys of a parent's messages: where each one's entry is.
#[derive(Default)]
pub(crate) struct ParentKeys {
    /// (hash of the key, folder index, chunk index), sorted.
    at: Vec<(u64, u32, u32)>,
    /// The chunks of each folder read, by folder index (none for the others).
    chunks: Vec<Vec<ChunkRef>>,
}

/// The hash a key is found by: not a secret (collisions cost a chunk read, never a wrong
/// answer: the key itself is compared), so std's SipHash with its fixed keys.
fn key_hash(key: &[u8]) -> u64 {
    let mut h = std::hash::DefaultHasher::new();
    key.hash(&mut h);
    h.finish()
}

impl ParentAccount {
    /// Whether folder `i` is the only one of the parent's whose messages are listed (all
    /// the others are kept unread, [`Self::kept`]): a key not in it is in none of the
    /// folders [`Self::load_keys`] would read.
    pub(crate) fn only_listed(&self, i: usize) -> bool {
        (0..self.folders.len()).all(|j| j == i || self.kept.get(j).copied().unwrap_or(false))
    }

    /// The parent's `folders` (an account's, or its home's directories), indexed.
    pub(crate) fn of(folders: Vec<FolderNode>) -> ParentAccount {
        ParentAccount {
            by_dir: (folders.iter().enumerate())
                .map(|(i, f)| (f.dir.clone(), i))
                .collect(),
            folders,
            by_key: OnceLock::new(),
            kept: Vec::new(),
        }
    }

    /// The keys of every message of the account's folders that are listed (not kept),
    /// read on the first call (a damaged parent is reported and only costs speed:
    /// everything is read again).
    pub(crate) fn load_keys(
        &self,
        repo: &Repository,
        failures: &Failures,
        account: &str,
    ) -> &ParentKeys {
        self.by_key.get_or_init(|| {
            let kept = |i: usize| self.kept.get(i).copied().unwrap_or(false);
            let read = || -> Result<ParentKeys> {
                let mut keys = ParentKeys {
                    at: Vec::new(),
                    chunks: vec![Vec::new(); self.folders.len()],
                };
                for (i, f) in (self.folders.iter().enumerate()).filter(|(i, _)| !kept(*i)) {
                    let chunks = repo.folder_chunks(f)?;
                    let hashes: Vec<Vec<u64>> = (chunks.par_iter())
                        .map(|c| {
                            Ok(repo
                                .read_chunk(c)?
                                .iter()
                                .map(|e| key_hash(&e.key))
                                .collect())
                        })
                        .collect::<Result<_>>()?;
                    for (j, hs) in hashes.into_iter().enumerate() {
                        keys.at
                            .extend(hs.into_iter().map(|h| (h, i as u32, j as u32)));
                    }
                    keys.chunks[i] = chunks;
                }
                keys.at.sort_unstable();
                Ok(keys)
            };
            read().unwrap_or_else(|e| {
                failures.fail(format!("account {account} (parent snapshot)"), &e);
                ParentKeys::default()
            })
        })
    }
}

/// Looks up a parent's messages by key.
pub enum KeyLookup<'p> {
    /// In the account's keys ([`ParentAccount::load_keys`]).
    Keys(Hashed<'p>),
    /// In the folder's own chunks, walked: it is the only one of the account listed.
    Walk(&'p Repository, Walk),
}

/// A lookup in the account's keys, reading their chunks as needed and keeping the last
/// few read.
pub struct Hashed<'p> {
    repo: &'p Repository,
    keys: &'p ParentKeys,
    /// The folder looked in first (the folder being backed up: a key in two folders is
    /// taken from the same one).
    first: Option<u32>,
    /// The chunks read last, the most recent at the end.
    recent: Vec<((u32, u32), Vec<MessageEntry>)>,
}

/// A folder's chunks read one after the other as its listing's keys come, in the order
/// both are sorted in (by key, as [`crate::repo::writer::content::save_entries`] sorts a
/// folder's entries and a Maildir listing comes).
pub struct Walk {
    chunks: Vec<ChunkRef>,
    /// The next chunk to read.
    next: usize,
    /// The entries of the chunk read last.
    current: Vec<MessageEntry>,
}

impl Walk {
    pub(crate) fn new(chunks: Vec<ChunkRef>) -> Walk {
        Walk {
            chunks,
            next: 0,
            current: Vec::new(),
        }
    }

    /// The entry of `key`, if the folder has it. A key that comes before one looked up
    /// already is not found (its chunk is passed), and a chunk that cannot be read finds
    /// none of its keys: both only cost speed, the message is read again.
    fn get(&mut self, repo: &Repository, key: &[u8]) -> Option<MessageEntry> {
        while (self.current.last()).is_none_or(|e| e.key.as_slice() < key) {
            let c = self.chunks.get(self.next)?;
            self.next += 1;
            self.current = repo.read_chunk(c).unwrap_or_default();
        }
        let i = self.current.partition_point(|e| e.key.as_slice() < key);
        self.current.get(i).filter(|e| e.key == key).cloned()
    }
}

/// Chunks a [`KeyLookup`] keeps: a listing's keys come in key order, each folder's chunks
/// too, so a folder's next key is in its chunk read last or the next; a few more for the
/// messages moved from other folders in between.
const RECENT_CHUNKS: usize = 8;

impl<'p> KeyLookup<'p> {
    /// A lookup in `keys`, folder `first`'s places first.
    pub(crate) fn new(
        repo: &'p Repository,
        keys: &'p ParentKeys,
        first: Option<usize>,
    ) -> KeyLookup<'p> {
        KeyLookup::Keys(Hashed {
            repo,
            keys,
            first: first.map(|i| i as u32),
            recent: Vec::with_capacity(RECENT_CHUNKS),
        })
    }

    /// The parent's entry of the message with key `key` (see [`Hashed::get`] and
    /// [`Walk::get`]).
    pub fn get(&mut self, key: &[u8]) -> Option<MessageEntry> {
        match self {
            KeyLookup::Keys(h) => h.get(key),
            KeyLookup::Walk(repo, w) => w.get(repo, key),
        }
    }
}

impl Hashed<'_> {
    /// The parent's entry of the message with key `key`, in any folder read (a Maildir
    /// message moved between folders keeps its key); the first folder's if it is in
    /// several. A chunk that cannot be read now (it could when the keys were loaded)
    /// only costs speed: the message is read again.
    fn get(&mut self, key: &[u8]) -> Option<MessageEntry> {
        let h = key_hash(key);
        let keys = self.keys;
        let from = keys.at.partition_point(|&(x, _, _)| x < h);
        let to = from + keys.at[from..].partition_point(|&(x, _, _)| x == h);
        let places = &keys.at[from..to];
        // The first folder's places first; otherwise the tree's order.
        let first = self.first;
        let (mine, others) = (
            places.iter().filter(|p| Some(p.1) == first),
            places.iter().filter(|p| Some(p.1) != first),
        );
        for &(_, f, c) in mine.chain(others) {
            let Some(chunk) = self.chunk((f, c)) else {
                continue;
            };
            let i = chunk.partition_point(|e| e.key.as_slice() < key);
            if let Some(e) = chunk.get(i).filter(|e| e.key == key) {
                return Some(e.clone());
            }
        }
        None
    }

    /// The entries of chunk `c` of folder `f`, read unless one of the recent.
    fn chunk(&mut self, (f, c): (u32, u32)) -> Option<&[MessageEntry]> {
        let pos = match self.recent.iter().position(|(p, _)| *p == (f, c)) {
            Some(pos) => pos,
            None => {
                let r = self.keys.chunks.get(f as usize)?.get(c as usize)?;
                let entries = self.repo.read_chunk(r).ok()?;
                if self.recent.len() == RECENT_CHUNKS {
                    self.recent.remove(0);
                }
                self.recent.push(((f, c), entries));
                self.recent.len() - 1
            }
        };
        // The one used moves to the end: the one dropped is the one unused longest.
        if pos + 1 != self.recent.len() {
            let used = self.recent.remove(pos);
            self.recent.push(used);
        }
        self.recent.last().map(|(_, es)| es.as_slice())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::repo::compress::Compression;
    use crate::repo::tests::{fast_init, folder_of, test_entry};
    use crate::repo::writer::content::save_entries;
    use crate::repo::writer::BlobSaver;
    use crate::store::MemoryStore;
    use std::sync::Arc;

    /// A folder node of `entries`, saved through `saver`.
    fn folder(saver: &BlobSaver, dir: &str, entries: Vec<MessageEntry>) -> FolderNode {
        FolderNode {
            name: dir.into(),
            dir: dir.as_bytes().to_vec(),
            ..folder_of(save_entries(saver, entries).unwrap())
        }
    }

    /// A parent's keys find each message in the folder that holds it (several chunks,
    /// a chunk tree), the first folder's copy of a key in two, nothing for a key in none
    /// or only in a kept folder; a hash shared with another key's place costs a chunk
    /// read, never a wrong answer.
    #[test]
    fn a_parent_s_keys_find_each_message_in_its_folder() {
        let store = Arc::new(MemoryStore::new());
        Repository::init(store.clone(), b"pw", &fast_init()).unwrap();
        let repo = Repository::open(store.clone(), b"pw").unwrap();
        let saver = BlobSaver::new(&repo, Compression::Zstd);
        // More chunks than a chunk-tree leaf holds at most, so that the chunk tree has two
        // leaves whatever the repository's key (leaves are cut at chunk ids, which are
        // keyed: below the maximum, some repositories' folder would be a single leaf).
        let inbox: Vec<MessageEntry> = (0..8_000).map(|i| test_entry(i, "S")).collect();
        assert!(
            crate::repo::tree::chunk_boundaries(&inbox).len() > crate::repo::tree::NODE_MAX_IDS
        );
        let mut copy = test_entry(17, "F");
        copy.mode = 0o640;
        // A key of Sent's that sorts between two of INBOX's.
        let mut odd = test_entry(500, "");
        odd.key.push(b'x');
        odd.name = [&odd.key[..], b":2,"].concat();
        let sent = vec![copy.clone(), test_entry(90_000, ""), odd.clone()];
        let kept = vec![test_entry(95_000, "")];
        let parent = ParentAccount {
            folders: vec![
                folder(&saver, "", inbox.clone()),
                folder(&saver, ".Sent", sent),
                folder(&saver, ".Kept", kept),
            ],
            kept: vec![false, false, true],
            ..ParentAccount::default()
        };
        saver.finish().unwrap();
        drop(saver);
        let repo = Repository::open(store.clone(), b"pw").unwrap();
        assert!(parent.folders[0].chunk_tree.is_some());
        let failures = Failures::default();
        let keys = parent.load_keys(&repo, &failures, "a");
        assert!(failures.take().is_empty());
        assert_eq!(keys.at.len(), inbox.len() + 3);

        let mut inbox_first = KeyLookup::new(&repo, keys, Some(0));
        for e in inbox.iter().step_by(7) {
            assert_eq!(inbox_first.get(&e.key).as_ref(), Some(e));
        }
        assert_eq!(inbox_first.get(&copy.key), Some(inbox[17].clone()));
        let mut sent_first = KeyLookup::new(&repo, keys, Some(1));
        assert_eq!(sent_first.get(&copy.key), Some(copy.clone()));
        let other = test_entry(90_000, "");
        assert_eq!(sent_first.get(&other.key), Some(other.clone()));
        assert_eq!(
            inbox_first.get(&other.key),
            Some(other),
            "found in another folder"
        );
        assert_eq!(
            inbox_first.get(&test_entry(95_000, "").key),
            None,
            "kept: not read"
        );
        assert_eq!(inbox_first.get(b"1700000000.nowhere"), None);

        // Places in every INBOX chunk under the hash of Sent's odd key, looked at first:
        // one of them has the key's neighbours, none has the key.
        let h = key_hash(&odd.key);
        let mut colliding = ParentKeys {
            at: keys.at.clone(),
            chunks: keys.chunks.clone(),
        };
        for j in 0..keys.chunks[0].len() {
            colliding.at.push((h, 0, j as u32));
        }
        colliding.at.sort_unstable();
        let mut lookup = KeyLookup::new(&repo, &colliding, Some(0));
        assert_eq!(lookup.get(&odd.key), Some(odd));

        // INBOX the only folder listed: its chunks are walked, each read once, no key
        // read beforehand.
        assert!(!parent.only_listed(0), "Sent is listed too");
        let alone = ParentAccount {
            folders: parent.folders.clone(),
            kept: vec![false, true, true],
            ..ParentAccount::default()
        };
        assert!(alone.only_listed(0) && !alone.only_listed(1));
        let chunks = repo.folder_chunks(&alone.folders[0]).unwrap();
        let n = chunks.len();
        assert!(n > 2, "{n}");
        let mut walk = KeyLookup::Walk(&repo, Walk::new(chunks));
        for e in inbox.iter().skip(3).step_by(5) {
            assert_eq!(walk.get(&e.key).as_ref(), Some(e));
            // Between two of INBOX's keys: not there.
            let mut between = e.key.clone();
            between.push(b'x');
            assert_eq!(walk.get(&between), None);
        }
        // A key passed already (its chunk is not read again: the message is read again).
        assert_eq!(walk.get(&inbox[3].key), None);
        assert_eq!(walk.get(b"9999999999.past.the.end"), None);
        let KeyLookup::Walk(_, w) = &walk else {
            panic!("not a walk")
        };
        assert_eq!(w.next, n, "each chunk once");
        assert!(alone.by_key.get().is_none(), "no keys read");
    }
}
