//! Skipping what did not change without listing it (docs/format.md, *Folders taken
//! unchanged*): the rule by which a folder's messages are the parent snapshot's without a
//! listing of its directories, and a file is the parent's without being read.
//!
//! A backup records this host's clock before it looks at any folder (the snapshot's
//! `started`), then per folder ([`FolderScan`]) the device, inode, mtime and ctime of the
//! directories the folder's messages are listed from (a Maildir's `cur` and `new`:
//! [`DirStamp`]), stat'ed before they are listed. The next backup stats them again: when
//! every stamp is the same and its mtime and ctime were older than `started` by a margin
//! ([`proven_old`]), nothing was added to, removed from or renamed in those directories
//! since they were stat'ed, so the listing the parent took after that `stat` is still the
//! directories' content. Why: a change of a directory's entries sets its mtime and ctime
//! to the filesystem's clock at that moment, which is later than `started` minus the
//! margin for a change after `started`; such a change would have left a newer time. A time not older than that (a change in
//! the same clock tick as the `stat` may leave it as it is) proves nothing: listed.

use crate::repo::tree::{DirStamp, FolderScan, Timestamp};
use crate::source::walk::{Dir, Stat};
use std::io;
use std::path::Path;

/// How much older than the clock reading a time must be to prove that no change came
/// after it, for a filesystem with nanosecond timestamps: the kernel stamps files with a
/// clock that lags by up to a tick (1-10 ms), and the filesystem's clock may not be this
/// host's (NFS: the server's, kept within this by NTP).
pub const FINE_MARGIN_SECS: i64 = 1;

/// The margin for a time with zero nanoseconds, taken for a filesystem with coarse
/// timestamps: one that keeps whole seconds (ext3, HFS+, many NFS servers) or even
/// seconds (FAT, 2 s), whose times round a change down by up to 2 s: 2 s more than
/// [`FINE_MARGIN_SECS`].
pub const COARSE_MARGIN_SECS: i64 = FINE_MARGIN_SECS + 2;

/// Whether a directory's time `t` was old enough at `at` (this host's clock when the
/// directory was stat'ed) that a change after `at` cannot have left it as it is: older by
/// the margin ([`FINE_MARGIN_SECS`], or [`COARSE_MARGIN_SECS`] for a time with zero
/// nanoseconds). A time in the future is not.
pub fn proven_old(t: Timestamp, at: Timestamp) -> bool {
    let margin = if t.nanos == 0 {
        COARSE_MARGIN_SECS
    } else {
        FINE_MARGIN_SECS
    };
    let limit = Timestamp {
        secs: at.secs.saturating_sub(margin),
        nanos: at.nanos,
    };
    t < limit
}

/// Whether a folder whose directories have the stamps `now` (stat'ed this backup) is
/// proven unchanged since the parent's `scan`, taken by a backup that started at
/// `started`: the same directories (none missing, none new), each with the same device,
/// inode, mtime and ctime, and those times older than `started` by the margin
/// ([`proven_old`]). A scan without stamps proves nothing.
pub fn proven_unchanged(parent: &FolderScan, started: Timestamp, now: &[DirStamp]) -> bool {
    !parent.dirs.is_empty()
        && parent.dirs == now
        && (parent.dirs.iter())
            .all(|d| proven_old(d.mtime, started) && proven_old(d.ctime, started))
}

/// Whether a file the parent recorded with the mtime `mtime` may be taken as unchanged
/// when its size, mtime and inode are the same: its mtime was older than the start of the
/// parent's backup (`started`) by the margin (else a write in the same clock tick as the
/// parent's `stat` may have left all three as they were). A parent that recorded no
/// start (an older snapshot) proves it, as before.
pub fn file_proven(mtime: Timestamp, started: Option<Timestamp>) -> bool {
    started.is_none_or(|s| proven_old(mtime, s))
}

/// This host's clock, read when a backup starts, before any folder is looked at (tests
/// may set it for a backup whose first account is below a path of theirs: `hook`).
pub fn clock(folder: &Path) -> Timestamp {
    let d = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    #[allow(unused_mut)]
    let mut at = Timestamp {
        secs: d.as_secs() as i64,
        nanos: d.subsec_nanos(),
    };
    #[cfg(any(test, feature = "testing"))]
    hook::fire(folder, &mut hook::Look::Clock(&mut at));
    let _ = folder;
    at
}

