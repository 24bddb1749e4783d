//! The restore pipeline: a snapshot (or part of it), or messages picked one by one, into
//! any [`Target`] (a Maildir tree, an IMAP server; see [`crate::target`]).
//!
//! Owned here, once for every target: the selection (`--account`, `--folder`,
//! `--message`; [`restore_picked_into`] for `undelete`), the plan (accounts in batches,
//! folders, messages), reading their blobs by pack span ([`crate::model::reader`]),
//! reassembling every message and checking it against its whole-message hash (a damaged
//! blob is named with the message), the flags, keyword names and internal date every
//! target gets ([`crate::dest::Meta`]), the counts, failures, progress and the report.
//!
//! How blobs are read follows the target's [`Caps`]. A target that takes messages in any
//! order ([`Order::Any`]: Maildir) gets the messages of a batch of accounts sorted by
//! where their blobs lie, each pack span read once, front to back, and each message
//! written, in parallel, as soon as the last span holding its blobs is in
//! ([`read_by_packs`]). A target that appends in order ([`Order::Folder`]: IMAP, mbox)
//! gets each folder's messages in arrival order, in batches, each batch read in pack
//! order by groups ([`read_by_spans`]) while the previous one is being written.

use crate::dest::maildir::MaildirTarget;
use crate::dest::{
    meta, AccountInfo, Caps, Failures, FolderInfo, HardLink, Item, Message, Meta, Order, Outcome,
    Target,
};
use crate::error::{Error, Result};
use crate::mail::maildir::{safe_component, safe_relative};
use crate::model::assemble::{assemble_by, assemble_file};
use crate::model::reader::{read_by_packs, read_by_spans, BlobCache, Blobs, SpanOptions};
use crate::model::{
    folder_name, folder_selected, message_selected, no_folder_matches, select_accounts,
    PickedAccount,
};
use crate::parallel::{for_each_parallel, spawn_named};
use crate::repo::id::Id;
use crate::repo::tree::{AccountRef, AccountTree, FileEntry, FolderNode, MessageEntry};
use crate::repo::tree::{OwnerNames, RootTree};
use crate::repo::{lock, Repository};
use crate::report::{per_sec, Progress};
use mailvault_imap::maildir_flags::KeywordTable;
use serde::Serialize;
use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Instant;

pub use crate::dest::maildir::Owners;

/// What to restore and where.
#[derive(Clone, Debug, Default)]
pub struct RestoreOptions {
    /// What to take from the snapshot (snapshot, accounts, folders, messages; only the
    /// folders that hold the selected messages are created, with the `dovecot-keywords`
    /// their flags need) and how many pack spans to read at once.
    pub select: Selection,
    /// The directory to restore into: accounts go to their place below it
    /// (`<domain>/<user>/Maildir`); a single-Maildir snapshot restores into it directly.
    pub target: PathBuf,
    /// Worker threads; 0 means one per core.
    pub jobs: usize,
    /// Whose the restored files and directories become (when run as root).
    pub owners: Owners,
}

/// What a restore takes from a snapshot, whatever the target.
#[derive(Clone, Debug, Default)]
pub struct Selection {
    /// `latest` or a snapshot id prefix.
    pub snapshot: String,
    /// Only these accounts (all when empty).
    pub accounts: Vec<String>,
    /// Only these folders and their subfolders (`Sent`, `Archive/2023`; all when empty).
    pub folders: Vec<String>,
    /// Only these messages, by Maildir key or file name (all when empty): only the folders
    /// that hold them are restored.
    pub messages: Vec<String>,
    /// Pack spans read at once; 0: as many as the store suits
    /// ([`SpanOptions::for_store`]).
    pub reads: usize,
    /// [`Order::Folder`] targets: opened blobs kept for messages that share them (a
    /// message delivered to several mailboxes), in bytes; 0 turns the cache off.
    pub cache_bytes: usize,
}

impl Selection {
    /// The blob cache of a restore into an [`Order::Folder`] target (IMAP, mbox), in
    /// bytes.
    pub const CACHE_BYTES: usize = 64 << 20;
}

/// The end-of-run summary. `items_total` = `items_restored` + `items_unchanged` +
/// `items_failed`; `failures` also lists what is not a message (folder files,
/// directories), which `items_failed` does not count.
#[derive(Clone, Debug, Serialize, Default)]
pub struct RestoreReport {
    pub snapshot: String,
    pub accounts: u64,
    pub folders: u64,
    /// Messages selected for restore.
    pub items_total: u64,
    /// Messages written.
    pub items_restored: u64,
    /// Messages already in the target with identical bytes.
    pub items_unchanged: u64,
    /// Messages not restored.
    pub items_failed: u64,
    /// Bytes of messages written.
    pub bytes_written: u64,
    /// Files of folders written whole: a Maildir's `dovecot-uidlist` and the like, the
    /// files of a `file:` snapshot (a failed one is listed in `failures`).
    pub files_restored: u64,
    /// Files of a `file:` snapshot made as hard links of another file restored (`dir:`
    /// targets), not written.
    pub files_linked: u64,
    /// Their bytes.
    pub file_bytes_written: u64,
    /// Files already in the target (the same bytes; a large file: complete, the same size
    /// and mtime), and hard links and symbolic links already there: not written.
    pub files_unchanged: u64,
    pub elapsed_secs: f64,
    pub items_per_sec: f64,
    pub mb_per_sec: f64,
    pub failures: Vec<crate::report::Failure>,
    /// What the restore did not do but is not a failure: owners left unset because the
    /// restore does not run as root.
    pub warnings: Vec<String>,
}

/// The counts of a restore, shared by its threads.
#[derive(Default)]
struct Tally {
    failures: Failures,
    total: AtomicU64,
    restored: AtomicU64,
    unchanged: AtomicU64,
    failed: AtomicU64,
    bytes: AtomicU64,
    files: AtomicU64,
    file_bytes: AtomicU64,
    files_present: AtomicU64,
    files_linked: AtomicU64,
}

struct Ctx<'a, T> {
    repo: &'a Repository,
    /// How messages' blobs are read.
    spans: SpanOptions,
    target: &'a T,
    caps: Caps,
    n: Tally,
    progress: &'a dyn Progress,
    /// Opened blobs kept for messages that share them ([`Order::Folder`]).
    cache: BlobCache,
}

impl Tally {
    /// A folder file of `size` bytes written.
    fn wrote_file(&self, size: u64) {
        self.files.fetch_add(1, Relaxed);
        self.file_bytes.fetch_add(size, Relaxed);
    }

    /// A failure that costs `n` messages.
    fn fail_items(&self, item: impl Into<String>, e: impl std::fmt::Display, n: u64) {
        self.failed.fetch_add(n, Relaxed);
        self.failures.add(item, e);
    }
}

/// Restores a snapshot to a Maildir tree.
pub fn restore(
    repo: &Repository,
    opts: &RestoreOptions,
    progress: &dyn Progress,
) -> Result<RestoreReport> {
    let open = |_: &str, names: &OwnerNames| {
        MaildirTarget::open(&opts.target, opts.owners, names, opts.jobs)
    };
    Ok(restore_into(repo, &opts.select, progress, open)?.0)
}

/// Restores messages picked one by one (`undelete`: each from the snapshot that last
/// held it) to a Maildir tree, as single messages are restored (`--message`): only their
/// folders are created, with the `dovecot-keywords` their flags need; a key already in
/// the target folder with identical bytes is left as it is. `owners`: the recorded
/// owners' names (of the snapshots the messages come from); `label` names the restore in
/// its report.
pub fn restore_picked(
    repo: &Repository,
    opts: &RestoreOptions,
    owners: &OwnerNames,
    picked: Vec<PickedAccount>,
    label: &str,
    progress: &dyn Progress,
) -> Result<RestoreReport> {
    let _lock = repo.lock_for_reading("undelete")?;
    let target = MaildirTarget::open(&opts.target, opts.owners, owners, opts.jobs)?;
    restore_picked_into(
        repo,
        picked,
        label,
        (opts.select.reads, 0),
        progress,
        &target,
    )
}

