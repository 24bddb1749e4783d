//! The Maildir target: a restore writes a tree of Maildirs (`<domain>/<user>/Maildir`
//! below the target, or one Maildir), each message under its original name, owner, mode
//! and mtime.
//!
//! Messages come in any order from many threads ([`Order::Any`]): each is written as an
//! unnamed file (or, where that is not supported, in the folder's `tmp/`), given its
//! mode, owner (when permitted) and mtime, and linked into `cur/` or `new/` under its
//! original name, never replacing a file. A message whose key is already in the target
//! folder is counted as already there when the bytes are identical and reported as a
//! conflict otherwise.
//!
//! Confinement: every directory below the target is opened relative to its parent without
//! following symbolic links (the target itself, given by the admin, is followed once), and
//! files are created and read relative to those directories, so a link planted in the
//! target (`example.org -> /elsewhere`, a linked `cur/`, a linked file name) is reported
//! and never written through. Directories get their recorded owner and mode when their
//! account is finished, deepest first, so that none becomes unwritable before its content
//! is in.

use super::fs::{
    open_path, open_target, open_unnamed, read_at, rename_noreplace, set_attributes, through_tmp,
    write_sparse, Attrs,
};
use super::maildir_dirs::{
    existing_keys, open_folder_dirs, unstage, write_error, write_new_file, FolderDirs, Links,
};
use super::owners::{OwnerMap, RestoreOwners};
use super::{AccountInfo, Caps, FolderInfo, HardLink, Item, Message, Order, RestoreFailures};
use super::{Linked, Outcome, Target};
use crate::error::{Error, Result};
use crate::mail::maildir;
use crate::repo::lock;
use crate::repo::tree::{DirEntry, FileEntry, OwnerNames, Timestamp, NO_OWNER};
use rustix::fs::{Mode, OFlags};
use rustix::io::Errno;
use std::collections::{BTreeMap, HashMap};
use std::ffi::OsStr;
use std::fs::File;
use std::io::ErrorKind;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Mutex;

/// A restore holds up to four directories open per folder of a batch (the folder, `cur/`,
/// `new/`, and `tmp/` while it is staged): the soft limit on open files goes up to the
/// hard one, as Go programs do, and a batch has as many folders as a quarter of it allows
/// (less some for everything else),
/// from [`MIN_FOLDER_BATCH`] to [`MAX_FOLDER_BATCH`]. Every pack span is read once per
/// batch, so the fewer batches, the fewer reads. If the limit is still too low, the
/// folders past it are reported (too many open files), not lost silently.
fn folder_batch() -> usize {
    use rustix::process::{getrlimit, setrlimit, Resource};
    let mut l = getrlimit(Resource::Nofile);
    if l.current < l.maximum {
        l.current = l.maximum;
        if setrlimit(Resource::Nofile, l).is_err() {
            l = getrlimit(Resource::Nofile);
        }
    }
    let open = l.current.unwrap_or(u64::MAX).saturating_sub(256) / 4;
    (open as usize).clamp(MIN_FOLDER_BATCH, MAX_FOLDER_BATCH)
}

/// Folders whose directories are open at once (four descriptors each): see
/// [`folder_batch`].
const MIN_FOLDER_BATCH: usize = 100;
const MAX_FOLDER_BATCH: usize = 20_000;

/// Directories whose recorded owner and mode are set once their content is in: by
/// their path below the target (components).
type DirAttrs = BTreeMap<Vec<Vec<u8>>, DirEntry>;

/// A Maildir tree as a restore target.
pub struct MaildirTarget {
    /// The target directory as given, for messages.
    path: PathBuf,
    root: OwnedFd,
    owners: OwnerMap,
    jobs: usize,
    open_folders: usize,
    /// A plain directory tree (`dir:`): folders without messages get no `cur`, `new`
    /// and `tmp`, temporaries go next to their files.
    plain: bool,
    /// Staged folders (see [`STAGE`]) by path, and how many of this run's open folders
    /// write into each (an undelete may bring one folder's messages from several
    /// snapshots): the last one finished puts it in place.
    staged: Mutex<HashMap<PathBuf, usize>>,
    /// This run's name in its staging directories: random, so that a run never takes up
    /// another's (a killed one's messages may be torn).
    run: String,
}

impl MaildirTarget {
    /// Creates the directory `path` if need be and opens it. `owners`: whose the restored
    /// files become, `names` the snapshot's recorded owner names; `jobs`: threads writing
    /// (0: one per core).
    pub fn open(
        path: &Path,
        owners: RestoreOwners,
        names: &OwnerNames,
        jobs: usize,
    ) -> Result<MaildirTarget> {
        Ok(MaildirTarget {
            path: path.to_path_buf(),
            root: open_target(path)?,
            owners: OwnerMap::new(owners, names),
            jobs,
            open_folders: folder_batch(),
            plain: false,
            staged: Mutex::new(HashMap::new()),
            run: format!("{:016x}", rand::random::<u64>()),
        })
    }

