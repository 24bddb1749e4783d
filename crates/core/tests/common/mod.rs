//! Helpers shared by the integration tests: repositories, small mail stores, tree compare.
#![allow(dead_code, clippy::unwrap_used)]

use mailvault_core::dest::imap::ImapRestoreOptions;
use mailvault_core::imap::client::ClientOptions;
use mailvault_core::imap::{Connection, Login, Password};
use mailvault_core::ops::backup::BackupReport;
use mailvault_core::ops::check::{check, CheckOptions, CheckReport};
use mailvault_core::ops::restore::{restore, RestoreOptions};
use mailvault_core::repo::crypto::KdfParams;
use mailvault_core::report::NoProgress;
use mailvault_core::report::Progress;
use mailvault_core::restore::{RestoreReport, Selection};
use mailvault_core::source::imap::{ImapBackupOptions, ImapSource};
use mailvault_core::source::maildir::{BackupOptions, MaildirSource};
use mailvault_core::source::RunOptions;
use mailvault_core::store::LocalStore;
use mailvault_core::{InitOptions, Repository};
use std::collections::BTreeMap;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::Arc;

pub const PASSWORD: &[u8] = b"correct horse battery staple";

pub fn fast_init() -> InitOptions {
    InitOptions {
        kdf: KdfParams {
            m_cost: 256,
            t_cost: 1,
            p_cost: 1,
        },
        ..Default::default()
    }
}

pub fn init_repo(dir: &Path) -> Repository {
    Repository::init(Arc::new(LocalStore::new(dir)), PASSWORD, &fast_init()).unwrap()
}

pub fn open_repo(dir: &Path) -> Repository {
    Repository::open(Arc::new(LocalStore::new(dir)), PASSWORD).unwrap()
}

/// Backups of what is below `dir` read the clock 10 s late, as a backup run a while after
/// the store was written (a store at rest): a directory or file written in the second
/// before a backup started is listed or read again by the next one (docs/format.md,
/// *Folders taken unchanged*), which a test writing its store just before two backups
/// would see.
pub fn at_rest(dir: &Path) -> mailvault_core::source::unchanged::hook::Guard {
    use mailvault_core::source::unchanged::hook::{set, Look};
    set(dir, |_, l| {
        if let Look::Clock(at) = l {
            at.secs += 10;
        }
    })
}

/// Writes a message file with an mtime.
pub fn put_msg(maildir: &Path, folder: &str, sub: &str, name: &str, body: &[u8], mtime: i64) {
    let dir = if folder.is_empty() {
        maildir.to_path_buf()
    } else {
        maildir.join(folder)
    };
    for s in ["cur", "new", "tmp"] {
        fs::create_dir_all(dir.join(s)).unwrap();
    }
    let p = dir.join(sub).join(name);
    fs::write(&p, body).unwrap();
    set_mtime(&p, mtime);
}

/// Sets a file's mtime (Unix seconds).
pub fn set_mtime(p: &Path, secs: i64) {
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs as u64);
    fs::File::options()
        .write(true)
        .open(p)
        .unwrap()
        .set_modified(t)
        .unwrap();
}

pub fn message(rcpt: &str, subject: &str, body: &str) -> Vec<u8> {
    format!(
        "Return-Path: <alice@example.org>\nDelivered-To: {rcpt}\nReceived: from mx.example.org by mail.example.org\n\tfor <{rcpt}>; Mon, 1 Jan 2024 10:00:00 +0000\nFrom: Alice <alice@example.org>\nTo: team@example.org\nSubject: {subject}\nDate: Mon, 1 Jan 2024 10:00:00 +0000\nMessage-ID: <{subject}@example.org>\n\n{body}\n"
    )
    .into_bytes()
}

