//! An account's home beside its Maildir: Dovecot keeps a user's sieve scripts there
//! (`<domain>/<user>/sieve/*.sieve`, and `.dovecot.sieve`, a link to the active one), and
//! its duplicate-delivery database (`.dovecot.lda-dupes`). A user restored without their
//! filters and vacation reply has not been restored, so a Maildir store backup keeps the
//! home with the account.
//!
//! The home is read by the `file:` source ([`FileSource`]): one way to keep a file tree
//! (owner, mode, mtime, links kept as links and never followed, a directory swapped for a
//! link during the walk refused, a filesystem snapshot read in place of the live paths).
//! Left out: the `Maildir` itself (the account's mail, backed up as folders) and compiled
//! sieve scripts (`*.svbin`: Dovecot compiles them again from the scripts on first use).

use super::file::{FileOptions, FileSource};
use super::{
    Account, AccountListing, Failures, FileData, Folder, FolderFile, FolderWriter, Home,
    Parallelism, RunOptions, Source,
};
use crate::error::Result;
use crate::repo::lock;
use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// What of a home is not kept (globs on file and directory names).
pub const SKIPPED: [&str; 2] = ["Maildir", "*.svbin"];

/// The home of a store account (`example.org/bob/Maildir` below `root`: `example.org/bob`),
/// read below the filesystem snapshot `view` (live root, snapshot root) where there is
/// one; `None` for a single Maildir, which has no home in the store.
pub fn of(root: &Path, view: Option<&(PathBuf, PathBuf)>, account: &Account) -> Option<Home> {
    let rel = account.rel_path.strip_suffix(b"/Maildir")?;
    Some(Home::Dir {
        dir: root.join(OsStr::from_bytes(rel)),
        view: view.cloned(),
    })
}

/// The `file:` source that reads the home directory `dir` (below the filesystem snapshot
/// `view`), less what is not kept ([`SKIPPED`]).
pub fn source(dir: &Path, view: Option<&(PathBuf, PathBuf)>) -> Result<FileSource> {
    FileSource::new(&FileOptions {
        paths: vec![dir.to_path_buf()],
        include: Vec::new(),
        exclude: SKIPPED.iter().map(|s| s.to_string()).collect(),
        jobs: 1,
        depth: None,
        read_from: view.into_iter().cloned().collect(),
        run: RunOptions::new(""),
    })
}

/// What of a store's own directories is not kept: hidden files and directories, as the
/// store's walk skips them (`crate::source::maildir`).
pub const STORE_SKIPPED: [&str; 1] = [".*"];

/// The `file:` source that reads a mail store's own files: those in its root `dir` and in
/// its domain directories, one level down (below the filesystem snapshot `view`); never
/// an account's directory (the accounts and their homes are backed up as such), nothing
/// hidden ([`STORE_SKIPPED`]).
pub fn store_source(dir: &Path, view: Option<&(PathBuf, PathBuf)>) -> Result<FileSource> {
    FileSource::new(&FileOptions {
        paths: vec![dir.to_path_buf()],
        include: Vec::new(),
        exclude: STORE_SKIPPED.iter().map(|s| s.to_string()).collect(),
        jobs: 1,
        depth: Some(1),
        read_from: view.into_iter().cloned().collect(),
        run: RunOptions::new(""),
    })
}

/// A home a server gave ([`Home::Files`]) as a source of its own, so that it goes through
/// the pipeline's one way of keeping a home: one folder per directory, its files stored
/// and counted as the home's; a file the parent has with the same content and link is
/// kept as the parent has it (its mtime: a server's script has none of its own, and an
/// unchanged home must encode to the same tree).
pub struct Served(std::sync::Mutex<BTreeMap<Vec<u8>, Vec<FolderFile>>>);

impl Served {
    /// The home of `files`: (directory below the home, file).
    pub fn new(files: Vec<(Vec<u8>, FolderFile)>) -> Served {
        let mut dirs: BTreeMap<Vec<u8>, Vec<FolderFile>> = BTreeMap::new();
        for (dir, f) in files {
            dirs.entry(dir).or_default().push(f);
        }
        Served(std::sync::Mutex::new(dirs))
    }
}

impl Source for Served {
    type Session = ();

    fn label(&self) -> String {
        "home".into()
    }

    fn parallelism(&self) -> Parallelism {
        Parallelism::Pool { jobs: 1 }
    }

    fn accounts(&self) -> Result<Vec<Account>> {
        Ok(vec![Account {
            name: "home".into(),
            rel_path: Vec::new(),
            path: PathBuf::new(),
        }])
    }

    fn open(&self, _account: &Account) -> Result<()> {
        Ok(())
    }

    fn folders(&self, _: &Account, _: &mut (), _: &Failures) -> Result<AccountListing> {
        let folders = (lock(&self.0).keys())
            .map(|dir| Folder {
                name: match dir.is_empty() {
                    true => ".".into(),
                    false => String::from_utf8_lossy(dir).into_owned(),
                },
                dir: dir.clone(),
                path: PathBuf::new(),
            })
            .collect();
        Ok(AccountListing {
            folders,
            ..AccountListing::default()
        })
    }

    fn backup_folder(
        &self,
        _: &mut (),
        _: &Account,
        folder: &Folder,
        out: &mut FolderWriter<'_>,
    ) -> Result<()> {
        let files = lock(&self.0).remove(&folder.dir).unwrap_or_default();
        for f in files {
            if let FileData::Link(target) = &f.data {
                // A link is counted as new when stored.
                match out.parent_file(&f.name) {
                    Some(p) if p.link.as_ref() == Some(target) => out.unchanged_file(p.clone()),
                    _ => out.file(f)?,
                }
                continue;
            }
            let Some(e) = out.store_file(f)? else {
                continue;
            };
            match out.parent_file(&e.name) {
                Some(p) if p.content == e.content && p.lists == e.lists && p.link == e.link => {
                    out.unchanged_file(p.clone())
                }
                _ => out.new_file(e),
            }
        }
        Ok(())
    }
}
