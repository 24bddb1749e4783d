//! What a source hands the pipeline: accounts and folders, the `stat` of a file, new
//! messages and how they are described, folder files, and the run's failures.

use super::walk;
use crate::repo::tree::{DirEntry, Timestamp};
use crate::report::Failure;
use std::path::PathBuf;
use std::sync::Mutex;

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

/// An account's home beside its mail ([`super::Source::home`]).
#[derive(Debug)]
pub enum Home {
    /// A directory on disk (a Maildir store's `<domain>/<user>/`), and the filesystem
    /// snapshot it is read from (the live filesystem's root, the snapshot's root).
    Dir {
        dir: PathBuf,
        view: Option<(PathBuf, PathBuf)>,
    },
    /// Files a server gave (an IMAP account's sieve scripts, over ManageSieve), laid out
    /// as Dovecot lays out a home, so that a snapshot has one form of them whatever the
    /// source: (directory below the home, `sieve` or empty; the file).
    Files(Vec<(Vec<u8>, FolderFile)>),
}

/// What [`super::Source::folders`] found in an account.
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

/// A new message a source read, for [`super::FolderWriter::store`].
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

/// A folder file a source hands the pipeline ([`super::FolderWriter::file`]).
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
    /// ([`super::FolderWriter::store_file`]).
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
    pub fn fail(&self, item: impl Into<String>, e: impl crate::report::Reason) {
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
