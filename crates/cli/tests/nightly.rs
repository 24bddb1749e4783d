//! Scheduled operation (issue 13): `mailvault run --profile` from a configuration file,
//! the metrics file (parsed by the Prometheus project's own Python parser), and the
//! systemd units of contrib/systemd (checked by `systemd-analyze verify`).
#![allow(clippy::unwrap_used)]

mod common;

use common::Env;
use serde_json::Value;
use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A store `<root>/example.org/<user>/Maildir` with messages `first..first+n` of `user`.
fn store(root: &Path, user: &str, first: usize, n: usize) {
    let md = root.join("example.org").join(user).join("Maildir");
    for sub in ["cur", "new", "tmp"] {
        fs::create_dir_all(md.join(sub)).unwrap();
    }
    for i in first..first + n {
        let body = format!(
            "From: a@example.org\nTo: {user}@example.org\nSubject: {user} {i}\n\nmessage {i} of {user}\n"
        );
        fs::write(
            md.join("cur").join(format!("17000{i:05}.M1P1.mx:2,S")),
            body,
        )
        .unwrap();
    }
}

/// The nightly profile of the tests: two Maildir stores, `extra` added to the profile.
fn config(e: &Env, extra: &str) -> PathBuf {
    let text = format!(
        r#"
[profiles.nightly]
repository = "{repo}"
password-file = "{pass}"
tags = ["nightly"]
metrics-file = "{metrics}"
{extra}

[[profiles.nightly.sources]]
source = "maildir:{a}"

[[profiles.nightly.sources]]
source = "maildir:{b}"
tags = ["second"]
"#,
        repo = e.location().to_str().unwrap(),
        pass = e.path("pass").display(),
        metrics = e.path("metrics/mailvault.prom").display(),
        a = e.path("a").display(),
        b = e.path("b").display(),
    );
    let path = e.path("mailvault.toml");
    fs::write(&path, text).unwrap();
    path
}

/// One sample of the metrics file.
#[derive(Debug, Clone)]
struct Sample {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

/// The Python interpreter that has python3-prometheus-client (Debian's, in /usr/bin).
fn python() -> &'static str {
    for p in ["/usr/bin/python3", "python3"] {
        let ok = Command::new(p)
            .args(["-c", "import prometheus_client.parser"])
            .status()
            .is_ok_and(|s| s.success());
        if ok {
            return p;
        }
    }
    panic!("python3 with prometheus_client is missing: run scripts/setup.sh (Debian package python3-prometheus-client)");
}

/// The samples of a metrics file, parsed by `prometheus_client.parser` (it raises on
/// anything that is not the text format), and the type of every family.
fn parse_metrics(path: &Path) -> (Vec<Sample>, BTreeMap<String, String>) {
    let script = r#"
import json, sys
from prometheus_client.parser import text_string_to_metric_families
out = {"samples": [], "types": {}}
for f in text_string_to_metric_families(open(sys.argv[1]).read()):
    out["types"][f.name] = f.type
    for s in f.samples:
        out["samples"].append({"name": s.name, "labels": s.labels, "value": s.value})
print(json.dumps(out))
"#;
    let o = Command::new(python())
        .args(["-c", script])
        .arg(path)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "the metrics file does not parse:\n{}\n{}",
        String::from_utf8_lossy(&o.stderr),
        fs::read_to_string(path).unwrap_or_default()
    );
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    let samples = v["samples"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| Sample {
            name: s["name"].as_str().unwrap().into(),
            labels: serde_json::from_value(s["labels"].clone()).unwrap(),
            value: s["value"].as_f64().unwrap(),
        })
        .collect();
    let types = serde_json::from_value(v["types"].clone()).unwrap();
    (samples, types)
}

/// The value of `name` for `command` (and `source`, `""` for the whole command); `None`
/// when there is no such sample.
fn value(samples: &[Sample], name: &str, command: &str, source: &str) -> Option<f64> {
    let found: Vec<&Sample> = samples
        .iter()
        .filter(|s| {
            s.name == name && s.labels["command"] == command && s.labels["source"] == source
        })
        .collect();
    assert!(found.len() <= 1, "{name} {command} {source}: {found:?}");
    found.first().map(|s| s.value)
}

/// Size of every file below `dir`.
fn du(dir: &Path) -> u64 {
    let mut n = 0;
    for e in fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        let m = e.metadata().unwrap();
        n += if m.is_dir() { du(&e.path()) } else { m.len() };
    }
    n
}

