//! The policy against restic's documented example and its golden files, legal hold,
//! durations and grouping.

use super::*;
use crate::repo::crypto::KdfParams;
use crate::repo::forgotten::forgotten;
use crate::repo::format::Version;
use crate::repo::snapshot::SnapshotSummary;
use crate::repo::InitOptions;
use crate::store::{MemoryStore, Store};
use std::sync::Arc;

fn snap(n: usize, time: &str, tags: &[&str]) -> Snapshot {
    let ts: Timestamp = time.parse().unwrap();
    let mut id = [0u8; 32];
    id[..8].copy_from_slice(&(n as u64).to_be_bytes());
    Snapshot {
        id: Id(id),
        version: 2,
        time: ts.as_second(),
        time_nanos: ts.subsec_nanosecond() as u32,
        hostname: "mopped".into(),
        source: "maildir:/var/vmail".into(),
        tags: tags.iter().map(|t| t.to_string()).collect(),
        parent: None,
        root: Id::default(),
        summary: SnapshotSummary::default(),
        original: None,
        started: None,
    }
}

/// (index in the list, reasons) of the kept snapshots, newest first.
type Kept = Vec<(usize, Vec<String>)>;

fn kept(d: &[Decision]) -> Kept {
    d.iter()
        .filter(|d| d.keep)
        .map(|d| {
            let n = u64::from_be_bytes(d.id.0[..8].try_into().unwrap()) as usize;
            (n, d.reasons.clone())
        })
        .collect()
}

fn w(s: &str) -> Option<Within> {
    Some(s.parse().unwrap())
}

/// restic's doc, "Removing snapshots according to a policy": backups every weekday for
/// two weeks, an extra one on Fridays, the Wednesday of the second week missed.
fn doc_example() -> Vec<Snapshot> {
    [
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
    ]
    .iter()
    .enumerate()
    .map(|(n, t)| snap(n, &format!("{}Z", t.replace(' ', "T")), &[]))
    .collect()
}

#[test]
fn restics_documented_example() {
    let list = doc_example();
    let now: Timestamp = "2025-05-03T00:00:00Z".parse().unwrap();
    let utc = TimeZone::UTC;
    // (policy, the snapshots kept, by their place in the list above)
    let daily = |why: &str| vec![why.to_string()];
    let cases: Vec<(Policy, Kept)> = vec![
        (
            // "forget --keep-daily 5 will keep only one snapshot per day for the last five
            // days that had a snapshot": the previous Friday's last one is kept.
            Policy {
                keep_daily: 5,
                ..Default::default()
            },
            [10, 8, 7, 6, 5]
                .map(|n| (n, daily("daily snapshot")))
                .into(),
        ),
        (
            // "--keep-within-daily 7d ... no backups from the first week will be kept".
            Policy {
                keep_within_daily: w("7d"),
                ..Default::default()
            },
            [10, 8, 7, 6].map(|n| (n, daily("daily within 7d"))).into(),
        ),
        (
            Policy {
                keep_last: 2,
                ..Default::default()
            },
            [10, 9].map(|n| (n, daily("last snapshot"))).into(),
        ),
        (
            // Two ISO weeks: the newest of each; the oldest week has counts left, so the
            // oldest snapshot is kept too.
            Policy {
                keep_weekly: 3,
                ..Default::default()
            },
            vec![
                (10, daily("weekly snapshot")),
                (5, daily("weekly snapshot")),
                (0, daily("oldest weekly snapshot")),
            ],
        ),
        (
            // keep-within is relative to the newest snapshot, not to now.
            Policy {
                keep_within: w("1d"),
                ..Default::default()
            },
            [10, 9].map(|n| (n, daily("within 1d"))).into(),
        ),
    ];
    for (policy, want) in cases {
        let got = apply_at(&list, &policy, &utc, now);
        assert_eq!(got.len(), list.len());
        assert_eq!(kept(&got), want, "{policy}");
    }
}

