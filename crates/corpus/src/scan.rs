//! Reading a store back: its Maildirs (`ROOT/<domain>/<user>/Maildir`, or ROOT itself
//! when it is one Maildir), their folders and message files, in a stable sorted order.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use crate::maildir::at;
use crate::spec::{AccountSummary, StoreStats};

/// One Maildir of a store.
#[derive(Debug, Clone)]
pub(crate) struct FoundMaildir {
    pub domain: String,
    pub user: String,
    /// Relative to the store root (empty when the root is the Maildir).
    pub rel: PathBuf,
    /// Maildir++ folder names without the dot; INBOX (`""`) first, then sorted.
    pub folders: Vec<String>,
    pub messages: usize,
}

/// A message file.
#[derive(Debug, Clone)]
pub(crate) struct FoundFile {
    pub maildir: usize,
    pub folder: usize,
    pub new: bool,
    pub name: String,
}

fn sorted_names(dir: &Path) -> io::Result<Vec<(String, bool)>> {
    let mut out = Vec::new();
    for e in fs::read_dir(dir).map_err(at(dir))? {
        let e = e.map_err(at(dir))?;
        let is_dir = e.file_type().map_err(at(dir))?.is_dir();
        if let Ok(name) = e.file_name().into_string() {
            out.push((name, is_dir));
        }
    }
    out.sort();
    Ok(out)
}

fn folders_of(maildir: &Path) -> io::Result<Vec<String>> {
    let mut folders = vec![String::new()];
    for (name, is_dir) in sorted_names(maildir)? {
        if is_dir
            && name.len() > 1
            && name.starts_with('.')
            && name != ".."
            && maildir.join(&name).join("cur").is_dir()
        {
            folders.push(name[1..].to_string());
        }
    }
    Ok(folders)
}

/// The Maildirs under `root` with their folders, sorted by domain then user.
pub(crate) fn find_maildirs(root: &Path) -> io::Result<Vec<FoundMaildir>> {
    if root.join("cur").is_dir() {
        return Ok(vec![FoundMaildir {
            domain: "localhost".into(),
            user: "maildir".into(),
            rel: PathBuf::new(),
            folders: folders_of(root)?,
            messages: 0,
        }]);
    }
    let mut out = Vec::new();
    for (domain, is_dir) in sorted_names(root)? {
        if !is_dir || domain.starts_with('.') {
            continue;
        }
        for (user, is_dir) in sorted_names(&root.join(&domain))? {
            let rel = PathBuf::from(&domain).join(&user).join("Maildir");
            if !is_dir || !root.join(&rel).join("cur").is_dir() {
                continue;
            }
            out.push(FoundMaildir {
                folders: folders_of(&root.join(&rel))?,
                domain: domain.clone(),
                user,
                rel,
                messages: 0,
            });
        }
    }
    Ok(out)
}

/// Directory of a folder under a Maildir.
pub(crate) fn folder_dir(root: &Path, m: &FoundMaildir, folder: usize) -> PathBuf {
    let base = root.join(&m.rel);
    match m.folders[folder].as_str() {
        "" => base,
        name => base.join(format!(".{name}")),
    }
}

/// Every message file (`cur/` then `new/` of each folder, names sorted); fills in the
/// Maildirs' message counts.
pub(crate) fn find_files(root: &Path, maildirs: &mut [FoundMaildir]) -> io::Result<Vec<FoundFile>> {
    let mut out = Vec::new();
    for (mi, m) in maildirs.iter_mut().enumerate() {
        let before = out.len();
        for fi in 0..m.folders.len() {
            let dir = folder_dir(root, m, fi);
            for (sub, new) in [("cur", false), ("new", true)] {
                let d = dir.join(sub);
                if !d.is_dir() {
                    continue;
                }
                for (name, is_dir) in sorted_names(&d)? {
                    if !is_dir && !name.starts_with('.') {
                        out.push(FoundFile {
                            maildir: mi,
                            folder: fi,
                            new,
                            name,
                        });
                    }
                }
            }
        }
        m.messages = out.len() - before;
    }
    Ok(out)
}

/// Counts the accounts, folders, messages and bytes of a store.
pub fn scan(root: &Path) -> io::Result<StoreStats> {
    let mut maildirs = find_maildirs(root)?;
    let files = find_files(root, &mut maildirs)?;
    let mut per_account: Vec<AccountSummary> = maildirs
        .iter()
        .map(|m| AccountSummary {
            address: format!("{}@{}", m.user, m.domain),
            maildir: m.rel.clone(),
            messages: m.messages,
            bytes: 0,
        })
        .collect();
    let mut new_messages = 0;
    for f in &files {
        let m = &maildirs[f.maildir];
        let path = folder_dir(root, m, f.folder)
            .join(if f.new { "new" } else { "cur" })
            .join(&f.name);
        let len = fs::symlink_metadata(&path).map_err(at(&path))?.len();
        per_account[f.maildir].bytes += len;
        new_messages += usize::from(f.new);
    }
    Ok(StoreStats {
        accounts: maildirs.len(),
        folders: maildirs.iter().map(|m| m.folders.len()).sum(),
        messages: files.len(),
        bytes: per_account.iter().map(|a| a.bytes).sum(),
        new_messages,
        per_account,
    })
}
