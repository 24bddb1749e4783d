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

pub mod b64;
pub mod compress;
pub mod crypto;
pub mod forgotten;
pub mod format;
pub mod id;
pub mod index;
pub mod lock;
pub mod pack;
pub mod snapshot;
pub mod split;
pub mod tree;

use crate::error::{Error, Result};
use crate::store::{put_content_named, ObjectInfo, Store};
use compress::Compression;
use crypto::{KdfParams, KeyFile, MasterKey};
use format::{Object, Version};
use id::Id;
use index::{Index, Location};
use lock::{Found, LockKind, LockOptions, LockStore, RepoLock, UnlockReport};
use pack::{BlobKind, FinishedPack, IndexedPack, PackBuilder, PackEntry, PackList};
use serde::{Deserialize, Serialize};
use snapshot::Snapshot;
use split::{Chunker, ChunkerParams};
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
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
    store: Arc<dyn Store>,
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
}

/// The record an unfinished `mailvault migrate` leaves (`crate::ops::migrate`).
pub const MIGRATE_STATE: &str = "migrate/state";

impl Repository {
    /// Creates a new repository in an empty location.
    pub fn init(store: Arc<dyn Store>, password: &[u8], opts: &InitOptions) -> Result<Repository> {
        match store.stat("config") {
            Ok(_) => return Err(Error::RepositoryExists(store.location())),
            Err(Error::NotFound(_)) => {}
            Err(e) => return Err(e),
        }
        if let Some(parts) = repository_parts(store.as_ref())? {
            return Err(Error::ConfigMissing {
                location: store.location(),
                parts,
            });
        }
        if opts.pad && opts.version == Version::V1 {
            return Err(Error::InvalidInput(
                "padding needs repository format 2".into(),
            ));
        }
        let key = MasterKey::random();
        let kf = KeyFile::wrap(&key, password, opts.kdf, &opts.hostname)?;
        let kf_bytes =
            serde_json::to_vec_pretty(&kf).map_err(|e| Error::corrupt("key", e.to_string()))?;
        store.put(&format!("keys/{}", Id::of_file(&kf_bytes)), &kf_bytes)?;
        // The key before the config that makes this a repository.
        store.flush()?;
        let config = Config {
            version: opts.version.number(),
            id: hex::encode(rand::random::<[u8; 16]>()),
            compression: opts.compression,
            chunker: ChunkerParams::default(),
            pack_size: opts.pack_size,
            pad: opts.pad,
            format1_packs: false,
        };
        store.put("config", &seal_config(&key, &config)?)?;
        store.flush()?;
        Ok(Repository::unloaded(store, key, config, opts.version))
    }

    /// A repository of `version` with nothing loaded yet (no index, no dictionaries).
    fn unloaded(store: Arc<dyn Store>, key: MasterKey, config: Config, version: Version) -> Self {
        Repository {
            store,
            chunker: chunker_for(&key, &config, version),
            version,
            key,
            config,
            index: Index::default(),
            index_files: Vec::new(),
            index_errors: Vec::new(),
            dict_errors: Vec::new(),
            dicts: compress::Dictionaries::default(),
            migrating: false,
            leftovers: Vec::new(),
            lock_options: LockOptions::default(),
        }
    }

    /// Opens a repository with a password and loads its index.
    pub fn open(store: Arc<dyn Store>, password: &[u8]) -> Result<Repository> {
        let sealed_cfg = match store.get("config") {
            Err(Error::NotFound(_)) => {
                return Err(match repository_parts(store.as_ref())? {
                    Some(parts) => Error::ConfigMissing {
                        location: store.location(),
                        parts,
                    },
                    None => Error::NoRepository(store.location()),
                })
            }
            other => other?,
        };
        // Key files from a local cache first (no request); when none of them opens the
        // config, the fresh listing decides.
        let cached = store.list_cached("keys/")?;
        let opened = match cached.is_empty() {
            true => None,
            false => open_with_keys(store.as_ref(), cached, password, &sealed_cfg).ok(),
        };
        let (key, config, version) = match opened {
            Some(o) => o,
            None => open_with_keys(store.as_ref(), store.list("keys/")?, password, &sealed_cfg)?,
        };
        store.bind(&config.id);
        let mut repo = Repository::unloaded(store, key, config, version);
        repo.load()?;
        repo.refuse_downgraded_config()?;
        Ok(repo)
    }

    /// Reads the config again and loads the dictionaries and the index: after `migrate`
    /// replaced the config.
    pub(crate) fn reload(&mut self) -> Result<()> {
        let (config, version) = open_config(&self.key, self.store.get("config")?)?;
        self.chunker = chunker_for(&self.key, &config, version);
        self.config = config;
        self.version = version;
        self.index = Index::default();
        self.index_files.clear();
        self.index_errors.clear();
        self.dicts = compress::Dictionaries::default();
        self.load()
    }

    /// Loads the dictionaries and the index, noting first whether a migration is
    /// unfinished.
    fn load(&mut self) -> Result<()> {
        self.migrating = match self.store.stat(MIGRATE_STATE) {
            Ok(_) => true,
            Err(Error::NotFound(_)) => false,
            Err(e) => return Err(e),
        };
        self.leftovers.clear();
        self.load_dictionaries()?;
        self.load_index()
    }

    /// The format-2 repository this format-1 one becomes when migrated: the same store
    /// and key, the config at format 2 keeping the format-1 data packs, an empty index
    /// and no dictionaries (what `migrate` writes through: tree blobs, which use none).
    pub(crate) fn migrated_view(&self) -> Repository {
        let config = Config {
            version: Version::V2.number(),
            format1_packs: true,
            ..self.config.clone()
        };
        Repository {
            migrating: true,
            ..Repository::unloaded(self.store.clone(), self.key.clone(), config, Version::V2)
        }
    }

    /// Whether a `mailvault migrate` is unfinished (its record `migrate/state` is there).
    pub fn unfinished_migration(&self) -> bool {
        self.migrating
    }

    /// An error for commands that write while a migration is unfinished.
    pub(crate) fn refuse_if_migrating(&self) -> Result<()> {
        match self.migrating {
            true => Err(Error::InvalidInput(format!(
                "{}: {UNFINISHED_MIGRATION}",
                self.store.location()
            ))),
            false => Ok(()),
        }
    }

    /// Whether `e`, met reading a file, says the file is a leftover of an unfinished
    /// migration: a file of the other format (staged format-2 files before the migration's
    /// commit, replaced format-1 files after it) while `migrate/state` is there. Readers
    /// skip such files quietly; without the record they stay errors.
    pub fn migration_leftover(&self, e: &Error) -> bool {
        self.migrating && matches!(e, Error::OtherFormat { .. })
    }

    /// Whether the content-named file at `path` (index, snapshot, dictionary) is a
    /// [`Self::migration_leftover`] (read and opened: for `migrate`'s cleanup).
    pub fn migration_leftover_file(&self, path: &str) -> bool {
        self.migrating
            && self
                .store
                .get(path)
                .and_then(|b| self.verify_name(path, &b))
                .is_err_and(|e| self.migration_leftover(&e))
    }

    /// A format-1 config over format-2 index files, with no migration under way, is an
    /// older config put back (one from before `migrate`, replayed by someone who can
    /// write to the storage): opening it would hide every format-2 snapshot and make
    /// backups write format 1 again. Refused, on every host, whatever it has seen.
    fn refuse_downgraded_config(&self) -> Result<()> {
        let newer = self
            .index_errors
            .iter()
            .any(|(_, e)| matches!(e, Error::OtherFormat { found, expected: 1, .. } if *found > 1));
        if self.version == Version::V1 && !self.migrating && newer {
            return Err(Error::corrupt(
                "config",
                "it states format 1, but the repository's index files are format 2: an older config was put back (a rollback); put back the format-2 config from a copy of the repository",
            ));
        }
        Ok(())
    }

    /// Index and dictionary files skipped at open as [`Self::migration_leftover`]s.
    pub fn migration_leftovers(&self) -> &[String] {
        &self.leftovers
    }

