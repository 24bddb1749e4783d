//! What a restore reads: the selection, the accounts, folders and messages it takes
//! from a snapshot, the hard links among files, the order of a folder's messages and the
//! pieces of a large file. No target here: the plan only reads the snapshot's trees.

use super::ctx::Ctx;
use crate::dest::{HardLink, Order};
use crate::error::{Error, Result};
use crate::mail::maildir::{safe_component, safe_relative};
use crate::model::{folder_name, folder_selected, message_selected, FolderMatch};
use crate::repo::id::Id;
use crate::repo::tree::{AccountRef, AccountTree, ChunkRef, FileEntry, FolderNode, MessageEntry};
use crate::repo::Repository;
use std::collections::HashMap;
use std::sync::atomic::Ordering::Relaxed;

/// What a restore takes from a snapshot, whatever the target.
#[derive(Clone, Debug, Default)]
pub struct Selection {
    /// `latest` or a snapshot id prefix.
    pub snapshot: String,
    /// Only these accounts (all when empty).
    pub accounts: Vec<String>,
    /// Only these folders and their subfolders (`Sent`, `Archive/2023`; all when empty).
    pub folders: Vec<String>,
    /// `folders` name only the folders themselves, not their subfolders (a download of
    /// one folder as an mbox).
    pub exact_folders: bool,
    /// Only these messages, by Maildir key or file name (all when empty): only the folders
    /// that hold them are restored.
    pub messages: Vec<String>,
    /// Pack spans read at once; 0: as many as the store suits
    /// ([`crate::model::reader::SpanOptions::for_store`]).
    pub reads: usize,
    /// [`Order::Folder`] targets: opened blobs kept for messages that share them (a
    /// message delivered to several mailboxes), in bytes; 0 turns the cache off.
    pub cache_bytes: usize,
    /// Which part of each whole account: its mail, its home (sieve filters), or both.
    pub part: Part,
    /// Accounts restored under another name (`--map-user OLD=NEW`, a migration): the
    /// account `OLD` of the snapshot (selected by that name) is restored as `NEW`, at
    /// `NEW`'s place in a store, and every ACL entry naming `OLD` names `NEW`.
    pub map_users: Vec<(String, String)>,
}

/// A part of an account a restore takes (`restore --part`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Part {
    /// Its mail and its home.
    #[default]
    All,
    /// Its folders and messages only.
    Mail,
    /// Its home only ([`AccountTree::home`]: sieve scripts and the active one's link):
    /// a filter a user deleted is put back into the live store, nothing else touched.
    Home,
    /// Its folders' access control lists only (their `dovecot-acl` files): who could
    /// see which folder is put back, no message and no other file touched.
    Acls,
}

impl Selection {
    /// Whether the selection takes folder `node`.
    pub(crate) fn takes_folder(&self, node: &FolderNode) -> bool {
        match self.exact_folders {
            false => folder_selected(node, &self.folders),
            true => {
                self.folders.is_empty()
                    || (self.folders.iter())
                        .any(|f| crate::model::folder_matches(node, f) == FolderMatch::Itself)
            }
        }
    }

    /// The selected accounts under the names they are restored as (`map_users`): an
    /// account whose place in the store is the usual `<domain>/<user>/Maildir` of its
    /// name moves to its new name's, and so do the recorded owners and modes of those
    /// directories.
    /// An account renamed onto another of the snapshot's is refused: two accounts are
    /// never merged into one.
    pub(crate) fn renamed(&self, mut accounts: Vec<AccountRef>) -> Result<Vec<AccountRef>> {
        use crate::source::imap::account_rel_path;
        for (old, new) in &self.map_users {
            let kept = (accounts.iter())
                .find(|a| a.name == *new && !self.map_users.iter().any(|(o, _)| *o == a.name));
            if let Some(a) = kept {
                return Err(Error::InvalidInput(format!(
                    "--map-user {old}={new}: the snapshot has an account {:?} too; two accounts are never merged into one",
                    a.name
                )));
            }
        }
        for acc in &mut accounts {
            let Some((old, new)) = self.map_users.iter().find(|(o, _)| *o == acc.name) else {
                continue;
            };
            if acc.rel_path == account_rel_path(old) {
                acc.rel_path = account_rel_path(new);
                let parts = acc.rel_path.split(|&c| c == b'/');
                if acc.dirs.len() == parts.clone().count() {
                    for (d, p) in acc.dirs.iter_mut().zip(parts) {
                        d.name = p.to_vec();
                    }
                }
            }
            acc.name = new.clone();
        }
        Ok(accounts)
    }

