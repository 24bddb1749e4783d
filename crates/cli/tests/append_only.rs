//! Issue 30: mail servers that back up with credentials that cannot delete, and a
//! maintenance host that can (docs/security.md). On a real MinIO: the mail servers'
//! credentials are the root user's narrowed by an IAM policy without `s3:DeleteObject`
//! (STS AssumeRole), and MinIO's audit log says which requests each set of credentials
//! made, allowed or denied.
#![allow(clippy::unwrap_used)]

mod common;

use common::{assert_same_files, Env};
use mailvault_core::store::{parse_s3_url, Credentials, S3Options, S3Store, Store};
use mailvault_core::testing::minio::{Minio, REGION};
use mailvault_corpus::{mutate, MutationSpec};
use serde_json::Value;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// What a mail server may do in its bucket: read, list and create objects. No delete
/// (docs/security.md gives the same policy).
fn host_policy(bucket: &str) -> String {
    format!(
        r#"{{"Version":"2012-10-17","Statement":[
  {{"Effect":"Allow","Action":["s3:ListBucket","s3:GetBucketLocation"],"Resource":["arn:aws:s3:::{bucket}"]}},
  {{"Effect":"Allow","Action":["s3:GetObject","s3:PutObject"],"Resource":["arn:aws:s3:::{bucket}/*"]}}]}}"#
    )
}

/// A mail server: its own credentials, cache and state, `--append-only` (by the
/// environment, as a systemd unit or profile sets it).
struct Host<'a> {
    e: &'a Env,
    name: &'static str,
    creds: Credentials,
    append_only: bool,
}

impl Host<'_> {
    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = self.e.cmd(args);
        for (k, v) in Minio::shared().env_with(&self.creds) {
            match v {
                Some(v) => c.env(k, v),
                None => c.env_remove(k),
            };
        }
        c.env(
            "XDG_CACHE_HOME",
            self.e.path(&format!("cache-{}", self.name)),
        )
        .env(
            "MAILVAULT_STATE_DIR",
            self.e.path(&format!("state-{}", self.name)),
        )
        .env("MAILVAULT_RETRY_LOCK", "5m");
        match self.append_only {
            true => c.env("MAILVAULT_APPEND_ONLY", "true"),
            false => c.env_remove("MAILVAULT_APPEND_ONLY"),
        };
        c
    }

    #[track_caller]
    fn expect(&self, code: i32, args: &[&str]) -> Output {
        let o = self.cmd(args).output().unwrap();
        assert_eq!(
            o.status.code(),
            Some(code),
            "{} mailvault {args:?}\nstdout:\n{}\nstderr:\n{}",
            self.name,
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        o
    }

    #[track_caller]
    fn json(&self, code: i32, args: &[&str]) -> Value {
        let mut a = args.to_vec();
        a.push("--json");
        serde_json::from_slice(&self.expect(code, &a).stdout).unwrap()
    }

    /// A store on the bucket with these credentials, straight (no mailvault).
    fn raw_store(&self) -> S3Store {
        let (endpoint, bucket, prefix) = parse_s3_url(self.e.location.as_ref().unwrap()).unwrap();
        S3Store::new(S3Options {
            endpoint,
            bucket,
            prefix,
            region: REGION.into(),
            credentials: self.creds.clone(),
            addressing: mailvault_core::store::Addressing::Path,
        })
        .unwrap()
    }
}

fn restricted(m: &Minio, e: &Env) -> Credentials {
    let (_, bucket, _) = parse_s3_url(e.location.as_ref().unwrap()).unwrap();
    m.assume_role(&host_policy(&bucket)).unwrap()
}

/// The deletes (allowed or denied) the audit log shows from `key`.
fn deletes_by(m: &Minio, key: &str) -> Vec<String> {
    (m.audit_settled().into_iter())
        .filter(|a| a.access_key == key && a.api.starts_with("Delete"))
        .map(|a| format!("{} {} -> {}", a.api, a.object, a.status))
        .collect()
}

