//! Issue 12, the store wrappers together: a whole backup, incremental backup, restore and
//! `check --read-data` over a store that fails one request in five transiently (half of
//! them after the request was carried out: a put stored, its answer lost), through the
//! wrappers object storage gets: the local cache, background uploads above retries, the
//! request counter and the limits. Nothing is lost, every byte comes back, and the retries
//! are counted.
#![allow(clippy::unwrap_used)]

mod common;

use common::backup;
use common::*;
use mailvault_core::error::Result;
use mailvault_core::report::NoProgress;
use mailvault_core::store::{
    Backend, ByteRange, Cached, FaultyStore, Handle, Hint, Kind, Limit, Listing, MemoryStore,
    Metered, ObjectInfo, PackKind, Retry, RetryPolicy, Store, Uploads, WriteMode,
};
use mailvault_core::testing::data_reads::DataReads;
use mailvault_core::{InitOptions, Repository};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

struct Wrapped {
    store: Arc<dyn Backend>,
    faulty: Arc<FaultyStore>,
    retry: Arc<Retry>,
    metered: Arc<Metered>,
}

/// Cached(Uploads(Retry(Metered(Limit(faulty MemoryStore))))), with millisecond backoffs.
fn wrapped(mem: &MemoryStore, cache: &Path) -> Wrapped {
    let faulty = Arc::new(FaultyStore::new(Arc::new(mem.clone())).fail_every(5));
    let limit = Arc::new(Limit::new(faulty.clone(), 3));
    let metered = Arc::new(Metered::new(limit));
    // Enough attempts that no request fails every one of them, however concurrent
    // requests interleave.
    let policy = RetryPolicy {
        max_attempts: 30,
        base: Duration::from_millis(1),
        cap: Duration::from_millis(20),
        ..RetryPolicy::default()
    };
    let retry = Arc::new(Retry::new(metered.clone(), policy));
    let uploads = Arc::new(Uploads::new(retry.clone(), 3, 2).unwrap());
    let store = Arc::new(Cached::new(uploads, cache.to_path_buf()));
    Wrapped {
        store,
        faulty,
        retry,
        metered,
    }
}

#[test]
fn backup_restore_and_check_through_the_wrappers_over_a_flaky_store() {
    let t = tempfile::tempdir().unwrap();
    let src = t.path().join("vmail");
    small_store(&src);
    // Messages that do not compress, so that the backup writes many packs.
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for i in 0..20 {
        let body: String = (0..3000)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                char::from(b'a' + (x % 26) as u8)
            })
            .collect();
        put_msg(
            &src.join("example.org/carol/Maildir"),
            ".Archive",
            "cur",
            &format!("17000000{i:02}.M1P1.noise:2,S"),
            &message("carol@example.org", &format!("noise {i}"), &body),
            1_700_000_000 + i,
        );
    }
    let mem = MemoryStore::new();
    let cache = t.path().join("cache");

    // Full backup, with small packs so that many go through the upload queue.
    let w = wrapped(&mem, &cache);
    let opts = InitOptions {
        pack_size: 4096,
        ..fast_init()
    };
    let mut repo = Repository::init(w.store.clone(), PASSWORD, &opts).unwrap();
    let rep = backup(&mut repo, &backup_opts(&src, vec![]), &NoProgress).unwrap();
    assert!(rep.failures.is_empty(), "{:?}", rep.failures);
    assert!(rep.packs_written > 10, "{} packs", rep.packs_written);
    drop(repo);
    let full = w.retry.stats();
    assert!(full.total > 0 && full.put > 0, "{full:?}");
    assert_eq!(full.total, w.faulty.failures());
    // Every request sent is counted, retries included.
    assert_eq!(w.metered.counts().total(), w.faulty.requests());

    // A new message, and an incremental backup over a fresh stack.
    put_msg(
        &src.join("example.org/bob/Maildir"),
        "",
        "new",
        "1800000000.M1P1.new",
        &message("bob@example.org", "late", "one more"),
        1_800_000_000,
    );
    let w = wrapped(&mem, &cache);
    let mut repo = Repository::open(w.store.clone(), PASSWORD).unwrap();
    let rep = backup(&mut repo, &backup_opts(&src, vec![]), &NoProgress).unwrap();
    assert!(rep.failures.is_empty(), "{:?}", rep.failures);
    assert_eq!(rep.items_new, 1);
    drop(repo);
    assert!(w.retry.stats().total > 0);

    // Restore and check, again over a fresh stack.
    let w = wrapped(&mem, &cache);
    let repo = Repository::open(w.store.clone(), PASSWORD).unwrap();
    let out = t.path().join("restored");
    let r = restore_latest(&repo, &out);
    assert!(r.failures.is_empty(), "{:?}", r.failures);
    assert_same_tree(&src, &out);
    let c = check_all(&repo);
    assert!(c.ok(), "{:?}", c.errors);
    assert!(c.warnings.is_empty(), "{:?}", c.warnings);
    assert_eq!(c.snapshots, 2);
    let s = w.retry.stats();
    assert!(s.get > 0, "{s:?}");
    assert_eq!(s.total, w.faulty.failures());
}