/// Restores a snapshot's selection into the target `open` gives (called with the
/// snapshot's id and recorded owner names once the snapshot is found, and, when single messages
/// are selected, once they are all found). Returns the report and the target, for what
/// it has to add to the report.
pub fn restore_into<T: Target>(
    repo: &Repository,
    sel: &Selection,
    progress: &dyn Progress,
    open: impl FnOnce(&str, &OwnerNames) -> Result<T>,
) -> Result<(RestoreReport, T)> {
    let started = Instant::now();
    // A shared lock: no prune deletes a pack while this restore reads it.
    let _lock = repo.lock_for_reading("restore")?;
    let snap = repo.find_snapshot(&sel.snapshot)?;
    let root: RootTree = repo.read_tree(&snap.root)?;
    let names = root.owners.clone();
    let accounts = select_accounts(root, &sel.accounts)?;
    let n_accounts = accounts.len() as u64;
    let mut folders = 0u64;
    let mut folder_matched = sel.folders.is_empty();
    if sel.messages.is_empty() {
        let target = open(&snap.id.to_hex(), &names)?;
        let ctx = Ctx::new(repo, &target, (sel.reads, sel.cache_bytes), progress);
        let pool = worker_pool(&ctx.caps)?;
        // Accounts in batches (of folders and of messages), restored together.
        let mut batch = Vec::new();
        let (mut batch_folders, mut batch_messages) = (0, 0);
        for acc in accounts.iter().cloned() {
            let (plan, f) = match plan_account(&ctx, acc, sel) {
                Ok(p) => p,
                Err(e) => {
                    // The accounts planned so far are restored, as they were before
                    // accounts were batched.
                    pool.install(|| execute_batch(&ctx, batch, false));
                    return Err(e);
                }
            };
            folder_matched |= f > 0;
            folders += plan.folders.len() as u64;
            batch_folders += plan.folders.len();
            batch_messages += (plan.folders.iter())
                .map(|f| f.entries.len() as u64)
                .sum::<u64>();
            batch.push(plan);
            // Every kind of target: an in-order target (IMAP, mbox) runs the accounts of
            // a batch `Caps::accounts` at a time, so a batch of one account each (as
            // this was once) restored the accounts one after the other: half the speed
            // of an IMAP restore (bench/imap_restore.py small, 1,943 -> 890 msgs/s).
            if batch_folders >= ctx.caps.open_folders.max(1)
                || batch_messages >= ACCOUNT_BATCH_MESSAGES
            {
                let plans = std::mem::take(&mut batch);
                pool.install(|| execute_batch(&ctx, plans, false));
                (batch_folders, batch_messages) = (0, 0);
            }
        }
        pool.install(|| execute_batch(&ctx, batch, false));
        if !folder_matched {
            return Err(no_folder_matches(repo, &accounts, &sel.folders));
        }
        let report = ctx.report(snap.id.to_hex(), n_accounts, folders, started);
        return Ok((report, target));
    }
    // Single messages: every account is planned first (the plans are small), so that a
    // key found nowhere is an error before anything is created.
    let planner = Ctx::<()>::planner(repo, progress);
    let mut plans = Vec::new();
    for acc in accounts.iter().cloned() {
        let (plan, f) = plan_account(&planner, acc, sel)?;
        folder_matched |= f > 0;
        plans.push(plan);
    }
    if !folder_matched {
        return Err(no_folder_matches(repo, &accounts, &sel.folders));
    }
    let missing: Vec<&String> = (sel.messages.iter())
        .filter(|m| {
            !plans.iter().any(|p| {
                (p.folders.iter()).any(|f| {
                    f.entries
                        .iter()
                        .any(|e| message_selected(e, &[m.to_string()]))
                })
            })
        })
        .collect();
    if missing.len() == sel.messages.len() {
        return Err(Error::InvalidInput(format!(
            "no message matches {} in the selected accounts and folders of the snapshot",
            quoted(&missing)
        )));
    }
    for m in missing {
        planner.n.failures.add(
            format!("message {m:?}"),
            "not in the selected accounts and folders of the snapshot",
        );
    }
    let target = open(&snap.id.to_hex(), &names)?;
    let mut ctx = Ctx::new(repo, &target, (sel.reads, sel.cache_bytes), progress);
    ctx.n = planner.n;
    let pool = worker_pool(&ctx.caps)?;
    folders += plans.iter().map(|p| p.folders.len() as u64).sum::<u64>();
    pool.install(|| execute_batch(&ctx, plans, true));
    let report = ctx.report(snap.id.to_hex(), n_accounts, folders, started);
    Ok((report, target))
}

/// Restores messages picked one by one into `target` (see [`restore_picked`]); the
/// caller holds the repository's lock.
pub fn restore_picked_into<T: Target>(
    repo: &Repository,
    picked: Vec<PickedAccount>,
    label: &str,
    (reads, cache_bytes): (usize, usize),
    progress: &dyn Progress,
    target: &T,
) -> Result<RestoreReport> {
    let started = Instant::now();
    let ctx = Ctx::new(repo, target, (reads, cache_bytes), progress);
    let pool = worker_pool(&ctx.caps)?;
    let n_accounts = picked.len() as u64;
    let mut plans = Vec::new();
    for p in picked {
        let mut plan = AccountPlan {
            acc: p.account,
            folders: Vec::new(),
            subscriptions: Vec::new(),
        };
        let n: u64 = p.folders.iter().map(|f| f.entries.len() as u64).sum();
        ctx.n.total.fetch_add(n, Relaxed);
        if !safe_relative(&plan.acc.rel_path) {
            let item = format!("account {}", plan.acc.name);
            ctx.n
                .fail_items(item, "unsafe path in snapshot; skipped", n);
            continue;
        }
        for f in p.folders {
            let item = format!("{}: {}", plan.acc.name, f.node.name);
            if !safe_relative(&f.node.dir) {
                let n = f.entries.len() as u64;
                ctx.n
                    .fail_items(item, "unsafe folder directory in snapshot; skipped", n);
                continue;
            }
            let mut entries = Vec::new();
            for e in f.entries {
                if safe_component(&e.name) {
                    entries.push(e);
                } else {
                    let shown = String::from_utf8_lossy(&e.name);
                    let what = "unsafe file name in snapshot; skipped";
                    ctx.n.fail_items(format!("{item}: {shown}"), what, 1);
                }
            }
            if !entries.is_empty() {
                plan.folders.push(FolderPlan {
                    node: f.node,
                    entries,
                });
            }
        }
        plans.push(plan);
    }
    let folders = plans.iter().map(|p| p.folders.len() as u64).sum();
    pool.install(|| execute_batch(&ctx, plans, true));
    Ok(ctx.report(label.to_string(), n_accounts, folders, started))
}

/// The pool of worker threads (the target's `jobs`; 0: one per core) that writes
/// messages.
fn worker_pool(caps: &Caps) -> Result<rayon::ThreadPool> {
    let jobs = caps.jobs;
    rayon::ThreadPoolBuilder::new()
        .num_threads(jobs)
        .build()
        .map_err(|e| Error::InvalidInput(format!("cannot start {jobs} worker threads: {e}")))
}

impl<'a> Ctx<'a, ()> {
    /// A context for planning only, before the target is open.
    fn planner(repo: &'a Repository, progress: &'a dyn Progress) -> Ctx<'a, ()> {
        Ctx {
            repo,
            spans: SpanOptions::default(),
            target: &(),
            caps: NO_CAPS,
            n: Tally::default(),
            progress,
            cache: BlobCache::new(0),
        }
    }
}

/// The capabilities of no target (a context that only plans).
const NO_CAPS: Caps = Caps {
    order: Order::Any,
    jobs: 1,
    open_folders: 1,
    accounts: 1,
    lanes: 1,
    batch_messages: 1,
    batch_bytes: 0,
    lane_messages: 0,
    folder_files: false,
    keywords: false,
    hard_links: false,
};

impl<'a, T: Target> Ctx<'a, T> {
    fn new(
        repo: &'a Repository,
        target: &'a T,
        (reads, cache_bytes): (usize, usize),
        progress: &'a dyn Progress,
    ) -> Ctx<'a, T> {
        Ctx {
            repo,
            spans: SpanOptions::for_store(repo.store(), reads),
            target,
            caps: target.caps(),
            n: Tally::default(),
            progress,
            cache: BlobCache::new(cache_bytes),
        }
    }

    /// The report of a restore that began at `started`.
    fn report(
        &self,
        snapshot: String,
        accounts: u64,
        folders: u64,
        started: Instant,
    ) -> RestoreReport {
        let elapsed = started.elapsed().as_secs_f64();
        let n = &self.n;
        let bytes = n.bytes.load(Relaxed);
        let file_bytes = n.file_bytes.load(Relaxed);
        let total = n.total.load(Relaxed);
        RestoreReport {
            snapshot,
            accounts,
            folders,
            items_total: total,
            items_restored: n.restored.load(Relaxed),
            items_unchanged: n.unchanged.load(Relaxed),
            items_failed: n.failed.load(Relaxed),
            bytes_written: bytes,
            files_restored: n.files.load(Relaxed),
            files_linked: n.files_linked.load(Relaxed),
            file_bytes_written: file_bytes,
            files_unchanged: n.files_present.load(Relaxed),
            elapsed_secs: elapsed,
            items_per_sec: per_sec(total, elapsed),
            mb_per_sec: per_sec(bytes + file_bytes, elapsed) / 1e6,
            failures: n.failures.take(),
            warnings: self.target.warnings(),
        }
    }
}

fn quoted(keys: &[&String]) -> String {
    let q: Vec<String> = keys.iter().map(|k| format!("{k:?}")).collect();
    q.join(", ")
}

/// One folder to restore: its node and its selected messages.
struct FolderPlan {
    node: FolderNode,
    entries: Vec<MessageEntry>,
}

/// One account to restore.
struct AccountPlan {
    acc: AccountRef,
    folders: Vec<FolderPlan>,
    /// The subscriptions of the snapshot's INBOX (IMAP names) that fall within the
    /// selection.
    subscriptions: Vec<String>,
}

/// Accounts restored together hold at most this many messages (their plans are in
/// memory), unless one account alone has more.
const ACCOUNT_BATCH_MESSAGES: u64 = 200_000;

