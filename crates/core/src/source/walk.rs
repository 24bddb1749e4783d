//! Reading directory trees without following symbolic links, for the sources that read
//! files (`file:`, Maildir): each directory is opened relative to its parent's descriptor
//! (`openat` with `O_DIRECTORY|O_NOFOLLOW`), listed from that descriptor, its entries
//! stat'ed (`fstatat` with `AT_SYMLINK_NOFOLLOW`) and opened (`openat` with `O_NOFOLLOW`)
//! relative to it. A component that is a symbolic link, or was swapped for one while the
//! backup ran, is refused with an error naming its path ([`Dir::sub`]), never read
//! through. The path given by the user (a `file:` PATH, a Maildir root) is opened as
//! given: links above it are the user's choice; below it none is followed.

pub use rustix::fs::FileType;
use rustix::fs::{AtFlags, Mode, OFlags};
use rustix::io::Errno;
use std::ffi::OsStr;
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// What the error of a refused link says.
pub const LINK_REFUSED: &str = "a symbolic link: not followed (links below a backup's path are never followed; give what it points to as a path of its own)";

/// An open directory and the path it was opened as (for messages).
#[derive(Debug)]
pub struct Dir {
    fd: OwnedFd,
    path: PathBuf,
}

/// What `fstatat` says of an entry, not following a link.
pub type Stat = rustix::fs::Stat;

impl Dir {
    /// Opens the directory `path`, as given (the user's path: a link in it is followed).
    pub fn open(path: &Path) -> io::Result<Dir> {
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
        let fd = rustix::fs::open(path, flags, Mode::empty())?;
        Ok(Dir {
            fd,
            path: path.to_path_buf(),
        })
    }

    /// Opens `rel` (`/`-separated, relative) below the directory `root`, one component at
    /// a time, refusing any that is a link ([`Dir::sub`]). The error names the path of
    /// the component refused.
    pub fn open_below(root: &Path, rel: &[u8]) -> Result<Dir, (PathBuf, io::Error)> {
        Dir::open_below_as(root, root, rel)
    }

    /// [`Dir::open_below`] of `root`, with paths shown below `shown` instead (`root` is
    /// a filesystem snapshot of `shown`: filters, reports and names see the live paths).
    pub fn open_below_as(
        root: &Path,
        shown: &Path,
        rel: &[u8],
    ) -> Result<Dir, (PathBuf, io::Error)> {
        let dir = Dir::open(root).map_err(|e| (shown.to_path_buf(), e))?;
        let mut dir = dir.shown_as(shown);
        for name in rel.split(|&c| c == b'/').filter(|c| !c.is_empty()) {
            dir = dir.sub(name).map_err(|e| (dir.join(name), e))?;
        }
        Ok(dir)
    }

    /// The directory, its path (and those of what is below it) shown as `path`.
    pub fn shown_as(self, path: &Path) -> Dir {
        Dir {
            fd: self.fd,
            path: path.to_path_buf(),
        }
    }

    /// The path this directory was opened as (or is shown as: [`Dir::shown_as`]).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The path of an entry.
    pub fn join(&self, name: &[u8]) -> PathBuf {
        self.path.join(OsStr::from_bytes(name))
    }

    /// Opens the subdirectory `name`: a link is refused ([`LINK_REFUSED`]), as is an
    /// entry that is no longer a directory.
    pub fn sub(&self, name: &[u8]) -> io::Result<Dir> {
        #[cfg(any(test, feature = "testing"))]
        fire(&Event::Open(&self.join(name)));
        let fd = rustix::fs::openat(&self.fd, name, dir_flags(), Mode::empty())
            .map_err(|e| refused(e, || self.stat(name)))?;
        Ok(Dir {
            fd,
            path: self.join(name),
        })
    }

    /// The directory's entries (not `.` and `..`) with their type as the directory says
    /// it ([`FileType::Unknown`] on file systems that do not: [`Dir::stat`] then).
    pub fn entries(&self) -> io::Result<Vec<(Vec<u8>, FileType)>> {
        let mut out = Vec::new();
        self.for_each_entry(|name, t| out.push((name.to_vec(), t)))?;
        Ok(out)
    }

