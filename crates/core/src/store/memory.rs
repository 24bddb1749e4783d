//! In-memory store for unit tests.

use super::{Backend, ByteRange, Handle, Hint, Listing, ObjectInfo, WriteMode};
use crate::error::{Error, Result};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

/// A store that keeps objects in a map; clones share the same objects.
#[derive(Clone, Default)]
pub struct MemoryStore {
    objects: Arc<Mutex<BTreeMap<String, Arc<Vec<u8>>>>>,
}

impl MemoryStore {
    pub fn new() -> Self {
        Self::default()
    }
    fn map(&self) -> MutexGuard<'_, BTreeMap<String, Arc<Vec<u8>>>> {
        // A poisoned lock only means another test thread panicked; the map is still whole.
        self.objects.lock().unwrap_or_else(|p| p.into_inner())
    }
    /// Replaces an object's bytes, bypassing put-if-absent: for corruption tests.
    pub fn overwrite(&self, path: &str, data: Vec<u8>) {
        self.map().insert(path.to_string(), Arc::new(data));
    }
}

impl Backend for MemoryStore {
    fn write(&self, h: Handle<'_>, data: &[u8], mode: WriteMode) -> Result<()> {
        let mut m = self.map();
        if mode == WriteMode::Create && m.contains_key(h.path()) {
            return Err(Error::AlreadyExists(h.path().into()));
        }
        m.insert(h.path().into(), Arc::new(data.to_vec()));
        Ok(())
    }
    fn read(&self, h: Handle<'_>, range: Option<ByteRange>) -> Result<Vec<u8>> {
        let path = h.path();
        let d = self
            .map()
            .get(path)
            .cloned()
            .ok_or_else(|| Error::NotFound(path.into()))?;
        let Some(ByteRange { offset, len }) = range else {
            return Ok(d.to_vec());
        };
        let end = offset
            .checked_add(len)
            .filter(|e| *e <= d.len() as u64)
            .ok_or_else(|| {
                Error::corrupt(
                    path,
                    format!("range {offset}+{len} past the end ({} bytes)", d.len()),
                )
            })?;
        Ok(d[offset as usize..end as usize].to_vec())
    }
    fn listing(&self, prefix: &str, _from: Listing) -> Result<Vec<ObjectInfo>> {
        Ok(self
            .map()
            .range(prefix.to_string()..)
            .take_while(|(k, _)| k.starts_with(prefix))
            .map(|(k, v)| ObjectInfo {
                path: k.clone(),
                size: v.len() as u64,
            })
            .collect())
    }
    fn remove(&self, h: Handle<'_>) -> Result<()> {
        self.map().remove(h.path());
        Ok(())
    }
    fn size(&self, h: Handle<'_>) -> Result<u64> {
        self.map()
            .get(h.path())
            .map(|d| d.len() as u64)
            .ok_or_else(|| Error::NotFound(h.path().into()))
    }
    fn location(&self) -> String {
        "memory:".into()
    }
    fn flush(&self) -> Result<()> {
        Ok(())
    }
    fn local_dir(&self) -> Option<std::path::PathBuf> {
        None
    }
    fn hint(&self, _hint: Hint<'_>) {}
}

#[cfg(test)]
mod tests {
    #[test]
    fn conformance() {
        super::super::conformance::run(&super::MemoryStore::new());
    }
}
