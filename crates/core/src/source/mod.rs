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
//! [`FolderWriter::parent_by_key`], [`FolderWriter::parent_entries`],
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
pub mod imap;
pub mod maildir;
pub mod mbox;
pub mod walk;

use crate::repo::tree::{DirEntry, FileEntry, FolderNode, MessageEntry, Timestamp};
use crate::report::Failure;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Mutex, OnceLock};

/// A mail store a backup reads from. The pipeline ([`crate::ops::backup::run`]) calls
/// [`accounts`](Source::accounts) once, then per account [`open`](Source::open) and
/// [`folders`](Source::folders), then per folder [`backup_folder`](Source::backup_folder),
/// in parallel as [`parallelism`](Source::parallelism) says.
pub trait Source: Sync {
    /// What one worker holds while it backs up folders of an account: nothing (`()`) for
    /// files on disk, a logged-in session for a server.
    type Session: Send;
    /// The source's error; the pipeline's own (repository) errors convert into it.
    type Error: std::error::Error + From<crate::Error> + Send + Sync + 'static;

    /// The snapshot's source label (`maildir:/var/vmail`, `imap://host:993`); the parent
    /// snapshot is the latest one with the same label and host.
    fn label(&self) -> String;

    /// How the pipeline may run accounts, folders and messages in parallel.
    fn parallelism(&self) -> Parallelism;

    /// The accounts to back up, in snapshot order (an error ends the backup before it
    /// starts: nothing is written).
    fn accounts(&self) -> Result<Vec<Account>, Self::Error>;

    /// [`accounts`](Source::accounts), reporting to `failures` what was found and not
    /// taken (a Maildir store's account directory that is a symbolic link); the pipeline
    /// calls this one.
    fn accounts_reporting(&self, _failures: &Failures) -> Result<Vec<Account>, Self::Error> {
        self.accounts()
    }

    /// A session for `account` (a login; nothing for files). With
    /// [`Parallelism::Pool`] one is opened per folder, so it must be cheap there.
    fn open(&self, account: &Account) -> Result<Self::Session, Self::Error>;

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
    ) -> Result<AccountListing, Self::Error>;

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
    ) -> Result<(), Self::Error>;

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

    /// Whether the source finds unchanged messages by key across the account's folders
    /// ([`FolderWriter::parent_by_key`]; a Maildir message moved to another folder keeps
    /// its key): the pipeline then reads the parent's entries of an account before its
    /// folders start, rather than in the first folder that asks while the others wait.
    fn keys_across_folders(&self) -> bool {
        false
    }

    /// Offers messages to train the repository's compression dictionary on (the first
    /// zstd backup): a spread of messages across accounts and folders, each given to
    /// [`Samples::offer`] until [`Samples::full`]. By default none (no dictionary).
    fn samples(&self, _accounts: &[Account], _samples: &Samples) {}
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

/// One account of a source.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Account {
    /// `user@domain`, or the name given for a single Maildir or mbox.
    pub name: String,
    /// Where a restore into a store puts the account's Maildir, below the store root
    /// (`example.org/bob/Maildir`; empty for a single Maildir), raw bytes.
    pub rel_path: Vec<u8>,
    /// The source's own locator of the account (a directory, a file); empty if it needs
    /// none (IMAP).
    pub path: PathBuf,
}

/// One folder of an account.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Folder {
    /// The folder's name, `/`-separated (`INBOX`, `Archive/2023`).
    pub name: String,
    /// Its Maildir++ directory (empty for INBOX, `.Archive.2023`): the folder's identity
    /// across snapshots (the parent folder is the one with the same `dir`).
    pub dir: Vec<u8>,
    /// The source's own locator of the folder; empty if it needs none.
    pub path: PathBuf,
}

impl Folder {
    /// The folder `name` (`/`-separated) found at `path`, with the Maildir++ directory
    /// Dovecot gives it ([`crate::imap::names::maildir_dir`]): for sources that name
    /// folders rather than keep Maildir++ directories (IMAP, mbox, EML).
    pub fn named(name: &str, path: PathBuf) -> Folder {
        Folder {
            name: name.to_string(),
            dir: crate::imap::names::maildir_dir(name),
            path,
        }
    }

    /// A folder of a file tree (mbox, EML) named `name` as `crate::mail::layout` reads
    /// it: as [`Folder::named`], but only `INBOX` itself is INBOX; `Inbox` (escaped in the
    /// tree, a folder of its own) keeps a directory of its own
    /// ([`crate::imap::names::tree_maildir_dir`]).
    pub fn in_tree(name: &str, path: PathBuf) -> Folder {
        Folder {
            name: name.to_string(),
            dir: crate::imap::names::tree_maildir_dir(name),
            path,
        }
    }
}

