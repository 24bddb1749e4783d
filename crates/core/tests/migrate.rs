//! `mailvault migrate` (issue 11): the format-1 fixtures migrate to format 2, check clean
//! and restore byte-exact; a migration interrupted at any write leaves a repository that
//! opens, checks clean, and is finished by running migrate again.
#![allow(clippy::unwrap_used)]

mod common;

use common::*;
use mailvault_core::error::Error;
use mailvault_core::ops::migrate::{migrate, MigrateOptions, MigrateReport};
use mailvault_core::repo::format::Version;
use mailvault_core::store::{
    Backend, ByteRange, Handle, Hint, Listing, LocalStore, MemoryStore, ObjectInfo, Store,
    WriteMode,
};
use mailvault_core::{InitOptions, Repository};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

fn fixtures() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

/// Copies a fixture into `to` (fixtures are never modified).
fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let dest = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &dest);
        } else {
            std::fs::copy(e.path(), dest).unwrap();
        }
    }
}

/// Puts every file of a fixture into `store`.
fn load_fixture(from: &Path, rel: &str, store: &dyn Backend) {
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let name = e.file_name().to_string_lossy().to_string();
        let path = if rel.is_empty() {
            name
        } else {
            format!("{rel}/{name}")
        };
        if e.file_type().unwrap().is_dir() {
            load_fixture(&e.path(), &path, store);
        } else {
            store.put(&path, &std::fs::read(e.path()).unwrap()).unwrap();
        }
    }
}

fn run(repo: &mut Repository) -> MigrateReport {
    migrate(repo, &MigrateOptions::default()).unwrap()
}

fn dict_manifest() -> String {
    std::fs::read_to_string(fixtures().join("repo-v1-dict.manifest")).unwrap()
}

/// A migrated repository: format 2 keeping format-1 data packs, no migration left, check
/// with read_data clean and without warnings, and the latest snapshot restores to
/// `want` (a manifest).
fn assert_migrated(repo: &Repository, want: &str, out: &Path) {
    assert_eq!(repo.version(), Version::V2);
    assert!(repo.config().format1_packs);
    assert!(!repo.unfinished_migration());
    assert!(repo.store().stat("migrate/state").is_err());
    let c = check_all(repo);
    assert!(c.ok(), "{:?}", c.errors);
    assert!(c.warnings.is_empty(), "{:?}", c.warnings);
    assert_eq!(repo.index_files().len(), 1);
    let _ = std::fs::remove_dir_all(out);
    let r = restore_latest(repo, out);
    assert!(r.failures.is_empty(), "{:?}", r.failures);
    assert_eq!(manifest(out), want);
}

