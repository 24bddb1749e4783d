//! Filesystem snapshots for consistent backups (`backup --snapshot btrfs|lvm|zfs`): a
//! read-only snapshot of the filesystem a source path is on, taken before the backup,
//! read instead of the live files (with the original paths recorded:
//! [`FsSnapshot::view_of`]), and always removed — after the backup, after a failure
//! ([`Drop`]), and, after a SIGKILL, by the next run ([`remove_stale`]), from the record
//! each snapshot leaves in the state directory until it is gone. docs/consistent-sources.md
//! says how to use it.
//!
//! - btrfs: `btrfs subvolume snapshot -r SUBVOL SUBVOL/.mailvault-snapshot-…` of the
//!   subvolume holding the path (a snapshot does not hold itself);
//!   `btrfs subvolume delete` removes it.
//! - ZFS: `zfs snapshot DATASET@mailvault-snapshot-…` of the dataset mounted at the path's
//!   mount point, read at `MOUNTPOINT/.zfs/snapshot/NAME`; `zfs destroy` removes it.
//! - LVM: `lvcreate -s` of the logical volume mounted at the path's mount point (10% of
//!   its size for changes), mounted read-only below the state directory; `umount` and
//!   `lvremove` remove it.

use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Snapshots are named with this prefix (and the process id and time), so that one left
/// behind is recognized.
pub const PREFIX: &str = "mailvault-snapshot-";

/// Test hook: with this set in the environment, the process sends itself SIGKILL right
/// after a snapshot was taken (and recorded): for the test that the next run removes it.
/// Never set it otherwise.
pub const KILL_AFTER_SNAPSHOT_ENV: &str = "MAILVAULT_SNAPSHOT_KILL";

/// The kind of filesystem snapshot.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    Btrfs,
    Lvm,
    Zfs,
}

impl std::str::FromStr for Kind {
    type Err = Error;
    fn from_str(s: &str) -> Result<Kind> {
        match s {
            "btrfs" => Ok(Kind::Btrfs),
            "lvm" => Ok(Kind::Lvm),
            "zfs" => Ok(Kind::Zfs),
            _ => Err(Error::InvalidInput(format!(
                "--snapshot {s:?}: not a kind of snapshot (btrfs, lvm or zfs)"
            ))),
        }
    }
}

/// What a snapshot's record (`<state>/fs-snapshots/<name>.json`) says: enough to remove
/// it after the run that took it was killed.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Record {
    kind: Kind,
    /// The process that took it (a record of a live process is not stale) ...
    pid: u32,
    /// ... and the boot it ran in (`/proc/sys/kernel/random/boot_id`): after a reboot
    /// the number may be another process's.
    #[serde(default)]
    boot: String,
    /// btrfs: the snapshot subvolume's path; ZFS: `dataset@name`; LVM: `vg/name`.
    id: String,
    /// The root the snapshot is read at (LVM: its mount point, unmounted first).
    view: PathBuf,
}

/// A filesystem snapshot taken for a backup; removed when dropped.
#[derive(Debug)]
pub struct FsSnapshot {
    record: Record,
    /// The filesystem root (subvolume, mount point) as the live files have it ...
    origin: PathBuf,
    /// ... and where the record is kept.
    record_path: PathBuf,
    removed: bool,
}

