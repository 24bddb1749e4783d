//! Confined file operations the file-writing destinations share (Maildir, `dir:`, mbox,
//! EML): opening directories without following links, writing a file under a new name
//! only (never replacing one), through an unnamed or temporary file, with its attributes.

use crate::error::{Error, Result};
use crate::repo::tree::Timestamp;
use rustix::fs::{Mode, OFlags};
use rustix::io::Errno;
use std::fs::{self, File};
use std::io::{Read, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;
use std::time::{Duration, SystemTime};

/// Creates the target directory if need be and opens it (following it if it is a link:
/// the admin named it).
pub(super) fn open_target(target: &Path) -> Result<OwnedFd> {
    fs::create_dir_all(target).map_err(|e| Error::io(target, e))?;
    rustix::fs::open(
        target,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| Error::io(target, e.into()))
}

/// Opens (creating what is missing) the directories `parts` below `base`, none of them
/// through a symbolic link. Directories are created 0700 (mail is private): a recorded
/// mode is set at the end, once their content is in. Errors say at which component.
pub(super) fn open_path(
    base: BorrowedFd,
    parts: &[&[u8]],
    create: bool,
) -> std::result::Result<OwnedFd, (usize, std::io::Error)> {
    let mut fd = rustix::io::dup(base).map_err(|e| (0, e.into()))?;
    let mut path: Vec<Vec<u8>> = Vec::new();
    for (i, p) in parts.iter().enumerate() {
        if p.is_empty() {
            continue;
        }
        path.push(p.to_vec());
        fd = open_dir_at(fd.as_fd(), p, create.then_some(0o700)).map_err(|e| (i + 1, e))?;
    }
    Ok(fd)
}

/// Opens the directory `name` in `parent` without following a symbolic link, creating it
/// with `create` (a mode, before the umask) if it is missing.
pub(super) fn open_dir_at(
    parent: BorrowedFd,
    name: &[u8],
    create: Option<u32>,
) -> std::io::Result<OwnedFd> {
    if let Some(mode) = create {
        match rustix::fs::mkdirat(parent, name, Mode::from_raw_mode(mode)) {
            Ok(()) => {}
            Err(e) if e == Errno::EXIST => {}
            Err(e) => return Err(e.into()),
        }
    }
    rustix::fs::openat(
        parent,
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| {
        // A link to a directory opened with O_DIRECTORY | O_NOFOLLOW: ENOTDIR.
        let link = rustix::fs::statat(parent, name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW)
            .is_ok_and(|st| rustix::fs::FileType::from_raw_mode(st.st_mode).is_symlink());
        not_followed(if link { Errno::LOOP } else { e })
    })
}

/// `ELOOP` from an `O_NOFOLLOW` open: the name is a symbolic link.
pub(super) fn not_followed(e: Errno) -> std::io::Error {
    if e == Errno::LOOP {
        std::io::Error::other("a symbolic link inside the target: not followed")
    } else {
        e.into()
    }
}

/// Reads a file of the target without following a symbolic link.
pub(super) fn read_at(dir: BorrowedFd, name: &[u8]) -> std::io::Result<Vec<u8>> {
    let fd = rustix::fs::openat(
        dir,
        name,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(not_followed)?;
    let mut data = Vec::new();
    File::from(fd).read_to_end(&mut data)?;
    Ok(data)
}

/// What a restored file gets besides its bytes.
#[derive(Clone, Copy)]
pub(super) struct Attrs {
    pub(super) mode: u32,
    pub(super) mtime: Timestamp,
    /// (uid, gid) to set, if any.
    pub(super) owner: Option<(u32, u32)>,
}

/// Mode, owner and times of a file being written. The owner and mode are changed only
/// where the new file's differ (one `fstat`): each change is an inode update in the
/// journal, 6% of a restore of 1.5 million messages' CPU when made for nothing.
pub(super) fn set_attributes(f: &File, attrs: Attrs) -> std::io::Result<()> {
    let Attrs { mode, mtime, owner } = attrs;
    if owner.is_some() || mode != 0 {
        let st = rustix::fs::fstat(f)?;
        let chown = owner.filter(|&(uid, gid)| (uid, gid) != (st.st_uid, st.st_gid));
        if let Some((uid, gid)) = chown {
            std::os::unix::fs::fchown(f, Some(uid), Some(gid))?;
        }
        // After the owner: chown clears set-id bits.
        let set_id = chown.is_some() && mode & 0o6000 != 0;
        if mode != 0 && (set_id || mode & 0o7777 != st.st_mode & 0o7777) {
            rustix::fs::fchmod(f, Mode::from_raw_mode(mode))?;
        }
    }
    let t = if mtime.secs < 0 {
        SystemTime::UNIX_EPOCH - Duration::new(mtime.secs.unsigned_abs(), 0)
    } else {
        SystemTime::UNIX_EPOCH
            .checked_add(Duration::new(mtime.secs as u64, mtime.nanos))
            .unwrap_or(SystemTime::UNIX_EPOCH)
    };
    f.set_times(fs::FileTimes::new().set_modified(t).set_accessed(t))
}

/// `O_TMPFILE` in `dir`, then `linkat` through `/proc/self/fd` (which fails if the name
/// exists, and never follows a link at the new name: nothing is replaced). `Err(None)`:
/// not supported here.
pub(super) fn write_unnamed(
    dir: BorrowedFd,
    name: &[u8],
    data: &[u8],
    attrs: Attrs,
) -> std::result::Result<(), Option<std::io::Error>> {
    use rustix::fs::{linkat, AtFlags, CWD};
    let mut f = match open_unnamed(dir) {
        Ok(Some(f)) => f,
        Ok(None) => return Err(None),
        Err(e) => return Err(Some(e)),
    };
    f.write_all(data).map_err(Some)?;
    set_attributes(&f, attrs).map_err(Some)?;
    // The file itself (`AT_EMPTY_PATH`: Linux 6.10 allows it for a file the caller made,
    // before that with CAP_DAC_READ_SEARCH), else its name in /proc (a path lookup more);
    // once refused, not asked again.
    static NO_EMPTY_PATH: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    use std::sync::atomic::Ordering::Relaxed;
    if !NO_EMPTY_PATH.load(Relaxed) {
        match linkat(&f, c"", dir, name, AtFlags::EMPTY_PATH) {
            Ok(()) => return Ok(()),
            Err(Errno::PERM | Errno::NOENT | Errno::INVAL) => NO_EMPTY_PATH.store(true, Relaxed),
            Err(e) => return Err(Some(e.into())),
        }
    }
    let proc_path = format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&f));
    match linkat(CWD, proc_path.as_str(), dir, name, AtFlags::SYMLINK_FOLLOW) {
        Ok(()) => Ok(()),
        // No /proc: the caller writes the file again the other way.
        Err(e) if e == Errno::NOENT => Err(None),
        Err(e) => Err(Some(e.into())),
    }
}

