//! Metadata trees: snapshot -> accounts -> folders -> message entries.
//!
//! Each level is a tree blob: one version byte, then the postcard encoding of the struct.
//! A folder's entries are sorted by Maildir key and cut into chunks at content-defined
//! boundaries (where the hash of a key says so), so adding or deleting a message rewrites
//! one small chunk and an unchanged folder encodes to the same blobs and costs nothing.
//! Each chunk is two blobs: the entries' stable part (content, size, dates) and their
//! volatile part (the file name's flags and `new/` vs `cur/`), so a flag change rewrites
//! only a few bytes of names, never the content ids.
//!
//! Version 2 of the root and account trees adds owners and modes of directories and
//! folder files and the owners' names; version-1 blobs still decode (into the old structs,
//! then converted, with those fields empty). Version 3 of the account tree gives files
//! content lists ([`ContentList`]: a large file's chunk ids in tree blobs of their own)
//! and inode numbers; version 4 gives folders their directory's mtime and files their
//! symbolic link target; version 5 gives files their device number and link count, so
//! that a restore knows which are hard links of one file; version 6 gives folders the
//! stamps of their directories as found ([`FolderScan`]), so that an unchanged Maildir
//! folder is taken from the parent without listing it, and keeps a large folder's chunk
//! references in a [`ChunkTree`] of their own (a content-defined tree, so that one message
//! more in a folder of a million rewrites a few small nodes, not the folder's list of
//! chunks); version 7 gives accounts their home's files beside the Maildir
//! ([`AccountTree::home`]: sieve scripts). Version 3 of the root tree gives the snapshot
//! the store's own files ([`RootTree::store`]). Older blobs still decode. Chunks are
//! still version 1; chunk trees are version 6.

use crate::error::{Error, Result};
use crate::repo::id::Id;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// Version byte in front of chunk blobs ([`MessageChunk`], [`NameChunk`]).
pub const TREE_VERSION: u8 = 1;
/// Version byte in front of [`RootTree`] and [`AccountTree`] blobs since owners and
/// directory modes are recorded.
pub const TREE_VERSION_2: u8 = 2;
/// A chunk ends after an entry whose key hash is 0 modulo this: ~32 entries per chunk.
pub const CHUNK_AVG_ENTRIES: u16 = 32;
/// Chunks are at least this long (bar the last) ...
pub const CHUNK_MIN_ENTRIES: usize = 8;
/// ... and at most this long.
pub const CHUNK_MAX_ENTRIES: usize = 256;

/// The snapshot's top tree: its accounts.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq, Default)]
pub struct RootTree {
    pub accounts: Vec<AccountRef>,
    /// Names of the owners recorded in the snapshot (as tar keeps them), so that a
    /// restore on another server maps owners by name.
    pub owners: OwnerNames,
    /// The store's own files, beside its accounts (a Maildir store's root and domain
    /// directories: Dovecot's shared-mailbox dictionary, `acl_shared_dict =
    /// file:/var/vmail/shared-mailboxes`): an [`AccountTree`] of no folders whose
    /// [`AccountTree::home`] holds them, one node per directory (`dir` empty for the
    /// root, `example.org` for a domain's). `None`: the store has none, or the source is
    /// no store. Since root tree version 3.
    pub store: Option<Id>,
}

/// User and group names of the uids and gids a snapshot records, where the backed-up
/// system knew them; sorted by id.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq, Default)]
pub struct OwnerNames {
    pub users: Vec<(u32, String)>,
    pub groups: Vec<(u32, String)>,
}

/// Owner and mode of a directory (or, with [`FileEntry`], of a file).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct DirEntry {
    /// One path component; empty for the folder directory itself.
    pub name: Vec<u8>,
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
}

/// One account in a snapshot.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct AccountRef {
    /// `user@domain`.
    pub name: String,
    /// Where the account's Maildir is below the source root (`example.org/bob/Maildir`), as
    /// raw bytes; empty when the source is the Maildir itself.
    pub rel_path: Vec<u8>,
    pub tree: Id,
    pub messages: u64,
    pub bytes: u64,
    /// Owner and mode of each directory of `rel_path`, from the top (`example.org`,
    /// `bob`, `Maildir`); empty for a single Maildir (its root is INBOX's directory).
    pub dirs: Vec<DirEntry>,
}

/// An account's folders, and its home's files.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq, Default)]
pub struct AccountTree {
    pub folders: Vec<FolderNode>,
    /// The account's home beside its Maildir (`example.org/bob/` of
    /// `example.org/bob/Maildir`): Dovecot's `sieve/` scripts, the `.dovecot.sieve` link
    /// to the active one, `.dovecot.lda-dupes`; one node per directory, as a `file:`
    /// backup keeps them (`dir` its path below the home, empty for the home itself; no
    /// messages). Empty for sources without homes and in older trees. Version 7.
    pub home: Vec<FolderNode>,
}

/// One folder: its name, its Maildir directory, its own files and its message chunks.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct FolderNode {
    /// Display/IMAP-style name with `/` separators: `INBOX`, `Sent`, `Archive/2023`.
    pub name: String,
    /// Directory below the Maildir root, raw bytes: empty for INBOX, `.Archive.2023`.
    pub dir: Vec<u8>,
    /// Files of the folder directory other than messages (dovecot-uidlist, dovecot-keywords,
    /// maildirfolder, subscriptions...).
    pub files: Vec<FileEntry>,
    pub chunks: Vec<ChunkRef>,
    pub messages: u64,
    pub bytes: u64,
    /// Owner and mode of the folder directory (name empty) and of its `cur`, `new`, `tmp`.
    pub dirs: Vec<DirEntry>,
    /// The folder directory's mtime, where the source keeps it (a `file:` backup's
    /// directories; a Maildir's changes with every delivery and is not kept). Version 4.
    pub mtime: Option<Timestamp>,
    /// How the folder's directories were found, for the next backup's proof that nothing
    /// changed (`crate::source::unchanged`); `None` when the folder had a failure (the
    /// next backup lists it again), for sources that keep none (IMAP, mbox, EML, `file:`),
    /// and in older trees. Version 6.
    pub scan: Option<FolderScan>,
    /// The root of the folder's [`ChunkTree`], when its chunks are too many for one list:
    /// the folder's chunks are then those of the tree, in order, and `chunks` is empty.
    /// Read them with `Repository::folder_chunks`. Version 6.
    pub chunk_tree: Option<Id>,
}

