//! Storing content through the blob saver: a message's or small file's bytes
//! ([`store_content`]), a file of any size read in windows ([`store_large`]), and a
//! folder's entries cut into tree chunks ([`save_entries`]).

use crate::error::{Error, Result};
use crate::repo::format::BlobKind;
use crate::repo::id::Id;
use crate::repo::split::ChunkerParams;
use crate::repo::tree::{self, ChunkRef, ContentList, MessageChunk, MessageEntry, NameChunk};
use crate::repo::writer::BlobSaver;
use rayon::prelude::*;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Splits a message (or any file) into blobs ([`crate::repo::split`]) and saves them; returns
/// the content ids in order. For every kind of source.
pub fn store_content(saver: &BlobSaver, data: &[u8]) -> Result<Vec<Id>> {
    let mut ids = Vec::new();
    for r in crate::repo::split::split(data, saver.repo().chunker()) {
        ids.push(saver.save(BlobKind::Data, &data[r])?);
    }
    Ok(ids)
}

/// A large file is read and chunked in windows of this many bytes: two in memory at once
/// (the one being chunked and saved, the next being read).
pub const LARGE_WINDOW: usize = 32 << 20;

/// A large file's content as [`store_large`] stored it.
#[derive(Debug, Default, Clone)]
pub struct StoredLarge {
    /// The data blob ids, when they are few (a small file); else empty ...
    pub content: Vec<Id>,
    /// ... and these [`ContentList`] blobs hold them, in order.
    pub lists: Vec<Id>,
    /// Bytes read: the file's size (as read, if it grew or shrank meanwhile).
    pub size: u64,
}

/// Stores the bytes of `reader` as one file's content, for a file of any size (a mail
/// database): read in windows of [`LARGE_WINDOW`] bytes (the next read while the current
/// one is chunked and saved), each window cut on the rayon pool
/// ([`Chunker::chunks_parallel`](crate::repo::split::Chunker::chunks_parallel): the same
/// cuts as a serial pass over the whole file) into page-sized chunks
/// ([`ChunkerParams::FILES`]), which are hashed, compressed
/// ([`BlobSaver::save_file_chunk`]), sealed and packed in parallel. More than
/// [`tree::LIST_MIN_IDS`] ids go into [`ContentList`] tree blobs, cut where the ids say
/// ([`tree::list_boundaries`]), so that a file changed in one place shares its other lists
/// with the previous snapshot. `read` counts the bytes read; a read error is
/// [`Error::Io`] naming `what`.
pub fn store_large(
    saver: &BlobSaver,
    mut reader: impl std::io::Read + Send,
    what: &std::path::Path,
    read: &AtomicU64,
) -> Result<StoredLarge> {
    let chunker = saver.repo().chunker().with_params(ChunkerParams::FILES);
    let parts = rayon::current_num_threads().max(1) * 4;
    let mut ids: Vec<Id> = Vec::new();
    let mut size = 0u64;
    let mut fill = |buf: &mut Vec<u8>| -> Result<bool> {
        let before = buf.len();
        let eof = fill_window(&mut reader, buf, LARGE_WINDOW).map_err(|e| Error::io(what, e))?;
        read.fetch_add((buf.len() - before) as u64, Relaxed);
        Ok(eof)
    };
    let mut cur: Vec<u8> = Vec::with_capacity(LARGE_WINDOW);
    let mut next: Vec<u8> = Vec::with_capacity(LARGE_WINDOW);
    let mut eof = fill(&mut cur)?;
    loop {
        let mut ranges = chunker.chunks_parallel(&cur, parts);
        // The last chunk may be cut short by the window's end: it is cut again with the
        // next window.
        if !eof {
            ranges.pop();
        }
        let consumed = ranges.last().map_or(0, |r| r.end);
        next.clear();
        next.extend_from_slice(&cur[consumed..]);
        let (saved, more) = rayon::join(
            || -> Result<Vec<Id>> {
                (ranges.par_iter())
                    .map(|r| saver.save_file_chunk(&cur[r.clone()]))
                    .collect()
            },
            || if eof { Ok(true) } else { fill(&mut next) },
        );
        ids.extend(saved?);
        size += consumed as u64;
        if eof {
            break;
        }
        eof = more?;
        std::mem::swap(&mut cur, &mut next);
    }
    if ids.len() <= tree::LIST_MIN_IDS {
        return Ok(StoredLarge {
            content: ids,
            lists: Vec::new(),
            size,
        });
    }
    let lists = (tree::list_boundaries(&ids).into_iter())
        .map(|r| {
            let list = ContentList {
                ids: ids[r].to_vec(),
            };
            saver.save(BlobKind::Tree, &tree::encode(&list))
        })
        .collect::<Result<Vec<Id>>>()?;
    Ok(StoredLarge {
        content: Vec::new(),
        lists,
        size,
    })
}

