//! The repository: opening it with a password, its config, index, blobs and snapshots.
//!
//! Layout (all paths relative to the repository root):
//! ```text
//! config                 sealed JSON: format version, id, compression, chunker, padding
//! keys/<id>              JSON key file: the master key wrapped by Argon2id(password)
//! data/<xx>/<id>         pack files
//! index/<id>             sealed index files
//! snapshots/<id>         sealed snapshot JSON
//! dicts/<id>             sealed zstd dictionaries
//! locks/<random>         sealed lock records (`crate::repo::lock`)
//! writers/<random>       sealed records of backups in progress (older mailvaults)
//! migrate/state          sealed record of an unfinished `mailvault migrate`
//! damaged/...            files the repairs set aside
//! ```
//! A damaged index file, dictionary or snapshot file costs what it holds, never the
//! repository: it opens, the file is reported, and `check` names it.
//! Write order is packs -> index -> snapshot: a snapshot only exists once everything it
//! references does.
//!
//! Formats 1 and 2 are read and written (`crate::repo::format`); every seal and open goes
//! through [`Repository::seal_object`] / [`Repository::open_object`], which bind an
//! object's type and name in format 2.

pub mod audit;
pub mod b64;
pub mod compress;
pub mod crypto;
pub mod forgotten;
pub mod format;
pub mod id;
pub mod index;
mod loading;
pub mod lock;
pub mod named;
mod open;
pub mod pack;
mod read;
pub(crate) mod seal;
pub mod snapshot;
pub mod split;
pub mod tree;
pub mod writer;

use crate::error::{Error, Result};
use crate::store::Backend;
use crate::store::Store;
use compress::Compression;
use crypto::{KdfParams, MasterKey};
use format::Version;
use id::Id;
use index::Index;
use lock::{LockKind, LockOptions, LockStore, RepoLock, UnlockReport};
pub use read::ChunkTreeVisitor;
use serde::{Deserialize, Serialize};
use snapshot::Snapshot;
use split::{Chunker, ChunkerParams};
use std::sync::{Arc, Mutex};

/// The sealed `config` object.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Config {
    pub version: u32,
    pub id: String,
    pub compression: Compression,
    pub chunker: ChunkerParams,
    /// Target pack size in bytes.
    pub pack_size: u32,
    /// Format 2: every blob's sealed content is padded to a size bucket
    /// ([`format::pad`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub pad: bool,
    /// Format 2: the repository was migrated from format 1 and keeps format-1 data packs
    /// (their blobs sealed without associated data, checked against their ids by hash).
    /// A format-2 repository without it refuses every format-1 pack.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub format1_packs: bool,
}

/// Options for [`Repository::init`].
#[derive(Clone, Debug)]
pub struct InitOptions {
    pub compression: Compression,
    pub kdf: KdfParams,
    pub pack_size: u32,
    pub hostname: String,
    /// The format to write (format 1 only for repositories older mailvault builds read).
    pub version: Version,
    /// Pad every blob to a size bucket (format 2 only).
    pub pad: bool,
}

impl Default for InitOptions {
    fn default() -> Self {
        InitOptions {
            compression: Compression::Zstd,
            kdf: KdfParams::default(),
            pack_size: 16 << 20,
            hostname: crate::hostname(),
            version: format::CURRENT,
            pad: false,
        }
    }
}

/// An open repository.
pub struct Repository {
    store: Arc<dyn Backend>,
    key: MasterKey,
    config: Config,
    /// The format, from the config.
    version: Version,
    /// How messages are cut: the config's parameters, and in format 2 the keyed table.
    chunker: Chunker,
    index: Index,
    /// Index files read at open, for `check`.
    index_files: Vec<Id>,
    /// Index files that could not be read at open: their packs' blobs look absent.
    index_errors: Vec<(String, Error)>,
    /// Dictionary files that could not be read at open: blobs compressed with them cannot
    /// be read.
    dict_errors: Vec<(String, Error)>,
    /// zstd dictionaries from `dicts/`.
    dicts: compress::Dictionaries,
    /// `migrate/state` was there at open: a `mailvault migrate` is unfinished (see
    /// `crate::ops::migrate`), and files of the other format are its leftovers.
    migrating: bool,
    /// Index and dictionary files skipped at open as leftovers of that migration.
    leftovers: Vec<String>,
    /// How commands lock the repository.
    lock_options: LockOptions,
    /// This host never deletes or replaces anything ([`Self::set_append_only`]).
    append_only: bool,
    /// The store's Object Lock calls, when it has them ([`Self::set_object_lock`]).
    object_lock: Option<Arc<dyn crate::store::ObjectLock>>,
    /// The bucket's default retention, once asked.
    lock_policy: std::sync::OnceLock<Option<crate::store::LockPolicy>>,
}

