//! A [`Store`] wrapper that keeps what every run reads again in a local directory: the
//! key files, index files, snapshots, dictionaries and tree packs.
//!
//! On-disk layout, under the cache root (`$XDG_CACHE_HOME/mailvault`, else
//! `$HOME/.cache/mailvault`, or `--cache-dir`):
//!
//! ```text
//! CACHEDIR.TAG                 the cache directory tag: backup tools skip the tree
//! locations/<blake3 hex>       the id of the repository last opened at a location (the
//!                              hash of the store's `location()`): key files before `bind`
//! <repository id>/keys/<id>    copies of repository objects, same relative path, each
//! <repository id>/index/<id>   its bytes exactly as in the repository followed by a
//! <repository id>/snapshots/.. 32-byte BLAKE3 trailer of those bytes
//! <repository id>/dicts/<id>
//! <repository id>/data/<xx>/<id>   tree packs only (never data packs)
//! ```
//!
//! The repository id is the config's (hex, checked: never a path outside the root). Files
//! are written to a temporary file (`.part-*`) in the same directory and renamed, so
//! processes sharing the cache never see half a file; files are 0600, directories 0700.
//! Every read checks the trailer (a tree pack once per process, then ranges are read in
//! place): a damaged file is removed, counted and fetched again, never an error, and the
//! cache failing to read or write only costs requests. `config`, `writers/`, `migrate/`
//! and data packs always go to the store. A listing of the store drops cached files it no
//! longer has (forgotten or pruned by another host).

use super::{
    Backend, ByteRange, Handle, Hint, Kind, Listing, ObjectInfo, PackKind, Store, WriteMode,
};
use crate::error::{Error, Result};
use serde::Serialize;
use std::collections::{HashMap, HashSet};
use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, FileExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::time::{Duration, SystemTime};

/// The bytes after each cached object: the BLAKE3 hash of the object.
const TRAILER: u64 = 32;

/// The directories whose objects are cached whole.
const WHOLE: [&str; 4] = ["keys", "index", "snapshots", "dicts"];

/// The standard cache directory tag (<https://bford.info/cachedir/>).
const CACHEDIR_TAG: &[u8] = b"Signature: 8a477f597d28d172789f06886806bc55\n\
# This file is a cache directory tag created by mailvault.\n\
# For information about cache directory tags, see: https://bford.info/cachedir/\n";

/// Prefix of temporary files; leftovers of killed processes older than this are removed
/// when their directory is pruned.
const PART: &str = ".part-";
const STALE_PART: Duration = Duration::from_secs(3600);

/// What the cache did during a run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct CacheStats {
    /// Objects (or tree-pack ranges) served from the cache.
    pub hits: u64,
    /// Cacheable objects fetched from the store (refetches included).
    pub misses: u64,
    /// Cached files found damaged, removed and fetched again.
    pub refetches: u64,
    /// Bytes served from the cache.
    pub bytes_served: u64,
}

#[derive(Default)]
struct Counters {
    hits: AtomicU64,
    misses: AtomicU64,
    refetches: AtomicU64,
    bytes_served: AtomicU64,
}

/// The local cache over a store. Until [`Hint::Bind`] names the repository it caches
/// nothing (it reads cached key files for a [`Listing::Cached`] of `keys/` only).
pub struct Cached {
    inner: Arc<dyn Backend>,
    root: PathBuf,
    /// `root/<repository id>` once bound.
    dir: RwLock<Option<PathBuf>>,
    /// Key files read, and the key listing made, before `bind`: written and pruned at bind.
    early_keys: Mutex<HashMap<String, Vec<u8>>>,
    early_listing: Mutex<Option<Vec<ObjectInfo>>>,
    /// Tree packs whose cached file this process has verified.
    verified: Mutex<HashSet<String>>,
    /// One lock per tree pack being fetched: two threads download it once.
    fetching: Mutex<HashMap<String, Arc<Mutex<()>>>>,
    /// The last listing of `snapshots/` and when it was made: a command lists snapshots
    /// several times (warnings at open, the parent, this host's record), and a listing a
    /// few seconds old, kept up to date with this process's own puts and deletes, is as
    /// good as a new one for all of them.
    snapshot_listing: Mutex<Option<(std::time::Instant, Vec<ObjectInfo>)>>,
    counts: Counters,
}

