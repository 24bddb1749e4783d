//! Storage backends: a small trait over named, immutable objects.
//!
//! Objects are named by [`Handle`]s: a [`Kind`] (the top-level directory: `config`,
//! `keys/`, `data/`, `index/`, `snapshots/`…) and the `/`-separated path relative to the
//! repository root. [`Backend`] is the small core every store and every wrapper
//! implements (write, read, list, remove, size, location, flush, and one method for
//! hints); [`Store`], implemented for every backend, gives callers the same operations by
//! path (`put`, `get`, `list`…). Every write is atomic and refuses to replace an existing
//! object ([`WriteMode::Create`]), which is what content-named, write-once files need and
//! what S3 offers with conditional puts (`If-None-Match: *`). The one exception is
//! [`WriteMode::Replace`], an atomic overwrite for `config` (S3: a plain put).

mod append_only;
mod cache;
#[cfg(any(test, feature = "testing"))]
mod faulty;
mod limit;
mod local;
#[cfg(any(test, feature = "testing"))]
mod memory;
mod metered;
pub mod object_lock;
mod retry;
mod s3;
mod s3_calls;
mod stack;
mod uploads;

pub use append_only::AppendOnly;
pub use cache::{CacheStats, Cached};
#[cfg(any(test, feature = "testing"))]
pub use faulty::FaultyStore;
pub use limit::Limit;
pub use local::LocalStore;
#[cfg(any(test, feature = "testing"))]
pub use memory::MemoryStore;
pub use metered::{Metered, RequestCounts};
pub use object_lock::{LockMode, LockPolicy, ObjectLock, Retention};
pub use retry::{Retry, RetryPolicy, RetryStats};
pub use s3::{parse_url as parse_s3_url, Addressing, Credentials, S3Options, S3Store};
pub use stack::{default_cache_root, Stack, StackOptions, StoreUsage, DEFAULT_CONNECTIONS};
pub use uploads::Uploads;

use crate::error::Result;

/// What a pack holds, as a hint to the store: a store with a local cache keeps the packs
/// of tree blobs, which every later backup and restore reads again.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PackKind {
    /// Message content.
    Data,
    /// Trees: the metadata every run reads.
    Tree,
}

/// What an object is: the top-level directory of its path (`docs/format.md`, Layout).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// `config`.
    Config,
    /// `keys/<id>`.
    Key,
    /// `data/<xx>/<id>`, with what it holds when the caller says so (a hint: a path
    /// alone does not tell).
    Pack(Option<PackKind>),
    /// `index/<id>`.
    Index,
    /// `snapshots/<id>`.
    Snapshot,
    /// `dicts/<id>`.
    Dictionary,
    /// `locks/<random>`.
    Lock,
    /// `writers/<random>`.
    Writer,
    /// `forgotten/<id>`.
    Forgotten,
    /// `search/<id>`: splits of the search index.
    Search,
    /// `audit/<id>`: the web UI's audit records.
    Audit,
    /// `migrate/state`.
    Migrate,
    /// `damaged/...`: what the repairs set aside.
    Damaged,
    /// Anything else: a file outside the known directories, still listed, read and
    /// removed like any other (`check` reports them).
    Foreign,
}

impl Kind {
    /// The kind of the object at `path`.
    pub fn of(path: &str) -> Kind {
        let Some((dir, name)) = path.split_once('/') else {
            return match path {
                "config" => Kind::Config,
                _ => Kind::Foreign,
            };
        };
        if name.is_empty() {
            return Kind::Foreign;
        }
        match dir {
            "keys" => Kind::Key,
            "data" => Kind::Pack(None),
            "index" => Kind::Index,
            "snapshots" => Kind::Snapshot,
            "dicts" => Kind::Dictionary,
            "locks" => Kind::Lock,
            "writers" => Kind::Writer,
            "forgotten" => Kind::Forgotten,
            "search" => Kind::Search,
            "audit" => Kind::Audit,
            "migrate" => Kind::Migrate,
            "damaged" => Kind::Damaged,
            _ => Kind::Foreign,
        }
    }
}

