//! Storage backends: a small trait over named, immutable objects.
//!
//! Paths are `/`-separated names relative to the repository root (`config`,
//! `keys/<id>`, `data/<xx>/<id>`, `index/<id>`, `snapshots/<id>`). Every put is atomic and
//! refuses to replace an existing object, which is what content-named, write-once files need
//! and what S3 offers with conditional puts (`If-None-Match: *`). The one exception is
//! [`Store::replace`], an atomic overwrite for `config` (S3: a plain put).

mod cache;
mod faulty;
mod limit;
mod local;
mod memory;
mod metered;
mod retry;
mod s3;
mod stack;
mod uploads;

pub use cache::{CacheStats, Cached};
pub use faulty::FaultyStore;
pub use limit::Limit;
pub use local::LocalStore;
pub use memory::MemoryStore;
pub use metered::{Metered, RequestCounts};
pub use retry::{Retry, RetryPolicy, RetryStats, GIVEN_UP};
pub use s3::{parse_url as parse_s3_url, Addressing, Credentials, S3Options, S3Store};
pub use stack::{default_cache_root, Stack, StackOptions, StoreUsage, DEFAULT_CONNECTIONS};
pub use uploads::Uploads;

use crate::error::Result;
use crate::repo::format::BlobKind;

/// One object as returned by [`Store::list`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectInfo {
    pub path: String,
    pub size: u64,
}

/// The storage a repository lives on.
pub trait Store: Send + Sync {
    /// Writes `data` at `path` atomically: readers see all of it or nothing. Fails with
    /// [`crate::Error::AlreadyExists`] if the object exists.
    fn put(&self, path: &str, data: &[u8]) -> Result<()>;
    /// Writes `data` at `path` whether or not an object is there, atomically and durably
    /// (when it returns): readers see the old bytes or the new, never a mix or nothing.
    /// Only `config` is ever replaced, at the commit point of `mailvault migrate`.
    fn replace(&self, path: &str, data: &[u8]) -> Result<()>;
    /// Reads a whole object; [`crate::Error::NotFound`] if absent.
    fn get(&self, path: &str) -> Result<Vec<u8>>;
    /// Reads `len` bytes at `offset`; an error if the object is shorter.
    fn get_range(&self, path: &str, offset: u64, len: u64) -> Result<Vec<u8>>;
    /// Lists objects whose path starts with `prefix` (a directory such as `data/`),
    /// recursively, in no particular order. Incomplete uploads are never listed.
    fn list(&self, prefix: &str) -> Result<Vec<ObjectInfo>>;
    /// Removes an object; removing an absent object is not an error.
    fn delete(&self, path: &str) -> Result<()>;
    /// The size of an object; [`crate::Error::NotFound`] if absent.
    fn stat(&self, path: &str) -> Result<u64>;
    /// Where the store is, for messages.
    fn location(&self) -> String;
    /// Makes every put (and delete) so far durable, names included: called before an object that
    /// refers to earlier ones (an index to its packs, a snapshot to its index) and after a
    /// snapshot. The local store fsyncs each directory it has linked new files into since
    /// the last call; object stores are durable on a put's success.
    fn flush(&self) -> Result<()> {
        Ok(())
    }
    /// Hints that `len` bytes at `offset` will be read soon, so a store that can fetch
    /// them in the background does (the local store asks the kernel to read ahead). Only
    /// a hint: errors are ignored and nothing is returned.
    fn prefetch(&self, _path: &str, _offset: u64, _len: u64) {}

    /// Puts a pack (as [`Store::put`]) holding blobs of one `kind`: a store with a local
    /// cache keeps tree packs, which every later backup and restore reads again.
    fn put_pack(&self, path: &str, data: &[u8], _kind: BlobKind) -> Result<()> {
        self.put(path, data)
    }
    /// Reads a range of a pack holding blobs of one `kind` (as [`Store::get_range`]): a
    /// store with a local cache serves tree packs from it, fetching a missing one whole.
    fn get_pack_range(
        &self,
        path: &str,
        offset: u64,
        len: u64,
        _kind: BlobKind,
    ) -> Result<Vec<u8>> {
        self.get_range(path, offset, len)
    }
    /// Lists `prefix` as [`Store::list`] does, or from a local cache where the store has
    /// one: only for prefixes whose objects are added under new names and never changed
    /// (`keys/`), where a listing that misses the newest objects costs a second, fresh
    /// [`Store::list`] and nothing else.
    fn list_cached(&self, prefix: &str) -> Result<Vec<ObjectInfo>> {
        self.list(prefix)
    }
    /// Tells the store which repository it holds (its config id), once the config is
    /// open: a local cache keeps its files under that id.
    fn bind(&self, _repository_id: &str) {}
    /// Forgets listings kept for reuse (a cache's listing of `snapshots/`): from now on
    /// every listing is fresh. Called once a lock on the repository is taken, since what
    /// was listed before may have changed while the lock was waited for.
    fn refresh_listings(&self) {}
}

/// Whether a store's requests wait on the network (object storage), so that more of them
/// in flight pay: readers and pack writers are sized by it.
pub fn on_network(store: &dyn Store) -> bool {
    store.location().starts_with("s3:")
}

/// Puts an object that is named by its content: an existing one is the same bytes.
pub fn put_content_named(store: &dyn Store, path: &str, data: &[u8]) -> Result<()> {
    match store.put(path, data) {
        Err(crate::Error::AlreadyExists(_)) => Ok(()),
        other => other,
    }
}

#[cfg(any(test, feature = "testing"))]
#[allow(clippy::unwrap_used)] // test support: a failed step fails the test that runs it
pub mod conformance {
    //! The conformance suite every [`Store`] implementation must pass (feature `testing`
    //! makes it public, for the S3 store on MinIO in `tests/s3_store.rs`). It needs an
    //! empty store.
    use super::*;
    use crate::Error;

    pub fn run(store: &dyn Store) {
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
            let body = store.get(&o.path).unwrap();
            assert_eq!(body.len() as u64, o.size);
        }
    }
}
