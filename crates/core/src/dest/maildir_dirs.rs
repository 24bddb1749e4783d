//! A Maildir folder's directories in a restore's target: opened (created as needed),
//! staged in `tmp/` when the folder is new to the target ([`STAGE`]), and the writing of
//! one message into them.

use super::fs::{
    open_dir_at, open_path, rename_noreplace, set_attributes, write_named, write_renamed,
    write_unnamed, Attrs,
};
use super::RestoreFailures;
use crate::error::{Error, Result};
use crate::mail::maildir;
use rustix::fs::{Mode, OFlags};
use rustix::io::Errno;
use std::collections::HashMap;
use std::ffi::OsStr;
use std::fs::File;
use std::io::ErrorKind;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::sync::atomic::Ordering::Relaxed;

/// A folder's directories in the target, open.
pub(super) struct FolderDirs {
    /// Where it is, for messages.
    pub(super) path: PathBuf,
    pub(super) dir: OwnedFd,
    pub(super) cur: OwnedFd,
    pub(super) new: OwnedFd,
    /// The folder's `tmp/` when `cur` and `new` are its staging directories there (the
    /// folder was new to the target): see [`STAGE`].
    pub(super) staged: Option<OwnedFd>,
    /// A plain directory (no `cur`, `new`, `tmp`: those two are `dir` again).
    pub(super) plain: bool,
    /// Which symbolic links are made in it.
    pub(super) links: Links,
}

/// Which symbolic links of a snapshot a folder's restore makes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Links {
    /// None: in a mail store a link from a repository could lead the mail server out.
    None,
    /// Relative ones that stay below the directory (an account's home).
    Inside,
    /// Every one (a `dir:` target, a `file:` backup's tree).
    Any,
}

impl FolderDirs {
    pub(super) fn sub(&self, new: bool) -> &OwnedFd {
        if new {
            &self.new
        } else {
            &self.cur
        }
    }
    pub(super) fn shown(&self, new: Option<bool>, name: &[u8]) -> PathBuf {
        let p = match new {
            Some(true) => self.path.join("new"),
            Some(false) => self.path.join("cur"),
            None => self.path.clone(),
        };
        p.join(OsStr::from_bytes(name))
    }
}

/// Opens a folder's directory (`node_dir`: its components below the account's) and its
/// `cur`, `new` and `tmp` (unless `plain`), creating them as needed; `links`: which
/// symbolic links are made in it.
pub(super) fn open_folder_dirs(
    shown: PathBuf,
    acc_dir: BorrowedFd,
    node_dir: &[&[u8]],
    (plain, links): (bool, Links),
) -> Result<FolderDirs> {
    let dir = open_path(acc_dir, node_dir, true).map_err(|(_, e)| Error::io(&shown, e))?;
    if plain {
        let dup = || rustix::io::dup(&dir).map_err(|e| Error::io(&shown, e.into()));
        return Ok(FolderDirs {
            path: shown.clone(),
            cur: dup()?,
            new: dup()?,
            staged: None,
            dir,
            plain,
            links,
        });
    }
    let sub = |at: BorrowedFd, name: &str| {
        open_dir_at(at, name.as_bytes(), Some(0o700)).map_err(|e| Error::io(shown.join(name), e))
    };
    let absent = |name: &str| {
        let flags = rustix::fs::AtFlags::SYMLINK_NOFOLLOW;
        rustix::fs::statat(&dir, name, flags).is_err_and(|e| e == Errno::NOENT)
    };
    let fresh = absent("cur") && absent("new");
    let tmp = sub(dir.as_fd(), "tmp")?;
    if !fresh {
        // A run killed between putting `cur/` and `new/` in place left the other staged.
        for (i, name) in ["cur", "new"].into_iter().enumerate() {
            if absent(name) {
                let flags = rustix::fs::RenameFlags::NOREPLACE;
                let _ = rustix::fs::renameat_with(&tmp, STAGE[i], &dir, name, flags);
            }
        }
    }
    if fresh {
        // A folder new to the target: written in `tmp/` and put in place whole.
        let stage = |new| open_dir_at(tmp.as_fd(), STAGE[new as usize].as_bytes(), Some(0o700));
        match (stage(false), stage(true)) {
            (Ok(cur), Ok(new)) => {
                return Ok(FolderDirs {
                    path: shown.clone(),
                    dir,
                    cur,
                    new,
                    staged: Some(tmp),
                    plain,
                    links,
                })
            }
            (Err(e), _) | (_, Err(e)) => {
                tracing::debug!("{}: not staged in tmp/: {e}", shown.display());
            }
        }
    }
    let cur = sub(dir.as_fd(), "cur")?;
    let new = sub(dir.as_fd(), "new")?;
    Ok(FolderDirs {
        path: shown.clone(),
        dir,
        cur,
        new,
        staged: None,
        plain,
        links,
    })
}