    /// The blob cache of a restore into an [`Order::Folder`] target (IMAP, mbox), in
    /// bytes.
    pub const CACHE_BYTES: usize = 64 << 20;
}

pub(super) fn quoted(keys: &[&String]) -> String {
    let q: Vec<String> = keys.iter().map(|k| format!("{k:?}")).collect();
    q.join(", ")
}

/// One folder to restore: its node and its selected messages.
pub struct FolderPlan {
    pub node: FolderNode,
    /// Its selected messages read so far: all of them, but in a restore of whole folders
    /// into an [`Order::Any`] target, which reads them a window at a time
    /// (`FolderPlan::next_window`) so that its memory does not grow with the folder.
    pub entries: Vec<MessageEntry>,
    /// The folder's chunks not read yet (`None`: every selected message is in `entries`).
    pub(super) unread: Option<Unread>,
    /// A directory of the account's home, not a mail folder ([`FolderInfo::home`]).
    ///
    /// [`FolderInfo::home`]: crate::dest::FolderInfo::home
    pub home: bool,
}

/// The chunks of a folder's entry list not read yet, in key order, and what reading
/// them has counted.
pub(super) struct Unread {
    chunks: std::vec::IntoIter<ChunkRef>,
    /// The folder as failures name it.
    item: String,
    /// Entries in the chunks read so far.
    seen: u64,
    /// A chunk, or a node of the folder's chunk tree, could not be read.
    damaged: bool,
}

impl FolderPlan {
    /// Its selected messages not restored yet; of chunks not read yet, as many as the
    /// snapshot recorded.
    pub(super) fn messages(&self) -> u64 {
        let unread = self.unread.as_ref();
        let left = unread.map_or(0, |u| self.node.messages.saturating_sub(u.seen));
        self.entries.len() as u64 + left
    }

    /// Takes up to `max` of the folder's messages not taken yet, in key order, reading
    /// chunks as they are needed (a chunk's messages past `max` wait in `entries`); none:
    /// the folder is done. Counts the messages of each chunk read as selected, and those
    /// it cannot read as failed.
    pub(super) fn next_window<T>(&mut self, ctx: &Ctx<T>, max: usize) -> Vec<MessageEntry> {
        while self.entries.len() < max {
            let Some(u) = &mut self.unread else { break };
            if !u.read_one(ctx, &self.node, &[], &mut self.entries) {
                self.unread = None;
            }
        }
        if self.entries.len() <= max {
            return std::mem::take(&mut self.entries);
        }
        self.entries.drain(..max).collect()
    }

    /// The number of the folder's messages not taken yet: those in `entries` and those
    /// of the chunks not read yet, which it reads (one at a time) and counts as
    /// [`next_window`] would (a folder that cannot be restored: its messages are failed).
    ///
    /// [`next_window`]: FolderPlan::next_window
    pub(super) fn count_rest<T>(&mut self, ctx: &Ctx<T>) -> u64 {
        let mut n = self.entries.len() as u64;
        if let Some(mut u) = self.unread.take() {
            let mut chunk = Vec::new();
            while u.read_one(ctx, &self.node, &[], &mut chunk) {
                n += chunk.len() as u64;
                chunk.clear();
            }
        }
        n
    }
}

impl Unread {
    /// The chunks of `node`'s entry list; a node of its chunk tree that cannot be read is
    /// a failure of `item`.
    fn of<T>(ctx: &Ctx<T>, node: &FolderNode, item: String) -> Unread {
        let mut damaged = false;
        let chunks = ctx.repo.folder_chunks_or(node, &mut |_, e| {
            ctx.n.failures.add(&*item, e);
            damaged = true;
        });
        Unread {
            chunks: chunks.into_iter(),
            item,
            seen: 0,
            damaged,
        }
    }