/// The record an unfinished `mailvault migrate` leaves (`crate::ops::migrate`).
pub const MIGRATE_STATE: &str = "migrate/state";

impl Repository {
    pub fn store(&self) -> &dyn Backend {
        self.store.as_ref()
    }
    pub fn key(&self) -> &MasterKey {
        &self.key
    }
    pub fn config(&self) -> &Config {
        &self.config
    }
    /// The repository's format.
    pub fn version(&self) -> Version {
        self.version
    }
    /// How this repository cuts large messages.
    pub fn chunker(&self) -> &Chunker {
        &self.chunker
    }
    /// The pack formats this repository may hold: its own, and format 1 in a repository
    /// migrated from it.
    pub fn pack_versions(&self) -> &'static [Version] {
        match (self.version, self.config.format1_packs) {
            (Version::V1, _) => &[Version::V1],
            (Version::V2, false) => &[Version::V2],
            (Version::V2, true) => &[Version::V1, Version::V2],
        }
    }

    pub fn index(&self) -> &Index {
        &self.index
    }
    pub fn index_files(&self) -> &[Id] {
        &self.index_files
    }
    /// Index files that could not be read when the repository was opened.
    pub fn index_errors(&self) -> &[(String, Error)] {
        &self.index_errors
    }
    /// Dictionary files that could not be read when the repository was opened.
    pub fn dictionary_errors(&self) -> &[(String, Error)] {
        &self.dict_errors
    }
    /// The zstd dictionaries that were loaded.
    pub fn dictionaries(&self) -> &compress::Dictionaries {
        &self.dicts
    }

    /// How this repository's commands lock it.
    pub fn set_lock_options(&mut self, opts: LockOptions) {
        self.lock_options = opts;
    }

    /// See [`Self::set_lock_options`].
    pub fn lock_options(&self) -> &LockOptions {
        &self.lock_options
    }

    /// Makes this host append-only: from now on nothing it does deletes or replaces an
    /// object (a lock ends with a record of its own, `forget` writes a request), and the
    /// store refuses any delete or replace before it reaches the storage
    /// ([`crate::store::AppendOnly`]). For a host whose credentials cannot delete
    /// (docs/security.md).
    pub fn set_append_only(&mut self) {
        if !self.append_only {
            self.append_only = true;
            self.store = Arc::new(crate::store::AppendOnly::new(self.store.clone()));
        }
    }

    /// Gives the repository its store's Object Lock calls (an S3 store): prune, check and
    /// `tag hold` use them when the bucket has Object Lock on (`crate::ops::object_lock`).
    pub fn set_object_lock(&mut self, lock: Arc<dyn crate::store::ObjectLock>) {
        self.object_lock = Some(lock);
    }

    /// The store's Object Lock calls and the bucket's default retention, when the bucket
    /// has Object Lock on with one (one request: asked by the commands that use it).
    pub fn object_lock(
        &self,
    ) -> Result<Option<(&dyn crate::store::ObjectLock, crate::store::LockPolicy)>> {
        let Some(lock) = &self.object_lock else {
            return Ok(None);
        };
        let policy = match self.lock_policy.get() {
            Some(p) => *p,
            None => {
                let p = lock.policy()?;
                let _ = self.lock_policy.set(p);
                p
            }
        };
        Ok(policy.map(|p| (lock.as_ref(), p)))
    }

    /// See [`Self::set_append_only`].
    pub fn append_only(&self) -> bool {
        self.append_only
    }

    /// An error when this host is append-only: `what` deletes, which only the
    /// maintenance host does. Called before such a command changes anything.
    pub fn refuse_if_append_only(&self, what: &str) -> Result<()> {
        if self.append_only {
            return Err(Error::AppendOnly { what: what.into() });
        }
        Ok(())
    }

    /// Takes a lock on the repository for `operation` (see `crate::repo::lock`), waiting as the
    /// lock options say; none with `no_lock`, which only reads may use.
    pub fn lock(&self, kind: LockKind, operation: &str) -> Result<RepoLock> {
        let mut opts = self.lock_options.clone();
        opts.no_lock &= kind == LockKind::Shared && operation != "backup";
        let lock = RepoLock::acquire(self.lock_store(), kind, operation, &opts)?;
        // What was listed before the lock (snapshots) may have changed meanwhile: what an
        // exclusive lock's holder (prune) lists must include every snapshot written
        // before it. (A shared lock's holder, reading, at worst misses a snapshot that
        // is newer, or finds one gone.)
        if kind == LockKind::Exclusive {
            self.store.refresh_listings();
        }
        Ok(lock)
    }

    /// A shared lock for a command that reads (restore, check), taken after the
    /// repository was opened: when a prune ran in between, the index read at open lists
    /// packs that may be gone, and the command is refused (run it again).
    pub fn lock_for_reading(&self, operation: &str) -> Result<RepoLock> {
        let lock = self.lock(LockKind::Shared, operation)?;
        if let Some(gone) = self.gone_index_file()? {
            return Err(Error::IndexChanged { file: gone });
        }
        Ok(lock)
    }

    /// Removes stale locks, or all of them with `remove_all` (`mailvault unlock`).
    pub fn unlock(&self, remove_all: bool) -> Result<UnlockReport> {
        crate::repo::lock::unlock(&self.lock_store(), remove_all, self.lock_options.stale)
    }

    /// What reads and writes lock records.
    pub(crate) fn lock_store(&self) -> LockStore {
        LockStore {
            store: self.store.clone(),
            key: self.key.clone(),
            version: self.version,
            append_only: self.append_only,
        }
    }
}

