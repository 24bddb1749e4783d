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
use super::{Account, Home, RunOptions};
use crate::error::Result;
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
    Some(Home {
        dir: root.join(OsStr::from_bytes(rel)),
        view: view.cloned(),
    })
}

/// The `file:` source that reads `home`, less what is not kept ([`SKIPPED`]).
pub fn source(home: &Home) -> Result<FileSource> {
    FileSource::new(&FileOptions {
        paths: vec![home.dir.clone()],
        include: Vec::new(),
        exclude: SKIPPED.iter().map(|s| s.to_string()).collect(),
        jobs: 1,
        read_from: home.view.iter().cloned().collect(),
        run: RunOptions::new(""),
    })
}
