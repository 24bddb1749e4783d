//! The pipeline's side of [`Source::backup_folder`](super::Source::backup_folder): where a
//! source puts one folder's backup ([`FolderWriter`]), over the state a backup run shares
//! between its workers (`Ctx`: the `BlobSaver`, counters, failures, owners). Entries
//! kept from the parent, new messages and folder files go through here into the write
//! side ([`crate::repo::writer`]); [`crate::ops::backup::run`] drives it.

use super::{Failures, FileData, FileMeta, Folder, FolderFile, MessageId, MessageMeta, NewMessage};
use crate::error::{Error, Result};
use crate::mail::summary::header_summary;
use crate::repo::lock;
use crate::repo::tree::{
    DirEntry, FileEntry, FolderNode, FolderScan, MessageEntry, OwnerNames, Timestamp,
};
use crate::repo::writer::content::{
    save_entries, store_content, store_content_new, store_large, EntryStream, NewContents,
    SavedChunks, StoredLarge,
};
use crate::repo::writer::BlobSaver;
use crate::report::Progress;
use crate::source::parent::{KeyLookup, ParentAccount};
use crate::source::walk::Dir;
use mailvault_imap::maildir_flags::{imap_to_maildir, KeywordTable};
use std::collections::BTreeSet;
use std::io::ErrorKind;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Mutex, OnceLock};

/// What a backup run of any source counts as it goes.
#[derive(Default)]
pub(crate) struct Counters {
    pub(crate) folders: AtomicU64,
    pub(crate) new: AtomicU64,
    pub(crate) unchanged: AtomicU64,
    pub(crate) bytes_read: AtomicU64,
    pub(crate) bytes_total: AtomicU64,
    /// Files of a `file:` backup (new or unchanged): items of the report like messages.
    pub(crate) files: AtomicU64,
    /// Names of a hard-linked file whose content was read under another name.
    pub(crate) linked: AtomicU64,
}

/// The state a backup run shares between its workers.
pub(crate) struct Ctx<'a> {
    pub(crate) saver: BlobSaver<'a>,
    pub(crate) failures: Failures,
    pub(crate) n: Counters,
    /// What the accounts' homes ([`super::Source::home`]) count: not items of the report
    /// (a Maildir backup's are messages), reported as home files of their own.
    pub(crate) home: Counters,
    pub(crate) progress: &'a dyn Progress,
    /// Every uid and gid recorded, for the snapshot's table of owner names.
    pub(crate) owners: Mutex<OwnerIds>,
    /// The snapshot's time (seconds): the mtime of folder files a source makes up.
    pub(crate) time: i64,
    /// The user running the backup, owner of what a source makes up.
    pub(crate) process_owner: OnceLock<(u32, u32)>,
    /// [`super::Source::state_file`].
    pub(crate) state_file: Option<&'static [u8]>,
    /// [`super::RunOptions::rescan`]: no folder's messages are kept without a listing.
    pub(crate) rescan: bool,
    /// The parent snapshot's [`crate::repo::snapshot::Snapshot::started`].
    pub(crate) parent_started: Option<Timestamp>,
    /// Given each message content new to the repository (`backup --index`).
    pub(crate) new_contents: Option<&'a dyn NewContents>,
}

impl Ctx<'_> {
    pub(crate) fn process_owner(&self) -> (u32, u32) {
        *self.process_owner.get_or_init(|| {
            use std::os::unix::fs::MetadataExt;
            std::fs::metadata("/proc/self")
                .map(|m| (m.uid(), m.gid()))
                .unwrap_or((0, 0))
        })
    }
}

/// The uids and gids seen by a backup.
#[derive(Default)]
pub(crate) struct OwnerIds {
    pub(crate) uids: BTreeSet<u32>,
    pub(crate) gids: BTreeSet<u32>,
}

impl OwnerIds {
    pub(crate) fn add(&mut self, uid: u32, gid: u32) {
        self.uids.insert(uid);
        self.gids.insert(gid);
    }
    /// The names this system gives those ids (ids without a name are left out).
    pub(crate) fn names(&self) -> OwnerNames {
        use nix::unistd::{Gid, Group, Uid, User};
        OwnerNames {
            users: (self.uids.iter())
                .filter_map(|&u| Some((u, User::from_uid(Uid::from_raw(u)).ok()??.name)))
                .collect(),
            groups: (self.gids.iter())
                .filter_map(|&g| Some((g, Group::from_gid(Gid::from_raw(g)).ok()??.name)))
                .collect(),
        }
    }
}

