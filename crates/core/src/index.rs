//! Index files and the in-memory index: blob id -> (pack, offset, length).
//!
//! ```text
//! index file = seal("MVIX" 0x01 pack_count:u32 pack*)
//! pack       = pack_id:[32] count:u32 entry*
//! entry      = kind:u8 codec:u8 offset:u32 stored_len:u32 raw_len:u32 id:[32]   (46 bytes)
//! ```

use crate::compress::Codec;
use crate::error::{Error, Result};
use crate::id::Id;
use crate::pack::{BlobKind, PackEntry};
use std::collections::HashMap;

const MAGIC: &[u8; 4] = b"MVIX";
const VERSION: u8 = 1;
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
    pub fn add_pack(&mut self, pack: Id, entries: &[PackEntry]) {
        let pos = *self.pack_pos.entry(pack).or_insert_with(|| {
            self.packs.push(pack);
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

/// Encodes the plaintext of one index file.
pub fn encode(packs: &[(Id, Vec<PackEntry>)]) -> Vec<u8> {
    let n: usize = packs.iter().map(|(_, e)| 36 + e.len() * ENTRY_LEN).sum();
    let mut out = Vec::with_capacity(9 + n);
    out.extend_from_slice(MAGIC);
    out.push(VERSION);
    out.extend_from_slice(&(packs.len() as u32).to_le_bytes());
    for (id, entries) in packs {
        out.extend_from_slice(&id.0);
        out.extend_from_slice(&(entries.len() as u32).to_le_bytes());
        for e in entries {
            out.push(e.kind as u8);
            out.push(e.codec as u8);
            out.extend_from_slice(&e.offset.to_le_bytes());
            out.extend_from_slice(&e.stored_len.to_le_bytes());
            out.extend_from_slice(&e.raw_len.to_le_bytes());
            out.extend_from_slice(&e.id.0);
        }
    }
    out
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

/// Decodes the plaintext of one index file.
pub fn decode(b: &[u8], what: &str) -> Result<Vec<(Id, Vec<PackEntry>)>> {
    let mut r = Reader { b, at: 0, what };
    if r.take(4)? != MAGIC {
        return Err(Error::corrupt(what, "not an index file"));
    }
    let v = r.take(1)?[0];
    if v != VERSION {
        return Err(Error::corrupt(what, format!("index version {v}")));
    }
    let npacks = r.u32()? as usize;
    let mut packs = Vec::with_capacity(npacks.min(1 << 16));
    for _ in 0..npacks {
        let pack = r.id()?;
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
        packs.push((pack, entries));
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

    #[test]
    fn golden_layout() {
        let enc = encode(&[(Id([0xaa; 32]), vec![entry(1)])]);
        assert_eq!(&enc[..9], b"MVIX\x01\x01\x00\x00\x00");
        assert_eq!(enc.len(), 9 + 36 + 46);
        assert_eq!(&enc[45..47], &[0, 1]);
    }

    proptest! {
        #[test]
        fn round_trip(packs in proptest::collection::vec((any::<[u8; 32]>(), proptest::collection::vec(any::<u8>(), 0..20)), 0..8)) {
            let packs: Vec<(Id, Vec<PackEntry>)> = packs.into_iter().map(|(p, es)| (Id(p), es.into_iter().map(entry).collect())).collect();
            let enc = encode(&packs);
            prop_assert_eq!(decode(&enc, "t").unwrap(), packs);
            if !enc.is_empty() {
                prop_assert!(decode(&enc[..enc.len() - 1], "t").is_err());
            }
        }

        #[test]
        fn decode_never_panics(data in proptest::collection::vec(any::<u8>(), 0..300)) {
            let _ = decode(&data, "t");
        }
    }
}
