//! A [`Store`] wrapper that counts requests by verb and bytes each way.
//!
//! Object storage bills by request and by byte, and users of backup tools complain most
//! about request counts they cannot see. Every command's report shows these counts.
//! Counting here, around the trait, rather than in a backend, counts the same way for
//! every store. On a local directory the "requests" are the store calls.

use super::{Backend, ByteRange, Handle, Hint, Listing, ObjectInfo, WriteMode};
use crate::error::Result;
use serde::Serialize;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

/// Requests by verb and bytes moved, as counted by [`Metered`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct RequestCounts {
    /// Whole and ranged reads.
    pub get: u64,
    /// Puts and replaces.
    pub put: u64,
    pub list: u64,
    /// Stats.
    pub head: u64,
    pub delete: u64,
    /// Bytes sent in puts.
    pub bytes_up: u64,
    /// Bytes received in gets.
    pub bytes_down: u64,
}

impl RequestCounts {
    /// Both counts together.
    pub fn plus(self, o: RequestCounts) -> RequestCounts {
        RequestCounts {
            get: self.get + o.get,
            put: self.put + o.put,
            list: self.list + o.list,
            head: self.head + o.head,
            delete: self.delete + o.delete,
            bytes_up: self.bytes_up + o.bytes_up,
            bytes_down: self.bytes_down + o.bytes_down,
        }
    }

    /// Every request, whatever its verb.
    pub fn total(&self) -> u64 {
        self.get + self.put + self.list + self.head + self.delete
    }
}

/// Requests counted as they are made (by [`Metered`], and by the S3 store for the calls it
/// makes beside the stack).
#[derive(Default)]
pub(super) struct Counters {
    get: AtomicU64,
    put: AtomicU64,
    list: AtomicU64,
    head: AtomicU64,
    delete: AtomicU64,
    bytes_up: AtomicU64,
    bytes_down: AtomicU64,
}

impl Counters {
    pub(super) fn read(&self) -> RequestCounts {
        let c = self;
        RequestCounts {
            get: c.get.load(Relaxed),
            put: c.put.load(Relaxed),
            list: c.list.load(Relaxed),
            head: c.head.load(Relaxed),
            delete: c.delete.load(Relaxed),
            bytes_up: c.bytes_up.load(Relaxed),
            bytes_down: c.bytes_down.load(Relaxed),
        }
    }

    /// One request of `verb` (an HTTP method), with its bytes each way.
    pub(super) fn count(&self, verb: &str, up: u64, down: u64) {
        let n = match verb {
            "GET" => &self.get,
            "PUT" | "POST" => &self.put,
            "HEAD" => &self.head,
            "DELETE" => &self.delete,
            _ => &self.list,
        };
        n.fetch_add(1, Relaxed);
        self.bytes_up.fetch_add(up, Relaxed);
        self.bytes_down.fetch_add(down, Relaxed);
    }
}

/// Counts what passes through to the inner store. A failed request counts too (it was
/// made, and billed); its bytes do not.
pub struct Metered {
    inner: Arc<dyn Backend>,
    counts: Counters,
}

impl Metered {
    pub fn new(inner: Arc<dyn Backend>) -> Metered {
        Metered {
            inner,
            counts: Counters::default(),
        }
    }

    /// The counts so far.
    pub fn counts(&self) -> RequestCounts {
        self.counts.read()
    }

    fn up(&self, data: &[u8], r: Result<()>) -> Result<()> {
        self.counts.put.fetch_add(1, Relaxed);
        if r.is_ok() {
            self.counts.bytes_up.fetch_add(data.len() as u64, Relaxed);
        }
        r
    }

    fn down(&self, r: Result<Vec<u8>>) -> Result<Vec<u8>> {
        self.counts.get.fetch_add(1, Relaxed);
        if let Ok(d) = &r {
            self.counts.bytes_down.fetch_add(d.len() as u64, Relaxed);
        }
        r
    }
}

impl Backend for Metered {
    fn write(&self, h: Handle<'_>, data: &[u8], mode: WriteMode) -> Result<()> {
        self.up(data, self.inner.write(h, data, mode))
    }
    fn read(&self, h: Handle<'_>, range: Option<ByteRange>) -> Result<Vec<u8>> {
        self.down(self.inner.read(h, range))
    }
    fn listing(&self, prefix: &str, from: Listing) -> Result<Vec<ObjectInfo>> {
        // A cached listing is counted as a listing too: what reaches the storage below
        // is counted by the layers there.
        self.counts.list.fetch_add(1, Relaxed);
        self.inner.listing(prefix, from)
    }
    fn remove(&self, h: Handle<'_>) -> Result<()> {
        self.counts.delete.fetch_add(1, Relaxed);
        self.inner.remove(h)
    }
    fn size(&self, h: Handle<'_>) -> Result<u64> {
        self.counts.head.fetch_add(1, Relaxed);
        self.inner.size(h)
    }
    fn location(&self) -> String {
        self.inner.location()
    }
    fn flush(&self) -> Result<()> {
        self.inner.flush()
    }
    fn local_dir(&self) -> Option<std::path::PathBuf> {
        self.inner.local_dir()
    }
    fn hint(&self, hint: Hint<'_>) {
        self.inner.hint(hint)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{MemoryStore, Store};

    #[test]
    fn passes_the_conformance_suite() {
        crate::store::conformance::run(&Metered::new(Arc::new(MemoryStore::new())));
    }

    #[test]
    fn counts_requests_by_verb_and_bytes_each_way() {
        let m = Metered::new(Arc::new(MemoryStore::new()));
        m.put("a", b"12345").unwrap();
        assert!(m.put("a", b"xx").is_err(), "put-if-absent");
        m.replace("config", b"abc").unwrap();
        assert_eq!(m.get("a").unwrap(), b"12345");
        assert_eq!(m.get_range("a", 1, 2).unwrap(), b"23");
        assert!(m.get("missing").is_err());
        m.list("").unwrap();
        m.stat("a").unwrap();
        m.delete("a").unwrap();
        let c = m.counts();
        assert_eq!(
            c,
            RequestCounts {
                get: 3,
                put: 3,
                list: 1,
                head: 1,
                delete: 1,
                bytes_up: 8,
                bytes_down: 7,
            }
        );
        assert_eq!(c.total(), 9);
    }
}