/// Where a folder's entries go.
pub(crate) enum Entries<'a> {
    /// Held until the folder ends, then sorted and saved ([`save_entries`]).
    Held(Vec<MessageEntry>),
    /// Saved in chunks as they come, in key order; the first error of a save, returned
    /// when the folder ends.
    Streamed(EntryStream<'a>, Option<Error>),
}

/// Where a source puts one folder's backup: the pipeline's side of
/// [`super::Source::backup_folder`], with its methods.
pub struct FolderWriter<'a> {
    pub(crate) ctx: &'a Ctx<'a>,
    /// Where the folder counts: the run's counters, or its homes' ([`Ctx::home`]).
    pub(crate) n: &'a Counters,
    pub(crate) account: &'a str,
    pub(crate) folder: &'a Folder,
    pub(crate) parent_account: &'a ParentAccount,
    /// The parent's folder of the same `dir`, and its index in `parent_account.folders`.
    pub(crate) parent: Option<&'a FolderNode>,
    pub(crate) parent_index: Option<usize>,
    /// The folder's entries: held, or saved as they come ([`Self::in_key_order`]).
    pub(crate) entries: Entries<'a>,
    /// The owners of the entries.
    pub(crate) owners: OwnerIds,
    pub(crate) files: Vec<FileEntry>,
    pub(crate) dirs: Vec<DirEntry>,
    /// The folder directory's mtime, when the source keeps it.
    pub(crate) mtime: Option<Timestamp>,
    /// Keyword letters of messages given by flags; written as `dovecot-keywords` when
    /// not empty.
    pub(crate) keywords: Mutex<mailvault_imap::maildir_flags::KeywordTable>,
    /// The folder's scan, recorded in its node unless something of it failed.
    pub(crate) scan: Option<FolderScan>,
    /// The parent's messages are kept, unlisted ([`Self::messages_kept`]).
    pub(crate) kept: bool,
    /// Something of the folder failed ([`Self::fail`]): no scan is recorded, so that the
    /// next backup lists the folder again.
    pub(crate) failed: AtomicBool,
}

/// The pipeline's side of [`super::Source::backup_folder`].
impl<'a> FolderWriter<'a> {
    /// The account being backed up.
    pub fn account(&self) -> &str {
        self.account
    }

    /// Records what of the folder was left out on purpose and is worth saying (the run's
    /// exit code does not change); see [`Failures::warn`].
    pub fn warn(&self, item: impl std::fmt::Display, why: impl std::fmt::Display) {
        self.ctx.failures.warn(item, why);
    }

    /// Records a failure of the folder (a message or file that could not be read; the
    /// folder goes on); see [`Failures::fail`].
    pub fn fail(&self, item: impl Into<String>, e: impl crate::report::Reason) {
        self.failed.store(true, Relaxed);
        self.ctx.failures.fail(item, e);
    }

    /// Whether the folder's messages are the parent's, proven unchanged without a listing
    /// ([`super::unchanged`]): the pipeline keeps them, and the source backs up only the
    /// folder's files and directories.
    pub fn messages_kept(&self) -> bool {
        self.kept
    }

    /// When the parent's backup started, by this host's clock
    /// ([`crate::repo::snapshot::Snapshot::started`]): what the times it recorded are
    /// compared with ([`super::unchanged`]). `None` for an older parent, or none.
    pub fn parent_started(&self) -> Option<Timestamp> {
        self.ctx.parent_started
    }

    /// Keeps the parent folder's messages, by its chunk ids, unread: counted as unchanged.
    pub(crate) fn keep_parent_messages(&mut self) {
        let Some(p) = self.parent else { return };
        self.kept = true;
        self.n.unchanged.fetch_add(p.messages, Relaxed);
        self.ctx.progress.add_total(p.messages, 0);
        self.ctx.progress.advance(p.messages, p.bytes);
    }

    /// `n` messages more to read (progress).
    pub fn expect(&self, n: u64) {
        self.ctx.progress.add_total(n, 0);
    }

    /// A message expected and not stored (gone meanwhile, or failed): progress only.
    pub fn skipped(&self) {
        self.ctx.progress.advance(1, 0);
    }

    /// `n` bytes read from the source besides what [`NewMessage::read`] and
    /// [`FileData::Path`] count (an mbox's bytes between messages, a scan).
    pub fn count_read(&self, n: u64) {
        self.n.bytes_read.fetch_add(n, Relaxed);
    }

