//! `mailvault serve` (issue 28, first increment): the real binary on 127.0.0.1 with a port
//! the system chose, over a repository of planted messages, driven by a real HTTP client.
//! No route answers without a session; wrong tokens get 401 and then 429; a session walks
//! snapshot → account → folder → message through the pages and the API; the `.eml`
//! download is the stored file byte for byte; search finds a planted word; a POST without
//! the CSRF token gets 403; a hostile HTML message comes out of its frame route with none
//! of its active or remote parts and with the frame's CSP; a token file others can read is
//! refused. Issue 31: the account page shows whom each folder is shared with and the
//! account's sieve filters (the active one marked), a script opens as escaped text and
//! downloads byte for byte, and no name from the browser reaches anything else.
#![allow(clippy::unwrap_used)]

mod common;
mod judge;

use common::serve::{
    assert_headers, certificate, certificate_at, home_file, home_repository, only_our_script,
    plain, plant, put, q, start, token_file, user_session, JsonValue, Server, Session, ACCOUNT,
    BOB, DUPES, FRAME_CSP, PAGES_CSP, RULES, TOKEN,
};
use common::Env;
use reqwest::header::{CONTENT_TYPE, COOKIE, LOCATION, SET_COOKIE};
use reqwest::StatusCode;
use serde_json::Value;
use std::fs;
use std::os::unix::fs::PermissionsExt;
/// A message with an HTML part that tries everything: scripts, handlers, `javascript:`
/// and `data:` links, remote images, CSS that loads URLs, a meta refresh, SVG with script,
/// and an attachment named to climb out of a directory.
const HOSTILE: &str = "From: Mallory <m@evil.example>\r\nTo: alice@example.org\r\n\
Subject: <script>alert('subject')</script> hostile\r\nDate: Tue, 16 Jan 2024 10:00:00 +0000\r\n\
MIME-Version: 1.0\r\nContent-Type: multipart/mixed; boundary=B\r\n\r\n\
--B\r\nContent-Type: text/html; charset=utf-8\r\n\r\n\
<html><head><meta http-equiv=\"refresh\" content=\"0;url=http://evil.example/r\">\
<style>body{background:url(http://evil.example/bg.png)}</style></head>\
<body onload=\"alert(1)\"><p>benign words here</p><script>alert(2)</script>\
<img src=\"http://evil.example/t.gif\" onerror=\"alert(3)\">\
<a href=\"javascript:alert(4)\">js</a><a href=\"data:text/html,x\">d</a>\
<div style=\"background-image:url(http://evil.example/c.png)\">css</div>\
<svg onload=\"alert(5)\"><script>alert(6)</script></svg>\
<form action=\"http://evil.example/f\"><input name=q></form></body></html>\r\n\
--B\r\nContent-Type: text/html\r\nContent-Disposition: attachment; filename=\"../../x.html\"\r\n\r\n\
<script>alert(7)</script>\r\n--B--\r\n";

fn repository() -> Env {
    let e = Env::new();
    let mail = e.path("mail");
    plant(&mail);
    put(&mail, "", "hostile:2,", HOSTILE);
    put(
        &mail,
        ".Archive.2023",
        "arch23:2,F",
        &plain("archived 2023", "Mon, 02 Jan 2023 10:00:00 +0000", "older"),
    );
    let src = format!("maildir:{}", mail.display());
    e.ok(&["init"]);
    e.ok(&["backup", &src]);
    common::at_rest();
    put(
        &mail,
        "",
        "newer:2,",
        &plain("newest", "Thu, 04 Jan 2024 10:00:00 +0000", "later"),
    );
    e.ok(&["backup", &src]);
    e.ok(&["index"]);
    token_file(&e, 0o600);
    e
}

/// The planted repository served, a session, and the newest snapshot's id.
fn serving() -> (Env, Server, Session, String) {
    let e = repository();
    let s = start(&e, &[]);
    let me = s.session();
    let id = s.newest_snapshot(&me);
    (e, s, me, id)
}

/// Every route, pages and API, with parameters that would answer with a session.
fn routes() -> Vec<String> {
    let snap = [("snapshot", "00000000")];
    let place = [
        ("snapshot", "00000000"),
        ("account", ACCOUNT),
        ("folder", "INBOX"),
        ("key", "old"),
    ];
    let mut v = vec![
        "/".to_string(),
        "/search?q=x".into(),
        "/no/such/page".into(),
    ];
    for base in ["", "/api/v1"] {
        let (s, a, f) = match base {
            "" => ("/snapshot", "/account", "/folder"),
            _ => ("/snapshots", "/accounts", "/folders"),
        };
        v.push(format!("{base}{s}"));
        v.push(q(&format!("{base}{a}"), &snap));
        v.push(q(&format!("{base}{f}"), &place[..2]));
        v.push(q(&format!("{base}/message"), &place));
        v.push(q(&format!("{base}/message/raw"), &place));
        v.push(q(&format!("{base}/folder/mbox"), &place[..3]));
        v.push(q(&format!("{base}/account/zip"), &place[..2]));
    }
    let file = [
        ("snapshot", "00000000"),
        ("account", ACCOUNT),
        ("folder", "~/sieve"),
        ("name", "rules.sieve"),
    ];
    v.extend([
        q("/account/file", &file),
        q("/account/file/raw", &file),
        q("/api/v1/file/raw", &file),
        q("/api/v1/filters", &place[..2]),
        q("/folder", &place[..3]),
        q("/api/v1/messages", &place[..3]),
        q("/message/html", &place),
        "/api/v1/search?q=x".into(),
        "/repository".into(),
        "/api/v1/repository".into(),
        "/api/v1/session".into(),
        "/api/v1/nothing".into(),
        q("/restore", &snap),
        "/jobs".into(),
        "/job?id=0".into(),
        "/api/v1/jobs".into(),
        "/api/v1/job?id=0".into(),
    ]);
    v
}

