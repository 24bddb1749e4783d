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
//! temporary; a killed run's are removed by the next after an hour). They are committed
//! and sealed before ([`Inline::seal`]), beside the writing of the snapshot's trees: on
//! SpamAssassin's corpus that work was 0.16 s after the snapshot, a fifth of the run.
//! A split is cut whenever [`IndexOptions::split_docs`] documents were gathered, so the
//! memory a split's writing needs stays bounded on a first backup of millions of
//! messages.

use super::build::{Built, IndexOptions, IndexReport, Sealed, SplitBuilder};
use super::split::SearchCache;
use crate::error::{Error, Result};
use crate::repo::id::Id;
use crate::repo::writer::content::NewContents;
use crate::repo::Repository;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Mutex, RwLock};

/// `backup --index`: the root of the local cache (none: `--no-cache`), under which the
/// splits are built ([`SearchCache`]), and how splits are cut.
#[derive(Clone, Debug)]
pub struct IndexAsRead {
    pub cache_root: Option<PathBuf>,
    pub opts: IndexOptions,
}

/// The contents a backup adds, indexed as they come (see the module's documentation).
pub struct Inline {
    cache: SearchCache,
    opts: IndexOptions,
    /// None once sealed ([`Inline::seal`]): what comes after is left to `index`.
    current: RwLock<Option<SplitBuilder>>,
    /// Splits gathered in full and committed, stored when the snapshot is saved.
    done: Mutex<Vec<Built>>,
    /// Set on the first error: what comes after is left to [`super::build::index`].
    stopped: AtomicBool,
}

impl Inline {
    pub fn new(repo: &Repository, how: &IndexAsRead) -> Result<Inline> {
        let cache = SearchCache::of(how.cache_root.as_deref(), repo)?;
        let first = SplitBuilder::new(cache.path(), &how.opts)?;
        Ok(Inline {
            current: RwLock::new(Some(first)),
            done: Mutex::new(Vec::new()),
            stopped: AtomicBool::new(false),
            cache,
            opts: how.opts.clone(),
        })
    }

    fn split_docs(&self) -> u64 {
        self.opts.split_docs.max(1) as u64
    }

    /// Stops indexing here (the rest is left to `index`), saying why in the log.
    fn stop(&self, e: &Error) {
        if !self.stopped.swap(true, Relaxed) {
            tracing::warn!("indexing during the backup stopped (`index` does the rest): {e}");
        }
    }

    /// Commits the current split and starts the next, unless another worker did.
    fn cut(&self) -> Result<()> {
        let full = {
            let mut current = self.current.write().unwrap_or_else(|p| p.into_inner());
            if current
                .as_ref()
                .is_none_or(|c| c.docs() < self.split_docs())
            {
                return Ok(());
            }
            let next = SplitBuilder::new(self.cache.path(), &self.opts)?;
            current.replace(next)
        };
        // Committed outside the lock: the backup's workers go on into the next split.
        if let Some(full) = full {
            let built = full.commit()?;
            (self.done.lock().unwrap_or_else(|p| p.into_inner())).push(built);
        }
        Ok(())
    }

    /// Once the backup has given every content it adds (before its snapshot is saved):
    /// commits what is gathered and seals it, for [`Inline::store`] once the snapshot is
    /// saved. Contents given after this are left to `index`.
    pub fn seal(&self, repo: &Repository) -> Result<Vec<Sealed>> {
        let t = std::time::Instant::now();
        let current = (self.current.write().unwrap_or_else(|p| p.into_inner())).take();
        let mut all = std::mem::take(&mut *self.done.lock().unwrap_or_else(|p| p.into_inner()));
        all.extend(current.map(SplitBuilder::commit).transpose()?);
        let sealed = all
            .into_iter()
            .filter_map(|b| b.seal(repo).transpose())
            .collect::<Result<Vec<Sealed>>>()?;
        tracing::debug!("index: committed and sealed in {:?}", t.elapsed());
        Ok(sealed)
    }

    /// After the snapshot is saved: stores the splits [`Inline::seal`] made; what was
    /// indexed.
    pub fn store(&self, repo: &Repository, sealed: Vec<Sealed>) -> Result<IndexReport> {
        let mut report = IndexReport::default();
        for split in sealed {
            split.store(repo, self.cache.path(), &mut report)?;
        }
        report.as_read = report.indexed;
        Ok(report)
    }
}

impl NewContents for Inline {
    fn add(&self, hash: &Id, data: &[u8]) {
        if self.stopped.load(Relaxed) {
            return;
        }
        let added = match &*self.current.read().unwrap_or_else(|p| p.into_inner()) {
            Some(split) => split.add(hash, data),
            None => return,
        };
        match added {
            Ok(docs) if docs >= self.split_docs() => {
                if let Err(e) = self.cut() {
                    self.stop(&e);
                }
            }
            Ok(_) => {}
            Err(e) => self.stop(&e),
        }
    }
}
