//! Issue 14, large files: `backup file:PATH...` and `restore SNAPSHOT --target dir:DIR`
//! through the `mailvault` binary. A database-like file of `MAILVAULT_FILES_DB_MB` MiB
//! (1 GiB unless set, as the issue asks; 4 KiB pages, part incompressible) and a small tree (subdirectories, modes, an owner, a sparse file, an
//! empty file, a hard link, an mtime in the past) are backed up; 10% of the pages are rewritten and a
//! block inserted near the start, and backed up again (it must add well under the first
//! and read the whole changed file); a third backup of nothing changed reads nothing.
//! Every snapshot is restored and compared: bytes, modes, owners, mtimes, sparseness,
//! hard links.
//! Then `--include`/`--exclude`, a path that does not exist, and an `s3:` repository.
#![allow(clippy::unwrap_used)]

mod common;

use common::Env;
use mailvault_core::source::file::testdata::{self, database_like};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io::{Seek, SeekFrom, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, UNIX_EPOCH};

const PAGE: usize = testdata::PAGE;

/// The change between two backups: 10% of the pages rewritten (scattered, at random) and
/// 64 KiB of new pages inserted near the start.
fn rewrite(db: &[u8], seed: u64) -> Vec<u8> {
    testdata::rewrite_database(db, 0.10, 64 << 10, seed)
}

fn set_mtime(p: &Path, secs: u64, nanos: u32) {
    let t = UNIX_EPOCH + Duration::new(secs, nanos);
    fs::File::open(p).unwrap().set_modified(t).unwrap();
}

fn chmod(p: &Path, mode: u32) {
    fs::set_permissions(p, fs::Permissions::from_mode(mode)).unwrap();
}

/// A sparse file: 4 KiB of data, a hole of 8 MiB, 4 KiB of data, a trailing hole of
/// 4 MiB.
fn write_sparse(p: &Path) {
    let mut f = fs::File::create(p).unwrap();
    f.write_all(&[0xa5; PAGE]).unwrap();
    f.seek(SeekFrom::Start((8 << 20) + PAGE as u64)).unwrap();
    f.write_all(&[0x5a; PAGE]).unwrap();
    f.set_len(12 << 20).unwrap();
}

/// Whether `p` holds fewer allocated bytes than its length.
fn is_sparse(p: &Path) -> bool {
    let m = fs::metadata(p).unwrap();
    m.blocks() * 512 < m.len()
}

/// The small tree: nested directories with their own modes, a file and a link owned by
/// another user (when run as root), an executable, an empty file, a sparse file, symbolic
/// links, a file with a second name (a hard link: [`HARD_LINK`]) and a file (and a
/// directory) with an mtime in the past. Directory mtimes are set last.
fn small_tree(root: &Path) {
    fs::create_dir_all(root.join("etc/conf.d")).unwrap();
    fs::create_dir_all(root.join("data/index/deep")).unwrap();
    fs::write(root.join("etc/server.conf"), "listen = 993\n").unwrap();
    chmod(&root.join("etc/server.conf"), 0o640);
    fs::write(root.join("etc/conf.d/10-mail.conf"), "mail_location = x\n").unwrap();
    chmod(&root.join("etc/conf.d/10-mail.conf"), 0o600);
    fs::write(root.join("etc/hook.sh"), "#!/bin/sh\nexit 0\n").unwrap();
    chmod(&root.join("etc/hook.sh"), 0o755);
    fs::write(root.join("data/empty"), "").unwrap();
    write_sparse(&root.join("data/sparse.img"));
    fs::write(
        root.join("data/index/deep/terms.idx"),
        database_like(40_000, 9),
    )
    .unwrap();
    fs::write(root.join("data/old.log"), "from 2001\n").unwrap();
    set_mtime(&root.join("data/old.log"), 978_307_200, 123_456_789);
    // Symbolic links, kept as links: relative, absolute, dangling; with their own
    // mtime (set without following them).
    std::os::unix::fs::symlink("index/deep/terms.idx", root.join("data/current")).unwrap();
    std::os::unix::fs::symlink("/etc/hostname", root.join("etc/hostname")).unwrap();
    std::os::unix::fs::symlink("gone.db", root.join("data/dangling")).unwrap();
    let touched = std::process::Command::new("touch")
        .args(["-h", "-d", "@1234567890.5"])
        .arg(root.join("data/current"))
        .status()
        .unwrap();
    assert!(touched.success());
    // A hard link: one file, two names in two directories.
    fs::hard_link(root.join(HARD_LINK.0), root.join(HARD_LINK.1)).unwrap();
    // Another owner, where the test may give one (as root), for a file and a link.
    let _ = std::os::unix::fs::chown(root.join("etc/server.conf"), Some(4321), Some(4322));
    let _ = std::os::unix::fs::lchown(root.join("etc/hostname"), Some(4321), Some(4322));
    chmod(&root.join("etc/conf.d"), 0o700);
    chmod(&root.join("data/index"), 0o750);
    set_mtime(&root.join("data/index/deep"), 1_000_000_000, 0);
    set_mtime(&root.join("data/index"), 1_100_000_000, 5);
}

