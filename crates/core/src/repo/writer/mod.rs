//! The write side: the blob saver (blobs compressed, sealed and packed, packs uploaded by
//! writer threads) and (`records`) what a backup writes around it: writer records, the index
//! files and snapshots, and the packs an interrupted backup left behind, recovered.

pub mod content;
pub mod records;
mod saved;

use crate::error::{Error, Result};
use crate::repo::compress::{self, Compression};
use crate::repo::format::BlobKind;
use crate::repo::id::Id;
use crate::repo::index::index_chunks_of;
use crate::repo::pack::{FinishedPack, IndexedPack, PackBuilder, PackList};
use crate::repo::Repository;
use crate::repo::{lock, pack};
use crate::store::Backend;
use crate::store::Store;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Counters of what a [`BlobSaver`] added.
#[derive(Default, Debug)]
pub struct SaveStats {
    /// Blobs that were new to the repository, and their raw and stored bytes.
    pub data_blobs: AtomicU64,
    pub data_raw: AtomicU64,
    pub data_stored: AtomicU64,
    pub tree_blobs: AtomicU64,
    pub tree_stored: AtomicU64,
    /// Bytes of pack and index files written.
    pub bytes_written: AtomicU64,
    pub packs_written: AtomicU64,
}

/// Data packer slots; [`data_packers`] says how many are in use.
const DATA_PACKERS: usize = 64;

/// The data packers in use: one per worker thread of the current pool (threads beyond
/// share), so the blobs of the account a worker is on sit together and restoring one
/// account reads few ranges; at most one a core (at least 4). A packer holds up to 1 MiB of its pack and the pack's entries (48 bytes a
/// blob, 3 MB for a 4 MiB pack of small messages): a backup reading with 32 threads to keep
/// the disk busy held 218 MB with one a thread, 100 MB of it in packers, for no speed;
/// sealing and packing are CPU work.
fn data_packers() -> usize {
    rayon::current_num_threads().clamp(1, crate::repo::cores().clamp(4, DATA_PACKERS))
}

/// Saves blobs during a backup: dedup against the index and this run, compress, seal,
/// pack, write packs as they fill. Shared by all worker threads.
pub struct BlobSaver<'r> {
    repo: &'r Repository,
    compression: Compression,
    /// The blobs this run saved (packed, maybe not yet written or indexed).
    saved: saved::SavedIds,
    /// `DATA_PACKERS` data packers, then the one tree packer.
    pub(in crate::repo) packers: Vec<Mutex<PackBuilder>>,
    written: Mutex<PackList>,
    pub stats: SaveStats,
    /// Threads writing full packs to the store, started with the first.
    writers: Mutex<Option<PackWriters>>,
    /// The first pack write that failed, as it was said. Every later pack write and
    /// `finish` fail with it: other folders' entries may name blobs of that pack (they
    /// were deduplicated against it), so no index or snapshot may be written.
    failed: Mutex<Option<String>>,
    /// With [`Self::index_every`]: the entries of packs written after which an index file
    /// lists them, during the run; and the index files written so.
    index_batch: Option<usize>,
    index_files: Mutex<Vec<Id>>,
}

/// Threads that write finished packs to the store while the workers go on filling the
/// next ones: a pack's write (and on a local disk its fsync, tens of milliseconds on a
/// VM's disk; on S3 its upload) no longer stalls a worker. A network store gets four
/// writers, at most one pack each waiting in the queue; a local disk one writer and one
/// pack waiting (it writes a pack in far less time than the workers take to fill the
/// next). Packs are filled and wait in temporary files ([`PackBuilder::spilling`]): a
/// pack is in memory only while a writer stores it (a full backup of 1.5 million messages
/// once held ten packs of 8 MiB in memory, with two writers, two packs queued and four
/// spare buffers; then seven, as the workers filled theirs and waited for the queue).
struct PackWriters {
    tx: std::sync::mpsc::SyncSender<(FinishedPack, BlobKind)>,
    threads: Vec<std::thread::JoinHandle<()>>,
    done: Arc<WritersDone>,
}

/// What the pack writers did: the packs written and their bytes, or the first error.
#[derive(Default)]
struct WritersDone {
    packs: Mutex<Vec<(IndexedPack, u64)>>,
    error: Mutex<Option<Error>>,
}

