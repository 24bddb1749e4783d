//! Index files and the in-memory index: blob id -> (pack, offset, length).
//!
//! ```text
//! format 1: index file = seal("MVIX" 0x01 pack_count:u32 pack*)
//!           pack       = pack_id:[32] count:u32 entry*
//! format 2: index file = seal[Index(id)]("MVIX" 0x02 pack_count:u32 pack*)
//!           pack       = pack_id:[32] pack_version:u8 count:u32 entry*
//! entry      = kind:u8 codec:u8 offset:u32 stored_len:u32 raw_len:u32 id:[32]   (46 bytes)
//! ```
//! `pack_version` is the format the pack was written in: a repository migrated from
//! format 1 keeps its format-1 data packs, whose blobs are sealed without associated data.

use crate::error::{Error, Result};
use crate::repo::compress::Codec;
use crate::repo::format::BlobKind;
use crate::repo::format::Version;
use crate::repo::id::Id;
use crate::repo::pack::{IndexedPack, PackEntry};
use std::collections::HashMap;

const MAGIC: &[u8; 4] = b"MVIX";
const ENTRY_LEN: usize = 46;

/// Where a blob is: 20 bytes per blob in memory, plus its 32-byte id as the map key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Location {
    /// Position in [`Index::packs`].
    pub pack: u32,
    pub offset: u32,
    pub stored_len: u32,
    pub raw_len: u32,
    pub kind: BlobKind,
    pub codec: Codec,
}

/// The whole repository's index.
#[derive(Default)]
pub struct Index {
    packs: Vec<Id>,
    /// The format each pack in `packs` was written in.
    versions: Vec<Version>,
    pack_pos: HashMap<Id, u32>,
    blobs: HashMap<Id, Location>,
}

impl Index {
    pub fn get(&self, id: &Id) -> Option<&Location> {
        self.blobs.get(id)
    }
    pub fn contains(&self, id: &Id) -> bool {
        self.blobs.contains_key(id)
    }
    pub fn pack_id(&self, pos: u32) -> Id {
        self.packs[pos as usize]
    }
    /// The format the pack at `pos` was written in.
    pub fn pack_version(&self, pos: u32) -> Version {
        self.versions[pos as usize]
    }
    pub fn has_pack(&self, id: &Id) -> bool {
        self.pack_pos.contains_key(id)
    }
    pub fn packs(&self) -> &[Id] {
        &self.packs
    }
    pub fn len(&self) -> usize {
        self.blobs.len()
    }
    pub fn is_empty(&self) -> bool {
        self.blobs.is_empty()
    }
    pub fn iter(&self) -> impl Iterator<Item = (&Id, &Location)> {
        self.blobs.iter()
    }

    /// Adds a pack's entries; a blob already known elsewhere keeps its first location.
    pub fn add_pack(&mut self, pack: Id, version: Version, entries: &[PackEntry]) {
        let pos = *self.pack_pos.entry(pack).or_insert_with(|| {
            self.packs.push(pack);
            self.versions.push(version);
            (self.packs.len() - 1) as u32
        });
        self.blobs.reserve(entries.len());
        for e in entries {
            self.blobs.entry(e.id).or_insert(Location {
                pack: pos,
                offset: e.offset,
                stored_len: e.stored_len,
                raw_len: e.raw_len,
                kind: e.kind,
                codec: e.codec,
            });
        }
    }
}

/// Encodes the plaintext of one index file of format `version`. A format-1 index file
/// can only list format-1 packs.
pub fn encode(packs: &[IndexedPack], version: Version) -> Result<Vec<u8>> {
    let n: usize = packs.iter().map(|p| 37 + p.entries.len() * ENTRY_LEN).sum();
    let mut out = Vec::with_capacity(9 + n);
    out.extend_from_slice(MAGIC);
    out.push(version.number() as u8);
    out.extend_from_slice(&(packs.len() as u32).to_le_bytes());
    for p in packs {
        out.extend_from_slice(&p.id.0);
        match version {
            Version::V1 if p.version != Version::V1 => {
                return Err(Error::InvalidInput(format!(
                    "pack {} is format {} and cannot be listed in a format-1 index",
                    p.id.short(),
                    p.version
                )))
            }
            Version::V1 => {}
            Version::V2 => out.push(p.version.number() as u8),
        }
        out.extend_from_slice(&(p.entries.len() as u32).to_le_bytes());
        for e in &p.entries {
            out.push(e.kind as u8);
            out.push(e.codec as u8);
            out.extend_from_slice(&e.offset.to_le_bytes());
            out.extend_from_slice(&e.stored_len.to_le_bytes());
            out.extend_from_slice(&e.raw_len.to_le_bytes());
            out.extend_from_slice(&e.id.0);
        }
    }
    Ok(out)
}