    /// Whether the pack at `path` (`size` bytes), which no index lists, is a leftover of
    /// an unfinished migration: a pack of the other format holding only tree blobs that
    /// the index has elsewhere (the staged format-2 tree packs, or the replaced format-1
    /// ones), so removing it loses nothing.
    pub fn migration_leftover_pack(&self, path: &str, size: u64) -> bool {
        if !self.migrating {
            return false;
        }
        let other = match self.version {
            Version::V1 => Version::V2,
            Version::V2 => Version::V1,
        };
        pack::read_header(self.store.as_ref(), &self.key, path, size, &[other]).is_ok_and(
            |(_, entries)| {
                entries
                    .iter()
                    .all(|e| e.kind == BlobKind::Tree && self.index.contains(&e.id))
            },
        )
    }

    /// Loads `dicts/`; the dictionary in the first file by name is used for writing, so
    /// every client picks the same one.
    fn load_dictionaries(&mut self) -> Result<()> {
        let mut files = self.store.list("dicts/")?;
        files.sort_by(|a, b| a.path.cmp(&b.path));
        let mut first = None;
        self.dict_errors.clear();
        for f in files {
            let loaded = self
                .store
                .get(&f.path)
                .and_then(|sealed| self.open_named(Named::Dictionary, &f.path, sealed))
                .and_then(|plain| self.dicts.add(&plain, &f.path));
            match loaded {
                Ok(id) => {
                    first.get_or_insert(id);
                }
                Err(e) if self.migration_leftover(&e) => self.leftovers.push(f.path),
                // Like an index file: a damaged dictionary costs the blobs that need it
                // (named by `check`), not the repository.
                Err(e) => self.dict_errors.push((f.path, e)),
            }
        }
        if let Some(id) = first {
            self.dicts.set_encoder(id);
        }
        Ok(())
    }

    /// Whether the repository has a compression dictionary yet.
    pub fn has_dictionary(&self) -> bool {
        !self.dicts.is_empty()
    }

    /// Stores a trained dictionary (written before any blob that uses it) and reloads the
    /// dictionaries.
    pub fn add_dictionary(&mut self, dict: &[u8]) -> Result<()> {
        let (id, sealed) = self.seal_named(Named::Dictionary, dict);
        put_content_named(self.store.as_ref(), &format!("dicts/{id}"), &sealed)?;
        self.dicts = compress::Dictionaries::default();
        self.load_dictionaries()
    }

    fn load_index(&mut self) -> Result<()> {
        let files = self.store.list("index/")?;
        type Loaded = (String, Result<(Id, PackList)>);
        let loaded: Vec<Loaded> = {
            use rayon::prelude::*;
            files
                .par_iter()
                .map(|f| (f.path.clone(), self.read_index_file(&f.path)))
                .collect()
        };
        for (path, r) in loaded {
            match r {
                Ok((id, packs)) => {
                    for p in &packs {
                        self.index.add_pack(p.id, p.version, &p.entries);
                    }
                    self.index_files.push(id);
                }
                Err(e) if self.migration_leftover(&e) => self.leftovers.push(path),
                // A damaged index file must not lock the user out: its blobs look absent
                // (a backup stores them again, a restore names what it cannot find) and
                // `check` reports it.
                // The caller reports it (`index_errors`): a log line would say it twice.
                Err(e) => {
                    tracing::debug!("index file {path} is unreadable: {e}");
                    self.index_errors.push((path, e));
                }
            }
        }
        Ok(())
    }

    /// Reads, opens and decodes the index file at `path`: its id and the packs it lists.
    pub(crate) fn read_index_file(&self, path: &str) -> Result<(Id, PackList)> {
        let id = file_id(path)?;
        let sealed = self.store.get(path)?;
        let plain = self.open_named(Named::Index, path, sealed)?;
        Ok((id, self.decode_index(&plain, path)?))
    }

    /// Reads and opens the dictionary file at `path`.
    pub(crate) fn read_dictionary_file(&self, path: &str) -> Result<Vec<u8>> {
        self.open_named(Named::Dictionary, path, self.store.get(path)?)
    }

    /// Asks the store to read ahead the parts of packs that hold metadata (tree blobs),
    /// newest packs first, up to `budget` bytes. An incremental backup calls it in the
    /// background while it walks the directories: the parent's trees are then read from
    /// memory instead of by thousands of small random reads (BENCHMARKS.md).
    pub fn prefetch_trees(&self, budget: u64) {
        let mut spans: HashMap<u32, (u64, u64)> = HashMap::new();
        for (_, loc) in self.index.iter() {
            if loc.kind == BlobKind::Tree {
                let end = loc.offset as u64 + loc.stored_len as u64;
                let s = spans.entry(loc.pack).or_insert((loc.offset as u64, end));
                s.0 = s.0.min(loc.offset as u64);
                s.1 = s.1.max(end);
            }
        }
        let mut spans: Vec<(u32, (u64, u64))> = spans.into_iter().collect();
        spans.sort_unstable_by_key(|s| std::cmp::Reverse(s.0));
        let mut left = budget;
        for (pack, (start, end)) in spans {
            let len = end - start;
            if len > left {
                break;
            }
            left -= len;
            let path = pack::pack_path(&self.index.pack_id(pack));
            self.store.prefetch(&path, start, len);
        }
    }