impl PackWriters {
    fn start(store: Arc<dyn Backend>) -> PackWriters {
        let n = if crate::store::on_network(&*store) {
            4
        } else {
            1
        };
        let (tx, rx) = std::sync::mpsc::sync_channel::<(FinishedPack, BlobKind)>(n);
        let rx = Arc::new(Mutex::new(rx));
        let done = Arc::new(WritersDone::default());
        let threads = (0..n)
            .filter_map(|i| {
                let (rx, done, store) = (rx.clone(), done.clone(), store.clone());
                std::thread::Builder::new()
                    .name(format!("pack-writer-{i}"))
                    .spawn(move || loop {
                        let next = lock(&rx).recv();
                        let Ok((p, kind)) = next else { return };
                        if lock(&done.error).is_some() {
                            continue; // the backup fails anyway: drain the queue
                        }
                        match put_pack(&*store, p, kind) {
                            Ok(written) => lock(&done.packs).push(written),
                            Err(e) => {
                                lock(&done.error).get_or_insert(e);
                            }
                        }
                    })
                    .ok()
            })
            .collect();
        PackWriters { tx, threads, done }
    }

    /// Waits for every queued pack to be written.
    fn join(self) -> Arc<WritersDone> {
        drop(self.tx);
        for t in self.threads {
            let _ = t.join();
        }
        self.done
    }
}

/// Puts a finished pack; content-named, so one already there is the same bytes. Returns
/// its index entry and its length.
fn put_pack(store: &dyn Backend, p: FinishedPack, kind: BlobKind) -> Result<(IndexedPack, u64)> {
    match store.put_pack(&pack::pack_path(&p.id), &p.bytes()?, kind.into()) {
        Err(Error::AlreadyExists(_)) | Ok(()) => {}
        Err(e) => return Err(e),
    }
    let len = p.size();
    let indexed = IndexedPack {
        id: p.id,
        version: p.version,
        entries: p.entries,
    };
    Ok((indexed, len))
}

impl<'r> BlobSaver<'r> {
    pub fn new(repo: &'r Repository, compression: Compression) -> Self {
        BlobSaver {
            repo,
            compression,
            saved: saved::SavedIds::default(),
            packers: (0..=DATA_PACKERS)
                .map(|_| Mutex::new(PackBuilder::spilling()))
                .collect(),
            written: Mutex::new(Vec::new()),
            stats: SaveStats::default(),
            writers: Mutex::new(None),
            failed: Mutex::new(None),
            index_batch: None,
            index_files: Mutex::new(Vec::new()),
        }
    }

    /// Writes index files during the run each time the packs written and not yet listed
    /// hold `entries` blob entries (a backup's:
    /// [`INDEX_FILE_ENTRIES`](crate::repo::index::INDEX_FILE_ENTRIES)); without it, one
    /// index file at [`finish`](Self::finish) lists everything. A run killed later leaves
    /// those packs indexed and unreferenced, which a prune removes.
    pub fn index_every(mut self, entries: usize) -> Self {
        self.index_batch = Some(entries.max(1));
        self
    }

    /// The index files written during the run ([`index_every`](Self::index_every)): their
    /// packs are not among those [`finish`](Self::finish) returns
    /// ([`Repository::add_written`] reads them back).
    pub fn index_files_written(&self) -> Vec<Id> {
        lock(&self.index_files).clone()
    }

    pub fn repo(&self) -> &Repository {
        self.repo
    }

    /// Adds packs recovered from a killed run to the next index file.
    pub fn adopt(&self, packs: PackList) {
        lock(&self.written).extend(packs);
    }

    /// Saves `data` as a blob unless the repository already has it; returns its id.
    pub fn save(&self, kind: BlobKind, data: &[u8]) -> Result<Id> {
        let id = self.repo.key.blob_id(data);
        self.save_with_id(kind, id, data)?;
        Ok(id)
    }

    /// As [`Self::save`] with the id already computed. Returns whether it was new.
    pub fn save_with_id(&self, kind: BlobKind, id: Id, data: &[u8]) -> Result<bool> {
        let dict = match kind {
            BlobKind::Data => self.repo.dicts.encoder(),
            BlobKind::Tree => None,
        };
        self.save_compressed(kind, id, data, |d| {
            compress::compress(d, self.compression, dict)
        })
    }