/// The staging directories of a folder new to the target, in its `tmp/`: `cur` and `new`
/// until the folder's messages are all written, then renamed to `cur` and `new`
/// ([`unstage`]). Each message is created there under its own name: no unnamed file and
/// link per message (a restore of 1.5 million messages into a new ext4 file system took
/// 45-48 s against 51-52 s, its system time 45-48 s against 53-55 s), and a mail server
/// (which never reads `tmp/`) sees the folder appear whole. A message a killed run left
/// torn there is never seen: the next run finds the staging directory, keeps what it
/// holds whole ([`staged_whole`]) and writes the rest again (the Maildir target's
/// `write`).
pub(super) const STAGE: [&str; 2] = [".mailvault-restore-cur", ".mailvault-restore-new"];

/// Whether a message a killed run left in a staging directory is whole: its bytes (the
/// caller compared them) and, once given here, its attributes (the kill may have come
/// between them); not when it has other names.
pub(super) fn staged_whole(dirs: &FolderDirs, new: bool, name: &[u8], attrs: Attrs) -> bool {
    let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let Ok(fd) = rustix::fs::openat(dirs.sub(new), name, flags, Mode::empty()) else {
        return false;
    };
    let f = File::from(fd);
    rustix::fs::fstat(&f).is_ok_and(|st| st.st_nlink == 1) && set_attributes(&f, attrs).is_ok()
}

/// Puts a staged folder's `cur/` or `new/` in place: the staging directory renamed,
/// or where that name is taken meanwhile (a mail server made the folder's `cur/`), its
/// messages moved into it one by one, none replacing a file (each one that cannot move is
/// listed in `failures` and stays in `tmp/`).
pub(super) fn unstage(dirs: &FolderDirs, tmp: BorrowedFd, new: bool, failures: &RestoreFailures) {
    use rustix::fs::{renameat_with, unlinkat, AtFlags, RenameFlags};
    let stage = STAGE[new as usize];
    let sub: &[u8] = if new { b"new" } else { b"cur" };
    let moved = match renameat_with(tmp, stage, &dirs.dir, sub, RenameFlags::NOREPLACE) {
        Ok(()) => return,
        // Its name taken meanwhile, or no rename that refuses to replace here.
        Err(Errno::EXIST | Errno::NOTEMPTY | Errno::INVAL | Errno::NOSYS) => {
            open_dir_at(dirs.dir.as_fd(), sub, Some(0o700)).and_then(|to| {
                // Not a directory or a link: those are not this restore's, and stay.
                use rustix::fs::FileType::{Directory, Symlink};
                let names: Vec<Vec<u8>> = rustix::fs::Dir::read_from(dirs.sub(new))?
                    .flatten()
                    .filter(|e| !matches!(e.file_type(), Directory | Symlink))
                    .map(|e| e.file_name().to_bytes().to_vec())
                    .collect();
                for name in names {
                    if let Err(e) =
                        rename_noreplace(dirs.sub(new).as_fd(), &name, to.as_fd(), &name)
                    {
                        let shown = dirs.shown(Some(new), &name);
                        failures.add(shown.display().to_string(), write_error(shown, e));
                    }
                }
                Ok(())
            })
        }
        Err(e) => Err(e.into()),
    };
    match moved {
        // Empty unless a message could not move (then listed, and kept).
        Ok(()) => {
            let _ = unlinkat(tmp, stage, AtFlags::REMOVEDIR);
        }
        Err(e) => failures.add(
            dirs.shown(Some(new), b"").display().to_string(),
            Error::io(dirs.shown(Some(new), b""), e),
        ),
    }
}