    /// A plain directory tree as a target (`restore --target dir:DIR`), for `file:`
    /// snapshots: each account's files below DIR at their path, folders as directories,
    /// large files written in pieces and sparse where they hold whole pages of zeros. A
    /// snapshot with messages still gets Maildir folders for them.
    pub fn plain(
        path: &Path,
        owners: RestoreOwners,
        names: &OwnerNames,
        jobs: usize,
    ) -> Result<MaildirTarget> {
        let mut t = MaildirTarget::open(path, owners, names, jobs)?;
        t.plain = true;
        Ok(t)
    }

    /// A path below the target, for messages.
    fn shown(&self, parts: &[&[u8]]) -> PathBuf {
        let mut p = self.path.clone();
        for c in parts.iter().filter(|c| !c.is_empty()) {
            p.push(OsStr::from_bytes(c));
        }
        p
    }
}

/// An account being restored: where it lies below the target, and the directories whose
/// owner and mode are set once its content is in.
pub struct MaildirAccount {
    name: String,
    parts: Vec<Vec<u8>>,
    attrs: Mutex<DirAttrs>,
    /// Folder directories whose recorded mtime is set last (a `file:` backup's).
    mtimes: Mutex<BTreeMap<Vec<Vec<u8>>, Timestamp>>,
}

impl MaildirAccount {
    /// The path components of the folder directory `dir` (a `file:` folder's may be
    /// several: `a/b`) below the target's root.
    fn folder_parts<'a>(&'a self, dir: &'a [u8]) -> Vec<&'a [u8]> {
        let mut parts: Vec<&[u8]> = self.parts.iter().map(|p| &p[..]).collect();
        parts.extend(dir.split(|&c| c == b'/'));
        parts
    }
}

/// A folder being restored: its directories open, the keys already there.
pub struct MaildirFolder {
    account: String,
    dirs: FolderDirs,
    /// A file with the same key already in the target folder: (in `new/`, its name).
    existing: HashMap<Vec<u8>, (bool, Vec<u8>)>,
    /// Picked messages: their keyword letters in the target's `dovecot-keywords`.
    letters: Option<LetterMap>,
    /// Large files being written in pieces, by name.
    large: Mutex<HashMap<Vec<u8>, std::sync::Arc<Partial>>>,
}

/// A large file being written: unnamed (`O_TMPFILE`) until it is complete, or where that
/// is not supported a temporary name in its directory.
struct Partial {
    file: File,
    tmp: Option<String>,
}

impl Target for MaildirTarget {
    type Account = MaildirAccount;
    type Folder = MaildirFolder;

    fn caps(&self) -> Caps {
        Caps {
            order: Order::Any,
            jobs: self.jobs,
            open_folders: self.open_folders,
            accounts: 1,
            lanes: 1,
            batch_messages: 1,
            batch_bytes: 0,
            lane_messages: 0,
            folder_files: true,
            home: true,
            store: true,
            keywords: false,
            hard_links: self.plain,
            parts: false,
        }
    }

    fn open_account(&self, info: &AccountInfo) -> Result<MaildirAccount> {
        let acc = info.account;
        let parts: Vec<&[u8]> = if acc.rel_path.is_empty() {
            Vec::new()
        } else {
            acc.rel_path.split(|&c| c == b'/').collect()
        };
        let mut attrs = DirAttrs::new();
        for (i, part) in parts.iter().enumerate() {
            let recorded = acc.dirs.get(i).filter(|d| d.name == *part).cloned();
            if let Some(d) = recorded.or_else(|| self.owners.fixed().then(|| unrecorded_dir(part)))
            {
                attrs.insert(parts[..=i].iter().map(|p| p.to_vec()).collect(), d);
            }
        }
        // Created now, opened again for each folder.
        if let Err((at, e)) = open_path(self.root.as_fd(), &parts, true) {
            return Err(Error::io(self.shown(&parts[..at]), e));
        }
        Ok(MaildirAccount {
            name: acc.name.clone(),
            parts: parts.iter().map(|p| p.to_vec()).collect(),
            attrs: Mutex::new(attrs),
            mtimes: Mutex::new(BTreeMap::new()),
        })
    }

