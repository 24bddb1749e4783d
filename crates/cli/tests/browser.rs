//! The web UI in a real browser (issue 28): Debian's `chromium`, headless, driven through
//! `chromedriver` by a WebDriver client (fantoccini), against the real `mailvault serve`.
//!
//! - A browser logs in with the admin token, walks snapshot → account → folder → message by
//!   clicking links, downloads the folder as an mbox (Python's `mailbox` reads it) and the
//!   message (the file it saves is the stored message byte for byte, under a safe name)
//!   and searches; no page logs anything to the console.
//! - Every main page at a desktop and a 390-px phone width: nothing wider than the screen,
//!   every link, button and field reachable with the Tab key and visibly focused;
//!   screenshots saved (in `MAILVAULT_SCREENSHOTS` when set: docs/screenshots/ holds them).
//! - A hostile message (scripts, handlers, remote images, CSS and refreshes that load URLs,
//!   forms, frames, objects) shown in the browser runs and loads none of it: a listener on
//!   another port receives nothing (and does receive the browser's request when the test
//!   itself sends the browser there), no marker it would log reaches the console, the page
//!   keeps its title and no dialog opens.
//! - Issue 31: an account's page shows whom its folders are shared with and its sieve
//!   filters, the active one marked; a script whose comment is a `<script>` element opens
//!   as text: the element is shown, never made, and nothing runs.
#![allow(clippy::unwrap_used)]

mod common;
mod judge;

