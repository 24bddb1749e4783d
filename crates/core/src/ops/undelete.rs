//! Deleted messages (`ls --deleted`) and putting them back (`undelete`).
//!
//! For an account A, the snapshots compared are those of the same host and source as the
//! newest snapshot that holds A (the *latest*), that also hold A, taken within the window
//! (at or after [`DeletedOptions::since`]; all by default). A message is *deleted* when
//! one of them holds it in A and the latest snapshot holds it nowhere in A. Messages are
//! matched by content (the keyed BLAKE3 of the whole message), so a message moved to
//! another folder or re-flagged is not deleted, and a message held twice is one message.
//! What is restored of each is the version of the newest snapshot that held it: its
//! folder, file name (flags), `new/` or `cur/`, mtime, mode and owner, through the
//! restores' entry points for picked messages ([`crate::ops::restore::run`] with
//! [`crate::restore::Request::Picked`]), so a Maildir undelete is byte-exact and
//! an IMAP undelete has the IMAP restore's journal.
//!
//! The account's home (a Maildir store's sieve scripts, [`AccountTree::home`]) is
//! compared too: a file is *deleted* when one of the snapshots holds it at a path of the
//! home where the latest holds nothing (a script the user deleted). Links (the active
//! script's `.dovecot.sieve`) are not put back: undeleting a script does not make it
//! active. The file comes back as the newest snapshot that held it has it, beside the
//! home's other files, which are left as they are.

use crate::dest::imap::ImapRestoreOptions;
use crate::dest::imap::ImapRestoreReport;
use crate::error::{Error, Result};
use crate::model::{folder_name, folder_selected, PickedAccount, PickedFolder};
use crate::ops::restore::{imap_server, maildir, run, RestoreOptions};
use crate::repo::id::Id;
use crate::repo::snapshot::Snapshot;
use crate::repo::tree::{AccountRef, AccountTree, ChunkRef, FileEntry, FolderNode, MessageEntry};
use crate::repo::tree::{OwnerNames, RootTree};
use crate::repo::{Repository, Snapshots};
use crate::report::{Failure, Progress};
use crate::restore::{Picked, Request, RestoreReport};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap, HashSet};

/// Which deleted messages: of which account, which folders, since when.
#[derive(Clone, Debug, Default)]
pub struct DeletedOptions {
    /// The account (`bob@example.org`).
    pub account: String,
    /// Only messages last held in these folders or their subfolders (all when empty).
    pub folders: Vec<String>,
    /// Only snapshots taken at or after this time (Unix seconds) are compared with the
    /// latest; all when `None`.
    pub since: Option<i64>,
}

/// One deleted message: the version of the newest snapshot that held it.
#[derive(Clone, Debug, Serialize)]
pub struct DeletedMessage {
    /// As `ls` shows it: its folder is the one that last held it; flags of its last
    /// version.
    #[serde(flatten)]
    pub message: crate::ops::ls::MessageInfo,
    /// The oldest snapshot of the window that held it, and its time.
    pub first_snapshot: String,
    pub first_time: i64,
    /// The newest snapshot that held it (whose version is restored), and its time.
    pub last_snapshot: String,
    pub last_time: i64,
    #[serde(skip)]
    entry: MessageEntry,
    /// Its folder in `Deleted::nodes`.
    #[serde(skip)]
    node: usize,
}

/// One deleted file of the account's home (a sieve script): the version of the newest
/// snapshot that held it.
#[derive(Clone, Debug, Serialize)]
pub struct DeletedFile {
    /// Its path as `ls` names the home: `~/sieve/vacation.sieve`.
    pub path: String,
    pub size: u64,
    /// Its mtime (Unix seconds) and permission bits, as last held.
    pub mtime: i64,
    pub mode: u32,
    /// The oldest snapshot of the window that held it, and its time.
    pub first_snapshot: String,
    pub first_time: i64,
    /// The newest snapshot that held it (whose version is restored), and its time.
    pub last_snapshot: String,
    pub last_time: i64,
    #[serde(skip)]
    entry: FileEntry,
    /// Its directory in `Deleted::home_nodes`.
    #[serde(skip)]
    node: usize,
}