    /// Reads the next chunk into `out`: its entries that `messages` selects (all when
    /// empty) and that have safe names, counted as selected; the others counted as
    /// failed, as are, after the last chunk of a whole folder, the messages of chunks
    /// that could not be read. Returns whether chunks are left.
    fn read_one<T>(
        &mut self,
        ctx: &Ctx<T>,
        node: &FolderNode,
        messages: &[String],
        out: &mut Vec<MessageEntry>,
    ) -> bool {
        let n = &ctx.n;
        let Some(c) = self.chunks.next() else {
            if self.damaged && messages.is_empty() {
                // The messages of the chunks that could not be read.
                let lost = node.messages.saturating_sub(self.seen);
                n.total.fetch_add(lost, Relaxed);
                n.failed.fetch_add(lost, Relaxed);
            }
            return false;
        };
        let chunk = match ctx.repo.read_chunk(&c) {
            Ok(c) => c,
            Err(e) => {
                n.failures.add(&*self.item, e);
                self.damaged = true;
                return true;
            }
        };
        self.seen += chunk.len() as u64;
        for entry in chunk.into_iter().filter(|e| message_selected(e, messages)) {
            n.total.fetch_add(1, Relaxed);
            if !safe_component(&entry.name) {
                n.fail_items(
                    format!("{}: {}", self.item, String::from_utf8_lossy(&entry.name)),
                    "unsafe file name in snapshot; skipped",
                    1,
                );
                continue;
            }
            out.push(entry);
        }
        true
    }
}

/// One account to restore.
pub struct AccountPlan {
    pub acc: AccountRef,
    pub folders: Vec<FolderPlan>,
    /// The subscriptions of the snapshot's INBOX (IMAP names) that fall within the
    /// selection (an in-order destination's restore only).
    pub subscriptions: Vec<String>,
}

/// What a selection of a snapshot reads, with no destination: its accounts, their
/// folders and messages (entries, not bytes), for a dry run and for readers that fetch
/// messages by id (search, a web UI, an IMAP view: [`Plan::messages`] with
/// [`Plan::spans`], then [`crate::model::reader`]).
pub struct Plan {
    /// The snapshot's id.
    pub snapshot: String,
    pub accounts: Vec<AccountPlan>,
    /// What the selection names but cannot be read (an unsafe name, a damaged chunk, a
    /// message key found nowhere).
    pub failures: Vec<crate::report::Failure>,
}

impl Plan {
    /// Plans `sel` under the repository's shared lock: the same accounts, folders and
    /// messages a restore of `sel` into a Maildir tree takes.
    pub fn build(repo: &Repository, sel: &Selection) -> Result<Plan> {
        let _lock = repo.lock_for_reading("restore")?;
        let snap = repo.find_snapshot(&sel.snapshot)?;
        let root: crate::repo::tree::RootTree = repo.read_tree(&snap.root)?;
        let accounts = sel.renamed(crate::model::select_accounts(root, &sel.accounts)?)?;
        let planner = Ctx::<()>::planner(repo, &crate::report::NoProgress);
        let mut plans = Vec::new();
        let mut matched = sel.folders.is_empty();
        for acc in accounts.iter().cloned() {
            let (plan, f) = plan_account(&planner, acc, sel, false)?;
            matched |= f > 0;
            plans.push(plan);
        }
        if !matched {
            return Err(crate::model::no_folder_matches(
                repo,
                &accounts,
                &sel.folders,
            ));
        }
        for m in &sel.messages {
            let key = [m.clone()];
            let found = (plans.iter().flat_map(|p| &p.folders))
                .any(|f| f.entries.iter().any(|e| message_selected(e, &key)));
            if !found {
                let why = "not in the selected accounts and folders of the snapshot";
                planner.n.failures.add(format!("message {m:?}"), why);
            }
        }
        Ok(Plan {
            snapshot: snap.id.to_hex(),
            accounts: plans,
            failures: planner.n.failures.take(),
        })
    }

