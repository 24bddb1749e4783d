//! Pack files: many sealed blobs in one repository object.
//!
//! ```text
//! format 1: pack = blob* header header_len
//!           header = seal("MVPK" 0x01 count:u32 entry*)
//!           header_len = u32 LE length of the sealed header (plaintext)
//! format 2: pack = blob* header trailer
//!           header  = seal[PackHeader]("MVPK" 0x02 count:u32 entry*)
//!           trailer = seal[PackTrailer](header_len:u32)        (44 bytes)
//! blob   = seal(encoded bytes), in format 2 seal[Blob(kind, id)], at the offsets the
//!          header implies
//! entry  = kind:u8 codec:u8 stored_len:u32 raw_len:u32 id:[32]   (42 bytes, little endian)
//! ```
//! A pack is named by the plain BLAKE3 of its bytes, so any damage shows as a name mismatch.
//! Format 2 seals the header's length, so a pack's size no longer tells how many blobs it
//! holds.

use crate::error::{Error, Result};
use crate::repo::compress::Codec;
use crate::repo::crypto::{MasterKey, SEAL_OVERHEAD};
use crate::repo::format::{BlobKind, Object, Version};
use crate::repo::id::Id;
use crate::store::Backend;
use crate::store::Store;

const MAGIC: &[u8; 4] = b"MVPK";
const ENTRY_LEN: usize = 42;
/// Length of a format-2 pack's sealed trailer.
pub const TRAILER_LEN: usize = SEAL_OVERHEAD + 4;

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

/// A pack with its format and entries, as an index file lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IndexedPack {
    pub id: Id,
    pub version: Version,
    pub entries: Vec<PackEntry>,
}

/// Packs with their entries, as written to an index file.
pub type PackList = Vec<IndexedPack>;

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
    pub version: Version,
    pub bytes: Vec<u8>,
    pub entries: Vec<PackEntry>,
}

impl PackBuilder {
    /// An empty pack that fills `buf` (cleared; a buffer of a pack already written, so
    /// that its pages need not be mapped and zeroed again).
    pub fn with_buffer(mut buf: Vec<u8>) -> PackBuilder {
        buf.clear();
        PackBuilder {
            buf,
            entries: Vec::new(),
        }
    }

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

    /// Moves every blob of `other` into this pack, after its own.
    pub fn absorb(&mut self, other: PackBuilder) {
        let base = self.buf.len() as u32;
        self.grow_for(other.buf.len());
        self.buf.extend_from_slice(&other.buf);
        self.entries
            .extend(other.entries.into_iter().map(|e| PackEntry {
                offset: e.offset + base,
                ..e
            }));
    }

    /// Seals the header onto the blobs (as `version` has it) and names the pack.
    pub fn finish(self, key: &MasterKey, version: Version) -> FinishedPack {
        let mut bytes = self.buf;
        let plain = encode_header(&self.entries, version);
        // The header's room exactly: grown by doubling, a buffer of 8 MiB of blobs would
        // take 16 MiB for a header of a few.
        bytes.reserve_exact(plain.len() + 2 * crate::repo::crypto::SEAL_OVERHEAD + 4);
        match version {
            Version::V1 => {
                let header = key.seal(&plain);
                bytes.extend_from_slice(&header);
                bytes.extend_from_slice(&(header.len() as u32).to_le_bytes());
            }
            Version::V2 => {
                let header = key.seal_ad(&plain, &Object::PackHeader.aad());
                bytes.extend_from_slice(&header);
                let len = (header.len() as u32).to_le_bytes();
                bytes.extend_from_slice(&key.seal_ad(&len, &Object::PackTrailer.aad()));
            }
        }
        FinishedPack {
            id: Id::of_file(&bytes),
            version,
            bytes,
            entries: self.entries,
        }
    }
}