/// The deleted messages of an account, and what they were found against.
#[derive(Clone, Debug, Serialize)]
pub struct Deleted {
    pub account: String,
    /// The snapshot the others are compared with: the newest one that holds the account.
    pub latest: String,
    pub latest_time: i64,
    /// Host and source of the snapshots compared.
    pub hostname: String,
    pub source: String,
    /// The snapshots compared with the latest (those in the window that hold the
    /// account), oldest first.
    pub compared: Vec<String>,
    /// Sorted by folder, then internal date, then key.
    pub messages: Vec<DeletedMessage>,
    /// The deleted files of the account's home (sieve scripts), by path.
    pub files: Vec<DeletedFile>,
    /// What could not be read: damaged snapshot files, and the trees of compared
    /// snapshots (the messages only they list are missing from `messages`). The latest
    /// snapshot's trees must be read: without them nothing is found.
    pub failures: Vec<Failure>,
    /// The account as the latest snapshot has it: where it goes below a Maildir target.
    #[serde(skip)]
    account_ref: Option<AccountRef>,
    /// The owners' names of the snapshots the messages come from.
    #[serde(skip)]
    owners: OwnerNames,
    /// The folders the messages come from (one per snapshot and folder), chunks cleared.
    #[serde(skip)]
    nodes: Vec<FolderNode>,
    /// The home directories the files come from (one per snapshot and directory).
    #[serde(skip)]
    home_nodes: Vec<FolderNode>,
}

/// Finds the deleted messages of `opts.account` (see the module's documentation).
pub fn find_deleted(repo: &Repository, opts: &DeletedOptions) -> Result<Deleted> {
    let Snapshots { list, damaged } = repo.snapshots()?;
    let (at, account, owners) = latest_holding(repo, &list, &opts.account)?;
    let latest = &list[at];
    // Every message the latest snapshot holds in the account, in any folder, and every
    // path of its home.
    let latest_tree: AccountTree = repo.read_tree(&account.tree)?;
    let kept = message_hashes(repo, &latest_tree)?;
    let kept_files: HashSet<(&[u8], &[u8])> = (latest_tree.home.iter())
        .flat_map(|d| d.files.iter().map(|f| (&d.dir[..], &f.name[..])))
        .collect();
    let mut out = Deleted::against(latest, account, owners);
    (out.failures).extend(damaged.into_iter().map(|d| Failure::new(d.path, d.error)));
    let mut found: HashMap<Id, DeletedMessage> = HashMap::new();
    let mut found_files: HashMap<(Vec<u8>, Vec<u8>), DeletedFile> = HashMap::new();
    // Chunks already read (by their entries blob): the deleted messages in each. A chunk
    // an older snapshot shares with a newer one holds the same messages, whose newest
    // version is already known.
    let mut chunks: HashMap<Id, Vec<Id>> = HashMap::new();
    let group = list[..at].iter().rev().filter(|s| {
        s.hostname == latest.hostname
            && s.source == latest.source
            && opts.since.is_none_or(|t| s.time >= t)
    });
    for snap in group {
        let item = format!("snapshot {}", snap.id.short());
        let root: RootTree = match repo.read_tree(&snap.root) {
            Ok(r) => r,
            Err(e) => {
                out.failures.push(Failure::new(item, e));
                continue;
            }
        };
        let Some(acc) = root.accounts.iter().find(|a| a.name == opts.account) else {
            continue;
        };
        out.compared.push(snap.id.to_hex());
        merge_owners(&mut out.owners, &root.owners);
        let item = format!("{item}: {}", opts.account);
        let tree: AccountTree = match repo.read_tree(&acc.tree) {
            Ok(t) => t,
            Err(e) => {
                out.failures.push(Failure::new(item, e));
                continue;
            }
        };
        let home = (tree.home.into_iter()).filter(|d| home_selected(d, &opts.folders));
        for d in home {
            scan_home(d, snap, &kept_files, &mut found_files, &mut out.home_nodes);
        }
        for mut node in tree.folders {
            if !folder_selected(&node, &opts.folders) {
                continue;
            }
            let chunk_refs = match repo.folder_chunks(&node) {
                Ok(c) => c,
                Err(e) => {
                    let folder = folder_name(&node);
                    out.failures
                        .push(Failure::new(format!("{item}: {folder}"), e));
                    continue;
                }
            };
            (node.chunks, node.chunk_tree) = (Vec::new(), None);
            let mut here = None;
            for c in &chunk_refs {
                let r = scan_chunk(repo, c, snap, &kept, &mut chunks, &mut found, || {
                    *here.get_or_insert_with(|| {
                        out.nodes.push(node.clone());
                        out.nodes.len() - 1
                    })
                });
                if let Err(e) = r {
                    let folder = folder_name(&node);
                    out.failures
                        .push(Failure::new(format!("{item}: {folder}"), e));
                }
            }
        }
    }
    out.compared.reverse();
    out.messages = in_order(&out, found);
    out.files = found_files.into_values().collect();
    out.files.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(out)
}

