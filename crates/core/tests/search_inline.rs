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

/// Every split carries the compact header of each content it indexes (its header file):
/// the IMAP view lists a folder from it without reading a message. A merge of splits
/// keeps them, `check` verifies them.
#[test]
fn the_splits_hold_each_contents_compact_header_through_a_merge() {
    use mailvault_core::mail::header::compact;
    use mailvault_core::search::exec::Searcher;
    let t = tempfile::tempdir().unwrap();
    let md = t.path().join("Maildir");
    let mut raws = Vec::new();
    for i in 0..20 {
        let raw = format!(
            "Received: from x\r\n\tby y\r\nSubject: message {i}\r\n  folded\r\nFrom: a{i}@x\r\n\
             X-Spam: {i}\r\n\r\nbody {i}\r\nSubject: not a field\r\n"
        );
        put_msg(
            &md,
            "",
            "cur",
            &format!("{i}.M1P1.h:2,S"),
            raw.as_bytes(),
            1_700_000_000,
        );
        raws.push(raw.into_bytes());
    }
    let mut repo = init_repo(&t.path().join("repo"));
    let cache = t.path().join("cache");
    let opts = IndexOptions {
        split_docs: 2,
        ..IndexOptions::default()
    };
    let mut o = backup_opts(&md, vec!["bob".into()]);
    o.run.index = Some(IndexAsRead {
        cache_root: Some(cache.clone()),
        opts: opts.clone(),
    });
    backup(&mut repo, &o, &NoProgress).unwrap();
    let search = cache.join(&repo.config().id).join("search");
    let hash = |raw: &[u8]| repo.key().blob_id(raw);
    let expect = |repo: &mailvault_core::Repository| {
        let s = Searcher::open(repo, &search).unwrap();
        for raw in &raws {
            let got = s.compact_header(&hash(raw)).expect("a compact header");
            assert_eq!(got, &compact(raw)[..]);
            assert!(got.starts_with(b"Subject: message") && got.ends_with(b"\r\n\r\n"));
        }
        assert_eq!(s.compact_header(&hash(b"Subject: other\r\n\r\n")), None);
    };
    // Cut every 2 documents, or later when workers added at once: 9 or 10 splits.
    let before = live_splits(&repo, &search).unwrap().len();
    assert!(before > 8, "splits to merge: {before}");
    expect(&repo);
    let rep = mailvault_core::search::build::index(&repo, &search, &opts, &NoProgress).unwrap();
    assert_eq!(rep.merged as usize, before, "{rep:?}");
    assert_eq!(live_splits(&repo, &search).unwrap().len(), 1);
    expect(&repo);
    let checked = mailvault_core::search::verify::check_splits(&repo).unwrap();
    assert!(checked.damaged.is_empty(), "{checked:?}");
}
