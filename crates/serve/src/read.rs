//! The read side over the repository, blocking (handlers run it on tokio's blocking
//! threads): snapshots, a snapshot's accounts and folders through the engine's `ls`, a
//! folder's messages a page at a time sorted by date, one message by its place
//! (snapshot, account, folder, key) with its bytes, and the snapshots that hold its
//! content (the places map search keeps).

use crate::state::lock;
use mailvault_core::model::assemble::assemble;
use mailvault_core::model::folder_name;
use mailvault_core::ops::ls::{ls, AccountInfo, FolderInfo, Listing, MessageInfo};
use mailvault_core::repo::snapshot::Snapshot;
use mailvault_core::repo::tree::{AccountTree, ChunkRef, FolderNode, MessageEntry, RootTree};
use mailvault_core::search::places::{Places, Scope};
use mailvault_core::{Error, Id, Repository, Result};
use serde::Serialize;
use std::sync::{Arc, Mutex};

/// A snapshot as the pages and the API show it.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
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

/// What each snapshot holds of the accounts mail users have looked for: (root tree,
/// account) to its (messages, bytes), `None` where the snapshot does not hold it. Root
/// trees never change, so a mail user's snapshot list reads each root tree once, not at
/// every view (a thousand snapshots of a thousand accounts were a thousand root trees
/// read per view). Cleared when it grows past [`HELD_MAX`] entries.
#[derive(Default)]
pub struct Held(Mutex<std::collections::HashMap<(Id, String), Counts>>);

/// An account's (messages, bytes) in a snapshot, `None` where it is not in it.
type Counts = Option<(u64, u64)>;

/// Entries [`Held`] keeps at most (about 100 bytes each).
const HELD_MAX: usize = 200_000;

/// Every snapshot, newest first; for a mail user (`sees`: their accounts), only those that
/// hold one of their accounts, counted as those accounts alone (its root tree read, or
/// known from `held`).
pub fn snapshots(repo: &Repository, sees: Option<&[String]>, held: &Held) -> Result<Vec<SnapRow>> {
    let mut list = repo.snapshots()?.list;
    list.sort_by_key(|s| std::cmp::Reverse((s.time, s.time_nanos)));
    let rows = list.iter().map(|s| row_for(repo, s, sees, held));
    rows.filter_map(Result::transpose).collect()
}

/// Snapshot `id` (a unique prefix), as [`snapshots`] shows it to `sees`.
pub fn snapshot(
    repo: &Repository,
    id: &str,
    sees: Option<&[String]>,
    held: &Held,
) -> Result<SnapRow> {
    check_snapshot_id(id)?;
    let s = repo.find_snapshot(&id.to_ascii_lowercase())?;
    row_for(repo, &s, sees, held)?.ok_or_else(|| Error::NotFound(format!("no snapshot {id}")))
}

/// The row of snapshot `s` for the accounts `sees` (`None`: the admin, who sees it
/// whole); `None` when it holds none of them.
fn row_for(
    repo: &Repository,
    s: &mailvault_core::repo::snapshot::Snapshot,
    sees: Option<&[String]>,
    held: &Held,
) -> Result<Option<SnapRow>> {
    let mut row = SnapRow::of(s);
    let Some(sees) = sees else {
        return Ok(Some(row));
    };
    // A statement of its own: the lock is let go before the tree is read.
    let known: Option<Vec<Counts>> = {
        let h = lock(&held.0);
        (sees.iter())
            .map(|a| h.get(&(s.root, a.clone())).copied())
            .collect()
    };
    let counts = match known {
        Some(c) => c,
        None => {
            let root: RootTree = repo.read_tree(&s.root)?;
            let counts: Vec<Counts> = (sees.iter())
                .map(|name| {
                    let a = root.accounts.iter().find(|a| a.name == *name);
                    a.map(|a| (a.messages, a.bytes))
                })
                .collect();
            let mut h = lock(&held.0);
            if h.len() + sees.len() > HELD_MAX {
                h.clear();
            }
            for (name, c) in sees.iter().zip(&counts) {
                h.insert((s.root, name.clone()), *c);
            }
            counts
        }
    };
    (row.accounts, row.messages, row.bytes) = (0, 0, 0);
    for (messages, bytes) in counts.into_iter().flatten() {
        (row.accounts, row.messages, row.bytes) =
            (row.accounts + 1, row.messages + messages, row.bytes + bytes);
    }
    Ok((row.accounts > 0).then_some(row))
}

