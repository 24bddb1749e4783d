use super::*;
use crate::repo::crypto::KeyFile;
use crate::repo::format::BlobKind;
use crate::repo::format::{Object, Version};
use crate::repo::lock::WriterRecord;
use crate::repo::named::{open_config, seal_config, CONFIG_PADDED_LEN};
use crate::repo::pack::PackBuilder;
use crate::repo::writer::BlobSaver;
use crate::store::MemoryStore;
use std::collections::HashMap;
use std::sync::atomic::Ordering;

pub(crate) fn fast_init() -> InitOptions {
    InitOptions {
        kdf: KdfParams::FOR_TESTS,
        pack_size: 512,
        ..Default::default()
    }
}

/// Packs are written by background threads: every pack they wrote is in the index
/// `finish` writes. A pack write that fails (the disk full, the bucket gone) makes
/// `save` or `finish` fail, and `finish` fails even after a `save` returned that
/// error (a backup goes on with its other folders, whose entries may name blobs of
/// the lost pack): no index naming a pack that is not there, no snapshot.
#[test]
fn packs_written_in_the_background_are_indexed_and_their_errors_returned() {
    use crate::error::BackendKind;
    use crate::store::FaultyStore;
    let mem = Arc::new(MemoryStore::new());
    let store = Arc::new(FaultyStore::new(mem.clone()).only_under("data/"));
    let repo = Repository::init(store.clone(), b"pw", &fast_init()).unwrap();
    let saver = BlobSaver::new(&repo, Compression::None);
    let blobs: Vec<Vec<u8>> = (0..200u32).map(|i| i.to_le_bytes().repeat(100)).collect();
    let ids: Vec<Id> = (blobs.iter())
        .map(|b| saver.save(BlobKind::Data, b).unwrap())
        .collect();
    let packs = saver.finish().unwrap();
    assert!(packs.len() > 10, "{} packs", packs.len());
    assert_eq!(mem.list("data/").unwrap().len(), packs.len());
    drop(saver);
    let repo = Repository::open(store.clone(), b"pw").unwrap();
    for (id, b) in ids.iter().zip(&blobs) {
        assert_eq!(&repo.read_blob(id).unwrap(), b);
    }
    // One pack write fails; the others would succeed.
    store.fail_next(1, BackendKind::Other);
    let saver = BlobSaver::new(&repo, Compression::None);
    let mut first = None;
    for i in 0..200u32 {
        let saved = saver.save(BlobKind::Data, &(i + 1000).to_le_bytes().repeat(100));
        if let Err(e) = saved {
            first.get_or_insert(e.to_string());
        }
    }
    let first = first.expect("a save returns the failed pack write");
    assert!(first.contains("injected fault on data/"), "{first}");
    let err = saver.finish().unwrap_err().to_string();
    assert!(err.contains("an earlier pack write failed"), "{err}");
    assert!(err.contains("injected fault on data/"), "{err}");
    assert_eq!(mem.list("index/").unwrap().len(), 1, "no new index file");
}

#[test]
fn save_and_read_blobs_across_reopen() {
    for (version, pad) in [
        (Version::V1, false),
        (Version::V2, false),
        (Version::V2, true),
    ] {
        save_and_read_blobs(version, pad);
    }
}

fn save_and_read_blobs(version: Version, pad: bool) {
    let store = Arc::new(MemoryStore::new());
    let opts = InitOptions {
        version,
        pad,
        ..fast_init()
    };
    let repo = Repository::init(store.clone(), b"pw", &opts).unwrap();
    let saver = BlobSaver::new(&repo, Compression::Zstd);
    let blobs: Vec<Vec<u8>> = (0..50)
        .map(|i| format!("blob number {i} ").repeat(i + 1).into_bytes())
        .collect();
    let ids: Vec<Id> = blobs
        .iter()
        .map(|b| saver.save(BlobKind::Data, b).unwrap())
        .collect();
    assert_eq!(saver.save(BlobKind::Data, &blobs[3]).unwrap(), ids[3]);
    saver.finish().unwrap();
    assert_eq!(saver.stats.data_blobs.load(Ordering::Relaxed), 50);
    assert!(
        store.list("data/").unwrap().len() > 1,
        "small pack size gives several packs"
    );
    let repo = Repository::open(store.clone(), b"pw").unwrap();
    assert_eq!((repo.version(), repo.config().pad), (version, pad));
    for (id, b) in ids.iter().zip(&blobs) {
        assert_eq!(&repo.read_blob(id).unwrap(), b);
        assert_eq!(&repo.read_blob_unverified(id).unwrap(), b);
    }
    if version == Version::V2 {
        // Every blob is sealed with its kind and id: under another id it does not open.
        let (loc, sealed, path) = repo.read_sealed(&ids[0]).unwrap();
        let e = repo
            .open_blob(&ids[1], &loc, Version::V2, sealed, &path)
            .unwrap_err();
        assert!(matches!(e, Error::Misplaced { .. }), "{e}");
        // The config is padded to a fixed size whatever its content.
        assert_eq!(
            store.get("config").unwrap().len(),
            CONFIG_PADDED_LEN + crate::repo::crypto::SEAL_OVERHEAD
        );
    }
    assert!(matches!(
        Repository::open(store.clone(), b"wrong"),
        Err(Error::WrongPassword)
    ));
    assert!(matches!(
        Repository::init(store, b"pw", &fast_init()),
        Err(Error::RepositoryExists(_))
    ));
}