/// The two names of one file in [`small_tree`].
const HARD_LINK: (&str, &str) = ("etc/server.conf", "data/server.conf.bak");

/// Whether the two names of [`HARD_LINK`] below `root` are one file, with two links.
#[track_caller]
fn assert_hard_link(root: &Path) {
    let (a, b) = (root.join(HARD_LINK.0), root.join(HARD_LINK.1));
    let (ma, mb) = (fs::metadata(&a).unwrap(), fs::metadata(&b).unwrap());
    assert_eq!(
        (ma.ino(), ma.nlink()),
        (mb.ino(), 2),
        "{} and {} are not one file",
        a.display(),
        b.display()
    );
}

/// Whether a restore gives directories back their mtimes: yes, the account tree (version
/// 4) records each folder directory's mtime and the restore sets it last, deepest first.
const DIR_MTIMES_KEPT: bool = true;

/// What a restore must give back of one node below a root.
#[derive(Debug, PartialEq)]
struct Node {
    kind: &'static str,
    mode: u32,
    uid: u32,
    gid: u32,
    mtime: (i64, i64),
    len: u64,
    /// BLAKE3 of a file's bytes or a symbolic link's target (a 1 GiB file is hashed as it
    /// is read, not held).
    digest: [u8; 32],
}

/// Every node below `root` (a directory or a file; `""` is the root itself) by relative
/// path.
fn nodes(root: &Path) -> BTreeMap<String, Node> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(p) = stack.pop() {
        let m = fs::symlink_metadata(&p).unwrap();
        let ft = m.file_type();
        let mut hasher = blake3::Hasher::new();
        let kind = if ft.is_dir() {
            for e in fs::read_dir(&p).unwrap() {
                stack.push(e.unwrap().path());
            }
            "dir"
        } else if ft.is_symlink() {
            let t = fs::read_link(&p).unwrap();
            hasher.update(t.as_os_str().as_encoded_bytes());
            "symlink"
        } else {
            hasher.update_reader(fs::File::open(&p).unwrap()).unwrap();
            "file"
        };
        let rel = p.strip_prefix(root).unwrap().to_string_lossy().into_owned();
        out.insert(
            rel,
            Node {
                kind,
                mode: m.mode() & 0o7777,
                uid: m.uid(),
                gid: m.gid(),
                mtime: (m.mtime(), m.mtime_nsec()),
                len: if ft.is_dir() { 0 } else { m.len() },
                digest: *hasher.finalize().as_bytes(),
            },
        );
    }
    out
}