/// A node of a folder's chunk tree: a leaf holds a run of the folder's chunks, an inner
/// node the ids of its children (nodes one level down), all in key order. Each level is
/// cut into nodes at content-defined points ([`node_boundaries`] on the chunks' `entries`
/// ids, then on the nodes' ids), as a prolly tree is: one message more changes one chunk,
/// so one leaf and the nodes above it, and an unchanged folder encodes to the same nodes.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq, Default)]
pub struct ChunkTree {
    /// A leaf's chunks (empty in an inner node).
    pub chunks: Vec<ChunkRef>,
    /// An inner node's children (empty in a leaf).
    pub children: Vec<Id>,
}

/// How a backup found a folder's directories ([`FolderNode::scan`]); the clock they are
/// compared with is the snapshot's (`Snapshot::started`), so that the same directories
/// give the same node whenever they are backed up.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq, Default)]
pub struct FolderScan {
    /// The stamps of the directories whose listing the folder's messages come from (a
    /// Maildir's `cur` and `new`), stat'ed after the backup started and before they were
    /// listed.
    pub dirs: Vec<DirStamp>,
    /// The uids and gids of the folder's messages, sorted: the snapshot's owner names are
    /// found for a folder taken from the parent without reading its entries.
    pub uids: Vec<u32>,
    pub gids: Vec<u32>,
}

/// What `stat` said of one directory: a change of any of it means the directory changed.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq, Default)]
pub struct DirStamp {
    /// `cur` or `new`.
    pub name: Vec<u8>,
    pub dev: u64,
    pub inode: u64,
    pub mtime: Timestamp,
    /// The status change time: moves with every change of the directory, including one
    /// that sets the mtime back (`touch -d`, `rsync -t`), and cannot be set.
    pub ctime: Timestamp,
}

/// One chunk of a folder's messages: two blobs with the same number of entries.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq, Hash)]
pub struct ChunkRef {
    /// A [`MessageChunk`]: the stable part of each entry.
    pub entries: Id,
    /// A [`NameChunk`]: the volatile part of each entry.
    pub names: Id,
}

/// A plain file kept with a folder: a Maildir's `dovecot-uidlist`, or any file of a
/// `file:` backup (a mail database).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq, Default)]
pub struct FileEntry {
    pub name: Vec<u8>,
    pub size: u64,
    pub mtime: Timestamp,
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    /// The data blobs, in order; empty when the file's ids are in [`Self::lists`].
    pub content: Vec<Id>,
    /// A large file's data blob ids, kept in [`ContentList`] tree blobs (these, in order):
    /// a 1 GiB file has ~260,000 ids, which the folder's node would otherwise carry in
    /// every snapshot. Read them with `Repository::file_content`. Version 3.
    pub lists: Vec<Id>,
    /// The inode number at backup (0: not recorded): with `size` and `mtime`, a `file:`
    /// backup reads again only a file whose three changed. Version 3.
    pub inode: u64,
    /// A symbolic link's target (a `file:` backup's links, never followed): the entry has
    /// no content and size 0, and only a `dir:` restore makes the link. Version 4.
    pub link: Option<Vec<u8>>,
    /// The device number at backup (`st_dev`; 0: not recorded): regular files of an
    /// account with the same nonzero `dev` and `inode` and `nlink` above 1 are hard links
    /// of one file, which a `dir:` restore writes once and links. Version 5.
    pub dev: u64,
    /// The number of hard links of the file at backup (`st_nlink`; 0: not recorded).
    /// Version 5.
    pub nlink: u32,
}

impl FileEntry {
    /// The (device, inode) of a regular file recorded with more than one link: the key
    /// its other names share. `None` for a symbolic link, a file with one link, or an
    /// entry that recorded neither.
    pub fn hard_link_key(&self) -> Option<(u64, u64)> {
        let linked = self.link.is_none() && self.dev != 0 && self.inode != 0 && self.nlink > 1;
        linked.then_some((self.dev, self.inode))
    }
}

/// Seconds and nanoseconds since the Unix epoch.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq, Default, PartialOrd, Ord)]
pub struct Timestamp {
    pub secs: i64,
    pub nanos: u32,
}

/// One message file, as backup, restore and `ls` see it: [`StoredEntry`] and
/// [`NameEntry`] together (serialized only into a restore's own sealed temporary runs,
/// `restore::window`; the repository stores its two halves).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MessageEntry {
    /// Maildir key: the file name up to the `:2,` info part.
    pub key: Vec<u8>,
    /// The whole file name (key plus info: flags and keywords), restored as it was.
    pub name: Vec<u8>,
    /// In `new/` rather than `cur/`.
    pub new: bool,
    pub size: u64,
    /// The file's mtime: Maildir's (and Dovecot's) internal date.
    pub mtime: Timestamp,
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    /// Keyed BLAKE3 of the whole message, checked on restore.
    pub hash: Id,
    /// The content blobs, in order: trace prefix, then the rest in one or more chunks.
    pub content: Vec<Id>,
    /// Decoded From and Subject (shortened) and the Date header, for `ls`.
    pub from: String,
    pub subject: String,
    pub date: Option<i64>,
}

/// The stable part of a message entry: what a flag change or a move between `new/` and
/// `cur/` does not touch.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct StoredEntry {
    pub key: Vec<u8>,
    pub size: u64,
    pub mtime: Timestamp,
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub hash: Id,
    pub content: Vec<Id>,
    pub from: String,
    pub subject: String,
    pub date: Option<i64>,
}

/// The volatile part: the file name is `key` followed by `info` (`:2,RS`, or nothing).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct NameEntry {
    pub new: bool,
    pub info: Vec<u8>,
}

