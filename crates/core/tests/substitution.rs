//! Issue 11, tests "Substitution": someone who can write to the storage swaps, replays,
//! renames or misfiles sealed objects of a format-2 repository. Every case must be detected
//! (a restore fails naming the item, or `check` reports it with its kind and file or blob)
//! and nothing wrong is ever restored: each file a restore writes has the bytes of the file
//! that was backed up under its name.
//!
//! The storage is edited the way an attacker would: bytes of files moved, files renamed,
//! and (for index files) new ones sealed with the repository's key through the public API,
//! as a writer holding the key (or a buggy one) could.
#![allow(clippy::unwrap_used)]

mod common;

use common::backup;
use common::*;
use mailvault_core::ops::check::{CheckError, CheckReport, DamageKind};
use mailvault_core::ops::restore::{restore, RestoreOptions};
use mailvault_core::repo::format::BlobKind;
use mailvault_core::repo::format::{self, Object, Version};
use mailvault_core::repo::index::{self, Location};
use mailvault_core::repo::pack::{self, IndexedPack, PackBuilder};
use mailvault_core::repo::snapshot::Snapshot;
use mailvault_core::report::NoProgress;
use mailvault_core::restore::{RestoreReport, Selection};
use mailvault_core::source::maildir::BackupOptions;
use mailvault_core::store::LocalStore;
use mailvault_core::{Error, Id, InitOptions, Repository};
use std::collections::HashMap;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The backed-up store and its repository: `dir/vmail` and `dir/repo`.
struct Setup {
    src: PathBuf,
    repo: PathBuf,
    out: PathBuf,
}

impl Setup {
    fn open(&self) -> Repository {
        open_repo(&self.repo)
    }

    /// A path inside the repository directory.
    fn file(&self, path: &str) -> PathBuf {
        self.repo.join(path)
    }
}

/// `small_store` plus two messages whose rests (everything after the trace fields) differ
/// but have the same length and compress alike, so that their blobs have the same sealed
/// size; backed up into a new format-2 repository.
fn setup(dir: &Path) -> Setup {
    setup_padded(dir, false)
}

/// [`setup`], with `init --pad` when `pad`.
fn setup_padded(dir: &Path, pad: bool) -> Setup {
    let src = dir.join("vmail");
    small_store(&src);
    let bob = src.join("example.org/bob/Maildir");
    for (i, c) in ["A", "B"].iter().enumerate() {
        put_msg(
            &bob,
            "",
            "cur",
            &format!("1700009000.M{i}P9.mail:2,S"),
            &message(
                "bob@example.org",
                &format!("same-size-{c}"),
                &c.repeat(3000),
            ),
            1_700_009_000 + i as i64,
        );
    }
    let r = backed_up(dir, &src, pad);
    assert_eq!((r.version(), r.config().pad), (Version::V2, pad));
    Setup {
        src,
        repo: dir.join("repo"),
        out: dir.join("out"),
    }
}

/// Backs `src` up into a new repository `dir/repo` (padded when `pad`) with one worker (one data pack: the
/// blobs to swap are in it); returns it opened afresh.
fn backed_up(dir: &Path, src: &Path, pad: bool) -> Repository {
    let store = Arc::new(LocalStore::new(dir.join("repo")));
    let init = InitOptions { pad, ..fast_init() };
    let mut repo = Repository::init(store, PASSWORD, &init).unwrap();
    let opts = BackupOptions {
        jobs: 1,
        ..backup_opts(src, vec![])
    };
    let r = backup(&mut repo, &opts, &NoProgress).unwrap();
    assert!(r.failures.is_empty(), "{:?}", r.failures);
    open_repo(&dir.join("repo"))
}

