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
use super::split::{live_splits, private_dir, write_split, SplitHeader};
use crate::error::{Error, Result};
use crate::model::assemble::assemble_by;
use crate::model::reader::{read_by_packs, Blobs, SpanOptions};
use crate::repo::id::Id;
use crate::repo::Repository;
use crate::report::{Failure, Progress};
use serde::Serialize;
use std::collections::HashSet;
use std::path::Path;
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

/// Commits what `writer` was given. A split keeps the segments its indexing threads
/// made (one each, or more when one filled its memory): merging them into one cost 23%
/// of an `index` run on the SpamAssassin corpus, and searching a split of two segments
/// costs no more than one of one. `merge_splits` merges them with everything else.
pub(super) fn commit(mut writer: tantivy::IndexWriter) -> Result<()> {
    writer
        .commit()
        .map_err(|e| Error::search("committing a split", e))?;
    writer
        .wait_merging_threads()
        .map_err(|e| Error::search("committing a split", e))
}

/// A new, empty index in `dir`, and its writer.
pub(super) fn new_split(
    dir: &Path,
    opts: &IndexOptions,
) -> Result<(tantivy::Index, tantivy::IndexWriter)> {
    let (schema, _) = schema::schema();
    let index = tantivy::Index::create_in_dir(dir, schema)
        .map_err(|e| Error::search("creating a split", e))?;
    schema::register(&index);
    let threads = rayon::current_num_threads().clamp(1, 4);
    let memory = opts.memory.max((threads * 16) << 20);
    let writer: tantivy::IndexWriter = index
        .writer_with_num_threads(threads, memory)
        .map_err(|e| Error::search("starting the indexer", e))?;
    // No merges while a split is built (see `commit`): `merge_splits` merges splits.
    writer.set_merge_policy(Box::new(tantivy::indexer::NoMergePolicy));
    Ok((index, writer))
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
    private_dir(cache)?;
    let dir = tempfile::Builder::new()
        .prefix(".build-")
        .tempdir_in(cache)
        .map_err(|e| Error::io(cache, e))?;
    let (index, writer) = new_split(dir.path(), opts)?;
    let fields = schema::schema().1;
    let failures = Mutex::new(Vec::new());
    let added = std::sync::atomic::AtomicU64::new(0);
    let bytes = std::sync::atomic::AtomicU64::new(0);
    let truncated = std::sync::atomic::AtomicU64::new(0);
    let span = SpanOptions::for_store(repo.store(), 0);
    let t = std::time::Instant::now();
    read_by_packs(
        repo,
        batch,
        |j| &j.content,
        &span,
        |j, blobs: &dyn Blobs| {
            let data = assemble_by(repo, &j.content, j.size, Some(&j.hash), |id| {
                blobs.blob_unverified(id)
            });
            let doc = data.map(|d| {
                let x = super::extract::extract(&d);
                if x.truncated {
                    truncated.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
                schema::document(&fields, &j.hash, j.size, &x)
            });
            match doc.and_then(|doc| {
                writer
                    .add_document(doc)
                    .map_err(|e| Error::search("adding a document", e))
            }) {
                Ok(_) => {
                    added.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    bytes.fetch_add(j.size, std::sync::atomic::Ordering::Relaxed);
                }
                Err(e) => failures
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push(Failure::new(format!("message {}", j.hash.short()), e)),
            }
            progress.advance(1, j.size);
        },
    );
    tracing::debug!(
        "index: {} documents added in {:?}",
        batch.len(),
        t.elapsed()
    );
    commit(writer)?;
    tracing::debug!("index: committed at {:?}", t.elapsed());
    let docs = added.into_inner();
    report
        .failures
        .extend(failures.into_inner().unwrap_or_default());
    if docs == 0 {
        return Ok(());
    }
    let header = SplitHeader {
        hostname: crate::hostname(),
        time: crate::now_unix(),
        docs,
        ..SplitHeader::default()
    };
    let id = write_split(repo, cache, &index, dir, header)?;
    repo.store().flush()?;
    tracing::debug!("index: split written at {:?}", t.elapsed());
    report.indexed += docs;
    report.bytes += bytes.into_inner();
    report.truncated += truncated.into_inner();
    report.splits.push(id.to_hex());
    Ok(())
}