    pub fn store(&self) -> &dyn Store {
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

    /// Seals `plain` as `obj`: in format 2 with the object's associated data, in format 1
    /// without.
    pub fn seal_object(&self, obj: Object, plain: &[u8]) -> Vec<u8> {
        seal_as(&self.key, self.version, obj, plain)
    }

    /// Opens what [`Self::seal_object`] sealed as `obj`; `what` names it for errors. In
    /// format 2, an object that does not open as `obj` is an error saying that
    /// it was expected there (swapped, renamed, replayed or damaged), or, when it opens
    /// without associated data, that it is a format-1 object.
    pub fn open_object(&self, obj: Object, sealed: Vec<u8>, what: &str) -> Result<Vec<u8>> {
        open_as(&self.key, self.version, obj, sealed, what)
    }

    /// Seals a content-named metadata file (index, snapshot, dictionary): its id and
    /// bytes. Format 1 names it by the plain BLAKE3 of its sealed bytes; format 2 by the
    /// keyed BLAKE3 of its plaintext, bound into the seal, so that the name is checked
    /// whenever the file is opened.
    pub(crate) fn seal_named(&self, kind: Named, plain: &[u8]) -> (Id, Vec<u8>) {
        match self.version {
            Version::V1 => {
                let sealed = self.key.seal(plain);
                (Id::of_file(&sealed), sealed)
            }
            Version::V2 => {
                let id = self.key.blob_id(plain);
                let aad = kind.object(&id).aad();
                let sealed = match self.config.pad {
                    // An index file's size would give the number of blobs a backup added.
                    true => self.key.seal_ad(&format::pad(plain.to_vec()), &aad),
                    false => self.key.seal_ad(plain, &aad),
                };
                (id, sealed)
            }
        }
    }

    /// Opens the content-named file at `path` (see [`Self::seal_named`]). In format 2 its
    /// name must be the keyed hash of what it opens to: a renamed or substituted file is
    /// an error naming it. In format 1, a format-2 file is refused as one
    /// ([`Error::OtherFormat`]), not as damaged.
    pub(crate) fn open_named(&self, kind: Named, path: &str, sealed: Vec<u8>) -> Result<Vec<u8>> {
        match self.version {
            // A format-2 file (staged by `migrate`) is told apart from a damaged one.
            Version::V1 => match file_id(path) {
                Ok(id) => self.open_object(kind.object(&id), sealed, path),
                Err(_) => self.key.open_vec(sealed, path),
            },
            Version::V2 => {
                let id = file_id(path)?;
                let plain = self.open_object(kind.object(&id), sealed, path)?;
                let plain = match self.config.pad {
                    true => format::unpad(plain, path)?,
                    false => plain,
                };
                if self.key.blob_id(&plain) != id {
                    return Err(Error::corrupt(path, "content does not match its name"));
                }
                Ok(plain)
            }
        }
    }

    /// Checks a content-named file's bytes against its name: for packs and key files
    /// (and in format 1 every named file) the BLAKE3 of the bytes, in format 2 for
    /// index, snapshot and dictionary files that it opens under its name.
    pub(crate) fn verify_name(&self, path: &str, bytes: &[u8]) -> Result<()> {
        let named = match path.split('/').next() {
            Some("index") => Some(Named::Index),
            Some("snapshots") => Some(Named::Snapshot),
            Some("dicts") => Some(Named::Dictionary),
            _ => None,
        };
        match (self.version, named) {
            (Version::V2, Some(kind)) => self.open_named(kind, path, bytes.to_vec()).map(|_| ()),
            _ => match file_id(path)? == Id::of_file(bytes) {
                true => Ok(()),
                false => {
                    // A format-2 file in a format-1 repository says so.
                    if let Some(kind) = named {
                        if let Err(e @ Error::OtherFormat { .. }) =
                            self.open_named(kind, path, bytes.to_vec())
                        {
                            return Err(e);
                        }
                    }
                    Err(Error::corrupt(
                        path,
                        "content does not match its name: the file is damaged",
                    ))
                }
            },
        }
    }

    fn decode_index(&self, plain: &[u8], path: &str) -> Result<PackList> {
        let packs = index::decode(plain, self.version, path)?;
        if let Some(p) = packs
            .iter()
            .find(|p| !self.pack_versions().contains(&p.version))
        {
            return Err(Error::corrupt(
                path,
                format!(
                    "lists pack {} as format {}, which this repository does not hold",
                    p.id.short(),
                    p.version
                ),
            ));
        }
        Ok(packs)
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

    /// Reads, opens, decompresses and verifies one blob. In a format-2 pack the AEAD
    /// tag, which binds the blob's id and kind, proves it; a format-1 blob is hashed
    /// against its id.
    pub fn read_blob(&self, id: &Id) -> Result<Vec<u8>> {
        let (loc, sealed, path) = self.read_sealed(id)?;
        self.open_read(id, &loc, sealed, &path, true)
    }

    /// Opens blob `id` read (sealed) from `path` at `loc`, as [`Self::read_blob`] does
    /// (`verify`) or as [`Self::read_blob_unverified`] does.
    fn open_read(
        &self,
        id: &Id,
        loc: &Location,
        sealed: Vec<u8>,
        path: &str,
        verify: bool,
    ) -> Result<Vec<u8>> {
        let version = self.index.pack_version(loc.pack);
        let raw = self.open_blob(id, loc, version, sealed, path)?;
        match version {
            Version::V1 if verify => self.verify_blob(id, raw, path),
            _ => Ok(raw),
        }
    }

    /// A blob's place, its sealed bytes and the path of its pack.
    fn read_sealed(&self, id: &Id) -> Result<(Location, Vec<u8>, String)> {
        let loc = *self
            .index
            .get(id)
            .ok_or_else(|| Error::BlobNotFound(id.to_hex()))?;
        let path = pack::pack_path(&self.index.pack_id(loc.pack));
        let sealed = self.store.get_pack_range(
            &path,
            loc.offset.into(),
            loc.stored_len.into(),
            loc.kind.into(),
        )?;
        Ok((loc, sealed, path))
    }

    /// Opens a sealed blob read from a pack of format `version` and hashes it against
    /// its id whatever the format (for `check` and for packs about to be indexed, which
    /// also catch a writer that filed a blob under a wrong id).
    pub(crate) fn decode_blob(
        &self,
        id: &Id,
        loc: &Location,
        version: Version,
        sealed: &[u8],
        path: &str,
    ) -> Result<Vec<u8>> {
        let raw = self.open_blob(id, loc, version, sealed.to_vec(), path)?;
        self.verify_blob(id, raw, path)
    }

    /// `raw` if it is the content of blob `id`, else a corruption error.
    fn verify_blob(&self, id: &Id, raw: Vec<u8>, path: &str) -> Result<Vec<u8>> {
        if self.key.blob_id(&raw) != *id {
            let what = format!("blob {} in {path}", id.short());
            return Err(Error::corrupt(what, "content does not match its id"));
        }
        Ok(raw)
    }

    /// Opens (in place) and decompresses a blob without hashing it against its id. In
    /// a format-2 pack the tag proves the blob is the one sealed as `id` of its kind; in
    /// a format-1 pack only that it is the repository's own, and the id check adds the
    /// protection against a blob filed under the wrong id, which a caller that checks a
    /// whole-message hash afterwards gets anyway.
    fn open_blob(
        &self,
        id: &Id,
        loc: &Location,
        version: Version,
        sealed: Vec<u8>,
        path: &str,
    ) -> Result<Vec<u8>> {
        let what = format!("blob {} in {path}", id.short());
        let plain = match version {
            Version::V1 => self.key.open_vec(sealed, &what)?,
            Version::V2 => {
                let obj = Object::Blob(loc.kind, id);
                self.key
                    .open_vec_ad(sealed, &obj.aad(), &what)
                    .map_err(|_| self.blob_open_error(&obj, loc, path, what.clone()))?
            }
        };
        let plain = match self.config.pad && version == Version::V2 {
            true => format::unpad(plain, &what)?,
            false => plain,
        };
        compress::decompress_owned(loc.codec, plain, loc.raw_len as usize, &what, &self.dicts)
    }

    /// Why a format-2 blob did not open as `obj`: a format-1 blob (sealed without
    /// associated data) says so; anything else is misplaced or damaged. The failed open
    /// consumed the sealed bytes, so they are read again: this costs only on the error
    /// path.
    fn blob_open_error(&self, obj: &Object, loc: &Location, path: &str, what: String) -> Error {
        let format1 = self
            .store
            .get_range(path, loc.offset.into(), loc.stored_len.into())
            .is_ok_and(|sealed| self.key.opens_with(&sealed, &[]));
        match format1 {
            true => Error::OtherFormat {
                what,
                found: 1,
                expected: 2,
            },
            false => Error::Misplaced {
                what,
                expected: obj.describe(),
            },
        }
    }

    /// Reads a blob like [`Self::read_blob`] but, in a format-1 pack, without hashing it:
    /// for callers that verify a hash over the whole of what they assemble (message
    /// restore).
    pub fn read_blob_unverified(&self, id: &Id) -> Result<Vec<u8>> {
        let (loc, sealed, path) = self.read_sealed(id)?;
        self.open_read(id, &loc, sealed, &path, false)
    }

    /// Opens blob `id` from its sealed bytes, read by the caller from its pack (a restore
    /// reads many blobs in one span): as [`Self::read_blob`] opens them (`verify`) or as
    /// [`Self::read_blob_unverified`] does.
    pub(crate) fn open_sealed(&self, id: &Id, sealed: Vec<u8>, verify: bool) -> Result<Vec<u8>> {
        let loc = *self
            .index
            .get(id)
            .ok_or_else(|| Error::BlobNotFound(id.to_hex()))?;
        let path = pack::pack_path(&self.index.pack_id(loc.pack));
        self.open_read(id, &loc, sealed, &path, verify)
    }

    /// Reads and decodes a tree blob; a blob the index lists as data is refused.
    pub fn read_tree<T: tree::TreeBlob>(&self, id: &Id) -> Result<T> {
        if let Some(loc) = self.index.get(id) {
            if loc.kind != BlobKind::Tree {
                return Err(Error::corrupt(
                    format!("tree {}", id.short()),
                    "the index lists it as a data blob, not a tree",
                ));
            }
        }
        tree::decode(&self.read_blob(id)?, &format!("tree {}", id.short()))
    }

    /// Reads one chunk of a folder's messages (both of its blobs).
    pub fn read_chunk(&self, c: &tree::ChunkRef) -> Result<Vec<tree::MessageEntry>> {
        let m: tree::MessageChunk = self.read_tree(&c.entries)?;
        let n: tree::NameChunk = self.read_tree(&c.names)?;
        if m.entries.len() != n.names.len() {
            return Err(Error::corrupt(
                format!("tree {}", c.names.short()),
                "name chunk and message chunk differ in length",
            ));
        }
        Ok(m.entries
            .into_iter()
            .zip(n.names)
            .map(|(s, n)| tree::MessageEntry::from_parts(s, n))
            .collect())
    }

    /// The data blob ids of a file, in order: its own, or those of its content lists
    /// (each read and checked; a large file of a `file:` backup).
    pub fn file_content(&self, f: &tree::FileEntry) -> Result<Vec<Id>> {
        if f.lists.is_empty() {
            return Ok(f.content.clone());
        }
        let mut ids = f.content.clone();
        for l in &f.lists {
            ids.extend(self.read_tree::<tree::ContentList>(l)?.ids);
        }
        Ok(ids)
    }

    /// All snapshots, oldest first, and the files in `snapshots/` that cannot be read (a
    /// stray file, a truncated or tampered one): one damaged file costs that snapshot
    /// only, never the others.
    pub fn snapshots(&self) -> Result<Snapshots> {
        let mut out = Snapshots::default();
        let mut files = self.store.list("snapshots/")?;
        files.sort_by(|a, b| a.path.cmp(&b.path));
        for f in files {
            match self.load_snapshot_at(&f.path) {
                Ok(s) => out.list.push(s),
                Err(e) if self.migration_leftover(&e) => {}
                Err(error) => out.damaged.push(DamagedSnapshot {
                    path: f.path,
                    error,
                }),
            }
        }
        out.list.sort_by_key(|s| (s.time, s.time_nanos, s.id));
        Ok(out)
    }

    /// Loads the snapshot stored at `path`.
    pub fn snapshots_one(&self, path: &str) -> Result<Snapshot> {
        self.load_snapshot_at(path)
    }

    fn load_snapshot_at(&self, path: &str) -> Result<Snapshot> {
        let id = file_id(path)?;
        let plain = self.open_named(Named::Snapshot, path, self.store.get(path)?)?;
        let mut s = Snapshot::from_json(&plain, self.version, path)?;
        s.id = id;
        Ok(s)
    }

    /// Finds a snapshot by `latest` (the latest readable one) or by a unique prefix of its
    /// id. A prefix that names only a damaged snapshot file gets that file's error.
    pub fn find_snapshot(&self, which: &str) -> Result<Snapshot> {
        let Snapshots { list, damaged } = self.snapshots()?;
        if which == "latest" {
            return list
                .into_iter()
                .last()
                .ok_or_else(|| Error::SnapshotNotFound(which.into()));
        }
        let mut m: Vec<Snapshot> = list
            .into_iter()
            .filter(|s| s.id.to_hex().starts_with(which))
            .collect();
        match m.len() {
            1 => Ok(m.remove(0)),
            0 => match damaged
                .into_iter()
                .find(|d| d.path.trim_start_matches("snapshots/").starts_with(which))
            {
                Some(d) => Err(d.error),
                None => Err(Error::SnapshotNotFound(which.into())),
            },
            _ => Err(Error::InvalidInput(format!(
                "snapshot prefix {which:?} is ambiguous: give more digits"
            ))),
        }
    }

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
                _ if f.is_stale(self.lock_options.stale) => stale.push(f.path.clone()),
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
        for p in &mark.stale {
            self.store.delete(p)?;
        }
        drop(mark.lock);
        Ok(())
    }

    /// How this repository's commands lock it.
    pub fn set_lock_options(&mut self, opts: LockOptions) {
        self.lock_options = opts;
    }

    /// See [`Self::set_lock_options`].
    pub fn lock_options(&self) -> &LockOptions {
        &self.lock_options
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
        }
    }

