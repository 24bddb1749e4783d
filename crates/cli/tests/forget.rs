//! `forget` (issue 13): restic's policy on snapshots dated with `backup --time`, legal
//! hold, dry runs, `tag`, and no rollback reported afterwards by `check` on this host or
//! on another one that had seen the removed snapshots; on a local directory and on S3.
#![allow(clippy::unwrap_used)]

mod common;

use common::Env;
use serde_json::Value;
use std::collections::BTreeSet;
use std::fs;
use std::path::Path;

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

/// An environment whose local time is `tz`.
fn env_in(e: Env, tz: &str) -> Env {
    let mut e = e;
    e.vars.push(("TZ", Some(tz.into())));
    e
}

/// The days of restic's documented example: every weekday for two weeks, a second
/// backup on Fridays, the second Wednesday missed.
const DAYS: [&str; 11] = [
    "2025-04-21 11:00:00",
    "2025-04-22 11:00:00",
    "2025-04-23 11:00:00",
    "2025-04-24 11:00:00",
    "2025-04-25 11:00:00",
    "2025-04-25 23:00:00",
    "2025-04-28 11:00:00",
    "2025-04-29 11:00:00",
    "2025-05-01 11:00:00",
    "2025-05-02 11:00:00",
    "2025-05-02 23:00:00",
];

