//! The steps both executors take: opening accounts and folders in the target, the
//! keyword names of a folder, counting what became of a message.

use super::ctx::Ctx;
use super::plan::{folder_file, AccountPlan, FolderPlan};
use crate::dest::{AccountInfo, FolderInfo, Item, Outcome, Target};
use crate::model::folder_name;
use crate::repo::tree::{AccountRef, FolderNode, MessageEntry};
use mailvault_imap::maildir_flags::KeywordTable;
use std::sync::atomic::Ordering::Relaxed;

/// An account of a batch, open in the target.
pub(super) struct OpenAccount<A> {
    pub(super) acc: AccountRef,
    pub(super) open: A,
}

/// Opens the accounts of a batch in the target; an account that cannot be opened costs
/// its messages.
pub(super) fn open_accounts<T: Target>(
    ctx: &Ctx<T>,
    plans: Vec<AccountPlan>,
) -> Vec<(OpenAccount<T::Account>, Vec<FolderPlan>)> {
    let mut out = Vec::new();
    for plan in plans {
        if plan.folders.is_empty() {
            continue;
        }
        let n_acc: u64 = plan.folders.iter().map(FolderPlan::messages).sum();
        let mut names: Vec<String> = (plan.folders.iter())
            .filter(|f| !f.home)
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
                let mut folders = plan.folders;
                let n: u64 = folders.iter_mut().map(|f| f.count_rest(ctx)).sum();
                ctx.n.fail_items(item, e, n);
            }
        }
    }
    out
}

/// The keyword table of a folder of the snapshot, when the target wants keyword names.
pub(super) fn keyword_table<T>(ctx: &Ctx<T>, node: &FolderNode) -> KeywordTable {
    if !ctx.caps.keywords {
        return KeywordTable::default();
    }
    folder_file(ctx.repo, node, b"dovecot-keywords")
        .map(|d| KeywordTable::parse(&String::from_utf8_lossy(&d)))
        .unwrap_or_default()
}

/// Opens a folder in the target; one that cannot be opened costs its messages.
pub(super) fn open_folder<T: Target>(
    ctx: &Ctx<T>,
    acc: &OpenAccount<T::Account>,
    fp: &mut FolderPlan,
    picked: bool,
) -> Option<T::Folder> {
    let name = folder_name(&fp.node);
    let info = FolderInfo {
        account: &acc.acc,
        node: &fp.node,
        name: &name,
        // An undelete's home files are whole files, not single messages.
        picked: picked && !fp.home,
        entries: &fp.entries,
        home: fp.home,
        failures: &ctx.n.failures,
        repo: ctx.repo,
    };
    match ctx.target.open_folder(&acc.open, &info) {
        Ok(f) => Some(f),
        Err(e) => {
            let item = format!("{}: {}", acc.acc.name, fp.node.name);
            let n = fp.count_rest(ctx);
            ctx.n.fail_items(item, e, n);
            None
        }
    }
}

/// Counts what became of a message.
pub(super) fn count<T: Target>(
    ctx: &Ctx<T>,
    folder: &T::Folder,
    entry: &MessageEntry,
    outcome: crate::Result<Outcome>,
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
            let item = || ctx.target.item(folder, Item::Message(entry));
            ctx.n.write_failed(item, e, 1);
        }
    }
}

/// Counts `entries` of `folder` as failed, for `why`.
pub(super) fn fail_all<'e, T: Target>(
    ctx: &Ctx<T>,
    folder: &T::Folder,
    entries: impl Iterator<Item = &'e MessageEntry>,
    why: &str,
) {
    for e in entries {
        if ctx.stopped() {
            ctx.n.not_tried(1);
        } else {
            let item = ctx.target.item(folder, Item::Message(e));
            ctx.n.fail_items(item, why, 1);
        }
        ctx.progress.advance(1, e.size);
    }
}