#[test]
fn no_route_answers_without_a_session_and_failed_logins_are_limited() {
    let e = repository();
    let s = start(&e, &[]);
    let forged = Session {
        cookie: format!("mailvault_session={}", "a".repeat(64)),
        csrf: String::new(),
    };
    for path in routes() {
        for who in [None, Some(&forged)] {
            let r = s.get(&path, who);
            match path.starts_with("/api/") {
                true => assert_eq!(r.status(), StatusCode::UNAUTHORIZED, "{path}"),
                false => {
                    assert_eq!(r.status(), StatusCode::FOUND, "{path}");
                    assert_eq!(r.headers()[LOCATION], "/login", "{path}");
                }
            }
        }
    }
    for path in [
        "/logout",
        "/api/v1/logout",
        "/api/v1/search",
        "/restore",
        "/job/cancel",
        "/api/v1/restore",
        "/api/v1/job/cancel",
    ] {
        let r = s.post_form(path, None, "csrf=x");
        assert!(
            [StatusCode::FOUND, StatusCode::UNAUTHORIZED].contains(&r.status()),
            "{path}: {}",
            r.status()
        );
    }
    // The login page and the stylesheet are all that answer, with the headers.
    let r = s.get("/login", None);
    assert_eq!(r.status(), StatusCode::OK);
    assert_headers(r.headers(), PAGES_CSP);
    // The login form needs its own token in the form and its cookie, equal and signed by
    // the server (login CSRF): the right admin token without them logs nobody in, and
    // does not count as a failed login.
    let (cookie, token) = s.login_token();
    let (other_cookie, _) = s.login_token();
    let forged = "ab".repeat(32);
    for (cookie, field) in [
        (None, token.as_str()),
        (Some(other_cookie.as_str()), token.as_str()),
        (Some(cookie.as_str()), ""),
        (Some(&*format!("mailvault_login={forged}")), forged.as_str()),
    ] {
        let form = serde_urlencoded::to_string([("token", TOKEN), ("login_csrf", field)]);
        let mut post = (s.http.post(s.url("/login")))
            .header(CONTENT_TYPE, "application/x-www-form-urlencoded")
            .body(form.unwrap());
        if let Some(c) = cookie {
            post = post.header(COOKIE, c);
        }
        let r = post.send().unwrap();
        assert_eq!(r.status(), StatusCode::FORBIDDEN, "{cookie:?} {field}");
        let set = r.headers()[SET_COOKIE].to_str().unwrap();
        assert!(
            set.starts_with("mailvault_login="),
            "a new form, no session: {set}"
        );
    }
    assert_eq!(s.get("/static/style.css", None).status(), StatusCode::OK);
    assert_eq!(s.get("/static/icon.svg", None).status(), StatusCode::OK);
    // The API's login: a cookie and the CSRF token; its logout needs the token.
    let login = |token: &str| {
        let body = serde_json::json!({ "token": token }).to_string();
        (s.http.post(s.url("/api/v1/login")))
            .header(CONTENT_TYPE, "application/json")
            .body(body)
            .send()
            .unwrap()
    };
    let r = login(TOKEN);
    assert_eq!(r.status(), StatusCode::OK);
    let set = r.headers()[SET_COOKIE].to_str().unwrap().to_string();
    let me = Session {
        cookie: set.split(';').next().unwrap().to_string(),
        csrf: r.json_value()["csrf_token"].as_str().unwrap().to_string(),
    };
    assert_eq!(
        s.api("/api/v1/session", &me)["csrf_token"],
        me.csrf.as_str()
    );
    let logout = |csrf: &str| {
        (s.http.post(s.url("/api/v1/logout")))
            .header(COOKIE, &me.cookie)
            .header("x-csrf-token", csrf)
            .send()
            .unwrap()
            .status()
    };
    assert_eq!(logout("wrong"), StatusCode::FORBIDDEN);
    assert_eq!(logout(&me.csrf), StatusCode::NO_CONTENT);
    assert_eq!(
        s.get("/api/v1/snapshots", Some(&me)).status(),
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(login("wrong").status(), StatusCode::UNAUTHORIZED);
    // Five wrong tokens a minute (that one counted), then even the right one waits.
    for wrong in ["", "nope", &TOKEN[..TOKEN.len() - 1], &format!("{TOKEN}x")] {
        let r = s.login(wrong);
        assert_eq!(r.status(), StatusCode::UNAUTHORIZED, "{wrong:?}");
        let set = r.headers()[SET_COOKIE].to_str().unwrap();
        assert!(
            set.starts_with("mailvault_login="),
            "a new form, no session: {set}"
        );
    }
    let r = s.login(TOKEN);
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(r.headers()["retry-after"], "60");
    let err = fs::read_to_string(e.path("serve.err")).unwrap();
    assert!(!err.contains(TOKEN) && !err.contains("nope"), "{err}");
}

/// The messages' file in the mail store, and its bytes' length and hash.
fn file_of(e: &Env, dir: &str, name: &str) -> (usize, blake3::Hash) {
    let data = fs::read(
        e.path("mail/example.org/alice/Maildir")
            .join(dir)
            .join("cur")
            .join(name),
    )
    .unwrap();
    (data.len(), blake3::hash(&data))
}

#[test]
fn a_session_walks_snapshot_account_folder_message_and_downloads_and_searches() {
    let e = repository();
    let s = start(&e, &["--page-size", "2"]);
    let me = s.session();
    // Snapshots, newest first; the pages link each level to the next.
    let snaps = s.api("/api/v1/snapshots", &me);
    assert_eq!(snaps.as_array().unwrap().len(), 2);
    let id = snaps[0]["id"].as_str().unwrap().to_string();
    assert!(s
        .page("/", &me)
        .contains(&q("/snapshot", &[("snapshot", &id)]).replace('&', "&amp;")));
    let accounts = s.api(&q("/api/v1/accounts", &[("snapshot", &id)]), &me);
    assert_eq!(accounts["accounts"][0]["name"], ACCOUNT);
    assert!(s
        .page(&q("/snapshot", &[("snapshot", &id)]), &me)
        .contains(ACCOUNT));
    let folders = s.api(
        &q(
            "/api/v1/folders",
            &[("snapshot", &id), ("account", ACCOUNT)],
        ),
        &me,
    );
    let mut names: Vec<&str> = (folders["folders"].as_array().unwrap().iter())
        .map(|f| f["name"].as_str().unwrap())
        .collect();
    names.sort_unstable();
    assert_eq!(names, ["Archive", "Archive/2023", "INBOX"]);
    assert!(s
        .page(
            &q("/account", &[("snapshot", &id), ("account", ACCOUNT)]),
            &me
        )
        .contains("Archive"));
    // INBOX's four messages, two a page, newest first by Date.
    let at = |page: &str| {
        q(
            "/api/v1/messages",
            &[
                ("snapshot", &id),
                ("account", ACCOUNT),
                ("folder", "INBOX"),
                ("page", page),
            ],
        )
    };
    let keys = |v: &Value| -> Vec<String> {
        (v["items"].as_array().unwrap().iter())
            .map(|m| m["key"].as_str().unwrap().to_string())
            .collect()
    };
    let (p1, p2) = (s.api(&at("1"), &me), s.api(&at("2"), &me));
    assert_eq!(
        (p1["total"].as_u64(), p1["pages"].as_u64()),
        (Some(4), Some(2))
    );
    assert_eq!(keys(&p1), ["hostile", "newer"]);
    assert_eq!(keys(&p2), ["zebra", "old"]);
    let folder_page = s.page(&at("2").replace("/api/v1/messages", "/folder"), &me);
    assert!(
        folder_page.contains("planted") && folder_page.contains("Page 2 of 2"),
        "{folder_page}"
    );
    // Sorted by another column, either way, two a page (the folder sorted once, kept).
    let sorted = |sort: &str, order: &str, page: &str| {
        keys(&s.api(&format!("{}&sort={sort}&order={order}", at(page)), &me))
    };
    // Subjects case-insensitively: "<script>… hostile", "newest", "oldest", "planted".
    assert_eq!(sorted("subject", "asc", "1"), ["hostile", "newer"]);
    assert_eq!(sorted("subject", "asc", "2"), ["old", "zebra"]);
    assert_eq!(sorted("subject", "desc", "1"), ["zebra", "old"]);
    assert_eq!(sorted("date", "asc", "1"), ["old", "zebra"]);
    // Bob three times, then Mallory; the hostile message is the largest.
    assert_eq!(sorted("from", "asc", "2")[1], "hostile");
    assert_eq!(sorted("from", "desc", "1")[0], "hostile");
    assert_eq!(sorted("size", "desc", "1")[0], "hostile");
    assert_eq!(sorted("size", "asc", "2")[1], "hostile");
    let bad = s.get(&format!("{}&sort=nope", at("1")), Some(&me));
    assert_eq!(bad.status(), StatusCode::BAD_REQUEST);
    assert!(
        folder_page.contains("sort=subject"),
        "sortable headers: {folder_page}"
    );
    // A message: its page and its JSON; held by both snapshots.
    let place = [
        ("snapshot", &id[..]),
        ("account", ACCOUNT),
        ("folder", "INBOX"),
        ("key", "old"),
    ];
    let m = s.api(&q("/api/v1/message", &place), &me);
    assert_eq!(m["headers"]["subject"], "oldest");
    assert_eq!(m["held_by"][0]["first_snapshot"], snaps[1]["id"]);
    assert_eq!(m["held_by"][0]["last_snapshot"], snaps[0]["id"]);
    let page = s.page(&q("/message", &place), &me);
    assert!(
        page.contains("oldest") && page.contains("Held by") && page.contains("first"),
        "{page}"
    );
    // The download is the file as it was stored.
    for path in ["/message/raw", "/api/v1/message/raw"] {
        let r = s.get(&q(path, &place), Some(&me));
        assert_eq!(r.status(), StatusCode::OK);
        assert_eq!(r.headers()[CONTENT_TYPE], "message/rfc822");
        assert_eq!(
            r.headers()["content-disposition"],
            "attachment; filename=\"old.eml\""
        );
        let body = r.bytes().unwrap();
        assert_eq!(
            (body.len(), blake3::hash(&body)),
            file_of(&e, "", "old:2,S")
        );
    }
    let arch = [
        ("snapshot", &id[..]),
        ("account", ACCOUNT),
        ("folder", "Archive"),
        ("key", "arch"),
    ];
    let body = s.get(&q("/message/raw", &arch), Some(&me)).bytes().unwrap();
    assert_eq!(
        (body.len(), blake3::hash(&body)),
        file_of(&e, ".Archive", "arch:2,S")
    );
    // Missing things are 404, in both.
    let gone = [
        ("snapshot", &id[..]),
        ("account", ACCOUNT),
        ("folder", "INBOX"),
        ("key", "nope"),
    ];
    assert_eq!(
        s.get(&q("/message", &gone), Some(&me)).status(),
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        s.get(&q("/api/v1/message", &gone), Some(&me)).status(),
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        s.get(
            &q("/api/v1/accounts", &[("snapshot", "ffffffff")]),
            Some(&me)
        )
        .status(),
        StatusCode::NOT_FOUND
    );
    // Search finds the planted word, in the API and on the page.
    let hits = s.api("/api/v1/search?q=zebraquartz", &me);
    assert_eq!(hits["total"], 1, "{hits}");
    assert_eq!(hits["hits"][0]["key"], "zebra");
    // Each hit names the message's place: its page opens from it.
    for (word, subject) in [("zebraquartz", "planted"), ("kept", "archived")] {
        let hit = &s.api(&format!("/api/v1/search?q={word}"), &me)["hits"][0];
        let at = ["last_snapshot", "account", "folder", "key"].map(|k| hit[k].as_str().unwrap());
        let place = [
            ("snapshot", at[0]),
            ("account", at[1]),
            ("folder", at[2]),
            ("key", at[3]),
        ];
        let m = s.api(&q("/api/v1/message", &place), &me);
        assert_eq!(m["headers"]["subject"], subject, "{hit}");
    }
    let found = s.page("/search?q=zebraquartz", &me);
    assert!(found.contains("planted"), "{found}");
    // Every message a search finds, as one mbox (Python's mailbox reads it back).
    assert!(found.contains("/search/mbox?q=zebraquartz"), "{found}");
    let r = s.get("/api/v1/search/mbox?q=from%3Abob%40example.org", Some(&me));
    assert_eq!(r.status(), StatusCode::OK, "{:?}", r.text());
    assert_eq!(r.headers()[CONTENT_TYPE], "application/mbox");
    let mbox = r.bytes().unwrap();
    let all = s.api("/api/v1/search?q=from%3Abob%40example.org", &me)["total"]
        .as_u64()
        .unwrap();
    let path = e.path("found.mbox");
    fs::write(&path, &mbox).unwrap();
    let py = "import mailbox,sys\nprint(len(mailbox.mbox(sys.argv[1])))";
    let out = std::process::Command::new("python3")
        .args(["-c", py])
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        all.to_string(),
        "{all} found"
    );
    assert!(all >= 3, "{all}");
    for empty in ["/api/v1/search/mbox?q=", "/search/mbox?q=%20"] {
        assert_eq!(
            s.get(empty, Some(&me)).status(),
            StatusCode::BAD_REQUEST,
            "{empty}"
        );
    }
    assert!(!s
        .page("/search?q=nosuchwordanywhere", &me)
        .contains("planted"));
    assert_eq!(
        s.get("/api/v1/search?q=%28", Some(&me)).status(),
        StatusCode::BAD_REQUEST
    );
    csrf_is_required(&s, &me);
}

