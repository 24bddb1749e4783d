//! A Maildir folder's directories in a restore's target: opened (created as needed),
//! staged in `tmp/` when the folder is new to the target ([`STAGE`]), and the writing of
//! one message into them.

use super::fs::{
    open_dir_at, open_path, rename_noreplace, write_named, write_renamed, write_unnamed, Attrs,
};
use super::RestoreFailures;
use crate::error::{Error, Result};
use crate::mail::maildir;
use rustix::io::Errno;
use std::collections::HashMap;
use std::ffi::OsStr;
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
/// symbolic links are made in it. A folder new to the target is staged in `tmp/` under
/// this run's name `run` ([`STAGE`]).
pub(super) fn open_folder_dirs(
    shown: PathBuf,
    acc_dir: BorrowedFd,
    node_dir: &[&[u8]],
    (plain, links): (bool, Links),
    run: &str,
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
    clear_leftovers(tmp.as_fd(), run, &shown);
    if fresh {
        match stage(tmp.as_fd(), run) {
            Ok((cur, new)) => {
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
            Err(e) => tracing::debug!("{}: not staged in tmp/: {e}", shown.display()),
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

/// A folder new to the target (no `cur/`, no `new/`) is staged: its messages are created
/// under their own names in `tmp/.mailvault-restore-<run>-cur` and `-new` (`<run>`: this
/// restore's random name), and once they are all written the two are renamed to `cur` and
/// `new` ([`unstage`]). A mail server, which never reads `tmp/`, sees the folder appear
/// whole, and no message needs an unnamed file and a link of its own: a restore of 1.5
/// million messages into a new ext4 took 45-48 s against 51-52 s (system time 45-48 s
/// against 53-55 s). A staging directory is only ever this run's: a killed run's (a
/// message in it may be torn) is never put in place nor taken up, but removed by the next
/// run that opens the folder ([`clear_leftovers`]); each run holds a shared `flock` on its
/// own, so that no other run removes it meanwhile (on NFS such a lock holds on one host
/// only). A restore that stops early (a full disk) still puts in place what it wrote:
/// every message whole, the folder not.
pub(super) const STAGE: &str = ".mailvault-restore-";

/// The names of `run`'s staging directories: `cur`'s, `new`'s.
fn stage_names(run: &str) -> [String; 2] {
    [format!("{STAGE}{run}-cur"), format!("{STAGE}{run}-new")]
}

/// Makes and opens `run`'s staging directories in `tmp`, each locked (shared) for this
/// run: `cur`'s, `new`'s.
fn stage(tmp: BorrowedFd, run: &str) -> std::io::Result<(OwnedFd, OwnedFd)> {
    use rustix::fs::{flock, FlockOperation};
    let [cur, new] = stage_names(run);
    let open = |name: &str| -> std::io::Result<OwnedFd> {
        let fd = open_dir_at(tmp, name.as_bytes(), Some(0o700))?;
        flock(&fd, FlockOperation::NonBlockingLockShared)?;
        // Locked, it stays; but another run may have taken it for a killed run's and
        // removed it between the open and the lock.
        let here = rustix::fs::statat(tmp, name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW)?;
        let st = rustix::fs::fstat(&fd)?;
        if (here.st_dev, here.st_ino) != (st.st_dev, st.st_ino) {
            return Err(std::io::Error::other(
                "removed by another restore meanwhile",
            ));
        }
        Ok(fd)
    };
    let c = open(&cur)?;
    match open(&new) {
        Ok(n) => Ok((c, n)),
        Err(e) => {
            drop(c);
            let _ = rustix::fs::unlinkat(tmp, cur.as_str(), rustix::fs::AtFlags::REMOVEDIR);
            Err(e)
        }
    }
}

/// Removes the staging directories in `tmp` of restores that no longer run (killed: no
/// lock on them), with what they hold: never put in place, a message in them may be
/// torn. `shown`: the folder, for the log.
fn clear_leftovers(tmp: BorrowedFd, run: &str, shown: &std::path::Path) {
    use rustix::fs::{flock, unlinkat, AtFlags, FlockOperation};
    let Ok(list) = rustix::fs::Dir::read_from(tmp) else {
        return;
    };
    let mine = stage_names(run);
    let names: Vec<Vec<u8>> = (list.flatten())
        .map(|e| e.file_name().to_bytes().to_vec())
        .filter(|n| n.starts_with(STAGE.as_bytes()) && !mine.iter().any(|m| m.as_bytes() == &n[..]))
        .collect();
    for name in names {
        let cleared = (|| -> std::io::Result<()> {
            let d = open_dir_at(tmp, &name, None)?;
            // Held by a restore still running: its own.
            flock(&d, FlockOperation::NonBlockingLockExclusive)?;
            // Named first (the directory is not read while it changes); each removed that
            // can be, then the directory if it is empty.
            let mut inside = Vec::new();
            for e in rustix::fs::Dir::read_from(&d)? {
                let e = e?;
                let n = e.file_name().to_bytes();
                if n != b"." && n != b".." {
                    inside.push(n.to_vec());
                }
            }
            for n in inside {
                if let Err(e) = unlinkat(&d, &n[..], AtFlags::empty()) {
                    let n = String::from_utf8_lossy(&n);
                    tracing::debug!("{}: {n} in a staging directory left: {e}", shown.display());
                }
            }
            Ok(unlinkat(tmp, &name[..], AtFlags::REMOVEDIR)?)
        })();
        if let Err(e) = cleared {
            let n = String::from_utf8_lossy(&name);
            tracing::debug!("{}: tmp/{n} left: {e}", shown.display());
        }
    }
}

/// Puts a staged folder's `cur/` or `new/` in place: the staging directory renamed, or
/// where that name is taken meanwhile (a mail server made the folder's `cur/`) or the
/// file system has no rename that refuses to replace, its messages moved into it one by
/// one, none replacing a file. Every message that stays in `tmp/` is listed in
/// `failures` with its path there, and so is a staging directory replaced meanwhile.
pub(super) fn unstage(
    dirs: &FolderDirs,
    tmp: BorrowedFd,
    run: &str,
    new: bool,
    failures: &RestoreFailures,
) {
    use rustix::fs::{fstat, renameat_with, statat, unlinkat, AtFlags, RenameFlags};
    let stage = &stage_names(run)[new as usize];
    let sub: &[u8] = if new { b"new" } else { b"cur" };
    let staged_at = dirs.path.join("tmp").join(stage);
    let fail = |what: PathBuf, e: std::io::Error| failures.add(what.display().to_string(), e);
    // The name must still be the directory this run wrote into.
    let same = |at: BorrowedFd, name: &[u8]| {
        let here = statat(at, name, AtFlags::SYMLINK_NOFOLLOW);
        let ours = fstat(dirs.sub(new));
        matches!((here, ours), (Ok(a), Ok(b)) if (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino))
    };
    if !same(tmp, stage.as_bytes()) {
        let why = "the staging directory was replaced during the restore: its messages were not put in place";
        return fail(staged_at, std::io::Error::other(why));
    }
    match renameat_with(tmp, stage.as_str(), &dirs.dir, sub, RenameFlags::NOREPLACE) {
        Ok(()) if same(dirs.dir.as_fd(), sub) => return,
        Ok(()) => {
            let why = "the folder's directory was replaced during the restore";
            return fail(dirs.shown(Some(new), b""), std::io::Error::other(why));
        }
        Err(Errno::EXIST | Errno::NOTEMPTY | Errno::INVAL | Errno::NOSYS) => {}
        Err(e) => return fail(staged_at, e.into()),
    }
    let to = match open_dir_at(dirs.dir.as_fd(), sub, Some(0o700)) {
        Ok(to) => to,
        Err(e) => return fail(dirs.shown(Some(new), b""), e),
    };
    let list = match rustix::fs::Dir::read_from(dirs.sub(new)) {
        Ok(list) => list,
        Err(e) => return fail(staged_at, e.into()),
    };
    // Named first: the directory is not read while it changes.
    let mut names = Vec::new();
    let mut left = false;
    for e in list {
        match e {
            Ok(e) if ![&b"."[..], b".."].contains(&e.file_name().to_bytes()) => {
                names.push(e.file_name().to_bytes().to_vec())
            }
            Ok(_) => {}
            Err(e) => {
                left = true;
                fail(staged_at.clone(), e.into());
                break;
            }
        }
    }
    for name in names {
        if let Err(e) = rename_noreplace(dirs.sub(new).as_fd(), &name, to.as_fd(), &name) {
            left = true;
            let at = staged_at.join(OsStr::from_bytes(&name));
            failures.add(
                at.display().to_string(),
                write_error(dirs.shown(Some(new), &name), e),
            );
        }
    }
    if !left {
        if let Err(e) = unlinkat(tmp, stage.as_str(), AtFlags::REMOVEDIR) {
            fail(staged_at, e.into());
        }
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
    use rustix::fs::{Mode, OFlags};
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
        let f = dir.path().join("f");
        let opened =
            |run| open_folder_dirs(f.clone(), root.as_fd(), &[b"f"], (false, Links::None), run);
        let dirs = opened("r1").unwrap();
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
        let (cur1, new1) = (
            f.join("tmp/.mailvault-restore-r1-cur"),
            f.join("tmp/.mailvault-restore-r1-new"),
        );
        assert!(cur1.join("y").exists());
        // Another run meanwhile neither takes nor removes this run's staging (locked).
        let other = opened("r2").unwrap();
        assert!(other.staged.is_some() && cur1.join("y").exists());
        drop(other);
        // The mail server's own `cur/`, with a message of the same name.
        fs::create_dir(f.join("cur")).unwrap();
        fs::write(f.join("cur/x"), "the server's x").unwrap();
        let failures = RestoreFailures::default();
        let tmp = dirs.staged.as_ref().unwrap();
        unstage(&dirs, tmp.as_fd(), "r1", false, &failures);
        unstage(&dirs, tmp.as_fd(), "r1", true, &failures);
        let listed = failures.take();
        assert_eq!(listed.len(), 1, "{listed:?}");
        assert!(
            listed[0].item.ends_with("tmp/.mailvault-restore-r1-cur/x"),
            "{listed:?}"
        );
        assert!(
            listed[0].error.contains("already exists: not overwritten"),
            "{listed:?}"
        );
        assert_eq!(
            fs::read_to_string(f.join("cur/x")).unwrap(),
            "the server's x"
        );
        check_written(&f.join("cur/y"), b"staged y");
        check_written(&f.join("new/n"), b"staged n");
        assert_eq!(fs::read_to_string(cur1.join("x")).unwrap(), "staged x");
        assert!(!new1.exists());
        // Opened again by a third run, it has its `cur/`: written there, nothing staged;
        // what the first run left (it is not running any more: no lock) is removed, and
        // so is what the second left.
        drop(dirs);
        let again = opened("r3").unwrap();
        assert!(again.staged.is_none());
        write_new_file(&again, Some(false), b"z", b"z", attrs).unwrap();
        check_written(&f.join("cur/z"), b"z");
        assert_eq!(fs::read_dir(f.join("tmp")).unwrap().count(), 0);
    }

    /// A staging directory replaced during the restore is not put in place, and said.
    #[test]
    fn a_replaced_staging_directory_is_not_put_in_place() {
        let dir = tempfile::tempdir().unwrap();
        let root = open(dir.path());
        let f = dir.path().join("f");
        let dirs =
            open_folder_dirs(f.clone(), root.as_fd(), &[b"f"], (false, Links::None), "r1").unwrap();
        let staged = f.join("tmp/.mailvault-restore-r1-cur");
        fs::rename(&staged, f.join("tmp/away")).unwrap();
        fs::create_dir(&staged).unwrap();
        fs::write(staged.join("planted"), "x").unwrap();
        let failures = RestoreFailures::default();
        unstage(
            &dirs,
            dirs.staged.as_ref().unwrap().as_fd(),
            "r1",
            false,
            &failures,
        );
        let listed = failures.take();
        assert_eq!(listed.len(), 1, "{listed:?}");
        assert!(
            listed[0].error.contains("replaced during the restore"),
            "{listed:?}"
        );
        assert!(!f.join("cur").exists());
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