impl FsSnapshot {
    /// Takes a read-only snapshot of the filesystem holding `path` (absolute), recorded in
    /// `state` (the state directory) until it is removed.
    pub fn take(kind: Kind, path: &Path, state: &Path) -> Result<FsSnapshot> {
        let path = std::fs::canonicalize(path).map_err(|e| Error::io(path, e))?;
        let dir = state.join("fs-snapshots");
        std::fs::create_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let name = format!("{PREFIX}{}-{nanos}", std::process::id());
        let (origin, id, view) = match kind {
            Kind::Btrfs => {
                let subvol = origin(kind, &path)?;
                let snap = subvol.join(format!(".{name}"));
                let id = snap.display().to_string();
                (subvol, id, snap)
            }
            Kind::Zfs => {
                let (dataset, mountpoint) = zfs_dataset(&path)?;
                let view = mountpoint.join(".zfs/snapshot").join(&name);
                (mountpoint, format!("{dataset}@{name}"), view)
            }
            Kind::Lvm => {
                let (vg, _lv, mount) = lvm_volume(&path)?;
                (mount.target, format!("{vg}/{name}"), dir.join(&name))
            }
        };
        let snap = FsSnapshot {
            record: Record {
                kind,
                pid: std::process::id(),
                boot: boot_id(),
                id,
                view,
            },
            origin,
            record_path: dir.join(format!("{name}.json")),
            removed: false,
        };
        // Recorded before it exists: a run killed at any point leaves nothing unrecorded.
        let json = serde_json::to_vec(&snap.record).map_err(|e| Error::Internal(e.to_string()))?;
        std::fs::write(&snap.record_path, json).map_err(|e| Error::io(&snap.record_path, e))?;
        let made = match kind {
            Kind::Btrfs => run(Command::new("btrfs")
                .args(["subvolume", "snapshot", "-r"])
                .arg(&snap.origin)
                .arg(&snap.record.view)),
            Kind::Zfs => run(Command::new("zfs").arg("snapshot").arg(&snap.record.id)),
            Kind::Lvm => lvm_snapshot(&snap),
        };
        // Failed: nothing to remove, or what half of it there is: the drop removes it.
        made?;
        if std::env::var_os(KILL_AFTER_SNAPSHOT_ENV).is_some() {
            let _ = rustix::process::kill_process(
                rustix::process::getpid(),
                rustix::process::Signal::KILL,
            );
        }
        Ok(snap)
    }

    /// The root of the filesystem it snapshots, canonical (as [`origin`] gives it).
    pub fn origin(&self) -> &Path {
        &self.origin
    }

    /// Where the snapshot has what the live filesystem has at `original` (a path below
    /// the snapshotted filesystem's root); `None` for a path on another filesystem.
    pub fn view_of(&self, original: &Path) -> Option<PathBuf> {
        let original = std::fs::canonicalize(original).ok()?;
        let rel = original.strip_prefix(&self.origin).ok()?;
        Some(self.record.view.join(rel))
    }

    /// The snapshotted filesystem's root (a subvolume, a mount point), canonical, and the
    /// snapshot's root that holds the same files: a [`super::file::FileOptions::read_from`]
    /// entry.
    pub fn read_from(&self) -> (PathBuf, PathBuf) {
        (self.origin.clone(), self.record.view.clone())
    }

    /// The snapshot's name as the tool that made it knows it.
    pub fn id(&self) -> &str {
        &self.record.id
    }

    /// Removes the snapshot, then its record.
    pub fn remove(mut self) -> Result<()> {
        self.removed = true;
        remove(&self.record)?;
        let _ = std::fs::remove_file(&self.record_path);
        Ok(())
    }
}

impl Drop for FsSnapshot {
    fn drop(&mut self) {
        if !self.removed && remove(&self.record).is_ok() {
            let _ = std::fs::remove_file(&self.record_path);
        }
    }
}

/// The root of the filesystem a snapshot of `kind` takes for `path`: the btrfs subvolume
/// holding it, the mount point of its ZFS dataset or logical volume; canonical. Two paths
/// with the same origin are read from one snapshot.
pub fn origin(kind: Kind, path: &Path) -> Result<PathBuf> {
    let path = std::fs::canonicalize(path).map_err(|e| Error::io(path, e))?;
    match kind {
        Kind::Btrfs => btrfs_subvolume(&path),
        Kind::Zfs => zfs_dataset(&path).map(|(_, m)| m),
        Kind::Lvm => lvm_volume(&path).map(|(_, _, m)| m.target),
    }
}

