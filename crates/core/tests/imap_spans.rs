//! Issue 12: an IMAP restore reads its messages' blobs by pack span, not blob by blob
//! (against a real Dovecot; fails without it unless MAILVAULT_SKIP_DOVECOT=1).

mod common;

use common::{fast_init, imap_restore_opts, maildir_backup, PASSWORD};
use mailvault_core::imap::restore::restore as imap_restore;
use mailvault_core::pack::BlobKind;
use mailvault_core::report::NoProgress;
use mailvault_core::store::{LocalStore, ObjectInfo, Store};
use mailvault_core::tree::{AccountTree, RootTree};
use mailvault_core::{Repository, Result};
use mailvault_imap::testing::DovecotServer;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

/// Passes everything through and counts the reads of data packs.
struct DataReads {
    inner: LocalStore,
    reads: AtomicU64,
}

impl Store for DataReads {
    fn put(&self, path: &str, data: &[u8]) -> Result<()> {
        self.inner.put(path, data)
    }
    fn replace(&self, path: &str, data: &[u8]) -> Result<()> {
        self.inner.replace(path, data)
    }
    fn get(&self, path: &str) -> Result<Vec<u8>> {
        self.inner.get(path)
    }
    fn get_range(&self, path: &str, offset: u64, len: u64) -> Result<Vec<u8>> {
        self.inner.get_range(path, offset, len)
    }
    fn get_pack_range(&self, path: &str, offset: u64, len: u64, kind: BlobKind) -> Result<Vec<u8>> {
        if kind == BlobKind::Data {
            self.reads.fetch_add(1, Relaxed);
        }
        self.inner.get_pack_range(path, offset, len, kind)
    }
    fn list(&self, prefix: &str) -> Result<Vec<ObjectInfo>> {
        self.inner.list(prefix)
    }
    fn delete(&self, path: &str) -> Result<()> {
        self.inner.delete(path)
    }
    fn stat(&self, path: &str) -> Result<u64> {
        self.inner.stat(path)
    }
    fn location(&self) -> String {
        self.inner.location()
    }
    fn flush(&self) -> Result<()> {
        self.inner.flush()
    }
}

/// 400 messages restored into Dovecot in batches of 40, without the blob cache (so every
/// message's blobs are read): a few reads per data pack and batch (plus one per
/// folder file), where reading blob by blob took one per blob (about two per message).
#[test]
fn an_imap_restore_reads_spans_not_blobs() {
    let Some(server) = DovecotServer::start_or_skip().expect("dovecot") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    let spec = mailvault_corpus::CorpusSpec {
        messages: 400,
        ..mailvault_corpus::CorpusSpec::preset("tiny").unwrap()
    };
    mailvault_corpus::generate(&spec, &src).unwrap();
    let store = Arc::new(DataReads {
        inner: LocalStore::new(dir.path().join("repo")),
        reads: AtomicU64::new(0),
    });
    let mut repo = Repository::init(store.clone(), PASSWORD, &fast_init()).unwrap();
    maildir_backup(&mut repo, &src, vec![]);
    let repo = Repository::open(store.clone(), PASSWORD).unwrap();

    // What the restore needs: batches (per folder, 40 messages each), data packs, the
    // messages' blobs and the folders' files (each read alone).
    let snap = repo.find_snapshot("latest").unwrap();
    let root: RootTree = repo.read_tree(&snap.root).unwrap();
    let (mut batches, mut files, mut blobs) = (0u64, 0u64, 0u64);
    for acc in &root.accounts {
        let tree: AccountTree = repo.read_tree(&acc.tree).unwrap();
        for f in &tree.folders {
            batches += f.messages.div_ceil(40);
            files += f.files.iter().map(|f| f.content.len() as u64).sum::<u64>();
            for c in &f.chunks {
                let entries = repo.read_chunk(c).unwrap();
                blobs += entries.iter().map(|e| e.content.len() as u64).sum::<u64>();
            }
        }
    }
    let packs = repo.index().packs().len() as u64;
    store.reads.store(0, Relaxed);

    let mut o = imap_restore_opts(&server, &dir.path().join("journal"));
    o.blob_cache_bytes = 0;
    let r = imap_restore(&repo, &o, &NoProgress).unwrap();
    assert!(r.failures.is_empty(), "{:?}", r.failures);
    assert_eq!(r.items_appended, 400);
    let reads = store.reads.load(Relaxed);
    // Reading blob by blob made one read per blob; by span, a batch reads a few spans per
    // pack (blobs more than 256 KiB apart are read apart, so the number depends on where
    // the backup's threads put each message): at least four times fewer reads than blobs.
    assert!(
        reads * 4 <= blobs + files,
        "{reads} reads for {blobs} blobs: {batches} batches, {packs} packs, {files} file blobs"
    );
    assert!(
        reads * 4 < blobs,
        "{reads} reads for 400 messages of {blobs} blobs"
    );
}
