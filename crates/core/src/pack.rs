//! Pack files: many sealed blobs in one repository object.
//!
//! ```text
//! pack   = blob* header header_len
//! blob   = seal(encoded bytes)              one per blob, at the offsets the header implies
//! header = seal("MVPK" 0x01 count:u32 entry*)
//! entry  = kind:u8 codec:u8 stored_len:u32 raw_len:u32 id:[32]   (42 bytes, little endian)
//! header_len = u32 LE length of the sealed header
//! ```
//! A pack is named by the plain BLAKE3 of its bytes, so any damage shows as a name mismatch.

use crate::compress::Codec;
use crate::crypto::MasterKey;
use crate::error::{Error, Result};
use crate::id::Id;
use crate::store::Store;

const MAGIC: &[u8; 4] = b"MVPK";
const VERSION: u8 = 1;
const ENTRY_LEN: usize = 42;

/// What a blob holds: message content or metadata. They go to different packs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum BlobKind {
    Data = 0,
    Tree = 1,
}

impl BlobKind {
    pub fn from_u8(v: u8) -> Option<BlobKind> {
        match v {
            0 => Some(BlobKind::Data),
            1 => Some(BlobKind::Tree),
            _ => None,
        }
    }
}

/// One blob's place in a pack.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PackEntry {
    pub id: Id,
    pub kind: BlobKind,
    pub codec: Codec,
    pub offset: u32,
    pub stored_len: u32,
    pub raw_len: u32,
}

/// Packs with their entries, as written to an index file.
pub type PackList = Vec<(Id, Vec<PackEntry>)>;

/// The repository path of a pack.
pub fn pack_path(id: &Id) -> String {
    let hex = id.to_hex();
    format!("data/{}/{}", &hex[..2], hex)
}

/// Accumulates sealed blobs until the pack is big enough to write.
#[derive(Default)]
pub struct PackBuilder {
    buf: Vec<u8>,
    entries: Vec<PackEntry>,
}

/// A finished pack, ready to be stored.
pub struct FinishedPack {
    pub id: Id,
    pub bytes: Vec<u8>,
    pub entries: Vec<PackEntry>,
}

impl PackBuilder {
    pub fn add(&mut self, id: Id, kind: BlobKind, codec: Codec, raw_len: usize, sealed: &[u8]) {
        self.entries.push(PackEntry {
            id,
            kind,
            codec,
            offset: self.buf.len() as u32,
            stored_len: sealed.len() as u32,
            raw_len: raw_len as u32,
        });
        self.grow_for(sealed.len());
        self.buf.extend_from_slice(sealed);
    }

    pub fn len(&self) -> usize {
        self.buf.len()
    }

