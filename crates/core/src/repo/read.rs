//! Reading from the repository: blobs out of packs, trees, message chunks, snapshots.

use crate::error::{Error, Result};
use crate::repo::compress::{self};
use crate::repo::format::BlobKind;
use crate::repo::format::{Object, Version};
use crate::repo::id::Id;
use crate::repo::index::Location;
use crate::repo::named::Named;
use crate::repo::pack::PackEntry;
use crate::repo::snapshot::Snapshot;
use crate::repo::{file_id, format, pack, DamagedSnapshot};
use crate::repo::{tree, Repository, Snapshots};
use crate::store::Store;

/// How deep a chunk tree may be before it is taken for damaged.
const CHUNK_TREE_DEPTH: u32 = 16;

/// What a walk of a folder's chunk tree ([`Repository::walk_chunk_tree`]) does at each of
/// its steps.
pub trait ChunkTreeVisitor {
    /// Whether to read node `id` and what is below it (false: skip them, e.g. seen
    /// before in another snapshot).
    fn enter(&mut self, _id: &Id) -> bool {
        true
    }
    /// A chunk of a leaf, in key order.
    fn chunk(&mut self, c: &tree::ChunkRef);
    /// Node `id` cannot be read (`e`): what is below it is skipped, and an error returned
    /// here ends the walk (by default, this one).
    fn damaged(&mut self, _id: &Id, e: Error) -> Result<()> {
        Err(e)
    }
}

impl Repository {
    /// Asks the store to read ahead the parts of packs that hold metadata (tree blobs),
    /// newest packs first, up to `budget` bytes. An incremental backup calls it in the
    /// background while it walks the directories: the parent's trees are then read from
    /// memory instead of by thousands of small random reads (BENCHMARKS.md).
    pub fn prefetch_trees(&self, budget: u64) {
        let mut spans = self.index.tree_spans();
        spans.sort_unstable_by_key(|s| std::cmp::Reverse(s.0));
        let mut left = budget;
        for (pack, start, end) in spans {
            let len = end - start;
            if len > left {
                break;
            }
            left -= len;
            let path = pack::pack_path(&self.index.pack_id(pack));
            self.store.prefetch(&path, start, len);
        }
    }

    /// Reads, opens, decompresses and verifies one blob. In a format-2 pack the AEAD
    /// tag, which binds the blob's id and kind, proves it; a format-1 blob is hashed
    /// against its id.
    pub fn read_blob(&self, id: &Id) -> Result<Vec<u8>> {
        let (loc, sealed, path) = self.read_sealed(id)?;
        self.open_read(id, &loc, sealed, &path, true)
    }

    /// Opens blob `id` read (sealed) from `path` at `loc`, as [`Self::read_blob`] does
    /// (`verify`) or as [`Self::read_blob_unverified`] does.
    fn open_read(
        &self,
        id: &Id,
        loc: &Location,
        sealed: Vec<u8>,
        path: &str,
        verify: bool,
    ) -> Result<Vec<u8>> {
        let version = self.index.pack_version(loc.pack);
        let raw = self.open_blob(id, loc, version, sealed, path)?;
        match version {
            Version::V1 if verify => self.verify_blob(id, raw, path),
            _ => Ok(raw),
        }
    }

    /// A blob's place, its sealed bytes and the path of its pack.
    pub(in crate::repo) fn read_sealed(&self, id: &Id) -> Result<(Location, Vec<u8>, String)> {
        let loc = self
            .index
            .get(id)
            .ok_or_else(|| Error::BlobNotFound(id.to_hex()))?;
        let path = pack::pack_path(&self.index.pack_id(loc.pack));
        let sealed = self.store.get_pack_range(
            &path,
            loc.offset.into(),
            loc.stored_len.into(),
            loc.kind.into(),
        )?;
        Ok((loc, sealed, path))
    }