/// Reads what an account's restore needs: its selected folders and messages (only folders
/// with selected messages when single messages are asked for). Counts the messages it
/// selects, and those it cannot (a damaged chunk, an unsafe name) as failed. Returns the
/// plan and the number of folders the folder filter matched.
fn plan_account<T>(ctx: &Ctx<T>, acc: AccountRef, sel: &Selection) -> Result<(AccountPlan, u64)> {
    let mut plan = AccountPlan {
        acc,
        folders: Vec::new(),
        subscriptions: Vec::new(),
    };
    let acc = &plan.acc;
    let n = &ctx.n;
    let whole = sel.messages.is_empty();
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
    if ctx.caps.order == Order::Folder {
        plan.subscriptions = subscriptions(ctx.repo, &tree, sel);
    }
    let mut matched = 0;
    for node in tree.folders {
        if !folder_selected(&node, &sel.folders) {
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
        let mut entries = Vec::new();
        let mut seen = 0u64;
        let mut damaged = false;
        for c in &node.chunks {
            let chunk = match ctx.repo.read_chunk(c) {
                Ok(c) => c,
                Err(e) => {
                    n.failures.add(&*item, e);
                    damaged = true;
                    continue;
                }
            };
            seen += chunk.len() as u64;
            for entry in chunk
                .into_iter()
                .filter(|e| message_selected(e, &sel.messages))
            {
                if !safe_component(&entry.name) {
                    n.total.fetch_add(1, Relaxed);
                    n.fail_items(
                        format!("{}: {}", item, String::from_utf8_lossy(&entry.name)),
                        "unsafe file name in snapshot; skipped",
                        1,
                    );
                    continue;
                }
                entries.push(entry);
            }
        }
        if damaged && whole {
            // The messages of the chunks that could not be read.
            let lost = node.messages.saturating_sub(seen);
            n.total.fetch_add(lost, Relaxed);
            n.failed.fetch_add(lost, Relaxed);
        }
        if !whole && entries.is_empty() {
            continue;
        }
        n.total.fetch_add(entries.len() as u64, Relaxed);
        plan.folders.push(FolderPlan { node, entries });
    }
    Ok((plan, matched))
}

/// The subscriptions (IMAP names) of an account's INBOX that fall within the selection:
/// those of the folders restored (their names, decoded); with `--folder` also those of its
/// subfolders the snapshot lacks, and without a selection every one (a subscription may
/// name a folder that no longer exists). Single messages bring none.
fn subscriptions(repo: &Repository, tree: &AccountTree, sel: &Selection) -> Vec<String> {
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
fn folder_file(repo: &Repository, node: &FolderNode, name: &[u8]) -> Option<Vec<u8>> {
    let f = node.files.iter().find(|f| f.name == name)?;
    match assemble_file(repo, f) {
        Ok(d) => Some(d),
        Err(e) => {
            tracing::warn!("{}: {}: {e}", node.name, String::from_utf8_lossy(name));
            None
        }
    }
}

/// An account of a batch, open in the target.
struct OpenAccount<A> {
    acc: AccountRef,
    open: A,
}

/// What a job of an [`Order::Any`] batch writes.
enum What {
    Message {
        entry: MessageEntry,
        meta: Meta,
    },
    /// A file of the folder (`dovecot-keywords`, `dovecot-uidlist`, ...).
    File(FileEntry),
    /// A piece of a large file (one with content lists): its blobs from `offset` on.
    Piece {
        file: Arc<LargeFile>,
        offset: u64,
        len: u64,
        ids: Vec<Id>,
    },
}

/// A large file being restored in pieces ([`Target::write_file_at`]), each written as
/// soon as its spans are in; the last one done ends it ([`Target::finish_file`]).
struct LargeFile {
    entry: FileEntry,
    /// Pieces not written yet.
    left: AtomicUsize,
    /// A piece failed: the file is abandoned when the last one is done.
    failed: AtomicBool,
}

/// Bytes of a large file written at once: memory is bounded by this (times the threads)
/// whatever the file's size.
const PIECE_BYTES: u64 = 8 << 20;

/// Cuts a large file into pieces of about [`PIECE_BYTES`], by the raw lengths the index
/// records of its blobs.
fn pieces(repo: &Repository, f: &FileEntry) -> Result<Vec<(u64, u64, Vec<Id>)>> {
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

struct Job<'a, F> {
    folder: &'a F,
    what: What,
}

fn job_content<'a, F>(j: &'a Job<F>) -> &'a [Id] {
    match &j.what {
        What::Message { entry, .. } => &entry.content,
        What::File(f) => &f.content,
        What::Piece { ids, .. } => ids,
    }
}

/// Opens the accounts of a batch in the target; an account that cannot be opened costs
/// its messages.
fn open_accounts<T: Target>(
    ctx: &Ctx<T>,
    plans: Vec<AccountPlan>,
) -> Vec<(OpenAccount<T::Account>, Vec<FolderPlan>)> {
    let mut out = Vec::new();
    for plan in plans {
        if plan.folders.is_empty() {
            continue;
        }
        let n_acc: u64 = plan.folders.iter().map(|f| f.entries.len() as u64).sum();
        let mut names: Vec<String> = (plan.folders.iter())
            .map(|f| folder_name(&f.node).into_owned())
            .collect();
        names.sort();
        names.dedup();
        let info = AccountInfo {
            account: &plan.acc,
            subscriptions: &plan.subscriptions,
            folders: &names,
            messages: n_acc,
            failures: &ctx.n.failures,
        };
        match ctx.target.open_account(&info) {
            Ok(open) => out.push((
                OpenAccount {
                    acc: plan.acc,
                    open,
                },
                plan.folders,
            )),
            Err(e) => {
                let item = format!("account {}", plan.acc.name);
                ctx.n.fail_items(item, e, n_acc);
            }
        }
    }
    out
}

/// The keyword table of a folder of the snapshot, when the target wants keyword names.
fn keyword_table<T>(ctx: &Ctx<T>, node: &FolderNode) -> KeywordTable {
    if !ctx.caps.keywords {
        return KeywordTable::default();
    }
    folder_file(ctx.repo, node, b"dovecot-keywords")
        .map(|d| KeywordTable::parse(&String::from_utf8_lossy(&d)))
        .unwrap_or_default()
}

/// Opens a folder in the target; one that cannot be opened costs its messages.
fn open_folder<T: Target>(
    ctx: &Ctx<T>,
    acc: &OpenAccount<T::Account>,
    fp: &FolderPlan,
    picked: bool,
) -> Option<T::Folder> {
    let name = folder_name(&fp.node);
    let info = FolderInfo {
        account: &acc.acc,
        node: &fp.node,
        name: &name,
        picked,
        entries: &fp.entries,
        failures: &ctx.n.failures,
        repo: ctx.repo,
    };
    match ctx.target.open_folder(&acc.open, &info) {
        Ok(f) => Some(f),
        Err(e) => {
            let item = format!("{}: {}", acc.acc.name, fp.node.name);
            let n = fp.entries.len() as u64;
            ctx.n.fail_items(item, e, n);
            None
        }
    }
}

/// Restores a batch of accounts (`picked`: single messages, not whole folders).
fn execute_batch<T: Target>(ctx: &Ctx<T>, plans: Vec<AccountPlan>, picked: bool) {
    match ctx.caps.order {
        Order::Any => execute_any(ctx, plans, picked),
        Order::Folder => execute_ordered(ctx, plans, picked),
    }
}