#[test]
fn buckets_are_in_local_time() {
    // 23:30 UTC on two days is 01:30 the next day in Berlin: two UTC days, and in Berlin
    // also two days, but other ones; 22:30 and 23:30 UTC on one day are two days in
    // Berlin (summer time, +2).
    let list = vec![
        snap(0, "2025-06-10T22:30:00Z", &[]),
        snap(1, "2025-06-10T21:30:00Z", &[]),
    ];
    let now: Timestamp = "2025-07-01T00:00:00Z".parse().unwrap();
    let p = Policy {
        keep_daily: 5,
        ..Default::default()
    };
    let utc = apply_at(&list, &p, &TimeZone::UTC, now);
    assert_eq!(kept(&utc).len(), 1 + 1, "UTC: one day, and the oldest");
    assert_eq!(kept(&utc)[1].1, ["oldest daily snapshot"]);
    let berlin = TimeZone::get("Europe/Berlin").unwrap();
    let local = apply_at(&list, &p, &berlin, now);
    assert_eq!(
        kept(&local),
        [
            (0, vec!["daily snapshot".to_string()]),
            (1, vec!["daily snapshot".to_string()])
        ]
    );
}

#[test]
fn hold_is_always_kept_and_says_so() {
    let mut list = doc_example();
    list[0].tags = vec!["hold".into()];
    list[3].tags = vec!["x".into(), "hold".into()];
    let now: Timestamp = "2025-05-03T00:00:00Z".parse().unwrap();
    let p = Policy {
        keep_last: 1,
        ..Default::default()
    };
    let got = kept(&apply_at(&list, &p, &TimeZone::UTC, now));
    assert_eq!(
        got,
        [
            (10, vec!["last snapshot".to_string()]),
            (3, vec!["hold".to_string()]),
            (0, vec!["hold".to_string()]),
        ]
    );
    // Held and kept by a rule: both are said.
    list[10].tags = vec!["hold".into()];
    let got = kept(&apply_at(&list, &p, &TimeZone::UTC, now));
    assert_eq!(got[0], (10, vec!["hold".into(), "last snapshot".into()]));
}

#[test]
fn durations_parse_as_restic() {
    let d: Within = "2y5m7d3h".parse().unwrap();
    assert_eq!(
        d,
        Within {
            years: 2,
            months: 5,
            days: 7,
            hours: 3
        }
    );
    assert_eq!(d.to_string(), "2y5m7d3h");
    assert_eq!("1y1d1m".parse::<Within>().unwrap().to_string(), "1y1m1d");
    for bad in ["", "1w", "5", "d", "1.5d", "-1d", "1 d"] {
        assert!(bad.parse::<Within>().is_err(), "{bad}");
    }
    // Go's AddDate: 31 March minus one month is 3 March (no 31 February).
    let t: Timestamp = "2025-03-31T12:00:00Z".parse().unwrap();
    let m = Within {
        months: 1,
        ..Default::default()
    };
    assert_eq!(
        m.before(t, &TimeZone::UTC),
        "2025-03-03T12:00:00Z".parse::<Timestamp>().unwrap()
    );
}