    /// Opens a sealed blob read from a pack of format `version` and hashes it against
    /// its id whatever the format (for `check` and for packs about to be indexed, which
    /// also catch a writer that filed a blob under a wrong id).
    pub(crate) fn decode_blob(
        &self,
        id: &Id,
        loc: &Location,
        version: Version,
        sealed: &[u8],
        path: &str,
    ) -> Result<Vec<u8>> {
        let raw = self.open_blob(id, loc, version, sealed.to_vec(), path)?;
        self.verify_blob(id, raw, path)
    }

    /// `raw` if it is the content of blob `id`, else a corruption error.
    fn verify_blob(&self, id: &Id, raw: Vec<u8>, path: &str) -> Result<Vec<u8>> {
        if self.key.blob_id(&raw) != *id {
            let what = format!("blob {} in {path}", id.short());
            return Err(Error::corrupt(what, "content does not match its id"));
        }
        Ok(raw)
    }

    /// Opens (in place) and decompresses a blob without hashing it against its id. In
    /// a format-2 pack the tag proves the blob is the one sealed as `id` of its kind; in
    /// a format-1 pack only that it is the repository's own, and the id check adds the
    /// protection against a blob filed under the wrong id, which a caller that checks a
    /// whole-message hash afterwards gets anyway.
    pub(in crate::repo) fn open_blob(
        &self,
        id: &Id,
        loc: &Location,
        version: Version,
        sealed: Vec<u8>,
        path: &str,
    ) -> Result<Vec<u8>> {
        let what = format!("blob {} in {path}", id.short());
        let plain = match version {
            Version::V1 => self.key.open_vec(sealed, &what)?,
            Version::V2 => {
                let obj = Object::Blob(loc.kind, id);
                self.key
                    .open_vec_ad(sealed, &obj.aad(), &what)
                    .map_err(|_| self.blob_open_error(&obj, loc, path, what.clone()))?
            }
        };
        let plain = match self.config.pad && version == Version::V2 {
            true => format::unpad(plain, &what)?,
            false => plain,
        };
        compress::decompress_owned(loc.codec, plain, loc.raw_len as usize, &what, &self.dicts)
    }

    /// Why a format-2 blob did not open as `obj`: a format-1 blob (sealed without
    /// associated data) says so; anything else is misplaced or damaged. The failed open
    /// consumed the sealed bytes, so they are read again: this costs only on the error
    /// path.
    fn blob_open_error(&self, obj: &Object, loc: &Location, path: &str, what: String) -> Error {
        let format1 = self
            .store
            .get_range(path, loc.offset.into(), loc.stored_len.into())
            .is_ok_and(|sealed| self.key.opens_with(&sealed, &[]));
        match format1 {
            true => Error::OtherFormat {
                what,
                found: 1,
                expected: 2,
            },
            false => Error::Misplaced {
                what,
                expected: obj.describe(),
            },
        }
    }

    /// Reads a blob like [`Self::read_blob`] but, in a format-1 pack, without hashing it:
    /// for callers that verify a hash over the whole of what they assemble (message
    /// restore).
    pub fn read_blob_unverified(&self, id: &Id) -> Result<Vec<u8>> {
        let (loc, sealed, path) = self.read_sealed(id)?;
        self.open_read(id, &loc, sealed, &path, false)
    }

    /// Opens blob `id` from its sealed bytes, read by the caller from its pack (a restore
    /// reads many blobs in one span): as [`Self::read_blob`] opens them (`verify`) or as
    /// [`Self::read_blob_unverified`] does.
    pub(crate) fn open_sealed(&self, id: &Id, sealed: Vec<u8>, verify: bool) -> Result<Vec<u8>> {
        let loc = self
            .index
            .get(id)
            .ok_or_else(|| Error::BlobNotFound(id.to_hex()))?;
        let path = pack::pack_path(&self.index.pack_id(loc.pack));
        self.open_read(id, &loc, sealed, &path, verify)
    }

    /// Reads and decodes a tree blob; a blob the index lists as data is refused.
    pub fn read_tree<T: tree::TreeBlob>(&self, id: &Id) -> Result<T> {
        if let Some(loc) = self.index.get(id) {
            if loc.kind != BlobKind::Tree {
                return Err(Error::corrupt(
                    format!("tree {}", id.short()),
                    "the index lists it as a data blob, not a tree",
                ));
            }
        }
        tree::decode(&self.read_blob(id)?, &format!("tree {}", id.short()))
    }