/// Maildir keys already present in a target folder: where each is and its name.
pub(super) fn existing_keys(
    folder: &FolderDirs,
    failures: &RestoreFailures,
) -> HashMap<Vec<u8>, (bool, Vec<u8>)> {
    let mut out = HashMap::new();
    for new in [false, true] {
        let dir = match rustix::fs::Dir::read_from(folder.sub(new)) {
            Ok(d) => d,
            Err(e) => {
                failures.add(
                    folder.shown(Some(new), b"").display().to_string(),
                    std::io::Error::from(e),
                );
                continue;
            }
        };
        for ent in dir.flatten() {
            let name = ent.file_name().to_bytes();
            if name == b"." || name == b".." || ent.file_type() == rustix::fs::FileType::Directory {
                continue;
            }
            let key = maildir::split_name(name).0.to_vec();
            out.insert(key, (new, name.to_vec()));
        }
    }
    out
}

/// Writes `data` as `name` in the folder's `new/` or `cur/` (`new`: `Some`) or in the
/// folder directory itself (`None`), atomically and without replacing anything, with mode,
/// owner and mtime set before the file appears.
///
/// In a staged folder ([`STAGE`]) the message is created under its name in the staging
/// directory, which no reader sees until it is put in place. Elsewhere, where the file
/// system allows, the file is created unnamed (`O_TMPFILE`) in its directory and linked
/// to its name once complete: one directory operation per message instead of the create
/// in `tmp/` plus the rename, and a killed restore leaves nothing behind. Elsewhere (NFS,
/// no `/proc`), a temporary file in `tmp/` renamed into place.
pub(super) fn write_new_file(
    folder: &FolderDirs,
    new: Option<bool>,
    name: &[u8],
    data: &[u8],
    attrs: Attrs,
) -> Result<()> {
    use std::sync::atomic::AtomicBool;
    static NO_TMPFILE: AtomicBool = AtomicBool::new(false);
    let dir = match new {
        Some(n) => folder.sub(n).as_fd(),
        None => folder.dir.as_fd(),
    };
    let result = if new.is_some() && folder.staged.is_some() {
        write_named(dir, name, data, attrs).map_err(Some)
    } else if NO_TMPFILE.load(Relaxed) {
        Err(None)
    } else {
        write_unnamed(dir, name, data, attrs)
    };
    let result = match result {
        Ok(()) => Ok(()),
        Err(Some(e)) => Err(e),
        Err(None) => {
            NO_TMPFILE.store(true, Relaxed);
            write_renamed(folder.dir.as_fd(), folder.plain, dir, name, data, attrs)
        }
    };
    let shown = folder.shown(new, name);
    result.map_err(|e| write_error(shown, e))
}