/// Reads from `r` until `buf` holds `want` bytes or the input ends; whether it ended.
fn fill_window(
    r: &mut impl std::io::Read,
    buf: &mut Vec<u8>,
    want: usize,
) -> std::io::Result<bool> {
    use std::io::Read;
    while buf.len() < want {
        let n = r
            .by_ref()
            .take((want - buf.len()) as u64)
            .read_to_end(buf)?;
        if n == 0 {
            return Ok(true);
        }
    }
    Ok(false)
}

/// A folder's messages as saved: the chunks its node holds itself, or the root of the
/// chunk tree that holds them ([`tree::FolderNode::chunk_tree`]).
#[derive(Debug, Default)]
pub struct SavedChunks {
    pub chunks: Vec<ChunkRef>,
    pub chunk_tree: Option<Id>,
}

/// Sorts a folder's entries, cuts them into chunks and saves them as tree blobs, and the
/// chunks' references as a chunk tree when they are more than one list. For every kind of
/// source.
pub fn save_entries(saver: &BlobSaver, entries: Vec<MessageEntry>) -> Result<SavedChunks> {
    save_chunk_tree(saver, save_chunks(saver, entries)?)
}

/// Saves `chunks` (a folder's, in key order) as a [`ChunkTree`](tree::ChunkTree) when
/// they are cut into more than one leaf; otherwise they stay in the folder's node. Each
/// level is cut at content-defined points ([`tree::list_boundaries`]) and saved, then the
/// next one over its nodes' ids, until one node is left: the root.
pub fn save_chunk_tree(saver: &BlobSaver, chunks: Vec<ChunkRef>) -> Result<SavedChunks> {
    let at: Vec<Id> = chunks.iter().map(|c| c.entries).collect();
    let cuts = tree::list_boundaries(&at);
    if cuts.len() <= 1 {
        return Ok(SavedChunks {
            chunks,
            chunk_tree: None,
        });
    }
    let save = |node: &tree::ChunkTree| saver.save(BlobKind::Tree, &tree::encode(node));
    let mut level = Vec::with_capacity(cuts.len());
    for r in cuts {
        let chunks = chunks[r].to_vec();
        level.push(save(&tree::ChunkTree {
            chunks,
            children: Vec::new(),
        })?);
    }
    loop {
        let cuts = tree::list_boundaries(&level);
        let mut up = Vec::with_capacity(cuts.len());
        for r in &cuts {
            up.push(save(&tree::ChunkTree {
                chunks: Vec::new(),
                children: level[r.clone()].to_vec(),
            })?);
        }
        if up.len() == 1 {
            return Ok(SavedChunks {
                chunks: Vec::new(),
                chunk_tree: Some(up[0]),
            });
        }
        level = up;
    }
}

/// Sorts a folder's entries, cuts them into chunks and saves them.
fn save_chunks(saver: &BlobSaver, mut entries: Vec<MessageEntry>) -> Result<Vec<ChunkRef>> {
    entries.sort_by(|a, b| (&a.key, &a.name).cmp(&(&b.key, &b.name)));
    let mut chunks = Vec::new();
    for r in tree::chunk_boundaries(&entries) {
        let (stored, names): (Vec<_>, Vec<_>) =
            entries[r].iter().map(MessageEntry::to_parts).unzip();
        let entries = saver.save(
            BlobKind::Tree,
            &tree::encode(&MessageChunk { entries: stored }),
        )?;
        let names = saver.save(BlobKind::Tree, &tree::encode(&NameChunk { names }))?;
        chunks.push(ChunkRef { entries, names });
    }
    Ok(chunks)
}