    fn open_folder(&self, acc: &MaildirAccount, info: &FolderInfo) -> Result<MaildirFolder> {
        let mut parts: Vec<&[u8]> = acc.parts.iter().map(|p| &p[..]).collect();
        if info.home {
            // The home holds the Maildir (`example.org/bob` of `example.org/bob/Maildir`).
            parts.pop();
        }
        let acc_dir = open_path(self.root.as_fd(), &parts, true)
            .map_err(|(at, e)| Error::io(self.shown(&parts[..at]), e))?;
        let node = info.node;
        let mut fparts = parts.clone();
        fparts.extend(node.dir.split(|&c| c == b'/'));
        let plain = info.home
            || self.plain
                && info.entries.is_empty()
                && node.chunks.is_empty()
                && node.chunk_tree.is_none();
        // A `file:` tree's links are made as they were; a home's only where they stay
        // in the home (Dovecot's `.dovecot.sieve -> sieve/vacation.sieve`): the mail
        // server follows them as the user.
        let links = match (self.plain, info.home) {
            (_, true) => Links::Inside,
            (true, false) => Links::Any,
            (false, false) => Links::None,
        };
        let base: Vec<Vec<u8>> = fparts
            .iter()
            .filter(|p| !p.is_empty())
            .map(|p| p.to_vec())
            .collect();
        let mut mine = DirAttrs::new();
        for d in &node.dirs {
            let mut p = base.clone();
            if !d.name.is_empty() {
                p.push(d.name.clone());
            }
            mine.insert(p, d.clone());
        }
        if self.owners.fixed() {
            // `--chown` gives every directory of the folder its owner, recorded or not
            // (an IMAP backup or a version-1 snapshot records none).
            let subs: &[&[u8]] = if plain {
                &[b""]
            } else {
                &[b"", b"cur", b"new", b"tmp"]
            };
            for &sub in subs {
                let mut p = base.clone();
                if !sub.is_empty() {
                    p.push(sub.to_vec());
                }
                mine.entry(p).or_insert_with(|| unrecorded_dir(sub));
            }
        }
        let dir_parts: Vec<&[u8]> = node.dir.split(|&c| c == b'/').collect();
        let dirs = open_folder_dirs(
            self.shown(&fparts),
            acc_dir.as_fd(),
            &dir_parts,
            (plain, links),
            &self.run,
        )?;
        if dirs.staged.is_some() {
            *lock(&self.staged).entry(dirs.path.clone()).or_default() += 1;
        }
        lock(&acc.attrs).append(&mut mine);
        if let Some(t) = node.mtime {
            lock(&acc.mtimes).insert(base.clone(), t);
        }
        let mut letters = None;
        if info.picked {
            // Single messages bring the folder files that give their flags meaning.
            letters = keywords_for(self, &dirs, info);
            if let Some(f) = node.files.iter().find(|f| f.name == b"maildirfolder") {
                let written = match info.file(&f.name) {
                    Some(Ok(data)) => write_folder_file(self, &dirs, f, &data).map(|_| ()),
                    Some(Err(e)) => Err(e),
                    None => Ok(()),
                };
                if let Err(e) = written {
                    let item = dirs.shown(None, &f.name).display().to_string();
                    info.failures.add(item, e);
                }
            }
        }
        let existing = if plain {
            HashMap::new()
        } else {
            existing_keys(&dirs, info.failures)
        };
        Ok(MaildirFolder {
            account: acc.name.clone(),
            dirs,
            existing,
            letters,
            large: Mutex::new(HashMap::new()),
        })
    }

    fn write(&self, folder: &MaildirFolder, msg: &Message) -> Result<Outcome> {
        let (e, data) = (msg.entry, msg.data);
        let dirs = &folder.dirs;
        if let Some((new, name)) = folder.existing.get(&e.key) {
            let shown = dirs.shown(Some(*new), name);
            return match read_at(dirs.sub(*new).as_fd(), name) {
                Ok(have) if have == data => Ok(Outcome::AlreadyThere),
                Ok(_) => Err(Error::conflict(
                    shown.display(),
                    "already exists with other content: not overwritten",
                )),
                Err(err) => Err(Error::io(shown, err)),
            };
        }
        let mapped = folder.letters.as_ref().and_then(|m| renamed(&e.name, m));
        write_new_file(
            dirs,
            Some(e.new),
            mapped.as_deref().unwrap_or(&e.name),
            data,
            Attrs {
                mode: e.mode,
                mtime: e.mtime,
                owner: self.owners.get(e.uid, e.gid),
            },
        )?;
        Ok(Outcome::Written {
            bytes: data.len() as u64,
        })
    }

    fn write_file(&self, folder: &MaildirFolder, file: &FileEntry, data: &[u8]) -> Result<Outcome> {
        write_folder_file(self, &folder.dirs, file, data)
    }

    fn finish_folder(&self, folder: MaildirFolder, failures: &RestoreFailures) {
        let Some(tmp) = &folder.dirs.staged else {
            return;
        };
        {
            let mut staged = lock(&self.staged);
            let Some(n) = staged.get_mut(&folder.dirs.path) else {
                return;
            };
            *n -= 1;
            if *n > 0 {
                return;
            }
            staged.remove(&folder.dirs.path);
        }
        for new in [false, true] {
            unstage(&folder.dirs, tmp.as_fd(), &self.run, new, failures);
        }
    }

    fn file_present(&self, folder: &MaildirFolder, file: &FileEntry) -> bool {
        let flags = rustix::fs::AtFlags::SYMLINK_NOFOLLOW;
        rustix::fs::statat(&folder.dirs.dir, file.name.as_slice(), flags).is_ok_and(|st| {
            rustix::fs::FileType::from_raw_mode(st.st_mode).is_file()
                && st.st_size as u64 == file.size
                && st.st_mtime == file.mtime.secs
                && st.st_mtime_nsec as u32 == file.mtime.nanos
        })
    }