/// [`Order::Any`]: the batch's messages are read together, by pack span in pack order, so
/// a pack range that several accounts need is read once, not once per account.
fn execute_any<T: Target>(ctx: &Ctx<T>, plans: Vec<AccountPlan>, picked: bool) {
    let mut rest: Vec<(usize, FolderPlan)> = Vec::new();
    let (accs, folders): (Vec<_>, Vec<_>) = open_accounts(ctx, plans).into_iter().unzip();
    // Each account's hard links, made once its folders are written.
    let mut links = Vec::new();
    for (a, mut fs) in folders.into_iter().enumerate() {
        links.push(if !picked && ctx.caps.folder_files && ctx.caps.hard_links {
            take_hard_links(&mut fs)
        } else {
            Vec::new()
        });
        rest.extend(fs.into_iter().map(|f| (a, f)));
    }
    // Folders in batches, each open in the target while its messages are written.
    while !rest.is_empty() {
        let batch: Vec<(usize, FolderPlan)> = rest
            .drain(..rest.len().min(ctx.caps.open_folders.max(1)))
            .collect();
        let mut open = Vec::new();
        for (a, fp) in batch {
            if let Some(f) = open_folder(ctx, &accs[a], &fp, picked) {
                open.push((f, fp));
            }
        }
        let mut jobs = Vec::new();
        for (folder, fp) in &mut open {
            if !picked && ctx.caps.folder_files {
                // Read with the messages, from the same spans. An IMAP backup's sync state
                // is for the next IMAP backup, not for a restore.
                for f in std::mem::take(&mut fp.node.files)
                    .into_iter()
                    .filter(|f| f.name != crate::imap::names::STATE_FILE)
                {
                    if !safe_component(&f.name) {
                        let item = ctx.target.item(folder, Item::File(&f.name));
                        ctx.n
                            .failures
                            .add(item, "unsafe file name in snapshot; skipped");
                    } else if !f.lists.is_empty() && ctx.target.file_present(folder, &f) {
                        ctx.n.files_present.fetch_add(1, Relaxed);
                    } else if f.lists.is_empty() {
                        jobs.push(Job {
                            folder: &*folder,
                            what: What::File(f),
                        });
                    } else {
                        // A large file: written piece by piece, at its offsets.
                        match pieces(ctx.repo, &f) {
                            Ok(p) if !p.is_empty() => {
                                let file = Arc::new(LargeFile {
                                    left: AtomicUsize::new(p.len()),
                                    failed: AtomicBool::new(false),
                                    entry: f,
                                });
                                for (offset, len, ids) in p {
                                    let file = file.clone();
                                    let what = What::Piece {
                                        file,
                                        offset,
                                        len,
                                        ids,
                                    };
                                    jobs.push(Job {
                                        folder: &*folder,
                                        what,
                                    });
                                }
                            }
                            Ok(_) => jobs.push(Job {
                                folder: &*folder,
                                what: What::File(f),
                            }),
                            Err(e) => {
                                let item = ctx.target.item(folder, Item::File(&f.name));
                                ctx.n.failures.add(item, e);
                            }
                        }
                    }
                }
            }
            let keywords = keyword_table(ctx, &fp.node);
            for mut entry in std::mem::take(&mut fp.entries) {
                if ctx.target.already_restored(folder, &entry) {
                    ctx.n.unchanged.fetch_add(1, Relaxed);
                    continue;
                }
                // Kept for `ls`, not needed here: a batch holds many messages.
                (entry.from, entry.subject) = (String::new(), String::new());
                let meta = meta(&entry, &keywords);
                jobs.push(Job {
                    folder: &*folder,
                    what: What::Message { entry, meta },
                });
            }
        }
        let messages = jobs.iter().filter_map(|j| match &j.what {
            What::Message { entry, .. } => Some(entry.size),
            What::File(_) | What::Piece { .. } => None,
        });
        let (n, bytes) = messages.fold((0, 0), |(n, b), size| (n + 1, b + size));
        let pieces: u64 = (jobs.iter())
            .map(|j| match &j.what {
                What::Piece { len, .. } => *len,
                _ => 0,
            })
            .sum();
        ctx.progress.add_total(n, bytes + pieces);
        // Each pack span read once, front to back; a message is written as soon as the
        // last span holding its blobs is in.
        read_by_packs(
            ctx.repo,
            &jobs,
            job_content,
            &ctx.spans,
            |j, blobs| match &j.what {
                What::File(f) => write_file(ctx, j.folder, f, blobs),
                What::Piece {
                    file,
                    offset,
                    len,
                    ids,
                } => write_piece(ctx, j.folder, file, *offset, *len, ids, blobs),
                What::Message { entry, meta } => {
                    write_message(ctx, j.folder, entry, meta, blobs);
                    ctx.progress.advance(1, entry.size);
                }
            },
        );
        drop(jobs);
        for (folder, _) in open {
            ctx.target.finish_folder(folder, &ctx.n.failures);
        }
    }
    for (a, links) in accs.into_iter().zip(links) {
        if !links.is_empty() {
            // Before the account is finished: it gives directories their mtimes.
            let done = ctx.target.link_files(&a.open, &links, &ctx.n.failures);
            ctx.n.files_linked.fetch_add(done.made, Relaxed);
            ctx.n.files_present.fetch_add(done.present, Relaxed);
        }
        ctx.target.finish_account(a.open, &ctx.n.failures);
    }
}

/// Takes the hard links out of an account's folder files (a `file:` snapshot's): of the
/// regular files recorded with the same device and inode and more than one link, the
/// first in the plan's order (folders in order, their files in order) stays, to be
/// written; the others are left out of their folders and returned, as links to it
/// ([`Target::link_files`]). A file the restore skips (an unsafe name, an IMAP backup's
/// sync state) stays where it is, to be skipped there.
fn take_hard_links(folders: &mut [FolderPlan]) -> Vec<HardLink> {
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

/// Reassembles, checks and writes one message.
fn write_message<T: Target>(
    ctx: &Ctx<T>,
    folder: &T::Folder,
    entry: &MessageEntry,
    meta: &Meta,
    blobs: &dyn Blobs,
) {
    let written = assemble_by(
        ctx.repo,
        &entry.content,
        entry.size,
        Some(&entry.hash),
        |id| blobs.blob_unverified(id),
    )
    .map_err(|e| e.to_string())
    .and_then(|data| {
        let msg = Message {
            entry,
            meta,
            data: &data,
        };
        ctx.target.write(folder, &msg).map_err(|e| e.to_string())
    });
    count(ctx, folder, entry, written);
}

/// Counts what became of a message.
fn count<T: Target>(
    ctx: &Ctx<T>,
    folder: &T::Folder,
    entry: &MessageEntry,
    outcome: std::result::Result<Outcome, String>,
) {
    match outcome {
        Ok(Outcome::Written { bytes }) => {
            ctx.n.restored.fetch_add(1, Relaxed);
            ctx.n.bytes.fetch_add(bytes, Relaxed);
        }
        Ok(Outcome::AlreadyThere) => {
            ctx.n.unchanged.fetch_add(1, Relaxed);
        }
        Err(e) => {
            let item = ctx.target.item(folder, Item::Message(entry));
            ctx.n.fail_items(item, e, 1);
        }
    }
}

/// Reassembles and writes a folder file.
fn write_file<T: Target>(ctx: &Ctx<T>, folder: &T::Folder, f: &FileEntry, blobs: &dyn Blobs) {
    let item = || ctx.target.item(folder, Item::File(&f.name));
    match assemble_by(ctx.repo, &f.content, f.size, None, |id| blobs.blob(id)) {
        Ok(data) => match ctx.target.write_file(folder, f, &data) {
            Ok(Outcome::Written { .. }) => ctx.n.wrote_file(f.size),
            Ok(Outcome::AlreadyThere) => {
                ctx.n.files_present.fetch_add(1, Relaxed);
            }
            Err(e) => ctx.n.failures.add(item(), e),
        },
        Err(e) => ctx.n.failures.add(item(), e),
    }
}

/// Reassembles and writes a piece of a large file; the last piece done ends the file.
fn write_piece<T: Target>(
    ctx: &Ctx<T>,
    folder: &T::Folder,
    file: &LargeFile,
    offset: u64,
    len: u64,
    ids: &[Id],
    blobs: &dyn Blobs,
) {
    let f = &file.entry;
    let item = || ctx.target.item(folder, Item::File(&f.name));
    if !file.failed.load(Relaxed) {
        let written = assemble_by(ctx.repo, ids, len, None, |id| blobs.blob(id))
            .map_err(|e| e.to_string())
            .and_then(|data| {
                (ctx.target.write_file_at(folder, f, offset, &data)).map_err(|e| e.to_string())
            });
        if let Err(e) = written {
            // The first failure is the one reported.
            if !file.failed.swap(true, Relaxed) {
                ctx.n.failures.add(item(), e);
            }
        }
    }
    if file.left.fetch_sub(1, Relaxed) == 1 {
        let ok = !file.failed.load(Relaxed);
        match ctx.target.finish_file(folder, f, ok) {
            Ok(()) if ok => ctx.n.wrote_file(f.size),
            Ok(()) => {}
            Err(e) if ok => ctx.n.failures.add(item(), e),
            Err(_) => {}
        }
    }
    ctx.progress.advance(0, len);
}

/// A batch of one folder for an [`Order::Folder`] target: messages to write together,
/// each with its place in the folder's order.
struct Batch<'p, F> {
    folder: &'p F,
    /// The folder's `dovecot-keywords` (when the target wants keyword names).
    keywords: &'p KeywordTable,
    entries: Vec<(MessageEntry, usize)>,
}

/// A batch read and checked: each message's bytes (or why it could not be read), in the
/// folder's order.
struct Prepared<'p, F> {
    folder: &'p F,
    msgs: Vec<Read>,
}

/// A message of a batch: its entry, its [`Meta`] and its checked bytes or why they could
/// not be read.
type Read = (MessageEntry, Meta, std::result::Result<Vec<u8>, String>);

/// Why an account cannot go on, once one lane found out; the other lanes then count
/// their messages as failed instead of writing them.
#[derive(Default)]
struct Abort(Mutex<Option<String>>);

impl Abort {
    fn set(&self, reason: String) {
        lock(&self.0).get_or_insert(reason);
    }
    fn reason(&self) -> Option<String> {
        lock(&self.0).clone()
    }
}

