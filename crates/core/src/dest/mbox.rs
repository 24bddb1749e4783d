//! The mbox target: `restore --target mbox:DIR` writes one mboxrd file per folder, in a
//! mail client's folder tree (Thunderbird's layout, [`Tree::Mbox`]: `Inbox`,
//! `Archive.sbd/2023`), each account in its own directory below the target
//! (`account_dir`: `example.org/bob` for `example.org/bob/Maildir`; a single-Maildir
//! snapshot's folders go into the target itself). Flags and keywords go into `Status:`,
//! `X-Status:` and `X-Keywords:`, the internal date into the `From ` line, the folder's
//! keywords into the first message's `X-IMAPbase:` (so that Dovecot reads `X-Keywords:`);
//! the codec is [`crate::mail::mbox`].
//!
//! A folder's messages come in its arrival order, in batches ([`Order::Folder`]). A
//! folder file that is not there yet is written under a hidden temporary name and renamed
//! into place (never replacing a file) when the folder is finished, so that a killed
//! restore leaves no half mbox (a re-run writes it again). A folder file already there is
//! appended to, and the messages whose bytes it already holds (by BLAKE3, as many times
//! as it holds them) are not written again, so that a re-run never duplicates. A batch
//! whose writing fails is cut off the file again and its messages fail. A message that an
//! mbox cannot give back exactly ([`mail::Written::lossy`]) is written and fails.
//!
//! Folder names map one to one to paths ([`crate::mail::layout`]); a folder whose place is
//! taken fails with its name (`folder_error`), and one that lands on the file of another
//! folder of the same restore (a case-insensitive file system) is refused (`Claims`).
//!
//! Directories are opened as the Maildir target opens them: relative to their parent,
//! never through a symbolic link.

use super::fs::{open_path, open_target, rename_noreplace};
use super::Target;
use super::{AccountInfo, Caps, FolderInfo, Item, Message, Meta, Order, Outcome, RestoreFailures};
use crate::error::{Error, Result};
use crate::mail::layout::{folder_to_path, Tree};
use crate::mail::{self, MboxReader, MboxWriter};
use crate::repo::lock;
use crate::repo::tree::AccountRef;
use rustix::fs::{Mode, OFlags};
use std::collections::HashMap;
use std::ffi::OsStr;
use std::fs::File;
use std::io::{BufReader, ErrorKind, Read, Seek, SeekFrom, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};
use std::sync::Mutex;

/// Messages, and bytes, per batch.
pub(super) const BATCH_MESSAGES: usize = 256;
pub(super) const BATCH_BYTES: usize = 16 << 20;

/// The directory of an account below an mbox or EML target, as path components: its
/// `rel_path` without a trailing `Maildir` (`example.org/bob/Maildir` is
/// `example.org/bob`); empty (the target itself) for a single-Maildir snapshot.
pub(crate) fn account_dir(acc: &AccountRef) -> Vec<Vec<u8>> {
    let mut parts: Vec<Vec<u8>> = acc
        .rel_path
        .split(|&c| c == b'/')
        .filter(|p| !p.is_empty())
        .map(|p| p.to_vec())
        .collect();
    if parts.len() > 1 && parts.last().is_some_and(|p| p == b"Maildir") {
        parts.pop();
    }
    parts
}

/// A folder's relative path in a tree as components (directories, then the folder's own
/// file or directory).
pub(crate) fn folder_parts(name: &str, tree: Tree) -> Vec<Vec<u8>> {
    folder_to_path(name, tree)
        .components()
        .filter_map(|c| match c {
            Component::Normal(s) => Some(s.as_bytes().to_vec()),
            _ => None,
        })
        .collect()
}

/// The pipeline's [`Meta`] as the mail codecs take it.
pub(crate) fn mail_meta(m: &Meta) -> mail::Meta {
    mail::Meta {
        flags: mail::flags::sorted(&m.flags.imap()),
        keywords: m.keywords.clone(),
        internal_date: Some(m.internal_date.secs),
    }
}

/// `parts` below `base`, for messages.
pub(crate) fn shown(base: &Path, parts: &[Vec<u8>]) -> PathBuf {
    let mut p = base.to_path_buf();
    for c in parts {
        p.push(OsStr::from_bytes(c));
    }
    p
}

