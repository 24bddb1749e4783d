//! Issue 28: restores started from the web UI and the API, judged by a real Dovecot. An
//! admin's job puts an account back into the live server, and Dovecot shows it as the
//! command line's restore of the same snapshot does (folders, flags, dates, bytes); run
//! again, it sends nothing twice. A form's job restores a folder to a Maildir tree below
//! `--restore-dir`, byte for byte, and a path out of it is refused. A job cancelled
//! midway stops with what is left counted as not tried, and started again finishes with
//! every message there once. A mail user restores their own account into their own
//! mailbox with their own password, and reaches nothing of another's: no other account,
//! no directory, no other user's job.
#![allow(clippy::unwrap_used)]

mod common;
mod judge;

use common::serve::{
    plain, plant, put, q, start, token_file, user_session, Server, Session, ACCOUNT,
};
use common::Env;
use reqwest::header::{CONTENT_TYPE, COOKIE, LOCATION};
use reqwest::StatusCode;
use serde_json::{json, Value};
use std::fs;
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

const BOB: &str = "bob@example.org";

/// `POST path` with a JSON body and the session's CSRF token.
fn post_json(s: &Server, path: &str, me: &Session, body: &Value) -> reqwest::blocking::Response {
    (s.http.post(s.url(path)))
        .header(COOKIE, &me.cookie)
        .header("x-csrf-token", &me.csrf)
        .header(CONTENT_TYPE, "application/json")
        .body(body.to_string())
        .send()
        .unwrap()
}

/// Starts a restore by the API: the job's id (the answer must be `202`).
fn start_job(s: &Server, me: &Session, body: Value) -> String {
    let r = post_json(s, "/api/v1/restore", me, &body);
    let status = r.status();
    let text = r.text().unwrap();
    let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{status} {text}: {e}"));
    assert_eq!(status, StatusCode::ACCEPTED, "{v}");
    v["id"].as_str().unwrap().to_string()
}