    fn write_file_at(
        &self,
        folder: &MaildirFolder,
        file: &FileEntry,
        offset: u64,
        data: &[u8],
    ) -> Result<()> {
        let shown = || folder.dirs.shown(None, &file.name);
        let partial = {
            let mut large = lock(&folder.large);
            match large.get(&file.name) {
                Some(p) => p.clone(),
                None => {
                    let p = std::sync::Arc::new(
                        start_large(&folder.dirs, file).map_err(|e| Error::io(shown(), e))?,
                    );
                    large.insert(file.name.clone(), p.clone());
                    p
                }
            }
        };
        write_sparse(&partial.file, offset, data).map_err(|e| Error::io(shown(), e))
    }

    fn finish_file(&self, folder: &MaildirFolder, file: &FileEntry, ok: bool) -> Result<()> {
        let shown = folder.dirs.shown(None, &file.name);
        let Some(partial) = lock(&folder.large).remove(&file.name) else {
            return Ok(());
        };
        let Ok(partial) = std::sync::Arc::try_unwrap(partial) else {
            return Err(Error::Internal(format!(
                "{}: finished while still being written",
                shown.display()
            )));
        };
        let attrs = Attrs {
            mode: file.mode,
            mtime: file.mtime,
            owner: self.owners.get(file.uid, file.gid),
        };
        let dir = folder.dirs.dir.as_fd();
        let placed = if ok {
            end_large(dir, &partial, &file.name, attrs)
        } else {
            Ok(())
        };
        if let Some(tmp) = partial.tmp.as_ref().filter(|_| !ok || placed.is_err()) {
            // Abandoned or not placed: the temporary goes (an unnamed one goes by itself).
            let _ = rustix::fs::unlinkat(dir, tmp.as_str(), rustix::fs::AtFlags::empty());
        }
        placed.map_err(|e| write_error(shown, e))
    }

    fn link_files(
        &self,
        acc: &MaildirAccount,
        links: &[HardLink],
        failures: &RestoreFailures,
    ) -> Linked {
        let mut done = Linked::default();
        // The last directory opened on either side, for the next link in it (links come
        // folder by folder, and mostly to files of one folder).
        let (mut dir, mut to_dir) = (None, None);
        for l in links {
            match link_file(self, acc, l, &mut dir, &mut to_dir) {
                Ok(true) => done.made += 1,
                Ok(false) => done.present += 1,
                Err(e) => failures.add(
                    file_path(self, acc, &l.dir, &l.name).display().to_string(),
                    e,
                ),
            }
        }
        done
    }

    fn finish_account(&self, acc: MaildirAccount, failures: &RestoreFailures) {
        let attrs = acc.attrs.into_inner().unwrap_or_else(|p| p.into_inner());
        set_dir_attrs(self, &attrs, failures);
        let mtimes = acc.mtimes.into_inner().unwrap_or_else(|p| p.into_inner());
        set_dir_mtimes(self, &mtimes, failures);
    }

    fn item(&self, folder: &MaildirFolder, item: Item) -> String {
        match item {
            Item::Message(e) => {
                let mapped = folder.letters.as_ref().and_then(|m| renamed(&e.name, m));
                let name = mapped.as_deref().unwrap_or(&e.name);
                let path = folder.dirs.shown(Some(e.new), name);
                format!("{} ({})", path.display(), folder.account)
            }
            Item::File(name) => folder.dirs.shown(None, name).display().to_string(),
        }
    }

    fn warnings(&self) -> Vec<String> {
        if self.owners.not_given.load(Relaxed) {
            vec![
                "owners are not restored: the restore does not run as root (only root can give \
                 files to another user); the files belong to the user running it"
                    .to_string(),
            ]
        } else {
            Vec::new()
        }
    }
}

/// A directory the snapshot records nothing of, listed only so that `--chown` gives it
/// its owner: no recorded owner, and its mode (0700 when the restore created it) is kept.
fn unrecorded_dir(name: &[u8]) -> DirEntry {
    DirEntry {
        name: name.to_vec(),
        mode: 0,
        uid: NO_OWNER,
        gid: NO_OWNER,
    }
}

