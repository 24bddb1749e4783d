//! Issue 12: an IMAP restore reads its messages' blobs by pack span, not blob by blob
//! (against a real Dovecot; fails without it unless MAILVAULT_SKIP_DOVECOT=1).

mod common;

use common::{fast_init, imap_restore_opts, maildir_backup, PASSWORD};
use mailvault_core::ops::restore::imap as imap_restore;
use mailvault_core::repo::tree::{AccountTree, RootTree};
use mailvault_core::report::NoProgress;
use mailvault_core::store::LocalStore;
use mailvault_core::testing::data_reads::DataReads;
use mailvault_core::Repository;
use mailvault_imap::testing::DovecotServer;
use std::sync::Arc;

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
    let store = DataReads::new(Arc::new(LocalStore::new(dir.path().join("repo"))));
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
            for c in &repo.folder_chunks(f).unwrap() {
                let entries = repo.read_chunk(c).unwrap();
                blobs += entries.iter().map(|e| e.content.len() as u64).sum::<u64>();
            }
        }
    }
    let packs = repo.index().packs().len() as u64;
    store.reads().clear();

    let mut o = imap_restore_opts(&server, &dir.path().join("journal"));
    o.select.cache_bytes = 0;
    let r = imap_restore(&repo, &o, &NoProgress).unwrap();
    assert!(r.failures.is_empty(), "{:?}", r.failures);
    assert_eq!(r.items_appended, 400);
    let reads = store.reads().len() as u64;
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