/// An error of the folder `folder` in a tree target (mbox, EML), said plainly and with
/// the folder: a directory where its file goes, a file where its directory goes, a name
/// taken meanwhile. Only an [`Error::Io`] is changed.
pub(crate) fn folder_error(folder: &str, e: Error) -> Error {
    let Error::Io { path, source } = e else {
        return e;
    };
    let detail = match source.kind() {
        ErrorKind::IsADirectory => "a directory is where the folder's mbox file goes: not restored (move it away, or restore elsewhere)".to_string(),
        ErrorKind::NotADirectory => "not a directory, but the folder's directory goes there: not restored (move it away, or restore elsewhere)".to_string(),
        ErrorKind::AlreadyExists => "taken meanwhile by another file (a folder whose name this file system does not tell apart from this one's?): not restored, nothing overwritten".to_string(),
        _ => source.to_string(),
    };
    Error::Folder {
        folder: folder.to_string(),
        path,
        detail,
    }
}

/// The folder files (mbox) and folder directories (EML) a restore writes to, by device
/// and inode, with the folder each belongs to: a second folder that lands on one already
/// taken (a file system that does not tell the two names apart, as a case-insensitive
/// one does) is refused, never merged into the first. Folder names themselves map one
/// to one (`crate::mail::layout`).
#[derive(Default)]
pub(crate) struct Claims(Mutex<HashMap<(u64, u64), (String, String)>>);

impl Claims {
    /// Claims the file or directory `fd` (at `path`) for `folder` of `account`.
    pub(crate) fn claim(
        &self,
        fd: BorrowedFd<'_>,
        account: &str,
        folder: &str,
        path: &Path,
    ) -> Result<()> {
        let st = rustix::fs::fstat(fd).map_err(|e| Error::io(path, e.into()))?;
        let key = (st.st_dev, st.st_ino);
        let mine = (account.to_string(), folder.to_string());
        let mut claims = lock(&self.0);
        match claims.get(&key) {
            Some(other) if *other != mine => Err(Error::Folder {
                folder: folder.to_string(),
                path: path.to_path_buf(),
                detail: format!(
                    "is where folder {} is written too (this file system does not tell their names apart): not restored, never merged",
                    other.1
                ),
            }),
            _ => {
                claims.insert(key, mine);
                Ok(())
            }
        }
    }
}

/// A tree of mbox files as a restore target.
pub struct MboxTarget {
    path: PathBuf,
    root: OwnedFd,
    accounts: usize,
    claims: Claims,
}

impl MboxTarget {
    /// Creates the directory `path` if need be and opens it; `jobs`: accounts written at
    /// once (0: one per core).
    pub fn open(path: &Path, jobs: usize) -> Result<MboxTarget> {
        let accounts = if jobs == 0 {
            std::thread::available_parallelism().map_or(1, |n| n.get())
        } else {
            jobs
        };
        Ok(MboxTarget {
            path: path.to_path_buf(),
            root: open_target(path)?,
            accounts,
            claims: Claims::default(),
        })
    }
}

/// Opens (creating what is missing) the directory `parts` below `root`, the target at
/// `path`, never through a symbolic link; an error names the directory that failed.
pub(crate) fn open_dirs(root: &OwnedFd, path: &Path, parts: &[Vec<u8>]) -> Result<OwnedFd> {
    let p: Vec<&[u8]> = parts.iter().map(|p| &p[..]).collect();
    open_path(root.as_fd(), &p, true).map_err(|(at, e)| Error::io(shown(path, &parts[..at]), e))
}

/// An account being restored into a tree of files (mbox or EML): its directory below
/// the target (`account_dir`), created.
pub struct TreeAccount {
    pub(crate) name: String,
    pub(crate) parts: Vec<Vec<u8>>,
}

impl TreeAccount {
    /// Creates the account's directory below `root` (the target at `path`), never through
    /// a symbolic link.
    pub(crate) fn open(root: &OwnedFd, path: &Path, info: &AccountInfo) -> Result<TreeAccount> {
        let parts = account_dir(info.account);
        open_dirs(root, path, &parts)?;
        Ok(TreeAccount {
            name: info.account.name.clone(),
            parts,
        })
    }
}

