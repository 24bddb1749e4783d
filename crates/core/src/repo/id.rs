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