    /// Reads one chunk of a folder's messages (both of its blobs).
    pub fn read_chunk(&self, c: &tree::ChunkRef) -> Result<Vec<tree::MessageEntry>> {
        let m: tree::MessageChunk = self.read_tree(&c.entries)?;
        let n: tree::NameChunk = self.read_tree(&c.names)?;
        if m.entries.len() != n.names.len() {
            return Err(Error::corrupt(
                format!("tree {}", c.names.short()),
                "name chunk and message chunk differ in length",
            ));
        }
        Ok(m.entries
            .into_iter()
            .zip(n.names)
            .map(|(s, n)| tree::MessageEntry::from_parts(s, n))
            .collect())
    }

    /// A folder's chunks, in key order: its node's own, or those of its chunk tree (each
    /// node read and checked).
    pub fn folder_chunks(&self, f: &tree::FolderNode) -> Result<Vec<tree::ChunkRef>> {
        struct All(Vec<tree::ChunkRef>);
        impl ChunkTreeVisitor for All {
            fn chunk(&mut self, c: &tree::ChunkRef) {
                self.0.push(*c);
            }
        }
        let mut all = All(f.chunks.clone());
        if let Some(root) = &f.chunk_tree {
            self.walk_chunk_tree(root, &mut all)?;
        }
        Ok(all.0)
    }