    /// Every message of the plan with its account and folder, in plan order.
    pub fn messages(&self) -> impl Iterator<Item = (&AccountRef, &FolderNode, &MessageEntry)> {
        self.accounts.iter().flat_map(|a| {
            (a.folders.iter())
                .flat_map(move |f| f.entries.iter().map(move |e| (&a.acc, &f.node, e)))
        })
    }

    /// The pack spans that hold the messages' blobs, in the order a restore reads them
    /// (packs front to back), each blob once.
    pub fn spans(&self, repo: &Repository) -> Vec<crate::model::reader::Span> {
        let entries: Vec<&MessageEntry> = self.messages().map(|(_, _, e)| e).collect();
        let opts = crate::model::reader::SpanOptions::for_store(repo.store(), 0);
        crate::model::reader::PackPlan::new(repo.index(), &entries, |e| &e.content, &opts).spans
    }

    /// What a dry run prints: per account and folder, its messages and bytes, and the
    /// spans to read.
    pub fn summary(&self, repo: &Repository) -> PlanSummary {
        let index = repo.index();
        let accounts: Vec<AccountSummary> = (self.accounts.iter())
            .filter(|a| !a.folders.is_empty())
            .map(|a| AccountSummary {
                name: a.acc.name.clone(),
                folders: (a.folders.iter())
                    .map(|f| FolderSummary {
                        name: folder_name(&f.node).into_owned(),
                        messages: f.entries.len() as u64,
                        bytes: f.entries.iter().map(|e| e.size).sum(),
                    })
                    .collect(),
            })
            .collect();
        let spans: Vec<SpanSummary> = (self.spans(repo).into_iter())
            .map(|s| SpanSummary {
                pack: index.pack_id(s.pack).to_hex(),
                offset: s.offset,
                len: s.len,
            })
            .collect();
        let mut packs: Vec<&str> = spans.iter().map(|s| s.pack.as_str()).collect();
        packs.dedup();
        let folders = accounts.iter().flat_map(|a| &a.folders);
        PlanSummary {
            snapshot: self.snapshot.clone(),
            messages: folders.clone().map(|f| f.messages).sum(),
            bytes: folders.map(|f| f.bytes).sum(),
            packs: packs.len() as u64,
            span_bytes: spans.iter().map(|s| s.len).sum(),
            accounts,
            spans,
            failures: self.failures.clone(),
        }
    }
}

/// A plan as a dry run shows it.
#[derive(Clone, Debug, serde::Serialize)]
pub struct PlanSummary {
    pub snapshot: String,
    pub accounts: Vec<AccountSummary>,
    /// Messages to restore, and their bytes.
    pub messages: u64,
    pub bytes: u64,
    /// Packs and bytes of spans read.
    pub packs: u64,
    pub span_bytes: u64,
    /// The spans, in the order they are read.
    pub spans: Vec<SpanSummary>,
    pub failures: Vec<crate::report::Failure>,
}

/// An account of a [`PlanSummary`].
#[derive(Clone, Debug, serde::Serialize)]
pub struct AccountSummary {
    pub name: String,
    pub folders: Vec<FolderSummary>,
}

/// A folder of a [`PlanSummary`].
#[derive(Clone, Debug, serde::Serialize)]
pub struct FolderSummary {
    pub name: String,
    pub messages: u64,
    pub bytes: u64,
}

/// A span of a pack read by a restore.
#[derive(Clone, Debug, serde::Serialize)]
pub struct SpanSummary {
    /// The pack's id.
    pub pack: String,
    pub offset: u64,
    pub len: u64,
}

/// Accounts restored together hold at most this many messages, unless one account alone
/// has more: with the messages of a plan in memory (single messages, an in-order target's
/// plan), this bounds them; a lazy plan holds no messages, but the batch's folders are
/// open in the target together.
pub(super) const ACCOUNT_BATCH_MESSAGES: u64 = 200_000;