    /// Whether every index file read at open is still there (a prune removes the index
    /// files it replaced).
    pub fn index_is_current(&self) -> Result<bool> {
        Ok(self.gone_index_file()?.is_none())
    }

    /// An index file read at open that is no longer there.
    fn gone_index_file(&self) -> Result<Option<String>> {
        let listed: HashSet<String> = (self.store.list("index/")?.into_iter())
            .map(|o| o.path)
            .collect();
        Ok(self
            .index_files
            .iter()
            .map(|id| format!("index/{id}"))
            .find(|p| !listed.contains(p)))
    }

    /// Reads the index again (after a prune replaced index files).
    pub fn reload_index(&mut self) -> Result<()> {
        self.index = Index::default();
        self.index_files.clear();
        self.index_errors.clear();
        self.leftovers.clear();
        self.load_index()
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

    /// The blob a pack header entry describes, in the `bytes` of a pack of `version`:
    /// opened, decompressed and checked to hash to its id.
    pub(crate) fn decode_entry(
        &self,
        e: &PackEntry,
        version: Version,
        bytes: &[u8],
        path: &str,
    ) -> Result<Vec<u8>> {
        self.decode_entry_in(e, version, bytes, 0, path)
    }

    /// [`Self::decode_entry`] in `bytes` read from the pack at offset `base` (a range).
    pub(crate) fn decode_entry_in(
        &self,
        e: &PackEntry,
        version: Version,
        bytes: &[u8],
        base: u32,
        path: &str,
    ) -> Result<Vec<u8>> {
        let start = e.offset.checked_sub(base).map(|s| s as usize);
        let sealed = start
            .and_then(|s| bytes.get(s..s + e.stored_len as usize))
            .ok_or_else(|| Error::corrupt(path, "blob past the end of the pack"))?;
        let loc = Location {
            pack: 0,
            offset: e.offset,
            stored_len: e.stored_len,
            raw_len: e.raw_len,
            kind: e.kind,
            codec: e.codec,
        };
        self.decode_blob(&e.id, &loc, version, sealed, path)
    }
}

/// What commands that write say while a migration is unfinished.
pub(crate) const UNFINISHED_MIGRATION: &str =
    "unfinished migration: run `mailvault migrate` again to finish it first";

/// The content-named metadata files: their directory decides the object they are sealed
/// as.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Named {
    Index,
    Snapshot,
    Dictionary,
    /// `forgotten/<id>` ([`crate::repo::forgotten`]).
    Forgotten,
}

impl Named {
    fn object(self, id: &Id) -> Object<'_> {
        match self {
            Named::Index => Object::Index(id),
            Named::Snapshot => Object::Snapshot(id),
            Named::Dictionary => Object::Dictionary(id),
            Named::Forgotten => Object::Forgotten(id),
        }
    }
}

/// [`Repository::seal_object`] for a given key and format (also before a repository is
/// open: the config).
/// Unlocks a key file of `keys` with the password and opens the config with its key.
fn open_with_keys(
    store: &dyn Store,
    mut keys: Vec<ObjectInfo>,
    password: &[u8],
    sealed_cfg: &[u8],
) -> Result<(MasterKey, Config, Version)> {
    keys.sort_by(|a, b| a.path.cmp(&b.path));
    if keys.is_empty() {
        return Err(Error::corrupt("keys/", "the repository has no key files"));
    }
    let key = unlock(store, &keys, password)?;
    let (config, version) = open_config(&key, sealed_cfg.to_vec())?;
    Ok((key, config, version))
}

pub(crate) fn seal_as(key: &MasterKey, version: Version, obj: Object, plain: &[u8]) -> Vec<u8> {
    match version {
        Version::V1 => key.seal(plain),
        Version::V2 => key.seal_ad(plain, &obj.aad()),
    }
}

/// [`Repository::open_object`] for a given key and format.
pub(crate) fn open_as(
    key: &MasterKey,
    version: Version,
    obj: Object,
    sealed: Vec<u8>,
    what: &str,
) -> Result<Vec<u8>> {
    match version {
        Version::V1 => match key.open_vec(sealed.clone(), what) {
            Err(Error::Tampered(_)) if key.opens_with(&sealed, &obj.aad()) => {
                Err(Error::OtherFormat {
                    what: what.into(),
                    found: 2,
                    expected: 1,
                })
            }
            other => other,
        },
        Version::V2 => match key.open_vec_ad(sealed.clone(), &obj.aad(), what) {
            Err(Error::Tampered(_)) if key.opens_with(&sealed, &[]) => Err(Error::OtherFormat {
                what: what.into(),
                found: 1,
                expected: 2,
            }),
            Err(Error::Tampered(_)) => Err(Error::Misplaced {
                what: what.into(),
                expected: obj.describe(),
            }),
            other => other,
        },
    }
}

/// The sealed bytes of `config`: format 2 seals it as [`Object::Config`], format 1
/// without associated data.
pub(crate) fn seal_config(key: &MasterKey, config: &Config) -> Result<Vec<u8>> {
    let version = Version::from_number(config.version)?;
    let mut json =
        serde_json::to_vec(config).map_err(|e| Error::corrupt("config", e.to_string()))?;
    if version == Version::V2 {
        // Padded to a fixed length: the config's size would tell the compression and the
        // padding flag.
        json.push(0x80);
        json.resize(json.len().max(CONFIG_PADDED_LEN), 0);
    }
    Ok(seal_as(key, version, Object::Config, &json))
}

/// The plaintext length of a format-2 config (unless the JSON is longer).
const CONFIG_PADDED_LEN: usize = 1024;

