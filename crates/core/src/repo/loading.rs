//! Loading the index and the dictionaries at open, and reloading them when other
//! processes wrote new index files.

use crate::error::{Error, Result};
use crate::repo::compress::{self};
use crate::repo::id::Id;
use crate::repo::index::Index;
use crate::repo::named::Named;
use crate::repo::pack::PackList;
use crate::repo::Repository;
use crate::repo::{file_id, index};
use crate::store::put_content_named;
use crate::store::ObjectInfo;
use crate::store::Store;
use std::collections::HashSet;
use std::path::Path;

impl Repository {
    /// Loads `dicts/`; the dictionary in the first file by name is used for writing, so
    /// every client picks the same one.
    pub(super) fn load_dictionaries(&mut self) -> Result<()> {
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

    /// Reads every index file into a fresh index. Files are read and opened a batch at a
    /// time in parallel (a batch holds at most [`LOAD_BATCH`] bytes of files, or one
    /// larger file) and decoded straight into the index's array, so what loading holds at
    /// most is the array and one batch of opened files.
    ///
    /// With a local cache, a large index goes to a table there instead (`index::table`),
    /// and the index files an earlier open put in it are not read again; the table
    /// failing to be read or written only costs memory, as the cache's files cost
    /// requests.
    pub(super) fn load_index(&mut self) -> Result<()> {
        let files = self.store.list("index/")?;
        if let Some(dir) = self.store.local_dir() {
            match self.load_index_with_table(&files, &dir) {
                Ok(()) => return Ok(()),
                Err(e) => {
                    tracing::warn!("the index's local table: {e}; the index is held in memory");
                    self.index = Index::default();
                    self.index_files.clear();
                    self.index_errors.clear();
                    self.leftovers.clear();
                }
            }
        }
        let mut loader = index::Loader::with_size_hint(files.iter().map(|f| f.size).sum());
        self.read_index_files(&files, &mut loader)?;
        self.index = loader.finish();
        Ok(())
    }

    /// [`Self::load_index`] with the table in the cache directory `dir`.
    fn load_index_with_table(&mut self, files: &[ObjectInfo], dir: &Path) -> Result<()> {
        let name = index::table_name(self.version);
        index::table::sweep(dir, &name);
        let target = dir.join(&name);
        let listed: HashSet<Id> = files.iter().filter_map(|f| file_id(&f.path).ok()).collect();
        let (base, stale) = match target.exists() {
            false => (None, false),
            true => match index::table::Table::open(&target) {
                Ok(t) if t.header().files.iter().all(|f| listed.contains(f)) => (Some(t), false),
                Ok(_) => (None, true),
                Err(e) => {
                    tracing::debug!("{e}: made again");
                    (None, true)
                }
            },
        };
        let held: HashSet<Id> = (base.iter())
            .flat_map(|t| t.header().files.iter().copied())
            .collect();
        self.index_files.extend(held.iter().copied());
        let rest: Vec<ObjectInfo> = (files.iter())
            .filter(|f| file_id(&f.path).map_or(true, |id| !held.contains(&id)))
            .cloned()
            .collect();
        let bytes = rest.iter().map(|f| f.size).sum();
        let mut loader = index::Loader::with_table(base, dir, &target, stale, bytes);
        self.read_index_files(&rest, &mut loader)?;
        self.index = loader.finish_table(self.index_files.clone())?;
        Ok(())
    }

    /// Reads `files` into `loader`, a batch at a time; a file that cannot be read or
    /// decoded is recorded (`index_errors`, or a migration's leftover), never fatal. An
    /// error is the loader's own (its table's).
    fn read_index_files(&mut self, files: &[ObjectInfo], loader: &mut index::Loader) -> Result<()> {
        for batch in batches(files) {
            // Each file's path with its id and plaintext.
            type Opened<'a> = (&'a str, Result<(Id, Vec<u8>)>);
            let opened: Vec<Opened> = {
                use rayon::prelude::*;
                (batch.par_iter())
                    .map(|f| (f.path.as_str(), self.open_index_file(&f.path)))
                    .collect()
            };
            for (path, r) in opened {
                let r = r.and_then(|(id, plain)| {
                    loader.add_file(plain, self.version, path, self.pack_versions())?;
                    Ok(id)
                });
                match r {
                    Ok(id) => self.index_files.push(id),
                    Err(e) if self.migration_leftover(&e) => self.leftovers.push(path.into()),
                    // A damaged index file must not lock the user out: its blobs look
                    // absent (a backup stores them again, a restore names what it cannot
                    // find) and `check` reports it.
                    // The caller reports it (`index_errors`): a log line would say it twice.
                    Err(e) => {
                        tracing::debug!("index file {path} is unreadable: {e}");
                        self.index_errors.push((path.into(), e));
                    }
                }
                loader.spill_if_full()?;
            }
        }
        Ok(())
    }

    /// Reads and opens the index file at `path`: its id and plaintext.
    fn open_index_file(&self, path: &str) -> Result<(Id, Vec<u8>)> {
        let id = file_id(path)?;
        let sealed = self.store.get(path)?;
        Ok((id, self.open_named_read(Named::Index, path, sealed)?))
    }

    /// Reads, opens and decodes the index file at `path`: its id and the packs it lists.
    pub(crate) fn read_index_file(&self, path: &str) -> Result<(Id, PackList)> {
        let (id, plain) = self.open_index_file(path)?;
        Ok((id, self.decode_index(&plain, path)?))
    }

    /// Reads and opens the dictionary file at `path`.
    pub(crate) fn read_dictionary_file(&self, path: &str) -> Result<Vec<u8>> {
        self.open_named(Named::Dictionary, path, self.store.get(path)?)
    }

    /// Decodes an index file's plaintext, refusing a pack in a format this repository
    /// does not hold (as [`index::Loader::add_file`] does).
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

    /// Whether every index file read at open is still there (a prune removes the index
    /// files it replaced).
    pub fn index_is_current(&self) -> Result<bool> {
        Ok(self.gone_index_file()?.is_none())
    }

    /// An index file read at open that is no longer there.
    pub(super) fn gone_index_file(&self) -> Result<Option<String>> {
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
}

/// Bytes of index files [`Repository::load_index`] reads and opens at once.
const LOAD_BATCH: u64 = 16 << 20;

/// `files` cut into runs of at most [`LOAD_BATCH`] bytes (a larger file on its own).
fn batches(files: &[ObjectInfo]) -> impl Iterator<Item = &[ObjectInfo]> {
    let mut rest = files;
    std::iter::from_fn(move || {
        let mut bytes = 0;
        let n = (rest.iter())
            .take_while(|f| {
                bytes += f.size;
                bytes <= LOAD_BATCH
            })
            .count()
            .max(1)
            .min(rest.len());
        let (batch, tail) = rest.split_at(n);
        rest = tail;
        (!batch.is_empty()).then_some(batch)
    })
}