/// The config's stated version must be one this code knows, and agree with how the
/// config is sealed: a later format is refused by its number, a format-1 config
/// claiming format 2 (or the other way round) is refused as corrupt.
#[test]
fn config_versions_are_checked() {
    let key = MasterKey::random();
    let config = |version| Config {
        version,
        id: "x".into(),
        compression: Compression::Zstd,
        chunker: ChunkerParams::default(),
        pack_size: 1 << 20,
        pad: false,
        format1_packs: false,
    };
    for v in [Version::V1, Version::V2] {
        let sealed = seal_config(&key, &config(v.number())).unwrap();
        assert_eq!(open_config(&key, sealed).unwrap().1, v);
    }
    let json = |v| serde_json::to_vec(&config(v)).unwrap();
    let later = key.seal_ad(&format::pad(json(3)), &Object::Config.aad());
    assert!(matches!(
        open_config(&key, later),
        Err(Error::UnsupportedVersion(3))
    ));
    let e = open_config(&key, key.seal(&json(2)))
        .unwrap_err()
        .to_string();
    assert!(e.contains("sealed as format 1"), "{e}");
    let v1_as_v2 = key.seal_ad(&format::pad(json(1)), &Object::Config.aad());
    let e = open_config(&key, v1_as_v2).unwrap_err().to_string();
    assert!(e.contains("sealed as format 2"), "{e}");
}

/// A pack written by a run that was killed, as such a run leaves it: no index.
fn write_unindexed_pack(repo: &Repository, data: &[u8]) -> Id {
    let saver = BlobSaver::new(repo, Compression::Lz4);
    let id = saver.save(BlobKind::Data, data).unwrap();
    let p = std::mem::take(&mut *lock(&saver.packers[0]));
    saver
        .write_pack(p.finish(&repo.key, repo.version).unwrap(), BlobKind::Data)
        .unwrap();
    id
}

#[test]
fn writer_records_say_when_to_look_for_unindexed_packs() {
    let store = Arc::new(MemoryStore::new());
    let locks = || store.list("locks/").unwrap();
    let mut repo = Repository::init(store.clone(), b"pw", &fast_init()).unwrap();
    // A run holds a lock while it runs, and one that ends leaves no record.
    let (found, mark) = repo.begin_backup().unwrap();
    assert!(found.is_empty());
    assert_eq!(locks().len(), 1);
    repo.end_backup(mark).unwrap();
    assert!(locks().is_empty());
    // Without any record, packs are not looked for (that is what the records save).
    let orphan = write_unindexed_pack(&repo, &[1u8; 5000]);
    let (found, mark) = repo.begin_backup().unwrap();
    assert!(found.is_empty());
    repo.end_backup(mark).unwrap();
    // A run killed after writing a pack leaves its lock, here of a process of this
    // host that no longer exists.
    let big = vec![7u8; 10_000];
    let id = write_unindexed_pack(&repo, &big);
    let gone = crate::repo::lock::LockRecord {
        hostname: crate::hostname(),
        pid: 4_000_000_000,
        time: crate::now_unix(),
        created: crate::now_unix(),
        exclusive: false,
        operation: "backup".into(),
        lock: "0".into(),
        released: false,
        refresh_secs: 0,
    };
    let json = serde_json::to_vec(&gone).unwrap();
    store
        .put(
            "locks/gone",
            &repo.seal_object(Object::Writer("locks/gone"), &json),
        )
        .unwrap();
    // And the record an older mailvault's live backup (this process) writes, which
    // must stay.
    let live = WriterRecord {
        hostname: crate::hostname(),
        pid: std::process::id(),
        started: crate::now_unix(),
    };
    store
        .put(
            "writers/live",
            &repo.seal_object(Object::Writer("live"), &serde_json::to_vec(&live).unwrap()),
        )
        .unwrap();
    let mut repo = Repository::open(store.clone(), b"pw").unwrap();
    assert!(!repo.index().contains(&id));
    let (found, mark) = repo.begin_backup().unwrap();
    // Both unindexed packs are found, the killed run's and the older orphan.
    assert_eq!(found.len(), 2);
    assert_eq!(repo.read_blob(&id).unwrap(), big);
    assert!(repo.index().contains(&orphan));
    repo.end_backup(mark).unwrap();
    assert!(locks().is_empty());
    let left: Vec<String> = (store.list("writers/").unwrap().into_iter())
        .map(|o| o.path)
        .collect();
    assert_eq!(left, ["writers/live"]);
}

