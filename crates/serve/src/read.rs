//! The read side over the repository, blocking (handlers run it on tokio's blocking
//! threads): snapshots, a snapshot's accounts and folders through the engine's `ls`, a
//! folder's messages a page at a time sorted by date, one message by its place
//! (snapshot, account, folder, key) with its bytes, and the snapshots that hold its
//! content (the places map search keeps).

use mailvault_core::model::assemble::assemble;
use mailvault_core::model::{folder_name, select_accounts};
use mailvault_core::ops::ls::{ls, AccountInfo, FolderInfo, Listing, MessageInfo};
use mailvault_core::repo::tree::{AccountTree, MessageEntry, RootTree};
use mailvault_core::search::places::{Places, Scope};
use mailvault_core::{Error, Id, Repository, Result};
use serde::Serialize;
use std::path::Path;

/// A snapshot as the pages and the API show it.
#[derive(Clone, Debug, Serialize)]
pub struct SnapRow {
    pub id: String,
    /// Unix seconds.
    pub time: i64,
    pub hostname: String,
    pub source: String,
    pub tags: Vec<String>,
    pub accounts: u64,
    pub messages: u64,
    pub bytes: u64,
}

impl SnapRow {
    fn of(s: &mailvault_core::repo::snapshot::Snapshot) -> SnapRow {
        SnapRow {
            id: s.id.to_hex(),
            time: s.time,
            hostname: s.hostname.clone(),
            source: s.source.clone(),
            tags: s.tags.clone(),
            accounts: s.summary.accounts,
            messages: s.summary.messages,
            bytes: s.summary.bytes,
        }
    }
}

/// A snapshot id as a query names it: hex, 8 to 64 digits (a unique prefix).
pub fn check_snapshot_id(id: &str) -> Result<()> {
    match (8..=64).contains(&id.len()) && id.bytes().all(|c| c.is_ascii_hexdigit()) {
        true => Ok(()),
        false => Err(Error::InvalidInput(format!(
            "{:?} is not a snapshot id (8 to 64 hex digits)",
            id.chars().take(80).collect::<String>()
        ))),
    }
}

/// Every snapshot, newest first.
pub fn snapshots(repo: &Repository) -> Result<Vec<SnapRow>> {
    let mut list = repo.snapshots()?.list;
    list.sort_by_key(|s| std::cmp::Reverse((s.time, s.time_nanos)));
    Ok(list.iter().map(SnapRow::of).collect())
}

/// Snapshot `id` (a unique prefix).
pub fn snapshot(repo: &Repository, id: &str) -> Result<SnapRow> {
    check_snapshot_id(id)?;
    Ok(SnapRow::of(&repo.find_snapshot(&id.to_ascii_lowercase())?))
}

fn no_messages(_: MessageInfo) -> Result<()> {
    Ok(())
}

/// The accounts of snapshot `id`.
pub fn accounts(repo: &Repository, id: &str) -> Result<Vec<AccountInfo>> {
    check_snapshot_id(id)?;
    match ls(repo, id, None, None, &mut no_messages)? {
        Listing::Accounts(v) => Ok(v),
        _ => Err(Error::Internal("ls: no accounts listed".into())),
    }
}

/// The folders of `account` in snapshot `id`.
pub fn folders(repo: &Repository, id: &str, account: &str) -> Result<Vec<FolderInfo>> {
    check_snapshot_id(id)?;
    match ls(repo, id, Some(account), None, &mut no_messages)? {
        Listing::Folders(v) => Ok(v),
        _ => Err(Error::Internal("ls: no folders listed".into())),
    }
}

/// A page of a folder's messages.
#[derive(Clone, Debug, Serialize)]
pub struct Page {
    pub items: Vec<MessageInfo>,
    /// Messages in the folder.
    pub total: u64,
    /// This page, from 1.
    pub page: usize,
    pub pages: usize,
    pub page_size: usize,
}

/// The date a message is sorted by: its Date header, else its internal date.
fn sort_date(m: &MessageInfo) -> i64 {
    m.date.unwrap_or(m.internal_date)
}

/// Page `page` (from 1) of `folder`'s messages in `account` of snapshot `id`, newest
/// first (by Date header, else internal date; then by key).
pub fn messages(
    repo: &Repository,
    (id, account, folder): (&str, &str, &str),
    page: usize,
    page_size: usize,
) -> Result<Page> {
    check_snapshot_id(id)?;
    let mut all = Vec::new();
    let mut each = |m: MessageInfo| {
        all.push(m);
        Ok(())
    };
    ls(repo, id, Some(account), Some(folder), &mut each)?;
    all.sort_by(|a, b| sort_date(b).cmp(&sort_date(a)).then(a.key.cmp(&b.key)));
    let page_size = page_size.max(1);
    let pages = all.len().div_ceil(page_size).max(1);
    let page = page.clamp(1, pages);
    let total = all.len() as u64;
    let items = all
        .into_iter()
        .skip((page - 1) * page_size)
        .take(page_size)
        .collect();
    Ok(Page {
        items,
        total,
        page,
        pages,
        page_size,
    })
}