/// Reads what an account's restore needs: its selected folders and messages (only folders
/// with selected messages when single messages are asked for). Counts the messages it
/// selects, and those it cannot (a damaged chunk, an unsafe name) as failed. Returns the
/// plan and the number of folders the folder filter matched. `lazy` (whole folders only):
/// the folders' messages are left in their chunks, read and counted a window at a time as
/// they are restored ([`FolderPlan::next_window`]).
pub(super) fn plan_account<T>(
    ctx: &Ctx<T>,
    acc: AccountRef,
    sel: &Selection,
    lazy: bool,
) -> Result<(AccountPlan, u64)> {
    let mut plan = AccountPlan {
        acc,
        folders: Vec::new(),
        subscriptions: Vec::new(),
    };
    let acc = &plan.acc;
    let n = &ctx.n;
    let whole = sel.messages.is_empty();
    let lazy = lazy && whole;
    if !safe_relative(&acc.rel_path) {
        let count = if whole { acc.messages } else { 0 };
        n.total.fetch_add(count, Relaxed);
        n.fail_items(
            format!("account {}", acc.name),
            "unsafe path in snapshot; skipped",
            count,
        );
        return Ok((plan, 0));
    }
    let tree: AccountTree = ctx.repo.read_tree(&acc.tree)?;
    if ctx.caps.order == Order::Folder && sel.part != Part::Acls {
        plan.subscriptions = subscriptions(ctx.repo, &tree, sel);
    }
    let mut matched = 0;
    let mail = (sel.part != Part::Home).then_some(tree.folders);
    for node in mail.into_iter().flatten() {
        if !sel.takes_folder(&node) {
            continue;
        }
        matched += 1;
        let item = format!("{}: {}", acc.name, node.name);
        if !safe_relative(&node.dir) {
            let count = if whole { node.messages } else { 0 };
            n.total.fetch_add(count, Relaxed);
            n.fail_items(item, "unsafe folder directory in snapshot; skipped", count);
            continue;
        }
        if sel.part == Part::Acls {
            plan.folders.extend(acl_only(node));
            continue;
        }
        let mut unread = Unread::of(ctx, &node, item);
        if lazy {
            plan.folders.push(FolderPlan {
                node,
                entries: Vec::new(),
                unread: Some(unread),
                home: false,
            });
            continue;
        }
        let mut entries = Vec::new();
        while unread.read_one(ctx, &node, &sel.messages, &mut entries) {}
        if !whole && entries.is_empty() {
            continue;
        }
        plan.folders.push(FolderPlan {
            node,
            entries,
            unread: None,
            home: false,
        });
    }
    if matches!(sel.part, Part::All | Part::Home) {
        plan_home(ctx, &mut plan, tree.home, sel);
    }
    Ok((plan, matched))
}

/// A folder with its `dovecot-acl` file and nothing else (`--part acls`); `None` when
/// it has none.
fn acl_only(mut node: FolderNode) -> Option<FolderPlan> {
    node.files.retain(|f| f.name == b"dovecot-acl");
    if node.files.is_empty() {
        return None;
    }
    (node.chunks, node.chunk_tree, node.scan) = (Vec::new(), None, None);
    (node.messages, node.bytes) = (0, 0);
    Some(FolderPlan {
        node,
        entries: Vec::new(),
        unread: None,
        home: false,
    })
}

/// The account's home directories, with a whole account (no `--folder`, no single
/// messages): see [`push_home`].
fn plan_home<T>(ctx: &Ctx<T>, plan: &mut AccountPlan, home: Vec<FolderNode>, sel: &Selection) {
    if sel.folders.is_empty() && sel.messages.is_empty() {
        push_home(ctx, plan, home);
    }
}

/// Adds an account's home directories (whole, or the files an undelete picked) to its
/// plan, into a target that keeps homes; the others count the account's home as left,
/// for the report's warning. A directory whose path is unsafe is reported.
pub(super) fn push_home<T>(ctx: &Ctx<T>, plan: &mut AccountPlan, home: Vec<FolderNode>) {
    if home.is_empty() {
        return;
    }
    if !ctx.caps.home || plan.acc.rel_path.is_empty() {
        ctx.n.homes_left.fetch_add(1, Relaxed);
        return;
    }
    // Never into the Maildir: the home's mail is the account's folders.
    let allowed = |dir: &[u8]| dir.split(|&c| c == b'/').next() != Some(b"Maildir");
    let name = plan.acc.name.clone();
    let item = |n: &FolderNode| format!("{name}: home directory {}", n.name);
    push_file_dirs(ctx, plan, home, allowed, item);
}

