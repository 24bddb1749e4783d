//! An account's home in a snapshot (issue 31): the files a Maildir store backup keeps
//! beside the account's Maildir (Dovecot's sieve scripts `sieve/*.sieve`, the
//! `.dovecot.sieve` link to the active one, `.dovecot.lda-dupes`), as the engine's `ls`
//! lists them (its directories are the folders `~`, `~/sieve`, with `home` set), and one
//! such file's bytes, read by the engine's one reader of a stored file
//! ([`assemble_file`]). A link is a link: shown with its target, never followed, never
//! read.

use crate::read::check_snapshot_id;
use mailvault_core::model::assemble::assemble_file;
use mailvault_core::ops::ls::{home_files, home_name, ls, FileInfo, FolderInfo, Listing};
use mailvault_core::{Error, Repository, Result};
use serde::Serialize;

/// The link Dovecot's Pigeonhole reads the active script through (`active=~/.dovecot.sieve`).
pub const ACTIVE_LINK: &str = ".dovecot.sieve";

/// A file of an account's home: as `ls` lists it, with its path and whether it is the
/// active script.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct HomeFile {
    #[serde(flatten)]
    pub info: FileInfo,
    /// Its path from the home, `~/sieve/rules.sieve`.
    pub path: String,
    /// The active sieve script: the file [`ACTIVE_LINK`] names (or that file itself when
    /// it is a script, not a link).
    pub active: bool,
}

impl HomeFile {
    fn of(info: FileInfo) -> HomeFile {
        let path = format!("{}/{}", info.folder, info.name);
        HomeFile {
            info,
            path,
            active: false,
        }
    }
}

/// An account of a snapshot as its page shows it: its mail folders, and its home's files
/// (`None`: the backup kept no home for it).
pub struct AccountView {
    pub folders: Vec<FolderInfo>,
    pub home: Option<Vec<HomeFile>>,
}

/// `account` of snapshot `id`: its mail folders (with their ACLs) and its home's files.
pub fn account(repo: &Repository, id: &str, account: &str) -> Result<AccountView> {
    check_snapshot_id(id)?;
    let id = id.to_ascii_lowercase();
    let Listing::Folders(all) = ls(repo, &id, Some(account), None, &mut |_| Ok(()))? else {
        return Err(Error::Internal("ls: no folders listed".into()));
    };
    let folders: Vec<FolderInfo> = all.into_iter().filter(|f| !f.home).collect();
    let Some(files) = home_files(repo, &id, account)? else {
        return Ok(AccountView {
            folders,
            home: None,
        });
    };
    let mut files: Vec<HomeFile> = files.into_iter().map(HomeFile::of).collect();
    files.sort_by(|a, b| a.path.cmp(&b.path));
    mark_active(&mut files);
    Ok(AccountView {
        folders,
        home: Some(files),
    })
}

/// Marks the script the home's [`ACTIVE_LINK`] names (a path below the home:
/// `sieve/rules.sieve`, `./sieve/x.sieve`; one that leaves the home names nothing here),
/// or the link's name itself when it is a file.
fn mark_active(files: &mut [HomeFile]) {
    let Some(link) = files
        .iter()
        .find(|f| f.info.folder == "~" && f.info.name == ACTIVE_LINK)
    else {
        return;
    };
    let want = match &link.info.link {
        None => link.path.clone(),
        Some(t) => {
            let parts: Vec<&str> = (t.split('/'))
                .filter(|p| !p.is_empty() && *p != ".")
                .collect();
            if t.starts_with('/') || parts.is_empty() || parts.contains(&"..") {
                return;
            }
            format!("~/{}", parts.join("/"))
        }
    };
    for f in files.iter_mut() {
        f.active = f.info.link.is_none() && f.path == want;
    }
}

/// Whether `name` can be the name of a file in a directory: not empty, not `.` or `..`,
/// no `/` and no NUL (a name from a browser is never a path).
pub fn plain_name(name: &str) -> bool {
    !name.is_empty() && name != "." && name != ".." && !name.contains(['/', '\0'])
}