/// POSTs without the session's CSRF token are refused; with it they work; logout ends
/// the session.
fn csrf_is_required(s: &Server, me: &Session) {
    let post = |csrf: Option<&str>| {
        let mut r = (s.http.post(s.url("/api/v1/search")))
            .header(COOKIE, &me.cookie)
            .header(CONTENT_TYPE, "application/json")
            .body(r#"{"q": "zebraquartz"}"#);
        if let Some(c) = csrf {
            r = r.header("x-csrf-token", c);
        }
        r.send().unwrap()
    };
    assert_eq!(post(None).status(), StatusCode::FORBIDDEN);
    assert_eq!(post(Some("0")).status(), StatusCode::FORBIDDEN);
    assert_eq!(post(Some(&"0".repeat(64))).status(), StatusCode::FORBIDDEN);
    let ok = post(Some(&me.csrf));
    assert_eq!(ok.status(), StatusCode::OK);
    assert_eq!(ok.json_value()["total"], 1);
    for path in ["/restore", "/job/cancel"] {
        let status = s.post_form(path, Some(me), "to=imap&id=0").status();
        assert_eq!(status, StatusCode::FORBIDDEN, "{path}");
    }
    assert_eq!(
        s.post_form("/logout", Some(me), "").status(),
        StatusCode::FORBIDDEN
    );
    assert_eq!(
        s.post_form("/logout", Some(me), "csrf=abc").status(),
        StatusCode::FORBIDDEN
    );
    assert_eq!(s.get("/", Some(me)).status(), StatusCode::OK);
    let form = format!("csrf={}", me.csrf);
    let r = s.post_form("/logout", Some(me), &form);
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    assert!(r.headers()[SET_COOKIE]
        .to_str()
        .unwrap()
        .contains("Max-Age=0"));
    assert_eq!(s.get("/", Some(me)).status(), StatusCode::FOUND);
    assert_eq!(
        s.get("/api/v1/snapshots", Some(me)).status(),
        StatusCode::UNAUTHORIZED
    );
}

#[test]
fn hostile_html_comes_out_inert_in_a_sandboxed_frame() {
    let (_e, s, me, id) = serving();
    let place = [
        ("snapshot", &id[..]),
        ("account", ACCOUNT),
        ("folder", "INBOX"),
        ("key", "hostile"),
    ];
    let r = s.get(&q("/message/html", &place), Some(&me));
    assert_eq!(r.status(), StatusCode::OK);
    assert_headers(r.headers(), FRAME_CSP);
    let body = r.text().unwrap();
    let low = body.to_ascii_lowercase();
    for bad in [
        "<script",
        "alert",
        "onload",
        "onerror",
        "javascript:",
        "data:",
        "evil.example",
        "url(",
        "<meta",
        "refresh",
        "<style",
        "<svg",
        "<img",
        "<form",
        "<input",
    ] {
        assert!(!low.contains(bad), "{bad} in:\n{body}");
    }
    assert!(body.contains("benign words here"), "{body}");
    // The page frames it sandboxed, and escapes the subject and the attachment's name.
    let page = s.page(&q("/message", &place), &me);
    let frame = &page[page.find("<iframe").expect("a frame")..];
    let frame = &frame[..frame.find('>').unwrap()];
    assert!(
        frame.contains("sandbox=\"\"") && frame.contains("src=\"/message/html?"),
        "{frame}"
    );
    assert!(!page.contains("allow-"), "{page}");
    assert!(only_our_script(&page), "{page}");
    assert!(
        page.contains("&lt;script&gt;alert(&#39;subject&#39;)&lt;/script&gt; hostile")
            || page.contains("&lt;script&gt;alert('subject')&lt;/script&gt; hostile"),
        "{page}"
    );
    assert!(page.contains("../../x.html"), "{page}");
    // The attachment downloads decoded, as octet-stream under a safe name, never inline.
    assert!(page.contains("/message/attachment?"), "{page}");
    let mut at = place.to_vec();
    at.push(("n", "0"));
    for base in ["/message/attachment", "/api/v1/message/attachment"] {
        let r = s.get(&q(base, &at), Some(&me));
        assert_eq!(r.status(), StatusCode::OK, "{base}");
        let h = r.headers();
        assert_eq!(h[CONTENT_TYPE], "application/octet-stream");
        assert_eq!(h["x-content-type-options"], "nosniff");
        let disposition = h["content-disposition"].to_str().unwrap().to_string();
        assert!(
            disposition.starts_with("attachment; filename=\"") && !disposition.contains('/'),
            "{disposition}"
        );
        assert_eq!(r.text().unwrap().trim_end(), "<script>alert(7)</script>");
    }
    at[4] = ("n", "1");
    assert_eq!(
        s.get(&q("/message/attachment", &at), Some(&me)).status(),
        StatusCode::NOT_FOUND
    );
    // Parameters missing or malformed: 400, as JSON in the API, with the headers.
    for path in ["/api/v1/accounts", "/api/v1/messages?snapshot=x&page=-1"] {
        let r = s.get(path, Some(&me));
        assert_eq!(r.status(), StatusCode::BAD_REQUEST, "{path}");
        assert_headers(r.headers(), PAGES_CSP);
        assert!(r.json_value()["error"]
            .as_str()
            .unwrap()
            .starts_with("bad parameters"));
    }
    let r = s.get("/folder?snapshot=x", Some(&me));
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    assert!(r.text().unwrap().contains("bad parameters"));
    // A message without HTML has no frame.
    let plain = [
        ("snapshot", &id[..]),
        ("account", ACCOUNT),
        ("folder", "INBOX"),
        ("key", "old"),
    ];
    assert_eq!(
        s.get(&q("/message/html", &plain), Some(&me)).status(),
        StatusCode::NOT_FOUND
    );
}

#[test]
fn a_token_file_others_can_read_and_a_public_address_without_tls_are_refused() {
    let e = Env::new();
    let token = token_file(&e, 0o644).display().to_string();
    let out = e.expect(
        2,
        &[
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--admin-token-file",
            &token,
        ],
    );
    assert!(
        out.contains("mode 0644") && out.contains("chmod 600"),
        "{out}"
    );
    assert!(!out.contains(TOKEN), "{out}");
    token_file(&e, 0o600);
    let out = e.expect(
        2,
        &[
            "serve",
            "--listen",
            "0.0.0.0:0",
            "--admin-token-file",
            &token,
        ],
    );
    assert!(
        out.contains("not a loopback address") && out.contains("--insecure-listen"),
        "{out}"
    );
    fs::write(e.path("token"), "short\n").unwrap();
    let out = e.expect(2, &["serve", "--admin-token-file", &token]);
    assert!(out.contains("too short"), "{out}");
}

#[test]
fn a_running_server_follows_backups_and_index_and_lets_a_prune_run_when_idle() {
    let e = repository();
    let s = start(&e, &["--recheck", "0s", "--idle-close", "1h"]);
    let me = s.session();
    assert_eq!(s.api("/api/v1/snapshots", &me).as_array().unwrap().len(), 2);
    // A backup and an index run while it serves: the new snapshot is read (its trees are
    // in packs the index read at start did not know) and its message found.
    let mail = e.path("mail");
    common::at_rest();
    put(
        &mail,
        "",
        "fresh:2,",
        &plain(
            "fresh one",
            "Sat, 20 Jan 2024 10:00:00 +0000",
            "a quokkaplume",
        ),
    );
    e.ok(&["backup", &format!("maildir:{}", mail.display())]);
    e.ok(&["index"]);
    let snaps = s.api("/api/v1/snapshots", &me);
    assert_eq!(snaps.as_array().unwrap().len(), 3);
    let id = snaps[0]["id"].as_str().unwrap();
    let page = q(
        "/api/v1/messages",
        &[("snapshot", id), ("account", ACCOUNT), ("folder", "INBOX")],
    );
    assert_eq!(s.api(&page, &me)["items"][0]["key"], "fresh");
    let hits = s.api("/api/v1/search?q=quokkaplume", &me);
    assert_eq!(hits["hits"][0]["key"], "fresh", "{hits}");
    // Idle, it gives back its read lock: a prune runs; then it opens the repository again.
    drop(s);
    let s = start(&e, &["--idle-close", "2s"]);
    let me = s.session();
    assert_eq!(s.api(&page, &me)["total"], 5);
    std::thread::sleep(std::time::Duration::from_secs(4));
    e.ok(&["prune", "--retry-lock", "3s"]);
    assert_eq!(s.api("/api/v1/snapshots", &me).as_array().unwrap().len(), 3);
    assert_eq!(s.api(&page, &me)["total"], 5);
}

/// The `cur/` files of a folder of the test account: (length, BLAKE3) of each, sorted.
fn folder_files(e: &Env, dir: &str) -> Vec<(usize, blake3::Hash)> {
    let cur = e
        .path("mail/example.org/alice/Maildir")
        .join(dir)
        .join("cur");
    let mut v: Vec<_> = (fs::read_dir(cur).unwrap())
        .map(|f| {
            let d = fs::read(f.unwrap().path()).unwrap();
            (d.len(), blake3::hash(&d))
        })
        .collect();
    v.sort_by_key(|(n, h)| (*n, *h.as_bytes()));
    v
}

#[test]
fn a_folder_downloads_as_an_mbox_that_python_and_our_reader_read_back_exactly() {
    let (e, s, me, id) = serving();
    let url = |folder: &str| {
        q(
            "/api/v1/folder/mbox",
            &[("snapshot", &id), ("account", ACCOUNT), ("folder", folder)],
        )
    };
    let r = s.get(&url("INBOX"), Some(&me));
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(r.headers()[CONTENT_TYPE], "application/mbox");
    assert_eq!(
        r.headers()["content-disposition"],
        "attachment; filename=\"INBOX.mbox\""
    );
    let data = r.bytes().unwrap();
    // Our reader: every message byte for byte, with its flags.
    let read: Vec<_> = mailvault_core::mail::MboxReader::new(&data[..])
        .map(|m| m.unwrap())
        .collect();
    let mut got: Vec<_> = (read.iter())
        .map(|m| (m.bytes.len(), blake3::hash(&m.bytes)))
        .collect();
    got.sort_by_key(|(n, h)| (*n, *h.as_bytes()));
    assert_eq!(got, folder_files(&e, ""));
    let seen = |m: &mailvault_core::mail::MboxMessage| m.meta.flags.iter().any(|f| f == "\\Seen");
    let subject_seen: std::collections::BTreeMap<String, bool> = (read.iter())
        .map(|m| {
            let text = String::from_utf8_lossy(&m.bytes);
            let subject = text
                .lines()
                .find_map(|l| l.strip_prefix("Subject: "))
                .unwrap();
            (subject.to_string(), seen(m))
        })
        .collect();
    assert!(subject_seen["oldest"]);
    assert!(!subject_seen["newest"]);
    // Python's mailbox reads the same messages and flags.
    let file = e.path("INBOX.mbox");
    fs::write(&file, &data).unwrap();
    let out = common::python(&[
        "-c",
        "import mailbox, json, sys\n\
         print(json.dumps(sorted([m['subject'], 'R' in m.get_flags()] \
         for m in mailbox.mbox(sys.argv[1], create=False))))",
        file.to_str().unwrap(),
    ]);
    let py: Value = serde_json::from_slice(&out).unwrap();
    let mut want: Vec<Value> = (subject_seen.iter())
        .map(|(s, seen)| serde_json::json!([s, seen]))
        .collect();
    want.sort_by_key(|v| v.to_string());
    let mut py = py.as_array().unwrap().clone();
    py.sort_by_key(|v| v.to_string());
    assert_eq!(py, want);
    // One folder, without its subfolders: its pages and its mbox.
    let archive = q(
        "/api/v1/messages",
        &[
            ("snapshot", &id),
            ("account", ACCOUNT),
            ("folder", "Archive"),
        ],
    );
    assert_eq!(s.api(&archive, &me)["total"], 1);
    let r = s.get(&url("Archive"), Some(&me));
    assert_eq!(r.status(), StatusCode::OK);
    let archive = r.bytes().unwrap();
    let msgs: Vec<_> = mailvault_core::mail::MboxReader::new(&archive[..])
        .map(|m| m.unwrap())
        .collect();
    assert_eq!(msgs.len(), 1);
    assert!(msgs[0].from_line.is_some());
    // No such folder: an error answer, not an empty mbox.
    let r = s.get(&url("Nope"), Some(&me));
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    assert!(r.json_value()["error"].as_str().unwrap().contains("Nope"));
    // The folder page links to it.
    let page = s.page(&url("INBOX").replace("/api/v1/folder/mbox", "/folder"), &me);
    assert!(page.contains("/folder/mbox?"), "{page}");
}

/// Issue 28: a folder, and a search's hits, download as a zip of `.eml` files that
/// Python's `zipfile` reads back (every CRC right): each message byte for byte under
/// `<account>/<folder>/`, names with no `..` or absolute path, and the folder's sidecar
/// with the flags.
#[test]
fn a_folder_and_a_search_download_as_a_zip_of_eml_that_python_reads_back_exactly() {
    let (e, s, me, id) = serving();
    let folder = [
        ("snapshot", &id[..]),
        ("account", ACCOUNT),
        ("folder", "INBOX"),
    ];
    let entries = zip_download(&e, &s, &me, &q("/api/v1/folder/zip", &folder), "INBOX.zip");
    let prefix = format!("{ACCOUNT}/INBOX/");
    let mut got = Vec::new();
    for (name, bytes) in &entries {
        assert!(name.starts_with(&prefix), "{name}");
        assert!(
            !name.split('/').any(|c| c == ".." || c.is_empty()),
            "{name}"
        );
        if name.ends_with(".eml") {
            got.push((bytes.len(), blake3::hash(bytes)));
        } else {
            assert_eq!(name, &format!("{prefix}.mailvault-flags"));
            let side = mailvault_core::mail::Sidecar::parse(bytes).unwrap();
            let seen = (side.entries.iter())
                .filter(|e| e.meta.flags.iter().any(|f| f == "\\Seen"))
                .count();
            assert_eq!(
                (side.entries.len(), seen),
                (got_len(&entries), 2),
                "{side:?}"
            );
        }
    }
    got.sort_by_key(|(n, h)| (*n, *h.as_bytes()));
    assert_eq!(got, folder_files(&e, ""));
    // A search's hits: the one message, under its account and folder.
    let r = s.get(&q("/api/v1/search/zip", &[("q", "zebraquartz")]), Some(&me));
    assert_eq!(r.status(), StatusCode::OK);
    let entries = zip_entries(&e.path("search.zip"), &r.bytes().unwrap());
    let names: Vec<&String> = entries.keys().collect();
    assert_eq!(names.len(), 2, "{names:?}");
    assert!(names.iter().all(|n| n.starts_with(&prefix)), "{names:?}");
    assert_eq!(
        s.get(&q("/api/v1/folder/tar", &folder), Some(&me)).status(),
        StatusCode::NOT_FOUND
    );
}

/// `serve` over HTTPS with the certificate and key at `cert` and `key`, and the IMAP view
/// over TLS.
fn start_tls(e: &Env, cert: &str, key: &str) -> Server {
    let flags = [
        "--tls-cert",
        cert,
        "--tls-key",
        key,
        "--imaps",
        "127.0.0.1:0",
    ];
    start(e, &flags)
}

/// The zip at `path` as `me` downloads it: answered `200 OK` as `application/zip` named
/// `name`, read back by Python's `zipfile` (saved in `e` as `name`).
fn zip_download(
    e: &Env,
    s: &Server,
    me: &Session,
    path: &str,
    name: &str,
) -> std::collections::BTreeMap<String, Vec<u8>> {
    let r = s.get(path, Some(me));
    assert_eq!(r.status(), StatusCode::OK, "{path}");
    assert_eq!(r.headers()[CONTENT_TYPE], "application/zip");
    assert_eq!(
        r.headers()["content-disposition"],
        format!("attachment; filename=\"{name}\"").as_str()
    );
    zip_entries(&e.path(name), &r.bytes().unwrap())
}

/// The `.eml` entries of an archive listing.
fn got_len(entries: &std::collections::BTreeMap<String, Vec<u8>>) -> usize {
    entries.keys().filter(|n| n.ends_with(".eml")).count()
}

/// The entries of zip `data` as Python's `zipfile` reads them (every CRC checked), written
/// to `file` first: name to bytes.
fn zip_entries(file: &std::path::Path, data: &[u8]) -> std::collections::BTreeMap<String, Vec<u8>> {
    fs::write(file, data).unwrap();
    let out = common::python(&[
        "-c",
        "import zipfile, json, sys\n\
         z = zipfile.ZipFile(sys.argv[1])\n\
         assert z.testzip() is None\n\
         print(json.dumps({n: z.read(n).hex() for n in z.namelist()}))",
        file.to_str().unwrap(),
    ]);
    let entries: serde_json::Map<String, Value> = serde_json::from_slice(&out).unwrap();
    (entries.into_iter())
        .map(|(name, hex)| {
            let hex = hex.as_str().unwrap();
            let bytes = (0..hex.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
                .collect();
            (name, bytes)
        })
        .collect()
}

/// Issue 28: a whole account downloads as one zip of `.eml` files that Python's `zipfile`
/// reads back: every message of every folder byte for byte under its folder's path
/// (`INBOX/`, `Archive/`, `Archive/2023/`, each folder's sidecar beside), and nothing
/// else; folders whose names decode to `..`, `/` or a control character come out as safe
/// paths below the account's directory. As a zip of an mbox per folder
/// (`Archive/2023.mbox`), our reader reads each folder's messages back byte for byte. One
/// mbox of the account is refused.
#[test]
fn a_whole_account_downloads_as_a_zip_of_its_folders_that_python_reads_back_exactly() {
    let e = Env::new();
    let mail = e.path("mail");
    plant(&mail);
    let older = plain("archived 2023", "Mon, 02 Jan 2023 10:00:00 +0000", "older");
    put(&mail, ".Archive.2023", "arch23:2,F", &older);
    // Maildir++ names in modified UTF-7: `..`, `../x`, `/etc`, an escape character.
    let hostile = [".&AC4ALg-", ".&AC4ALgAv-x", ".&AC8-etc", ".a&ABs-b"];
    for (i, dir) in hostile.iter().enumerate() {
        let text = plain(
            &format!("hostile {i}"),
            "Fri, 05 Jan 2024 10:00:00 +0000",
            "x",
        );
        put(&mail, dir, &format!("h{i}:2,"), &text);
    }
    // Two folders whose names differ only in case (one directory on macOS or Windows),
    // and a subfolder of the one told apart, which follows it.
    for (dir, word) in [
        (".Work", "upper"),
        (".work", "lower"),
        (".work.2023", "sub"),
    ] {
        let text = plain(word, "Fri, 05 Jan 2024 11:00:00 +0000", word);
        put(&mail, dir, &format!("{word}:2,"), &text);
    }
    e.ok(&["init"]);
    e.ok(&["backup", &format!("maildir:{}", mail.display())]);
    token_file(&e, 0o600);
    let s = start(&e, &[]);
    let me = s.session();
    let id = s.newest_snapshot(&me);
    let account = [("snapshot", &id[..]), ("account", ACCOUNT)];
    let zip = |path: &str, name: &str| zip_download(&e, &s, &me, &q(path, &account), name);
    let entries = zip("/api/v1/account/zip", "alice_example.org.zip");
    // Each entry's directory: the hashes of its `.eml` files, and its sidecar's lines.
    let mut dirs: std::collections::BTreeMap<String, Vec<(usize, blake3::Hash)>> =
        Default::default();
    for (name, bytes) in &entries {
        let (dir, file) = name.rsplit_once('/').unwrap();
        let parts: Vec<&str> = name.split('/').collect();
        assert!(
            parts[0] == ACCOUNT
                && !(parts.iter()).any(|c| ["", ".", ".."].contains(c))
                && !name.chars().any(|c| c.is_control() || c == '\\'),
            "{name:?}"
        );
        if file == ".mailvault-flags" {
            let side = mailvault_core::mail::Sidecar::parse(bytes).unwrap();
            let emls = (entries.keys())
                .filter(|n| n.rsplit_once('/').unwrap().0 == dir && n.ends_with(".eml"));
            assert_eq!(side.entries.len(), emls.count(), "{name}");
            continue;
        }
        assert!(file.ends_with(".eml"), "{name}");
        dirs.entry(dir.to_string())
            .or_default()
            .push((bytes.len(), blake3::hash(bytes)));
    }
    for v in dirs.values_mut() {
        v.sort_by_key(|(n, h)| (*n, *h.as_bytes()));
    }
    let mut want: std::collections::BTreeMap<String, Vec<(usize, blake3::Hash)>> =
        Default::default();
    for (dir, path) in [
        ("", "INBOX"),
        (".Archive", "Archive"),
        (".Archive.2023", "Archive/2023"),
        (".&AC4ALg-", "%2E."),
        (".&AC4ALgAv-x", "%2E./x"),
        (".&AC8-etc", "%/etc"),
        (".a&ABs-b", "a%1Bb"),
        (".Work", "Work"),
        (".work", "work (2)"),
        (".work.2023", "work (2)/2023"),
    ] {
        want.insert(format!("{ACCOUNT}/{path}"), folder_files(&e, dir));
    }
    assert_eq!(dirs, want);
    // An mbox per folder, at the same place: each one's messages byte for byte.
    let mboxes = zip("/api/v1/account/mbox.zip", "alice_example.org.mbox.zip");
    let mut got = std::collections::BTreeMap::new();
    for (name, bytes) in &mboxes {
        let mut msgs: Vec<_> = mailvault_core::mail::MboxReader::new(&bytes[..])
            .map(|m| {
                let m = m.unwrap();
                (m.bytes.len(), blake3::hash(&m.bytes))
            })
            .collect();
        msgs.sort_by_key(|(n, h)| (*n, *h.as_bytes()));
        got.insert(name.strip_suffix(".mbox").unwrap().to_string(), msgs);
    }
    assert_eq!(got, want);
    // The page route gives the same download, and the account page links to it.
    assert_eq!(zip("/account/zip", "alice_example.org.zip"), entries);
    let page = s.page(&q("/account", &account), &me);
    assert!(
        page.contains("/account/zip?") && page.contains("/account/mbox.zip?"),
        "{page}"
    );
    // One mbox would lose the folders; an account the snapshot lacks is not found.
    for (path, status) in [
        (q("/api/v1/account/mbox", &account), StatusCode::NOT_FOUND),
        (q("/api/v1/account/tar", &account), StatusCode::NOT_FOUND),
        (
            q(
                "/api/v1/account/zip",
                &[("snapshot", &id[..]), ("account", "nobody@example.org")],
            ),
            StatusCode::NOT_FOUND,
        ),
        (
            q("/account/zip", &[("snapshot", "zz"), ("account", ACCOUNT)]),
            StatusCode::NOT_FOUND,
        ),
    ] {
        assert_eq!(s.get(&path, Some(&me)).status(), status, "{path}");
    }
}

/// Runs curl with `args`; (exit status, standard output with the headers).
fn curl(args: &[&str]) -> (bool, String) {
    let out = std::process::Command::new("curl")
        .args(["-sS", "-i", "--max-time", "20"])
        .args(args)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).to_lowercase(),
    )
}