#[test]
fn v1_fixture_with_dictionary_migrates_checks_and_restores() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().join("repo");
    copy_dir(&fixtures().join("repo-v1-dict"), &dir);
    let mut repo = open_repo(&dir);
    assert_eq!(repo.version(), Version::V1);
    let data_packs_before: Vec<String> = repo
        .store()
        .list("data/")
        .unwrap()
        .into_iter()
        .map(|o| o.path)
        .collect();
    let dry = migrate(
        &mut repo,
        &MigrateOptions {
            dry_run: true,
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(repo.version(), Version::V1);
    assert!(
        repo.store().stat("migrate/state").is_err(),
        "a dry run wrote"
    );
    let rep = run(&mut repo);
    assert_eq!((rep.from_version, rep.to_version), (1, 2));
    assert_eq!(rep.snapshots, 1);
    assert_eq!(rep.dictionaries, 1);
    assert_eq!(rep.index_files_written, 1);
    assert_eq!(rep.data_packs_kept, 1);
    assert_eq!(rep.tree_packs_replaced, 1);
    assert_eq!(rep.tree_packs_written, 1);
    assert!(rep.tree_blobs > 0);
    assert_eq!(dry.tree_blobs, rep.tree_blobs);
    assert_eq!(dry.data_pack_bytes_kept, rep.data_pack_bytes_kept);
    // The data pack is the same file; the tree pack is new.
    let after: Vec<String> = repo
        .store()
        .list("data/")
        .unwrap()
        .into_iter()
        .map(|o| o.path)
        .collect();
    assert_eq!(after.len(), 2);
    assert_eq!(
        after
            .iter()
            .filter(|p| data_packs_before.contains(p))
            .count(),
        1
    );
    let s = repo.find_snapshot("latest").unwrap();
    assert_eq!(s.version, 2);
    // Reopened from disk, as the CLI would.
    let repo = open_repo(&dir);
    assert!(repo.has_dictionary());
    assert_migrated(&repo, &dict_manifest(), &t.path().join("out"));
    // Migrating again is refused: nothing to do.
    let mut repo = repo;
    let e = migrate(&mut repo, &MigrateOptions::default()).unwrap_err();
    assert!(e.to_string().contains("already format 2"), "{e}");
}

/// The other fixture, then a backup into the migrated repository: it writes format-2
/// packs and restores byte-exact, old and new snapshots alike.
#[test]
fn v1_fixture_migrates_and_takes_format_2_backups() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().join("repo");
    copy_dir(&fixtures().join("repo-v1"), &dir);
    let mut repo = open_repo(&dir);
    run(&mut repo);
    let mut repo = open_repo(&dir);
    let c = check_all(&repo);
    assert!(
        c.ok() && c.warnings.is_empty(),
        "{:?} {:?}",
        c.errors,
        c.warnings
    );
    let old = repo.find_snapshot("latest").unwrap();
    let src = t.path().join("vmail");
    small_store(&src);
    let out = t.path().join("old");
    maildir_restore(&repo, &old.id.to_hex(), &out);
    let a = tree_snapshot(&src);
    let b = tree_snapshot(&out);
    assert_eq!(a.len(), b.len());
    for (k, (bytes, _, _)) in &a {
        assert!(
            bytes == &b[k].0,
            "{}: bytes differ",
            String::from_utf8_lossy(k)
        );
    }
    // A new message, and a backup.
    let md = src.join("example.org/bob/Maildir");
    let body = message("bob@example.org", "new", &"fresh text ".repeat(50_000));
    put_msg(
        &md,
        "",
        "cur",
        "1800000000.M9P9.mail:2,S",
        &body,
        1_800_000_000,
    );
    let packs_before = repo.index().packs().to_vec();
    maildir_backup(&mut repo, &src, vec![]);
    let repo = open_repo(&dir);
    let mut new_packs = 0;
    for (i, p) in repo.index().packs().iter().enumerate() {
        let v = repo.index().pack_version(i as u32);
        if packs_before.contains(p) {
            continue;
        }
        new_packs += 1;
        assert_eq!(
            v,
            Version::V2,
            "a backup after the migration wrote a format-1 pack"
        );
    }
    assert!(new_packs > 0);
    let c = check_all(&repo);
    assert!(c.ok(), "{:?}", c.errors);
    let out = t.path().join("new");
    let r = restore_latest(&repo, &out);
    assert!(r.failures.is_empty(), "{:?}", r.failures);
    assert_same_tree(&src, &out);
}

/// A format-1 repository with two snapshots, the second the first's child.
fn two_snapshot_v1_repo(dir: &Path) -> Repository {
    let src = dir.join("vmail");
    small_store(&src);
    let opts = InitOptions {
        version: Version::V1,
        ..fast_init()
    };
    let mut repo =
        Repository::init(Arc::new(LocalStore::new(dir.join("repo"))), PASSWORD, &opts).unwrap();
    maildir_backup(&mut repo, &src, vec![]);
    let md = src.join("example.org/bob/Maildir");
    put_msg(
        &md,
        "",
        "cur",
        "1800000001.M9P9.mail:2,",
        &message("bob@example.org", "two", "second run"),
        1_800_000_001,
    );
    maildir_backup(&mut repo, &src, vec![]);
    open_repo(&dir.join("repo"))
}

#[test]
fn snapshot_parents_are_mapped_to_the_new_ids() {
    let t = tempfile::tempdir().unwrap();
    let mut repo = two_snapshot_v1_repo(t.path());
    let before = repo.snapshots().unwrap();
    assert_eq!(before.len(), 2);
    assert_eq!(before[1].parent, Some(before[0].id));
    let renamed = run(&mut repo).renamed;
    let after = repo.snapshots().unwrap();
    assert_eq!(after.len(), 2);
    assert!(after.damaged.is_empty());
    assert!(after.iter().all(|s| !before.iter().any(|b| b.id == s.id)));
    assert_eq!(after[1].parent, Some(after[0].id), "parent not mapped");
    let rep = &renamed;
    for (b, a) in before.iter().zip(after.iter()) {
        assert!(rep
            .iter()
            .any(|r| r.old == b.id.to_hex() && r.new == a.id.to_hex()));
    }
    assert_eq!(after[0].root, before[0].root);
    assert_eq!(after[1].summary, before[1].summary);
}