use common::serve::{home_repository, plant, put, start, token_file, Server, ACCOUNT, TOKEN};
use common::Env;
use fantoccini::actions::{InputSource, KeyAction, KeyActions};
use fantoccini::key::Key;
use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{json, Value};
use std::fs;
use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// `chromedriver` on a port of its own, killed when dropped.
struct Driver {
    child: Child,
    url: String,
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts chromedriver (from Debian's `chromium-driver`, which `scripts/setup.sh` installs)
/// and waits until it says it listens.
fn driver() -> Driver {
    let mut child = Command::new("chromedriver")
        .arg("--port=0")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("chromedriver (Debian's chromium-driver, installed by scripts/setup.sh)");
    let out = BufReader::new(child.stdout.take().unwrap());
    for line in out.lines() {
        let line = line.unwrap();
        // "ChromeDriver was started successfully on port 12345."
        if let Some(rest) = line.split("started successfully on port ").nth(1) {
            let port = rest.trim_end_matches('.').trim();
            return Driver {
                child,
                url: format!("http://127.0.0.1:{port}"),
            };
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    panic!("chromedriver exited without listening");
}

/// A headless browser session with a profile and a download directory of its own.
async fn browser(d: &Driver, profile: &Path, downloads: &Path) -> Client {
    let caps = json!({
        "browserName": "chrome",
        "goog:chromeOptions": {
            "binary": "/usr/bin/chromium",
            "args": [
                "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--no-first-run", "--disable-background-networking", "--disable-sync",
                "--disable-component-update", "--window-size=1280,900",
                format!("--user-data-dir={}", profile.display()),
            ],
            "prefs": {
                "download.default_directory": downloads.display().to_string(),
                "download.prompt_for_download": false,
            },
        },
        "goog:loggingPrefs": { "browser": "ALL" },
    });
    let Value::Object(caps) = caps else {
        unreachable!()
    };
    let connector = hyper_util::client::legacy::connect::HttpConnector::new();
    ClientBuilder::new(connector)
        .capabilities(caps)
        .connect(&d.url)
        .await
        .expect("a chromium session")
}

/// chromedriver's console log of the page (`POST /session/{id}/se/log`, which the
/// WebDriver standard lacks and fantoccini has no call for).
#[derive(Debug)]
struct ConsoleLog;

impl fantoccini::wd::WebDriverCompatibleCommand for ConsoleLog {
    fn endpoint(
        &self,
        base: &url::Url,
        session: Option<&str>,
    ) -> Result<url::Url, url::ParseError> {
        base.join(&format!("session/{}/se/log", session.unwrap_or_default()))
    }
    fn method_and_body(&self, _: &url::Url) -> (http::Method, Option<String>) {
        (http::Method::POST, Some(r#"{"type":"browser"}"#.into()))
    }
}

/// The console entries logged since the last call, as "LEVEL message".
async fn console(c: &Client) -> Vec<String> {
    let v = c.issue_cmd(ConsoleLog).await.unwrap();
    (v.as_array().unwrap().iter())
        .map(|e| format!("{} {}", e["level"].as_str().unwrap_or("?"), e["message"]))
        .collect()
}

/// Fails the test when the page logged anything at all.
async fn assert_quiet_console(c: &Client, page: &str) {
    let log = console(c).await;
    assert!(log.is_empty(), "{page}: console: {log:#?}");
}

/// A repository of planted messages for the browser; the token file.
fn repository(hostile: Option<&str>) -> Env {
    let e = Env::new();
    let mail = e.path("mail");
    plant(&mail);
    if let Some(h) = hostile {
        put(&mail, "", "hostile:2,", h);
    }
    e.ok(&["init"]);
    e.ok(&["backup", &format!("maildir:{}", mail.display())]);
    e.ok(&["index"]);
    token_file(&e, 0o600);
    e
}

/// Where screenshots go: `MAILVAULT_SCREENSHOTS`, else the test's directory.
fn shots_dir(e: &Env) -> PathBuf {
    let d = std::env::var_os("MAILVAULT_SCREENSHOTS")
        .map(PathBuf::from)
        .unwrap_or_else(|| e.path("screenshots"));
    fs::create_dir_all(&d).unwrap();
    d
}

/// Saves a screenshot of the page as `name.png` and checks it is one.
async fn shot(c: &Client, dir: &Path, name: &str) {
    let png = c.screenshot().await.unwrap();
    assert!(
        png.starts_with(b"\x89PNG\r\n\x1a\n") && png.len() > 2000,
        "{name}"
    );
    fs::write(dir.join(format!("{name}.png")), png).unwrap();
}

/// Logs in through the form.
async fn log_in(c: &Client, s: &Server) {
    c.goto(&s.url("/")).await.unwrap();
    let field = c
        .wait()
        .for_element(Locator::Css("input[name=token]"))
        .await;
    let field = field.unwrap();
    field.send_keys(TOKEN).await.unwrap();
    field.send_keys(&Key::Enter.to_string()).await.unwrap();
    c.wait()
        .for_element(Locator::Css("a[href^=\"/snapshot?\"]"))
        .await
        .unwrap();
}

/// Clicks the first link matching `css` and waits for the next page.
async fn follow(c: &Client, css: &str) {
    let before = c.current_url().await.unwrap();
    c.find(Locator::Css(css))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let t = Instant::now();
    while c.current_url().await.unwrap() == before {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "{css} did not lead on"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The page's text.
async fn text(c: &Client) -> String {
    c.find(Locator::Css("body"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

/// Nothing on the page is wider than the window.
async fn assert_fits(c: &Client, page: &str, width: u64) {
    let v = c
        .execute(
            "return [document.documentElement.scrollWidth, window.innerWidth];",
            vec![],
        )
        .await
        .unwrap();
    let (scroll, inner) = (v[0].as_u64().unwrap(), v[1].as_u64().unwrap());
    assert!(inner <= width, "{page}: a {inner}-px window, not {width}");
    assert!(
        scroll <= inner,
        "{page}: {scroll} px wide in a {inner}-px window"
    );
}

/// Every visible link, button and field of the page is reached by pressing Tab, and is
/// drawn with a focus outline when it is.
async fn assert_keyboard(c: &Client, page: &str) {
    let all: Vec<String> = serde_json::from_value(
        c.execute(
            "return [...document.querySelectorAll('a[href],button,input,select,textarea')]\
             .filter(e => !e.disabled && e.type !== 'hidden' && e.offsetParent !== null)\
             .map(e => e.outerHTML);",
            vec![],
        )
        .await
        .unwrap(),
    )
    .unwrap();
    let mut seen = std::collections::HashSet::new();
    for _ in 0..all.len() + 2 {
        let tab = KeyActions::new("keyboard".into())
            .then(KeyAction::Down {
                value: Key::Tab.into(),
            })
            .then(KeyAction::Up {
                value: Key::Tab.into(),
            });
        c.perform_actions(tab).await.unwrap();
        let v = c
            .execute(
                "const e = document.activeElement; const s = getComputedStyle(e);\
                 return [e.outerHTML, s.outlineStyle !== 'none' && s.outlineWidth !== '0px'];",
                vec![],
            )
            .await
            .unwrap();
        let html = v[0].as_str().unwrap().to_string();
        if all.contains(&html) {
            assert_eq!(v[1], true, "{page}: no focus outline on {html}");
        }
        seen.insert(html);
    }
    for e in &all {
        assert!(seen.contains(e), "{page}: Tab never reaches {e}");
    }
}

/// Waits for a finished download in `dir`: Chromium writes a hidden temporary file or
/// `NAME.crdownload` (and may put an empty `NAME` beside it) and renames it when done; the
/// path.
async fn downloaded(dir: &Path) -> PathBuf {
    let t = Instant::now();
    loop {
        let files: Vec<PathBuf> = (fs::read_dir(dir).unwrap())
            .map(|e| e.unwrap().path())
            .collect();
        let partial = files.iter().any(|p| {
            p.extension().is_some_and(|x| x == "crdownload")
                || p.file_name().unwrap().to_string_lossy().starts_with('.')
        });
        if let ([p], false) = (&files[..], partial) {
            return p.clone();
        }
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "no download: {files:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Runs the browser's part of a test. The server is started outside it: its blocking HTTP
/// client has a runtime of its own, which may not be dropped inside another.
fn run<F: std::future::Future<Output = ()>>(f: F) {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(f)
}

#[test]
fn a_browser_logs_in_walks_to_a_message_downloads_it_and_searches() {
    let e = repository(None);
    let s = start(&e, &[]);
    let d = driver();
    run(walk(&e, &s, &d));
}

async fn walk(e: &Env, s: &Server, d: &Driver) {
    let downloads = e.path("downloads");
    fs::create_dir_all(&downloads).unwrap();
    let c = browser(d, &e.path("profile"), &downloads).await;
    let shots = shots_dir(e);
    // The login page, then the snapshots.
    c.goto(&s.url("/")).await.unwrap();
    c.wait()
        .for_element(Locator::Css("input[name=token]"))
        .await
        .unwrap();
    assert_quiet_console(&c, "login").await;
    shot(&c, &shots, "login").await;
    log_in(&c, s).await;
    let mut pages = vec![("snapshots", c.current_url().await.unwrap())];
    assert_quiet_console(&c, "snapshots").await;
    // Snapshot → account → folder → message, by their links.
    follow(&c, "a[href^=\"/snapshot?\"]").await;
    assert!(text(&c).await.contains(ACCOUNT));
    pages.push(("snapshot", c.current_url().await.unwrap()));
    follow(&c, "a[href^=\"/account?\"]").await;
    let t = text(&c).await;
    assert!(t.contains("INBOX") && t.contains("Archive"), "{t}");
    pages.push(("account", c.current_url().await.unwrap()));
    follow(&c, "a[href^=\"/folder?\"][href$=\"folder=INBOX\"]").await;
    let t = text(&c).await;
    assert!(t.contains("planted") && t.contains("oldest"), "{t}");
    pages.push(("folder", c.current_url().await.unwrap()));
    // The folder as an mbox, read by Python's mailbox.
    c.find(Locator::Css("a[href^=\"/folder/mbox?\"][download]"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let mbox = downloaded(&downloads).await;
    assert_eq!(mbox.file_name().unwrap(), "INBOX.mbox");
    let out = Command::new("python3")
        .args([
            "-c",
            "import mailbox, sys\n\
             print(sorted(m['subject'] for m in mailbox.mbox(sys.argv[1], create=False)))",
        ])
        .arg(&mbox)
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "['oldest', 'planted']",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    fs::remove_file(&mbox).unwrap();
    follow(&c, "a[href^=\"/message?\"][href$=\"key=zebra\"]").await;
    let t = text(&c).await;
    assert!(t.contains("zebraquartz") && t.contains("Held by"), "{t}");
    pages.push(("message", c.current_url().await.unwrap()));
    // The download: the stored message byte for byte, under a name with no path in it.
    follow_download(&c).await;
    let file = downloaded(&downloads).await;
    let want = fs::read(e.path("mail/example.org/alice/Maildir/cur/zebra:2,S")).unwrap();
    let got = fs::read(&file).unwrap();
    assert_eq!(
        (got.len(), blake3::hash(&got)),
        (want.len(), blake3::hash(&want))
    );
    let name = file.file_name().unwrap().to_str().unwrap();
    assert!(name.ends_with(".eml") && !name.contains('/'), "{name}");
    // Search through the form.
    follow(&c, "nav a[href=\"/search\"]").await;
    let q = c.find(Locator::Css("input[name=q]")).await.unwrap();
    q.send_keys("zebraquartz").await.unwrap();
    q.send_keys(&Key::Enter.to_string()).await.unwrap();
    c.wait()
        .for_element(Locator::Css("a[href^=\"/message?\"][href$=\"key=zebra\"]"))
        .await
        .unwrap();
    pages.push(("search", c.current_url().await.unwrap()));
    // Every page: quiet console, fits a desktop and a phone, usable with the keyboard.
    check_pages(&c, &shots, pages.iter().map(|(n, u)| (*n, u))).await;
    c.close().await.unwrap();
}

/// Every page of `pages` at a desktop and a 390-px phone width: a quiet console, nothing
/// wider than the window, usable with the keyboard; a screenshot of each.
async fn check_pages<'u>(
    c: &Client,
    shots: &Path,
    pages: impl IntoIterator<Item = (&'u str, &'u url::Url)> + Clone,
) {
    for (width, height, suffix) in [(1280, 900, "desktop"), (390, 844, "phone")] {
        c.set_window_size(width, height).await.unwrap();
        for (name, url) in pages.clone() {
            c.goto(url.as_str()).await.unwrap();
            let page = format!("{name} ({suffix})");
            assert_quiet_console(c, &page).await;
            assert_fits(c, &page, width.into()).await;
            shot(c, shots, &format!("{name}-{suffix}")).await;
            assert_keyboard(c, &page).await;
        }
    }
}

/// Clicks the message page's download link.
async fn follow_download(c: &Client) {
    let link = c
        .find(Locator::Css("a[href^=\"/message/raw?\"][download]"))
        .await
        .unwrap();
    link.click().await.unwrap();
}

/// A message whose HTML tries every way of running code or reaching out, all aimed at
/// `http://127.0.0.1:{port}`.
fn hostile(port: u16) -> String {
    let u = format!("http://127.0.0.1:{port}");
    format!(
        "From: Mallory <m@evil.example>\r\nTo: {ACCOUNT}\r\n\
Subject: <script>console.log('mv-ran-subject')</script> hostile\r\n\
Date: Tue, 16 Jan 2024 10:00:00 +0000\r\nMIME-Version: 1.0\r\n\
Content-Type: multipart/mixed; boundary=B\r\n\r\n\
--B\r\nContent-Type: text/html; charset=utf-8\r\n\r\n\
<html><head><meta http-equiv=\"refresh\" content=\"0;url={u}/refresh\">\
<base href=\"{u}/base/\"><link rel=\"stylesheet\" href=\"{u}/sheet.css\">\
<style>@import url({u}/import.css); body{{background:url({u}/bg.png)}}</style></head>\
<body onload=\"console.log('mv-ran-onload'); top.document.title='pwned'\">\
<p>benign words here</p>\
<script>console.log('mv-ran-script'); fetch('{u}/fetch'); top.document.title='pwned'; alert(1)</script>\
<img src=\"{u}/img.gif\" onerror=\"console.log('mv-ran-onerror')\">\
<img srcset=\"{u}/srcset.png 2x\"><img src=\"relative.png\">\
<video poster=\"{u}/poster.png\"></video><audio src=\"{u}/a.mp3\" autoplay></audio>\
<iframe src=\"{u}/frame\"></iframe><object data=\"{u}/object\"></object><embed src=\"{u}/embed\">\
<a href=\"javascript:console.log('mv-ran-link')\">js</a><a href=\"data:text/html,x\">d</a>\
<div style=\"background-image:url({u}/inline.png)\">css</div>\
<svg onload=\"console.log('mv-ran-svg')\"><image href=\"{u}/svg.png\"/><script>console.log('mv-ran-svgscript')</script></svg>\
<form action=\"{u}/form\" id=f><input name=q autofocus onfocus=\"console.log('mv-ran-focus')\"></form>\
<script>document.getElementById('f').submit()</script></body></html>\r\n\
--B\r\nContent-Type: text/html\r\nContent-Disposition: attachment; filename=\"../../x.html\"\r\n\r\n\
<script>console.log('mv-ran-attachment')</script>\r\n--B--\r\n"
    )
}

/// Issue 28: a folder's page of an older snapshot marks the message deleted since with a
/// text label that fits a phone, is quiet and keeps the page usable with the keyboard.
#[test]
fn a_folder_page_marks_a_deleted_message_and_fits_a_phone() {
    let e = repository(None);
    let mail = e.path("mail");
    common::at_rest();
    fs::remove_file(mail.join("example.org/alice/Maildir/cur/zebra:2,S")).unwrap();
    e.ok(&["backup", &format!("maildir:{}", mail.display())]);
    let s = start(&e, &[]);
    let d = driver();
    run(deleted_mark(&e, &s, &d));
}

async fn deleted_mark(e: &Env, s: &Server, d: &Driver) {
    let downloads = e.path("downloads");
    fs::create_dir_all(&downloads).unwrap();
    let c = browser(d, &e.path("profile"), &downloads).await;
    log_in(&c, s).await;
    // The older snapshot: the second row, newest first.
    follow(&c, "tbody tr:nth-child(2) a[href^=\"/snapshot?\"]").await;
    follow(&c, "a[href^=\"/account?\"]").await;
    follow(&c, "a[href^=\"/folder?\"][href$=\"folder=INBOX\"]").await;
    let mark = c.find(Locator::Css("td.subject small.gone")).await.unwrap();
    let t = mark.text().await.unwrap();
    assert!(t.starts_with("deleted 20"), "{t}");
    let url = c.current_url().await.unwrap();
    check_pages(&c, &shots_dir(e), [("folder-deleted", &url)]).await;
    c.close().await.unwrap();
}

#[test]
fn hostile_mail_in_a_browser_runs_nothing_and_loads_nothing() {
    // The listener the message aims at: every request it receives is kept.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let hits = Arc::new(Mutex::new(Vec::<String>::new()));
    let kept = hits.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(conn) = conn else { continue };
            let mut line = String::new();
            let _ = BufReader::new(&conn).read_line(&mut line);
            kept.lock().unwrap().push(line.trim().to_string());
            let _ = std::io::Write::write_all(
                &mut &conn,
                b"HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n",
            );
        }
    });
    let e = repository(Some(&hostile(port)));
    let s = start(&e, &[]);
    let d = driver();
    run(look_at_hostile(&e, &s, &d, port, hits));
}

async fn look_at_hostile(
    e: &Env,
    s: &Server,
    d: &Driver,
    port: u16,
    hits: Arc<Mutex<Vec<String>>>,
) {
    let downloads = e.path("downloads");
    fs::create_dir_all(&downloads).unwrap();
    let c = browser(d, &e.path("profile"), &downloads).await;
    log_in(&c, s).await;
    follow(&c, "a[href^=\"/snapshot?\"]").await;
    follow(&c, "a[href^=\"/account?\"]").await;
    follow(&c, "a[href^=\"/folder?\"][href$=\"folder=INBOX\"]").await;
    follow(&c, "a[href^=\"/message?\"][href$=\"key=hostile\"]").await;
    let title = c.title().await.unwrap();
    // Give anything that would run or load time to do it.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let t = text(&c).await;
    assert!(
        t.contains("<script>console.log('mv-ran-subject')</script> hostile"),
        "{t}"
    );
    assert!(t.contains("../../x.html"), "{t}");
    // The frame shows the harmless text.
    c.enter_frame(0).await.unwrap();
    assert!(text(&c).await.contains("benign words here"));
    c.enter_parent_frame().await.unwrap();
    assert_eq!(c.title().await.unwrap(), title);
    assert!(c.get_alert_text().await.is_err(), "a dialog opened");
    let log = console(&c).await;
    assert!(
        !log.iter().any(|l| l.contains("mv-ran-")),
        "the message's code ran: {log:#?}"
    );
    assert_eq!(*hits.lock().unwrap(), Vec::<String>::new(), "requests left");
    // The listener does see a browser that is sent to it (the check above can fail).
    c.goto(&format!("http://127.0.0.1:{port}/probe"))
        .await
        .unwrap();
    let t = Instant::now();
    while hits.lock().unwrap().is_empty() && t.elapsed() < Duration::from_secs(10) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(hits.lock().unwrap()[0], "GET /probe HTTP/1.1");
    c.close().await.unwrap();
}

#[test]
fn a_browser_sees_acls_and_filters_and_a_script_as_text() {
    let e = home_repository();
    let s = start(&e, &[]);
    let d = driver();
    run(filters(&e, &s, &d));
}

async fn filters(e: &Env, s: &Server, d: &Driver) {
    let downloads = e.path("downloads");
    fs::create_dir_all(&downloads).unwrap();
    let c = browser(d, &e.path("profile"), &downloads).await;
    let shots = shots_dir(e);
    log_in(&c, s).await;
    follow(&c, "a[href^=\"/snapshot?\"]").await;
    follow(
        &c,
        &format!(
            "a[href^=\"/account?\"][href$=\"{}\"]",
            ACCOUNT.replace('@', "%40")
        ),
    )
    .await;
    let t = text(&c).await;
    for want in [
        "Shared with",
        "bob: lr",
        "<i>eve</i>: r",
        "Filters",
        "~/.dovecot.sieve → sieve/rules.sieve",
        "~/sieve/escape.sieve → /etc/hostname",
    ] {
        assert!(t.contains(want), "{want}: {t}");
    }
    let marked: Vec<String> = serde_json::from_value(
        c.execute(
            "return [...document.querySelectorAll('tr')].filter(r => r.innerText.includes('active'))\
             .map(r => r.querySelector('td').innerText);",
            vec![],
        )
        .await
        .unwrap(),
    )
    .unwrap();
    assert_eq!(marked, ["~/sieve/rules.sieve"]);
    let account = c.current_url().await.unwrap();
    follow(
        &c,
        "a[href^=\"/account/file?\"][href$=\"name=rules.sieve\"]",
    )
    .await;
    // Give a script that would run time to do it.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let t = text(&c).await;
    assert!(
        t.contains("# <script>alert(1)</script> sorts the lists"),
        "{t}"
    );
    assert!(c.get_alert_text().await.is_err(), "a dialog opened");
    // The page's one script is the server's own.
    let scripts =
        "return Array.from(document.querySelectorAll('script'), s => s.getAttribute('src'));";
    let scripts = c.execute(scripts, vec![]);
    assert_eq!(scripts.await.unwrap(), json!(["/static/app.js"]));
    let file = c.current_url().await.unwrap();
    check_pages(&c, &shots, [("filters", &account), ("script", &file)]).await;
    c.close().await.unwrap();
}

/// Issue 28: a browser starts a restore of a folder into a real Dovecot from the folder's
/// page (its "Restore…" link, then the form's button), and the job's page follows the
/// job through the JSON API (the server's script; the restore goes through a slow relay
/// so that it runs a while) and shows the report once the job ends; the Dovecot judge sees
/// the folder as the command line's restore of the same snapshot puts it (flags, dates,
/// bytes). The form and the job page fit a phone and work with the keyboard.
#[test]
fn a_browser_restores_a_folder_into_dovecot_and_sees_the_report() {
    let e = repository(None);
    let Some(dovecot) = judge::dovecot(None, String::new()) else {
        return;
    };
    let pass = e.path("master-pass");
    fs::write(&pass, dovecot.master_password()).unwrap();
    fs::set_permissions(&pass, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let slow = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let relay = common::relay::slow_relay(dovecot.port(), slow, Duration::from_millis(250));
    let url = format!("imap://127.0.0.1:{relay}");
    let pass = pass.display().to_string();
    let flags = [
        "--restore-imap",
        &url,
        "--restore-master-user",
        dovecot.master_user(),
        "--restore-password-file",
        &pass,
    ];
    let s = start(&e, &flags);
    let d = driver();
    run(restore(&e, &s, &d));
    let login = judge::Login {
        port: dovecot.port(),
        admin: dovecot.master_user().to_string(),
        password: dovecot.master_password().to_string(),
    };
    let carol = format!("{ACCOUNT}=carol@example.org");
    let cli = [
        "--account",
        ACCOUNT,
        "--folder",
        "INBOX",
        "--map-user",
        &carol,
    ];
    let (code, _, err) = judge::imap_restore(&e, &dovecot, &cli);
    assert_eq!(code, Some(0), "{err}");
    let web = judge::record(&login, ACCOUNT).unwrap();
    let want = judge::record(&login, "carol@example.org").unwrap();
    assert_eq!(web.folders["INBOX"].messages.len(), 2, "{web:?}");
    let diff = judge::compare(&want, &web, judge::Fidelity::SameOrder);
    assert!(diff.is_empty(), "{diff:#?}");
}

async fn restore(e: &Env, s: &Server, d: &Driver) {
    let c = browser(d, &e.path("profile"), &e.path("downloads")).await;
    let shots = shots_dir(e);
    log_in(&c, s).await;
    follow(&c, "a[href^=\"/snapshot?\"]").await;
    follow(&c, "a[href^=\"/account?\"]").await;
    follow(&c, "a[href^=\"/folder?\"][href$=\"folder=INBOX\"]").await;
    follow(&c, "a.restore").await;
    let form = c.current_url().await.unwrap();
    let t = text(&c).await;
    assert!(
        t.contains("Into the mail server") && t.contains("folder INBOX"),
        "{t}"
    );
    let button = c
        .find(Locator::Css("form[action=\"/restore\"] button"))
        .await
        .unwrap();
    button.click().await.unwrap();
    // The job's page follows the job through the API until it has ended.
    let until = Instant::now() + Duration::from_secs(60);
    let mut polled = 0;
    loop {
        // Read in one script call: the page may reload between finding an element and
        // reading its text.
        let read = "const j = document.querySelector('[data-job]'); \
            return [document.body ? document.body.innerText : '', j ? (j.dataset.polled || '0') : '0'];";
        let t = c.execute(read, vec![]).await.ok();
        let t = t.as_ref().and_then(|v| v.as_array());
        let text = |i: usize| {
            t.and_then(|a| a[i].as_str())
                .unwrap_or_default()
                .to_string()
        };
        polled = polled.max(text(1).parse::<u32>().unwrap_or(0));
        let t = text(0);
        if t.contains("Messages selected") {
            assert!(t.contains("Done") && t.contains("Restored"), "{t}");
            break;
        }
        assert!(Instant::now() < until, "no report: {t}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(polled >= 1, "the page never asked the API");
    let job = c.current_url().await.unwrap();
    assert!(job.path() == "/job", "{job}");
    check_pages(&c, &shots, [("restore", &form), ("job", &job)]).await;
    c.close().await.unwrap();
}

/// Issue 28: a mail user logs in through the form with their own password, checked by a
/// real Dovecot (`--user-auth imap://`): a wrong one is refused on the page; theirs shows
/// their account alone, and another account's pages, typed into the address bar,
/// answer "no such" pages with nothing of it.
#[test]
fn a_mail_user_logs_in_through_dovecot_and_reaches_nothing_of_another_account() {
    let e = Env::new();
    let mail = e.path("mail");
    plant(&mail);
    let bob = mail.join("example.org/bob/Maildir");
    let own = "From: b@example.org\r\nSubject: bobs own words\r\n\
               Date: Thu, 04 Jan 2024 10:00:00 +0000\r\n\r\nbobword\r\n";
    common::write_msg(&bob, "cur", "own:2,S", own.as_bytes());
    e.ok(&["init"]);
    e.ok(&["backup", &format!("maildir:{}", mail.display())]);
    e.ok(&["index"]);
    token_file(&e, 0o600);
    const BOB: &str = "bob@example.org";
    let Some(dovecot) = judge::dovecot_of(None, String::new(), &[BOB, ACCOUNT]) else {
        return;
    };
    let auth = format!("imap://127.0.0.1:{}", dovecot.port());
    let s = start(&e, &["--user-auth", &auth]);
    let d = driver();
    run(mail_user(&e, &s, &d, BOB));
}

async fn mail_user(e: &Env, s: &Server, d: &Driver, bob: &str) {
    let c = browser(d, &e.path("profile"), &e.path("downloads")).await;
    let form = |password: &'static str| {
        let c = &c;
        async move {
            c.goto(&s.url("/login")).await.unwrap();
            let user = c.find(Locator::Css("input[name=user]")).await.unwrap();
            user.send_keys(bob).await.unwrap();
            let pw = c.find(Locator::Css("input[name=token]")).await.unwrap();
            pw.send_keys(password).await.unwrap();
            pw.send_keys(&Key::Enter.to_string()).await.unwrap();
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    };
    form("not-his-password").await;
    let t = text(&c).await;
    assert!(t.contains("wrong user name, password or token"), "{t}");
    // The refused login's 401 is the one thing logged.
    let log = console(&c).await;
    assert!(log.len() == 1 && log[0].contains("401"), "{log:#?}");
    form(mailvault_imap::testing::USER_PASSWORD).await;
    c.wait()
        .for_element(Locator::Css("a[href^=\"/snapshot?\"]"))
        .await
        .unwrap();
    assert_quiet_console(&c, "a mail user's snapshots").await;
    follow(&c, "a[href^=\"/snapshot?\"]").await;
    let t = text(&c).await;
    assert!(t.contains(bob) && !t.contains(ACCOUNT), "{t}");
    let snapshot = c.current_url().await.unwrap();
    let id = (snapshot.query_pairs())
        .find(|(k, _)| k == "snapshot")
        .map(|(_, v)| v.to_string())
        .unwrap();
    // Alice's pages, typed in: "no such" pages, none of her mail.
    for path in [
        format!("/account?snapshot={id}&account=alice%40example.org"),
        format!("/folder?snapshot={id}&account=alice%40example.org&folder=INBOX"),
        format!("/message?snapshot={id}&account=alice%40example.org&folder=INBOX&key=zebra"),
        "/audit".to_string(),
        "/repository".to_string(),
    ] {
        c.goto(&s.url(&path)).await.unwrap();
        let t = text(&c).await;
        assert!(
            t.contains("Not Found") && !t.contains("zebraquartz"),
            "{path}: {t}"
        );
        assert!(
            !t.contains("planted") && !t.contains("oldest"),
            "{path}: {t}"
        );
    }
    c.close().await.unwrap();
}