    /// Saves a chunk of a large file ([`crate::source::file`]) as a data blob, compressed
    /// by [`compress::compress_file_chunk`]; returns its id.
    pub fn save_file_chunk(&self, data: &[u8]) -> Result<Id> {
        let id = self.repo.key.blob_id(data);
        self.save_compressed(BlobKind::Data, id, data, |d| {
            compress::compress_file_chunk(d, self.compression)
        })?;
        Ok(id)
    }

    fn save_compressed(
        &self,
        kind: BlobKind,
        id: Id,
        data: &[u8],
        compress: impl FnOnce(&[u8]) -> Option<(compress::Codec, Vec<u8>)>,
    ) -> Result<bool> {
        if self.repo.index.contains(&id) || !self.saved.insert(id) {
            return Ok(false);
        }
        let (codec, packed) = match compress(data) {
            Some((codec, packed)) => (codec, std::borrow::Cow::Owned(packed)),
            None => (compress::Codec::Raw, std::borrow::Cow::Borrowed(data)),
        };
        let sealed = self.repo.seal_blob(kind, &id, packed);
        match kind {
            BlobKind::Data => {
                self.stats.data_blobs.fetch_add(1, Ordering::Relaxed);
                self.stats
                    .data_raw
                    .fetch_add(data.len() as u64, Ordering::Relaxed);
                self.stats
                    .data_stored
                    .fetch_add(sealed.len() as u64, Ordering::Relaxed);
            }
            BlobKind::Tree => {
                self.stats.tree_blobs.fetch_add(1, Ordering::Relaxed);
                self.stats
                    .tree_stored
                    .fetch_add(sealed.len() as u64, Ordering::Relaxed);
            }
        }
        let slot = match kind {
            BlobKind::Data => rayon::current_thread_index().unwrap_or(0) % data_packers(),
            BlobKind::Tree => DATA_PACKERS,
        };
        let full = {
            let mut p = lock(&self.packers[slot]);
            p.add(id, kind, codec, data.len(), &sealed);
            if p.len() >= self.pack_target(kind) {
                Some(std::mem::replace(&mut *p, PackBuilder::spilling()))
            } else {
                None
            }
        };
        if let Some(p) = full {
            let p = p.finish(&self.repo.key, self.repo.version);
            self.write_pack(p.map_err(|e| self.pack_failed(e))?, kind)?;
        }
        Ok(true)
    }

    /// Size at which a pack is written. With many data packers ([`data_packers`]) each
    /// fills smaller packs (at least 4 MiB): memory for data packs being filled stays near
    /// the configured pack size, whatever the number of packers (twice it, as before, was
    /// 20 of a 500,000-message full backup's 175 MB peak, for no speed).
    fn pack_target(&self, kind: BlobKind) -> usize {
        let size = self.repo.config.pack_size as usize;
        match kind {
            BlobKind::Tree => size,
            BlobKind::Data => (size / data_packers()).clamp((4 << 20).min(size), size),
        }
    }

    /// Hands a full pack to the writer threads (written synchronously if none could be
    /// started); an earlier write's error is returned here, so the backup stops soon.
    pub(in crate::repo) fn write_pack(&self, p: FinishedPack, kind: BlobKind) -> Result<()> {
        self.check_failed()?;
        let tx = {
            let mut w = lock(&self.writers);
            let w = w.get_or_insert_with(|| PackWriters::start(self.repo.store.clone()));
            if let Some(e) = lock(&w.done.error).take() {
                return Err(self.pack_failed(e));
            }
            (!w.threads.is_empty()).then(|| w.tx.clone())
        };
        let p = match tx {
            Some(tx) => match tx.send((p, kind)) {
                Ok(()) => return self.collect_written(),
                Err(std::sync::mpsc::SendError((p, _))) => p,
            },
            None => p,
        };
        let (indexed, len) =
            put_pack(self.repo.store(), p, kind).map_err(|e| self.pack_failed(e))?;
        self.record(indexed, len);
        self.index_batch_if_full()
    }

    /// With [`Self::index_every`]: records the packs the writer threads have written so
    /// far, and lists them in an index file when they are enough.
    fn collect_written(&self) -> Result<()> {
        if self.index_batch.is_none() {
            return Ok(());
        }
        let done =
            (lock(&self.writers).as_ref()).map(|w| std::mem::take(&mut *lock(&w.done.packs)));
        for (p, len) in done.unwrap_or_default() {
            self.record(p, len);
        }
        self.index_batch_if_full()
    }