/// A folder being restored: its file, open for writing.
pub struct MboxFolder {
    account: String,
    folder: String,
    /// The folder file's path, for messages.
    path: PathBuf,
    /// The directory holding it, and its name there.
    dir: OwnedFd,
    name: Vec<u8>,
    state: Mutex<Option<Writing>>,
}

/// A folder file being written.
struct Writing {
    writer: MboxWriter<File>,
    /// The file (the writer writes through a handle of its own, unbuffered: a message
    /// written is in the file), to cut a failed batch off and to sync it.
    file: File,
    /// The file's length after the last batch written.
    end: u64,
    /// A new file: its temporary name in the folder's directory, renamed at the end.
    tmp: Option<String>,
    /// An existing file: the BLAKE3 of the messages it holds, and how many times.
    have: HashMap<[u8; 32], usize>,
}

impl Writing {
    /// A writer again at `end`, the bytes after it cut off.
    fn reset(&mut self, to: u64) -> std::io::Result<()> {
        self.file.set_len(to)?;
        let mut f = self.file.try_clone()?;
        f.seek(SeekFrom::Start(to))?;
        self.end = to;
        self.writer = MboxWriter::at(f, to);
        Ok(())
    }
}

impl Target for MboxTarget {
    type Account = TreeAccount;
    type Folder = MboxFolder;

    fn caps(&self) -> Caps {
        Caps {
            order: Order::Folder,
            jobs: 0,
            open_folders: usize::MAX,
            accounts: self.accounts,
            lanes: 1,
            batch_messages: BATCH_MESSAGES,
            batch_bytes: BATCH_BYTES,
            lane_messages: 0,
            folder_files: false,
            home: false,
            store: false,
            keywords: true,
            hard_links: false,
            parts: false,
        }
    }

    fn open_account(&self, info: &AccountInfo) -> Result<TreeAccount> {
        TreeAccount::open(&self.root, &self.path, info)
    }

    fn open_folder(&self, acc: &TreeAccount, info: &FolderInfo) -> Result<MboxFolder> {
        let mut parts = acc.parts.clone();
        parts.extend(folder_parts(info.name, Tree::Mbox));
        let path = shown(&self.path, &parts);
        let Some(name) = parts.pop() else {
            return Err(Error::Folder {
                folder: info.name.to_string(),
                path,
                detail: format!("of {}: no file name for it", acc.name),
            });
        };
        let dir =
            open_dirs(&self.root, &self.path, &parts).map_err(|e| folder_error(info.name, e))?;
        let writing = open_file(&dir, &name, info)
            .map_err(|e| folder_error(info.name, Error::io(&path, e)))?;
        if writing.tmp.is_none() {
            self.claims
                .claim(writing.file.as_fd(), &acc.name, info.name, &path)?;
        }
        Ok(MboxFolder {
            account: acc.name.clone(),
            folder: info.name.to_string(),
            path,
            dir,
            name,
            state: Mutex::new(Some(writing)),
        })
    }

    fn write(&self, folder: &MboxFolder, msg: &Message) -> Result<Outcome> {
        let mut done = [None];
        self.write_batch(folder, std::slice::from_ref(msg), &mut done)?;
        let [d] = done;
        d.unwrap_or_else(|| {
            Err(Error::Internal(
                "a batch left a message without an outcome".into(),
            ))
        })
    }

