//! This host's snapshot record (issue 11): `check` reports snapshots this host saw that
//! are gone from the repository (a rollback) until accepted as removed on purpose,
//! `backup` and `snapshots` warn about them, repairs take what they remove out of the
//! record, and a config older than one this host has seen does not open.
#![allow(clippy::unwrap_used)]

mod common;

use common::Env;
use serde_json::Value;
use std::fs;
use std::path::{Path, PathBuf};

/// A Maildir of `n` small messages named after `tag`.
fn maildir(md: &Path, n: usize, tag: &str) {
    for sub in ["cur", "new", "tmp"] {
        fs::create_dir_all(md.join(sub)).unwrap();
    }
    for i in 0..n {
        let body = format!(
            "From: a@example.org\nTo: bob@example.org\nSubject: {tag} {i}\n\nmessage {i} of {tag}\n"
        );
        fs::write(md.join("cur").join(format!("{tag}{i}.M1P1.mx:2,S")), body).unwrap();
    }
}

/// A repository with two snapshots of a small Maildir; returns their ids, oldest first.
fn two_snapshots(e: &Env) -> Vec<String> {
    let md = e.path("md");
    maildir(&md, 3, "a");
    e.expect(0, &["init"]);
    e.expect(0, &["backup", md.to_str().unwrap()]);
    maildir(&md, 2, "b");
    e.expect(0, &["backup", md.to_str().unwrap()]);
    let snaps = e.json(0, &["snapshots"]);
    snaps
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap().to_string())
        .collect()
}

/// The one record in the test's state directory.
fn record_path(e: &Env) -> PathBuf {
    let dir = e.state_dir().join("repositories");
    let mut files: Vec<PathBuf> = fs::read_dir(&dir)
        .unwrap()
        .map(|f| f.unwrap().path())
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    files.remove(0)
}

fn record(e: &Env) -> Value {
    serde_json::from_slice(&fs::read(record_path(e)).unwrap()).unwrap()
}

