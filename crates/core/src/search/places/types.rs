//! The places map's types, apart from what it does with them (`places.rs`), how it
//! folds snapshots in (`update.rs`) and how it is kept (`file.rs`).

use crate::error::{Error, Result};
use crate::repo::id::Id;
use crate::repo::tree::{ChunkRef, FileEntry};
use crate::report::Failure;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::path::PathBuf;

/// A folder of an account (the same name in two accounts is two folders).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct FolderKey {
    pub account: String,
    pub folder: String,
}

/// A snapshot as the map keeps it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SnapHead {
    pub id: Id,
    pub time: i64,
    pub nanos: u32,
}

/// The snapshots of one host and source, oldest first: a record's run is a range of
/// them.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(super) struct Seq {
    pub(super) hostname: String,
    pub(super) source: String,
    pub(super) snaps: Vec<SnapHead>,
    /// What could not be read of a snapshot (its index in `snaps`, the item, the error):
    /// reported by every search while the snapshot is kept.
    pub(super) failures: Vec<(u32, String, String)>,
    /// Per snapshot, whether the repository still has it (set when read, not kept).
    #[serde(skip)]
    pub(super) live: Vec<bool>,
}

/// Flag bits of a record.
pub mod flag {
    pub const SEEN: u8 = 1;
    pub const ANSWERED: u8 = 2;
    pub const FLAGGED: u8 = 4;
    pub const DELETED: u8 = 8;
    pub const DRAFT: u8 = 16;
    /// `P` in the file name: `$Forwarded`.
    pub const FORWARDED: u8 = 32;
    /// A live split holds the record's content.
    pub const INDEXED: u8 = 128;
}

/// The records, a column each.
#[derive(Default)]
pub(super) struct Columns {
    pub(super) content: Vec<Id>,
    pub(super) seq: Vec<u32>,
    pub(super) folder: Vec<u32>,
    /// The run: indexes into the sequence's snapshots, both included.
    pub(super) first: Vec<u32>,
    pub(super) last: Vec<u32>,
    pub(super) flags: Vec<u8>,
    /// The keyword letters of the file name (`a`..`z`: bits 0..25), named by the
    /// folder's `dovecot-keywords`.
    pub(super) letters: Vec<u32>,
    /// The first 8 bytes of the BLAKE3 of the file's key: the same message file in a
    /// folder, without reading its entry.
    pub(super) key: Vec<u64>,
    /// The first 8 bytes of the BLAKE3 of the entry's bytes: the same entry in the next
    /// snapshot, without reading it.
    pub(super) entry: Vec<u64>,
    /// The Date header, or the internal date when it has none (Unix seconds).
    pub(super) date: Vec<i64>,
    /// Where each record's entry is in the entries (`len + 1` offsets).
    pub(super) offsets: Vec<u64>,
}

/// The records' entries, one after the other (postcard): in the cache file, and those
/// added since it was read.
pub(super) struct Blob {
    pub(super) file: Option<(std::fs::File, u64, u64)>,
    pub(super) mem: Vec<u8>,
}

/// The map (see the module's text).
pub struct Places {
    pub(super) seqs: Vec<Seq>,
    pub folders: Vec<FolderKey>,
    /// `folders` by key, while snapshots are folded in (built then).
    pub(super) folder_ids: HashMap<FolderKey, u32>,
    /// Per folder, its `dovecot-keywords` file in the newest snapshot that has one.
    pub(super) keyword_files: Vec<Option<FileEntry>>,
    /// The splits the records' [`flag::INDEXED`] bits were set against, sorted.
    pub(super) splits: Vec<Id>,
    pub(super) cols: Columns,
    /// Record numbers sorted by content.
    pub(super) by_content: Vec<u32>,
    pub(super) blob: Blob,
    /// Per sequence, what its newest snapshot holds (for folding in the next), as kept in
    /// the file until needed.
    pub(super) tips: Tips,
    /// Snapshot files that could not be read.
    pub(super) damaged: Vec<Failure>,
    /// Where the map is kept, if anywhere.
    pub(super) path: Option<PathBuf>,
    /// Changed since read (to be kept again).
    pub(super) changed: bool,
    /// Records added since read.
    pub(super) grown: bool,
}

impl Blob {
    /// Bytes `a..b` of the entries.
    pub(super) fn read(&self, a: u64, b: u64) -> Result<Vec<u8>> {
        let file_len = self.file.as_ref().map_or(0, |f| f.2);
        if a >= file_len {
            let (a, b) = ((a - file_len) as usize, (b - file_len) as usize);
            return (self.mem.get(a..b))
                .map(<[u8]>::to_vec)
                .ok_or_else(|| Error::corrupt("search places", "entry out of range"));
        }
        let Some((f, start, _)) = &self.file else {
            return Err(Error::corrupt("search places", "entry out of range"));
        };
        if b > file_len || b < a {
            return Err(Error::corrupt("search places", "entry out of range"));
        }
        let mut buf = vec![0; (b - a) as usize];
        std::os::unix::fs::FileExt::read_exact_at(f, &mut buf, start + a)
            .map_err(|e| Error::corrupt("search places", e.to_string()))?;
        Ok(buf)
    }

    pub(super) fn len(&self) -> u64 {
        self.file.as_ref().map_or(0, |f| f.2) + self.mem.len() as u64
    }
}

/// What identifies a folder's list of chunks without reading it: its chunk tree's root,
/// or the chunks it holds itself.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub(super) enum ChunksOf {
    Tree(Id),
    Inline(Vec<ChunkRef>),
}

/// A folder of a sequence's newest snapshot: its chunks, and the record of each entry.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(super) struct TipFolder {
    pub(super) of: ChunksOf,
    pub(super) chunks: Vec<(ChunkRef, Vec<u32>)>,
}

/// What a sequence's newest snapshot holds, by folder.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub(super) struct SeqTip {
    pub(super) folders: HashMap<u32, TipFolder>,
}

/// Every sequence's tip: as read from the cache file (decoded when a snapshot is folded
/// in, not by a search that has nothing to fold), or decoded.
#[derive(Default)]
pub(super) struct Tips {
    pub(super) raw: Option<Vec<u8>>,
    pub(super) decoded: Vec<SeqTip>,
}

impl Tips {
    pub(super) fn from_raw(raw: Vec<u8>) -> Tips {
        Tips {
            raw: Some(raw),
            decoded: Vec::new(),
        }
    }

    /// The tips as kept in the file.
    pub(super) fn encoded(&self) -> Result<Vec<u8>> {
        match &self.raw {
            Some(raw) => Ok(raw.clone()),
            None => postcard::to_stdvec(&self.decoded)
                .map_err(|e| Error::corrupt("search places", e.to_string())),
        }
    }

    /// The tips, decoded when first asked for; every record they name must be below
    /// `records`, or the map is damaged.
    pub(super) fn decode(&mut self, seqs: usize, records: usize) -> Result<&mut Vec<SeqTip>> {
        if let Some(raw) = self.raw.take() {
            let decoded: Vec<SeqTip> = postcard::from_bytes(&raw)
                .map_err(|e| Error::corrupt("search places", e.to_string()))?;
            let named = (decoded.iter())
                .flat_map(|t| t.folders.values())
                .flat_map(|f| f.chunks.iter().flat_map(|c| c.1.iter()));
            if named.into_iter().any(|&r| r as usize >= records) {
                return Err(Error::corrupt("search places", "a tip names no record"));
            }
            self.decoded = decoded;
        }
        self.decoded.resize_with(seqs, SeqTip::default);
        Ok(&mut self.decoded)
    }
}
