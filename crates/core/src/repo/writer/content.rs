//! Storing content through the blob saver: a message's or small file's bytes
//! ([`store_content`]), a file of any size read in windows ([`store_large`]), and a
//! folder's entries cut into tree chunks ([`save_entries`] at once, [`EntryStream`] as
//! they come in key order).

use crate::error::{Error, Result};
use crate::repo::format::BlobKind;
use crate::repo::id::Id;
use crate::repo::split::ChunkerParams;
use crate::repo::tree::{self, ChunkRef, ContentList, MessageChunk, MessageEntry, NameChunk};
use crate::repo::writer::BlobSaver;
use rayon::prelude::*;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Takes the message contents a backup adds to the repository as it reads them
/// ([`store_content_new`] says which): each once (the first copy of a message delivered
/// to many mailboxes), with its keyed hash (the entries' `hash`). Called from the
/// backup's workers, several at once; `backup --index` indexes them.
pub trait NewContents: Sync {
    fn add(&self, hash: &Id, data: &[u8]);
}

/// Splits a message (or any file) into blobs ([`crate::repo::split`]) and saves them; returns
/// the content ids in order. For every kind of source.
pub fn store_content(saver: &BlobSaver, data: &[u8]) -> Result<Vec<Id>> {
    store_content_new(saver, data).map(|(ids, _)| ids)
}

/// As [`store_content`], and whether the content is new to the repository: some blob of
/// it was neither in the repository nor saved before by this run. (A content made only of
/// blobs seen before may be new too, but rarely: a reordering.)
pub fn store_content_new(saver: &BlobSaver, data: &[u8]) -> Result<(Vec<Id>, bool)> {
    let mut ids = Vec::new();
    let mut new = false;
    for r in crate::repo::split::split(data, saver.repo().chunker()) {
        let chunk = &data[r];
        let id = saver.repo().key().blob_id(chunk);
        new |= saver.save_with_id(BlobKind::Data, id, chunk)?;
        ids.push(id);
    }
    Ok((ids, new))
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
/// source whose entries come in no particular order.
pub fn save_entries(saver: &BlobSaver, mut entries: Vec<MessageEntry>) -> Result<SavedChunks> {
    entries.sort_by(|a, b| (&a.key, &a.name).cmp(&(&b.key, &b.name)));
    let mut stream = EntryStream::new(saver);
    for e in entries {
        stream.push(e)?;
    }
    Ok(stream.finish()?.0)
}

/// A folder's entries saved as they come, in key order: each chunk is saved when its
/// last entry arrives ([`tree::chunk_ends_after`]), so only one chunk's entries and the
/// chunk references are held, whatever the folder's size; the chunks are those
/// [`save_entries`] cuts of the same entries.
pub struct EntryStream<'s> {
    saver: &'s BlobSaver<'s>,
    /// The entries of the chunk being filled.
    pending: Vec<MessageEntry>,
    chunks: Vec<ChunkRef>,
    /// Key and name of the last entry of the last chunk saved.
    last: Option<(Vec<u8>, Vec<u8>)>,
    messages: u64,
    bytes: u64,
}

impl<'s> EntryStream<'s> {
    pub fn new(saver: &'s BlobSaver<'s>) -> EntryStream<'s> {
        EntryStream {
            saver,
            pending: Vec::new(),
            chunks: Vec::new(),
            last: None,
            messages: 0,
            bytes: 0,
        }
    }

    /// Adds the next entry; one ordered before the last ((key, name) order) is refused,
    /// as the chunks already saved could not hold it.
    pub fn push(&mut self, e: MessageEntry) -> Result<()> {
        let before = match self.pending.last() {
            Some(p) => (&p.key, &p.name),
            None => match &self.last {
                Some((k, n)) => (k, n),
                None => (&e.key, &e.name),
            },
        };
        if before > (&e.key, &e.name) {
            return Err(Error::Internal(format!(
                "a folder's entry {:?} came after {:?}, out of key order",
                String::from_utf8_lossy(&e.key),
                String::from_utf8_lossy(before.0)
            )));
        }
        self.messages += 1;
        self.bytes += e.size;
        let ends = tree::chunk_ends_after(&e.key, self.pending.len() + 1);
        self.pending.push(e);
        if ends {
            self.save_pending()?;
        }
        Ok(())
    }

    /// Entries held: those of the chunk being filled.
    pub fn pending(&self) -> usize {
        self.pending.len()
    }

    /// Saves the entries of the chunk being filled.
    fn save_pending(&mut self) -> Result<()> {
        let pending = std::mem::take(&mut self.pending);
        self.last = pending.last().map(|e| (e.key.clone(), e.name.clone()));
        let (stored, names): (Vec<_>, Vec<_>) =
            pending.into_iter().map(MessageEntry::into_parts).unzip();
        let save = |blob: &[u8]| self.saver.save(BlobKind::Tree, blob);
        let entries = save(&tree::encode(&MessageChunk { entries: stored }))?;
        let names = save(&tree::encode(&NameChunk { names }))?;
        self.chunks.push(ChunkRef { entries, names });
        Ok(())
    }

    /// Saves the last chunk and the chunk tree: the folder's chunks, and its number of
    /// messages and their bytes.
    pub fn finish(mut self) -> Result<(SavedChunks, u64, u64)> {
        if !self.pending.is_empty() {
            self.save_pending()?;
        }
        let saved = save_chunk_tree(self.saver, self.chunks)?;
        Ok((saved, self.messages, self.bytes))
    }
}

/// Saves `chunks` (a folder's, in key order) as a [`ChunkTree`](tree::ChunkTree) when
/// they are cut into more than one leaf; otherwise they stay in the folder's node. Each
/// level is cut at content-defined points ([`tree::node_boundaries`]) and saved, then the
/// next one over its nodes' ids, until one node is left: the root.
pub fn save_chunk_tree(saver: &BlobSaver, chunks: Vec<ChunkRef>) -> Result<SavedChunks> {
    let at: Vec<Id> = chunks.iter().map(|c| c.entries).collect();
    let cuts = tree::node_boundaries(&at);
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
        let cuts = tree::node_boundaries(&level);
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