/// The stamp of the directory `name` of `dir`, not following a link; `None` if it is not
/// there, an error if it is not a directory (a link, a file) or cannot be stat'ed.
pub fn stamp(dir: &Dir, name: &[u8]) -> io::Result<Option<DirStamp>> {
    let st = match dir.stat(name) {
        Ok(st) => st,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    if crate::source::walk::file_type(&st) != crate::source::walk::FileType::Directory {
        return Err(io::Error::other("not a directory"));
    }
    #[allow(unused_mut)]
    let mut s = stamp_of(name, &st);
    #[cfg(any(test, feature = "testing"))]
    hook::fire(&dir.join(name), &mut hook::Look::Stamp(&mut s));
    Ok(Some(s))
}

// The `stat` fields' types differ between platforms: the casts are not all no-ops.
#[allow(clippy::unnecessary_cast)]
fn stamp_of(name: &[u8], st: &Stat) -> DirStamp {
    let ts = |secs: i64, nanos: i64| Timestamp {
        secs,
        nanos: nanos.clamp(0, 999_999_999) as u32,
    };
    DirStamp {
        name: name.to_vec(),
        dev: st.st_dev as u64,
        inode: st.st_ino as u64,
        mtime: ts(st.st_mtime as i64, st.st_mtime_nsec as i64),
        ctime: ts(st.st_ctime as i64, st.st_ctime_nsec as i64),
    }
}

/// What tests may change of what a backup sees, below a directory (test builds, the
/// `testing` feature): the clock read when the backup starts, and the stamps of folders'
/// directories, so that a filesystem with coarse timestamps, or a change in the same
/// clock tick as a `stat`, can be played deterministically.
#[cfg(any(test, feature = "testing"))]
pub mod hook {
    use crate::repo::tree::{DirStamp, Timestamp};
    use crate::source::walk::hook::{Registry, RegistryGuard};
    use std::path::Path;
    use std::sync::Arc;

    /// What is about to be used.
    pub enum Look<'a> {
        /// The clock read when a backup starts (the path given: its first account's).
        Clock(&'a mut Timestamp),
        /// The stamp of a directory (the path given: `…/cur`).
        Stamp(&'a mut DirStamp),
    }

    type Callback = dyn Fn(&Path, &mut Look<'_>) + Send + Sync;

    static HOOKS: Registry<Callback> = Registry::new();

    /// Removes its hook when dropped.
    pub type Guard = RegistryGuard<Callback>;

    /// Runs `f` on every clock reading and stamp of a path below `under`.
    pub fn set(under: &Path, f: impl Fn(&Path, &mut Look<'_>) + Send + Sync + 'static) -> Guard {
        HOOKS.add(under, Arc::new(f))
    }

    pub(crate) fn fire(path: &Path, look: &mut Look<'_>) {
        for h in HOOKS.below(path) {
            h(path, look);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(secs: i64, nanos: u32) -> Timestamp {
        Timestamp { secs, nanos }
    }

    fn stamp(name: &str, t: Timestamp) -> DirStamp {
        DirStamp {
            name: name.as_bytes().to_vec(),
            dev: 1,
            inode: 2,
            mtime: t,
            ctime: t,
        }
    }

    #[test]
    fn times_are_proven_old_only_beyond_the_margin() {
        let at = ts(1000, 500_000_000);
        assert!(proven_old(ts(999, 400_000_000), at));
        assert!(!proven_old(ts(999, 500_000_000), at), "exactly the margin");
        assert!(!proven_old(ts(1000, 100), at), "the same second");
        assert!(!proven_old(ts(1001, 1), at), "in the future");
        // Zero nanoseconds: a coarse filesystem, 3 s.
        assert!(!proven_old(ts(998, 0), at));
        assert!(!proven_old(ts(997, 0), ts(1000, 0)));
        assert!(proven_old(ts(997, 0), at));
    }

    #[test]
    fn a_folder_is_unchanged_only_with_the_same_old_stamps() {
        let (old, at) = (ts(900, 1), ts(1000, 0));
        let scan = FolderScan {
            dirs: vec![stamp("cur", old), stamp("new", old)],
            ..FolderScan::default()
        };
        assert!(proven_unchanged(&scan, at, &scan.dirs));
        let mut moved = scan.dirs.clone();
        moved[1].ctime = ts(1001, 0);
        assert!(!proven_unchanged(&scan, at, &moved));
        let mut other = scan.dirs.clone();
        other[0].inode = 3;
        assert!(!proven_unchanged(&scan, at, &other));
        assert!(!proven_unchanged(&scan, at, &scan.dirs[..1]), "new/ gone");
        let recent = FolderScan {
            dirs: vec![stamp("cur", ts(999, 900_000_000)), stamp("new", old)],
            ..scan.clone()
        };
        assert!(!proven_unchanged(&recent, at, &recent.dirs));
        let none = FolderScan::default();
        assert!(!proven_unchanged(&none, at, &[]));
    }
}