/// How long a listing of `snapshots/` is reused.
const LISTING_REUSE: std::time::Duration = std::time::Duration::from_secs(30);
const SNAPSHOTS: &str = "snapshots/";

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A poisoned lock only means another thread panicked; the data is still whole.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A repository id that is safe as a directory name: hex only.
fn valid_id(id: &str) -> bool {
    !id.is_empty() && id.len() <= 128 && id.bytes().all(|b| b.is_ascii_hexdigit())
}

/// A file name that is safe in the cache (and never a temporary file's).
fn safe_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 128
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// `keys/<id>`, `index/<id>`, `snapshots/<id>`, `dicts/<id>`: cached whole.
fn whole_object(path: &str) -> bool {
    match path.split_once('/') {
        Some((dir, name)) => WHOLE.contains(&dir) && safe_name(name),
        None => false,
    }
}

/// `data/<xx>/<id>`: a pack path, cached when it holds trees.
fn pack_object(path: &str) -> bool {
    let mut parts = path.split('/');
    matches!(
        (parts.next(), parts.next(), parts.next(), parts.next()),
        (Some("data"), Some(xx), Some(id), None) if safe_name(xx) && safe_name(id)
    )
}

/// `data` with its trailer if the trailer matches, else `None`.
fn strip_trailer(mut data: Vec<u8>) -> Option<Vec<u8>> {
    let n = data.len().checked_sub(TRAILER as usize)?;
    if blake3::hash(&data[..n]).as_bytes() != &data[n..] {
        return None;
    }
    data.truncate(n);
    Some(data)
}

fn make_dir(dir: &Path) -> io::Result<()> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}

/// Writes `parts` to `file` atomically (temporary file in the same directory, 0600, then
/// renamed over whatever is there).
fn write_atomic(file: &Path, parts: &[&[u8]]) -> io::Result<()> {
    let dir = file
        .parent()
        .ok_or_else(|| io::Error::other("no parent directory"))?;
    make_dir(dir)?;
    let mut tmp = tempfile::Builder::new().prefix(PART).tempfile_in(dir)?;
    for p in parts {
        tmp.write_all(p)?;
    }
    tmp.persist(file).map_err(|e| e.error)?;
    Ok(())
}

/// What a cached tree pack gave for a range.
enum PackRead {
    Hit(Vec<u8>),
    Miss,
    /// The verified file is shorter than the range: the store decides.
    OutOfRange,
}

impl Cached {
    /// A cache under `root` (created when first needed) over `inner`.
    pub fn new(inner: Arc<dyn Backend>, root: PathBuf) -> Cached {
        Cached {
            inner,
            root,
            dir: RwLock::new(None),
            early_keys: Mutex::new(HashMap::new()),
            early_listing: Mutex::new(None),
            verified: Mutex::new(HashSet::new()),
            fetching: Mutex::new(HashMap::new()),
            snapshot_listing: Mutex::new(None),
            counts: Counters::default(),
        }
    }

    /// What the cache did so far.
    pub fn stats(&self) -> CacheStats {
        let c = &self.counts;
        CacheStats {
            hits: c.hits.load(Relaxed),
            misses: c.misses.load(Relaxed),
            refetches: c.refetches.load(Relaxed),
            bytes_served: c.bytes_served.load(Relaxed),
        }
    }

