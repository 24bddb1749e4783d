//! End-to-end tests of the `mailvault` binary: exit codes, reports, incremental backups,
//! a killed backup, damage detection, wrong passwords and partial restores.
#![allow(clippy::unwrap_used)]

mod common;

use common::{assert_same_files, copy_tree, files, Env};
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;

fn msg(rcpt: &str, n: usize) -> Vec<u8> {
    format!(
        "Delivered-To: {rcpt}\nReceived: by mx for <{rcpt}>; Tue, 2 Jan 2024 00:00:00 +0000\nFrom: Team <team@example.org>\nSubject: update {n}\nDate: Tue, 2 Jan 2024 00:00:00 +0000\n\n{}\n",
        "status report line\n".repeat(20 + n)
    )
    .into_bytes()
}

/// Two accounts with INBOX, Sent and Archive/2023.
fn store(root: &Path) {
    for user in ["bob", "carol"] {
        let md = root.join("example.org").join(user).join("Maildir");
        let rcpt = format!("{user}@example.org");
        for n in 0..30 {
            common::put_msg(
                &md,
                "",
                "cur",
                &format!("17000{n:05}.M1P{n}.mx,S=1:2,S"),
                &msg(&rcpt, n),
                1_700_000_000 + n as i64,
            );
        }
        common::put_msg(
            &md,
            "",
            "new",
            "1700100000.M9P9.mx",
            &msg(&rcpt, 99),
            1_700_100_000,
        );
        common::put_msg(
            &md,
            ".Sent",
            "cur",
            "1700200000.M1P1.mx:2,S",
            &msg(&rcpt, 200),
            1_700_200_000,
        );
        common::put_msg(
            &md,
            ".Archive.2023",
            "cur",
            "1600000000.M1P1.mx:2,RS",
            &msg(&rcpt, 300),
            1_600_000_000,
        );
        fs::write(md.join("subscriptions"), "Sent\nArchive/2023\n").unwrap();
    }
}