/// A home file's bytes, as far as they were read.
pub struct Content {
    pub file: HomeFile,
    /// The whole file; `None` when it is larger than the limit it was read with.
    pub data: Option<Vec<u8>>,
}

/// File `name` of home directory `folder` (`~`, `~/sieve`) of `account` in snapshot `id`,
/// read whole when it has at most `limit` bytes. A name that is not a file of that
/// directory (a link, a path, another directory's file, a mail folder's file) is not
/// found.
pub fn file(
    repo: &Repository,
    (id, account, folder): (&str, &str, &str),
    name: &str,
    limit: u64,
) -> Result<Content> {
    check_snapshot_id(id)?;
    if !plain_name(name) {
        return Err(Error::InvalidInput(format!("{name:?} is not a file name")));
    }
    let snap = repo.find_snapshot(&id.to_ascii_lowercase())?;
    let tree = crate::read::account_tree(repo, &snap, account)?
        .ok_or_else(|| Error::NotFound(format!("no account {account:?}")))?;
    let node = (tree.home.iter())
        .find(|n| home_name(n) == folder)
        .ok_or_else(|| Error::NotFound(format!("no home directory {folder:?}")))?;
    let entry = (node.files.iter())
        .find(|e| e.name == name.as_bytes())
        .ok_or_else(|| Error::NotFound(format!("no file {name:?} in {folder}")))?;
    if let Some(t) = &entry.link {
        return Err(Error::NotFound(format!(
            "{folder}/{name} is a link to {:?}, not a file (links are not followed)",
            String::from_utf8_lossy(t)
        )));
    }
    let data = match entry.size <= limit {
        true => Some(assemble_file(repo, entry)?),
        false => None,
    };
    let file = HomeFile::of(FileInfo {
        account: account.to_string(),
        folder: folder.to_string(),
        name: name.to_string(),
        size: entry.size,
        mtime: entry.mtime.secs,
        mode: entry.mode,
        link: None,
    });
    Ok(Content { file, data })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(folder: &str, name: &str, link: Option<&str>) -> HomeFile {
        HomeFile::of(FileInfo {
            account: String::new(),
            folder: folder.into(),
            name: name.into(),
            size: 0,
            mtime: 0,
            mode: 0o644,
            link: link.map(str::to_string),
        })
    }

    fn active(link: Option<&str>) -> Vec<String> {
        let mut v = vec![
            f("~", ACTIVE_LINK, link),
            f("~/sieve", "rules.sieve", None),
            f("~/sieve", "vacation.sieve", None),
        ];
        mark_active(&mut v);
        (v.into_iter().filter(|f| f.active))
            .map(|f| f.path)
            .collect()
    }

    #[test]
    fn the_active_script_is_the_one_the_link_names() {
        assert_eq!(active(Some("sieve/rules.sieve")), ["~/sieve/rules.sieve"]);
        assert_eq!(
            active(Some("./sieve//vacation.sieve")),
            ["~/sieve/vacation.sieve"]
        );
        assert_eq!(active(None), ["~/.dovecot.sieve"], "a script, not a link");
        for out in ["/etc/passwd", "../x/sieve/rules.sieve", "sieve/none", ""] {
            assert!(active(Some(out)).is_empty(), "{out}");
        }
        assert_eq!(f("~/sieve", "a", None).path, "~/sieve/a");
    }

    #[test]
    fn names_are_not_paths() {
        for ok in ["rules.sieve", ".dovecot.sieve", "a b", "..x"] {
            assert!(plain_name(ok), "{ok}");
        }
        for bad in [
            "",
            ".",
            "..",
            "../x",
            "sieve/rules.sieve",
            "/etc/passwd",
            "a\0",
        ] {
            assert!(!plain_name(bad), "{bad:?}");
        }
    }
}