/// `got` and `want` hold the same nodes (the root itself included: it is a backed-up
/// path) with the same kinds, bytes, modes, owners and mtimes (directories' mtimes only
/// when [`DIR_MTIMES_KEPT`]), naming each difference instead of dumping bytes.
#[track_caller]
fn assert_same_tree(got: &Path, want: &Path) {
    let (g, w) = (nodes(got), nodes(want));
    let mut diffs = Vec::new();
    for (k, want) in &w {
        let Some(got) = g.get(k) else {
            diffs.push(format!("missing {k:?}"));
            continue;
        };
        let mut what = Vec::new();
        if got.kind != want.kind {
            what.push(format!("kind {} vs {}", got.kind, want.kind));
        }
        if got.len != want.len || got.digest != want.digest {
            what.push(format!("bytes differ (len {} vs {})", got.len, want.len));
        }
        if got.mode != want.mode {
            what.push(format!("mode {:o} vs {:o}", got.mode, want.mode));
        }
        if (got.uid, got.gid) != (want.uid, want.gid) {
            what.push(format!(
                "owner {}:{} vs {}:{}",
                got.uid, got.gid, want.uid, want.gid
            ));
        }
        if got.mtime != want.mtime && (got.kind != "dir" || DIR_MTIMES_KEPT) {
            what.push(format!("mtime {:?} vs {:?}", got.mtime, want.mtime));
        }
        if !what.is_empty() {
            diffs.push(format!("{k:?}: {}", what.join(", ")));
        }
    }
    diffs.extend(
        g.keys()
            .filter(|k| !w.contains_key(*k))
            .map(|k| format!("extra {k:?}")),
    );
    assert!(
        diffs.is_empty(),
        "{} vs {}:\n{}",
        got.display(),
        want.display(),
        diffs.join("\n")
    );
}

/// Where a restore to `dir:OUT` puts the path `src` (absolute): OUT/<src without its
/// leading />.
fn restored(out: &Path, src: &Path) -> PathBuf {
    out.join(src.strip_prefix("/").unwrap())
}

fn u(v: &Value, key: &str) -> u64 {
    v[key].as_u64().unwrap_or_else(|| panic!("no {key} in {v}"))
}

/// The source paths of a test: `src/db/mail.nsf` (the database) and `src/tree` (the
/// small tree), absolute and free of symbolic links, so that the restored paths are known.
struct Sources {
    db: PathBuf,
    tree: PathBuf,
}

fn sources(e: &Env) -> Sources {
    let src = e.path("src");
    fs::create_dir_all(src.join("db")).unwrap();
    fs::create_dir_all(src.join("tree")).unwrap();
    let src = src.canonicalize().unwrap();
    Sources {
        db: src.join("db/mail.nsf"),
        tree: src.join("tree"),
    }
}

fn arg(p: &Path) -> String {
    format!("file:{}", p.display())
}

fn dir(e: &Env, name: &str) -> String {
    format!("dir:{}", e.path(name).display())
}