impl DeletedMessage {
    /// The message's entry, as the newest snapshot that held it has it (its content ids,
    /// flags and dates): what a reader fetches its bytes by.
    pub fn entry(&self) -> &MessageEntry {
        &self.entry
    }
}

impl Deleted {
    /// Nothing found yet of `account` (as `latest` holds it, with its `owners`' names).
    fn against(latest: &Snapshot, account: AccountRef, owners: OwnerNames) -> Deleted {
        Deleted {
            account: account.name.clone(),
            latest: latest.id.to_hex(),
            latest_time: latest.time,
            hostname: latest.hostname.clone(),
            source: latest.source.clone(),
            compared: Vec::new(),
            messages: Vec::new(),
            files: Vec::new(),
            failures: Vec::new(),
            account_ref: Some(account),
            owners,
            nodes: Vec::new(),
            home_nodes: Vec::new(),
        }
    }
}

/// Whether `--folder` filters select a home directory: as a folder is selected, by its
/// name as `ls` gives it (`~`, `~/sieve`).
fn home_selected(dir: &FolderNode, filters: &[String]) -> bool {
    crate::model::folder_name_selected(&crate::ops::ls::home_name(dir), filters)
}

/// Records the deleted files of a home directory of `snap` (snapshots come newest
/// first): files whose path the latest snapshot's home does not hold; links are left.
fn scan_home(
    dir: FolderNode,
    snap: &Snapshot,
    kept: &HashSet<(&[u8], &[u8])>,
    found: &mut HashMap<(Vec<u8>, Vec<u8>), DeletedFile>,
    nodes: &mut Vec<FolderNode>,
) {
    let mut here = None;
    for f in &dir.files {
        if f.link.is_some() || kept.contains(&(&dir.dir[..], &f.name[..])) {
            continue;
        }
        let path = (dir.dir.clone(), f.name.clone());
        if let Some(d) = found.get_mut(&path) {
            (d.first_snapshot, d.first_time) = (snap.id.to_hex(), snap.time);
            continue;
        }
        let node = *here.get_or_insert_with(|| {
            nodes.push(dir.clone());
            nodes.len() - 1
        });
        let name = String::from_utf8_lossy(&f.name);
        found.insert(
            path,
            DeletedFile {
                path: format!("{}/{name}", crate::ops::ls::home_name(&dir)),
                size: f.size,
                mtime: f.mtime.secs,
                mode: f.mode,
                first_snapshot: snap.id.to_hex(),
                first_time: snap.time,
                last_snapshot: snap.id.to_hex(),
                last_time: snap.time,
                entry: f.clone(),
                node,
            },
        );
    }
}

/// The newest of `list` that holds `account`: its place, the account, its owner names.
fn latest_holding(
    repo: &Repository,
    list: &[Snapshot],
    account: &str,
) -> Result<(usize, AccountRef, OwnerNames)> {
    for (i, s) in list.iter().enumerate().rev() {
        let root: RootTree = repo.read_tree(&s.root)?;
        if let Some(a) = root.accounts.into_iter().find(|a| a.name == account) {
            return Ok((i, a, root.owners));
        }
    }
    Err(Error::InvalidInput(format!(
        "no snapshot holds account {account:?}"
    )))
}