/// Stable parts of one chunk's entries.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq, Default)]
pub struct MessageChunk {
    pub entries: Vec<StoredEntry>,
}

/// Volatile parts of the same entries, in the same order.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq, Default)]
pub struct NameChunk {
    pub names: Vec<NameEntry>,
}

impl MessageEntry {
    /// Splits an entry into its stored halves.
    pub fn into_parts(self) -> (StoredEntry, NameEntry) {
        let info = self.name.get(self.key.len()..).unwrap_or_default().to_vec();
        (
            StoredEntry {
                key: self.key,
                size: self.size,
                mtime: self.mtime,
                mode: self.mode,
                uid: self.uid,
                gid: self.gid,
                hash: self.hash,
                content: self.content,
                from: self.from,
                subject: self.subject,
                date: self.date,
            },
            NameEntry {
                new: self.new,
                info,
            },
        )
    }

    pub fn from_parts(s: StoredEntry, n: NameEntry) -> MessageEntry {
        let mut name = s.key.clone();
        name.extend_from_slice(&n.info);
        MessageEntry {
            key: s.key,
            name,
            new: n.new,
            size: s.size,
            mtime: s.mtime,
            mode: s.mode,
            uid: s.uid,
            gid: s.gid,
            hash: s.hash,
            content: s.content,
            from: s.from,
            subject: s.subject,
            date: s.date,
        }
    }
}

/// Cuts sorted entries into chunks at content-defined boundaries ([`chunk_ends_after`]),
/// so an insertion or deletion moves at most the boundaries next to it.
pub fn chunk_boundaries(entries: &[MessageEntry]) -> Vec<std::ops::Range<usize>> {
    let mut out = Vec::new();
    let mut start = 0;
    for (i, e) in entries.iter().enumerate() {
        if chunk_ends_after(&e.key, i + 1 - start) {
            out.push(start..i + 1);
            start = i + 1;
        }
    }
    if start < entries.len() {
        out.push(start..entries.len());
    }
    out
}

/// Whether a chunk of sorted entries that holds `len` entries, the last with key `key`,
/// ends there: after a key whose BLAKE3 is 0 modulo [`CHUNK_AVG_ENTRIES`], within the min
/// and max. The one rule of every folder's chunks, cut at once or as a stream.
pub fn chunk_ends_after(key: &[u8], len: usize) -> bool {
    let h = blake3::hash(key);
    let cut =
        u16::from_le_bytes([h.as_bytes()[0], h.as_bytes()[1]]).is_multiple_of(CHUNK_AVG_ENTRIES);
    (cut && len >= CHUNK_MIN_ENTRIES) || len >= CHUNK_MAX_ENTRIES
}

impl MessageEntry {
    /// The Maildir info part after `:2,` (flags then keywords), empty if none.
    pub fn flags(&self) -> &[u8] {
        crate::mail::maildir::split_name(&self.name).1
    }
}

/// A struct stored as a tree blob: its version byte, and how blobs of older versions
/// decode into it.
pub trait TreeBlob: Serialize + DeserializeOwned {
    const VERSION: u8;
    /// Decodes the body of a blob of an older `version`; `None`: no such version.
    fn decode_old(_version: u8, _body: &[u8]) -> Option<postcard::Result<Self>> {
        None
    }
}

impl TreeBlob for MessageChunk {
    const VERSION: u8 = TREE_VERSION;
}
impl TreeBlob for NameChunk {
    const VERSION: u8 = TREE_VERSION;
}
impl TreeBlob for RootTree {
    const VERSION: u8 = TREE_VERSION_3;
    fn decode_old(version: u8, body: &[u8]) -> Option<postcard::Result<Self>> {
        match version {
            1 => Some(postcard::from_bytes::<v1::RootTree>(body).map(Into::into)),
            2 => Some(postcard::from_bytes::<old::RootTreeV2>(body).map(Into::into)),
            _ => None,
        }
    }
}
impl TreeBlob for ChunkTree {
    const VERSION: u8 = TREE_VERSION_6;
}
impl TreeBlob for AccountTree {
    const VERSION: u8 = TREE_VERSION_7;
    fn decode_old(version: u8, body: &[u8]) -> Option<postcard::Result<Self>> {
        /// An old account tree whose folders decode as `N`.
        fn with<N: DeserializeOwned + Into<FolderNode>>(
            body: &[u8],
        ) -> postcard::Result<AccountTree> {
            postcard::from_bytes::<old::AccountTree<N>>(body).map(Into::into)
        }
        match version {
            1 => Some(postcard::from_bytes::<v1::AccountTree>(body).map(Into::into)),
            2 => Some(with::<old::FolderNode<old::FileV2>>(body)),
            3 => Some(with::<old::FolderNode<old::FileV3>>(body)),
            4 => Some(with::<old::FolderNodeV4>(body)),
            5 => Some(with::<old::FolderNodeV5>(body)),
            6 => Some(with::<FolderNode>(body)),
            _ => None,
        }
    }
}

/// The version-2, -3 and -4 forms of the account tree. Versions 2 and 3 differ only in
/// their files (version 2's have no content lists or inodes) and have no folder mtimes or
/// file links; version 4 adds both (each old form nests the one before it: postcard
/// encodes a nested struct as its fields, in order), and lacks the files' device and
/// link count (version 5).
mod old {
    use super::{ChunkRef, DirEntry, Id, Timestamp};
    use serde::{Deserialize, Serialize};

    // Serialize: for the tests that old blobs still decode.
    /// A version-2 root tree: no store files.
    #[derive(Deserialize, Serialize)]
    pub struct RootTreeV2 {
        pub(super) accounts: Vec<super::AccountRef>,
        pub(super) owners: super::OwnerNames,
    }

    impl From<RootTreeV2> for super::RootTree {
        fn from(r: RootTreeV2) -> Self {
            super::RootTree {
                accounts: r.accounts,
                owners: r.owners,
                store: None,
            }
        }
    }

