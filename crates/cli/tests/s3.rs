//! End-to-end tests of `mailvault` on S3-compatible storage: a real MinIO on 127.0.0.1
//! (`mailvault_core::testing::minio`, one per test process, a fresh bucket per test), and a
//! proxy in front of it that answers `503 SlowDown`, drops connections and loses answers
//! (`mailvault_core::testing::fault_proxy`). Stores are the `tiny` corpus or smaller, so
//! that the whole file takes seconds.
#![allow(clippy::unwrap_used)]

mod common;

use common::{assert_same_files, contents, copy_tree, Env};
use mailvault_core::store::{parse_s3_url, S3Store, Store};
use mailvault_core::testing::fault_proxy::{Fault, FaultProxy};
use mailvault_core::testing::minio::{url_at, Minio};
use mailvault_corpus::{generate, mutate, CorpusSpec, MutationSpec};
use mailvault_imap::testing::DovecotServer;
use serde_json::Value;
use std::path::Path;
use std::time::{Duration, Instant};

/// The Retry wrapper reports the retries it made as `storage.retries` in `--json` (an
/// object with `total`): a faulted run whose report has no retry count fails.
const RETRIES_REPORTED: bool = true;

/// The retries a `--json` report counts, if it counts them.
fn retries(report: &Value) -> Option<u64> {
    let r = &report["storage"]["retries"];
    r.as_u64().or_else(|| r["total"].as_u64())
}

/// Requests of all verbs a `--json` report counts.
fn requests(report: &Value) -> u64 {
    let r = &report["storage"]["requests"];
    ["get", "put", "list", "head", "delete"]
        .iter()
        .map(|v| {
            r[v].as_u64()
                .unwrap_or_else(|| panic!("no storage.requests.{v} in {report}"))
        })
        .sum()
}

/// The `tiny` corpus (300 messages, 6 accounts) with `seed`, written to `root`.
fn corpus(root: &Path, seed: u64) {
    let spec = CorpusSpec {
        seed,
        ..CorpusSpec::preset("tiny").unwrap()
    };
    generate(&spec, root).unwrap();
}

fn maildir(p: &Path) -> String {
    format!("maildir:{}", p.display())
}

/// The test's bucket, as the store `mailvault` uses, reached directly (not through a
/// proxy): to look at and damage objects behind `mailvault`'s back.
fn bucket_store(e: &Env) -> S3Store {
    let (_, bucket, prefix) = parse_s3_url(e.location.as_ref().unwrap()).unwrap();
    Minio::shared().store(&bucket, &prefix).unwrap()
}

/// `e`'s bucket reached through `proxy`.
fn through(e: &Env, proxy: &FaultProxy) -> String {
    let (_, bucket, prefix) = parse_s3_url(e.location.as_ref().unwrap()).unwrap();
    url_at(&proxy.endpoint(), &bucket, &prefix)
}

/// Backup, an incremental after flag changes, new and deleted messages, restores of both
/// snapshots byte for byte, `check --read-data`; the reports count the requests.
#[test]
fn s3_backup_incremental_restore_and_check() {
    let e = Env::s3("backup-incremental");
    let src = e.path("vmail");
    corpus(&src, 1);
    let init = e.json(0, &["init"]);
    assert_eq!(init["repository"], e.location.clone().unwrap().as_str());
    common::at_rest();
    let first = e.json(0, &["backup", &maildir(&src)]);
    assert_eq!(first["items_total"], 300, "{first}");
    assert_eq!(first["items_failed"], 0);
    let up = first["storage"]["requests"]["bytes_up"].as_u64().unwrap();
    assert!(up >= first["bytes_added"].as_u64().unwrap(), "{first}");
    assert!(first["storage"]["requests"]["put"].as_u64().unwrap() >= 3);
    copy_tree(&src, &e.path("original"));

    let m = mutate(
        &MutationSpec {
            flag_rename_ratio: 0.10,
            new_ratio: 0.05,
            delete_ratio: 0.03,
            ..Default::default()
        },
        &src,
    )
    .unwrap();
    assert!(
        m.flag_renames > 0 && m.new_messages > 0 && m.deleted > 0,
        "{m:?}"
    );
    let second = e.json(0, &["backup", &maildir(&src)]);
    assert_eq!(second["items_total"], m.messages_after as u64, "{second}");
    assert_eq!(second["items_new"], m.new_messages as u64, "{second}");
    assert_eq!(second["bytes_read"], m.new_bytes, "{second}");
    assert_eq!(second["parent"], first["snapshot"]);

    e.expect(
        0,
        &["restore", "latest", "--target", &maildir(&e.path("r2"))],
    );
    assert_same_files(&e.path("r2"), &src);
    let first_id = first["snapshot"].as_str().unwrap();
    e.expect(
        0,
        &["restore", first_id, "--target", &maildir(&e.path("r1"))],
    );
    assert_same_files(&e.path("r1"), &e.path("original"));
    let check = e.json(0, &["check", "--read-data"]);
    assert!(requests(&check) > 0, "{check}");
    // The listing commands too.
    assert_eq!(e.json(0, &["snapshots"]).as_array().unwrap().len(), 2);
    let ls = e.ok(&["ls", "latest"]);
    assert_eq!(ls.lines().filter(|l| l.contains('@')).count(), 6, "{ls}");
    let stats = e.json(0, &["stats"]);
    assert!(requests(&stats) > 0, "{stats}");
}