/// A small store: two domains, three accounts, folders, flags, per-recipient copies,
/// folder files, and awkward messages.
pub fn small_store(root: &Path) {
    let users = [
        ("example.org", "bob"),
        ("example.org", "carol"),
        ("other.net", "dave"),
    ];
    for (i, (d, u)) in users.iter().enumerate() {
        let md = root.join(d).join(u).join("Maildir");
        let rcpt = format!("{u}@{d}");
        for m in 0..20 {
            let name = format!(
                "17000000{m:02}.M{i}P{m}.mail,S=100:2,{}",
                if m % 3 == 0 { "S" } else { "RS" }
            );
            put_msg(
                &md,
                "",
                "cur",
                &name,
                &message(&rcpt, &format!("list-{m}"), &"text ".repeat(50 + m)),
                1_700_000_000 + m as i64,
            );
        }
        put_msg(
            &md,
            "",
            "new",
            &format!("1700001000.M{i}P1.mail"),
            &message(&rcpt, &format!("new-{i}"), "fresh"),
            1_700_001_000,
        );
        put_msg(
            &md,
            ".Sent",
            "cur",
            &format!("1700002000.M{i}P2.mail:2,S"),
            &message(&rcpt, &format!("sent-{i}"), "sent"),
            1_700_002_000,
        );
        put_msg(
            &md,
            ".Archive.2023",
            "cur",
            &format!("1600000000.M{i}P3.mail:2,Sa"),
            &message(&rcpt, &format!("arch-{i}"), "old"),
            1_600_000_000,
        );
        fs::write(md.join(".Sent/maildirfolder"), b"").unwrap();
        fs::write(md.join(".Archive.2023/maildirfolder"), b"").unwrap();
        fs::write(md.join(".Archive.2023/dovecot-keywords"), b"0 $Junk\n").unwrap();
        fs::write(md.join("subscriptions"), b"Sent\nArchive/2023\n").unwrap();
        fs::write(
            md.join("dovecot-uidlist"),
            b"3 V1700000000 N22 G0\n1 1700000000.M0P0.mail\n",
        )
        .unwrap();
        fs::write(md.join("dovecot.index.cache"), b"cache, not backed up").unwrap();
    }
    // Awkward messages in bob's INBOX.
    let bob = root.join("example.org/bob/Maildir");
    put_msg(
        &bob,
        "",
        "cur",
        "odd1.M1P1.mail:2,S",
        b"Subject: no final newline\n\nbody",
        1_650_000_000,
    );
    put_msg(
        &bob,
        "",
        "cur",
        "odd2.M1P1.mail:2,",
        b"Subject: crlf\r\n\r\nbare\rcr and \x00 nul\r\n",
        1_650_000_001,
    );
    put_msg(&bob, "", "cur", "odd3.M1P1.mail:2,S", b"", 1_650_000_002);
    put_msg(
        &bob,
        "",
        "cur",
        "odd4.M1P1.mail:2,S",
        "Subject: 8-bit h\u{e9}ader \u{fc}\n\n\u{e9}t\u{e9}\n".as_bytes(),
        1_650_000_003,
    );
    // Non-UTF-8 folder name.
    let weird = bob.join(std::ffi::OsStr::from_bytes(b".Caf\xe9"));
    for s in ["cur", "new", "tmp"] {
        fs::create_dir_all(weird.join(s)).unwrap();
    }
    let p = weird.join("cur").join("1.M1P1.mail:2,S");
    fs::write(&p, message("bob@example.org", "weird", "x")).unwrap();
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_650_000_100);
    fs::File::options()
        .write(true)
        .open(&p)
        .unwrap()
        .set_modified(t)
        .unwrap();
}