#[test]
fn unindexed_packs_are_recovered() {
    let store = Arc::new(MemoryStore::new());
    let repo = Repository::init(store.clone(), b"pw", &fast_init()).unwrap();
    let saver = BlobSaver::new(&repo, Compression::Lz4);
    let big = vec![7u8; 10_000];
    let id = saver.save(BlobKind::Data, &big).unwrap();
    // Write the pack but not the index, as a killed run would.
    let p = std::mem::take(&mut *lock(&saver.packers[0]));
    saver
        .write_pack(p.finish(&repo.key, repo.version).unwrap(), BlobKind::Data)
        .unwrap();
    drop(saver);
    let mut repo = Repository::open(store, b"pw").unwrap();
    assert!(!repo.index().contains(&id));
    let rec = repo.recover_unindexed_packs().unwrap();
    assert_eq!(rec.len(), 1);
    assert_eq!(repo.read_blob(&id).unwrap(), big);
}

/// A killed writer's record, as a gone process of this host leaves it.
/// The lock of a backup that was killed: its process is gone.
fn gone_writer_record(repo: &Repository, store: &MemoryStore) {
    let gone = crate::repo::lock::LockRecord {
        hostname: crate::hostname(),
        pid: 4_000_000_000,
        time: crate::now_unix(),
        created: crate::now_unix(),
        exclusive: false,
        operation: "backup".into(),
        lock: "0000gone".into(),
        released: false,
        refresh_secs: 0,
    };
    let path = format!("{}0000gone", crate::repo::lock::LOCKS);
    store
        .put(
            &path,
            &repo.seal_object(Object::Writer(&path), &serde_json::to_vec(&gone).unwrap()),
        )
        .unwrap();
}

/// Issue 10, item 24: recovery indexes a pack only when its name is the hash of its
/// bytes and every blob hashes to its id; a junk file in writers/ is no stale record.
#[test]
fn recovery_verifies_packs_and_ignores_junk_in_writers() {
    let store = Arc::new(MemoryStore::new());
    let mut repo = Repository::init(store.clone(), b"pw", &fast_init()).unwrap();
    let good = vec![1u8; 3000];
    let good_id = write_unindexed_pack(&repo, &good);
    // Junk in writers/ alone starts no recovery, and stays.
    store.put("writers/README", b"not a record").unwrap();
    let (found, mark) = repo.begin_backup().unwrap();
    assert!(found.is_empty(), "junk in writers/ triggered a recovery");
    assert!(!repo.index().contains(&good_id));
    repo.end_backup(mark).unwrap();
    assert!(store.stat("writers/README").is_ok());

    // A pack whose header files a blob under another blob's id: its name matches
    // its bytes, its header opens, only the id check can tell.
    let wanted = vec![2u8; 3000];
    let wanted_id = repo.key.blob_id(&wanted);
    let mut b = PackBuilder::default();
    let other = vec![3u8; 3000];
    b.add(
        wanted_id,
        BlobKind::Data,
        compress::Codec::Raw,
        other.len(),
        &repo.seal_blob(BlobKind::Data, &wanted_id, other.as_slice().into()),
    );
    let bogus = b.finish(&repo.key, repo.version).unwrap();
    store
        .put(&pack::pack_path(&bogus.id), &bogus.bytes().unwrap())
        .unwrap();
    // A good pack stored under a name that is not its hash.
    let mut b = PackBuilder::default();
    let third = vec![4u8; 3000];
    let third_id = repo.key.blob_id(&third);
    b.add(
        third_id,
        BlobKind::Data,
        compress::Codec::Raw,
        third.len(),
        &repo.seal_blob(BlobKind::Data, &third_id, third.as_slice().into()),
    );
    let renamed = b.finish(&repo.key, repo.version).unwrap();
    store
        .put(&pack::pack_path(&Id([0xab; 32])), &renamed.bytes().unwrap())
        .unwrap();

    gone_writer_record(&repo, &store);
    let mut repo = Repository::open(store.clone(), b"pw").unwrap();
    let (found, mark) = repo.begin_backup().unwrap();
    let found: Vec<Id> = found.into_iter().map(|p| p.id).collect();
    assert!(repo.index().contains(&good_id));
    assert!(
        !repo.index().contains(&wanted_id),
        "a blob that does not match its id was indexed"
    );
    assert!(!repo.index().contains(&third_id));
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(repo.read_blob(&good_id).unwrap(), good);
    repo.end_backup(mark).unwrap();
    let left: Vec<String> = store
        .list("writers/")
        .unwrap()
        .into_iter()
        .map(|o| o.path)
        .collect();
    assert_eq!(left, ["writers/README"]);
}

