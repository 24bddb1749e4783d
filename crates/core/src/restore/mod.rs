//! The read side of a restore: a snapshot (or part of it), or messages picked one by
//! one, into any [`Target`] (a Maildir tree, mbox, EML, `dir:`, an IMAP server; see
//! [`crate::dest`]). `run` is its entry point, which [`crate::ops::restore::run`] wires.
//!
//! Owned here, once for every target: the selection (`--account`, `--folder`,
//! `--message`; [`Request::Picked`] for `undelete`), the plan ([`plan`]: accounts in
//! batches, folders, messages; [`plan::Plan`] builds it with no destination), reading
//! their blobs by pack span ([`crate::model::reader`]), reassembling every message and
//! checking it against its whole-message hash (a damaged blob is named with the
//! message), the flags, keyword names and internal date every target gets
//! ([`crate::dest::Meta`]), the counts, failures, progress and the report.
//!
//! How blobs are read follows the target's [`Caps`](crate::dest::Caps). A target that
//! takes messages in any order ([`Order::Any`]: Maildir; `any_order.rs`) gets the
//! messages of a batch of accounts in windows of a bounded size, read from the folders'
//! chunks as they are restored and sorted by where their blobs lie (`window.rs`), each
//! window's pack spans read once, front to back, and each message written, in parallel,
//! as soon as the last span holding its blobs is in
//! ([`crate::model::reader::read_by_packs`]). A target that
//! appends in order ([`Order::Folder`]: IMAP, mbox; `in_order.rs`) gets each folder's
//! messages in arrival order, in batches, each batch read in pack order by groups
//! ([`crate::model::reader::read_by_spans`]) while the previous one is being written.

use crate::dest::{Order, Target};
use crate::error::{Error, Result};
use crate::mail::maildir::{safe_component, safe_relative};
use crate::model::{message_selected, no_folder_matches, select_accounts, PickedAccount};
use crate::repo::tree::{AccountRef, OwnerNames, RootTree};
use crate::repo::Repository;
use crate::report::Progress;
use any_order::execute_any;
use ctx::{worker_pool, Ctx};
use in_order::execute_ordered;
use plan::{plan_account, quoted, AccountPlan, FolderPlan, ACCOUNT_BATCH_MESSAGES};
use std::sync::atomic::Ordering::Relaxed;
use std::time::Instant;

mod any_order;
mod ctx;
mod exec;
mod in_order;
pub mod plan;
mod window;

pub use ctx::RestoreReport;
pub use plan::{arrival_order, Part, Selection};

/// What a restore takes: a snapshot's selection, or messages picked one by one.
pub enum Request {
    /// A snapshot (or part of it: accounts, folders, messages).
    Selection(Selection),
    /// Messages picked one by one (`undelete`: each from the snapshot that last held
    /// it), restored as single messages are (`--message`): only their folders are
    /// created, a key already in the target folder with identical bytes is left as it
    /// is.
    Picked(Picked),
}

/// Messages picked one by one, and what names their restore.
pub struct Picked {
    pub accounts: Vec<PickedAccount>,
    /// The recorded owners' names (of the snapshots the messages come from).
    pub owners: OwnerNames,
    /// Names the restore in its report (and an IMAP target's journal).
    pub label: String,
    /// Pack spans read at once (0: as many as the store suits).
    pub reads: usize,
    /// Opened blobs kept for messages that share them, in bytes.
    pub cache_bytes: usize,
}

/// What a target is opened with, once the restore knows it.
pub struct Opening<'a> {
    /// The snapshot's id (a picked restore: its label).
    pub snapshot: &'a str,
    /// The owners' names the snapshot recorded.
    pub owners: &'a OwnerNames,
    /// The accounts this restore writes, as the target names them (`--map-user` applied):
    /// an IMAP target counts them as its users before it has created them.
    pub accounts: Vec<String>,
}

