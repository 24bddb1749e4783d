//! Repository format versions, and what format 2 binds into every sealed object.
//!
//! Format 1 sealed every object with one key and no associated data: what kept an object
//! from being served in another's place were checks after decryption (a blob's keyed hash,
//! a file's name). Format 2 authenticates, with each object's ciphertext, *what it is and
//! where it belongs* ([`Object::aad`]): its type, a blob's kind and id, the id an index,
//! snapshot or dictionary file is stored under, a writer record's name. An object that is
//! swapped, replayed under another name or filed in the wrong place fails its tag, and the
//! error says what was expected. Pure code: bytes in, bytes out.

use crate::error::{Error, Result};
use crate::repo::id::Id;
use serde::{Deserialize, Serialize};

/// What a blob holds: message content or metadata. They go to different packs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum BlobKind {
    Data = 0,
    Tree = 1,
}

/// The store's hint for a pack of blobs of one kind.
impl From<BlobKind> for crate::store::PackKind {
    fn from(k: BlobKind) -> Self {
        match k {
            BlobKind::Data => crate::store::PackKind::Data,
            BlobKind::Tree => crate::store::PackKind::Tree,
        }
    }
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

/// A repository format version.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(into = "u32", try_from = "u32")]
pub enum Version {
    /// No associated data, the public chunker table, plaintext pack header length.
    V1 = 1,
    /// Associated data on every seal, keyed chunking, sealed pack trailer, snapshot and
    /// metadata ids from content, optional padding.
    V2 = 2,
}

/// The format new repositories get.
pub const CURRENT: Version = Version::V2;

impl Version {
    pub fn number(self) -> u32 {
        self as u32
    }

    /// The version numbered `n`, or the error that names it as unknown.
    pub fn from_number(n: u32) -> Result<Version> {
        match n {
            1 => Ok(Version::V1),
            2 => Ok(Version::V2),
            other => Err(Error::UnsupportedVersion(other)),
        }
    }
}

impl From<Version> for u32 {
    fn from(v: Version) -> u32 {
        v.number()
    }
}

impl TryFrom<u32> for Version {
    type Error = Error;
    fn try_from(n: u32) -> Result<Version> {
        Version::from_number(n)
    }
}

impl std::fmt::Display for Version {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.number())
    }
}