/// Gives the directories their recorded owner and mode, deepest first.
fn set_dir_attrs(t: &MaildirTarget, attrs: &DirAttrs, failures: &RestoreFailures) {
    let mut order: Vec<(&Vec<Vec<u8>>, &DirEntry)> = attrs.iter().collect();
    order.sort_by_key(|(p, _)| std::cmp::Reverse(p.len()));
    for (path, d) in order {
        let parts: Vec<&[u8]> = path.iter().map(|p| &p[..]).collect();
        let shown = t.shown(&parts);
        let result = open_path(t.root.as_fd(), &parts, false)
            .map_err(|(_, e)| e)
            .and_then(|fd| {
                if let Some((uid, gid)) = t.owners.get(d.uid, d.gid) {
                    std::os::unix::fs::fchown(&fd, Some(uid), Some(gid))?;
                }
                if d.uid != NO_OWNER {
                    rustix::fs::fchmod(&fd, Mode::from_raw_mode(d.mode))?;
                }
                Ok(())
            });
        if let Err(e) = result {
            failures.add(shown.display().to_string(), e);
        }
    }
}

/// Gives directories their recorded mtime, deepest first, once everything in them is
/// written (an entry made in a directory changes its mtime).
fn set_dir_mtimes(
    t: &MaildirTarget,
    mtimes: &BTreeMap<Vec<Vec<u8>>, Timestamp>,
    failures: &RestoreFailures,
) {
    use rustix::fs::{futimens, Timespec, Timestamps};
    let mut order: Vec<(&Vec<Vec<u8>>, &Timestamp)> = mtimes.iter().collect();
    order.sort_by_key(|(p, _)| std::cmp::Reverse(p.len()));
    for (path, m) in order {
        let parts: Vec<&[u8]> = path.iter().map(|p| &p[..]).collect();
        let at = Timespec {
            tv_sec: m.secs,
            tv_nsec: m.nanos.into(),
        };
        let result = open_path(t.root.as_fd(), &parts, false)
            .map_err(|(_, e)| e)
            .and_then(|fd| {
                let times = Timestamps {
                    last_access: at,
                    last_modification: at,
                };
                Ok(futimens(&fd, &times)?)
            });
        if let Err(e) = result {
            failures.add(t.shown(&parts).display().to_string(), e);
        }
    }
}

/// Starts a large file in `folder`: unnamed (`O_TMPFILE`), or where that is not supported
/// a new temporary name beside it; as long as the file will be (a sparse file until its
/// pieces are in: pages of zeros are never written).
fn start_large(folder: &FolderDirs, f: &FileEntry) -> std::io::Result<Partial> {
    let unnamed = match open_unnamed(folder.dir.as_fd())? {
        // Linked to its name through /proc when complete.
        Some(file) if std::path::Path::new("/proc/self/fd").exists() => Some(file),
        _ => None,
    };
    let (file, tmp) = match unnamed {
        Some(file) => (file, None),
        None => {
            let tmp = format!(".mailvault-{:016x}", rand::random::<u64>());
            let fd = rustix::fs::openat(
                &folder.dir,
                tmp.as_str(),
                OFlags::WRONLY | OFlags::CLOEXEC | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW,
                Mode::from_raw_mode(0o600),
            )?;
            (File::from(fd), Some(tmp))
        }
    };
    file.set_len(f.size)?;
    Ok(Partial { file, tmp })
}

/// Gives a complete large file its attributes and its name (never replacing a file).
fn end_large(dir: BorrowedFd, p: &Partial, name: &[u8], attrs: Attrs) -> std::io::Result<()> {
    use rustix::fs::{linkat, AtFlags, CWD};
    set_attributes(&p.file, attrs)?;
    match &p.tmp {
        Some(tmp) => rename_noreplace(dir, tmp.as_bytes(), dir, name),
        None => {
            let proc_path = format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&p.file));
            Ok(linkat(
                CWD,
                proc_path.as_str(),
                dir,
                name,
                AtFlags::SYMLINK_FOLLOW,
            )?)
        }
    }
}

/// Writes a folder file; one already there with the same bytes is left, one with other
/// bytes is reported and kept.
fn write_folder_file(
    t: &MaildirTarget,
    folder: &FolderDirs,
    f: &FileEntry,
    data: &[u8],
) -> Result<Outcome> {
    let shown = folder.shown(None, &f.name);
    if let Some(target) = &f.link {
        return write_link(t, folder, f, target).map_err(|e| match e.kind() {
            ErrorKind::AlreadyExists => Error::conflict(shown.display(), e.to_string()),
            ErrorKind::InvalidInput => Error::not_restored(shown.display(), e.to_string()),
            _ => Error::io(shown, e),
        });
    }
    match read_at(folder.dir.as_fd(), &f.name) {
        Ok(have) if have == data => return Ok(Outcome::AlreadyThere),
        Ok(_) => {
            return Err(Error::conflict(
                shown.display(),
                "already exists with other content: not overwritten",
            ))
        }
        Err(e) if e.kind() == ErrorKind::NotFound => {}
        Err(e) => return Err(Error::io(shown, e)),
    }
    let attrs = Attrs {
        mode: f.mode,
        mtime: f.mtime,
        owner: t.owners.get(f.uid, f.gid),
    };
    write_new_file(folder, None, &f.name, data, attrs)?;
    Ok(Outcome::Written {
        bytes: data.len() as u64,
    })
}