/// The whole story of a database file and a small tree: three backups, three restores.
#[test]
fn a_database_file_and_a_tree_back_up_incrementally_and_restore_exactly() {
    let e = Env::new();
    e.ok(&["init"]);
    let s = sources(&e);
    let v1 = database_like(common::env_mib("MAILVAULT_FILES_DB_MB", 1024) << 20, 14);
    fs::write(&s.db, &v1).unwrap();
    chmod(&s.db, 0o660);
    small_tree(&s.tree);
    assert_hard_link(&s.tree);
    assert!(
        is_sparse(&s.tree.join("data/sparse.img")),
        "the test's file system keeps no holes"
    );
    // What the first snapshot must give back, with its modes, owners and mtimes.
    common::copy_tree(&s.tree, &e.path("want1-tree"));
    common::copy_tree(&s.db, &e.path("want1.nsf"));

    let (db, tree) = (arg(&s.db), arg(&s.tree));
    common::at_rest();
    let first = e.json(0, &["backup", &db, &tree]);
    assert_eq!(first["failures"], Value::Array(vec![]), "{first}");
    // Every file is read once (a sparse file's holes may be skipped).
    let tree_bytes: u64 = nodes(&s.tree).values().map(|n| n.len).sum();
    let read = u(&first, "bytes_read");
    assert!(
        read >= v1.len() as u64 && read <= v1.len() as u64 + tree_bytes,
        "{first}"
    );

    // 10% of the pages rewritten and 64 KiB inserted at 1 MiB, in place (same inode).
    let v2 = rewrite(&v1, 14);
    let ino = fs::metadata(&s.db).unwrap().ino();
    fs::write(&s.db, &v2).unwrap();
    assert_eq!(fs::metadata(&s.db).unwrap().ino(), ino);
    // Neither is needed again: a gigabyte each.
    let v2_len = v2.len() as u64;
    drop((v1, v2));
    common::at_rest();
    let second = e.json(0, &["backup", &db, &tree]);
    assert_eq!(second["failures"], Value::Array(vec![]), "{second}");
    assert_eq!(
        u(&second, "bytes_read"),
        v2_len,
        "the second backup reads the whole changed file and nothing else: {second}"
    );
    let (added1, added2) = (u(&first, "bytes_added"), u(&second, "bytes_added"));
    eprintln!("added: first {added1}, second {added2}");
    assert!(
        (added2 as f64) < 0.4 * added1 as f64,
        "the second backup adds {added2} bytes, the first {added1}: \
         a 10% rewrite must store little more than the pages it touched"
    );

    // Nothing changed: no file content read.
    let third = e.json(0, &["backup", &db, &tree]);
    assert_eq!(u(&third, "bytes_read"), 0, "{third}");
    assert!(
        u(&third, "bytes_added") < added2 / 10,
        "nothing changed, yet {} bytes added",
        u(&third, "bytes_added")
    );

    // Each snapshot restores to what it saw.
    let want = [
        (&first, e.path("want1.nsf"), e.path("want1-tree")),
        (&second, s.db.clone(), s.tree.clone()),
        (&third, s.db.clone(), s.tree.clone()),
    ];
    // (The hard link comes back as a hard link, counted in the report: once as text.)
    for (n, (report, want_db, want_tree)) in want.iter().enumerate() {
        let out = format!("out{n}");
        let snap = report["snapshot"].as_str().unwrap();
        let args = ["restore", snap, "--target", &dir(&e, &out)];
        if n == 0 {
            let text = e.ok(&args);
            assert!(text.contains(" and 1 hard link, "), "{text}");
        } else {
            let rep = e.json(0, &args);
            assert_eq!(u(&rep, "files_linked"), 1, "{rep}");
        }
        let out = e.path(&out);
        assert_same_tree(&restored(&out, &s.db), want_db);
        assert_same_tree(&restored(&out, &s.tree), want_tree);
        assert_hard_link(&restored(&out, &s.tree));
        let sparse = restored(&out, &s.tree.join("data/sparse.img"));
        assert!(
            is_sparse(&sparse),
            "snapshot {n}: {} restored with {} bytes allocated for {} bytes",
            sparse.display(),
            fs::metadata(&sparse).unwrap().blocks() * 512,
            fs::metadata(&sparse).unwrap().len()
        );
        // A gigabyte each: gone before the next (best effort: modes may forbid it).
        let _ = fs::remove_dir_all(&out);
    }
}

