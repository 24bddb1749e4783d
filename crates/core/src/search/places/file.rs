//! The map in the local cache: one file, written under a temporary name and renamed,
//! readable by its owner alone.
//!
//! ```text
//! "mailvault places 3\n"
//! u64 n, BLAKE3 of the n bytes of tables that follow
//! tables, each a u64 length and its bytes:
//!     postcard head (sequences, folders, keyword files, splits)
//!     postcard tips (what each sequence's newest snapshot holds)
//!     columns: content (32 bytes each); seq, folder, first, last, by_content, letters (u32);
//!     flags (u8); key, entry, offsets (records + 1), date (u64, i64)
//! entries (postcard, one after the other; read a record at a time)
//! ```
//!
//! The columns are plain little-endian arrays rather than postcard: a search reads every
//! one of them (300,000 records for 100,000 messages in 30 snapshots), and they load at
//! the speed of a copy, where decoding them element by element would cost more than the
//! search. The entries stay in the file and are read only for the hits shown. Whatever
//! is read is checked (indexes within their tables, offsets in order): a damaged file is
//! built again, never trusted.

use super::super::split::is_stale;
use super::types::{Blob, Columns, FolderKey, Places, Seq, Tips};
use crate::error::{Error, Result};
use crate::repo::id::Id;
use crate::repo::tree::FileEntry;
use serde::{Deserialize, Serialize};
use std::fs::{self, File};
use std::io::{BufWriter, Read, Seek, SeekFrom, Write};
use std::path::Path;

const MAGIC: &[u8] = b"mailvault places 3\n";

#[derive(Serialize, Deserialize)]
struct Head {
    seqs: Vec<Seq>,
    folders: Vec<FolderKey>,
    keyword_files: Vec<Option<FileEntry>>,
    splits: Vec<Id>,
}

/// Writes `p` to `path`.
pub(super) fn write(p: &Places, path: &Path) -> Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    super::super::split::private_dir(dir)?;
    // What a killed run left half written.
    for e in fs::read_dir(dir).into_iter().flatten().flatten() {
        let name = e.file_name();
        if name.to_string_lossy().starts_with(".places-") && is_stale(&e.path()) {
            let _ = fs::remove_file(e.path());
        }
    }
    // Readable by its owner alone (tempfile's 0600), renamed into place when whole.
    let tmp = tempfile::Builder::new()
        .prefix(".places-")
        .tempfile_in(dir)
        .map_err(|e| Error::io(dir, e))?;
    let out = tmp.as_file().try_clone().map_err(|e| Error::io(dir, e))?;
    write_to(p, out)?;
    tmp.persist(path).map_err(|e| Error::io(path, e.error))?;
    Ok(())
}

fn write_to(p: &Places, out: File) -> Result<()> {
    let io = |e: std::io::Error| Error::corrupt("writing the search places", e.to_string());
    let head = Head {
        seqs: p.seqs.clone(),
        folders: p.folders.clone(),
        keyword_files: p.keyword_files.clone(),
        splits: p.splits.clone(),
    };
    let head =
        postcard::to_stdvec(&head).map_err(|e| Error::corrupt("search places", e.to_string()))?;
    let tips = p.tips.encoded()?;
    let c = &p.cols;
    let mut b = Vec::with_capacity(head.len() + tips.len() + c.content.len() * 80);
    let mut put = |bytes: &[u8]| {
        b.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
        b.extend_from_slice(bytes);
    };
    put(&head);
    put(&tips);
    put(&c.content.iter().flat_map(|id| id.0).collect::<Vec<u8>>());
    for col in [
        &c.seq,
        &c.folder,
        &c.first,
        &c.last,
        &p.by_content,
        &c.letters,
    ] {
        put(&col
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect::<Vec<u8>>());
    }
    put(&c.flags);
    for col in [&c.key, &c.entry, &c.offsets] {
        put(&col
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect::<Vec<u8>>());
    }
    put(&c
        .date
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect::<Vec<u8>>());
    let mut w = BufWriter::with_capacity(1 << 20, out);
    w.write_all(MAGIC).map_err(io)?;
    w.write_all(&(b.len() as u64).to_le_bytes()).map_err(io)?;
    w.write_all(blake3::hash(&b).as_bytes()).map_err(io)?;
    w.write_all(&b).map_err(io)?;
    if let Some((f, start, len)) = &p.blob.file {
        let mut f = f.try_clone().map_err(io)?;
        f.seek(SeekFrom::Start(*start)).map_err(io)?;
        let copied = std::io::copy(&mut f.take(*len), &mut w).map_err(io)?;
        if copied != *len {
            return Err(Error::corrupt("search places", "entries cut short"));
        }
    }
    w.write_all(&p.blob.mem).map_err(io)?;
    let f = w.into_inner().map_err(|e| io(e.into_error()))?;
    f.sync_data().map_err(io)
}

/// The map kept at `path`, or `None` when there is none or it is damaged (it is then
/// built again).
pub(super) fn read(path: &Path) -> Option<Places> {
    match read_checked(path) {
        Ok(p) => Some(p),
        Err(e) => {
            if path.exists() {
                tracing::warn!("search places {} set aside: {e}", path.display());
            }
            None
        }
    }
}

