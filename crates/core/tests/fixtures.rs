//! Repositories written by earlier versions must always open and restore.
//!
//! `fixtures/repo-v1` was made by format version 1 from [`common::small_store`] (password
//! [`common::PASSWORD`]). To write a fixture for a new format version, run
//! `MAILVAULT_WRITE_FIXTURE=repo-vN cargo test -p mailvault-core --test fixtures` and
//! commit the directory; never change an existing one.
#![allow(clippy::unwrap_used)]

mod common;

use common::backup;
use common::*;
use mailvault_core::report::NoProgress;
use mailvault_core::source::maildir::BackupOptions;
use mailvault_core::source::RunOptions;
use std::path::Path;

fn fixtures() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

#[test]
fn version_1_repository_opens_checks_and_restores() {
    fixture_opens_checks_and_restores("repo-v1", 1);
}

/// `fixtures/repo-v2`: format 2 (associated data, keyed chunking, sealed pack trailers),
/// made on 2026-11-23 the same way.
#[test]
fn version_2_repository_opens_checks_and_restores() {
    fixture_opens_checks_and_restores("repo-v2", 2);
}

fn fixture_opens_checks_and_restores(fixture: &str, version: u32) {
    let t = tempfile::tempdir().unwrap();
    let src = t.path().join("vmail");
    small_store(&src);
    if std::env::var("MAILVAULT_WRITE_FIXTURE").is_ok_and(|n| n == fixture) {
        let dest = fixtures().join(fixture);
        assert!(
            !dest.exists(),
            "{} exists: fixtures are never rewritten",
            dest.display()
        );
        let mut repo = init_repo(&dest);
        let opts = BackupOptions {
            source: src.clone(),
            accounts: vec![],
            jobs: 2,
            stat_unchanged: false,
            run: RunOptions {
                tags: vec!["fixture".into()],
                ..RunOptions::new("fixture")
            },
        };
        backup(&mut repo, &opts, &NoProgress).unwrap();
    }
    let repo = open_repo(&fixtures().join(fixture));
    assert_eq!(repo.version().number(), version);
    let c = check_all(&repo);
    assert!(c.ok(), "{:?}", c.errors);
    assert_eq!(c.snapshots, 1);
    let out = t.path().join("out");
    let r = restore_latest(&repo, &out);
    assert!(r.failures.is_empty(), "{:?}", r.failures);
    // Same names and bytes as the store the fixture was made from, and the same mtimes for
    // messages. (Folder files get the time the store was made, and modes follow the umask
    // of the machine that made it.)
    let a = tree_snapshot(&src);
    let b = tree_snapshot(&out);
    assert_eq!(a.len(), b.len());
    for (k, (bytes, mtime, _)) in &a {
        let (bb, bm, _) = &b[k];
        let name = String::from_utf8_lossy(k);
        assert!(bytes == bb, "{name}: bytes differ");
        if name.contains("/cur/") || name.contains("/new/") {
            assert_eq!(mtime, bm, "{name}: mtime differs");
        }
    }
}

/// A repository with a trained zstd dictionary (codec 3), made from a generated store;
/// `repo-v1-dict.manifest` lists what it must restore.
#[test]
fn version_1_repository_with_dictionary_restores() {
    let t = tempfile::tempdir().unwrap();
    let name = "repo-v1-dict";
    if std::env::var("MAILVAULT_WRITE_FIXTURE").is_ok_and(|v| v == name) {
        let src = t.path().join("gen");
        let spec = mailvault_corpus::CorpusSpec {
            messages: 400,
            attachment_ratio: 0.0,
            ..mailvault_corpus::CorpusSpec::preset("tiny").unwrap()
        };
        mailvault_corpus::generate(&spec, &src).unwrap();
        let dest = fixtures().join(name);
        assert!(
            !dest.exists(),
            "{} exists: fixtures are never rewritten",
            dest.display()
        );
        let mut repo = init_repo(&dest);
        let opts = BackupOptions {
            source: src.clone(),
            accounts: vec![],
            jobs: 2,
            stat_unchanged: false,
            run: RunOptions::new("fixture"),
        };
        backup(&mut repo, &opts, &NoProgress).unwrap();
        assert!(
            repo.has_dictionary(),
            "the fixture must exercise the dictionary codec"
        );
        std::fs::write(fixtures().join(format!("{name}.manifest")), manifest(&src)).unwrap();
    }
    let repo = open_repo(&fixtures().join(name));
    assert!(repo.has_dictionary());
    let c = check_all(&repo);
    assert!(c.ok(), "{:?}", c.errors);
    let out = t.path().join("out");
    let r = restore_latest(&repo, &out);
    assert!(r.failures.is_empty(), "{:?}", r.failures);
    let want = std::fs::read_to_string(fixtures().join(format!("{name}.manifest"))).unwrap();
    assert_eq!(manifest(&out), want);
}