#[test]
fn https_with_the_given_certificate_sends_secure_cookies_and_hsts() {
    let e = repository();
    let (cert, key) = certificate(&e);
    let (cert_s, key_s) = (cert.to_str().unwrap(), key.to_str().unwrap());
    // A key others can read is refused, before anything listens.
    fs::set_permissions(&key, fs::Permissions::from_mode(0o644)).unwrap();
    let token = e.path("token");
    let out = e
        .cmd(&["serve", "--listen", "127.0.0.1:0", "--admin-token-file"])
        .arg(&token)
        .args(["--tls-cert", cert_s, "--tls-key", key_s])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("TLS key file") && err.contains("chmod 600"),
        "{err}"
    );
    fs::set_permissions(&key, fs::Permissions::from_mode(0o600)).unwrap();
    let s = start_tls(&e, cert_s, key_s);
    // The IMAP view over TLS (IMAPS): Python's imaplib, trusting that certificate alone,
    // logs in and lists the account; a client speaking plain IMAP there gets no greeting.
    let script = r#"
import imaplib, ssl, sys
ctx = ssl.create_default_context(cafile=sys.argv[2])
m = imaplib.IMAP4_SSL("127.0.0.1", int(sys.argv[1]), ssl_context=ctx)
m.login('"alice@example.org*admin"', sys.argv[3])
typ, boxes = m.list()
print(typ, b" ".join(boxes).decode())
m.logout()
try:
    imaplib.IMAP4("127.0.0.1", int(sys.argv[1]), timeout=5)
    print("plain: greeted")