    /// An old account tree, its folders of the form `N`.
    #[derive(Deserialize, Serialize)]
    pub struct AccountTree<N> {
        pub(super) folders: Vec<N>,
    }
    /// A version-2 or -3 folder, its files of the form `F`.
    #[derive(Deserialize, Serialize)]
    pub(super) struct FolderNode<F> {
        pub(super) name: String,
        pub(super) dir: Vec<u8>,
        pub(super) files: Vec<F>,
        pub(super) chunks: Vec<ChunkRef>,
        pub(super) messages: u64,
        pub(super) bytes: u64,
        pub(super) dirs: Vec<DirEntry>,
    }
    /// A version-2 file.
    #[derive(Deserialize, Serialize)]
    pub(super) struct FileV2 {
        pub(super) name: Vec<u8>,
        pub(super) size: u64,
        pub(super) mtime: Timestamp,
        pub(super) mode: u32,
        pub(super) uid: u32,
        pub(super) gid: u32,
        pub(super) content: Vec<Id>,
    }
    /// A version-3 file: version 2's, then its content lists and inode.
    #[derive(Deserialize, Serialize)]
    pub(super) struct FileV3 {
        pub(super) v2: FileV2,
        pub(super) lists: Vec<Id>,
        pub(super) inode: u64,
    }
    /// A version-4 file: version 3's, then its link target.
    #[derive(Deserialize, Serialize)]
    pub(super) struct FileV4 {
        pub(super) v3: FileV3,
        pub(super) link: Option<Vec<u8>>,
    }
    /// A version-4 folder: version 3's with version-4 files, then its directory's mtime.
    #[derive(Deserialize, Serialize)]
    pub(super) struct FolderNodeV4 {
        pub(super) node: FolderNode<FileV4>,
        pub(super) mtime: Option<Timestamp>,
    }
    /// A version-5 folder: version 4's with today's files, no scan and no chunk tree.
    #[derive(Deserialize, Serialize)]
    pub(super) struct FolderNodeV5 {
        pub(super) node: FolderNode<super::FileEntry>,
        pub(super) mtime: Option<Timestamp>,
    }

    impl From<FileV2> for super::FileEntry {
        fn from(e: FileV2) -> Self {
            super::FileEntry {
                name: e.name,
                size: e.size,
                mtime: e.mtime,
                mode: e.mode,
                uid: e.uid,
                gid: e.gid,
                content: e.content,
                lists: Vec::new(),
                inode: 0,
                link: None,
                dev: 0,
                nlink: 0,
            }
        }
    }

    impl From<FileV3> for super::FileEntry {
        fn from(e: FileV3) -> Self {
            super::FileEntry {
                lists: e.lists,
                inode: e.inode,
                ..e.v2.into()
            }
        }
    }

    impl From<FileV4> for super::FileEntry {
        fn from(e: FileV4) -> Self {
            super::FileEntry {
                link: e.link,
                ..e.v3.into()
            }
        }
    }

    impl<F: Into<super::FileEntry>> From<FolderNode<F>> for super::FolderNode {
        fn from(f: FolderNode<F>) -> Self {
            super::FolderNode {
                name: f.name,
                dir: f.dir,
                files: f.files.into_iter().map(Into::into).collect(),
                chunks: f.chunks,
                messages: f.messages,
                bytes: f.bytes,
                dirs: f.dirs,
                mtime: None,
                scan: None,
                chunk_tree: None,
            }
        }
    }

    impl From<FolderNodeV4> for super::FolderNode {
        fn from(f: FolderNodeV4) -> Self {
            super::FolderNode {
                mtime: f.mtime,
                ..f.node.into()
            }
        }
    }

    impl From<FolderNodeV5> for super::FolderNode {
        fn from(f: FolderNodeV5) -> Self {
            super::FolderNode {
                mtime: f.mtime,
                ..f.node.into()
            }
        }
    }

    impl<N: Into<super::FolderNode>> From<AccountTree<N>> for super::AccountTree {
        fn from(t: AccountTree<N>) -> Self {
            super::AccountTree {
                folders: t.folders.into_iter().map(Into::into).collect(),
                home: Vec::new(),
            }
        }
    }
}

/// The version-1 forms of the trees that changed in version 2.
mod v1 {
    use super::{ChunkRef, Id, Timestamp};
    use serde::Deserialize;

    #[derive(Deserialize)]
    pub struct RootTree {
        accounts: Vec<AccountRef>,
    }
    #[derive(Deserialize)]
    struct AccountRef {
        name: String,
        rel_path: Vec<u8>,
        tree: Id,
        messages: u64,
        bytes: u64,
    }
    #[derive(Deserialize)]
    pub struct AccountTree {
        folders: Vec<FolderNode>,
    }
    #[derive(Deserialize)]
    struct FolderNode {
        name: String,
        dir: Vec<u8>,
        files: Vec<FileEntry>,
        chunks: Vec<ChunkRef>,
        messages: u64,
        bytes: u64,
    }
    #[derive(Deserialize)]
    struct FileEntry {
        name: Vec<u8>,
        size: u64,
        mtime: Timestamp,
        mode: u32,
        content: Vec<Id>,
    }

    impl From<RootTree> for super::RootTree {
        fn from(r: RootTree) -> Self {
            super::RootTree {
                accounts: r
                    .accounts
                    .into_iter()
                    .map(|a| super::AccountRef {
                        name: a.name,
                        rel_path: a.rel_path,
                        tree: a.tree,
                        messages: a.messages,
                        bytes: a.bytes,
                        dirs: Vec::new(),
                    })
                    .collect(),
                owners: Default::default(),
                store: None,
            }
        }
    }

    impl From<AccountTree> for super::AccountTree {
        fn from(t: AccountTree) -> Self {
            let folders = t.folders.into_iter().map(|f| super::FolderNode {
                name: f.name,
                dir: f.dir,
                files: f
                    .files
                    .into_iter()
                    .map(|e| super::FileEntry {
                        name: e.name,
                        size: e.size,
                        mtime: e.mtime,
                        // Version 1 kept no owner: the restore's own (see `restore`).
                        mode: e.mode,
                        uid: super::NO_OWNER,
                        gid: super::NO_OWNER,
                        content: e.content,
                        lists: Vec::new(),
                        inode: 0,
                        link: None,
                        dev: 0,
                        nlink: 0,
                    })
                    .collect(),
                chunks: f.chunks,
                messages: f.messages,
                bytes: f.bytes,
                dirs: Vec::new(),
                mtime: None,
                scan: None,
                chunk_tree: None,
            });
            super::AccountTree {
                folders: folders.collect(),
                home: Vec::new(),
            }
        }
    }
}