/// Every file below `root` that a restore must give back (messages and folder files), with
/// its bytes, mtime and mode; Dovecot caches and tmp/ are left out.
pub fn tree_snapshot(root: &Path) -> BTreeMap<Vec<u8>, (Vec<u8>, i64, u32)> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for ent in fs::read_dir(&dir).unwrap() {
            let ent = ent.unwrap();
            let p = ent.path();
            let rel = p
                .strip_prefix(root)
                .unwrap()
                .as_os_str()
                .as_bytes()
                .to_vec();
            let meta = fs::symlink_metadata(&p).unwrap();
            if meta.is_dir() {
                if ent.file_name() != "tmp" {
                    stack.push(p);
                }
            } else if !ent.file_name().as_bytes().starts_with(b"dovecot.index") {
                out.insert(
                    rel,
                    (fs::read(&p).unwrap(), meta.mtime(), meta.mode() & 0o7777),
                );
            }
        }
    }
    out
}

pub fn assert_same_tree(a: &Path, b: &Path) {
    let ta = tree_snapshot(a);
    let tb = tree_snapshot(b);
    let names_a: Vec<_> = ta
        .keys()
        .map(|k| String::from_utf8_lossy(k).to_string())
        .collect();
    let names_b: Vec<_> = tb
        .keys()
        .map(|k| String::from_utf8_lossy(k).to_string())
        .collect();
    assert_eq!(names_a, names_b, "file names differ");
    for (k, va) in &ta {
        let vb = &tb[k];
        assert!(
            va.0 == vb.0,
            "bytes differ for {}",
            String::from_utf8_lossy(k)
        );
        assert_eq!(
            va.1,
            vb.1,
            "mtime differs for {}",
            String::from_utf8_lossy(k)
        );
        assert_eq!(
            va.2,
            vb.2,
            "mode differs for {}",
            String::from_utf8_lossy(k)
        );
    }
}

/// `small_store` in `dir/vmail`, backed up whole into a new repository `dir/repo` (no
/// failures), which is returned opened afresh.
pub fn backed_up_small_store(dir: &Path) -> Repository {
    let src = dir.join("vmail");
    small_store(&src);
    let mut repo = init_repo(&dir.join("repo"));
    let rep = backup(&mut repo, &backup_opts(&src, vec![]), &NoProgress).unwrap();
    assert!(rep.failures.is_empty(), "{:?}", rep.failures);
    open_repo(&dir.join("repo"))
}

/// Backup options for a test: 4 threads, the repository's compression, host "test".
pub fn backup_opts(src: &Path, accounts: Vec<String>) -> BackupOptions {
    BackupOptions {
        source: src.to_path_buf(),
        accounts,
        jobs: 4,
        stat_unchanged: false,
        run: test_run(),
    }
}

/// Backs the mail root `src` up (the accounts named, or all); fails the test on any failure.
pub fn maildir_backup(repo: &mut Repository, src: &Path, accounts: Vec<String>) -> BackupReport {
    let r = backup(repo, &backup_opts(src, accounts), &NoProgress).unwrap();
    assert!(r.failures.is_empty(), "{:?}", r.failures);
    r
}

/// Restores `snapshot` to a Maildir below `dest` (2 threads); fails the test on any failure.
pub fn maildir_restore(repo: &Repository, snapshot: &str, dest: &Path) -> RestoreReport {
    let r = restore_with(
        repo,
        RestoreOptions {
            select: Selection {
                snapshot: snapshot.into(),
                ..Default::default()
            },
            target: dest.to_path_buf(),
            jobs: 2,
            ..Default::default()
        },
    );
    assert!(r.failures.is_empty(), "{:?}", r.failures);
    r
}

/// Restores the latest snapshot, all of it, to `target`.
pub fn restore_latest(repo: &Repository, target: &Path) -> RestoreReport {
    let opts = RestoreOptions {
        select: Selection {
            snapshot: "latest".into(),
            ..Default::default()
        },
        target: target.to_path_buf(),
        jobs: 4,
        ..Default::default()
    };
    restore(repo, &opts, &NoProgress).unwrap()
}

/// `check --read-data`.
pub fn check_all(repo: &Repository) -> CheckReport {
    check(
        repo,
        &CheckOptions {
            read_data: true,
            jobs: 2,
            ..Default::default()
        },
    )
    .unwrap()
}