except Exception as e:
    print("plain: refused")
"#;
    let port = s.imaps_port.to_string();
    let out = std::process::Command::new("python3")
        .args(["-c", script, &port, cert_s, TOKEN])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.starts_with("OK ") && text.contains("INBOX"),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("plain: refused"), "{text}");
    assert!(s.base.starts_with("https://127.0.0.1:"), "{}", s.base);
    // The login page, over TLS, with HSTS, and its form's token in a Secure cookie.
    let jar = e.path("jar");
    let jar = jar.to_str().unwrap();
    let (ok, page) = curl(&["--cacert", cert_s, "-c", jar, &s.url("/login")]);
    assert!(ok && page.starts_with("http/1.1 200"), "{page}");
    assert!(
        page.contains("strict-transport-security: max-age=31536000"),
        "{page}"
    );
    // Logging in sets a Secure cookie.
    let login_cookie = page
        .lines()
        .find(|l| l.starts_with("set-cookie: mailvault_login="));
    assert!(login_cookie.unwrap().contains("; secure"), "{page}");
    let token = page.split("name=\"login_csrf\" value=\"").nth(1).unwrap();
    let token = format!("login_csrf={}", token.split('"').next().unwrap());
    let form = e.path("form");
    fs::write(&form, TOKEN).unwrap();
    let data = format!("token@{}", form.display());
    let (ok, answer) = curl(&[
        "--cacert",
        cert_s,
        "-b",
        jar,
        "--data-urlencode",
        &data,
        "--data",
        &token,
        &s.url("/login"),
    ]);
    assert!(ok && answer.starts_with("http/1.1 303"), "{answer}");
    let cookie = answer
        .lines()
        .find(|l| l.starts_with("set-cookie:"))
        .unwrap();
    assert!(
        cookie.contains("; secure") && cookie.contains("httponly"),
        "{cookie}"
    );
    // Not a certificate the client trusts: refused by the client; plain HTTP: no page.
    assert!(!curl(&[&s.url("/login")]).0);
    let plain = s.url("/login").replace("https://", "http://");
    let (_, text) = curl(&[&plain]);
    assert!(!text.contains("200 ok"), "{text}");
}

#[test]
fn the_account_page_shows_acls_and_filters_and_a_script_opens_as_text() {
    let e = home_repository();
    let s = start(&e, &[]);
    let me = s.session();
    let id = s.newest_snapshot(&me);
    let acct = |a| q("/account", &[("snapshot", &id[..]), ("account", a)]);
    // The folder table: who else may read Team, as text; the home is not a folder.
    let page = s.page(&acct(ACCOUNT), &me);
    assert!(
        page.contains("Shared with") && page.contains("bob: lr"),
        "{page}"
    );
    assert!(
        page.contains("&lt;i&gt;eve&lt;/i&gt;: r") && !page.contains("<i>"),
        "{page}"
    );
    for link in page.split("href=\"/folder?").skip(1) {
        assert!(!link[..link.find('"').unwrap()].contains("%7E"), "{link}");
    }
    // The filters: each file of the home, the links as links, the script named active.
    let row = |name: &str| {
        let at = page.find(name).unwrap_or_else(|| panic!("{name}: {page}"));
        page[at..at + page[at..].find("</tr>").unwrap()].to_string()
    };
    assert!(page.find("Filters</h2>") < page.find("~/sieve/rules.sieve"));
    assert!(row("~/sieve/rules.sieve").contains("active"));
    assert!(!row("~/sieve/vacation.sieve").contains("active"));
    assert!(row("~/.dovecot.sieve → sieve/rules.sieve</code></td>").contains("<td"));
    assert!(!row("~/sieve/escape.sieve → /etc/hostname").contains("href"));
    assert!(row("~/.dovecot.lda-dupes").contains("</td>"));
    let api = s.api(&acct(ACCOUNT).replace("/account", "/api/v1/filters"), &me);
    let files = api["files"].as_array().unwrap();
    let active: Vec<_> = files.iter().filter(|f| f["active"] == true).collect();
    assert_eq!(
        (api["home"].as_bool(), files.len(), active.len()),
        (Some(true), 5, 1),
        "{api}"
    );
    assert_eq!(active[0]["path"], "~/sieve/rules.sieve");
    let folders = s.api(&acct(ACCOUNT).replace("/account", "/api/v1/folders"), &me);
    let team = (folders["folders"].as_array().unwrap().iter()).find(|f| f["name"] == "Team");
    let bob_lr = serde_json::json!({"identifier": "bob", "rights": "lr"});
    assert_eq!(team.unwrap()["acl"][0], bob_lr);
    // A script as text: its markup escaped, nothing run; not UTF-8: shown lossily.
    let file = |path: &str, folder: &str, name: &str| home_file(path, &id, ACCOUNT, folder, name);
    let shown = s.page(&file("/account/file", "~/sieve", "rules.sieve"), &me);
    let text = "# &lt;script&gt;alert(1)&lt;/script&gt; sorts the lists";
    assert!(shown.contains(text) && only_our_script(&shown), "{shown}");
    let dupes = s.page(&file("/account/file", "~", ".dovecot.lda-dupes"), &me);
    assert!(dupes.contains("\u{fffd}\u{fffd}dupes"), "{dupes}");
    // The download: the bytes as stored, as plain text to save, never to show.
    for (path, folder, name, want, saved) in [
        (
            "/account/file/raw",
            "~/sieve",
            "rules.sieve",
            RULES.as_bytes(),
            "rules.sieve",
        ),
        (
            "/api/v1/file/raw",
            "~",
            ".dovecot.lda-dupes",
            DUPES,
            "dovecot.lda-dupes",
        ),
    ] {
        let r = s.get(&file(path, folder, name), Some(&me));
        assert_eq!(r.status(), StatusCode::OK, "{path}");
        assert_headers(r.headers(), PAGES_CSP);
        assert_eq!(r.headers()[CONTENT_TYPE], "text/plain; charset=utf-8");
        let disposition = format!("attachment; filename=\"{saved}\"");
        assert_eq!(r.headers()["content-disposition"], disposition.as_str());
        assert_eq!(&r.bytes().unwrap()[..], want, "{path}");
    }
    // Names that are paths, not there, links, another directory's or account's: refused.
    let (bad, missing) = (StatusCode::BAD_REQUEST, StatusCode::NOT_FOUND);
    for (account, folder, name, status) in [
        (ACCOUNT, "~/sieve", "../x", bad),
        (ACCOUNT, "~", "sieve/rules.sieve", bad),
        (ACCOUNT, "~/sieve", "..", bad),
        (ACCOUNT, "~/sieve", "nope.sieve", missing),
        (ACCOUNT, "~", "rules.sieve", missing),
        (ACCOUNT, "~", ".dovecot.sieve", missing),
        (ACCOUNT, "~/sieve", "escape.sieve", missing),
        (ACCOUNT, "~/..", "rules.sieve", missing),
        (ACCOUNT, "Team", "dovecot-acl", missing),
        (ACCOUNT, "INBOX", "dovecot-uidlist", missing),
        (BOB, "~/sieve", "rules.sieve", missing),
    ] {
        for path in ["/account/file", "/account/file/raw", "/api/v1/file/raw"] {
            let r = s.get(&home_file(path, &id, account, folder, name), Some(&me));
            assert_eq!(r.status(), status, "{path} {account} {folder} {name}");
            let body = r.text().unwrap();
            assert!(
                !body.contains("alert(1)") && !body.contains("dupes"),
                "{body}"
            );
        }
    }
    // bob's home has no filters; the note says so.
    assert!(s
        .page(&acct(BOB), &me)
        .contains("No filters in this backup"));
    let none = s.api(&acct(BOB).replace("/account", "/api/v1/filters"), &me);
    assert_eq!(none["files"], serde_json::json!([]), "{none}");
}

