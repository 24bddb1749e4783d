//! Issue 30: a repository in a bucket with S3 Object Lock (docs/security.md, *Object
//! Lock*), on a real MinIO. Governance mode, so that the test can shorten a retention with
//! the root user's bypass right instead of waiting a day for one to end.
#![allow(clippy::unwrap_used)]

mod common;

use common::{assert_same_files, Env};
use jiff::{SignedDuration, Timestamp};
use mailvault_core::store::{LockMode, LockPolicy, ObjectLock, S3Store, Store};
use serde_json::Value;

/// The id of the snapshot of `source`.
fn snapshot_of(snaps: &Value, source: &str) -> String {
    let s = (snaps.as_array().unwrap().iter())
        .find(|s| s["source"] == source)
        .unwrap();
    s["id"].as_str().unwrap().to_string()
}

/// Shortens the retention of every hidden version (of an object deleted) to end in a
/// second: what a day's wait would do.
fn let_hidden_versions_expire(root: &S3Store) -> usize {
    let soon = Timestamp::now() + SignedDuration::from_secs(1);
    let hidden: Vec<_> = (root.versions("").unwrap().into_iter())
        .filter(|v| !v.marker && !v.latest)
        .collect();
    for v in &hidden {
        root.shorten_retention(&v.path, Some(&v.id), soon).unwrap();
    }
    std::thread::sleep(std::time::Duration::from_millis(2100));
    hidden.len()
}

/// `init --lock-days` makes the bucket with Object Lock and a default retention; every
/// object the backups write is locked. Prune deletes from the repository what no snapshot
/// needs, keeps its locked versions (never asked to go) and removes them for good at the
/// first prune after their retention ends; it extends the retention of what the kept
/// snapshot needs when it would end within half the period; check names what nothing
/// protects. The repository checks clean and restores exactly throughout.
#[test]
fn prune_on_an_object_lock_bucket_keeps_locked_versions_until_their_retention_ends() {
    let e = Env::s3("object-lock");
    let init = e.json(
        0,
        &["init", "--lock-days", "2", "--lock-mode", "governance"],
    );
    assert_eq!(init["object_lock"]["days"], 2, "{init}");
    let root = common::bucket_root(&e);
    let policy = LockPolicy {
        mode: LockMode::Governance,
        days: 2,
    };
    assert_eq!(root.policy().unwrap(), Some(policy));

    let (src_a, src_b) = (e.path("vmail-a"), e.path("vmail-b"));
    common::tiny_corpus(&src_a, 40, 150);
    common::tiny_corpus(&src_b, 41, 150);
    e.expect(0, &["backup", &common::maildir_at(&src_a), "--host", "a"]);
    e.expect(0, &["backup", &common::maildir_at(&src_b), "--host", "b"]);
    // Every object the repository has is locked for the period from its creation.
    let now = Timestamp::now();
    let objects = root.list("").unwrap();
    assert!(objects.iter().any(|o| o.path.starts_with("data/")));
    for o in objects.iter().filter(|o| !o.path.starts_with("locks/")) {
        let r = root.retention(&o.path, None).unwrap();
        assert_eq!(r.mode, Some(LockMode::Governance), "{}", o.path);
        assert!(
            r.until.unwrap() > now + SignedDuration::from_hours(47),
            "{}: {:?}",
            o.path,
            r.until
        );
    }

    // Forget the first host's snapshot and prune: its packs are gone from the repository,
    // their versions kept (locked) and counted.
    let snaps = e.json(0, &["snapshots"]);
    let a = snapshot_of(&snaps, &common::maildir_at(&src_a));
    let out = e.json(0, &["forget", &a, "--prune"]);
    let p = &out["prune"];
    let gone = p["packs_deleted"].as_u64().unwrap() + p["packs_repacked"].as_u64().unwrap();
    assert!(gone > 0, "{p}");
    let l = &p["object_lock"];
    assert!(l["versions_locked"].as_u64().unwrap() > 0, "{l}");
    assert_eq!(l["versions_removed"], 0, "{l}");
    assert_eq!(l["extended"], 0, "nothing ends within half the period: {l}");
    assert!(l["locked_until"].as_str().is_some(), "{l}");
    let hidden_bytes = l["bytes_locked"].as_u64().unwrap();
    assert!(hidden_bytes > 0);
    e.expect(0, &["check", "--read-data"]);
    let b = snapshot_of(&e.json(0, &["snapshots"]), &common::maildir_at(&src_b));
    e.expect(
        0,
        &[
            "restore",
            &b,
            "--target",
            &common::maildir_at(&e.path("out-1")),
        ],
    );
    assert_same_files(&e.path("out-1"), &src_b);

    // A day later (the retention of the hidden versions shortened to end now): the next
    // prune removes them for good, markers too.
    let expired = let_hidden_versions_expire(&root);
    assert!(expired > 0);
    let again = e.json(0, &["prune"]);
    let l = &again["object_lock"];
    assert_eq!(
        l["versions_removed"].as_u64().unwrap() as usize,
        expired,
        "{l}"
    );
    assert_eq!(l["versions_locked"], 0, "{l}");
    // (Lock records: each command since deleted its own, locked for the period too.)
    let left: Vec<_> = (root.versions("").unwrap().into_iter())
        .filter(|v| (!v.latest || v.marker) && !v.path.starts_with("locks/"))
        .collect();
    assert!(left.is_empty(), "hidden versions or markers left: {left:?}");

    // A pack the kept snapshot needs whose retention ends soon (within half the period),
    // and one whose retention has ended: check names the second; prune extends both.
    let packs: Vec<String> = (root.list("data/").unwrap().into_iter())
        .map(|o| o.path)
        .collect();
    let (soon, over) = (&packs[0], &packs[packs.len() - 1]);
    assert_ne!(soon, over);
    root.shorten_retention(soon, None, Timestamp::now() + SignedDuration::from_hours(3))
        .unwrap();
    root.shorten_retention(over, None, Timestamp::now() + SignedDuration::from_secs(1))
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(2100));
    let checked = e.json(0, &["check"]);
    let l = &checked["object_lock"];
    assert_eq!(l["unprotected"], serde_json::json!([over]), "{l}");
    assert_eq!(l["extended"], 2, "{l}");
    let warnings = checked["warnings"].to_string();
    assert!(warnings.contains("no retention left"), "{warnings}");
    let pruned = e.json(0, &["prune"]);
    assert_eq!(pruned["object_lock"]["extended"], 2, "{pruned}");
    for p in [soon, over] {
        let until = root.retention(p, None).unwrap().until.unwrap();
        assert!(
            until > Timestamp::now() + SignedDuration::from_hours(47),
            "{p}: {until}"
        );
    }
    let clean = e.json(0, &["check", "--read-data"]);
    assert_eq!(clean["object_lock"]["unprotected"], Value::Null, "{clean}");
    assert_eq!(clean["object_lock"]["extended"], 0, "{clean}");
    e.expect(
        0,
        &[
            "restore",
            &b,
            "--target",
            &common::maildir_at(&e.path("out-2")),
        ],
    );
    assert_same_files(&e.path("out-2"), &src_b);

    // A legal hold (`tag --add hold`): the next prune puts S3's legal hold on the held
    // snapshot's file, every pack it needs, the keys and the config; once the hold tag is
    // removed, the next prune lifts them all, and the replaced files go for good.
    let tagged = e.json(0, &["tag", &b, "--add", "hold"]);
    let held = tagged["changed"][0]["new"].as_str().unwrap().to_string();
    let p = e.json(0, &["prune"]);
    let l = &p["object_lock"];
    let n = root.list("data/").unwrap().len() as u64 + root.list("keys/").unwrap().len() as u64 + 2;
    assert_eq!(
        l["legal_holds"], n,
        "every pack, key, the config, the snapshot: {l}"
    );
    assert_eq!(l["legal_holds_set"], n, "{l}");
    for p in [
        format!("snapshots/{held}"),
        "config".into(),
        packs[0].clone(),
    ] {
        assert!(root.retention(&p, None).unwrap().legal_hold, "{p}");
    }
    let untagged = e.json(0, &["tag", &held, "--remove", "hold"]);
    let free = untagged["changed"][0]["new"].as_str().unwrap().to_string();
    let p = e.json(0, &["prune"]);
    let l = &p["object_lock"];
    assert_eq!(l["legal_holds"], 0, "{l}");
    assert_eq!(
        l["legal_holds_lifted"].as_u64().unwrap(),
        n - 1,
        "the snapshot file's went with it: {l}"
    );
    assert!(!root.retention("config", None).unwrap().legal_hold);
    let_hidden_versions_expire(&root);
    e.expect(0, &["prune"]);
    assert!(
        !(root.versions("snapshots/").unwrap().iter()).any(|v| v.path.contains(&held)),
        "the held snapshot's replaced file is gone for good"
    );
    e.expect(
        0,
        &[
            "restore",
            &free,
            "--target",
            &common::maildir_at(&e.path("out-3")),
        ],
    );
    assert_same_files(&e.path("out-3"), &src_b);
}