/// A new file `name` in `dir` (a directory no reader looks into until it is complete:
/// a folder's staging directory), never replacing one; on a failure it is removed, so
/// what stays under a name was written whole (up to a kill: a killed run's staging
/// directory is never put in place).
pub(super) fn write_named(
    dir: BorrowedFd,
    name: &[u8],
    data: &[u8],
    attrs: Attrs,
) -> std::io::Result<()> {
    let fd = rustix::fs::openat(
        dir,
        name,
        OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o600),
    )?;
    let mut f = File::from(fd);
    let written = f.write_all(data).and_then(|()| set_attributes(&f, attrs));
    if written.is_err() {
        let _ = rustix::fs::unlinkat(dir, name, rustix::fs::AtFlags::empty());
    }
    written
}

/// A temporary file in the folder's `tmp/` renamed to `name` in `dir` (renameat2
/// NOREPLACE).
pub(super) fn write_renamed(
    folder: BorrowedFd,
    plain: bool,
    dir: BorrowedFd,
    name: &[u8],
    data: &[u8],
    attrs: Attrs,
) -> std::io::Result<()> {
    through_tmp(
        folder,
        plain,
        data,
        |f| set_attributes(f, attrs),
        |tmp_dir, tmp| rename_noreplace(tmp_dir, tmp.as_bytes(), dir, name),
    )
}

/// Writes `data` to a new temporary file in the `tmp/` of `folder` (in `folder` itself
/// when `plain`), gives it its attributes (`attrs`) and puts it in place (`place`, given
/// that directory and the temporary's name); the temporary is removed when a step fails.
pub(super) fn through_tmp(
    folder: BorrowedFd,
    plain: bool,
    data: &[u8],
    attrs: impl FnOnce(&File) -> std::io::Result<()>,
    place: impl FnOnce(BorrowedFd, &str) -> std::io::Result<()>,
) -> std::io::Result<()> {
    let tmp_dir = if plain {
        rustix::io::dup(folder)?
    } else {
        open_dir_at(folder, b"tmp", Some(0o700))?
    };
    let tmp = format!(".mailvault-{:016x}", rand::random::<u64>());
    let result = (|| -> std::io::Result<()> {
        let fd = rustix::fs::openat(
            &tmp_dir,
            tmp.as_str(),
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        )?;
        let mut f = File::from(fd);
        f.write_all(data)?;
        attrs(&f)?;
        drop(f);
        place(tmp_dir.as_fd(), &tmp)
    })();
    if result.is_err() {
        let _ = rustix::fs::unlinkat(&tmp_dir, tmp.as_str(), rustix::fs::AtFlags::empty());
    }
    result
}