/// Bytes of the fixed start: the magic, the length of the tables, their checksum.
const START: usize = MAGIC.len() + 8 + 32;

fn read_checked(path: &Path) -> Result<Places> {
    let bad = |what: &str| Error::corrupt(format!("search places {}", path.display()), what);
    let mut f = File::open(path).map_err(|e| Error::io(path, e))?;
    let size = f.metadata().map_err(|e| Error::io(path, e))?.len();
    let mut start = [0; START];
    f.read_exact(&mut start).map_err(|e| Error::io(path, e))?;
    if &start[..MAGIC.len()] != MAGIC {
        return Err(bad("not a places file of this version"));
    }
    let n = u64::from_le_bytes(start[MAGIC.len()..][..8].try_into().expect("8 bytes"));
    if n > size - START as u64 {
        return Err(bad("cut short"));
    }
    let mut b = vec![0; n as usize];
    f.read_exact(&mut b).map_err(|e| Error::io(path, e))?;
    if blake3::hash(&b).as_bytes() != &start[MAGIC.len() + 8..] {
        return Err(bad("checksum"));
    }
    let mut parts = Parts(&b);
    let head: Head = postcard::from_bytes(parts.next()?).map_err(|_| bad("head"))?;
    let tips = parts.next()?.to_vec();
    let content: Vec<Id> = (parts.next()?.chunks_exact(32))
        .map(|c| Id(c.try_into().expect("32 bytes")))
        .collect();
    let mut u32s = || -> Result<Vec<u32>> {
        Ok((parts.next()?.chunks_exact(4))
            .map(|c| u32::from_le_bytes(c.try_into().expect("4 bytes")))
            .collect())
    };
    let (seq, folder, first, last, by_content) = (u32s()?, u32s()?, u32s()?, u32s()?, u32s()?);
    let letters = u32s()?;
    let flags = parts.next()?.to_vec();
    let mut u64s = || -> Result<Vec<u64>> {
        Ok((parts.next()?.chunks_exact(8))
            .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
            .collect())
    };
    let (key, entry, offsets, date) = (u64s()?, u64s()?, u64s()?, u64s()?);
    let cols = Columns {
        content,
        seq,
        folder,
        first,
        last,
        flags,
        letters,
        key,
        entry,
        date: date.into_iter().map(|d| d as i64).collect(),
        offsets,
    };
    let blob_start = START as u64 + n;
    let p = Places {
        seqs: head.seqs,
        folders: head.folders,
        folder_ids: std::collections::HashMap::new(),
        keyword_files: head.keyword_files,
        splits: head.splits,
        cols,
        by_content,
        blob: Blob {
            file: Some((f, blob_start, size - blob_start)),
            mem: Vec::new(),
        },
        tips: Tips::from_raw(tips),
        damaged: Vec::new(),
        path: None,
        changed: false,
        grown: false,
    };
    check(&p, size - blob_start).map_err(bad)?;
    Ok(p)
}

/// Length-prefixed parts of the tables.
struct Parts<'a>(&'a [u8]);

impl<'a> Parts<'a> {
    fn next(&mut self) -> Result<&'a [u8]> {
        let bad = || Error::corrupt("search places", "cut short");
        let n = self.0.get(..8).ok_or_else(bad)?;
        let n = u64::from_le_bytes(n.try_into().expect("8 bytes"));
        let rest = &self.0[8..];
        if n > rest.len() as u64 {
            return Err(bad());
        }
        let (part, rest) = rest.split_at(n as usize);
        self.0 = rest;
        Ok(part)
    }
}

/// Whether every index of `p` is within its table.
fn check(p: &Places, blob_len: u64) -> std::result::Result<(), &'static str> {
    let c = &p.cols;
    if p.keyword_files.len() != p.folders.len() {
        return Err("keyword files");
    }
    if c.offsets.first() != Some(&0) || c.offsets.last() != Some(&blob_len) {
        return Err("entry offsets");
    }
    if c.offsets.windows(2).any(|w| w[0] > w[1]) {
        return Err("entry offsets out of order");
    }
    let n = c.content.len();
    let lens = [
        c.seq.len(),
        c.folder.len(),
        c.first.len(),
        c.last.len(),
        c.flags.len(),
        c.letters.len(),
        c.key.len(),
        c.entry.len(),
        c.date.len(),
        p.by_content.len(),
        c.offsets.len() - 1,
    ];
    if lens.iter().any(|&l| l != n) {
        return Err("column lengths");
    }
    for r in 0..c.content.len() {
        let Some(s) = p.seqs.get(c.seq[r] as usize) else {
            return Err("sequence");
        };
        if c.folder[r] as usize >= p.folders.len()
            || c.first[r] > c.last[r]
            || c.last[r] as usize >= s.snaps.len()
        {
            return Err("record");
        }
    }
    // The order itself is the checksum's to vouch for: checking it here cost a third of
    // a search.
    if p.by_content.iter().any(|&r| r as usize >= n) {
        return Err("content order");
    }
    for s in &p.seqs {
        if s.failures.iter().any(|f| f.0 as usize >= s.snaps.len()) {
            return Err("failures");
        }
    }
    Ok(())
}