/// The whole-message hashes of every message an account of a snapshot holds, in any
/// folder.
fn message_hashes(repo: &Repository, tree: &AccountTree) -> Result<HashSet<Id>> {
    let mut kept: HashSet<Id> = HashSet::new();
    for f in &tree.folders {
        for c in &repo.folder_chunks(f)? {
            kept.extend(repo.read_chunk(c)?.into_iter().map(|e| e.hash));
        }
    }
    Ok(kept)
}

/// The deleted messages found, named with their account and folder, by folder, internal
/// date and key.
fn in_order(out: &Deleted, found: HashMap<Id, DeletedMessage>) -> Vec<DeletedMessage> {
    let mut messages: Vec<DeletedMessage> = found.into_values().collect();
    for m in &mut messages {
        m.message.account = out.account.clone();
        m.message.folder = folder_name(&out.nodes[m.node]).into_owned();
    }
    messages.sort_by(|a, b| {
        let (a, b) = (&a.message, &b.message);
        (&a.folder, a.internal_date, &a.key).cmp(&(&b.folder, b.internal_date, &b.key))
    });
    messages
}

/// Records the deleted messages of one chunk of `snap` (snapshots come newest first):
/// new ones with this snapshot's version (`node`: the index of their folder), known ones
/// as held this early.
fn scan_chunk(
    repo: &Repository,
    c: &ChunkRef,
    snap: &Snapshot,
    kept: &HashSet<Id>,
    chunks: &mut HashMap<Id, Vec<Id>>,
    found: &mut HashMap<Id, DeletedMessage>,
    mut node: impl FnMut() -> usize,
) -> Result<()> {
    let held_earlier = |found: &mut HashMap<Id, DeletedMessage>, hash: &Id| {
        if let Some(m) = found.get_mut(hash) {
            m.first_snapshot = snap.id.to_hex();
            m.first_time = snap.time;
        }
    };
    if let Some(hashes) = chunks.get(&c.entries) {
        for h in hashes {
            held_earlier(found, h);
        }
        return Ok(());
    }
    let mut deleted = Vec::new();
    for e in repo.read_chunk(c)? {
        if kept.contains(&e.hash) {
            continue;
        }
        deleted.push(e.hash);
        if found.contains_key(&e.hash) {
            held_earlier(found, &e.hash);
            continue;
        }
        found.insert(
            e.hash,
            DeletedMessage {
                // Account and folder are named once every snapshot is read.
                message: crate::ops::ls::MessageInfo::of("", "", e.clone()),
                first_snapshot: snap.id.to_hex(),
                first_time: snap.time,
                last_snapshot: snap.id.to_hex(),
                last_time: snap.time,
                node: node(),
                entry: e,
            },
        );
    }
    chunks.insert(c.entries, deleted);
    Ok(())
}

/// Adds the owner names of `more` that `names` lacks (by id).
fn merge_owners(names: &mut OwnerNames, more: &OwnerNames) {
    for (have, add) in [
        (&mut names.users, &more.users),
        (&mut names.groups, &more.groups),
    ] {
        for (id, name) in add {
            if !have.iter().any(|(i, _)| i == id) {
                have.push((*id, name.clone()));
            }
        }
        have.sort();
    }
}