/// Every regular file below `out` (`tmp/` included) is a file of `src` at the same place
/// with the same bytes: nothing wrong was restored. Returns how many files there are.
fn assert_nothing_wrong(src: &Path, out: &Path) -> usize {
    let mut n = 0;
    let mut stack = vec![out.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = fs::read_dir(&dir) else {
            continue;
        };
        for ent in entries {
            let p = ent.unwrap().path();
            let meta = fs::symlink_metadata(&p).unwrap();
            if meta.is_dir() {
                stack.push(p);
                continue;
            }
            let rel = p.strip_prefix(out).unwrap();
            let shown = String::from_utf8_lossy(rel.as_os_str().as_bytes()).to_string();
            let want = fs::read(src.join(rel))
                .unwrap_or_else(|_| panic!("{shown}: restored, but no such file was backed up"));
            assert!(
                fs::read(&p).unwrap() == want,
                "{shown}: restored with bytes that differ from the backed-up file"
            );
            n += 1;
        }
    }
    n
}

/// Restores `which` into `out`, 2 threads.
fn restore_snapshot(
    repo: &Repository,
    which: &str,
    out: &Path,
) -> mailvault_core::Result<RestoreReport> {
    let opts = RestoreOptions {
        select: Selection {
            snapshot: which.into(),
            ..Default::default()
        },
        target: out.to_path_buf(),
        jobs: 2,
        ..Default::default()
    };
    restore(repo, &opts, &NoProgress)
}

/// A restore of the latest snapshot that reports failures naming `needle` (and no others)
/// and writes nothing wrong; the messages that were not concerned are restored.
fn assert_restore_fails_naming(s: &Setup, needles: &[String]) -> RestoreReport {
    let repo = s.open();
    let r = restore_snapshot(&repo, "latest", &s.out).unwrap();
    assert!(!r.failures.is_empty(), "the substitution went unnoticed");
    for f in &r.failures {
        assert!(
            needles.iter().any(|n| f.error.contains(n.as_str())),
            "{f:?} names none of {needles:?}"
        );
    }
    assert!(r.items_failed as usize <= r.failures.len(), "{r:?}");
    let written = assert_nothing_wrong(&s.src, &s.out);
    assert!(written > 0, "nothing restored at all");
    r
}

/// A restore that refuses the whole snapshot with an error; nothing is written.
fn assert_restore_refused(s: &Setup, which: &str) -> Error {
    let repo = s.open();
    let e = restore_snapshot(&repo, which, &s.out)
        .expect_err("the restore of a substituted repository succeeded");
    assert_eq!(assert_nothing_wrong(&s.src, &s.out), 0);
    e
}

/// The errors of `report` of kind `kind`.
fn errors_of(report: &CheckReport, kind: DamageKind) -> Vec<&CheckError> {
    report.errors.iter().filter(|e| e.kind == kind).collect()
}

/// `check --read-data` finds an error of `kind` about repository file `file`; returns it.
fn assert_check_names_file(s: &Setup, kind: DamageKind, file: &str) -> CheckError {
    let c = check_all(&s.open());
    errors_of(&c, kind)
        .into_iter()
        .find(|e| e.file.as_deref() == Some(file))
        .cloned()
        .unwrap_or_else(|| panic!("no {kind:?} error about {file}: {:#?}", c.errors))
}

/// `check --read-data` counts blob `id` as unreadable.
fn assert_check_names_blob(s: &Setup, id: &Id) -> CheckError {
    let c = check_all(&s.open());
    let hex = id.to_hex();
    c.errors
        .iter()
        .find(|e| e.blob_ids.contains(&hex) || e.blob.as_deref() == Some(hex.as_str()))
        .cloned()
        .unwrap_or_else(|| panic!("no error names blob {}: {:#?}", id.short(), c.errors))
}

/// The repository path of a pack.
fn pack_file(repo: &Repository, loc: &Location) -> String {
    pack::pack_path(&repo.index().pack_id(loc.pack))
}

/// Two data blobs in one pack with the same sealed size.
fn same_size_pair(repo: &Repository) -> ((Id, Location), (Id, Location)) {
    let mut by_size: HashMap<(u32, u32), Vec<(Id, Location)>> = HashMap::new();
    for (id, loc) in repo.index().iter() {
        if loc.kind == BlobKind::Data {
            by_size
                .entry((loc.pack, loc.stored_len))
                .or_default()
                .push((id, loc));
        }
    }
    let mut pairs: Vec<Vec<(Id, Location)>> =
        by_size.into_values().filter(|v| v.len() >= 2).collect();
    pairs.sort_by_key(|v| v[0].0);
    let v = pairs.first().expect("no two data blobs of the same size");
    (v[0], v[1])
}

