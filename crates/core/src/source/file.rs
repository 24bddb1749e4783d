//! Files and directory trees as a [`Source`] (`file:PATH...`): mail databases of any kind
//! (Domino NSF, Outlook PST, Exchange EDB, SQL dumps, search indexes), kept as files
//! (path, bytes, mode, owner, mtime).
//!
//! Each PATH is one account, named by its absolute path; each directory below it is a
//! folder (the PATH itself is `.`, a subdirectory `a/b` is `a/b`, its `dir` the relative
//! path); a directory's regular files are its folder files, stored as
//! [`FileData::Large`]: read in bounded windows, cut into page-sized content-defined
//! chunks in parallel, the chunk ids in content lists, so that a database with a tenth of
//! its pages rewritten stores little more than those pages. A file whose size, mtime and
//! inode are those the parent snapshot recorded is not read again. A PATH that is a file
//! is an account of its directory holding just that file.
//!
//! `--include` / `--exclude` globs ([`Filter`]) choose files (and exclude directories).
//! Symbolic links are kept as links, never followed; sockets, FIFOs and devices are
//! reported, not backed up. Each file's device, inode and link count are recorded, so
//! that hard links within a PATH are known. `restore --target dir:DIR` writes the tree
//! back below DIR (`crate::dest::maildir`, plain), sparse files sparse, hard links as
//! hard links.

use super::walk::{self, Dir, FileType};
use super::RunOptions;
use super::{Account, AccountListing, Failures, FileData, FileMeta, Folder, FolderFile};
use super::{FolderWriter, Parallelism, Source};
use crate::error::{Error, Result};
use crate::repo::tree::{DirEntry, FileEntry, Timestamp};
use globset::{Glob, GlobSet, GlobSetBuilder};
use rayon::prelude::*;
use std::collections::{HashMap, HashSet};
use std::ffi::OsString;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// What to back up and how.
#[derive(Clone, Debug)]
pub struct FileOptions {
    /// Files and directory trees (relative paths are taken from the current directory).
    pub paths: Vec<PathBuf>,
    /// Globs of files to back up (none: every file).
    pub include: Vec<String>,
    /// Globs of files and directories to leave out.
    pub exclude: Vec<String>,
    /// Worker threads; 0 means one per core.
    pub jobs: usize,
    /// How many levels of directories below each PATH are folders: `None` every level;
    /// `Some(0)` the PATH's own files only, `Some(1)` those of its subdirectories too (a
    /// mail store's own files, beside its accounts' directories).
    pub depth: Option<usize>,
    /// Where to read instead: (a directory, the directory holding the same files) — a
    /// filesystem snapshot's root for the live filesystem's
    /// ([`super::fs_snapshot::FsSnapshot`]), both as `canonicalize` gives them. A path
    /// below the first is read below the second, and recorded under its own name: the
    /// snapshot is as if taken from the live paths (accounts, the parent snapshot).
    pub read_from: Vec<(PathBuf, PathBuf)>,
    pub run: RunOptions,
}

/// Which paths a backup keeps. Globs (`globset` syntax) are matched against the whole
/// absolute path and against the file name, so `*.nsf` matches a name anywhere and
/// `/srv/db/**` a subtree.
#[derive(Clone, Debug, Default)]
pub struct Filter {
    /// Files kept (none: every file). Directories are always descended.
    include: Option<GlobSet>,
    /// Files and directories left out (an excluded directory is not descended).
    exclude: Option<GlobSet>,
}

impl Filter {
    /// A filter from `--include` and `--exclude` globs; a glob that does not parse is an
    /// [`Error::InvalidInput`] naming it.
    pub fn new(include: &[String], exclude: &[String]) -> Result<Filter> {
        let set =
            |globs: &[String], flag: &str| -> Result<Option<GlobSet>> {
                if globs.is_empty() {
                    return Ok(None);
                }
                let mut b = GlobSetBuilder::new();
                for g in globs {
                    b.add(Glob::new(g).map_err(|e| {
                        Error::InvalidInput(format!("{flag} {g:?}: not a glob: {e}"))
                    })?);
                }
                b.build()
                    .map(Some)
                    .map_err(|e| Error::InvalidInput(format!("{flag}: {e}")))
            };
        Ok(Filter {
            include: set(include, "--include")?,
            exclude: set(exclude, "--exclude")?,
        })
    }

    fn matches(set: &GlobSet, path: &Path) -> bool {
        set.is_match(path) || path.file_name().is_some_and(|n| set.is_match(n))
    }

    /// Whether a file or directory is left out.
    pub fn excluded(&self, path: &Path) -> bool {
        (self.exclude.as_ref()).is_some_and(|s| Self::matches(s, path))
    }

    /// Whether a file is backed up.
    pub fn included(&self, path: &Path) -> bool {
        !self.excluded(path) && self.include.as_ref().is_none_or(|s| Self::matches(s, path))
    }
}

/// Files and directory trees as a [`Source`].
#[derive(Debug)]
pub struct FileSource {
    roots: Vec<Root>,
    filter: Filter,
    jobs: usize,
    /// [`FileOptions::depth`].
    depth: Option<usize>,
    /// The entries of the hard-linked files (`nlink` > 1) this run read or kept, by
    /// device and inode, with how many of their names are still to come: a file's other
    /// names take its content instead of reading it again; an entry is dropped once all
    /// its names are in (memory stays with the files whose names are still ahead).
    linked: Mutex<Linked>,
}

/// A hard-linked file's entry and how many of its names are still to come, by (device,
/// inode).
type Linked = HashMap<(u64, u64), (FileEntry, u32)>;

/// One PATH: a directory, or a file (then its directory, holding only it).
#[derive(Clone, Debug)]
struct Root {
    /// The PATH as given, made absolute: the account's name.
    path: PathBuf,
    /// The directory backed up.
    dir: PathBuf,
    /// Where it is read: `dir`, or the same directory in a filesystem snapshot (paths
    /// are shown, filtered and recorded as below `dir` all the same).
    read: PathBuf,
    /// The one file of `dir` backed up, when PATH is a file.
    only: Option<OsString>,
}

impl FileSource {
    /// Checks the paths (each must exist and be a directory or a regular file) and the
    /// globs.
    pub fn new(opts: &FileOptions) -> Result<FileSource> {
        if opts.paths.is_empty() {
            return Err(Error::InvalidInput("file: no path to back up".into()));
        }
        let mut roots: Vec<Root> = Vec::new();
        for p in &opts.paths {
            let path = std::path::absolute(p).map_err(|e| Error::io(p, e))?;
            let path = PathBuf::from(OsString::from_vec(
                normalize(path.as_os_str().as_bytes()).to_vec(),
            ));
            let meta = std::fs::symlink_metadata(&path).map_err(|e| Error::io(&path, e))?;
            let root = if meta.is_dir() {
                Root {
                    dir: path.clone(),
                    read: path.clone(),
                    path,
                    only: None,
                }
            } else if meta.is_file() {
                let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
                    return Err(Error::InvalidInput(format!(
                        "{}: not a file or directory to back up",
                        path.display()
                    )));
                };
                Root {
                    dir: dir.to_path_buf(),
                    read: dir.to_path_buf(),
                    only: Some(name.to_os_string()),
                    path,
                }
            } else {
                return Err(Error::InvalidInput(format!(
                    "{}: a symbolic link or special file: give the file or directory itself",
                    path.display()
                )));
            };
            let mut root = root;
            if let Some(read) = read_from(&opts.read_from, &root.dir)? {
                root.read = read;
            }
            if !roots.iter().any(|r| r.path == root.path) {
                roots.push(root);
            }
        }
        Ok(FileSource {
            roots,
            filter: Filter::new(&opts.include, &opts.exclude)?,
            jobs: opts.jobs,
            depth: opts.depth,
            linked: Mutex::default(),
        })
    }

    fn root(&self, account: &Account) -> Result<&Root> {
        (self.roots.iter())
            .find(|r| r.path == account.path)
            .ok_or_else(|| {
                Error::InvalidInput(format!("{}: not a path of this backup", account.name))
            })
    }
}

