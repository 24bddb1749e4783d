//! `mailvault prune` and the repository locks, end to end: unused packs deleted and
//! partly used ones repacked, with every remaining snapshot restoring byte for byte and
//! `check --read-data` passing; a SIGKILL sweep over prune; a prune and a backup started
//! together, on a local directory and on MinIO; `unlock`.
#![allow(clippy::unwrap_used)]

mod common;

use common::{assert_same_files, copy_tree, Env};
use mailvault_core::store::Backend;
use mailvault_core::store::{parse_s3_url, LocalStore, Store};
use mailvault_core::testing::minio::Minio;
use mailvault_corpus::{generate, mutate, CorpusSpec, MutationSpec};
use serde_json::Value;
use std::fs;
use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;

fn maildir(p: &Path) -> String {
    format!("maildir:{}", p.display())
}

/// The test's repository as a store, reached directly (not through `mailvault`).
fn store(e: &Env) -> Box<dyn Backend> {
    match &e.location {
        None => Box::new(LocalStore::new(e.repo())),
        Some(l) => {
            let (_, bucket, prefix) = parse_s3_url(l).unwrap();
            Box::new(Minio::shared().store(&bucket, &prefix).unwrap())
        }
    }
}

/// What the repository holds, as prune counts it: packs, index files, snapshots,
/// dictionaries.
fn size(e: &Env) -> u64 {
    let s = store(e);
    ["data/", "index/", "snapshots/", "dicts/"]
        .iter()
        .map(|d| s.list(d).unwrap().iter().map(|o| o.size).sum::<u64>())
        .sum()
}

fn count(e: &Env, dir: &str) -> usize {
    store(e).list(dir).unwrap().len()
}

/// Three snapshots of a changing store: S1 of the `tiny` corpus, S2 after 15% of the
/// messages were deleted and 10% delivered, S3 after 15% more were deleted. S1 and S2
/// are then removed (their files deleted, as `forget` does), so that prune has packs
/// only they use (their tree packs), and packs that are partly used (S1's and S2's data
/// packs). Returns S3's id; the store as S3 saw it is in `want`.
fn history(e: &Env) -> String {
    history_of(e, &["init"])
}

/// [`history`] in a repository made by `init` (`mailvault` and its arguments).
fn history_of(e: &Env, init: &[&str]) -> String {
    let src = e.path("vmail");
    generate(
        &CorpusSpec {
            seed: 7,
            ..CorpusSpec::preset("tiny").unwrap()
        },
        &src,
    )
    .unwrap();
    e.ok(init);
    let s1 = e.json(0, &["backup", &maildir(&src)]);
    let churn = |seed, new_ratio| MutationSpec {
        seed,
        flag_rename_ratio: 0.05,
        new_ratio,
        delete_ratio: 0.15,
    };
    mutate(&churn(3, 0.10), &src).unwrap();
    let s2 = e.json(0, &["backup", &maildir(&src)]);
    mutate(&churn(4, 0.0), &src).unwrap();
    let s3 = e.json(0, &["backup", &maildir(&src)]);
    copy_tree(&src, &e.path("want"));
    // Another store, backed up once: its packs hold nothing the others use.
    let other = e.path("other");
    generate(
        &CorpusSpec {
            seed: 8,
            ..CorpusSpec::preset("tiny").unwrap()
        },
        &other,
    )
    .unwrap();
    let s0 = e.json(0, &["backup", &maildir(&other)]);
    let st = store(e);
    for s in [&s0, &s1, &s2] {
        st.delete(&format!("snapshots/{}", s["snapshot"].as_str().unwrap()))
            .unwrap();
    }
    // This host saw them: the removal is on purpose.
    e.ok(&["check", "--accept-removed"]);
    s3["snapshot"].as_str().unwrap().to_string()
}

/// `check --read-data` passes and the snapshot restores exactly what it backed up.
#[track_caller]
fn intact(e: &Env, snapshot: &str, want: &Path, target: &str) {
    let check = e.json(0, &["check", "--read-data"]);
    assert_eq!(check["errors"].as_array().unwrap().len(), 0, "{check}");
    let out = e.path(target);
    let _ = std::fs::remove_dir_all(&out);
    e.ok(&["restore", snapshot, "--target", &maildir(&out)]);
    assert_same_files(&out, want);
}