fn no_messages(_: MessageInfo) -> Result<()> {
    Ok(())
}

/// The accounts of snapshot `id` that `sees` names (`None`: every one).
pub fn accounts(repo: &Repository, id: &str, sees: Option<&[String]>) -> Result<Vec<AccountInfo>> {
    check_snapshot_id(id)?;
    match ls(repo, id, None, None, &mut no_messages)? {
        Listing::Accounts(mut v) => {
            v.retain(|a| sees.is_none_or(|s| s.contains(&a.name)));
            Ok(v)
        }
        _ => Err(Error::Internal("ls: no accounts listed".into())),
    }
}

/// The mail folders of `account` in snapshot `id` (its home's directories, which `ls`
/// lists after them, are not mail: `home` lists their files).
pub fn folders(repo: &Repository, id: &str, account: &str) -> Result<Vec<FolderInfo>> {
    check_snapshot_id(id)?;
    match ls(repo, id, Some(account), None, &mut no_messages)? {
        Listing::Folders(mut v) => {
            v.retain(|f| !f.home);
            Ok(v)
        }
        _ => Err(Error::Internal("ls: no folders listed".into())),
    }
}

/// A page of a folder's messages.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct Page {
    pub items: Vec<Row>,
    /// Messages in the folder.
    pub total: u64,
    /// This page, from 1.
    pub page: usize,
    pub pages: usize,
    pub page_size: usize,
}

/// A message of a page: what `ls` shows of it, and where it was gone.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct Row {
    #[serde(flatten)]
    pub info: MessageInfo,
    /// The first later snapshot of the same host and source whose folder no longer held
    /// it (deleted there, or moved), as [`Holder`] has it: its id and time; absent while
    /// the newest holds it (or when the places map does not know the snapshot).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gone_snapshot: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gone_time: Option<i64>,
}

/// The date a message is sorted by: its Date header, else its internal date.
fn sort_date(m: &MessageInfo) -> i64 {
    m.date.unwrap_or(m.internal_date)
}

/// A folder as the cache names it: the snapshot's full id, the account, the folder.
type FolderKey = (String, String, String);

/// The sorted messages of the folders paged through last, so that the next page of a
/// large folder is not read and sorted again. A snapshot never changes (its full id names
/// its content), so an entry is never stale; the cache is emptied when the repository is
/// opened again (a snapshot forgotten since).
#[derive(Default)]
pub struct FolderCache {
    /// Most recently used last.
    entries: Vec<(FolderKey, Arc<FolderList>)>,
}

/// Folders kept at most.
const CACHED_FOLDERS: usize = 4;
/// Messages kept at most, over all folders (the last folder is kept whatever its size).
const CACHED_MESSAGES: usize = 400_000;

impl FolderCache {
    fn get(&mut self, k: &FolderKey) -> Option<Arc<FolderList>> {
        let i = self.entries.iter().position(|(x, _)| x == k)?;
        let e = self.entries.remove(i);
        let v = e.1.clone();
        self.entries.push(e);
        Some(v)
    }

    fn put(&mut self, k: FolderKey, v: Arc<FolderList>) {
        self.entries.retain(|(x, _)| *x != k);
        self.entries.push((k, v));
        let held = |e: &[(FolderKey, Arc<FolderList>)]| -> usize {
            e.iter().map(|(_, v)| v.sorted.len()).sum()
        };
        while self.entries.len() > 1
            && (self.entries.len() > CACHED_FOLDERS || held(&self.entries) > CACHED_MESSAGES)
        {
            self.entries.remove(0);
        }
    }

    pub fn clear(&mut self) {
        self.entries.clear();
    }
}