/// Where `dir` is read given [`FileOptions::read_from`]: `None` if as it is.
fn read_from(views: &[(PathBuf, PathBuf)], dir: &Path) -> Result<Option<PathBuf>> {
    if views.is_empty() {
        return Ok(None);
    }
    let real = std::fs::canonicalize(dir).map_err(|e| Error::io(dir, e))?;
    // The innermost filesystem holding it (a subvolume nested in another).
    let innermost = (views.iter())
        .filter_map(|(live, view)| Some((live, view, real.strip_prefix(live).ok()?)))
        .max_by_key(|(live, _, _)| live.as_os_str().len());
    if let Some((_, view, rel)) = innermost {
        return Ok(Some(view.join(rel)));
    }
    Err(Error::InvalidInput(format!(
        "{}: not on the filesystem snapshotted for the backup",
        dir.display()
    )))
}

/// `/a//b/./c/` as `/a/b/c` (`..` is kept: it may cross a symbolic link).
fn normalize(path: &[u8]) -> Vec<u8> {
    let parts: Vec<&[u8]> = (path.split(|&c| c == b'/'))
        .filter(|c| !c.is_empty() && *c != b".")
        .collect();
    let mut out = Vec::with_capacity(path.len());
    for p in parts {
        out.push(b'/');
        out.extend_from_slice(p);
    }
    if out.is_empty() {
        out.push(b'/');
    }
    out
}

/// A directory's owner and mode, as recorded.
fn dir_entry(name: &[u8], m: &FileMeta) -> DirEntry {
    DirEntry {
        name: name.to_vec(),
        mode: m.mode,
        uid: m.uid,
        gid: m.gid,
    }
}

/// The folders below `dir` (`rel`: its path below the root; the root itself included),
/// parents first, `depth` levels down (`None`: all); excluded directories are not
/// descended, unreadable ones reported. Each
/// subdirectory is opened relative to `dir` ([`Dir::sub`]): one that is a symbolic link,
/// or was swapped for one since it was listed, is reported, never followed.
fn walk(
    dir: &Dir,
    (rel, depth): (&[u8], Option<usize>),
    filter: &Filter,
    out: &mut Vec<Folder>,
    failures: &Failures,
) {
    out.push(Folder {
        name: if rel.is_empty() {
            ".".into()
        } else {
            String::from_utf8_lossy(rel).into_owned()
        },
        dir: rel.to_vec(),
        path: dir.path().to_path_buf(),
    });
    if depth == Some(0) {
        return;
    }
    let entries = match dir.entries() {
        Ok(e) => e,
        Err(e) => return failures.fail(dir.path().display().to_string(), e),
    };
    let mut subdirs: Vec<Vec<u8>> = Vec::new();
    for (name, t) in entries {
        let t = match t {
            FileType::Unknown => match dir.stat(&name) {
                Ok(st) => walk::file_type(&st),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => {
                    failures.fail(dir.join(&name).display().to_string(), e);
                    continue;
                }
            },
            t => t,
        };
        if t == FileType::Directory {
            subdirs.push(name);
        }
    }
    subdirs.sort();
    for name in subdirs {
        let path = dir.join(&name);
        if filter.excluded(&path) {
            continue;
        }
        let sub = match dir.sub(&name) {
            Ok(d) => d,
            // Gone since the listing: deleted meanwhile.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => {
                failures.fail(path.display().to_string(), e);
                continue;
            }
        };
        let mut rel = rel.to_vec();
        if !rel.is_empty() {
            rel.push(b'/');
        }
        rel.extend_from_slice(&name);
        walk(&sub, (&rel, depth.map(|d| d - 1)), filter, out, failures);
    }
}

impl Source for FileSource {
    type Session = ();

    fn label(&self) -> String {
        let paths: Vec<String> = (self.roots.iter())
            .map(|r| r.path.display().to_string())
            .collect();
        format!("file:{}", paths.join(" file:"))
    }

    fn parallelism(&self) -> Parallelism {
        Parallelism::Pool { jobs: self.jobs }
    }

    fn accounts(&self) -> Result<Vec<Account>> {
        Ok((self.roots.iter())
            .map(|r| Account {
                name: r.path.display().to_string(),
                rel_path: r.dir.as_os_str().as_bytes()[1..].to_vec(),
                path: r.path.clone(),
            })
            .collect())
    }

    fn open(&self, _account: &Account) -> Result<()> {
        Ok(())
    }

    fn folders(
        &self,
        account: &Account,
        _session: &mut (),
        failures: &Failures,
    ) -> Result<AccountListing> {
        let root = self.root(account)?;
        // The directories above the root's, from the top, with their owner and mode (a
        // restore recreates them as they were).
        let mut dirs = Vec::new();
        let mut at = PathBuf::from("/");
        let parts: Vec<&[u8]> = account.rel_path.split(|&c| c == b'/').collect();
        for p in parts.iter().filter(|p| !p.is_empty()) {
            at.push(std::ffi::OsStr::from_bytes(p));
            let m = std::fs::symlink_metadata(&at).map_err(|e| Error::io(&at, e))?;
            dirs.push(dir_entry(p, &FileMeta::of(&m)));
        }
        let mut folders = Vec::new();
        if root.only.is_some() {
            folders.push(Folder {
                name: ".".into(),
                dir: Vec::new(),
                path: root.dir.clone(),
            });
        } else {
            let dir = Dir::open(&root.read).map_err(|e| Error::io(&root.dir, e))?;
            let dir = dir.shown_as(&root.dir);
            walk(
                &dir,
                (b"", self.depth),
                &self.filter,
                &mut folders,
                failures,
            );
        }
        Ok(AccountListing {
            folders,
            dirs,
            subscriptions: None,
        })
    }