/// Two data blobs of one pack, of different sizes.
fn two_data_blobs(repo: &Repository) -> ((Id, Location), (Id, Location)) {
    let mut data: Vec<(Id, Location)> = repo
        .index()
        .iter()
        .filter(|(_, l)| l.kind == BlobKind::Data)
        .collect();
    data.sort_by_key(|(i, l)| (l.pack, l.offset, *i));
    data.iter()
        .find_map(|a| {
            let b = data
                .iter()
                .find(|(_, l)| l.pack == a.1.pack && l.stored_len != a.1.stored_len)?;
            Some((*a, *b))
        })
        .expect("one pack with two data blobs of different sizes")
}

/// The opened plaintext of the format-2 index file at `path`.
fn open_index_file(repo: &Repository, path: &Path) -> Vec<IndexedPack> {
    let id = Id::from_hex(path.file_name().unwrap().to_str().unwrap()).unwrap();
    let sealed = fs::read(path).unwrap();
    let plain = repo
        .key()
        .open_vec_ad(sealed, &Object::Index(&id).aad(), "index")
        .unwrap();
    let plain = match repo.config().pad {
        true => format::unpad(plain, "index").unwrap(),
        false => plain,
    };
    index::decode(&plain, Version::V2, "index").unwrap()
}

/// Replaces every index file by one format-2 index file, sealed with the repository's key,
/// listing what `edit` makes of all their packs.
fn rewrite_index(s: &Setup, edit: impl FnOnce(&mut Vec<IndexedPack>)) {
    let repo = s.open();
    let mut packs = Vec::new();
    for f in fs::read_dir(s.file("index")).unwrap() {
        let p = f.unwrap().path();
        packs.extend(open_index_file(&repo, &p));
        fs::remove_file(&p).unwrap();
    }
    edit(&mut packs);
    let plain = index::encode(&packs, Version::V2).unwrap();
    let id = repo.key().blob_id(&plain);
    let padded = match repo.config().pad {
        true => format::pad(plain),
        false => plain,
    };
    let sealed = repo.key().seal_ad(&padded, &Object::Index(&id).aad());
    fs::write(s.file(&format!("index/{id}")), sealed).unwrap();
}

/// Moves the pack file `from` to the name of the BLAKE3 of its bytes and points the index
/// at it: the name check passes again.
fn rename_pack_to_its_hash(s: &Setup, from: &str) -> String {
    let bytes = fs::read(s.file(from)).unwrap();
    let old = Id::from_hex(from.rsplit('/').next().unwrap()).unwrap();
    let new = Id::of_file(&bytes);
    let to = pack::pack_path(&new);
    fs::create_dir_all(s.file(&to).parent().unwrap()).unwrap();
    fs::rename(s.file(from), s.file(&to)).unwrap();
    rewrite_index(s, |packs| {
        for p in packs.iter_mut().filter(|p| p.id == old) {
            p.id = new;
        }
    });
    to
}

/// Swaps the byte ranges `a` and `b` (same length, not overlapping) of a file.
fn swap_ranges(path: &Path, a: (usize, usize), b: (usize, usize)) {
    assert_eq!(a.1, b.1);
    let mut bytes = fs::read(path).unwrap();
    let first = bytes[a.0..a.0 + a.1].to_vec();
    bytes.copy_within(b.0..b.0 + b.1, a.0);
    bytes[b.0..b.0 + b.1].copy_from_slice(&first);
    fs::write(path, bytes).unwrap();
}

/// What a restore error says of a blob that does not open as itself.
fn misplaced(id: &Id) -> String {
    format!("does not open as data blob {}", id.short())
}

