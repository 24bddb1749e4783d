//! Where a restore writes: the one interface every restore target implements (a Maildir
//! tree, an IMAP server; mbox, EML and plain directories join the same way).
//!
//! The restore pipeline ([`crate::restore`]) owns everything that is not
//! target-specific, once: the selection (`--account`/`--folder`/`--message`, or messages
//! picked by `undelete`), planning and batching, reading blobs by pack span
//! ([`crate::model::reader`]), reassembling and verifying every message against its hash
//! (a damaged blob names the message and the blob), the failure list, progress and the
//! report. It also works out, once per message, what every target needs to know besides
//! its bytes: system flags, keyword names (from the Maildir letters and the folder's
//! `dovecot-keywords`) and the internal date ([`Meta`]), so that a target needs no
//! Maildir knowledge.
//!
//! A target owns only its side: preparing an account and a folder (directories,
//! provisioning, CREATE, SUBSCRIBE, a journal), knowing what is already there (so that a
//! re-run never duplicates), writing one message (or a batch, in order), the folder's own
//! files, and finishing a folder and an account. It declares how it wants to be fed
//! ([`Caps`]): in any order from many threads (the pipeline then reads each pack span
//! once, [`crate::model::reader::read_by_packs`]) or in each folder's arrival order,
//! batch after batch (ordered groups, [`crate::model::reader::read_by_spans`]).
//!
//! Writing a target: see `docs/architecture.md` (Restore) and the two implementations,
//! [`maildir`] (any order, parallel) and [`imap`] (in order, batched). Every target runs
//! the conformance suite, `crates/core/tests/target_conformance.rs`.

use crate::repo::tree::{AccountRef, FileEntry, FolderNode, MessageEntry, Timestamp};
use crate::repo::{lock, Repository};
use crate::report::{Failure, Reason};
use crate::Result;
use std::sync::Mutex;

pub mod eml;
mod fs;
pub mod imap;
pub mod maildir;
mod maildir_dirs;
pub mod mbox;
pub mod mbox_stream;
pub mod owners;
pub mod zip_stream;

/// How a target wants its messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Order {
    /// In any order, from many threads at once ([`Target::write`]): each message is
    /// written as soon as the last pack span holding its blobs is in. Maildir, EML, a
    /// directory tree.
    Any,
    /// A folder's messages in the folder's arrival order (its `dovecot-uidlist`, else the
    /// UIDs of an IMAP backup, else internal date and key), in batches
    /// ([`Target::write_batch`]), one folder at a time per lane. IMAP (UIDs follow the
    /// order of the appends), mbox (one file per folder, written front to back).
    Folder,
}

/// What a target declares about itself; the pipeline plans by it.
#[derive(Clone, Copy, Debug)]
pub struct Caps {
    pub order: Order,
    /// [`Order::Any`]: threads writing at once (0: one per core).
    pub jobs: usize,
    /// [`Order::Any`]: folders open at once (a Maildir folder holds three directory
    /// descriptors); accounts are restored in batches of at most this many folders, and
    /// every pack span is read once per batch.
    pub open_folders: usize,
    /// [`Order::Folder`]: accounts restored at once.
    pub accounts: usize,
    /// [`Order::Folder`]: lanes (connections) per account, each taking one folder at a
    /// time; [`Target::write_batch`] is called from that many threads per account.
    pub lanes: usize,
    /// [`Order::Folder`]: most messages, and most bytes, in one batch.
    pub batch_messages: usize,
    pub batch_bytes: usize,
    /// [`Order::Folder`]: an account gets a further lane for every this many messages
    /// (a lane may cost the target something, as an IMAP login does); 0: no such limit.
    pub lane_messages: usize,
    /// Whether the folder's own files (`dovecot-keywords`, `dovecot-uidlist`,
    /// `maildirfolder`, `subscriptions`...) are given to [`Target::write_file`] (read with
    /// the messages). Only a Maildir wants them; the others get their meaning through
    /// [`Meta`], [`FolderInfo`] and [`AccountInfo::subscriptions`].
    pub folder_files: bool,
    /// Whether the target keeps accounts' homes (a Maildir store's `<domain>/<user>/`:
    /// sieve scripts): a whole account's home directories are then given to it as
    /// folders with [`FolderInfo::home`] set, files only. The other targets get none,
    /// and the report says how many accounts' homes they left.
    pub home: bool,
    /// Whether the target is a store that keeps the store's own files beside its
    /// accounts ([`crate::repo::tree::RootTree::store`]: a Maildir store's shared-mailbox
    /// dictionary): a whole snapshot's are given to it as the home of an account with an
    /// empty `rel_path` (its root). Only a Maildir target; an IMAP server keeps its own.
    pub store: bool,
    /// Whether the target wants keyword names in [`Meta::keywords`]: the pipeline then
    /// reads each folder's `dovecot-keywords` before its messages. A Maildir does not
    /// (its file names keep the letters, its `dovecot-keywords` is restored as it was).
    pub keywords: bool,
    /// Whether the target makes hard links ([`Target::link_files`]): the pipeline then
    /// writes each file of a `file:` snapshot once, however many hard links of it the
    /// account has, and gives the others as links. Only a `dir:` target; the others get
    /// every path written as a file of its own.
    pub hard_links: bool,
    /// [`Order::Folder`]: whether the target takes a message in the pieces it was stored
    /// in ([`Message::parts`]) rather than whole ([`Message::data`]). The pipeline then
    /// checks the pieces against the message's size and whole hash without putting them
    /// together: the IMAP target converts them straight into its batch buffer, and the
    /// copy of every message into a buffer of its own was the largest copy of its client
    /// (issue 26).
    pub parts: bool,
}