/// Adds directories of files (an account's home, the store's own files) to `plan`, files
/// only: each whose path is unsafe, or not `allowed`, is reported as `item` names it (its
/// files are no messages: none is counted as failed).
fn push_file_dirs<T>(
    ctx: &Ctx<T>,
    plan: &mut AccountPlan,
    dirs: Vec<FolderNode>,
    allowed: impl Fn(&[u8]) -> bool,
    item: impl Fn(&FolderNode) -> String,
) {
    for node in dirs {
        if !safe_relative(&node.dir) || !allowed(&node.dir) {
            let what = "unsafe directory in snapshot; skipped";
            ctx.n.fail_items(item(&node), what, 0);
            continue;
        }
        plan.folders.push(FolderPlan {
            node,
            entries: Vec::new(),
            unread: None,
            home: true,
        });
    }
}

/// The store's own files (`store`: [`crate::repo::tree::RootTree::store`]), when a whole
/// snapshot is restored (no account, folder, message or part chosen: a partial restore
/// never brings back a dictionary of every user), as the home of no account: its
/// directories written at the target's root, files only, where the store had them. A
/// target without homes, or a restore that renames accounts, leaves them, counted for
/// the report's warning. A directory deeper than a domain's is refused.
pub(super) fn plan_store<T>(
    ctx: &Ctx<T>,
    sel: &Selection,
    store: Option<Id>,
) -> Option<AccountPlan> {
    let id = store?;
    let whole = sel.accounts.is_empty() && sel.folders.is_empty() && sel.messages.is_empty();
    if !whole || sel.part != Part::All {
        return None;
    }
    let tree: AccountTree = match ctx.repo.read_tree(&id) {
        Ok(t) => t,
        Err(e) => {
            ctx.n.failures.add("the store's own files", e);
            return None;
        }
    };
    if !ctx.caps.store || !sel.map_users.is_empty() {
        let files = tree.home.iter().map(|n| n.files.len() as u64).sum();
        ctx.n.store_left.fetch_add(files, Relaxed);
        return None;
    }
    let mut plan = AccountPlan {
        acc: AccountRef {
            name: "(the store)".into(),
            rel_path: Vec::new(),
            tree: id,
            messages: 0,
            bytes: 0,
            dirs: Vec::new(),
        },
        folders: Vec::new(),
        subscriptions: Vec::new(),
    };
    // A domain's directory at most: never into an account.
    let allowed = |dir: &[u8]| !dir.contains(&b'/');
    let item = |n: &FolderNode| format!("the store's directory {}", n.name);
    push_file_dirs(ctx, &mut plan, tree.home, allowed, item);
    Some(plan)
}

/// The subscriptions (IMAP names) of an account's INBOX that fall within the selection:
/// those of the folders restored (their names, decoded); with `--folder` also those of its
/// subfolders the snapshot lacks, and without a selection every one (a subscription may
/// name a folder that no longer exists). Single messages bring none.
pub(super) fn subscriptions(repo: &Repository, tree: &AccountTree, sel: &Selection) -> Vec<String> {
    if !sel.messages.is_empty() {
        return Vec::new();
    }
    let Some(inbox) = tree.folders.iter().find(|f| f.dir.is_empty()) else {
        return Vec::new();
    };
    let Some(data) = folder_file(repo, inbox, b"subscriptions") else {
        return Vec::new();
    };
    crate::imap::names::parse_subscriptions(&data)
        .into_iter()
        .filter(|name| {
            crate::model::folder_name_selected(name, &sel.folders)
                || tree
                    .folders
                    .iter()
                    .any(|f| folder_selected(f, &sel.folders) && folder_name(f) == name.as_str())
        })
        .collect()
}

/// Reads a folder file of the snapshot; one that cannot be read is logged and taken as
/// missing.
pub(super) fn folder_file(repo: &Repository, node: &FolderNode, name: &[u8]) -> Option<Vec<u8>> {
    crate::model::assemble::folder_file(repo, node, name).unwrap_or_else(|e| {
        tracing::warn!("{}: {}: {e}", node.name, String::from_utf8_lossy(name));
        None
    })
}

