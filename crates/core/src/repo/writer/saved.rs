//! The blobs a run has saved so far ([`SavedIds`]), for deduplication within the run: an
//! exact set of blob ids that keeps about 12 bytes an id in memory however many the run
//! saves (a full backup of 1.5 million messages saves as many blobs; a `HashSet` of their
//! 32-byte ids took 69 MB, and twice that while it grew). The ids themselves go to an
//! unnamed temporary file, read back only when an id's first 8 bytes match one saved.
//!
//! Written here rather than taken from a crate: what is needed is a set that answers
//! "saved before?" exactly (a false "yes" would leave a blob out of the repository) with
//! most of it outside memory, on local disk; the crates at hand are either in memory
//! (hash sets, sorted vectors) or filters that answer "maybe" (Bloom, cuckoo, xor).

use crate::error::Result;
use crate::repo::id::{Id, IdSet};
use crate::repo::index::merge_sorted;
use crate::repo::lock;
use std::collections::HashSet;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::Mutex;

/// Ids held in memory before they are folded into the file: at least this many, or a
/// sixteenth of those in the file (each fold moves the key array once).
const FOLD_AT: usize = 1 << 14;
/// Bytes of an id in the file.
const ID_LEN: u64 = 32;

/// An exact set of blob ids, most of it in a temporary file (see the module's text).
pub struct SavedIds {
    inner: Mutex<Inner>,
}

struct Inner {
    /// Ids added since the last fold, in memory.
    recent: IdSet,
    /// One per id in the file, sorted by `prefix`.
    keys: Vec<Key>,
    /// `keys[starts[p]..starts[p + 1]]` hold the prefixes whose first `bits` bits are `p`:
    /// a lookup reads a stretch of a few keys, not 20 steps of a binary search over all.
    starts: Vec<u32>,
    bits: u32,
    /// The ids folded so far, 32 bytes each in the order they were folded; `None` when no
    /// temporary file could be made or written (then every id stays in `recent`).
    file: Option<File>,
}

/// An id in the file: its first 8 bytes, and its position there. 12 bytes.
#[derive(Clone, Copy)]
#[repr(C, packed)]
struct Key {
    prefix: u64,
    pos: u32,
}

const _: () = assert!(std::mem::size_of::<Key>() == 12);

fn prefix(id: &Id) -> u64 {
    u64::from_be_bytes(id.0[..8].try_into().expect("8 bytes"))
}

impl Default for SavedIds {
    fn default() -> Self {
        SavedIds::new(tempfile::tempfile().ok())
    }
}

impl SavedIds {
    /// A set whose folded ids go to `file` (an empty file; `None`: all in memory).
    fn new(file: Option<File>) -> SavedIds {
        SavedIds {
            inner: Mutex::new(Inner {
                recent: HashSet::default(),
                keys: Vec::new(),
                starts: Vec::new(),
                bits: 0,
                file,
            }),
        }
    }

    /// Adds `id`; whether it was not in the set before.
    pub fn insert(&self, id: Id) -> bool {
        let mut s = lock(&self.inner);
        if s.recent.contains(&id) || s.in_file(&id) {
            return false;
        }
        s.recent.insert(id);
        if s.file.is_some() && s.recent.len() >= FOLD_AT.max(s.keys.len() / 16) {
            s.fold();
        }
        true
    }

    /// Ids in the set.
    #[cfg(test)]
    fn len(&self) -> usize {
        let s = lock(&self.inner);
        s.recent.len() + s.keys.len()
    }
}

impl Inner {
    /// Whether `id` is among the folded ids: those whose first 8 bytes match are read back
    /// from the file and compared whole. An id the file cannot give back is taken as not
    /// there (saved twice: space lost, nothing else).
    fn in_file(&self, id: &Id) -> bool {
        let (Some(file), p) = (&self.file, prefix(id)) else {
            return false;
        };
        if self.keys.is_empty() {
            return false;
        }
        let b = (p >> (64 - self.bits)) as usize;
        let (lo, hi) = match self.starts.get(b..b + 2) {
            Some(&[lo, hi]) => (lo as usize, hi as usize),
            _ => return false,
        };
        let stretch = &self.keys[lo..hi];
        let from = stretch.partition_point(|k| k.prefix < p);
        (stretch[from..].iter().take_while(|k| k.prefix == p)).any(|k| {
            let mut found = [0u8; ID_LEN as usize];
            let at = u64::from(k.pos) * ID_LEN;
            file.read_exact_at(&mut found, at).is_ok() && found == id.0
        })
    }