    /// [`Self::entries`] one at a time, without a copy of each name (a Maildir's `cur/`
    /// of a million files).
    pub fn for_each_entry(&self, mut each: impl FnMut(&[u8], FileType)) -> io::Result<()> {
        let mut d = rustix::fs::Dir::read_from(&self.fd)?;
        while let Some(e) = d.read() {
            let e = e?;
            let name = e.file_name().to_bytes();
            if name != b"." && name != b".." {
                each(name, e.file_type());
            }
        }
        fire(&Event::Listed(&self.path));
        Ok(())
    }

    /// An entry's `stat`, not following a link.
    pub fn stat(&self, name: &[u8]) -> io::Result<Stat> {
        Ok(rustix::fs::statat(
            &self.fd,
            name,
            AtFlags::SYMLINK_NOFOLLOW,
        )?)
    }

    /// The directory's own `stat`.
    pub fn fstat(&self) -> io::Result<Stat> {
        Ok(rustix::fs::fstat(&self.fd)?)
    }

    /// Opens the file `name` for reading, never through a link (nor a FIFO's blocking
    /// open), with its `fstat`; one that is not a regular file is an error.
    pub fn open_file(&self, name: &[u8]) -> io::Result<(std::fs::File, Stat)> {
        let flags =
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NOCTTY | OFlags::NONBLOCK;
        #[cfg(any(test, feature = "testing"))]
        fire(&Event::Open(&self.join(name)));
        let fd = rustix::fs::openat(&self.fd, name, flags, Mode::empty())
            .map_err(|e| refused(e, || self.stat(name)))?;
        let st = rustix::fs::fstat(&fd)?;
        if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "not a regular file any more (changed while read); not backed up",
            ));
        }
        // O_NONBLOCK stays: it changes nothing for a regular file.
        Ok((std::fs::File::from(fd), st))
    }

    /// The target of the link `name`.
    pub fn read_link(&self, name: &[u8]) -> io::Result<Vec<u8>> {
        Ok(rustix::fs::readlinkat(&self.fd, name, Vec::new())?.into_bytes())
    }
}

fn dir_flags() -> OFlags {
    OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC
}

/// `ELOOP` / `ENOTDIR` from an open that does not follow links, said plainly: a link
/// ([`LINK_REFUSED`]), or a directory that is something else now.
fn refused(e: Errno, stat: impl FnOnce() -> io::Result<Stat>) -> io::Error {
    if e != Errno::LOOP && e != Errno::NOTDIR {
        return e.into();
    }
    match stat().map(|st| FileType::from_raw_mode(st.st_mode)) {
        Ok(FileType::Symlink) => io::Error::other(LINK_REFUSED),
        Ok(_) if e == Errno::NOTDIR => {
            io::Error::other("not a directory any more (changed during the backup)")
        }
        _ => e.into(),
    }
}

/// Whether two `stat`s are of the same file in the same state: device, inode, size,
/// mtime and ctime (a write changes the ctime even when it keeps size and mtime). What a
/// read checks before and after, as restic and borg do.
pub fn same_file_state(a: &Stat, b: &Stat) -> bool {
    (a.st_dev, a.st_ino, a.st_size) == (b.st_dev, b.st_ino, b.st_size)
        && (a.st_mtime, a.st_mtime_nsec) == (b.st_mtime, b.st_mtime_nsec)
        && (a.st_ctime, a.st_ctime_nsec) == (b.st_ctime, b.st_ctime_nsec)
}

/// Whether an entry is a directory, a link, ..., from its `stat`.
pub fn file_type(st: &Stat) -> FileType {
    FileType::from_raw_mode(st.st_mode)
}

/// A file being read, as a reader that tells the test hook ([`Event::Read`]) how far it
/// got after each read (nothing in other builds).
pub struct Reading<'a> {
    file: &'a std::fs::File,
    #[cfg_attr(not(any(test, feature = "testing")), allow(dead_code))]
    path: &'a Path,
    #[cfg_attr(not(any(test, feature = "testing")), allow(dead_code))]
    bytes: u64,
}

