//! Content identifiers: 32-byte BLAKE3 digests shown as lowercase hex.

use serde::{Deserialize, Serialize};
use std::fmt;

/// A 32-byte identifier: keyed BLAKE3 for blobs, plain BLAKE3 of the file bytes for
/// repository files (packs, index files, snapshots).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, Default)]
pub struct Id(pub [u8; 32]);

impl Id {
    /// Plain BLAKE3 of `data`: the name of a content-named repository file.
    pub fn of_file(data: &[u8]) -> Id {
        Id(*blake3::hash(data).as_bytes())
    }
    pub fn to_hex(&self) -> String {
        hex::encode(self.0)
    }
    pub fn from_hex(s: &str) -> Option<Id> {
        let mut out = [0u8; 32];
        hex::decode_to_slice(s, &mut out).ok()?;
        Some(Id(out))
    }
    /// The first 8 hex digits, as shown to users.
    pub fn short(&self) -> String {
        hex::encode(&self.0[..4])
    }
}

impl fmt::Display for Id {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

impl fmt::Debug for Id {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Id({})", self.short())
    }
}

/// Hashes an id by its first 8 bytes: ids are keyed hashes, even and unknown to whoever
/// wrote the mail, so hashing them again (SipHash, the default) only costs time.
#[derive(Default)]
pub struct IdHasher(u64);

impl std::hash::Hasher for IdHasher {
    fn write(&mut self, bytes: &[u8]) {
        // An `Id` hashes as its 32 bytes (after their length, through `write_usize`).
        if let Some(b) = bytes.get(..8) {
            self.0 ^= u64::from_le_bytes(b.try_into().expect("8 bytes"));
        }
    }
    fn write_usize(&mut self, _: usize) {}
    fn finish(&self) -> u64 {
        // Mixed, so that ids agreeing in some bits still spread over the table.
        (self.0 ^ (self.0 >> 32)).wrapping_mul(0x9E37_79B9_7F4A_7C15)
    }
}

/// A map keyed by ids, hashed by [`IdHasher`].
pub type IdMap<V> = std::collections::HashMap<Id, V, std::hash::BuildHasherDefault<IdHasher>>;
/// A set of ids, hashed by [`IdHasher`].
pub type IdSet = std::collections::HashSet<Id, std::hash::BuildHasherDefault<IdHasher>>;
