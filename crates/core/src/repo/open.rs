//! Creating and opening a repository: init, open with a password, and the guards around an
//! unfinished migration or a downgraded config.

use crate::error::{Error, Result};
use crate::repo::compress::{self};
use crate::repo::crypto::{KeyFile, MasterKey};
use crate::repo::format::BlobKind;
use crate::repo::format::Version;
use crate::repo::id::Id;
use crate::repo::index::Index;
use crate::repo::lock::LockOptions;
use crate::repo::named::{open_config, seal_config};
use crate::repo::split::{Chunker, ChunkerParams};
use crate::repo::{pack, UNFINISHED_MIGRATION};
use crate::repo::{Config, InitOptions, Repository, MIGRATE_STATE};
use crate::store::Backend;
use crate::store::{ObjectInfo, Store};
use std::sync::Arc;

impl Repository {
    /// Creates a new repository in an empty location.
    pub fn init(
        store: Arc<dyn Backend>,
        password: &[u8],
        opts: &InitOptions,
    ) -> Result<Repository> {
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
    fn unloaded(store: Arc<dyn Backend>, key: MasterKey, config: Config, version: Version) -> Self {
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
            append_only: false,
            object_lock: None,
            lock_policy: Default::default(),
        }
    }

    /// Opens a repository with a password and loads its index.
    pub fn open(store: Arc<dyn Backend>, password: &[u8]) -> Result<Repository> {
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
}

/// [`Repository::seal_object`] for a given key and format (also before a repository is
/// open: the config).
/// Unlocks a key file of `keys` with the password and opens the config with its key.
fn open_with_keys(
    store: &dyn Backend,
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

/// The chunker a repository of `version` cuts with.
fn chunker_for(key: &MasterKey, config: &Config, version: Version) -> Chunker {
    match version {
        Version::V1 => Chunker::public(config.chunker),
        Version::V2 => Chunker::keyed(config.chunker, key.gear_table()),
    }
}

/// The master key from the first key file that opens with `password`. When none does,
/// every key file's outcome is reported: a damaged key file must not hide that the
/// password is wrong for the others, nor a wrong password that a key file is damaged.
fn unlock(store: &dyn Backend, keys: &[ObjectInfo], password: &[u8]) -> Result<MasterKey> {
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
const REPOSITORY_DIRS: [&str; 9] = [
    "keys/",
    "data/",
    "index/",
    "snapshots/",
    "dicts/",
    "writers/",
    "locks/",
    "forgotten/",
    "audit/",
];

/// Which of the repository's directories hold files (`"keys/, data/"`), if any: a location
/// without `config` but with these is a repository that lost its config, not an empty one.
fn repository_parts(store: &dyn Backend) -> Result<Option<String>> {
    let mut parts = Vec::new();
    for dir in REPOSITORY_DIRS {
        if !store.list(dir)?.is_empty() {
            parts.push(dir);
        }
    }
    Ok((!parts.is_empty()).then(|| parts.join(", ")))
}