/// a. Two blobs of the same sealed size swapped inside a data pack: the pack no longer
/// matches its name, and (renamed to its new hash, the index following) the blobs' tags
/// still do not open as the ids the index files them under.
#[test]
fn swapped_blobs_in_a_pack_are_detected_and_never_restored() {
    for (renamed, pad) in [(false, false), (true, false), (true, true)] {
        let t = tempfile::tempdir().unwrap();
        let s = setup_padded(t.path(), pad);
        let repo = s.open();
        let ((a, la), (b, lb)) = same_size_pair(&repo);
        let mut path = pack_file(&repo, &la);
        drop(repo);
        swap_ranges(
            &s.file(&path),
            (la.offset as usize, la.stored_len as usize),
            (lb.offset as usize, lb.stored_len as usize),
        );
        if renamed {
            path = rename_pack_to_its_hash(&s, &path);
        }
        assert_restore_fails_naming(&s, &[misplaced(&a), misplaced(&b)]);
        let e = assert_check_names_file(&s, DamageKind::Pack, &path);
        for id in [a, b] {
            assert!(
                e.blob_ids.contains(&id.to_hex()),
                "renamed {renamed}: {e:?}"
            );
        }
        assert!(
            e.details.iter().any(|d| d.contains("does not open as")),
            "renamed {renamed}: {e:?}"
        );
    }
}

/// b. The headers and trailers of two packs swapped (a data pack's and a tree pack's):
/// reads go by the index, so a restore still gets every blob from where it was sealed;
/// `check` finds each pack's header wrong for its blobs, also after both are renamed to
/// their new hashes.
#[test]
fn swapped_pack_headers_are_detected() {
    for (renamed, pad) in [(false, false), (true, false), (true, true)] {
        let t = tempfile::tempdir().unwrap();
        let s = setup_padded(t.path(), pad);
        let repo = s.open();
        let pick = |kind| {
            let (_, loc) = repo.index().iter().find(|(_, l)| l.kind == kind).unwrap();
            pack_file(&repo, &loc)
        };
        let (p, q) = (pick(BlobKind::Data), pick(BlobKind::Tree));
        assert_ne!(p, q);
        // Where each pack's blobs end: the header's length is sealed in the trailer.
        let tail_of = |path: &str| -> usize {
            let bytes = fs::read(s.file(path)).unwrap();
            let (_, entries) = pack::header_of(&bytes, repo.key(), path, &[Version::V2]).unwrap();
            entries.iter().map(|e| e.stored_len as usize).sum::<usize>()
        };
        let (pe, qe) = (tail_of(&p), tail_of(&q));
        let (pb, qb) = (fs::read(s.file(&p)).unwrap(), fs::read(s.file(&q)).unwrap());
        drop(repo);
        let mut p_new = pb[..pe].to_vec();
        p_new.extend_from_slice(&qb[qe..]);
        let mut q_new = qb[..qe].to_vec();
        q_new.extend_from_slice(&pb[pe..]);
        fs::write(s.file(&p), p_new).unwrap();
        fs::write(s.file(&q), q_new).unwrap();
        let (p, q) = match renamed {
            false => (p, q),
            true => (
                rename_pack_to_its_hash(&s, &p),
                rename_pack_to_its_hash(&s, &q),
            ),
        };
        // Whatever a restore gives back is right.
        let repo = s.open();
        if let Ok(r) = restore_snapshot(&repo, "latest", &s.out) {
            assert!(r.items_restored > 0);
        }
        assert_nothing_wrong(&s.src, &s.out);
        for path in [&p, &q] {
            let e = assert_check_names_file(&s, DamageKind::Pack, path);
            let why = match renamed {
                false => "does not match its name",
                true => "do not add up to the pack size",
            };
            assert!(e.error.contains(why), "renamed {renamed}: {e:?}");
        }
    }
}

/// The snapshot files, sorted by name.
fn snapshot_files(s: &Setup) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(s.file("snapshots"))
        .unwrap()
        .map(|f| format!("snapshots/{}", f.unwrap().file_name().to_str().unwrap()))
        .collect();
    v.sort();
    v
}

/// A second backup (one message more), so that there are two snapshots.
fn second_snapshot(s: &Setup) {
    put_msg(
        &s.src.join("other.net/dave/Maildir"),
        "",
        "new",
        "1700010000.M9P9.mail",
        &message("dave@other.net", "second", "second backup"),
        1_700_010_000,
    );
    let mut repo = s.open();
    maildir_backup(&mut repo, &s.src, vec![]);
}