/// One object: its kind and its path, which it is printed as. Every path has a handle
/// (unknown ones are [`Kind::Foreign`]), and a handle gives its path back unchanged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Handle<'a> {
    kind: Kind,
    path: &'a str,
}

impl<'a> Handle<'a> {
    /// The object at `path`, of the kind its directory says.
    pub fn new(path: &'a str) -> Handle<'a> {
        Handle {
            kind: Kind::of(path),
            path,
        }
    }

    /// A pack at `path` holding blobs of one `kind`.
    pub fn pack(path: &'a str, kind: PackKind) -> Handle<'a> {
        Handle {
            kind: Kind::Pack(Some(kind)),
            path,
        }
    }

    pub fn kind(&self) -> Kind {
        self.kind
    }

    /// The path relative to the repository root.
    pub fn path(&self) -> &'a str {
        self.path
    }

    /// The path below the top-level directory (`ab/abcdef` for `data/ab/abcdef`); the
    /// whole path for `config` and foreign files.
    pub fn name(&self) -> &'a str {
        match self.kind {
            Kind::Config | Kind::Foreign => self.path,
            _ => self.path.split_once('/').map_or(self.path, |(_, n)| n),
        }
    }
}

impl std::fmt::Display for Handle<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.path)
    }
}

/// One object as listed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectInfo {
    pub path: String,
    pub size: u64,
}

impl ObjectInfo {
    pub fn handle(&self) -> Handle<'_> {
        Handle::new(&self.path)
    }
}

/// `len` bytes at `offset`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ByteRange {
    pub offset: u64,
    pub len: u64,
}

/// How a write treats an object already there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteMode {
    /// Fails with [`crate::Error::AlreadyExists`]: content-named, write-once objects.
    Create,
    /// Overwrites it, atomically and durably (when the write returns): readers see the
    /// old bytes or the new, never a mix or nothing. Only `config` is ever replaced, at
    /// the commit point of `mailvault migrate`.
    Replace,
}

/// Where a listing may come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Listing {
    /// The storage itself.
    Fresh,
    /// A local cache where the store has one: only for directories whose objects are
    /// added under new names and never changed (`keys/`), where a listing that misses
    /// the newest objects costs a second, fresh listing and nothing else.
    Cached,
}