/// A mail user's session (`--user-auth`): logged in with `user` and `password` through
/// the login form.
/// Issues 28 and 29: a mail user logs in with their own address and password
/// (`--user-auth passwd-file:`) and sees their own account, nothing of anyone else's:
/// the snapshots that hold it (counted as it alone), their account alone in a snapshot,
/// every route naming another account answered 404 (pages and API), search and "which
/// snapshots hold it" within their own account although alice holds the same message;
/// the IMAP view opens their account with the same password and no other. With
/// `--user-auth imap://` the password is the live Dovecot's.
#[test]
fn a_mail_user_sees_their_own_account_and_nothing_of_anyone_elses() {
    let e = Env::new();
    let mail = e.path("mail");
    plant(&mail);
    let bob = mail.join("example.org/bob/Maildir");
    // The message alice has too (one content, two places), and one of his own.
    let zebra = plain(
        "planted",
        "Wed, 03 Jan 2024 10:00:00 +0000",
        "the zebraquartz word",
    );
    common::write_msg(&bob, "cur", "zebra:2,S", zebra.as_bytes());
    let own = plain("his own", "Thu, 04 Jan 2024 10:00:00 +0000", "bobword");
    common::write_msg(&bob, "cur", "own:2,", own.as_bytes());
    e.ok(&["init"]);
    e.ok(&["backup", &format!("maildir:{}", mail.display())]);
    e.ok(&["index"]);
    token_file(&e, 0o600);
    const BOB: &str = "bob@example.org";
    let users = e.path("users");
    fs::write(&users, format!("{BOB}:{{PLAIN}}bobs-password::::\n")).unwrap();
    let auth = format!("passwd-file:{}", users.display());
    let s = start(&e, &["--user-auth", &auth, "--imap", "127.0.0.1:0"]);

    for (user, pw) in [
        (BOB, "wrong"),
        (ACCOUNT, "bobs-password"),
        ("", "bobs-password"),
    ] {
        let r = s.post_login(&[("user", user), ("token", pw)]);
        assert_eq!(r.status(), StatusCode::UNAUTHORIZED, "{user:?} {pw}");
    }
    let me = user_session(&s, BOB, "bobs-password");
    let snaps = s.api("/api/v1/snapshots", &me);
    let snaps = snaps.as_array().unwrap();
    assert_eq!(snaps.len(), 1);
    assert_eq!(
        (snaps[0]["accounts"].as_u64(), snaps[0]["messages"].as_u64()),
        (Some(1), Some(2))
    );
    let id = snaps[0]["id"].as_str().unwrap();
    let accounts = s.api(&q("/api/v1/accounts", &[("snapshot", id)]), &me);
    assert_eq!(
        accounts["accounts"].as_array().unwrap().len(),
        1,
        "{accounts}"
    );
    assert_eq!(accounts["accounts"][0]["name"], BOB);
    assert_eq!(accounts["snapshot"]["messages"], 2);

    // Every route that names alice's account: as if she did not exist.
    let alice = [
        ("snapshot", id),
        ("account", ACCOUNT),
        ("folder", "INBOX"),
        ("key", "zebra"),
    ];
    let mut paths = Vec::new();
    for base in ["", "/api/v1"] {
        paths.push(q(&format!("{base}/message"), &alice));
        paths.push(q(&format!("{base}/message/raw"), &alice));
        paths.push(q(&format!("{base}/folder/mbox"), &alice[..3]));
        paths.push(q(&format!("{base}/account/zip"), &alice[..2]));
    }
    paths.extend([
        q("/account", &alice[..2]),
        q("/folder", &alice[..3]),
        q("/message/html", &alice),
        q(
            "/message/attachment",
            &[alice[0], alice[1], alice[2], alice[3], ("n", "0")],
        ),
        q("/api/v1/folders", &alice[..2]),
        q("/api/v1/filters", &alice[..2]),
        q("/api/v1/messages", &alice[..3]),
        q(
            "/api/v1/file/raw",
            &[alice[0], alice[1], ("folder", "~"), ("name", "x")],
        ),
    ]);
    for p in &paths {
        let r = s.get(p, Some(&me));
        assert_eq!(r.status(), StatusCode::NOT_FOUND, "{p}");
        assert!(!r.text().unwrap().contains("zebraquartz"), "{p}");
    }

    for p in ["/repository", "/api/v1/repository"] {
        assert_eq!(s.get(p, Some(&me)).status(), StatusCode::NOT_FOUND, "{p}");
    }
    // His own: search and the snapshots holding a message stay within it.
    let bobs = [
        ("snapshot", id),
        ("account", BOB),
        ("folder", "INBOX"),
        ("key", "zebra"),
    ];
    let raw = s.get(&q("/api/v1/message/raw", &bobs), Some(&me));
    assert_eq!(raw.status(), StatusCode::OK);
    assert_eq!(raw.bytes().unwrap().as_ref(), zebra.as_bytes());
    let his = s.get(&q("/account/zip", &bobs[..2]), Some(&me));
    assert_eq!(his.status(), StatusCode::OK);
    let his = zip_entries(&e.path("bob.zip"), &his.bytes().unwrap());
    let emls = his.keys().filter(|n| n.ends_with(".eml")).count();
    assert_eq!(emls, 2, "{his:?}");
    assert!(his.keys().all(|n| n.starts_with("bob@example.org/INBOX/")));
    let found = s.api("/api/v1/search?q=zebraquartz", &me);
    let hits = found["hits"].as_array().unwrap();
    assert!(
        !hits.is_empty() && hits.iter().all(|h| h["account"] == BOB),
        "{found}"
    );
    let mine = s
        .get("/api/v1/search/mbox?q=zebraquartz", Some(&me))
        .bytes()
        .unwrap();
    let mine = String::from_utf8_lossy(&mine);
    assert_eq!(
        mine.lines().filter(|l| l.starts_with("From ")).count(),
        1,
        "{mine}"
    );
    assert!(mine.contains("zebraquartz"), "{mine}");
    let none = s.api(
        &q(
            "/api/v1/search",
            &[("q", "account:alice@example.org zebraquartz")],
        ),
        &me,
    );
    assert_eq!(none["hits"].as_array().unwrap().len(), 0, "{none}");
    let m = s.api(&q("/api/v1/message", &bobs), &me);
    let held = m["held_by"].as_array().unwrap();
    assert!(
        !held.is_empty() && held.iter().all(|h| h["account"] == BOB),
        "{m}"
    );
    // (The message's To: names alice: no link to her account may.)
    let alices = "account=alice%40example.org";
    let page = s.page(&q("/message", &bobs), &me);
    assert!(
        page.contains("account=bob%40example.org") && !page.contains(alices),
        "{page}"
    );
    let page = s.page(&q("/search", &[("q", "zebraquartz")]), &me);
    assert!(
        page.contains("account=bob%40example.org") && !page.contains(alices),
        "{page}"
    );

    // The admin sees both, and both places of the shared message.
    let admin = s.session();
    let accounts = s.api(&q("/api/v1/accounts", &[("snapshot", id)]), &admin);
    assert_eq!(accounts["accounts"].as_array().unwrap().len(), 2);
    let m = s.api(&q("/api/v1/message", &bobs), &admin);
    assert!(m["held_by"]
        .as_array()
        .unwrap()
        .iter()
        .any(|h| h["account"] == ACCOUNT));

    // The IMAP view: his password opens his account alone.
    let client = |port: u16| {
        let ep = mailvault_imap::Endpoint::parse(&format!("imap://127.0.0.1:{port}")).unwrap();
        mailvault_imap::Client::new(mailvault_imap::ClientOptions::new(ep)).unwrap()
    };
    let login = |user: &str, password: &str| {
        client(s.imap_port).login(&mailvault_imap::Credentials::User {
            user: user.into(),
            password: password.into(),
        })
    };
    let mut imap = login(BOB, "bobs-password").unwrap();
    let folders: Vec<String> = imap.list().unwrap().into_iter().map(|f| f.name).collect();
    assert!(folders.iter().any(|f| f == "INBOX"), "{folders:?}");
    assert!(
        !folders.iter().any(|f| f.contains("Archive")),
        "alice's folder: {folders:?}"
    );
    let _ = imap.logout();
    assert!(login(ACCOUNT, "bobs-password").is_err());
    assert!(login(&format!("{ACCOUNT}*admin"), "bobs-password").is_err());
    drop(s);

    // Checked on the live IMAP server instead.
    let Some(dovecot) = judge::dovecot_of(None, String::new(), &[BOB]) else {
        return;
    };
    let auth = format!("imap://127.0.0.1:{}", dovecot.port());
    let s = start(&e, &["--user-auth", &auth]);
    user_session(&s, BOB, mailvault_imap::testing::USER_PASSWORD);
    assert_eq!(
        s.post_login(&[("user", BOB), ("token", "not-it")]).status(),
        StatusCode::UNAUTHORIZED
    );
}

/// Issue 28: the repository page (the admin's): each source's last backup, its age and
/// result, stale past `--stale-after`, and charts drawn as inline SVG; the same as JSON;
/// `/metrics` in Prometheus' text format for a scraper with the admin token as a bearer
/// token, nothing without it.
#[test]
fn the_repository_page_and_metrics_show_each_sources_last_backup() {
    let e = repository();
    let s = start(&e, &["--stale-after", "0s"]);
    let me = s.session();
    let o = s.api("/api/v1/repository", &me);
    let sources = o["sources"].as_array().unwrap();
    assert_eq!(sources.len(), 1, "{o}");
    assert_eq!(sources[0]["snapshots"], 2);
    assert_eq!(sources[0]["stale"], true);
    assert_eq!(sources[0]["failed"], 0);
    assert_eq!(o["snapshots"].as_array().unwrap().len(), 2);
    // Each backup's deduplication and compression, as its report gave them: the first
    // stored every message new (compressed), the second read its one new message alone.
    for p in o["snapshots"].as_array().unwrap() {
        assert!(p["dedup_ratio"].as_f64().unwrap() >= 1.0, "{p}");
        assert!(p["compression_ratio"].as_f64().unwrap() > 0.0, "{p}");
    }
    let page = s.page("/repository", &me);
    assert!(page.contains("<svg") && page.contains("(stale)"), "{page}");
    assert!(
        page.contains("Deduplication") && page.contains("Compression"),
        "{page}"
    );
    assert!(only_our_script(&page), "{page}");
    assert!(s.page("/", &me).contains("href=\"/repository\""));

    let r = s.get("/metrics", None);
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    let scrape = |token: &str| {
        s.http
            .get(s.url("/metrics"))
            .header("Authorization", format!("Bearer {token}"))
            .send()
            .unwrap()
    };
    assert_eq!(
        scrape("wrong-token-0123456789").status(),
        StatusCode::UNAUTHORIZED
    );
    let r = scrape(TOKEN);
    assert_eq!(r.status(), StatusCode::OK);
    assert!(r.headers()[CONTENT_TYPE]
        .to_str()
        .unwrap()
        .starts_with("text/plain; version=0.0.4"));
    let text = r.text().unwrap();
    let source = sources[0]["source"].as_str().unwrap();
    assert!(
        text.contains(&format!(
            "mailvault_source_snapshots{{hostname=\"{}\",source=\"{source}\"}} 2",
            sources[0]["hostname"].as_str().unwrap()
        )),
        "{text}"
    );
    assert!(
        text.contains("mailvault_source_stale{") && text.contains("} 1\n"),
        "{text}"
    );
    assert!(
        text.contains("# TYPE mailvault_serve_sessions gauge\nmailvault_serve_sessions 1"),
        "{text}"
    );
    // The repository's snapshots and stored bytes, and each source's last duration.
    assert!(
        text.contains("\nmailvault_repository_snapshots 2\n"),
        "{text}"
    );
    let data = (text.lines())
        .find_map(|l| l.strip_prefix("mailvault_repository_stored_bytes{kind=\"data\"} "))
        .map(|v| v.parse::<u64>().unwrap());
    assert!(data.is_some_and(|n| n > 0), "{text}");
    assert!(
        text.contains("mailvault_source_last_backup_duration_seconds{"),
        "{text}"
    );
    // HTTP requests by method, route (the router's pattern) and status.
    let name = "mailvault_serve_http_requests_total";
    for line in [
        format!("{name}{{method=\"GET\",route=\"/api/v1/repository\",status=\"200\"}} 1\n"),
        format!("{name}{{method=\"GET\",route=\"/metrics\",status=\"401\"}} 2\n"),
        format!("{name}{{method=\"POST\",route=\"/login\",status=\"303\"}} 1\n"),
    ] {
        assert!(text.contains(&line), "{line} in {text}");
    }
    s.get("/no/such/page?x=1", Some(&me));
    s.get(
        &q("/api/v1/folder/mbox", &[("snapshot", "00000000")]),
        Some(&me),
    );
    let text = scrape(TOKEN).text().unwrap();
    assert!(
        text.contains(&format!(
            "{name}{{method=\"GET\",route=\"unmatched\",status=\"404\"}} 1\n"
        )),
        "{text}"
    );
    assert!(
        text.contains("route=\"/api/v1/folder/{format}\",status=\"400\"} 1\n"),
        "{text}"
    );
    assert!(!text.contains("no/such"), "{text}");
}