/// An IMAP-style system flag set, from the Maildir letters `S`, `R`, `F`, `T`, `D`.
/// (Maildir's `P`, passed, is the keyword `$Forwarded`, as Dovecot has it.)
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Flags {
    pub seen: bool,
    pub answered: bool,
    pub flagged: bool,
    pub deleted: bool,
    pub draft: bool,
}

impl Flags {
    /// The IMAP names of the flags set (`\Seen`...), in the order of their Maildir letters.
    pub fn imap(&self) -> Vec<&'static str> {
        let all = [
            (self.draft, "\\Draft"),
            (self.flagged, "\\Flagged"),
            (self.answered, "\\Answered"),
            (self.seen, "\\Seen"),
            (self.deleted, "\\Deleted"),
        ];
        all.iter().filter(|(on, _)| *on).map(|(_, n)| *n).collect()
    }
}

/// What the pipeline works out once per message for every target.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Meta {
    pub flags: Flags,
    /// Keyword names (`$Label1`, `$Forwarded`, `Work`), in the order of their letters;
    /// letters the folder's `dovecot-keywords` does not name are left out.
    pub keywords: Vec<String>,
    /// The internal date (IMAP INTERNALDATE, mbox `From ` line, EML mtime): the Maildir
    /// file's mtime.
    pub internal_date: Timestamp,
    /// Delivered but not yet seen by a client (in Maildir's `new/`; IMAP `\Recent`).
    pub recent: bool,
}

/// One message handed to a target: its snapshot entry (key, file name, mode, owner:
/// what a Maildir restores as it was), what every target needs ([`Meta`]) and its
/// verified bytes (as stored: LF line ends for a Maildir's mail).
pub struct Message<'a> {
    pub entry: &'a MessageEntry,
    pub meta: &'a Meta,
    /// The message whole; empty for a target that takes it in pieces ([`Caps::parts`]).
    pub data: &'a [u8],
    /// For a target that takes it so ([`Caps::parts`]): the message in the pieces it was
    /// stored in (its blobs, in order), checked together as the whole is; else empty.
    pub parts: &'a [&'a [u8]],
}

/// What became of a message the target was given.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Written now (`bytes`: as written, e.g. CRLF for IMAP).
    Written { bytes: u64 },
    /// Already there with the same content (a re-run): not written again.
    AlreadyThere,
}

/// What a failure is about, for [`Target::item`].
#[derive(Clone, Copy, Debug)]
pub enum Item<'a> {
    Message(&'a MessageEntry),
    /// A folder file, by name.
    File(&'a [u8]),
}

/// Failures of a restore that cost no message (a folder file, a directory's owner, a subscription),
/// listed in the report. Shared by every thread of a restore.
#[derive(Debug, Default)]
pub struct RestoreFailures(Mutex<Vec<Failure>>);

impl RestoreFailures {
    pub fn add(&self, item: impl Into<String>, error: impl Reason) {
        lock(&self.0).push(Failure::new(item, error));
    }

    /// Everything listed, sorted by item.
    pub fn take(&self) -> Vec<Failure> {
        let mut f = std::mem::take(&mut *lock(&self.0));
        f.sort_by(|a, b| a.item.cmp(&b.item));
        f
    }
}

/// A file of a `file:` snapshot that was a hard link of another file of its account (the
/// same device and inode at backup), for [`Target::link_files`]: that one is written, this
/// one linked to it. Directories are [`FolderNode::dir`]s (below the account's), names
/// are file names; both were checked as every folder file's are.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HardLink {
    /// The link's folder directory and name.
    pub dir: Vec<u8>,
    pub name: Vec<u8>,
    /// The file it links to: the first of its links in the restore's order, and the
    /// size and mtime it is restored with (a target links only to a file that has them:
    /// not to another file found under its name).
    pub to_dir: Vec<u8>,
    pub to_name: Vec<u8>,
    pub size: u64,
    pub mtime: Timestamp,
}