/// Issue 10, item 10: `init` refuses a location with parts of a repository, and
/// opening one without its config says so instead of suggesting `init`.
#[test]
fn a_repository_without_config_is_neither_opened_nor_initialized_over() {
    let store = Arc::new(MemoryStore::new());
    let repo = Repository::init(store.clone(), b"pw", &fast_init()).unwrap();
    write_unindexed_pack(&repo, b"some data");
    store.delete("config").unwrap();
    let e = Repository::open(store.clone(), b"pw").err().unwrap();
    assert!(matches!(e, Error::ConfigMissing { .. }), "{e}");
    let msg = e.to_string();
    assert!(
        msg.contains("config is missing") && msg.contains("keys/"),
        "{msg}"
    );
    assert!(!msg.contains("mailvault init` first"), "{msg}");
    let e = Repository::init(store.clone(), b"pw", &fast_init())
        .err()
        .unwrap();
    assert!(matches!(e, Error::ConfigMissing { .. }), "{e}");
    assert_eq!(
        store.list("keys/").unwrap().len(),
        1,
        "a second key was added"
    );
    // Any one part is enough.
    for part in [
        "data/aa/x",
        "index/x",
        "snapshots/x",
        "dicts/x",
        "writers/x",
    ] {
        let store = Arc::new(MemoryStore::new());
        store.put(part, b"x").unwrap();
        assert!(
            matches!(
                Repository::init(store, b"pw", &fast_init()),
                Err(Error::ConfigMissing { .. })
            ),
            "{part}"
        );
    }
    // An empty location has no repository, and init works there.
    let store = Arc::new(MemoryStore::new());
    assert!(matches!(
        Repository::open(store.clone(), b"pw"),
        Err(Error::NoRepository(_))
    ));
    Repository::init(store, b"pw", &fast_init()).unwrap();
}

fn put_key_file(store: &MemoryStore, kf: &KeyFile) -> String {
    let bytes = serde_json::to_vec_pretty(kf).unwrap();
    let path = format!("keys/{}", Id::of_file(&bytes));
    store.put(&path, &bytes).unwrap();
    path
}

/// Issue 10, item 25: with several key files each one's outcome is reported, a
/// damaged one does not hide a wrong password, and key files outside the bounds or
/// of another version are refused before any key derivation.
#[test]
fn every_key_file_outcome_is_reported_and_key_files_are_bounded() {
    let store = Arc::new(MemoryStore::new());
    let repo = Repository::init(store.clone(), b"pw", &fast_init()).unwrap();
    let good = store.list("keys/").unwrap()[0].path.clone();
    // A damaged second key file, sorting first.
    store.put("keys/0000", b"{ not json").unwrap();
    let e = Repository::open(store.clone(), b"wrong").err().unwrap();
    let msg = e.to_string();
    assert!(matches!(e, Error::NoKeyOpens(_)), "{msg}");
    assert!(msg.contains(&format!("{good}: wrong password")), "{msg}");
    assert!(
        msg.contains("keys/0000: ") && msg.contains("not a key file"),
        "{msg}"
    );
    // The right password opens despite the damaged file.
    Repository::open(store.clone(), b"pw").unwrap();
    store.delete("keys/0000").unwrap();

    let fast = fast_init().kdf;
    let forged = |f: &dyn Fn(&mut KeyFile)| {
        let mut kf = KeyFile::wrap(&repo.key, b"pw", fast, "h").unwrap();
        f(&mut kf);
        kf.checksum.clear();
        let json = serde_json::to_vec(&kf).unwrap();
        kf.checksum = blake3::hash(&json).to_hex().to_string();
        kf
    };
    for (what, kf) in [
        ("t_cost", forged(&|k| k.params.t_cost = 1000)),
        ("m_cost", forged(&|k| k.params.m_cost = u32::MAX)),
        ("p_cost", forged(&|k| k.params.p_cost = 1000)),
        ("version 2", forged(&|k| k.version = 2)),
    ] {
        let store = MemoryStore::new();
        let path = put_key_file(&store, &kf);
        let e = KeyFile::parse(&store.get(&path).unwrap(), &path)
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains(what), "{what}: {e}");
        assert!(
            matches!(kf.unwrap(b"pw", &path), Err(Error::Corrupt { .. })),
            "{what}"
        );
    }
    assert!(KdfParams {
        m_cost: 5 << 20,
        t_cost: 1,
        p_cost: 1
    }
    .validate("k")
    .is_err());
    KdfParams::default().validate("k").unwrap();
}