/// The job `id` once it ended (within two minutes).
fn ended(s: &Server, me: &Session, id: &str) -> Value {
    let until = Instant::now() + Duration::from_secs(120);
    loop {
        let v = s.api(&q("/api/v1/job", &[("id", id)]), me);
        if !["running", "cancelling"].contains(&v["state"].as_str().unwrap()) {
            return v;
        }
        assert!(Instant::now() < until, "the job did not end: {v}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn login(server: &mailvault_imap::testing::DovecotServer) -> judge::Login {
    judge::Login {
        port: server.port(),
        admin: server.master_user().to_string(),
        password: server.master_password().to_string(),
    }
}

/// The master user's password in a file of mode 0600: the flags that give it to serve.
fn master_flags(e: &Env, server: &mailvault_imap::testing::DovecotServer) -> Vec<String> {
    let pass = e.path("master-pass");
    fs::write(&pass, format!("{}\n", server.master_password())).unwrap();
    fs::set_permissions(&pass, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    vec![
        "--restore-master-user".into(),
        server.master_user().into(),
        "--restore-password-file".into(),
        pass.display().to_string(),
    ]
}

/// A directory for restores, and the flags that let restores go there and into `server`
/// as its master user.
fn restores_to(
    e: &Env,
    server: &mailvault_imap::testing::DovecotServer,
) -> (std::path::PathBuf, Vec<String>) {
    let dir = e.path("restores");
    fs::create_dir(&dir).unwrap();
    let url = format!("imap://127.0.0.1:{}", server.port());
    let mut flags = vec!["--restore-imap".to_string(), url];
    flags.extend(master_flags(e, server));
    flags.extend(["--restore-dir".to_string(), dir.display().to_string()]);
    (dir, flags)
}

/// Issue 28: the admin restores alice's account into a live Dovecot from the API, and
/// the judge sees it as it sees the command line's restore of the same snapshot (into
/// another account); a second job sends nothing again. A form restores her Archive to a
/// Maildir below `--restore-dir`, byte for byte; a directory out of it is refused.
#[test]
fn an_admins_job_restores_into_dovecot_as_the_command_line_does_and_to_a_directory() {
    let e = Env::new();
    let mail = e.path("mail");
    plant(&mail);
    put(
        &mail,
        ".Archive.2023",
        "deep:2,FS",
        &plain("deeper", "Mon, 02 Jan 2023 10:00:00 +0000", "older"),
    );
    e.ok(&["init"]);
    e.ok(&["backup", &format!("maildir:{}", mail.display())]);
    token_file(&e, 0o600);
    let Some(dovecot) = judge::dovecot(None, String::new()) else {
        return;
    };
    let (dir, flags) = restores_to(&e, &dovecot);
    let s = start(&e, &flags.iter().map(String::as_str).collect::<Vec<_>>());
    let me = s.session();
    let id = s.newest_snapshot(&me);

    let job = start_job(
        &s,
        &me,
        json!({"snapshot": id, "account": ACCOUNT, "to": "imap"}),
    );
    let v = ended(&s, &me, &job);
    assert_eq!(v["state"], "done", "{v}");
    assert_eq!(v["summary"]["items_restored"], 4, "{v}");
    assert_eq!(v["report"]["items_appended"], 4, "{v}");
    assert_eq!(v["done_items"], v["total_items"], "{v}");

    // The judge: the command line's restore of the same snapshot, as carol.
    let (code, _, err) = judge::imap_restore(
        &e,
        &dovecot,
        &[
            "--account",
            ACCOUNT,
            "--map-user",
            &format!("{ACCOUNT}=carol@example.org"),
        ],
    );
    assert_eq!(code, Some(0), "{err}");
    let web = judge::record(&login(&dovecot), ACCOUNT).unwrap();
    let cli = judge::record(&login(&dovecot), "carol@example.org").unwrap();
    assert_eq!(web.folders.len(), 3, "{web:?}");
    let diff = judge::compare(&cli, &web, judge::Fidelity::SameOrder);
    assert!(diff.is_empty(), "{diff:#?}");
    let deep = &web.folders["Archive/2023"].messages[0];
    assert_eq!(deep.flags, ["\\Flagged", "\\Seen"], "{deep:?}");

    // Again: the journal knows it all; nothing is sent twice.
    let again = start_job(
        &s,
        &me,
        json!({"snapshot": id, "account": ACCOUNT, "to": "imap"}),
    );
    let v = ended(&s, &me, &again);
    assert_eq!(v["state"], "done", "{v}");
    assert_eq!(
        (
            v["summary"]["items_restored"].as_u64(),
            v["summary"]["items_present"].as_u64()
        ),
        (Some(0), Some(4)),
        "{v}"
    );
    let after = judge::record(&login(&dovecot), ACCOUNT).unwrap();
    assert!(judge::compare(&web, &after, judge::Fidelity::Exact).is_empty());

    // A folder to a directory, by the form (no script: a POST and a redirect).
    let form = serde_urlencoded::to_string([
        ("csrf", me.csrf.as_str()),
        ("snapshot", &id),
        ("account", ACCOUNT),
        ("folder", "Archive"),
        ("to", "maildir"),
        ("path", "case-1/archive"),
    ])
    .unwrap();
    let page = s.page(
        &q(
            "/restore",
            &[
                ("snapshot", &id),
                ("account", ACCOUNT),
                ("folder", "Archive"),
            ],
        ),
        &me,
    );
    assert!(
        page.contains("Restore into the mailbox") && page.contains("Restore as Maildir"),
        "{page}"
    );
    let r = s.post_form("/restore", Some(&me), &form);
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    let to = r.headers()[LOCATION].to_str().unwrap().to_string();
    let job = to.strip_prefix("/job?id=").unwrap().to_string();
    let v = ended(&s, &me, &job);
    assert_eq!(v["state"], "done", "{v}");
    assert_eq!(v["summary"]["items_restored"], 2, "{v}");
    let page = s.page(&to, &me);
    assert!(
        page.contains("Done") && !page.contains("http-equiv=\"refresh\""),
        "{page}"
    );
    let restored = dir.join("case-1/archive/example.org/alice/Maildir");
    for (sub, name) in [(".Archive", "arch:2,S"), (".Archive.2023", "deep:2,FS")] {
        let a = fs::read(restored.join(sub).join("cur").join(name)).unwrap();
        let b = fs::read(
            mail.join("example.org/alice/Maildir")
                .join(sub)
                .join("cur")
                .join(name),
        )
        .unwrap();
        assert_eq!(a, b, "{sub}/{name}");
    }
    assert!(!restored.join("cur").exists(), "INBOX was not asked for");

    // Out of the directory, or nowhere: refused, nothing written.
    for path in ["../out", "/tmp/x", "a/../../b", ""] {
        let body = json!({"snapshot": id, "account": ACCOUNT, "to": "maildir", "path": path});
        let r = post_json(&s, "/api/v1/restore", &me, &body);
        assert_eq!(r.status(), StatusCode::BAD_REQUEST, "{path:?}");
    }
    assert!(!e.path("out").exists());
    let r = post_json(
        &s,
        "/api/v1/restore",
        &Session {
            csrf: "wrong".into(),
            cookie: me.cookie.clone(),
        },
        &json!({"snapshot": id, "to": "imap"}),
    );
    assert_eq!(
        r.status(),
        StatusCode::FORBIDDEN,
        "no CSRF token, no restore"
    );

    let list = s.api("/api/v1/jobs", &me);
    assert_eq!(list["jobs"].as_array().unwrap().len(), 3, "{list}");
    let metrics = s
        .http
        .get(s.url("/metrics"))
        .bearer_auth(common::serve::TOKEN)
        .send()
        .unwrap()
        .text()
        .unwrap();
    assert!(
        metrics.contains("mailvault_serve_restore_jobs{state=\"done\"} 3"),
        "{metrics}"
    );
}

/// A job cancelled midway stops: what it appended is on the server, the rest counted as
/// not tried, nothing listed as failed. Started again, it finishes, and the server has
/// every message once.
#[test]
fn a_cancelled_job_stops_midway_and_a_second_one_finishes_it() {
    let e = Env::new();
    let mail = e.path("mail");
    for i in 0..600 {
        let body = format!("message number {i} {}", "filler text ".repeat(40));
        put(
            &mail,
            "",
            &format!("m{i:04}:2,S"),
            &plain(&format!("n{i}"), "Mon, 01 Jan 2024 10:00:00 +0000", &body),
        );
    }
    e.ok(&["init"]);
    e.ok(&["backup", &format!("maildir:{}", mail.display())]);
    token_file(&e, 0o600);
    let Some(dovecot) = judge::dovecot(None, String::new()) else {
        return;
    };
    let slow = Arc::new(AtomicBool::new(true));
    let port = common::relay::slow_relay(dovecot.port(), slow.clone(), Duration::from_millis(3));
    let mut flags = vec![
        "--restore-imap".to_string(),
        format!("imap://127.0.0.1:{port}"),
    ];
    flags.extend(master_flags(&e, &dovecot));
    let s = start(&e, &flags.iter().map(String::as_str).collect::<Vec<_>>());
    let me = s.session();
    let id = s.newest_snapshot(&me);
    let body = json!({"snapshot": id, "account": ACCOUNT, "to": "imap"});
    let job = start_job(&s, &me, body.clone());
    let until = Instant::now() + Duration::from_secs(60);
    while s.api(&q("/api/v1/job", &[("id", &job)]), &me)["total_items"] == 0 {
        assert!(Instant::now() < until);
        std::thread::sleep(Duration::from_millis(10));
    }
    let r = (s
        .http
        .post(s.url(&q("/api/v1/job/cancel", &[("id", &job)]))))
    .header(COOKIE, &me.cookie)
    .header("x-csrf-token", &me.csrf)
    .send()
    .unwrap();
    assert_eq!(r.status(), StatusCode::ACCEPTED);
    let v = ended(&s, &me, &job);
    assert_eq!(v["state"], "cancelled", "{v}");
    let sum = &v["summary"];
    let (restored, not_tried) = (
        sum["items_restored"].as_u64().unwrap(),
        sum["items_not_tried"].as_u64().unwrap(),
    );
    assert!(not_tried > 0 && restored < 600, "{v}");
    assert_eq!(restored + not_tried, 600, "{v}");
    assert_eq!(sum["failures"].as_array().unwrap().len(), 0, "{v}");
    let state = judge::record(&login(&dovecot), ACCOUNT).unwrap();
    assert_eq!(
        state.folders["INBOX"].messages.len() as u64,
        restored,
        "what the job says it appended is there"
    );

    slow.store(false, Relaxed);
    let job = start_job(&s, &me, body);
    let v = ended(&s, &me, &job);
    assert_eq!(v["state"], "done", "{v}");
    let state = judge::record(&login(&dovecot), ACCOUNT).unwrap();
    let msgs = &state.folders["INBOX"].messages;
    let distinct: std::collections::BTreeSet<&str> =
        msgs.iter().map(|m| m.sha256.as_str()).collect();
    assert_eq!(
        (msgs.len(), distinct.len()),
        (600, 600),
        "every message once"
    );
}

/// A mail user (`--user-auth imap://`, the restores going to the same server) restores
/// their own account with their own password, into their own mailbox; another account,
/// a directory, another user's job and a wrong password get nothing.
#[test]
fn a_mail_user_restores_their_own_account_alone_into_their_own_mailbox() {
    let e = Env::new();
    let mail = e.path("mail");
    plant(&mail);
    let bob = mail.join("example.org/bob/Maildir");
    let own = plain("his own", "Thu, 04 Jan 2024 10:00:00 +0000", "bobword");
    common::write_msg(&bob, "cur", "own:2,S", own.as_bytes());
    e.ok(&["init"]);
    e.ok(&["backup", &format!("maildir:{}", mail.display())]);
    token_file(&e, 0o600);
    let Some(dovecot) = judge::dovecot_of(None, String::new(), &[ACCOUNT, BOB]) else {
        return;
    };
    let dir = e.path("restores");
    fs::create_dir(&dir).unwrap();
    let auth = format!("imap://127.0.0.1:{}", dovecot.port());
    let s = start(
        &e,
        &[
            "--user-auth",
            &auth,
            "--restore-dir",
            &dir.display().to_string(),
        ],
    );
    let admin = s.session();
    let me = user_session(&s, BOB, mailvault_imap::testing::USER_PASSWORD);
    let id = s.newest_snapshot(&me);

    // The admin's job (alice's, to a directory): not bob's to see or cancel.
    let theirs = start_job(
        &s,
        &admin,
        json!({"snapshot": id, "account": ACCOUNT, "to": "maildir", "path": "a"}),
    );
    ended(&s, &admin, &theirs);
    for path in [
        q("/api/v1/job", &[("id", &theirs)]),
        q("/job", &[("id", &theirs)]),
    ] {
        assert_eq!(
            s.get(&path, Some(&me)).status(),
            StatusCode::NOT_FOUND,
            "{path}"
        );
    }
    let r = (s
        .http
        .post(s.url(&q("/api/v1/job/cancel", &[("id", &theirs)]))))
    .header(COOKIE, &me.cookie)
    .header("x-csrf-token", &me.csrf)
    .send()
    .unwrap();
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    assert_eq!(
        s.api("/api/v1/jobs", &me)["jobs"].as_array().unwrap().len(),
        0
    );

    let pw = mailvault_imap::testing::USER_PASSWORD;
    for (body, status) in [
        (
            json!({"snapshot": id, "account": ACCOUNT, "to": "imap", "password": pw}),
            StatusCode::NOT_FOUND,
        ),
        (
            json!({"snapshot": id, "to": "maildir", "path": "b"}),
            StatusCode::FORBIDDEN,
        ),
        (
            json!({"snapshot": id, "to": "imap"}),
            StatusCode::BAD_REQUEST,
        ),
    ] {
        let r = post_json(&s, "/api/v1/restore", &me, &body);
        assert_eq!(r.status(), status, "{body}");
    }
    assert!(!dir.join("b").exists());
    let page = s.get(
        &q("/restore", &[("snapshot", &id), ("account", ACCOUNT)]),
        Some(&me),
    );
    assert_eq!(page.status(), StatusCode::NOT_FOUND);
    let page = s.page(&q("/restore", &[("snapshot", &id)]), &me);
    assert!(
        page.contains("The mail password of bob@example.org")
            && !page.contains("Restore as Maildir"),
        "{page}"
    );

    // A wrong password: the job fails, nothing is written.
    let job = start_job(
        &s,
        &me,
        json!({"snapshot": id, "to": "imap", "password": "not-it"}),
    );
    let v = ended(&s, &me, &job);
    assert!(
        ["failed", "partial"].contains(&v["state"].as_str().unwrap()),
        "{v}"
    );
    assert_eq!(
        v["summary"]["items_restored"].as_u64().unwrap_or(0),
        0,
        "{v}"
    );

    // His own password: his own account, into his own mailbox; alice's stays empty.
    let job = start_job(
        &s,
        &me,
        json!({"snapshot": id, "to": "imap", "password": pw}),
    );
    let v = ended(&s, &me, &job);
    assert_eq!(v["state"], "done", "{v}");
    assert_eq!(v["summary"]["items_restored"], 1, "{v}");
    let bobs = judge::record(&login(&dovecot), BOB).unwrap();
    assert_eq!(bobs.folders["INBOX"].messages.len(), 1);
    let alices = judge::record(&login(&dovecot), ACCOUNT).unwrap();
    assert!(
        alices.folders.values().all(|f| f.messages.is_empty()),
        "{alices:?}"
    );
    assert_eq!(
        s.api("/api/v1/jobs", &me)["jobs"].as_array().unwrap().len(),
        2
    );
}

/// Issue 28: messages picked from a search's hits, across folders and snapshots (one
/// deleted since, so only an older snapshot holds it), restore together: ticked on the
/// search page, listed by the restore form, and written by the form's job to a
/// directory, each into its folder, byte for byte, and nothing else; by the API into a
/// live Dovecot, where the judge sees exactly those messages in their folders, with their
/// bytes and flags. A mail user cannot pick another account's message.
#[test]
fn picked_search_hits_across_folders_and_snapshots_restore_together() {
    let e = Env::new();
    let mail = e.path("mail");
    let msg = |subject: &str, body: &str| plain(subject, "Mon, 01 Jan 2024 10:00:00 +0000", body);
    let picks = [
        ("", "p1:2,S", msg("first pick", "pickword one")),
        (".Archive", "p2:2,F", msg("second pick", "pickword two")),
        (
            ".Archive.2023",
            "p3:2,",
            msg("third pick", "pickword three"),
        ),
    ];
    put(&mail, picks[0].0, picks[0].1, &picks[0].2);
    put(&mail, picks[1].0, picks[1].1, &picks[1].2);
    put(&mail, "", "other:2,S", &msg("other", "unrelated"));
    put(&mail, ".Archive", "kept:2,S", &msg("kept", "unrelated"));
    let src = format!("maildir:{}", mail.display());
    e.ok(&["init"]);
    e.ok(&["backup", &src]);
    common::at_rest();
    fs::remove_file(mail.join("example.org/alice/Maildir/.Archive/cur/p2:2,F")).unwrap();
    put(&mail, picks[2].0, picks[2].1, &picks[2].2);
    e.ok(&["backup", &src]);
    e.ok(&["index"]);
    token_file(&e, 0o600);
    let Some(dovecot) = judge::dovecot(None, String::new()) else {
        return;
    };
    let (dir, flags) = restores_to(&e, &dovecot);
    let s = start(&e, &flags.iter().map(String::as_str).collect::<Vec<_>>());
    let me = s.session();

    // The search page: a box to tick per hit, its value the hit's place.
    let page = s.page(&q("/search", &[("q", "pickword"), ("scope", "all")]), &me);
    let values: Vec<String> = (page.split("name=\"pick\"").skip(1))
        .map(|v| v.split("value=\"").nth(1).unwrap())
        .map(|v| v.split('"').next().unwrap().replace("&amp;", "&"))
        .collect();
    assert_eq!(values.len(), 3, "{page}");
    assert!(
        page.contains("form method=\"get\" action=\"/restore\""),
        "{page}"
    );
    let mut fields: Vec<(&str, &str)> = values.iter().map(|v| ("pick", v.as_str())).collect();
    let form = s.page(
        &format!("/restore?{}", serde_urlencoded::to_string(&fields).unwrap()),
        &me,
    );
    assert!(
        form.contains("3 picked message(s) of account alice@example.org, in 3 folder(s)"),
        "{form}"
    );
    assert_eq!(
        form.matches("name=\"pick\"").count(),
        2 * 3,
        "both forms carry the picks"
    );
    fields.extend([
        ("csrf", me.csrf.as_str()),
        ("snapshot", ""),
        ("to", "maildir"),
        ("path", "picked"),
    ]);
    let r = s.post_form(
        "/restore",
        Some(&me),
        &serde_urlencoded::to_string(&fields).unwrap(),
    );
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    let job = r.headers()[LOCATION]
        .to_str()
        .unwrap()
        .strip_prefix("/job?id=")
        .unwrap()
        .to_string();
    let v = ended(&s, &me, &job);
    assert_eq!(
        (v["state"].as_str(), v["summary"]["items_restored"].as_u64()),
        (Some("done"), Some(3)),
        "{v}"
    );
    let restored = dir.join("picked/example.org/alice/Maildir");
    for (folder, name, data) in &picks {
        let got = fs::read(restored.join(folder).join("cur").join(name)).unwrap();
        assert_eq!(got, data.as_bytes(), "{folder}/{name}");
    }
    let mut all: Vec<String> = walk(&restored);
    all.sort();
    assert_eq!(
        all,
        [
            ".Archive.2023/cur/p3:2,",
            ".Archive/cur/p2:2,F",
            "cur/p1:2,S"
        ],
        "nothing else"
    );

    // By the API into Dovecot; the judge sees those three alone.
    let places: Vec<Value> = (values.iter())
        .map(|v| {
            serde_json::to_value(
                serde_urlencoded::from_str::<Vec<(String, String)>>(v)
                    .unwrap()
                    .into_iter()
                    .collect::<std::collections::BTreeMap<_, _>>(),
            )
            .unwrap()
        })
        .collect();
    let bad = json!({"snapshot": "latest", "picked": places, "to": "imap"});
    assert_eq!(
        post_json(&s, "/api/v1/restore", &me, &bad).status(),
        StatusCode::BAD_REQUEST
    );
    let job = start_job(&s, &me, json!({"picked": places, "to": "imap"}));
    let v = ended(&s, &me, &job);
    assert_eq!(
        (v["state"].as_str(), v["summary"]["items_restored"].as_u64()),
        (Some("done"), Some(3)),
        "{v}"
    );
    let seen = judge::record(&login(&dovecot), ACCOUNT).unwrap();
    let mut got: Vec<(String, String, Vec<String>)> = Vec::new();
    for (name, f) in &seen.folders {
        for m in &f.messages {
            got.push((name.clone(), m.sha256.clone(), m.flags.clone()));
        }
    }
    // The judge's hash (Python's hashlib), of the planted bytes.
    let sha = |d: &str| {
        let mut py = std::process::Command::new("python3")
            .args([
                "-c",
                "import hashlib,sys; print(hashlib.sha256(sys.stdin.buffer.read()).hexdigest())",
            ])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        py.stdin.take().unwrap().write_all(d.as_bytes()).unwrap();
        String::from_utf8(py.wait_with_output().unwrap().stdout)
            .unwrap()
            .trim()
            .to_string()
    };
    let mut want = vec![
        (
            "Archive".to_string(),
            sha(&picks[1].2),
            vec!["\\Flagged".to_string()],
        ),
        ("Archive/2023".to_string(), sha(&picks[2].2), vec![]),
        (
            "INBOX".to_string(),
            sha(&picks[0].2),
            vec!["\\Seen".to_string()],
        ),
    ];
    want.sort();
    got.sort();
    assert_eq!(got, want);

    // The jobs outlive a restart of serve, with their reports.
    let before = s.api("/api/v1/jobs", &me);
    drop(s);
    let s = start(&e, &flags.iter().map(String::as_str).collect::<Vec<_>>());
    let me = s.session();
    let after = s.api("/api/v1/jobs", &me);
    assert_eq!(after, before);
    let v = s.api(&q("/api/v1/job", &[("id", &job)]), &me);
    assert_eq!(v["report"]["items_appended"], 3, "{v}");
}

/// The files below `root`, as paths from it.
fn walk(root: &std::path::Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut todo = vec![root.to_path_buf()];
    while let Some(d) = todo.pop() {
        for entry in fs::read_dir(&d).unwrap() {
            let p = entry.unwrap().path();
            match p.is_dir() {
                true => todo.push(p),
                false => out.push(p.strip_prefix(root).unwrap().display().to_string()),
            }
        }
    }
    out
}