/// What [`Target::link_files`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Linked {
    /// Links made.
    pub made: u64,
    /// Links already there (a re-run): the same file under both names.
    pub present: u64,
}

/// An account about to be restored.
pub struct AccountInfo<'a> {
    pub account: &'a AccountRef,
    /// The account's subscriptions that fall within the selection (IMAP names, `/`
    /// separated; possibly of folders that no longer exist); empty for messages picked
    /// one by one.
    pub subscriptions: &'a [String],
    /// The folders to be restored (their [`FolderInfo::name`]s), sorted: parents first.
    pub folders: &'a [String],
    /// Messages selected in the account.
    pub messages: u64,
    pub failures: &'a RestoreFailures,
}

/// A folder about to be restored.
pub struct FolderInfo<'a> {
    pub account: &'a AccountRef,
    /// The snapshot's folder: its Maildir directory, the owner and mode of its
    /// directories, its files.
    pub node: &'a FolderNode,
    /// Its name for people and IMAP (`INBOX`, `Archive/2023`, `Entwürfe`).
    pub name: &'a str,
    /// Only some of its messages are restored (`--message`, `undelete`): a target brings
    /// only the folder files that give them meaning (see [`FolderInfo::file`]).
    pub picked: bool,
    /// The messages that will be given to it (their bytes are not read yet); none for a
    /// whole folder restored into an [`Order::Any`] target, which gets its messages a
    /// window at a time, read from the snapshot as they are restored.
    pub entries: &'a [MessageEntry],
    /// A directory of the account's home ([`crate::repo::tree::AccountTree::home`]), its
    /// `dir` below the home (the directory that holds the Maildir), not a mail folder.
    pub home: bool,
    pub failures: &'a RestoreFailures,
    pub(crate) repo: &'a Repository,
}

impl FolderInfo<'_> {
    /// The bytes of the folder file `name` in the snapshot, if it has one (checked
    /// against its blobs' ids). For targets that need a file before the messages
    /// (a Maildir restoring picked messages maps keyword letters through it).
    pub fn file(&self, name: &[u8]) -> Option<crate::Result<Vec<u8>>> {
        let f = self.node.files.iter().find(|f| f.name == name)?;
        Some(crate::model::assemble::assemble_file(self.repo, f))
    }
}

/// A restore target. The pipeline calls, per account: [`Target::open_account`], then per
/// folder [`Target::open_folder`], [`Target::already_restored`] for each of its messages
/// (before they are read), [`Target::write_file`] for its files (when
/// [`Caps::folder_files`]), [`Target::write`] or [`Target::write_batch`] for the messages,
/// [`Target::finish_folder`]; then [`Target::link_files`] (when [`Caps::hard_links`]) and
/// last [`Target::finish_account`]. With [`Order::Any`],
/// `write` and `write_file` are called from many threads at once, for messages of many
/// folders and accounts; with [`Order::Folder`], `write_batch` from [`Caps::lanes`]
/// threads per account, each on one folder at a time, batches of a folder in order.
///
/// Errors are [`crate::Error`]s naming the path, account or folder, of the kind that says
/// what the user can do ([`crate::Error::Conflict`] for something else in the way, an IMAP
/// server's transient refusal...); the pipeline lists them as failures with that kind,
/// counting the messages they cost.
pub trait Target: Sync {
    /// An account opened in the target (Maildir: where it lies and the directories whose
    /// owners are set at the end; IMAP: its sessions and journal).
    type Account: Sync;
    /// A folder opened in the target (Maildir: its directories open, the keys already
    /// there; IMAP: its name, the journal's view, what the server holds).
    type Folder: Sync;

    /// How the target wants its messages.
    fn caps(&self) -> Caps;

    /// Creates or finds the account. An error costs the account's messages.
    fn open_account(&self, account: &AccountInfo) -> Result<Self::Account>;

    /// Creates or finds a folder. An error costs the folder's messages.
    fn open_folder(&self, account: &Self::Account, folder: &FolderInfo) -> Result<Self::Folder>;

    /// Whether the message is known to be there already (IMAP: a journal record of an
    /// earlier run that the server confirms), so that it is not even read. A target that
    /// can only tell from the bytes (a Maildir: same key, same content) answers `false`
    /// and returns [`Outcome::AlreadyThere`] from `write`.
    fn already_restored(&self, _folder: &Self::Folder, _entry: &MessageEntry) -> bool {
        false
    }

