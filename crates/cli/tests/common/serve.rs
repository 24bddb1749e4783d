//! `mailvault serve` started for a test: on 127.0.0.1 with a port the system chose, with
//! an admin token file, killed when dropped; a logged-in session over a real HTTP client;
//! planting messages in a Maildir account. Shared by tests/serve.rs and tests/browser.rs.

use super::Env;
use reqwest::blocking::{Client, Response};
use reqwest::header::{HeaderMap, CONTENT_TYPE, COOKIE, SET_COOKIE};
use reqwest::StatusCode;
use serde_json::Value;
use std::fs;
use std::io::BufRead;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Child, Stdio};

pub const TOKEN: &str = "test-admin-token-0123456789abcdef";
pub const ACCOUNT: &str = "alice@example.org";
pub const PAGES_CSP: &str = "default-src 'none'; style-src 'self'; img-src 'self'; \
    script-src 'self'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; \
    base-uri 'none'; frame-src 'self'";
pub const FRAME_CSP: &str = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; \
    frame-ancestors 'self'; base-uri 'none'; form-action 'none'; sandbox";

pub fn plain(subject: &str, date: &str, body: &str) -> String {
    format!(
        "From: Bob <bob@example.org>\r\nTo: {ACCOUNT}\r\nSubject: {subject}\r\nDate: {date}\r\n\r\n{body}\r\n"
    )
}

/// Plants the messages every web test starts from in the account under `mail`: INBOX's
/// `old` (seen) and `zebra` (seen, the word `zebraquartz`), and Archive's `arch`.
pub fn plant(mail: &Path) {
    put(
        mail,
        "",
        "old:2,S",
        &plain("oldest", "Mon, 01 Jan 2024 10:00:00 +0000", "first"),
    );
    put(
        mail,
        "",
        "zebra:2,S",
        &plain(
            "planted",
            "Wed, 03 Jan 2024 10:00:00 +0000",
            "the zebraquartz word",
        ),
    );
    put(
        mail,
        ".Archive",
        "arch:2,S",
        &plain("archived", "Tue, 02 Jan 2024 10:00:00 +0000", "kept"),
    );
}

/// Writes message `name` into folder `dir` (`""`: INBOX) of the account; its path.
pub fn put(root: &Path, dir: &str, name: &str, data: &str) -> std::path::PathBuf {
    let folder = root.join("example.org/alice/Maildir").join(dir);
    super::write_msg(&folder, "cur", name, data.as_bytes())
}

/// The admin token file, of mode `mode`; its path.
pub fn token_file(e: &Env, mode: u32) -> std::path::PathBuf {
    let p = e.path("token");
    fs::write(&p, format!("{TOKEN}\n")).unwrap();
    fs::set_permissions(&p, fs::Permissions::from_mode(mode)).unwrap();
    p
}

/// `mailvault serve` running, killed when dropped.
pub struct Server {
    pub child: Child,
    pub base: String,
    /// The IMAP view's port (`--imap`), else 0.
    pub imap_port: u16,
    /// The IMAP view's port over TLS (`--imaps`), else 0.
    pub imaps_port: u16,
    pub http: Client,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn start(e: &Env, extra: &[&str]) -> Server {
    let token = e.path("token").display().to_string();
    let mut args = vec![
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--admin-token-file",
        &token,
    ];
    args.extend_from_slice(extra);
    let mut child = e
        .cmd(&args)
        .stdout(Stdio::piped())
        .stderr(fs::File::create(e.path("serve.err")).unwrap())
        .spawn()
        .unwrap();
    // The lines it prints once it listens: the web address, then the IMAP view's.
    let lines = 1 + extra
        .iter()
        .filter(|a| ["--imap", "--imaps"].contains(a))
        .count();
    let out = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut r = std::io::BufReader::new(out);
        for _ in 0..lines {
            let mut line = String::new();
            let _ = r.read_line(&mut line);
            let _ = tx.send(line);
        }
    });
    let (mut base, mut imap_port, mut imaps_port) = (None, None, None);
    for _ in 0..lines {
        let line = (rx.recv_timeout(std::time::Duration::from_secs(60))).unwrap_or_default();
        let line = line.trim();
        if let Some(a) = line.strip_prefix("listening on imap://") {
            imap_port = a.rsplit(':').next().and_then(|p| p.parse().ok());
        } else if let Some(a) = line.strip_prefix("listening on imaps://") {
            imaps_port = a.rsplit(':').next().and_then(|p| p.parse().ok());
        } else if let Some(b) = line.strip_prefix("listening on ") {
            base = Some(b.to_string());
        }
    }
    let imap_missing = (extra.contains(&"--imap") && imap_port.is_none())
        || (extra.contains(&"--imaps") && imaps_port.is_none());
    let Some(base) = base.filter(|_| !imap_missing) else {
        let _ = child.kill();
        panic!(
            "serve did not start\n{}",
            fs::read_to_string(e.path("serve.err")).unwrap_or_default()
        );
    };
    let http = Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(std::time::Duration::from_secs(60))
        .build()
        .unwrap();
    Server {
        base,
        imap_port: imap_port.unwrap_or(0),
        imaps_port: imaps_port.unwrap_or(0),
        child,
        http,
    }
}

