//! What a backup writes around its blobs: writer records, index files and snapshots, and the
//! packs an interrupted backup left behind, recovered.

use crate::error::{Error, Result};
use crate::repo::format::BlobKind;
use crate::repo::format::{Object, Version};
use crate::repo::id::Id;
use crate::repo::lock::{Found, LockKind, LockRecord, RepoLock};
use crate::repo::named::Named;
use crate::repo::pack::{IndexedPack, PackEntry, PackList};
use crate::repo::snapshot::Snapshot;
use crate::repo::Repository;
use crate::repo::{file_id, format, index, pack};
use crate::store::put_content_named;
use crate::store::Store;

impl Repository {
    /// Seals and writes a snapshot; returns its id.
    pub fn save_snapshot(&self, snap: &Snapshot) -> Result<Id> {
        let mut snap = snap.clone();
        snap.version = self.version.number();
        let json =
            serde_json::to_vec(&snap).map_err(|e| Error::corrupt("snapshot", e.to_string()))?;
        let (id, sealed) = self.seal_named(Named::Snapshot, &json);
        // The index before the snapshot that needs it, and the snapshot before success.
        self.store.flush()?;
        self.store.put(&Snapshot::path(&id), &sealed)?;
        self.store.flush()?;
        Ok(id)
    }

    /// Seals and writes a snapshot, counting the snapshot file itself in its summary's
    /// `bytes_added` (the JSON length is fixed before sealing; sealing adds a constant,
    /// after the padding of a padded repository).
    pub fn save_snapshot_counted(&self, snap: &mut Snapshot) -> Result<Id> {
        let base = serde_json::to_vec(&*snap).map(|v| v.len()).unwrap_or(0);
        let stored = match self.version == Version::V2 && self.config.pad {
            true => format::padme(base + 1),
            false => base,
        };
        snap.summary.bytes_added += (stored + crate::repo::crypto::SEAL_OVERHEAD) as u64;
        self.save_snapshot(snap)
    }

    /// Writes one index file for the given packs; returns its id and size.
    pub(crate) fn write_index(&self, packs: &[IndexedPack]) -> Result<(Id, u64)> {
        let (id, sealed) = self.seal_named(Named::Index, &index::encode(packs, self.version)?);
        // The packs before the index that lists them.
        self.store.flush()?;
        put_content_named(self.store.as_ref(), &format!("index/{id}"), &sealed)?;
        Ok((id, sealed.len() as u64))
    }

    /// Adds packs written by this process to the in-memory index.
    pub fn add_packs(&mut self, packs: &[IndexedPack]) {
        for p in packs {
            self.index.add_pack(p.id, p.version, &p.entries);
        }
    }

    /// Adds what a blob saver wrote to the in-memory index: the packs its
    /// [`finish`](crate::repo::writer::BlobSaver::finish) returned, and those of the index
    /// files it wrote during the run, read back
    /// ([`index_files_written`](crate::repo::writer::BlobSaver::index_files_written)).
    pub fn add_written(&mut self, packs: &[IndexedPack], index_files: &[Id]) -> Result<()> {
        for id in index_files {
            let (_, listed) = self.read_index_file(&format!("index/{id}"))?;
            self.add_packs(&listed);
        }
        self.add_packs(packs);
        Ok(())
    }

    /// Seals a blob's stored form (compressed or raw) for its pack: format 2 binds its
    /// kind and id, and pads it when the repository asks for padding.
    pub(crate) fn seal_blob(
        &self,
        kind: BlobKind,
        id: &Id,
        stored: std::borrow::Cow<[u8]>,
    ) -> Vec<u8> {
        match (self.version, self.config.pad) {
            (Version::V2, true) => {
                let padded = format::pad(stored.into_owned());
                self.seal_object(Object::Blob(kind, id), &padded)
            }
            _ => self.seal_object(Object::Blob(kind, id), &stored),
        }
    }

    /// Starts a backup. Takes a shared lock (`locks/`, see `crate::repo::lock`) before any pack
    /// is written, so that a prune waits for it and, if it is killed, the next backup
    /// knows there may be packs no index lists; when such a stale record of an earlier
    /// writer is there (a lock, or an older mailvault's `writers/` record), looks for those
    /// packs (listing every pack, which a repository of thousands of packs should not pay
    /// on every run) and returns them for this run's index. When a prune ran between
    /// opening and locking, the index is read again. Pass the mark to
    /// [`Self::end_backup`] once the snapshot is saved.
    pub fn begin_backup(&mut self) -> Result<(PackList, WriterMark)> {
        self.refuse_if_migrating()?;
        let lock = self.lock(LockKind::Shared, "backup")?;
        if !self.index_is_current()? {
            self.reload_index()?;
        }
        // Which writers are gone, decided before looking at the packs: every pack a gone
        // writer left is then seen below and listed by this run's index. The locks seen
        // when the lock was taken (files that are not records were reported then). The
        // `writers/` records of older mailvaults' backups are not listed (a request, for
        // every backup): packs a killed older backup left are for `prune` to remove.
        // A migration that began since this repository was opened holds an exclusive
        // lock, so taking this one waited for it or failed.
        let mut stale = Vec::new();
        for f in lock.found() {
            match &f.found {
                Found::Unreadable(_) => {}
                // Released by its holder (an append-only host's release not yet counted):
                // that backup ended well, and its release ends it in time.
                _ if f.releasing => {}
                _ if f.is_stale(self.lock_options.stale) => stale.push((
                    f.path.clone(),
                    match &f.found {
                        Found::Lock(r) => Some(r.clone()),
                        _ => None,
                    },
                )),
                _ => {}
            }
        }
        let recovered = if stale.is_empty() {
            Vec::new()
        } else {
            self.recover_unindexed_packs()?
        };
        Ok((recovered, WriterMark { lock, stale }))
    }