fn encode_header(entries: &[PackEntry], version: Version) -> Vec<u8> {
    let mut h = Vec::with_capacity(9 + entries.len() * ENTRY_LEN);
    h.extend_from_slice(MAGIC);
    h.push(version.number() as u8);
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

/// Parses a header's plaintext of a pack of `version`; `blobs_len` is where the header
/// starts in the pack.
pub fn decode_header(
    h: &[u8],
    version: Version,
    blobs_len: u64,
    what: &str,
) -> Result<Vec<PackEntry>> {
    if h.len() < 9 || &h[..4] != MAGIC {
        return Err(Error::corrupt(what, "not a pack header"));
    }
    if u32::from(h[4]) != version.number() {
        return Err(Error::corrupt(
            what,
            format!("pack header version {} in a format-{version} pack", h[4]),
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

/// Reads and opens the header of a pack of `size` bytes from the store (two or three
/// ranged reads). `allowed` are the pack formats the caller accepts: a pack of another
/// is an error that says which it is.
pub fn read_header(
    store: &dyn Backend,
    key: &MasterKey,
    path: &str,
    size: u64,
    allowed: &[Version],
) -> Result<(Version, Vec<PackEntry>)> {
    parse_tail(key, path, size, allowed, |start, len| {
        store.get_range(path, start, len)
    })
}

/// Parses the header of a pack held whole in memory; see [`read_header`].
pub fn header_of(
    bytes: &[u8],
    key: &MasterKey,
    path: &str,
    allowed: &[Version],
) -> Result<(Version, Vec<PackEntry>)> {
    parse_tail(key, path, bytes.len() as u64, allowed, |start, len| {
        Ok(bytes[start as usize..(start + len) as usize].to_vec())
    })
}

/// The header of a pack of `size` bytes whose ranges `get(start, len)` reads. A format-2
/// pack is recognized by its trailer, which opens only under the repository's key as a
/// pack trailer; anything else is read as format 1 if that is allowed.
fn parse_tail(
    key: &MasterKey,
    path: &str,
    size: u64,
    allowed: &[Version],
    get: impl Fn(u64, u64) -> Result<Vec<u8>>,
) -> Result<(Version, Vec<PackEntry>)> {
    let header_what = format!("{path} (header)");
    let trailer = TRAILER_LEN as u64;
    if size >= trailer {
        let tail = get(size - trailer, trailer)?;
        if let Ok(len) = key.open_vec_ad(tail, &Object::PackTrailer.aad(), path) {
            if !allowed.contains(&Version::V2) {
                return Err(Error::corrupt(
                    path,
                    "a format-2 pack in a format-1 repository",
                ));
            }
            let hlen = u64::from(u32_at(&len, 0));
            if len.len() != 4 || hlen + trailer > size {
                return Err(Error::corrupt(path, "header length larger than the pack"));
            }
            let start = size - trailer - hlen;
            let plain =
                key.open_vec_ad(get(start, hlen)?, &Object::PackHeader.aad(), &header_what)?;
            let entries = decode_header(&plain, Version::V2, start, path)?;
            return Ok((Version::V2, entries));
        }
    }
    if size < 4 {
        return Err(Error::corrupt(path, "too short to be a pack"));
    }
    let tail = get(size - 4, 4)?;
    let hlen = u64::from(u32_at(&tail, 0));
    if hlen + 4 > size {
        return Err(Error::corrupt(
            path,
            match allowed.contains(&Version::V2) {
                true => "not a pack (its trailer does not open, and it is no format-1 pack either)",
                false => "header length larger than the pack",
            },
        ));
    }
    let start = size - 4 - hlen;
    let sealed = get(start, hlen)?;
    if !allowed.contains(&Version::V1) {
        // Say what it is when it is a format-1 pack (sealed without associated data).
        return Err(match key.opens_with(&sealed, &[]) {
            true => Error::corrupt(path, "a format-1 pack in a format-2 repository"),
            false => Error::corrupt(path, "its trailer does not open: damaged or not a pack"),
        });
    }
    let plain = key.open_vec(sealed, &header_what)?;
    let entries = decode_header(&plain, Version::V1, start, path)?;
    Ok((Version::V1, entries))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::MemoryStore;

    #[test]
    fn absorbed_packs_keep_every_blob_at_its_place() {
        let key = MasterKey::random();
        let blobs: Vec<Vec<u8>> = (0..6).map(|i| vec![i as u8 + 1; 50 * i + 3]).collect();
        let (mut a, mut b) = (PackBuilder::default(), PackBuilder::default());
        for (i, blob) in blobs.iter().enumerate() {
            let into = if i < 2 { &mut a } else { &mut b };
            let sealed = key.seal(blob);
            into.add(
                key.blob_id(blob),
                BlobKind::Data,
                Codec::Raw,
                blob.len(),
                &sealed,
            );
        }
        a.absorb(b);
        a.absorb(PackBuilder::default());
        let p = a.finish(&key, Version::V2);
        let (_, h) = header_of(&p.bytes, &key, "p", &[Version::V2]).unwrap();
        assert_eq!(h.len(), blobs.len());
        for (e, blob) in h.iter().zip(&blobs) {
            let at = e.offset as usize..(e.offset + e.stored_len) as usize;
            assert_eq!(&key.open_vec(p.bytes[at].to_vec(), "blob").unwrap(), blob);
            assert_eq!(e.id, key.blob_id(blob));
        }
    }

    #[test]
    fn pack_round_trip_and_damage() {
        for v in [Version::V1, Version::V2] {
            round_trip_and_damage(v);
        }
    }

    fn round_trip_and_damage(v: Version) {
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
        let p = b.finish(&key, v);
        assert_eq!(p.id, Id::of_file(&p.bytes));
        let store = MemoryStore::new();
        let path = pack_path(&p.id);
        store.put(&path, &p.bytes).unwrap();
        let both = [Version::V1, Version::V2];
        let (got, h) = read_header(&store, &key, &path, p.bytes.len() as u64, &both).unwrap();
        assert_eq!(got, v);
        assert_eq!(h, p.entries);
        assert_eq!(
            header_of(&p.bytes, &key, &path, &both).unwrap(),
            (v, p.entries.clone())
        );
        // A pack of the other format is refused by name.
        let other = [if v == Version::V1 {
            Version::V2
        } else {
            Version::V1
        }];
        let e = header_of(&p.bytes, &key, &path, &other)
            .unwrap_err()
            .to_string();
        assert!(e.contains(&format!("a format-{v} pack")), "{e}");
        for (e, blob) in h.iter().zip(&blobs) {
            let sealed = store
                .get_range(&path, e.offset.into(), e.stored_len.into())
                .unwrap();
            assert_eq!(&key.open(&sealed, "b").unwrap(), blob);
        }
        let mut bad = p.bytes.clone();
        let n = bad.len();
        bad[n - 10] ^= 1;
        assert!(header_of(&bad, &key, &path, &both).is_err());
        let mut bad = p.bytes.clone();
        bad[n - 60] ^= 1;
        assert!(header_of(&bad, &key, &path, &both).is_err());
    }
}