/// A logged-in session: its cookie header and CSRF token.
pub struct Session {
    pub cookie: String,
    pub csrf: String,
}

impl Server {
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }
    pub fn get(&self, path: &str, s: Option<&Session>) -> Response {
        let mut r = self.http.get(self.url(path));
        if let Some(s) = s {
            r = r.header(COOKIE, &s.cookie);
        }
        r.send().unwrap()
    }
    pub fn post_form(&self, path: &str, s: Option<&Session>, form: &str) -> Response {
        let mut r = self
            .http
            .post(self.url(path))
            .header(CONTENT_TYPE, "application/x-www-form-urlencoded")
            .body(form.to_string());
        if let Some(s) = s {
            r = r.header(COOKIE, &s.cookie);
        }
        r.send().unwrap()
    }
    /// A login form's token and the `Cookie` header that goes with it (`GET /login`).
    pub fn login_token(&self) -> (String, String) {
        let r = self.get("/login", None);
        assert_eq!(r.status(), StatusCode::OK);
        let set = r.headers()[SET_COOKIE].to_str().unwrap().to_string();
        for part in ["HttpOnly", "SameSite=Strict", "Path=/login"] {
            assert!(set.contains(part), "{set}");
        }
        let cookie = set.split(';').next().unwrap().to_string();
        let page = r.text().unwrap();
        let field = page.split("name=\"login_csrf\" value=\"").nth(1).unwrap();
        let token = field.split('"').next().unwrap().to_string();
        assert_eq!(cookie, format!("mailvault_login={token}"));
        (cookie, token)
    }
    /// Posts the login form with `fields`, as a browser does (with its token).
    pub fn post_login(&self, fields: &[(&str, &str)]) -> Response {
        let (cookie, token) = self.login_token();
        let mut all = fields.to_vec();
        all.push(("login_csrf", &token));
        let form = serde_urlencoded::to_string(all).unwrap();
        (self.http.post(self.url("/login")))
            .header(CONTENT_TYPE, "application/x-www-form-urlencoded")
            .header(COOKIE, cookie)
            .body(form)
            .send()
            .unwrap()
    }
    pub fn login(&self, token: &str) -> Response {
        self.post_login(&[("token", token)])
    }
    pub fn session(&self) -> Session {
        let r = self.login(TOKEN);
        assert_eq!(r.status(), StatusCode::SEE_OTHER);
        let set = r.headers()[SET_COOKIE].to_str().unwrap().to_string();
        for part in ["HttpOnly", "SameSite=Strict", "Path=/"] {
            assert!(set.contains(part), "{set}");
        }
        let cookie = set.split(';').next().unwrap().to_string();
        let s = Session {
            cookie,
            csrf: String::new(),
        };
        let v: Value = self.get("/api/v1/session", Some(&s)).json_value();
        Session {
            csrf: v["csrf_token"].as_str().unwrap().to_string(),
            ..s
        }
    }
    pub fn api(&self, path: &str, s: &Session) -> Value {
        let r = self.get(path, Some(s));
        assert_eq!(r.status(), StatusCode::OK, "{path}");
        r.json_value()
    }
    /// The id of the newest snapshot `s` sees.
    pub fn newest_snapshot(&self, s: &Session) -> String {
        self.api("/api/v1/snapshots", s)[0]["id"]
            .as_str()
            .unwrap()
            .to_string()
    }
    pub fn page(&self, path: &str, s: &Session) -> String {
        let r = self.get(path, Some(s));
        assert_eq!(r.status(), StatusCode::OK, "{path}");
        assert_headers(r.headers(), PAGES_CSP);
        r.text().unwrap()
    }
}

pub trait JsonValue {
    fn json_value(self) -> Value;
}

impl JsonValue for Response {
    fn json_value(self) -> Value {
        serde_json::from_slice(&self.bytes().unwrap()).unwrap()
    }
}

/// Whether the one script of `page` is the server's own (`/static/app.js`): none of a
/// message, a file or a name got in as markup.
pub fn only_our_script(page: &str) -> bool {
    let ours = "<script src=\"/static/app.js\" defer></script>";
    page.matches("<script").count() == 1 && page.contains(ours)
}

/// `path` with query `params`.
pub fn q(path: &str, params: &[(&str, &str)]) -> String {
    format!("{path}?{}", serde_urlencoded::to_string(params).unwrap())
}

/// The security headers every answer carries, with content policy `csp`.
#[track_caller]
pub fn assert_headers(h: &HeaderMap, csp: &str) {
    assert_eq!(h["content-security-policy"], csp);
    assert_eq!(h["x-content-type-options"], "nosniff");
    assert_eq!(h["referrer-policy"], "no-referrer");
    assert_eq!(h["cache-control"], "no-store");
}