/// A flipped byte in a stored pack (rewritten in MinIO behind mailvault's back) is found
/// by `check --read-data`, which names the pack.
#[test]
fn s3_flipped_byte_in_a_pack_is_found_and_named() {
    let e = Env::s3("flipped-byte");
    let src = e.path("vmail");
    corpus(&src, 3);
    e.expect(0, &["init"]);
    e.expect(0, &["backup", &maildir(&src)]);
    let store = bucket_store(&e);
    // The largest pack holds message data (tree packs are small), which no cache keeps.
    let pack = store
        .list("data/")
        .unwrap()
        .into_iter()
        .max_by_key(|o| o.size)
        .unwrap();
    let mut bytes = store.get(&pack.path).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x01;
    store.replace(&pack.path, &bytes).unwrap();
    let out = e.expect(2, &["check", "--read-data"]);
    assert!(
        out.contains(&pack.path),
        "check did not name {}:\n{out}",
        pack.path
    );
    assert!(out.contains("affects snapshot"), "{out}");
}

/// Through a proxy that fails every 4th request (503 SlowDown, a dropped connection, a
/// lost answer after the server did the request, in turn), backup, restore and check
/// complete; nothing is lost (the restore is exact, `check --read-data` passes, a later
/// backup has nothing to add) or duplicated (one snapshot, no pack outside the index);
/// the reports count the retries.
#[test]
fn s3_faults_are_retried_and_nothing_is_lost() {
    let mut e = Env::s3("faults");
    let src = e.path("vmail");
    corpus(&src, 4);
    e.expect(0, &["init"]);
    let proxy = FaultProxy::start(&Minio::shared().address()).unwrap();
    e.location = Some(through(&e, &proxy));
    proxy.set_faults(4, &[Fault::SlowDown, Fault::Drop, Fault::LoseAnswer]);

    let faulted = |args: &[&str]| -> Value {
        let before = proxy.stats().faults();
        let r = e.json(0, args);
        let faults = proxy.stats().faults() - before;
        assert!(
            faults > 0,
            "no faults injected in {args:?}: {:?}",
            proxy.stats()
        );
        // Every injected failure costs one retry, and the report says so.
        match retries(&r) {
            Some(n) => assert_eq!(n, faults, "{args:?}: {r}"),
            None if RETRIES_REPORTED => panic!("{args:?}: no storage.retries in {r}"),
            None => {}
        }
        r
    };
    let backup = faulted(&["backup", &maildir(&src)]);
    assert_eq!(backup["items_total"], 300, "{backup}");
    assert_eq!(backup["items_failed"], 0, "{backup}");
    faulted(&["restore", "latest", "--target", &maildir(&e.path("out"))]);
    assert_same_files(&e.path("out"), &src);
    faulted(&["check", "--read-data"]);

    proxy.set_faults(0, &[]);
    // Nothing duplicated: one snapshot object, and check finds nothing to say.
    assert_eq!(bucket_store(&e).list("snapshots/").unwrap().len(), 1);
    let out = e.expect(0, &["check"]);
    assert!(!out.contains("not in any index"), "{out}");
    // A later backup has nothing to add.
    let again = e.json(0, &["backup", &maildir(&src)]);
    assert_eq!(again["items_unchanged"], 300, "{again}");
    assert_eq!(again["packs_written"], 0, "{again}");
}

