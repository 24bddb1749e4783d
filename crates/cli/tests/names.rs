//! Names as people see and write them (issue 10): folders by their decoded names
//! (`Entwürfe`, not `Entw&APw-rfe`) for Maildir and IMAP snapshots alike, no terminal
//! escapes from mail data in any human-readable output, unknown location schemes refused,
//! and log lines without colour codes off a terminal.
//! The IMAP part needs Dovecot (skipped only with MAILVAULT_SKIP_DOVECOT=1).
#![allow(clippy::unwrap_used)]

mod common;

use common::Env;
use mailvault_imap::testing::DovecotServer;
use mailvault_imap::AppendMsg;
use std::fs;
use std::path::Path;
use std::process::Output;

fn put(maildir: &Path, folder: &str, name: &str, body: &[u8]) {
    let dir = maildir.join(folder);
    for s in ["cur", "new", "tmp"] {
        fs::create_dir_all(dir.join(s)).unwrap();
    }
    fs::write(dir.join("cur").join(name), body).unwrap();
}

fn msg(subject: &str) -> Vec<u8> {
    format!("From: a@example.org\nSubject: {subject}\nMessage-ID: <{subject}@x>\n\nbody\n")
        .into_bytes()
}

/// The folder names of `ls --account` (human output, second column onwards up to the
/// message count).
fn listed_folders(out: &str) -> Vec<String> {
    out.lines()
        .map(|l| {
            let rest = l.split_once(' ').unwrap().1.trim_start();
            let end = rest.find(" messages").unwrap();
            let rest = rest[..end].trim_end();
            rest[..rest.rfind(' ').unwrap()].trim_end().to_string()
        })
        .collect()
}

/// Message files below `root`, as `folder dir/cur/name` paths relative to `root`.
fn restored(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if p.parent().unwrap().ends_with("cur") || p.parent().unwrap().ends_with("new") {
                out.push(p.strip_prefix(root).unwrap().to_string_lossy().into_owned());
            }
        }
    }
    out.sort();
    out
}

