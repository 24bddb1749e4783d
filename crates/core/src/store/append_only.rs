//! A [`Backend`] wrapper for a host that must not delete or replace anything: a mail
//! server backing up with credentials that can create and read objects but not remove
//! or overwrite them (docs/security.md, *Roles*).
//!
//! The commands such a host runs (backup, restore, check, forget *requests*, search
//! indexing, locks) are written so that they need neither (`crate::repo::lock` keeps a
//! lock's old records and ends it by a record of its own; `crate::ops::forget` writes a
//! request). This wrapper is the guard behind them: whatever path asks for a delete or a
//! replace gets [`Error::AppendOnly`] before anything reaches the storage, so the
//! storage's audit log never shows such an attempt from this host.

use super::{Backend, ByteRange, Handle, Hint, Listing, ObjectInfo, WriteMode};
use crate::error::{Error, Result};
use std::sync::Arc;

/// Passes creates and reads on; refuses removes and replaces.
pub struct AppendOnly {
    inner: Arc<dyn Backend>,
}

impl AppendOnly {
    pub fn new(inner: Arc<dyn Backend>) -> AppendOnly {
        AppendOnly { inner }
    }
}

impl Backend for AppendOnly {
    fn write(&self, h: Handle<'_>, data: &[u8], mode: WriteMode) -> Result<()> {
        match mode {
            WriteMode::Create => self.inner.write(h, data, mode),
            WriteMode::Replace => Err(Error::AppendOnly {
                what: format!("replacing {h}"),
            }),
        }
    }
    fn read(&self, h: Handle<'_>, range: Option<ByteRange>) -> Result<Vec<u8>> {
        self.inner.read(h, range)
    }
    fn listing(&self, prefix: &str, from: Listing) -> Result<Vec<ObjectInfo>> {
        self.inner.listing(prefix, from)
    }
    fn remove(&self, h: Handle<'_>) -> Result<()> {
        Err(Error::AppendOnly {
            what: format!("deleting {h}"),
        })
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{MemoryStore, Metered, Store};

    #[test]
    fn creates_and_reads_pass_deletes_and_replaces_never_reach_the_store() {
        let counted = Arc::new(Metered::new(Arc::new(MemoryStore::new())));
        let s = AppendOnly::new(counted.clone());
        s.put("snapshots/aa", b"one").unwrap();
        assert_eq!(s.get("snapshots/aa").unwrap(), b"one");
        assert!(matches!(
            s.put("snapshots/aa", b"two"),
            Err(Error::AlreadyExists(_))
        ));
        let e = s.delete("snapshots/aa").unwrap_err();
        assert!(matches!(e, Error::AppendOnly { .. }), "{e}");
        assert!(e.to_string().contains("deleting snapshots/aa"), "{e}");
        let e = s.replace("config", b"new").unwrap_err();
        assert!(matches!(e, Error::AppendOnly { .. }), "{e}");
        assert_eq!(s.get("snapshots/aa").unwrap(), b"one");
        assert_eq!(counted.counts().delete, 0);
        assert_eq!(s.list("snapshots/").unwrap().len(), 1);
    }
}