#[test]
fn policy_from_toml_names() {
    let p: Policy = serde_json::from_str(
        r#"{"keep-daily": 7, "keep-weekly": 2, "keep-within": "1m", "keep-tag": ["a,b"]}"#,
    )
    .unwrap();
    assert_eq!(p.keep_daily, 7);
    assert_eq!(p.keep_within, w("1m"));
    assert!(!p.is_empty());
    assert!(Policy::default().is_empty());
    assert!(Policy {
        keep_within: w("0d"),
        ..Default::default()
    }
    .is_empty());
    assert_eq!(
        p.to_string(),
        r#"keep 7 daily, 2 weekly snapshots, all snapshots with tags ["a,b"], all snapshots within 1m of the newest"#
    );
    assert!(serde_json::from_str::<Policy>(r#"{"keep-dayly": 7}"#).is_err());
}

#[test]
fn tag_lists_as_restic() {
    let t = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert!(has_tag_list(&t(&["a", "b"]), "a,b"));
    assert!(!has_tag_list(&t(&["a"]), "a,b"));
    assert!(has_tag_list(&t(&[]), ""));
    assert!(!has_tag_list(&t(&["a"]), ""));
    assert_eq!(
        "host".parse::<GroupBy>().unwrap(),
        GroupBy {
            host: true,
            source: false,
            tags: false
        }
    );
    assert!("".parse::<GroupBy>().is_ok());
    assert!("hosts".parse::<GroupBy>().is_err());
}

/// restic's `TestApplyPolicy`: its snapshot list, its policies, its golden files.
#[test]
fn restic_golden_files() {
    let list = restic_list();
    let p = |f: &dyn Fn(&mut Policy)| {
        let mut p = Policy::default();
        f(&mut p);
        p
    };
    const U: u32 = UNLIMITED;
    let policies: Vec<Policy> = vec![
        p(&|_| {}),
        p(&|p| p.keep_last = 10),
        p(&|p| p.keep_last = 15),
        p(&|p| p.keep_last = 99),
        p(&|p| p.keep_last = 200),
        p(&|p| p.keep_hourly = 20),
        p(&|p| p.keep_daily = 3),
        p(&|p| p.keep_daily = 10),
        p(&|p| p.keep_daily = 30),
        p(&|p| (p.keep_last, p.keep_daily) = (5, 5)),
        p(&|p| (p.keep_last, p.keep_daily) = (2, 10)),
        p(&|p| p.keep_weekly = 2),
        p(&|p| p.keep_weekly = 4),
        p(&|p| (p.keep_daily, p.keep_weekly) = (3, 4)),
        p(&|p| p.keep_monthly = 6),
        p(&|p| (p.keep_daily, p.keep_weekly, p.keep_monthly) = (2, 2, 6)),
        p(&|p| p.keep_yearly = 10),
        p(&|p| (p.keep_daily, p.keep_weekly, p.keep_monthly, p.keep_yearly) = (7, 2, 3, 10)),
        p(&|p| p.keep_tag = vec!["foo".into()]),
        p(&|p| p.keep_tag = vec!["foo,bar".into()]),
        p(&|p| p.keep_tag = vec!["foo".into(), "bar".into()]),
        p(&|p| p.keep_within = w("1d")),
        p(&|p| p.keep_within = w("2d")),
        p(&|p| p.keep_within = w("7d")),
        p(&|p| p.keep_within = w("1m")),
        p(&|p| p.keep_within = w("1m14d")),
        p(&|p| p.keep_within = w("1y1d1m")),
        p(&|p| p.keep_within = w("13d23h")),
        p(&|p| p.keep_within = w("2m2h")),
        p(&|p| p.keep_within = w("1y2m3d3h")),
        p(&|p| p.keep_within_hourly = w("1y2m3d3h")),
        p(&|p| p.keep_within_daily = w("1y2m3d3h")),
        p(&|p| p.keep_within_weekly = w("1y2m3d3h")),
        p(&|p| p.keep_within_monthly = w("1y2m3d3h")),
        p(&|p| p.keep_within_yearly = w("1y2m3d3h")),
        p(&|p| {
            p.keep_within = w("1h");
            p.keep_within_hourly = w("1d");
            p.keep_within_daily = w("7d");
            p.keep_within_weekly = w("1m");
            p.keep_within_monthly = w("1y");
            p.keep_within_yearly = w("9999y");
        }),
        p(&|p| p.keep_last = U),
        p(&|p| (p.keep_last, p.keep_hourly) = (U, U)),
        p(&|p| p.keep_hourly = U),
        p(&|p| (p.keep_daily, p.keep_weekly, p.keep_monthly, p.keep_yearly) = (3, 2, U, U)),
    ];
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/restic_policy");
    let key = |s: &Snapshot| (s.time, s.time_nanos, s.tags.clone());
    for (i, policy) in policies.iter().enumerate() {
        let golden: serde_json::Value = serde_json::from_slice(
            &std::fs::read(format!("{dir}/policy_keep_snapshots_{i}")).unwrap(),
        )
        .unwrap();
        let from_json = |v: &serde_json::Value| {
            let tags: Vec<&str> = v["tags"]
                .as_array()
                .map(|a| a.iter().map(|t| t.as_str().unwrap()).collect())
                .unwrap_or_default();
            key(&snap(0, v["time"].as_str().unwrap(), &tags))
        };
        let want: Vec<_> = (golden["keep"].as_array().into_iter().flatten())
            .map(from_json)
            .collect();
        let want_reasons: Vec<Vec<String>> = (golden["reasons"].as_array().into_iter())
            .flatten()
            .map(|r| {
                (r["matches"].as_array().into_iter().flatten())
                    .map(|m| m.as_str().unwrap().to_string())
                    .collect()
            })
            .collect();
        let got = apply_at(&list, policy, &TimeZone::UTC, Timestamp::now());
        assert_eq!(got.len(), list.len(), "case {i}");
        let by_id: BTreeMap<Id, &Snapshot> = list.iter().map(|s| (s.id, s)).collect();
        let got_keep: Vec<_> = (got.iter().filter(|d| d.keep))
            .map(|d| key(by_id[&d.id]))
            .collect();
        let got_reasons: Vec<Vec<String>> = (got.iter().filter(|d| d.keep))
            .map(|d| d.reasons.clone())
            .collect();
        assert_eq!(got_keep, want, "case {i}: {policy}");
        assert_eq!(got_reasons, want_reasons, "case {i}: {policy}");
    }
}

/// `testExpireSnapshots` of restic's `snapshot_policy_test.go`, in its order.
fn restic_list() -> Vec<Snapshot> {
    let raw: &[(&str, &[&str])] = &[
        ("2014-09-01 10:20:30", &[]),
        ("2014-09-02 10:20:30", &[]),
        ("2014-09-05 10:20:30", &[]),
        ("2014-09-06 10:20:30", &[]),
        ("2014-09-08 10:20:30", &[]),
        ("2014-09-09 10:20:30", &[]),
        ("2014-09-10 10:20:30", &[]),
        ("2014-09-11 10:20:30", &[]),
        ("2014-09-20 10:20:30", &[]),
        ("2014-09-22 10:20:30", &[]),
        ("2014-08-08 10:20:30", &[]),
        ("2014-08-10 10:20:30", &[]),
        ("2014-08-12 10:20:30", &[]),
        ("2014-08-13 10:20:30", &[]),
        ("2014-08-13 10:20:30.1", &[]),
        ("2014-08-15 10:20:30", &[]),
        ("2014-08-18 10:20:30", &[]),
        ("2014-08-20 10:20:30", &[]),
        ("2014-08-21 10:20:30", &[]),
        ("2014-08-22 10:20:30", &[]),
        ("2014-10-01 10:20:30", &["foo"]),
        ("2014-10-02 10:20:30", &["foo"]),
        ("2014-10-05 10:20:30", &["foo"]),
        ("2014-10-06 10:20:30", &["foo"]),
        ("2014-10-08 10:20:30", &["foo"]),
        ("2014-10-09 10:20:30", &["foo"]),
        ("2014-10-10 10:20:30", &["foo"]),
        ("2014-10-11 10:20:30", &["foo"]),
        ("2014-10-20 10:20:30", &["foo"]),
        ("2014-10-22 10:20:30", &["foo"]),
        ("2014-11-08 10:20:30", &["foo"]),
        ("2014-11-10 10:20:30", &["foo"]),
        ("2014-11-12 10:20:30", &["foo"]),
        ("2014-11-13 10:20:30", &["foo"]),
        ("2014-11-13 10:20:30.1", &["bar"]),
        ("2014-11-15 10:20:30", &["foo", "bar"]),
        ("2014-11-18 10:20:30", &[]),
        ("2014-11-20 10:20:30", &[]),
        ("2014-11-21 10:20:30", &[]),
        ("2014-11-22 10:20:30", &[]),
        ("2015-09-01 10:20:30", &[]),
        ("2015-09-02 10:20:30", &[]),
        ("2015-09-05 10:20:30", &[]),
        ("2015-09-06 10:20:30", &[]),
        ("2015-09-08 10:20:30", &[]),
        ("2015-09-09 10:20:30", &[]),
        ("2015-09-10 10:20:30", &[]),
        ("2015-09-11 10:20:30", &[]),
        ("2015-09-20 10:20:30", &[]),
        ("2015-09-22 10:20:30", &[]),
        ("2015-08-08 10:20:30", &[]),
        ("2015-08-10 10:20:30", &[]),
        ("2015-08-12 10:20:30", &[]),
        ("2015-08-13 10:20:30", &[]),
        ("2015-08-13 10:20:30.1", &[]),
        ("2015-08-15 10:20:30", &[]),
        ("2015-08-18 10:20:30", &[]),
        ("2015-08-20 10:20:30", &[]),
        ("2015-08-21 10:20:30", &[]),
        ("2015-08-22 10:20:30", &[]),
        ("2015-10-01 10:20:30", &[]),
        ("2015-10-02 10:20:30", &[]),
        ("2015-10-05 10:20:30", &[]),
        ("2015-10-06 10:20:30", &[]),
        ("2015-10-08 10:20:30", &[]),
        ("2015-10-09 10:20:30", &[]),
        ("2015-10-10 10:20:30", &[]),
        ("2015-10-11 10:20:30", &[]),
        ("2015-10-20 10:20:30", &[]),
        ("2015-10-22 10:20:30", &[]),
        ("2015-10-22 10:20:30", &[]),
        ("2015-10-22 10:20:30", &["foo", "bar"]),
        ("2015-10-22 10:20:30", &["foo", "bar"]),
        ("2015-10-22 10:20:30", &["foo", "bar"]),
        ("2015-11-08 10:20:30", &[]),
        ("2015-11-10 10:20:30", &[]),
        ("2015-11-12 10:20:30", &[]),
        ("2015-11-13 10:20:30", &[]),
        ("2015-11-13 10:20:30.1", &[]),
        ("2015-11-15 10:20:30", &[]),
        ("2015-11-18 10:20:30", &[]),
        ("2015-11-20 10:20:30", &[]),
        ("2015-11-21 10:20:30", &[]),
        ("2015-11-22 10:20:30", &[]),
        ("2016-01-01 01:02:03", &[]),
        ("2016-01-01 01:03:03", &[]),
        ("2016-01-01 07:08:03", &[]),
        ("2016-01-03 07:02:03", &[]),
        ("2016-01-04 10:23:03", &[]),
        ("2016-01-04 11:23:03", &[]),
        ("2016-01-04 12:23:03", &[]),
        ("2016-01-04 12:24:03", &[]),
        ("2016-01-04 12:28:03", &[]),
        ("2016-01-04 12:30:03", &[]),
        ("2016-01-04 16:23:03", &[]),
        ("2016-01-05 09:02:03", &[]),
        ("2016-01-06 08:02:03", &[]),
        ("2016-01-07 10:02:03", &[]),
        ("2016-01-08 20:02:03", &[]),
        ("2016-01-09 21:02:03", &[]),
        ("2016-01-12 21:02:03", &[]),
        ("2016-01-12 21:08:03", &[]),
        ("2016-01-18 12:02:03", &[]),
    ];
    raw.iter()
        .enumerate()
        .map(|(n, (t, tags))| snap(n, &format!("{}Z", t.replace(' ', "T")), tags))
        .collect()
}

fn memory_repo(version: Version) -> (Arc<MemoryStore>, Repository) {
    let store = Arc::new(MemoryStore::new());
    let opts = InitOptions {
        version,
        kdf: KdfParams::FOR_TESTS,
        ..Default::default()
    };
    let repo = Repository::init(store.clone(), b"pw", &opts).unwrap();
    (store, repo)
}

/// Removal: out of this host's record, a forget record other hosts read, the files gone;
/// legal hold; a dry run; in both formats.
#[test]
fn forget_writes_a_record_before_deleting_and_other_hosts_read_it() {
    for version in [Version::V1, Version::V2] {
        let (store, repo) = memory_repo(version);
        let mut ids = Vec::new();
        for (n, tags) in [(0, vec!["hold"]), (1, vec![]), (2, vec![]), (3, vec![])] {
            let mut s = snap(n, &format!("2025-01-0{}T10:00:00Z", n + 1), &tags);
            s.version = version.number();
            ids.push(repo.save_snapshot(&s).unwrap());
        }
        let here = tempfile::tempdir().unwrap();
        let there = tempfile::tempdir().unwrap();
        let (here, there) = (StateDir::new(here.path()), StateDir::new(there.path()));
        for st in [&here, &there] {
            let mut r = Record::of(st, &repo);
            assert!(r.observe_in(&repo, ids.iter().copied()).is_empty());
            r.save();
        }
        let mut opts = ForgetOptions {
            policy: Policy {
                keep_last: 1,
                ..Default::default()
            },
            dry_run: true,
            state: Some(here.clone()),
            ..Default::default()
        };
        let rep = forget(&repo, &opts).unwrap();
        let gone = [ids[2], ids[1]].map(|i| i.to_hex());
        assert_eq!(rep.removed, gone);
        assert_eq!(store.list("snapshots/").unwrap().len(), 4);
        assert!(store.list(FORGOTTEN_DIR).unwrap().is_empty());
        let items = &rep.groups[0].snapshots;
        assert_eq!(items[0].reasons, ["last snapshot"]);
        assert_eq!(items[3].reasons, ["hold"]);
        assert!(items[3].keep && !items[1].keep);

        opts.dry_run = false;
        let rep = forget(&repo, &opts).unwrap();
        assert_eq!(rep.removed, gone);
        let left: Vec<Id> = repo.snapshots().unwrap().iter().map(|s| s.id).collect();
        assert_eq!(left, [ids[0], ids[3]]);
        let (listed, warnings) = forgotten(&repo).unwrap();
        assert!(warnings.is_empty(), "{warnings:?}");
        assert_eq!(listed, BTreeSet::from([ids[1], ids[2]]));
        // Neither host takes them for a rollback.
        for st in [&here, &there] {
            let mut r = Record::of(st, &repo);
            assert!(r.observe_in(&repo, left.iter().copied()).is_empty());
            r.save();
            assert!(r.take_warnings().is_empty());
        }
        // Explicit ids: the held one stays.
        let rep = forget(
            &repo,
            &ForgetOptions {
                snapshots: vec![ids[0].to_hex()[..8].to_string(), ids[3].to_hex()],
                state: Some(here.clone()),
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(rep.held, [ids[0].to_hex()]);
        assert_eq!(rep.removed, [ids[3].to_hex()]);
        let left: Vec<Id> = repo.snapshots().unwrap().iter().map(|s| s.id).collect();
        assert_eq!(left, [ids[0]]);
        assert_eq!(store.list(FORGOTTEN_DIR).unwrap().len(), 2);
    }
}

/// A forget record under another name, or not sealed with the key, lists nothing.
#[test]
fn a_moved_or_forged_forget_record_lists_nothing() {
    let (store, repo) = memory_repo(Version::V2);
    let id = repo
        .save_snapshot(&snap(1, "2025-01-01T10:00:00Z", &[]))
        .unwrap();
    let (path, _) = remove_snapshots(&repo, &[id], None).unwrap();
    let path = path.unwrap();
    assert_eq!(forgotten(&repo).unwrap().0, BTreeSet::from([id]));
    let bytes = store.get(&path).unwrap();
    store.delete(&path).unwrap();
    let moved = format!("{FORGOTTEN_DIR}{}", "cd".repeat(32));
    store.put(&moved, &bytes).unwrap();
    let forged = format!("{FORGOTTEN_DIR}{}", "ab".repeat(32));
    let json = format!(r#"{{"hostname":"x","time":0,"snapshots":["{id}"]}}"#);
    store.put(&forged, json.as_bytes()).unwrap();
    let (ids, warnings) = forgotten(&repo).unwrap();
    assert!(ids.is_empty());
    assert_eq!(warnings.len(), 2, "{warnings:?}");
    assert!(warnings.iter().any(|w| w.contains(&moved)));
    assert!(warnings.iter().any(|w| w.contains(&forged)));
}

/// The policy applies per host and source; `hosts` and `tags` narrow what it sees.
#[test]
fn groups_and_filters() {
    let (_store, repo) = memory_repo(Version::V2);
    let save = |n: usize, host: &str, source: &str, tags: &[&str]| {
        let mut s = snap(n, &format!("2025-01-{:02}T10:00:00Z", n + 1), tags);
        s.hostname = host.into();
        s.source = source.into();
        repo.save_snapshot(&s).unwrap()
    };
    let a1 = save(0, "a", "maildir:/x", &[]);
    let a2 = save(1, "a", "maildir:/x", &["t"]);
    let a3 = save(2, "a", "maildir:/y", &[]);
    let b1 = save(3, "b", "maildir:/x", &["t"]);
    let b2 = save(4, "b", "maildir:/x", &[]);
    let last1 = Policy {
        keep_last: 1,
        ..Default::default()
    };
    let run = |opts: ForgetOptions| {
        let mut r = forget(
            &repo,
            &ForgetOptions {
                dry_run: true,
                ..opts
            },
        )
        .unwrap();
        r.removed.sort();
        r
    };
    let hex = |ids: &[Id]| {
        let mut v: Vec<String> = ids.iter().map(Id::to_hex).collect();
        v.sort();
        v
    };
    let r = run(ForgetOptions {
        policy: last1.clone(),
        ..Default::default()
    });
    assert_eq!(r.groups.len(), 3);
    assert_eq!(r.removed, hex(&[a1, b1]));
    let r = run(ForgetOptions {
        policy: last1.clone(),
        hosts: vec!["a".into()],
        ..Default::default()
    });
    assert_eq!(r.removed, hex(&[a1]));
    let r = run(ForgetOptions {
        policy: last1.clone(),
        group_by: "".parse().unwrap(),
        ..Default::default()
    });
    assert_eq!(r.groups.len(), 1);
    assert_eq!(r.removed, hex(&[a1, a2, a3, b1]));
    let r = run(ForgetOptions {
        policy: last1.clone(),
        tags: vec!["t".into()],
        group_by: "".parse().unwrap(),
        ..Default::default()
    });
    assert_eq!(r.removed, hex(&[a2]));
    let _ = b2;
    // No policy and no ids, or both: refused.
    assert!(matches!(
        forget(&repo, &ForgetOptions::default()),
        Err(Error::InvalidInput(_))
    ));
    assert!(matches!(
        forget(
            &repo,
            &ForgetOptions {
                policy: last1,
                snapshots: vec!["latest".into()],
                ..Default::default()
            }
        ),
        Err(Error::InvalidInput(_))
    ));
}

/// On an append-only host `forget` writes a request and removes nothing; the maintenance
/// host applies it, but never to a held snapshot or the newest of a host and source,
/// which wait; a request whose snapshots are all gone is deleted.
#[test]
fn an_append_only_hosts_forget_is_a_request_the_maintenance_host_applies() {
    let (store, maintenance) = memory_repo(Version::V2);
    let mut host = Repository::open(store.clone(), b"pw").unwrap();
    host.set_append_only();
    let mut ids = Vec::new();
    for (n, tags) in [(0, vec![]), (1, vec!["hold"]), (2, vec![]), (3, vec![])] {
        let s = snap(n, &format!("2025-01-0{}T10:00:00Z", n + 1), &tags);
        ids.push(host.save_snapshot(&s).unwrap());
    }
    let rep = forget(
        &host,
        &ForgetOptions {
            snapshots: ids.iter().map(Id::to_hex).collect(),
            ..Default::default()
        },
    )
    .unwrap();
    assert!(rep.requested);
    assert_eq!(
        rep.held,
        [ids[1].to_hex()],
        "held ones are not even asked for"
    );
    assert_eq!(
        host.snapshots().unwrap().len(),
        4,
        "a request removes nothing"
    );
    assert!(
        forgotten(&host).unwrap().0.is_empty(),
        "nor counts as forgotten"
    );
    assert_eq!(store.list(FORGOTTEN_DIR).unwrap().len(), 1);
    // Asked for again (tomorrow's run of the same policy): no second request.
    let (again, _) = remove_snapshots(&host, &[ids[0], ids[2]], None).unwrap();
    assert_eq!(again, None);
    assert_eq!(store.list(FORGOTTEN_DIR).unwrap().len(), 1);
    // The held snapshot asked for anyway (as an intruder would): it waits.
    let (_, _) = remove_snapshots(&host, &[ids[1]], None).unwrap();
    assert!(matches!(
        apply_requests(&host, true),
        Err(Error::AppendOnly { .. })
    ));
    // Listed, not applied, without --apply-requests.
    let listed = apply_requests(&maintenance, false).unwrap();
    assert!(listed.applied.is_empty());
    assert_eq!(listed.waiting.len(), 4, "{:?}", listed.waiting);
    assert_eq!(maintenance.snapshots().unwrap().len(), 4);
    let done = apply_requests(&maintenance, true).unwrap();
    let applied: BTreeSet<String> = done.applied.iter().cloned().collect();
    assert_eq!(
        applied,
        BTreeSet::from([ids[0], ids[2]].map(|i| i.to_hex()))
    );
    let waiting = done.waiting.join("\n");
    assert!(
        waiting.contains(&format!("{}: under legal hold", ids[1].to_hex())),
        "{waiting}"
    );
    assert!(
        waiting.contains(&format!("{}: the newest", ids[3].to_hex())),
        "{waiting}"
    );
    let left: Vec<Id> = maintenance
        .snapshots()
        .unwrap()
        .iter()
        .map(|s| s.id)
        .collect();
    assert_eq!(left, [ids[1], ids[3]]);
    assert_eq!(
        forgotten(&maintenance).unwrap().0,
        BTreeSet::from([ids[0], ids[2]])
    );
    assert_eq!(
        done.records_removed, 0,
        "both requests still wait for something"
    );
    // Once a newer snapshot exists and the hold is gone, the rest is applied and the
    // requests are done with.
    let newer = snap(4, "2025-01-05T10:00:00Z", &[]);
    maintenance.save_snapshot(&newer).unwrap();
    let unheld = snap(1, "2025-01-02T10:00:00Z", &[]);
    maintenance.save_snapshot(&unheld).unwrap();
    remove_snapshots(&maintenance, &[ids[1]], None).unwrap();
    let done = apply_requests(&maintenance, true).unwrap();
    assert_eq!(done.applied, [ids[3].to_hex()]);
    assert_eq!(done.records_removed, 2);
    assert!(crate::repo::forgotten::requests(&maintenance)
        .unwrap()
        .0
        .is_empty());
}