/// Restores what `request` asks into the target `open` gives, called once the snapshot
/// is found (single messages: once they are all found). Takes the repository's shared
/// lock. Returns the report and the target, for what it has to add to the report.
pub(crate) fn run<T: Target>(
    repo: &Repository,
    request: Request,
    progress: &dyn Progress,
    open: impl FnOnce(Opening<'_>) -> Result<T>,
) -> Result<(RestoreReport, T)> {
    match request {
        Request::Selection(sel) => restore_into(repo, &sel, progress, open),
        Request::Picked(p) => {
            let _lock = repo.lock_for_reading("undelete")?;
            let target = open(Opening {
                snapshot: &p.label,
                owners: &p.owners,
                accounts: p.accounts.iter().map(|a| a.account.name.clone()).collect(),
            })?;
            let sizes = (p.reads, p.cache_bytes);
            let r = restore_picked_into(repo, p.accounts, &p.label, sizes, progress, &target)?;
            Ok((r, target))
        }
    }
}

/// Restores a snapshot's selection into the target `open` gives (called once the
/// snapshot is found, and, when single messages are selected, once they are all found).
/// Returns the report and the target, for what it has to add to the report.
fn restore_into<T: Target>(
    repo: &Repository,
    sel: &Selection,
    progress: &dyn Progress,
    open: impl FnOnce(Opening<'_>) -> Result<T>,
) -> Result<(RestoreReport, T)> {
    let started = Instant::now();
    // A shared lock: no prune deletes a pack while this restore reads it.
    let _lock = repo.lock_for_reading("restore")?;
    let snap = repo.find_snapshot(&sel.snapshot)?;
    let mut root: RootTree = repo.read_tree(&snap.root)?;
    let names = root.owners.clone();
    let store = root.store.take();
    let accounts = sel.renamed(select_accounts(root, &sel.accounts)?)?;
    let n_accounts = accounts.len() as u64;
    let snapshot = snap.id.to_hex();
    let opening = Opening {
        snapshot: &snapshot,
        owners: &names,
        accounts: accounts.iter().map(|a| a.name.clone()).collect(),
    };
    let mut folders = 0u64;
    let mut folder_matched = sel.folders.is_empty();
    if sel.messages.is_empty() {
        let target = open(opening)?;
        let whole = (&accounts[..], store);
        let report = restore_whole(repo, sel, progress, &target, whole, (snapshot, started))?;
        return Ok((report, target));
    }
    // Single messages: every account is planned first (the plans are small), so that a
    // key found nowhere is an error before anything is created.
    let planner = Ctx::<()>::planner(repo, progress);
    let mut plans = Vec::new();
    for acc in accounts.iter().cloned() {
        let (plan, f) = plan_account(&planner, acc, sel, false)?;
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
    let target = open(opening)?;
    let mut ctx = Ctx::new(repo, &target, (sel.reads, sel.cache_bytes), progress);
    ctx.n = planner.n;
    ctx.users = &sel.map_users;
    let pool = worker_pool(&ctx.caps)?;
    folders += plans.iter().map(|p| p.folders.len() as u64).sum::<u64>();
    pool.install(|| execute_batch(&ctx, plans, true));
    let report = ctx.report(snapshot, n_accounts, folders, started);
    Ok((report, target))
}

/// Restores a whole selection (no single messages) into `target`: the accounts planned
/// and restored in batches, of folders and of messages, restored together; then, with
/// the whole snapshot, the store's own files (`store`: [`plan::plan_store`]).
fn restore_whole<T: Target>(
    repo: &Repository,
    sel: &Selection,
    progress: &dyn Progress,
    target: &T,
    (accounts, store): (&[AccountRef], Option<crate::repo::id::Id>),
    (snapshot, started): (String, Instant),
) -> Result<RestoreReport> {
    let mut ctx = Ctx::new(repo, target, (sel.reads, sel.cache_bytes), progress);
    ctx.users = &sel.map_users;
    let folders = restore_accounts(&ctx, sel, accounts)?;
    if let Some(plan) = plan::plan_store(&ctx, sel, store) {
        worker_pool(&ctx.caps)?.install(|| execute_batch(&ctx, vec![plan], false));
    }
    Ok(ctx.report(snapshot, accounts.len() as u64, folders, started))
}

/// [`restore_whole`] in `ctx`; returns the number of folders restored.
fn restore_accounts<T: Target>(
    ctx: &Ctx<T>,
    sel: &Selection,
    accounts: &[AccountRef],
) -> Result<u64> {
    let mut folders = 0u64;
    let mut folder_matched = sel.folders.is_empty();
    let pool = worker_pool(&ctx.caps)?;
    // Accounts in batches (of folders and of messages), restored together.
    let mut batch = Vec::new();
    let (mut batch_folders, mut batch_messages) = (0, 0);
    for acc in accounts.iter().cloned() {
        // An any-order target takes each folder's messages a window at a time, read from
        // its chunks as they are restored: its memory does not grow with the selection.
        let lazy = ctx.caps.order == Order::Any;
        let (plan, f) = match plan_account(ctx, acc, sel, lazy) {
            Ok(p) => p,
            Err(e) => {
                // The accounts planned so far are restored, as they were before
                // accounts were batched.
                pool.install(|| execute_batch(ctx, batch, false));
                return Err(e);
            }
        };
        folder_matched |= f > 0;
        // A home's directories are not folders of the report (they hold its files).
        folders += plan.folders.iter().filter(|f| !f.home).count() as u64;
        batch_folders += plan.folders.len();
        batch_messages += plan.folders.iter().map(FolderPlan::messages).sum::<u64>();
        batch.push(plan);
        // Every kind of target: an in-order target (IMAP, mbox) runs the accounts of
        // a batch `Caps::accounts` at a time, so a batch of one account each (as
        // this was once) restored the accounts one after the other: half the speed
        // of an IMAP restore (bench/imap_restore.py small, 1,943 -> 890 msgs/s).
        if batch_folders >= ctx.caps.open_folders.max(1) || batch_messages >= ACCOUNT_BATCH_MESSAGES
        {
            let plans = std::mem::take(&mut batch);
            pool.install(|| execute_batch(ctx, plans, false));
            (batch_folders, batch_messages) = (0, 0);
        }
    }
    pool.install(|| execute_batch(ctx, batch, false));
    if !folder_matched {
        return Err(no_folder_matches(ctx.repo, accounts, &sel.folders));
    }
    Ok(folders)
}

/// Restores messages picked one by one into `target` (see [`Request::Picked`]); the
/// caller holds the repository's lock.
fn restore_picked_into<T: Target>(
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
                    unread: None,
                    home: false,
                });
            }
        }
        plan::push_home(&ctx, &mut plan, p.home);
        plans.push(plan);
    }
    // A home's directories are not folders of the report (they hold its files).
    let folders = (plans.iter().flat_map(|p| &p.folders))
        .filter(|f| !f.home)
        .count() as u64;
    pool.install(|| execute_batch(&ctx, plans, true));
    Ok(ctx.report(label.to_string(), n_accounts, folders, started))
}

/// Restores a batch of accounts (`picked`: single messages, not whole folders).
fn execute_batch<T: Target>(ctx: &Ctx<T>, plans: Vec<AccountPlan>, picked: bool) {
    match ctx.caps.order {
        Order::Any => execute_any(ctx, plans, picked),
        Order::Folder => execute_ordered(ctx, plans, picked),
    }
}

#[cfg(test)]
mod tests;