/// Issue 10, item 9: a damaged file in snapshots/ costs that snapshot only.
#[test]
fn damaged_snapshot_files_cost_only_themselves() {
    let store = Arc::new(MemoryStore::new());
    let repo = Repository::init(store.clone(), b"pw", &fast_init()).unwrap();
    let saver = BlobSaver::new(&repo, Compression::Lz4);
    let root = saver
        .save(BlobKind::Tree, &tree::encode(&tree::RootTree::default()))
        .unwrap();
    saver.finish().unwrap();
    let snap = |time| Snapshot {
        id: Id::default(),
        version: 2,
        time,
        time_nanos: 0,
        hostname: "h".into(),
        source: "maildir:/x".into(),
        tags: Vec::new(),
        parent: None,
        root,
        summary: Default::default(),
        original: None,
        started: None,
    };
    let a = repo.save_snapshot(&snap(1)).unwrap();
    let b = repo.save_snapshot(&snap(2)).unwrap();
    let c = repo.save_snapshot(&snap(3)).unwrap();
    let mut bytes = store.get(&Snapshot::path(&c)).unwrap();
    bytes.truncate(bytes.len() / 2);
    store.overwrite(&Snapshot::path(&c), bytes);
    store.put("snapshots/README", b"hello").unwrap();
    let all = repo.snapshots().unwrap();
    let ids: Vec<Id> = all.iter().map(|s| s.id).collect();
    assert_eq!(ids, [a, b]);
    let mut damaged: Vec<&str> = all.damaged.iter().map(|d| d.path.as_str()).collect();
    damaged.sort();
    let want = Snapshot::path(&c);
    let mut want = [want.as_str(), "snapshots/README"];
    want.sort();
    assert_eq!(damaged, want);
    assert_eq!(repo.find_snapshot("latest").unwrap().id, b);
    assert_eq!(repo.find_snapshot(&a.to_hex()[..10]).unwrap().id, a);
    let e = repo.find_snapshot(&c.to_hex()[..10]).err().unwrap();
    assert!(matches!(e, Error::Misplaced { .. }), "{e}");
}

/// A message entry of a test folder: key `i`, flags `flags`, one fake content id.
pub(crate) fn test_entry(i: u32, flags: &str) -> tree::MessageEntry {
    let key = format!("{}.M{i}P1.host", 1_700_000_000 + i).into_bytes();
    tree::MessageEntry {
        name: [&key[..], b":2,", flags.as_bytes()].concat(),
        key,
        new: false,
        size: 100 + u64::from(i % 50),
        mtime: tree::Timestamp {
            secs: 1_700_000_000 + i64::from(i),
            nanos: 0,
        },
        mode: 0o600,
        uid: 1000,
        gid: 1000,
        hash: Id([(i % 251) as u8; 32]),
        content: vec![Id([(i % 241) as u8; 32])],
        from: format!("sender{i}@example.org"),
        subject: format!("message {i}"),
        date: Some(1_700_000_000 + i64::from(i)),
    }
}

/// A folder node holding `saved`.
pub(crate) fn folder_of(saved: crate::repo::writer::content::SavedChunks) -> tree::FolderNode {
    tree::FolderNode {
        name: "INBOX".into(),
        dir: Vec::new(),
        files: Vec::new(),
        chunks: saved.chunks,
        chunk_tree: saved.chunk_tree,
        scan: None,
        messages: 0,
        bytes: 0,
        dirs: Vec::new(),
        mtime: None,
    }
}

/// Saves `entries` as a folder's in a new writer, then opens the repository again to read
/// them back: the folder, the tree blobs that were new, and their sealed bytes.
fn save_folder(
    store: &Arc<MemoryStore>,
    entries: Vec<tree::MessageEntry>,
) -> (Repository, tree::FolderNode, u64, u64) {
    let repo = Repository::open(store.clone(), b"pw").unwrap();
    let saver = BlobSaver::new(&repo, Compression::Zstd);
    let saved = crate::repo::writer::content::save_entries(&saver, entries).unwrap();
    let new = saver.stats.tree_blobs.load(Ordering::Relaxed);
    let bytes = saver.stats.tree_stored.load(Ordering::Relaxed);
    saver.finish().unwrap();
    drop(saver);
    let repo = Repository::open(store.clone(), b"pw").unwrap();
    (repo, folder_of(saved), new, bytes)
}