/// One backup per time of [`DAYS`], the Maildir growing each day; the snapshot ids in
/// that order.
fn history(e: &Env) -> Vec<String> {
    let md = e.path("md");
    e.expect(0, &["init"]);
    DAYS.iter()
        .enumerate()
        .map(|(i, t)| {
            maildir(&md, 2, &format!("d{i}x"));
            e.json(0, &["backup", md.to_str().unwrap(), "--time", t])["snapshot"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect()
}

fn ids(snaps: &Value) -> BTreeSet<String> {
    snaps
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap().to_string())
        .collect()
}

/// `check` as another host: its own state directory.
fn check_elsewhere(e: &Env, code: i32) -> String {
    let o = e
        .cmd(&["check"])
        .env("MAILVAULT_STATE_DIR", e.path("other-host"))
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(code), "{text}");
    text
}

fn files(dir: &Path) -> BTreeSet<String> {
    fs::read_dir(dir)
        .map(|d| {
            d.map(|f| f.unwrap().file_name().into_string().unwrap())
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn forget_keep_daily_and_weekly_with_a_hold_and_no_rollback_anywhere() {
    let e = env_in(Env::new(), "UTC");
    let mut ids_by_day = history(&e);
    // The second day under legal hold: a new snapshot replaces the old one.
    let out = e.ok(&["tag", &ids_by_day[1], "--add", "hold"]);
    let (old, new) = out.split_once(" -> ").unwrap();
    assert_eq!(old, &ids_by_day[1][..8], "{out}");
    let held = e
        .json(0, &["snapshots"])
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["id"].as_str().unwrap().starts_with(&new[..8]))
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(!e.repo().join("snapshots").join(&ids_by_day[1]).exists());
    ids_by_day[1] = held.clone();
    // Both hosts have seen every snapshot (the other one before the tag too).
    assert!(e.ok(&["check"]).contains("no errors found"));
    assert!(check_elsewhere(&e, 0).contains("no errors found"));

    // Newest first: days 3 (05-02 23:00, 05-01, 04-29), weeks 2 (the two Fridays' last).
    let kept_days = [10, 8, 7, 5, 1];
    let removed: BTreeSet<String> = (0..DAYS.len())
        .filter(|i| !kept_days.contains(i))
        .map(|i| ids_by_day[i].clone())
        .collect();
    let policy = ["forget", "--keep-daily", "3", "--keep-weekly", "2"];

    // A dry run says it all and changes nothing.
    let before = files(&e.repo().join("snapshots"));
    // The tag's record of the id it replaced.
    assert_eq!(files(&e.repo().join("forgotten")).len(), 1);
    let dry = e.ok(&[&policy[..], &["--dry-run"]].concat());
    assert_eq!(files(&e.repo().join("snapshots")), before);
    assert_eq!(files(&e.repo().join("forgotten")).len(), 1);
    assert!(
        dry.contains("applying policy: keep 3 daily, 2 weekly snapshots"),
        "{dry}"
    );
    assert!(
        dry.contains("6 snapshots would be removed, 5 kept"),
        "{dry}"
    );
    let line = |id: &str| {
        dry.lines()
            .find(|l| l.contains(&id[..8]))
            .unwrap()
            .to_string()
    };
    assert!(
        line(&held).starts_with("keep") && line(&held).ends_with("hold"),
        "{dry}"
    );
    assert!(
        line(&ids_by_day[10]).ends_with("daily snapshot, weekly snapshot"),
        "{dry}"
    );
    assert!(line(&ids_by_day[5]).ends_with("weekly snapshot"), "{dry}");
    assert!(line(&ids_by_day[9]).starts_with("remove"), "{dry}");
    let dry_json = e.json(0, &[&policy[..], &["--dry-run"]].concat());
    assert_eq!(dry_json["dry_run"], true);
    let listed: BTreeSet<String> = dry_json["removed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect();
    assert_eq!(listed, removed);
    assert_eq!(files(&e.repo().join("snapshots")), before);

    // The real run removes exactly those.
    let rep = e.json(0, &policy);
    assert_eq!(rep["groups"].as_array().unwrap().len(), 1);
    let got: BTreeSet<String> = rep["removed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect();
    assert_eq!(got, removed);
    let left = ids(&e.json(0, &["snapshots"]));
    let want: BTreeSet<String> = kept_days.iter().map(|&i| ids_by_day[i].clone()).collect();
    assert_eq!(left, want);
    assert_eq!(files(&e.repo().join("forgotten")).len(), 2);

    // No rollback: not on this host, not on the other one that saw them all.
    let out = e.ok(&["check"]);
    assert!(
        out.contains("no errors found") && !out.contains("rollback"),
        "{out}"
    );
    let out = check_elsewhere(&e, 0);
    assert!(
        out.contains("no errors found") && !out.contains("rollback"),
        "{out}"
    );

    // Named explicitly, the held snapshot stays (exit 1, and says why); another goes.
    let out = e.expect(1, &["forget", &held]);
    assert!(out.contains("legal hold"), "{out}");
    assert!(e.repo().join("snapshots").join(&held).exists());
    e.ok(&["forget", &ids_by_day[7][..10]]);
    assert!(!e.repo().join("snapshots").join(&ids_by_day[7]).exists());
    assert!(check_elsewhere(&e, 0).contains("no errors found"));
    assert!(e.ok(&["check"]).contains("no errors found"));
    // Released from hold, it can go.
    let out = e.ok(&["tag", &held, "--remove", "hold"]);
    let new = out.split_once(" -> ").unwrap().1[..8].to_string();
    e.ok(&["forget", &new]);
    assert_eq!(ids(&e.json(0, &["snapshots"])).len(), 3);
    assert!(check_elsewhere(&e, 0).contains("no errors found"));

    // A deletion without forget is still a rollback on both hosts.
    let victim = ids_by_day[10].clone();
    fs::remove_file(e.repo().join("snapshots").join(&victim)).unwrap();
    assert!(e.expect(2, &["check"]).contains("rollback"));
    assert!(check_elsewhere(&e, 2).contains("rollback"));
    // A forget record written without the key does not open: the rollback stays, and
    // the record is named.
    let forged = format!("forgotten/{}", "ab".repeat(32));
    let json = format!(r#"{{"hostname":"x","time":0,"snapshots":["{victim}"]}}"#);
    fs::write(e.repo().join(&forged), json).unwrap();
    let out = check_elsewhere(&e, 2);
    assert!(out.contains("rollback") && out.contains(&forged), "{out}");
}

#[test]
fn forget_refuses_no_policy_and_removing_a_whole_group() {
    let e = env_in(Env::new(), "UTC");
    history(&e);
    let out = e.expect(2, &["forget"]);
    assert!(out.contains("no policy"), "{out}");
    let out = e.expect(2, &["forget", "--keep-tag", "nosuchtag"]);
    assert!(out.contains("refusing to remove every snapshot"), "{out}");
    let out = e.expect(2, &["forget", "--keep-daily", "x"]);
    assert!(out.contains("unlimited"), "{out}");
    let out = e.expect(2, &["forget", "--keep-within", "1w"]);
    assert!(out.contains("2y5m7d3h"), "{out}");
    assert_eq!(ids(&e.json(0, &["snapshots"])).len(), DAYS.len());
    // --prune where prune is not wired yet: refused before anything is removed.
    if e.expect_output(0, &["forget", "--help"]).status.success()
        && e.run(&["forget", "--keep-last", "1", "--prune"])
            .status
            .code()
            == Some(2)
    {
        assert_eq!(ids(&e.json(0, &["snapshots"])).len(), DAYS.len());
    }
    // keep-within is relative to the newest snapshot (2025), not to now.
    let rep = e.json(0, &["forget", "--keep-within", "2d", "--dry-run"]);
    assert_eq!(rep["removed"].as_array().unwrap().len(), DAYS.len() - 3);
}

#[test]
fn backup_time_is_local_time_or_rfc3339_and_garbage_is_refused() {
    let e = env_in(Env::new(), "Europe/Berlin");
    let md = e.path("md");
    maildir(&md, 1, "a");
    e.expect(0, &["init"]);
    let md = md.to_str().unwrap();
    // 11:00 in Berlin in summer is 09:00 UTC.
    e.ok(&["backup", md, "--time", "2025-04-25 11:00:00"]);
    e.ok(&["backup", md, "--time", "2025-04-26T09:00:00Z"]);
    let times: Vec<i64> = e
        .json(0, &["snapshots"])
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["time"].as_i64().unwrap())
        .collect();
    assert_eq!(times, [1_745_571_600, 1_745_571_600 + 86_400]);
    for bad in [
        "yesterday",
        "2025-04-25",
        "2025-02-30 10:00:00",
        "2025-04-25T11:00:00",
    ] {
        let out = e.expect(2, &["backup", md, "--time", bad]);
        assert!(out.contains("YYYY-MM-DD HH:MM:SS"), "{bad}: {out}");
    }
    assert_eq!(e.json(0, &["snapshots"]).as_array().unwrap().len(), 2);
}

#[test]
fn tag_add_remove_set_rewrites_the_snapshot() {
    let e = env_in(Env::new(), "UTC");
    let md = e.path("md");
    maildir(&md, 2, "a");
    e.expect(0, &["init"]);
    e.ok(&["backup", md.to_str().unwrap(), "--tag", "x"]);
    let first = ids(&e.json(0, &["snapshots"])).into_iter().next().unwrap();
    assert!(check_elsewhere(&e, 0).contains("no errors found"));
    let rep = e.json(0, &["tag", &first[..8], "--add", "a", "--add", "b"]);
    let c = &rep["changed"][0];
    assert_eq!(c["old"], first.as_str());
    assert_eq!(c["tags"], serde_json::json!(["x", "a", "b"]));
    let second = c["new"].as_str().unwrap().to_string();
    let rep = e.json(0, &["tag", &second, "--set", "m,n", "--remove", "n"]);
    assert_eq!(rep["changed"][0]["tags"], serde_json::json!(["m"]));
    let third = rep["changed"][0]["new"].as_str().unwrap().to_string();
    // Nothing to change: not rewritten.
    let rep = e.json(0, &["tag", &third, "--add", "m"]);
    assert_eq!(rep["unchanged"], serde_json::json!([third]));
    let snaps = e.json(0, &["snapshots"]);
    assert_eq!(ids(&snaps), BTreeSet::from([third.clone()]));
    assert_eq!(snaps[0]["tags"], serde_json::json!(["m"]));
    let out = e.expect(2, &["tag", &third, "--add", "a,b"]);
    assert!(out.contains("comma"), "{out}");
    // The same content but the tags: restore sees the same messages.
    assert!(e.ok(&["check"]).contains("no errors found"));
    assert!(check_elsewhere(&e, 0).contains("no errors found"));
}

#[test]
fn s3_forget_and_tag() {
    let e = env_in(Env::s3("forget"), "UTC");
    let md = e.path("md");
    e.expect(0, &["init"]);
    let mut ids_by_day = Vec::new();
    for (i, t) in DAYS[6..].iter().enumerate() {
        maildir(&md, 1, &format!("s{i}x"));
        let rep = e.json(0, &["backup", md.to_str().unwrap(), "--time", t]);
        ids_by_day.push(rep["snapshot"].as_str().unwrap().to_string());
    }
    assert!(check_elsewhere(&e, 0).contains("no errors found"));
    let rep = e.json(0, &["tag", &ids_by_day[0], "--add", "hold"]);
    let held = rep["changed"][0]["new"].as_str().unwrap().to_string();
    let rep = e.json(0, &["forget", "--keep-last", "2"]);
    assert_eq!(rep["removed"].as_array().unwrap().len(), 2);
    let left = ids(&e.json(0, &["snapshots"]));
    assert_eq!(
        left,
        BTreeSet::from([held, ids_by_day[3].clone(), ids_by_day[4].clone()])
    );
    assert!(e.ok(&["check"]).contains("no errors found"));
    let out = check_elsewhere(&e, 0);
    assert!(
        out.contains("no errors found") && !out.contains("rollback"),
        "{out}"
    );
}
