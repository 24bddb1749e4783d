//! The header file of a split (`headers.mvh`): the compact header
//! ([`crate::mail::header::compact`]) of every content the split indexes, so that the IMAP
//! view answers a mail client's message list (a first sync of a folder of 100,000
//! messages, after any restart, on any host) without reading the messages.
//!
//! It is one more file of the split, sealed and pruned with it: written when a split is
//! built (`index`, `backup --index`) from the bytes the indexer reads anyway, merged when
//! splits merge (the contents kept, only), verified by `check`. Splits written before it
//! have none; the view then reads the message and keeps its compact header in memory.
//!
//! Layout (integers little endian): `"mvhdrs1\n"`, the count `n` (u64), the `n` contents'
//! keyed hashes (32 bytes each, ascending), `n + 1` offsets (u64, ascending, the first 0)
//! into the data, then the data: compact header `i` is `data[offset i .. offset i+1]`.
//! A lookup is a binary search over the hashes of the file as the local copy maps it;
//! nothing is read into memory at open. A file that does not hold to the layout (a damaged
//! local copy) answers nothing rather than something out of bounds, and `check` reports it.

use crate::error::{Error, Result};
use crate::repo::id::Id;
use std::collections::HashSet;
use std::path::Path;
use tantivy::Directory;

/// The file's name in a split.
pub const FILE: &str = "headers.mvh";

const MAGIC: &[u8; 8] = b"mvhdrs1\n";

/// The header file of `entries` (content, compact header); a content given twice is kept
/// once. (`split::write_header_file` writes it into a split.)
pub fn encode(mut entries: Vec<(Id, Vec<u8>)>) -> Vec<u8> {
    entries.sort_unstable_by_key(|e| e.0);
    entries.dedup_by(|a, b| a.0 == b.0);
    let n = entries.len();
    let data: usize = entries.iter().map(|e| e.1.len()).sum();
    let mut out = Vec::with_capacity(16 + n * 40 + 8 + data);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&(n as u64).to_le_bytes());
    for (h, _) in &entries {
        out.extend_from_slice(&h.0);
    }
    let mut at = 0u64;
    out.extend_from_slice(&at.to_le_bytes());
    for (_, c) in &entries {
        at += c.len() as u64;
        out.extend_from_slice(&at.to_le_bytes());
    }
    for (_, c) in &entries {
        out.extend_from_slice(c);
    }
    out
}

/// A split's header file, as mapped.
pub struct HeaderFile {
    bytes: tantivy::directory::OwnedBytes,
    n: usize,
}

impl HeaderFile {
    /// The header file of the split whose local copy is `split_dir`, mapped by tantivy's
    /// directory (not its managed one, which expects tantivy's footer); `None` when it
    /// has none.
    pub fn open(split_dir: &Path) -> Result<Option<HeaderFile>> {
        let path = Path::new(FILE);
        let dir = tantivy::directory::MmapDirectory::open(split_dir)
            .map_err(|e| Error::search("opening a split's directory", e))?;
        if !dir.exists(path).unwrap_or(false) {
            return Ok(None);
        }
        let slice = (dir.open_read(path)).map_err(|e| Error::search("opening a header file", e))?;
        let bytes = (slice.read_bytes()).map_err(|e| Error::search("reading a header file", e))?;
        HeaderFile::parse(bytes).map(Some)
    }

    fn parse(bytes: tantivy::directory::OwnedBytes) -> Result<HeaderFile> {
        let bad = || Error::corrupt(FILE, "not a header file: its length or magic is wrong");
        let b = bytes.as_slice();
        if b.len() < 16 || &b[..8] != MAGIC {
            return Err(bad());
        }
        let n = u64::from_le_bytes(b[8..16].try_into().map_err(|_| bad())?);
        let fixed = (n.checked_mul(40).and_then(|x| x.checked_add(24))).ok_or_else(bad)?;
        if fixed > b.len() as u64 {
            return Err(bad());
        }
        Ok(HeaderFile {
            n: n as usize,
            bytes,
        })
    }

    /// Contents it holds.
    pub fn len(&self) -> usize {
        self.n
    }

    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    fn hash(&self, i: usize) -> &[u8] {
        &self.bytes.as_slice()[16 + i * 32..16 + (i + 1) * 32]
    }

    fn offset(&self, i: usize) -> u64 {
        let at = 16 + self.n * 32 + i * 8;
        let b = &self.bytes.as_slice()[at..at + 8];
        u64::from_le_bytes(b.try_into().unwrap_or_default())
    }

    /// Compact header `i`; `None` when its offsets are out of order or of bounds.
    fn header(&self, i: usize) -> Option<&[u8]> {
        let data = &self.bytes.as_slice()[16 + self.n * 40 + 8..];
        let (start, end) = (self.offset(i), self.offset(i + 1));
        (start <= end && end <= data.len() as u64).then(|| &data[start as usize..end as usize])
    }