/// The conformance suite runs on every wrapper: each one alone over a store (the fault
/// injector without faults) and all of them stacked as object storage gets them.
#[test]
fn every_wrapper_and_the_whole_stack_pass_the_conformance_suite() {
    use mailvault_core::store::conformance;
    conformance::run(&FaultyStore::new(Arc::new(MemoryStore::new())));
    conformance::run(DataReads::new(Arc::new(MemoryStore::new())).as_ref());
    let t = tempfile::tempdir().unwrap();
    let faulty = Arc::new(FaultyStore::new(Arc::new(MemoryStore::new())));
    let limit = Arc::new(Limit::new(faulty, 3));
    let metered = Arc::new(Metered::new(limit));
    let retry = Arc::new(Retry::new(metered, RetryPolicy::default()));
    let uploads = Arc::new(Uploads::new(retry, 3, 2).unwrap());
    conformance::run(&Cached::new(uploads, t.path().to_path_buf()));
}

/// A store that notes which hints reach it.
#[derive(Default)]
struct Hints {
    mem: MemoryStore,
    seen: std::sync::Mutex<Vec<&'static str>>,
}

impl Hints {
    fn note(&self, what: &'static str) {
        self.seen.lock().unwrap().push(what);
    }
}

impl Backend for Hints {
    fn write(&self, h: Handle<'_>, data: &[u8], mode: WriteMode) -> Result<()> {
        if let Kind::Pack(Some(_)) = h.kind() {
            self.note("put_pack");
        }
        self.mem.write(h, data, mode)
    }
    fn read(&self, h: Handle<'_>, range: Option<ByteRange>) -> Result<Vec<u8>> {
        if let (Kind::Pack(Some(_)), Some(_)) = (h.kind(), range) {
            self.note("get_pack_range");
        }
        self.mem.read(h, range)
    }
    fn listing(&self, prefix: &str, from: Listing) -> Result<Vec<ObjectInfo>> {
        if from == Listing::Cached {
            self.note("list_cached");
        }
        self.mem.listing(prefix, from)
    }
    fn remove(&self, h: Handle<'_>) -> Result<()> {
        self.mem.remove(h)
    }
    fn size(&self, h: Handle<'_>) -> Result<u64> {
        self.mem.size(h)
    }
    fn location(&self) -> String {
        "hints".into()
    }
    fn flush(&self) -> Result<()> {
        self.note("flush");
        Ok(())
    }
    fn local_dir(&self) -> Option<std::path::PathBuf> {
        self.mem.local_dir()
    }
    fn hint(&self, hint: Hint<'_>) {
        self.note(match hint {
            Hint::Prefetch(..) => "prefetch",
            Hint::Bind(_) => "bind",
            Hint::RefreshListings => "refresh_listings",
        });
    }
}

/// Every wrapper passes every hint on to the store below it: none is dropped on the way
/// (a wrapper that kept a trait default would end the hint there).
#[test]
fn every_wrapper_forwards_every_hint() {
    type Wrap = fn(Arc<dyn Backend>) -> Arc<dyn Backend>;
    let wrappers: [(&str, Wrap); 6] = [
        ("metered", |s| Arc::new(Metered::new(s))),
        ("retry", |s| Arc::new(Retry::new(s, RetryPolicy::default()))),
        ("limit", |s| Arc::new(Limit::new(s, 2))),
        ("uploads", |s| Arc::new(Uploads::new(s, 2, 2).unwrap())),
        ("faulty", |s| Arc::new(FaultyStore::new(s))),
        ("data reads", |s| DataReads::new(s)),
    ];
    for (name, wrap) in wrappers {
        let inner = Arc::new(Hints::default());
        let store = wrap(inner.clone());
        store
            .put_pack("data/ab/abcd", b"0123456789", PackKind::Tree)
            .unwrap();
        store.flush().unwrap();
        store
            .get_pack_range("data/ab/abcd", 1, 2, PackKind::Tree)
            .unwrap();
        store.prefetch("data/ab/abcd", 1, 2);
        store.list_cached("keys/").unwrap();
        store.bind("0123");
        store.refresh_listings();
        let mut seen = inner.seen.lock().unwrap().clone();
        seen.sort();
        seen.dedup();
        assert_eq!(
            seen,
            [
                "bind",
                "flush",
                "get_pack_range",
                "list_cached",
                "prefetch",
                "put_pack",
                "refresh_listings"
            ],
            "{name}"
        );
    }
}
