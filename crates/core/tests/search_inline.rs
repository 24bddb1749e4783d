#![allow(clippy::unwrap_used)]
//! `backup --index` cutting splits as it reads: every `split_docs` documents a split is
//! committed (while the backup's workers go on into the next) and all are stored once the
//! snapshot is saved; each content once, each in exactly one split.

mod common;

use common::*;
use mailvault_core::report::NoProgress;
use mailvault_core::search::build::IndexOptions;
use mailvault_core::search::inline::IndexAsRead;
use mailvault_core::search::split::{indexed_contents, live_splits};

#[test]
fn a_backup_that_indexes_cuts_splits_and_stores_them_all() {
    let t = tempfile::tempdir().unwrap();
    let md = t.path().join("Maildir");
    const N: usize = 23;
    for i in 0..N {
        let body = format!("Subject: {i}\n\nword{i}\n");
        put_msg(
            &md,
            "",
            "cur",
            &format!("{i}.M1P1.h:2,S"),
            body.as_bytes(),
            1_700_000_000,
        );
    }
    // A copy: its content is indexed once.
    put_msg(
        &md,
        ".Kept",
        "cur",
        "copy.M1P1.h:2,S",
        b"Subject: 0\n\nword0\n",
        1_700_000_000,
    );
    let mut repo = init_repo(&t.path().join("repo"));
    let cache = t.path().join("cache");
    let mut o = backup_opts(&md, vec!["bob".into()]);
    o.run.index = Some(IndexAsRead {
        cache_root: Some(cache.clone()),
        opts: IndexOptions {
            split_docs: 5,
            ..IndexOptions::default()
        },
    });
    let rep = backup(&mut repo, &o, &NoProgress).unwrap();
    let ix = rep.index.unwrap();
    assert_eq!(ix.indexed, N as u64, "{ix:?}");
    assert_eq!(ix.as_read, N as u64);
    // Cut whenever 5 were gathered: 5 + 5 + 5 + 5 + 3, or fewer, larger splits when
    // workers added at once; every split but the last has at least 5.
    let search = cache.join(&repo.config().id).join("search");
    let splits = live_splits(&repo, &search).unwrap();
    assert_eq!(splits.len(), ix.splits.len());
    assert!((2..=5).contains(&splits.len()), "{ix:?}");
    let small = splits.iter().filter(|s| s.header.docs < 5).count();
    assert!(
        small <= 1,
        "{:?}",
        splits.iter().map(|s| s.header.docs).collect::<Vec<_>>()
    );
    let docs: u64 = splits.iter().map(|s| s.header.docs).sum();
    let distinct = indexed_contents(&splits).unwrap().len();
    assert_eq!((docs, distinct), (N as u64, N), "each content in one split");
}
