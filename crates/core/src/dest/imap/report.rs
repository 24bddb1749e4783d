//! What an IMAP restore reports: the pipeline's figures, the phases, each account's own.

use crate::imap::Phase;
use crate::report::Failure;
use serde::Serialize;

/// One account's figures, its own (not running totals): `messages` = `appended` +
/// `skipped` + `failed`.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct AccountFigures {
    pub account: String,
    pub messages: u64,
    pub appended: u64,
    /// Already on the server: by the journal of an earlier run, or found there.
    pub skipped: u64,
    pub failed: u64,
    pub secs: f64,
}

/// The end-of-run summary. `items_total` = `items_appended` + `items_journaled` +
/// `items_existing` + `items_failed`, and each is the sum of the accounts' figures.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct ImapRestoreReport {
    pub snapshot: String,
    pub target: String,
    pub accounts: u64,
    /// Accounts this run created on the server (`create_accounts`).
    pub accounts_created: u64,
    pub folders: u64,
    /// Messages selected.
    pub items_total: u64,
    /// Messages appended by this run.
    pub items_appended: u64,
    /// Messages the journal says an earlier run appended, and the server still has.
    pub items_journaled: u64,
    /// Messages found on the server (in doubt, or `skip_existing`) and not sent again.
    pub items_existing: u64,
    /// Messages not restored (each listed in `failures`, or counted in a failure line
    /// that names how many).
    pub items_failed: u64,
    /// Of `items_failed`, those not tried: the server took no more (its failure is
    /// listed), or the restore was cancelled (`cancelled`). A later run finds what was
    /// appended in the journal.
    pub items_not_tried: u64,
    /// The caller cancelled the restore ([`crate::report::Progress::cancelled`]).
    pub cancelled: bool,
    /// Bytes appended (CRLF form).
    pub bytes_appended: u64,
    /// What the third phase set: shares, filters, METADATA, quotas.
    pub shares: SharesFigures,
    pub elapsed_secs: f64,
    /// Messages appended per second.
    pub items_per_sec: f64,
    pub mb_per_sec: f64,
    pub phases: Vec<Phase>,
    pub per_account: Vec<AccountFigures>,
    /// The journal directory of this (repository, snapshot, target).
    pub journal: String,
    /// What the snapshot has that this server does not keep, or will not let be set
    /// (quotas, METADATA): not failures.
    pub warnings: Vec<String>,
    pub failures: Vec<Failure>,
}

/// What an IMAP restore's third phase set, over all accounts.
#[derive(Clone, Debug, Default, Serialize, PartialEq, Eq)]
pub struct SharesFigures {
    /// Access control entries set (SETACL), and on how many folders.
    pub acl_entries: u64,
    pub acl_folders: u64,
    /// Sieve scripts put (PUTSCRIPT), and accounts whose active script was set.
    pub sieve_scripts: u64,
    /// Scripts the server already had with the same text (one of the same name and
    /// other text is a conflict, left as it is).
    pub sieve_unchanged: u64,
    pub sieve_active: u64,
    /// Folder METADATA entries set (SETMETADATA).
    pub metadata_entries: u64,
    /// Quota roots set (SETQUOTA, by the admin).
    pub quota_roots: u64,
}