/// A mail server with delete-less credentials does everything it does every night:
/// backups (two hosts at once, one killed and resumed), restore, check, a forget request,
/// search indexing, stale locks; MinIO's audit shows no delete attempted. The maintenance
/// host then applies the request and clears the lock records, and everything restores.
#[test]
fn an_append_only_host_does_its_nightly_work_without_a_single_delete() {
    let m = Minio::shared();
    let e = Env::s3("append-only");
    let (a_src, b_src) = (e.path("vmail-a"), e.path("vmail-b"));
    common::tiny_corpus(&a_src, 30, 300);
    common::tiny_corpus(&b_src, 31, 200);
    // The maintenance host creates the repository (with the root user's credentials).
    e.expect(0, &["init"]);
    let a = Host {
        e: &e,
        name: "a",
        creds: restricted(m, &e),
        append_only: true,
    };
    let b = Host {
        name: "b",
        creds: restricted(m, &e),
        ..a_clone(&a)
    };

    // Two hosts back up at once (each holds its lock while the other does).
    let spawn = |h: &Host, src: &Path| {
        h.cmd(&[
            "backup",
            &common::maildir_at(src),
            "--host",
            h.name,
            "--json",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
    };
    let (pa, pb) = (spawn(&a, &a_src), spawn(&b, &b_src));
    for p in [pa, pb] {
        let o = p.wait_with_output().unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    common::at_rest();
    mutate(&MutationSpec::default(), &a_src).unwrap();
    common::at_rest();
    let second = a.json(
        0,
        &[
            "backup",
            &common::maildir_at(&a_src),
            "--host",
            "a",
            "--index",
        ],
    );
    assert_eq!(second["items_failed"], 0, "{second}");
    // Killed in the middle of a backup, then run again: resumed, and the stale lock of
    // the killed run ended by a record, not deleted.
    let big = e.path("vmail-big");
    common::tiny_corpus(&big, 32, 1500);
    let root = common::bucket_root(&e);
    // A backup leaves its lock and its release, nothing more: the locks the backups above
    // released (their releases not counted yet) are not ended a second time.
    let records = root.list("locks/").unwrap().len();
    a.expect(0, &["backup", &common::maildir_at(&a_src), "--host", "a"]);
    assert_eq!(root.list("locks/").unwrap().len(), records + 2);
    let before = root.list("data/").unwrap().len();
    let mut child = a
        .cmd(&[
            "backup",
            &common::maildir_at(&big),
            "--host",
            "a",
            "-j",
            "2",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while root.list("data/").unwrap().len() == before && started.elapsed().as_secs() < 120 {
        std::thread::sleep(Duration::from_millis(10));
    }
    child.kill().unwrap();
    assert!(!child.wait().unwrap().success(), "finished before the kill");
    let resumed = a.json(0, &["backup", &common::maildir_at(&big), "--host", "a"]);
    assert!(resumed["packs_resumed"].as_u64().unwrap() >= 1, "{resumed}");
    // Restore, check, search, as the mail server.
    let newest = newest_of(&a.json(0, &["snapshots"]), &common::maildir_at(&a_src));
    a.expect(
        0,
        &[
            "restore",
            &newest,
            "--target",
            &common::maildir_at(&e.path("out-a")),
        ],
    );
    assert_same_files(&e.path("out-a"), &a_src);
    a.expect(0, &["check", "--read-data"]);
    a.expect(0, &["index"]);
    let found = a.json(0, &["search", "larger:1"]);
    assert!(found["total"].as_u64().unwrap() > 0, "{found}");
    // A forget request: the snapshot stays, restorable, until the maintenance host.
    let snaps = a.json(0, &["snapshots"]);
    let first_a = first_of(&snaps, "a");
    let out = a.expect(0, &["forget", &first_a]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("asked to be removed"), "{text}");
    // The request removed nothing, and the snapshot is marked.
    let after = a.json(0, &["snapshots"]);
    assert_eq!(
        after.as_array().unwrap().len(),
        snaps.as_array().unwrap().len()
    );
    for s in after.as_array().unwrap() {
        let requested = s["id"] == first_a.as_str();
        assert_eq!(s["forget_requested"], requested, "{s}");
    }
    let listed = String::from_utf8_lossy(&a.expect(0, &["snapshots"]).stdout).into_owned();
    assert_eq!(listed.matches("(forget requested").count(), 1, "{listed}");
    a.expect(0, &["unlock"]);
    // Not one delete asked for by either mail server.
    for h in [&a, &b] {
        assert_eq!(
            deletes_by(m, &h.creds.key_id),
            Vec::<String>::new(),
            "{}",
            h.name
        );
    }
    let locks = root.list("locks/").unwrap().len();
    assert!(locks >= 4, "every lock's records are still there: {locks}");

    // The maintenance host: prune applies the request and removes the lock records.
    let p = e.json(0, &["prune", "--apply-requests"]);
    assert_eq!(
        p["forget_requests"]["applied"],
        serde_json::json!([first_a]),
        "{p}"
    );
    assert!(p["lock_records_removed"].as_u64().unwrap() >= 4, "{p}");
    assert!(root.list("locks/").unwrap().is_empty());
    assert!(
        root.list("forgotten/").unwrap().len() == 1,
        "the request is done with; the applied record stays"
    );
    e.expect(0, &["check", "--read-data"]);
    let rest = e.json(0, &["snapshots"]);
    assert_eq!(
        rest.as_array().unwrap().len(),
        snaps.as_array().unwrap().len() - 1
    );
    e.expect(
        0,
        &[
            "restore",
            &newest,
            "--target",
            &common::maildir_at(&e.path("out-a2")),
        ],
    );
    assert_same_files(&e.path("out-a2"), &a_src);
}

/// The same credentials in an intruder's hands (without `--append-only`): whatever
/// deletes fails at the server; what it overwrites the maintenance host puts back from the
/// versions (`repair overwrites`); every snapshot still restores exactly.
#[test]
fn an_intruder_with_a_mail_servers_credentials_cannot_destroy_the_backups() {
    let m = Minio::shared();
    let e = Env::s3("append-only-intruder");
    let src = e.path("vmail");
    common::tiny_corpus(&src, 33, 300);
    // With Object Lock (governance, a day): the bucket keeps versions, which is what puts
    // an overwrite right again below.
    e.expect(
        0,
        &["init", "--lock-days", "1", "--lock-mode", "governance"],
    );
    let host = Host {
        e: &e,
        name: "mx",
        creds: restricted(m, &e),
        append_only: true,
    };
    host.expect(0, &["backup", &common::maildir_at(&src)]);
    common::at_rest();
    mutate(&MutationSpec::default(), &src).unwrap();
    common::at_rest();
    host.expect(0, &["backup", &common::maildir_at(&src)]);
    let before = common::bucket_root(&e).list("").unwrap();
    let snaps = host.json(0, &["snapshots"]);
    let ids: Vec<String> = (snaps.as_array().unwrap().iter())
        .map(|s| s["id"].as_str().unwrap().to_string())
        .collect();
    let intruder = Host {
        name: "intruder",
        append_only: false,
        ..a_clone(&host)
    };
    // What a forgotten flag would have let through is refused by the server.
    for args in [
        vec!["forget", "--prune", ids[0].as_str()],
        vec!["forget", "--keep-last", "1", "--prune"],
        vec!["unlock", "--remove-all"],
        vec!["repair", "index"],
        vec!["prune"],
    ] {
        let o = intruder.cmd(&args).output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains("AccessDenied"), "{args:?}: {err}");
    }
    // And straight at the storage.
    let raw = intruder.raw_store();
    for o in &before {
        if o.path.starts_with("data/")
            || o.path.starts_with("index/")
            || o.path.starts_with("snapshots/")
            || o.path.starts_with("keys/")
            || o.path == "config"
        {
            assert!(raw.delete(&o.path).is_err(), "{} deleted", o.path);
        }
    }
    // Asked for with `--append-only`, the same commands are refused before any request:
    // the audit log shows no delete from them.
    let attempted = deletes_by(m, &host.creds.key_id).len();
    for args in [
        vec!["prune"],
        vec!["unlock", "--remove-all"],
        vec!["repair", "index"],
        vec!["forget", "--prune", ids[0].as_str()],
    ] {
        let o = host.expect(2, &args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains("append-only"), "{args:?}: {err}");
    }
    assert_eq!(deletes_by(m, &host.creds.key_id).len(), attempted);
    // Overwrites, which no S3 right forbids on MinIO: the bucket keeps the originals as
    // older versions, and the maintenance host puts them back.
    let mut overwritten = Vec::new();
    for dir in ["data/", "index/", "snapshots/", "keys/"] {
        let p = &before
            .iter()
            .find(|o| o.path.starts_with(dir))
            .unwrap()
            .path;
        raw.replace(p, b"ransom note").unwrap();
        overwritten.push(p.clone());
    }
    overwritten.sort();
    e.expect(2, &["check", "--read-data"]);
    host.expect(2, &["repair", "overwrites"]);
    let repaired = e.json(0, &["repair", "overwrites"]);
    assert_eq!(
        repaired["restored"],
        serde_json::json!(overwritten),
        "{repaired}"
    );
    // Every snapshot restores exactly; check is clean with the maintenance host's rights.
    let after: Vec<String> = (common::bucket_root(&e).list("").unwrap().into_iter())
        .filter(|o| !o.path.starts_with("locks/"))
        .map(|o| o.path)
        .collect();
    for o in &before {
        assert!(
            o.path.starts_with("locks/") || after.contains(&o.path),
            "{} is gone",
            o.path
        );
    }
    e.expect(0, &["check", "--read-data"]);
    e.expect(
        0,
        &[
            "restore",
            &ids[ids.len() - 1],
            "--target",
            &common::maildir_at(&e.path("out")),
        ],
    );
    assert_same_files(&e.path("out"), &src);
    assert!(
        !deletes_by(m, &host.creds.key_id).is_empty(),
        "the intruder's attempts are in the audit log"
    );
}
/// The id of the oldest snapshot of `host` in a `snapshots --json` list.
fn first_of(snaps: &Value, host: &str) -> String {
    let mut of: Vec<&Value> = (snaps.as_array().unwrap().iter())
        .filter(|s| s["hostname"] == host)
        .collect();
    of.sort_by_key(|s| s["time"].as_i64());
    of[0]["id"].as_str().unwrap().to_string()
}

/// The id of the newest snapshot of `source`.
fn newest_of(snaps: &Value, source: &str) -> String {
    let mut of: Vec<&Value> = (snaps.as_array().unwrap().iter())
        .filter(|s| s["source"] == source)
        .collect();
    of.sort_by_key(|s| (s["time"].as_i64(), s["time_nanos"].as_i64()));
    of.last().unwrap()["id"].as_str().unwrap().to_string()
}

fn a_clone<'a>(h: &Host<'a>) -> Host<'a> {
    Host {
        e: h.e,
        name: h.name,
        creds: h.creds.clone(),
        append_only: h.append_only,
    }
}

/// The maintenance host prunes while two append-only hosts back up: each waits for the
/// others' locks as it must, nothing is lost, `check --read-data` is clean and every
/// snapshot restores exactly.
#[test]
fn a_prune_beside_two_append_only_backups_loses_nothing() {
    let m = Minio::shared();
    let e = Env::s3("append-only-prune");
    e.expect(0, &["init"]);
    let hosts: Vec<Host> = ["a", "b"]
        .into_iter()
        .map(|name| Host {
            e: &e,
            name,
            creds: restricted(m, &e),
            append_only: true,
        })
        .collect();
    for (n, h) in hosts.iter().enumerate() {
        common::tiny_corpus(&e.path(&format!("vmail-{}", h.name)), 40 + n as u64, 300);
        h.expect(
            0,
            &[
                "backup",
                &common::maildir_at(&e.path(&format!("vmail-{}", h.name))),
                "--host",
                h.name,
            ],
        );
    }
    // Something for the prune to do: the first snapshots forgotten by request.
    let snaps = e.json(0, &["snapshots"]);
    common::at_rest();
    for h in &hosts {
        let src = e.path(&format!("vmail-{}", h.name));
        mutate(&MutationSpec::default(), &src).unwrap();
    }
    common::at_rest();
    for h in &hosts {
        let src = e.path(&format!("vmail-{}", h.name));
        h.expect(0, &["backup", &common::maildir_at(&src), "--host", h.name]);
        h.expect(0, &["forget", &first_of(&snaps, h.name)]);
    }
    common::at_rest();
    for h in &hosts {
        mutate(
            &MutationSpec::default(),
            &e.path(&format!("vmail-{}", h.name)),
        )
        .unwrap();
    }
    common::at_rest();
    let backups: Vec<_> = (hosts.iter())
        .map(|h| {
            let src = e.path(&format!("vmail-{}", h.name));
            h.cmd(&["backup", &common::maildir_at(&src), "--host", h.name])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let prune = e
        .cmd(&["prune", "--apply-requests", "--max-unused", "0", "--json"])
        .env("MAILVAULT_RETRY_LOCK", "5m")
        .output()
        .unwrap();
    assert!(
        prune.status.success(),
        "{}",
        String::from_utf8_lossy(&prune.stderr)
    );
    let p: Value = serde_json::from_slice(&prune.stdout).unwrap();
    assert_eq!(
        p["forget_requests"]["applied"].as_array().unwrap().len(),
        2,
        "{p}"
    );
    for b in backups {
        let o = b.wait_with_output().unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    e.expect(0, &["check", "--read-data"]);
    let snaps = e.json(0, &["snapshots"]);
    assert_eq!(snaps.as_array().unwrap().len(), 4, "{snaps}");
    for h in &hosts {
        let src = e.path(&format!("vmail-{}", h.name));
        let newest = newest_of(&snaps, &common::maildir_at(&src));
        let out = e.path(&format!("out-{}", h.name));
        e.expect(
            0,
            &["restore", &newest, "--target", &common::maildir_at(&out)],
        );
        assert_same_files(&out, &src);
    }
}
