//! The restore operation: one front door, [`run`], for every destination (a Maildir
//! tree, `dir:`, mbox, EML, an IMAP server): the caller says what to restore
//! ([`Request`]) and how to open the destination once the snapshot is found; the read
//! side ([`crate::restore`]) plans and executes. [`maildir`] and [`imap`] open the two
//! destinations the library's callers use most.

use crate::dest::imap::{ImapRestoreOptions, ImapRestoreReport, ImapTarget};
use crate::dest::maildir::MaildirTarget;
use crate::dest::Target;
use crate::error::Result;
use crate::repo::Repository;
use crate::report::Progress;
use std::path::PathBuf;

use crate::dest::owners::RestoreOwners;
pub use crate::restore::Opening;
use crate::restore::{Request, RestoreReport, Selection};

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
    pub owners: RestoreOwners,
}

/// Restores what `request` asks into the destination `open` gives (called with the
/// snapshot's id, or a picked restore's label, the recorded owners' names and the
/// accounts to be written: an [`Opening`]). Returns
/// the report and the destination, for what it adds to the report.
pub fn run<T: Target>(
    repo: &Repository,
    request: Request,
    progress: &dyn Progress,
    open: impl FnOnce(Opening<'_>) -> Result<T>,
) -> Result<(RestoreReport, T)> {
    crate::restore::run(repo, request, progress, open)
}

/// Opens the Maildir tree of `opts` (its directory, owners and jobs) as a destination.
pub fn maildir(opts: &RestoreOptions) -> impl FnOnce(Opening<'_>) -> Result<MaildirTarget> + '_ {
    move |o| MaildirTarget::open(&opts.target, opts.owners, o.owners, opts.jobs)
}

/// Restores a snapshot's selection (`opts.select`) to a Maildir tree: [`run`] with
/// [`maildir`], for callers that restore a selection and need only the report.
pub fn restore(
    repo: &Repository,
    opts: &RestoreOptions,
    progress: &dyn Progress,
) -> Result<RestoreReport> {
    let request = Request::Selection(opts.select.clone());
    Ok(run(repo, request, progress, maildir(opts))?.0)
}

/// Opens the IMAP server of `opts` (connection, journal, batches) as a destination; its
/// journal is that of (repository, snapshot or label, server).
pub fn imap_server<'a>(
    repo: &'a Repository,
    opts: &'a ImapRestoreOptions,
) -> impl FnOnce(Opening<'_>) -> Result<ImapTarget> + 'a {
    move |o| ImapTarget::new(repo, opts, &o)
}

/// Restores a snapshot's selection (`opts.select`) into an IMAP server: [`run`] with
/// [`imap_server`], the report completed with what the server and journal say.
pub fn imap(
    repo: &Repository,
    opts: &ImapRestoreOptions,
    progress: &dyn Progress,
) -> Result<ImapRestoreReport> {
    let request = Request::Selection(opts.select.clone());
    let (r, target) = run(repo, request, progress, imap_server(repo, opts))?;
    Ok(target.report(r))
}