/// c. Two snapshot files with each other's bytes: each fails to open under its name.
#[test]
fn swapped_snapshots_are_detected_and_never_restored() {
    for pad in [false, true] {
        swapped_snapshots(pad);
    }
}

fn swapped_snapshots(pad: bool) {
    let t = tempfile::tempdir().unwrap();
    let s = setup_padded(t.path(), pad);
    second_snapshot(&s);
    let files = snapshot_files(&s);
    assert_eq!(files.len(), 2);
    let (a, b) = (s.file(&files[0]), s.file(&files[1]));
    let (ab, bb) = (fs::read(&a).unwrap(), fs::read(&b).unwrap());
    fs::write(&a, bb).unwrap();
    fs::write(&b, ab).unwrap();
    let snaps = s.open().snapshots().unwrap();
    assert!(snaps.list.is_empty(), "{:?}", snaps.list);
    for (d, f) in snaps.damaged.iter().zip(&files) {
        assert_eq!(&d.path, f);
        assert!(matches!(d.error, Error::Misplaced { .. }), "{}", d.error);
        assert!(d.error.to_string().contains("does not open as snapshot"));
    }
    for f in &files {
        let prefix = &f["snapshots/".len()..][..12];
        let e = assert_restore_refused(&s, prefix);
        assert!(matches!(e, Error::Misplaced { .. }), "{e}");
        assert!(e.to_string().contains(f.as_str()), "{e}");
        assert_check_names_file(&s, DamageKind::Snapshot, f);
    }
    assert!(matches!(
        assert_restore_refused(&s, "latest"),
        Error::SnapshotNotFound(_)
    ));
}

/// g. A snapshot file renamed to another valid id: it no longer opens under its name.
#[test]
fn a_renamed_snapshot_is_detected() {
    let t = tempfile::tempdir().unwrap();
    let s = setup(t.path());
    second_snapshot(&s);
    let files = snapshot_files(&s);
    let renamed = format!("snapshots/{}", Id([0x5a; 32]));
    fs::rename(s.file(&files[1]), s.file(&renamed)).unwrap();
    let snaps = s.open().snapshots().unwrap();
    assert_eq!(snaps.list.len(), 1);
    assert_eq!(Snapshot::path(&snaps.list[0].id), files[0]);
    assert_eq!(snaps.damaged.len(), 1);
    assert_eq!(snaps.damaged[0].path, renamed);
    assert!(matches!(snaps.damaged[0].error, Error::Misplaced { .. }));
    let e = assert_restore_refused(&s, "5a5a5a5a");
    assert!(matches!(e, Error::Misplaced { .. }), "{e}");
    assert_check_names_file(&s, DamageKind::Snapshot, &renamed);
    // The latest readable snapshot (the first one) still restores right.
    let r = restore_snapshot(&s.open(), "latest", &s.out).unwrap();
    assert!(r.failures.is_empty(), "{:?}", r.failures);
    assert_nothing_wrong(&s.src, &s.out);
}

/// d. An index whose entries for two blobs of one pack have each other's offset and
/// length: each place holds a blob sealed as the other.
#[test]
fn swapped_index_offsets_are_detected_and_never_restored() {
    for pad in [false, true] {
        swapped_index_offsets(pad);
    }
}

fn swapped_index_offsets(pad: bool) {
    let t = tempfile::tempdir().unwrap();
    let s = setup_padded(t.path(), pad);
    let repo = s.open();
    let ((a, la), (b, _)) = two_data_blobs(&repo);
    let path = pack_file(&repo, &la);
    drop(repo);
    rewrite_index(&s, |packs| {
        let p = packs
            .iter_mut()
            .find(|p| pack::pack_path(&p.id) == path)
            .unwrap();
        let ia = p.entries.iter().position(|e| e.id == a).unwrap();
        let ib = p.entries.iter().position(|e| e.id == b).unwrap();
        let (ea, eb) = (p.entries[ia], p.entries[ib]);
        p.entries[ia].offset = eb.offset;
        p.entries[ia].stored_len = eb.stored_len;
        p.entries[ib].offset = ea.offset;
        p.entries[ib].stored_len = ea.stored_len;
    });
    assert_restore_fails_naming(&s, &[misplaced(&a), misplaced(&b)]);
    for id in [a, b] {
        let e = assert_check_names_blob(&s, &id);
        assert!(
            matches!(e.kind, DamageKind::Index | DamageKind::Pack),
            "{e:?}"
        );
    }
}

