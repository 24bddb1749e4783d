//! The `mailvault` binary against a real Dovecot: a restore into IMAP killed midway with
//! SIGKILL and run again gives every message exactly once; backups over IMAP with a
//! master user and an accounts file, and as one user named in the URL.
//! Fails (does not skip) without Dovecot unless MAILVAULT_SKIP_DOVECOT=1.
#![allow(clippy::unwrap_used)]

mod common;

use common::{contents, Env};
use mailvault_imap::testing::DovecotServer;
use serde_json::Value;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Message files below a mail root (cheap: names only).
fn count(root: &Path) -> usize {
    let Ok(rd) = fs::read_dir(root) else {
        return 0;
    };
    let mut n = 0;
    for e in rd.flatten() {
        let p = e.path();
        if p.is_dir() {
            let name = e.file_name();
            if name == "cur" || name == "new" {
                n += fs::read_dir(&p).map(|r| r.count()).unwrap_or(0);
            } else if name != "tmp" {
                n += count(&p);
            }
        }
    }
    n
}

/// A repository holding a backup of a generated store of `messages` messages, and the
/// way to restore it into `server` as its master user.
struct Fixture {
    e: Env,
    src: PathBuf,
    url: String,
    master: String,
    imap_pass: String,
}

impl Fixture {
    fn new(server: &DovecotServer, messages: usize) -> Fixture {
        let e = Env::new();
        let src = e.path("src");
        let spec = mailvault_corpus::CorpusSpec {
            messages,
            ..mailvault_corpus::CorpusSpec::preset("tiny").unwrap()
        };
        mailvault_corpus::generate(&spec, &src).unwrap();
        Fixture::backed_up(server, e, src)
    }

    /// A new repository in `e` holding a backup of the mail root `src`.
    fn backed_up(server: &DovecotServer, e: Env, src: PathBuf) -> Fixture {
        fs::write(
            e.path("imap-pass"),
            format!("{}\n", server.master_password()),
        )
        .unwrap();
        e.ok(&["init"]);
        e.ok(&["backup", &format!("maildir:{}", src.display())]);
        Fixture {
            url: format!("imap://127.0.0.1:{}", server.port()),
            master: server.master_user().into(),
            imap_pass: e.path("imap-pass").display().to_string(),
            e,
            src,
        }
    }

    /// `mailvault restore latest --target URL` as the master user, then `extra`.
    fn restore(&self, extra: &[&str]) -> Command {
        let mut args = vec![
            "restore",
            "latest",
            "--target",
            &self.url,
            "--imap-master-user",
            &self.master,
            "--imap-password-file",
            &self.imap_pass,
        ];
        args.extend_from_slice(extra);
        self.e.cmd(&args)
    }

    /// A restore with `--json -q`: its exit code and report (when it printed one).
    fn restore_json(&self, extra: &[&str]) -> (Option<i32>, Option<Value>, String) {
        let mut args = extra.to_vec();
        args.extend_from_slice(&["--json", "-q"]);
        let o = self.restore(&args).output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        (o.status.code(), serde_json::from_slice(&o.stdout).ok(), err)
    }
}

