//! Local-directory store, the default.
//!
//! Atomic put-if-absent: write a hidden temporary file in the target directory, fsync it,
//! then `link(2)` it to its final name (which fails if the name exists, unlike `rename`)
//! and unlink the temporary. A crash leaves at worst a `.tmp-*` file, which `list` never
//! shows and the next open removes.

use super::{ObjectInfo, Store};
use crate::error::{Error, Result};
use crate::repo::lock;
use std::collections::HashMap;
use std::fs::{self, File};
use std::io::{self, ErrorKind, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// A repository in a directory of the local file system.
pub struct LocalStore {
    root: PathBuf,
    /// fsync every object before it becomes visible (on by default; crash safety on power loss).
    sync: bool,
    /// Open handles of recently read objects: a restore reads thousands of small ranges
    /// from each pack, and an open(2) per range costs more than the read.
    handles: Mutex<HashMap<String, Arc<File>>>,
}

/// Handles kept open at most (objects are immutable, so a cached handle never goes stale).
const MAX_HANDLES: usize = 64;

impl LocalStore {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        LocalStore {
            root: root.into(),
            sync: true,
            handles: Mutex::new(HashMap::new()),
        }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    fn full(&self, path: &str) -> PathBuf {
        self.root.join(path)
    }

    fn err(&self, path: &str, e: io::Error) -> Error {
        if e.kind() == ErrorKind::NotFound {
            Error::NotFound(path.into())
        } else {
            Error::Store {
                what: path.into(),
                source: e,
            }
        }
    }

    /// Removes temporary files a killed writer left behind.
    pub fn clean_temporaries(&self) -> Result<usize> {
        let mut removed = 0;
        let mut stack = vec![self.root.clone()];
        while let Some(dir) = stack.pop() {
            let rd = match fs::read_dir(&dir) {
                Ok(rd) => rd,
                Err(e) if e.kind() == ErrorKind::NotFound => continue,
                Err(e) => return Err(Error::io(dir, e)),
            };
            for ent in rd {
                let ent = ent.map_err(|e| Error::io(&dir, e))?;
                let ft = ent.file_type().map_err(|e| Error::io(ent.path(), e))?;
                if ft.is_dir() {
                    stack.push(ent.path());
                } else if ent.file_name().to_string_lossy().starts_with(".tmp-") {
                    fs::remove_file(ent.path()).map_err(|e| Error::io(ent.path(), e))?;
                    removed += 1;
                }
            }
        }
        Ok(removed)
    }

    fn handle(&self, path: &str) -> Result<Arc<File>> {
        if let Some(f) = lock(&self.handles).get(path) {
            return Ok(f.clone());
        }
        let f = Arc::new(File::open(self.full(path)).map_err(|e| self.err(path, e))?);
        let mut h = lock(&self.handles);
        if h.len() >= MAX_HANDLES {
            h.clear();
        }
        h.insert(path.to_string(), f.clone());
        Ok(f)
    }

    fn list_dir(&self, dir: &Path, rel: &str, out: &mut Vec<ObjectInfo>) -> Result<()> {
        let rd = match fs::read_dir(dir) {
            Ok(rd) => rd,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(self.err(rel, e)),
        };
        for ent in rd {
            let ent = ent.map_err(|e| self.err(rel, e))?;
            let name = ent.file_name();
            let Some(name) = name.to_str() else { continue };
            if name.starts_with('.') {
                continue;
            }
            let child = if rel.is_empty() {
                name.to_string()
            } else {
                format!("{rel}/{name}")
            };
            let meta = ent.metadata().map_err(|e| self.err(&child, e))?;
            if meta.is_dir() {
                self.list_dir(&ent.path(), &child, out)?;
            } else if meta.is_file() {
                out.push(ObjectInfo {
                    path: child,
                    size: meta.len(),
                });
            }
        }
        Ok(())
    }
}

impl Store for LocalStore {
    fn put(&self, path: &str, data: &[u8]) -> Result<()> {
        let full = self.full(path);
        let dir = full.parent().unwrap_or(&self.root).to_path_buf();
        let tmp = dir.join(format!(".tmp-{:016x}", rand::random::<u64>()));
        let write = |tmp: &Path| -> io::Result<()> {
            let mut f = match File::create(tmp) {
                Err(e) if e.kind() == ErrorKind::NotFound => {
                    fs::create_dir_all(&dir)?;
                    File::create(tmp)?
                }
                other => other?,
            };
            f.write_all(data)?;
            if self.sync {
                f.sync_data()?;
            }
            Ok(())
        };
        if let Err(e) = write(&tmp) {
            let _ = fs::remove_file(&tmp);
            return Err(self.err(path, e));
        }
        let linked = fs::hard_link(&tmp, &full);
        let _ = fs::remove_file(&tmp);
        match linked {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == ErrorKind::AlreadyExists => {
                Err(Error::AlreadyExists(path.into()))
            }
            Err(e) => Err(self.err(path, e)),
        }
    }

    fn get(&self, path: &str) -> Result<Vec<u8>> {
        fs::read(self.full(path)).map_err(|e| self.err(path, e))
    }

    fn get_range(&self, path: &str, offset: u64, len: u64) -> Result<Vec<u8>> {
        let f = self.handle(path)?;
        let mut buf = vec![0u8; len as usize];
        f.read_exact_at(&mut buf, offset).map_err(|e| {
            if e.kind() == ErrorKind::UnexpectedEof {
                Error::corrupt(
                    path,
                    format!("range {offset}+{len} past the end of the file"),
                )
            } else {
                self.err(path, e)
            }
        })?;
        Ok(buf)
    }

    fn list(&self, prefix: &str) -> Result<Vec<ObjectInfo>> {
        let prefix = prefix.trim_end_matches('/');
        let mut out = Vec::new();
        self.list_dir(&self.full(prefix), prefix, &mut out)?;
        Ok(out)
    }

    fn delete(&self, path: &str) -> Result<()> {
        lock(&self.handles).remove(path);
        match fs::remove_file(self.full(path)) {
            Err(e) if e.kind() != ErrorKind::NotFound => Err(self.err(path, e)),
            _ => Ok(()),
        }
    }

    fn stat(&self, path: &str) -> Result<u64> {
        fs::metadata(self.full(path))
            .map(|m| m.len())
            .map_err(|e| self.err(path, e))
    }

    fn location(&self) -> String {
        self.root.display().to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conformance() {
        let dir = tempfile::tempdir().unwrap();
        super::super::conformance::run(&LocalStore::new(dir.path()));
    }

    #[test]
    fn temporaries_are_invisible_and_cleaned() {
        let dir = tempfile::tempdir().unwrap();
        let s = LocalStore::new(dir.path());
        s.put("data/aa/x", b"1").unwrap();
        fs::write(dir.path().join("data/aa/.tmp-123"), b"partial").unwrap();
        assert_eq!(s.list("data/").unwrap().len(), 1);
        assert_eq!(s.clean_temporaries().unwrap(), 1);
        assert!(!dir.path().join("data/aa/.tmp-123").exists());
    }
}