/// The ids of the latest snapshot's root tree and of its first account's tree.
fn latest_trees(repo: &Repository) -> (Id, Id) {
    let snap = repo.find_snapshot("latest").unwrap();
    let root: mailvault_core::repo::tree::RootTree = repo.read_tree(&snap.root).unwrap();
    (snap.root, root.accounts[0].tree)
}

/// Moves `id`'s index entry to `to`'s place (pack, offset, lengths, codec), filed as `kind`.
fn misfile(s: &Setup, id: Id, to: Id, kind: BlobKind) {
    rewrite_index(s, |packs| {
        let target = packs
            .iter()
            .flat_map(|p| p.entries.iter().map(move |e| (p.id, *e)))
            .find(|(_, e)| e.id == to)
            .unwrap();
        for p in packs.iter_mut() {
            p.entries.retain(|e| e.id != id);
        }
        let p = packs.iter_mut().find(|p| p.id == target.0).unwrap();
        let mut e = target.1;
        e.id = id;
        e.kind = kind;
        p.entries.push(e);
    });
}

/// e. A tree blob's id filed at a data blob's place (as a tree), a data blob's id at a tree
/// blob's place (as data), and a tree blob filed as data at its own place: read_tree never
/// decodes a data blob and a message never gets a tree's bytes.
#[test]
fn a_data_blob_is_never_read_as_a_tree_nor_a_tree_as_data() {
    // The root tree at a data blob's place: the snapshot cannot be read.
    let t = tempfile::tempdir().unwrap();
    let s = setup(t.path());
    let repo = s.open();
    let (root, _) = latest_trees(&repo);
    let ((d, _), _) = two_data_blobs(&repo);
    drop(repo);
    misfile(&s, root, d, BlobKind::Tree);
    let e = assert_restore_refused(&s, "latest");
    assert!(matches!(e, Error::Misplaced { .. }), "{e}");
    assert!(
        e.to_string()
            .contains(&format!("does not open as tree blob {}", root.short())),
        "{e}"
    );
    assert_check_names_blob(&s, &root);

    // An account tree filed as data at its own place: refused before it is read.
    let t = tempfile::tempdir().unwrap();
    let s = setup(t.path());
    let (_, account) = latest_trees(&s.open());
    misfile(&s, account, account, BlobKind::Data);
    let repo = s.open();
    let r = restore_snapshot(&repo, "latest", &s.out);
    if let Ok(r) = &r {
        assert!(
            !r.failures.is_empty(),
            "an account tree filed as data was read"
        );
    }
    assert_nothing_wrong(&s.src, &s.out);
    let e = assert_check_names_blob(&s, &account);
    assert!(
        e.details.iter().any(|d| d.contains(&misplaced(&account)))
            || e.error.contains("not a tree"),
        "{e:?}"
    );

    // A data blob's id at a tree blob's place, filed as data: the message fails.
    let t = tempfile::tempdir().unwrap();
    let s = setup(t.path());
    let repo = s.open();
    let (_, account) = latest_trees(&repo);
    let ((d, _), _) = two_data_blobs(&repo);
    drop(repo);
    misfile(&s, d, account, BlobKind::Data);
    assert_restore_fails_naming(&s, &[misplaced(&d)]);
    assert_check_names_blob(&s, &d);
}

const FORMAT_1_IN_2: &str = "a format-1 object in a format-2 repository";

