//! A [`Backend`] that passes everything through and records the ranges read from data
//! packs: the restore tests count them against the spans the reader planned.

use crate::error::Result;
use crate::store::{
    Backend, ByteRange, Handle, Hint, Kind, Listing, ObjectInfo, PackKind, WriteMode,
};
use std::sync::{Arc, Mutex, MutexGuard};

/// Records `(path, offset, len)` of every data-pack range read through it.
pub struct DataReads {
    inner: Arc<dyn Backend>,
    reads: Mutex<Vec<(String, u64, u64)>>,
}

impl DataReads {
    pub fn new(inner: Arc<dyn Backend>) -> Arc<DataReads> {
        Arc::new(DataReads {
            inner,
            reads: Mutex::new(Vec::new()),
        })
    }

    /// The store below, read without recording.
    pub fn inner(&self) -> Arc<dyn Backend> {
        self.inner.clone()
    }

    /// The ranges read so far (clear them to count anew).
    pub fn reads(&self) -> MutexGuard<'_, Vec<(String, u64, u64)>> {
        self.reads.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Backend for DataReads {
    fn write(&self, h: Handle<'_>, data: &[u8], mode: WriteMode) -> Result<()> {
        self.inner.write(h, data, mode)
    }
    fn read(&self, h: Handle<'_>, range: Option<ByteRange>) -> Result<Vec<u8>> {
        if let (Kind::Pack(Some(PackKind::Data)), Some(r)) = (h.kind(), range) {
            self.reads().push((h.path().to_string(), r.offset, r.len));
        }
        self.inner.read(h, range)
    }
    fn listing(&self, prefix: &str, from: Listing) -> Result<Vec<ObjectInfo>> {
        self.inner.listing(prefix, from)
    }
    fn remove(&self, h: Handle<'_>) -> Result<()> {
        self.inner.remove(h)
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
        self.inner.local_dir()
    }
    fn hint(&self, hint: Hint<'_>) {
        self.inner.hint(hint)
    }
}