/// Every entry of a folder, read through its chunks (and chunk tree).
fn entries_of(repo: &Repository, f: &tree::FolderNode) -> Vec<tree::MessageEntry> {
    let chunks = repo.folder_chunks(f).unwrap();
    (chunks.iter())
        .flat_map(|c| repo.read_chunk(c).unwrap())
        .collect()
}

/// A large folder keeps its chunks in a chunk tree, read back whole and in order; one
/// message more or less, or one flag changed, writes a few small tree blobs (a chunk, a
/// leaf, the nodes above), never the folder's list of chunks; the same entries in another
/// order make the same tree; a small folder keeps its chunks in its node.
#[test]
fn a_large_folder_keeps_its_chunks_in_a_tree_that_changes_where_the_folder_does() {
    let store = Arc::new(MemoryStore::new());
    Repository::init(store.clone(), b"pw", &fast_init()).unwrap();
    let n = 20_000u32;
    let all: Vec<tree::MessageEntry> = (0..n).map(|i| test_entry(i, "S")).collect();
    let (repo, folder, new, _) = save_folder(&store, all.clone());
    let root = folder.chunk_tree.expect("a chunk tree");
    assert!(folder.chunks.is_empty());
    let chunks = repo.folder_chunks(&folder).unwrap();
    assert!(chunks.len() > 300, "{} chunks", chunks.len());
    // Leaves hold ~45 chunks, inner nodes ~45 children: more than a root and its leaves.
    let blobs: std::collections::HashSet<Id> =
        (chunks.iter()).flat_map(|c| [c.entries, c.names]).collect();
    let nodes = new - blobs.len() as u64;
    assert!((4..40).contains(&nodes), "{nodes} chunk tree nodes");
    assert_eq!(entries_of(&repo, &folder), all);

    // The same entries in another order: the same tree, nothing new.
    let mut shuffled = all.clone();
    shuffled.reverse();
    shuffled.swap(10, 15_000);
    let (_, again, new, _) = save_folder(&store, shuffled);
    assert_eq!((again.chunk_tree, new), (Some(root), 0));

    // What one change costs: a few blobs, a few KB (the list of chunks alone is ~40 KB).
    let mut added = all.clone();
    added.push(test_entry(n + 1, ""));
    let mut removed = all.clone();
    removed.remove(12_345);
    // Forty new messages near the start of the folder: new chunk boundaries there,
    // which must not shift every leaf after them.
    let mut inserted = all.clone();
    for j in 0..40 {
        let mut e = test_entry(100, "");
        e.key = format!("1700000100.M{j}P2.host").into_bytes();
        e.name = [&e.key[..], b":2,"].concat();
        inserted.push(e);
    }
    let mut flagged = all.clone();
    flagged[777] = test_entry(777, "RS");
    for (what, entries, most_blobs, most_bytes) in [
        // A chunk cut where one ended before (or two joined) is two chunks of two blobs
        // each; a chunk tree of ~14 leaves of ~45 chunks (nodes of at most 96 ids, 6 KB)
        // has one inner node over them. Seen in ~700 repositories: at most 5 blobs and
        // 5.1 KB for one message more; 7 blobs and 16.1 KB for one less (the key that
        // ended a chunk removed joins it with the next, and their leaves may join too);
        // 13 blobs and 20 KB for forty.
        ("one message more", added, 8, 16 << 10),
        ("one message less", removed, 8, 24 << 10),
        ("one flag changed", flagged, 4, 16 << 10),
        ("forty messages more in one place", inserted, 16, 32 << 10),
    ] {
        let want = {
            let mut w = entries.clone();
            w.sort_by(|a, b| (&a.key, &a.name).cmp(&(&b.key, &b.name)));
            w
        };
        let (repo, f, new, bytes) = save_folder(&store, entries);
        assert_ne!(f.chunk_tree, Some(root), "{what}");
        assert!(new <= most_blobs, "{what}: {new} new tree blobs");
        assert!(
            bytes <= most_bytes,
            "{what}: {bytes} bytes of {new} new tree blobs"
        );
        assert_eq!(entries_of(&repo, &f), want, "{what}");
    }

    // A small folder: its chunks in its node, no tree (fewer chunks than a node holds
    // before it may end, whatever the repository's key).
    let few: Vec<tree::MessageEntry> = (0..120).map(|i| test_entry(i, "S")).collect();
    assert!(tree::chunk_boundaries(&few).len() < tree::NODE_MIN_IDS);
    let (repo, small, _, _) = save_folder(&store, few.clone());
    assert!(small.chunk_tree.is_none() && !small.chunks.is_empty());
    assert_eq!(entries_of(&repo, &small), few);
}

