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
/// A pack being filled. In memory, or with [`PackBuilder::spilling`] in an unnamed
/// temporary file as it fills: a backup's packs then cost memory only while they are
/// written to the store, not while their workers fill them or they wait for a writer
/// (seven packs of 8 MiB at once were a third of a full backup's peak; restic, too,
/// fills its packs in temporary files).
#[derive(Default)]
pub struct PackBuilder {
    buf: Vec<u8>,
    entries: Vec<PackEntry>,
    spill: Spill,
}

/// Where a [`PackBuilder`]'s blobs beyond its buffer go.
#[derive(Default)]
enum Spill {
    /// Nowhere: the pack is built in memory.
    #[default]
    Off,
    /// To a temporary file made when the buffer first fills.
    On,
    /// To `file`, which holds the pack's first `len` bytes, hashed into `hash`.
    To {
        file: std::fs::File,
        len: u64,
        hash: Box<blake3::Hasher>,
    },
    /// The file could not be read back when it failed: the pack, `len` bytes long, is
    /// lost, and finishing it fails with why (never a torn pack stored).
    Lost { len: u64, why: String },
}

/// The bytes a spilling [`PackBuilder`] keeps in memory before it writes them to its file.
const SPILL_AT: usize = 1 << 20;

/// A finished pack, ready to be stored.
pub struct FinishedPack {
    pub id: Id,
    pub version: Version,
    body: Body,
    pub entries: Vec<PackEntry>,
}

/// A finished pack's bytes.
enum Body {
    Memory(Vec<u8>),
    /// The whole pack, `len` bytes, in a temporary file.
    File(std::fs::File, u64),
}

impl FinishedPack {
    /// The pack's bytes: in memory, or read back from its file.
    pub fn bytes(&self) -> Result<std::borrow::Cow<'_, [u8]>> {
        use std::os::unix::fs::FileExt;
        match &self.body {
            Body::Memory(b) => Ok(std::borrow::Cow::Borrowed(b)),
            Body::File(f, len) => {
                let mut b = vec![0; *len as usize];
                f.read_exact_at(&mut b, 0).map_err(spill_error)?;
                Ok(std::borrow::Cow::Owned(b))
            }
        }
    }

    /// The pack's length in bytes.
    pub fn size(&self) -> u64 {
        match &self.body {
            Body::Memory(b) => b.len() as u64,
            Body::File(_, len) => *len,
        }
    }
}

fn spill_error(e: std::io::Error) -> Error {
    Error::Resources(format!("a pack's temporary file: {e}"))
}

impl PackBuilder {
    /// An empty pack that keeps at most about 1 MiB in memory: the rest goes to an
    /// unnamed temporary file (in `TMPDIR`) as it fills. Built in memory if no such
    /// file can be made.
    pub fn spilling() -> PackBuilder {
        PackBuilder {
            spill: Spill::On,
            ..PackBuilder::default()
        }
    }

    pub fn add(&mut self, id: Id, kind: BlobKind, codec: Codec, raw_len: usize, sealed: &[u8]) {
        self.entries.push(PackEntry {
            id,
            kind,
            codec,
            offset: self.len() as u32,
            stored_len: sealed.len() as u32,
            raw_len: raw_len as u32,
        });
        self.append(sealed);
    }

    /// Appends bytes to the pack: to the buffer, and the buffer to the file once it
    /// holds [`SPILL_AT`] bytes.
    fn append(&mut self, bytes: &[u8]) {
        if let Spill::Lost { len, .. } = &mut self.spill {
            *len += bytes.len() as u64;
            return;
        }
        if !matches!(self.spill, Spill::Off)
            && self.buf.len() + bytes.len() > SPILL_AT
            && self.spill_buffer(bytes)
        {
            return;
        }
        self.grow_for(bytes.len());
        self.buf.extend_from_slice(bytes);
    }

    /// Writes the buffer and `more` to the spill file (made the first time); whether
    /// `more` is taken. When the file cannot be made or written, the pack goes on in
    /// memory: the buffer then holds everything not in the file, and `more` is left for
    /// the caller to append.
    fn spill_buffer(&mut self, more: &[u8]) -> bool {
        if matches!(self.spill, Spill::On) {
            match tempfile::tempfile() {
                Ok(file) => {
                    self.spill = Spill::To {
                        file,
                        len: 0,
                        hash: Box::default(),
                    }
                }
                Err(e) => {
                    tracing::warn!("packs are built in memory: no temporary file: {e}");
                    self.spill = Spill::Off;
                    return false;
                }
            }
        }
        let Spill::To { file, len, hash } = &mut self.spill else {
            return false;
        };
        let written = std::io::Write::write_all(file, &self.buf)
            .and_then(|()| std::io::Write::write_all(file, more));
        match written {
            Ok(()) => {
                hash.update(&self.buf);
                hash.update(more);
                *len += (self.buf.len() + more.len()) as u64;
                self.buf.clear();
                true
            }
            Err(e) => {
                // What the file holds is read back; the pack goes on in memory.
                tracing::warn!("packs are built in memory: their temporary file: {e}");
                let mut whole = vec![0; *len as usize];
                match std::os::unix::fs::FileExt::read_exact_at(&*file, &mut whole, 0) {
                    Ok(()) => {
                        whole.extend_from_slice(&self.buf);
                        self.buf = whole;
                        self.spill = Spill::Off;
                        false
                    }
                    Err(e) => {
                        let len = *len + (self.buf.len() + more.len()) as u64;
                        let why = format!("a pack's temporary file could not be read back: {e}");
                        self.spill = Spill::Lost { len, why };
                        self.buf = Vec::new();
                        true
                    }
                }
            }
        }
    }

