//! Metadata trees: snapshot -> accounts -> folders -> message entries.
//!
//! Each level is a tree blob: one version byte, then the postcard encoding of the struct.
//! A folder's entries are sorted by Maildir key and cut into blobs of at most
//! [`ENTRIES_PER_CHUNK`] entries, so an unchanged folder encodes to the same bytes, gets the
//! same blob ids, and costs nothing in the next snapshot.

use crate::error::{Error, Result};
use crate::id::Id;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// Version byte in front of every tree blob.
pub const TREE_VERSION: u8 = 1;
/// Entries per folder chunk blob (~150-300 bytes each encoded).
pub const ENTRIES_PER_CHUNK: usize = 1000;

/// The snapshot's top tree: its accounts.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq, Default)]
pub struct RootTree {
    pub accounts: Vec<AccountRef>,
}

/// One account in a snapshot.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct AccountRef {
    /// `user@domain`.
    pub name: String,
    /// Where the account's Maildir is below the source root (`example.org/bob/Maildir`), as
    /// raw bytes; empty when the source is the Maildir itself.
    pub rel_path: Vec<u8>,
    pub tree: Id,
    pub messages: u64,
    pub bytes: u64,
}

/// An account's folders.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq, Default)]
pub struct AccountTree {
    pub folders: Vec<FolderNode>,
}

/// One folder: its name, its Maildir directory, its own files and its message chunks.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct FolderNode {
    /// Display/IMAP-style name with `/` separators: `INBOX`, `Sent`, `Archive/2023`.
    pub name: String,
    /// Directory below the Maildir root, raw bytes: empty for INBOX, `.Archive.2023`.
    pub dir: Vec<u8>,
    /// Files of the folder directory other than messages (dovecot-uidlist, dovecot-keywords,
    /// maildirfolder, subscriptions...).
    pub files: Vec<FileEntry>,
    pub chunks: Vec<Id>,
    pub messages: u64,
    pub bytes: u64,
}

/// A plain file kept with a folder.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct FileEntry {
    pub name: Vec<u8>,
    pub size: u64,
    pub mtime: Timestamp,
    pub mode: u32,
    pub content: Vec<Id>,
}

/// Seconds and nanoseconds since the Unix epoch.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq, Default, PartialOrd, Ord)]
pub struct Timestamp {
    pub secs: i64,
    pub nanos: u32,
}

/// One message file.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct MessageEntry {
    /// Maildir key: the file name up to the `:2,` info part.
    pub key: Vec<u8>,
    /// The whole file name (key plus info: flags and keywords), restored as it was.
    pub name: Vec<u8>,
    /// In `new/` rather than `cur/`.
    pub new: bool,
    pub size: u64,
    /// The file's mtime: Maildir's (and Dovecot's) internal date.
    pub mtime: Timestamp,
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    /// Keyed BLAKE3 of the whole message, checked on restore.
    pub hash: Id,
    /// The content blobs, in order: trace prefix, then the rest in one or more chunks.
    pub content: Vec<Id>,
    /// Decoded From and Subject (shortened) and the Date header, for `ls`.
    pub from: String,
    pub subject: String,
    pub date: Option<i64>,
}

/// One chunk of a folder's entries.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq, Default)]
pub struct MessageChunk {
    pub entries: Vec<MessageEntry>,
}

impl MessageEntry {
    /// The Maildir info part after `:2,` (flags then keywords), empty if none.
    pub fn flags(&self) -> &[u8] {
        crate::maildir::split_name(&self.name).1
    }
}

/// Encodes a tree blob.
pub fn encode<T: Serialize>(value: &T) -> Vec<u8> {
    let mut out = vec![TREE_VERSION];
    // postcard serialization of these plain structs into a Vec cannot fail.
    out.extend(postcard::to_allocvec(value).unwrap_or_default());
    out
}

/// Decodes a tree blob; `what` names it for errors.
pub fn decode<T: DeserializeOwned>(bytes: &[u8], what: &str) -> Result<T> {
    match bytes.first() {
        Some(&TREE_VERSION) => postcard::from_bytes(&bytes[1..])
            .map_err(|e| Error::corrupt(what, format!("tree: {e}"))),
        Some(v) => Err(Error::corrupt(what, format!("tree version {v}"))),
        None => Err(Error::corrupt(what, "empty tree blob")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_golden_prefix() {
        let e = MessageEntry {
            key: b"1.M1P1.h".to_vec(),
            name: b"1.M1P1.h:2,S".to_vec(),
            new: false,
            size: 5,
            mtime: Timestamp { secs: 1, nanos: 2 },
            mode: 0o600,
            uid: 8,
            gid: 8,
            hash: Id([1; 32]),
            content: vec![Id([2; 32])],
            from: "a".into(),
            subject: "s".into(),
            date: Some(3),
        };
        let c = MessageChunk {
            entries: vec![e.clone()],
        };
        let enc = encode(&c);
        assert_eq!(enc[0], 1);
        assert_eq!(enc[1], 1, "postcard varint length of the entries vec");
        assert_eq!(decode::<MessageChunk>(&enc, "t").unwrap(), c);
        assert_eq!(e.flags(), b"S");
        assert!(decode::<MessageChunk>(&enc[..enc.len() - 3], "t").is_err());
        assert!(decode::<MessageChunk>(&[], "t").is_err());
    }
}