#[test]
fn killed_imap_restore_resumes_without_duplicates() {
    let Some(server) = DovecotServer::start_or_skip().expect("dovecot") else {
        return;
    };
    let f = Fixture::new(&server, 400);
    let (e, src, url) = (&f.e, &f.src, &f.url);
    let imap_pass = &f.imap_pass;

    // Slow (--max-rate) so that the kill lands in the middle.
    let mut child = f
        .restore(&[
            "--max-rate",
            "150",
            "--batch",
            "10",
            "--connections",
            "2",
            "--accounts",
            "2",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mail = server.mail_root();
    let deadline = Instant::now() + Duration::from_secs(60);
    while count(&mail) < 60 {
        assert!(Instant::now() < deadline, "restore made no progress");
        assert!(child.try_wait().unwrap().is_none(), "restore ended early");
        std::thread::sleep(Duration::from_millis(20));
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    let midway = count(&mail);
    assert!(midway < 400, "killed too late: {midway}");

    let (code, v, err) = f.restore_json(&[]);
    assert_eq!(code, Some(0), "{err}");
    let v = v.unwrap();
    assert_eq!(v["items_failed"], 0, "{v}");
    let done_before =
        v["items_journaled"].as_u64().unwrap() + v["items_existing"].as_u64().unwrap();
    assert!(done_before >= 50, "{v}");
    assert_eq!(
        v["items_appended"].as_u64().unwrap() + done_before,
        400,
        "{v}"
    );
    assert_eq!(v["phases"][0]["name"], "provisioning");
    // Exactly the original messages, each once, in the right folders.
    assert_eq!(contents(&mail), contents(src));

    // Back up over IMAP: master user + accounts file, and one user in the URL.
    let accounts: Vec<String> = {
        let mut a = Vec::new();
        for d in fs::read_dir(src).unwrap() {
            let d = d.unwrap();
            for u in fs::read_dir(d.path()).unwrap() {
                a.push(format!(
                    "{}@{}",
                    u.unwrap().file_name().to_string_lossy(),
                    d.file_name().to_string_lossy()
                ));
            }
        }
        a
    };
    fs::write(e.path("accounts.txt"), accounts.join("\n")).unwrap();
    let out = e.ok(&[
        "backup",
        url,
        "--imap-master-user",
        server.master_user(),
        "--imap-password-file",
        imap_pass,
        "--accounts-file",
        &e.path("accounts.txt").display().to_string(),
        "--json",
    ]);
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        (v["items_total"].as_u64(), v["accounts"].as_u64()),
        (Some(400), Some(accounts.len() as u64))
    );
    fs::write(e.path("user-pass"), server.password()).unwrap();
    let one = format!("imap://{}@127.0.0.1:{}", accounts[0], server.port());
    let out = e.ok(&[
        "backup",
        &one,
        "--imap-password-file",
        &e.path("user-pass").display().to_string(),
        "--json",
    ]);
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["accounts"], 1, "{v}");
    // The IMAP password is not the repository's: a clear error without it.
    let o = e.cmd(&["backup", &one]).output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--imap-password-file"));
}

/// `--message` into IMAP: one message of one folder, and nothing else: the report counts
/// one account, one folder and one message, and the server holds exactly that message
/// where it was. An unknown key is a clear error.
#[test]
fn one_message_restores_into_imap_alone() {
    let Some(server) = DovecotServer::start_or_skip().expect("dovecot") else {
        return;
    };
    let f = Fixture::new(&server, 80);
    let src = &f.src;
    // A message in a subfolder's cur/ of the first account that has one.
    let (account, key, data) = {
        let mut found = None;
        'find: for d in fs::read_dir(src).unwrap() {
            let d = d.unwrap();
            for u in fs::read_dir(d.path()).unwrap() {
                let u = u.unwrap();
                let md = u.path().join("Maildir");
                for f in fs::read_dir(&md).unwrap() {
                    let f = f.unwrap();
                    if !f.file_name().to_string_lossy().starts_with('.') || !f.path().is_dir() {
                        continue;
                    }
                    let Some(m) = fs::read_dir(f.path().join("cur"))
                        .ok()
                        .and_then(|mut r| r.next())
                    else {
                        continue;
                    };
                    let m = m.unwrap();
                    let name = m.file_name().to_string_lossy().into_owned();
                    let key = name.split(":2,").next().unwrap().to_string();
                    let account = format!(
                        "{}@{}",
                        u.file_name().to_string_lossy(),
                        d.file_name().to_string_lossy()
                    );
                    found = Some((account, key, fs::read(m.path()).unwrap()));
                    break 'find;
                }
            }
        }
        found.expect("the corpus has a message in a subfolder")
    };
    let (code, v, err) = f.restore_json(&["--account", &account, "--message", &key]);
    assert_eq!(code, Some(0), "{err}");
    let v = v.unwrap();
    assert_eq!(
        (
            v["accounts"].as_u64(),
            v["folders"].as_u64(),
            v["items_total"].as_u64(),
            v["items_appended"].as_u64()
        ),
        (Some(1), Some(1), Some(1), Some(1)),
        "{v}"
    );
    let on_server = contents(&server.mail_root());
    let want: Vec<_> = contents(src)
        .into_iter()
        .filter(|(_, msgs)| msgs.contains(&data))
        .map(|(k, _)| (k, vec![data.clone()]))
        .collect();
    assert_eq!(want.len(), 1, "the message is in one folder of the source");
    assert_eq!(on_server.into_iter().collect::<Vec<_>>(), want);

    let (code, _, err) = f.restore_json(&["--account", &account, "--message", "no-such-key"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("no message matches"), "{err}");
}

/// A repository holding a backup of one small account `bob@example.org` whose INBOX
/// has `subscriptions` with this content.
fn small_fixture(server: &DovecotServer, subscriptions: &[u8]) -> Fixture {
    let e = Env::new();
    let src = e.path("src");
    let md = src.join("example.org/bob/Maildir");
    for (f, i) in [("", 1), (".Sent", 2)] {
        let dir = md.join(f);
        for s in ["cur", "new", "tmp"] {
            fs::create_dir_all(dir.join(s)).unwrap();
        }
        fs::write(
            dir.join("cur").join(format!("{i}.M{i}P1.h:2,S")),
            format!("Subject: m{i}\nMessage-ID: <m{i}@x>\n\nbody\n"),
        )
        .unwrap();
    }
    fs::write(md.join("subscriptions"), subscriptions).unwrap();
    Fixture::backed_up(server, e, src)
}

/// Issue 10, item 7: a restore whose report lists a failure exits 1, even when every
/// message was restored (here a subscription the server cannot take).
#[test]
fn listed_failures_exit_1() {
    let Some(server) = DovecotServer::start_or_skip().expect("dovecot") else {
        return;
    };
    let f = small_fixture(&server, b"V\t2\n\nSent\nbad\t\tname\n");
    let (code, v, err) = f.restore_json(&[]);
    let v = v.unwrap();
    assert_eq!(v["items_appended"], 2, "{v}");
    assert_eq!(v["items_failed"], 0, "{v}");
    assert_eq!(v["failures"].as_array().unwrap().len(), 1, "{v}");
    assert_eq!(code, Some(1), "{err}");
    // The human report of a run that wrote nothing gives no rate.
    let o = f.restore(&[]).output().unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("written    nothing"), "{out}");
}

/// Issue 10, item 14: `--create-accounts` needs the admin (a master user); on Dovecot,
/// which makes an account's INBOX at its first login, it creates nothing.
#[test]
fn create_accounts_on_dovecot() {
    let Some(server) = DovecotServer::start_or_skip().expect("dovecot") else {
        return;
    };
    let f = small_fixture(&server, b"V\t2\n\nSent\n");
    let user_pass = f.e.path("user-pass");
    fs::write(&user_pass, server.password()).unwrap();
    let o =
        f.e.cmd(&[
            "restore",
            "latest",
            "--target",
            &f.url,
            "--imap-password-file",
            &user_pass.display().to_string(),
            "--create-accounts",
        ])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("master user"), "{err}");
    let (code, v, err) = f.restore_json(&["--create-accounts"]);
    assert_eq!(code, Some(0), "{err}");
    let v = v.unwrap();
    assert_eq!(
        (v["accounts_created"].as_u64(), v["items_appended"].as_u64()),
        (Some(0), Some(2)),
        "{v}"
    );
}