/// alice's active sieve script: its comment is markup a page must show as text.
pub const RULES: &str = "# <script>alert(1)</script> sorts the lists\r\n\
    require \"fileinto\";\nif header :contains \"subject\" \"[list]\" { fileinto \"Lists\"; }\n";
/// alice's other script, not active.
pub const VACATION: &str = "require \"vacation\";\nvacation :days 7 \"Away.\";\n";
/// alice's duplicate-delivery database: not UTF-8.
pub const DUPES: &[u8] = b"\xff\xfedupes\x00db\xc3";

/// Plants, beside the account's Maildir under `mail`, its home (issue 31): two sieve
/// scripts, `.dovecot.sieve` a link to [`RULES`]'s, a link out of the home
/// (`sieve/escape.sieve -> /etc/hostname`), the LDA's database; and a folder `Team` with
/// a message and a `dovecot-acl` sharing it with bob (`lr`) and a user named as markup.
pub fn plant_home(mail: &Path) {
    use std::os::unix::fs::symlink;
    let home = mail.join("example.org/alice");
    fs::create_dir_all(home.join("sieve")).unwrap();
    fs::write(home.join("sieve/rules.sieve"), RULES).unwrap();
    fs::write(home.join("sieve/vacation.sieve"), VACATION).unwrap();
    symlink("/etc/hostname", home.join("sieve/escape.sieve")).unwrap();
    symlink("sieve/rules.sieve", home.join(".dovecot.sieve")).unwrap();
    fs::write(home.join(".dovecot.lda-dupes"), DUPES).unwrap();
    let team = put(
        mail,
        ".Team",
        "team:2,S",
        &plain("team news", "Fri, 05 Jan 2024 10:00:00 +0000", "shared"),
    );
    let acl = "user=bob lr\nuser=<i>eve</i> r\n";
    fs::write(
        team.parent().unwrap().parent().unwrap().join("dovecot-acl"),
        acl,
    )
    .unwrap();
}

/// An account beside alice whose home has no files.
pub const BOB: &str = "bob@example.org";

/// One backup of the planted messages ([`plant`]) with alice's home ([`plant_home`]), and
/// of [`BOB`]'s INBOX; the token file.
pub fn home_repository() -> Env {
    let e = Env::new();
    let mail = e.path("mail");
    plant(&mail);
    plant_home(&mail);
    super::maildir_message(&mail, BOB, "", "b:2,S", b"Subject: b\r\n\r\nb\r\n");
    e.ok(&["init"]);
    e.ok(&["backup", &format!("maildir:{}", mail.display())]);
    token_file(&e, 0o600);
    e
}

/// The query of file `name` in home directory `folder` (`~`, `~/sieve`) of `account`.
pub fn home_file(path: &str, id: &str, account: &str, folder: &str, name: &str) -> String {
    let p = [
        ("snapshot", id),
        ("account", account),
        ("folder", folder),
        ("name", name),
    ];
    q(path, &p)
}

/// A mail user's session (`--user-auth`), logged in through the form with `password`.
pub fn user_session(s: &Server, user: &str, password: &str) -> Session {
    let r = s.post_login(&[("user", user), ("token", password)]);
    assert_eq!(r.status(), StatusCode::SEE_OTHER, "{user}");
    let cookie = (r.headers()[SET_COOKIE].to_str().unwrap())
        .split(';')
        .next()
        .unwrap()
        .to_string();
    let me = Session {
        cookie,
        csrf: String::new(),
    };
    let v: Value = s.get("/api/v1/session", Some(&me)).json_value();
    assert_eq!(v["user"], user);
    Session {
        csrf: v["csrf_token"].as_str().unwrap().to_string(),
        ..me
    }
}

/// A self-signed certificate for 127.0.0.1 and its key (mode 0600) in `e`, made by
/// openssl: (cert.pem, key.pem). A client trusts it by trusting that file alone.
pub fn certificate(e: &Env) -> (std::path::PathBuf, std::path::PathBuf) {
    let (cert, key) = (e.path("cert.pem"), e.path("key.pem"));
    certificate_at(&cert, &key);
    (cert, key)
}

/// A new self-signed certificate for 127.0.0.1 at `cert`, its key at `key` (0600).
pub fn certificate_at(cert: &Path, key: &Path) {
    let made = std::process::Command::new("openssl")
        .args(["req", "-x509", "-newkey", "ec", "-pkeyopt"])
        .args(["ec_paramgen_curve:prime256v1", "-nodes", "-days", "2"])
        .args(["-subj", "/CN=127.0.0.1"])
        .args(["-addext", "subjectAltName=IP:127.0.0.1"])
        .arg("-keyout")
        .arg(key)
        .arg("-out")
        .arg(cert)
        .output()
        .unwrap();
    assert!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );
    fs::set_permissions(key, fs::Permissions::from_mode(0o600)).unwrap();
}