/// Snapshots of the repository: (source, tags), oldest first.
fn snapshots(e: &Env) -> Vec<(String, Vec<String>)> {
    let v = e.json(0, &["snapshots"]);
    v.as_array()
        .unwrap()
        .iter()
        .map(|s| {
            let tags = s["tags"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| t.as_str().unwrap().to_string())
                .collect();
            (s["source"].as_str().unwrap().to_string(), tags)
        })
        .collect()
}

#[test]
fn the_nightly_profile_runs_end_to_end() {
    let e = Env::new();
    store(&e.path("a"), "alice", 0, 5);
    store(&e.path("b"), "bob", 0, 3);
    fs::create_dir_all(e.path("metrics")).unwrap();
    e.expect(0, &["init"]);
    let policy = "prune-every = \"7d\"\nindex = true\n[profiles.nightly.forget]\nkeep-last = 1\n";
    let cfg = config(&e, policy);
    let cfg = cfg.to_str().unwrap();
    let metrics = e.path("metrics/mailvault.prom");

    // The profile names the repository and the password file: the environment's are not
    // needed (and must not differ).
    let run = |code: i32| {
        let mut c = e.cmd(&["--config", cfg, "run", "--profile", "nightly", "--json"]);
        c.env_remove("MAILVAULT_REPOSITORY")
            .env_remove("MAILVAULT_PASSWORD_FILE");
        let o = c.output().unwrap();
        assert_eq!(
            o.status.code(),
            Some(code),
            "stdout:\n{}\nstderr:\n{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        serde_json::from_slice::<Value>(&o.stdout).unwrap()
    };
    let r = run(0);
    assert_eq!(r["backups"].as_array().unwrap().len(), 2, "{r}");
    assert_eq!(r["backups"][0]["report"]["items_total"], 5, "{r}");
    assert_eq!(r["backups"][1]["report"]["items_total"], 3, "{r}");
    assert_eq!(r["check"]["status"], "done", "{r}");
    assert_eq!(r["errors"].as_array().unwrap().len(), 0, "{r}");
    assert_eq!(r["index"]["status"], "done", "{r}");
    // Each backup indexed what it read; the index step found nothing left.
    assert_eq!(r["backups"][0]["report"]["index"]["indexed"], 5, "{r}");
    assert_eq!(r["backups"][1]["report"]["index"]["indexed"], 3, "{r}");
    assert_eq!(r["index"]["report"]["indexed"], 0, "{r}");
    assert_eq!(r["index"]["report"]["already_indexed"], 8, "{r}");
    // Nothing to forget yet; the first prune is due (none was recorded).
    assert_eq!(r["forget"]["status"], "done", "{r}");
    assert_eq!(
        r["forget"]["report"]["removed"].as_array().unwrap().len(),
        0,
        "{r}"
    );
    assert_eq!(r["prune"]["status"], "done", "{r}");
    let a = format!("maildir:{}", e.path("a").display());
    let b = format!("maildir:{}", e.path("b").display());
    assert_eq!(
        snapshots(&e),
        [
            (a.clone(), vec!["nightly".to_string()]),
            (b.clone(), vec!["nightly".to_string(), "second".to_string()])
        ]
    );

    let (s, types) = parse_metrics(&metrics);
    assert!(types.values().all(|t| t == "gauge"), "{types:?}");
    assert_eq!(value(&s, "mailvault_items", "run", &a), Some(5.0));
    assert_eq!(value(&s, "mailvault_items", "run", &b), Some(3.0));
    assert!(value(&s, "mailvault_read_bytes", "run", &a).unwrap() > 0.0);
    assert!(value(&s, "mailvault_added_bytes", "run", &b).unwrap() > 0.0);
    assert_eq!(value(&s, "mailvault_errors", "run", &a), Some(0.0));
    assert_eq!(value(&s, "mailvault_success", "run", ""), Some(1.0));
    assert_eq!(value(&s, "mailvault_errors", "run", ""), Some(0.0));
    assert!(value(&s, "mailvault_duration_seconds", "run", "").unwrap() > 0.0);
    let first_success = value(&s, "mailvault_last_success_timestamp_seconds", "run", "").unwrap();
    assert!(first_success > 1.7e9, "{first_success}");
    assert_eq!(
        value(&s, "mailvault_repository_bytes", "run", ""),
        Some(du(&e.repo()) as f64)
    );
    for x in &s {
        assert_eq!(x.labels["profile"], "nightly", "{x:?}");
        assert_eq!(
            x.labels["repository"],
            e.repo().display().to_string(),
            "{x:?}"
        );
    }

    // Another command's series join the file, and stay after the next run.
    e.expect(
        0,
        &["--metrics-file", metrics.to_str().unwrap(), "snapshots"],
    );

    // The first snapshot of `b` goes under legal hold.
    let held = e.json(0, &["snapshots"])[1]["id"]
        .as_str()
        .unwrap()
        .to_string();
    e.expect(0, &["tag", &held, "--add", "hold"]);

    // The second night: two new messages in one store, nothing new in the other. The
    // policy keeps the newest snapshot of each source, and the one under hold.
    store(&e.path("a"), "alice", 5, 2);
    std::thread::sleep(std::time::Duration::from_millis(1100));
    let r = run(0);
    assert_eq!(r["backups"][0]["report"]["items_total"], 7, "{r}");
    assert_eq!(r["backups"][0]["report"]["items_new"], 2, "{r}");
    assert_eq!(r["backups"][1]["report"]["items_new"], 0, "{r}");
    assert_eq!(
        r["forget"]["report"]["removed"].as_array().unwrap().len(),
        1,
        "{r}"
    );
    let summary = r["forget"]["summary"].as_str().unwrap();
    assert!(
        summary.contains("1 snapshots removed, 3 kept (1 under legal hold)"),
        "{r}"
    );
    assert_eq!(r["prune"]["status"], "skipped", "{r}");
    assert!(
        r["prune"]["reason"].as_str().unwrap().contains("next due"),
        "{r}"
    );
    // The check after the forget finds no rollback: the forgotten snapshot left this
    // host's record.
    assert_eq!(
        r["check"]["report"]["errors"].as_array().unwrap().len(),
        0,
        "{r}"
    );
    let snaps = snapshots(&e);
    assert_eq!(snaps.len(), 3, "{snaps:?}");
    assert_eq!(snaps.iter().filter(|s| s.0 == a).count(), 1, "{snaps:?}");
    assert!(
        snaps.iter().any(|s| s.1.contains(&"hold".to_string())),
        "{snaps:?}"
    );
    let (s, _) = parse_metrics(&metrics);
    assert_eq!(value(&s, "mailvault_items", "run", &a), Some(7.0));
    assert_eq!(value(&s, "mailvault_read_bytes", "run", &b), Some(0.0));
    assert!(
        value(&s, "mailvault_last_success_timestamp_seconds", "run", "").unwrap() > first_success
    );
    assert_eq!(value(&s, "mailvault_success", "snapshots", ""), Some(1.0));
    assert_eq!(value(&s, "mailvault_success", "run", ""), Some(1.0));
    assert_eq!(
        value(&s, "mailvault_repository_bytes", "run", ""),
        Some(du(&e.repo()) as f64)
    );

    // A week later (the recorded prune moved back): the prune is due again, and what the
    // forgotten snapshot alone used goes.
    let dir = e.state_dir().join("prune");
    let files: Vec<_> = fs::read_dir(&dir)
        .unwrap()
        .map(|f| f.unwrap().path())
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    let last: u64 = fs::read_to_string(&files[0])
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    fs::write(&files[0], format!("{}\n", last - 8 * 86_400)).unwrap();
    let r = run(0);
    assert_eq!(r["prune"]["status"], "done", "{r}");
    assert!(
        r["prune"]["report"]["bytes_freed"].as_u64().unwrap() > 0,
        "{r}"
    );
    let now: u64 = fs::read_to_string(&files[0])
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(now >= last, "{now} {last}");
    e.expect(0, &["check", "--read-data"]);
    // Every remaining snapshot restores byte for byte (the stores did not change since).
    let snaps = e.json(0, &["snapshots"]);
    assert_eq!(snaps.as_array().unwrap().len(), 3, "{snaps}");
    for (i, s) in snaps.as_array().unwrap().iter().enumerate() {
        let target = e.path(&format!("restored-{i}"));
        let t = format!("maildir:{}", target.display());
        e.expect(0, &["restore", s["id"].as_str().unwrap(), "--target", &t]);
        let source = s["source"]
            .as_str()
            .unwrap()
            .strip_prefix("maildir:")
            .unwrap();
        common::assert_same_files(&target, Path::new(source));
    }
}

#[test]
fn the_nightly_profile_runs_on_object_storage() {
    let e = Env::s3("nightly");
    store(&e.path("a"), "alice", 0, 3);
    store(&e.path("b"), "bob", 0, 2);
    fs::create_dir_all(e.path("metrics")).unwrap();
    e.expect(0, &["init"]);
    let policy = "prune-every = \"7d\"\n[profiles.nightly.forget]\nkeep-last = 1\n";
    let cfg = config(&e, policy);
    for night in 0..2 {
        store(&e.path("a"), "alice", 3 + night, 1);
        let mut c = e.cmd(&[
            "--config",
            cfg.to_str().unwrap(),
            "run",
            "--profile",
            "nightly",
            "--json",
        ]);
        c.env_remove("MAILVAULT_REPOSITORY");
        let o = c.output().unwrap();
        assert!(
            o.status.success(),
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        let r: Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(r["backups"][0]["report"]["items_total"], 4 + night, "{r}");
        assert_eq!(r["check"]["status"], "done", "{r}");
        assert_eq!(
            r["check"]["report"]["errors"].as_array().unwrap().len(),
            0,
            "{r}"
        );
        assert_eq!(
            r["forget"]["report"]["removed"].as_array().unwrap().len(),
            2 * night,
            "{r}"
        );
        let prune = ["done", "skipped"][night];
        assert_eq!(r["prune"]["status"], prune, "{r}");
        assert!(r["storage"]["requests"]["get"].as_u64().unwrap() > 0, "{r}");
    }
    assert_eq!(snapshots(&e).len(), 2);
    let (s, _) = parse_metrics(&e.path("metrics/mailvault.prom"));
    let a = format!("maildir:{}", e.path("a").display());
    assert_eq!(value(&s, "mailvault_items", "run", &a), Some(5.0));
    assert!(value(&s, "mailvault_repository_bytes", "run", "").unwrap() > 0.0);
    for x in &s {
        assert_eq!(
            x.labels["repository"],
            e.location().to_str().unwrap(),
            "{x:?}"
        );
    }
}

#[test]
fn a_failing_source_is_reported_and_the_others_still_run() {
    let e = Env::new();
    store(&e.path("b"), "bob", 0, 3);
    fs::create_dir_all(e.path("metrics")).unwrap();
    e.expect(0, &["init"]);
    // Source `a` does not exist.
    let cfg = config(&e, "");
    let metrics = e.path("metrics/mailvault.prom");
    let out = e.expect(
        1,
        &[
            "--config",
            cfg.to_str().unwrap(),
            "run",
            "--profile",
            "nightly",
        ],
    );
    let a = format!("maildir:{}", e.path("a").display());
    let b = format!("maildir:{}", e.path("b").display());
    assert!(out.contains("FAILED"), "{out}");
    assert!(out.contains(&format!("backup {a}:")), "{out}");
    assert_eq!(snapshots(&e).len(), 1);
    assert_eq!(snapshots(&e)[0].0, b);
    let (s, _) = parse_metrics(&metrics);
    assert_eq!(value(&s, "mailvault_success", "run", &a), Some(0.0));
    assert_eq!(value(&s, "mailvault_errors", "run", &a), Some(1.0));
    assert_eq!(
        value(&s, "mailvault_last_success_timestamp_seconds", "run", &a),
        None
    );
    assert_eq!(value(&s, "mailvault_success", "run", &b), Some(1.0));
    assert_eq!(value(&s, "mailvault_items", "run", &b), Some(3.0));
    assert_eq!(value(&s, "mailvault_success", "run", ""), Some(0.0));
    assert_eq!(value(&s, "mailvault_errors", "run", ""), Some(1.0));
    assert_eq!(
        value(&s, "mailvault_last_success_timestamp_seconds", "run", ""),
        None
    );
}

#[test]
fn every_command_writes_metrics_even_when_it_fails() {
    let e = Env::new();
    let metrics = e.path("m.prom");
    let m = metrics.to_str().unwrap();
    // No repository there: the command fails, its metrics say so.
    e.expect(2, &["--metrics-file", m, "snapshots"]);
    let (s, _) = parse_metrics(&metrics);
    assert_eq!(value(&s, "mailvault_success", "snapshots", ""), Some(0.0));
    assert_eq!(value(&s, "mailvault_errors", "snapshots", ""), Some(1.0));
    assert_eq!(
        value(
            &s,
            "mailvault_last_success_timestamp_seconds",
            "snapshots",
            ""
        ),
        None
    );
    assert!(value(&s, "mailvault_last_run_timestamp_seconds", "snapshots", "").is_some());
    // A backup: its series per source, beside those of the failed command.
    store(&e.path("a"), "alice", 0, 4);
    e.expect(0, &["init"]);
    let src = format!("maildir:{}", e.path("a").display());
    e.expect(0, &["--metrics-file", m, "backup", &src]);
    e.expect(0, &["--metrics-file", m, "snapshots"]);
    let (s, _) = parse_metrics(&metrics);
    assert_eq!(value(&s, "mailvault_items", "backup", &src), Some(4.0));
    assert_eq!(value(&s, "mailvault_success", "backup", ""), Some(1.0));
    assert_eq!(value(&s, "mailvault_success", "snapshots", ""), Some(1.0));
    let ok = value(
        &s,
        "mailvault_last_success_timestamp_seconds",
        "snapshots",
        "",
    )
    .unwrap();
    // A later failure keeps the time of the last success.
    fs::write(e.path("pass"), "wrong\n").unwrap();
    e.expect(2, &["--metrics-file", m, "snapshots"]);
    let (s, _) = parse_metrics(&metrics);
    assert_eq!(value(&s, "mailvault_success", "snapshots", ""), Some(0.0));
    assert_eq!(
        value(
            &s,
            "mailvault_last_success_timestamp_seconds",
            "snapshots",
            ""
        ),
        Some(ok)
    );
    assert_eq!(value(&s, "mailvault_items", "backup", &src), Some(4.0));
    let mode = fs::metadata(&metrics).unwrap().permissions();
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&mode) & 0o777,
        0o644
    );
}