    /// The compact header of content `hash`, if the file holds it.
    pub fn get(&self, hash: &Id) -> Option<&[u8]> {
        let (mut lo, mut hi) = (0, self.n);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            match self.hash(mid).cmp(&hash.0[..]) {
                std::cmp::Ordering::Less => lo = mid + 1,
                std::cmp::Ordering::Greater => hi = mid,
                std::cmp::Ordering::Equal => return self.header(mid),
            }
        }
        None
    }

    /// Every content and its compact header, in the file's order.
    pub fn entries(&self) -> impl Iterator<Item = (Id, &[u8])> + '_ {
        (0..self.n).filter_map(|i| {
            let h = Id(self.hash(i).try_into().ok()?);
            Some((h, self.header(i)?))
        })
    }

    /// Checks it against the contents its split indexes: contents of the split (every
    /// one, unless the split merged splits written before header files), ascending, each
    /// with its header in bounds.
    pub fn verify(&self, contents: &HashSet<Id>) -> std::result::Result<(), String> {
        if self.n > contents.len() {
            return Err(format!(
                "{FILE} holds {} contents, the split {}",
                self.n,
                contents.len()
            ));
        }
        let mut last: Option<&[u8]> = None;
        for i in 0..self.n {
            let h = self.hash(i);
            if last.is_some_and(|l| l >= h) {
                return Err(format!("{FILE}: contents out of order"));
            }
            last = Some(h);
            let id = Id(h.try_into().map_err(|_| format!("{FILE}: a short hash"))?);
            if !contents.contains(&id) {
                return Err(format!("{FILE} holds a content the split does not"));
            }
            if self.header(i).is_none() {
                return Err(format!("{FILE}: a header out of bounds"));
            }
        }
        Ok(())
    }
}

/// The entries of `files` whose contents `keep` holds: what a merged split's file holds.
pub fn merged(files: &[HeaderFile], keep: &HashSet<Id>) -> Vec<(Id, Vec<u8>)> {
    (files.iter())
        .flat_map(|f| f.entries())
        .filter(|(h, _)| keep.contains(h))
        .map(|(h, c)| (h, c.to_vec()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(bytes: Vec<u8>) -> Result<HeaderFile> {
        HeaderFile::parse(tantivy::directory::OwnedBytes::new(bytes))
    }

    #[test]
    fn each_content_finds_its_own_header_and_others_none() {
        let entries: Vec<(Id, Vec<u8>)> = (0..300u32)
            .map(|i| {
                let h = Id(*blake3::hash(&i.to_le_bytes()).as_bytes());
                (h, format!("Subject: {i}\r\n\r\n").into_bytes())
            })
            .collect();
        let mut twice = entries.clone();
        twice.push(entries[7].clone());
        let f = parse(encode(twice)).unwrap();
        assert_eq!(f.len(), 300);
        for (h, c) in &entries {
            assert_eq!(f.get(h), Some(&c[..]));
        }
        assert_eq!(f.get(&Id([0; 32])), None);
        assert_eq!(f.get(&Id([0xff; 32])), None);
        let all: HashSet<Id> = entries.iter().map(|e| e.0).collect();
        assert_eq!(f.verify(&all), Ok(()));
        let keep: HashSet<Id> = all.iter().take(10).copied().collect();
        let m = merged(&[f], &keep);
        assert_eq!(m.len(), 10);
        assert!(m
            .iter()
            .all(|(h, c)| entries.iter().any(|e| e.0 == *h && e.1 == *c)));
    }

    #[test]
    fn a_damaged_file_answers_nothing_out_of_bounds_and_check_says_so() {
        let h = Id([5; 32]);
        let good = encode(vec![(h, b"To: a\r\n\r\n".to_vec())]);
        // A count larger than the file, a wrong magic, a short file: refused at open.
        let mut huge = good.clone();
        huge[8..16].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(parse(huge).is_err());
        let mut magic = good.clone();
        magic[0] = b'x';
        assert!(parse(magic).is_err() && parse(good[..10].to_vec()).is_err());
        // An offset past the data: no header, and `verify` fails.
        let mut off = good.clone();
        let at = 16 + 32 + 8;
        off[at..at + 8].copy_from_slice(&1000u64.to_le_bytes());
        let f = parse(off).unwrap();
        assert_eq!(f.get(&h), None);
        assert!(f.verify(&HashSet::from([h])).is_err());
        let f = parse(good).unwrap();
        assert!(
            f.verify(&HashSet::from([Id([6; 32])])).is_err(),
            "another content"
        );
        assert!(f.verify(&HashSet::new()).is_err(), "more than the split's");
    }
}