/// A folder's messages as the pages show them, newest first (by Date header, else
/// internal date; then by key), and which of the folder's chunks holds each message's
/// entry: a message page then reads that chunk alone, not the folder up to it.
pub struct FolderList {
    pub sorted: Vec<MessageInfo>,
    /// The content of each message of `sorted` (by position): where a page's rows are in
    /// the places map, for their "deleted since".
    content: Vec<Id>,
    /// The folder's chunks (a cached folder's message is found without reading the
    /// snapshot's trees again).
    chunks: Vec<ChunkRef>,
    /// The chunk that holds each message of `sorted` (by position).
    chunk: Vec<u32>,
    /// The hash of each message's key and its position in `sorted`, ascending: a key is
    /// found by a binary search (no copy of every key kept in a map). Made when a message
    /// is first looked up, not for the first page.
    by_key: std::sync::OnceLock<Vec<(u64, u32)>>,
    /// What hashes keys for `by_key` (keyed at random: keys are the mail store's).
    hasher: std::hash::RandomState,
    /// The other orders asked for, as positions in `sorted`, ascending by their key: each
    /// sorted once, then kept with the folder.
    orders: Mutex<std::collections::HashMap<SortBy, Arc<Vec<u32>>>>,
}

/// What a folder's messages are sorted by (`?sort=`).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, serde::Deserialize, utoipa::ToSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum SortBy {
    /// The Date header, else the internal date (newest first by default).
    #[default]
    Date,
    /// The From header, case-insensitively (A to Z by default).
    From,
    /// The Subject, case-insensitively (A to Z by default).
    Subject,
    /// The size (largest first by default).
    Size,
}

impl SortBy {
    /// Whether this sort goes from the largest key down unless told otherwise.
    pub fn descending_by_default(self) -> bool {
        matches!(self, SortBy::Date | SortBy::Size)
    }
}

impl FolderList {
    /// The list of messages `infos` with their contents (in the folder's order;
    /// `chunk_of`: the chunk of `chunks` each is in), sorted newest first. Positions are
    /// sorted, not the messages (a move of 100,000 messages' rows per pass of the sort was
    /// most of a cold first page), then each message moved once to its place.
    fn new(
        mut infos: Vec<MessageInfo>,
        content: &[Id],
        chunk_of: &[u32],
        chunks: Vec<ChunkRef>,
    ) -> FolderList {
        use rayon::slice::ParallelSliceMut;
        let mut order: Vec<(i64, u32)> = (infos.iter().enumerate())
            .map(|(i, m)| (sort_date(m), i as u32))
            .collect();
        order.par_sort_unstable_by(|(da, a), (db, b)| {
            db.cmp(da)
                .then_with(|| infos[*a as usize].key.cmp(&infos[*b as usize].key))
        });
        let chunk = order.iter().map(|&(_, i)| chunk_of[i as usize]).collect();
        let content = order.iter().map(|&(_, i)| content[i as usize]).collect();
        let sorted: Vec<MessageInfo> = (order.iter())
            .map(|&(_, i)| std::mem::take(&mut infos[i as usize]))
            .collect();
        FolderList {
            sorted,
            content,
            chunks,
            chunk,
            by_key: Default::default(),
            hasher: Default::default(),
            orders: Mutex::default(),
        }
    }

    /// The chunk that holds the message of `key`.
    fn chunk_of(&self, key: &str) -> Option<&ChunkRef> {
        use rayon::slice::ParallelSliceMut;
        use std::hash::BuildHasher;
        let by_key = self.by_key.get_or_init(|| {
            let mut v: Vec<(u64, u32)> = (self.sorted.iter().enumerate())
                .map(|(p, m)| (self.hasher.hash_one(&m.key), p as u32))
                .collect();
            v.par_sort_unstable();
            v
        });
        let h = self.hasher.hash_one(key);
        let from = by_key.partition_point(|&(x, _)| x < h);
        let p = (by_key[from..].iter())
            .take_while(|&&(x, _)| x == h)
            .map(|&(_, p)| p as usize)
            .find(|&p| self.sorted[p].key == key)?;
        self.chunks.get(*self.chunk.get(p)? as usize)
    }