    /// Ends a backup whose snapshot is saved: removes the records of writers that were
    /// gone when it began (their packs are in this run's index), then releases its lock.
    pub fn end_backup(&self, mark: WriterMark) -> Result<()> {
        // An append-only host ends them by records of its own (a `writers/` record of
        // an older mailvault stays for the maintenance host's prune).
        let locks = self.lock_store();
        for (p, rec) in &mark.stale {
            match rec {
                Some(r) => locks.end(p, r)?,
                None if self.append_only() => {}
                None => self.store.delete(p)?,
            }
        }
        drop(mark.lock);
        Ok(())
    }

    /// Reads and opens the writer record at `path` (`writers/<name>`).
    pub(crate) fn open_writer_record(&self, path: &str) -> Result<Vec<u8>> {
        let name = path.rsplit('/').next().unwrap_or(path);
        self.open_object(Object::Writer(name), self.store.get(path)?, path)
    }

    /// Packs in `data/` that no index file lists: left by a killed backup. Each is read
    /// whole and verified (its name against the BLAKE3 of its bytes, every blob against
    /// its id) before its blobs are reused: an entry in the index shadows any later
    /// location of the same blob, so a bogus one must never get there. A pack that fails
    /// is reported and left out. Returns the packs for the next index file.
    pub fn recover_unindexed_packs(&mut self) -> Result<PackList> {
        use rayon::prelude::*;
        let candidates: Vec<(Id, String)> = self
            .store
            .list("data/")?
            .into_iter()
            .filter_map(|f| Some((file_id(&f.path).ok()?, f.path)))
            .filter(|(id, _)| !self.index.has_pack(id))
            .collect();
        // Only packs of the repository's own format: a backup writes nothing else.
        let own = [self.version];
        let found: PackList = candidates
            .par_iter()
            .filter_map(|(id, path)| match self.verify_pack(path, &own) {
                Ok(v) if v.name_matches && v.bad.is_empty() => Some(IndexedPack {
                    id: *id,
                    version: v.version,
                    entries: v.good,
                }),
                Ok(v) => {
                    let why = match v.bad.first() {
                        Some((_, e)) if v.name_matches => e.to_string(),
                        _ => "content does not match its name".to_string(),
                    };
                    tracing::warn!("not reusing unindexed pack {path}: {why}");
                    None
                }
                Err(e) => {
                    tracing::warn!("not reusing unindexed pack {path}: {e}");
                    None
                }
            })
            .collect();
        self.add_packs(&found);
        Ok(found)
    }

    /// Reads the pack at `path` whole and verifies it: its bytes against its name, its
    /// header (of one of the formats `allowed`), and every blob the header lists (opened,
    /// decompressed and hashed against its id). An error only when the header cannot be
    /// read.
    pub(crate) fn verify_pack(&self, path: &str, allowed: &[Version]) -> Result<PackVerdict> {
        let bytes = self.store.get(path)?;
        let name_matches = file_id(path).is_ok_and(|id| id == Id::of_file(&bytes));
        let (version, entries) = pack::header_of(&bytes, &self.key, path, allowed)?;
        let mut v = PackVerdict {
            name_matches,
            version,
            good: Vec::new(),
            bad: Vec::new(),
            damaged_bytes: None,
        };
        for e in entries {
            match self.decode_entry(&e, version, &bytes, path) {
                Ok(_) => v.good.push(e),
                Err(err) => v.bad.push((e, err)),
            }
        }
        if !name_matches {
            v.damaged_bytes = Some(bytes);
        }
        Ok(v)
    }
}

/// What [`Repository::verify_pack`] found in one pack.
pub(crate) struct PackVerdict {
    /// The BLAKE3 of its bytes is its name.
    pub name_matches: bool,
    /// The format its header says it is in.
    pub version: Version,
    /// Header entries whose blobs verified.
    pub good: Vec<PackEntry>,
    /// Header entries whose blobs did not, with why.
    pub bad: Vec<(PackEntry, Error)>,
    /// The pack's bytes, when they do not match its name (for salvaging its good blobs).
    pub damaged_bytes: Option<Vec<u8>>,
}

/// A backup's own record and the stale ones it takes over; from
/// [`Repository::begin_backup`], for [`Repository::end_backup`].
#[derive(Debug)]
pub struct WriterMark {
    lock: RepoLock,
    stale: Vec<(String, Option<LockRecord>)>,
}

impl WriterMark {
    /// A handle on this backup's lock, to check that it is still good before the
    /// snapshot is saved (see [`RepoLock::verify`]).
    pub fn watch(&self) -> crate::repo::lock::LockWatch {
        self.lock.watch()
    }
}