    fn write_batch(
        &self,
        folder: &MboxFolder,
        msgs: &[Message],
        done: &mut [Option<Result<Outcome>>],
    ) -> Result<()> {
        let mut state = lock(&folder.state);
        let Some(w) = state.as_mut() else {
            return Err(Error::Internal(format!(
                "{}: written to after it was finished",
                folder.path.display()
            )));
        };
        let start = w.end;
        let mut end = start;
        let mut failed = None;
        // A message that does not read back exactly is written (nothing is dropped) but
        // fails: the export is not what the snapshot holds.
        let lossy = |m: &Message| Error::Folder {
            folder: folder.folder.clone(),
            path: folder.path.clone(),
            detail: format!(
                "message {} ({}): written, but an mbox reader does not read it back exactly \
                 (its own Content-Length: header ends it where its quoted body ends, or its \
                 date cannot be written in a From line): restore it to maildir: or eml: \
                 for its exact bytes",
                String::from_utf8_lossy(&m.entry.key),
                folder.account
            ),
        };
        for (i, m) in msgs.iter().enumerate() {
            let meta = mail_meta(m.meta);
            if !w.have.is_empty() {
                // As the file holds it: the bytes, or (a message that does not read back
                // exactly) what reading it back gives.
                let h = *blake3::hash(m.data).as_bytes();
                let found = match w.have.get(&h) {
                    Some(n) if *n > 0 => Some((h, false)),
                    _ => read_back(m.data, &meta)
                        .filter(|h| w.have.get(h).is_some_and(|n| *n > 0))
                        .map(|h| (h, true)),
                };
                if let Some((h, inexact)) = found {
                    if let Some(n) = w.have.get_mut(&h) {
                        *n -= 1;
                    }
                    done[i] = Some(if inexact {
                        Err(lossy(m))
                    } else {
                        Ok(Outcome::AlreadyThere)
                    });
                    continue;
                }
            }
            match w.writer.write(m.data, &meta, None) {
                Ok(written) => {
                    end = written.offset + written.len;
                    done[i] = Some(if written.lossy {
                        Err(lossy(m))
                    } else {
                        Ok(Outcome::Written { bytes: written.len })
                    });
                }
                Err(mail::MailError::Io { source, .. }) => {
                    failed = Some(source);
                    break;
                }
                // Refused before anything of it was written (a keyword an mbox cannot
                // carry): this message fails, the batch goes on.
                Err(e) => {
                    let what = format!(
                        "{}: message {}",
                        folder.path.display(),
                        String::from_utf8_lossy(&m.entry.key)
                    );
                    done[i] = Some(Err(Error::not_restored(what, e.to_string())));
                }
            }
        }
        if let Some(e) = failed {
            // The batch is cut off the file again: none of it counts as written; each
            // message fails with the write's error, of its kind.
            for d in done.iter_mut() {
                if matches!(d, Some(Ok(Outcome::Written { .. })) | None) {
                    let e = std::io::Error::new(e.kind(), e.to_string());
                    *d = Some(Err(Error::io(&folder.path, e)));
                }
            }
            if let Err(e2) = w.reset(start) {
                *state = None;
                return Err(Error::io(&folder.path, e2));
            }
            return Ok(());
        }
        w.end = end;
        Ok(())
    }

    fn finish_folder(&self, folder: MboxFolder, failures: &RestoreFailures) {
        let item = format!("{} ({})", folder.path.display(), folder.account);
        let Some(w) = folder.state.into_inner().unwrap_or_else(|p| p.into_inner()) else {
            return;
        };
        let Writing {
            writer, file, tmp, ..
        } = w;
        let result = (|| -> std::io::Result<()> {
            writer.finish().map_err(std::io::Error::other)?;
            file.sync_all()?;
            if let Some(tmp) = &tmp {
                rename_noreplace(
                    folder.dir.as_fd(),
                    tmp.as_bytes(),
                    folder.dir.as_fd(),
                    &folder.name,
                )?;
            }
            Ok(())
        })();
        match result {
            Err(e) => {
                if let Some(tmp) = &tmp {
                    let _ = rustix::fs::unlinkat(
                        &folder.dir,
                        tmp.as_str(),
                        rustix::fs::AtFlags::empty(),
                    );
                }
                failures.add(
                    item,
                    folder_error(&folder.folder, Error::io(&folder.path, e)),
                );
            }
            Ok(()) if tmp.is_some() => {
                // Now under its name: a later folder that lands on it is refused.
                if let Err(e) =
                    self.claims
                        .claim(file.as_fd(), &folder.account, &folder.folder, &folder.path)
                {
                    failures.add(item, e);
                }
            }
            Ok(()) => {}
        }
    }

    fn item(&self, folder: &MboxFolder, item: Item) -> String {
        match item {
            Item::Message(e) => format!(
                "{} ({}): message {}",
                folder.path.display(),
                folder.account,
                String::from_utf8_lossy(&e.key)
            ),
            Item::File(name) => format!(
                "{} ({}): {}",
                folder.path.display(),
                folder.account,
                String::from_utf8_lossy(name)
            ),
        }
    }
}