/// Makes a symbolic link of a `file:` snapshot, with its owner and mtime; one already
/// there with the same target is left, anything else there is reported and kept. Only a
/// `dir:` target makes links: in a mail store a link from a repository could lead the
/// mail server out of it. The restore never writes through a link it made: directories
/// are opened, and files created, without following links.
fn write_link(
    t: &MaildirTarget,
    folder: &FolderDirs,
    f: &FileEntry,
    target: &[u8],
) -> std::io::Result<Outcome> {
    use rustix::fs::{AtFlags, Timespec, Timestamps};
    use rustix::io::Errno;
    let invalid = |what: &str| std::io::Error::new(ErrorKind::InvalidInput, what.to_string());
    let taken = |what: &str| std::io::Error::new(ErrorKind::AlreadyExists, what.to_string());
    if target.is_empty() || target.contains(&0) {
        return Err(invalid(
            "a symbolic link with an empty target or a NUL byte",
        ));
    }
    match folder.links {
        Links::None => return Err(invalid("a symbolic link: restored only to a dir: target")),
        Links::Inside if !link_stays_inside(target) => {
            return Err(invalid(
                "a symbolic link out of the account's home (absolute, or through ..): \
                 not made",
            ))
        }
        Links::Inside | Links::Any => {}
    }
    let (dir, name) = (folder.dir.as_fd(), f.name.as_slice());
    match rustix::fs::readlinkat(dir, name, Vec::new()) {
        Ok(have) if have.as_bytes() == target => return Ok(Outcome::AlreadyThere),
        Ok(_) => return Err(taken("already exists with another target: not overwritten")),
        Err(Errno::NOENT) => {}
        Err(Errno::INVAL) => return Err(taken("already exists, not a link: not overwritten")),
        Err(e) => return Err(e.into()),
    }
    rustix::fs::symlinkat(target, dir, name).map_err(|e| match e {
        Errno::EXIST => taken("already exists: not overwritten"),
        e => e.into(),
    })?;
    let nofollow = AtFlags::SYMLINK_NOFOLLOW;
    if let Some((uid, gid)) = t.owners.get(f.uid, f.gid) {
        let (u, g) = (
            rustix::fs::Uid::from_raw(uid),
            rustix::fs::Gid::from_raw(gid),
        );
        rustix::fs::chownat(dir, name, Some(u), Some(g), nofollow)?;
    }
    let at = Timespec {
        tv_sec: f.mtime.secs,
        tv_nsec: f.mtime.nanos.into(),
    };
    let times = Timestamps {
        last_access: at,
        last_modification: at,
    };
    rustix::fs::utimensat(dir, name, &times, nofollow)?;
    Ok(Outcome::Written { bytes: 0 })
}

/// Whether a link's target stays below the link's directory: relative, no `..`.
fn link_stays_inside(target: &[u8]) -> bool {
    !target.starts_with(b"/") && target.split(|&c| c == b'/').all(|c| c != b"..")
}

/// The path of the file `name` of the folder directory `dir` of `acc`, as shown.
fn file_path(t: &MaildirTarget, acc: &MaildirAccount, dir: &[u8], name: &[u8]) -> PathBuf {
    let mut parts = acc.folder_parts(dir);
    parts.push(name);
    t.shown(&parts)
}

/// A folder directory of an account, kept open for the next hard link in it.
type OpenDir = Option<(Vec<u8>, OwnedFd)>;

/// Opens the folder directory `dir` of `acc` (none of it through a symbolic link), or
/// takes it from `cache`, where it stays.
fn open_cached<'c>(
    t: &MaildirTarget,
    acc: &MaildirAccount,
    dir: &[u8],
    cache: &'c mut OpenDir,
) -> std::io::Result<BorrowedFd<'c>> {
    if cache.as_ref().is_none_or(|(d, _)| d != dir) {
        let fd = open_path(t.root.as_fd(), &acc.folder_parts(dir), false).map_err(|(_, e)| e)?;
        *cache = Some((dir.to_vec(), fd));
    }
    let cache: &'c OpenDir = cache;
    match cache {
        Some((_, fd)) => Ok(fd.as_fd()),
        None => Err(ErrorKind::NotFound.into()),
    }
}