    /// A folder's chunks as [`folder_chunks`](Self::folder_chunks) reads them, except
    /// that a node of its chunk tree that cannot be read is handed to `damaged` and costs
    /// only the chunks below it.
    pub fn folder_chunks_or(
        &self,
        f: &tree::FolderNode,
        damaged: &mut dyn FnMut(&Id, Error),
    ) -> Vec<tree::ChunkRef> {
        struct Lenient<'a> {
            chunks: Vec<tree::ChunkRef>,
            damaged: &'a mut dyn FnMut(&Id, Error),
        }
        impl ChunkTreeVisitor for Lenient<'_> {
            fn chunk(&mut self, c: &tree::ChunkRef) {
                self.chunks.push(*c);
            }
            fn damaged(&mut self, id: &Id, e: Error) -> Result<()> {
                (self.damaged)(id, e);
                Ok(())
            }
        }
        let mut walk = Lenient {
            chunks: f.chunks.clone(),
            damaged,
        };
        if let Some(root) = &f.chunk_tree {
            // Damage is handed over, never returned: the walk ends with an Ok.
            let _ = self.walk_chunk_tree(root, &mut walk);
        }
        walk.chunks
    }

    /// Walks the chunk tree below node `id`, depth first, in key order (see
    /// [`ChunkTreeVisitor`]).
    pub fn walk_chunk_tree(&self, id: &Id, v: &mut dyn ChunkTreeVisitor) -> Result<()> {
        self.walk_chunk_node(id, v, 0)
    }

    fn walk_chunk_node(&self, id: &Id, v: &mut dyn ChunkTreeVisitor, depth: u32) -> Result<()> {
        if !v.enter(id) {
            return Ok(());
        }
        let what = || format!("tree {}", id.short());
        let node = match self.read_tree::<tree::ChunkTree>(id) {
            // Levels shrink at least 16-fold: 16 levels are more chunks than exist.
            Ok(_) if depth >= CHUNK_TREE_DEPTH => {
                return v.damaged(id, Error::corrupt(what(), "a chunk tree too deep"));
            }
            Ok(n) if n.chunks.is_empty() == n.children.is_empty() => {
                let e = Error::corrupt(what(), "a chunk tree node is neither a leaf nor inner");
                return v.damaged(id, e);
            }
            Ok(n) => n,
            Err(e) => return v.damaged(id, e),
        };
        for c in &node.chunks {
            v.chunk(c);
        }
        for child in &node.children {
            self.walk_chunk_node(child, v, depth + 1)?;
        }
        Ok(())
    }

    /// The data blob ids of a file, in order: its own, or those of its content lists
    /// (each read and checked; a large file of a `file:` backup).
    pub fn file_content(&self, f: &tree::FileEntry) -> Result<Vec<Id>> {
        if f.lists.is_empty() {
            return Ok(f.content.clone());
        }
        let mut ids = f.content.clone();
        for l in &f.lists {
            ids.extend(self.read_tree::<tree::ContentList>(l)?.ids);
        }
        Ok(ids)
    }

    /// All snapshots, oldest first, and the files in `snapshots/` that cannot be read (a
    /// stray file, a truncated or tampered one): one damaged file costs that snapshot
    /// only, never the others.
    pub fn snapshots(&self) -> Result<Snapshots> {
        let mut out = Snapshots::default();
        let mut files = self.store.list("snapshots/")?;
        files.sort_by(|a, b| a.path.cmp(&b.path));
        for f in files {
            match self.load_snapshot_at(&f.path) {
                Ok(s) => out.list.push(s),
                Err(e) if self.migration_leftover(&e) => {}
                Err(error) => out.damaged.push(DamagedSnapshot {
                    path: f.path,
                    error,
                }),
            }
        }
        out.list.sort_by_key(|s| (s.time, s.time_nanos, s.id));
        Ok(out)
    }

    /// Loads the snapshot stored at `path`.
    pub fn snapshots_one(&self, path: &str) -> Result<Snapshot> {
        self.load_snapshot_at(path)
    }

    fn load_snapshot_at(&self, path: &str) -> Result<Snapshot> {
        let id = file_id(path)?;
        let plain = self.open_named(Named::Snapshot, path, self.store.get(path)?)?;
        let mut s = Snapshot::from_json(&plain, self.version, path)?;
        s.id = id;
        Ok(s)
    }

    /// Finds a snapshot by `latest` (the latest readable one) or by a unique prefix of its
    /// id. A prefix that names only a damaged snapshot file gets that file's error.
    pub fn find_snapshot(&self, which: &str) -> Result<Snapshot> {
        let Snapshots { list, damaged } = self.snapshots()?;
        if which == "latest" {
            return list
                .into_iter()
                .last()
                .ok_or_else(|| Error::SnapshotNotFound(which.into()));
        }
        let mut m: Vec<Snapshot> = list
            .into_iter()
            .filter(|s| s.id.to_hex().starts_with(which))
            .collect();
        match m.len() {
            1 => Ok(m.remove(0)),
            0 => match damaged
                .into_iter()
                .find(|d| d.path.trim_start_matches("snapshots/").starts_with(which))
            {
                Some(d) => Err(d.error),
                None => Err(Error::SnapshotNotFound(which.into())),
            },
            _ => Err(Error::InvalidInput(format!(
                "snapshot prefix {which:?} is ambiguous: give more digits"
            ))),
        }
    }

    /// The blob a pack header entry describes, in the `bytes` of a pack of `version`:
    /// opened, decompressed and checked to hash to its id.
    pub(crate) fn decode_entry(
        &self,
        e: &PackEntry,
        version: Version,
        bytes: &[u8],
        path: &str,
    ) -> Result<Vec<u8>> {
        self.decode_entry_in(e, version, bytes, 0, path)
    }

    /// [`Self::decode_entry`] in `bytes` read from the pack at offset `base` (a range).
    pub(crate) fn decode_entry_in(
        &self,
        e: &PackEntry,
        version: Version,
        bytes: &[u8],
        base: u32,
        path: &str,
    ) -> Result<Vec<u8>> {
        let start = e.offset.checked_sub(base).map(|s| s as usize);
        let sealed = start
            .and_then(|s| bytes.get(s..s + e.stored_len as usize))
            .ok_or_else(|| Error::corrupt(path, "blob past the end of the pack"))?;
        let loc = Location {
            pack: 0,
            offset: e.offset,
            stored_len: e.stored_len,
            raw_len: e.raw_len,
            kind: e.kind,
            codec: e.codec,
        };
        self.decode_blob(&e.id, &loc, version, sealed, path)
    }
}
