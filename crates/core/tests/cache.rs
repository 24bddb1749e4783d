#![allow(clippy::unwrap_used)]
//! The local cache (`store::Cached`) over a counted store: what a repository open and an
//! unchanged incremental backup still ask the storage (issue 12: at most 10 requests; 12 since backups take a lock, issue 13).

mod common;

use common::backup;
use common::*;
use mailvault_core::report::NoProgress;
use mailvault_core::store::{
    Backend, ByteRange, Cached, Handle, Hint, Listing, MemoryStore, Metered, ObjectInfo, WriteMode,
};
use mailvault_core::{Repository, Result};
use std::path::Path;
use std::sync::{Arc, Mutex};

/// Records every request with its path, under the counter.
#[derive(Clone, Default)]
struct Recorder {
    mem: MemoryStore,
    log: Arc<Mutex<Vec<String>>>,
}

impl Recorder {
    fn note(&self, verb: &str, path: &str) {
        self.log.lock().unwrap().push(format!("{verb} {path}"));
    }
    fn take(&self) -> Vec<String> {
        std::mem::take(&mut *self.log.lock().unwrap())
    }
}

impl Backend for Recorder {
    fn write(&self, h: Handle<'_>, data: &[u8], mode: WriteMode) -> Result<()> {
        self.note("PUT", h.path());
        self.mem.write(h, data, mode)
    }
    fn read(&self, h: Handle<'_>, range: Option<ByteRange>) -> Result<Vec<u8>> {
        self.note("GET", h.path());
        self.mem.read(h, range)
    }
    fn listing(&self, prefix: &str, from: Listing) -> Result<Vec<ObjectInfo>> {
        self.note("LIST", prefix);
        self.mem.listing(prefix, from)
    }
    fn remove(&self, h: Handle<'_>) -> Result<()> {
        self.note("DELETE", h.path());
        self.mem.remove(h)
    }
    fn size(&self, h: Handle<'_>) -> Result<u64> {
        self.note("HEAD", h.path());
        self.mem.size(h)
    }
    fn location(&self) -> String {
        self.mem.location()
    }
    fn flush(&self) -> Result<()> {
        self.mem.flush()
    }
    fn local_dir(&self) -> Option<std::path::PathBuf> {
        self.mem.local_dir()
    }
    fn hint(&self, hint: Hint<'_>) {
        self.mem.hint(hint)
    }
}

/// One process's store: the recorder, counted, cached under `cache`.
fn process(rec: &Recorder, cache: &Path) -> (Arc<Metered>, Arc<Cached>) {
    let metered = Arc::new(Metered::new(Arc::new(rec.clone())));
    let cached = Arc::new(Cached::new(metered.clone(), cache.to_path_buf()));
    (metered, cached)
}

fn open(store: Arc<Cached>) -> Repository {
    Repository::open(store, PASSWORD).unwrap()
}

/// A message body of about 1 KiB, different for each `i`.
fn body(i: usize) -> String {
    (0..200)
        .map(|j| format!("w{} ", (i * 7 + j) % 500))
        .collect()
}

/// A repository with one backup of a small store, made through a cache at `cache`.
fn repository_with_a_backup(t: &Path, rec: &Recorder, cache: &Path) {
    small_store(&t.join("vmail"));
    let (_, store) = process(rec, cache);
    Repository::init(store.clone(), PASSWORD, &fast_init()).unwrap();
    let mut repo = open(store);
    // A dictionary file too (the small store has too few messages to train one).
    let samples: Vec<Vec<u8>> = (0..400)
        .map(|i| message(&format!("u{i}@example.org"), &format!("s{i}"), &body(i)))
        .collect();
    repo.add_dictionary(&mailvault_core::repo::compress::train(&samples).unwrap())
        .unwrap();
    let r = backup(
        &mut repo,
        &backup_opts(&t.join("vmail"), vec![]),
        &NoProgress,
    )
    .unwrap();
    assert!(r.failures.is_empty(), "{:?}", r.failures);
    rec.take();
}

