//! Where backups read mail from: the [`Source`] trait, and its implementations
//! ([`maildir`]: Maildir stores on disk, [`imap`]: accounts on an IMAP server).
//!
//! There is one backup pipeline ([`crate::ops::backup::run`]); a source only finds
//! accounts and folders, decides what changed since the parent snapshot (a Maildir key,
//! an IMAP UID/UIDVALIDITY/MODSEQ, an mbox's size and head hash, a file's size, mtime
//! and inode) and hands the pipeline, folder by folder, the messages and folder files to
//! store through a [`FolderWriter`]. Everything else is the pipeline's, once for every
//! source: the parent snapshot and its trees, locks and writer marks, the `BlobSaver`
//! (dedup, compression, packs), the compression dictionary (from the samples a source
//! offers), the Maildir names of messages given by flags and keywords (with the folder's
//! `dovecot-keywords`), the sync state file, `subscriptions`, owners, counters, progress,
//! failures, the report and the snapshot.
//!
//! A new source (mbox, EML, files) is a struct implementing [`Source`] in its own module
//! here, with a constructor from its options (as [`maildir::MaildirSource::new`] and
//! [`imap::ImapSource::new`]); the CLI builds it and calls [`crate::ops::backup::run`]:
//! [`Source::accounts`] and [`Source::folders`] say what there is; in
//! [`Source::backup_folder`] it looks at the parent ([`FolderWriter::parent`],
//! [`FolderWriter::parent_keys`], [`FolderWriter::parent_entries`],
//! [`FolderWriter::parent_state`]) and hands over kept entries
//! ([`FolderWriter::unchanged`]), new messages ([`FolderWriter::message`], as a Maildir
//! file or by flags, keywords, date and id: [`MessageMeta`]), folder files
//! ([`FolderWriter::file`], as bytes or a path) and its sync state
//! ([`FolderWriter::set_state`]). It joins the conformance suite
//! (`crates/core/tests/source_conformance.rs`) with one test. docs/architecture.md
//! (Backup pipeline) draws the whole.

pub mod eml;
pub mod file;
pub mod fs_snapshot;
pub mod home;
pub mod imap;
mod item;
pub mod listing;
pub mod maildir;
pub mod mbox;
pub(crate) mod parent;
pub mod unchanged;
pub mod walk;
pub mod writer;

pub use item::{
    Account, AccountListing, Failures, FileData, FileMeta, Folder, FolderFile, Home, MessageId,
    MessageMeta, NewMessage,
};
pub use writer::FolderWriter;

use crate::repo::compress::Compression;
use crate::repo::tree::DirStamp;
use crate::Result;
use std::sync::Mutex;

/// A mail store a backup reads from. The pipeline ([`crate::ops::backup::run`]) calls
/// [`accounts`](Source::accounts) once, then per account [`open`](Source::open) and
/// [`folders`](Source::folders), then per folder [`backup_folder`](Source::backup_folder),
/// in parallel as [`parallelism`](Source::parallelism) says.
pub trait Source: Sync {
    /// What one worker holds while it backs up folders of an account: nothing (`()`) for
    /// files on disk, a logged-in session for a server.
    type Session: Send;
    /// The snapshot's source label (`maildir:/var/vmail`, `imap://host:993`); the parent
    /// snapshot is the latest one with the same label and host.
    fn label(&self) -> String;

    /// How the pipeline may run accounts, folders and messages in parallel.
    fn parallelism(&self) -> Parallelism;

    /// The accounts to back up, in snapshot order (an error ends the backup before it
    /// starts: nothing is written).
    fn accounts(&self) -> Result<Vec<Account>>;

    /// [`accounts`](Source::accounts), reporting to `failures` what was found and not
    /// taken (a Maildir store's account directory that is a symbolic link); the pipeline
    /// calls this one.
    fn accounts_reporting(&self, _failures: &Failures) -> Result<Vec<Account>> {
        self.accounts()
    }

    /// A session for `account` (a login; nothing for files). With
    /// [`Parallelism::Pool`] one is opened per folder, so it must be cheap there.
    fn open(&self, account: &Account) -> Result<Self::Session>;

    /// Whether a session can still be used (a dropped connection: the pipeline opens
    /// another for the next folder).
    fn usable(&self, _session: &Self::Session) -> bool {
        true
    }

    /// Ends a session (logout).
    fn close(&self, _session: Self::Session) {}

    /// The folders of an account, the account's directories (owner and mode) and its
    /// subscriptions. Problems that do not stop the account go to `failures`.
    fn folders(
        &self,
        account: &Account,
        session: &mut Self::Session,
        failures: &Failures,
    ) -> Result<AccountListing>;

    /// Backs up one folder into `out`: what the parent has unchanged
    /// ([`FolderWriter::unchanged`]), new messages ([`FolderWriter::message`], or
    /// [`FolderWriter::store`] from several threads then [`FolderWriter::add`]), folder
    /// files ([`FolderWriter::file`], [`FolderWriter::keep_file`]), the sync state
    /// ([`FolderWriter::set_state`]) and the folder's directories. An error fails the
    /// folder (reported as [`folder_item`](Source::folder_item)); a message that cannot
    /// be read is reported with [`FolderWriter::fail`] and the folder goes on.
    fn backup_folder(
        &self,
        session: &mut Self::Session,
        account: &Account,
        folder: &Folder,
        out: &mut FolderWriter<'_>,
    ) -> Result<()>;

    /// How a failed folder is named in the report.
    /// By default its path where the source has one (a directory, a file), else
    /// `account: folder` (a server's).
    fn folder_item(&self, account: &Account, folder: &Folder) -> String {
        if folder.path.as_os_str().is_empty() {
            format!("{}: {}", account.name, folder.name)
        } else {
            folder.path.display().to_string()
        }
    }