#[test]
fn wrong_password_is_a_clear_error() {
    let e = Env::new();
    e.expect(0, &["init"]);
    fs::write(e.path("bad"), "not it").unwrap();
    let o = e
        .cmd(&["snapshots"])
        .env("MAILVAULT_PASSWORD_FILE", e.path("bad"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("wrong password"));
    let o = e
        .cmd(&["snapshots"])
        .env("MAILVAULT_REPOSITORY", e.path("nothing"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("mailvault init"));
    // init twice is refused
    e.expect(2, &["init"]);
}

#[test]
fn incremental_reads_only_new_messages() {
    let e = Env::new();
    let src = e.path("vmail");
    store(&src);
    e.expect(0, &["init", "--compression", "lz4"]);
    common::at_rest();
    let first = e.json(0, &["backup", &format!("maildir:{}", src.display())]);
    assert_eq!(first["items_total"], 66);
    assert_eq!(first["items_new"], 66);
    let original = files(&src);

    // Flag changes, new/ -> cur/, a move to another folder, one new message, one deletion.
    let bob = src.join("example.org/bob/Maildir");
    fs::rename(
        bob.join("cur/1700000000.M1P0.mx,S=1:2,S"),
        bob.join("cur/1700000000.M1P0.mx,S=1:2,RS"),
    )
    .unwrap();
    fs::rename(
        bob.join("cur/1700000001.M1P1.mx,S=1:2,S"),
        bob.join("cur/1700000001.M1P1.mx,S=1:2,FS"),
    )
    .unwrap();
    fs::rename(
        bob.join("new/1700100000.M9P9.mx"),
        bob.join("cur/1700100000.M9P9.mx:2,S"),
    )
    .unwrap();
    fs::rename(
        bob.join("cur/1700000002.M1P2.mx,S=1:2,S"),
        bob.join(".Sent/cur/1700000002.M1P2.mx,S=1:2,S"),
    )
    .unwrap();
    fs::remove_file(bob.join("cur/1700000003.M1P3.mx,S=1:2,S")).unwrap();
    let fresh = msg("bob@example.org", 1000);
    common::put_msg(&bob, "", "new", "1700300000.M1P1.mx", &fresh, 1_700_300_000);

    let second = e.json(0, &["backup", &format!("maildir:{}", src.display())]);
    assert_eq!(second["items_total"], 66);
    assert_eq!(second["items_new"], 1, "{second}");
    assert_eq!(second["items_unchanged"], 65);
    // Only the new message is read: not the renamed ones, not the unchanged subscriptions.
    assert_eq!(second["bytes_read"].as_u64().unwrap(), fresh.len() as u64);
    assert!(second["parent"].is_string());

    // The new snapshot is the mutated tree; the first is still the original.
    let snaps = e.json(0, &["snapshots"]);
    let first_id = snaps[0]["id"].as_str().unwrap().to_string();
    e.expect(
        0,
        &[
            "restore",
            "latest",
            "--target",
            &format!("maildir:{}", e.path("r2").display()),
        ],
    );
    assert_same_files(&e.path("r2"), &src);
    e.expect(
        0,
        &[
            "restore",
            &first_id[..8],
            "--target",
            &format!("maildir:{}", e.path("r1").display()),
        ],
    );
    assert_eq!(files(&e.path("r1")), original);
    e.expect(0, &["check", "--read-data"]);
}

#[test]
fn unchanged_messages_are_known_by_name_unless_asked_to_stat() {
    let e = Env::new();
    let src = e.path("vmail");
    store(&src);
    e.expect(0, &["init"]);
    e.json(0, &["backup", src.to_str().unwrap()]);
    // Against Maildir's rules, a message edited in place under the same name.
    let f = src.join("example.org/bob/Maildir/cur/1700000005.M1P5.mx,S=1:2,S");
    common::put_msg(
        f.parent().unwrap().parent().unwrap(),
        "",
        "cur",
        "1700000005.M1P5.mx,S=1:2,S",
        b"Subject: edited\n\nnew text\n",
        1_800_000_000,
    );
    let r = e.json(0, &["backup", src.to_str().unwrap()]);
    assert_eq!(
        r["items_new"], 0,
        "a known name is not read again by default"
    );
    let r = e.json(0, &["backup", src.to_str().unwrap(), "--stat-unchanged"]);
    assert_eq!(r["items_new"], 1);
    assert_eq!(
        r["bytes_read"].as_u64().unwrap(),
        "Subject: edited\n\nnew text\n".len() as u64 + 2 * 18
    );
    e.expect(
        0,
        &[
            "restore",
            "latest",
            "--target",
            e.path("out").to_str().unwrap(),
        ],
    );
    assert_eq!(
        fs::read(e.path("out/example.org/bob/Maildir/cur/1700000005.M1P5.mx,S=1:2,S")).unwrap(),
        b"Subject: edited\n\nnew text\n"
    );
}

/// A repository holding one backup of [`store`], and where that store is.
fn backed_up() -> (Env, PathBuf) {
    let e = Env::new();
    let src = e.path("vmail");
    store(&src);
    e.expect(0, &["init"]);
    e.expect(0, &["backup", &format!("maildir:{}", src.display())]);
    (e, src)
}

/// `restore --dry-run` prints the plan (accounts, folders, counts, the spans to read) and
/// writes nothing, in text and in JSON.
#[test]
fn a_dry_run_restore_prints_the_plan_and_writes_nothing() {
    let (e, _) = backed_up();
    let out = e.path("out");
    let target = format!("maildir:{}", out.display());
    let args = [
        "restore",
        "latest",
        "--target",
        &target,
        "--account",
        "bob@example.org",
        "--dry-run",
    ];
    let text = e.expect(0, &args);
    assert!(text.contains("account bob@example.org"), "{text}");
    assert!(!text.contains("carol"), "{text}");
    assert!(text.contains("  INBOX: 31 messages"), "{text}");
    assert!(text.contains("  Sent: 1 message,"), "{text}");
    assert!(text.contains("  Archive/2023: 1 message,"), "{text}");
    assert!(text.contains("33 messages"), "{text}");
    assert!(text.contains("  pack "), "{text}");
    let v = e.json(0, &args);
    assert_eq!(v["messages"], 33, "{v}");
    let folders: Vec<(String, u64)> = (v["accounts"][0]["folders"].as_array().unwrap())
        .iter()
        .map(|f| {
            let name = f["name"].as_str().unwrap().to_string();
            (name, f["messages"].as_u64().unwrap())
        })
        .collect();
    assert_eq!(
        folders,
        [
            ("INBOX".into(), 31),
            ("Archive/2023".into(), 1),
            ("Sent".into(), 1)
        ]
    );
    assert!(!v["spans"].as_array().unwrap().is_empty(), "{v}");
    assert!(!out.exists(), "a dry run wrote {}", out.display());

    let none = [
        "restore",
        "latest",
        "--target",
        &target,
        "--folder",
        "Nope",
        "--dry-run",
    ];
    e.expect(2, &none);
    assert!(!out.exists());
}

/// A folder new to the target is written in its `tmp/` and put in place whole
/// (`dest/maildir_dirs.rs`, `STAGE`): nothing is left in `tmp/`. What a killed run left
/// there (a message in it may be torn) is never put in place nor taken up: the next run
/// removes it and writes the folder itself; a running restore's (locked) is left alone.
#[test]
#[allow(unsafe_code)] // flock(2), which std has only from Rust 1.89 (the MSRV is 1.87)
fn a_new_folder_appears_whole_and_a_killed_runs_staging_is_removed() {
    use std::os::unix::fs::PermissionsExt;
    let (e, src) = backed_up();
    let carol = "example.org/carol/Maildir";
    let restore = |to: &Path| {
        let target = format!("maildir:{}", to.display());
        let args = [
            "restore",
            "latest",
            "--target",
            &target,
            "--account",
            "carol@example.org",
        ];
        e.json(0, &args)
    };
    let tmp_entries = |root: &Path| -> Vec<String> {
        let mut out = Vec::new();
        for d in [
            carol.to_string(),
            format!("{carol}/.Sent"),
            format!("{carol}/.Archive.2023"),
        ] {
            for e in fs::read_dir(root.join(d).join("tmp")).unwrap() {
                out.push(e.unwrap().file_name().to_string_lossy().into_owned());
            }
        }
        out
    };

    let fresh = e.path("fresh");
    let r = restore(&fresh);
    assert_eq!(r["items_restored"], 33, "{r}");
    assert_same_files(
        &fresh.join("example.org/carol"),
        &src.join("example.org/carol"),
    );
    assert_eq!(tmp_entries(&fresh), Vec::<String>::new());

    // What a run killed while writing INBOX left: its staging directories in tmp/, one
    // message whole, one cut short, one a second name of a file elsewhere; no cur/ or new/.
    let killed = e.path("killed");
    let stage = killed
        .join(carol)
        .join("tmp/.mailvault-restore-0123456789abcdef-cur");
    fs::create_dir_all(&stage).unwrap();
    fs::create_dir_all(
        killed
            .join(carol)
            .join("tmp/.mailvault-restore-0123456789abcdef-new"),
    )
    .unwrap();
    let inbox = src.join(carol).join("cur");
    let mut names: Vec<_> = fs::read_dir(&inbox)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    names.sort();
    fs::write(
        stage.join(&names[0]),
        fs::read(inbox.join(&names[0])).unwrap(),
    )
    .unwrap();
    let torn = fs::read(inbox.join(&names[1])).unwrap();
    fs::write(stage.join(&names[1]), &torn[..torn.len() / 2]).unwrap();
    let elsewhere = e.path("elsewhere");
    fs::write(&elsewhere, fs::read(inbox.join(&names[2])).unwrap()).unwrap();
    fs::set_permissions(&elsewhere, fs::Permissions::from_mode(0o604)).unwrap();
    fs::hard_link(&elsewhere, stage.join(&names[2])).unwrap();
    let r = restore(&killed);
    assert_eq!(r["items_restored"], 33, "{r}");
    assert_eq!(r["items_failed"], 0, "{r}");
    assert_same_files(
        &killed.join("example.org/carol"),
        &src.join("example.org/carol"),
    );
    assert_eq!(tmp_entries(&killed), Vec::<String>::new());
    let m = fs::metadata(&elsewhere).unwrap();
    assert_eq!((m.mode() & 0o777, m.nlink()), (0o604, 1));

    // Killed between putting cur/ and new/ in place: the next run writes new/ itself.
    let half = e.path("half");
    let inbox_half = half.join(carol);
    let left = inbox_half.join("tmp/.mailvault-restore-dead-new");
    fs::create_dir_all(&left).unwrap();
    copy_tree(&src.join(carol).join("cur"), &inbox_half.join("cur"));
    let unseen = src.join(carol).join("new/1700100000.M9P9.mx");
    fs::write(left.join("1700100000.M9P9.mx"), b"torn").unwrap();
    let r = restore(&half);
    assert_eq!(r["items_failed"], 0, "{r}");
    assert_eq!(
        fs::read(inbox_half.join("new/1700100000.M9P9.mx")).unwrap(),
        fs::read(&unseen).unwrap()
    );
    assert_eq!(tmp_entries(&half), Vec::<String>::new());

    // A restore still running holds a lock on its staging directory: left alone.
    let busy = e.path("busy");
    let live = busy.join(carol).join("tmp/.mailvault-restore-live-cur");
    fs::create_dir_all(&live).unwrap();
    fs::write(live.join("m"), b"being written").unwrap();
    let held = fs::File::open(&live).unwrap();
    // SAFETY: flock on a descriptor this function owns and keeps open.
    let locked = unsafe { libc::flock(std::os::fd::AsRawFd::as_raw_fd(&held), libc::LOCK_SH) };
    assert_eq!(locked, 0);
    let r = restore(&busy);
    assert_eq!(r["items_restored"], 33, "{r}");
    assert_eq!(
        tmp_entries(&busy),
        vec![".mailvault-restore-live-cur".to_string()]
    );
    assert_eq!(fs::read(live.join("m")).unwrap(), b"being written");
}

#[test]
fn partial_restores_and_conflicts() {
    let e = Env::new();
    let src = e.path("vmail");
    store(&src);
    e.expect(0, &["init"]);
    e.expect(0, &["backup", &format!("maildir:{}", src.display())]);

    let acc = e.path("acc");
    e.expect(
        0,
        &[
            "restore",
            "latest",
            "--target",
            &format!("maildir:{}", acc.display()),
            "--account",
            "carol@example.org",
        ],
    );
    assert!(acc.join("example.org/carol/Maildir/cur").is_dir());
    assert!(!acc.join("example.org/bob").exists());
    assert_eq!(
        files(&acc.join("example.org/carol")),
        files(&src.join("example.org/carol"))
    );

    let fold = e.path("fold");
    e.expect(
        0,
        &[
            "restore",
            "latest",
            "--target",
            fold.to_str().unwrap(),
            "--account",
            "bob@example.org",
            "--folder",
            "Archive/2023",
        ],
    );
    let got = files(&fold);
    assert_eq!(
        got.keys().collect::<Vec<_>>(),
        ["example.org/bob/Maildir/.Archive.2023/cur/1600000000.M1P1.mx:2,RS"]
    );

    let listing = e.json(
        0,
        &[
            "ls",
            "latest",
            "--account",
            "bob@example.org",
            "--folder",
            "INBOX",
        ],
    );
    assert_eq!(listing["kind"], "messages");
    let items = listing["items"].as_array().unwrap();
    assert_eq!(items.len(), 31);
    let m = items.iter().find(|m| m["subject"] == "update 7").unwrap();
    let key = m["key"].as_str().unwrap();
    assert_eq!(m["flags"], "S");
    let one = e.path("one");
    e.expect(
        0,
        &[
            "restore",
            "latest",
            "--target",
            one.to_str().unwrap(),
            "--account",
            "bob@example.org",
            "--message",
            key,
        ],
    );
    let got = files(&one);
    assert_eq!(got.len(), 1);
    let (name, (bytes, mtime)) = got.into_iter().next().unwrap();
    assert!(name.ends_with(&format!("cur/{key}:2,S")));
    assert_eq!(bytes, msg("bob@example.org", 7));
    assert_eq!(mtime, 1_700_000_007);

    // Unknown names are errors, not silent no-ops.
    e.expect(
        2,
        &[
            "restore",
            "latest",
            "--target",
            one.to_str().unwrap(),
            "--account",
            "nobody@example.org",
        ],
    );
    e.expect(
        2,
        &[
            "restore",
            "latest",
            "--target",
            one.to_str().unwrap(),
            "--folder",
            "NoSuchFolder",
        ],
    );

    // A different file under the same key in the target is reported and left alone.
    let inbox = acc.join("example.org/carol/Maildir/cur");
    let victim = fs::read_dir(&inbox)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    fs::write(&victim, b"local edit").unwrap();
    let out = e.expect(
        1,
        &[
            "restore",
            "latest",
            "--target",
            acc.to_str().unwrap(),
            "--account",
            "carol@example.org",
        ],
    );
    assert!(out.contains("not overwritten"), "{out}");
    assert!(
        out.contains("1 conflict: something else where the item goes"),
        "{out}"
    );
    assert_eq!(fs::read(&victim).unwrap(), b"local edit");
}

#[test]
fn bad_items_are_listed_and_the_run_goes_on() {
    let e = Env::new();
    let src = e.path("vmail");
    store(&src);
    let cur = src.join("example.org/bob/Maildir/cur");
    std::os::unix::fs::symlink("/nonexistent", cur.join("dangling:2,S")).unwrap();
    let fifo = cur.join("fifo:2,S");
    assert!(Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    e.expect(0, &["init"]);
    let r = e.json(1, &["backup", &format!("maildir:{}", src.display())]);
    assert_eq!(r["items_failed"], 2);
    assert_eq!(r["items_new"], 66);
    let failures = r["failures"].to_string();
    assert!(
        failures.contains("dangling") && failures.contains("fifo"),
        "{failures}"
    );
    assert_eq!(e.json(0, &["snapshots"]).as_array().unwrap().len(), 1);
}

/// Regression (issue 24, item 4): a Maildir folder's `cur/` that is a symbolic link was
/// followed (another tree's messages backed up as the folder's, exit 0); a linked folder
/// or account directory was left out in silence. Each is reported with its path, never
/// followed, and the run exits 1.
#[test]
fn linked_folders_cur_new_and_accounts_are_reported_not_followed() {
    use std::os::unix::fs::symlink;
    let e = Env::new();
    let src = e.path("vmail");
    store(&src);
    let elsewhere = e.path("elsewhere");
    for n in 0..3 {
        let body = b"Subject: elsewhere\n\nnot this store's\n";
        common::put_msg(
            &elsewhere,
            "",
            "cur",
            &format!("9{n}.M1P1.x:2,S"),
            body,
            1_700_000_000,
        );
        common::put_msg(
            &elsewhere,
            "",
            "new",
            &format!("8{n}.M1P1.x"),
            body,
            1_700_000_000,
        );
    }
    let md = src.join("example.org/bob/Maildir");
    fs::create_dir_all(md.join(".F3/new")).unwrap();
    symlink(elsewhere.join("cur"), md.join(".F3/cur")).unwrap();
    fs::create_dir_all(md.join(".F4/cur")).unwrap();
    symlink(elsewhere.join("new"), md.join(".F4/new")).unwrap();
    symlink(&elsewhere, md.join(".Linked")).unwrap();
    // An account linked from outside the store: a failure; an alias inside it (a second
    // name for carol, a domain alias): a warning, the mail backed up once, where it is.
    symlink(elsewhere.parent().unwrap(), src.join("example.org/outside")).unwrap();
    symlink(src.join("example.org/carol"), src.join("example.org/alias")).unwrap();
    symlink(src.join("example.org"), src.join("example.net")).unwrap();
    let linked = [".F3/cur", ".F4/new", ".Linked"].map(|p| md.join(p));
    let linked: Vec<String> = (linked.iter().chain([&src.join("example.org/outside")]))
        .map(|p| p.display().to_string())
        .collect();
    e.expect(0, &["init"]);
    let r = e.json(1, &["backup", &format!("maildir:{}", src.display())]);
    assert_eq!(r["items_new"], 66, "the store's own messages, no more");
    assert_eq!(r["accounts"], 2);
    let warnings = r["warnings"].as_array().unwrap();
    assert_eq!(warnings.len(), 2, "{warnings:?}");
    for alias in ["example.org/alias", "example.net"] {
        let alias = src.join(alias).display().to_string();
        assert!(
            warnings
                .iter()
                .any(|w| w.as_str().unwrap().starts_with(&alias)),
            "{alias} not said: {warnings:?}"
        );
    }
    let failures = r["failures"].as_array().unwrap();
    for path in &linked {
        let f = failures.iter().find(|f| f["item"] == path.as_str());
        let f = f.unwrap_or_else(|| panic!("{path} not reported: {failures:?}"));
        assert!(f["error"].to_string().contains("symbolic link"), "{f}");
    }
    assert_eq!(failures.len(), linked.len(), "{failures:?}");
    // The report line names the path.
    let out = e.expect(1, &["backup", &format!("maildir:{}", src.display())]);
    assert!(
        out.contains(&format!("{}: a symbolic link", linked[0])),
        "{out}"
    );
}

/// Writes `n` incompressible messages of ~`size` bytes into one Maildir.
fn big_store(md: &Path, n: usize, size: usize) {
    let mut x = 0x9e3779b97f4a7c15u64;
    for i in 0..n {
        let mut body = format!("Subject: blob {i}\n\n").into_bytes();
        while body.len() < size {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            body.extend_from_slice(&x.to_le_bytes());
        }
        common::put_msg(
            md,
            "",
            "cur",
            &format!("{i}.M1P1.big:2,S"),
            &body,
            1_700_000_000 + i as i64,
        );
    }
}

fn pack_files(repo: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Ok(rd) = fs::read_dir(repo.join("data")) {
        for d in rd.flatten() {
            for f in fs::read_dir(d.path()).unwrap().flatten() {
                if !f.file_name().to_string_lossy().starts_with('.') {
                    out.push(f.path());
                }
            }
        }
    }
    out
}

#[test]
fn killed_backup_leaves_a_good_repository_and_resumes() {
    let e = Env::new();
    let md = e.path("big");
    big_store(&md, 2500, 48 * 1024);
    e.expect(0, &["init", "--compression", "none"]);
    let mut child = e
        .cmd(&[
            "backup",
            md.to_str().unwrap(),
            "--account",
            "big@example.org",
            "--json",
            "-j",
            "2",
        ])
        .spawn()
        .unwrap();
    let started = std::time::Instant::now();
    while pack_files(&e.path("repo")).len() < 2 && started.elapsed().as_secs() < 60 {
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    child.kill().unwrap();
    let status = child.wait().unwrap();
    assert!(
        !status.success(),
        "the backup finished before it could be killed: make the store bigger"
    );
    let packs_left = pack_files(&e.path("repo")).len();
    assert!(packs_left >= 2);
    assert_eq!(e.json(0, &["snapshots"]).as_array().unwrap().len(), 0);
    let out = e.expect(0, &["check"]);
    assert!(out.contains("not in any index"), "{out}");

    let r = e.json(
        0,
        &[
            "backup",
            md.to_str().unwrap(),
            "--account",
            "big@example.org",
        ],
    );
    assert!(r["packs_resumed"].as_u64().unwrap() >= 2, "{r}");
    let total = r["bytes_read"].as_u64().unwrap();
    let added = r["bytes_added"].as_u64().unwrap();
    assert!(
        added < total * 95 / 100,
        "resumed packs were not reused: added {added} of {total}"
    );
    e.expect(0, &["check", "--read-data"]);
    e.expect(
        0,
        &[
            "restore",
            "latest",
            "--target",
            e.path("out").to_str().unwrap(),
        ],
    );
    assert_eq!(files(&e.path("out")), files(&md));
}

/// Flips one byte in the middle of `file`.
fn flip(file: &Path, at: Option<usize>) {
    let mut b = fs::read(file).unwrap();
    let i = at.unwrap_or(b.len() / 2);
    b[i] ^= 0x01;
    fs::write(file, b).unwrap();
}

#[test]
fn any_flipped_byte_is_found_and_named() {
    let e = Env::new();
    let src = e.path("vmail");
    store(&src);
    e.expect(0, &["init"]);
    e.expect(0, &["backup", &format!("maildir:{}", src.display())]);
    e.expect(0, &["check", "--read-data"]);
    let repo = e.path("repo");
    let pristine = e.path("pristine");
    copy_tree(&repo, &pristine);

    let mut targets: Vec<PathBuf> = pack_files(&repo);
    for dir in ["index", "snapshots"] {
        targets.extend(
            fs::read_dir(repo.join(dir))
                .unwrap()
                .map(|f| f.unwrap().path()),
        );
    }
    assert!(targets.len() >= 4);
    for t in &targets {
        let rel = t.strip_prefix(&repo).unwrap().to_string_lossy().to_string();
        for at in [Some(0), None] {
            flip(t, at);
            let out = e.expect(2, &["check"]);
            assert!(out.contains(&rel), "check did not name {rel}:\n{out}");
            if rel.starts_with("data/") {
                assert!(
                    out.contains("affects snapshot"),
                    "no affected messages named for {rel}:\n{out}"
                );
            }
            fs::remove_dir_all(&repo).unwrap();
            copy_tree(&pristine, &repo);
        }
    }
    // Key file and config: the repository does not open, and the error says which file.
    let key = fs::read_dir(repo.join("keys"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    flip(&key, None);
    let out = e.expect(2, &["check"]);
    assert!(out.contains("keys/"), "{out}");
    fs::remove_dir_all(&repo).unwrap();
    copy_tree(&pristine, &repo);
    flip(&repo.join("config"), None);
    let out = e.expect(2, &["check"]);
    assert!(out.contains("config"), "{out}");
}

/// Issue 10, items 1 and 7: `--chown` gives every restored file and directory one owner
/// (as root), `--numeric-owner` the recorded ids; a restore that lists failures exits 1
/// and its counts add up.
#[test]
fn restore_owners_and_a_failing_restore_exits_1() {
    use std::os::unix::fs::PermissionsExt;
    let e = Env::new();
    let src = e.path("vmail");
    store(&src);
    fs::set_permissions(
        src.join("example.org/bob/Maildir/.Sent"),
        fs::Permissions::from_mode(0o700),
    )
    .unwrap();
    e.expect(0, &["init"]);
    e.expect(0, &["backup", &format!("maildir:{}", src.display())]);
    let root = fs::metadata("/proc/self").unwrap().uid() == 0;
    let out = e.path("out");
    let target = format!("maildir:{}", out.display());
    e.expect(
        0,
        &[
            "restore",
            "latest",
            "--target",
            &target,
            "--chown",
            "nobody:nogroup",
        ],
    );
    let sent = fs::metadata(out.join("example.org/bob/Maildir/.Sent")).unwrap();
    assert_eq!(sent.mode() & 0o7777, 0o700);
    if root {
        assert_eq!((sent.uid(), sent.gid()), (65534, 65534));
        let m = out.join("example.org/bob/Maildir/.Sent/cur/1700200000.M1P1.mx:2,S");
        let m = fs::metadata(m).unwrap();
        assert_eq!((m.uid(), m.gid()), (65534, 65534));
    }
    let err = e.expect(
        2,
        &[
            "restore", "latest", "--target", &target, "--chown", "nobody",
        ],
    );
    assert!(err.contains("USER:GROUP"), "{err}");
    let out2 = e.path("out2");
    e.expect(
        0,
        &[
            "restore",
            "latest",
            "--target",
            &format!("maildir:{}", out2.display()),
            "--numeric-owner",
        ],
    );
    // A link planted in the target: reported, exit 1, and the counts add up.
    let out3 = e.path("out3");
    fs::create_dir_all(&out3).unwrap();
    std::os::unix::fs::symlink(e.path("elsewhere"), out3.join("example.org")).unwrap();
    let r = e.json(
        1,
        &[
            "restore",
            "latest",
            "--target",
            &format!("maildir:{}", out3.display()),
        ],
    );
    let n = |k: &str| r[k].as_u64().unwrap();
    assert_eq!(n("items_total"), 66);
    assert_eq!(n("items_failed"), 66);
    assert_eq!(
        n("items_total"),
        n("items_restored") + n("items_unchanged") + n("items_failed")
    );
    assert!(!e.path("elsewhere").exists());
}

/// Issue 10, item 1: without root, owners cannot be given away; a restore with
/// `--chown` (or of a snapshot recording other owners) says so once, as a warning, and
/// succeeds. As root the restore runs as `nobody` (setpriv) to see it.
#[test]
fn owners_not_restored_without_root_are_said_once() {
    let e = Env::new();
    let src = e.path("vmail");
    store(&src);
    e.expect(0, &["init"]);
    e.expect(0, &["backup", &format!("maildir:{}", src.display())]);
    let root = fs::metadata("/proc/self").unwrap().uid() == 0;
    let out = e.path("out");
    let args = [
        "restore",
        "latest",
        "--target",
        &format!("maildir:{}", out.display()),
        "--chown",
        "root:root",
    ];
    let mut cmd = e.cmd(&args);
    if root {
        let st = Command::new("chown")
            .args(["-R", "nobody:nogroup"])
            .arg(e.dir.path())
            .status()
            .unwrap();
        assert!(st.success());
        let mut as_nobody = Command::new("setpriv");
        as_nobody
            .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(cmd.get_program())
            .args(cmd.get_args())
            .current_dir(e.dir.path());
        for (k, v) in cmd.get_envs() {
            match v {
                Some(v) => as_nobody.env(k, v),
                None => as_nobody.env_remove(k),
            };
        }
        cmd = as_nobody;
    }
    let o = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{stdout}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(
        stdout
            .matches("warning: owners are not restored: the restore does not run as root")
            .count(),
        1,
        "{stdout}"
    );
    assert!(out.join("example.org/bob/Maildir/cur").is_dir());
}

/// Issue 31: `ls` lists an account's home after its folders (`~`, `~/sieve`), and
/// `--folder '~/sieve'` its scripts; `ls --store` the store's own files; `--part home`
/// and `--folder` do not go together.
#[test]
fn ls_shows_an_accounts_home_and_its_sieve_scripts() {
    let e = Env::new();
    let src = e.path("src");
    store(&src);
    let home = src.join("example.org/bob");
    fs::create_dir(home.join("sieve")).unwrap();
    fs::write(home.join("sieve/rules.sieve"), "keep;\n").unwrap();
    std::os::unix::fs::symlink("sieve/rules.sieve", home.join(".dovecot.sieve")).unwrap();
    fs::write(src.join("shared-mailboxes"), "dict\n").unwrap();
    e.ok(&["init"]);
    e.ok(&["backup", &format!("maildir:{}", src.display())]);
    // The store's own file: counted after the accounts, listed by `--store`.
    let text = e.ok(&["ls", "latest"]);
    assert!(
        text.contains("the store's own files") && text.contains("(ls --store)"),
        "{text}"
    );
    let store = e.json(0, &["ls", "latest", "--store"]);
    assert_eq!(store["kind"], "files", "{store}");
    assert_eq!(store["items"][0]["name"], "shared-mailboxes", "{store}");
    assert_eq!(store["items"][0]["folder"], ".", "{store}");
    let listing = e.json(0, &["ls", "latest", "--account", "bob@example.org"]);
    let items = listing["items"].as_array().unwrap();
    let homes: Vec<(&str, u64)> = (items.iter())
        .filter(|f| f["home"] == true)
        .map(|f| (f["name"].as_str().unwrap(), f["files"].as_u64().unwrap()))
        .collect();
    assert_eq!(homes, [("~", 1), ("~/sieve", 1)], "{listing}");
    assert_eq!(
        items.len(),
        3 + 2,
        "INBOX, Sent, Archive/2023, then the home"
    );
    let carol = e.json(0, &["ls", "latest", "--account", "carol@example.org"]);
    assert!(
        (carol["items"].as_array().unwrap().iter()).all(|f| f["home"] == false),
        "carol's home holds nothing but her Maildir: {carol}"
    );
    let text = e.ok(&[
        "ls",
        "latest",
        "--account",
        "bob@example.org",
        "--folder",
        "~",
    ]);
    assert!(
        text.contains(".dovecot.sieve -> sieve/rules.sieve"),
        "{text}"
    );
    let text = e.ok(&[
        "ls",
        "latest",
        "--account",
        "bob@example.org",
        "--folder",
        "~/sieve",
    ]);
    assert!(text.contains("rules.sieve"), "{text}");
    let out = e.path("out");
    e.expect(
        2,
        &[
            "restore",
            "latest",
            "--target",
            out.to_str().unwrap(),
            "--part",
            "home",
            "--folder",
            "INBOX",
        ],
    );
}