    /// Positions in `sorted` ascending by `by` (ties newest first, as `sorted`).
    fn order(&self, by: SortBy) -> Arc<Vec<u32>> {
        if let Some(o) = lock(&self.orders).get(&by) {
            return o.clone();
        }
        use rayon::slice::ParallelSliceMut;
        let s = &self.sorted;
        let mut idx: Vec<u32> = (0..s.len() as u32).collect();
        match by {
            // `sorted` is newest first: ascending is its reverse.
            SortBy::Date => idx.reverse(),
            SortBy::Size => idx.par_sort_by_key(|&i| s[i as usize].size),
            SortBy::From | SortBy::Subject => {
                let text = |m: &MessageInfo| match by {
                    SortBy::From => m.from.to_lowercase(),
                    _ => m.subject.to_lowercase(),
                };
                let keys: Vec<String> = s.iter().map(text).collect();
                idx.par_sort_by(|&a, &b| keys[a as usize].cmp(&keys[b as usize]).then(a.cmp(&b)));
            }
        }
        let o = Arc::new(idx);
        lock(&self.orders).insert(by, o.clone());
        o
    }
}

/// The folder named exactly `folder` (not a subfolder) of `account` in snapshot `snap`.
fn folder_node(
    repo: &Repository,
    snap: &Snapshot,
    account: &str,
    folder: &str,
) -> Result<FolderNode> {
    let Some(folders) = account_folders(repo, snap, account)? else {
        return Err(Error::NotFound(format!("no account {account:?}")));
    };
    (folders.into_iter().find(|f| folder_name(f) == folder))
        .ok_or_else(|| Error::NotFound(format!("no folder {folder:?}")))
}

/// The folder's [`FolderList`], from `cache`, or read (all its chunks) and kept there.
fn folder_list(
    repo: &Repository,
    cache: &Mutex<FolderCache>,
    snap: &Snapshot,
    (account, folder): (&str, &str),
) -> Result<Arc<FolderList>> {
    let key = (snap.id.to_hex(), account.to_string(), folder.to_string());
    if let Some(v) = lock(cache).get(&key) {
        return Ok(v);
    }
    let node = folder_node(repo, snap, account, folder)?;
    // Account and folder are the list's, set on a page's rows alone ([`page_of`]).
    let (chunks, read) = read_chunks(repo, &node, |m| (m.hash, MessageInfo::of("", "", m)))?;
    let mut infos = Vec::with_capacity(node.messages as usize);
    let mut content = Vec::with_capacity(node.messages as usize);
    let mut chunk_of = Vec::with_capacity(node.messages as usize);
    for (i, rows) in read.into_iter().enumerate() {
        chunk_of.extend(std::iter::repeat_n(i as u32, rows.len()));
        for (c, m) in rows {
            content.push(c);
            infos.push(m);
        }
    }
    let list = Arc::new(FolderList::new(infos, &content, &chunk_of, chunks));
    lock(cache).put(key, list.clone());
    Ok(list)
}

/// The chunks of folder `node` and their entries made rows by `row`, in order; the chunks
/// read and made rows on every core (each is decrypted and decompressed on its own).
fn read_chunks<T: Send>(
    repo: &Repository,
    node: &FolderNode,
    row: impl Fn(MessageEntry) -> T + Sync,
) -> Result<(Vec<ChunkRef>, Vec<Vec<T>>)> {
    use rayon::prelude::*;
    let chunks = repo.folder_chunks(node)?;
    let read = (chunks.par_iter())
        .map(|c| Ok(repo.read_chunk(c)?.into_iter().map(&row).collect()))
        .collect::<Result<_>>()?;
    Ok((chunks, read))
}