    /// With [`Self::index_every`]: index files for the packs recorded, once they hold the
    /// batch's entries. Every one of them is written (its writer thread returned).
    pub(in crate::repo) fn index_batch_if_full(&self) -> Result<()> {
        let Some(batch) = self.index_batch else {
            return Ok(());
        };
        let packs = {
            let mut w = lock(&self.written);
            if w.iter().map(|p| p.entries.len()).sum::<usize>() < batch {
                return Ok(());
            }
            std::mem::take(&mut *w)
        };
        for chunk in index_chunks_of(&packs, batch) {
            let (id, size) = self.repo.write_index(chunk)?;
            self.stats.bytes_written.fetch_add(size, Ordering::Relaxed);
            lock(&self.index_files).push(id);
        }
        Ok(())
    }

    /// Waits for the packs handed to the writer threads and records them; their first
    /// error, or an earlier one, if any.
    pub(in crate::repo) fn join_writers(&self) -> Result<()> {
        if let Some(w) = lock(&self.writers).take() {
            let done = w.join();
            for (p, len) in std::mem::take(&mut *lock(&done.packs)) {
                self.record(p, len);
            }
            let error = lock(&done.error).take();
            if let Some(e) = error {
                return Err(self.pack_failed(e));
            }
        }
        self.check_failed()
    }

    /// A pack written: counted, and listed for the index.
    fn record(&self, p: IndexedPack, len: u64) {
        self.stats.bytes_written.fetch_add(len, Ordering::Relaxed);
        self.stats.packs_written.fetch_add(1, Ordering::Relaxed);
        lock(&self.written).push(p);
    }

    /// Remembers the first failed pack write (see `failed`); returns its error.
    fn pack_failed(&self, e: Error) -> Error {
        lock(&self.failed).get_or_insert_with(|| e.to_string());
        e
    }

    /// The failure of an earlier pack write, if there was one.
    fn check_failed(&self) -> Result<()> {
        match &*lock(&self.failed) {
            Some(first) => Err(Error::Store {
                what: "data/".into(),
                source: std::io::Error::other(format!(
                    "an earlier pack write failed, so this run saves nothing more: {first}"
                )),
            }),
            None => Ok(()),
        }
    }

    /// Writes the partly filled packs and one index file for everything written (but the
    /// packs an index file of [`Self::index_every`] already lists); returns the packs, for
    /// [`Repository::add_written`].
    pub fn finish(&self) -> Result<PackList> {
        // The data packers' partly filled packs are joined into as few packs as fit the
        // pack size: one object instead of one per worker (a small incremental backup
        // writes one data pack, not four).
        let (key, version) = (&self.repo.key, self.repo.version);
        let mut data = PackBuilder::spilling();
        for packer in &self.packers[..DATA_PACKERS] {
            let p = std::mem::take(&mut *lock(packer));
            if !data.is_empty() && data.len() + p.len() > self.repo.config.pack_size as usize {
                let full = std::mem::replace(&mut data, PackBuilder::spilling());
                self.write_pack(full.finish(key, version)?, BlobKind::Data)?;
            }
            data.absorb(p)?;
        }
        let trees = std::mem::take(&mut *lock(&self.packers[DATA_PACKERS]));
        for (p, kind) in [(data, BlobKind::Data), (trees, BlobKind::Tree)] {
            if !p.is_empty() {
                self.write_pack(p.finish(key, version)?, kind)?;
            }
        }
        // Every pack is in the store before the index that names them.
        self.join_writers()?;
        let packs = std::mem::take(&mut *lock(&self.written));
        let batch = self.index_batch.unwrap_or(usize::MAX);
        for chunk in index_chunks_of(&packs, batch)
            .into_iter()
            .filter(|c| !c.is_empty())
        {
            let (_, size) = self.repo.write_index(chunk)?;
            self.stats.bytes_written.fetch_add(size, Ordering::Relaxed);
        }
        Ok(packs)
    }
}

impl Drop for BlobSaver<'_> {
    /// A saver dropped without `finish` (a failed run) still waits for the packs being
    /// written: none is left half-written by a thread outliving it (a later run adopts
    /// packs no index names).
    fn drop(&mut self) {
        if let Some(w) = lock(&self.writers).take() {
            w.join();
        }
    }
}
