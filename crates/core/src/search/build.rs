//! `mailvault index`: the message contents of the repository's snapshots that no split
//! holds yet, read once each (by pack, as a restore reads), parsed and indexed into new
//! splits.
//!
//! Indexing is a command of its own: the backup's cost stays what it is for those who do
//! not search, a repository backed up before search existed is indexed the same way, a
//! killed run loses at most one split's worth of work (everything it finished is in the
//! repository), and any host that can read the repository may index it. `backup --index`
//! indexes what it adds as it reads it ([`super::inline`]) and runs this for the rest.

use super::merge::{merge_splits, MERGE_AT};
use super::places::{flag, Places};
use super::schema;
use super::split::{live_splits, private_dir, seal_split, SealedSplit, SplitHeader};
use crate::error::{Error, Result};
use crate::model::assemble::assemble_by;
use crate::model::reader::{read_by_packs, Blobs, SpanOptions};
use crate::repo::id::Id;
use crate::repo::Repository;
use crate::report::{Failure, Progress};
use serde::Serialize;
use std::collections::HashSet;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;

/// How an `index` run works.
#[derive(Clone, Debug)]
pub struct IndexOptions {
    /// A split is written whenever this many documents were gathered (and at the end).
    pub split_docs: usize,
    /// The indexer's memory budget (tantivy's writer, shared by its threads).
    pub memory: usize,
}

impl Default for IndexOptions {
    fn default() -> Self {
        IndexOptions {
            split_docs: 50_000,
            memory: 64 << 20,
        }
    }
}

/// What an `index` run did.
#[derive(Clone, Debug, Default, Serialize)]
pub struct IndexReport {
    /// Snapshots whose messages were looked at.
    pub snapshots: usize,
    /// Distinct message contents they hold.
    pub contents: u64,
    /// Of those, already in a split.
    pub already_indexed: u64,
    /// Indexed by this run, and their bytes.
    pub indexed: u64,
    pub bytes: u64,
    /// Of those, indexed by `backup --index` as it read them ([`super::inline`]).
    pub as_read: u64,
    /// Of those, messages whose text was cut at one of extraction's caps (docs/search.md,
    /// Limits): indexed, but not whole.
    pub truncated: u64,
    /// Splits written (ids), a merge's last.
    pub splits: Vec<String>,
    /// Splits merged into one (more than [`MERGE_AT`] were live).
    pub merged: u64,
    /// Messages that could not be read (not indexed: the next run tries them again), and
    /// trees that could not be read.
    pub failures: Vec<Failure>,
}

/// One message content to index.
struct Job {
    hash: Id,
    size: u64,
    content: Vec<Id>,
}

/// Indexes the contents of every snapshot that no split holds. `cache` is the directory
/// of the local copies of splits (see [`super::split`]).
pub fn index(
    repo: &Repository,
    cache: &Path,
    opts: &IndexOptions,
    progress: &dyn Progress,
) -> Result<IndexReport> {
    // As a restore: refused (to be run again) when a prune removed an index file since
    // the repository was opened, whose packs this run would otherwise fail to read.
    let _lock = repo.lock_for_reading("index")?;
    let splits = live_splits(repo, cache)?;
    let mut places = Places::open(repo, Some(cache), Some(&splits))?;
    let mut report = IndexReport {
        snapshots: places.live_snapshots(),
        failures: places.failures(),
        ..IndexReport::default()
    };
    let mut keep = HashSet::new();
    let mut jobs = Vec::new();
    for group in places.content_groups() {
        let Some(&r) = group.iter().find(|&&r| places.alive(r as usize)) else {
            continue;
        };
        let r = r as usize;
        keep.insert(*places.content(r));
        if places.flags(r) & flag::INDEXED == 0 {
            let e = places.entry(r)?;
            jobs.push(Job {
                hash: e.hash,
                size: e.size,
                content: e.content,
            });
        }
    }
    report.contents = keep.len() as u64;
    report.already_indexed = report.contents - jobs.len() as u64;
    // In index order: the reads of a batch then go through few packs.
    jobs.sort_unstable_by_key(|j| {
        j.content
            .first()
            .and_then(|id| repo.index().get(id))
            .map(|l| (l.pack, l.offset))
    });
    progress.add_total(jobs.len() as u64, jobs.iter().map(|j| j.size).sum());
    for batch in jobs.chunks(opts.split_docs.max(1)) {
        index_batch(repo, cache, opts, batch, progress, &mut report)?;
    }
    let mut live = live_splits(repo, cache)?;
    if live.len() > MERGE_AT {
        let id = merge_splits(repo, cache, &live, &keep)?;
        report.merged = live.len() as u64;
        report.splits.push(id.to_hex());
        live = live_splits(repo, cache)?;
    }
    // The next search finds the new contents marked.
    places.mark_indexed(&live)?;
    places.save();
    Ok(report)
}

/// One split being built in the cache (`.build-*`): its index, its writer and what it
/// was given. What `index` ([`index_batch`]) and `backup --index` ([`super::inline`])
/// share.
pub(super) struct SplitBuilder {
    dir: tempfile::TempDir,
    index: tantivy::Index,
    writer: tantivy::IndexWriter,
    fields: schema::Fields,
    docs: AtomicU64,
    bytes: AtomicU64,
    truncated: AtomicU64,
    /// The compact header of each content added: the split's header file.
    headers: Mutex<Vec<(Id, Vec<u8>)>>,
}

/// A split built and committed, to be stored ([`Built::store`]).
pub(super) struct Built {
    dir: tempfile::TempDir,
    index: tantivy::Index,
    docs: u64,
    bytes: u64,
    truncated: u64,
}