/// Page `page` (from 1) of `folder`'s messages in `account` of snapshot `id`, sorted by
/// `sort` (descending or not); the folder read and sorted once, then kept in `cache`.
/// Each row the places map `places` (when given) knows a later snapshot of the same host
/// and source without is marked so ([`Row::gone_snapshot`]): the page's rows alone are
/// looked up, never the folder.
pub fn messages(
    repo: &Repository,
    (cache, places): (&Mutex<FolderCache>, Option<&Places>),
    (id, account, folder): (&str, &str, &str),
    (sort, descending): (SortBy, bool),
    (page, page_size): (usize, usize),
) -> Result<Page> {
    check_snapshot_id(id)?;
    let snap = repo.find_snapshot(&id.to_ascii_lowercase())?;
    let list = folder_list(repo, cache, &snap, (account, folder))?;
    let n = list.sorted.len();
    let (at, mut p) = match (sort, descending) {
        // The order the list is kept in.
        (SortBy::Date, true) => page_of(n, 0..n as u32, page, page_size),
        (by, desc) => {
            let order = list.order(by);
            match desc {
                true => page_of(n, order.iter().rev().copied(), page, page_size),
                false => page_of(n, order.iter().copied(), page, page_size),
            }
        }
    };
    // The folder's number in the map, and the snapshot's sequence and index there.
    let whence = places.and_then(|m| {
        Some((
            m,
            m.folder_number(account, folder)?,
            m.snapshot_at(&snap.id)?,
        ))
    });
    p.items = (at.into_iter())
        .map(|i| {
            let mut info = list.sorted[i as usize].clone();
            (info.account, info.folder) = (account.to_string(), folder.to_string());
            let gone = whence.and_then(|(m, f, s)| m.gone_after(&list.content[i as usize], f, s));
            Row {
                info,
                gone_snapshot: gone.map(|g| g.id.to_hex()),
                gone_time: gone.map(|g| g.time),
            }
        })
        .collect();
    Ok(p)
}

/// Page `page` (from 1, clamped) of `n` messages in the order `all` gives their positions:
/// the page's positions, and the page without its rows.
fn page_of(
    n: usize,
    all: impl Iterator<Item = u32>,
    page: usize,
    page_size: usize,
) -> (Vec<u32>, Page) {
    let page_size = page_size.max(1);
    let pages = n.div_ceil(page_size).max(1);
    let page = page.clamp(1, pages);
    let at = all.skip((page - 1) * page_size).take(page_size).collect();
    let p = Page {
        items: Vec::new(),
        total: n as u64,
        page,
        pages,
        page_size,
    };
    (at, p)
}

/// Where a message is: snapshot id (prefix), account, folder name, Maildir key.
#[derive(
    Clone, Debug, Default, serde::Deserialize, Serialize, utoipa::IntoParams, utoipa::ToSchema,
)]
#[into_params(parameter_in = Query)]
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

/// The message at `p`: its folder's chunk that holds it (the folder listed once, then
/// kept in `cache`, as for its pages).
pub fn message(repo: &Repository, cache: &Mutex<FolderCache>, p: &Place) -> Result<Found> {
    check_snapshot_id(&p.snapshot)?;
    let snap = repo.find_snapshot(&p.snapshot.to_ascii_lowercase())?;
    let list = folder_list(repo, cache, &snap, (&p.account, &p.folder))?;
    let not_found = || Error::NotFound(format!("no message {:?} in that folder", p.key));
    let chunk = list.chunk_of(&p.key).ok_or_else(not_found)?;
    let entry = (repo.read_chunk(chunk)?.into_iter())
        .find(|m| m.key == p.key.as_bytes())
        .ok_or_else(not_found)?;
    let raw = assemble(repo, &entry.content, entry.size, Some(&entry.hash))?;
    Ok(Found {
        snapshot: SnapRow::of(&snap),
        entry,
        raw,
    })
}

/// The restore of the messages at `places` (a search's hits, picked), one by one, named
/// `label` in its report (and an IMAP target's journal), reading `reads` pack spans at
/// once and keeping `cache_bytes` of shared blobs: see [`picked`].
pub fn picked_request(
    repo: &Repository,
    cache: &Mutex<FolderCache>,
    places: &[Place],
    (label, reads, cache_bytes): (&str, usize, usize),
) -> Result<mailvault_core::restore::Request> {
    Ok(mailvault_core::restore::Request::Picked(
        mailvault_core::restore::Picked {
            accounts: picked(repo, cache, places)?,
            owners: Default::default(),
            label: label.to_string(),
            reads,
            cache_bytes,
        },
    ))
}

