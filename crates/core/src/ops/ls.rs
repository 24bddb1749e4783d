//! Listing a snapshot's accounts, folders and messages.

use crate::error::{Error, Result};
use crate::imap::acl::{parse_dovecot_acl, AclRule};
use crate::model::assemble::assemble_file;
use crate::model::{folder_list, folder_matches, folder_name, select_accounts, FolderMatch};
use crate::repo::tree::{AccountTree, FolderNode, MessageEntry, RootTree};
use crate::repo::Repository;
use serde::Serialize;

#[derive(Clone, Debug, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AccountInfo {
    pub name: String,
    pub path: String,
    pub messages: u64,
    pub bytes: u64,
    /// Files of an account without messages (a `file:` backup's), and their bytes.
    pub files: u64,
    pub file_bytes: u64,
}

#[derive(Clone, Debug, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct FolderInfo {
    pub account: String,
    /// The name people use (`Entwürfe`): what `--folder` takes.
    pub name: String,
    /// The folder's Maildir++ directory as stored (`.Entw&APw-rfe`; empty for INBOX).
    pub dir: String,
    pub messages: u64,
    pub bytes: u64,
    /// Its files (a Maildir's `dovecot-uidlist`...; a `file:` backup's files), and their
    /// bytes.
    pub files: u64,
    pub file_bytes: u64,
    /// A directory of the account's home beside its Maildir (sieve scripts), not a mail
    /// folder: named `~` (the home itself) or `~/sieve`, which `--folder` takes too.
    pub home: bool,
    /// Who else may do what in it: its `dovecot-acl` file's entries, as IMAP names them
    /// (`crate::imap::acl`); empty when it has none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub acl: Vec<AclRule>,
}

/// A file of a folder without messages (a directory of a `file:` backup).
#[derive(Clone, Debug, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct FileInfo {
    pub account: String,
    pub folder: String,
    pub name: String,
    pub size: u64,
    /// The file's mtime, Unix seconds.
    pub mtime: i64,
    /// Permission bits.
    pub mode: u32,
    /// A symbolic link's target.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub link: Option<String>,
}

#[derive(Clone, Debug, Default, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct MessageInfo {
    pub account: String,
    /// The folder's name as people use it.
    pub folder: String,
    /// The Maildir key: what `restore --message` takes.
    pub key: String,
    /// Maildir flags and keyword letters.
    pub flags: String,
    pub size: u64,
    /// Internal date (the file's mtime), Unix seconds.
    pub internal_date: i64,
    /// The Date header, Unix seconds.
    pub date: Option<i64>,
    pub from: String,
    pub subject: String,
}

impl MessageInfo {
    /// What `ls` shows of message `m` of `folder` in `account`.
    pub fn of(account: &str, folder: &str, m: MessageEntry) -> MessageInfo {
        let flags = String::from_utf8_lossy(m.flags()).into();
        MessageInfo {
            account: account.into(),
            folder: folder.into(),
            // The key's own bytes when they are UTF-8 (no copy: a server lists 100,000).
            key: String::from_utf8(m.key)
                .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned()),
            flags,
            size: m.size,
            internal_date: m.mtime.secs,
            date: m.date,
            from: m.from,
            subject: m.subject,
        }
    }
}

/// The store's own files a snapshot holds ([`RootTree::store`]: a Maildir store's
/// shared-mailbox dictionary), as `ls --store` lists them: `folder` is their directory
/// below the store (`.` for its root), `account` empty. None when it has none.
pub fn store_files(repo: &Repository, snapshot: &str) -> Result<Vec<FileInfo>> {
    let snap = repo.find_snapshot(snapshot)?;
    let root: RootTree = repo.read_tree(&snap.root)?;
    let Some(id) = root.store else {
        return Ok(Vec::new());
    };
    let t: AccountTree = repo.read_tree(&id)?;
    Ok((t.home.iter())
        .flat_map(|n| {
            n.files
                .iter()
                .map(move |e| file_info("", n.name.clone(), e))
        })
        .collect())
}

/// The files of `account`'s home in a snapshot, each `folder` its directory as `ls` names
/// it (`~`, `~/sieve`): one read of the account's tree; `None` when the backup kept no
/// home for it.
pub fn home_files(
    repo: &Repository,
    snapshot: &str,
    account: &str,
) -> Result<Option<Vec<FileInfo>>> {
    let snap = repo.find_snapshot(snapshot)?;
    let root: RootTree = repo.read_tree(&snap.root)?;
    let Some(a) = select_accounts(root, &[account.to_string()])?.pop() else {
        return Ok(None);
    };
    let t: AccountTree = repo.read_tree(&a.tree)?;
    if t.home.is_empty() {
        return Ok(None);
    }
    Ok(Some(
        (t.home.iter())
            .flat_map(|n| {
                n.files
                    .iter()
                    .map(move |e| file_info(account, home_name(n), e))
            })
            .collect(),
    ))
}