#[test]
fn configuration_errors_name_the_key_the_file_and_the_profiles() {
    let e = Env::new();
    let cfg = config(&e, "keep-daily = 7");
    let c = cfg.to_str().unwrap();
    let out = e.expect(2, &["--config", c, "run", "--profile", "nightly"]);
    assert!(out.contains("keep-daily") && out.contains(c), "{out}");
    let cfg = config(&e, "");
    let out = e.expect(2, &["--config", c, "run", "--profile", "weekly"]);
    assert!(
        out.contains("\"weekly\"") && out.contains("nightly"),
        "{out}"
    );
    // The environment's repository differs from the profile's: refused, not guessed.
    let mut cmd = e.cmd(&[
        "--config",
        cfg.to_str().unwrap(),
        "run",
        "--profile",
        "nightly",
    ]);
    cmd.env("MAILVAULT_REPOSITORY", e.path("other"));
    let o = cmd.output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("give only one"), "{err}");
    // A password file others can read is warned about (the repository is not there: the
    // run then fails).
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(e.path("pass"), fs::Permissions::from_mode(0o644)).unwrap();
    let mut cmd = e.cmd(&[
        "--config",
        cfg.to_str().unwrap(),
        "run",
        "--profile",
        "nightly",
    ]);
    cmd.env_remove("MAILVAULT_REPOSITORY");
    let o = cmd.output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("can be read by others") && err.contains("chmod 600"),
        "{err}"
    );
    fs::set_permissions(e.path("pass"), fs::Permissions::from_mode(0o600)).unwrap();
    let o = cmd.output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!err.contains("can be read by others"), "{err}");
    // MAILVAULT_CONFIG names the file too.
    let mut cmd = e.cmd(&["run", "--profile", "weekly"]);
    cmd.env("MAILVAULT_CONFIG", &cfg);
    let o = cmd.output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("weekly"));
}