/// Opens `config` and tells its format: sealed as [`Object::Config`] it is format 2 or
/// later (a later one is refused by its number), sealed without associated data format
/// 1. The version it states must agree with how it was sealed.
pub(crate) fn open_config(key: &MasterKey, sealed: Vec<u8>) -> Result<(Config, Version)> {
    let parse = |plain: &[u8]| -> Result<Config> {
        serde_json::from_slice(plain).map_err(|e| Error::corrupt("config", e.to_string()))
    };
    let opened = key.open_vec_ad(sealed.clone(), &Object::Config.aad(), "config");
    let (config, sealed_as) = match opened {
        Ok(plain) => (parse(&format::unpad(plain, "config")?)?, Version::V2),
        Err(_) => (parse(&key.open_vec(sealed, "config")?)?, Version::V1),
    };
    let version = Version::from_number(config.version)?;
    if version != sealed_as {
        return Err(Error::corrupt(
            "config",
            format!(
                "states format {} but is sealed as format {sealed_as}",
                config.version
            ),
        ));
    }
    Ok((config, version))
}

/// [`open_config`] for the fuzz target `config`; not an API.
#[doc(hidden)]
pub fn open_config_for_fuzz(key: &MasterKey, sealed: Vec<u8>) -> Result<(Config, Version)> {
    open_config(key, sealed)
}