    fn bound(&self) -> Option<PathBuf> {
        self.dir.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The pointer file for this store's location.
    fn pointer(&self) -> PathBuf {
        let hash = blake3::hash(self.inner.location().as_bytes());
        self.root.join("locations").join(hash.to_hex().as_str())
    }

    /// The cache directory of the repository last bound at this location, if any.
    fn pointed_dir(&self) -> Option<PathBuf> {
        let id = fs::read_to_string(self.pointer()).ok()?;
        let id = id.trim();
        valid_id(id).then(|| self.root.join(id))
    }

    fn hit(&self, bytes: usize) {
        self.counts.hits.fetch_add(1, Relaxed);
        self.counts.bytes_served.fetch_add(bytes as u64, Relaxed);
    }

    /// A damaged cache file: removed, counted.
    fn damaged(&self, file: &Path) {
        tracing::warn!(
            "cache file {} is damaged: removed, fetching it again",
            file.display()
        );
        self.counts.refetches.fetch_add(1, Relaxed);
        remove(file);
    }

    /// The cached object at `file`, verified; `None` when absent, unreadable or damaged.
    fn read_whole(&self, file: &Path) -> Option<Vec<u8>> {
        let data = match fs::read(file) {
            Ok(d) => d,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return None,
            Err(e) => {
                tracing::warn!("cache file {}: {e}", file.display());
                return None;
            }
        };
        match strip_trailer(data) {
            Some(d) => Some(d),
            None => {
                self.damaged(file);
                None
            }
        }
    }

    /// Keeps `data` at `file`; a failure is only logged (the cache is an optimization).
    fn keep(&self, file: &Path, data: &[u8]) -> bool {
        let hash = blake3::hash(data);
        match write_atomic(file, &[data, hash.as_bytes()]) {
            Ok(()) => true,
            Err(e) => {
                tracing::warn!("cannot write cache file {}: {e}", file.display());
                false
            }
        }
    }

    /// A whole object from the cache of `dir`, else from the store (then kept).
    fn get_whole(&self, dir: &Path, path: &str) -> Result<Vec<u8>> {
        let file = dir.join(path);
        if let Some(d) = self.read_whole(&file) {
            self.hit(d.len());
            return Ok(d);
        }
        self.counts.misses.fetch_add(1, Relaxed);
        let data = self.inner.get(path)?;
        self.keep(&file, &data);
        Ok(data)
    }

    /// A range of the cached tree pack at `file` (verified once per process).
    fn read_pack(&self, file: &Path, path: &str, offset: u64, len: u64) -> PackRead {
        let end = match offset.checked_add(len) {
            Some(e) => e,
            None => return PackRead::OutOfRange,
        };
        let slice = |d: &[u8]| d.get(offset as usize..end as usize).map(<[u8]>::to_vec);
        if !lock(&self.verified).contains(path) {
            let Some(whole) = self.read_whole(file) else {
                return PackRead::Miss;
            };
            lock(&self.verified).insert(path.to_string());
            return slice(&whole).map_or(PackRead::OutOfRange, PackRead::Hit);
        }
        let f = match fs::File::open(file) {
            Ok(f) => f,
            Err(e) => {
                if e.kind() != io::ErrorKind::NotFound {
                    tracing::warn!("cache file {}: {e}", file.display());
                }
                lock(&self.verified).remove(path);
                return PackRead::Miss;
            }
        };
        let size = match f.metadata() {
            Ok(m) => m.len().saturating_sub(TRAILER),
            Err(_) => return PackRead::Miss,
        };
        if end > size {
            return PackRead::OutOfRange;
        }
        let mut buf = vec![0; len as usize];
        match f.read_exact_at(&mut buf, offset) {
            Ok(()) => PackRead::Hit(buf),
            Err(e) => {
                tracing::warn!("cache file {}: {e}", file.display());
                PackRead::Miss
            }
        }
    }

    /// A range of a tree pack: from the cache, else the whole pack is fetched with one
    /// request, kept, and the range served from it.
    fn tree_range(&self, dir: &Path, path: &str, offset: u64, len: u64) -> Result<Vec<u8>> {
        let file = dir.join(path);
        let served = |r: PackRead| match r {
            PackRead::Hit(d) => {
                self.hit(d.len());
                Some(Ok(d))
            }
            PackRead::OutOfRange => {
                Some(self.inner.get_pack_range(path, offset, len, PackKind::Tree))
            }
            PackRead::Miss => None,
        };
        if let Some(r) = served(self.read_pack(&file, path, offset, len)) {
            return r;
        }
        // A miss: one thread fetches, the others wait for it and then read the cache.
        let gate = lock(&self.fetching)
            .entry(path.to_string())
            .or_default()
            .clone();
        let _held = lock(&gate);
        if let Some(r) = served(self.read_pack(&file, path, offset, len)) {
            return r;
        }
        self.counts.misses.fetch_add(1, Relaxed);
        let whole = self.inner.get(path)?;
        if self.keep(&file, &whole) {
            lock(&self.verified).insert(path.to_string());
        }
        let end = offset.checked_add(len).filter(|e| *e <= whole.len() as u64);
        match end {
            Some(end) => Ok(whole[offset as usize..end as usize].to_vec()),
            None => Err(Error::corrupt(
                path,
                format!("range {offset}+{len} past the end ({} bytes)", whole.len()),
            )),
        }
    }

    /// Removes the cached copy of `path`, if any.
    fn forget(&self, path: &str) {
        if let Some(dir) = self.bound() {
            if whole_object(path) || pack_object(path) {
                remove(&dir.join(path));
                lock(&self.verified).remove(path);
            }
        }
    }

    /// Removes cached files under `prefix` that `listing` (the store's, of `prefix`) does
    /// not have, or has with another size.
    fn prune(&self, dir: &Path, prefix: &str, listing: &[ObjectInfo]) {
        let listed: HashMap<&str, u64> =
            listing.iter().map(|o| (o.path.as_str(), o.size)).collect();
        for top in WHOLE.iter().chain(&["data"]) {
            let top_dir = format!("{top}/");
            if top_dir.starts_with(prefix) || prefix.starts_with(&top_dir) {
                self.prune_dir(&dir.join(top), &top_dir, prefix, &listed);
            }
        }
    }

    fn prune_dir(&self, dir: &Path, rel: &str, prefix: &str, listed: &HashMap<&str, u64>) {
        let Ok(entries) = fs::read_dir(dir) else {
            return;
        };
        for e in entries.flatten() {
            let name = e.file_name();
            let Some(name) = name.to_str() else { continue };
            let Ok(meta) = e.metadata() else { continue };
            let path = format!("{rel}{name}");
            if meta.is_dir() {
                if safe_name(name) && (path.starts_with(prefix) || prefix.starts_with(&path)) {
                    self.prune_dir(&e.path(), &format!("{path}/"), prefix, listed);
                }
                continue;
            }
            if name.starts_with(PART) {
                let old = meta
                    .modified()
                    .ok()
                    .and_then(|m| SystemTime::now().duration_since(m).ok())
                    .is_some_and(|age| age > STALE_PART);
                if old {
                    remove(&e.path());
                }
                continue;
            }
            if !safe_name(name) || !path.starts_with(prefix) {
                continue;
            }
            let size = meta.len().checked_sub(TRAILER);
            if listed.get(path.as_str()).copied() != size {
                remove(&e.path());
                lock(&self.verified).remove(&path);
            }
        }
    }

    /// The key files cached in `dir`.
    fn cached_keys(dir: &Path) -> Vec<ObjectInfo> {
        let Ok(entries) = fs::read_dir(dir.join("keys")) else {
            return Vec::new();
        };
        entries
            .flatten()
            .filter_map(|e| {
                let name = e.file_name().into_string().ok()?;
                let size = e.metadata().ok()?.len().checked_sub(TRAILER)?;
                safe_name(&name).then(|| ObjectInfo {
                    path: format!("keys/{name}"),
                    size,
                })
            })
            .collect()
    }

    /// Makes `root/<id>` the cache directory; false (and a warning) when it cannot be.
    fn open_dir(&self, id: &str) -> bool {
        if repository_dir(&self.root, id).is_none() {
            return false;
        }
        let pointer = self.pointer();
        if fs::read_to_string(&pointer).ok().as_deref() != Some(id) {
            if let Err(e) = write_atomic(&pointer, &[id.as_bytes()]) {
                tracing::warn!("cache {}: {e}", pointer.display());
            }
        }
        true
    }
}

/// The directory of repository `id` under the cache root `root`, made (0700, the root
/// tagged `CACHEDIR.TAG`) if it is not there; `None`, said in the log, when the id is not
/// hex (never a path out of the root) or it cannot be made.
pub(crate) fn repository_dir(root: &Path, id: &str) -> Option<PathBuf> {
    if !valid_id(id) {
        tracing::warn!("repository id {id:?} is not hex: running without a cache");
        return None;
    }
    let dir = root.join(id);
    let made = make_dir(&dir).and_then(|()| {
        let tag = root.join("CACHEDIR.TAG");
        match tag.exists() {
            true => Ok(()),
            false => write_atomic(&tag, &[CACHEDIR_TAG]),
        }
    });
    match made {
        Ok(()) => Some(dir),
        Err(e) => {
            tracing::warn!("cache {}: {e}: running without a cache", dir.display());
            None
        }
    }
}

/// Removes a cache file; absent is fine, anything else is logged.
fn remove(file: &Path) {
    if let Err(e) = fs::remove_file(file) {
        if e.kind() != io::ErrorKind::NotFound {
            tracing::warn!("cannot remove cache file {}: {e}", file.display());
        }
    }
}

impl Cached {
    /// A put (or a replace): the snapshot listing kept up to date, whole objects kept.
    fn put_object(&self, h: Handle<'_>, data: &[u8]) -> Result<()> {
        self.inner.write(h, data, WriteMode::Create)?;
        let path = h.path();
        if let Some((_, list)) = lock(&self.snapshot_listing)
            .as_mut()
            .filter(|_| path.starts_with(SNAPSHOTS))
        {
            list.push(ObjectInfo {
                path: path.to_string(),
                size: data.len() as u64,
            });
        }
        if let Some(dir) = self.bound().filter(|_| whole_object(path)) {
            self.keep(&dir.join(path), data);
        }
        Ok(())
    }

