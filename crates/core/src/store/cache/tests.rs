use super::*;
use crate::store::{MemoryStore, Metered};
use std::os::unix::fs::PermissionsExt;

const ID: &str = "0123456789abcdef0123456789abcdef";

/// Memory, counted, cached (under `root`), bound to [`ID`] when `bind`.
fn stack(mem: &MemoryStore, root: &Path, bind: bool) -> (Arc<Metered>, Cached) {
    let metered = Arc::new(Metered::new(Arc::new(mem.clone())));
    let cached = Cached::new(metered.clone(), root.to_path_buf());
    if bind {
        cached.bind(ID);
    }
    (metered, cached)
}

/// Every file under `dir`, relative.
fn files(dir: &Path) -> Vec<String> {
    fn walk(base: &Path, dir: &Path, out: &mut Vec<String>) {
        for e in fs::read_dir(dir).into_iter().flatten().flatten() {
            if e.file_type().unwrap().is_dir() {
                walk(base, &e.path(), out);
            } else {
                let rel = e.path().strip_prefix(base).unwrap().to_owned();
                out.push(rel.to_string_lossy().into_owned());
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out.sort();
    out
}

fn flip(file: &Path, at: usize) {
    let mut b = fs::read(file).unwrap();
    b[at] ^= 0x20;
    fs::write(file, b).unwrap();
}

#[test]
fn passes_the_conformance_suite_unbound_and_bound() {
    let t = tempfile::tempdir().unwrap();
    let (_, unbound) = stack(&MemoryStore::new(), t.path(), false);
    crate::store::conformance::run(&unbound);
    assert!(files(t.path()).is_empty(), "unbound: nothing cached");
    let (_, bound) = stack(&MemoryStore::new(), t.path(), true);
    crate::store::conformance::run(&bound);
    let cached = files(&t.path().join(ID));
    assert!(cached.contains(&"index/1111".to_string()), "{cached:?}");
    assert_eq!(
        cached
            .iter()
            .filter(|f| f.starts_with("snapshots/"))
            .count(),
        99,
        "the suite deletes one of its 100 snapshots"
    );
    // The suite's tree pack is kept, its data pack and other packs are not.
    let packs: Vec<_> = cached.iter().filter(|f| f.starts_with("data/")).collect();
    assert_eq!(packs, ["data/ef/ef01"]);
    assert!(!cached
        .iter()
        .any(|f| f == "config" || f.starts_with("other/")));
}

#[test]
fn cached_objects_are_read_without_requests_and_verified() {
    let t = tempfile::tempdir().unwrap();
    let mem = MemoryStore::new();
    mem.put("index/aa", b"index bytes").unwrap();
    mem.put("snapshots/bb", b"snapshot").unwrap();
    mem.put("config", b"cfg").unwrap();
    mem.put("writers/cc", b"w").unwrap();
    let (m, c) = stack(&mem, t.path(), true);
    for _ in 0..3 {
        assert_eq!(c.get("index/aa").unwrap(), b"index bytes");
        assert_eq!(c.get("snapshots/bb").unwrap(), b"snapshot");
        assert_eq!(c.get("config").unwrap(), b"cfg");
        assert_eq!(c.get("writers/cc").unwrap(), b"w");
    }
    // Two misses, then hits; config and writers/ every time.
    assert_eq!(m.counts().get, 2 + 3 * 2);
    assert_eq!(
        c.stats(),
        CacheStats {
            hits: 4,
            misses: 2,
            refetches: 0,
            bytes_served: 2 * (11 + 8),
        }
    );
    // Stored as in the repository, plus the BLAKE3 of those bytes.
    let file = fs::read(t.path().join(ID).join("index/aa")).unwrap();
    assert_eq!(&file[..11], b"index bytes");
    assert_eq!(&file[11..], blake3::hash(b"index bytes").as_bytes());
}

#[test]
fn a_damaged_cached_index_file_is_refetched() {
    let t = tempfile::tempdir().unwrap();
    let mem = MemoryStore::new();
    let (m, c) = stack(&mem, t.path(), true);
    c.put("index/aa", b"the index").unwrap();
    let file = t.path().join(ID).join("index/aa");
    flip(&file, 3);
    assert_eq!(c.get("index/aa").unwrap(), b"the index");
    assert_eq!(c.stats().refetches, 1);
    assert_eq!(m.counts().get, 1);
    // Kept again, whole: the next read is a hit.
    assert_eq!(c.get("index/aa").unwrap(), b"the index");
    assert_eq!(m.counts().get, 1);
    // A truncated file (shorter than the trailer) too.
    fs::write(&file, b"x").unwrap();
    assert_eq!(c.get("index/aa").unwrap(), b"the index");
    assert_eq!(c.stats().refetches, 2);
}

#[test]
fn tree_packs_are_fetched_whole_once_and_served_in_ranges() {
    let t = tempfile::tempdir().unwrap();
    let mem = MemoryStore::new();
    let pack: Vec<u8> = (0..=255).collect();
    mem.put("data/ab/abcd", &pack).unwrap();
    mem.put("data/cd/cdef", &pack).unwrap();
    let (m, c) = stack(&mem, t.path(), true);
    for off in [0u64, 10, 100, 250] {
        let r = c
            .get_pack_range("data/ab/abcd", off, 6, PackKind::Tree)
            .unwrap();
        assert_eq!(r, pack[off as usize..off as usize + 6]);
    }
    assert_eq!(m.counts().get, 1);
    assert_eq!(m.counts().bytes_down, 256);
    // Past the end: the store's error, as without a cache.
    assert!(c
        .get_pack_range("data/ab/abcd", 250, 10, PackKind::Tree)
        .is_err());
    // Data packs go to the store every time and are never kept.
    for _ in 0..2 {
        let r = c
            .get_pack_range("data/cd/cdef", 1, 2, PackKind::Data)
            .unwrap();
        assert_eq!(r, [1, 2]);
    }
    assert_eq!(c.get("data/cd/cdef").unwrap(), pack);
    assert_eq!(files(&t.path().join(ID)), ["data/ab/abcd"]);
    // Another process: verifies the file once, then reads ranges in place.
    let (m2, c2) = stack(&mem, t.path(), true);
    for _ in 0..3 {
        let r = c2
            .get_pack_range("data/ab/abcd", 7, 3, PackKind::Tree)
            .unwrap();
        assert_eq!(r, [7, 8, 9]);
    }
    assert_eq!(m2.counts().total(), 0);
    assert_eq!(c2.stats().hits, 3);
}

#[test]
fn a_damaged_cached_tree_pack_is_refetched() {
    let t = tempfile::tempdir().unwrap();
    let mem = MemoryStore::new();
    let pack: Vec<u8> = (0..200).map(|i| i as u8).collect();
    let (_, c) = stack(&mem, t.path(), true);
    c.put_pack("data/ab/abcd", &pack, PackKind::Tree).unwrap();
    // Kept on put (a tree pack written by this host's backup).
    let file = t.path().join(ID).join("data/ab/abcd");
    assert_eq!(fs::read(&file).unwrap().len(), 200 + 32);
    // Damaged outside the range read: still caught.
    flip(&file, 150);
    let (m, c2) = stack(&mem, t.path(), true);
    let r = c2
        .get_pack_range("data/ab/abcd", 10, 4, PackKind::Tree)
        .unwrap();
    assert_eq!(r, [10, 11, 12, 13]);
    assert_eq!(c2.stats().refetches, 1);
    assert_eq!(m.counts().get, 1);
    assert_eq!(fs::read(&file).unwrap()[..200], pack[..]);
}

/// A store whose gets are slow: threads that miss at once overlap.
struct Slow(MemoryStore);
impl Backend for Slow {
    fn write(&self, h: Handle<'_>, data: &[u8], mode: WriteMode) -> Result<()> {
        self.0.write(h, data, mode)
    }
    fn read(&self, h: Handle<'_>, range: Option<ByteRange>) -> Result<Vec<u8>> {
        if range.is_none() {
            std::thread::sleep(Duration::from_millis(100));
        }
        self.0.read(h, range)
    }
    fn listing(&self, prefix: &str, from: Listing) -> Result<Vec<ObjectInfo>> {
        self.0.listing(prefix, from)
    }
    fn remove(&self, h: Handle<'_>) -> Result<()> {
        self.0.remove(h)
    }
    fn size(&self, h: Handle<'_>) -> Result<u64> {
        self.0.size(h)
    }
    fn location(&self) -> String {
        "slow:".into()
    }
    fn flush(&self) -> Result<()> {
        self.0.flush()
    }
    fn local_dir(&self) -> Option<std::path::PathBuf> {
        self.0.local_dir()
    }
    fn hint(&self, hint: Hint<'_>) {
        self.0.hint(hint)
    }
}

#[test]
fn threads_missing_one_tree_pack_download_it_once() {
    let t = tempfile::tempdir().unwrap();
    let mem = MemoryStore::new();
    mem.put("data/ab/abcd", &[7; 1000]).unwrap();
    let metered = Arc::new(Metered::new(Arc::new(Slow(mem))));
    let c = Cached::new(metered.clone(), t.path().to_path_buf());
    c.bind(ID);
    std::thread::scope(|s| {
        for i in 0..8 {
            let c = &c;
            s.spawn(move || {
                let r = c
                    .get_pack_range("data/ab/abcd", i * 10, 10, PackKind::Tree)
                    .unwrap();
                assert_eq!(r, [7; 10]);
            });
        }
    });
    assert_eq!(metered.counts().get, 1);
    assert_eq!(c.stats().misses, 1);
    assert_eq!(c.stats().hits, 7);
}

#[test]
fn processes_sharing_a_cache_see_whole_files() {
    let t = tempfile::tempdir().unwrap();
    let mem = MemoryStore::new();
    let body = |i: usize| vec![i as u8; 256 << 10];
    for i in 0..8 {
        mem.put(&format!("index/{i:02x}"), &body(i)).unwrap();
        mem.put(&format!("data/{i:02x}/{i:02x}ff"), &body(i))
            .unwrap();
    }
    // Two "processes" (each its own cache object), four threads each, cold cache.
    let (_, a) = stack(&mem, t.path(), true);
    let (_, b) = stack(&mem, t.path(), true);
    std::thread::scope(|s| {
        for c in [&a, &b, &a, &b, &a, &b, &a, &b] {
            s.spawn(move || {
                for round in 0..3 {
                    for i in 0..8 {
                        let got = c.get(&format!("index/{i:02x}")).unwrap();
                        assert!(got == body(i), "index {i} torn");
                        let path = format!("data/{i:02x}/{i:02x}ff");
                        let r = c.get_pack_range(&path, 1000, 10, PackKind::Tree);
                        assert_eq!(r.unwrap(), [i as u8; 10]);
                    }
                    if round == 1 {
                        c.list("").unwrap();
                    }
                }
            });
        }
    });
    for c in [&a, &b] {
        assert_eq!(c.stats().refetches, 0, "a torn file was read");
    }
}

#[test]
fn a_listing_drops_what_the_store_no_longer_has() {
    let t = tempfile::tempdir().unwrap();
    let mem = MemoryStore::new();
    let (_, c) = stack(&mem, t.path(), true);
    c.put("snapshots/s1", b"one").unwrap();
    c.put("snapshots/s2", b"two").unwrap();
    c.put("index/i1", b"idx").unwrap();
    c.put_pack("data/ab/abcd", b"trees", PackKind::Tree)
        .unwrap();
    c.put_pack("data/ef/ef01", b"trees 2", PackKind::Tree)
        .unwrap();
    // Another host forgets a snapshot and prunes a pack and an index file.
    mem.delete("snapshots/s1").unwrap();
    mem.delete("data/ab/abcd").unwrap();
    mem.delete("index/i1").unwrap();
    assert_eq!(c.list("snapshots/").unwrap().len(), 1);
    let dir = t.path().join(ID);
    assert_eq!(
        files(&dir),
        ["data/ab/abcd", "data/ef/ef01", "index/i1", "snapshots/s2"]
    );
    c.list("data/").unwrap();
    assert_eq!(files(&dir), ["data/ef/ef01", "index/i1", "snapshots/s2"]);
    c.list("").unwrap();
    assert_eq!(files(&dir), ["data/ef/ef01", "snapshots/s2"]);
    // A delete through the cache drops the copy at once.
    c.delete("snapshots/s2").unwrap();
    assert_eq!(files(&dir), ["data/ef/ef01"]);
    assert!(matches!(c.get("snapshots/s2"), Err(Error::NotFound(_))));
}

#[test]
fn a_recent_snapshot_listing_is_reused_with_this_process_changes() {
    let t = tempfile::tempdir().unwrap();
    let mem = MemoryStore::new();
    mem.put("snapshots/s1", b"one").unwrap();
    let (m, c) = stack(&mem, t.path(), true);
    assert_eq!(c.list("snapshots/").unwrap().len(), 1);
    c.put("snapshots/s2", b"two").unwrap();
    c.delete("snapshots/s1").unwrap();
    let lists = m.counts().list;
    let paths: Vec<String> = c
        .list("snapshots/")
        .unwrap()
        .into_iter()
        .map(|o| o.path)
        .collect();
    assert_eq!(paths, ["snapshots/s2"]);
    assert_eq!(m.counts().list, lists, "the listing was reused");
    // Other prefixes are always listed.
    c.list("index/").unwrap();
    c.list("index/").unwrap();
    assert_eq!(m.counts().list, lists + 2);
}

#[test]
fn key_files_are_listed_from_the_cache_before_bind() {
    let t = tempfile::tempdir().unwrap();
    let mem = MemoryStore::new();
    mem.put("keys/k1", b"key one").unwrap();
    // First open: listed and read from the store, kept at bind.
    let (m, c) = stack(&mem, t.path(), false);
    assert_eq!(c.list_cached("keys/").unwrap().len(), 1);
    assert_eq!(c.get("keys/k1").unwrap(), b"key one");
    assert!(files(t.path()).is_empty(), "nothing kept before bind");
    c.bind(ID);
    assert_eq!(m.counts().total(), 2);
    // Second open: no request for the keys.
    let (m, c) = stack(&mem, t.path(), false);
    assert_eq!(
        c.list_cached("keys/").unwrap(),
        [ObjectInfo {
            path: "keys/k1".into(),
            size: 7
        }]
    );
    assert_eq!(c.get("keys/k1").unwrap(), b"key one");
    assert_eq!(m.counts().total(), 0);
    // A cache without a pointer for the location: asks the store.
    let (m, c) = stack(&MemoryStore::new(), &t.path().join("elsewhere"), false);
    assert!(c.list_cached("keys/").unwrap().is_empty());
    assert_eq!(m.counts().list, 1);
}

#[test]
fn bind_refuses_ids_that_are_not_hex() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("cache");
    let mem = MemoryStore::new();
    mem.put("index/aa", b"i").unwrap();
    for bad in ["../escape", "", "abc/def", "/tmp", "zz"] {
        let c = Cached::new(Arc::new(mem.clone()), root.clone());
        c.bind(bad);
        assert_eq!(c.get("index/aa").unwrap(), b"i");
        assert_eq!(c.stats(), CacheStats::default(), "{bad}");
    }
    assert!(files(t.path()).is_empty());
    // Paths that are not plain names are never kept either.
    let (_, c) = stack(&mem, &root, true);
    mem.put("index/../../x", b"i").unwrap();
    assert_eq!(c.get("index/../../x").unwrap(), b"i");
    assert!(!files(&root).iter().any(|f| f.contains('x')));
}

#[test]
fn files_are_private_and_the_root_is_tagged() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("cache");
    let (_, c) = stack(&MemoryStore::new(), &root, true);
    c.put("index/aa", b"i").unwrap();
    let tag = fs::read(root.join("CACHEDIR.TAG")).unwrap();
    assert!(tag.starts_with(b"Signature: 8a477f597d28d172789f06886806bc55"));
    let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&root.join(ID)), 0o700);
    assert_eq!(mode(&root.join(ID).join("index")), 0o700);
    assert_eq!(mode(&root.join(ID).join("index/aa")), 0o600);
    assert_eq!(files(&root.join("locations")).len(), 1);
}

#[test]
fn an_unusable_cache_directory_costs_requests_not_errors() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("file");
    fs::write(&root, b"not a directory").unwrap();
    let mem = MemoryStore::new();
    mem.put("index/aa", b"i").unwrap();
    let (m, c) = stack(&mem, &root, true);
    assert_eq!(c.get("index/aa").unwrap(), b"i");
    assert_eq!(c.get("index/aa").unwrap(), b"i");
    assert_eq!(m.counts().get, 2);
}