/// The order a folder's messages are written in, so that UID order on an IMAP server (or
/// the order of an mbox) is the original arrival order: the folder's `dovecot-uidlist`
/// (Maildir backups of a Dovecot store), else the UID in the synthesized keys of an IMAP
/// backup, else internal date (mtime) and key; messages a `dovecot-uidlist` lacks
/// (delivered since Dovecot last looked) come after those it has, by date and key.
fn arrival_order(
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

/// [`Order::Folder`]: accounts run at once ([`Caps::accounts`]), each over up to
/// [`Caps::lanes`] lanes taking one folder at a time; each lane has a thread that reads
/// and checks its next batch (in pack order, by groups of spans) while the current one
/// is being written.
fn execute_ordered<T: Target>(ctx: &Ctx<T>, plans: Vec<AccountPlan>, picked: bool) {
    let total: u64 = (plans.iter().flat_map(|p| &p.folders))
        .map(|f| f.entries.len() as u64)
        .sum();
    let bytes: u64 = (plans.iter().flat_map(|p| &p.folders))
        .flat_map(|f| &f.entries)
        .map(|e| e.size)
        .sum();
    ctx.progress.add_total(total, bytes);
    let size = |p: &AccountPlan| -> u64 { p.folders.iter().map(|f| f.entries.len() as u64).sum() };
    // Domains in snapshot order (their accounts share the most blobs, mail to several
    // colleagues: together, they make the most of the blob cache), and within a domain
    // the largest accounts first, so that a run does not end with one big account on
    // one lane while the others are done.
    let domain = |i: usize| {
        plans[i]
            .acc
            .name
            .rsplit_once('@')
            .map(|(_, d)| d.to_string())
    };
    let mut first_seen: HashMap<Option<String>, usize> = HashMap::new();
    for i in 0..plans.len() {
        first_seen.entry(domain(i)).or_insert(i);
    }
    let mut order: Vec<usize> = (0..plans.len()).collect();
    order.sort_by_key(|&i| {
        (
            first_seen.get(&domain(i)).copied().unwrap_or(i),
            std::cmp::Reverse(size(&plans[i])),
        )
    });
    let n_plans = order.len();
    let slots: Vec<Mutex<Option<AccountPlan>>> =
        plans.into_iter().map(|p| Mutex::new(Some(p))).collect();
    let lanes = ctx.caps.accounts.max(1);
    for_each_parallel(n_plans, lanes, "restore-account", |k| {
        let Some(plan) = lock(&slots[order[k]]).take() else {
            return;
        };
        // An account gets more than one lane only when fewer accounts than `lanes` are
        // left to run beside it.
        let share = (lanes / lanes.min(n_plans - k)).max(1);
        let n_acc = size(&plan);
        let mut accs = open_accounts(ctx, vec![plan]);
        let Some((acc, folders)) = accs.pop() else {
            ctx.progress.advance(n_acc, 0);
            return;
        };
        restore_account_ordered(ctx, &acc, folders, share, picked);
        ctx.target.finish_account(acc.open, &ctx.n.failures);
    });
}

/// Restores one account's folders in order (see [`execute_ordered`]).
fn restore_account_ordered<T: Target>(
    ctx: &Ctx<T>,
    acc: &OpenAccount<T::Account>,
    folders: Vec<FolderPlan>,
    share: usize,
    picked: bool,
) {
    let caps = &ctx.caps;
    let mut open = Vec::new();
    for fp in folders {
        match open_folder(ctx, acc, &fp, picked) {
            Some(f) => open.push((f, fp)),
            None => {
                let bytes = fp.entries.iter().map(|e| e.size).sum();
                ctx.progress.advance(fp.entries.len() as u64, bytes);
            }
        }
    }
    // Per folder, its messages in arrival order.
    let mut lists = Vec::with_capacity(open.len());
    for (folder, fp) in &mut open {
        let uidlist = folder_file(ctx.repo, &fp.node, b"dovecot-uidlist")
            .map(|d| crate::imap::names::parse_uidlist(&d));
        let mut list = Vec::with_capacity(fp.entries.len());
        for mut e in std::mem::take(&mut fp.entries) {
            if ctx.target.already_restored(folder, &e) {
                ctx.n.unchanged.fetch_add(1, Relaxed);
                ctx.progress.advance(1, e.size);
                continue;
            }
            (e.from, e.subject) = (String::new(), String::new());
            list.push(e);
        }
        list.sort_by_cached_key(|e| arrival_order(uidlist.as_ref(), e));
        lists.push(list);
    }
    let open = open;
    let keywords: Vec<KeywordTable> = (open.iter())
        .map(|(_, fp)| keyword_table(ctx, &fp.node))
        .collect();
    // Per folder, its batches in order; folders largest first, so lanes end together.
    let mut jobs: Vec<(usize, Vec<Batch<T::Folder>>)> = Vec::new();
    for (((folder, _), list), keywords) in open.iter().zip(lists).zip(&keywords) {
        let mut batches = Vec::new();
        let mut cur: Vec<(MessageEntry, usize)> = Vec::new();
        let mut bytes = 0usize;
        for (pos, e) in list.into_iter().enumerate() {
            let size = e.size as usize + e.size as usize / 32;
            if !cur.is_empty()
                && (cur.len() >= caps.batch_messages.max(1) || bytes + size > caps.batch_bytes)
            {
                batches.push(Batch {
                    folder,
                    keywords,
                    entries: std::mem::take(&mut cur),
                });
                bytes = 0;
            }
            bytes += size;
            cur.push((e, pos));
        }
        if !cur.is_empty() {
            batches.push(Batch {
                folder,
                keywords,
                entries: cur,
            });
        }
        if !batches.is_empty() {
            let count = batches.iter().map(|b| b.entries.len()).sum();
            jobs.push((count, batches));
        }
    }
    jobs.sort_by_key(|(count, _)| std::cmp::Reverse(*count));
    let to_send: usize = jobs.iter().map(|(c, _)| c).sum();
    // Lanes: at most the target's, at most `share`, one per folder at most, and one per
    // `lane_messages` messages to write.
    let per_lane = if caps.lane_messages == 0 {
        usize::MAX
    } else {
        caps.lane_messages
    };
    let lanes = (caps.lanes)
        .min(share)
        .min(jobs.len())
        .min(to_send.div_ceil(per_lane))
        .max(1);
    let queue: Mutex<VecDeque<Vec<Batch<T::Folder>>>> =
        Mutex::new(jobs.into_iter().map(|(_, b)| b).collect());
    let abort = Abort::default();
    std::thread::scope(|s| {
        for _ in 0..lanes {
            // The handover is a rendezvous: at most one batch prepared ahead per lane,
            // so memory stays at two batches per lane.
            let (tx, rx) = std::sync::mpsc::sync_channel::<Prepared<T::Folder>>(0);
            let (queue, abort) = (&queue, &abort);
            spawn_named(s, "restore-read", move || {
                // One folder at a time, its batches in order, all over this lane.
                while let Some(batches) = lock(queue).pop_front() {
                    for batch in batches {
                        if let Some(reason) = abort.reason() {
                            let entries = batch.entries.iter().map(|(e, _)| e);
                            fail_all(ctx, batch.folder, entries, &reason);
                            continue;
                        }
                        let p = prepare(ctx, batch);
                        if let Err(back) = tx.send(p) {
                            // The writer is gone: its batch is not written.
                            let p = back.0;
                            let why = "not restored: the lane ended";
                            fail_all(ctx, p.folder, p.msgs.iter().map(|(e, _, _)| e), why);
                        }
                    }
                }
            });
            spawn_named(s, "restore-write", move || {
                for p in rx {
                    write_prepared(ctx, p, abort);
                }
            });
        }
    });
    for (folder, _) in open {
        ctx.target.finish_folder(folder, &ctx.n.failures);
    }
}

/// Reads and checks a batch, in pack order (packs front to back) and by pack span
/// (nearby blobs in one read), while the messages keep the folder's order. Blobs the
/// cache holds are not read again.
fn prepare<'p, T: Target>(ctx: &Ctx<T>, batch: Batch<'p, T::Folder>) -> Prepared<'p, T::Folder> {
    let index = ctx.repo.index();
    let mut entries = batch.entries;
    entries.sort_by_cached_key(|(e, _)| {
        e.content
            .first()
            .and_then(|id: &Id| index.get(id))
            .map(|l| (l.pack, l.offset))
            .unwrap_or((u32::MAX, 0))
    });
    let keywords = batch.keywords;
    let mut read = Vec::with_capacity(entries.len());
    read_by_spans(
        ctx.repo,
        &entries,
        |(e, _)| &e.content,
        |id| !ctx.cache.contains(id),
        &ctx.spans,
        |group, fetched| {
            for (e, _) in group {
                let data = assemble_by(ctx.repo, &e.content, e.size, Some(&e.hash), |id| {
                    (ctx.cache.get_with(id, || fetched.blob_unverified(id))).map(Shared)
                });
                read.push(data.map_err(|e| e.to_string()));
            }
        },
    );
    let mut msgs: Vec<(usize, Read)> = entries
        .into_iter()
        .zip(read)
        .map(|((e, pos), data)| {
            let m = meta(&e, keywords);
            (pos, (e, m, data))
        })
        .collect();
    msgs.sort_by_key(|(pos, _)| *pos);
    Prepared {
        folder: batch.folder,
        msgs: msgs.into_iter().map(|(_, m)| m).collect(),
    }
}

/// Counts `entries` of `folder` as failed, for `why`.
fn fail_all<'e, T: Target>(
    ctx: &Ctx<T>,
    folder: &T::Folder,
    entries: impl Iterator<Item = &'e MessageEntry>,
    why: &str,
) {
    for e in entries {
        let item = ctx.target.item(folder, Item::Message(e));
        ctx.n.fail_items(item, why, 1);
        ctx.progress.advance(1, e.size);
    }
}