impl Deleted {
    /// The messages to restore, per folder they go to: their own (`into_folder`: `None`)
    /// or `into_folder` (a folder name as people write it, `Restored`, `Archive/2023`);
    /// and the home's files, each into its own directory.
    pub fn picked(&self, into_folder: Option<&str>) -> Result<Vec<PickedAccount>> {
        let Some(account) = self.account_ref.clone() else {
            return Ok(Vec::new());
        };
        if self.messages.is_empty() && self.files.is_empty() {
            return Ok(Vec::new());
        }
        let into = into_folder.map(|f| f.trim_matches('/'));
        if into.is_some_and(|f| f.is_empty() || f.split('/').any(str::is_empty)) {
            return Err(Error::InvalidInput(format!(
                "--into-folder {:?}: not a folder name",
                into_folder.unwrap_or_default()
            )));
        }
        // One folder per source node: keyword letters mean what that node's
        // `dovecot-keywords` says.
        let mut by_node: BTreeMap<usize, Vec<MessageEntry>> = BTreeMap::new();
        for m in &self.messages {
            by_node.entry(m.node).or_default().push(m.entry.clone());
        }
        let folders = by_node
            .into_iter()
            .map(|(i, entries)| {
                let mut node = self.nodes[i].clone();
                if let Some(name) = into {
                    retarget(&mut node, name);
                }
                node.messages = entries.len() as u64;
                node.bytes = entries.iter().map(|e| e.size).sum();
                PickedFolder { node, entries }
            })
            .collect();
        let mut by_dir: BTreeMap<usize, Vec<FileEntry>> = BTreeMap::new();
        for f in &self.files {
            by_dir.entry(f.node).or_default().push(f.entry.clone());
        }
        let home = (by_dir.into_iter())
            .map(|(i, files)| FolderNode {
                files,
                ..self.home_nodes[i].clone()
            })
            .collect();
        Ok(vec![PickedAccount {
            account,
            folders,
            home,
        }])
    }
}

/// Makes `node` the folder `name` (as an IMAP backup names folders: its directory in
/// Dovecot's Maildir++ form), keeping the files its messages' flags need.
fn retarget(node: &mut FolderNode, name: &str) {
    let inbox = name.eq_ignore_ascii_case("INBOX");
    node.name = if inbox { "INBOX".into() } else { name.into() };
    node.dir = crate::imap::names::maildir_dir(name);
    // `maildirfolder` marks a folder other than INBOX; the others are about this folder.
    node.files
        .retain(|f| f.name == b"dovecot-keywords" || (f.name == b"maildirfolder" && !inbox));
}

/// What to undelete and how.
#[derive(Clone, Debug, Default)]
pub struct UndeleteOptions {
    pub find: DeletedOptions,
    /// Restore every message into this folder instead of its own.
    pub into_folder: Option<String>,
    /// Find and report, restore nothing.
    pub dry_run: bool,
}

/// An undelete: the deleted messages found, and the restore's report (none on a dry
/// run).
#[derive(Clone, Debug, Serialize)]
pub struct UndeleteReport<R> {
    pub deleted: Deleted,
    pub restore: Option<R>,
}

/// What names an undelete in its report and its IMAP journal: re-runs into the same
/// target share one journal, whatever the latest snapshot is by then.
pub const LABEL: &str = "undelete";

/// Restores the deleted messages to a Maildir tree (`restore.target`, with its owners,
/// jobs and `select.reads`; the rest of `restore.select` is not used).
pub fn undelete(
    repo: &Repository,
    opts: &UndeleteOptions,
    restore: &RestoreOptions,
    progress: &dyn Progress,
) -> Result<UndeleteReport<RestoreReport>> {
    let deleted = find_deleted(repo, &opts.find)?;
    let picked = deleted.picked(opts.into_folder.as_deref())?;
    let report = match opts.dry_run || picked.is_empty() {
        true => None,
        false => {
            let request = Request::Picked(Picked {
                accounts: picked,
                owners: deleted.owners.clone(),
                label: LABEL.to_string(),
                reads: restore.select.reads,
                cache_bytes: 0,
            });
            Some(run(repo, request, progress, maildir(restore))?.0)
        }
    };
    Ok(UndeleteReport {
        deleted,
        restore: report,
    })
}