/// Entries saved as they come, in key order, make the chunks and chunk tree that
/// [`save_entries`](crate::repo::writer::content::save_entries) cuts of the same entries
/// at once, hold one chunk's entries at a time, and count the folder; one out of order is
/// refused, never saved in the wrong place.
#[test]
fn entries_saved_as_a_stream_make_the_chunks_of_the_folder_saved_at_once() {
    use crate::repo::writer::content::EntryStream;
    let store = Arc::new(MemoryStore::new());
    Repository::init(store.clone(), b"pw", &fast_init()).unwrap();
    let all: Vec<tree::MessageEntry> = (0..5_000).map(|i| test_entry(i, "S")).collect();
    let (_, at_once, _, _) = save_folder(&store, all.clone());
    let mut sorted = all.clone();
    sorted.sort_by(|a, b| (&a.key, &a.name).cmp(&(&b.key, &b.name)));

    let repo = Repository::open(store.clone(), b"pw").unwrap();
    let saver = BlobSaver::new(&repo, Compression::Zstd);
    let mut stream = EntryStream::new(&saver);
    let mut most_pending = 0;
    for e in sorted.iter().cloned() {
        stream.push(e).unwrap();
        most_pending = most_pending.max(stream.pending());
    }
    let (saved, messages, bytes) = stream.finish().unwrap();
    assert_eq!(
        (saved.chunk_tree, &saved.chunks),
        (at_once.chunk_tree, &at_once.chunks)
    );
    assert_eq!(messages, 5_000);
    assert_eq!(bytes, sorted.iter().map(|e| e.size).sum::<u64>());
    assert!(
        most_pending <= tree::CHUNK_MAX_ENTRIES,
        "{most_pending} entries held"
    );

    let mut stream = EntryStream::new(&saver);
    stream.push(sorted[10].clone()).unwrap();
    let e = stream.push(sorted[9].clone()).unwrap_err();
    assert!(e.to_string().contains("out of key order"), "{e}");
    // Also across a chunk already saved.
    let mut stream = EntryStream::new(&saver);
    for e in &sorted[..600] {
        stream.push(e.clone()).unwrap();
    }
    assert!(stream.pending() < 600);
    assert!(stream.push(sorted[0].clone()).is_err());
    saver.finish().unwrap();
}

/// A saver told to index every N entries lists its packs in index files of at most N
/// entries, as they are written, not only at `finish`: every blob is found after it (read
/// back into this process's index, and from a fresh open), and a run killed before
/// `finish` leaves the batches it indexed readable and nothing else named.
#[test]
fn a_backup_s_packs_are_indexed_in_batches_as_they_are_written() {
    let mem = Arc::new(MemoryStore::new());
    let mut repo = Repository::init(mem.clone(), b"pw", &fast_init()).unwrap();
    let blobs = |from: u32| -> Vec<Vec<u8>> {
        (from..from + 300)
            .map(|i| i.to_le_bytes().repeat(100))
            .collect()
    };
    let (first, more) = (blobs(0), blobs(5000));
    let (packs, files, ids) = {
        let saver = BlobSaver::new(&repo, Compression::None).index_every(40);
        let ids: Vec<Id> = (first.iter())
            .map(|b| saver.save(BlobKind::Data, b).unwrap())
            .collect();
        let packs = saver.finish().unwrap();
        (packs, saver.index_files_written(), ids)
    };
    let index_files = mem.list("index/").unwrap();
    assert!(
        index_files.len() >= 300 / 40,
        "{} index files",
        index_files.len()
    );
    for f in &index_files {
        let (_, listed) = repo.read_index_file(&f.path).unwrap();
        let n: usize = listed.iter().map(|p| p.entries.len()).sum();
        assert!(n <= 40, "{}: {n} entries", f.path);
    }
    repo.add_written(&packs, &files).unwrap();
    assert!(ids.iter().all(|id| repo.index().contains(id)));
    let repo = Repository::open(mem.clone(), b"pw").unwrap();
    for (id, b) in ids.iter().zip(&first) {
        assert_eq!(&repo.read_blob(id).unwrap(), b);
    }

    // Killed before `finish`: 300 blobs indexed in batches (the writer threads waited
    // for, so that the test does not race them), 10 more not yet.
    let saver = BlobSaver::new(&repo, Compression::None).index_every(40);
    let ids: Vec<Id> = (more.iter())
        .map(|b| saver.save(BlobKind::Data, b).unwrap())
        .collect();
    saver.join_writers().unwrap();
    saver.index_batch_if_full().unwrap();
    assert!(!saver.index_files_written().is_empty());
    let unindexed: Vec<Id> = (0..10u32)
        .map(|i| {
            saver
                .save(BlobKind::Data, &(i + 9000).to_le_bytes().repeat(100))
                .unwrap()
        })
        .collect();
    drop(saver);
    let repo = Repository::open(mem.clone(), b"pw").unwrap();
    // All but those of packs written since the last batch (fewer than 40 entries) and
    // of the pack being filled.
    let mut found = 0;
    for (id, b) in ids
        .iter()
        .zip(&more)
        .filter(|(id, _)| repo.index().contains(id))
    {
        assert_eq!(&repo.read_blob(id).unwrap(), b);
        found += 1;
    }
    assert!(found > 300 - 40 - 2, "{found} of 300 indexed");
    assert!(unindexed.iter().all(|id| !repo.index().contains(id)));
}