/// A connection to the test Dovecot as its master user, over `client` (the server's own
/// options, or a proxy's).
pub fn master_connection(
    server: &mailvault_imap::testing::DovecotServer,
    client: ClientOptions,
) -> Connection {
    Connection {
        client,
        login: Login::Master {
            master: server.master_user().into(),
            password: Password::One(server.master_password().into()),
        },
    }
}

/// Options for an IMAP restore into the test Dovecot as its master user: 2 connections,
/// 3 accounts at a time, batches of 40 messages, the journal in `journal`.
pub fn imap_restore_opts(
    server: &mailvault_imap::testing::DovecotServer,
    journal: &Path,
) -> ImapRestoreOptions {
    let mut o =
        ImapRestoreOptions::new("latest", master_connection(server, server.client_options()));
    o.journal_dir = journal.to_path_buf();
    o.connections = 2;
    o.parallel_accounts = 3;
    o.batch_messages = 40;
    o
}

/// The repository's compression, no tags, host "test", a parent when there is one.
pub fn test_run() -> RunOptions {
    RunOptions::new("test")
}

/// Options for an IMAP backup of `accounts` of the test Dovecot as its master user:
/// 2 connections, 3 accounts at a time, uncompressed, host "test".
pub fn imap_backup_opts(
    server: &mailvault_imap::testing::DovecotServer,
    accounts: Vec<String>,
) -> ImapBackupOptions {
    ImapBackupOptions {
        connection: master_connection(server, server.client_options()),
        accounts,
        source: server.url(),
        connections: 2,
        parallel_accounts: 3,
        fetch_batch: 50,
        sieve_port: 0,
        run: test_run(),
    }
}

/// Mode and owner of every directory and file below `root` that a restore must give back
/// (`tmp/`'s content and Dovecot caches left out): `(is_dir, mode, uid, gid)` by path.
pub fn owner_snapshot(root: &Path) -> BTreeMap<String, (bool, u32, u32, u32)> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for ent in fs::read_dir(&dir).unwrap() {
            let p = ent.unwrap().path();
            let rel = p.strip_prefix(root).unwrap().to_string_lossy().to_string();
            let m = fs::symlink_metadata(&p).unwrap();
            if p.file_name()
                .unwrap()
                .as_bytes()
                .starts_with(b"dovecot.index")
            {
                continue;
            }
            if m.is_dir() && p.file_name().unwrap() != "tmp" {
                stack.push(p);
            }
            out.insert(rel, (m.is_dir(), m.mode() & 0o7777, m.uid(), m.gid()));
        }
    }
    out
}

/// Gives a store the modes of a real one (directories 0700, messages 0600, some folder
/// files 0640) and, as root, the owner `uid:gid`.
pub fn chmod_store(root: &Path, owner: Option<(u32, u32)>) {
    use std::os::unix::fs::PermissionsExt;
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for ent in fs::read_dir(&dir).unwrap() {
            let p = ent.unwrap().path();
            let m = fs::symlink_metadata(&p).unwrap();
            let name = p.file_name().unwrap().to_string_lossy().to_string();
            let mode = if m.is_dir() {
                stack.push(p.clone());
                0o700
            } else if name == "subscriptions" || name == "dovecot-keywords" {
                0o640
            } else {
                0o600
            };
            fs::set_permissions(&p, fs::Permissions::from_mode(mode)).unwrap();
            if let Some((u, g)) = owner {
                std::os::unix::fs::lchown(&p, Some(u), Some(g)).unwrap();
            }
        }
    }
}

/// Restores with options.
pub fn restore_with(repo: &Repository, opts: RestoreOptions) -> RestoreReport {
    restore(repo, &opts, &NoProgress).unwrap()
}

/// The counts of a restore report add up.
pub fn assert_counts_add_up(r: &RestoreReport) {
    assert_eq!(
        r.items_total,
        r.items_restored + r.items_unchanged + r.items_failed,
        "{r:?}"
    );
}

