//! A tree of `.eml` files as a [`Source`]: one account, each directory a folder (its
//! files directly below the root are INBOX), one message per `.eml` file, the file's
//! mtime its internal date. Flags and keywords come from the folder's sidecar
//! ([`crate::mail::eml::SIDECAR`], written by `restore --target eml:`), so that an
//! export imported back keeps them. The codec is [`crate::mail::eml`].
//!
//! A message's Maildir key is its file name without `.eml` (bytes a Maildir name cannot
//! hold written `%XX`). Like a Maildir file, an `.eml` file that the parent snapshot has
//! with the same size and mtime is not read again; a changed sidecar only renames it.

use super::maildir::read_with_meta;
use super::RunOptions;
use super::{Account, AccountListing, Failures, FileMeta, Folder, FolderWriter, MessageMeta};
use super::{NewMessage, Parallelism, Source};
use crate::error::{Error, Result};
use crate::mail::eml::{is_eml, Sidecar, SIDECAR};
use crate::mail::layout::{self, Tree};
use crate::repo::tree::MessageEntry;
use rayon::prelude::*;
use std::collections::HashMap;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// What to back up and how.
#[derive(Clone, Debug)]
pub struct EmlOptions {
    /// The tree's root directory.
    pub path: PathBuf,
    /// The account its mail belongs to.
    pub account: String,
    /// Worker threads; 0 means one per core.
    pub jobs: usize,
    pub run: RunOptions,
}

/// A tree of `.eml` files as a [`Source`].
#[derive(Clone, Debug)]
pub struct EmlSource {
    root: PathBuf,
    account: String,
    jobs: usize,
}

impl EmlSource {
    pub fn new(opts: &EmlOptions) -> Result<EmlSource> {
        let root = std::path::absolute(&opts.path).map_err(|e| Error::io(&opts.path, e))?;
        if !std::fs::metadata(&root)
            .map_err(|e| Error::io(&root, e))?
            .is_dir()
        {
            return Err(Error::InvalidInput(format!(
                "{}: an EML source is a directory of .eml files",
                root.display()
            )));
        }
        Ok(EmlSource {
            root,
            account: opts.account.clone(),
            jobs: opts.jobs,
        })
    }
}

/// The Maildir key of the message in file `name` (a final `.eml` removed; `.EML` and
/// other spellings kept, so that two files never share a key): bytes outside
/// `A-Za-z0-9._+=,-` (and so `:` and `/`, which a Maildir name cannot hold) as `%XX`.
pub fn key_of(name: &[u8]) -> Vec<u8> {
    let stem = name.strip_suffix(b".eml").unwrap_or(name);
    let mut out = Vec::with_capacity(stem.len());
    for &c in stem {
        if c.is_ascii_alphanumeric() || b"._+=,-".contains(&c) {
            out.push(c);
        } else {
            out.extend_from_slice(format!("%{c:02X}").as_bytes());
        }
    }
    out
}

/// Every directory below `root` (`rel`: the path so far) as a folder; the root itself is
/// INBOX when it holds `.eml` files. Every other file is reported (symbolic links, to
/// directories too, are not followed; special files; files without `.eml`), except the
/// sidecar and hidden or index files ([`layout::is_index_file`]).
fn walk(root: &Path, rel: &Path, out: &mut Vec<Folder>, failures: &Failures) {
    let dir = root.join(rel);
    let listing = match std::fs::read_dir(&dir) {
        Ok(e) => e,
        Err(e) => {
            failures.fail(dir.display().to_string(), e);
            return;
        }
    };
    let mut entries = Vec::new();
    for e in listing {
        match e {
            Ok(e) => entries.push(e),
            // An entry that cannot be read is reported, not skipped.
            Err(e) => failures.fail(dir.display().to_string(), e),
        }
    }
    entries.sort_by_key(|e| e.file_name());
    let mut has_mail = false;
    for e in entries {
        let ft = match e.file_type() {
            Ok(ft) => ft,
            Err(err) => {
                failures.fail(e.path().display().to_string(), err);
                continue;
            }
        };
        let name = e.file_name();
        if ft.is_dir() {
            let rel = rel.join(&name);
            match layout::path_to_folder(&rel, Tree::Eml) {
                Some(f) => out.push(Folder::in_tree(&f, root.join(&rel))),
                None => failures.fail(root.join(&rel).display().to_string(), "not a folder name"),
            }
            walk(root, &rel, out, failures);
        } else if ft.is_file() {
            if is_eml(name.as_bytes()) {
                has_mail = true;
            } else if !layout::is_index_file(name.as_bytes()) {
                // Its own sidecar, hidden and index files are not mail; any other file is
                // reported.
                failures.fail(
                    e.path().display().to_string(),
                    "not an .eml file: not backed up (an EML tree holds one .eml file per message)",
                );
            }
        } else if ft.is_symlink() {
            failures.fail(
                e.path().display().to_string(),
                "a symbolic link: not followed, not backed up",
            );
        } else {
            failures.fail(
                e.path().display().to_string(),
                "not a regular file or directory (a special file): not backed up",
            );
        }
    }
    if rel.as_os_str().is_empty() && has_mail {
        if out.iter().any(|f| f.name == "INBOX") {
            failures.fail(
                dir.display().to_string(),
                "has .eml files and an INBOX directory: its own .eml files are not backed up (move them into INBOX/)",
            );
        } else {
            out.push(Folder::named("INBOX", dir));
        }
    }
}