/// Bytes of a large file written at once: memory is bounded by this (times the threads)
/// whatever the file's size.
pub(super) const PIECE_BYTES: u64 = 8 << 20;

/// Cuts a large file into pieces of about [`PIECE_BYTES`], by the raw lengths the index
/// records of its blobs.
pub(super) fn pieces(repo: &Repository, f: &FileEntry) -> Result<Vec<(u64, u64, Vec<Id>)>> {
    let ids = repo.file_content(f)?;
    let index = repo.index();
    let mut out: Vec<(u64, u64, Vec<Id>)> = Vec::new();
    let (mut offset, mut start, mut len, mut cur) = (0u64, 0u64, 0u64, Vec::new());
    for id in ids {
        let raw = index
            .get(&id)
            .ok_or_else(|| Error::BlobNotFound(id.to_hex()))?
            .raw_len;
        cur.push(id);
        len += u64::from(raw);
        offset += u64::from(raw);
        if len >= PIECE_BYTES {
            out.push((start, len, std::mem::take(&mut cur)));
            (start, len) = (offset, 0);
        }
    }
    if !cur.is_empty() {
        out.push((start, len, cur));
    }
    if offset != f.size {
        return Err(Error::corrupt(
            format!("file {}", String::from_utf8_lossy(&f.name)),
            format!("its blobs hold {offset} bytes, its size is {}", f.size),
        ));
    }
    Ok(out)
}

/// Takes the hard links out of an account's folder files (a `file:` snapshot's): of the
/// regular files recorded with the same device and inode and more than one link, the
/// first in the plan's order (folders in order, their files in order) stays, to be
/// written; the others are left out of their folders and returned, as links to it
/// ([`Target::link_files`]). A file the restore skips (an unsafe name, an IMAP backup's
/// sync state) stays where it is, to be skipped there.
pub(super) fn take_hard_links(folders: &mut [FolderPlan]) -> Vec<HardLink> {
    use std::collections::hash_map::Entry;
    let mut first: HashMap<(u64, u64), HardLink> = HashMap::new();
    let mut links = Vec::new();
    for fp in folders {
        let dir = &fp.node.dir;
        fp.node.files.retain(|f| {
            let Some(key) = f.hard_link_key() else {
                return true;
            };
            if f.name == crate::imap::names::STATE_FILE || !safe_component(&f.name) {
                return true;
            }
            match first.entry(key) {
                Entry::Vacant(v) => {
                    v.insert(HardLink {
                        dir: Vec::new(),
                        name: Vec::new(),
                        to_dir: dir.clone(),
                        to_name: f.name.clone(),
                        size: f.size,
                        mtime: f.mtime,
                    });
                    true
                }
                Entry::Occupied(o) => {
                    links.push(HardLink {
                        dir: dir.clone(),
                        name: f.name.clone(),
                        ..o.get().clone()
                    });
                    false
                }
            }
        });
    }
    links
}

/// The order a folder's messages are written in, so that UID order on an IMAP server (or
/// the order of an mbox) is the original arrival order: the folder's `dovecot-uidlist`
/// (Maildir backups of a Dovecot store), else the UID in the synthesized keys of an IMAP
/// backup, else internal date (mtime) and key; messages a `dovecot-uidlist` lacks
/// (delivered since Dovecot last looked) come after those it has, by date and key.
pub fn arrival_order(
    uidlist: Option<&HashMap<Vec<u8>, u32>>,
    e: &MessageEntry,
) -> (u8, i64, u32, Vec<u8>) {
    if let Some(uid) = uidlist.and_then(|l| l.get(&e.key)) {
        return (0, i64::from(*uid), 0, Vec::new());
    }
    if uidlist.is_none() {
        if let Some((uid, _)) = crate::imap::names::parse_key(&e.key) {
            return (1, i64::from(uid), 0, Vec::new());
        }
    }
    (2, e.mtime.secs, e.mtime.nanos, e.key.clone())
}