/// `--include` keeps only the files it names (directories are descended), `--exclude`
/// leaves out files and whole directories.
#[test]
fn include_and_exclude_select_files() {
    let e = Env::new();
    e.ok(&["init"]);
    let root = e.path("src");
    for (p, body) in [
        ("a.nsf", "a"),
        ("b.log", "b"),
        ("sub/c.nsf", "c"),
        ("sub/d.nsf.tmp", "d"),
        ("cache/e.nsf", "e"),
        ("cache/f.log", "f"),
    ] {
        fs::create_dir_all(root.join(p).parent().unwrap()).unwrap();
        fs::write(root.join(p), body).unwrap();
    }
    let root = root.canonicalize().unwrap();
    let files_in = |out: &str| -> BTreeSet<String> {
        nodes(&restored(&e.path(out), &root))
            .into_iter()
            .filter(|(_, n)| n.kind == "file")
            .map(|(k, _)| k)
            .collect()
    };
    let set = |v: &[&str]| -> BTreeSet<String> { v.iter().map(|s| s.to_string()).collect() };

    e.ok(&[
        "backup",
        &arg(&root),
        "--include",
        "*.nsf",
        "--exclude",
        "cache",
    ]);
    e.ok(&["restore", "latest", "--target", &dir(&e, "out1")]);
    assert_eq!(files_in("out1"), set(&["a.nsf", "sub/c.nsf"]));

    e.ok(&[
        "backup",
        &arg(&root),
        "--exclude",
        "*.log",
        "--exclude",
        "*.tmp",
    ]);
    e.ok(&["restore", "latest", "--target", &dir(&e, "out2")]);
    assert_eq!(
        files_in("out2"),
        set(&["a.nsf", "sub/c.nsf", "cache/e.nsf"])
    );
    assert_same_tree(
        &restored(&e.path("out2"), &root.join("sub/c.nsf")),
        &root.join("sub/c.nsf"),
    );
}

/// A path that does not exist is an error naming it, and no snapshot is made, even when
/// the other paths exist; the paths that exist back up.
#[test]
fn a_path_that_does_not_exist_is_a_clear_error() {
    let e = Env::new();
    e.ok(&["init"]);
    fs::create_dir_all(e.path("src")).unwrap();
    fs::write(e.path("src/a.db"), "data").unwrap();
    let good = arg(&e.path("src/a.db").canonicalize().unwrap());
    e.ok(&["backup", &good]);
    let missing = e.path("no/such/file.nsf");
    for args in [
        vec!["backup", &arg(&missing)],
        vec!["backup", &good, &arg(&missing)],
    ] {
        let (code, _, err) = e.run_text(&args);
        assert_eq!(code, Some(2), "{args:?}: {err}");
        let lower = err.to_lowercase();
        assert!(
            err.contains(&missing.display().to_string())
                && (lower.contains("not exist") || lower.contains("no such file")),
            "the error names the path and says it is missing: {err}"
        );
    }
    let snaps = e.json(0, &["snapshots"]);
    assert_eq!(snaps.as_array().map(Vec::len), Some(1), "{snaps}");
}

/// The same through a repository on object storage (MinIO): an incremental reads only
/// the changed file; both snapshots restore exactly.
#[test]
fn files_on_an_s3_repository() {
    let e = Env::s3("files");
    e.ok(&["init"]);
    let s = sources(&e);
    let v1 = database_like(4 << 20, 3);
    fs::write(&s.db, &v1).unwrap();
    small_tree(&s.tree);
    common::copy_tree(&s.db, &e.path("want1.nsf"));
    common::at_rest();
    let first = e.json(0, &["backup", &arg(&s.db), &arg(&s.tree)]);
    let v2 = rewrite(&v1, 3);
    fs::write(&s.db, &v2).unwrap();
    let second = e.json(0, &["backup", &arg(&s.db), &arg(&s.tree)]);
    assert_eq!(u(&second, "bytes_read"), v2.len() as u64, "{second}");
    for (n, (report, want_db)) in [(&first, e.path("want1.nsf")), (&second, s.db.clone())]
        .iter()
        .enumerate()
    {
        let out = format!("out{n}");
        let snap = report["snapshot"].as_str().unwrap();
        e.ok(&["restore", snap, "--target", &dir(&e, &out)]);
        assert_same_tree(&restored(&e.path(&out), &s.db), want_db);
        assert_same_tree(&restored(&e.path(&out), &s.tree), &s.tree);
    }
}