/// `--lock-days` needs object storage: on a local directory it is refused before
/// anything is written.
#[test]
fn lock_days_on_a_local_directory_is_refused() {
    let e = Env::new();
    let (code, _, err) = e.run_text(&["init", "--lock-days", "7"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("object storage"), "{err}");
    assert!(!e.repo().join("config").exists());
}

/// An intruder whose credentials may put (S3 has no right to create an object without the
/// right to replace it) overwrites a pack, an index file, a snapshot and the key file:
/// check names the damage. `repair overwrites` on the maintenance host, from the
/// storage alone, puts every original back from the versions the bucket keeps; check is
/// clean, the restore exact, and a second run finds nothing to do.
#[test]
fn repair_overwrites_puts_back_what_an_intruder_overwrote() {
    let e = Env::s3("overwrites");
    e.json(
        0,
        &["init", "--lock-days", "1", "--lock-mode", "governance"],
    );
    let root = common::bucket_root(&e);
    let src = e.path("vmail");
    common::tiny_corpus(&src, 50, 120);
    e.expect(0, &["backup", &common::maildir_at(&src)]);
    let first = |dir: &str| root.list(dir).unwrap()[0].path.clone();
    let mut victims = vec![
        first("data/"),
        first("index/"),
        first("snapshots/"),
        first("keys/"),
    ];
    victims.sort();
    for v in &victims {
        root.replace(v, b"ransom note").unwrap();
    }
    let (code, out, err) = e.run_text(&["check", "--read-data"]);
    assert_eq!(code, Some(2), "{out}{err}");
    let dry = e.json(0, &["repair", "overwrites", "--dry-run"]);
    assert_eq!(dry["restored"], serde_json::json!(victims), "{dry}");
    assert_eq!(root.get(&victims[0]).unwrap(), b"ransom note");
    let rep = e.json(0, &["repair", "overwrites"]);
    assert_eq!(rep["restored"], serde_json::json!(victims), "{rep}");
    e.expect(0, &["check", "--read-data"]);
    e.expect(
        0,
        &[
            "restore",
            "latest",
            "--target",
            &common::maildir_at(&e.path("out")),
        ],
    );
    assert_same_files(&e.path("out"), &src);
    let again = e.json(0, &["repair", "overwrites"]);
    assert_eq!(again["restored"], serde_json::json!([]), "{again}");
}