/// A file's row in a [`Listing::Files`].
fn file_info(account: &str, folder: String, e: &crate::repo::tree::FileEntry) -> FileInfo {
    FileInfo {
        account: account.to_string(),
        folder,
        name: String::from_utf8_lossy(&e.name).into(),
        size: e.size,
        mtime: e.mtime.secs,
        mode: e.mode,
        link: (e.link.as_ref()).map(|l| String::from_utf8_lossy(l).into_owned()),
    }
}

/// What `ls` shows: accounts, or one level down when narrowed.
#[derive(Clone, Debug, Serialize)]
#[serde(tag = "kind", content = "items", rename_all = "lowercase")]
pub enum Listing {
    Accounts(Vec<AccountInfo>),
    Folders(Vec<FolderInfo>),
    /// A folder's messages, handed one at a time to the caller of [`ls`] (a folder of
    /// a million messages is never held): how many.
    Messages(u64),
    /// The files of a folder without messages.
    Files(Vec<FileInfo>),
}

/// A folder's row: its counts, and its ACL's entries (read from its `dovecot-acl`).
fn folder_info(
    repo: &Repository,
    account: &str,
    f: &FolderNode,
    name: String,
    home: bool,
) -> Result<FolderInfo> {
    let (files, file_bytes) = count_files([f]);
    let acl = match f.files.iter().find(|e| e.name == b"dovecot-acl") {
        Some(e) => parse_dovecot_acl(&assemble_file(repo, e)?).0,
        None => Vec::new(),
    };
    Ok(FolderInfo {
        account: account.to_string(),
        dir: String::from_utf8_lossy(&f.dir).into(),
        name,
        messages: f.messages,
        bytes: f.bytes,
        files,
        file_bytes,
        home,
        acl,
    })
}

/// How `ls` names a directory of an account's home: `~`, `~/sieve`.
pub fn home_name(f: &FolderNode) -> String {
    match f.dir.is_empty() {
        true => "~".into(),
        false => format!("~/{}", String::from_utf8_lossy(&f.dir)),
    }
}

/// How many files `folders` hold, and their bytes.
fn count_files<'a>(folders: impl IntoIterator<Item = &'a FolderNode>) -> (u64, u64) {
    (folders.into_iter())
        .flat_map(|f| &f.files)
        .fold((0, 0), |(n, b), f| (n + 1, b + f.size))
}

/// Lists accounts; with `account`, its folders; with `folder`, that folder's messages,
/// each handed to `message` as its chunk is read, in key order.
pub fn ls(
    repo: &Repository,
    snapshot: &str,
    account: Option<&str>,
    folder: Option<&str>,
    message: &mut dyn FnMut(MessageInfo) -> Result<()>,
) -> Result<Listing> {
    let snap = repo.find_snapshot(snapshot)?;
    let root: RootTree = repo.read_tree(&snap.root)?;
    if account.is_none() && folder.is_none() {
        let mut out = Vec::new();
        for a in root.accounts {
            // An account without messages is read for its files (a `file:` backup).
            let (files, file_bytes) = match a.messages {
                0 => count_files(&repo.read_tree::<AccountTree>(&a.tree)?.folders),
                _ => (0, 0),
            };
            out.push(AccountInfo {
                path: String::from_utf8_lossy(&a.rel_path).into(),
                name: a.name,
                messages: a.messages,
                bytes: a.bytes,
                files,
                file_bytes,
            });
        }
        return Ok(Listing::Accounts(out));
    }
    let filter: Vec<String> = account.map(|a| vec![a.to_string()]).unwrap_or_default();
    let accounts = select_accounts(root, &filter)?;
    let mut folders = Vec::new();
    let mut messages = 0u64;
    let mut files = Vec::new();
    let mut matched = false;
    let mut names = Vec::new();
    for a in accounts {
        let t: AccountTree = repo.read_tree(&a.tree)?;
        let nodes = (t.folders.into_iter().map(|f| (f, false)))
            .chain(t.home.into_iter().map(|f| (f, true)));
        for (f, home) in nodes {
            let name = match home {
                true => home_name(&f),
                false => folder_name(&f).into_owned(),
            };
            let matches = |want: &str| match home {
                true => want == name,
                false => folder_matches(&f, want) == FolderMatch::Itself,
            };
            match folder {
                None => folders.push(folder_info(repo, &a.name, &f, name, home)?),
                Some(want) if matches(want) => {
                    matched = true;
                    let chunks = repo.folder_chunks(&f)?;
                    if chunks.is_empty() {
                        files.extend(f.files.iter().map(|e| file_info(&a.name, name.clone(), e)));
                    }
                    for c in &chunks {
                        for m in repo.read_chunk(c)? {
                            message(MessageInfo::of(&a.name, &name, m))?;
                            messages += 1;
                        }
                    }
                }
                Some(_) => names.push(name),
            }
        }
    }
    match folder {
        None => Ok(Listing::Folders(folders)),
        Some(f) if !matched => Err(Error::InvalidInput(format!(
            "no folder {f:?} in the snapshot (it has: {})",
            folder_list(names)
        ))),
        Some(_) if messages == 0 && !files.is_empty() => Ok(Listing::Files(files)),
        Some(_) => Ok(Listing::Messages(messages)),
    }
}