/// Issue 11: without `migrate/state`, a format-1 file in a format-2 repository is an
/// error, not a leftover to skip.
#[test]
fn a_format_1_file_without_a_migration_is_an_error() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().join("repo");
    copy_dir(&fixtures().join("repo-v1"), &dir);
    let old_snapshot = std::fs::read_dir(dir.join("snapshots"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap();
    let (name, bytes) = (
        old_snapshot.file_name(),
        std::fs::read(old_snapshot.path()).unwrap(),
    );
    let mut repo = open_repo(&dir);
    run(&mut repo);
    std::fs::write(dir.join("snapshots").join(&name), bytes).unwrap();
    let repo = open_repo(&dir);
    let snaps = repo.snapshots().unwrap();
    assert_eq!(snaps.damaged.len(), 1);
    assert!(
        matches!(
            snaps.damaged[0].error,
            Error::OtherFormat {
                found: 1,
                expected: 2,
                ..
            }
        ),
        "{}",
        snaps.damaged[0].error
    );
    assert!(!check_all(&repo).ok());
}

#[test]
fn migrate_refuses_a_running_writer_and_damage_and_changes_nothing() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().join("repo");
    copy_dir(&fixtures().join("repo-v1"), &dir);
    let listing = |d: &Path| {
        let mut v: Vec<ObjectInfo> = LocalStore::new(d).list("").unwrap();
        v.sort_by(|a, b| a.path.cmp(&b.path));
        v
    };
    // A writer record.
    std::fs::create_dir_all(dir.join("writers")).unwrap();
    std::fs::write(dir.join("writers/0123"), b"x").unwrap();
    let before = listing(&dir);
    let mut repo = open_repo(&dir);
    let e = migrate(&mut repo, &MigrateOptions::default())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("backup is running") && e.contains("writers/0123"),
        "{e}"
    );
    assert_eq!(listing(&dir), before);
    std::fs::remove_file(dir.join("writers/0123")).unwrap();
    // A damaged index file.
    let idx = std::fs::read_dir(dir.join("index"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let mut b = std::fs::read(&idx).unwrap();
    b[40] ^= 1;
    std::fs::write(&idx, b).unwrap();
    let before = listing(&dir);
    let mut repo = open_repo(&dir);
    let e = migrate(&mut repo, &MigrateOptions::default())
        .unwrap_err()
        .to_string();
    assert!(e.contains("repair index"), "{e}");
    assert_eq!(listing(&dir), before);
}

/// A tree blob that does not verify stops the migration before its commit: what it staged
/// is removed, and the repository is as it was.
#[test]
fn a_tree_blob_that_does_not_verify_undoes_the_migration() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().join("repo");
    copy_dir(&fixtures().join("repo-v1"), &dir);
    let repo = open_repo(&dir);
    let root = repo.find_snapshot("latest").unwrap().root;
    let loc = repo.index().get(&root).unwrap();
    let pack = dir.join(mailvault_core::repo::pack::pack_path(
        &repo.index().pack_id(loc.pack),
    ));
    let mut b = std::fs::read(&pack).unwrap();
    b[loc.offset as usize + 30] ^= 1;
    std::fs::write(&pack, b).unwrap();
    let listing = || {
        let mut v: Vec<ObjectInfo> = LocalStore::new(&dir).list("").unwrap();
        v.sort_by(|a, b| a.path.cmp(&b.path));
        v
    };
    let before = listing();
    let mut repo = open_repo(&dir);
    let e = migrate(&mut repo, &MigrateOptions::default())
        .unwrap_err()
        .to_string();
    assert!(e.contains(&root.short()), "{e}");
    assert_eq!(listing(), before);
    assert_eq!(open_repo(&dir).version(), Version::V1);
}

/// A store that fails every write from the `n`th on (counting puts, deletes and
/// replaces), as a process killed there would stop writing.
struct FailingStore {
    inner: MemoryStore,
    left: AtomicUsize,
}

impl FailingStore {
    fn tick(&self, path: &str) -> mailvault_core::Result<()> {
        let ok = self
            .left
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        match ok {
            true => Ok(()),
            false => Err(Error::InvalidInput(format!("injected failure at {path}"))),
        }
    }
}