/// Index files are opened at load in their own buffer, without a copy kept for the
/// error: one that does not open is read again, and says why exactly as a single read of
/// it does (moved, sealed as format 1 seals, damaged); one that opens loads.
#[test]
fn an_index_file_that_does_not_open_says_why_at_load() {
    let store = Arc::new(MemoryStore::new());
    let repo = Repository::init(store.clone(), b"pw", &fast_init()).unwrap();
    let entry = crate::repo::pack::PackEntry {
        id: Id([3; 32]),
        kind: BlobKind::Data,
        codec: compress::Codec::Raw,
        offset: 0,
        stored_len: 10,
        raw_len: 10,
    };
    let listed = crate::repo::pack::IndexedPack {
        id: Id([9; 32]),
        version: Version::V2,
        entries: vec![entry],
    };
    let plain = index::encode(&[listed], Version::V2).unwrap();
    let (id, sealed) = repo.seal_named(named::Named::Index, &plain);
    let mut damaged = sealed.clone();
    damaged[40] ^= 1;
    let files = [
        (format!("index/{}", Id([7; 32])), sealed.clone()),
        (format!("index/{}", Id([8; 32])), damaged),
        (format!("index/{id}"), repo.key.seal(&plain)),
    ];
    for (path, bytes) in &files {
        store.put(path, bytes).unwrap();
    }
    let repo = Repository::open(store.clone(), b"pw").unwrap();
    assert!(repo.index().is_empty());
    let errors: HashMap<&str, String> = (repo.index_errors().iter())
        .map(|(p, e)| (p.as_str(), e.to_string()))
        .collect();
    assert_eq!(errors.len(), 3);
    for (path, _) in &files {
        let single = repo.read_index_file(path).unwrap_err().to_string();
        assert_eq!(errors[path.as_str()], single);
    }
    assert!(matches!(
        &repo
            .index_errors()
            .iter()
            .find(|(p, _)| p.ends_with(&id.to_hex()))
            .unwrap()
            .1,
        Error::OtherFormat {
            found: 1,
            expected: 2,
            ..
        }
    ));
    // Put right, it loads.
    for (path, _) in &files {
        store.delete(path).unwrap();
    }
    store.put(&format!("index/{id}"), &sealed).unwrap();
    let repo = Repository::open(store, b"pw").unwrap();
    assert!(repo.index_errors().is_empty());
    assert_eq!(repo.index().get(&Id([3; 32])).map(|l| l.raw_len), Some(10));
}

/// `check` compares every pack's header with what the index says of its blobs (the blobs
/// grouped by pack from the index itself): a clean repository of several packs passes,
/// and an index entry whose offset its pack's header does not have is an error that
/// loses that blob only.
#[test]
fn check_compares_each_pack_s_header_with_its_index_entries() {
    use crate::ops::check::{check, CheckOptions};
    let mem = Arc::new(MemoryStore::new());
    let repo = Repository::init(mem.clone(), b"pw", &fast_init()).unwrap();
    let saver = BlobSaver::new(&repo, Compression::None);
    for i in 0..60u32 {
        saver
            .save(BlobKind::Data, &i.to_le_bytes().repeat(100))
            .unwrap();
    }
    let mut packs = saver.finish().unwrap();
    drop(saver);
    assert!(packs.len() > 5, "{} packs", packs.len());
    let repo = Repository::open(mem.clone(), b"pw").unwrap();
    let report = check(&repo, &CheckOptions::default()).unwrap();
    assert!(report.ok(), "{:?}", report.errors);
    assert_eq!(report.blobs, 60);
    // The same packs indexed again, one entry's offset moved.
    packs[3].entries[1].offset += 1;
    for f in mem.list("index/").unwrap() {
        mem.delete(&f.path).unwrap();
    }
    repo.write_index(&packs).unwrap();
    let repo = Repository::open(mem.clone(), b"pw").unwrap();
    let report = check(&repo, &CheckOptions::default()).unwrap();
    assert_eq!(report.errors.len(), 1, "{:?}", report.errors);
    let e = &report.errors[0];
    assert!(
        e.error.contains("index entries do not match the header"),
        "{e:?}"
    );
    assert_eq!(e.blobs, 1, "{e:?}");
}