#[test]
fn a_second_open_reads_no_key_index_or_dictionary_file() {
    let t = tempfile::tempdir().unwrap();
    let cache = t.path().join("cache");
    let rec = Recorder::default();
    repository_with_a_backup(t.path(), &rec, &cache);

    // A host with an empty cache reads them all (so the files are there to read).
    let (_, cold) = process(&rec, &t.path().join("cold"));
    open(cold.clone());
    let log = rec.take();
    for dir in ["keys/", "index/", "dicts/"] {
        assert!(
            log.iter().any(|l| l.starts_with(&format!("GET {dir}"))),
            "{dir}: {log:?}"
        );
    }
    assert_eq!(cold.stats().hits, 0);

    // Opened again with that cache: the config only.
    let (metered, warm) = process(&rec, &t.path().join("cold"));
    open(warm.clone());
    let log = rec.take();
    assert_eq!(
        log.iter()
            .filter(|l| l.starts_with("GET "))
            .collect::<Vec<_>>(),
        ["GET config"]
    );
    assert!(!log.contains(&"LIST keys/".to_string()), "{log:?}");
    assert_eq!(metered.counts().get, 1);
    assert!(warm.stats().hits >= 3, "{:?}", warm.stats());
    assert_eq!(warm.stats().misses, 0);
}

/// Ten: GET config, HEAD migrate/state, LIST dicts/, LIST index/ (open); PUT, LIST and
/// DELETE of its lock, LIST index/ again once locked (a prune may have replaced index
/// files meanwhile); LIST snapshots/ (the parent), PUT of the snapshot. (A migration
/// holds an exclusive lock, so the lock's LIST finds it; `writers/`, where only older
/// mailvaults write, is not listed.)
#[test]
fn an_unchanged_incremental_backup_makes_at_most_ten_requests() {
    let t = tempfile::tempdir().unwrap();
    let cache = t.path().join("cache");
    let rec = Recorder::default();
    repository_with_a_backup(t.path(), &rec, &cache);

    // The next run, a new process: open and back up the same, unchanged store.
    let (metered, store) = process(&rec, &cache);
    let mut repo = open(store.clone());
    let r = backup(
        &mut repo,
        &backup_opts(&t.path().join("vmail"), vec![]),
        &NoProgress,
    )
    .unwrap();
    assert!(r.failures.is_empty(), "{:?}", r.failures);
    assert_eq!(r.items_new, 0);
    assert!(r.parent.is_some());
    let log = rec.take();
    let counts = metered.counts();
    eprintln!("requests: {counts:?}\n{}", log.join("\n"));
    eprintln!("cache: {:?}", store.stats());
    assert!(counts.total() <= 10, "{} requests: {log:?}", counts.total());
    assert!(!log.iter().any(|l| l.starts_with("LIST data")), "{log:?}");
    assert!(!log.iter().any(|l| l.starts_with("GET data/")), "{log:?}");
    assert!(!log.iter().any(|l| l.starts_with("GET index/")), "{log:?}");
    assert!(
        !log.iter().any(|l| l.starts_with("GET snapshots/")),
        "{log:?}"
    );
    assert!(store.stats().hits > 0);
    assert_eq!(store.stats().misses, 0);
}

#[test]
fn a_damaged_cache_gives_the_right_backup_and_restore() {
    let t = tempfile::tempdir().unwrap();
    let cache = t.path().join("cache");
    let rec = Recorder::default();
    repository_with_a_backup(t.path(), &rec, &cache);
    // Flip a byte in every cached file (tree packs, index, snapshot, keys, dicts).
    let mut flipped = 0;
    let mut stack = vec![cache.clone()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                if !p.ends_with("locations") {
                    stack.push(p);
                }
            } else if !p.ends_with("CACHEDIR.TAG") {
                let mut b = std::fs::read(&p).unwrap();
                b[0] ^= 1;
                std::fs::write(&p, b).unwrap();
                flipped += 1;
            }
        }
    }
    assert!(flipped >= 4, "{flipped}");
    let (_, store) = process(&rec, &cache);
    let repo = open(store.clone());
    let out = t.path().join("restored");
    maildir_restore(&repo, "latest", &out);
    assert_same_tree(&t.path().join("vmail"), &out);
    assert!(store.stats().refetches >= 4, "{:?}", store.stats());
}