    /// The parent snapshot's folder of the same `dir` (or name), if any.
    pub fn parent(&self) -> Option<&'a FolderNode> {
        self.parent
    }

    /// The parent snapshot's messages by Maildir key, in any folder of the account that
    /// is listed (a Maildir message moved between folders keeps its key), this folder's
    /// first. The account's keys are read on the first call.
    pub fn parent_keys(&self) -> KeyLookup<'a> {
        let pa = self.parent_account;
        let repo = self.ctx.saver.repo();
        // The only folder of the account listed: its own chunks, walked (super::parent).
        if let Some(i) = self.parent_index.filter(|&i| pa.only_listed(i)) {
            if let Ok(chunks) = repo.folder_chunks(&pa.folders[i]) {
                return KeyLookup::Walk(repo, super::parent::Walk::new(chunks));
            }
        }
        let keys = pa.load_keys(repo, &self.ctx.failures, self.account);
        KeyLookup::new(repo, keys, self.parent_index)
    }

    /// From now on, this folder's messages come in key order (`(key, name)`, as
    /// [`save_entries`] sorts them), and are saved in chunks as they come: a folder of any
    /// size holds one chunk's entries. Before the first message only; an entry out of
    /// order fails the folder.
    pub fn in_key_order(&mut self) {
        if matches!(&self.entries, Entries::Held(v) if v.is_empty()) {
            self.entries = Entries::Streamed(EntryStream::new(&self.ctx.saver), None);
        }
    }

    /// Adds an entry to the folder's.
    fn push(&mut self, e: MessageEntry) {
        self.owners.add(e.uid, e.gid);
        match &mut self.entries {
            Entries::Held(v) => v.push(e),
            Entries::Streamed(s, err @ None) => {
                if let Err(e) = s.push(e) {
                    *err = Some(e);
                }
            }
            Entries::Streamed(_, Some(_)) => {}
        }
    }

    /// The parent folder's entries ([`parent`](Self::parent)); none without one.
    pub fn parent_entries(&self) -> Result<Vec<MessageEntry>> {
        let mut out = Vec::new();
        let repo = self.ctx.saver.repo();
        if let Some(p) = self.parent {
            for c in &repo.folder_chunks(p)? {
                out.extend(repo.read_chunk(c)?);
            }
        }
        Ok(out)
    }

    /// The parent folder's file `name`.
    pub fn parent_file(&self, name: &[u8]) -> Option<&'a FileEntry> {
        self.parent?.files.iter().find(|f| f.name == name)
    }

    /// The content of the parent folder's file `name` (`None` if it cannot be read).
    pub fn parent_file_data(&self, name: &[u8]) -> Option<Vec<u8>> {
        let f = self.parent_file(name)?;
        crate::model::assemble::assemble_file(self.ctx.saver.repo(), f).ok()
    }

    /// The sync state the source kept in the parent folder ([`super::Source::state_file`]).
    pub fn parent_state(&self) -> Option<Vec<u8>> {
        self.parent_file_data(self.ctx.state_file?)
    }

    /// Keeps this folder's sync state, read back by the next backup's
    /// [`parent_state`](Self::parent_state).
    pub fn set_state(&mut self, data: Vec<u8>) -> Result<()> {
        let Some(name) = self.ctx.state_file else {
            return Err(Error::Internal(
                "a source without a state file kept a sync state".into(),
            ));
        };
        self.file(FolderFile {
            name: name.to_vec(),
            data: FileData::Bytes(data),
            meta: None,
        })
    }

    /// Starts the folder's keyword letters from the parent's `dovecot-keywords`, so that
    /// the names of the parent's entries keep their meaning (call it when entries of the
    /// parent are kept).
    pub fn resume_keywords(&mut self) {
        if let Some(d) = self.parent_file_data(b"dovecot-keywords") {
            *lock(&self.keywords) = KeywordTable::parse(&String::from_utf8_lossy(&d));
        }
    }

    /// The Maildir name of a message with key `key` and IMAP `flags`: `key:2,` and the
    /// letters (keywords get theirs from the folder's table, new ones added in call
    /// order). Flags without a letter are dropped, with a warning.
    pub fn maildir_name(&self, key: &[u8], flags: &[&str]) -> Vec<u8> {
        let mapped = imap_to_maildir(flags, &mut lock(&self.keywords));
        if !mapped.unmapped.is_empty() {
            tracing::warn!(
                "{}: {}: {}: flags without a Maildir letter dropped: {:?}",
                self.account,
                self.folder.name,
                String::from_utf8_lossy(key),
                mapped.unmapped
            );
        }
        [key, b":2,", mapped.letters.as_bytes()].concat()
    }

    /// Keeps a message the parent has (its entry, renamed or moved as it is now)
    /// without reading it.
    pub fn unchanged(&mut self, e: MessageEntry) {
        self.n.unchanged.fetch_add(1, Relaxed);
        self.ctx.progress.advance(1, e.size);
        self.push(e);
    }

    /// Stores a new message's content and makes its entry, for [`add`](Self::add); may be
    /// called from several threads at once (messages read in parallel).
    pub fn store(&self, msg: NewMessage<'_>) -> Result<MessageEntry> {
        let ctx = self.ctx;
        let data = msg.data;
        self.n.bytes_read.fetch_add(msg.read, Relaxed);
        self.n.new.fetch_add(1, Relaxed);
        let (content, new_content) = store_content_new(&ctx.saver, data)?;
        // A message stored as one blob is hashed once: its blob's id is the keyed hash of
        // all of it (blake3 was a quarter of a full backup's CPU, half of it this twice).
        let hash = match content[..] {
            [whole] => whole,
            _ => ctx.saver.repo().key().blob_id(data),
        };
        if let (Some(sink), true) = (ctx.new_contents, new_content) {
            sink.add(&hash, data);
        }
        let size = data.len() as u64;
        let (key, name, new, mtime, (mode, uid, gid)) = match msg.meta {
            MessageMeta::Maildir { name, new, file } => (
                crate::mail::maildir::split_name(&name).0.to_vec(),
                name,
                new,
                file.mtime,
                (file.mode, file.uid, file.gid),
            ),
            MessageMeta::Flags {
                flags,
                internal_date,
                id,
            } => {
                let key = match id {
                    MessageId::Uid { uid, validity } => crate::imap::names::synth_key(
                        &self.folder.name,
                        internal_date,
                        uid,
                        validity,
                        size,
                    )
                    .into_bytes(),
                    MessageId::Key(k) => k,
                };
                let name = self.maildir_name(&key, flags);
                let (u, g) = ctx.process_owner();
                let mtime = Timestamp {
                    secs: internal_date,
                    nanos: 0,
                };
                (key, name, false, mtime, (0o600, u, g))
            }
        };
        let (from, subject, date) = header_summary(data);
        Ok(MessageEntry {
            key,
            name,
            new,
            size,
            mtime,
            mode,
            uid,
            gid,
            hash,
            content,
            from,
            subject,
            date,
        })
    }

    /// Adds a message stored by [`store`](Self::store).
    pub fn add(&mut self, e: MessageEntry) {
        self.ctx.progress.advance(1, e.size);
        self.push(e);
    }

    /// Stores a new message and adds it: [`store`](Self::store) then [`add`](Self::add).
    pub fn message(&mut self, msg: NewMessage<'_>) -> Result<()> {
        let e = self.store(msg)?;
        self.add(e);
        Ok(())
    }

    /// Stores a folder file. One given by path is read whole (a file gone by then is left
    /// out; one that cannot be read is reported and left out); a large one in windows
    /// ([`FileData::Large`]).
    pub fn file(&mut self, f: FolderFile) -> Result<()> {
        if let Some(e) = self.store_file(f)? {
            self.files.push(e);
        }
        Ok(())
    }

    /// Stores a folder file and makes its entry, for [`keep_file`](Self::keep_file); may
    /// be called from several threads at once. `None`: gone, or reported as failed. A
    /// [`FileData::Large`] file counts as an item of the report (a `file:` backup's).
    pub fn store_file(&self, f: FolderFile) -> Result<Option<FileEntry>> {
        let ctx = self.ctx;
        let skip = |path: &std::path::Path, e: std::io::Error| {
            if e.kind() != ErrorKind::NotFound {
                self.fail(path.display().to_string(), e);
            }
            Ok(None)
        };
        let mut link = None;
        let mut meta = f.meta;
        let (size, content, lists) = match f.data {
            FileData::Bytes(b) => (b.len() as u64, store_content(&ctx.saver, &b)?, Vec::new()),
            FileData::Link(target) => {
                link = Some(target);
                self.n.new.fetch_add(1, Relaxed);
                self.n.files.fetch_add(1, Relaxed);
                ctx.progress.advance(1, 0);
                (0, Vec::new(), Vec::new())
            }
            FileData::Path(path) => match std::fs::read(&path) {
                Ok(d) => {
                    self.n.bytes_read.fetch_add(d.len() as u64, Relaxed);
                    (d.len() as u64, store_content(&ctx.saver, &d)?, Vec::new())
                }
                Err(e) => return skip(&path, e),
            },
            FileData::Large { dir, name } => {
                let path = dir.join(&name);
                let read = match self.read_large(&dir, &name, &path) {
                    Ok(r) => r,
                    // The repository's own errors end the folder; the file's are its own.
                    Err(Error::Io { path: p, source }) if p == path => return skip(&path, source),
                    Err(e) => return Err(e),
                };
                let (stored, at) = match read {
                    LargeRead::Read(stored, at) => (stored, at),
                    LargeRead::Torn(stored, at) => {
                        // Kept as the parent has it, if it does: a version read whole.
                        let parent = (self.parent_file(&f.name)).filter(|p| p.link.is_none());
                        if let Some(p) = parent {
                            self.fail(
                                path.display().to_string(),
                                format!(
                                    "{CHANGED_WHILE_READ}; the previous snapshot's version is kept"
                                ),
                            );
                            self.n.files.fetch_add(1, Relaxed);
                            self.n.bytes_total.fetch_add(p.size, Relaxed);
                            ctx.progress.advance(1, p.size);
                            return Ok(Some(p.clone()));
                        }
                        self.fail(path.display().to_string(), format!("{CHANGED_WHILE_READ}; stored as read (it may not be consistent), read again by the next backup"));
                        (stored, at)
                    }
                };
                // The file's `stat` as it was when read.
                if let Some(m) = meta.as_mut() {
                    (m.size, m.mtime, m.inode) = (at.size, at.mtime, at.inode);
                }
                self.n.new.fetch_add(1, Relaxed);
                self.n.files.fetch_add(1, Relaxed);
                self.n.bytes_total.fetch_add(stored.size, Relaxed);
                ctx.progress.advance(1, stored.size);
                (stored.size, stored.content, stored.lists)
            }
        };
        let (mtime, mode, uid, gid, (inode, dev, nlink)) = match meta {
            Some(m) => (m.mtime, m.mode, m.uid, m.gid, (m.inode, m.dev, m.nlink)),
            None => {
                let (u, g) = ctx.process_owner();
                let mtime = Timestamp {
                    secs: ctx.time,
                    nanos: 0,
                };
                (mtime, 0o600, u, g, (0, 0, 0))
            }
        };
        Ok(Some(FileEntry {
            name: f.name,
            size,
            mtime,
            mode,
            uid,
            gid,
            content,
            lists,
            inode,
            link,
            dev,
            nlink,
        }))
    }

    /// Reads and stores a large file, checking that it did not change while it was read
    /// (as restic and borg do): its size, mtime and ctime on the open file before and
    /// after, and the path's `stat` after (the same file, the same times). One that
    /// changed is read again once; changed again, it is [`LargeRead::Torn`].
    fn read_large(&self, dir: &Dir, name: &[u8], path: &Path) -> Result<LargeRead> {
        let ctx = self.ctx;
        let mut attempt = 0;
        loop {
            attempt += 1;
            let (file, before) = dir.open_file(name).map_err(|e| Error::io(path, e))?;
            let reader = crate::source::walk::Reading::new(&file, path);
            let stored = store_large(&ctx.saver, reader, path, &self.n.bytes_read)?;
            let after = rustix::fs::fstat(&file).map_err(|e| Error::io(path, e.into()))?;
            let now = dir.stat(name).map_err(|e| Error::io(path, e))?;
            let at = FileMeta::of_stat(&before);
            let same = crate::source::walk::same_file_state;
            if same(&before, &after) && same(&before, &now) && stored.size == at.size {
                return Ok(LargeRead::Read(stored, at));
            }
            if attempt == 2 {
                return Ok(LargeRead::Torn(stored, at));
            }
        }
    }

    /// Keeps a file of a `file:` backup the parent has (same size, mtime and inode)
    /// without reading it, counted as an unchanged item.
    pub fn unchanged_file(&mut self, e: FileEntry) {
        self.count_file(&self.n.unchanged, e);
    }

    /// Keeps a file stored with [`store_file`](Self::store_file) as a new item (a home's
    /// script a server gave).
    pub fn new_file(&mut self, e: FileEntry) {
        self.count_file(&self.n.new, e);
    }

    /// Keeps a file of a `file:` backup not read, counted as an item and in `as_`.
    fn count_file(&mut self, as_: &AtomicU64, e: FileEntry) {
        as_.fetch_add(1, Relaxed);
        self.n.files.fetch_add(1, Relaxed);
        self.n.bytes_total.fetch_add(e.size, Relaxed);
        self.ctx.progress.advance(1, e.size);
        self.files.push(e);
    }

    /// Keeps another name of a hard-linked file this run read under a first name (its
    /// entry, with this name), counted as an item neither new nor unchanged: linked.
    pub fn linked_file(&mut self, e: FileEntry) {
        self.count_file(&self.n.linked, e);
    }

    /// Keeps a folder file the parent has, unchanged (with its owner and mode as they
    /// are now).
    pub fn keep_file(&mut self, e: FileEntry) {
        self.files.push(e);
    }

    /// Records the folder directory's mtime (a `file:` backup's directories: restored
    /// once their content is in).
    pub fn dir_mtime(&mut self, mtime: Timestamp) {
        self.mtime = Some(mtime);
    }

    /// Records a directory of the folder (its owner and mode; `name` empty for the folder
    /// itself).
    pub fn dir(&mut self, d: DirEntry) {
        self.dirs.push(d);
    }

    /// Ends the folder: the generated files, the entries cut into tree chunks, its node.
    pub(crate) fn finish(mut self, subscriptions: Option<&[String]>) -> Result<FolderNode> {
        let ctx = self.ctx;
        let kw = lock(&self.keywords).to_file_string();
        if !kw.is_empty() {
            self.file(FolderFile {
                name: b"dovecot-keywords".to_vec(),
                data: FileData::Bytes(kw.into_bytes()),
                meta: None,
            })?;
        }
        if let Some(subs) = subscriptions {
            self.file(FolderFile {
                name: b"subscriptions".to_vec(),
                data: FileData::Bytes(crate::imap::names::subscriptions_file(subs)),
                meta: None,
            })?;
        }
        let mut owners = std::mem::take(&mut self.owners);
        let kept = self.parent.filter(|_| self.kept);
        if let Some(s) = kept.and_then(|p| p.scan.as_ref()) {
            owners.uids.extend(&s.uids);
            owners.gids.extend(&s.gids);
        }
        let scan = (self.scan.take())
            .filter(|_| !self.failed.load(Relaxed))
            .map(|s| FolderScan {
                uids: owners.uids.iter().copied().collect(),
                gids: owners.gids.iter().copied().collect(),
                ..s
            });
        let (saved, messages, bytes) = match kept {
            Some(p) => {
                let (chunks, chunk_tree) = (p.chunks.clone(), p.chunk_tree);
                (SavedChunks { chunks, chunk_tree }, p.messages, p.bytes)
            }
            None => match std::mem::replace(&mut self.entries, Entries::Held(Vec::new())) {
                Entries::Held(entries) => {
                    let messages = entries.len() as u64;
                    let bytes: u64 = entries.iter().map(|e| e.size).sum();
                    (save_entries(&ctx.saver, entries)?, messages, bytes)
                }
                Entries::Streamed(_, Some(e)) => return Err(e),
                Entries::Streamed(s, None) => s.finish()?,
            },
        };
        self.n.bytes_total.fetch_add(bytes, Relaxed);
        for e in &self.files {
            owners.add(e.uid, e.gid);
        }
        for d in &self.dirs {
            owners.add(d.uid, d.gid);
        }
        {
            let mut all = lock(&ctx.owners);
            all.uids.append(&mut owners.uids);
            all.gids.append(&mut owners.gids);
        }
        self.files.sort_by(|a, b| a.name.cmp(&b.name));
        self.n.folders.fetch_add(1, Relaxed);
        Ok(FolderNode {
            name: self.folder.name.clone(),
            dir: self.folder.dir.clone(),
            files: self.files,
            chunks: saved.chunks,
            chunk_tree: saved.chunk_tree,
            messages,
            bytes,
            dirs: self.dirs,
            mtime: self.mtime,
            scan,
        })
    }
}

/// What a file that changed while it was read is reported with.
pub const CHANGED_WHILE_READ: &str = "changed while read, twice (a file being written to: back up from a filesystem snapshot, see docs/consistent-sources.md)";

/// A large file as [`FolderWriter::read_large`] read it, with its `stat` from before.
enum LargeRead {
    /// Unchanged while read.
    Read(StoredLarge, FileMeta),
    /// Changed while read, on both tries: the second try.
    Torn(StoredLarge, FileMeta),
}