/// f. Objects sealed the format-1 way (no associated data) with the repository's key, put
/// into a format-2 repository: a snapshot, an index file, a pack. Each is refused by name
/// and never used.
#[test]
fn format_1_objects_in_a_format_2_repository_are_refused() {
    // A snapshot: the latest one re-sealed as format 1 (under its format-1 name: the
    // BLAKE3 of the file), the original removed.
    let t = tempfile::tempdir().unwrap();
    let s = setup(t.path());
    let repo = s.open();
    let files = snapshot_files(&s);
    let id = Id::from_hex(&files[0]["snapshots/".len()..]).unwrap();
    let json = repo
        .key()
        .open_vec_ad(
            fs::read(s.file(&files[0])).unwrap(),
            &Object::Snapshot(&id).aad(),
            "s",
        )
        .unwrap();
    for version in [1, 2] {
        let mut v: serde_json::Value = serde_json::from_slice(&json).unwrap();
        v["version"] = version.into();
        let sealed = repo.key().seal(&serde_json::to_vec(&v).unwrap());
        fs::write(s.file(&Snapshot::path(&Id::of_file(&sealed))), sealed).unwrap();
    }
    fs::remove_file(s.file(&files[0])).unwrap();
    let snaps = repo.snapshots().unwrap();
    assert!(snaps.list.is_empty());
    assert_eq!(snaps.damaged.len(), 2);
    for d in &snaps.damaged {
        assert!(
            matches!(
                d.error,
                Error::OtherFormat {
                    found: 1,
                    expected: 2,
                    ..
                }
            ),
            "{}",
            d.error
        );
        assert!(d.error.to_string().contains(FORMAT_1_IN_2), "{}", d.error);
        let e = assert_check_names_file(&s, DamageKind::Snapshot, &d.path);
        assert!(e.error.contains(FORMAT_1_IN_2), "{e:?}");
    }
    drop(repo);
    assert_restore_refused(&s, "latest");

    // An index file: the repository's index, encoded and sealed as format 1, in place of
    // the format-2 one.
    let t = tempfile::tempdir().unwrap();
    let s = setup(t.path());
    let repo = s.open();
    let mut packs = Vec::new();
    for f in fs::read_dir(s.file("index")).unwrap() {
        let p = f.unwrap().path();
        packs.extend(open_index_file(&repo, &p));
        fs::remove_file(&p).unwrap();
    }
    for p in &mut packs {
        p.version = Version::V1;
    }
    let sealed = repo
        .key()
        .seal(&index::encode(&packs, Version::V1).unwrap());
    let path = format!("index/{}", Id::of_file(&sealed));
    fs::write(s.file(&path), sealed).unwrap();
    drop(repo);
    let repo = s.open();
    assert!(repo.index().is_empty(), "a format-1 index file was used");
    assert_eq!(repo.index_errors().len(), 1);
    let (p, e) = &repo.index_errors()[0];
    assert_eq!(p, &path);
    assert!(
        matches!(
            e,
            Error::OtherFormat {
                found: 1,
                expected: 2,
                ..
            }
        ),
        "{e}"
    );
    drop(repo);
    assert_restore_refused(&s, "latest");
    let e = assert_check_names_file(&s, DamageKind::Index, &path);
    assert!(e.error.contains(FORMAT_1_IN_2), "{e:?}");

    // A pack: a data pack's blobs re-sealed as format 1 in a format-1 pack, under its
    // name, the index pointing at it (as the format-2 pack it claims to be, and as the
    // format-1 pack it is).
    for listed_as in [Version::V2, Version::V1] {
        let t = tempfile::tempdir().unwrap();
        let s = setup(t.path());
        let repo = s.open();
        let (_, loc) = repo
            .index()
            .iter()
            .find(|(_, l)| l.kind == BlobKind::Data)
            .unwrap();
        let old_path = pack_file(&repo, &loc);
        let old = repo.index().pack_id(loc.pack);
        let bytes = fs::read(s.file(&old_path)).unwrap();
        let (_, entries) = pack::header_of(&bytes, repo.key(), &old_path, &[Version::V2]).unwrap();
        let mut b = PackBuilder::default();
        let mut blobs = Vec::new();
        for e in &entries {
            let sealed = &bytes[e.offset as usize..(e.offset + e.stored_len) as usize];
            let plain = repo
                .key()
                .open_vec_ad(sealed.to_vec(), &Object::Blob(e.kind, &e.id).aad(), "b")
                .unwrap();
            b.add(
                e.id,
                e.kind,
                e.codec,
                e.raw_len as usize,
                &repo.key().seal(&plain),
            );
            blobs.push(e.id);
        }
        let v1 = b.finish(repo.key(), Version::V1).unwrap();
        let new_path = pack::pack_path(&v1.id);
        fs::remove_file(s.file(&old_path)).unwrap();
        fs::create_dir_all(s.file(&new_path).parent().unwrap()).unwrap();
        fs::write(s.file(&new_path), v1.bytes().unwrap()).unwrap();
        drop(repo);
        rewrite_index(&s, |packs| {
            let p = packs.iter_mut().find(|p| p.id == old).unwrap();
            p.id = v1.id;
            p.version = listed_as;
            p.entries = v1.entries.clone();
        });
        let repo = s.open();
        match listed_as {
            Version::V2 => {
                assert!(repo.index_errors().is_empty());
                drop(repo);
                // The restore names each blob as a format-1 object, not just misplaced.
                let needles: Vec<String> = blobs
                    .iter()
                    .map(|b| format!("blob {} in {new_path}: {FORMAT_1_IN_2}", b.short()))
                    .collect();
                assert_restore_fails_naming(&s, &needles);
                let e = assert_check_names_file(&s, DamageKind::Pack, &new_path);
                assert!(
                    e.error.contains("a format-1 pack in a format-2 repository"),
                    "{e:?}"
                );
            }
            Version::V1 => {
                // The index file that lists a format-1 pack is refused whole.
                assert!(repo.index().is_empty());
                let (_, e) = &repo.index_errors()[0];
                assert!(e.to_string().contains("as format 1"), "{e}");
                drop(repo);
                assert_restore_refused(&s, "latest");
            }
        }
    }
}