/// The planted store backed up, changed by `change` (given alice's INBOX `cur/`), and
/// backed up again.
fn two_backups(change: impl FnOnce(&std::path::Path)) -> Env {
    let e = Env::new();
    let mail = e.path("mail");
    plant(&mail);
    let src = format!("maildir:{}", mail.display());
    e.ok(&["init"]);
    e.ok(&["backup", &src]);
    common::at_rest();
    change(&mail.join("example.org/alice/Maildir/cur"));
    e.ok(&["backup", &src]);
    e
}

/// The repository of `e` served, the admin's session, and its snapshots (newest first).
fn serving_two(e: &Env) -> (Server, Session, Value) {
    token_file(e, 0o600);
    let s = start(e, &[]);
    let me = s.session();
    let snaps = s.api("/api/v1/snapshots", &me);
    (s, me, snaps)
}

/// Issue 28: "deleted since": a message an older snapshot holds and a later one no longer
/// holds in that folder shows, on its page and in the API, the first snapshot without it;
/// one still there says so.
#[test]
fn a_message_deleted_later_is_marked_deleted_since_the_first_snapshot_without_it() {
    let e = two_backups(|cur| fs::remove_file(cur.join("zebra:2,S")).unwrap());
    e.ok(&["index"]);
    let (s, me, snaps) = serving_two(&e);
    let (newest, oldest) = (
        snaps[0]["id"].as_str().unwrap(),
        snaps[1]["id"].as_str().unwrap(),
    );
    let at = |key: &'static str| {
        [
            ("snapshot", oldest),
            ("account", ACCOUNT),
            ("folder", "INBOX"),
            ("key", key),
        ]
    };
    let m = s.api(&q("/api/v1/message", &at("zebra")), &me);
    let held = &m["held_by"][0];
    assert_eq!(held["last_snapshot"], oldest, "{m}");
    assert_eq!(held["gone_snapshot"], newest, "{m}");
    assert_eq!(held["gone_time"], snaps[0]["time"], "{m}");
    let page = s.page(&q("/message", &at("zebra")), &me);
    assert!(page.contains("deleted since"), "{page}");
    let m = s.api(&q("/api/v1/message", &at("old")), &me);
    assert!(m["held_by"][0].get("gone_snapshot").is_none(), "{m}");
    assert!(s
        .page(&q("/message", &at("old")), &me)
        .contains("still there"));
    // Every snapshot's hits as a zip: the deleted message from the older snapshot, the
    // rest from the newer, one directory for the account, INBOX twice told apart, each
    // with its own sidecar (two in one place broke the archive).
    let all = [("q", "from:bob"), ("scope", "all")];
    let entries = zip_download(&e, &s, &me, &q("/api/v1/search/zip", &all), "search.zip");
    let mut dirs: std::collections::BTreeMap<&str, (usize, usize)> = Default::default();
    for (name, bytes) in &entries {
        let (dir, file) = name.rsplit_once('/').unwrap();
        let d = dirs.entry(dir).or_default();
        match file.ends_with(".eml") {
            true => d.0 += 1,
            false => {
                d.1 += mailvault_core::mail::Sidecar::parse(bytes)
                    .unwrap()
                    .entries
                    .len()
            }
        }
    }
    let want = [("Archive", 1), ("INBOX", 1), ("INBOX (2)", 1)];
    let want: std::collections::BTreeMap<String, (usize, usize)> = (want.iter())
        .map(|(f, n)| (format!("{ACCOUNT}/{f}"), (*n, *n)))
        .collect();
    let got: std::collections::BTreeMap<String, (usize, usize)> = (dirs.into_iter())
        .map(|(d, n)| (d.to_string(), n))
        .collect();
    assert_eq!(got, want);
    let zebra = (entries.values()).filter(|b| b.windows(11).any(|w| w == b"zebraquartz"));
    assert_eq!(zebra.count(), 1);
}

/// Issue 28: "deleted since" in a folder's list: on the folder's page of an older snapshot
/// (HTML and API), the one message a later snapshot no longer holds there is marked with
/// the first snapshot without it, whatever the sort; a message whose flags changed since
/// is still there, and the newest snapshot's list has no marks. No search index: the
/// places map alone answers.
#[test]
fn a_folders_list_marks_the_messages_deleted_since() {
    let e = two_backups(|cur| {
        fs::remove_file(cur.join("zebra:2,S")).unwrap();
        fs::rename(cur.join("old:2,S"), cur.join("old:2,RS")).unwrap();
    });
    let (s, me, snaps) = serving_two(&e);
    let (newest, oldest) = (
        snaps[0]["id"].as_str().unwrap(),
        snaps[1]["id"].as_str().unwrap(),
    );
    let at = |path: &str, snapshot: &str, sort: &str| {
        let place = [
            ("snapshot", snapshot),
            ("account", ACCOUNT),
            ("folder", "INBOX"),
            ("sort", sort),
        ];
        q(path, &place)
    };
    // Per key, its mark in the API: (gone_snapshot, gone_time), or nulls.
    let marks = |snapshot: &str, sort: &str| -> Vec<(String, Value, Value)> {
        let v = s.api(&at("/api/v1/messages", snapshot, sort), &me);
        (v["items"].as_array().unwrap().iter())
            .map(|m| {
                let get = |k: &str| m.get(k).cloned().unwrap_or(Value::Null);
                let key = m["key"].as_str().unwrap().to_string();
                (key, get("gone_snapshot"), get("gone_time"))
            })
            .collect()
    };
    let gone = (Value::from(newest), snaps[0]["time"].clone());
    let want = vec![
        ("zebra".to_string(), gone.0.clone(), gone.1.clone()),
        ("old".to_string(), Value::Null, Value::Null),
    ];
    assert_eq!(marks(oldest, "date"), want);
    // By subject, A to Z: "oldest", then "planted".
    let mut by_subject = want.clone();
    by_subject.reverse();
    assert_eq!(
        marks(oldest, "subject"),
        by_subject,
        "the mark follows its row"
    );
    assert_eq!(
        marks(newest, "date"),
        [("old".to_string(), Value::Null, Value::Null)]
    );
    // The page: one label, text, in zebra's row, naming the day of the newest snapshot.
    let page = s.page(&at("/folder", oldest, "date"), &me);
    let day = jiff::Timestamp::from_second(gone.1.as_i64().unwrap())
        .unwrap()
        .strftime("%Y-%m-%d")
        .to_string();
    assert_eq!(page.matches("class=\"gone\"").count(), 1, "{page}");
    let row = (page.split("<tr>"))
        .find(|r| r.contains("key=zebra"))
        .unwrap();
    assert!(row.contains(&format!(">deleted {day}</small>")), "{row}");
    let page = s.page(&at("/folder", newest, "date"), &me);
    assert!(
        page.contains("oldest") && !page.contains("class=\"gone\""),
        "{page}"
    );
}

/// Issue 28: a search's facets count every hit by account, folder, year and attachment
/// (the API's `facets`, the page's links), and a facet's link narrows the search to it.
#[test]
fn a_search_counts_its_hits_by_account_folder_year_and_attachment() {
    let (_e, s, me, _) = serving();
    let q1 = "subject:archived OR subject:planted OR subject:hostile";
    let r = s.api(&q("/api/v1/search", &[("q", q1), ("scope", "latest")]), &me);
    assert_eq!(r["total"], 4, "{r}");
    let f = &r["facets"];
    assert_eq!(f["accounts"], serde_json::json!([[ACCOUNT, 4]]), "{f}");
    assert_eq!(
        f["folders"],
        serde_json::json!([["INBOX", 2], ["Archive", 1], ["Archive/2023", 1]]),
        "{f}"
    );
    assert_eq!(f["years"], serde_json::json!([[2024, 3], [2023, 1]]), "{f}");
    assert_eq!(f["with_attachment"], 1, "{f}");
    let page = s.page(&q("/search", &[("q", q1)]), &me);
    let narrowed = format!("{q1} on:2023");
    let want = q("/search", &[("q", &narrowed), ("scope", "latest")]).replace('&', "&amp;");
    assert!(page.contains(&want), "{want}: {page}");
    let r = s.api(&q("/api/v1/search", &[("q", &narrowed)]), &me);
    assert_eq!(r["total"], 1, "{r}");
    assert_eq!(r["hits"][0]["folder"], "Archive/2023");
    let r = s.api(
        &q(
            "/api/v1/search",
            &[("q", &format!("{q1} folder:\"INBOX\""))],
        ),
        &me,
    );
    assert_eq!(r["total"], 2, "{r}");
}