/// The uid or gid of a file whose owner was not recorded (version-1 trees): the restore
/// leaves the owner it creates the file with.
pub const NO_OWNER: u32 = u32::MAX;

/// Encodes a tree blob.
pub fn encode<T: TreeBlob>(value: &T) -> Vec<u8> {
    let mut out = vec![T::VERSION];
    // postcard serialization of these plain structs into a Vec cannot fail.
    out.extend(postcard::to_allocvec(value).unwrap_or_default());
    out
}

/// Decodes a tree blob; `what` names it for errors.
pub fn decode<T: TreeBlob>(bytes: &[u8], what: &str) -> Result<T> {
    let tree_err = |e: postcard::Error| Error::corrupt(what, format!("tree: {e}"));
    match bytes.first() {
        Some(&v) if v == T::VERSION => postcard::from_bytes(&bytes[1..]).map_err(tree_err),
        Some(&v) => match T::decode_old(v, &bytes[1..]) {
            Some(r) => r.map_err(tree_err),
            None => Err(Error::corrupt(what, format!("tree version {v}"))),
        },
        None => Err(Error::corrupt(what, "empty tree blob")),
    }
}

/// Version byte of [`ContentList`] blobs, of [`RootTree`] blobs since they hold the
/// store's files, and of [`AccountTree`] blobs while files had content lists and inodes
/// but folders no mtime and files no link target.
pub const TREE_VERSION_3: u8 = 3;
/// Version byte of [`AccountTree`] blobs while folders had their directory's mtime and
/// files their link target, but files no device number or link count.
pub const TREE_VERSION_4: u8 = 4;
/// Version byte of [`AccountTree`] blobs while files had their device number and link
/// count (hard links), but folders no scan and no chunk tree.
pub const TREE_VERSION_5: u8 = 5;
/// Version byte of [`AccountTree`] blobs since folders have their scan ([`FolderScan`])
/// and large folders keep their chunks in a [`ChunkTree`]; and of [`ChunkTree`] blobs.
pub const TREE_VERSION_6: u8 = 6;
/// Version byte of [`AccountTree`] blobs since accounts keep their home's files
/// ([`AccountTree::home`]).
pub const TREE_VERSION_7: u8 = 7;
/// A content list ends after an id whose first two bytes (little endian) are 0 modulo
/// this: ~64 ids per list (256 KiB of a file in 4 KiB chunks) ...
pub const LIST_AVG_IDS: u16 = 64;
/// ... once it has at least this many ids (bar the last) ...
pub const LIST_MIN_IDS: usize = 16;
/// ... and always at this many.
pub const LIST_MAX_IDS: usize = 1024;

/// A run of a file's data blob ids. A file's ids are cut into lists at content-defined
/// points ([`list_boundaries`]), so that a file changed in one place rewrites the one list
/// there and shares the others with its previous version.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq, Default)]
pub struct ContentList {
    pub ids: Vec<Id>,
}

impl TreeBlob for ContentList {
    const VERSION: u8 = TREE_VERSION_3;
}

/// Cuts a file's data blob ids into [`ContentList`]s: a list ends after an id whose first
/// two bytes are 0 modulo [`LIST_AVG_IDS`], within [`LIST_MIN_IDS`] and [`LIST_MAX_IDS`].
pub fn list_boundaries(ids: &[Id]) -> Vec<std::ops::Range<usize>> {
    cut_ids(ids, |id, len| {
        (first_u16(id).is_multiple_of(LIST_AVG_IDS) && len >= LIST_MIN_IDS) || len >= LIST_MAX_IDS
    })
}

/// Cuts `ids` into runs, each ending after the id for which `ends(id, ids in the run so
/// far)` holds (and at the end).
fn cut_ids(ids: &[Id], ends: impl Fn(&Id, usize) -> bool) -> Vec<std::ops::Range<usize>> {
    let mut out = Vec::new();
    let mut start = 0;
    for (i, id) in ids.iter().enumerate() {
        if ends(id, i + 1 - start) {
            out.push(start..i + 1);
            start = i + 1;
        }
    }
    if start < ids.len() {
        out.push(start..ids.len());
    }
    out
}

/// An id's first two bytes, little endian: where content-defined cuts look.
fn first_u16(id: &Id) -> u16 {
    u16::from_le_bytes([id.0[0], id.0[1]])
}

/// A chunk-tree node holds at least this many ids (chunks in a leaf, children in an inner
/// node) before it may end ...
pub const NODE_MIN_IDS: usize = 8;
/// ... and always ends at this many: a leaf is at most 6 KiB of chunk references, an
/// inner node at most 3 KiB of ids.
pub const NODE_MAX_IDS: usize = 96;