/// Restores the deleted messages into an IMAP server (`imap`: connection, journal,
/// batches; its selection fields are not used).
pub fn undelete_imap(
    repo: &Repository,
    opts: &UndeleteOptions,
    imap: &ImapRestoreOptions,
    progress: &dyn Progress,
) -> Result<UndeleteReport<ImapRestoreReport>> {
    let deleted = find_deleted(repo, &opts.find)?;
    let picked = deleted.picked(opts.into_folder.as_deref())?;
    let report = match opts.dry_run || picked.is_empty() {
        true => None,
        false => {
            let request = Request::Picked(Picked {
                accounts: picked,
                owners: deleted.owners.clone(),
                label: LABEL.to_string(),
                reads: imap.select.reads,
                cache_bytes: imap.select.cache_bytes,
            });
            let (r, target) = run(repo, request, progress, imap_server(repo, imap))?;
            Some(target.report(r))
        }
    };
    Ok(UndeleteReport {
        deleted,
        restore: report,
    })
}

/// The start of a window (Unix seconds): `within` before now (`7d`, `2w`, `36h`,
/// `1 month`; days, weeks and months in this machine's time zone), or `since` (a date,
/// `2025-03-01`, or a time, `2025-03-01 14:30:00`, in this machine's time zone, or RFC
/// 3339 with an offset, `2025-03-01T14:30:00Z`). `None` when neither is given.
pub fn window_start(within: Option<&str>, since: Option<&str>) -> Result<Option<i64>> {
    use jiff::{civil, tz::TimeZone, Span, Timestamp, Zoned};
    let bad = |flag: &str, v: &str, e: &dyn std::fmt::Display| {
        Error::InvalidInput(format!("{flag} {v:?}: {e}"))
    };
    match (within, since) {
        (Some(_), Some(_)) => Err(Error::InvalidInput(
            "--within and --since both give the window's start: give one".into(),
        )),
        (Some(w), None) => {
            let span: Span = w.trim().parse().map_err(|e| bad("--within", w, &e))?;
            let start = Zoned::now()
                .checked_sub(span.abs())
                .map_err(|e| bad("--within", w, &e))?;
            Ok(Some(start.timestamp().as_second()))
        }
        (None, Some(s)) => {
            let t = s.trim();
            if let Ok(ts) = t.parse::<Timestamp>() {
                return Ok(Some(ts.as_second()));
            }
            let dt = match t.parse::<civil::DateTime>() {
                Ok(dt) => dt,
                Err(_) => t
                    .parse::<civil::Date>()
                    .map(|d| d.to_datetime(civil::Time::midnight()))
                    .map_err(|e| {
                        bad(
                            "--since",
                            s,
                            &format!(
                                "{e} (give YYYY-MM-DD, YYYY-MM-DD HH:MM:SS in local time, or RFC 3339)"
                            ),
                        )
                    })?,
            };
            let z = dt
                .to_zoned(TimeZone::system())
                .map_err(|e| bad("--since", s, &e))?;
            Ok(Some(z.timestamp().as_second()))
        }
        (None, None) => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows() {
        let now = crate::now_unix();
        let w = |s: &str| window_start(Some(s), None).unwrap().unwrap();
        for (s, secs) in [("7d", 7 * 86_400), ("36h", 36 * 3600), ("2w", 14 * 86_400)] {
            // Days may be 23 or 25 hours long across a change of daylight saving time.
            assert!((now - w(s) - secs).abs() <= 3600 + 5, "{s}");
        }
        assert!((now - w("1 month")) > 27 * 86_400);
        let s = |s: &str| window_start(None, Some(s)).unwrap().unwrap();
        assert_eq!(s("2025-03-01T14:30:00Z"), 1_740_839_400);
        assert_eq!(s("2025-03-01T14:30:00+01:00"), 1_740_835_800);
        // Local time: within a day of UTC.
        assert!((s("2025-03-01 14:30:00") - 1_740_839_400).abs() <= 14 * 3600);
        assert!((s("2025-03-01") - 1_740_787_200).abs() <= 14 * 3600);
        assert_eq!(window_start(None, None).unwrap(), None);
        for (within, since) in [
            (Some("soon"), None),
            (None, Some("yesterday")),
            (None, Some("2025-13-01")),
            (Some("7d"), Some("2025-03-01")),
        ] {
            assert!(window_start(within, since).is_err(), "{within:?} {since:?}");
        }
    }
}