/// Relative path, BLAKE3 and mtime of every message a restore gives back, one per line
/// (the form of the fixtures' `*.manifest` files).
pub fn manifest(root: &Path) -> String {
    let mut lines: Vec<String> = tree_snapshot(root)
        .into_iter()
        .filter(|(k, _)| {
            let k = String::from_utf8_lossy(k);
            k.contains("/cur/") || k.contains("/new/")
        })
        .map(|(k, (bytes, mtime, _))| {
            format!(
                "{} {mtime} {}",
                blake3::hash(&bytes).to_hex(),
                String::from_utf8_lossy(&k)
            )
        })
        .collect();
    lines.sort();
    lines.join("\n") + "\n"
}

/// Messages that Dovecot or Cyrus store other than they were sent, or refuse (the
/// table in docs/imap.md, "What the servers change on APPEND"): (Subject, Maildir file
/// bytes). Subjects are ASCII and name the case; `twin` is there twice (two files, the
/// same bytes). A restore sends bare LFs as CRLF.
pub fn server_normalized_messages() -> Vec<(&'static str, Vec<u8>)> {
    let plain = |subject: &'static str, body: &[u8]| {
        let mut m =
            format!("Subject: {subject}\nMessage-ID: <{subject}@example.org>\n\n").into_bytes();
        m.extend_from_slice(body);
        (subject, m)
    };
    let raw = |subject: &'static str, m: &[u8]| (subject, m.to_vec());
    let mut long = vec![b'x'; 10_000];
    long.push(b'\n');
    // Line ends of one, two and three CRs over 60 KiB: past the servers' read buffers.
    let mut many = Vec::new();
    for i in 0..2_000 {
        many.extend(std::iter::repeat_n(b'q', i % 53));
        many.extend_from_slice([&b"\r\r\n"[..], b"\n", b"\r\r\r\n"][i % 3]);
    }
    vec![
        plain("crcrlf-mid-body", b"first\r\r\nsecond\n"),
        plain("crcrcrlf", b"first\r\r\r\nsecond\n"),
        plain("many-crcrlf", &many),
        raw(
            "crcrlf-throughout",
            b"Subject: crcrlf-throughout\r\r\nMessage-ID: <t@example.org>\r\r\n\r\r\nbody\r\r\nmore\r\r\n",
        ),
        raw(
            "crcrlf-no-message-id",
            b"Subject: crcrlf-no-message-id\r\r\nFrom: a@example.org\r\r\n\r\r\nforwarded:\r\r\nMessage-ID: <inner@example.org>\r\r\n",
        ),
        plain("bare-cr", b"a\rb\n"),
        plain("lone-cr-at-end", b"body\r"),
        plain("two-crs-at-end", b"body\r\r"),
        plain("bare-lf", b"a\nb\n"),
        plain("mixed-endings", b"a\r\nb\nc\r\n"),
        plain("lf-cr", b"a\n\rb\n"),
        plain("nul-in-body", b"a\0b\n"),
        raw(
            "nul-in-header",
            b"Subject: nul-in-header\nX-Junk: a\0b\nMessage-ID: <nul-in-header@example.org>\n\nb\n",
        ),
        raw(
            "8bit-header",
            "Subject: 8bit-header\nX-Name: gr\u{fc}\u{df}e\nMessage-ID: <gr\u{fc}\u{df}e@example.org>\n\nb\n"
                .as_bytes(),
        ),
        raw(
            "latin1-message-id",
            b"Subject: latin1-message-id\nMessage-ID: <gr\xfc\xdfe@example.org>\n\nb\n",
        ),
        raw(
            "header-without-colon",
            b"Subject: header-without-colon\nno colon here\nMessage-ID: <nc@example.org>\n\nb\n",
        ),
        plain("no-final-newline", b"abc"),
        plain("trailing-whitespace", b"a   \nb\t\n"),
        plain("long-line", &long),
        raw(
            "folded-message-id",
            b"Subject: folded-message-id\nMessage-ID:\n <folded@example.org>\n\nb\n",
        ),
        raw("no-message-id", b"Subject: no-message-id\n\nbody\r\r\n"),
        plain("twin", b"one of two\r\r\n"),
        plain("twin", b"one of two\r\r\n"),
    ]
}