impl Source for EmlSource {
    type Session = ();

    fn label(&self) -> String {
        format!("eml:{}", self.root.display())
    }

    fn parallelism(&self) -> Parallelism {
        Parallelism::Pool { jobs: self.jobs }
    }

    fn accounts(&self) -> Result<Vec<Account>> {
        Ok(vec![Account {
            name: self.account.clone(),
            rel_path: Vec::new(),
            path: self.root.clone(),
        }])
    }

    fn open(&self, _account: &Account) -> Result<()> {
        Ok(())
    }

    fn folders(
        &self,
        account: &Account,
        _session: &mut (),
        failures: &Failures,
    ) -> Result<AccountListing> {
        let mut folders = Vec::new();
        walk(&account.path, Path::new(""), &mut folders, failures);
        Ok(AccountListing {
            folders,
            dirs: Vec::new(),
            subscriptions: None,
        })
    }

    fn backup_folder(
        &self,
        _session: &mut (),
        _account: &Account,
        folder: &Folder,
        out: &mut FolderWriter<'_>,
    ) -> Result<()> {
        let dir = &folder.path;
        let sidecar = read_sidecar(out, dir);
        let files = eml_files(dir)?;
        out.expect(files.len() as u64);
        // Names of kept entries are made again from the sidecar: start from the parent's
        // keyword letters so that they keep their meaning.
        out.resume_keywords();
        let parent: HashMap<Vec<u8>, MessageEntry> = out
            .parent_entries()?
            .into_iter()
            .map(|e| (e.key.clone(), e))
            .collect();
        let flags_of = |name: &[u8]| -> Vec<String> {
            sidecar.get(name).map(|m| m.imap_list()).unwrap_or_default()
        };
        let mut to_read = Vec::new();
        for name in files {
            let path = dir.join(std::ffi::OsStr::from_bytes(&name));
            let meta = match std::fs::symlink_metadata(&path) {
                Ok(m) => FileMeta::of(&m),
                Err(e) => {
                    if e.kind() != std::io::ErrorKind::NotFound {
                        out.fail(path.display().to_string(), e);
                    }
                    out.skipped();
                    continue;
                }
            };
            let key = key_of(&name);
            match parent.get(&key) {
                Some(p) if p.size == meta.size && p.mtime == meta.mtime => {
                    let list = flags_of(&name);
                    let flags: Vec<&str> = list.iter().map(String::as_str).collect();
                    let mut e = p.clone();
                    e.name = out.maildir_name(&key, &flags);
                    (e.mode, e.uid, e.gid) = (meta.mode, meta.uid, meta.gid);
                    out.unchanged(e);
                }
                _ => to_read.push((name, key, path)),
            }
        }
        let w: &FolderWriter = out;
        let stored: Vec<Option<MessageEntry>> = to_read
            .par_iter()
            .map(|(name, key, path)| {
                let (data, meta) = match read_with_meta(path) {
                    Ok(r) => r,
                    Err(e) => {
                        if e.kind() != std::io::ErrorKind::NotFound {
                            w.fail(path.display().to_string(), e);
                        }
                        return None;
                    }
                };
                let list = flags_of(name);
                let flags: Vec<&str> = list.iter().map(String::as_str).collect();
                let msg = NewMessage {
                    data: &data,
                    read: data.len() as u64,
                    meta: MessageMeta::Maildir {
                        name: w.maildir_name(key, &flags),
                        new: false,
                        file: meta,
                    },
                };
                match w.store(msg) {
                    Ok(e) => Some(e),
                    Err(e) => {
                        w.fail(path.display().to_string(), e);
                        None
                    }
                }
            })
            .collect();
        for e in stored {
            match e {
                Some(e) => out.add(e),
                None => out.skipped(),
            }
        }
        Ok(())
    }
}

/// The folder's sidecar of flags; empty when there is none or it cannot be read
/// (reported).
fn read_sidecar(out: &FolderWriter<'_>, dir: &Path) -> Sidecar {
    match std::fs::read(dir.join(SIDECAR)) {
        Ok(d) => Sidecar::parse(&d).unwrap_or_else(|e| {
            out.fail(dir.join(SIDECAR).display().to_string(), e);
            Sidecar::default()
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Sidecar::default(),
        Err(e) => {
            out.fail(dir.join(SIDECAR).display().to_string(), e);
            Sidecar::default()
        }
    }
}

/// The names of the folder's `.eml` files, sorted.
fn eml_files(dir: &Path) -> Result<Vec<Vec<u8>>> {
    let mut files = Vec::new();
    for e in std::fs::read_dir(dir).map_err(|e| Error::io(dir, e))? {
        let e = e.map_err(|e| Error::io(dir, e))?;
        let name = e.file_name();
        if is_eml(name.as_bytes()) && e.file_type().is_ok_and(|t| t.is_file()) {
            files.push(name.as_bytes().to_vec());
        }
    }
    files.sort();
    Ok(files)
}