/// h. The format-2 config replaced by a format-1 config of the same repository, sealed
/// the format-1 way (as a config from before `migrate`, put back, would be): the
/// repository does not open, since its index files are format 2 and no migration is under
/// way; opened as format 1 it would hide every snapshot and take format-1 backups.
#[test]
fn a_downgraded_config_is_refused() {
    let t = tempfile::tempdir().unwrap();
    let s = setup(t.path());
    let repo = s.open();
    let mut config = repo.config().clone();
    config.version = 1;
    let json = serde_json::to_vec(&config).unwrap();
    fs::write(s.file("config"), repo.key().seal(&json)).unwrap();
    drop(repo);
    // Refused on every host (not only those whose record saw format 2): the index files
    // are format 2 and no migration is under way.
    let e = Repository::open(Arc::new(LocalStore::new(&s.repo)), PASSWORD)
        .err()
        .expect("a format-1 config over format-2 index files opened");
    assert!(
        e.to_string().contains("an older config was put back"),
        "{e}"
    );
}

/// A format-1 repository (made by this build with `InitOptions { version: V1 }`) backs up,
/// checks and restores byte-exact through the same code.
#[test]
fn a_format_1_repository_round_trips() {
    let t = tempfile::tempdir().unwrap();
    let src = t.path().join("vmail");
    small_store(&src);
    let dir = t.path().join("repo");
    let opts = InitOptions {
        version: Version::V1,
        ..fast_init()
    };
    let store = Arc::new(LocalStore::new(&dir));
    let mut repo = Repository::init(store, PASSWORD, &opts).unwrap();
    maildir_backup(&mut repo, &src, vec![]);
    let repo = open_repo(&dir);
    assert_eq!(repo.version(), Version::V1);
    for p in repo.index().packs() {
        let path = pack::pack_path(p);
        let bytes = fs::read(dir.join(&path)).unwrap();
        let (v, _) = pack::header_of(&bytes, repo.key(), &path, &[Version::V1]).unwrap();
        assert_eq!(v, Version::V1);
    }
    let c = check_all(&repo);
    assert!(c.ok(), "{:?}", c.errors);
    let out = t.path().join("out");
    let r = restore_latest(&repo, &out);
    assert!(r.failures.is_empty(), "{:?}", r.failures);
    assert_same_tree(&src, &out);
}