/// Cuts a level of a folder's chunk tree (the chunks' `entries` ids for the leaves, then
/// each level's node ids) into nodes. A node ends after an id whose first two bytes
/// (little endian) are 0 modulo 128 while it holds fewer than 32 ids, modulo 16 up to 64,
/// modulo 4 from then on, and always at [`NODE_MAX_IDS`]; never below [`NODE_MIN_IDS`].
/// The odds of an end grow with the node, as FastCDC's normalized chunking and Dolt's
/// prolly trees have them: nodes of ~45 ids, seldom many more, so that a changed chunk
/// rewrites a node of a few KB, never the 64 KB of a 1,024-id list (one new message in a
/// large folder was up to 19 KB of new tree blobs with [`list_boundaries`]' geometric
/// sizes). Every end depends only on the ids since the last one, so an edit changes the
/// nodes around it and the nodes after it are cut as before.
pub fn node_boundaries(ids: &[Id]) -> Vec<std::ops::Range<usize>> {
    cut_ids(ids, |id, len| {
        let modulo = match len {
            ..32 => 128,
            32..64 => 16,
            _ => 4,
        };
        (first_u16(id).is_multiple_of(modulo) && len >= NODE_MIN_IDS) || len >= NODE_MAX_IDS
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Chunk-tree nodes hold ~45 ids, none over the maximum and few at it (an end forced
    /// by the maximum is not content-defined); the cuts after an inserted id are the
    /// cuts before it.
    #[test]
    fn chunk_tree_nodes_are_cut_near_their_average() {
        let ids: Vec<Id> = (0..200_000u32)
            .map(|i| Id::of_file(&i.to_le_bytes()))
            .collect();
        let cuts = node_boundaries(&ids);
        let lens: Vec<usize> = cuts.iter().map(|r| r.len()).collect();
        let avg = ids.len() as f64 / cuts.len() as f64;
        assert!((35.0..55.0).contains(&avg), "{avg} ids a node");
        assert!(lens.iter().all(|&n| n <= NODE_MAX_IDS));
        let at_max = lens.iter().filter(|&&n| n == NODE_MAX_IDS).count();
        assert!(
            at_max * 1000 < cuts.len(),
            "{at_max} of {} nodes at the maximum",
            cuts.len()
        );
        let mut more = ids.clone();
        more.insert(100_000, Id::of_file(b"new"));
        let ends = |c: &[std::ops::Range<usize>], from: usize| -> Vec<usize> {
            c.iter().map(|r| r.end).filter(|&e| e > from).collect()
        };
        let (before, after) = (ends(&cuts, 100_200), ends(&node_boundaries(&more), 100_201));
        assert_eq!(before.iter().map(|e| e + 1).collect::<Vec<_>>(), after);
    }

    /// A version-2 or -3 folder holding `file`.
    fn old_folder<F>(file: F) -> old::FolderNode<F> {
        old::FolderNode {
            name: "INBOX".into(),
            dir: Vec::new(),
            files: vec![file],
            chunks: Vec::new(),
            messages: 0,
            bytes: 0,
            dirs: Vec::new(),
        }
    }

    /// Encodes a one-folder account tree of an old version, and decodes it as today's.
    fn decode_old_folder<N: Serialize>(version: u8, folder: N) -> AccountTree {
        let old = old::AccountTree {
            folders: vec![folder],
        };
        let mut blob = vec![version];
        blob.extend(postcard::to_allocvec(&old).unwrap());
        let t: AccountTree = decode(&blob, "t").unwrap();
        assert_eq!(encode(&t)[0], TREE_VERSION_7);
        assert_eq!(decode::<AccountTree>(&encode(&t), "t").unwrap(), t);
        t
    }

    /// A version-5 account tree (before chunk trees) decodes as today's, its folders
    /// holding their chunks themselves; and a reader of version 5 would refuse today's
    /// blob by its version byte rather than read a large folder as empty.
    #[test]
    fn version_5_folders_decode_without_a_chunk_tree() {
        let chunk = ChunkRef {
            entries: Id([1; 32]),
            names: Id([2; 32]),
        };
        let mtime = Some(Timestamp { secs: 5, nanos: 6 });
        let v5 = old::FolderNodeV5 {
            node: old::FolderNode {
                name: "INBOX".into(),
                dir: Vec::new(),
                files: vec![FileEntry {
                    name: b"dovecot-uidlist".to_vec(),
                    dev: 7,
                    nlink: 1,
                    ..Default::default()
                }],
                chunks: vec![chunk],
                messages: 3,
                bytes: 300,
                dirs: Vec::new(),
            },
            mtime,
        };
        let t = decode_old_folder(TREE_VERSION_5, v5);
        let f = &t.folders[0];
        assert_eq!(
            (&f.chunks, f.chunk_tree, f.mtime),
            (&vec![chunk], None, mtime)
        );
        assert_eq!((f.messages, f.files[0].dev), (3, 7));
        assert_eq!(encode(&t)[0], 7);
    }

    /// A version-6 account tree (before homes) decodes with no home; today's keeps its
    /// home's nodes, and a reader of version 6 would refuse it by its version byte rather
    /// than drop the home.
    #[test]
    fn version_6_account_trees_decode_without_a_home() {
        let folder = FolderNode {
            name: "INBOX".into(),
            dir: Vec::new(),
            files: Vec::new(),
            chunks: Vec::new(),
            messages: 0,
            bytes: 0,
            dirs: Vec::new(),
            mtime: None,
            scan: None,
            chunk_tree: None,
        };
        let t = decode_old_folder(TREE_VERSION_6, folder.clone());
        assert_eq!((t.folders.len(), t.home.len()), (1, 0));
        let sieve = FolderNode {
            name: "sieve".into(),
            dir: b"sieve".to_vec(),
            files: vec![FileEntry {
                name: b"vacation.sieve".to_vec(),
                ..Default::default()
            }],
            ..folder.clone()
        };
        let t = AccountTree {
            folders: vec![folder],
            home: vec![sieve],
        };
        let blob = encode(&t);
        assert_eq!(blob[0], TREE_VERSION_7);
        assert_eq!(decode::<AccountTree>(&blob, "t").unwrap(), t);
    }

    /// A version-2 root tree (before store files) decodes with none; today's keeps them,
    /// and a reader of version 2 would refuse it by its version byte.
    #[test]
    fn version_2_root_trees_decode_without_store_files() {
        let acc = AccountRef {
            name: "bob@example.org".into(),
            rel_path: b"example.org/bob/Maildir".to_vec(),
            tree: Id([7; 32]),
            messages: 3,
            bytes: 30,
            dirs: Vec::new(),
        };
        let owners = OwnerNames {
            users: vec![(1000, "vmail".into())],
            groups: Vec::new(),
        };
        let old = old::RootTreeV2 {
            accounts: vec![acc.clone()],
            owners: owners.clone(),
        };
        let mut blob = vec![TREE_VERSION_2];
        blob.extend(postcard::to_allocvec(&old).unwrap());
        let t = decode::<RootTree>(&blob, "t").unwrap();
        assert_eq!(
            (t.accounts, t.owners, t.store),
            (vec![acc.clone()], owners.clone(), None)
        );
        let t = RootTree {
            accounts: vec![acc],
            owners,
            store: Some(Id([9; 32])),
        };
        let blob = encode(&t);
        assert_eq!(blob[0], TREE_VERSION_3);
        assert_eq!(decode::<RootTree>(&blob, "t").unwrap(), t);
    }

    /// As [`decode_old_folder`], of a version-2 or -3 folder holding `file`: it has no
    /// mtime, and the file no device or link count.
    fn decode_old_tree<F: Serialize>(version: u8, file: F) -> AccountTree {
        let t = decode_old_folder(version, old_folder(file));
        assert_eq!(t.folders[0].mtime, None);
        let f = &t.folders[0].files[0];
        assert_eq!((f.dev, f.nlink), (0, 0));
        t
    }

    fn file_v2() -> old::FileV2 {
        old::FileV2 {
            name: b"names.nsf".to_vec(),
            size: 3,
            mtime: Timestamp { secs: 5, nanos: 6 },
            mode: 0o600,
            uid: 8,
            gid: 9,
            content: vec![Id([4; 32])],
        }
    }

    /// An account tree written before content lists and inodes (version 2) still
    /// decodes: its files with no lists and inode 0.
    #[test]
    fn version_2_account_trees_still_decode() {
        let t = decode_old_tree(TREE_VERSION_2, file_v2());
        let f = &t.folders[0].files[0];
        assert_eq!((f.size, f.uid, f.gid, f.mode), (3, 8, 9, 0o600));
        assert_eq!(
            (f.content.clone(), f.lists.clone(), f.inode, f.link.clone()),
            (vec![Id([4; 32])], vec![], 0, None)
        );
    }

    /// An account tree written before directory mtimes and links (version 3, as the
    /// first `file:` backups wrote them) still decodes, lists and inodes kept. The file
    /// is encoded as version 3 declared it, flat, so that a nested `FileV3` that changed
    /// the wire would fail here.
    #[test]
    fn version_3_account_trees_still_decode() {
        #[derive(Serialize)]
        struct FlatV3 {
            name: Vec<u8>,
            size: u64,
            mtime: Timestamp,
            mode: u32,
            uid: u32,
            gid: u32,
            content: Vec<Id>,
            lists: Vec<Id>,
            inode: u64,
        }
        let v2 = file_v2();
        let flat = FlatV3 {
            name: v2.name,
            size: 1 << 30,
            mtime: v2.mtime,
            mode: 0o640,
            uid: v2.uid,
            gid: v2.gid,
            content: Vec::new(),
            lists: vec![Id([3; 32]), Id([4; 32])],
            inode: 77,
        };
        let t = decode_old_tree(TREE_VERSION_3, flat);
        let f = &t.folders[0].files[0];
        assert_eq!(
            (f.size, f.uid, f.gid, f.mode, f.inode),
            (1 << 30, 8, 9, 0o640, 77)
        );
        assert_eq!(f.lists, vec![Id([3; 32]), Id([4; 32])]);
        assert_eq!(f.link, None);
    }

    /// An account tree written before devices and link counts (version 4: folder mtimes
    /// and symbolic links) still decodes, mtime and link kept, device and link count 0
    /// (not recorded: no file is taken for a hard link). The tree is encoded as version
    /// 4 declared it, flat, and must be what the nested old forms encode.
    #[test]
    fn version_4_account_trees_still_decode() {
        #[derive(Serialize)]
        struct FlatFileV4 {
            name: Vec<u8>,
            size: u64,
            mtime: Timestamp,
            mode: u32,
            uid: u32,
            gid: u32,
            content: Vec<Id>,
            lists: Vec<Id>,
            inode: u64,
            link: Option<Vec<u8>>,
        }
        #[derive(Serialize)]
        struct FlatFolderV4 {
            name: String,
            dir: Vec<u8>,
            files: Vec<FlatFileV4>,
            chunks: Vec<ChunkRef>,
            messages: u64,
            bytes: u64,
            dirs: Vec<DirEntry>,
            mtime: Option<Timestamp>,
        }
        let mtime = Timestamp { secs: 5, nanos: 6 };
        let dir_mtime = Some(Timestamp { secs: 7, nanos: 8 });
        let dirs = vec![DirEntry {
            name: Vec::new(),
            mode: 0o750,
            uid: 8,
            gid: 9,
        }];
        let flat = FlatFolderV4 {
            name: "data".into(),
            dir: b"data".to_vec(),
            files: vec![
                FlatFileV4 {
                    name: b"names.nsf".to_vec(),
                    size: 3,
                    mtime,
                    mode: 0o640,
                    uid: 8,
                    gid: 9,
                    content: vec![Id([4; 32])],
                    lists: Vec::new(),
                    inode: 77,
                    link: None,
                },
                FlatFileV4 {
                    name: b"current".to_vec(),
                    size: 0,
                    mtime,
                    mode: 0o777,
                    uid: 8,
                    gid: 9,
                    content: Vec::new(),
                    lists: Vec::new(),
                    inode: 78,
                    link: Some(b"names.nsf".to_vec()),
                },
            ],
            chunks: Vec::new(),
            messages: 0,
            bytes: 0,
            dirs: dirs.clone(),
            mtime: dir_mtime,
        };
        let nested = old::FolderNodeV4 {
            node: old::FolderNode {
                name: "data".into(),
                dir: b"data".to_vec(),
                files: (flat.files.iter())
                    .map(|f| old::FileV4 {
                        v3: old::FileV3 {
                            v2: old::FileV2 {
                                name: f.name.clone(),
                                size: f.size,
                                mtime: f.mtime,
                                mode: f.mode,
                                uid: f.uid,
                                gid: f.gid,
                                content: f.content.clone(),
                            },
                            lists: f.lists.clone(),
                            inode: f.inode,
                        },
                        link: f.link.clone(),
                    })
                    .collect(),
                chunks: Vec::new(),
                messages: 0,
                bytes: 0,
                dirs: dirs.clone(),
            },
            mtime: dir_mtime,
        };
        assert_eq!(
            postcard::to_allocvec(&flat).unwrap(),
            postcard::to_allocvec(&nested).unwrap()
        );
        let t = decode_old_folder(TREE_VERSION_4, flat);
        let file = |name: &[u8], mode, inode, content, link: Option<Vec<u8>>| FileEntry {
            name: name.to_vec(),
            size: if link.is_some() { 0 } else { 3 },
            mtime,
            mode,
            uid: 8,
            gid: 9,
            content,
            lists: Vec::new(),
            inode,
            link,
            dev: 0,
            nlink: 0,
        };
        let want = AccountTree {
            folders: vec![FolderNode {
                name: "data".into(),
                dir: b"data".to_vec(),
                files: vec![
                    file(b"names.nsf", 0o640, 77, vec![Id([4; 32])], None),
                    file(b"current", 0o777, 78, vec![], Some(b"names.nsf".to_vec())),
                ],
                chunks: Vec::new(),
                messages: 0,
                bytes: 0,
                dirs,
                mtime: dir_mtime,
                scan: None,
                chunk_tree: None,
            }],
            home: Vec::new(),
        };
        assert_eq!(t, want);
    }

    /// An account tree written before folder scans (version 5) still decodes, with no
    /// scan (the next backup lists every folder); today's trees keep theirs.
    #[test]
    fn version_5_account_trees_still_decode() {
        let file = FileEntry {
            name: b"dovecot-uidlist".to_vec(),
            size: 3,
            mtime: Timestamp { secs: 5, nanos: 6 },
            inode: 7,
            dev: 8,
            nlink: 1,
            ..FileEntry::default()
        };
        let node = old_folder(file.clone());
        let mtime = Some(Timestamp { secs: 9, nanos: 1 });
        let t = decode_old_folder(TREE_VERSION_5, old::FolderNodeV5 { node, mtime });
        let f = &t.folders[0];
        assert_eq!(
            (f.files.clone(), f.mtime, f.scan.clone()),
            (vec![file], mtime, None)
        );
        let mut with_scan = t.clone();
        with_scan.folders[0].scan = Some(FolderScan {
            dirs: vec![DirStamp {
                name: b"cur".to_vec(),
                dev: 1,
                inode: 2,
                mtime: Timestamp { secs: 3, nanos: 4 },
                ctime: Timestamp { secs: 5, nanos: 6 },
            }],
            uids: vec![8],
            gids: vec![9],
        });
        let back: AccountTree = decode(&encode(&with_scan), "t").unwrap();
        assert_eq!(back, with_scan);
    }

    fn entry(key: &str) -> MessageEntry {
        MessageEntry {
            key: key.as_bytes().to_vec(),
            name: format!("{key}:2,S").into_bytes(),
            new: false,
            size: 1,
            mtime: Timestamp::default(),
            mode: 0,
            uid: 0,
            gid: 0,
            hash: Id::default(),
            content: vec![],
            from: String::new(),
            subject: String::new(),
            date: None,
        }
    }

    #[test]
    fn chunk_boundaries_are_local() {
        let mut es: Vec<MessageEntry> = (0..2000)
            .map(|i| entry(&format!("{i:06}.M1P1.host")))
            .collect();
        let a = chunk_boundaries(&es);
        assert!(a.len() > 20 && a.len() < 200, "{} chunks", a.len());
        assert!(a.iter().all(|r| r.len() <= CHUNK_MAX_ENTRIES));
        assert_eq!(a.iter().map(|r| r.len()).sum::<usize>(), 2000);
        // Removing one entry changes at most two chunks' key sets.
        let keys = |es: &[MessageEntry],
                    rs: &[std::ops::Range<usize>]|
         -> std::collections::HashSet<Vec<Vec<u8>>> {
            rs.iter()
                .map(|r| es[r.clone()].iter().map(|e| e.key.clone()).collect())
                .collect()
        };
        let before = keys(&es, &a);
        es.remove(1000);
        let b = chunk_boundaries(&es);
        let after = keys(&es, &b);
        assert!(after.difference(&before).count() <= 2);
    }

    #[test]
    fn round_trip_and_golden_prefix() {
        let e = MessageEntry {
            key: b"1.M1P1.h".to_vec(),
            name: b"1.M1P1.h:2,S".to_vec(),
            new: false,
            size: 5,
            mtime: Timestamp { secs: 1, nanos: 2 },
            mode: 0o600,
            uid: 8,
            gid: 8,
            hash: Id([1; 32]),
            content: vec![Id([2; 32])],
            from: "a".into(),
            subject: "s".into(),
            date: Some(3),
        };
        let (stored, name) = e.clone().into_parts();
        assert_eq!(name.info, b":2,S");
        assert_eq!(MessageEntry::from_parts(stored.clone(), name.clone()), e);
        let c = MessageChunk {
            entries: vec![stored],
        };
        let enc = encode(&c);
        assert_eq!(enc[0], 1);
        assert_eq!(enc[1], 1, "postcard varint length of the entries vec");
        assert_eq!(decode::<MessageChunk>(&enc, "t").unwrap(), c);
        let n = NameChunk { names: vec![name] };
        assert_eq!(encode(&n), b"\x01\x01\x00\x04:2,S");
        assert_eq!(e.flags(), b"S");
        assert!(decode::<MessageChunk>(&enc[..enc.len() - 3], "t").is_err());
        // Root trees are version 3; a chunk's version byte is not theirs.
        assert_eq!(encode(&RootTree::default()), [3, 0, 0, 0, 0]);
        // Version-1 root and account trees still decode.
        assert_eq!(
            decode::<RootTree>(&[1, 0], "t").unwrap(),
            RootTree::default()
        );
        assert_eq!(
            decode::<AccountTree>(&[1, 0], "t").unwrap(),
            AccountTree::default()
        );
        assert!(decode::<RootTree>(&[3, 0], "t").is_err());
        assert!(decode::<AccountTree>(&[TREE_VERSION_7 + 1, 0], "t").is_err());
        assert!(decode::<MessageChunk>(&[], "t").is_err());
    }
}
