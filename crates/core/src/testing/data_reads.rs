//! A [`Store`] that passes everything through and records the ranges read from data
//! packs: the restore tests count them against the spans the reader planned.

use crate::error::Result;
use crate::repo::format::BlobKind;
use crate::store::{ObjectInfo, Store};
use std::sync::{Arc, Mutex, MutexGuard};

/// Records `(path, offset, len)` of every data-pack range read through it.
pub struct DataReads {
    inner: Arc<dyn Store>,
    reads: Mutex<Vec<(String, u64, u64)>>,
}

impl DataReads {
    pub fn new(inner: Arc<dyn Store>) -> Arc<DataReads> {
        Arc::new(DataReads {
            inner,
            reads: Mutex::new(Vec::new()),
        })
    }

    /// The store below, read without recording.
    pub fn inner(&self) -> Arc<dyn Store> {
        self.inner.clone()
    }

    /// The ranges read so far (clear them to count anew).
    pub fn reads(&self) -> MutexGuard<'_, Vec<(String, u64, u64)>> {
        self.reads.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Store for DataReads {
    fn put(&self, path: &str, data: &[u8]) -> Result<()> {
        self.inner.put(path, data)
    }
    fn replace(&self, path: &str, data: &[u8]) -> Result<()> {
        self.inner.replace(path, data)
    }
    fn get(&self, path: &str) -> Result<Vec<u8>> {
        self.inner.get(path)
    }
    fn get_range(&self, path: &str, offset: u64, len: u64) -> Result<Vec<u8>> {
        self.inner.get_range(path, offset, len)
    }
    fn get_pack_range(&self, path: &str, offset: u64, len: u64, kind: BlobKind) -> Result<Vec<u8>> {
        if kind == BlobKind::Data {
            self.reads().push((path.to_string(), offset, len));
        }
        self.inner.get_pack_range(path, offset, len, kind)
    }
    fn list(&self, prefix: &str) -> Result<Vec<ObjectInfo>> {
        self.inner.list(prefix)
    }
    fn delete(&self, path: &str) -> Result<()> {
        self.inner.delete(path)
    }
    fn stat(&self, path: &str) -> Result<u64> {
        self.inner.stat(path)
    }
    fn location(&self) -> String {
        self.inner.location()
    }
    fn flush(&self) -> Result<()> {
        self.inner.flush()
    }
}