    /// The pack's length so far.
    pub fn len(&self) -> usize {
        let spilled = match &self.spill {
            Spill::To { len, .. } | Spill::Lost { len, .. } => *len as usize,
            _ => 0,
        };
        spilled + self.buf.len()
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
    pub fn absorb(&mut self, other: PackBuilder) -> Result<()> {
        let base = self.len() as u32;
        if let Spill::Lost { why, .. } = &other.spill {
            return Err(Error::Resources(why.clone()));
        }
        if let Spill::To { file, len, .. } = &other.spill {
            let mut spilled = vec![0; *len as usize];
            std::os::unix::fs::FileExt::read_exact_at(file, &mut spilled, 0)
                .map_err(spill_error)?;
            self.append(&spilled);
        }
        self.append(&other.buf);
        self.entries
            .extend(other.entries.into_iter().map(|e| PackEntry {
                offset: e.offset + base,
                ..e
            }));
        Ok(())
    }

    /// Seals the header onto the blobs (as `version` has it) and names the pack.
    pub fn finish(self, key: &MasterKey, version: Version) -> Result<FinishedPack> {
        if let Spill::Lost { why, .. } = self.spill {
            return Err(Error::Resources(why));
        }
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
        let (id, body) = match self.spill {
            Spill::To {
                mut file,
                len,
                mut hash,
            } => {
                std::io::Write::write_all(&mut file, &bytes).map_err(spill_error)?;
                hash.update(&bytes);
                let len = len + bytes.len() as u64;
                (Id(*hash.finalize().as_bytes()), Body::File(file, len))
            }
            _ => (Id::of_file(&bytes), Body::Memory(bytes)),
        };
        // Grown by doubling: up to twice the entries' room, held until the pack is
        // indexed (tens of thousands of entries in a pack of small messages).
        let mut entries = self.entries;
        entries.shrink_to_fit();
        Ok(FinishedPack {
            id,
            version,
            body,
            entries,
        })
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
        a.absorb(b).unwrap();
        a.absorb(PackBuilder::default()).unwrap();
        let p = a.finish(&key, Version::V2).unwrap();
        let bytes = p.bytes().unwrap();
        let (_, h) = header_of(&bytes, &key, "p", &[Version::V2]).unwrap();
        assert_eq!(h.len(), blobs.len());
        for (e, blob) in h.iter().zip(&blobs) {
            let at = e.offset as usize..(e.offset + e.stored_len) as usize;
            assert_eq!(&key.open_vec(bytes[at].to_vec(), "blob").unwrap(), blob);
            assert_eq!(e.id, key.blob_id(blob));
        }
    }

    /// A pack filled in a temporary file holds the same blobs at the same places as one
    /// filled in memory, also when spilled packs are joined, and is named by the hash of
    /// its bytes; only about `SPILL_AT` of it is held in memory while it fills.
    #[test]
    fn a_spilled_pack_is_the_pack_built_in_memory() {
        let key = MasterKey::random();
        let blobs: Vec<Vec<u8>> = (0..12u32)
            .map(|i| {
                (0..(150_000 * i as usize + 7))
                    .map(|j| (j as u32 * 31 + i) as u8)
                    .collect()
            })
            .collect();
        // Sealed once: sealing draws a fresh nonce.
        let sealed: Vec<(Id, usize, Vec<u8>)> = (blobs.iter())
            .map(|b| (key.blob_id(b), b.len(), key.seal(b)))
            .collect();
        let fill = |b: &mut PackBuilder, sealed: &[(Id, usize, Vec<u8>)]| {
            for (id, len, sealed) in sealed {
                b.add(*id, BlobKind::Data, Codec::Raw, *len, sealed);
                assert!(b.buf.len() <= SPILL_AT || matches!(b.spill, Spill::Off));
            }
        };
        let (mut memory, mut rest) = (PackBuilder::default(), PackBuilder::default());
        fill(&mut memory, &sealed[..7]);
        fill(&mut rest, &sealed[7..]);
        memory.absorb(rest).unwrap();
        let (mut spilled, mut rest) = (PackBuilder::spilling(), PackBuilder::spilling());
        fill(&mut spilled, &sealed[..7]);
        fill(&mut rest, &sealed[7..]);
        let both_spilled = matches!(
            (&spilled.spill, &rest.spill),
            (Spill::To { .. }, Spill::To { .. })
        );
        assert!(both_spilled);
        spilled.absorb(rest).unwrap();
        let a = memory.finish(&key, Version::V2).unwrap();
        let b = spilled.finish(&key, Version::V2).unwrap();
        assert!(matches!(b.body, Body::File(..)));
        let bytes = b.bytes().unwrap();
        // The blobs, byte for byte (the headers are sealed with nonces of their own);
        // not assert_eq!, which would print 10 MB.
        let blobs_len: usize = sealed.iter().map(|(_, _, s)| s.len()).sum();
        let in_memory = a.bytes().unwrap();
        assert!(
            in_memory[..blobs_len] == bytes[..blobs_len],
            "the blobs differ"
        );
        assert_eq!(a.size(), b.size());
        assert_eq!(b.size(), bytes.len() as u64);
        assert_eq!(b.id, Id::of_file(&bytes));
        assert_eq!(a.entries, b.entries);
        let (_, h) = header_of(&bytes, &key, "p", &[Version::V2]).unwrap();
        for (e, blob) in h.iter().zip(&blobs) {
            let at = e.offset as usize..(e.offset + e.stored_len) as usize;
            assert_eq!(&key.open_vec(bytes[at].to_vec(), "blob").unwrap(), blob);
        }
    }

    /// A pack whose temporary file cannot be written (`/dev/full`: every write fails with
    /// "no space left") goes on in memory and loses nothing: the first blob, larger than
    /// the buffer, is in it too.
    #[test]
    fn a_pack_whose_file_fails_goes_on_in_memory() {
        let key = MasterKey::random();
        let full = std::fs::OpenOptions::new()
            .write(true)
            .read(true)
            .open("/dev/full");
        let Ok(file) = full else {
            return; // no /dev/full here
        };
        let mut b = PackBuilder::spilling();
        b.spill = Spill::To {
            file,
            len: 0,
            hash: Box::default(),
        };
        let blobs: Vec<Vec<u8>> = [1_500_000usize, 300, 900_000]
            .iter()
            .map(|&n| vec![n as u8; n])
            .collect();
        for blob in &blobs {
            let sealed = key.seal(blob);
            b.add(
                key.blob_id(blob),
                BlobKind::Data,
                Codec::Raw,
                blob.len(),
                &sealed,
            );
        }
        assert!(matches!(b.spill, Spill::Off));
        let p = b.finish(&key, Version::V2).unwrap();
        let bytes = p.bytes().unwrap();
        assert_eq!(p.id, Id::of_file(&bytes));
        let (_, h) = header_of(&bytes, &key, "p", &[Version::V2]).unwrap();
        assert_eq!(h.len(), blobs.len());
        for (e, blob) in h.iter().zip(&blobs) {
            let at = e.offset as usize..(e.offset + e.stored_len) as usize;
            assert!(&key.open_vec(bytes[at].to_vec(), "blob").unwrap() == blob);
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
        let p = b.finish(&key, v).unwrap();
        let bytes = p.bytes().unwrap().into_owned();
        assert_eq!(p.id, Id::of_file(&bytes));
        let store = MemoryStore::new();
        let path = pack_path(&p.id);
        store.put(&path, &bytes).unwrap();
        let both = [Version::V1, Version::V2];
        let (got, h) = read_header(&store, &key, &path, bytes.len() as u64, &both).unwrap();
        assert_eq!(got, v);
        assert_eq!(h, p.entries);
        assert_eq!(
            header_of(&bytes, &key, &path, &both).unwrap(),
            (v, p.entries.clone())
        );
        // A pack of the other format is refused by name.
        let other = [if v == Version::V1 {
            Version::V2
        } else {
            Version::V1
        }];
        let e = header_of(&bytes, &key, &path, &other)
            .unwrap_err()
            .to_string();
        assert!(e.contains(&format!("a format-{v} pack")), "{e}");
        for (e, blob) in h.iter().zip(&blobs) {
            let sealed = store
                .get_range(&path, e.offset.into(), e.stored_len.into())
                .unwrap();
            assert_eq!(&key.open(&sealed, "b").unwrap(), blob);
        }
        let mut bad = bytes.clone();
        let n = bad.len();
        bad[n - 10] ^= 1;
        assert!(header_of(&bad, &key, &path, &both).is_err());
        let mut bad = bytes.clone();
        bad[n - 60] ^= 1;
        assert!(header_of(&bad, &key, &path, &both).is_err());
    }
}