/// Opens the folder file `name` in `dir` without following a symbolic link: an existing
/// one for appending (the messages it holds hashed), else a new temporary file beside it.
fn open_file(dir: &OwnedFd, name: &[u8], info: &FolderInfo) -> std::io::Result<Writing> {
    use rustix::fs::openat;
    let flags = OFlags::RDWR | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    match openat(dir, name, flags, Mode::empty()) {
        Ok(fd) => {
            let mut file = File::from(fd);
            let st = file.metadata()?;
            if !st.is_file() {
                return Err(std::io::Error::other("not a regular file"));
            }
            let mut have: HashMap<[u8; 32], usize> = HashMap::new();
            for m in MboxReader::new(BufReader::new(&file)) {
                let m = m.map_err(std::io::Error::other)?;
                if !m.folder_internal {
                    *have.entry(*blake3::hash(&m.bytes).as_bytes()).or_default() += 1;
                }
            }
            // What it ends with: a message is appended after an empty line.
            let mut end = st.len();
            if end > 0 {
                let mut last = [0u8; 2];
                let n = end.min(2);
                file.seek(SeekFrom::Start(end - n))?;
                file.read_exact(&mut last[..n as usize])?;
                let tail = &last[..n as usize];
                let pad: &[u8] = if tail == b"\n\n" || tail == b"\n" && n == 1 {
                    b""
                } else if tail.ends_with(b"\n") {
                    b"\n"
                } else {
                    b"\n\n"
                };
                file.seek(SeekFrom::Start(end))?;
                file.write_all(pad)?;
                end += pad.len() as u64;
            }
            let mut w = file.try_clone()?;
            w.seek(SeekFrom::Start(end))?;
            Ok(Writing {
                writer: MboxWriter::at(w, end),
                file,
                end,
                tmp: None,
                have,
            })
        }
        Err(e) if e == rustix::io::Errno::NOENT => {
            let tmp = format!(".mailvault-{:016x}.tmp", rand::random::<u64>());
            let fd = openat(
                dir,
                tmp.as_str(),
                flags | OFlags::CREATE | OFlags::EXCL,
                Mode::from_raw_mode(0o600),
            )?;
            let file = File::from(fd);
            let writer = MboxWriter::new(file.try_clone()?);
            let writer = match writer.declare_keywords(1, &folder_keywords(info)) {
                Ok(w) => w,
                Err(e) => {
                    let _ = rustix::fs::unlinkat(dir, tmp.as_str(), rustix::fs::AtFlags::empty());
                    return Err(std::io::Error::other(e));
                }
            };
            Ok(Writing {
                writer,
                file,
                end: 0,
                tmp: Some(tmp),
                have: HashMap::new(),
            })
        }
        Err(e) => Err(e.into()),
    }
}

/// The keywords of a folder (its `dovecot-keywords`, and `$Forwarded` when a message
/// has Maildir's `P`) that an mbox can carry, for `X-IMAPbase:`.
pub(crate) fn folder_keywords(info: &FolderInfo) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(Ok(data)) = info.file(b"dovecot-keywords") {
        let table =
            mailvault_imap::maildir_flags::KeywordTable::parse(&String::from_utf8_lossy(&data));
        out.extend(('a'..='z').filter_map(|c| table.name_of(c).map(str::to_string)));
    }
    if info.entries.iter().any(|e| e.flags().contains(&b'P')) {
        out.push("$Forwarded".to_string());
    }
    out.retain(|k| mail::flags::check_keyword(k).is_ok());
    out
}

/// The BLAKE3 of a message as an mbox reader reads it back once written: not its bytes
/// when it is lossy ([`mail::Written::lossy`]).
fn read_back(data: &[u8], meta: &mail::Meta) -> Option<[u8; 32]> {
    let mut w = MboxWriter::new(Vec::new());
    if !w.write(data, meta, None).ok()?.lossy {
        return None;
    }
    let out = w.finish().ok()?;
    let m = MboxReader::new(&out[..]).next()?.ok()?;
    Some(*blake3::hash(&m.bytes).as_bytes())
}