impl<'a> Reading<'a> {
    pub fn new(file: &'a std::fs::File, path: &'a Path) -> Reading<'a> {
        Reading {
            file,
            path,
            bytes: 0,
        }
    }
}

impl io::Read for Reading<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = io::Read::read(&mut self.file, buf)?;
        #[cfg(any(test, feature = "testing"))]
        if n > 0 {
            self.bytes += n as u64;
            fire(&Event::Read {
                path: self.path,
                bytes: self.bytes,
            });
        }
        Ok(n)
    }
}

/// Steps of a walk, for tests that change the tree at the worst moment (`hook`).
#[derive(Debug)]
pub enum Event<'a> {
    /// A directory was listed (its entries not opened yet).
    Listed(&'a Path),
    /// A directory or a file is about to be opened.
    Open(&'a Path),
    /// A file being backed up was read up to `bytes` (more to come).
    Read { path: &'a Path, bytes: u64 },
}

#[cfg(not(any(test, feature = "testing")))]
#[inline(always)]
pub(crate) fn fire(_: &Event<'_>) {}

#[cfg(any(test, feature = "testing"))]
pub(crate) fn fire(e: &Event<'_>) {
    hook::fire(e)
}

/// Callbacks run at the steps of a walk ([`Event`]) below a directory, in test builds
/// (the `testing` feature): a test swaps a directory for a link after its parent was
/// listed, or appends to a file being read, deterministically.
#[cfg(any(test, feature = "testing"))]
pub mod hook {
    use super::Event;
    use std::path::{Path, PathBuf};
    use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
    use std::sync::{Arc, Mutex};

    type Callback = dyn Fn(&Event<'_>) + Send + Sync;

    static HOOKS: Registry<Callback> = Registry::new();

    /// Removes its hook when dropped.
    pub type Guard = RegistryGuard<Callback>;

    /// Callbacks set below directories by tests running in parallel, each removed when
    /// its guard is dropped: what the walk's hooks and those of the unchanged-folder proof
    /// (`crate::source::unchanged::hook`) share.
    pub struct Registry<C: ?Sized + 'static> {
        hooks: Mutex<Vec<(u64, PathBuf, Arc<C>)>>,
        next: AtomicU64,
    }

    impl<C: ?Sized + 'static> Registry<C> {
        pub const fn new() -> Self {
            Registry {
                hooks: Mutex::new(Vec::new()),
                next: AtomicU64::new(0),
            }
        }

        /// Sets `f` for every path below `under`, until the guard is dropped.
        pub fn add(&'static self, under: &Path, f: Arc<C>) -> RegistryGuard<C> {
            let id = self.next.fetch_add(1, Relaxed);
            crate::repo::lock(&self.hooks).push((id, under.to_path_buf(), f));
            RegistryGuard(self, id)
        }

        /// The callbacks set for `path` (taken out of the lock before they run).
        pub fn below(&self, path: &Path) -> Vec<Arc<C>> {
            (crate::repo::lock(&self.hooks).iter())
                .filter(|h| path.starts_with(&h.1))
                .map(|h| h.2.clone())
                .collect()
        }
    }

    impl<C: ?Sized + 'static> Default for Registry<C> {
        fn default() -> Self {
            Self::new()
        }
    }

    /// Removes its callback from its registry when dropped.
    pub struct RegistryGuard<C: ?Sized + 'static>(&'static Registry<C>, u64);

    impl<C: ?Sized + 'static> Drop for RegistryGuard<C> {
        fn drop(&mut self) {
            crate::repo::lock(&self.0.hooks).retain(|h| h.0 != self.1);
        }
    }

    /// Runs `f` at every step of a walk of a path below `under` (tests run in parallel:
    /// each sets its hook on its own directory).
    pub fn set(under: &Path, f: impl Fn(&Event<'_>) + Send + Sync + 'static) -> Guard {
        HOOKS.add(under, Arc::new(f))
    }

    pub(crate) fn fire(e: &Event<'_>) {
        let path = match e {
            Event::Listed(p) | Event::Open(p) | Event::Read { path: p, .. } => *p,
        };
        for h in HOOKS.below(path) {
            h(e);
        }
    }
}