/// Writes a prepared batch and counts what became of each message.
fn write_prepared<T: Target>(ctx: &Ctx<T>, p: Prepared<T::Folder>, abort: &Abort) {
    let folder = p.folder;
    if let Some(reason) = abort.reason() {
        return fail_all(ctx, folder, p.msgs.iter().map(|(e, _, _)| e), &reason);
    }
    let mut ready = Vec::with_capacity(p.msgs.len());
    for (e, m, data) in &p.msgs {
        match data {
            Ok(data) => ready.push(Message {
                entry: e,
                meta: m,
                data,
            }),
            Err(why) => {
                count(ctx, folder, e, Err(why.clone()));
                ctx.progress.advance(1, e.size);
            }
        }
    }
    if ready.is_empty() {
        return;
    }
    let mut done: Vec<Option<std::result::Result<Outcome, T::Error>>> =
        ready.iter().map(|_| None).collect();
    let why = match ctx.target.write_batch(folder, &ready, &mut done) {
        Ok(()) => "not restored".to_string(),
        Err(e) => {
            // The whole account is unusable (login refused, over quota, server gone...).
            let why = format!("not restored: {e}");
            abort.set(why.clone());
            why
        }
    };
    for (m, d) in ready.iter().zip(done) {
        match d {
            Some(o) => {
                count(ctx, folder, m.entry, o.map_err(|e| e.to_string()));
                ctx.progress.advance(1, m.entry.size);
            }
            None => fail_all(ctx, folder, std::iter::once(m.entry), &why),
        }
    }
}

/// A blob shared with the cache.
struct Shared(std::sync::Arc<Vec<u8>>);

impl AsRef<[u8]> for Shared {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    mod spans {
        //! Issue 12: restores read pack spans, not blobs.
        use super::super::*;
        use crate::model::reader::{plan, read_by_packs, read_by_spans, PackPlan, SpanOptions};
        use crate::ops::backup::RunOptions;
        use crate::repo::crypto::KdfParams;
        use crate::repo::tree::{AccountTree, RootTree};
        use crate::report::NoProgress;
        use crate::source::maildir::{BackupOptions, MaildirSource};
        use crate::store::{LocalStore, MemoryStore, Metered, Store};
        use std::collections::BTreeMap;
        use std::sync::Arc;

        use crate::testing::data_reads::DataReads;
        use std::fs;
        use std::path::Path;

        fn recording(inner: Arc<dyn Store>) -> Arc<DataReads> {
            DataReads::new(inner)
        }

        /// Incompressible-ish text, different for every seed.
        fn body(seed: u64, len: usize) -> Vec<u8> {
            let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
            (0..len)
                .map(|i| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    if i % 70 == 69 {
                        b'\n'
                    } else {
                        b'a' + (x % 26) as u8
                    }
                })
                .collect()
        }

        /// A Maildir of three folders (INBOX, .Sent, .Archive) with `n` messages each;
        /// every tenth message of `.Archive` is a copy of one in INBOX (one blob, two
        /// messages).
        fn maildir(root: &Path, n: u64) {
            maildir_from(root, n, 0)
        }

        /// [`maildir`] with its own messages for every `base`.
        fn maildir_from(root: &Path, n: u64, base: u64) {
            for (f, folder) in ["", ".Sent", ".Archive"].iter().enumerate() {
                for sub in ["cur", "new", "tmp"] {
                    fs::create_dir_all(root.join(folder).join(sub)).unwrap();
                }
                let uidlist = format!("3 V{base} N{}\n", n + 1);
                fs::write(root.join(folder).join("dovecot-uidlist"), uidlist).unwrap();
                for i in 0..n {
                    let seed = base
                        + if f == 2 && i % 10 == 0 {
                            i
                        } else {
                            f as u64 * n + i
                        };
                    let mut m = format!("From: a@example.org\nSubject: {seed}\n\n").into_bytes();
                    m.extend(body(seed, 2000 + (seed as usize * 37) % 5000));
                    let name = format!("{}.M{f}P{i}.host:2,S", 1_600_000_000 + i);
                    fs::write(root.join(folder).join("cur").join(name), m).unwrap();
                }
            }
        }

        /// Every file below `cur/` and `new/` of every folder, and its `dovecot-uidlist`,
        /// by path.
        fn messages(root: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
            let mut out = BTreeMap::new();
            for folder in ["", ".Sent", ".Archive"] {
                let uidlist = Path::new(folder).join("dovecot-uidlist");
                if let Ok(data) = fs::read(root.join(&uidlist)) {
                    out.insert(uidlist, data);
                }
                for sub in ["cur", "new"] {
                    let dir = root.join(folder).join(sub);
                    for e in fs::read_dir(&dir).into_iter().flatten() {
                        let p = e.unwrap().path();
                        let rel = p.strip_prefix(root).unwrap().to_path_buf();
                        out.insert(rel, fs::read(&p).unwrap());
                    }
                }
            }
            out
        }

        /// A repository with small packs (64 KiB) on `store`, holding a backup of `src`,
        /// opened again (as a restore opens it).
        fn backed_up(store: Arc<dyn Store>, src: &Path) -> Repository {
            backed_up_accounts(store, src, vec!["bob".into()])
        }

        /// [`backed_up`] for a mail store of `accounts` (all: empty).
        fn backed_up_accounts(
            store: Arc<dyn Store>,
            src: &Path,
            accounts: Vec<String>,
        ) -> Repository {
            let opts = crate::repo::InitOptions {
                kdf: KdfParams::FOR_TESTS,
                pack_size: 64 << 10,
                ..Default::default()
            };
            let mut repo = Repository::init(store.clone(), b"pw", &opts).unwrap();
            let opts = BackupOptions {
                source: src.to_path_buf(),
                accounts,
                jobs: 2,
                stat_unchanged: false,
                run: RunOptions::new("h"),
            };
            let source = MaildirSource::new(&opts).unwrap();
            let r =
                crate::ops::backup::run(&mut repo, &source, &opts.run, crate::now(), &NoProgress)
                    .unwrap();
            assert!(r.failures.is_empty(), "{:?}", r.failures);
            Repository::open(store, b"pw").unwrap()
        }

        /// The spans the restore of the messages of `folders` (all: empty) reads, each
        /// once. Also the number of tree blobs the restore reads (the account's tree and
        /// its folders' chunks, two blobs each).
        fn planned(repo: &Repository, folders: &[&str]) -> (usize, Vec<Vec<Id>>, usize) {
            let snap = repo.find_snapshot("latest").unwrap();
            let root: RootTree = repo.read_tree(&snap.root).unwrap();
            let (mut contents, mut files) = (Vec::new(), Vec::new());
            let mut trees = 0;
            for acc in &root.accounts {
                let acc: AccountTree = repo.read_tree(&acc.tree).unwrap();
                trees += 1;
                for node in &acc.folders {
                    if !folders.is_empty() && !folders.contains(&&node.name[..]) {
                        continue;
                    }
                    trees += 2 * node.chunks.len();
                    for c in &node.chunks {
                        let entries = repo.read_chunk(c).unwrap();
                        contents.extend(entries.into_iter().map(|e| e.content));
                    }
                    files.extend(node.files.iter().map(|f| f.content.clone()));
                }
            }
            // The folder files are read from the same spans.
            let all: Vec<Vec<Id>> = contents.iter().chain(&files).cloned().collect();
            let plan = PackPlan::new(repo.index(), &all, |c| c, &SpanOptions::default());
            (plan.spans.len(), contents, trees)
        }

        /// No byte of a pack was read twice.
        fn read_once(reads: &[(String, u64, u64)]) {
            let mut r = reads.to_vec();
            r.sort();
            for w in r.windows(2) {
                assert!(
                    w[0].0 != w[1].0 || w[0].1 + w[0].2 <= w[1].1,
                    "read twice: {:?} and {:?}",
                    w[0],
                    w[1]
                );
            }
        }

        fn restore_to(repo: &Repository, target: &Path, folders: &[&str]) -> RestoreReport {
            let opts = RestoreOptions {
                select: Selection {
                    snapshot: "latest".into(),
                    folders: folders.iter().map(|f| f.to_string()).collect(),
                    ..Default::default()
                },
                target: target.to_path_buf(),
                jobs: 2,
                ..Default::default()
            };
            restore(repo, &opts, &NoProgress).unwrap()
        }

        /// A restore of 300 messages reads each pack span once: as many data reads as
        /// the plan has spans (one per pack here, packs being small), far fewer than
        /// messages, and byte-exact. Before, every blob was its own read.
        #[test]
        fn a_restore_reads_spans_not_blobs() {
            let t = tempfile::tempdir().unwrap();
            let src = t.path().join("src");
            maildir(&src, 100);
            let recording = recording(Arc::new(MemoryStore::new()));
            let metered = Arc::new(Metered::new(recording.clone()));
            let repo = backed_up(metered.clone(), &src);
            let (spans, contents, trees) = planned(&repo, &[]);
            let blobs: usize = contents.iter().map(Vec::len).sum();
            let packs = repo.index().packs().len();
            assert!(spans <= packs, "{spans} spans, {packs} packs");
            assert!(blobs >= 300, "{blobs} blobs");
            recording.reads().clear();
            let before = metered.counts();
            let out = t.path().join("out");
            let r = restore_to(&repo, &out, &[]);
            let gets = metered.counts().get - before.get;
            assert!(r.failures.is_empty(), "{:?}", r.failures);
            assert_eq!(r.items_restored, 300);
            assert_eq!(messages(&out), messages(&src), "byte-exact");
            let data_reads = recording.reads().len();
            assert_eq!(data_reads, spans, "one read per planned span");
            read_once(&recording.reads());
            // Besides: the snapshot file, the root tree, the account's trees.
            assert_eq!(gets, (spans + 2 + trees) as u64, "{trees} tree blobs");
            assert!(gets * 5 < 300, "{gets} GETs for 300 messages");
        }