/// What [`Source::folders`] found in an account.
#[derive(Clone, Debug, Default)]
pub struct AccountListing {
    /// The folders, in any order (the snapshot has INBOX first, then by `dir`).
    pub folders: Vec<Folder>,
    /// The directories above the account's Maildir, from the top (a store's
    /// `example.org`, `bob`, `Maildir`), with their owner and mode; empty when the source
    /// has none.
    pub dirs: Vec<DirEntry>,
    /// Subscribed folders (IMAP LSUB): the pipeline writes them as INBOX's
    /// `subscriptions` file. `None` when the source has no such list, or keeps the file
    /// itself (a Maildir's own `subscriptions` is one of its folder files).
    pub subscriptions: Option<Vec<String>>,
}

/// What `stat(2)` says of a file (a message file, a folder file).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileMeta {
    pub size: u64,
    pub mtime: Timestamp,
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    /// The inode number (a `file:` backup reads again only a file whose size, mtime or
    /// inode changed).
    pub inode: u64,
    /// The device number (`st_dev`): with `inode`, which paths are hard links of one
    /// file.
    pub dev: u64,
    /// The number of hard links (`st_nlink`).
    pub nlink: u32,
}

impl FileMeta {
    pub fn of(m: &std::fs::Metadata) -> FileMeta {
        use std::os::unix::fs::MetadataExt;
        FileMeta {
            size: m.len(),
            mtime: timestamp(m),
            mode: m.mode() & 0o7777,
            uid: m.uid(),
            gid: m.gid(),
            inode: m.ino(),
            dev: m.dev(),
            nlink: u32::try_from(m.nlink()).unwrap_or(u32::MAX),
        }
    }
}

impl FileMeta {
    /// From `fstatat` ([`walk::Dir::stat`]).
    // The `stat` fields' types differ between platforms: the casts are not all no-ops.
    #[allow(clippy::unnecessary_cast)]
    pub fn of_stat(st: &walk::Stat) -> FileMeta {
        FileMeta {
            size: st.st_size as u64,
            mtime: Timestamp {
                secs: st.st_mtime as i64,
                nanos: (st.st_mtime_nsec as i64).clamp(0, 999_999_999) as u32,
            },
            mode: st.st_mode as u32 & 0o7777,
            uid: st.st_uid,
            gid: st.st_gid,
            inode: st.st_ino as u64,
            dev: st.st_dev as u64,
            nlink: u32::try_from(st.st_nlink).unwrap_or(u32::MAX),
        }
    }
}

/// The mtime of a file.
pub(crate) fn timestamp(m: &std::fs::Metadata) -> Timestamp {
    use std::os::unix::fs::MetadataExt;
    Timestamp {
        secs: m.mtime(),
        nanos: m.mtime_nsec().clamp(0, 999_999_999) as u32,
    }
}

/// A new message a source read, for [`FolderWriter::store`].
#[derive(Debug)]
pub struct NewMessage<'a> {
    /// The bytes to store, as a Maildir holds them (LF line ends).
    pub data: &'a [u8],
    /// Bytes read from the source for it (the report's `bytes_read`: IMAP's CRLF size).
    pub read: u64,
    /// Its place, name and flags.
    pub meta: MessageMeta<'a>,
}

/// How a source describes a message's place, flags and date.
#[derive(Debug)]
pub enum MessageMeta<'a> {
    /// A native Maildir file: its name (key, then `:2,` and flag letters), in `new/` or
    /// `cur/`, and its `stat`.
    Maildir {
        name: Vec<u8>,
        new: bool,
        file: FileMeta,
    },
    /// Flags and keywords as IMAP names them (`\Seen`, `$Label1`), the internal date
    /// (Unix seconds) and a stable id: the pipeline makes the Maildir key from the id,
    /// the name (`:2,` and letters; keyword letters from the folder's
    /// `dovecot-keywords`, which it writes), mtime = internal date, mode 0600 and the
    /// owner running the backup.
    Flags {
        flags: &'a [&'a str],
        internal_date: i64,
        id: MessageId,
    },
}

/// What a message given by flags is known by; its Maildir key is made from it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MessageId {
    /// IMAP's UID and UIDVALIDITY (for other sources: a number unique in the folder and
    /// stable while the message is there, and one that changes whenever the numbers are
    /// given anew): the key is [`crate::imap::names::synth_key`] of the folder name,
    /// internal date, both and the size.
    Uid { uid: u32, validity: u32 },
    /// The source's own key, used as it is: unique in the folder, stable while the
    /// message is there, no `/`, `:` or NUL (an EML file's name without `.eml`).
    Key(Vec<u8>),
}