    /// Writes one message ([`Order::Any`]). An error costs this message only.
    fn write(&self, folder: &Self::Folder, msg: &Message) -> Result<Outcome>;

    /// Writes a batch of a folder's messages, in order ([`Order::Folder`]), putting what
    /// became of each in `done` (same places as `msgs`). An error means the account
    /// cannot go on (login refused, over quota): the messages left without a result in
    /// `done`, and the account's remaining ones, fail with it.
    fn write_batch(
        &self,
        folder: &Self::Folder,
        msgs: &[Message],
        done: &mut [Option<Result<Outcome>>],
    ) -> Result<()> {
        for (m, d) in msgs.iter().zip(done) {
            *d = Some(self.write(folder, m));
        }
        Ok(())
    }

    /// Writes a file of the folder (when [`Caps::folder_files`]): what became of it
    /// ([`Outcome::AlreadyThere`]: the same file was there, a re-run). An error is
    /// listed, costing no message.
    fn write_file(
        &self,
        _folder: &Self::Folder,
        _file: &FileEntry,
        data: &[u8],
    ) -> Result<Outcome> {
        Ok(Outcome::Written {
            bytes: data.len() as u64,
        })
    }

    /// Whether a large file is there already, complete (a re-run of a killed restore):
    /// then it is not read nor written again. A plain directory answers by size and
    /// mtime, as rsync does.
    fn file_present(&self, _folder: &Self::Folder, _file: &FileEntry) -> bool {
        false
    }

    /// Writes `data` at `offset` of a large file of the folder (one with content lists:
    /// a mail database of a `file:` backup), when [`Caps::folder_files`]. Pieces come in
    /// any order, from many threads; the file is [`finish_file`](Self::finish_file)ed
    /// once all are written.
    fn write_file_at(
        &self,
        _folder: &Self::Folder,
        _file: &FileEntry,
        _offset: u64,
        _data: &[u8],
    ) -> Result<()> {
        Ok(())
    }

    /// Ends a large file once every piece was given: `ok` false if one failed (the target
    /// then drops what it wrote). An error is listed, costing no message.
    fn finish_file(&self, _folder: &Self::Folder, _file: &FileEntry, _ok: bool) -> Result<()> {
        Ok(())
    }

    /// Ends a folder once every message has been given (mbox: close its file). Errors go
    /// to `failures`.
    fn finish_folder(&self, _folder: Self::Folder, _failures: &RestoreFailures) {}

    /// Makes the hard links of an account (when [`Caps::hard_links`]), once all its
    /// folders are done and before [`finish_account`](Self::finish_account). A link whose
    /// file was not written, or whose name is taken by another file, is listed in
    /// `failures`, costing no message.
    fn link_files(
        &self,
        _account: &Self::Account,
        _links: &[HardLink],
        _failures: &RestoreFailures,
    ) -> Linked {
        Linked::default()
    }

    /// Ends an account once all its folders are done (Maildir: directories get their
    /// recorded owner and mode, deepest first; IMAP: the journal synced, the sessions
    /// logged out). Errors go to `failures`.
    fn finish_account(&self, _account: Self::Account, _failures: &RestoreFailures) {}

    /// How a failure about `item` of `folder` is named in the report (a Maildir: the
    /// file's path and the account; IMAP: `account: folder: key`).
    fn item(&self, folder: &Self::Folder, item: Item) -> String;

    /// What the restore did not do but is not a failure, for the report's warnings (a
    /// Maildir restore not run as root leaves owners unset).
    fn warnings(&self) -> Vec<String> {
        Vec::new()
    }
}

/// [`Meta`] of a message of a folder whose `dovecot-keywords` is `keywords`.
pub fn meta(entry: &MessageEntry, keywords: &mailvault_imap::maildir_flags::KeywordTable) -> Meta {
    let mut m = Meta {
        internal_date: entry.mtime,
        recent: entry.new,
        ..Meta::default()
    };
    for &c in entry.flags() {
        match c {
            b'S' => m.flags.seen = true,
            b'R' => m.flags.answered = true,
            b'F' => m.flags.flagged = true,
            b'T' => m.flags.deleted = true,
            b'D' => m.flags.draft = true,
            b'P' => m.keywords.push("$Forwarded".into()),
            b'a'..=b'z' => {
                if let Some(k) = keywords.name_of(char::from(c)) {
                    m.keywords.push(k.to_string());
                }
            }
            _ => {}
        }
    }
    m
}