/// The messages at `places` (as a search found them), picked for a restore: per account,
/// its folders as the snapshots hold them with those messages' entries (each folder listed
/// once through `cache`, each chunk read once). A place that is gone is an error.
fn picked(
    repo: &Repository,
    cache: &Mutex<FolderCache>,
    places: &[Place],
) -> Result<Vec<mailvault_core::model::PickedAccount>> {
    use mailvault_core::model::{PickedAccount, PickedFolder};
    use std::collections::BTreeMap;
    // By snapshot and account, then folder: the keys.
    let mut wanted: BTreeMap<(&str, &str), BTreeMap<&str, Vec<&str>>> = BTreeMap::new();
    for p in places {
        check_snapshot_id(&p.snapshot)?;
        let folders = wanted.entry((&p.snapshot, &p.account)).or_default();
        folders.entry(&p.folder).or_default().push(&p.key);
    }
    let mut out: Vec<PickedAccount> = Vec::new();
    for ((snapshot, account), folders) in wanted {
        let snap = repo.find_snapshot(&snapshot.to_ascii_lowercase())?;
        let root: RootTree = repo.read_tree(&snap.root)?;
        let not_found =
            |what: String| Error::NotFound(format!("{what} in snapshot {}", snap.id.short()));
        let a = (root.accounts.iter().find(|a| a.name == account))
            .ok_or_else(|| not_found(format!("no account {account:?}")))?;
        let tree: AccountTree = repo.read_tree(&a.tree)?;
        let mut picked = Vec::new();
        for (folder, keys) in folders {
            let mut node = (tree.folders.iter().find(|f| folder_name(f) == folder))
                .ok_or_else(|| not_found(format!("no folder {folder:?}")))?
                .clone();
            let list = folder_list(repo, cache, &snap, (account, folder))?;
            let mut chunks: BTreeMap<Id, Vec<MessageEntry>> = BTreeMap::new();
            let mut entries = Vec::with_capacity(keys.len());
            for key in keys {
                let missing = || not_found(format!("no message {key:?} in {folder:?}"));
                let c = list.chunk_of(key).ok_or_else(missing)?;
                let chunk = match chunks.entry(c.entries) {
                    std::collections::btree_map::Entry::Occupied(o) => o.into_mut(),
                    std::collections::btree_map::Entry::Vacant(v) => v.insert(repo.read_chunk(c)?),
                };
                let e = (chunk.iter().find(|m| m.key == key.as_bytes())).ok_or_else(missing)?;
                entries.push(e.clone());
            }
            // The node gives the messages' place and folder files; its chunks are not read.
            (node.chunks, node.chunk_tree) = (Vec::new(), None);
            picked.push(PickedFolder { node, entries });
        }
        match out.iter_mut().find(|p| p.account.name == account) {
            Some(p) => p.folders.extend(picked),
            None => out.push(PickedAccount {
                account: a.clone(),
                folders: picked,
                home: Vec::new(),
            }),
        }
    }
    Ok(out)
}

/// The folders of `account` in snapshot `snap`, as stored; `None` when the snapshot has
/// no such account (the IMAP view walks every snapshot of one account this way).
pub fn account_folders(
    repo: &Repository,
    snap: &Snapshot,
    account: &str,
) -> Result<Option<Vec<FolderNode>>> {
    Ok(account_tree(repo, snap, account)?.map(|t| t.folders))
}

/// The tree of `account` in snapshot `snap` (its folders and its home); `None` when the
/// snapshot has no such account.
pub fn account_tree(
    repo: &Repository,
    snap: &Snapshot,
    account: &str,
) -> Result<Option<AccountTree>> {
    let root: RootTree = repo.read_tree(&snap.root)?;
    let Some(a) = root.accounts.iter().find(|a| a.name == account) else {
        return Ok(None);
    };
    Ok(Some(repo.read_tree(&a.tree)?))
}

/// Every message entry of folder `f`, in the order stored.
pub fn folder_entries(repo: &Repository, f: &FolderNode) -> Result<Vec<MessageEntry>> {
    Ok(read_chunks(repo, f, |m| m)?
        .1
        .into_iter()
        .flatten()
        .collect())
}

/// The bytes of message `e` exactly as the backup stored them, checked against its hash.
pub fn entry_bytes(repo: &Repository, e: &MessageEntry) -> Result<Vec<u8>> {
    assemble(repo, &e.content, e.size, Some(&e.hash))
}