/// Removes the snapshots recorded in `state` whose run is gone (killed before it could
/// remove them); the ids of those removed. One that cannot be removed is an error naming
/// it (its record stays, for the next run).
pub fn remove_stale(state: &Path) -> Result<Vec<String>> {
    let dir = state.join("fs-snapshots");
    let entries = match std::fs::read_dir(&dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::io(&dir, e)),
    };
    let mut removed = Vec::new();
    for e in entries {
        let path = e.map_err(|e| Error::io(&dir, e))?.path();
        if path.extension().is_none_or(|x| x != "json") {
            continue;
        }
        let data = std::fs::read(&path).map_err(|e| Error::io(&path, e))?;
        let record: Record = serde_json::from_slice(&data).map_err(|e| {
            Error::InvalidInput(format!("{}: not a snapshot record: {e}", path.display()))
        })?;
        if record.boot == boot_id() && alive(record.pid) {
            continue;
        }
        remove(&record).map_err(|e| {
            Error::InvalidInput(format!(
                "a snapshot left by a run that was killed, {}: not removed: {e}; remove it by hand, then {}",
                record.id,
                path.display()
            ))
        })?;
        std::fs::remove_file(&path).map_err(|e| Error::io(&path, e))?;
        removed.push(record.id);
    }
    Ok(removed)
}

/// This boot's id; empty where the kernel does not say.
fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// Whether the process `pid` is running (another backup still using its snapshot).
fn alive(pid: u32) -> bool {
    pid == std::process::id()
        || rustix::process::Pid::from_raw(pid as i32)
            .is_some_and(|p| rustix::process::test_kill_process(p).is_ok())
}

/// Removes a snapshot; one already gone is not an error.
fn remove(r: &Record) -> Result<()> {
    match r.kind {
        Kind::Btrfs => {
            if std::fs::symlink_metadata(&r.view).is_err() {
                return Ok(());
            }
            run(Command::new("btrfs")
                .args(["subvolume", "delete"])
                .arg(&r.view))
        }
        Kind::Zfs => {
            let there = Command::new("zfs")
                .args(["list", "-H", "-t", "snapshot", "-o", "name", &r.id])
                .output()
                .is_ok_and(|o| o.status.success());
            if !there {
                return Ok(());
            }
            run(Command::new("zfs").arg("destroy").arg(&r.id))
        }
        Kind::Lvm => {
            if is_mount_point(&r.view) {
                run(Command::new("umount").arg(&r.view))?;
            }
            let _ = std::fs::remove_dir(&r.view);
            let there = Command::new("lvs")
                .arg(&r.id)
                .output()
                .is_ok_and(|o| o.status.success());
            if !there {
                return Ok(());
            }
            run(Command::new("lvremove").arg("-f").arg(&r.id))
        }
    }
}

/// Runs a snapshot tool; its failure is an error with what it said.
fn run(cmd: &mut Command) -> Result<()> {
    let shown = format!("{cmd:?}").replace('"', "");
    let out = cmd
        .output()
        .map_err(|e| Error::InvalidInput(format!("{shown}: {e} (is the tool installed?)")))?;
    if out.status.success() {
        return Ok(());
    }
    Err(Error::InvalidInput(format!(
        "{shown}: {}",
        String::from_utf8_lossy(&out.stderr).trim()
    )))
}

/// The btrfs subvolume holding `path`: the nearest directory at or above it whose inode
/// is 256 (a subvolume's root) on the same device.
fn btrfs_subvolume(path: &Path) -> Result<PathBuf> {
    let fs = rustix::fs::statfs(path).map_err(|e| Error::io(path, e.into()))?;
    const BTRFS_SUPER_MAGIC: i64 = 0x9123_683E;
    if fs.f_type as i64 != BTRFS_SUPER_MAGIC {
        return Err(Error::InvalidInput(format!(
            "{}: not on a btrfs filesystem (--snapshot btrfs)",
            path.display()
        )));
    }
    let mut at = path.to_path_buf();
    if !at.is_dir() {
        at.pop();
    }
    loop {
        let m = std::fs::metadata(&at).map_err(|e| Error::io(&at, e))?;
        if m.ino() == 256 {
            return Ok(at);
        }
        if !at.pop() {
            return Err(Error::InvalidInput(format!(
                "{}: no btrfs subvolume holds it",
                path.display()
            )));
        }
    }
}