/// The error of a file write at `shown`: a name already taken (the target never
/// overwrites) said as such, anything else as the I/O error it is.
pub(super) fn write_error(shown: PathBuf, e: std::io::Error) -> Error {
    if e.kind() == ErrorKind::AlreadyExists {
        Error::conflict(shown.display(), "already exists: not overwritten")
    } else {
        Error::io(shown, e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::repo::tree::Timestamp;
    use std::fs;
    use std::os::unix::fs::MetadataExt;
    use std::path::Path;

    fn check_written(path: &Path, data: &[u8]) {
        assert_eq!(fs::read(path).unwrap(), data);
        let m = fs::metadata(path).unwrap();
        assert_eq!(m.mode() & 0o7777, 0o640);
        assert_eq!((m.mtime(), m.mtime_nsec()), (1_000_000_000, 5));
    }

    fn open(p: &Path) -> OwnedFd {
        rustix::fs::open(p, OFlags::RDONLY | OFlags::DIRECTORY, Mode::empty()).unwrap()
    }

    /// A folder new to the target is staged in `tmp/`; when a mail server made its `cur/`
    /// meanwhile, the staged messages move into it one by one, none replacing a file (the
    /// one whose name is taken is listed and stays staged), and `new/`, still free, is
    /// the staging directory renamed. A folder that has `cur/` is not staged.
    #[test]
    fn a_staged_folder_moves_in_whole_or_message_by_message() {
        let dir = tempfile::tempdir().unwrap();
        let root = open(dir.path());
        let dirs = open_folder_dirs(
            dir.path().join("f"),
            root.as_fd(),
            &[b"f"],
            (false, Links::None),
        )
        .unwrap();
        let f = dir.path().join("f");
        assert!(dirs.staged.is_some());
        assert!(!f.join("cur").exists() && !f.join("new").exists());
        let attrs = Attrs {
            mode: 0o640,
            mtime: Timestamp {
                secs: 1_000_000_000,
                nanos: 5,
            },
            owner: None,
        };
        for (new, name, body) in [
            (false, "x", "staged x"),
            (false, "y", "staged y"),
            (true, "n", "staged n"),
        ] {
            write_new_file(&dirs, Some(new), name.as_bytes(), body.as_bytes(), attrs).unwrap();
        }
        assert!(f.join("tmp/.mailvault-restore-cur/y").exists());
        // The mail server's own `cur/`, with a message of the same name.
        fs::create_dir(f.join("cur")).unwrap();
        fs::write(f.join("cur/x"), "the server's x").unwrap();
        let failures = RestoreFailures::default();
        let tmp = dirs.staged.as_ref().unwrap();
        unstage(&dirs, tmp.as_fd(), false, &failures);
        unstage(&dirs, tmp.as_fd(), true, &failures);
        let listed = failures.take();
        assert_eq!(listed.len(), 1, "{listed:?}");
        assert!(listed[0].item.ends_with("cur/x"), "{listed:?}");
        assert_eq!(
            fs::read_to_string(f.join("cur/x")).unwrap(),
            "the server's x"
        );
        check_written(&f.join("cur/y"), b"staged y");
        check_written(&f.join("new/n"), b"staged n");
        assert_eq!(
            fs::read_to_string(f.join("tmp/.mailvault-restore-cur/x")).unwrap(),
            "staged x"
        );
        assert!(!f.join("tmp/.mailvault-restore-new").exists());
        // Opened again, it has its `cur/`: written there, nothing staged.
        let again =
            open_folder_dirs(f.clone(), root.as_fd(), &[b"f"], (false, Links::None)).unwrap();
        assert!(again.staged.is_none());
        write_new_file(&again, Some(false), b"z", b"z", attrs).unwrap();
        check_written(&f.join("cur/z"), b"z");
    }

    /// Both ways of writing a message: complete with mode and mtime, never replacing a
    /// file, and nothing left in `tmp/`.
    #[test]
    fn writes_never_replace_and_leave_nothing() {
        let dir = tempfile::tempdir().unwrap();
        for sub in ["tmp", "cur", "new"] {
            fs::create_dir(dir.path().join(sub)).unwrap();
        }
        let t = Timestamp {
            secs: 1_000_000_000,
            nanos: 5,
        };
        let t = Attrs {
            mode: 0o640,
            mtime: t,
            owner: None,
        };
        let folder = FolderDirs {
            path: dir.path().to_path_buf(),
            dir: open(dir.path()),
            cur: open(&dir.path().join("cur")),
            new: open(&dir.path().join("new")),
            staged: None,
            plain: false,
            links: Links::None,
        };
        let tmp = dir.path().join("tmp");
        let a = dir.path().join("cur/a");
        match write_unnamed(folder.cur.as_fd(), b"a", b"unnamed", t) {
            Ok(()) => {
                check_written(&a, b"unnamed");
                let again = write_unnamed(folder.cur.as_fd(), b"a", b"other", t);
                assert!(matches!(again, Err(Some(e)) if e.kind() == ErrorKind::AlreadyExists));
                check_written(&a, b"unnamed");
            }
            Err(None) => eprintln!("O_TMPFILE not supported here; only the fallback is tested"),
            Err(Some(e)) => panic!("{e}"),
        }
        let b = dir.path().join("cur/b");
        write_renamed(
            folder.dir.as_fd(),
            false,
            folder.cur.as_fd(),
            b"b",
            b"renamed",
            t,
        )
        .unwrap();
        check_written(&b, b"renamed");
        let again = write_renamed(
            folder.dir.as_fd(),
            false,
            folder.cur.as_fd(),
            b"b",
            b"other",
            t,
        )
        .unwrap_err();
        assert_eq!(again.kind(), ErrorKind::AlreadyExists);
        check_written(&b, b"renamed");
        assert_eq!(fs::read_dir(&tmp).unwrap().count(), 0);
        // And through the caller, the error names the file.
        let err = write_new_file(&folder, Some(false), b"b", b"x", t).unwrap_err();
        assert!(err.to_string().contains("cur/b"), "{err}");
    }
}