fn prune_deletes_and_repacks(e: &Env, init: &[&str]) {
    let s3 = history_of(e, init);
    let before = size(e);
    let packs_before = count(e, "data/");
    let dry = e.json(0, &["prune", "--dry-run"]);
    assert_eq!(size(e), before, "a dry run changed the repository");
    let rep: Value = e.json(0, &["prune"]);
    assert!(rep["packs_deleted"].as_u64().unwrap() >= 1, "{rep}");
    assert!(rep["packs_repacked"].as_u64().unwrap() >= 1, "{rep}");
    assert!(rep["blobs_removed"].as_u64().unwrap() >= 1, "{rep}");
    for k in [
        "packs_deleted",
        "packs_repacked",
        "packs_kept",
        "blobs_removed",
    ] {
        assert_eq!(
            dry[k], rep[k],
            "the dry run planned otherwise: {k}\n{dry}\n{rep}"
        );
    }
    // The sizes it reports are the repository's, and it shrank by what it freed.
    let after = size(e);
    assert_eq!(rep["size_before"].as_u64().unwrap(), before, "{rep}");
    assert_eq!(rep["size_after"].as_u64().unwrap(), after, "{rep}");
    assert_eq!(
        rep["bytes_freed"].as_u64().unwrap(),
        before - after,
        "{rep}"
    );
    assert!(after < before, "{before} -> {after}");
    let deleted = rep["packs_deleted"].as_u64().unwrap() + rep["packs_repacked"].as_u64().unwrap();
    assert_eq!(
        count(e, "data/") as u64,
        packs_before as u64 - deleted + rep["packs_written"].as_u64().unwrap()
    );
    intact(e, &s3, &e.path("want"), "r1");
    // Nothing is left to do.
    let again = e.json(0, &["prune"]);
    for k in [
        "packs_deleted",
        "packs_repacked",
        "packs_unindexed",
        "bytes_freed",
    ] {
        assert_eq!(again[k], 0, "{k}: {again}");
    }
    assert_eq!(count(e, "locks/"), 0);
}

#[test]
fn prune_deletes_unused_packs_and_repacks_partly_used_ones() {
    prune_deletes_and_repacks(&Env::new(), &["init"]);
}

#[test]
fn s3_prune_deletes_unused_packs_and_repacks_partly_used_ones() {
    prune_deletes_and_repacks(&Env::s3("prune"), &["init"]);
}

/// The index kept in a local table (docs/format.md, *The index's table*; from one blob on
/// here): backups, prune, check and restore answer as with the index in memory, the
/// table is made again after the prune replaced the index files it held, and a table
/// damaged behind an open's back is never believed: prune refuses before removing
/// anything, check says so, and the next runs read the index files.
#[test]
fn with_the_index_in_a_local_table_prune_check_and_restore_answer_the_same() {
    let mut e = Env::new();
    e.vars.push(("MAILVAULT_INDEX_TABLE_AT", Some("1".into())));
    let tables = |e: &Env| -> Vec<std::path::PathBuf> {
        common::named(&e.path("cache/mailvault"), "")
            .into_iter()
            .filter(|p| p.extension().is_some_and(|x| x == "table"))
            .collect()
    };
    prune_deletes_and_repacks(&e, &["init"]);
    let table = match tables(&e).as_slice() {
        [one] => one.clone(),
        other => panic!("one table: {other:?}"),
    };
    // The prune replaced the index files: the table holds the new ones.
    let made = fs::metadata(&table).unwrap().modified().unwrap();
    intact(&e, "latest", &e.path("want"), "r2");
    assert_eq!(
        fs::metadata(&table).unwrap().modified().unwrap(),
        made,
        "a table that holds every index file is kept"
    );

    // Damage in its entries: the header and fingerprints open, the blocks do not check.
    let mut bytes = fs::read(&table).unwrap();
    let at = bytes.len() / 3;
    for b in &mut bytes[at..at + 4096] {
        *b ^= 0x5a;
    }
    // A new snapshot without a sixth of the messages: the last one's own blobs unused.
    let src = e.path("vmail");
    let churn = MutationSpec {
        seed: 5,
        flag_rename_ratio: 0.0,
        new_ratio: 0.0,
        delete_ratio: 0.15,
    };
    mutate(&churn, &src).unwrap();
    e.json(0, &["backup", &maildir(&src)]);
    copy_tree(&src, &e.path("want"));
    e.ok(&["forget", "--keep-last", "1"]);
    let dry = e.json(0, &["prune", "--dry-run"]);
    assert!(dry["blobs_removed"].as_u64().unwrap() > 0, "{dry}");
    let before = size(&e);
    fs::write(&table, &bytes).unwrap();
    let (code, out, err) = e.run_text(&["prune"]);
    assert_ne!(code, Some(0), "{out}{err}");
    assert!(err.contains("index's local table"), "{err}");
    assert_eq!(size(&e), before, "a prune that refused removed something");
    assert!(!table.exists(), "the damaged table is removed");
    // The next runs read the index files, make the table again and find no damage.
    let rep = e.json(0, &["prune"]);
    assert_eq!(rep["blobs_removed"], dry["blobs_removed"], "{rep}");
    intact(&e, "latest", &e.path("want"), "r3");
    assert_eq!(tables(&e).len(), 1);
}