        /// The readers stay within the window: while group `g` is written, no span of a
        /// group past `g + ahead` has been read; every blob opens from the spans as a
        /// single read opens it, and nothing is read twice.
        #[test]
        fn span_reads_stay_within_the_window() {
            let t = tempfile::tempdir().unwrap();
            let src = t.path().join("src");
            maildir(&src, 100);
            let recording = recording(Arc::new(MemoryStore::new()));
            let repo = backed_up(recording.clone(), &src);
            let (_, contents, _) = planned(&repo, &[]);
            let opts = SpanOptions {
                group_bytes: 100 << 10,
                readers: 4,
                ahead: 1,
                ..Default::default()
            };
            let groups = plan(repo.index(), &contents, |c| c, |_| true, &opts);
            assert!(groups.len() >= 5, "{} groups", groups.len());
            // Spans in groups 0..=g, for each g.
            let upto: Vec<usize> = (groups.iter())
                .scan(0, |n, g| {
                    *n += g.spans.len();
                    Some(*n)
                })
                .collect();
            // Single reads to compare with, not recorded.
            let plain = Repository::open(recording.inner(), b"pw").unwrap();
            recording.reads().clear();
            let mut g = 0;
            let mut written = 0;
            read_by_spans(
                &repo,
                &contents,
                |c| c,
                |_| true,
                &opts,
                |jobs, fetched| {
                    let reads = recording.reads().len();
                    let limit = upto[(g + opts.ahead).min(groups.len() - 1)];
                    assert!(
                        reads <= limit,
                        "group {g}: {reads} spans read, {limit} allowed"
                    );
                    assert!(reads >= upto[g], "group {g} handed over before its spans");
                    for id in jobs.iter().flatten() {
                        assert_eq!(fetched.blob(id).unwrap(), plain.read_blob(id).unwrap());
                    }
                    written += jobs.len();
                    g += 1;
                },
            );
            assert_eq!((g, written), (groups.len(), contents.len()));
            assert_eq!(recording.reads().len(), upto[groups.len() - 1]);
        }

        /// A blob that several groups need (a message in two folders) is read by the
        /// first and kept for the others, and opens from there as a single read opens
        /// it. Without keeping, each group reads it again.
        #[test]
        fn shared_blobs_are_read_once() {
            let t = tempfile::tempdir().unwrap();
            let src = t.path().join("src");
            maildir(&src, 100);
            let recording = recording(Arc::new(MemoryStore::new()));
            let repo = backed_up(recording.clone(), &src);
            // In folder order: the copies in Archive come far from their originals.
            let (_, contents, _) = planned(&repo, &[]);
            let mut uses: HashMap<Id, usize> = HashMap::new();
            for id in contents.iter().flatten() {
                *uses.entry(*id).or_default() += 1;
            }
            assert_eq!(uses.values().filter(|&&n| n > 1).count(), 10, "ten copies");
            let opts = |keep_bytes| SpanOptions {
                group_bytes: 100 << 10,
                keep_bytes,
                ..Default::default()
            };
            let read_by = |keep_bytes| {
                let groups = plan(repo.index(), &contents, |c| c, |_| true, &opts(keep_bytes));
                assert!(groups.len() >= 5, "{} groups", groups.len());
                let mut n: HashMap<Id, usize> = HashMap::new();
                for id in uses.keys() {
                    n.insert(*id, groups.iter().filter(|g| g.reads(id)).count());
                }
                (n, groups.iter().map(|g| g.spans.len()).sum::<usize>())
            };
            let (once, spans) = read_by(64 << 20);
            assert!(
                once.values().all(|&n| n == 1),
                "every blob read by one group"
            );
            let (again, _) = read_by(0);
            let twice = (again.iter()).filter(|(id, n)| uses[*id] > 1 && **n > 1);
            assert_eq!(twice.count(), 10, "without keeping, copies are read again");
            // And read so: the kept blobs open as single reads do.
            let plain = Repository::open(recording.inner(), b"pw").unwrap();
            recording.reads().clear();
            read_by_spans(
                &repo,
                &contents,
                |c| c,
                |_| true,
                &opts(64 << 20),
                |jobs, f| {
                    for id in jobs.iter().flatten() {
                        assert_eq!(f.blob(id).unwrap(), plain.read_blob(id).unwrap());
                    }
                },
            );
            assert_eq!(recording.reads().len(), spans);
        }

        /// Reading by packs: every span is read once whatever the order of the jobs,
        /// each job is delivered once, after the last span holding its blobs, and every
        /// blob opens as a single read opens it, whether its job got it from the span
        /// being delivered or from the spool (in memory, or on disk past the budget).
        #[test]
        fn packs_are_read_once_in_any_job_order() {
            let t = tempfile::tempdir().unwrap();
            let src = t.path().join("src");
            // 150 deliveries of 50 messages: three copies of each body, each with its own
            // trace prefix (two blobs a message; the body's blob shared by three).
            for sub in ["cur", "new", "tmp"] {
                fs::create_dir_all(src.join(sub)).unwrap();
            }
            for i in 0..150u64 {
                let mut m = format!(
                    "Received: from h{i} by mx; Tue, 1 Sep 2020 00:00:00 +0000\n\
                     From: a@example.org\nSubject: {}\n\n",
                    i % 50
                )
                .into_bytes();
                m.extend(body(i % 50, 3000));
                let name = format!("{}.M{i}.host:2,S", 1_600_000_000 + i);
                fs::write(src.join("cur").join(name), m).unwrap();
            }
            let recording = recording(Arc::new(MemoryStore::new()));
            let repo = backed_up(recording.clone(), &src);
            let (_, mut contents, _) = planned(&repo, &[]);
            assert!(contents.iter().all(|c| c.len() == 2), "prefix and body");
            // Far from pack order: reversed, then every other one first.
            contents.reverse();
            let (even, odd): (Vec<_>, Vec<_>) = contents
                .into_iter()
                .enumerate()
                .partition(|(i, _)| i % 2 == 0);
            let contents: Vec<Vec<Id>> = even.into_iter().chain(odd).map(|(_, c)| c).collect();
            let plain = Repository::open(recording.inner(), b"pw").unwrap();
            // One blob per span (no merging): every two-blob message needs two spans.
            for keep_bytes in [64 << 20, 0] {
                let opts = SpanOptions {
                    gap: 0,
                    max_span: 1,
                    keep_bytes,
                    readers: 3,
                    ahead: 1,
                    ..Default::default()
                };
                let plan = PackPlan::new(repo.index(), &contents, |c| c, &opts);
                let split = contents.iter().filter(|c| {
                    let spans: std::collections::HashSet<_> = c
                        .iter()
                        .map(|id| repo.index().get(id).unwrap().offset)
                        .collect();
                    spans.len() > 1
                });
                assert_eq!(split.count(), 150, "every message over two spans");
                recording.reads().clear();
                let delivered: Vec<AtomicU64> =
                    (0..contents.len()).map(|_| AtomicU64::new(0)).collect();
                let pos = |c: &Vec<Id>| (contents.iter()).position(|x| std::ptr::eq(x, c)).unwrap();
                read_by_packs(
                    &repo,
                    &contents,
                    |c| c,
                    &opts,
                    |c, blobs| {
                        delivered[pos(c)].fetch_add(1, Relaxed);
                        for id in c {
                            assert_eq!(blobs.blob(id).unwrap(), plain.read_blob(id).unwrap());
                        }
                    },
                );
                assert!(
                    delivered.iter().all(|n| n.load(Relaxed) == 1),
                    "each job once"
                );
                let reads = recording.reads().clone();
                assert_eq!(reads.len(), plan.spans.len(), "keep_bytes {keep_bytes}");
                read_once(&reads);
            }
        }

        /// Accounts are restored together: a pack span that holds several accounts'
        /// messages is read once, not once per account.
        #[test]
        fn accounts_share_their_span_reads() {
            let t = tempfile::tempdir().unwrap();
            let src = t.path().join("src");
            let users = ["ann", "bob", "cid", "dan"];
            for (i, user) in users.iter().enumerate() {
                let dir = src.join("example.org").join(user).join("Maildir");
                maildir_from(&dir, 25, 1000 * i as u64);
            }
            let recording = recording(Arc::new(MemoryStore::new()));
            let repo = backed_up_accounts(recording.clone(), &src, vec![]);
            let (spans, contents, _) = planned(&repo, &[]);
            assert_eq!(contents.len(), 300);
            recording.reads().clear();
            let out = t.path().join("out");
            let r = restore_to(&repo, &out, &[]);
            assert!(r.failures.is_empty(), "{:?}", r.failures);
            assert_eq!((r.accounts, r.items_restored), (4, 300));
            for user in users {
                let rel = Path::new("example.org").join(user).join("Maildir");
                assert_eq!(
                    messages(&out.join(&rel)),
                    messages(&src.join(&rel)),
                    "{user}"
                );
            }
            let reads = recording.reads().len();
            assert_eq!(reads, spans, "one read per planned span, for all accounts");
            read_once(&recording.reads());
        }

