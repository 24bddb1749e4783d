//! Issue 28: the audit log. Logins (and failed ones), views, downloads and searches, by
//! the admin and by a mail user, are written to the repository as sealed records and
//! shown to the admin alone; a name given at a failed login is kept only when it is an
//! address (never what may be a password); nothing readable lands in the repository;
//! what came after the last batch is written when the server stops (SIGTERM), and
//! `check` opens every record.
#![allow(clippy::unwrap_used)]

mod common;

use common::serve::{plant, q, start, token_file, user_session, Server, Session, ACCOUNT};
use common::Env;
use reqwest::header::{CONTENT_TYPE, COOKIE};
use reqwest::StatusCode;
use serde_json::Value;
use std::fs;
use std::time::{Duration, Instant};

const BOB: &str = "bob@example.org";

/// The audit log's events (newest first) once none is waiting to be written.
fn written_log(s: &Server, admin: &Session) -> Vec<Value> {
    let until = Instant::now() + Duration::from_secs(30);
    loop {
        let v = s.api("/api/v1/audit", admin);
        let events = v["events"].as_array().unwrap().clone();
        assert_eq!(v["warnings"].as_array().unwrap().len(), 0, "{v}");
        if !events.is_empty() && events.iter().all(|e| e["written"] == true) {
            return events;
        }
        assert!(Instant::now() < until, "not written: {v}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn has(events: &[Value], who: &str, action: &str, detail: &str) -> bool {
    events.iter().any(|e| {
        e["who"] == who && e["action"] == action && e["detail"].as_str().unwrap().contains(detail)
    })
}

#[test]
fn what_admins_and_users_did_is_sealed_in_the_repository_and_shown_to_the_admin_alone() {
    let e = Env::new();
    let mail = e.path("mail");
    plant(&mail);
    e.ok(&["init"]);
    e.ok(&["backup", &format!("maildir:{}", mail.display())]);
    e.ok(&["index"]);
    token_file(&e, 0o600);
    let users = e.path("users");
    fs::write(&users, format!("{BOB}:{{PLAIN}}bobs-password::::\n")).unwrap();
    let auth = format!("passwd-file:{}", users.display());
    let s = start(&e, &["--user-auth", &auth, "--audit-flush", "200ms"]);

    for (user, pw) in [("hunter2", "x"), (BOB, "wrong-secret")] {
        assert_eq!(
            s.post_login(&[("user", user), ("token", pw)]).status(),
            StatusCode::UNAUTHORIZED
        );
    }
    let admin = s.session();
    let bob = user_session(&s, BOB, "bobs-password");
    let id = s.newest_snapshot(&admin);
    let place = [
        ("snapshot", id.as_str()),
        ("account", ACCOUNT),
        ("folder", "INBOX"),
        ("key", "zebra"),
    ];
    s.page(&q("/message", &place), &admin);
    assert_eq!(
        s.get(&q("/message/raw", &place), Some(&admin)).status(),
        StatusCode::OK
    );
    s.api(&q("/api/v1/search", &[("q", "zebraquartz")]), &admin);
    let r = (s.http.post(s.url("/api/v1/search")))
        .header(COOKIE, &admin.cookie)
        .header("x-csrf-token", &admin.csrf)
        .header(CONTENT_TYPE, "application/json")
        .body(r#"{"q": "postedquery"}"#)
        .send()
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    // Bob tries alice's message: refused, and recorded as refused.
    assert_eq!(
        s.get(&q("/message", &place), Some(&bob)).status(),
        StatusCode::NOT_FOUND
    );
    for path in ["/audit", "/api/v1/audit"] {
        assert_eq!(
            s.get(path, Some(&bob)).status(),
            StatusCode::NOT_FOUND,
            "{path}"
        );
    }

    let log = written_log(&s, &admin);
    let checks = [
        ("(a name that is not an address)", "login failed", "web UI"),
        (BOB, "login failed", "web UI"),
        ("admin", "login", "web UI"),
        (BOB, "login", "web UI"),
        ("admin", "view", "/message?snapshot="),
        ("admin", "download", "/message/raw?"),
        ("admin", "search", "q=zebraquartz"),
        ("admin", "search", "q=postedquery"),
        (BOB, "view", "key=zebra"),
    ];
    for (who, action, detail) in checks {
        assert!(
            has(&log, who, action, detail),
            "{who} {action} {detail}: {log:#?}"
        );
    }
    let refused = log
        .iter()
        .find(|e| e["who"] == BOB && e["action"] == "view");
    assert_eq!(refused.unwrap()["status"], 404);
    let text = serde_json::to_string(&log).unwrap();
    for secret in ["hunter2", "wrong-secret", "bobs-password"] {
        assert!(!text.contains(secret), "{secret} in the log");
    }
    // Sealed: nothing of it readable in the repository's files.
    let dir = e.repo().join("audit");
    let files: Vec<_> = fs::read_dir(&dir)
        .unwrap()
        .map(|f| f.unwrap().path())
        .collect();
    assert!(!files.is_empty());
    for f in &files {
        let bytes = fs::read(f).unwrap();
        for plain in [&b"zebraquartz"[..], b"bob@example", b"admin", b"login"] {
            assert!(!bytes.windows(plain.len()).any(|w| w == plain), "{f:?}");
        }
    }
    let page = s.page("/audit", &admin);
    assert!(
        page.contains("q=zebraquartz") && page.contains("Audit log"),
        "{page}"
    );
    drop(s);

    // Events after the last batch are written when the server stops.
    let s = start(&e, &["--audit-flush", "1h"]);
    let admin = s.session();
    s.page(
        &q("/message", &[place[0], place[1], place[2], ("key", "old")]),
        &admin,
    );
    let pid = s.child.id().to_string();
    assert!(std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap()
        .success());
    let mut s = s;
    let status = s.child.wait().unwrap();
    assert!(status.success(), "{status:?}");
    drop(s);
    let s = start(&e, &["--audit-flush", "200ms"]);
    let admin = s.session();
    let log = written_log(&s, &admin);
    assert!(has(&log, "admin", "view", "key=old"), "{log:#?}");
    drop(s);
    let (code, out, err) = e.run_text(&["check"]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(!err.contains("audit/"), "{err}");
}

/// Failed logins through a trusted reverse proxy count against the client that
/// `X-Forwarded-For` names, and the audit log records that client; without
/// `--trusted-proxy`, the header is the client's to write and is ignored.
#[test]
fn behind_a_trusted_proxy_the_forwarded_client_is_limited_and_recorded() {
    let e = Env::new();
    e.ok(&["init"]);
    token_file(&e, 0o600);
    let fail = |s: &Server, client: &str| {
        let (cookie, token) = s.login_token();
        let r = (s.http.post(s.url("/login")))
            .header(CONTENT_TYPE, "application/x-www-form-urlencoded")
            .header(COOKIE, cookie)
            .header("x-forwarded-for", format!("198.51.100.9, {client}"))
            .body(format!("token=wrong-token-0000&login_csrf={token}"))
            .send()
            .unwrap();
        r.status()
    };
    let s = start(
        &e,
        &["--trusted-proxy", "127.0.0.1", "--audit-flush", "200ms"],
    );
    for _ in 0..5 {
        assert_eq!(fail(&s, "203.0.113.7"), StatusCode::UNAUTHORIZED);
    }
    assert_eq!(fail(&s, "203.0.113.7"), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(
        fail(&s, "203.0.113.8"),
        StatusCode::UNAUTHORIZED,
        "another client"
    );
    let admin = s.session();
    let log = written_log(&s, &admin);
    let failed: Vec<&str> = (log.iter())
        .filter(|e| e["action"] == "login failed")
        .map(|e| e["address"].as_str().unwrap())
        .collect();
    assert_eq!(failed.len(), 6, "{log:#?}");
    assert!(
        failed.iter().all(|a| a.starts_with("203.0.113.")),
        "{failed:?}"
    );
    assert!(has(&log, "admin", "login refused", "web UI"));
    assert!(!serde_json::to_string(&log)
        .unwrap()
        .contains("198.51.100.9"));
    drop(s);

    // Not a trusted proxy: every header names "another client", all one address to us.
    let s = start(&e, &[]);
    for i in 0..5 {
        assert_eq!(
            fail(&s, &format!("203.0.113.{i}")),
            StatusCode::UNAUTHORIZED
        );
    }
    assert_eq!(fail(&s, "203.0.113.99"), StatusCode::TOO_MANY_REQUESTS);
}

/// The IMAP view's logins and opened mailboxes are in the audit log too.
#[test]
fn the_imap_views_logins_and_opened_mailboxes_are_recorded() {
    let e = Env::new();
    let mail = e.path("mail");
    plant(&mail);
    e.ok(&["init"]);
    e.ok(&["backup", &format!("maildir:{}", mail.display())]);
    token_file(&e, 0o600);
    let s = start(&e, &["--imap", "127.0.0.1:0", "--audit-flush", "200ms"]);
    let script = "import imaplib, sys\n\
        port, user, token = int(sys.argv[1]), sys.argv[2], sys.argv[3]\n\
        m = imaplib.IMAP4('127.0.0.1', port)\n\
        try:\n    m.login(user, 'wrong-token-xyz')\nexcept imaplib.IMAP4.error:\n    pass\n\
        m = imaplib.IMAP4('127.0.0.1', port)\n\
        m.login(user, token)\n\
        assert m.select('INBOX', readonly=True)[0] == 'OK'\n\
        assert m.select('Nope', readonly=True)[0] == 'NO'\n\
        m.logout()\n";
    common::python(&[
        "-c",
        script,
        &s.imap_port.to_string(),
        &format!("\"{ACCOUNT}*admin\""),
        common::serve::TOKEN,
    ]);
    let admin = s.session();
    let log = written_log(&s, &admin);
    assert!(has(&log, "admin", "imap login failed", ACCOUNT), "{log:#?}");
    assert!(
        has(&log, "admin", "imap login", &format!("IMAP view {ACCOUNT}")),
        "{log:#?}"
    );
    let opened: Vec<(&str, u64)> = (log.iter())
        .filter(|e| e["action"] == "imap open")
        .map(|e| (e["detail"].as_str().unwrap(), e["status"].as_u64().unwrap()))
        .collect();
    let inbox = format!("{ACCOUNT}: INBOX");
    let none = format!("{ACCOUNT}: (no such mailbox)");
    assert_eq!(
        opened,
        [(none.as_str(), 404), (inbox.as_str(), 200)],
        "{log:#?}"
    );
    assert!(!serde_json::to_string(&log)
        .unwrap()
        .contains("wrong-token-xyz"));
}