    /// Makes room for `more` bytes, growing in steps of at most 2 MiB rather than doubling:
    /// a doubled 16 MiB buffer per worker was most of a backup's peak memory. (Large
    /// reallocations are `mremap`s, not copies.)
    fn grow_for(&mut self, more: usize) {
        let need = self.buf.len() + more;
        if need > self.buf.capacity() {
            let step = (self.buf.capacity() / 2).clamp(64 << 10, 2 << 20);
            self.buf
                .reserve_exact(need.max(self.buf.capacity() + step) - self.buf.len());
        }
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Seals the header onto the blobs and names the pack.
    pub fn finish(self, key: &MasterKey) -> FinishedPack {
        let mut bytes = self.buf;
        let header = key.seal(&encode_header(&self.entries));
        bytes.extend_from_slice(&header);
        bytes.extend_from_slice(&(header.len() as u32).to_le_bytes());
        FinishedPack {
            id: Id::of_file(&bytes),
            bytes,
            entries: self.entries,
        }
    }
}

fn encode_header(entries: &[PackEntry]) -> Vec<u8> {
    let mut h = Vec::with_capacity(9 + entries.len() * ENTRY_LEN);
    h.extend_from_slice(MAGIC);
    h.push(VERSION);
    h.extend_from_slice(&(entries.len() as u32).to_le_bytes());
    for e in entries {
        h.push(e.kind as u8);
        h.push(e.codec as u8);
        h.extend_from_slice(&e.stored_len.to_le_bytes());
        h.extend_from_slice(&e.raw_len.to_le_bytes());
        h.extend_from_slice(&e.id.0);
    }
    h
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    let mut x = [0u8; 4];
    x.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(x)
}

/// Parses a header's plaintext; `blobs_len` is where the header starts in the pack.
fn decode_header(h: &[u8], blobs_len: u64, what: &str) -> Result<Vec<PackEntry>> {
    if h.len() < 9 || &h[..4] != MAGIC {
        return Err(Error::corrupt(what, "not a pack header"));
    }
    if h[4] != VERSION {
        return Err(Error::corrupt(
            what,
            format!("pack header version {}", h[4]),
        ));
    }
    let count = u32_at(h, 5) as usize;
    if h.len() != 9 + count * ENTRY_LEN {
        return Err(Error::corrupt(
            what,
            "pack header length does not match its count",
        ));
    }
    let mut entries = Vec::with_capacity(count);
    let mut offset = 0u64;
    for i in 0..count {
        let e = &h[9 + i * ENTRY_LEN..9 + (i + 1) * ENTRY_LEN];
        let kind = BlobKind::from_u8(e[0]).ok_or_else(|| Error::corrupt(what, "bad blob kind"))?;
        let codec = Codec::from_u8(e[1]).ok_or_else(|| Error::corrupt(what, "bad codec"))?;
        let stored_len = u32_at(e, 2);
        let mut id = [0u8; 32];
        id.copy_from_slice(&e[10..42]);
        entries.push(PackEntry {
            id: Id(id),
            kind,
            codec,
            offset: offset as u32,
            stored_len,
            raw_len: u32_at(e, 6),
        });
        offset += u64::from(stored_len);
    }
    if offset != blobs_len {
        return Err(Error::corrupt(
            what,
            "blob lengths do not add up to the pack size",
        ));
    }
    Ok(entries)
}

/// Reads and opens the header of a pack of `size` bytes from the store.
pub fn read_header(
    store: &dyn Store,
    key: &MasterKey,
    path: &str,
    size: u64,
) -> Result<Vec<PackEntry>> {
    if size < 4 {
        return Err(Error::corrupt(path, "too short to be a pack"));
    }
    let tail = store.get_range(path, size - 4, 4)?;
    let hlen = u64::from(u32_at(&tail, 0));
    if hlen + 4 > size {
        return Err(Error::corrupt(path, "header length larger than the pack"));
    }
    let sealed = store.get_range(path, size - 4 - hlen, hlen)?;
    let plain = key.open(&sealed, &format!("{path} (header)"))?;
    decode_header(&plain, size - 4 - hlen, path)
}

/// Parses the header of a pack held whole in memory.
pub fn header_of(bytes: &[u8], key: &MasterKey, path: &str) -> Result<Vec<PackEntry>> {
    let size = bytes.len() as u64;
    if size < 4 {
        return Err(Error::corrupt(path, "too short to be a pack"));
    }
    let hlen = u64::from(u32_at(bytes, bytes.len() - 4));
    if hlen + 4 > size {
        return Err(Error::corrupt(path, "header length larger than the pack"));
    }
    let start = (size - 4 - hlen) as usize;
    let plain = key.open(&bytes[start..bytes.len() - 4], &format!("{path} (header)"))?;
    decode_header(&plain, start as u64, path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::MemoryStore;

    #[test]
    fn pack_round_trip_and_damage() {
        let key = MasterKey::random();
        let mut b = PackBuilder::default();
        let blobs: Vec<Vec<u8>> = (0..10).map(|i| vec![i as u8; 100 * i + 1]).collect();
        for (i, blob) in blobs.iter().enumerate() {
            let sealed = key.seal(blob);
            b.add(
                key.blob_id(blob),
                if i % 2 == 0 {
                    BlobKind::Data
                } else {
                    BlobKind::Tree
                },
                Codec::Raw,
                blob.len(),
                &sealed,
            );
        }
        let p = b.finish(&key);
        assert_eq!(p.id, Id::of_file(&p.bytes));
        let store = MemoryStore::new();
        let path = pack_path(&p.id);
        store.put(&path, &p.bytes).unwrap();
        let h = read_header(&store, &key, &path, p.bytes.len() as u64).unwrap();
        assert_eq!(h, p.entries);
        assert_eq!(header_of(&p.bytes, &key, &path).unwrap(), p.entries);
        for (e, blob) in h.iter().zip(&blobs) {
            let sealed = store
                .get_range(&path, e.offset.into(), e.stored_len.into())
                .unwrap();
            assert_eq!(&key.open(&sealed, "b").unwrap(), blob);
        }
        let mut bad = p.bytes.clone();
        let n = bad.len();
        bad[n - 10] ^= 1;
        assert!(header_of(&bad, &key, &path).is_err());
    }
}
