//! One module per command.

pub mod backup;
pub mod check;
pub mod demo;
pub mod imap;
pub mod init;
pub mod ls;
pub mod repair;
pub mod restore;
pub mod snapshots;
pub mod stats;

use anyhow::{bail, Result};
use std::path::PathBuf;

/// Parses `maildir:/path` (or a bare path) into the Maildir path.
pub fn maildir_location(s: &str, what: &str) -> Result<PathBuf> {
    if let Some(p) = s.strip_prefix("maildir:") {
        return Ok(PathBuf::from(p));
    }
    if let Some((scheme, _)) = s.split_once("://") {
        bail!("{what} {s:?}: {scheme}:// is not supported yet; use maildir:/path");
    }
    Ok(PathBuf::from(s))
}