/// Checks the snapshot `latest` of one account `bob@example.org` holding `Entwürfe`,
/// `Entwürfe/Alt` and `Reports & Stats` (each with one message): `ls` shows the decoded
/// names and `--folder` takes them, for `ls` and for a restore, whose directories keep
/// Dovecot's modified UTF-7.
#[track_caller]
fn check_human_folder_names(e: &Env, tag: &str) {
    let acc = "bob@example.org";
    let folders = listed_folders(&e.ok(&["ls", "latest", "--account", acc]));
    for want in ["Entw\u{fc}rfe", "Entw\u{fc}rfe/Alt", "Reports & Stats"] {
        assert!(
            folders.iter().any(|f| f == want),
            "{tag}: {want} in {folders:?}"
        );
    }
    assert!(
        !folders
            .iter()
            .any(|f| f.contains('&') && f != "Reports & Stats"),
        "{tag}: modified UTF-7 shown: {folders:?}"
    );
    let v = e.json(0, &["ls", "latest", "--account", acc]);
    let entw = v["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["name"] == "Entw\u{fc}rfe")
        .unwrap_or_else(|| panic!("{tag}: {v}"));
    assert_eq!(entw["dir"], ".Entw&APw-rfe", "{tag}");

    // ls --folder by the human name, and by the stored one for Maildir snapshots.
    let v = e.json(0, &["ls", "latest", "--folder", "Reports & Stats"]);
    let items = v["items"].as_array().unwrap();
    assert_eq!(items.len(), 1, "{tag}: {v}");
    assert_eq!(items[0]["folder"], "Reports & Stats", "{tag}");
    assert_eq!(items[0]["subject"], "stats", "{tag}");
    let out = e.ok(&["ls", "latest", "--folder", "Entw\u{fc}rfe"]);
    assert!(out.contains("draft"), "{tag}: {out}");
    let v = e.json(0, &["ls", "latest", "--folder", "Entw\u{fc}rfe"]);
    let subjects: Vec<&str> = (v["items"].as_array().unwrap().iter())
        .map(|m| m["subject"].as_str().unwrap())
        .collect();
    assert_eq!(subjects, ["draft"], "{tag}");

    // restore --folder by the human names: the folder and its subfolder, on disk as
    // Dovecot names them.
    for (i, (filter, want)) in [
        ("Entw\u{fc}rfe", &[".Entw&APw-rfe", ".Entw&APw-rfe.Alt"][..]),
        ("Reports & Stats", &[".Reports &- Stats"][..]),
        ("Entw\u{fc}rfe/Alt", &[".Entw&APw-rfe.Alt"][..]),
    ]
    .into_iter()
    .enumerate()
    {
        let target = e.path(&format!("restore-{tag}-{i}"));
        e.expect_output(
            0,
            &[
                "restore",
                "latest",
                "--target",
                &format!("maildir:{}", target.display()),
                "--account",
                acc,
                "--folder",
                filter,
            ],
        );
        let got = restored(&target);
        // The folder directory of each message (below the account's Maildir).
        let mut dirs: Vec<&str> = got
            .iter()
            .map(|p| {
                let p = p.strip_prefix("example.org/bob/Maildir/").unwrap_or(p);
                let p = &p[..p.rfind('/').unwrap()];
                &p[..p.rfind('/').unwrap()]
            })
            .collect();
        dirs.sort();
        assert_eq!(dirs, want, "{tag}: --folder {filter}: {got:?}");
    }
    // An unknown folder names those there are, for ls and restore alike.
    let target = format!(
        "maildir:{}",
        e.path(&format!("restore-{tag}-none")).display()
    );
    for args in [
        &["ls", "latest", "--folder", "Entwurf"][..],
        &[
            "restore", "latest", "--target", &target, "--folder", "Entwurf",
        ],
    ] {
        let o = e.expect_output(2, args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            err.contains("Entw\u{fc}rfe/Alt") && err.contains("Reports & Stats"),
            "{tag}: {args:?}: {err}"
        );
    }
}

/// Issue 10, item 6: `--folder 'Entwürfe'` and `--folder 'Reports & Stats'` failed on a
/// Maildir snapshot and `ls` showed `Entw&APw-rfe`. Dovecot makes the folders (over
/// IMAP); its Maildir store and the same account over IMAP are backed up, and both
/// snapshots show and take the decoded names.
#[test]
fn folders_are_shown_and_taken_by_their_decoded_names() {
    let Some(server) = DovecotServer::start_or_skip().expect("dovecot") else {
        return;
    };
    let acc = "bob@example.org";
    let mut s = server.client().login(&server.user(acc)).unwrap();
    for (folder, subject) in [
        ("INBOX", "inbox"),
        ("Entw\u{fc}rfe", "draft"),
        ("Entw\u{fc}rfe/Alt", "alt"),
        ("Reports & Stats", "stats"),
    ] {
        s.create(folder, None).unwrap();
        let data = format!("From: a@example.org\r\nSubject: {subject}\r\n\r\nx\r\n");
        let m = AppendMsg {
            flags: vec![],
            internal_date: None,
            data: data.as_bytes(),
        };
        assert!(s.append(folder, &m).unwrap().is_appended());
    }
    s.logout().unwrap();
    assert!(server.maildir(acc).join(".Entw&APw-rfe").is_dir());
    assert!(server.maildir(acc).join(".Reports &- Stats").is_dir());

    let e = Env::new();
    e.expect_output(0, &["init"]);
    e.expect_output(
        0,
        &[
            "backup",
            &format!("maildir:{}", server.mail_root().display()),
        ],
    );
    check_human_folder_names(&e, "maildir");
    // The on-disk forms still work for Maildir snapshots.
    let v = e.json(0, &["ls", "latest", "--folder", "Entw&APw-rfe"]);
    assert_eq!(v["items"][0]["folder"], "Entw\u{fc}rfe");

    // Into IMAP, by the decoded name: that folder alone, under its own name.
    let other = DovecotServer::start().expect("second dovecot");
    fs::write(e.path("master-pass"), other.master_password()).unwrap();
    e.expect_output(
        0,
        &[
            "restore",
            "latest",
            "--target",
            &format!("imap://127.0.0.1:{}", other.port()),
            "--imap-master-user",
            other.master_user(),
            "--imap-password-file",
            &e.path("master-pass").display().to_string(),
            "--folder",
            "Reports & Stats",
        ],
    );
    let mut s = other.client().login(&other.user(acc)).unwrap();
    let mut names: Vec<String> = s.list().unwrap().into_iter().map(|f| f.name).collect();
    names.sort();
    assert_eq!(names, ["INBOX", "Reports & Stats"]);
    assert_eq!(s.examine("Reports & Stats").unwrap().exists, 1);
    s.logout().unwrap();

    let e = Env::new();
    e.expect_output(0, &["init"]);
    fs::write(e.path("imap-pass"), server.password()).unwrap();
    e.expect_output(
        0,
        &[
            "backup",
            &format!("imap://{acc}@127.0.0.1:{}", server.port()),
            "--imap-password-file",
            &e.path("imap-pass").display().to_string(),
        ],
    );
    check_human_folder_names(&e, "imap");
}

/// The bytes of `out` that would act on a terminal: C0 controls but newline, DEL, C1
/// controls (UTF-8 `C2 80`..`C2 9F`) and the bidi override U+202E (`E2 80 AE`).
fn raw_controls(out: &[u8]) -> Vec<String> {
    let text = String::from_utf8_lossy(out);
    text.char_indices()
        .filter(|(_, c)| (c.is_control() && *c != '\n') || *c == '\u{202e}')
        .map(|(i, c)| format!("{:?} at {i} in {:?}", c, &text[i.saturating_sub(30)..]))
        .collect()
}

/// Issue 10, item 19: `ls` printed From and Subject decoded from hostile encoded words
/// raw, so any sender could put `ESC]2;...` (window title) or `ESC[2J` (clear screen) on
/// the admin's terminal. Every human-readable output escapes them; JSON keeps them exact.
#[test]
fn terminal_escapes_in_mail_data_are_never_printed_raw() {
    let e = Env::new();
    let md = e.path("src/example.org/bob/Maildir");
    // From: "ESC]2;pwned BEL Mallory <m@x>", Subject: "ESC[2J ESC[31m C1-CSI RLO-txt.exe"
    let from = "=?UTF-8?B?G10yO3B3bmVkB01hbGxvcnk=?= <m@example.org>";
    let subject = "=?UTF-8?Q?=1B[2J=1B[31mhello_=C2=9B1m_=E2=80=AEtxt.exe?=";
    put(
        &md,
        "",
        "1700000000.M1P1.mx:2,S",
        format!("From: {from}\nSubject: {subject}\n\nbody\n").as_bytes(),
    );
    // A folder and a key with an escape in their names.
    put(
        &md,
        ".Evil\x1b[2J",
        "1700000001.M2P2.mx\x1b]2;key\x07:2,S",
        &msg("x"),
    );
    e.expect_output(0, &["init"]);
    e.expect_output(
        0,
        &[
            "backup",
            &format!("maildir:{}", e.path("src").display()),
            "--tag",
            "t\x1b[2J",
            "--host",
            "h\x1b]2;host\x07",
        ],
    );

    let mut outputs: Vec<(String, Output)> = Vec::new();
    for args in [
        &["ls", "latest"][..],
        &["ls", "latest", "--account", "bob@example.org"],
        &["ls", "latest", "--folder", "INBOX"],
        &["ls", "latest", "--folder", "Evil\x1b[2J"],
        &["snapshots"],
        // An error quoting mail data: the folders there are.
        &["ls", "latest", "--folder", "nothing"],
    ] {
        let o = e.cmd(args).output().unwrap();
        outputs.push((format!("{args:?}"), o));
    }
    let mut bad = Vec::new();
    for (what, o) in &outputs {
        for stream in [&o.stdout, &o.stderr] {
            for c in raw_controls(stream) {
                bad.push(format!("{what}: {c}"));
            }
        }
    }
    assert!(
        bad.is_empty(),
        "raw control characters:\n{}",
        bad.join("\n")
    );
    let inbox = String::from_utf8_lossy(&outputs[2].1.stdout).into_owned();
    assert!(
        inbox.contains("\\x1b]2;pwned\\x07Mallory") && inbox.contains("\\x1b[2J"),
        "escaped, visible: {inbox}"
    );
    let folders = String::from_utf8_lossy(&outputs[1].1.stdout).into_owned();
    assert!(folders.contains("Evil\\x1b[2J"), "{folders}");

    // A restore failure line quoting a key: the target holds another file of that key.
    let target = e.path("target");
    put(
        &target.join("example.org/bob/Maildir"),
        ".Evil\x1b[2J",
        "1700000001.M2P2.mx\x1b]2;key\x07:2,S",
        b"other bytes\n",
    );
    let o = e.expect_output(
        1,
        &[
            "restore",
            "latest",
            "--target",
            &format!("maildir:{}", target.display()),
        ],
    );
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(stdout.contains("\\x1b]2;key\\x07"), "{stdout}");
    // The list is headed by the number of its lines, named as such.
    assert!(stdout.contains("\n1 failure:\n"), "{stdout}");
    assert!(raw_controls(&o.stdout).is_empty() && raw_controls(&o.stderr).is_empty());

    // JSON is exact.
    let v = e.json(0, &["ls", "latest", "--folder", "INBOX"]);
    assert_eq!(
        v["items"][0]["from"],
        "\x1b]2;pwned\x07Mallory <m@example.org>"
    );
    assert_eq!(
        v["items"][0]["subject"],
        "\x1b[2J\x1b[31mhello \u{9b}1m \u{202e}txt.exe"
    );

    // A stray file in snapshots/ whose name holds escapes: check and repair name it.
    fs::write(
        e.repo().join("snapshots/README\x1b]2;stray\x07"),
        b"hello\n",
    )
    .unwrap();
    for (code, args) in [
        (2, &["check"][..]),
        (0, &["repair", "snapshots", "--dry-run"]),
    ] {
        let o = e.expect_output(code, args);
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(out.contains("README\\x1b]2;stray\\x07"), "{args:?}: {out}");
        assert!(
            raw_controls(&o.stdout).is_empty() && raw_controls(&o.stderr).is_empty(),
            "{args:?}: {out}"
        );
    }
}

/// Issue 10, item 22: `--target mbox:/srv/x` or a typo such as `maildr:/srv/x` became a
/// directory `mbox:` in the current directory and the restore "succeeded"; the same for
/// `--repo`. Unknown schemes are errors that list the known ones; `./a:b` is a path.
#[test]
fn unknown_location_schemes_are_refused() {
    let e = Env::new();
    put(
        &e.path("src/example.org/bob/Maildir"),
        "",
        "1.M1P1.mx:2,S",
        &msg("m"),
    );
    // --repo: an unknown scheme is refused before anything is created.
    for repo in ["maildr:/srv/repo", "sftp://host/repo"] {
        let o = e.expect_output(2, &["--repo", repo, "init"]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            err.contains("local:") && err.contains("s3:http"),
            "{repo}: {err}"
        );
    }
    // `s3:` without a server is not a directory either: the error gives the syntax.
    let o = e.expect_output(2, &["--repo", "s3:bucket/mail", "init"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("s3:http[s]://HOST[:PORT]/BUCKET"), "{err}");
    assert!(!e.path("s3:bucket").exists());
    // A directory with a colon in its name, written as a path.
    e.expect_output(0, &["--repo", "./r:1", "init"]);
    assert!(e.path("r:1/config").is_file());
    e.expect_output(0, &["--repo", "./r:1", "backup", "src"]);
    let before: Vec<String> = fs::read_dir(e.dir.path())
        .unwrap()
        .map(|d| d.unwrap().file_name().to_string_lossy().into_owned())
        .collect();

    for target in ["mbx:/srv/x", "maildr:x"] {
        let o = e.expect_output(
            2,
            &["--repo", "./r:1", "restore", "latest", "--target", target],
        );
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            err.contains("maildir:") && err.contains("imap://") && err.contains("imaps://"),
            "{target}: {err}"
        );
    }
    let o = e.expect_output(2, &["--repo", "./r:1", "backup", "mbox:src"]);
    assert!(String::from_utf8_lossy(&o.stderr).contains("maildir:"));
    // Nothing was created for the refused locations.
    let after: Vec<String> = fs::read_dir(e.dir.path())
        .unwrap()
        .map(|d| d.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(after, before);

    e.expect_output(
        0,
        &["--repo", "./r:1", "restore", "latest", "--target", "./t:1"],
    );
    assert_eq!(
        restored(&e.path("t:1")),
        ["example.org/bob/Maildir/cur/1.M1P1.mx:2,S"]
    );
    e.expect_output(
        0,
        &[
            "--repo",
            "local:r:1",
            "restore",
            "latest",
            "--target",
            "maildir:t:2",
        ],
    );
    assert!(e.path("t:2/example.org/bob/Maildir/cur").is_dir());
}

/// Issue 10, item 7: log lines carried ANSI colour codes when stderr was not a terminal.
#[test]
fn log_lines_have_no_colour_codes_off_a_terminal() {
    let e = Env::new();
    put(
        &e.path("src/example.org/bob/Maildir"),
        "",
        "1.M1P1.mx:2,S",
        &msg("m"),
    );
    e.expect_output(0, &["init"]);
    e.expect_output(
        0,
        &["backup", &format!("maildir:{}", e.path("src").display())],
    );
    // A damaged index file: a warning that every version logs.
    let index = fs::read_dir(e.path("repo/index"))
        .unwrap()
        .map(|d| d.unwrap().path())
        .find(|p| p.is_file())
        .unwrap();
    fs::remove_file(&index).unwrap();
    fs::write(&index, b"not an index file").unwrap();
    let o = e
        .cmd(&["snapshots"])
        .env("MAILVAULT_LOG", "debug")
        .env_remove("NO_COLOR")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("WARN") || err.contains("DEBUG"),
        "no log line: {err}"
    );
    assert!(!err.contains('\x1b'), "colour codes in a pipe: {err:?}");
}