/// `systemd-analyze`, or `None` when it is missing outside CI (CI must run the test).
fn systemd_analyze() -> Option<&'static str> {
    let there = Command::new("systemd-analyze")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if there {
        return Some("systemd-analyze");
    }
    assert!(
        std::env::var_os("MAILVAULT_CI").is_none(),
        "systemd-analyze is missing: run scripts/setup.sh (Debian package systemd)"
    );
    eprintln!("skipped: systemd-analyze is missing (Debian package systemd)");
    None
}

#[test]
fn the_systemd_units_verify_and_run_the_profile() {
    let Some(analyze) = systemd_analyze() else {
        return;
    };
    let e = Env::new();
    let contrib = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../contrib/systemd");
    let units = e.path("units");
    fs::create_dir_all(&units).unwrap();
    let cfg = config(&e, "");
    let bin = env!("CARGO_BIN_EXE_mailvault");
    let mut exec = None;
    let names = [
        "mailvault-nightly.service",
        "mailvault-nightly.timer",
        "mailvault-serve.service",
    ];
    for name in names {
        let text = fs::read_to_string(contrib.join(name)).unwrap();
        // The unit as installed, with this build's binary and the test's configuration.
        let text = text
            .replace("/usr/local/bin/mailvault", bin)
            .replace("/etc/mailvault/mailvault.toml", cfg.to_str().unwrap());
        if let Some(l) = (text.lines().find_map(|l| l.strip_prefix("ExecStart=")))
            .filter(|_| name == "mailvault-nightly.service")
        {
            exec = Some(l.to_string());
        }
        fs::write(units.join(name), text).unwrap();
    }
    let o = Command::new(analyze)
        .arg("verify")
        .args(names.map(|n| units.join(n)))
        .output()
        .unwrap();
    // Unknown keys and bad values are only warnings for systemd: any output fails.
    assert!(
        o.status.success() && o.stderr.is_empty() && o.stdout.is_empty(),
        "systemd-analyze verify:\n{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    // Its command line runs the profile.
    store(&e.path("a"), "alice", 0, 2);
    store(&e.path("b"), "bob", 0, 2);
    fs::create_dir_all(e.path("metrics")).unwrap();
    e.expect(0, &["init"]);
    let exec = exec.unwrap();
    let mut words = exec.split_whitespace();
    assert_eq!(words.next(), Some(bin));
    let args: Vec<&str> = words.collect();
    let mut c = e.cmd(&args);
    c.env_remove("MAILVAULT_REPOSITORY")
        .env_remove("MAILVAULT_PASSWORD_FILE");
    let o = c.output().unwrap();
    assert!(
        o.status.success(),
        "{exec}:\n{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(snapshots(&e).len(), 2);
}

/// A `run` killed while its first backup indexes what it reads: no split is left of it
/// (no snapshot holds those contents), and the next run indexes all of it (the packs it
/// resumes hold contents the repository now has: indexed after the backup) and `check`
/// finds the index whole.
#[test]
fn a_run_killed_while_it_indexes_is_finished_by_the_next() {
    let e = Env::new();
    const N: usize = 3000;
    store(&e.path("a"), "alice", 0, N);
    store(&e.path("b"), "bob", 0, 1);
    e.expect(0, &["init"]);
    let cfg = config(&e, "index = true\n");
    let cfg = cfg.to_str().unwrap();
    let run = || {
        let mut c = e.cmd(&["--config", cfg, "run", "--profile", "nightly", "--json"]);
        c.env_remove("MAILVAULT_REPOSITORY")
            .env_remove("MAILVAULT_PASSWORD_FILE");
        c
    };
    let snapshots = || {
        fs::read_dir(e.repo().join("snapshots"))
            .map(|d| d.count())
            .unwrap_or(0)
    };
    // A split being built in the cache, by the first backup.
    let building = || !common::named(&e.path("cache"), ".build-").is_empty();
    let mut child = run().stdout(std::process::Stdio::null()).spawn().unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while !building() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    assert!(
        child.try_wait().unwrap().is_none() && snapshots() == 0,
        "the first backup finished before it could be killed: make the store bigger"
    );
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(
        !e.repo().join("search").exists()
            || fs::read_dir(e.repo().join("search")).unwrap().count() == 0,
        "a killed backup leaves no split"
    );
    let o = run().output().unwrap();
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let r: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(r["index"]["status"], "done", "{r}");
    assert_eq!(r["index"]["report"]["contents"], (N + 1) as u64, "{r}");
    let check = e.json(0, &["check"]);
    assert_eq!(check["search"]["not_indexed"], 0, "{}", check["search"]);
    assert_eq!(check["errors"].as_array().unwrap().len(), 0, "{check}");
    let found = e.json(0, &["search", "--limit", "1", "alice"]);
    assert_eq!(found["total"], N as u64, "{found}");
}
