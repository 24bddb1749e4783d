//! Issue 24, item 16: `backup --snapshot btrfs` on a real btrfs filesystem (a 256 MiB
//! image on a loop device, made and mounted by the test: it needs root and btrfs-progs,
//! which scripts/setup.sh installs). The backup reads a read-only snapshot, records the
//! original paths (the same accounts, the parent found by the next run), and removes the
//! snapshot after a success, after a failure, and, left by a SIGKILLed run, in the next
//! run.
#![allow(clippy::unwrap_used)]

mod common;

use common::Env;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A btrfs filesystem on a loop device, mounted; unmounted and freed when dropped (also
/// when the test fails).
struct Btrfs {
    _dir: tempfile::TempDir,
    mnt: PathBuf,
    dev: Option<String>,
}

fn sh(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

impl Btrfs {
    fn new() -> Btrfs {
        let dir = tempfile::tempdir().unwrap();
        let img = dir.path().join("fs.img");
        std::fs::File::create(&img)
            .unwrap()
            .set_len(256 << 20)
            .unwrap();
        sh(Command::new("mkfs.btrfs").arg("-q").arg(&img));
        let mnt = dir.path().join("mnt");
        std::fs::create_dir(&mnt).unwrap();
        let mut fs = Btrfs {
            mnt,
            dev: None,
            _dir: dir,
        };
        let dev = sh(Command::new("losetup").args(["-f", "--show"]).arg(&img));
        fs.dev = Some(dev.trim().to_string());
        sh(Command::new("mount").arg(dev.trim()).arg(&fs.mnt));
        fs
    }

    /// The snapshots mailvault made that are there.
    fn ours(&self) -> Vec<String> {
        let list = sh(Command::new("btrfs")
            .args(["subvolume", "list"])
            .arg(&self.mnt));
        (list.lines())
            .filter(|l| l.contains("mailvault-snapshot-"))
            .map(str::to_string)
            .collect()
    }
}

impl Drop for Btrfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.mnt).status();
        if let Some(dev) = &self.dev {
            let _ = Command::new("losetup").arg("-d").arg(dev).status();
        }
    }
}

fn write(p: &Path, data: &[u8]) {
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, data).unwrap();
}

#[test]
fn a_btrfs_snapshot_is_backed_up_as_the_original_paths_and_always_removed() {
    if sh(Command::new("id").arg("-u")).trim() != "0" {
        // CI runs as root: there the test must run.
        assert!(
            std::env::var_os("MAILVAULT_CI").is_none(),
            "a_btrfs_snapshot_…: needs root (a loop device and a mount)"
        );
        eprintln!("a_btrfs_snapshot_…: not run: it needs root (a loop device and a mount)");
        return;
    }
    let fs = Btrfs::new();
    sh(Command::new("btrfs")
        .args(["subvolume", "create"])
        .arg(fs.mnt.join("data")));
    let db = fs.mnt.join("data/db");
    write(&db.join("names.nsf"), &vec![7u8; 300 << 10]);
    write(&db.join("sub/notes.txt"), b"notes\n");
    let e = Env::new();
    e.expect(0, &["init"]);
    let source = format!("file:{}", db.display());
    let backup = ["backup", source.as_str(), "--snapshot", "btrfs"];

    common::at_rest();
    let first = e.json(0, &backup);
    assert_eq!(first["source"], source.as_str(), "the original path");
    assert_eq!(first["items_new"], 2);
    assert!(fs.ours().is_empty(), "left: {:?}", fs.ours());
    let records = e.state_dir().join("fs-snapshots");
    assert_eq!(std::fs::read_dir(&records).unwrap().count(), 0);
    // Restored at the original paths, with the original bytes.
    let out = e.path("out");
    e.expect(
        0,
        &[
            "restore",
            "latest",
            "--target",
            &format!("dir:{}", out.display()),
        ],
    );
    let back = out.join(db.strip_prefix("/").unwrap());
    assert_eq!(
        std::fs::read(back.join("sub/notes.txt")).unwrap(),
        b"notes\n"
    );
    assert_eq!(
        std::fs::read(back.join("names.nsf")).unwrap().len(),
        300 << 10
    );

    // The next run finds the first as its parent: nothing read again.
    let second = e.json(0, &backup);
    assert_eq!(second["parent"], first["snapshot"]);
    assert_eq!(
        (
            second["items_unchanged"].as_u64(),
            second["bytes_read"].as_u64()
        ),
        (Some(2), Some(0))
    );
    assert!(fs.ours().is_empty());

    // A run that fails after the snapshot was taken (a wrong password) removes it.
    let failed = e
        .cmd(&backup)
        .env("MAILVAULT_PASSWORD_FILE", e.path("wrong"))
        .output()
        .unwrap();
    std::fs::write(e.path("wrong"), "wrong\n").unwrap();
    let failed_too = e
        .cmd(&backup)
        .env("MAILVAULT_PASSWORD_FILE", e.path("wrong"))
        .output()
        .unwrap();
    assert!(!failed.status.success() && !failed_too.status.success());
    assert!(
        fs.ours().is_empty(),
        "left by a failed run: {:?}",
        fs.ours()
    );

    // A run killed with the snapshot taken leaves it; the next run removes it, says so,
    // and backs up.
    let killed = e
        .cmd(&backup)
        .env("MAILVAULT_SNAPSHOT_KILL", "1")
        .output()
        .unwrap();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(killed.status.signal(), Some(9), "{killed:?}");
    assert_eq!(fs.ours().len(), 1, "the killed run's snapshot is there");
    let out = e.expect(0, &backup);
    assert!(
        out.contains("removed the filesystem snapshot") && out.contains("mailvault-snapshot-"),
        "{out}"
    );
    assert!(fs.ours().is_empty(), "{:?}", fs.ours());
    assert_eq!(std::fs::read_dir(&records).unwrap().count(), 0);

    // Globs match the live paths.
    let sub = db.join("sub").display().to_string();
    let only = e.json(0, &[&backup[..], &["--exclude", &sub]].concat());
    assert_eq!(only["items_total"], 1, "{only}");

    // A subvolume nested below: a snapshot of its own when given as a path of its own.
    let nested = db.join("nested");
    sh(Command::new("btrfs")
        .args(["subvolume", "create"])
        .arg(&nested));
    write(&nested.join("inner.db"), b"inner\n");
    let inner = format!("file:{}", nested.display());
    let both = [&backup[..], &[inner.as_str()]].concat();
    let r = e.json(0, &both);
    assert_eq!(r["accounts"], 2, "{r}");
    assert_eq!(r["items_total"], 3, "names.nsf, notes.txt, inner.db: {r}");
    assert!(fs.ours().is_empty(), "{:?}", fs.ours());

    // A Maildir store the same way: the live label and account names.
    let store = fs.mnt.join("data/vmail");
    let md = store.join("example.org/bob/Maildir");
    for d in ["cur", "new", "tmp"] {
        std::fs::create_dir_all(md.join(d)).unwrap();
    }
    write(&md.join("cur/1.M1P1.mx:2,S"), b"Subject: hi\n\nhello\n");
    let source = format!("maildir:{}", store.display());
    let r = e.json(0, &["backup", &source, "--snapshot", "btrfs"]);
    assert_eq!(r["source"], source.as_str());
    assert_eq!(r["items_new"], 1);
    let accounts = e.ok(&["ls", "latest"]);
    assert!(accounts.contains("bob@example.org"), "{accounts}");
    assert!(fs.ours().is_empty(), "{:?}", fs.ours());
}