/// Format-1 packs are repacked into format-1 packs (their blobs copied sealed as they
/// are): in a format-1 repository, and in one migrated from it (`format1_packs`).
#[test]
fn prune_in_format1_and_migrated_repositories() {
    prune_deletes_and_repacks(&Env::new(), &["init", "--format", "1"]);
    let e = Env::new();
    history_of(&e, &["init", "--format", "1"]);
    e.ok(&["migrate"]);
    let rep = e.json(0, &["prune"]);
    assert!(rep["packs_repacked"].as_u64().unwrap() >= 1, "{rep}");
    assert_eq!(rep["snapshots"], 1, "{rep}");
    intact(&e, "latest", &e.path("want"), "r");
}

/// Kills prune (SIGKILL, from inside, right after its k-th put or delete) at every
/// point, on a copy of one repository each time: the repository it leaves checks clean
/// with `--read-data`, restores the remaining snapshot exactly, and a second prune
/// finishes the job (after which no pack is left that no index lists).
#[test]
fn prune_killed_at_any_point_leaves_a_sound_repository() {
    let base = Env::new();
    let s3 = history(&base);
    // How many changes a whole prune makes, on a copy.
    let probe = Env::new();
    copy_tree(&base.repo(), &probe.repo());
    copy_tree(&base.state_dir(), &probe.state_dir());
    let rep = probe.json(0, &["prune"]);
    let total = [
        "packs_written",
        "index_files_written",
        "index_files_deleted",
    ]
    .iter()
    .map(|k| rep[k].as_u64().unwrap())
    .sum::<u64>()
        + ["packs_deleted", "packs_repacked", "packs_unindexed"]
            .iter()
            .map(|k| rep[k].as_u64().unwrap())
            .sum::<u64>();
    assert!(total >= 5, "{rep}");
    for k in 1..=total {
        let e = Env::new();
        copy_tree(&base.repo(), &e.repo());
        copy_tree(&base.state_dir(), &e.state_dir());
        let out = e
            .cmd(&["prune"])
            .env("MAILVAULT_PRUNE_KILL_AFTER", k.to_string())
            .output()
            .unwrap();
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(
            out.status.signal(),
            Some(9),
            "k={k}: not killed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        // Its lock stays, stale (its process is gone): no command waits for it.
        assert_eq!(count(&e, "locks/"), 1, "k={k}");
        intact(&e, &s3, &base.path("want"), "r");
        let again = e.json(0, &["prune"]);
        assert_eq!(again["snapshots"], 1, "k={k}: {again}");
        // The killed run's stale lock goes with the next prune.
        assert_eq!(again["lock_records_removed"], 1, "k={k}: {again}");
        assert_eq!(count(&e, "locks/"), 0);
        intact(&e, &s3, &base.path("want"), "r");
        let check = e.json(0, &["check"]);
        let w = check["warnings"].to_string();
        assert!(!w.contains("not in any index"), "k={k}: {w}");
    }
}

/// A prune and a backup started at the same moment both end well, whichever gets the
/// lock first. The backup is of the other store, whose snapshot was removed: every blob
/// it needs is in packs the prune would delete, and without the locks a backup that read
/// the index before the prune deleted them deduplicates against blobs that are then gone.
/// Its snapshot and the one kept before restore exactly.
fn prune_and_backup_together(e: &Env) {
    let s3 = history(e);
    let other = e.path("other");
    for round in 0..3 {
        let mut backup = e.cmd(&["backup", &maildir(&other), "--json"]);
        let mut prune = e.cmd(&["prune", "--json"]);
        for c in [&mut backup, &mut prune] {
            c.stdout(Stdio::piped()).stderr(Stdio::piped());
        }
        let (b, p) = (backup.spawn().unwrap(), prune.spawn().unwrap());
        let (b, p) = (b.wait_with_output().unwrap(), p.wait_with_output().unwrap());
        for (what, o) in [("backup", &b), ("prune", &p)] {
            assert!(
                o.status.success(),
                "round {round}: {what}: {}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            );
        }
        let snap: Value = serde_json::from_slice(&b.stdout).unwrap();
        let id = snap["snapshot"].as_str().unwrap();
        intact(e, id, &other, "now");
        intact(e, &s3, &e.path("want"), "kept");
        assert_eq!(count(e, "locks/"), 0);
        // Removed again: the next round's prune finds its blobs unused.
        store(e).delete(&format!("snapshots/{id}")).unwrap();
        e.ok(&["check", "--accept-removed"]);
    }
}

#[test]
fn prune_and_backup_started_together_both_end_well() {
    prune_and_backup_together(&Env::new());
}

#[test]
fn s3_prune_and_backup_started_together_both_end_well() {
    prune_and_backup_together(&Env::s3("prune-together"));
}

/// A snapshot that cannot be read stops prune before it changes anything: its blobs
/// cannot be known.
#[test]
fn an_unreadable_snapshot_stops_prune() {
    let e = Env::new();
    let s3 = history(&e);
    let before = size(&e);
    let path = e.repo().join("snapshots").join(&s3);
    let mut bytes = std::fs::read(&path).unwrap();
    let n = bytes.len();
    bytes[n - 1] ^= 1;
    std::fs::remove_file(&path).unwrap();
    std::fs::write(&path, &bytes).unwrap();
    let out = e.expect(2, &["prune"]);
    assert!(
        out.contains("prune refused") && out.contains(&format!("snapshots/{s3}")),
        "{out}"
    );
    assert_eq!(size(&e), before);
}

/// A folder large enough for a chunk tree (20,000 messages) goes through every command
/// that reads folders: backup (twice, the second after one message came and one went),
/// `ls`, `forget` and `prune` of the first snapshot, `check --read-data`, and a restore
/// that gives back the store as the second backup saw it, byte for byte.
#[test]
fn a_large_folder_goes_through_every_command_by_its_chunk_tree() {
    use mailvault_core::repo::tree::{AccountTree, RootTree};
    use mailvault_core::Repository;
    let e = Env::new();
    let src = e.path("vmail");
    let cur = src.join("example.org/big/Maildir/cur");
    fs::create_dir_all(&cur).unwrap();
    for d in ["new", "tmp"] {
        fs::create_dir_all(src.join("example.org/big/Maildir").join(d)).unwrap();
    }
    let msg = |i: u32| format!("From: a{i}@example.org\nSubject: m{i}\n\nbody {i}\n");
    for i in 0..20_000u32 {
        fs::write(
            cur.join(format!("{}.M{i}P1.mx:2,S", 1_700_000_000 + i)),
            msg(i),
        )
        .unwrap();
    }
    e.expect(0, &["init"]);
    let first = e.json(0, &["backup", &maildir(&src)]);
    assert_eq!(first["items_total"], 20_000, "{first}");
    fs::write(cur.join("1800000000.M1P1.mx:2,"), msg(99_999)).unwrap();
    fs::remove_file(cur.join("1700012345.M12345P1.mx:2,S")).unwrap();
    let second = e.json(0, &["backup", &maildir(&src)]);
    assert_eq!(second["items_new"], 1, "{second}");

    // The folder's chunks are in a chunk tree, not in its node.
    let repo = Repository::open(Arc::new(LocalStore::new(e.repo())), b"s3cret").unwrap();
    let snap = repo.find_snapshot("latest").unwrap();
    let root: RootTree = repo.read_tree(&snap.root).unwrap();
    let acc: AccountTree = repo.read_tree(&root.accounts[0].tree).unwrap();
    let inbox = &acc.folders[0];
    assert!(inbox.chunk_tree.is_some() && inbox.chunks.is_empty());
    drop(repo);

    let listing = e.json(
        0,
        &[
            "ls",
            "latest",
            "--account",
            "big@example.org",
            "--folder",
            "INBOX",
        ],
    );
    assert_eq!(listing["items"].as_array().unwrap().len(), 20_000);
    e.expect(0, &["forget", first["snapshot"].as_str().unwrap()]);
    e.expect(0, &["prune"]);
    e.expect(0, &["check", "--read-data"]);
    let out = e.path("out");
    e.expect(0, &["restore", "latest", "--target", &maildir(&out)]);
    assert_same_files(&out, &src);
}
