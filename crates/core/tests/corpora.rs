//! Round trips of real and generated mail: the SpamAssassin corpus and generated
//! multi-account stores, byte-exact; incremental runs reuse unchanged folders' metadata.
#![allow(clippy::unwrap_used)]

mod common;

use common::backup;
use common::*;
use mailvault_core::report::NoProgress;
use mailvault_corpus::{generate, import_eml_dir, mutate, CorpusSpec, ImportSpec, MutationSpec};
use std::path::{Path, PathBuf};

/// The SpamAssassin corpus the test round-trips: the subset shipped in `testdata/` (613
/// real messages, every one with a carriage return among them), or the whole corpus where
/// `MAILVAULT_SPAMASSASSIN` names it.
fn spamassassin() -> PathBuf {
    let p = match std::env::var_os("MAILVAULT_SPAMASSASSIN") {
        Some(dir) => PathBuf::from(dir),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/spamassassin"),
    };
    assert!(
        p.is_dir(),
        "the SpamAssassin corpus is expected at {}",
        p.display()
    );
    p
}

/// The corpus's parts (its directories) and how many `.eml` files each holds, counted
/// here, apart from the importer under test.
fn corpus_parts(dir: &Path) -> Vec<(PathBuf, u64)> {
    let mut parts: Vec<(PathBuf, u64)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .map(|p| {
            let n = std::fs::read_dir(&p)
                .unwrap()
                .filter(|e| e.as_ref().unwrap().path().extension() == Some("eml".as_ref()))
                .count() as u64;
            (p, n)
        })
        .collect();
    parts.sort();
    parts
}

#[test]
fn spamassassin_corpus_round_trip() {
    let t = tempfile::tempdir().unwrap();
    let md = t.path().join("Maildir");
    let parts = corpus_parts(&spamassassin());
    assert_eq!(parts.len(), 5, "{parts:?}");
    let expected: u64 = parts.iter().map(|(_, n)| n).sum();
    assert!(expected >= 600, "{expected} messages");
    let mut total = 0;
    for (dir, _) in &parts {
        let s = import_eml_dir(dir, &md, &ImportSpec::default()).unwrap();
        total += s.messages;
    }
    assert_eq!(total as u64, expected);
    let mut repo = init_repo(&t.path().join("repo"));
    let rep = backup(
        &mut repo,
        &backup_opts(&md, vec!["corpus@example.org".into()]),
        &NoProgress,
    )
    .unwrap();
    assert!(rep.failures.is_empty(), "{:?}", rep.failures);
    assert_eq!(rep.items_total, expected);
    let out = t.path().join("out");
    let r = restore_latest(&repo, &out);
    assert_eq!(r.items_restored, expected);
    assert_same_tree(&md, &out);
    let c = check_all(&repo);
    assert!(c.ok(), "{:?}", c.errors);
    assert_eq!(c.messages, expected);
}

#[test]
fn generated_store_round_trip_and_incremental() {
    let t = tempfile::tempdir().unwrap();
    let src = t.path().join("vmail");
    let spec = CorpusSpec {
        messages: 1500,
        ..CorpusSpec::preset("tiny").unwrap()
    };
    let g = generate(&spec, &src).unwrap();
    let mut repo = init_repo(&t.path().join("repo"));
    let r1 = backup(&mut repo, &backup_opts(&src, vec![]), &NoProgress).unwrap();
    assert!(r1.failures.is_empty(), "{:?}", r1.failures);
    assert_eq!(r1.items_total as usize, g.messages);
    assert_eq!(r1.accounts as usize, g.accounts);
    // Half the store is per-recipient copies: they must cost (almost) nothing.
    assert!(r1.dedup_ratio.unwrap() > 1.6, "dedup {:?}", r1.dedup_ratio);
    let out1 = t.path().join("out1");
    restore_latest(&repo, &out1);
    assert_same_tree(&src, &out1);

    let tree_bytes = |repo: &mailvault_core::Repository| -> u64 {
        repo.index()
            .iter()
            .filter(|(_, l)| l.kind == mailvault_core::repo::format::BlobKind::Tree)
            .map(|(_, l)| u64::from(l.stored_len))
            .sum()
    };
    let trees_before = tree_bytes(&repo);
    let m = mutate(&MutationSpec::default(), &src).unwrap();
    let r2 = backup(&mut repo, &backup_opts(&src, vec![]), &NoProgress).unwrap();
    assert!(r2.failures.is_empty(), "{:?}", r2.failures);
    assert_eq!(r2.items_new as usize, m.new_messages);
    assert_eq!(
        r2.items_unchanged as usize,
        m.messages_after - m.new_messages
    );
    // Flag changes touch only small name blobs, new and deleted messages one chunk each:
    // the incremental's metadata is a fraction of the full backup's. (This store's folders
    // are small, ~30 messages, so the mutation touches most chunks' names; with chunks of
    // whole folders, as before, it rewrote all of it.)
    let trees_after = tree_bytes(&repo);
    let added = trees_after - trees_before;
    assert!(
        added * 3 < trees_before,
        "incremental metadata {added} bytes vs {trees_before} for the full backup"
    );
    let out2 = t.path().join("out2");
    restore_latest(&repo, &out2);
    assert_same_tree(&src, &out2);

    // A third backup of an unchanged store adds no tree blob at all.
    let r3 = backup(&mut repo, &backup_opts(&src, vec![]), &NoProgress).unwrap();
    assert_eq!(r3.items_new, 0);
    assert_eq!(tree_bytes(&repo), trees_after);
    assert_eq!(r3.packs_written, 0);
}

#[test]
fn a_fifty_megabyte_message_round_trips() {
    let t = tempfile::tempdir().unwrap();
    let md = t.path().join("Maildir");
    let mut body = b"Subject: huge\n\n".to_vec();
    let mut x = 1u64;
    while body.len() < 50 << 20 {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        if x >> 63 == 0 {
            body.extend_from_slice(b"base64line+/AZaz09\n");
        } else {
            body.extend_from_slice(&x.to_le_bytes());
        }
    }
    put_msg(&md, "", "cur", "1.M1P1.h:2,S", &body, 1_700_000_000);
    let mut repo = init_repo(&t.path().join("repo"));
    let r = backup(
        &mut repo,
        &backup_opts(&md, vec!["big@x".into()]),
        &NoProgress,
    )
    .unwrap();
    assert!(r.failures.is_empty());
    let out = t.path().join("out");
    restore_latest(&repo, &out);
    assert_same_tree(&md, &out);
}