/// What a sealed object is; in format 2 its [`Object::aad`] is authenticated with it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Object<'a> {
    /// `config`.
    Config,
    /// `index/<id>`.
    Index(&'a Id),
    /// `snapshots/<id>`.
    Snapshot(&'a Id),
    /// `dicts/<id>`.
    Dictionary(&'a Id),
    /// `writers/<name>`.
    Writer(&'a str),
    /// A pack's header.
    PackHeader,
    /// A pack's trailer (the sealed length of its header).
    PackTrailer,
    /// A blob of `kind` with id `id`.
    Blob(BlobKind, &'a Id),
    /// `forgotten/<id>`: a record of snapshots removed on purpose (`crate::ops::forget`).
    Forgotten(&'a Id),
    /// `search/<id>`: a split of the search index (`crate::search`).
    Search(&'a Id),
    /// `audit/<id>`: a batch of audit events (`crate::repo::audit`).
    Audit(&'a Id),
}

/// The start of every format-2 associated data: the format's name and a zero byte. It
/// carries no version number, so that a later format that keeps this scheme is opened far
/// enough to read its version and be refused by name.
const AAD_PREFIX: &[u8] = b"mailvault\0";

impl Object<'_> {
    /// The associated data: `"mailvault" 0x00 type:u8 payload`, where the payload is the
    /// id (32 bytes) for index, snapshot and dictionary files, the name's bytes for a
    /// writer record, `kind:u8 id:[32]` for a blob, and nothing for the others.
    pub fn aad(&self) -> Vec<u8> {
        let mut a = Vec::with_capacity(AAD_PREFIX.len() + 34);
        a.extend_from_slice(AAD_PREFIX);
        match self {
            Object::Config => a.push(1),
            Object::Index(id) => {
                a.push(2);
                a.extend_from_slice(&id.0);
            }
            Object::Snapshot(id) => {
                a.push(3);
                a.extend_from_slice(&id.0);
            }
            Object::Dictionary(id) => {
                a.push(4);
                a.extend_from_slice(&id.0);
            }
            Object::Writer(name) => {
                a.push(5);
                a.extend_from_slice(name.as_bytes());
            }
            Object::PackHeader => a.push(6),
            Object::PackTrailer => a.push(7),
            Object::Blob(kind, id) => {
                a.push(8);
                a.push(*kind as u8);
                a.extend_from_slice(&id.0);
            }
            Object::Forgotten(id) => {
                a.push(9);
                a.extend_from_slice(&id.0);
            }
            Object::Search(id) => {
                a.push(10);
                a.extend_from_slice(&id.0);
            }
            Object::Audit(id) => {
                a.push(11);
                a.extend_from_slice(&id.0);
            }
        }
        a
    }

    /// How an error names what was expected: `snapshot 1a2b3c4d`, `tree blob 1a2b3c4d`.
    pub fn describe(&self) -> String {
        match self {
            Object::Config => "the config".into(),
            Object::Index(id) => format!("index file {}", id.short()),
            Object::Snapshot(id) => format!("snapshot {}", id.short()),
            Object::Dictionary(id) => format!("dictionary {}", id.short()),
            Object::Writer(name) => format!("writer record {name}"),
            Object::PackHeader => "a pack header".into(),
            Object::PackTrailer => "a pack trailer".into(),
            Object::Blob(BlobKind::Data, id) => format!("data blob {}", id.short()),
            Object::Blob(BlobKind::Tree, id) => format!("tree blob {}", id.short()),
            Object::Forgotten(id) => format!("forget record {}", id.short()),
            Object::Search(id) => format!("search index split {}", id.short()),
            Object::Audit(id) => format!("audit record {}", id.short()),
        }
    }
}

/// The length Padmé pads `len` to: a multiple of 2^(e - s), where e = ⌊log2 len⌋ and
/// s = ⌊log2 e⌋ + 1. The overhead is at most ~12% (under 6% above 256 bytes, ~3% at 4 KiB)
/// and what is left of a length is O(log log len) bits (Nikitin et al., "Reducing
/// Metadata Leakage from Encrypted Files and Communication with PURBs", PETS 2019).
pub fn padme(len: usize) -> usize {
    if len < 2 {
        return len;
    }
    let e = usize::BITS - 1 - len.leading_zeros(); // ⌊log2 len⌋
    let s = u32::BITS - e.leading_zeros(); // ⌊log2 e⌋ + 1
    let zero_bits = e - s;
    let mask = (1usize << zero_bits) - 1;
    (len + mask) & !mask
}

/// `data` followed by `0x80` and as many zero bytes as make it [`padme`] of its length
/// plus one (ISO/IEC 7816-4 padding: always at least the one marker byte, so it is
/// removed without knowing the original length).
pub fn pad(mut data: Vec<u8>) -> Vec<u8> {
    let to = padme(data.len() + 1);
    data.reserve_exact(to - data.len());
    data.push(0x80);
    data.resize(to, 0);
    data
}

/// Removes what [`pad`] added: trailing zero bytes and the `0x80` before them.
pub fn unpad(mut data: Vec<u8>, what: &str) -> Result<Vec<u8>> {
    let end = data.iter().rposition(|&b| b != 0);
    match end {
        Some(i) if data[i] == 0x80 => {
            data.truncate(i);
            Ok(data)
        }
        _ => Err(Error::corrupt(what, "padding is not well formed")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn padme_matches_the_paper() {
        // Values from the PURB paper's definition, worked by hand.
        assert_eq!(padme(0), 0);
        assert_eq!(padme(1), 1);
        assert_eq!(padme(9), 10); // e=3, s=2: multiple of 2
        assert_eq!(padme(100), 104); // e=6, s=3: multiple of 8
        assert_eq!(padme(1000), 1024); // e=9, s=4: multiple of 32
        assert_eq!(padme(4097), 4352); // e=12, s=4: multiple of 256
        assert_eq!(padme(1 << 20), 1 << 20);
        assert_eq!(padme((1 << 20) + 1), (1 << 20) + (1 << 15)); // e=20, s=5
    }

    #[test]
    fn aad_differs_for_every_object() {
        let a = Id([1; 32]);
        let b = Id([2; 32]);
        let all = [
            Object::Config,
            Object::Index(&a),
            Object::Index(&b),
            Object::Snapshot(&a),
            Object::Dictionary(&a),
            Object::Writer("x"),
            Object::PackHeader,
            Object::PackTrailer,
            Object::Blob(BlobKind::Data, &a),
            Object::Blob(BlobKind::Tree, &a),
            Object::Blob(BlobKind::Data, &b),
            Object::Forgotten(&a),
            Object::Search(&a),
            Object::Audit(&a),
        ];
        let set: std::collections::HashSet<Vec<u8>> = all.iter().map(|o| o.aad()).collect();
        assert_eq!(set.len(), all.len());
    }

    #[test]
    fn unknown_versions_are_refused_by_number() {
        assert_eq!(Version::from_number(2).unwrap(), Version::V2);
        assert!(matches!(
            Version::from_number(3),
            Err(Error::UnsupportedVersion(3))
        ));
        assert!(serde_json::from_str::<Version>("0").is_err());
    }

    proptest! {
        #[test]
        fn pad_round_trips_and_stays_within_12_percent(data in proptest::collection::vec(any::<u8>(), 0..20_000)) {
            let padded = pad(data.clone());
            prop_assert!(padded.len() > data.len());
            prop_assert!(padded.len() <= (data.len() + 1) * 113 / 100 + 2);
            prop_assert_eq!(padded.len(), padme(data.len() + 1));
            prop_assert_eq!(unpad(padded, "x").unwrap(), data);
        }
    }

    #[test]
    fn bad_padding_is_an_error() {
        assert!(unpad(vec![], "x").is_err());
        assert!(unpad(vec![0, 0], "x").is_err());
        assert!(unpad(vec![1, 2, 0], "x").is_err());
        assert_eq!(unpad(vec![1, 0x80, 0], "x").unwrap(), vec![1]);
    }
}