        /// A target that takes its messages in order (IMAP, mbox), declaring 4 accounts at
        /// once, gets several accounts at once. Regression: the pipeline once gave such
        /// targets batches of one account each, which ran the accounts one after the other
        /// and halved the IMAP restore (bench/imap_restore.py small: 1,943 -> 890 msgs/s).
        #[test]
        fn an_in_order_target_gets_its_accounts_at_once() {
            use crate::dest::{AccountInfo, Caps, Failures, FolderInfo, Item, Message};
            use crate::dest::{Order, Outcome, Target};
            use std::sync::atomic::AtomicUsize;

            #[derive(Default)]
            struct Counting {
                open: AtomicUsize,
                most: AtomicUsize,
                written: AtomicUsize,
            }
            impl Target for Counting {
                type Account = ();
                type Folder = ();
                type Error = std::io::Error;
                fn caps(&self) -> Caps {
                    Caps {
                        order: Order::Folder,
                        jobs: 0,
                        open_folders: usize::MAX,
                        accounts: 4,
                        lanes: 1,
                        batch_messages: 10,
                        batch_bytes: 1 << 20,
                        lane_messages: 0,
                        folder_files: false,
                        keywords: false,
                        hard_links: false,
                    }
                }
                fn open_account(&self, _: &AccountInfo) -> std::io::Result<()> {
                    let now = self.open.fetch_add(1, Relaxed) + 1;
                    self.most.fetch_max(now, Relaxed);
                    Ok(())
                }
                fn open_folder(&self, _: &(), _: &FolderInfo) -> std::io::Result<()> {
                    Ok(())
                }
                fn write(&self, _: &(), _: &Message) -> std::io::Result<Outcome> {
                    // A server's round trip: the accounts overlap if they run together.
                    std::thread::sleep(std::time::Duration::from_millis(2));
                    self.written.fetch_add(1, Relaxed);
                    Ok(Outcome::Written { bytes: 0 })
                }
                fn finish_account(&self, _: (), _: &Failures) {
                    self.open.fetch_sub(1, Relaxed);
                }
                fn item(&self, _: &(), _: Item) -> String {
                    String::new()
                }
            }

            let t = tempfile::tempdir().unwrap();
            let src = t.path().join("src");
            for (i, user) in ["ann", "bob", "cid", "dan", "eve", "fay"]
                .iter()
                .enumerate()
            {
                let dir = src.join("example.org").join(user).join("Maildir");
                maildir_from(&dir, 5, 1000 * i as u64);
            }
            let repo = backed_up_accounts(Arc::new(MemoryStore::new()), &src, vec![]);
            let sel = Selection {
                snapshot: "latest".into(),
                accounts: vec![],
                folders: vec![],
                messages: vec![],
                reads: 0,
                cache_bytes: 0,
            };
            let (r, target) =
                restore_into(&repo, &sel, &NoProgress, |_, _| Ok(Counting::default())).unwrap();
            assert!(r.failures.is_empty(), "{:?}", r.failures);
            assert_eq!(target.written.load(Relaxed), 6 * 15);
            let most = target.most.load(Relaxed);
            assert!(
                most >= 2,
                "accounts open at once: {most} (the target asked for 4)"
            );
        }

        /// An account whose tree cannot be read stops the restore with its error, after
        /// the accounts planned before it (batched, not yet written) are restored.
        #[test]
        fn accounts_before_an_unreadable_one_are_restored() {
            let t = tempfile::tempdir().unwrap();
            let src = t.path().join("src");
            for (i, user) in ["ann", "bob"].iter().enumerate() {
                let dir = src.join("example.org").join(user).join("Maildir");
                maildir_from(&dir, 5, 1000 * i as u64);
            }
            let store_dir = t.path().join("repo");
            let repo = backed_up_accounts(Arc::new(LocalStore::new(&store_dir)), &src, vec![]);
            let snap = repo.find_snapshot("latest").unwrap();
            let root: RootTree = repo.read_tree(&snap.root).unwrap();
            assert_eq!(root.accounts[1].name, "bob@example.org");
            let loc = *repo.index().get(&root.accounts[1].tree).unwrap();
            let file = store_dir.join(crate::repo::pack::pack_path(
                &repo.index().pack_id(loc.pack),
            ));
            let mut bytes = fs::read(&file).unwrap();
            bytes[(loc.offset + loc.stored_len / 2) as usize] ^= 1;
            let mut perm = fs::metadata(&file).unwrap().permissions();
            std::os::unix::fs::PermissionsExt::set_mode(&mut perm, 0o600);
            fs::set_permissions(&file, perm).unwrap();
            fs::write(&file, bytes).unwrap();
            let out = t.path().join("out");
            let opts = RestoreOptions {
                select: Selection {
                    snapshot: "latest".into(),
                    ..Default::default()
                },
                target: out.clone(),
                jobs: 2,
                ..Default::default()
            };
            let err = restore(&repo, &opts, &NoProgress).unwrap_err();
            assert!(
                err.to_string().contains(&root.accounts[1].tree.short()),
                "{err}"
            );
            let ann = Path::new("example.org/ann/Maildir");
            assert_eq!(
                messages(&out.join(ann)).len(),
                15 + 3,
                "ann's messages (and folder files) restored"
            );
            assert!(
                messages(&out.join(ann)) == messages(&src.join(ann)),
                "byte-exact"
            );
        }

        /// A restore of one folder reads only spans that hold its blobs, as many as its
        /// plan has.
        #[test]
        fn a_partial_restore_reads_only_its_spans() {
            let t = tempfile::tempdir().unwrap();
            let src = t.path().join("src");
            maildir(&src, 100);
            let recording = recording(Arc::new(MemoryStore::new()));
            let repo = backed_up(recording.clone(), &src);
            let (spans, contents, _) = planned(&repo, &["Sent"]);
            recording.reads().clear();
            let out = t.path().join("out");
            let r = restore_to(&repo, &out, &["Sent"]);
            assert!(r.failures.is_empty(), "{:?}", r.failures);
            assert_eq!(r.items_restored, 100);
            let want: BTreeMap<_, _> = messages(&src)
                .into_iter()
                .filter(|(p, _)| p.starts_with(".Sent"))
                .collect();
            assert_eq!(messages(&out), want, "byte-exact, and nothing else");
            let reads = recording.reads().clone();
            assert_eq!(reads.len(), spans, "one read per planned span");
            assert!(
                reads.len() * 5 < 100,
                "{} reads for 100 messages",
                reads.len()
            );
            // Sent's folder files are read from the spans too; one may lie in a span of
            // its own, depending on where the backup's threads put it.
            let snap = repo.find_snapshot("latest").unwrap();
            let root: RootTree = repo.read_tree(&snap.root).unwrap();
            let mut files = Vec::new();
            for acc in &root.accounts {
                let acc: AccountTree = repo.read_tree(&acc.tree).unwrap();
                let sent = acc.folders.iter().filter(|n| n.name == "Sent");
                files.extend(sent.flat_map(|n| n.files.iter().map(|f| f.content.clone())));
            }
            let index = repo.index();
            for (path, offset, len) in &reads {
                let holds = contents.iter().chain(&files).flatten().any(|id| {
                    let l = index.get(id).unwrap();
                    crate::repo::pack::pack_path(&index.pack_id(l.pack)) == *path
                        && u64::from(l.offset) >= *offset
                        && u64::from(l.offset) + u64::from(l.stored_len) <= offset + len
                });
                assert!(holds, "{path} {offset}+{len} holds none of Sent's blobs");
            }
        }

        /// A damaged blob read in a span fails its message only, named with the blob and
        /// its pack; every other message is restored.
        #[test]
        fn a_damaged_blob_in_a_span_is_named() {
            let t = tempfile::tempdir().unwrap();
            let src = t.path().join("src");
            maildir(&src, 30);
            let store_dir = t.path().join("repo");
            let repo = backed_up(Arc::new(LocalStore::new(&store_dir)), &src);
            // The first blob of one message of Sent: flip a byte in its middle.
            let snap = repo.find_snapshot("latest").unwrap();
            let root: RootTree = repo.read_tree(&snap.root).unwrap();
            let acc: AccountTree = repo.read_tree(&root.accounts[0].tree).unwrap();
            let sent = acc.folders.iter().find(|f| f.name == "Sent").unwrap();
            let entry = repo.read_chunk(&sent.chunks[0]).unwrap().remove(7);
            let id = entry.content[0];
            let loc = *repo.index().get(&id).unwrap();
            let pack = crate::repo::pack::pack_path(&repo.index().pack_id(loc.pack));
            let file = store_dir.join(&pack);
            let mut bytes = fs::read(&file).unwrap();
            bytes[(loc.offset + loc.stored_len / 2) as usize] ^= 1;
            let mut perm = fs::metadata(&file).unwrap().permissions();
            std::os::unix::fs::PermissionsExt::set_mode(&mut perm, 0o600);
            fs::set_permissions(&file, perm).unwrap();
            fs::write(&file, bytes).unwrap();
            let out = t.path().join("out");
            let r = restore_to(&repo, &out, &[]);
            assert_eq!(
                (r.items_restored, r.items_failed),
                (89, 1),
                "{:?}",
                r.failures
            );
            let name = String::from_utf8_lossy(&entry.name).to_string();
            let f = &r.failures[0];
            assert!(f.item.contains(&name), "{f:?}");
            assert!(f.error.contains(&id.short()), "{f:?}");
            assert!(f.error.contains(&pack), "{f:?}");
            let mut want = messages(&src);
            want.retain(|p, _| !p.ends_with(&name));
            assert_eq!(messages(&out), want);
        }
    }
}