/// Issue 28: the OpenAPI document the server gives (without a session) describes what it
/// serves. Every operation it lists is routed (with a session, never the `404` of a path
/// that does not exist, nor a `405`); every one it says needs the session answers `401`
/// without one; every POST it says needs the CSRF token answers `403` without it.
#[test]
fn the_openapi_document_describes_the_routes_served() {
    let (_e, s, me, _) = serving();
    let r = s.get("/api/v1/openapi.json", None);
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(r.headers()[CONTENT_TYPE], "application/json");
    let doc = r.json_value();
    assert_eq!(doc["openapi"], "3.1.0");
    let mut ops = Vec::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            let open = op["security"] == serde_json::json!([{}]);
            let csrf = op["security"].to_string().contains("csrf");
            ops.push((path.replace("{format}", "mbox"), method.clone(), open, csrf));
        }
    }
    // Logout last: it ends the session.
    ops.sort_by_key(|(path, ..)| path.ends_with("/logout"));
    assert!(ops.len() >= 23, "{ops:?}");
    let send = |method: &str, path: &str, who: Option<&Session>, csrf: Option<&str>| {
        let mut r = match method {
            "get" => s.http.get(s.url(path)),
            "post" => (s.http.post(s.url(path)))
                .header(CONTENT_TYPE, "application/json")
                .body("{}"),
            m => panic!("{m} {path}: a method the server does not use"),
        };
        if let Some(who) = who {
            r = r.header(COOKIE, &who.cookie);
        }
        if let Some(csrf) = csrf {
            r = r.header("x-csrf-token", csrf);
        }
        let r = r.send().unwrap();
        (r.status(), r.text().unwrap())
    };
    let status = |method: &str, path: &str, who, csrf| send(method, path, who, csrf).0;
    for (path, method, open, csrf) in &ops {
        let alone = send(method, path, None, None);
        let asks_login = alone
            == (
                StatusCode::UNAUTHORIZED,
                r#"{"error":"log in first"}"#.into(),
            );
        assert_eq!(asks_login, !open, "{method} {path}: {alone:?}");
        if *csrf {
            let r = status(method, path, Some(&me), None);
            assert_eq!(
                r,
                StatusCode::FORBIDDEN,
                "{method} {path} without the token"
            );
        } else {
            // The API's login takes JSON alone, which no other site's form can send.
            let open_post = *open && path == "/api/v1/login";
            assert!(
                method == "get" || open_post,
                "{method} {path}: no CSRF token"
            );
        }
        let r = status(method, path, Some(&me), Some(&me.csrf));
        assert!(
            ![StatusCode::NOT_FOUND, StatusCode::METHOD_NOT_ALLOWED].contains(&r)
                || path == "/api/v1/message/attachment",
            "{method} {path}: {r}"
        );
    }
    // A path the document does not name is what those answers were not.
    let r = status("get", "/api/v1/snapshots", Some(&me), None);
    assert_eq!(
        r,
        StatusCode::UNAUTHORIZED,
        "the session ended with the logout"
    );
}

/// Issue 28: a renewed certificate is served without a restart, by the web UI and the
/// IMAP view alike, once its files change; a new certificate whose key has not come yet
/// (the files caught half-written) leaves the old pair in place.
#[test]
fn a_renewed_certificate_is_served_without_a_restart() {
    let e = repository();
    let (cert, key) = certificate(&e);
    let (cert_s, key_s) = (cert.to_str().unwrap(), key.to_str().unwrap());
    let s = start_tls(&e, cert_s, key_s);
    let (old, renewed) = (e.path("old.pem"), e.path("new"));
    fs::copy(&cert, &old).unwrap();
    fs::create_dir(&renewed).unwrap();
    let (new_cert, new_key) = (renewed.join("cert.pem"), renewed.join("key.pem"));
    certificate_at(&new_cert, &new_key);
    let web = |ca: &std::path::Path| curl(&["--cacert", ca.to_str().unwrap(), &s.url("/login")]).0;
    let imaps = |ca: &std::path::Path| {
        let script = "import imaplib, ssl, sys\n\
            ctx = ssl.create_default_context(cafile=sys.argv[2])\n\
            imaplib.IMAP4_SSL('127.0.0.1', int(sys.argv[1]), ssl_context=ctx).logout()\n";
        let out = std::process::Command::new("python3")
            .args([
                "-c",
                script,
                &s.imaps_port.to_string(),
                ca.to_str().unwrap(),
            ])
            .output()
            .unwrap();
        out.status.success()
    };
    assert!(web(&old) && imaps(&old));
    assert!(!web(&new_cert) && !imaps(&new_cert));
    // The new certificate first, alone: it does not go with the key, so the old pair
    // stays.
    let replace = |from: &std::path::Path, to: &std::path::Path| {
        let tmp = to.with_extension("tmp");
        fs::copy(from, &tmp).unwrap();
        fs::set_permissions(&tmp, fs::Permissions::from_mode(0o600)).unwrap();
        fs::rename(&tmp, to).unwrap();
    };
    replace(&new_cert, &cert);
    std::thread::sleep(std::time::Duration::from_millis(2500));
    assert!(web(&old), "the old pair kept while the key is missing");
    assert!(!web(&new_cert));
    replace(&new_key, &key);
    std::thread::sleep(std::time::Duration::from_millis(2500));
    // The handshake that notices the change may still present the old pair.
    web(&new_cert);
    assert!(
        web(&new_cert) && imaps(&new_cert),
        "the renewed pair served"
    );
    assert!(!web(&old) && !imaps(&old), "the old pair no longer");
    let err = fs::read_to_string(e.path("serve.err")).unwrap();
    assert!(err.contains("the changed certificate is not used"), "{err}");
    assert!(err.contains("does not go with the certificate"), "{err}");
}

/// Issue 28: a mail user sees the accounts `--user-accounts` gives them besides their own
/// (an alias, a team mailbox): their snapshots, folders, messages, downloads and search
/// hits, and no other account's; they restore their own mailbox alone. The file is read
/// at each login, and a mistake in it refuses logins rather than give other accounts.
#[test]
fn a_mail_user_sees_the_accounts_given_them_and_restores_their_own_alone() {
    let e = Env::new();
    let mail = e.path("mail");
    plant(&mail);
    let maildir = |user: &str| mail.join("example.org").join(user).join("Maildir");
    let own = plain("his own", "Thu, 04 Jan 2024 10:00:00 +0000", "bobword");
    common::write_msg(&maildir("bob"), "cur", "own:2,", own.as_bytes());
    let hers = plain("hers", "Thu, 04 Jan 2024 10:00:00 +0000", "carolword");
    common::write_msg(&maildir("carol"), "cur", "c:2,", hers.as_bytes());
    e.ok(&["init"]);
    e.ok(&["backup", &format!("maildir:{}", mail.display())]);
    e.ok(&["index"]);
    token_file(&e, 0o600);
    const CAROL: &str = "carol@example.org";
    let users = e.path("users");
    let passwords = format!("{BOB}:{{PLAIN}}bobs-password::::\n{CAROL}:{{PLAIN}}carols::::\n");
    fs::write(&users, passwords).unwrap();
    let given = e.path("user-accounts");
    fs::write(&given, format!("# who else sees what\n{BOB}: {ACCOUNT}\n")).unwrap();
    let auth = format!("passwd-file:{}", users.display());
    let given_s = given.to_str().unwrap();
    let s = start(&e, &["--user-auth", &auth, "--user-accounts", given_s]);

    let bob = user_session(&s, BOB, "bobs-password");
    let snaps = s.api("/api/v1/snapshots", &bob);
    assert_eq!(snaps[0]["accounts"], 2, "{snaps}");
    assert_eq!(
        snaps[0]["messages"],
        3 + 1,
        "alice's three and his one: {snaps}"
    );
    let id = snaps[0]["id"].as_str().unwrap().to_string();
    let accounts = s.api(&q("/api/v1/accounts", &[("snapshot", &id)]), &bob);
    let names: Vec<&str> = (accounts["accounts"].as_array().unwrap().iter())
        .map(|a| a["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, [ACCOUNT, BOB]);
    let alice = [
        ("snapshot", id.as_str()),
        ("account", ACCOUNT),
        ("folder", "INBOX"),
        ("key", "zebra"),
    ];
    assert_eq!(s.api(&q("/api/v1/messages", &alice[..3]), &bob)["total"], 2);
    let raw = s.get(&q("/api/v1/message/raw", &alice), Some(&bob));
    assert_eq!(raw.status(), StatusCode::OK);
    assert!(raw.text().unwrap().contains("zebraquartz"));
    let found = s.api("/api/v1/search?q=zebraquartz", &bob);
    assert_eq!(found["total"], 1, "{found}");
    assert_eq!(found["hits"][0]["account"], ACCOUNT);
    // Carol's account is not his to see.
    let carol = [
        ("snapshot", id.as_str()),
        ("account", CAROL),
        ("folder", "INBOX"),
        ("key", "c"),
    ];
    for path in [
        q("/api/v1/folders", &carol[..2]),
        q("/api/v1/message/raw", &carol),
    ] {
        assert_eq!(
            s.get(&path, Some(&bob)).status(),
            StatusCode::NOT_FOUND,
            "{path}"
        );
    }
    assert_eq!(s.api("/api/v1/search?q=carolword", &bob)["total"], 0);
    // He restores his own mailbox alone: alice's is refused, saying why.
    let restore = |account: &str| {
        let body = serde_json::json!({"snapshot": id, "account": account, "to": "imap"});
        (s.http.post(s.url("/api/v1/restore")))
            .header(COOKIE, &bob.cookie)
            .header("x-csrf-token", &bob.csrf)
            .header(CONTENT_TYPE, "application/json")
            .body(body.to_string())
            .send()
            .unwrap()
    };
    let r = restore(ACCOUNT);
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    assert!(r.text().unwrap().contains("your own mailbox"));
    assert_eq!(restore(CAROL).status(), StatusCode::NOT_FOUND);

    // Carol, whom the file does not name, sees her own alone.
    let her = user_session(&s, CAROL, "carols");
    let accounts = s.api(&q("/api/v1/accounts", &[("snapshot", &id)]), &her);
    assert_eq!(
        accounts["accounts"].as_array().unwrap().len(),
        1,
        "{accounts}"
    );
    assert_eq!(
        s.get(&q("/api/v1/folders", &alice[..2]), Some(&her))
            .status(),
        StatusCode::NOT_FOUND
    );
    // A line the server cannot read refuses logins (503), never guesses.
    fs::write(&given, format!("{BOB} {ACCOUNT}\n")).unwrap();
    let r = s.post_login(&[("user", BOB), ("token", "bobs-password")]);
    assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
}