    /// A pack: tree packs are kept.
    fn put_pack_kept(&self, h: Handle<'_>, data: &[u8]) -> Result<()> {
        self.inner.write(h, data, WriteMode::Create)?;
        let path = h.path();
        if h.kind() == Kind::Pack(Some(PackKind::Tree)) && pack_object(path) {
            if let Some(dir) = self.bound() {
                if self.keep(&dir.join(path), data) {
                    lock(&self.verified).insert(path.to_string());
                }
            }
        }
        Ok(())
    }

    /// A whole object: from the cache when it is cached.
    fn get_object(&self, h: Handle<'_>) -> Result<Vec<u8>> {
        let path = h.path();
        if !whole_object(path) {
            return self.inner.read(h, None);
        }
        if let Some(dir) = self.bound() {
            return self.get_whole(&dir, path);
        }
        if h.kind() != Kind::Key {
            return self.inner.read(h, None);
        }
        // A key file before `bind` (while the repository is opened): from the cache of
        // the repository last seen here, else from the store, kept for `bind`.
        if let Some(d) = self
            .pointed_dir()
            .and_then(|dir| self.read_whole(&dir.join(path)))
        {
            self.hit(d.len());
            return Ok(d);
        }
        let data = self.inner.read(h, None)?;
        lock(&self.early_keys).insert(path.to_string(), data.clone());
        Ok(data)
    }

