#![allow(clippy::unwrap_used)]
//! Backup then restore gives back the same files, bytes, names, mtimes and modes.

mod common;

use common::*;
use mailvault_core::backup::backup;
use mailvault_core::report::NoProgress;

#[test]
fn store_round_trip_is_byte_exact() {
    let t = tempfile::tempdir().unwrap();
    let src = t.path().join("vmail");
    small_store(&src);
    let mut repo = init_repo(&t.path().join("repo"));
    let rep = backup(&mut repo, &backup_opts(&src, vec![]), &NoProgress).unwrap();
    assert!(rep.failures.is_empty(), "{:?}", rep.failures);
    assert_eq!(rep.accounts, 3);
    assert_eq!(rep.items_new, rep.items_total);
    assert_eq!(rep.items_total, 3 * 23 + 5);
    // Per-recipient copies: the rest of list-N is stored once for three accounts.
    assert!(
        rep.dedup_ratio.unwrap() > 1.5,
        "dedup ratio {:?}",
        rep.dedup_ratio
    );

    let repo = open_repo(&t.path().join("repo"));
    let out = t.path().join("restored");
    let r = restore_latest(&repo, &out);
    assert!(r.failures.is_empty(), "{:?}", r.failures);
    assert_eq!(r.items_restored, rep.items_total);
    assert_same_tree(&src, &out);

    // Restoring again into the same place: everything is already there.
    let again = restore_latest(&repo, &out);
    assert_eq!(again.items_unchanged, rep.items_total);
    assert_eq!(again.items_restored, 0);
    assert!(again.failures.is_empty());
}

/// Regression: two backups within one second — `latest` must be the second (snapshots
/// kept only whole seconds, and ties fell to the random id).
#[test]
fn latest_is_the_newest_even_within_one_second() {
    let t = tempfile::tempdir().unwrap();
    let src = t.path().join("vmail");
    small_store(&src);
    let mut repo = init_repo(&t.path().join("repo"));
    let mut last = String::new();
    for i in 0..6 {
        put_msg(
            &src.join("example.org/bob/Maildir"),
            "",
            "new",
            &format!("9{i}.M1P1.x"),
            b"Subject: x\n\nx\n",
            1_700_000_000,
        );
        last = backup(&mut repo, &backup_opts(&src, vec![]), &NoProgress)
            .unwrap()
            .snapshot;
        assert_eq!(
            repo.find_snapshot("latest").unwrap().id.to_hex(),
            last,
            "after backup {i}"
        );
    }
    assert!(!last.is_empty());
}