    fn backup_folder(
        &self,
        _session: &mut (),
        account: &Account,
        folder: &Folder,
        out: &mut FolderWriter<'_>,
    ) -> Result<()> {
        let root = self.root(account)?;
        // Opened from the root one directory at a time, none through a link: a directory
        // swapped for one since the walk listed it is refused.
        let dir = Dir::open_below_as(&root.read, &root.dir, &folder.dir).map_err(|(p, e)| {
            let at = (p != folder.path).then(|| format!("{}: ", p.display()));
            Error::InvalidInput(format!("{}{e}", at.unwrap_or_default()))
        })?;
        let dir = Arc::new(dir);
        let m = FileMeta::of_stat(&dir.fstat().map_err(|e| Error::io(dir.path(), e))?);
        // The directory itself: the root's owner and mode are recorded with the account's
        // directories; every directory's mtime with its folder.
        if !folder.dir.is_empty() {
            out.dir(dir_entry(b"", &m));
        }
        if root.only.is_none() {
            out.dir_mtime(m.mtime);
        }
        let mut names: Vec<Vec<u8>> = match &root.only {
            Some(name) => vec![name.clone().into_vec()],
            None => (dir.entries().map_err(|e| Error::io(dir.path(), e))?)
                .into_iter()
                .map(|(name, _)| name)
                .collect(),
        };
        names.sort();
        let mut to_read = Vec::new();
        // The hard-linked files of `to_read`, and their names to take after them.
        let (mut reading, mut later) = (HashSet::new(), Vec::new());
        for name in names {
            let path = dir.join(&name);
            let meta = match dir.stat(&name) {
                Ok(m) => m,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => {
                    out.fail(path.display().to_string(), e);
                    continue;
                }
            };
            if root.only.is_none() && !self.filter.included(&path) && !is_dir(&meta) {
                continue;
            }
            let Some(data) = entry_data(out, &dir, &name, &path, &meta) else {
                continue;
            };
            let meta = FileMeta::of_stat(&meta);
            match out.parent_file(&name) {
                Some(p) if unchanged_file(p, &data, &meta, out.parent_started()) => {
                    // Owner, mode and links as they are now: `ln a b` changes a's link
                    // count, not its mtime.
                    let mut e = p.clone();
                    (e.mode, e.uid, e.gid) = (meta.mode, meta.uid, meta.gid);
                    (e.dev, e.nlink) = (meta.dev, meta.nlink);
                    self.remember(&e);
                    out.unchanged_file(e);
                }
                _ if meta.nlink > 1 && matches!(data, FileData::Large { .. }) => {
                    // Another name of a file this run read or kept: its content, not read
                    // again; one whose first name in this folder is still to be read
                    // waits for it.
                    if let Some(e) = self.read_as(&meta, &name) {
                        out.linked_file(e);
                    } else if !reading.insert((meta.dev, meta.inode)) {
                        later.push((name, data, meta));
                    } else {
                        to_read.push((name, data, meta));
                    }
                }
                _ => to_read.push((name, data, meta)),
            }
        }
        out.expect(to_read.len() as u64);
        self.store_files(out, to_read)?;
        // A name whose first name was gone or failed reads the file itself.
        let mut left = Vec::new();
        for (name, data, meta) in later {
            match self.read_as(&meta, &name) {
                Some(e) => out.linked_file(e),
                None => left.push((name, data, meta)),
            }
        }
        out.expect(left.len() as u64);
        self.store_files(out, left)
    }
}

/// Whether the parent's entry `p` is the file found now (`data`, `meta`): a link with the
/// same target and mtime; a file with the same size, mtime and inode, its mtime older than
/// the start of the parent's backup by the margin (not written again in the same clock
/// tick: [`super::unchanged::file_proven`]). A directory is listed every time: its mtime
/// says nothing of files written in place (a database is), and each file is stat'ed
/// anyway.
fn unchanged_file(
    p: &FileEntry,
    data: &FileData,
    meta: &FileMeta,
    started: Option<Timestamp>,
) -> bool {
    match data {
        FileData::Link(target) => p.link.as_ref() == Some(target) && p.mtime == meta.mtime,
        _ => {
            p.link.is_none()
                && (p.size, p.mtime, p.inode) == (meta.size, meta.mtime, meta.inode)
                && super::unchanged::file_proven(p.mtime, started)
        }
    }
}

/// Whether a stat is a directory's.
fn is_dir(meta: &walk::Stat) -> bool {
    walk::file_type(meta) == FileType::Directory
}

