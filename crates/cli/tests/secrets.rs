//! Secrets never reach an error, a log line or the journal, and secret files others can
//! read are warned about wherever they are named (issue 24, items 5, 6 and 14).
#![allow(clippy::unwrap_used)]

mod common;

use common::*;
use std::fs;
use std::os::unix::fs::PermissionsExt;

fn chmod(p: &std::path::Path, mode: u32) {
    fs::set_permissions(p, fs::Permissions::from_mode(mode)).unwrap();
}

/// Item 5: a repository URL with credentials is refused without quoting them, and the
/// message names the variables to use instead.
#[test]
fn credentials_in_a_repository_url_are_refused_unquoted() {
    let e = Env::new();
    for url in [
        "s3:http://AKIAUSER:wJalrXUtnFEMI-secret@127.0.0.1:9/bucket",
        "s3:https://AKIAUSER:wJalrXUtnFEMI-secret@s3.example.org/bucket/prefix",
    ] {
        let (code, out, err) = e.run_text(&["--repo", url, "snapshots"]);
        assert_eq!(code, Some(2), "{out}{err}");
        assert!(
            !err.contains("wJalrXUtnFEMI") && !out.contains("wJalrXUtnFEMI"),
            "{err}"
        );
        assert!(!err.contains("AKIAUSER"), "{err}");
        assert!(err.contains("AWS_SECRET_ACCESS_KEY"), "{err}");
    }
    // An IMAP source with a password in its URL: the same.
    let (code, out, err) = e.run_text(&[
        "backup",
        "imaps://bob:hunter2-imap@127.0.0.1:9",
        "--account",
        "bob@example.org",
    ]);
    assert_ne!(code, Some(0), "{out}{err}");
    assert!(
        !err.contains("hunter2") && !out.contains("hunter2"),
        "{err}"
    );
}

/// Item 5: a configuration file with a password in it: the error names the line and
/// what to write instead, never the password, and fits on one line (item 14: no `\x0a`).
#[test]
fn a_password_in_the_configuration_file_is_not_quoted() {
    let e = Env::new();
    let conf = e.path("mailvault.toml");
    fs::write(
        &conf,
        "[profiles.nightly]\nrepository = \"/srv/r\"\npassword = \"correct horse battery\"\n",
    )
    .unwrap();
    let (code, out, err) = e.run_text(&[
        "--config",
        conf.to_str().unwrap(),
        "run",
        "--profile",
        "nightly",
    ]);
    assert_eq!(code, Some(2), "{out}{err}");
    assert!(!err.contains("horse"), "{err}");
    assert!(!err.contains("\\x0a"), "{err}");
    assert!(
        err.contains("line 3") && err.contains("password-file"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
}

/// Item 6: a password file others can read is warned about when it comes from the
/// command line or the environment, as it was for profiles; once per run; not when 0600.
#[test]
fn password_files_readable_by_others_are_warned_about_everywhere() {
    let e = Env::new();
    e.expect(0, &["init"]);
    let (_, _, err) = e.run_text(&["snapshots"]);
    assert!(!err.contains("read by others"), "{err}");
    chmod(&e.path("pass"), 0o644);
    let (code, _, err) = e.run_text(&["snapshots"]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(err.matches("can be read by others").count(), 1, "{err}");
    assert!(err.contains("chmod 600"), "{err}");
    let pass = e.path("pass");
    let (_, _, err) = e.run_text(&["--password-file", pass.to_str().unwrap(), "snapshots"]);
    assert_eq!(err.matches("can be read by others").count(), 1, "{err}");
    // The IMAP password file of a backup: the same warning, before any connection.
    let imap_pass = e.path("imap-pass");
    fs::write(&imap_pass, "imap-secret\n").unwrap();
    chmod(&imap_pass, 0o640);
    let (_, _, err) = e.run_text(&[
        "backup",
        "imap://127.0.0.1:9",
        "--account",
        "bob@example.org",
        "--imap-password-file",
        imap_pass.to_str().unwrap(),
    ]);
    assert!(
        err.contains("IMAP password file") && err.contains("can be read by others"),
        "{err}"
    );
    assert!(!err.contains("imap-secret"), "{err}");
}

/// Item 14: warnings the engine logs are written as the commands write theirs, without
/// timestamps or module paths, and a damaged file's path is said once.
#[test]
fn warnings_are_plain_lines_naming_each_file_once() {
    let e = Env::new();
    let md = e.path("md");
    for d in ["cur", "new", "tmp"] {
        fs::create_dir_all(md.join(d)).unwrap();
    }
    fs::write(md.join("cur/1.M1P1.h:2,S"), "Subject: x\n\nbody\n").unwrap();
    e.expect(0, &["init"]);
    e.expect(
        0,
        &["backup", md.to_str().unwrap(), "--account", "a@example.org"],
    );
    e.expect(
        0,
        &["backup", md.to_str().unwrap(), "--account", "a@example.org"],
    );
    let damage = |dir: &str| {
        let f = fs::read_dir(e.repo().join(dir))
            .unwrap()
            .map(|d| d.unwrap().path())
            .find(|p| p.is_file())
            .unwrap();
        let mut bytes = fs::read(&f).unwrap();
        bytes.extend_from_slice(b"junk");
        fs::write(&f, bytes).unwrap();
        format!("{dir}/{}", f.file_name().unwrap().to_str().unwrap())
    };
    let snapshot = damage("snapshots");
    let index = damage("index");
    let (_, out, err) = e.run_text(&["snapshots"]);
    for line in err.lines() {
        assert!(line.starts_with("warning: "), "{line:?} in {err}");
        assert!(
            !line.contains("WARN") && !line.contains("mailvault_core"),
            "{err}"
        );
    }
    assert_eq!(err.matches(&snapshot).count(), 1, "{err}");
    assert_eq!(err.matches(&index).count(), 1, "{err}");
    let (_, out2, _) = e.run_text(&["check"]);
    let all = out.clone() + &out2;
    for line in all.lines().filter(|l| l.contains(&snapshot)) {
        assert_eq!(line.matches(&snapshot).count(), 1, "{line}");
    }
}