/// What is mounted where `path` is (`findmnt`, once).
struct Mount {
    /// The device or dataset mounted.
    source: String,
    /// The mount point.
    target: PathBuf,
    /// Its file system type (`btrfs`, `zfs`, `xfs`…).
    fstype: String,
}

fn mount_of(path: &Path) -> Result<Mount> {
    let out = Command::new("findmnt")
        .args(["-n", "-o", "SOURCE,TARGET,FSTYPE", "--target"])
        .arg(path)
        .output()
        .map_err(|e| Error::InvalidInput(format!("findmnt: {e}")))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let mut parts = text.split_whitespace();
    match (parts.next(), parts.next(), parts.next()) {
        (Some(source), Some(target), Some(fstype)) if out.status.success() => Ok(Mount {
            source: source.to_string(),
            target: PathBuf::from(target),
            fstype: fstype.to_string(),
        }),
        _ => Err(Error::InvalidInput(format!(
            "{}: its mount point is not known (findmnt)",
            path.display()
        ))),
    }
}

fn is_mount_point(path: &Path) -> bool {
    mount_of(path).is_ok_and(|m| m.target == path)
}

/// The ZFS dataset mounted where `path` is, and its mount point.
fn zfs_dataset(path: &Path) -> Result<(String, PathBuf)> {
    let m = mount_of(path)?;
    if m.fstype != "zfs" {
        return Err(Error::InvalidInput(format!(
            "{}: not on a ZFS dataset (--snapshot zfs)",
            path.display()
        )));
    }
    Ok((m.source, m.target))
}

/// The LVM volume group and logical volume mounted where `path` is, and the mount.
fn lvm_volume(path: &Path) -> Result<(String, String, Mount)> {
    let mount = mount_of(path)?;
    let out = Command::new("lvs")
        .args(["--noheadings", "-o", "vg_name,lv_name"])
        .arg(&mount.source)
        .output()
        .map_err(|e| Error::InvalidInput(format!("lvs: {e} (is lvm2 installed?)")))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let mut parts = text.split_whitespace();
    match (parts.next(), parts.next()) {
        (Some(vg), Some(lv)) if out.status.success() => Ok((vg.to_string(), lv.to_string(), mount)),
        _ => Err(Error::InvalidInput(format!(
            "{}: not on an LVM logical volume ({}; --snapshot lvm)",
            path.display(),
            mount.source
        ))),
    }
}

/// `lvcreate -s` of the volume under the snapshot's origin, mounted read-only at its view.
fn lvm_snapshot(snap: &FsSnapshot) -> Result<()> {
    let (vg, lv, mount) = lvm_volume(&snap.origin)?;
    let name = (snap.record.id.rsplit('/').next()).unwrap_or_default();
    run(Command::new("lvcreate")
        .args(["-s", "-l", "10%ORIGIN", "-n", name])
        .arg(format!("{vg}/{lv}")))?;
    std::fs::create_dir_all(&snap.record.view).map_err(|e| Error::io(&snap.record.view, e))?;
    // XFS refuses a second mount of the same filesystem UUID without `nouuid`.
    let opts = if mount.fstype == "xfs" {
        "ro,nouuid"
    } else {
        "ro"
    };
    run(Command::new("mount")
        .args(["-o", opts])
        .arg(format!("/dev/{vg}/{name}"))
        .arg(&snap.record.view))
}