    /// A fresh listing (reused for `snapshots/`), pruning what the cache has and the
    /// store no longer does.
    fn list_fresh(&self, prefix: &str) -> Result<Vec<ObjectInfo>> {
        if prefix == SNAPSHOTS && self.bound().is_some() {
            if let Some((at, list)) = lock(&self.snapshot_listing).as_ref() {
                if at.elapsed() < LISTING_REUSE {
                    return Ok(list.clone());
                }
            }
        }
        let listing = self.inner.listing(prefix, Listing::Fresh)?;
        if prefix == SNAPSHOTS {
            *lock(&self.snapshot_listing) = Some((std::time::Instant::now(), listing.clone()));
        }
        match self.bound() {
            Some(dir) => self.prune(&dir, prefix, &listing),
            None if prefix == "keys/" => *lock(&self.early_listing) = Some(listing.clone()),
            None => {}
        }
        Ok(listing)
    }

    /// Names the repository: key files read before are kept, the cache directory opened.
    fn bind_dir(&self, repository_id: &str) {
        if !valid_id(repository_id) {
            tracing::warn!("repository id {repository_id:?} is not hex: running without a cache");
            return;
        }
        if !self.open_dir(repository_id) {
            return;
        }
        let dir = self.root.join(repository_id);
        for (path, data) in lock(&self.early_keys).drain() {
            self.keep(&dir.join(&path), &data);
        }
        if let Some(listing) = lock(&self.early_listing).take() {
            self.prune(&dir, "keys/", &listing);
        }
        *self.dir.write().unwrap_or_else(|p| p.into_inner()) = Some(dir);
    }
}

impl Backend for Cached {
    fn write(&self, h: Handle<'_>, data: &[u8], mode: WriteMode) -> Result<()> {
        match (mode, h.kind()) {
            (WriteMode::Replace, _) => {
                self.forget(h.path());
                self.inner.write(h, data, mode)
            }
            (WriteMode::Create, Kind::Pack(Some(_))) => self.put_pack_kept(h, data),
            (WriteMode::Create, _) => self.put_object(h, data),
        }
    }
    fn read(&self, h: Handle<'_>, range: Option<ByteRange>) -> Result<Vec<u8>> {
        let Some(r) = range else {
            return self.get_object(h);
        };
        match self.bound() {
            Some(dir) if h.kind() == Kind::Pack(Some(PackKind::Tree)) && pack_object(h.path()) => {
                self.tree_range(&dir, h.path(), r.offset, r.len)
            }
            _ => self.inner.read(h, range),
        }
    }
    fn listing(&self, prefix: &str, from: Listing) -> Result<Vec<ObjectInfo>> {
        if from == Listing::Cached && prefix == "keys/" {
            if let Some(dir) = self.bound().or_else(|| self.pointed_dir()) {
                let keys = Cached::cached_keys(&dir);
                if !keys.is_empty() {
                    return Ok(keys);
                }
            }
        }
        self.list_fresh(prefix)
    }
    fn remove(&self, h: Handle<'_>) -> Result<()> {
        self.inner.remove(h)?;
        if let Some((_, list)) = lock(&self.snapshot_listing).as_mut() {
            list.retain(|o| o.path != h.path());
        }
        self.forget(h.path());
        Ok(())
    }
    fn size(&self, h: Handle<'_>) -> Result<u64> {
        self.inner.size(h)
    }
    fn location(&self) -> String {
        self.inner.location()
    }
    fn flush(&self) -> Result<()> {
        self.inner.flush()
    }
    fn local_dir(&self) -> Option<std::path::PathBuf> {
        self.bound()
    }
    fn hint(&self, hint: Hint<'_>) {
        match hint {
            Hint::RefreshListings => *lock(&self.snapshot_listing) = None,
            Hint::Prefetch(h, _) => {
                let path = h.path();
                if pack_object(path) && self.bound().is_some_and(|d| d.join(path).exists()) {
                    // Served from the cache.
                    return;
                }
            }
            Hint::Bind(_) => {}
        }
        self.inner.hint(hint);
        if let Hint::Bind(id) = hint {
            self.bind_dir(id);
        }
    }
}

#[cfg(test)]
mod tests;