#[test]
fn a_deleted_snapshot_is_a_rollback_until_accepted() {
    let e = Env::new();
    let ids = two_snapshots(&e);
    assert!(e.ok(&["check"]).contains("no errors found"));
    let rec = record(&e);
    let mut want = ids.clone();
    want.sort();
    assert_eq!(rec["snapshots"], serde_json::json!(want), "{rec}");
    assert_eq!(rec["format_version"], 2);
    assert_eq!(rec["location"], e.repo().to_str().unwrap());

    let gone = &ids[0];
    fs::remove_file(e.repo().join("snapshots").join(gone)).unwrap();
    // Reported by every check until accepted, in the text and in the JSON.
    for _ in 0..2 {
        let out = e.expect(2, &["check"]);
        assert!(out.contains("error: rollback: 1 snapshots"), "{out}");
        assert!(out.contains(&gone[..8]), "{out}");
        assert!(out.contains(&format!("affects snapshot {gone}")), "{out}");
        assert!(out.contains("mailvault check --accept-removed"), "{out}");
        let rep = e.json(2, &["check"]);
        let errs = rep["errors"].as_array().unwrap();
        assert_eq!(errs.len(), 1, "{rep}");
        assert_eq!(errs[0]["kind"], "rollback", "{rep}");
        assert_eq!(
            errs[0]["affected"],
            serde_json::json!([format!("snapshot {gone}")]),
            "{rep}"
        );
    }
    // `snapshots` and `backup` warn, and go on.
    let (code, _, err) = e.run_text(&["snapshots"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        err.contains("warning: 1 snapshots this host saw in the repository are gone")
            && err.contains("`mailvault check`"),
        "{err}"
    );
    let (code, _, err) = e.run_text(&["backup", e.path("md").to_str().unwrap()]);
    assert_eq!(code, Some(0), "{err}");
    assert!(err.contains("1 snapshots this host saw"), "{err}");

    let out = e.ok(&["check", "--accept-removed"]);
    assert!(
        out.contains("accepted as removed on purpose") && out.contains(&gone[..8]),
        "{out}"
    );
    assert!(out.contains("no errors found"), "{out}");
    assert!(e.ok(&["check"]).contains("no errors found"));
    let rec = record(&e);
    assert_eq!(rec["removed"], serde_json::json!([gone]), "{rec}");
    assert_eq!(rec["snapshots"].as_array().unwrap().len(), 2, "{rec}");
    let (_, _, err) = e.run_text(&["snapshots"]);
    assert!(!err.contains("warning"), "{err}");
}

/// The snapshots `repair snapshots` moves away (here an unreadable one) are removed on
/// purpose: no rollback afterwards.
#[test]
fn repair_snapshots_takes_what_it_removes_out_of_the_record() {
    let e = Env::new();
    let ids = two_snapshots(&e);
    e.expect(0, &["check"]);
    let victim = e.repo().join("snapshots").join(&ids[1]);
    let bytes = fs::read(&victim).unwrap();
    fs::write(&victim, &bytes[..bytes.len() / 2]).unwrap();
    // Damaged but there: not missing.
    let rep = e.json(2, &["check"]);
    let kinds: Vec<&str> = (rep["errors"].as_array().unwrap().iter())
        .map(|e| e["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["snapshot"], "{rep}");
    e.expect(0, &["repair", "snapshots"]);
    assert!(!victim.exists());
    assert!(e.ok(&["check"]).contains("no errors found"));
    assert_eq!(record(&e)["removed"], serde_json::json!([ids[1]]));
}

/// A record with a higher format version than the config: the config was replaced by an
/// older one, and the repository does not open.
#[test]
fn an_older_config_is_a_format_rollback() {
    let e = Env::new();
    two_snapshots(&e);
    let path = record_path(&e);
    let mut rec = record(&e);
    // As if this host had seen a later format than the config now says.
    rec["format_version"] = 3.into();
    fs::write(&path, rec.to_string()).unwrap();
    for cmd in [&["snapshots"][..], &["ls", "latest"], &["check"]] {
        let (code, _, err) = e.run_text(cmd);
        assert_eq!(code, Some(2), "{cmd:?}: {err}");
        assert!(
            err.contains("config says format version 2")
                && err.contains("seen it with version 3")
                && err.contains("rollback"),
            "{err}"
        );
    }
}

/// A record that cannot be read is replaced with a warning; a state directory that cannot
/// be written costs a warning, never the command.
#[test]
fn the_record_never_fails_a_command() {
    let e = Env::new();
    let ids = two_snapshots(&e);
    let path = record_path(&e);
    fs::write(&path, "{ not json").unwrap();
    let (code, _, err) = e.run_text(&["snapshots"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(err.contains("replaced by a new one"), "{err}");
    assert_eq!(record(&e)["snapshots"].as_array().unwrap().len(), ids.len());

    let blocked = e.path("not-a-dir");
    fs::write(&blocked, "").unwrap();
    for args in [
        &["backup", e.path("md").to_str().unwrap()][..],
        &["snapshots"],
        &["check"],
    ] {
        let o = e
            .cmd(args)
            .env("MAILVAULT_STATE_DIR", &blocked)
            .output()
            .unwrap();
        let err =
            String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(0), "{args:?}: {err}");
        assert_eq!(
            err.matches("cannot write the snapshot record").count(),
            1,
            "{args:?}: {err}"
        );
    }
}

/// Commands that do not list the snapshots for the user never write the record.
#[test]
fn read_only_commands_write_no_record() {
    let e = Env::new();
    two_snapshots(&e);
    fs::remove_dir_all(e.state_dir()).unwrap();
    let out = e.path("out");
    for args in [
        &["ls", "latest"][..],
        &["stats"],
        &["restore", "latest", "--target", out.to_str().unwrap()],
        &["repair", "snapshots", "--dry-run"],
    ] {
        e.expect(0, args);
        assert!(!e.state_dir().exists(), "{args:?} wrote the record");
    }
    e.expect(0, &["snapshots"]);
    assert_eq!(record(&e)["snapshots"].as_array().unwrap().len(), 2);
}