/// What a store may use and needs not answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hint<'a> {
    /// These bytes will be read soon: a store that can fetch them in the background
    /// does (the local store asks the kernel to read ahead).
    Prefetch(Handle<'a>, ByteRange),
    /// The store holds the repository with this config id, now open: a local cache
    /// keeps its files under that id.
    Bind(&'a str),
    /// Listings kept for reuse (a cache's listing of `snapshots/`) are stale: from now
    /// on every listing is fresh. Given once a lock on the repository is taken, since
    /// what was listed before may have changed while the lock was waited for.
    RefreshListings,
}

/// The storage a repository lives on: the core every store and every wrapper implements.
/// Every method is required, so a wrapper says what it does with each; what the caller
/// knows about an object (its kind, a pack's content, a cached listing) rides in the
/// arguments, so a wrapper that passes them on passes every hint on. Callers use the
/// conveniences of [`Store`].
pub trait Backend: Send + Sync {
    /// Writes `data` at `handle` atomically: readers see all of it or nothing.
    fn write(&self, handle: Handle<'_>, data: &[u8], mode: WriteMode) -> Result<()>;
    /// Reads a whole object, or a range of it (an error if the object is shorter);
    /// [`crate::Error::NotFound`] if absent.
    fn read(&self, handle: Handle<'_>, range: Option<ByteRange>) -> Result<Vec<u8>>;
    /// Lists objects whose path starts with `prefix` (a directory such as `data/`, or
    /// `""`: all), recursively, in no particular order. Incomplete uploads are never
    /// listed.
    fn listing(&self, prefix: &str, from: Listing) -> Result<Vec<ObjectInfo>>;
    /// Removes an object; removing an absent object is not an error.
    fn remove(&self, handle: Handle<'_>) -> Result<()>;
    /// The size of an object; [`crate::Error::NotFound`] if absent.
    fn size(&self, handle: Handle<'_>) -> Result<u64>;
    /// Where the store is, for messages.
    fn location(&self) -> String;
    /// Makes every write (and remove) so far durable, names included: called before an
    /// object that refers to earlier ones (an index to its packs, a snapshot to its
    /// index) and after a snapshot. The local store fsyncs each directory it has linked
    /// new files into since the last call; object stores are durable on a put's success.
    fn flush(&self) -> Result<()>;
    /// Takes a [`Hint`]: errors are ignored and nothing is returned.
    fn hint(&self, hint: Hint<'_>);
    /// The local directory a cache keeps this repository's files in, once [`Hint::Bind`]
    /// named it (`<cache root>/<repository id>`): where the repository's other local
    /// state lives too (the index's table, `repo::index`). `None` without a cache.
    fn local_dir(&self) -> Option<std::path::PathBuf>;
}

/// The conveniences over [`Backend`] that callers use, by path. Every backend has them
/// and none can change them: a wrapper implements [`Backend`] only. Hold a store as
/// `dyn Backend` (never `dyn Store`: the blanket implementation below gives `dyn Backend`
/// these methods, and a `dyn Store` would have two implementations of them).
pub trait Store: Backend {
    /// Writes `data` at `path`; [`crate::Error::AlreadyExists`] if the object exists.
    fn put(&self, path: &str, data: &[u8]) -> Result<()> {
        self.write(Handle::new(path), data, WriteMode::Create)
    }
    /// Writes `data` at `path` whether or not an object is there ([`WriteMode::Replace`]).
    fn replace(&self, path: &str, data: &[u8]) -> Result<()> {
        self.write(Handle::new(path), data, WriteMode::Replace)
    }
    /// Reads a whole object.
    fn get(&self, path: &str) -> Result<Vec<u8>> {
        self.read(Handle::new(path), None)
    }
    /// Reads `len` bytes at `offset`; an error if the object is shorter.
    fn get_range(&self, path: &str, offset: u64, len: u64) -> Result<Vec<u8>> {
        self.read(Handle::new(path), Some(ByteRange { offset, len }))
    }
    /// Lists `prefix` fresh.
    fn list(&self, prefix: &str) -> Result<Vec<ObjectInfo>> {
        self.listing(prefix, Listing::Fresh)
    }
    /// Lists `prefix`, from a local cache where the store has one ([`Listing::Cached`]).
    fn list_cached(&self, prefix: &str) -> Result<Vec<ObjectInfo>> {
        self.listing(prefix, Listing::Cached)
    }
    /// Removes an object; absent is not an error.
    fn delete(&self, path: &str) -> Result<()> {
        self.remove(Handle::new(path))
    }
    /// The size of an object.
    fn stat(&self, path: &str) -> Result<u64> {
        self.size(Handle::new(path))
    }
    /// Puts a pack holding blobs of one `kind`: a store with a local cache keeps tree
    /// packs, which every later backup and restore reads again.
    fn put_pack(&self, path: &str, data: &[u8], kind: PackKind) -> Result<()> {
        self.write(Handle::pack(path, kind), data, WriteMode::Create)
    }
    /// Reads a range of a pack holding blobs of one `kind`: a store with a local cache
    /// serves tree packs from it, fetching a missing one whole.
    fn get_pack_range(&self, path: &str, offset: u64, len: u64, kind: PackKind) -> Result<Vec<u8>> {
        self.read(Handle::pack(path, kind), Some(ByteRange { offset, len }))
    }
    /// [`Hint::Prefetch`].
    fn prefetch(&self, path: &str, offset: u64, len: u64) {
        self.hint(Hint::Prefetch(Handle::new(path), ByteRange { offset, len }))
    }
    /// [`Hint::Bind`].
    fn bind(&self, repository_id: &str) {
        self.hint(Hint::Bind(repository_id))
    }
    /// [`Hint::RefreshListings`].
    fn refresh_listings(&self) {
        self.hint(Hint::RefreshListings)
    }
}

impl<B: Backend + ?Sized> Store for B {}

/// Whether a store's requests wait on the network (object storage), so that more of them
/// in flight pay: readers and pack writers are sized by it.
pub fn on_network(store: &dyn Backend) -> bool {
    store.location().starts_with("s3:")
}

/// Puts an object that is named by its content: an existing one is the same bytes.
pub fn put_content_named(store: &dyn Backend, path: &str, data: &[u8]) -> Result<()> {
    match store.put(path, data) {
        Err(crate::Error::AlreadyExists(_)) => Ok(()),
        other => other,
    }
}

#[cfg(any(test, feature = "testing"))]
#[allow(clippy::unwrap_used)] // test support: a failed step fails the test that runs it
pub mod conformance {
    //! The conformance suite every [`Backend`], store or wrapper, must pass (feature `testing`
    //! makes it public, for the S3 store on MinIO in `tests/s3_store.rs`). It needs an
    //! empty store.
    use super::*;
    use crate::Error;

    pub fn run(store: &dyn Backend) {
        assert!(store.list("").unwrap().is_empty());
        store.put("config", b"cfg").unwrap();
        store.put("data/ab/abcdef", b"0123456789").unwrap();
        store.put("data/cd/cdef01", b"xyz").unwrap();
        store.put("index/1111", b"").unwrap();
        assert!(matches!(
            store.put("config", b"other"),
            Err(Error::AlreadyExists(_))
        ));
        assert_eq!(store.get("config").unwrap(), b"cfg");
        assert_eq!(store.get_range("data/ab/abcdef", 2, 3).unwrap(), b"234");
        assert_eq!(
            store.get_range("data/ab/abcdef", 0, 10).unwrap(),
            b"0123456789"
        );
        assert!(store.get_range("data/ab/abcdef", 8, 5).is_err());
        assert!(matches!(store.get("nope"), Err(Error::NotFound(_))));
        assert!(matches!(store.stat("nope"), Err(Error::NotFound(_))));
        assert_eq!(store.stat("data/cd/cdef01").unwrap(), 3);
        assert_eq!(store.get("index/1111").unwrap(), b"");
        let mut data: Vec<_> = store.list("data/").unwrap();
        data.sort_by(|a, b| a.path.cmp(&b.path));
        assert_eq!(
            data,
            vec![
                ObjectInfo {
                    path: "data/ab/abcdef".into(),
                    size: 10
                },
                ObjectInfo {
                    path: "data/cd/cdef01".into(),
                    size: 3
                },
            ]
        );
        assert_eq!(store.list("index/").unwrap().len(), 1);
        assert!(store.list("snapshots/").unwrap().is_empty());
        store.delete("data/cd/cdef01").unwrap();
        store.delete("data/cd/cdef01").unwrap();
        assert_eq!(store.list("data/").unwrap().len(), 1);
        put_content_named(store, "data/ab/abcdef", b"0123456789").unwrap();
        // Replace overwrites whole, and creates.
        store.replace("config", b"new config").unwrap();
        assert_eq!(store.get("config").unwrap(), b"new config");
        store.replace("config", b"c").unwrap();
        assert_eq!(store.get("config").unwrap(), b"c");
        assert_eq!(store.stat("config").unwrap(), 1);
        store.replace("migrate/x", b"1").unwrap();
        assert_eq!(store.get("migrate/x").unwrap(), b"1");
        store.delete("migrate/x").unwrap();
        assert!(store
            .list("")
            .unwrap()
            .iter()
            .all(|o| !o.path.starts_with("migrate/")));
        // Many writers at once: every put lands whole.
        std::thread::scope(|s| {
            for t in 0..4 {
                s.spawn(move || {
                    for i in 0..25 {
                        let body = vec![t as u8; 1000 + i];
                        store.put(&format!("snapshots/{t}-{i}"), &body).unwrap();
                    }
                });
            }
        });
        let snaps = store.list("snapshots/").unwrap();
        assert_eq!(snaps.len(), 100);
        for o in snaps {
            assert_eq!(o.handle().kind(), Kind::Snapshot);
            let body = store.get(&o.path).unwrap();
            assert_eq!(body.len() as u64, o.size);
        }
        hints(store);
        foreign(store);
    }

    /// Packs put and read with their kind, and every hint: the same objects as without.
    fn hints(store: &dyn Backend) {
        store
            .put_pack("data/ef/ef01", b"tree pack", PackKind::Tree)
            .unwrap();
        store
            .put_pack("data/ef/ef02", b"data pack", PackKind::Data)
            .unwrap();
        assert!(matches!(
            store.put_pack("data/ef/ef01", b"other", PackKind::Tree),
            Err(Error::AlreadyExists(_))
        ));
        store.prefetch("data/ef/ef01", 0, 4);
        store.prefetch("data/ef/ef02", 0, 4);
        store.flush().unwrap();
        let tree = store.get_pack_range("data/ef/ef01", 5, 4, PackKind::Tree);
        assert_eq!(tree.unwrap(), b"pack");
        let data = store.get_pack_range("data/ef/ef02", 0, 4, PackKind::Data);
        assert_eq!(data.unwrap(), b"data");
        assert_eq!(store.get("data/ef/ef01").unwrap(), b"tree pack");
        assert_eq!(store.stat("data/ef/ef02").unwrap(), 9);
        store.put("keys/k1", b"key").unwrap();
        let keys = store.list_cached("keys/").unwrap();
        assert!(keys.iter().any(|o| o.path == "keys/k1"), "{keys:?}");
        store.refresh_listings();
        assert_eq!(store.list("snapshots/").unwrap().len(), 100);
        store.delete("snapshots/0-0").unwrap();
        assert_eq!(store.list("snapshots/").unwrap().len(), 99);
    }

    /// Files outside the known directories are listed, read and removed like the others.
    fn foreign(store: &dyn Backend) {
        let stray = ["stray", "other/x/y", "data/readme.txt"];
        for p in stray {
            store.put(p, b"?").unwrap();
        }
        let all = store.list("").unwrap();
        for p in stray {
            let o = all.iter().find(|o| o.path == p);
            assert_eq!(o.map(|o| o.size), Some(1), "{p}");
            assert_eq!(store.get(p).unwrap(), b"?");
        }
        let data = store.list("data/").unwrap();
        assert!(data.iter().any(|o| o.path == "data/readme.txt"));
        for p in stray {
            store.delete(p).unwrap();
        }
        let all = store.list("").unwrap();
        assert!(all.iter().all(|o| !stray.contains(&o.path.as_str())));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_path_has_a_handle_that_gives_it_back() {
        let cases = [
            ("config", Kind::Config, "config"),
            ("keys/k", Kind::Key, "k"),
            ("data/ab/abcd", Kind::Pack(None), "ab/abcd"),
            ("index/i", Kind::Index, "i"),
            ("snapshots/s", Kind::Snapshot, "s"),
            ("dicts/d", Kind::Dictionary, "d"),
            ("locks/l", Kind::Lock, "l"),
            ("writers/w", Kind::Writer, "w"),
            ("forgotten/f", Kind::Forgotten, "f"),
            ("search/s", Kind::Search, "s"),
            ("audit/a", Kind::Audit, "a"),
            ("migrate/state", Kind::Migrate, "state"),
            ("damaged/data/ab/x", Kind::Damaged, "data/ab/x"),
            ("stray", Kind::Foreign, "stray"),
            ("keys/", Kind::Foreign, "keys/"),
            ("config/x", Kind::Foreign, "config/x"),
            ("other/x", Kind::Foreign, "other/x"),
            ("", Kind::Foreign, ""),
        ];
        for (path, kind, name) in cases {
            let h = Handle::new(path);
            assert_eq!((h.kind(), h.name(), h.path()), (kind, name, path));
            assert_eq!(h.to_string(), path);
        }
        let p = Handle::pack("data/ab/abcd", PackKind::Tree);
        assert_eq!(p.kind(), Kind::Pack(Some(PackKind::Tree)));
        assert_eq!(
            (p.name(), p.to_string().as_str()),
            ("ab/abcd", "data/ab/abcd")
        );
    }
}