/// What a directory entry of a `file:` folder holds, by its type: a regular file (read
/// later, in parallel) or a symbolic link (the link itself, never what it points to).
/// `None` for a directory (a folder of its own), one gone, or one not backed up (a
/// socket, FIFO or device: reported).
fn entry_data(
    out: &FolderWriter<'_>,
    dir: &Arc<Dir>,
    name: &[u8],
    path: &Path,
    meta: &walk::Stat,
) -> Option<FileData> {
    let ft = walk::file_type(meta);
    if ft == FileType::Directory {
        None // a folder of its own
    } else if ft == FileType::RegularFile {
        Some(FileData::Large {
            dir: dir.clone(),
            name: name.to_vec(),
        })
    } else if ft == FileType::Symlink {
        // The link itself, never what it points to.
        match dir.read_link(name) {
            Ok(target) => Some(FileData::Link(target)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => {
                out.fail(path.display().to_string(), e);
                None
            }
        }
    } else {
        let what = "a socket, FIFO or device: not backed up";
        out.fail(path.display().to_string(), what);
        None
    }
}

impl FileSource {
    /// Stores `files` in parallel and keeps their entries.
    fn store_files(
        &self,
        out: &mut FolderWriter<'_>,
        files: Vec<(Vec<u8>, FileData, FileMeta)>,
    ) -> Result<()> {
        let w: &FolderWriter = out;
        let stored = (files.into_par_iter())
            .map(|(name, data, meta)| {
                w.store_file(FolderFile {
                    name,
                    data,
                    meta: Some(meta),
                })
            })
            .collect::<Result<Vec<_>>>()?;
        for e in stored.into_iter().flatten() {
            self.remember(&e);
            out.keep_file(e);
        }
        Ok(())
    }

    /// Keeps the entry of a hard-linked file (read, or unchanged since the parent) for
    /// its other names, or counts one more of its names in.
    fn remember(&self, e: &FileEntry) {
        use std::collections::hash_map::Entry;
        let Some(key) = e.hard_link_key() else {
            return;
        };
        let mut linked = crate::repo::lock(&self.linked);
        match linked.entry(key) {
            Entry::Vacant(v) => {
                v.insert((e.clone(), e.nlink - 1));
            }
            // Another of its names, read or kept under its own.
            Entry::Occupied(mut o) => {
                o.get_mut().1 = o.get().1.saturating_sub(1);
                if o.get().1 == 0 {
                    o.remove();
                }
            }
        }
    }

    /// The entry of a file this run stored under another name, as the file `name` with
    /// the `stat` `meta` (`None` unless it is the same file, unchanged since).
    fn read_as(&self, meta: &FileMeta, name: &[u8]) -> Option<FileEntry> {
        let mut linked = crate::repo::lock(&self.linked);
        let key = (meta.dev, meta.inode);
        let (e, left) = linked.get_mut(&key)?;
        // Changed since (or while) it was read: read again.
        if (e.size, e.mtime) != (meta.size, meta.mtime) {
            return None;
        }
        let named = FileEntry {
            name: name.to_vec(),
            mode: meta.mode,
            uid: meta.uid,
            gid: meta.gid,
            nlink: meta.nlink,
            ..e.clone()
        };
        *left = left.saturating_sub(1);
        if *left == 0 {
            linked.remove(&key);
        }
        Some(named)
    }
}

/// Generators of database-like test data, for tests and benchmarks.
#[doc(hidden)]
pub mod testdata {
    /// A database page.
    pub const PAGE: usize = 4096;

    /// A small fast generator (splitmix64), so that tests and benchmarks make the same
    /// bytes everywhere.
    pub struct Rng(pub u64);

    impl Rng {
        pub fn next_u64(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        }
    }

    /// One page: a header, then either text-like records (compressible) or random bytes
    /// (a third of the pages: compressed attachments, encrypted fields).
    pub fn fill_page(page: &mut [u8], rng: &mut Rng) {
        const WORDS: &[&str] = &[
            "From: ",
            "Subject: ",
            "Re: ",
            "meeting",
            "invoice",
            "quarterly",
            "report",
            "attached",
            "please",
            "review",
            "the",
            "and",
            "for",
            "with",
            "regards",
            "example.org",
            "notes",
            "calendar",
            "<br>",
            "</td>",
            "2026-11-24",
            "\r\n",
        ];
        let kind = rng.next_u64();
        page[..8].copy_from_slice(&kind.to_le_bytes());
        if kind.is_multiple_of(3) {
            for b in page[8..].chunks_mut(8) {
                let r = rng.next_u64().to_le_bytes();
                b.copy_from_slice(&r[..b.len()]);
            }
        } else {
            let mut at = 8;
            while at < page.len() {
                let w = WORDS[(rng.next_u64() % WORDS.len() as u64) as usize].as_bytes();
                let n = w.len().min(page.len() - at);
                page[at..at + n].copy_from_slice(&w[..n]);
                at += n;
                if at < page.len() {
                    page[at] = b' ';
                    at += 1;
                }
            }
        }
    }

    /// A database-like file of `bytes` bytes (whole pages), made from `seed`.
    pub fn database_like(bytes: usize, seed: u64) -> Vec<u8> {
        let mut rng = Rng(seed);
        let mut out = vec![0u8; bytes / PAGE * PAGE];
        for page in out.chunks_mut(PAGE) {
            fill_page(page, &mut rng);
        }
        out
    }

    /// `db` with `share` of its pages rewritten (spread at random) and `insert` new bytes
    /// put in at a page boundary near the start (a tenth of the way in).
    pub fn rewrite_database(db: &[u8], share: f64, insert: usize, seed: u64) -> Vec<u8> {
        let mut rng = Rng(seed);
        let mut out = db.to_vec();
        let pages = out.len() / PAGE;
        let n = (pages as f64 * share) as usize;
        for _ in 0..n {
            let p = (rng.next_u64() % pages.max(1) as u64) as usize;
            fill_page(&mut out[p * PAGE..(p + 1) * PAGE], &mut rng);
        }
        let at = pages / 10 * PAGE;
        let block = database_like(insert, seed ^ 0x5eed);
        out.splice(at..at, block);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::testdata::{database_like, rewrite_database};
    use super::*;
    use crate::dest::maildir::MaildirTarget;
    use crate::dest::owners::RestoreOwners;
    use crate::ops::backup::BackupReport;
    use crate::ops::restore::run;
    use crate::repo::memory_repository as repository;
    use crate::repo::Repository;
    use crate::report::NoProgress;
    use crate::restore::{Request, RestoreReport, Selection};
    use std::os::unix::fs::MetadataExt;
    use std::os::unix::fs::PermissionsExt;
    use std::sync::Arc;

    fn backup(
        repo: &mut Repository,
        paths: &[&Path],
        include: &[&str],
        exclude: &[&str],
        t: i64,
    ) -> BackupReport {
        let opts = FileOptions {
            paths: paths.iter().map(|p| p.to_path_buf()).collect(),
            include: include.iter().map(|s| s.to_string()).collect(),
            exclude: exclude.iter().map(|s| s.to_string()).collect(),
            jobs: 2,
            depth: None,
            read_from: Vec::new(),
            run: RunOptions::new("h"),
        };
        let source = FileSource::new(&opts).unwrap();
        crate::ops::backup::run(repo, &source, &opts.run, (t, 0), &NoProgress).unwrap()
    }

    /// Backups of files below `root` read the clock 10 s late, as a backup run a while
    /// after the files were written: a file written in the second before a backup's look
    /// is read again by the next (docs/format.md, *Folders taken unchanged*).
    fn later(root: &Path) -> crate::source::unchanged::hook::Guard {
        use crate::source::unchanged::hook::{set, Look};
        set(root, |_, l| {
            if let Look::Clock(at) = l {
                at.secs += 10;
            }
        })
    }

    fn restore(repo: &Repository, snapshot: &str, to: &Path) -> RestoreReport {
        let sel = Selection {
            snapshot: snapshot.into(),
            ..Default::default()
        };
        let open = |o: crate::restore::Opening<'_>| {
            MaildirTarget::plain(to, RestoreOwners::ByName, o.owners, 2)
        };
        run(repo, Request::Selection(sel.clone()), &NoProgress, open)
            .unwrap()
            .0
    }

    /// Where a restore to `out` puts `path`.
    fn restored(out: &Path, path: &Path) -> PathBuf {
        out.join(path.strip_prefix("/").unwrap())
    }

    /// The large-file case, scaled to 48 MiB: a database-like file backed up, then
    /// 10% of its pages rewritten and 64 KiB inserted near the start and backed up again.
    /// The second backup adds well under what the first stored (restic's 1 MiB chunks add
    /// about as much again) and reads the file again; both snapshots restore byte-exact,
    /// through the content lists, in pieces; `check` finds nothing wrong; and after the
    /// first snapshot is forgotten and pruned the second still restores (prune keeps the
    /// content lists and the chunks they name).
    #[test]
    fn rewritten_database_pages_add_little_and_restore_exactly() {
        let src = tempfile::tempdir().unwrap();
        let db = src.path().join("names.nsf");
        let v1 = database_like(48 << 20, 1);
        std::fs::write(&db, &v1).unwrap();
        let mut repo = repository();
        let first = backup(&mut repo, &[src.path()], &[], &[], 1_000);
        assert!(first.failures.is_empty(), "{:?}", first.failures);
        assert_eq!((first.items_total, first.items_new), (1, 1));
        assert_eq!(first.bytes_read, v1.len() as u64);
        let v2 = rewrite_database(&v1, 0.10, 64 << 10, 2);
        std::fs::write(&db, &v2).unwrap();
        let second = backup(&mut repo, &[src.path()], &[], &[], 2_000);
        assert_eq!(
            second.bytes_read,
            v2.len() as u64,
            "the changed file is read again"
        );
        let share = second.bytes_added as f64 / first.bytes_added as f64;
        assert!(share < 0.4, "second backup added {share:.2} of the first");
        for (snap, want) in [(&first.snapshot, &v1), (&second.snapshot, &v2)] {
            let out = tempfile::tempdir().unwrap();
            let rep = restore(&repo, snap, out.path());
            assert!(rep.failures.is_empty(), "{:?}", rep.failures);
            assert_eq!(rep.files_restored, 1);
            let got = std::fs::read(restored(out.path(), &db)).unwrap();
            assert!(got == *want, "snapshot {snap} restored other bytes");
        }
        let check = crate::ops::check::check(&repo, &Default::default()).unwrap();
        assert!(check.errors.is_empty(), "{:?}", check.errors);
        crate::ops::forget::forget(
            &repo,
            &crate::ops::forget::ForgetOptions {
                snapshots: vec![first.snapshot.clone()],
                ..Default::default()
            },
        )
        .unwrap();
        let pruned = crate::ops::prune::prune(
            &mut repo,
            &crate::ops::prune::PruneOptions {
                max_unused: 0.0,
                ..Default::default()
            },
            &NoProgress,
        )
        .unwrap();
        assert!(pruned.blobs_removed > 0, "{pruned:?}");
        let out = tempfile::tempdir().unwrap();
        let rep = restore(&repo, &second.snapshot, out.path());
        assert!(rep.failures.is_empty(), "{:?}", rep.failures);
        assert!(std::fs::read(restored(out.path(), &db)).unwrap() == v2);
        let check = crate::ops::check::check(&repo, &Default::default()).unwrap();
        assert!(check.errors.is_empty(), "{:?}", check.errors);
    }

    /// Symbolic links are kept as links, never followed: relative, absolute (out of the
    /// tree), dangling, to a directory and to `..`. They come back as the same links with
    /// their mtimes, a backup with nothing changed keeps them as unchanged, a restore run
    /// again leaves them, one changed meanwhile is reported and kept, and a Maildir target
    /// makes none (a link in a mail store could lead the mail server out of it). A FIFO
    /// is reported and left out.
    #[test]
    fn symbolic_links_are_kept_and_never_followed() {
        use std::os::unix::fs::symlink;
        let src = tempfile::tempdir().unwrap();
        let root = src.path();
        std::fs::create_dir_all(root.join("data")).unwrap();
        std::fs::write(root.join("data/real.db"), b"pages").unwrap();
        let links: [(&str, &str); 5] = [
            ("data/current", "real.db"),
            ("data/abs", "/etc/passwd"),
            ("data/dangling", "no/such/file"),
            ("data/etc", "/etc"),
            ("data/up", ".."),
        ];
        let old = rustix::fs::Timespec {
            tv_sec: 1_400_000_000,
            tv_nsec: 5,
        };
        for (at, to) in links {
            symlink(to, root.join(at)).unwrap();
            let times = rustix::fs::Timestamps {
                last_access: old,
                last_modification: old,
            };
            let nofollow = rustix::fs::AtFlags::SYMLINK_NOFOLLOW;
            rustix::fs::utimensat(rustix::fs::CWD, root.join(at), &times, nofollow).unwrap();
        }
        let fifo = root.join("data/pipe");
        let fifo_kind = rustix::fs::FileType::Fifo;
        let mode = rustix::fs::Mode::from_raw_mode(0o600);
        rustix::fs::mknodat(rustix::fs::CWD, &fifo, fifo_kind, mode, 0).unwrap();

        let _later = later(root);
        let mut repo = repository();
        let first = backup(&mut repo, &[root], &[], &[], 1_000);
        assert_eq!(
            (first.items_total, first.items_new),
            (7, 6),
            "real.db, five links, the FIFO failed"
        );
        assert_eq!(first.failures.len(), 1, "{:?}", first.failures);
        assert!(first.failures[0].item.ends_with("data/pipe"));
        let out = tempfile::tempdir().unwrap();
        let rep = restore(&repo, "latest", out.path());
        assert!(rep.failures.is_empty(), "{:?}", rep.failures);
        let back = restored(out.path(), root);
        for (at, to) in links {
            let b = back.join(at);
            assert_eq!(std::fs::read_link(&b).unwrap(), Path::new(to), "{at}");
            let m = std::fs::symlink_metadata(&b).unwrap();
            assert_eq!((m.mtime(), m.mtime_nsec()), (1_400_000_000, 5), "{at}");
        }
        assert_eq!(std::fs::read(back.join("data/current")).unwrap(), b"pages");
        assert!(!back.join("data/pipe").exists());

        let second = backup(&mut repo, &[root], &[], &[], 2_000);
        assert_eq!((second.items_unchanged, second.bytes_read), (6, 0));
        let again = restore(&repo, "latest", out.path());
        assert!(again.failures.is_empty(), "{:?}", again.failures);
        // A link changed at the target meanwhile is reported, not replaced.
        std::fs::remove_file(back.join("data/dangling")).unwrap();
        symlink("elsewhere", back.join("data/dangling")).unwrap();
        let again = restore(&repo, "latest", out.path());
        assert_eq!(again.failures.len(), 1, "{:?}", again.failures);
        assert!(again.failures[0].error.contains("another target"));
        assert_eq!(
            std::fs::read_link(back.join("data/dangling")).unwrap(),
            Path::new("elsewhere")
        );

        // Into a Maildir target: the file comes back, the links are reported.
        let out = tempfile::tempdir().unwrap();
        let sel = Selection {
            snapshot: "latest".into(),
            ..Default::default()
        };
        let open = |o: crate::restore::Opening<'_>| {
            MaildirTarget::open(out.path(), RestoreOwners::ByName, o.owners, 2)
        };
        let rep = run(&repo, Request::Selection(sel.clone()), &NoProgress, open)
            .unwrap()
            .0;
        assert_eq!(rep.failures.len(), 5, "{:?}", rep.failures);
        assert!(rep
            .failures
            .iter()
            .all(|f| f.error.contains("only to a dir:")));
        let back = restored(out.path(), root);
        assert_eq!(std::fs::read(back.join("data/real.db")).unwrap(), b"pages");
        assert!(std::fs::symlink_metadata(back.join("data/abs")).is_err());
    }

    /// Hard links within a PATH come back as hard links from a `dir:` restore: `a` and
    /// `sub/b` (a small file) and `big` and `sub/deep/big` (a large one, restored in
    /// pieces) are one file each, `c` (a copy with the same bytes and mtime) stays a file
    /// of its own. Each file is written once and linked, before the directories get their
    /// mtimes. Restored again, the links are there (unchanged, nothing failed); a link
    /// name taken by another file is reported and kept. After `ln a d` and `ln c e` (no
    /// mtime changes, so `a` and `c` are unchanged files for the backup, whose link
    /// counts must be taken anew), the next snapshot restores a, sub/b and d as one file
    /// and c and e as another. A file whose restore failed (its directory a planted
    /// symbolic link) has its links reported, naming it.
    /// A file rewritten in place with the same size, inode and mtime (as a write in the
    /// same second as the parent's backup started leaves it on a filesystem with
    /// whole-second timestamps) is read again: its mtime was not older than the parent's
    /// start by the margin. One older than that, changed the same way, is taken as unchanged, as it
    /// always was (what the rule cannot see: docs/format.md).
    #[test]
    fn a_file_rewritten_in_the_second_of_the_parents_look_is_read_again() {
        use crate::source::unchanged::hook::{set, Look};
        let src = tempfile::tempdir().unwrap();
        let root = src.path().to_path_buf();
        let db = root.join("names.nsf");
        std::fs::write(&db, b"version one\n").unwrap();
        let x = crate::now().0 - 100;
        let whole_second = std::time::UNIX_EPOCH + std::time::Duration::from_secs(x as u64);
        let set_mtime = |t| {
            let f = std::fs::File::options().write(true).open(&db).unwrap();
            f.set_modified(t).unwrap();
        };
        set_mtime(whole_second);
        // The parent starts at x.5, 0.5 s after the file's (whole-second) mtime.
        let clock = std::sync::Arc::new(std::sync::Mutex::new(x));
        let c = clock.clone();
        let _hook = set(&root, move |_, l| {
            if let Look::Clock(at) = l {
                (at.secs, at.nanos) = (*c.lock().unwrap(), 500_000_000);
            }
        });
        let mut repo = repository();
        let first = backup(&mut repo, &[&root], &[], &[], 1_000);
        assert_eq!(first.items_new, 1, "{first:?}");
        std::fs::write(&db, b"version two\n").unwrap();
        set_mtime(whole_second);
        let second = backup(&mut repo, &[&root], &[], &[], 2_000);
        assert_eq!(
            (second.items_new, second.items_unchanged),
            (1, 0),
            "{second:?}"
        );
        let out = tempfile::tempdir().unwrap();
        restore(&repo, "latest", out.path());
        let back = restored(out.path(), &root).join("names.nsf");
        assert_eq!(std::fs::read(back).unwrap(), b"version two\n");
        // Started 10 s after its mtime: proven; the same rewrite is not seen.
        *clock.lock().unwrap() = x + 10;
        let third = backup(&mut repo, &[&root], &[], &[], 3_000);
        assert_eq!(
            (third.items_new, third.items_unchanged),
            (1, 0),
            "{third:?}"
        );
        std::fs::write(&db, b"version 3!!\n").unwrap();
        set_mtime(whole_second);
        let fourth = backup(&mut repo, &[&root], &[], &[], 4_000);
        assert_eq!(
            (fourth.items_new, fourth.items_unchanged),
            (0, 1),
            "{fourth:?}"
        );
    }

    #[test]
    fn hard_links_are_restored_as_hard_links() {
        let src = tempfile::tempdir().unwrap();
        let root = src.path();
        std::fs::create_dir_all(root.join("sub/deep")).unwrap();
        std::fs::create_dir_all(root.join("p")).unwrap();
        std::fs::create_dir_all(root.join("q")).unwrap();
        std::fs::write(root.join("a"), b"one file, two names\n").unwrap();
        std::fs::hard_link(root.join("a"), root.join("sub/b")).unwrap();
        std::fs::copy(root.join("a"), root.join("c")).unwrap();
        let mtime = std::fs::metadata(root.join("a"))
            .unwrap()
            .modified()
            .unwrap();
        let set_mtime = |rel: &str| {
            let f = std::fs::File::options().write(true).open(root.join(rel));
            f.unwrap().set_modified(mtime).unwrap();
        };
        set_mtime("c");
        std::fs::write(root.join("big"), database_like(300 << 10, 3)).unwrap();
        std::fs::hard_link(root.join("big"), root.join("sub/deep/big")).unwrap();
        std::fs::write(root.join("p/one"), b"linked across folders\n").unwrap();
        std::fs::hard_link(root.join("p/one"), root.join("q/two")).unwrap();
        let inode = |p: &Path| {
            let m = std::fs::symlink_metadata(p).unwrap();
            (m.ino(), m.nlink())
        };
        let dir_mtime = |p: &Path| std::fs::metadata(p).unwrap().modified().unwrap();

        let _later = later(root);
        let mut repo = repository();
        let first = backup(&mut repo, &[root], &[], &[], 1_000);
        assert!(first.failures.is_empty(), "{:?}", first.failures);
        assert_eq!(first.items_total, 7);
        // Three names are links; folders read at the same time may each read a file.
        assert_eq!(first.items_new + first.files_linked, 7);
        let out = tempfile::tempdir().unwrap();
        let rep = restore(&repo, "latest", out.path());
        assert!(rep.failures.is_empty(), "{:?}", rep.failures);
        assert_eq!((rep.files_restored, rep.files_linked), (4, 3));
        let back = restored(out.path(), root);
        let (a, b, c) = (back.join("a"), back.join("sub/b"), back.join("c"));
        assert_eq!(inode(&a), (inode(&b).0, 2), "a and sub/b are one file");
        assert_eq!(inode(&c).1, 1, "c is a file of its own");
        assert_ne!(inode(&c).0, inode(&a).0);
        let big = back.join("big");
        assert_eq!(inode(&big), (inode(&back.join("sub/deep/big")).0, 2));
        assert_eq!(
            inode(&back.join("p/one")),
            (inode(&back.join("q/two")).0, 2)
        );
        for rel in ["a", "sub/b", "c", "big", "sub/deep/big"] {
            let (want, got) = (root.join(rel), back.join(rel));
            assert!(std::fs::read(&want).unwrap() == std::fs::read(&got).unwrap());
            assert_eq!(
                std::fs::metadata(&got).unwrap().modified().unwrap(),
                std::fs::metadata(&want).unwrap().modified().unwrap(),
                "{rel}"
            );
        }
        // Links made before the directories got their mtimes.
        for rel in ["", "sub", "sub/deep", "q"] {
            assert_eq!(
                dir_mtime(&back.join(rel)),
                dir_mtime(&root.join(rel)),
                "{rel:?}"
            );
        }

        // Again over itself: the links are there, nothing written, nothing failed.
        let again = restore(&repo, "latest", out.path());
        assert!(again.failures.is_empty(), "{:?}", again.failures);
        assert_eq!(again.files_linked, 0);
        assert_eq!(
            again.files_unchanged, 7,
            "the four files and the three links"
        );
        assert_eq!(again.files_restored, 0);
        assert_eq!(inode(&a), (inode(&b).0, 2));
        // A link name taken by another file: reported, kept.
        std::fs::remove_file(&b).unwrap();
        std::fs::write(&b, b"mine").unwrap();
        let again = restore(&repo, "latest", out.path());
        assert_eq!(again.failures.len(), 1, "{:?}", again.failures);
        assert!(again.failures[0].item.ends_with("sub/b"));
        assert!(again.failures[0]
            .error
            .contains("already exists: not overwritten"));
        assert_eq!(again.failures[0].kind, crate::error::FailureKind::Conflict);
        assert_eq!(std::fs::read(&b).unwrap(), b"mine");

        // New links to files that are unchanged for the backup.
        std::fs::hard_link(root.join("a"), root.join("d")).unwrap();
        std::fs::hard_link(root.join("c"), root.join("e")).unwrap();
        let second = backup(&mut repo, &[root], &[], &[], 2_000);
        assert!(second.failures.is_empty(), "{:?}", second.failures);
        assert_eq!((second.items_total, second.items_unchanged), (9, 7));
        // d and e: new names of files unchanged since the first backup, not read.
        assert_eq!((second.files_linked, second.bytes_read), (2, 0));
        let out = tempfile::tempdir().unwrap();
        let rep = restore(&repo, "latest", out.path());
        assert!(rep.failures.is_empty(), "{:?}", rep.failures);
        assert_eq!((rep.files_restored, rep.files_linked), (4, 5));
        let back = restored(out.path(), root);
        let a = inode(&back.join("a"));
        assert_eq!(a.1, 3);
        assert_eq!(inode(&back.join("sub/b")), a);
        assert_eq!(inode(&back.join("d")), a);
        let c = inode(&back.join("c"));
        assert_eq!((inode(&back.join("e")), c.1), (c, 2));
        assert_ne!(c.0, a.0);

        // The file linked to not restored: its folder's directory is a planted link.
        let out = tempfile::tempdir().unwrap();
        let back = restored(out.path(), root);
        std::fs::create_dir_all(&back).unwrap();
        let elsewhere = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(elsewhere.path(), back.join("p")).unwrap();
        let rep = restore(&repo, "latest", out.path());
        assert_eq!(rep.failures.len(), 2, "{:?}", rep.failures);
        assert!(rep.failures.iter().any(|f| f.item.ends_with(": p")));
        let link = rep.failures.iter().find(|f| f.item.ends_with("q/two"));
        let p_one = back.join("p/one");
        let want = format!("hard link to {}, which was not restored", p_one.display());
        assert!(link.unwrap().error.contains(&want), "{:?}", rep.failures);
        assert!(std::fs::read_dir(elsewhere.path())
            .unwrap()
            .next()
            .is_none());
        assert_eq!(inode(&back.join("sub/b")), inode(&back.join("a")));
    }

    /// A hard-linked file is read once, under its first name: its names in one folder
    /// always, in folders read one after the other too (one worker); each name restores
    /// as a link of the one file.
    #[test]
    fn a_hard_linked_file_is_read_once() {
        let src = tempfile::tempdir().unwrap();
        let root = src.path();
        std::fs::create_dir_all(root.join("x")).unwrap();
        std::fs::create_dir_all(root.join("y/z")).unwrap();
        let db = database_like(1 << 20, 5);
        std::fs::write(root.join("db"), &db).unwrap();
        for other in ["db.link", "x/db", "y/z/db"] {
            std::fs::hard_link(root.join("db"), root.join(other)).unwrap();
        }
        std::fs::write(root.join("small"), b"small\n").unwrap();
        std::fs::hard_link(root.join("small"), root.join("x/small")).unwrap();
        let run = |jobs: usize| {
            let mut repo = repository();
            let opts = FileOptions {
                paths: vec![root.to_path_buf()],
                include: Vec::new(),
                exclude: Vec::new(),
                jobs,
                depth: None,
                read_from: Vec::new(),
                run: RunOptions::new("h"),
            };
            let source = FileSource::new(&opts).unwrap();
            let r = crate::ops::backup::run(&mut repo, &source, &opts.run, (1_000, 0), &NoProgress);
            let r = r.unwrap();
            assert!(r.failures.is_empty(), "{:?}", r.failures);
            // Every name was seen: nothing kept for names to come.
            assert!(crate::repo::lock(&source.linked).is_empty());
            assert_eq!(r.items_total, 6);
            assert_eq!(r.items_new + r.files_linked, 6, "{r:?}");
            (repo, r)
        };

        let (repo, r) = run(1);
        assert_eq!((r.items_new, r.files_linked), (2, 4), "{r:?}");
        assert_eq!(r.bytes_read, db.len() as u64 + 6, "each file read once");
        assert_eq!(r.bytes_total, 4 * db.len() as u64 + 12);
        let out = tempfile::tempdir().unwrap();
        let rep = restore(&repo, "latest", out.path());
        assert!(rep.failures.is_empty(), "{:?}", rep.failures);
        assert_eq!((rep.files_restored, rep.files_linked), (2, 4));
        let back = restored(out.path(), root);
        let ino = std::fs::metadata(back.join("db")).unwrap().ino();
        for name in ["db", "db.link", "x/db", "y/z/db"] {
            let m = std::fs::metadata(back.join(name)).unwrap();
            assert_eq!((m.ino(), m.nlink()), (ino, 4), "{name}");
            assert!(std::fs::read(back.join(name)).unwrap() == db, "{name}");
        }
        assert_eq!(std::fs::read(back.join("x/small")).unwrap(), b"small\n");

        // Folders read at once may each read a file; names in one folder never.
        let (_, r) = run(2);
        assert!(r.files_linked >= 1, "{r:?}");
        assert!(r.bytes_read <= 3 * db.len() as u64 + 12, "{r:?}");
    }

    /// A tree: subdirectories with their modes, files with their modes and mtimes, an
    /// empty file, a sparse file (restored sparse), a file of a few chunks; globs; a
    /// backup with nothing changed reads nothing, one with a file touched reads that file.
    #[test]
    fn a_tree_round_trips_and_unchanged_files_are_not_read() {
        let src = tempfile::tempdir().unwrap();
        let root = src.path();
        std::fs::create_dir_all(root.join("data/index")).unwrap();
        std::fs::create_dir_all(root.join("cache")).unwrap();
        std::fs::write(root.join("data/small.txt"), b"hello\n").unwrap();
        std::fs::write(root.join("data/empty"), b"").unwrap();
        std::fs::write(root.join("data/index/seg.idx"), database_like(300 << 10, 7)).unwrap();
        std::fs::write(root.join("cache/tmp.bin"), b"not wanted").unwrap();
        std::fs::write(root.join("data/skip.log"), b"not wanted either").unwrap();
        // 12 MiB with one page of data in the middle: a hole on either side.
        let sparse = root.join("data/sparse.db");
        let f = std::fs::File::create(&sparse).unwrap();
        f.set_len(12 << 20).unwrap();
        std::os::unix::fs::FileExt::write_all_at(&f, &[7u8; 4096], 6 << 20).unwrap();
        drop(f);
        std::fs::set_permissions(
            root.join("data/small.txt"),
            std::fs::Permissions::from_mode(0o640),
        )
        .unwrap();
        std::fs::set_permissions(
            root.join("data/index"),
            std::fs::Permissions::from_mode(0o750),
        )
        .unwrap();
        let old = std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_500_000_000);
        std::fs::File::options()
            .write(true)
            .open(root.join("data/small.txt"))
            .unwrap()
            .set_modified(old)
            .unwrap();

        let _later = later(root);
        let mut repo = repository();
        let first = backup(&mut repo, &[root], &[], &["cache", "*.log"], 1_000);
        assert!(first.failures.is_empty(), "{:?}", first.failures);
        assert_eq!(first.items_total, 4, "small, empty, seg.idx, sparse.db");
        let out = tempfile::tempdir().unwrap();
        let rep = restore(&repo, "latest", out.path());
        assert!(rep.failures.is_empty(), "{:?}", rep.failures);
        let back = restored(out.path(), root);
        for rel in [
            "data/small.txt",
            "data/empty",
            "data/index/seg.idx",
            "data/sparse.db",
        ] {
            let (a, b) = (root.join(rel), back.join(rel));
            assert!(
                std::fs::read(&a).unwrap() == std::fs::read(&b).unwrap(),
                "{rel}"
            );
            let (ma, mb) = (
                std::fs::metadata(&a).unwrap(),
                std::fs::metadata(&b).unwrap(),
            );
            assert_eq!(ma.mode(), mb.mode(), "{rel}");
            assert_eq!(ma.modified().unwrap(), mb.modified().unwrap(), "{rel}");
        }
        assert_eq!(
            std::fs::metadata(back.join("data/index")).unwrap().mode() & 0o7777,
            0o750
        );
        // Directories get their mtimes back (set last, deepest first).
        for rel in ["", "data", "data/index"] {
            let (a, b) = (root.join(rel), back.join(rel));
            let (ma, mb) = (
                std::fs::metadata(&a).unwrap(),
                std::fs::metadata(&b).unwrap(),
            );
            assert_eq!(
                ma.modified().unwrap(),
                mb.modified().unwrap(),
                "directory {rel:?}"
            );
        }
        assert!(!back.join("cache").exists() && !back.join("data/skip.log").exists());
        let blocks = std::fs::metadata(back.join("data/sparse.db"))
            .unwrap()
            .blocks();
        assert!(
            blocks * 512 < 1 << 20,
            "sparse file restored with {blocks} blocks"
        );
        // Restored again over itself (a killed restore run again): the large files there
        // with their size and mtime are left, the small ones compared; nothing reported.
        let again = restore(&repo, "latest", out.path());
        assert!(again.failures.is_empty(), "{:?}", again.failures);
        // The small ones, compared and identical, are already there too.
        assert_eq!((again.files_unchanged, again.files_restored), (4, 0));
        // One changed meanwhile is not overwritten: reported.
        std::fs::write(back.join("data/sparse.db"), b"other").unwrap();
        let again = restore(&repo, "latest", out.path());
        assert_eq!(again.failures.len(), 1, "{:?}", again.failures);
        assert!(
            again.failures[0].item.ends_with("data/sparse.db"),
            "{:?}",
            again.failures
        );

        let second = backup(&mut repo, &[root], &[], &["cache", "*.log"], 2_000);
        assert_eq!((second.bytes_read, second.items_unchanged), (0, 4));
        std::fs::write(root.join("data/small.txt"), b"hello again\n").unwrap();
        let third = backup(&mut repo, &[root], &[], &["cache", "*.log"], 3_000);
        assert_eq!(
            (third.bytes_read, third.items_new, third.items_unchanged),
            (12, 1, 3)
        );
        // Only *.idx, and a single file as a PATH.
        let only = backup(&mut repo, &[root], &["*.idx"], &[], 4_000);
        assert_eq!(only.items_total, 1);
        let one = backup(&mut repo, &[&root.join("data/small.txt")], &[], &[], 5_000);
        assert_eq!(one.items_total, 1);
        let out = tempfile::tempdir().unwrap();
        restore(&repo, "latest", out.path());
        let got = std::fs::read(restored(out.path(), &root.join("data/small.txt"))).unwrap();
        assert_eq!(got, b"hello again\n");
    }

    /// Regression (issue 24, item 3): a directory swapped for a link to another tree
    /// after its parent was listed was read through (the other tree's files backed up as
    /// the directory's, exit 0). The walk opens each directory relative to its parent's
    /// descriptor, never through a link: the swapped one is reported, the other tree's
    /// files are not in the snapshot. The same for a directory swapped after the walk
    /// listed it, before its files are read.
    #[test]
    fn a_directory_swapped_for_a_link_during_the_walk_is_refused() {
        use super::super::walk::{hook, Event};
        for after_listing in ["a", "a/sub1"] {
            let src = tempfile::tempdir().unwrap();
            let root = src.path().join("src");
            let elsewhere = src.path().join("elsewhere");
            for d in ["a/sub0", "a/sub1", "a/sub2"] {
                std::fs::create_dir_all(root.join(d)).unwrap();
                std::fs::write(root.join(d).join("mine"), d).unwrap();
            }
            std::fs::create_dir_all(elsewhere.join("deep")).unwrap();
            std::fs::write(elsewhere.join("secret"), b"not this tree's").unwrap();
            std::fs::write(elsewhere.join("deep/secret2"), b"nor this").unwrap();
            let (listed, sub1) = (root.join(after_listing), root.join("a/sub1"));
            let swap = {
                let (sub1, elsewhere) = (sub1.clone(), elsewhere.clone());
                let done = std::sync::atomic::AtomicBool::new(false);
                move |e: &Event<'_>| {
                    use std::sync::atomic::Ordering::SeqCst;
                    if matches!(e, Event::Listed(p) if *p == listed) && !done.swap(true, SeqCst) {
                        std::fs::remove_dir_all(&sub1).unwrap();
                        std::os::unix::fs::symlink(&elsewhere, &sub1).unwrap();
                    }
                }
            };
            let _hook = hook::set(&root, swap);
            let mut repo = repository();
            let rep = backup(&mut repo, &[&root], &[], &[], 1_000);
            let refused: Vec<_> = (rep.failures.iter())
                .filter(|f| f.item == sub1.display().to_string())
                .collect();
            assert_eq!(refused.len(), 1, "{after_listing}: {:?}", rep.failures);
            assert!(refused[0].error.contains("symbolic link"), "{refused:?}");
            let out = tempfile::tempdir().unwrap();
            restore(&repo, "latest", out.path());
            let back = restored(out.path(), &root);
            // The link is kept as a link (a's entry since the swap), never what it points
            // to.
            let kept = std::fs::symlink_metadata(back.join("a/sub1")).unwrap();
            assert!(
                kept.file_type().is_symlink(),
                "{after_listing}: read through"
            );
            assert_eq!(rep.folders, 4, "., a, a/sub0, a/sub2 and no more: {rep:?}");
            for d in ["a/sub0", "a/sub2"] {
                assert_eq!(
                    std::fs::read(back.join(d).join("mine")).unwrap(),
                    d.as_bytes()
                );
            }
        }
    }

    /// Regression (issue 24, item 7): a file appended to while it was read was stored torn
    /// as a success. Its size, mtime and ctime before and after the read say it changed:
    /// it is read again; changed again, it is reported (the run fails), and the snapshot
    /// keeps the previous snapshot's version, or, with none, the one read.
    #[test]
    fn a_file_changed_while_read_is_read_again_then_reported() {
        use super::super::walk::{hook, Event};
        use std::sync::atomic::{AtomicBool, AtomicU32, Ordering::SeqCst};
        let src = tempfile::tempdir().unwrap();
        let root = src.path().join("src");
        std::fs::create_dir_all(&root).unwrap();
        let db = root.join("db");
        let v1 = database_like(256 << 10, 1);
        std::fs::write(&db, &v1).unwrap();
        // Appends to `db` after the first read of each opening, `appends` times.
        let appends = Arc::new(AtomicU32::new(0));
        let _hook = {
            let (db, appends, armed) = (db.clone(), appends.clone(), AtomicBool::new(false));
            hook::set(&root, move |e: &Event<'_>| match e {
                Event::Open(p) if *p == db => armed.store(true, SeqCst),
                Event::Read { path, .. }
                    if *path == db && armed.swap(false, SeqCst) && appends.load(SeqCst) > 0 =>
                {
                    appends.fetch_sub(1, SeqCst);
                    let mut f = std::fs::OpenOptions::new().append(true).open(&db).unwrap();
                    std::io::Write::write_all(&mut f, &[b'+'; 10_000]).unwrap();
                }
                _ => {}
            })
        };
        let mut repo = repository();
        let got = |repo: &Repository, snap: &str| {
            let out = tempfile::tempdir().unwrap();
            let rep = restore(repo, snap, out.path());
            assert!(rep.failures.is_empty(), "{:?}", rep.failures);
            std::fs::read(restored(out.path(), &db)).unwrap()
        };

        // Changed during the first read only: read again, whole, nothing to report.
        appends.store(1, SeqCst);
        let once = backup(&mut repo, &[&root], &[], &[], 1_000);
        assert!(once.failures.is_empty(), "{:?}", once.failures);
        assert_eq!(appends.load(SeqCst), 0, "the hook appended");
        let now = std::fs::read(&db).unwrap();
        assert_eq!(now.len(), v1.len() + 10_000);
        assert!(
            got(&repo, &once.snapshot) == now,
            "stored as read the second time"
        );

        // Changed during both reads, a parent has it: reported, the parent's version kept.
        std::fs::write(&db, &v1).unwrap();
        appends.store(2, SeqCst);
        let kept = backup(&mut repo, &[&root], &[], &[], 2_000);
        assert_eq!(kept.failures.len(), 1, "{:?}", kept.failures);
        assert_eq!(kept.failures[0].item, db.display().to_string());
        let error = &kept.failures[0].error;
        assert!(error.contains("changed while read"), "{error}");
        assert!(
            error.contains("previous snapshot's version is kept"),
            "{error}"
        );
        assert!(got(&repo, &kept.snapshot) == now, "the parent's version");

        // With no parent: the one read is stored, and reported.
        let mut repo = repository();
        appends.store(2, SeqCst);
        let first = backup(&mut repo, &[&root], &[], &[], 3_000);
        assert_eq!(first.failures.len(), 1, "{:?}", first.failures);
        let error = &first.failures[0].error;
        assert!(error.contains("changed while read"), "{error}");
        assert!(error.contains("stored as read"), "{error}");
        assert_eq!(got(&repo, &first.snapshot).len(), v1.len() + 40_000);
    }

    /// A path that does not exist, and a bad glob, are errors before anything is written.
    #[test]
    fn bad_paths_and_globs_are_named() {
        let source = |path: &Path, include: &str| {
            FileSource::new(&FileOptions {
                paths: vec![path.to_path_buf()],
                include: vec![include.to_string()],
                exclude: vec![],
                jobs: 1,
                depth: None,
                read_from: Vec::new(),
                run: RunOptions::new("h"),
            })
        };
        let err = source(Path::new("/no/such/path"), "*").unwrap_err();
        assert!(err.to_string().contains("/no/such/path"), "{err}");
        let dir = tempfile::tempdir().unwrap();
        let err = source(dir.path(), "a[").unwrap_err();
        assert!(err.to_string().contains("--include \"a[\""), "{err}");
    }
}