/// Makes one hard link of a `file:` snapshot: `true` made, `false` already there (the
/// same file under the link's name: a re-run). The file linked to must be the one
/// restored: a regular file of the recorded size and mtime, not another file found under
/// its name; a link name taken by anything else is reported and kept. Both directories
/// are opened without following symbolic links (each kept in its cache for the next
/// link), and `linkat` follows none either.
fn link_file(
    t: &MaildirTarget,
    acc: &MaildirAccount,
    l: &HardLink,
    dir_cache: &mut OpenDir,
    to_dir_cache: &mut OpenDir,
) -> Result<bool> {
    use rustix::fs::{statat, AtFlags, FileType};
    // The paths of the link and of the file, for errors.
    let shown = &file_path(t, acc, &l.dir, &l.name);
    let to_shown = || file_path(t, acc, &l.to_dir, &l.to_name);
    let not_restored = || {
        let detail = format!(
            "hard link to {}, which was not restored",
            to_shown().display()
        );
        Error::not_restored(shown.display(), detail)
    };
    let nofollow = AtFlags::SYMLINK_NOFOLLOW;
    // Its folder missing, or not opened (a link planted in its place): its restore
    // failed, and was reported.
    let to_dir = open_cached(t, acc, &l.to_dir, to_dir_cache).map_err(|_| not_restored())?;
    let file = match statat(to_dir, l.to_name.as_slice(), nofollow) {
        Ok(st)
            if FileType::from_raw_mode(st.st_mode).is_file()
                && st.st_size as u64 == l.size
                && (st.st_mtime, st.st_mtime_nsec as u32) == (l.mtime.secs, l.mtime.nanos) =>
        {
            st
        }
        Ok(_) => {
            return Err(Error::conflict(
                shown.display(),
                format!(
                    "hard link to {}, which is another file in the target: not linked",
                    to_shown().display()
                ),
            ))
        }
        Err(Errno::NOENT) => return Err(not_restored()),
        Err(e) => return Err(Error::io(to_shown(), e.into())),
    };
    let dir = open_cached(t, acc, &l.dir, dir_cache).map_err(|e| Error::io(shown, e))?;
    match rustix::fs::linkat(
        to_dir,
        l.to_name.as_slice(),
        dir,
        l.name.as_slice(),
        AtFlags::empty(),
    ) {
        Ok(()) => Ok(true),
        Err(Errno::EXIST) => match statat(dir, l.name.as_slice(), nofollow) {
            Ok(st) if (st.st_dev, st.st_ino) == (file.st_dev, file.st_ino) => Ok(false),
            _ => Err(Error::conflict(
                shown.display(),
                "already exists: not overwritten",
            )),
        },
        Err(e) => Err(Error::io(shown, e.into())),
    }
}

/// Dovecot's `dovecot-keywords`: `<index> <name>` per line; index 0 is the letter `a`.
const KEYWORDS: &[u8] = b"dovecot-keywords";

fn parse_keywords(data: &[u8]) -> Vec<(u8, Vec<u8>)> {
    data.split(|&c| c == b'\n')
        .filter_map(|line| {
            let sp = line.iter().position(|&c| c == b' ')?;
            let i: u8 = std::str::from_utf8(&line[..sp]).ok()?.parse().ok()?;
            (i < 26).then(|| (i, line[sp + 1..].to_vec()))
        })
        .collect()
}

/// Snapshot keyword letter index -> the target folder's letter index.
type LetterMap = [Option<u8>; 26];

/// For single messages: gives the keyword letters of the folder's messages their meaning
/// in the target folder. Without a `dovecot-keywords` there, the snapshot's is written;
/// with one, the letters are mapped to its letters for the same names (the map returned,
/// applied by [`renamed`]), and the names it lacks are added to it (a letter means
/// different keywords in different folders).
fn keywords_for(t: &MaildirTarget, folder: &FolderDirs, info: &FolderInfo) -> Option<LetterMap> {
    let failures = info.failures;
    let uses = (info.entries.iter()).any(|e| e.flags().iter().any(u8::is_ascii_lowercase));
    let file = info.node.files.iter().find(|f| f.name == KEYWORDS)?;
    if !uses {
        return None;
    }
    let item = folder.shown(None, KEYWORDS).display().to_string();
    let ours = match info.file(KEYWORDS)? {
        Ok(d) => d,
        Err(e) => {
            failures.add(item, e);
            return None;
        }
    };
    let theirs = match read_at(folder.dir.as_fd(), KEYWORDS) {
        Ok(d) => d,
        Err(e) if e.kind() == ErrorKind::NotFound => {
            if let Err(e) = write_folder_file(t, folder, file, &ours) {
                failures.add(item, e);
            }
            return None;
        }
        Err(e) => {
            failures.add(item, e);
            return None;
        }
    };
    let ours = parse_keywords(&ours);
    let mut known = parse_keywords(&theirs);
    let mut added = Vec::new();
    let mut map: LetterMap = [None; 26];
    for (i, name) in &ours {
        let to = match known.iter().find(|(_, n)| n == name) {
            Some((j, _)) => Some(*j),
            None => (0..26u8)
                .find(|j| !known.iter().any(|(k, _)| k == j))
                .inspect(|&j| {
                    known.push((j, name.clone()));
                    added.push((j, name.clone()));
                }),
        };
        if to.is_none() {
            failures.add(
                &*item,
                format!(
                    "no letter left for keyword {:?}",
                    String::from_utf8_lossy(name)
                ),
            );
        }
        map[*i as usize] = to;
    }
    if !added.is_empty() {
        let mut data = theirs.clone();
        if !data.is_empty() && !data.ends_with(b"\n") {
            data.push(b'\n');
        }
        for (j, name) in &added {
            data.extend_from_slice(format!("{j} ").as_bytes());
            data.extend_from_slice(name);
            data.push(b'\n');
        }
        if let Err(e) = replace_file(folder, KEYWORDS, &data) {
            failures.add(item, e);
            return None;
        }
    }
    Some(map)
}

