//! `backup --index`: the message contents a backup adds to the repository, indexed as the
//! backup reads them ([`Inline`], the backup's [`NewContents`]).
//!
//! `index` reads its messages back from the packs and parses them after the backup; on a
//! two-core machine that doubled a full backup's time (SpamAssassin corpus: backup 0.45 s,
//! then `index` 0.9 s). Here the bytes the backup holds anyway are parsed on its workers
//! and tokenized on tantivy's threads while the backup's own work waits on the disk, so
//! nothing is read twice, decrypted or decompressed again. What it leaves (a content
//! made only of blobs the repository had, a message that failed) is indexed afterwards by
//! [`super::build::index`], which `backup --index` runs next and which finds everything
//! indexed here marked by the splits' contents.
//!
//! The splits are written after the snapshot is saved, and only then: a split never
//! holds a content that no snapshot does (`check` would call it a stray), so a backup
//! killed or failed leaves nothing of its index (the build directories in the cache are
//! temporary; a killed run's are removed by the next after an hour).
//! A split is cut whenever [`IndexOptions::split_docs`] documents were gathered, so the
//! memory a split's writing needs stays bounded on a first backup of millions of
//! messages.

use super::build::{commit, new_split, IndexOptions, IndexReport};
use super::split::{private_dir, write_split, SearchCache, SplitHeader};
use super::{extract, schema};
use crate::error::{Error, Result};
use crate::repo::id::Id;
use crate::repo::writer::content::NewContents;
use crate::repo::Repository;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Mutex, RwLock};

/// `backup --index`: the root of the local cache (none: `--no-cache`), under which the
/// splits are built ([`SearchCache`]), and how splits are cut.
#[derive(Clone, Debug)]
pub struct IndexAsRead {
    pub cache_root: Option<PathBuf>,
    pub opts: IndexOptions,
}

/// One split being built: its directory, index and writer.
struct Building {
    dir: tempfile::TempDir,
    index: tantivy::Index,
    writer: Option<tantivy::IndexWriter>,
    docs: AtomicU64,
}

/// The contents a backup adds, indexed as they come (see the module's documentation).
pub struct Inline {
    cache: SearchCache,
    opts: IndexOptions,
    fields: schema::Fields,
    current: RwLock<Option<Building>>,
    /// Splits gathered in full and committed, written when the snapshot is saved.
    done: Mutex<Vec<Building>>,
    /// Set on the first error: what comes after is left to [`super::build::index`].
    stopped: AtomicBool,
    bytes: AtomicU64,
    truncated: AtomicU64,
}

impl Inline {
    pub fn new(repo: &Repository, how: &IndexAsRead) -> Result<Inline> {
        let cache = SearchCache::of(how.cache_root.as_deref(), repo)?;
        private_dir(cache.path())?;
        let first = Self::building(cache.path(), &how.opts)?;
        Ok(Inline {
            fields: schema::schema().1,
            current: RwLock::new(Some(first)),
            done: Mutex::new(Vec::new()),
            stopped: AtomicBool::new(false),
            bytes: AtomicU64::new(0),
            truncated: AtomicU64::new(0),
            cache,
            opts: how.opts.clone(),
        })
    }

    fn building(cache: &Path, opts: &IndexOptions) -> Result<Building> {
        let dir = tempfile::Builder::new()
            .prefix(".build-")
            .tempdir_in(cache)
            .map_err(|e| Error::io(cache, e))?;
        let (index, writer) = new_split(dir.path(), opts)?;
        Ok(Building {
            dir,
            index,
            writer: Some(writer),
            docs: AtomicU64::new(0),
        })
    }

    /// Stops indexing here (the rest is left to `index`), saying why in the log.
    fn stop(&self, e: &Error) {
        if !self.stopped.swap(true, Relaxed) {
            tracing::warn!("indexing during the backup stopped (`index` does the rest): {e}");
        }
    }

    /// Adds one document; whether the split is full.
    fn add_document(&self, doc: tantivy::TantivyDocument) -> Result<bool> {
        let current = self.current.read().unwrap_or_else(|p| p.into_inner());
        let Some(b) = current.as_ref() else {
            return Ok(false);
        };
        let Some(w) = b.writer.as_ref() else {
            return Ok(false);
        };
        w.add_document(doc)
            .map_err(|e| Error::search("adding a document", e))?;
        Ok(b.docs.fetch_add(1, Relaxed) + 1 >= self.opts.split_docs.max(1) as u64)
    }

    /// Commits the current split and starts the next, unless another worker did.
    fn cut(&self) -> Result<()> {
        let mut current = self.current.write().unwrap_or_else(|p| p.into_inner());
        let full = current
            .as_ref()
            .is_some_and(|b| b.docs.load(Relaxed) >= self.opts.split_docs.max(1) as u64);
        if !full {
            return Ok(());
        }
        let next = Self::building(self.cache.path(), &self.opts)?;
        if let Some(mut b) = current.replace(next) {
            if let Some(w) = b.writer.take() {
                commit(w)?;
            }
            self.done.lock().unwrap_or_else(|p| p.into_inner()).push(b);
        }
        Ok(())
    }

    /// After the snapshot is saved: commits what is gathered and writes it to the
    /// repository as splits; what was indexed.
    pub fn finish(self, repo: &Repository) -> Result<IndexReport> {
        let t = std::time::Instant::now();
        let mut all = self.done.into_inner().unwrap_or_else(|p| p.into_inner());
        let current = self.current.into_inner().unwrap_or_else(|p| p.into_inner());
        all.extend(current);
        let mut report = IndexReport::default();
        for mut b in all {
            if let Some(w) = b.writer.take() {
                commit(w)?;
            }
            let docs = b.docs.into_inner();
            if docs == 0 {
                continue;
            }
            let header = SplitHeader {
                hostname: crate::hostname(),
                time: crate::now_unix(),
                docs,
                ..SplitHeader::default()
            };
            let id = write_split(repo, self.cache.path(), &b.index, b.dir, header)?;
            report.indexed += docs;
            report.splits.push(id.to_hex());
        }
        if !report.splits.is_empty() {
            repo.store().flush()?;
        }
        report.as_read = report.indexed;
        report.bytes = self.bytes.into_inner();
        report.truncated = self.truncated.into_inner();
        tracing::debug!(
            "index: {} indexed during the backup, written in {:?}",
            report.indexed,
            t.elapsed()
        );
        Ok(report)
    }
}

impl NewContents for Inline {
    fn add(&self, hash: &Id, data: &[u8]) {
        if self.stopped.load(Relaxed) {
            return;
        }
        let x = extract::extract(data);
        let doc = schema::document(&self.fields, hash, data.len() as u64, &x);
        match self.add_document(doc) {
            Ok(full) => {
                self.bytes.fetch_add(data.len() as u64, Relaxed);
                if x.truncated {
                    self.truncated.fetch_add(1, Relaxed);
                }
                if full {
                    if let Err(e) = self.cut() {
                        self.stop(&e);
                    }
                }
            }
            Err(e) => self.stop(&e),
        }
    }
}