/// Messages with large, incompressible attachments: several 16 MiB packs.
fn big_corpus(root: &Path) {
    let spec = CorpusSpec {
        seed: 5,
        attachment_ratio: 0.9,
        median_attachment_bytes: 200 << 10,
        max_attachment_bytes: 1 << 20,
        ..CorpusSpec::preset("tiny").unwrap()
    };
    generate(&spec, root).unwrap();
}

/// A backup killed with SIGKILL after it stored packs leaves a repository that checks
/// clean; the next backup finishes, resumes what was stored, and restores exactly.
#[test]
fn s3_killed_backup_checks_clean_and_the_next_one_finishes() {
    let e = Env::s3("killed");
    let src = e.path("vmail");
    big_corpus(&src);
    e.expect(0, &["init", "--compression", "none"]);
    let store = bucket_store(&e);
    let mut child = e
        .cmd(&["backup", &maildir(&src), "--json", "-j", "2"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while store.list("data/").unwrap().is_empty() && started.elapsed().as_secs() < 120 {
        std::thread::sleep(Duration::from_millis(20));
    }
    child.kill().unwrap(); // SIGKILL
    let status = child.wait().unwrap();
    assert!(
        !status.success(),
        "the backup finished before it could be killed: make the store bigger"
    );
    let stored = store.list("data/").unwrap().len();
    assert!(stored >= 1);
    assert!(store.list("snapshots/").unwrap().is_empty());
    e.expect(0, &["check"]);

    let r = e.json(0, &["backup", &maildir(&src)]);
    assert_eq!(r["items_failed"], 0, "{r}");
    assert!(r["packs_resumed"].as_u64().unwrap() >= 1, "{r}");
    e.expect(0, &["check", "--read-data"]);
    e.expect(
        0,
        &["restore", "latest", "--target", &maildir(&e.path("out"))],
    );
    assert_same_files(&e.path("out"), &src);
}

/// Two mail servers back up into one repository at the same time (`--host a`, `--host
/// b`, each with its own cache and state directory, as two machines have): both
/// snapshots restore exactly, check passes, and each later backup deduplicates against
/// what both stored.
#[test]
fn s3_two_hosts_back_up_at_once() {
    let e = Env::s3("two-hosts");
    e.expect(0, &["init"]);
    corpus(&e.path("vmail-a"), 6);
    corpus(&e.path("vmail-b"), 7);
    let spawn = |host: &str| {
        let src = e.path(&format!("vmail-{host}"));
        e.cmd(&["backup", &maildir(&src), "--host", host, "--json"])
            .env("XDG_CACHE_HOME", e.path(&format!("cache-{host}")))
            .env("MAILVAULT_STATE_DIR", e.path(&format!("state-{host}")))
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    let (a, b) = (spawn("a"), spawn("b"));
    let mut reports = Vec::new();
    for child in [a, b] {
        let o = child.wait_with_output().unwrap();
        assert_eq!(
            o.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&o.stderr)
        );
        reports.push(serde_json::from_slice::<Value>(&o.stdout).unwrap());
    }
    let snaps = e.json(0, &["snapshots"]);
    let snaps = snaps.as_array().unwrap();
    assert_eq!(snaps.len(), 2, "{snaps:?}");
    for (host, r) in ["a", "b"].iter().zip(&reports) {
        let id = r["snapshot"].as_str().unwrap();
        let s = snaps.iter().find(|s| s["id"] == id).unwrap();
        assert_eq!(s["hostname"], *host);
        let out = e.path(&format!("out-{host}"));
        e.expect(0, &["restore", id, "--target", &maildir(&out)]);
        assert_same_files(&out, &e.path(&format!("vmail-{host}")));
    }
    e.expect(0, &["check", "--read-data"]);
    // Host b backs up a's store: everything is there already.
    let again = e
        .cmd(&[
            "backup",
            &maildir(&e.path("vmail-a")),
            "--host",
            "b",
            "--json",
        ])
        .env("XDG_CACHE_HOME", e.path("cache-b"))
        .env("MAILVAULT_STATE_DIR", e.path("state-b"))
        .output()
        .unwrap();
    assert_eq!(again.status.code(), Some(0));
    let again: Value = serde_json::from_slice(&again.stdout).unwrap();
    // Every message is there already: only the new snapshot's trees are added.
    assert_eq!(again["packs_written"], 0, "{again}");
    let (added, read) = (
        again["bytes_added"].as_u64().unwrap(),
        again["bytes_read"].as_u64().unwrap(),
    );
    assert!(added * 100 < read, "{again}");
}

/// The lines of stderr other than the storage report line.
fn error_lines(stderr: &[u8]) -> Vec<String> {
    String::from_utf8_lossy(stderr)
        .lines()
        .filter(|l| !l.starts_with("storage: "))
        .map(str::to_string)
        .collect()
}

/// Runs `mailvault ARGS` with `vars` set; expects exit 2 and one line of error that names
/// the repository and says `what`.
#[track_caller]
fn one_clear_line(e: &Env, args: &[&str], vars: &[(&str, &str)], what: &str) {
    let mut c = e.cmd(args);
    for (k, v) in vars {
        c.env(k, v);
    }
    let o = c.output().unwrap();
    let lines = error_lines(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{args:?}: {lines:?}");
    assert_eq!(lines.len(), 1, "{args:?}: {lines:?}");
    let location = e.location.as_ref().unwrap();
    assert!(lines[0].starts_with("error: "), "{lines:?}");
    assert!(lines[0].contains(location.as_str()), "{args:?}: {lines:?}");
    assert!(lines[0].contains(what), "{args:?}: {lines:?}");
}

/// Wrong credentials, a missing bucket, an unreachable endpoint, no such host, https to a
/// plain-http server: one clear line naming the repository and what to do; exit code 2.
#[test]
fn s3_wrong_credentials_missing_bucket_and_unreachable_endpoint() {
    let e = Env::s3("errors");
    let src = e.path("vmail");
    std::fs::create_dir_all(src.join("example.org/bob/Maildir/cur")).unwrap();
    let wrong = [("AWS_SECRET_ACCESS_KEY", "not-the-secret")];
    one_clear_line(&e, &["init"], &wrong, "AWS_SECRET_ACCESS_KEY");
    e.expect(0, &["init"]);
    for args in [&["snapshots"][..], &["backup", &maildir(&src)], &["check"]] {
        one_clear_line(&e, args, &wrong, "AWS_SECRET_ACCESS_KEY");
        one_clear_line(
            &e,
            args,
            &[("AWS_ACCESS_KEY_ID", "nobody")],
            "AWS_ACCESS_KEY_ID",
        );
    }

    let missing = Env::s3("missing-bucket");
    for args in [&["snapshots"][..], &["backup", &maildir(&src)], &["check"]] {
        one_clear_line(&missing, args, &[], "does not exist");
    }

    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut unreachable = Env::s3("unreachable");
    unreachable.location = Some(format!("s3:http://127.0.0.1:{closed}/nobody-here"));
    for args in [&["init"][..], &["snapshots"], &["backup", &maildir(&src)]] {
        one_clear_line(&unreachable, args, &[], "cannot reach");
    }
    // No such host (`.invalid` never resolves, RFC 2606).
    unreachable.location = Some("s3:http://no-such-host.invalid:9000/nobody-here".into());
    one_clear_line(&unreachable, &["snapshots"], &[], "cannot reach");
    // https to a server that speaks plain http.
    let mut tls = Env::s3("tls");
    tls.location = Some(
        tls.location
            .take()
            .unwrap()
            .replacen("s3:http://", "s3:https://", 1),
    );
    one_clear_line(&tls, &["init"], &[], "TLS");
    one_clear_line(&tls, &["snapshots"], &[], "TLS");
}

/// An incremental backup of an unchanged store makes at most 10 requests in all (the
/// issue's target; restic makes 13), as the report counts them and as the wire sees them
/// (a counting proxy), and lists no `data/` (the lock costs a PUT, a LIST of `locks/` and
/// a DELETE, and once locked `index/` is listed again: docs/storage.md).
#[test]
fn s3_unchanged_incremental_makes_at_most_10_requests() {
    let mut e = Env::s3("unchanged");
    let src = e.path("vmail");
    corpus(&src, 8);
    // Every run through the counting proxy: the cache knows a repository by its location.
    let proxy = FaultProxy::start(&Minio::shared().address()).unwrap();
    e.location = Some(through(&e, &proxy));
    e.expect(0, &["init"]);
    e.expect(0, &["backup", &maildir(&src)]);
    let before = proxy.requests_seen().len();
    let r = e.json(0, &["backup", &maildir(&src)]);
    assert_eq!(r["items_new"], 0, "{r}");
    let seen = proxy.requests_seen().split_off(before);
    let counted = requests(&r);
    // The requests made, for the message: data/ reads counted, every other one listed.
    let data_reads = seen.iter().filter(|l| l.contains("/data/")).count();
    let others: Vec<String> = seen
        .iter()
        .filter(|l| !l.contains("/data/"))
        .map(|l| l.split(' ').take(2).collect::<Vec<_>>().join(" "))
        .collect();
    let wire = seen.len() as u64;
    assert!(
        counted <= 10 && wire <= 10,
        "an unchanged incremental made {counted} requests by its report ({}), {wire} on the wire: {data_reads} reads of data/ and {others:#?}",
        r["storage"]["requests"],
    );
    assert_eq!(wire, counted, "{r}\n{seen:#?}");
    assert!(
        !seen
            .iter()
            .any(|l| l.contains("list-type=") && l.contains("prefix=data")),
        "{seen:#?}"
    );
}

/// `mailvault demo --repo s3:…` runs its whole tour on object storage, here in a
/// repository under a key prefix of a bucket that `init` does not own alone.
#[test]
fn s3_demo_under_a_prefix() {
    let m = Minio::shared();
    let bucket = m.bucket("demo");
    m.store(&bucket, "")
        .unwrap()
        .put("someone-else/config", b"not ours")
        .unwrap();
    let mut e = Env::s3("demo");
    e.location = Some(m.url(&bucket, "mail/vault"));
    let out = e.ok(&[
        "demo",
        "--preset",
        "tiny",
        "--dir",
        e.path("demo").to_str().unwrap(),
    ]);
    assert!(out.contains(e.location.as_ref().unwrap().as_str()), "{out}");
    assert!(bucket_store(&e).stat("config").is_ok());
    let o = e
        .cmd(&["snapshots", "--json"])
        .env("MAILVAULT_PASSWORD_FILE", e.path("demo/password"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0));
    let snaps: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(snaps.as_array().unwrap().len(), 2, "{snaps}");
    let root = m.store(&bucket, "").unwrap();
    assert_eq!(root.get("someone-else/config").unwrap(), b"not ours");
}

/// Every request a command makes is in its report: the counts of `--json` equal what a
/// counting proxy saw on the wire (no faults: no retries).
#[test]
fn s3_reports_count_every_request() {
    let mut e = Env::s3("counted");
    let src = e.path("vmail");
    corpus(&src, 9);
    e.expect(0, &["init"]);
    let proxy = FaultProxy::start(&Minio::shared().address()).unwrap();
    e.location = Some(through(&e, &proxy));
    let target = maildir(&e.path("out"));
    let mut wrong = Vec::new();
    for args in [
        &["backup", &maildir(&src)][..],
        &["restore", "latest", "--target", &target],
        &["check", "--read-data"],
        &["stats"],
    ] {
        let before = proxy.stats().requests;
        let r = e.json(0, args);
        let wire = proxy.stats().requests - before;
        if requests(&r) != wire {
            wrong.push(format!(
                "{args:?}: {} counted, {wire} on the wire: {}",
                requests(&r),
                r["storage"]["requests"]
            ));
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}

/// IMAP both ways on S3: a Maildir backup restored into a real Dovecot gives every
/// message back in its folder; a backup over IMAP of that server (master user, accounts
/// file) restores to a Maildir with the same messages. Fails without Dovecot unless
/// MAILVAULT_SKIP_DOVECOT=1.
#[test]
fn s3_imap_restore_and_backup() {
    let Some(server) = DovecotServer::start_or_skip().expect("dovecot") else {
        return;
    };
    let e = Env::s3("imap");
    let src = e.path("vmail");
    let spec = CorpusSpec {
        seed: 10,
        messages: 120,
        ..CorpusSpec::preset("tiny").unwrap()
    };
    generate(&spec, &src).unwrap();
    e.ok(&["init"]);
    e.ok(&["backup", &maildir(&src)]);
    let pass = e.path("imap-pass");
    std::fs::write(&pass, format!("{}\n", server.master_password())).unwrap();
    let pass = pass.to_str().unwrap();
    let url = format!("imap://127.0.0.1:{}", server.port());
    let master = [
        "--imap-master-user",
        server.master_user(),
        "--imap-password-file",
        pass,
    ];
    let mut restore = vec!["restore", "latest", "--target", &url];
    restore.extend_from_slice(&master);
    e.ok(&restore);
    assert_eq!(contents(&server.mail_root()), contents(&src));

    let mut accounts = Vec::new();
    for d in std::fs::read_dir(&src).unwrap() {
        let d = d.unwrap();
        for u in std::fs::read_dir(d.path()).unwrap() {
            let (user, domain) = (u.unwrap().file_name(), d.file_name());
            accounts.push(format!(
                "{}@{}",
                user.to_string_lossy(),
                domain.to_string_lossy()
            ));
        }
    }
    let list = e.path("accounts.txt");
    std::fs::write(&list, accounts.join("\n")).unwrap();
    let mut backup = vec!["backup", &url, "--accounts-file", list.to_str().unwrap()];
    backup.extend_from_slice(&master);
    backup.push("--json");
    let r: Value = serde_json::from_str(&e.ok(&backup)).unwrap();
    assert_eq!(r["items_total"], 120, "{r}");
    let id = r["snapshot"].as_str().unwrap();
    e.ok(&["restore", id, "--target", &maildir(&e.path("out"))]);
    assert_eq!(contents(&e.path("out")), contents(&src));
    e.ok(&["check", "--read-data"]);
}

/// Issue 24 item 11: a restore whose storage dies under it (every request dropped from
/// some point on, as a killed server's would be: when it opens the repository, when it
/// reads the first data pack) stops within a bounded time (`--give-up-after`), says so
/// once, exits 2, and a run once the storage is back finishes the restore.
#[test]
fn s3_a_restore_against_dead_storage_gives_up_and_resumes() {
    let mut e = Env::s3("dead-storage");
    let src = e.path("vmail");
    corpus(&src, 6);
    e.expect(0, &["init"]);
    e.expect(0, &["backup", &maildir(&src)]);
    let proxy = FaultProxy::start(&Minio::shared().address()).unwrap();
    e.location = Some(through(&e, &proxy));
    let out = e.path("out");
    for dies_at in ["/config", "/data/"] {
        proxy.die_at(dies_at);
        let started = std::time::Instant::now();
        let (code, stdout, stderr) = e.run_text(&[
            "restore",
            "latest",
            "--target",
            &maildir(&out),
            "--give-up-after",
            "3s",
        ]);
        let took = started.elapsed();
        assert_eq!(code, Some(2), "{dies_at}: {stdout}{stderr}");
        assert!(
            took < std::time::Duration::from_secs(60),
            "{dies_at}: took {took:?}"
        );
        // One error, said once (opening the repository is one request: its own
        // attempts may end before the breaker's time; a restore's many requests never).
        assert_eq!(stderr.matches("error:").count(), 1, "{dies_at}: {stderr}");
        if dies_at == "/data/" {
            let said = stdout.matches("failed every request").count()
                + stderr.matches("failed every request").count();
            assert_eq!(said, 1, "{dies_at}: {stdout}{stderr}");
            assert!(
                stderr.contains("run the command again"),
                "{dies_at}: {stderr}"
            );
            // What failed for that one reason is counted, not listed item by item.
            assert!(
                stdout.contains("not done: the storage was given up on"),
                "{dies_at}: {stdout}"
            );
        }
        assert!(
            stdout.lines().count() + stderr.lines().count() < 20,
            "{dies_at}: {stdout}{stderr}"
        );
        proxy.set_faults(0, &[]);
    }
    // Back: the same restore finishes what the first did not.
    let r = e.json(0, &["restore", "latest", "--target", &maildir(&out)]);
    assert_eq!(r["items_failed"], 0, "{r}");
    assert_same_files(&out, &src);
}