/// A folder file a source hands the pipeline ([`FolderWriter::file`]).
#[derive(Debug)]
pub struct FolderFile {
    /// Its name in the folder's directory (`dovecot-uidlist`, `subscriptions`).
    pub name: Vec<u8>,
    pub data: FileData,
    /// Its `stat`; `None` for a file the source makes up (then: mode 0600, owned by the
    /// user running the backup, mtime the snapshot's time).
    pub meta: Option<FileMeta>,
}

/// The content of a folder file.
#[derive(Debug)]
pub enum FileData {
    Bytes(Vec<u8>),
    /// A file to read (a file gone by then is left out quietly: deleted meanwhile).
    Path(PathBuf),
    /// A file of any size to read in bounded windows and cut into page-sized chunks,
    /// chunked and stored in parallel, its chunk ids kept in content lists
    /// ([`crate::repo::writer::content::store_large`]): a mail database, for `file:` backups; the
    /// file `name` of the open directory `dir`, opened relative to it, never through a
    /// link ([`walk::Dir::open_file`]). Gone by then: left out quietly, as with `Path`.
    /// One that changed while it was read is read again, then reported
    /// ([`FolderWriter::store_file`]).
    Large {
        dir: std::sync::Arc<walk::Dir>,
        name: Vec<u8>,
    },
    /// A symbolic link, by its target (a `file:` backup's: never followed).
    Link(Vec<u8>),
}

/// The failure list of a backup run: what could not be backed up, and why; and what was
/// left out on purpose and is worth saying (warnings: the run's exit code does not change).
#[derive(Debug, Default)]
pub struct Failures {
    failed: Mutex<Vec<Failure>>,
    warnings: Mutex<Vec<String>>,
}

impl Failures {
    /// Records that `item` (a path, `account: folder`, `account: folder: UID n`) failed.
    pub fn fail(&self, item: impl Into<String>, e: impl std::fmt::Display) {
        crate::repo::lock(&self.failed).push(Failure::new(item, e));
    }

    /// Records that `item` was left out on purpose, and why (a store's alias links).
    pub fn warn(&self, item: impl std::fmt::Display, why: impl std::fmt::Display) {
        crate::repo::lock(&self.warnings).push(format!("{item}: {why}"));
    }

    /// Records failures found earlier (by a source's own walk).
    pub(crate) fn extend(&self, failed: impl IntoIterator<Item = Failure>) {
        crate::repo::lock(&self.failed).extend(failed);
    }

    pub(crate) fn take(&self) -> Vec<Failure> {
        std::mem::take(&mut *crate::repo::lock(&self.failed))
    }

    pub(crate) fn take_warnings(&self) -> Vec<String> {
        let mut w = std::mem::take(&mut *crate::repo::lock(&self.warnings));
        w.sort();
        w
    }
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

/// The parent snapshot's view of one account, as the pipeline loaded it.
#[derive(Default)]
pub(crate) struct ParentAccount {
    /// Its folders, in the tree's order.
    pub(crate) folders: Vec<FolderNode>,
    /// Index in `folders` by `dir`.
    pub(crate) by_dir: HashMap<Vec<u8>, usize>,
    /// Every message of the account by key, read on first use.
    pub(crate) by_key: OnceLock<HashMap<Vec<u8>, MessageEntry>>,
}

/// Where a source puts one folder's backup: the pipeline's side of
/// [`Source::backup_folder`]. Its methods are implemented in [`crate::ops::backup`].
pub struct FolderWriter<'a> {
    pub(crate) ctx: &'a crate::ops::backup::Ctx<'a>,
    pub(crate) account: &'a str,
    pub(crate) folder: &'a Folder,
    pub(crate) parent_account: &'a ParentAccount,
    /// The parent's folder of the same `dir`.
    pub(crate) parent: Option<&'a FolderNode>,
    pub(crate) entries: Vec<MessageEntry>,
    pub(crate) files: Vec<FileEntry>,
    pub(crate) dirs: Vec<DirEntry>,
    /// The folder directory's mtime, when the source keeps it.
    pub(crate) mtime: Option<Timestamp>,
    /// Keyword letters of messages given by flags; written as `dovecot-keywords` when
    /// not empty.
    pub(crate) keywords: Mutex<mailvault_imap::maildir_flags::KeywordTable>,
}