/// A file in `snapshots/` that cannot be read as a snapshot.
#[derive(Debug)]
pub struct DamagedSnapshot {
    /// Its path in the repository (`snapshots/<id>`).
    pub path: String,
    pub error: Error,
}

/// What [`Repository::snapshots`] found: the readable snapshots, oldest first (the value
/// derefs to them), and the damaged files.
#[derive(Debug, Default)]
pub struct Snapshots {
    pub list: Vec<Snapshot>,
    pub damaged: Vec<DamagedSnapshot>,
}

impl std::ops::Deref for Snapshots {
    type Target = Vec<Snapshot>;
    fn deref(&self) -> &Vec<Snapshot> {
        &self.list
    }
}

impl IntoIterator for Snapshots {
    type Item = Snapshot;
    type IntoIter = std::vec::IntoIter<Snapshot>;
    fn into_iter(self) -> Self::IntoIter {
        self.list.into_iter()
    }
}

impl<'a> IntoIterator for &'a Snapshots {
    type Item = &'a Snapshot;
    type IntoIter = std::slice::Iter<'a, Snapshot>;
    fn into_iter(self) -> Self::IntoIter {
        self.list.iter()
    }
}

/// What commands that write say while a migration is unfinished.
pub(crate) const UNFINISHED_MIGRATION: &str =
    "unfinished migration: run `mailvault migrate` again to finish it first";

/// The id in the last path component of a content-named file.
pub(crate) fn file_id(path: &str) -> Result<Id> {
    let name = path.rsplit('/').next().unwrap_or(path);
    Id::from_hex(name).ok_or_else(|| Error::corrupt(path, "file name is not a hex id"))
}

/// Locks a mutex, going on if another thread panicked while holding it (the data it
/// guards stays consistent: every critical section here is a single push or insert).
pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The cores this process may use (2 when unknown), asked once.
pub(crate) fn cores() -> usize {
    static CORES: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *CORES.get_or_init(|| std::thread::available_parallelism().map_or(2, |n| n.get()))
}

/// A new repository in memory with the cheapest key derivation, for unit tests.
#[cfg(test)]
pub(crate) fn memory_repository() -> Repository {
    let opts = InitOptions {
        kdf: KdfParams::FOR_TESTS,
        ..Default::default()
    };
    let store = std::sync::Arc::new(crate::store::MemoryStore::new());
    Repository::init(store, b"pw", &opts).unwrap_or_else(|e| panic!("{e}"))
}

#[cfg(test)]
pub(crate) mod tests;