/// Where a message is: snapshot id (prefix), account, folder name, Maildir key.
#[derive(Clone, Debug, serde::Deserialize, Serialize)]
pub struct Place {
    pub snapshot: String,
    pub account: String,
    pub folder: String,
    pub key: String,
}

/// A message found at its place: its entry (flags, dates, content id) and its bytes,
/// checked against the content hash.
pub struct Found {
    pub snapshot: SnapRow,
    pub entry: MessageEntry,
    pub raw: Vec<u8>,
}

/// The message at `p`.
pub fn message(repo: &Repository, p: &Place) -> Result<Found> {
    check_snapshot_id(&p.snapshot)?;
    let snap = repo.find_snapshot(&p.snapshot.to_ascii_lowercase())?;
    let root: RootTree = repo.read_tree(&snap.root)?;
    let not_found = || Error::NotFound(format!("no message {:?} in that folder", p.key));
    for a in select_accounts(root, std::slice::from_ref(&p.account))? {
        if a.name != p.account {
            continue;
        }
        let t: AccountTree = repo.read_tree(&a.tree)?;
        let Some(f) = t.folders.iter().find(|f| folder_name(f) == p.folder) else {
            return Err(Error::NotFound(format!("no folder {:?}", p.folder)));
        };
        for c in &repo.folder_chunks(f)? {
            if let Some(entry) = (repo.read_chunk(c)?)
                .into_iter()
                .find(|m| m.key == p.key.as_bytes())
            {
                let raw = assemble(repo, &entry.content, entry.size, Some(&entry.hash))?;
                return Ok(Found {
                    snapshot: SnapRow::of(&snap),
                    entry,
                    raw,
                });
            }
        }
        return Err(not_found());
    }
    Err(Error::NotFound(format!("no account {:?}", p.account)))
}

/// A run of snapshots that hold a content in one folder.
#[derive(Clone, Debug, Serialize)]
pub struct Holder {
    pub account: String,
    pub folder: String,
    pub first_snapshot: String,
    pub first_time: i64,
    pub last_snapshot: String,
    pub last_time: i64,
}

/// The snapshots that hold content `hash`, as runs per folder (the places map in the
/// search cache `cache`, brought up to date).
pub fn holders(repo: &Repository, cache: &Path, hash: &Id) -> Result<Vec<Holder>> {
    let places = Places::open(repo, Some(cache), None)?;
    let view = places.view(repo, &Scope::All)?;
    let mut out: Vec<Holder> = (places.records_of(hash))
        .filter_map(|r| {
            let (a, b) = places.span(&view, r)?;
            let fk = &places.folders[places.folder(r) as usize];
            let (first, last) = (&view.snapshots[a as usize], &view.snapshots[b as usize]);
            Some(Holder {
                account: fk.account.clone(),
                folder: fk.folder.clone(),
                first_snapshot: first.id.to_hex(),
                first_time: first.time,
                last_snapshot: last.id.to_hex(),
                last_time: last.time,
            })
        })
        .collect();
    out.sort_by_key(|h| std::cmp::Reverse(h.last_time));
    Ok(out)
}

/// A file name for a download: the characters `[A-Za-z0-9._-]` of `name`, others as `_`,
/// no leading dot, at most 100 characters, ending in `.eml`.
pub fn download_name(name: &str) -> String {
    let mut s: String = (name.chars())
        .map(
            |c| match c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                true => c,
                false => '_',
            },
        )
        .take(100)
        .collect();
    while s.starts_with('.') {
        s.remove(0);
    }
    if s.is_empty() {
        s = "message".into();
    }
    s + ".eml"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn download_names_are_plain() {
        assert_eq!(
            download_name("1700000000.M1P2.host"),
            "1700000000.M1P2.host.eml"
        );
        assert_eq!(download_name("../../x.html"), "_.._x.html.eml");
        assert_eq!(download_name("..."), "message.eml");
        assert_eq!(download_name("a\"b\r\nc;d/é"), "a_b__c_d__.eml");
        assert_eq!(download_name(&"x".repeat(300)).len(), 104);
    }

    #[test]
    fn snapshot_ids_are_hex() {
        assert!(check_snapshot_id("0123abcd").is_ok());
        assert!(check_snapshot_id(&"a".repeat(64)).is_ok());
        for bad in [
            "latest",
            "0123abc",
            "../../etc",
            "0123abcg",
            &"a".repeat(65),
        ] {
            assert!(check_snapshot_id(bad).is_err(), "{bad}");
        }
    }
}