/// A run of snapshots that hold a content in one folder.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct Holder {
    pub account: String,
    pub folder: String,
    pub first_snapshot: String,
    pub first_time: i64,
    pub last_snapshot: String,
    pub last_time: i64,
    /// The first later snapshot of the same host and source whose folder no longer held
    /// it (deleted there, or moved): its id and time; absent while the newest holds it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gone_snapshot: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gone_time: Option<i64>,
}

/// The snapshots that hold content `hash`, as runs per folder (from the places map the
/// server's searcher holds open); for a mail user (`sees`: their accounts), in those
/// only (the same message delivered to others is not told).
pub fn holders(
    repo: &Repository,
    places: &Places,
    hash: &Id,
    sees: Option<&[String]>,
) -> Result<Vec<Holder>> {
    let view = places.view(repo, &Scope::All)?;
    let mut out: Vec<Holder> = (places.records_of(hash))
        .filter_map(|r| {
            let (a, b) = places.span(&view, r)?;
            let fk = &places.folders[places.folder(r) as usize];
            if sees.is_some_and(|s| !s.contains(&fk.account)) {
                return None;
            }
            let (first, last) = (&view.snapshots[a as usize], &view.snapshots[b as usize]);
            let gone = places.gone_in(r);
            Some(Holder {
                gone_snapshot: gone.map(|g| g.id.to_hex()),
                gone_time: gone.map(|g| g.time),
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
/// no leading dot, at most 100 characters, then `.` and `ext`.
pub fn download_name(name: &str, ext: &str) -> String {
    format!("{}.{ext}", safe_name(name, "message"))
}

/// `name` as a download's file name: the characters `[A-Za-z0-9._-]`, others as `_`, no
/// leading dot, at most 100 characters; `fallback` when nothing is left.
pub fn safe_name(name: &str, fallback: &str) -> String {
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
        s = fallback.into();
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn download_names_are_plain() {
        assert_eq!(
            download_name("1700000000.M1P2.host", "eml"),
            "1700000000.M1P2.host.eml"
        );
        assert_eq!(download_name("../../x.html", "eml"), "_.._x.html.eml");
        assert_eq!(download_name("...", "eml"), "message.eml");
        assert_eq!(download_name("a\"b\r\nc;d/é", "eml"), "a_b__c_d__.eml");
        assert_eq!(download_name(&"x".repeat(300), "eml").len(), 104);
        assert_eq!(download_name("Archive/2023", "mbox"), "Archive_2023.mbox");
        assert_eq!(safe_name(".dovecot.sieve", "file"), "dovecot.sieve");
        assert_eq!(safe_name("..", "file"), "file");
    }

    fn info(key: &str) -> MessageInfo {
        MessageInfo {
            account: String::new(),
            folder: String::new(),
            key: key.into(),
            flags: String::new(),
            size: 0,
            internal_date: 0,
            date: None,
            from: String::new(),
            subject: String::new(),
        }
    }

    fn list(sorted: Vec<MessageInfo>) -> Arc<FolderList> {
        let n = sorted.len();
        Arc::new(FolderList {
            sorted,
            content: vec![Id([0; 32]); n],
            chunks: Vec::new(),
            chunk: vec![0; n],
            by_key: Default::default(),
            hasher: Default::default(),
            orders: Default::default(),
        })
    }

    /// The list is newest first (ties by key), and each message's chunk is found by its
    /// key, whatever order the folder held them in.
    #[test]
    fn a_folder_list_sorts_newest_first_and_finds_each_messages_chunk() {
        let chunk = |n: u8| ChunkRef {
            entries: Id([n; 32]),
            names: Id([n; 32]),
        };
        let mut infos = Vec::new();
        let mut chunk_of = Vec::new();
        for i in 0..1000u32 {
            let mut m = info(&format!("k{i}"));
            m.internal_date = i64::from(i % 7);
            m.date = (i % 3 == 0).then_some(i64::from(i % 11));
            infos.push(m);
            chunk_of.push(i / 100);
        }
        let content = vec![Id([0; 32]); infos.len()];
        let l = FolderList::new(infos, &content, &chunk_of, (0..10).map(chunk).collect());
        let keys: Vec<(i64, &str)> = (l.sorted.iter())
            .map(|m| (sort_date(m), m.key.as_str()))
            .collect();
        let mut want = keys.clone();
        want.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(b.1)));
        assert_eq!(keys, want);
        for i in 0..1000u32 {
            let c = l.chunk_of(&format!("k{i}")).expect("found");
            assert_eq!(c.entries, Id([(i / 100) as u8; 32]), "k{i}");
        }
        assert!(l.chunk_of("k1000").is_none() && l.chunk_of("").is_none());
    }

    /// Each order ascending by its key, ties in the list's order (newest first); kept.
    #[test]
    fn orders_sort_by_their_key_once() {
        let m = |key: &str, from: &str, size: u64| MessageInfo {
            from: from.into(),
            size,
            ..info(key)
        };
        let l = list(vec![m("a", "zed", 5), m("b", "Amy", 9), m("c", "amy", 1)]);
        let keys = |o: &[u32]| {
            o.iter()
                .map(|&i| l.sorted[i as usize].key.clone())
                .collect::<Vec<_>>()
        };
        assert_eq!(keys(&l.order(SortBy::From)), ["b", "c", "a"]);
        assert_eq!(keys(&l.order(SortBy::Size)), ["c", "a", "b"]);
        assert_eq!(keys(&l.order(SortBy::Date)), ["c", "b", "a"]);
        assert!(Arc::ptr_eq(&l.order(SortBy::From), &l.order(SortBy::From)));
    }

    #[test]
    fn the_folders_used_last_are_kept() {
        let mut c = FolderCache::default();
        let k = |i: usize| (format!("{i}"), String::new(), String::new());
        for i in 0..CACHED_FOLDERS {
            c.put(k(i), list(vec![info("a")]));
        }
        assert!(c.get(&k(0)).is_some());
        c.put(k(99), list(vec![info("b")]));
        assert!(c.get(&k(1)).is_none(), "the least recently used goes");
        assert!(c.get(&k(0)).is_some() && c.get(&k(99)).is_some());
        let big: Vec<MessageInfo> = (0..CACHED_MESSAGES).map(|_| info("x")).collect();
        c.put(k(7), list(big));
        assert_eq!(c.entries.len(), 1, "a large folder pushes out the others");
        assert!(c.get(&k(7)).is_some());
        c.clear();
        assert!(c.get(&k(7)).is_none());
    }

    #[test]
    fn pages_are_clamped() {
        let at = |page: usize| page_of(5, 0..5, page, 2).0;
        assert_eq!(at(1), [0, 1]);
        assert_eq!(at(3), [4]);
        assert_eq!(at(9), [4]);
        assert_eq!(at(0), [0, 1]);
        assert_eq!(page_of(9, 0..9, 9, 2).1.page, 5);
        assert_eq!(page_of(0, 0..0, 1, 2).1.pages, 1);
    }

    #[test]
    fn a_mail_users_counts_come_from_what_is_held_once_known() {
        let dir = tempfile::tempdir().unwrap();
        let repo = crate::audit_read::tests::repository(dir.path());
        // A snapshot whose root tree is not in the repository: reading it fails.
        let root = Id([0xab; 32]);
        let s = Snapshot {
            id: Id([1; 32]),
            version: 2,
            time: 1_700_000_000,
            time_nanos: 0,
            hostname: "h".into(),
            source: "maildir:/m".into(),
            tags: Vec::new(),
            parent: None,
            root,
            summary: Default::default(),
            original: None,
            started: None,
        };
        let held = Held::default();
        let bob = ["bob@example.org".to_string()];
        assert!(row_for(&repo, &s, Some(&bob), &held).is_err());
        assert!(
            row_for(&repo, &s, None, &held).unwrap().is_some(),
            "the admin's"
        );
        lock(&held.0).insert((root, bob[0].clone()), Some((3, 300)));
        let row = row_for(&repo, &s, Some(&bob), &held).unwrap().unwrap();
        assert_eq!((row.accounts, row.messages, row.bytes), (1, 3, 300));
        lock(&held.0).insert((root, bob[0].clone()), None);
        assert!(row_for(&repo, &s, Some(&bob), &held).unwrap().is_none());
        // Another account not known yet: the tree is read again.
        let both = [bob[0].clone(), "carol@example.org".to_string()];
        assert!(row_for(&repo, &s, Some(&both), &held).is_err());
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
