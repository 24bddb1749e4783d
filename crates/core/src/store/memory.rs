//! In-memory store for unit tests.

use super::{ObjectInfo, Store};
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

impl Store for MemoryStore {
    fn put(&self, path: &str, data: &[u8]) -> Result<()> {
        let mut m = self.map();
        if m.contains_key(path) {
            return Err(Error::AlreadyExists(path.into()));
        }
        m.insert(path.into(), Arc::new(data.to_vec()));
        Ok(())
    }
    fn replace(&self, path: &str, data: &[u8]) -> Result<()> {
        self.map().insert(path.into(), Arc::new(data.to_vec()));
        Ok(())
    }
    fn get(&self, path: &str) -> Result<Vec<u8>> {
        self.map()
            .get(path)
            .map(|d| d.to_vec())
            .ok_or_else(|| Error::NotFound(path.into()))
    }
    fn get_range(&self, path: &str, offset: u64, len: u64) -> Result<Vec<u8>> {
        let d = self
            .map()
            .get(path)
            .cloned()
            .ok_or_else(|| Error::NotFound(path.into()))?;
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
    fn list(&self, prefix: &str) -> Result<Vec<ObjectInfo>> {
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
    fn delete(&self, path: &str) -> Result<()> {
        self.map().remove(path);
        Ok(())
    }
    fn stat(&self, path: &str) -> Result<u64> {
        self.map()
            .get(path)
            .map(|d| d.len() as u64)
            .ok_or_else(|| Error::NotFound(path.into()))
    }
    fn location(&self) -> String {
        "memory:".into()
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn conformance() {
        super::super::conformance::run(&super::MemoryStore::new());
    }
}