struct Reader<'a> {
    b: &'a [u8],
    at: usize,
    what: &'a str,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        let end = self.at.checked_add(n).filter(|e| *e <= self.b.len());
        let end = end.ok_or_else(|| Error::corrupt(self.what, "index file truncated"))?;
        let s = &self.b[self.at..end];
        self.at = end;
        Ok(s)
    }
    fn u32(&mut self) -> Result<u32> {
        let s = self.take(4)?;
        Ok(u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
    }
    fn id(&mut self) -> Result<Id> {
        let mut id = [0u8; 32];
        id.copy_from_slice(self.take(32)?);
        Ok(Id(id))
    }
}

/// Decodes the plaintext of one index file of format `version` (the repository's: the
/// file's own version byte must agree).
pub fn decode(b: &[u8], version: Version, what: &str) -> Result<Vec<IndexedPack>> {
    let mut r = Reader { b, at: 0, what };
    if r.take(4)? != MAGIC {
        return Err(Error::corrupt(what, "not an index file"));
    }
    let v = r.take(1)?[0];
    if u32::from(v) != version.number() {
        return Err(Error::corrupt(
            what,
            format!("index version {v} in a format-{version} repository"),
        ));
    }
    let npacks = r.u32()? as usize;
    let mut packs = Vec::with_capacity(npacks.min(1 << 16));
    for _ in 0..npacks {
        let pack = r.id()?;
        let pack_version = match version {
            Version::V1 => Version::V1,
            Version::V2 => {
                let v = r.take(1)?[0];
                Version::from_number(v.into()).map_err(|_| {
                    Error::corrupt(
                        what,
                        format!("pack {} has unknown format {v}", pack.short()),
                    )
                })?
            }
        };
        let count = r.u32()? as usize;
        let mut entries = Vec::with_capacity(count.min(1 << 20));
        for _ in 0..count {
            let h = r.take(2)?;
            let kind =
                BlobKind::from_u8(h[0]).ok_or_else(|| Error::corrupt(what, "bad blob kind"))?;
            let codec = Codec::from_u8(h[1]).ok_or_else(|| Error::corrupt(what, "bad codec"))?;
            let offset = r.u32()?;
            let stored_len = r.u32()?;
            let raw_len = r.u32()?;
            entries.push(PackEntry {
                id: r.id()?,
                kind,
                codec,
                offset,
                stored_len,
                raw_len,
            });
        }
        packs.push(IndexedPack {
            id: pack,
            version: pack_version,
            entries,
        });
    }
    if r.at != b.len() {
        return Err(Error::corrupt(what, "trailing bytes after the index"));
    }
    Ok(packs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn entry(i: u8) -> PackEntry {
        PackEntry {
            id: Id([i; 32]),
            kind: BlobKind::Data,
            codec: Codec::Zstd,
            offset: i as u32 * 7,
            stored_len: 99,
            raw_len: 123,
        }
    }

    fn pack(id: u8, version: Version, entries: Vec<PackEntry>) -> IndexedPack {
        IndexedPack {
            id: Id([id; 32]),
            version,
            entries,
        }
    }

    #[test]
    fn golden_layout() {
        let enc = encode(&[pack(0xaa, Version::V1, vec![entry(1)])], Version::V1).unwrap();
        assert_eq!(&enc[..9], b"MVIX\x01\x01\x00\x00\x00");
        assert_eq!(enc.len(), 9 + 36 + 46);
        assert_eq!(&enc[45..47], &[0, 1]);
        let enc = encode(&[pack(0xaa, Version::V1, vec![entry(1)])], Version::V2).unwrap();
        assert_eq!(&enc[..9], b"MVIX\x02\x01\x00\x00\x00");
        assert_eq!(enc.len(), 9 + 37 + 46);
        assert_eq!(enc[41], 1, "the pack's own format");
        assert_eq!(&enc[46..48], &[0, 1]);
        // A format-1 index cannot list a format-2 pack; a version byte must match.
        assert!(encode(&[pack(1, Version::V2, vec![])], Version::V1).is_err());
        assert!(decode(&enc, Version::V1, "t").is_err());
    }

    proptest! {
        #[test]
        fn round_trip(packs in proptest::collection::vec((any::<[u8; 32]>(), any::<bool>(), proptest::collection::vec(any::<u8>(), 0..20)), 0..8)) {
            for v in [Version::V1, Version::V2] {
                let packs: Vec<IndexedPack> = packs.iter().map(|(p, two, es)| IndexedPack {
                    id: Id(*p),
                    version: if *two && v == Version::V2 { Version::V2 } else { Version::V1 },
                    entries: es.iter().copied().map(entry).collect(),
                }).collect();
                let enc = encode(&packs, v).unwrap();
                prop_assert_eq!(decode(&enc, v, "t").unwrap(), packs);
                prop_assert!(decode(&enc[..enc.len() - 1], v, "t").is_err());
            }
        }

        #[test]
        fn decode_never_panics(data in proptest::collection::vec(any::<u8>(), 0..300)) {
            let _ = decode(&data, Version::V1, "t");
            let _ = decode(&data, Version::V2, "t");
        }
    }
}