impl SplitBuilder {
    /// A new, empty index in a directory of its own under `cache`.
    pub(super) fn new(cache: &Path, opts: &IndexOptions) -> Result<SplitBuilder> {
        private_dir(cache)?;
        let dir = tempfile::Builder::new()
            .prefix(".build-")
            .tempdir_in(cache)
            .map_err(|e| Error::io(cache, e))?;
        let (schema, fields) = schema::schema();
        let index = tantivy::Index::create_in_dir(dir.path(), schema)
            .map_err(|e| Error::search("creating a split", e))?;
        schema::register(&index);
        let threads = rayon::current_num_threads().clamp(1, 4);
        let memory = opts.memory.max((threads * 16) << 20);
        let writer: tantivy::IndexWriter = index
            .writer_with_num_threads(threads, memory)
            .map_err(|e| Error::search("starting the indexer", e))?;
        // No merges while a split is built (see `commit`): `merge_splits` merges splits.
        writer.set_merge_policy(Box::new(tantivy::indexer::NoMergePolicy));
        Ok(SplitBuilder {
            dir,
            index,
            writer,
            fields,
            docs: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            truncated: AtomicU64::new(0),
            headers: Mutex::new(Vec::new()),
        })
    }

    /// Parses message `data` (content `hash`) and gives it to the indexer's threads; the
    /// documents given so far. Called from several threads at once.
    pub(super) fn add(&self, hash: &Id, data: &[u8]) -> Result<u64> {
        let compact = crate::mail::header::compact(data);
        (self.headers.lock().unwrap_or_else(|p| p.into_inner())).push((*hash, compact));
        let x = super::extract::extract(data);
        let doc = schema::document(&self.fields, hash, data.len() as u64, &x);
        self.writer
            .add_document(doc)
            .map_err(|e| Error::search("adding a document", e))?;
        if x.truncated {
            self.truncated.fetch_add(1, Relaxed);
        }
        self.bytes.fetch_add(data.len() as u64, Relaxed);
        Ok(self.docs.fetch_add(1, Relaxed) + 1)
    }

    pub(super) fn docs(&self) -> u64 {
        self.docs.load(Relaxed)
    }

    /// Waits for the indexer's threads and commits what they were given. A split keeps
    /// the segments its indexing threads made (one each, or more when one filled its
    /// memory): merging them into one cost 23% of an `index` run on the SpamAssassin
    /// corpus, and searching a split of two segments costs no more than one of one.
    /// `merge_splits` merges them with everything else.
    pub(super) fn commit(mut self) -> Result<Built> {
        let failed = |e| Error::search("committing a split", e);
        self.writer.commit().map_err(failed)?;
        self.writer.wait_merging_threads().map_err(failed)?;
        let headers = self.headers.into_inner().unwrap_or_else(|p| p.into_inner());
        super::split::write_header_file(self.dir.path(), headers)?;
        Ok(Built {
            dir: self.dir,
            index: self.index,
            docs: self.docs.into_inner(),
            bytes: self.bytes.into_inner(),
            truncated: self.truncated.into_inner(),
        })
    }
}

impl Built {
    /// Seals the split (none when it is empty), to be stored.
    pub(super) fn seal(self, repo: &Repository) -> Result<Option<Sealed>> {
        if self.docs == 0 {
            return Ok(None);
        }
        let header = SplitHeader {
            hostname: crate::hostname(),
            time: crate::now_unix(),
            docs: self.docs,
            ..SplitHeader::default()
        };
        Ok(Some(Sealed {
            split: seal_split(repo, &self.index, self.dir, header)?,
            docs: self.docs,
            bytes: self.bytes,
            truncated: self.truncated,
        }))
    }
}

/// A split sealed, not yet stored.
pub struct Sealed {
    split: SealedSplit,
    docs: u64,
    bytes: u64,
    truncated: u64,
}

impl Sealed {
    /// Stores the split and counts it in `report`.
    pub(super) fn store(
        self,
        repo: &Repository,
        cache: &Path,
        report: &mut IndexReport,
    ) -> Result<()> {
        let id = self.split.write(repo, cache)?;
        repo.store().flush()?;
        report.indexed += self.docs;
        report.bytes += self.bytes;
        report.truncated += self.truncated;
        report.splits.push(id.to_hex());
        Ok(())
    }
}

/// Indexes `batch` into one new split.
fn index_batch(
    repo: &Repository,
    cache: &Path,
    opts: &IndexOptions,
    batch: &[Job],
    progress: &dyn Progress,
    report: &mut IndexReport,
) -> Result<()> {
    let split = SplitBuilder::new(cache, opts)?;
    let failures = Mutex::new(Vec::new());
    let span = SpanOptions::for_store(repo.store(), 0);
    let t = std::time::Instant::now();
    read_by_packs(
        repo,
        batch,
        |j| &j.content,
        &span,
        |j, blobs: &dyn Blobs| {
            let added = assemble_by(repo, &j.content, j.size, Some(&j.hash), |id| {
                blobs.blob_unverified(id)
            })
            .and_then(|d| split.add(&j.hash, &d));
            if let Err(e) = added {
                (failures.lock().unwrap_or_else(|p| p.into_inner()))
                    .push(Failure::new(format!("message {}", j.hash.short()), e));
            }
            progress.advance(1, j.size);
        },
    );
    tracing::debug!(
        "index: {} documents added in {:?}",
        batch.len(),
        t.elapsed()
    );
    let built = split.commit()?;
    tracing::debug!("index: committed at {:?}", t.elapsed());
    report
        .failures
        .extend(failures.into_inner().unwrap_or_default());
    if let Some(sealed) = built.seal(repo)? {
        sealed.store(repo, cache, report)?;
    }
    tracing::debug!("index: split written at {:?}", t.elapsed());
    Ok(())
}
