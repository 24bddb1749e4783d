//! The EML target: `restore --target eml:DIR` writes one `.eml` file per message, its
//! bytes untouched, in a directory per folder ([`Tree::Eml`]: `INBOX/`, `Archive/2023/`),
//! each account in its own directory below the target (as the mbox target places them,
//! [`super::mbox`]; a single-Maildir snapshot's folders go into the target itself).
//! Names sort by date and stay unique ([`EmlNames`]); a file's mtime is the message's
//! internal date; flags, keywords and dates go into the folder's sidecar
//! ([`crate::mail::eml::SIDECAR`]), written when the folder is finished and merged with
//! the one already there. The codec is [`crate::mail::eml`].
//!
//! Messages come in any order from many threads ([`Order::Any`]). Each is written to a
//! hidden temporary file in its folder and renamed to its name, never replacing a file.
//! A message whose bytes a file of the folder already has (a re-run) is not written again.
//! Directories are opened as the Maildir target opens them: relative to their parent,
//! never through a symbolic link.

use super::fs::{open_target, read_at, rename_noreplace, set_attributes, Attrs};
use super::mbox::{folder_error, folder_parts, mail_meta, open_dirs, shown, Claims, TreeAccount};
use super::{
    AccountInfo, Caps, FolderInfo, Item, Message, Order, Outcome, RestoreFailures, Target,
};
use crate::error::{Error, Result};
use crate::mail::eml::{is_eml, SIDECAR};
use crate::mail::layout::Tree;
use crate::mail::{EmlNames, Sidecar, SidecarEntry};
use crate::repo::lock;
use rustix::fs::{AtFlags, Mode, OFlags};
use std::collections::HashMap;
use std::fs::File;
use std::io::{ErrorKind, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// Folders open at once (one directory descriptor each).
const OPEN_FOLDERS: usize = 1000;

/// A tree of `.eml` files as a restore target.
pub struct EmlTarget {
    path: PathBuf,
    root: OwnedFd,
    jobs: usize,
    claims: Claims,
}

impl EmlTarget {
    /// Creates the directory `path` if need be and opens it; `jobs`: threads writing (0:
    /// one per core).
    pub fn open(path: &Path, jobs: usize) -> Result<EmlTarget> {
        Ok(EmlTarget {
            path: path.to_path_buf(),
            root: open_target(path)?,
            jobs,
            claims: Claims::default(),
        })
    }
}

/// A folder being restored: its directory open, the files already there.
pub struct EmlFolder {
    account: String,
    path: PathBuf,
    dir: OwnedFd,
    names: Mutex<EmlNames>,
    /// `.eml` files already there, by size, that no message has matched yet.
    existing: Mutex<HashMap<u64, Vec<Vec<u8>>>>,
    /// The sidecar already there.
    sidecar: Sidecar,
    /// Lines for the messages of this restore.
    entries: Mutex<Vec<SidecarEntry>>,
}

impl EmlFolder {
    /// A file already there with these bytes, claimed for the message.
    fn find(&self, data: &[u8]) -> std::io::Result<Option<Vec<u8>>> {
        let size = data.len() as u64;
        let candidates = lock(&self.existing).get(&size).cloned().unwrap_or_default();
        for name in candidates {
            let same = match read_at(self.dir.as_fd(), &name) {
                Ok(have) => have == data,
                Err(e) if e.kind() == ErrorKind::NotFound => false,
                Err(e) => return Err(e),
            };
            if same {
                let mut ex = lock(&self.existing);
                let list = ex.entry(size).or_default();
                // Unless another thread claimed it for a message with the same bytes.
                if let Some(i) = list.iter().position(|n| *n == name) {
                    list.swap_remove(i);
                    return Ok(Some(name));
                }
            }
        }
        Ok(None)
    }
}

impl Target for EmlTarget {
    type Account = TreeAccount;
    type Folder = EmlFolder;

    fn caps(&self) -> Caps {
        Caps {
            order: Order::Any,
            jobs: self.jobs,
            open_folders: OPEN_FOLDERS,
            accounts: 1,
            lanes: 1,
            batch_messages: 1,
            batch_bytes: 0,
            lane_messages: 0,
            folder_files: false,
            home: false,
            store: false,
            keywords: true,
            hard_links: false,
            parts: false,
        }
    }

    fn open_account(&self, info: &AccountInfo) -> Result<TreeAccount> {
        TreeAccount::open(&self.root, &self.path, info)
    }

    fn open_folder(&self, acc: &TreeAccount, info: &FolderInfo) -> Result<EmlFolder> {
        let mut parts = acc.parts.clone();
        parts.extend(folder_parts(info.name, Tree::Eml));
        let path = shown(&self.path, &parts);
        let dir =
            open_dirs(&self.root, &self.path, &parts).map_err(|e| folder_error(info.name, e))?;
        self.claims
            .claim(dir.as_fd(), &acc.name, info.name, &path)?;
        let mut names = EmlNames::new();
        let mut existing: HashMap<u64, Vec<Vec<u8>>> = HashMap::new();
        let listing = rustix::fs::Dir::read_from(&dir).map_err(|e| Error::io(&path, e.into()))?;
        for ent in listing {
            let ent = ent.map_err(|e| Error::io(&path, e.into()))?;
            let name = ent.file_name().to_bytes();
            if !is_eml(name) {
                continue;
            }
            names.insert_existing(name);
            if let Ok(st) = rustix::fs::statat(&dir, name, AtFlags::SYMLINK_NOFOLLOW) {
                if rustix::fs::FileType::from_raw_mode(st.st_mode).is_file() {
                    existing
                        .entry(st.st_size as u64)
                        .or_default()
                        .push(name.to_vec());
                }
            }
        }
        let sidecar = match read_at(dir.as_fd(), SIDECAR.as_bytes()) {
            Ok(text) => Sidecar::parse(&text).map_err(|e| {
                Error::conflict(path.join(SIDECAR).display(), format!("{e} (not replaced)"))
            })?,
            Err(e) if e.kind() == ErrorKind::NotFound => Sidecar::default(),
            Err(e) => return Err(Error::io(path.join(SIDECAR), e)),
        };
        Ok(EmlFolder {
            account: acc.name.clone(),
            path,
            dir,
            names: Mutex::new(names),
            existing: Mutex::new(existing),
            sidecar,
            entries: Mutex::new(Vec::new()),
        })
    }

    fn write(&self, folder: &EmlFolder, msg: &Message) -> Result<Outcome> {
        let meta = mail_meta(msg.meta);
        if let Some(name) = folder
            .find(msg.data)
            .map_err(|e| Error::io(&folder.path, e))?
        {
            lock(&folder.entries).push(SidecarEntry { name, meta });
            return Ok(Outcome::AlreadyThere);
        }
        let name = lock(&folder.names).name(msg.meta.internal_date.secs, msg.data);
        let attrs = Attrs {
            mode: 0o600,
            mtime: msg.meta.internal_date,
            owner: None,
        };
        let write = |f: &mut File| -> std::io::Result<()> {
            f.write_all(msg.data)?;
            set_attributes(f, attrs)
        };
        through_tmp(folder.dir.as_fd(), name.as_bytes(), false, write)
            .map_err(|e| Error::io(folder.path.join(&name), e))?;
        lock(&folder.entries).push(SidecarEntry {
            name: name.into_bytes(),
            meta,
        });
        Ok(Outcome::Written {
            bytes: msg.data.len() as u64,
        })
    }

    fn finish_folder(&self, folder: EmlFolder, failures: &RestoreFailures) {
        let entries = folder
            .entries
            .into_inner()
            .unwrap_or_else(|p| p.into_inner());
        let mut sidecar = folder.sidecar;
        let mut changed = false;
        for e in entries {
            if sidecar.get(&e.name) != Some(&e.meta) {
                sidecar.entries.push(e);
                changed = true;
            }
        }
        if !changed {
            return;
        }
        let data = sidecar.to_bytes();
        let write = |f: &mut File| -> std::io::Result<()> {
            f.write_all(&data)?;
            f.sync_all()
        };
        if let Err(e) = through_tmp(folder.dir.as_fd(), SIDECAR.as_bytes(), true, write) {
            let item = format!(
                "{} ({})",
                folder.path.join(SIDECAR).display(),
                folder.account
            );
            failures.add(item, e);
        }
    }

    fn item(&self, folder: &EmlFolder, item: Item) -> String {
        match item {
            Item::Message(e) => format!(
                "{} ({}): message {}",
                folder.path.display(),
                folder.account,
                String::from_utf8_lossy(&e.key)
            ),
            Item::File(name) => format!(
                "{} ({})",
                folder
                    .path
                    .join(String::from_utf8_lossy(name).as_ref())
                    .display(),
                folder.account
            ),
        }
    }
}

/// Writes a hidden temporary file in `dir` with `write` and renames it to `name`
/// (`replace`: over a file there, else never replacing one); the temporary is removed
/// when a step fails.
fn through_tmp(
    dir: BorrowedFd,
    name: &[u8],
    replace: bool,
    write: impl FnOnce(&mut File) -> std::io::Result<()>,
) -> std::io::Result<()> {
    let tmp = format!(".mailvault-{:016x}.tmp", rand::random::<u64>());
    let result = (|| -> std::io::Result<()> {
        let fd = rustix::fs::openat(
            dir,
            tmp.as_str(),
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        )?;
        let mut f = File::from(fd);
        write(&mut f)?;
        drop(f);
        if replace {
            Ok(rustix::fs::renameat(dir, tmp.as_str(), dir, name)?)
        } else {
            rename_noreplace(dir, tmp.as_bytes(), dir, name)
        }
    })();
    if result.is_err() {
        let _ = rustix::fs::unlinkat(dir, tmp.as_str(), AtFlags::empty());
    }
    result
}