/// The chunker a repository of `version` cuts with.
fn chunker_for(key: &MasterKey, config: &Config, version: Version) -> Chunker {
    match version {
        Version::V1 => Chunker::public(config.chunker),
        Version::V2 => Chunker::keyed(config.chunker, key.gear_table()),
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

/// A backup in progress, as recorded in `writers/<random id>` (sealed JSON); also the
/// record of a migration in progress (`crate::ops::migrate`).
#[derive(Serialize, Deserialize)]
pub(crate) struct WriterRecord {
    pub(crate) hostname: String,
    pub(crate) pid: u32,
    /// Unix seconds.
    pub(crate) started: i64,
}

impl WriterRecord {
    /// The record of this process, now.
    pub(crate) fn this_process() -> WriterRecord {
        WriterRecord {
            hostname: crate::hostname(),
            pid: std::process::id(),
            started: crate::now_unix(),
        }
    }

    /// Whether its writer is gone: on this host and no such process, or older than a day.
    pub(crate) fn gone(&self) -> bool {
        crate::now_unix() - self.started > WRITER_MAX_AGE_SECS
            || (self.hostname == crate::hostname()
                && !std::path::Path::new(&format!("/proc/{}", self.pid)).exists()
                && std::path::Path::new("/proc/self").exists())
    }
}

/// A writer record older than this belongs to a writer that is gone, wherever it ran.
const WRITER_MAX_AGE_SECS: i64 = 24 * 3600;

/// A backup's own record and the stale ones it takes over; from
/// [`Repository::begin_backup`], for [`Repository::end_backup`].
#[derive(Debug)]
pub struct WriterMark {
    lock: RepoLock,
    stale: Vec<String>,
}

impl WriterMark {
    /// A handle on this backup's lock, to check that it is still good before the
    /// snapshot is saved (see [`RepoLock::verify`]).
    pub fn watch(&self) -> crate::repo::lock::LockWatch {
        self.lock.watch()
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

/// The master key from the first key file that opens with `password`. When none does,
/// every key file's outcome is reported: a damaged key file must not hide that the
/// password is wrong for the others, nor a wrong password that a key file is damaged.
fn unlock(store: &dyn Store, keys: &[ObjectInfo], password: &[u8]) -> Result<MasterKey> {
    let mut outcomes = Vec::new();
    let mut damaged = Vec::new();
    for k in keys {
        let tried = store
            .get(&k.path)
            .and_then(|bytes| KeyFile::parse(&bytes, &k.path))
            .and_then(|kf| kf.unwrap(password, &k.path));
        match tried {
            Ok(key) => {
                for e in &damaged {
                    tracing::warn!("{e}");
                }
                return Ok(key);
            }
            Err(Error::WrongPassword) => outcomes.push(format!("{}: wrong password", k.path)),
            Err(e) => {
                outcomes.push(e.to_string());
                damaged.push(e);
            }
        }
    }
    match (damaged.len(), outcomes.len()) {
        (0, _) => Err(Error::WrongPassword),
        // The one key file is damaged: that is the whole story.
        (1, 1) => Err(damaged.remove(0)),
        _ => Err(Error::NoKeyOpens(outcomes)),
    }
}

/// The directories of a repository besides `config`.
const REPOSITORY_DIRS: [&str; 8] = [
    "keys/",
    "data/",
    "index/",
    "snapshots/",
    "dicts/",
    "writers/",
    "locks/",
    "forgotten/",
];

/// Which of the repository's directories hold files (`"keys/, data/"`), if any: a location
/// without `config` but with these is a repository that lost its config, not an empty one.
fn repository_parts(store: &dyn Store) -> Result<Option<String>> {
    let mut parts = Vec::new();
    for dir in REPOSITORY_DIRS {
        if !store.list(dir)?.is_empty() {
            parts.push(dir);
        }
    }
    Ok((!parts.is_empty()).then(|| parts.join(", ")))
}

/// The id in the last path component of a content-named file.
pub(crate) fn file_id(path: &str) -> Result<Id> {
    let name = path.rsplit('/').next().unwrap_or(path);
    Id::from_hex(name).ok_or_else(|| Error::corrupt(path, "file name is not a hex id"))
}

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

const SHARDS: usize = 64;
/// Data packers: one per worker thread (threads beyond this share), so the blobs of the
/// account a worker is on sit together and restoring one account reads few ranges.
const DATA_PACKERS: usize = 64;

/// Saves blobs during a backup: dedup against the index and this run, compress, seal,
/// pack, write packs as they fill. Shared by all worker threads.
pub struct BlobSaver<'r> {
    repo: &'r Repository,
    compression: Compression,
    pending: Vec<Mutex<HashSet<Id>>>,
    /// `DATA_PACKERS` data packers, then the one tree packer.
    packers: Vec<Mutex<PackBuilder>>,
    written: Mutex<PackList>,
    pub stats: SaveStats,
    /// Threads writing full packs to the store, started with the first.
    writers: Mutex<Option<PackWriters>>,
    /// The first pack write that failed, as it was said. Every later pack write and
    /// `finish` fail with it: other folders' entries may name blobs of that pack (they
    /// were deduplicated against it), so no index or snapshot may be written.
    failed: Mutex<Option<String>>,
}

/// Threads that write finished packs to the store while the workers go on filling the
/// next ones: a pack's write (and on a local disk its fsync, tens of milliseconds on a
/// VM's disk; on S3 its upload) no longer stalls a worker. At most one pack per thread
/// waits in the queue, so memory stays bounded.
struct PackWriters {
    tx: std::sync::mpsc::SyncSender<(FinishedPack, BlobKind)>,
    threads: Vec<std::thread::JoinHandle<()>>,
    done: Arc<WritersDone>,
}

/// What the pack writers did: the packs written and their bytes, or the first error;
/// and the buffers of packs written, for the next ones.
#[derive(Default)]
struct WritersDone {
    packs: Mutex<Vec<(IndexedPack, u64)>>,
    error: Mutex<Option<Error>>,
    spare: Mutex<Vec<Vec<u8>>>,
}

impl PackWriters {
    fn start(store: Arc<dyn Store>) -> PackWriters {
        let n = if crate::store::on_network(&*store) {
            4
        } else {
            2
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
                            Ok((indexed, buf)) => {
                                lock(&done.packs).push((indexed, buf.len() as u64));
                                // Mapped pages, for a pack to come (a fresh buffer costs a
                                // page fault and a zeroed page per 4 KiB).
                                let mut spare = lock(&done.spare);
                                if spare.len() < 2 * n {
                                    spare.push(buf);
                                }
                            }
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
/// its index entry and its buffer (for the next pack).
fn put_pack(store: &dyn Store, p: FinishedPack, kind: BlobKind) -> Result<(IndexedPack, Vec<u8>)> {
    match store.put_pack(&pack::pack_path(&p.id), &p.bytes, kind.into()) {
        Err(Error::AlreadyExists(_)) | Ok(()) => {}
        Err(e) => return Err(e),
    }
    let indexed = IndexedPack {
        id: p.id,
        version: p.version,
        entries: p.entries,
    };
    Ok((indexed, p.bytes))
}

impl<'r> BlobSaver<'r> {
    pub fn new(repo: &'r Repository, compression: Compression) -> Self {
        BlobSaver {
            repo,
            compression,
            pending: (0..SHARDS).map(|_| Mutex::new(HashSet::new())).collect(),
            packers: (0..=DATA_PACKERS)
                .map(|_| Mutex::new(PackBuilder::default()))
                .collect(),
            written: Mutex::new(Vec::new()),
            stats: SaveStats::default(),
            writers: Mutex::new(None),
            failed: Mutex::new(None),
        }
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
        if self.repo.index.contains(&id)
            || !lock(&self.pending[id.0[0] as usize % SHARDS]).insert(id)
        {
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
            BlobKind::Data => rayon::current_thread_index().unwrap_or(0) % DATA_PACKERS,
            BlobKind::Tree => DATA_PACKERS,
        };
        let full = {
            let mut p = lock(&self.packers[slot]);
            p.add(id, kind, codec, data.len(), &sealed);
            if p.len() >= self.pack_target(kind) {
                let spare = (lock(&self.writers).as_ref())
                    .and_then(|w| lock(&w.done.spare).pop())
                    .unwrap_or_default();
                Some(std::mem::replace(&mut *p, PackBuilder::with_buffer(spare)))
            } else {
                None
            }
        };
        if let Some(p) = full {
            self.write_pack(p.finish(&self.repo.key, self.repo.version), kind)?;
        }
        Ok(true)
    }

    /// Size at which a pack is written. Data packers are one per worker, so with many
    /// workers each fills smaller packs (at least 4 MiB): memory for packs being filled
    /// stays near twice the configured pack size, whatever the number of workers.
    fn pack_target(&self, kind: BlobKind) -> usize {
        let size = self.repo.config.pack_size as usize;
        match kind {
            BlobKind::Tree => size,
            BlobKind::Data => {
                let workers = rayon::current_num_threads().clamp(1, DATA_PACKERS);
                (size * 2 / workers).clamp((4 << 20).min(size), size)
            }
        }
    }

    /// Hands a full pack to the writer threads (written synchronously if none could be
    /// started); an earlier write's error is returned here, so the backup stops soon.
    fn write_pack(&self, p: FinishedPack, kind: BlobKind) -> Result<()> {
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
                Ok(()) => return Ok(()),
                Err(std::sync::mpsc::SendError((p, _))) => p,
            },
            None => p,
        };
        let (indexed, buf) =
            put_pack(self.repo.store(), p, kind).map_err(|e| self.pack_failed(e))?;
        self.record(indexed, buf.len() as u64);
        Ok(())
    }

    /// Waits for the packs handed to the writer threads and records them; their first
    /// error, or an earlier one, if any.
    fn join_writers(&self) -> Result<()> {
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

    /// Writes the partly filled packs and one index file for everything written; returns
    /// the packs, for [`Repository::add_packs`].
    pub fn finish(&self) -> Result<PackList> {
        // The data packers' partly filled packs are joined into as few packs as fit the
        // pack size: one object instead of one per worker (a small incremental backup
        // writes one data pack, not four).
        let mut data = PackBuilder::default();
        for packer in &self.packers[..DATA_PACKERS] {
            let p = std::mem::take(&mut *lock(packer));
            if !data.is_empty() && data.len() + p.len() > self.repo.config.pack_size as usize {
                let full = std::mem::take(&mut data);
                self.write_pack(
                    full.finish(&self.repo.key, self.repo.version),
                    BlobKind::Data,
                )?;
            }
            data.absorb(p);
        }
        let trees = std::mem::take(&mut *lock(&self.packers[DATA_PACKERS]));
        for (p, kind) in [(data, BlobKind::Data), (trees, BlobKind::Tree)] {
            if !p.is_empty() {
                self.write_pack(p.finish(&self.repo.key, self.repo.version), kind)?;
            }
        }
        // Every pack is in the store before the index that names them.
        self.join_writers()?;
        let packs = std::mem::take(&mut *lock(&self.written));
        if !packs.is_empty() {
            let (_, size) = self.repo.write_index(&packs)?;
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

/// Locks a mutex, going on if another thread panicked while holding it (the data it
/// guards stays consistent: every critical section here is a single push or insert).
pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
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
mod tests {
    use super::*;
    use crate::store::MemoryStore;

    pub(crate) fn fast_init() -> InitOptions {
        InitOptions {
            kdf: KdfParams::FOR_TESTS,
            pack_size: 512,
            ..Default::default()
        }
    }

    /// Packs are written by background threads: every pack they wrote is in the index
    /// `finish` writes. A pack write that fails (the disk full, the bucket gone) makes
    /// `save` or `finish` fail, and `finish` fails even after a `save` returned that
    /// error (a backup goes on with its other folders, whose entries may name blobs of
    /// the lost pack): no index naming a pack that is not there, no snapshot.
    #[test]
    fn packs_written_in_the_background_are_indexed_and_their_errors_returned() {
        use crate::error::BackendKind;
        use crate::store::FaultyStore;
        let mem = Arc::new(MemoryStore::new());
        let store = Arc::new(FaultyStore::new(mem.clone()).only_under("data/"));
        let repo = Repository::init(store.clone(), b"pw", &fast_init()).unwrap();
        let saver = BlobSaver::new(&repo, Compression::None);
        let blobs: Vec<Vec<u8>> = (0..200u32).map(|i| i.to_le_bytes().repeat(100)).collect();
        let ids: Vec<Id> = (blobs.iter())
            .map(|b| saver.save(BlobKind::Data, b).unwrap())
            .collect();
        let packs = saver.finish().unwrap();
        assert!(packs.len() > 10, "{} packs", packs.len());
        assert_eq!(mem.list("data/").unwrap().len(), packs.len());
        drop(saver);
        let repo = Repository::open(store.clone(), b"pw").unwrap();
        for (id, b) in ids.iter().zip(&blobs) {
            assert_eq!(&repo.read_blob(id).unwrap(), b);
        }
        // One pack write fails; the others would succeed.
        store.fail_next(1, BackendKind::Other);
        let saver = BlobSaver::new(&repo, Compression::None);
        let mut first = None;
        for i in 0..200u32 {
            let saved = saver.save(BlobKind::Data, &(i + 1000).to_le_bytes().repeat(100));
            if let Err(e) = saved {
                first.get_or_insert(e.to_string());
            }
        }
        let first = first.expect("a save returns the failed pack write");
        assert!(first.contains("injected fault on data/"), "{first}");
        let err = saver.finish().unwrap_err().to_string();
        assert!(err.contains("an earlier pack write failed"), "{err}");
        assert!(err.contains("injected fault on data/"), "{err}");
        assert_eq!(mem.list("index/").unwrap().len(), 1, "no new index file");
    }

    #[test]
    fn save_and_read_blobs_across_reopen() {
        for (version, pad) in [
            (Version::V1, false),
            (Version::V2, false),
            (Version::V2, true),
        ] {
            save_and_read_blobs(version, pad);
        }
    }

    fn save_and_read_blobs(version: Version, pad: bool) {
        let store = Arc::new(MemoryStore::new());
        let opts = InitOptions {
            version,
            pad,
            ..fast_init()
        };
        let repo = Repository::init(store.clone(), b"pw", &opts).unwrap();
        let saver = BlobSaver::new(&repo, Compression::Zstd);
        let blobs: Vec<Vec<u8>> = (0..50)
            .map(|i| format!("blob number {i} ").repeat(i + 1).into_bytes())
            .collect();
        let ids: Vec<Id> = blobs
            .iter()
            .map(|b| saver.save(BlobKind::Data, b).unwrap())
            .collect();
        assert_eq!(saver.save(BlobKind::Data, &blobs[3]).unwrap(), ids[3]);
        saver.finish().unwrap();
        assert_eq!(saver.stats.data_blobs.load(Ordering::Relaxed), 50);
        assert!(
            store.list("data/").unwrap().len() > 1,
            "small pack size gives several packs"
        );
        let repo = Repository::open(store.clone(), b"pw").unwrap();
        assert_eq!((repo.version(), repo.config().pad), (version, pad));
        for (id, b) in ids.iter().zip(&blobs) {
            assert_eq!(&repo.read_blob(id).unwrap(), b);
            assert_eq!(&repo.read_blob_unverified(id).unwrap(), b);
        }
        if version == Version::V2 {
            // Every blob is sealed with its kind and id: under another id it does not open.
            let (loc, sealed, path) = repo.read_sealed(&ids[0]).unwrap();
            let e = repo
                .open_blob(&ids[1], &loc, Version::V2, sealed, &path)
                .unwrap_err();
            assert!(matches!(e, Error::Misplaced { .. }), "{e}");
            // The config is padded to a fixed size whatever its content.
            assert_eq!(
                store.get("config").unwrap().len(),
                CONFIG_PADDED_LEN + crate::repo::crypto::SEAL_OVERHEAD
            );
        }
        assert!(matches!(
            Repository::open(store.clone(), b"wrong"),
            Err(Error::WrongPassword)
        ));
        assert!(matches!(
            Repository::init(store, b"pw", &fast_init()),
            Err(Error::RepositoryExists(_))
        ));
    }

    /// The config's stated version must be one this code knows, and agree with how the
    /// config is sealed: a later format is refused by its number, a format-1 config
    /// claiming format 2 (or the other way round) is refused as corrupt.
    #[test]
    fn config_versions_are_checked() {
        let key = MasterKey::random();
        let config = |version| Config {
            version,
            id: "x".into(),
            compression: Compression::Zstd,
            chunker: ChunkerParams::default(),
            pack_size: 1 << 20,
            pad: false,
            format1_packs: false,
        };
        for v in [Version::V1, Version::V2] {
            let sealed = seal_config(&key, &config(v.number())).unwrap();
            assert_eq!(open_config(&key, sealed).unwrap().1, v);
        }
        let json = |v| serde_json::to_vec(&config(v)).unwrap();
        let later = key.seal_ad(&format::pad(json(3)), &Object::Config.aad());
        assert!(matches!(
            open_config(&key, later),
            Err(Error::UnsupportedVersion(3))
        ));
        let e = open_config(&key, key.seal(&json(2)))
            .unwrap_err()
            .to_string();
        assert!(e.contains("sealed as format 1"), "{e}");
        let v1_as_v2 = key.seal_ad(&format::pad(json(1)), &Object::Config.aad());
        let e = open_config(&key, v1_as_v2).unwrap_err().to_string();
        assert!(e.contains("sealed as format 2"), "{e}");
    }

    /// A pack written by a run that was killed, as such a run leaves it: no index.
    fn write_unindexed_pack(repo: &Repository, data: &[u8]) -> Id {
        let saver = BlobSaver::new(repo, Compression::Lz4);
        let id = saver.save(BlobKind::Data, data).unwrap();
        let p = std::mem::take(&mut *lock(&saver.packers[0]));
        saver
            .write_pack(p.finish(&repo.key, repo.version), BlobKind::Data)
            .unwrap();
        id
    }

    #[test]
    fn writer_records_say_when_to_look_for_unindexed_packs() {
        let store = Arc::new(MemoryStore::new());
        let locks = || store.list("locks/").unwrap();
        let mut repo = Repository::init(store.clone(), b"pw", &fast_init()).unwrap();
        // A run holds a lock while it runs, and one that ends leaves no record.
        let (found, mark) = repo.begin_backup().unwrap();
        assert!(found.is_empty());
        assert_eq!(locks().len(), 1);
        repo.end_backup(mark).unwrap();
        assert!(locks().is_empty());
        // Without any record, packs are not looked for (that is what the records save).
        let orphan = write_unindexed_pack(&repo, &[1u8; 5000]);
        let (found, mark) = repo.begin_backup().unwrap();
        assert!(found.is_empty());
        repo.end_backup(mark).unwrap();
        // A run killed after writing a pack leaves its lock, here of a process of this
        // host that no longer exists.
        let big = vec![7u8; 10_000];
        let id = write_unindexed_pack(&repo, &big);
        let gone = crate::repo::lock::LockRecord {
            hostname: crate::hostname(),
            pid: 4_000_000_000,
            time: crate::now_unix(),
            created: crate::now_unix(),
            exclusive: false,
            operation: "backup".into(),
            lock: "0".into(),
        };
        let json = serde_json::to_vec(&gone).unwrap();
        store
            .put(
                "locks/gone",
                &repo.seal_object(Object::Writer("locks/gone"), &json),
            )
            .unwrap();
        // And the record an older mailvault's live backup (this process) writes, which
        // must stay.
        let live = WriterRecord {
            hostname: crate::hostname(),
            pid: std::process::id(),
            started: crate::now_unix(),
        };
        store
            .put(
                "writers/live",
                &repo.seal_object(Object::Writer("live"), &serde_json::to_vec(&live).unwrap()),
            )
            .unwrap();
        let mut repo = Repository::open(store.clone(), b"pw").unwrap();
        assert!(!repo.index().contains(&id));
        let (found, mark) = repo.begin_backup().unwrap();
        // Both unindexed packs are found, the killed run's and the older orphan.
        assert_eq!(found.len(), 2);
        assert_eq!(repo.read_blob(&id).unwrap(), big);
        assert!(repo.index().contains(&orphan));
        repo.end_backup(mark).unwrap();
        assert!(locks().is_empty());
        let left: Vec<String> = (store.list("writers/").unwrap().into_iter())
            .map(|o| o.path)
            .collect();
        assert_eq!(left, ["writers/live"]);
    }

    #[test]
    fn unindexed_packs_are_recovered() {
        let store = Arc::new(MemoryStore::new());
        let repo = Repository::init(store.clone(), b"pw", &fast_init()).unwrap();
        let saver = BlobSaver::new(&repo, Compression::Lz4);
        let big = vec![7u8; 10_000];
        let id = saver.save(BlobKind::Data, &big).unwrap();
        // Write the pack but not the index, as a killed run would.
        let p = std::mem::take(&mut *lock(&saver.packers[0]));
        saver
            .write_pack(p.finish(&repo.key, repo.version), BlobKind::Data)
            .unwrap();
        drop(saver);
        let mut repo = Repository::open(store, b"pw").unwrap();
        assert!(!repo.index().contains(&id));
        let rec = repo.recover_unindexed_packs().unwrap();
        assert_eq!(rec.len(), 1);
        assert_eq!(repo.read_blob(&id).unwrap(), big);
    }

    /// A killed writer's record, as a gone process of this host leaves it.
    /// The lock of a backup that was killed: its process is gone.
    fn gone_writer_record(repo: &Repository, store: &MemoryStore) {
        let gone = crate::repo::lock::LockRecord {
            hostname: crate::hostname(),
            pid: 4_000_000_000,
            time: crate::now_unix(),
            created: crate::now_unix(),
            exclusive: false,
            operation: "backup".into(),
            lock: "0000gone".into(),
        };
        let path = format!("{}0000gone", crate::repo::lock::LOCKS);
        store
            .put(
                &path,
                &repo.seal_object(Object::Writer(&path), &serde_json::to_vec(&gone).unwrap()),
            )
            .unwrap();
    }

    /// Issue 10, item 24: recovery indexes a pack only when its name is the hash of its
    /// bytes and every blob hashes to its id; a junk file in writers/ is no stale record.
    #[test]
    fn recovery_verifies_packs_and_ignores_junk_in_writers() {
        let store = Arc::new(MemoryStore::new());
        let mut repo = Repository::init(store.clone(), b"pw", &fast_init()).unwrap();
        let good = vec![1u8; 3000];
        let good_id = write_unindexed_pack(&repo, &good);
        // Junk in writers/ alone starts no recovery, and stays.
        store.put("writers/README", b"not a record").unwrap();
        let (found, mark) = repo.begin_backup().unwrap();
        assert!(found.is_empty(), "junk in writers/ triggered a recovery");
        assert!(!repo.index().contains(&good_id));
        repo.end_backup(mark).unwrap();
        assert!(store.stat("writers/README").is_ok());

        // A pack whose header files a blob under another blob's id: its name matches
        // its bytes, its header opens, only the id check can tell.
        let wanted = vec![2u8; 3000];
        let wanted_id = repo.key.blob_id(&wanted);
        let mut b = PackBuilder::default();
        let other = vec![3u8; 3000];
        b.add(
            wanted_id,
            BlobKind::Data,
            compress::Codec::Raw,
            other.len(),
            &repo.seal_blob(BlobKind::Data, &wanted_id, other.as_slice().into()),
        );
        let bogus = b.finish(&repo.key, repo.version);
        store
            .put(&pack::pack_path(&bogus.id), &bogus.bytes)
            .unwrap();
        // A good pack stored under a name that is not its hash.
        let mut b = PackBuilder::default();
        let third = vec![4u8; 3000];
        let third_id = repo.key.blob_id(&third);
        b.add(
            third_id,
            BlobKind::Data,
            compress::Codec::Raw,
            third.len(),
            &repo.seal_blob(BlobKind::Data, &third_id, third.as_slice().into()),
        );
        let renamed = b.finish(&repo.key, repo.version);
        store
            .put(&pack::pack_path(&Id([0xab; 32])), &renamed.bytes)
            .unwrap();

        gone_writer_record(&repo, &store);
        let mut repo = Repository::open(store.clone(), b"pw").unwrap();
        let (found, mark) = repo.begin_backup().unwrap();
        let found: Vec<Id> = found.into_iter().map(|p| p.id).collect();
        assert!(repo.index().contains(&good_id));
        assert!(
            !repo.index().contains(&wanted_id),
            "a blob that does not match its id was indexed"
        );
        assert!(!repo.index().contains(&third_id));
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(repo.read_blob(&good_id).unwrap(), good);
        repo.end_backup(mark).unwrap();
        let left: Vec<String> = store
            .list("writers/")
            .unwrap()
            .into_iter()
            .map(|o| o.path)
            .collect();
        assert_eq!(left, ["writers/README"]);
    }

    /// Issue 10, item 10: `init` refuses a location with parts of a repository, and
    /// opening one without its config says so instead of suggesting `init`.
    #[test]
    fn a_repository_without_config_is_neither_opened_nor_initialized_over() {
        let store = Arc::new(MemoryStore::new());
        let repo = Repository::init(store.clone(), b"pw", &fast_init()).unwrap();
        write_unindexed_pack(&repo, b"some data");
        store.delete("config").unwrap();
        let e = Repository::open(store.clone(), b"pw").err().unwrap();
        assert!(matches!(e, Error::ConfigMissing { .. }), "{e}");
        let msg = e.to_string();
        assert!(
            msg.contains("config is missing") && msg.contains("keys/"),
            "{msg}"
        );
        assert!(!msg.contains("mailvault init` first"), "{msg}");
        let e = Repository::init(store.clone(), b"pw", &fast_init())
            .err()
            .unwrap();
        assert!(matches!(e, Error::ConfigMissing { .. }), "{e}");
        assert_eq!(
            store.list("keys/").unwrap().len(),
            1,
            "a second key was added"
        );
        // Any one part is enough.
        for part in [
            "data/aa/x",
            "index/x",
            "snapshots/x",
            "dicts/x",
            "writers/x",
        ] {
            let store = Arc::new(MemoryStore::new());
            store.put(part, b"x").unwrap();
            assert!(
                matches!(
                    Repository::init(store, b"pw", &fast_init()),
                    Err(Error::ConfigMissing { .. })
                ),
                "{part}"
            );
        }
        // An empty location has no repository, and init works there.
        let store = Arc::new(MemoryStore::new());
        assert!(matches!(
            Repository::open(store.clone(), b"pw"),
            Err(Error::NoRepository(_))
        ));
        Repository::init(store, b"pw", &fast_init()).unwrap();
    }

    fn put_key_file(store: &MemoryStore, kf: &KeyFile) -> String {
        let bytes = serde_json::to_vec_pretty(kf).unwrap();
        let path = format!("keys/{}", Id::of_file(&bytes));
        store.put(&path, &bytes).unwrap();
        path
    }

    /// Issue 10, item 25: with several key files each one's outcome is reported, a
    /// damaged one does not hide a wrong password, and key files outside the bounds or
    /// of another version are refused before any key derivation.
    #[test]
    fn every_key_file_outcome_is_reported_and_key_files_are_bounded() {
        let store = Arc::new(MemoryStore::new());
        let repo = Repository::init(store.clone(), b"pw", &fast_init()).unwrap();
        let good = store.list("keys/").unwrap()[0].path.clone();
        // A damaged second key file, sorting first.
        store.put("keys/0000", b"{ not json").unwrap();
        let e = Repository::open(store.clone(), b"wrong").err().unwrap();
        let msg = e.to_string();
        assert!(matches!(e, Error::NoKeyOpens(_)), "{msg}");
        assert!(msg.contains(&format!("{good}: wrong password")), "{msg}");
        assert!(
            msg.contains("keys/0000: ") && msg.contains("not a key file"),
            "{msg}"
        );
        // The right password opens despite the damaged file.
        Repository::open(store.clone(), b"pw").unwrap();
        store.delete("keys/0000").unwrap();

        let fast = fast_init().kdf;
        let forged = |f: &dyn Fn(&mut KeyFile)| {
            let mut kf = KeyFile::wrap(&repo.key, b"pw", fast, "h").unwrap();
            f(&mut kf);
            kf.checksum.clear();
            let json = serde_json::to_vec(&kf).unwrap();
            kf.checksum = blake3::hash(&json).to_hex().to_string();
            kf
        };
        for (what, kf) in [
            ("t_cost", forged(&|k| k.params.t_cost = 1000)),
            ("m_cost", forged(&|k| k.params.m_cost = u32::MAX)),
            ("p_cost", forged(&|k| k.params.p_cost = 1000)),
            ("version 2", forged(&|k| k.version = 2)),
        ] {
            let store = MemoryStore::new();
            let path = put_key_file(&store, &kf);
            let e = KeyFile::parse(&store.get(&path).unwrap(), &path)
                .err()
                .unwrap()
                .to_string();
            assert!(e.contains(what), "{what}: {e}");
            assert!(
                matches!(kf.unwrap(b"pw", &path), Err(Error::Corrupt { .. })),
                "{what}"
            );
        }
        assert!(KdfParams {
            m_cost: 5 << 20,
            t_cost: 1,
            p_cost: 1
        }
        .validate("k")
        .is_err());
        KdfParams::default().validate("k").unwrap();
    }

    /// Issue 10, item 9: a damaged file in snapshots/ costs that snapshot only.
    #[test]
    fn damaged_snapshot_files_cost_only_themselves() {
        let store = Arc::new(MemoryStore::new());
        let repo = Repository::init(store.clone(), b"pw", &fast_init()).unwrap();
        let saver = BlobSaver::new(&repo, Compression::Lz4);
        let root = saver
            .save(BlobKind::Tree, &tree::encode(&tree::RootTree::default()))
            .unwrap();
        saver.finish().unwrap();
        let snap = |time| Snapshot {
            id: Id::default(),
            version: 2,
            time,
            time_nanos: 0,
            hostname: "h".into(),
            source: "maildir:/x".into(),
            tags: Vec::new(),
            parent: None,
            root,
            summary: Default::default(),
            original: None,
        };
        let a = repo.save_snapshot(&snap(1)).unwrap();
        let b = repo.save_snapshot(&snap(2)).unwrap();
        let c = repo.save_snapshot(&snap(3)).unwrap();
        let mut bytes = store.get(&Snapshot::path(&c)).unwrap();
        bytes.truncate(bytes.len() / 2);
        store.overwrite(&Snapshot::path(&c), bytes);
        store.put("snapshots/README", b"hello").unwrap();
        let all = repo.snapshots().unwrap();
        let ids: Vec<Id> = all.iter().map(|s| s.id).collect();
        assert_eq!(ids, [a, b]);
        let mut damaged: Vec<&str> = all.damaged.iter().map(|d| d.path.as_str()).collect();
        damaged.sort();
        let want = Snapshot::path(&c);
        let mut want = [want.as_str(), "snapshots/README"];
        want.sort();
        assert_eq!(damaged, want);
        assert_eq!(repo.find_snapshot("latest").unwrap().id, b);
        assert_eq!(repo.find_snapshot(&a.to_hex()[..10]).unwrap().id, a);
        let e = repo.find_snapshot(&c.to_hex()[..10]).err().unwrap();
        assert!(matches!(e, Error::Misplaced { .. }), "{e}");
    }
}