/// A message's file name with its keyword letters mapped through `map`
/// ([`keywords_for`]); `None` when it has none.
fn renamed(name: &[u8], map: &LetterMap) -> Option<Vec<u8>> {
    let (key, info) = maildir::split_name(name);
    if !info.iter().any(u8::is_ascii_lowercase) {
        return None;
    }
    let mut flags: Vec<u8> = info
        .iter()
        .filter_map(|&c| match c {
            b'a'..=b'z' => map[(c - b'a') as usize].map(|j| b'a' + j),
            c => Some(c),
        })
        .collect();
    flags.sort_unstable();
    flags.dedup();
    let sep = &name[key.len()..name.len() - info.len()];
    let mut out = key.to_vec();
    out.extend_from_slice(sep);
    out.extend_from_slice(&flags);
    Some(out)
}

/// Replaces a folder file of the target (keeping its owner and mode): a temporary in
/// `tmp/` renamed over it.
fn replace_file(folder: &FolderDirs, name: &[u8], data: &[u8]) -> std::io::Result<()> {
    let st = rustix::fs::statat(&folder.dir, name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW)?;
    through_tmp(
        folder.dir.as_fd(),
        folder.plain,
        data,
        |f| {
            let _ = std::os::unix::fs::fchown(f, Some(st.st_uid), Some(st.st_gid));
            Ok(rustix::fs::fchmod(
                f,
                Mode::from_raw_mode(st.st_mode & 0o7777),
            )?)
        },
        |tmp_dir, tmp| Ok(rustix::fs::renameat(tmp_dir, tmp, &folder.dir, name)?),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 10, item 1: owners map by recorded name (as tar does) unless numbers are
    /// asked for; only root sets owners at all.
    #[test]
    fn owners_map_by_name_or_number() {
        let names = OwnerNames {
            users: vec![(1234, "nobody".into()), (7, "no-such-user-here".into())],
            groups: vec![(1234, "nogroup".into())],
        };
        let by_name = OwnerMap::new(RestoreOwners::ByName, &names);
        let numeric = OwnerMap::new(RestoreOwners::Numeric, &names);
        let fixed = OwnerMap::new(RestoreOwners::Fixed { uid: 1, gid: 2 }, &names);
        if !by_name.root {
            assert_eq!(by_name.get(1234, 1234), None);
            return;
        }
        assert_eq!(by_name.get(1234, 1234), Some((65534, 65534)));
        assert_eq!(
            by_name.get(7, 8),
            Some((7, 8)),
            "unknown names keep the number"
        );
        assert_eq!(numeric.get(1234, 1234), Some((1234, 1234)));
        assert_eq!(fixed.get(1234, NO_OWNER), Some((1, 2)));
        assert_eq!(by_name.get(NO_OWNER, NO_OWNER), None, "not recorded (v1)");
        assert!(matches!(
            RestoreOwners::chown("nobody:nogroup"),
            Ok(RestoreOwners::Fixed {
                uid: 65534,
                gid: 65534
            })
        ));
        assert!(matches!(
            RestoreOwners::chown("5:6"),
            Ok(RestoreOwners::Fixed { uid: 5, gid: 6 })
        ));
        assert!(RestoreOwners::chown("no-such-user-here:x").is_err());
        assert!(RestoreOwners::chown("nobody").is_err());
    }

    /// Without root no owner is set; one other than the user's own (recorded, or given
    /// with `--chown`) is noted once, for the report's warning.
    #[test]
    fn owners_not_given_without_root_are_noted() {
        let names = OwnerNames {
            users: vec![],
            groups: vec![],
        };
        let not_root = |policy| {
            let mut m = OwnerMap::new(policy, &names);
            m.root = false;
            m.me = (1000, 1000);
            m
        };
        let own = not_root(RestoreOwners::ByName);
        assert_eq!(own.get(1000, 1000), None);
        assert_eq!(own.get(NO_OWNER, NO_OWNER), None);
        assert!(!own.not_given.load(Relaxed), "nothing to give");
        assert_eq!(own.get(0, 0), None);
        assert!(own.not_given.load(Relaxed));
        let fixed = not_root(RestoreOwners::Fixed { uid: 1, gid: 2 });
        assert_eq!(fixed.get(NO_OWNER, NO_OWNER), None);
        assert!(fixed.not_given.load(Relaxed), "--chown to another user");
    }

    #[test]
    fn keyword_files_parse() {
        assert_eq!(
            parse_keywords(b"0 $Label1\n1 $Forwarded\nbad\n30 x\n"),
            vec![(0, b"$Label1".to_vec()), (1, b"$Forwarded".to_vec())]
        );
    }
}