    /// Appends the recent ids to the file and merges their keys into `keys` (from the
    /// back, into the array grown by their number: no second copy of it). If the file
    /// cannot take them, they stay in memory, and so does every later id.
    fn fold(&mut self) {
        let Some(file) = &self.file else { return };
        let first = self.keys.len();
        let (Ok(first_pos), Ok(_)) = (
            u32::try_from(first),
            u32::try_from(first + self.recent.len()),
        ) else {
            self.file = None;
            return;
        };
        let ids: Vec<Id> = self.recent.iter().copied().collect();
        let bytes: Vec<u8> = ids.iter().flat_map(|id| id.0).collect();
        if let Err(e) = write_at(file, &bytes, u64::from(first_pos) * ID_LEN) {
            tracing::warn!("the run's blob ids stay in memory: {e}");
            self.file = None;
            return;
        }
        self.recent.clear();
        self.recent.shrink_to(FOLD_AT);
        let new: Vec<Key> = (ids.iter().enumerate())
            .map(|(i, id)| Key {
                prefix: prefix(id),
                pos: first_pos + i as u32,
            })
            .collect();
        merge_sorted(&mut self.keys, new, |k| k.prefix);
        self.index_starts();
    }

    /// Builds `starts` for `keys`: two to four keys a stretch, at most 2^16 stretches.
    fn index_starts(&mut self) {
        let n = self.keys.len();
        self.bits = (usize::BITS - (n >> 2).leading_zeros()).clamp(1, 16);
        let mut starts = vec![0u32; (1 << self.bits) + 1];
        for k in &self.keys {
            starts[(k.prefix >> (64 - self.bits)) as usize + 1] += 1;
        }
        for p in 1..starts.len() {
            starts[p] += starts[p - 1];
        }
        self.starts = starts;
    }
}

fn write_at(file: &File, bytes: &[u8], at: u64) -> Result<()> {
    file.write_all_at(bytes, at)
        .map_err(|e| crate::error::Error::io("a temporary file of blob ids", e))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(n: u64, tail: u8) -> Id {
        let mut b = [tail; 32];
        // Spread over the prefixes as keyed hashes are.
        b[..8].copy_from_slice(&n.wrapping_mul(0x9E37_79B9_7F4A_7C15).to_be_bytes());
        Id(b)
    }

    #[test]
    fn ids_are_found_after_folds_into_the_file_and_only_those() {
        let set = SavedIds::default();
        let n = 3 * FOLD_AT as u64 + 123;
        for k in 0..n {
            assert!(set.insert(id(k, 1)), "{k} new");
        }
        assert!(
            lock(&set.inner).keys.len() >= 3 * FOLD_AT,
            "folded into the file"
        );
        assert!(lock(&set.inner).recent.len() < FOLD_AT);
        for k in 0..n {
            assert!(!set.insert(id(k, 1)), "{k} saved before");
        }
        // The same first 8 bytes, another id: not saved before.
        for k in (0..n).step_by(101) {
            assert!(set.insert(id(k, 2)), "{k} with another tail is new");
            assert!(!set.insert(id(k, 2)));
        }
        assert_eq!(set.len() as u64, n + n.div_ceil(101));
    }

    /// Ids whose first bits agree sit in one stretch of the keys, however many.
    #[test]
    fn ids_sharing_their_first_bits_are_told_apart() {
        let set = SavedIds::default();
        let id = |k: u64| {
            let mut b = [3u8; 32];
            b[..8].copy_from_slice(&((0xABCD_u64 << 48) | (k * 7)).to_be_bytes());
            Id(b)
        };
        let n = 2 * FOLD_AT as u64;
        for k in 0..n {
            assert!(set.insert(id(k)));
        }
        assert!(lock(&set.inner).keys.len() >= FOLD_AT);
        for k in 0..n {
            assert!(!set.insert(id(k)), "{k}");
        }
        for k in [n, n + 1, n * 3] {
            assert!(set.insert(id(k)), "{k} is new");
        }
    }

    #[test]
    fn without_a_file_every_id_stays_in_memory() {
        let set = SavedIds::new(None);
        for k in 0..(FOLD_AT as u64 + 10) {
            assert!(set.insert(id(k, 7)));
        }
        assert!(!set.insert(id(3, 7)));
        assert!(lock(&set.inner).keys.is_empty());
    }

    #[test]
    fn a_file_that_cannot_be_written_leaves_the_ids_in_memory() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ro");
        std::fs::write(&path, b"").unwrap();
        let set = SavedIds::new(Some(File::open(&path).unwrap())); // read-only
        for k in 0..(FOLD_AT as u64 + 10) {
            assert!(set.insert(id(k, 9)));
        }
        for k in 0..(FOLD_AT as u64 + 10) {
            assert!(!set.insert(id(k, 9)), "{k} kept in memory");
        }
        assert!(lock(&set.inner).file.is_none());
    }
}