/// Moves `from` to `to` unless `to` exists: renameat2(RENAME_NOREPLACE), one directory
/// operation where link + unlink are two; falls back to those on file systems without it.
pub(super) fn rename_noreplace(
    from_dir: BorrowedFd,
    from: &[u8],
    to_dir: BorrowedFd,
    to: &[u8],
) -> std::io::Result<()> {
    use rustix::fs::{linkat, renameat_with, unlinkat, AtFlags, RenameFlags};
    match renameat_with(from_dir, from, to_dir, to, RenameFlags::NOREPLACE) {
        Ok(()) => Ok(()),
        Err(e) if e == Errno::INVAL || e == Errno::NOSYS => {
            linkat(from_dir, from, to_dir, to, AtFlags::empty())?;
            Ok(unlinkat(from_dir, from, AtFlags::empty())?)
        }
        Err(e) => Err(e.into()),
    }
}

/// A new unnamed file (`O_TMPFILE`, mode 0600) in `dir`; `None` where the file system
/// does not support it.
pub(super) fn open_unnamed(dir: BorrowedFd) -> std::io::Result<Option<File>> {
    match rustix::fs::openat(
        dir,
        c".",
        OFlags::TMPFILE | OFlags::WRONLY | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o600),
    ) {
        Ok(fd) => Ok(Some(File::from(fd))),
        Err(Errno::OPNOTSUPP | Errno::ISDIR | Errno::INVAL) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Writes `data` at `offset`, leaving out whole 4 KiB pages (by file offset) of zeros:
/// the file was made its full length first, so they read back as zeros, and take no
/// space (restored sparse as it was, or sparser).
pub(super) fn write_sparse(f: &File, offset: u64, data: &[u8]) -> std::io::Result<()> {
    use std::os::unix::fs::FileExt;
    const PAGE: u64 = 4096;
    let end = offset + data.len() as u64;
    let mut at = offset;
    // The run of non-zero pages being gathered: from `run` to `at`.
    let mut run = offset;
    while at < end {
        let next = ((at / PAGE + 1) * PAGE).min(end);
        let page = &data[(at - offset) as usize..(next - offset) as usize];
        if page.iter().all(|&b| b == 0) {
            if run < at {
                f.write_all_at(&data[(run - offset) as usize..(at - offset) as usize], run)?;
            }
            run = next;
        }
        at = next;
    }
    if run < end {
        f.write_all_at(&data[(run - offset) as usize..], run)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    fn attrs(mode: u32, owner: Option<(u32, u32)>) -> Attrs {
        Attrs {
            mode,
            mtime: Timestamp {
                secs: 1_600_000_000,
                nanos: 5,
            },
            owner,
        }
    }

    #[test]
    fn unnamed_files_get_their_mode_owner_and_time_and_never_replace_a_name() {
        let dir = tempfile::tempdir().unwrap();
        let d = File::open(dir.path()).unwrap();
        let me = {
            let m = fs::metadata(dir.path()).unwrap();
            (m.uid(), m.gid())
        };
        for (name, mode) in [("same", 0o600), ("other", 0o640), ("none", 0)] {
            let r = write_unnamed(d.as_fd(), name.as_bytes(), b"body", attrs(mode, Some(me)));
            assert!(r.is_ok(), "{name}: {r:?}");
            let m = fs::metadata(dir.path().join(name)).unwrap();
            let want = if mode == 0 { 0o600 } else { mode };
            assert_eq!(m.mode() & 0o7777, want, "{name}");
            assert_eq!(
                (m.uid(), m.gid(), m.mtime(), m.mtime_nsec()),
                (me.0, me.1, 1_600_000_000, 5)
            );
            assert_eq!(fs::read(dir.path().join(name)).unwrap(), b"body");
        }
        // A name taken stays as it was.
        let r = write_unnamed(d.as_fd(), b"same", b"other", attrs(0o600, None));
        assert_eq!(
            r.unwrap_err().unwrap().kind(),
            std::io::ErrorKind::AlreadyExists
        );
        assert_eq!(fs::read(dir.path().join("same")).unwrap(), b"body");
        assert_eq!(
            fs::read_dir(dir.path()).unwrap().count(),
            3,
            "no unnamed file left named"
        );
    }
}
