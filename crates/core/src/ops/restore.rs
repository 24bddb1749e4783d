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
use crate::error::Result;
use crate::model::PickedAccount;
use crate::repo::tree::OwnerNames;
use crate::repo::Repository;
use crate::report::Progress;
use crate::restore::{restore_into, restore_picked_into};
use std::path::PathBuf;

pub use crate::dest::maildir::Owners;
pub use crate::restore::{RestoreReport, Selection};

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