    /// The folder file in which the source keeps its per-folder sync state (IMAP's
    /// UIDVALIDITY and HIGHESTMODSEQ, an mbox's size and head hash), if it keeps one:
    /// [`FolderWriter::parent_state`] reads it back from the parent snapshot.
    fn state_file(&self) -> Option<&'static [u8]> {
        None
    }

    /// The stamps of the directories a folder's messages are listed from (a Maildir's
    /// `cur` and `new`), stat'ed now, before anything of the folder is listed: the same as
    /// the parent recorded and proven old ([`unchanged::proven_unchanged`]), the pipeline
    /// keeps the parent's messages of the folder without a listing
    /// ([`FolderWriter::messages_kept`]). `None` (the default): the source keeps none and
    /// lists every folder. The pipeline reads the clock before the first call.
    fn folder_stamps(&self, _account: &Account, _folder: &Folder) -> Option<Vec<DirStamp>> {
        None
    }

    /// Whether the source finds unchanged messages by key across the account's folders
    /// ([`FolderWriter::parent_keys`]; a Maildir message moved to another folder keeps
    /// its key): the pipeline then reads the keys of an account's parent messages before
    /// its folders start, rather than in the first folder that asks while the others wait.
    fn keys_across_folders(&self) -> bool {
        false
    }

    /// Offers messages to train the repository's compression dictionary on (the first
    /// zstd backup): a spread of messages across accounts and folders, each given to
    /// [`Samples::offer`] until [`Samples::full`]. By default none (no dictionary).
    fn samples(&self, _accounts: &[Account], _samples: &Samples) {}

    /// The account's home beside its mail, kept with it as a file tree: a Maildir store
    /// account's `<domain>/<user>/` less its `Maildir/` (Dovecot's sieve scripts, the
    /// active script's link; [`home`]), or what a server keeps of the account beside its
    /// mail (an IMAP account's sieve scripts over ManageSieve) laid out as such a home.
    /// The pipeline backs it up as a source of its own ([`home::source`],
    /// [`home::Served`]), its directories into
    /// [`crate::repo::tree::AccountTree::home`], after the folders; what stops it goes to
    /// `failures`. `None` (the default): the account has no home to keep.
    fn home(&self, _account: &Account, _failures: &Failures) -> Option<Home> {
        None
    }

    /// Where the store's own files are, beside its accounts (a Maildir store's root and
    /// domain directories: Dovecot's shared-mailbox dictionary), read with
    /// [`home::store_source`] into [`crate::repo::tree::RootTree::store`] after the
    /// accounts. `None` (the default): the source is no store, or keeps none.
    fn store(&self) -> Option<Home> {
        None
    }
}

/// What the pipeline needs besides the source.
#[derive(Clone, Debug)]
pub struct RunOptions {
    /// Overrides the repository's compression for this run.
    pub compression: Option<Compression>,
    pub tags: Vec<String>,
    pub hostname: String,
    /// No parent snapshot: read every message.
    pub force: bool,
    /// List every folder, even one whose directories are proven unchanged since the
    /// parent snapshot ([`unchanged`]); the parent's messages are still not read again.
    pub rescan: bool,
    /// `backup --index`: index the message contents the run adds as it reads them.
    pub index: Option<crate::search::inline::IndexAsRead>,
}

impl RunOptions {
    /// A run from `hostname` with the repository's compression, no tags, and a parent
    /// when there is one.
    pub fn new(hostname: impl Into<String>) -> RunOptions {
        RunOptions {
            compression: None,
            tags: Vec::new(),
            hostname: hostname.into(),
            force: false,
            rescan: false,
            index: None,
        }
    }
}

/// How the pipeline runs a source in parallel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Parallelism {
    /// Everything on one rayon pool of `jobs` threads (0: one per core): accounts
    /// (largest first), the folders of an account, and [`Source::backup_folder`] runs on
    /// the pool, so it may read a folder's messages in parallel (`par_iter` with
    /// [`FolderWriter::store`]). For files on disk.
    Pool { jobs: usize },
    /// `accounts` accounts at a time, each over up to `sessions` sessions (connections)
    /// with its folders dealt to them; within a folder messages come one at a time. For
    /// servers.
    Sessions { accounts: usize, sessions: usize },
}

/// Messages for the compression dictionary ([`Source::samples`]): split as the
/// repository splits, kept up to a budget. Safe to offer from several threads.
pub struct Samples<'a> {
    pub(crate) chunker: &'a crate::repo::split::Chunker,
    pub(crate) total: std::sync::atomic::AtomicU64,
    pub(crate) out: Mutex<Vec<Vec<u8>>>,
}

impl Samples<'_> {
    /// At most this many messages are worth offering.
    pub const MAX_MESSAGES: usize = 4000;
    /// Sample bytes kept.
    pub const MAX_BYTES: u64 = 8 << 20;

    /// Whether the budget is spent (offer nothing more).
    pub fn full(&self) -> bool {
        self.total.load(std::sync::atomic::Ordering::Relaxed) >= Self::MAX_BYTES
    }

    /// Offers one message.
    pub fn offer(&self, data: &[u8]) {
        use std::sync::atomic::Ordering::Relaxed;
        for r in crate::repo::split::split(data, self.chunker) {
            if r.len() <= crate::repo::compress::DICT_MAX_BLOB
                && self.total.fetch_add(r.len() as u64, Relaxed) < Self::MAX_BYTES
            {
                crate::repo::lock(&self.out).push(data[r].to_vec());
            }
        }
    }
}