/// The Subjects of [`server_normalized_messages`] that Cyrus refuses (NUL bytes, a
/// header line without a colon).
pub const CYRUS_REFUSES: [&str; 3] = ["nul-in-body", "nul-in-header", "header-without-colon"];

/// Puts [`server_normalized_messages`] into the INBOX of Maildir `md`; their number.
pub fn put_server_normalized(md: &Path) -> usize {
    let msgs = server_normalized_messages();
    for (i, (_, m)) in msgs.iter().enumerate() {
        // The twins share their date too: identical messages.
        let t = if i + 1 == msgs.len() { i - 1 } else { i };
        put_msg(
            md,
            "",
            "cur",
            &format!("{i}.M{i}P1.h:2,S"),
            m,
            1_700_000_000 + t as i64,
        );
    }
    msgs.len()
}

/// How many messages of `folder` carry each Subject, as the server's SEARCH ALL and
/// FETCH of the Subject field show them (not through mailvault's fingerprints).
pub fn copies_by_subject(s: &mut mailvault_imap::Session, folder: &str) -> BTreeMap<String, usize> {
    s.examine(folder).unwrap();
    let uids = s.uid_search(&mailvault_imap::SearchKey::All).unwrap();
    let mut out = BTreeMap::new();
    let q = mailvault_imap::FetchQuery {
        header_fields: vec!["Subject".into()],
        ..Default::default()
    };
    let mut fetched = 0;
    s.fetch::<mailvault_imap::Error, _>(&mailvault_imap::SeqSet::from_ids(&uids), &q, |m| {
        let subject = mailvault_imap::client::fetch::header_value(m.header.unwrap(), "Subject")
            .unwrap_or_default();
        *out.entry(subject).or_insert(0) += 1;
        fetched += 1;
        Ok(())
    })
    .unwrap();
    assert_eq!(fetched, uids.len(), "SEARCH ALL and FETCH disagree");
    s.unselect().unwrap();
    out
}

/// What [`copies_by_subject`] should find after restoring [`server_normalized_messages`]
/// once (or any number of times with `skip_existing`), without the `refused` ones.
pub fn expected_copies(refused: &[&str]) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for (subject, _) in server_normalized_messages() {
        if !refused.contains(&subject) {
            *out.entry(subject.to_string()).or_insert(0) += 1;
        }
    }
    out
}

/// Fails the test when python3 is missing (the suites that need it do not skip).
pub fn python3() {
    let there = std::process::Command::new("python3")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        there,
        "python3 is missing: run scripts/setup.sh (Debian package python3)"
    );
}

/// Runs the Python `script` with `args`; its stdout, or a panic with its stderr.
pub fn run_python(script: &str, args: &[&Path]) -> String {
    let out = std::process::Command::new("python3")
        .arg("-c")
        .arg(script)
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "python3 failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// A Maildir backup dated now: the source built from `opts`, through the one pipeline.
pub fn backup(
    repo: &mut Repository,
    opts: &BackupOptions,
    progress: &dyn Progress,
) -> mailvault_core::Result<BackupReport> {
    let source = MaildirSource::new(opts)?;
    mailvault_core::ops::backup::run(repo, &source, &opts.run, mailvault_core::now(), progress)
}

/// An IMAP backup dated now: the source built from `opts`, through the one pipeline.
pub fn imap_backup(
    repo: &mut Repository,
    opts: &ImapBackupOptions,
    progress: &dyn Progress,
) -> mailvault_core::Result<BackupReport> {
    let source = ImapSource::new(opts)?;
    mailvault_core::ops::backup::run(repo, &source, &opts.run, mailvault_core::now(), progress)
}