impl Backend for FailingStore {
    fn write(&self, h: Handle<'_>, data: &[u8], mode: WriteMode) -> mailvault_core::Result<()> {
        self.tick(h.path())?;
        self.inner.write(h, data, mode)
    }
    fn read(&self, h: Handle<'_>, range: Option<ByteRange>) -> mailvault_core::Result<Vec<u8>> {
        self.inner.read(h, range)
    }
    fn listing(&self, prefix: &str, from: Listing) -> mailvault_core::Result<Vec<ObjectInfo>> {
        self.inner.listing(prefix, from)
    }
    fn remove(&self, h: Handle<'_>) -> mailvault_core::Result<()> {
        self.tick(h.path())?;
        self.inner.remove(h)
    }
    fn size(&self, h: Handle<'_>) -> mailvault_core::Result<u64> {
        self.inner.size(h)
    }
    fn location(&self) -> String {
        "failing:".into()
    }
    fn flush(&self) -> mailvault_core::Result<()> {
        self.inner.flush()
    }
    fn local_dir(&self) -> Option<std::path::PathBuf> {
        self.inner.local_dir()
    }
    fn hint(&self, hint: Hint<'_>) {
        self.inner.hint(hint)
    }
}

/// Issue 11: a migration stopped at each of its writes in turn leaves a repository that
/// opens (as format 1 or 2), checks clean, and that migrate finishes; the result restores
/// byte-exact.
#[test]
fn migration_stopped_at_every_write_is_finished_by_migrate_again() {
    let t = tempfile::tempdir().unwrap();
    let want = dict_manifest();
    let mut finished_at = None;
    for n in 0..500 {
        let mem = MemoryStore::new();
        load_fixture(&fixtures().join("repo-v1-dict"), "", &mem);
        let failing = Arc::new(FailingStore {
            inner: mem.clone(),
            left: AtomicUsize::new(n),
        });
        let mut repo = Repository::open(failing, PASSWORD).unwrap();
        if migrate(&mut repo, &MigrateOptions::default()).is_ok() {
            finished_at = Some(n);
            let repo = Repository::open(Arc::new(mem), PASSWORD).unwrap();
            assert_migrated(&repo, &want, &t.path().join("out"));
            break;
        }
        let mut repo = Repository::open(Arc::new(mem.clone()), PASSWORD)
            .unwrap_or_else(|e| panic!("stopped at write {n}: does not open: {e}"));
        let c = check_all(&repo);
        assert!(
            c.ok(),
            "stopped at write {n} ({}): {:?}",
            repo.version(),
            c.errors
        );
        let r = restore_latest(&repo, &t.path().join(format!("mid{n}")));
        assert!(
            r.failures.is_empty(),
            "stopped at write {n}: {:?}",
            r.failures
        );
        assert_eq!(
            manifest(&t.path().join(format!("mid{n}"))),
            want,
            "stopped at write {n}"
        );
        if repo.unfinished_migration() {
            // Its leftovers are skipped quietly: one warning says it is unfinished.
            assert!(
                c.warnings
                    .iter()
                    .all(|w| w.contains("unfinished migration")),
                "stopped at write {n}: {:?}",
                c.warnings
            );
            // Repairs and backups wait for it.
            let e = mailvault_core::ops::repair::repair_index(&repo, &Default::default())
                .unwrap_err()
                .to_string();
            assert!(e.contains("unfinished migration"), "{e}");
            let src = t.path().join("none");
            for d in ["cur", "new", "tmp"] {
                std::fs::create_dir_all(src.join(d)).unwrap();
            }
            let e = common::backup(
                &mut repo,
                &backup_opts(&src, vec![]),
                &mailvault_core::report::NoProgress,
            )
            .err()
            .unwrap()
            .to_string();
            assert!(e.contains("unfinished migration"), "{e}");
            run(&mut repo);
        } else {
            // Stopped before its record was written: nothing happened.
            assert_eq!(repo.version(), Version::V1, "stopped at write {n}");
            run(&mut repo);
        }
        let repo = Repository::open(Arc::new(mem.clone()), PASSWORD).unwrap();
        assert_migrated(&repo, &want, &t.path().join("out"));
        let stray: Vec<String> = mem
            .list("")
            .unwrap()
            .into_iter()
            .map(|o| o.path)
            .filter(|p| p.starts_with("migrate/") || p.starts_with("writers/"))
            .collect();
        assert!(stray.is_empty(), "{stray:?}");
    }
    let n = finished_at.expect("migrate never finished");
    assert!(n > 8, "only {n} writes: the kill points are not exercised");
}
