//! IMAP fidelity round trip against a real Dovecot: generated Maildir store -> backup ->
//! restore into Dovecot -> backup of that Dovecot over IMAP -> restore to a Maildir gives
//! the same messages, flags, keywords, internal dates, folders and subscriptions, and
//! the same bytes apart from line endings. Plus: incremental IMAP backups, a re-run that
//! appends nothing twice, skip-existing, and a refused (zero-byte) message. What the
//! incremental backups ask the server is read from Dovecot's rawlog: a folder's status
//! comes with the listing (LIST-STATUS), and only a folder that moved is opened.
//! Fails (does not skip) without Dovecot unless MAILVAULT_SKIP_DOVECOT=1.
#![allow(clippy::unwrap_used)]

mod common;

use common::imap_backup;
use common::{
    imap_backup_opts, imap_restore_opts, init_repo, maildir_backup, maildir_restore, put_msg,
};
use mailvault_core::imap::acl::dovecot_acl_file;
use mailvault_core::imap::names::{self, parse_subscriptions};
use mailvault_core::imap::{Login, Password};
use mailvault_core::ops::restore::imap as imap_restore;
use mailvault_core::repo::tree::{AccountTree, RootTree};
use mailvault_core::report::NoProgress;
use mailvault_core::Repository;
use mailvault_imap::maildir_flags::{maildir_to_imap, KeywordTable};
use mailvault_imap::testing::{DovecotOptions, DovecotServer};
use mailvault_imap::{from_crlf, FetchQuery, SeqSet, StoreMode};
use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// One message as the comparison sees it: LF bytes, IMAP flags (lower case, sorted),
/// internal date.
type Msg = (Vec<u8>, Vec<String>, i64);
/// account rel path -> folder dir -> messages (sorted), plus subscriptions per account.
#[derive(Debug, PartialEq)]
struct Store {
    folders: BTreeMap<String, BTreeMap<String, Vec<Msg>>>,
    subscriptions: BTreeMap<String, BTreeSet<String>>,
}

fn read_store(root: &Path) -> Store {
    let mut s = Store {
        folders: BTreeMap::new(),
        subscriptions: BTreeMap::new(),
    };
    for d in fs::read_dir(root).unwrap() {
        let d = d.unwrap().path();
        if !d.is_dir() {
            continue;
        }
        for u in fs::read_dir(&d).unwrap() {
            let md = u.unwrap().path().join("Maildir");
            if !md.is_dir() {
                continue;
            }
            let acc = md.strip_prefix(root).unwrap().display().to_string();
            let subs = fs::read(md.join("subscriptions")).unwrap_or_default();
            s.subscriptions.insert(
                acc.clone(),
                parse_subscriptions(&subs).into_iter().collect(),
            );
            let mut folders = BTreeMap::new();
            let mut dirs = vec![(String::new(), md.clone())];
            for f in fs::read_dir(&md).unwrap() {
                let f = f.unwrap();
                let name = f.file_name().to_string_lossy().into_owned();
                if name.starts_with('.') && f.path().is_dir() {
                    dirs.push((name, f.path()));
                }
            }
            for (name, dir) in dirs {
                let kw = fs::read_to_string(dir.join("dovecot-keywords"))
                    .map(|t| KeywordTable::parse(&t))
                    .unwrap_or_default();
                let mut msgs = Vec::new();
                for sub in ["cur", "new"] {
                    let Ok(rd) = fs::read_dir(dir.join(sub)) else {
                        continue;
                    };
                    for m in rd {
                        let m = m.unwrap();
                        let file = m.file_name().to_string_lossy().into_owned();
                        let letters = file.rsplit_once(":2,").map(|x| x.1).unwrap_or("");
                        let mapped = maildir_to_imap(letters, &kw);
                        assert!(mapped.unmapped.is_empty(), "{file}: {mapped:?}");
                        let mut flags: Vec<String> =
                            mapped.flags.iter().map(|f| f.to_lowercase()).collect();
                        flags.sort();
                        flags.dedup();
                        let data = fs::read(m.path()).unwrap();
                        let mtime = m.metadata().unwrap().mtime();
                        msgs.push((from_crlf(&data).into_owned(), flags, mtime));
                    }
                }
                msgs.sort();
                folders.insert(name, msgs);
            }
            s.folders.insert(acc, folders);
        }
    }
    s
}

/// A directory Dovecot's mail processes (`nobody` when the tests run as root) write a
/// rawlog of each IMAP session into (`<date>-<pid>.in`: what the client sent), and the
/// server options that make them.
fn rawlog_dir() -> (tempfile::TempDir, PathBuf, DovecotOptions) {
    let t = tempfile::tempdir().unwrap();
    fs::set_permissions(t.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let dir = t.path().join("rawlog");
    fs::create_dir(&dir).unwrap();
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o777)).unwrap();
    let opts = DovecotOptions {
        extra_config: format!("protocol imap {{\n  rawlog_dir = {}\n}}\n", dir.display()),
        ..DovecotOptions::default()
    };
    (t, dir, opts)
}

/// The sessions' rawlogs in `dir`.
fn rawlogs(dir: &Path) -> BTreeSet<PathBuf> {
    (fs::read_dir(dir).unwrap())
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "in"))
        .collect()
}

/// The commands (without their tags) of the sessions logged in `dir` but not in
/// `before`, once each has logged out (the rawlog is written as the server reads; each
/// line starts with the time it was read).
fn commands_since(dir: &Path, before: &BTreeSet<PathBuf>) -> Vec<String> {
    let sessions = reads_since(dir, before);
    (sessions.into_iter().flatten()).map(|(_, c)| c).collect()
}

/// Per session logged in `dir` but not in `before` (once each has logged out), its
/// commands (without their tags) with the time the server read each: commands read in
/// one read, written by the client at once, have the same time.
fn reads_since(dir: &Path, before: &BTreeSet<PathBuf>) -> Vec<Vec<(String, String)>> {
    let start = Instant::now();
    loop {
        let logs: Vec<String> = (rawlogs(dir).difference(before))
            .map(|p| String::from_utf8_lossy(&fs::read(p).unwrap()).into_owned())
            .collect();
        let ended = |l: &String| l.lines().last().is_some_and(|c| c.contains(" LOGOUT"));
        if logs.iter().all(ended) || start.elapsed() > Duration::from_secs(10) {
            assert!(!logs.is_empty(), "no rawlog in {}", dir.display());
            let time = |t: &str| t.bytes().all(|b| b.is_ascii_digit() || b == b'.');
            let read = |c: &str| {
                let (t, c) = (c.split_once(' ').filter(|(t, _)| time(t))).unwrap_or(("", c));
                c.split_once(' ')
                    .map(|(_, c)| (t.to_string(), c.to_string()))
            };
            return (logs.iter())
                .map(|l| l.lines().filter_map(read).collect())
                .collect();
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// How many of `commands` are `name` (`STATUS`, `EXAMINE`).
fn count(commands: &[String], name: &str) -> usize {
    let is = |c: &&String| {
        c.split(' ')
            .next()
            .is_some_and(|w| w.eq_ignore_ascii_case(name))
    };
    commands.iter().filter(is).count()
}

#[test]
fn maildir_to_dovecot_and_back_is_faithful() {
    let (_rawlog, rawlog, server_opts) = rawlog_dir();
    let Some(server) = DovecotServer::start_or_skip_with(&server_opts).expect("dovecot") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    let spec = mailvault_corpus::CorpusSpec {
        messages: 400,
        ..mailvault_corpus::CorpusSpec::preset("tiny").unwrap()
    };
    mailvault_corpus::generate(&spec, &src).unwrap();
    let original = read_store(&src);
    let mut repo = init_repo(&dir.path().join("repo"));
    maildir_backup(&mut repo, &src, vec![]);

    // Into Dovecot.
    let journal = dir.path().join("journal");
    let r = imap_restore(&repo, &imap_restore_opts(&server, &journal), &NoProgress).unwrap();
    assert!(r.failures.is_empty(), "{:?}", r.failures);
    assert_eq!(r.items_appended, 400);
    assert_eq!(r.items_total, 400);
    assert_eq!(r.phases.len(), 3);
    assert_eq!(r.phases[0].name, "provisioning");
    assert!(r.phases[0].items > 0);

    // A second run appends nothing: the journal has everything.
    let again = imap_restore(&repo, &imap_restore_opts(&server, &journal), &NoProgress).unwrap();
    assert_eq!((again.items_appended, again.items_journaled), (0, 400));
    // With a fresh journal and --skip-existing, every message is found on the server.
    let mut o = imap_restore_opts(&server, &dir.path().join("journal2"));
    o.skip_existing = true;
    let skip = imap_restore(&repo, &o, &NoProgress).unwrap();
    assert_eq!((skip.items_appended, skip.items_existing), (0, 400));

    // Back up Dovecot over IMAP, restore to a Maildir, compare.
    let accounts: Vec<String> = {
        let snap = repo.find_snapshot("latest").unwrap();
        let root: mailvault_core::repo::tree::RootTree = repo.read_tree(&snap.root).unwrap();
        root.accounts.into_iter().map(|a| a.name).collect()
    };
    let b = imap_backup(
        &mut repo,
        &imap_backup_opts(&server, accounts.clone()),
        &NoProgress,
    )
    .unwrap();
    assert!(b.failures.is_empty(), "{:?}", b.failures);
    assert_eq!((b.items_total, b.items_new), (400, 400));
    let out = dir.path().join("out");
    maildir_restore(&repo, &b.snapshot, &out);
    let back = read_store(&out);
    assert_eq!(back.subscriptions, original.subscriptions);
    assert_eq!(
        back.folders.keys().collect::<Vec<_>>(),
        original.folders.keys().collect::<Vec<_>>()
    );
    for (acc, folders) in &original.folders {
        for (f, msgs) in folders {
            let got = &back.folders[acc][f];
            assert_eq!(got.len(), msgs.len(), "{acc} {f}");
            for (a, b) in msgs.iter().zip(got) {
                assert_eq!(a.0, b.0, "{acc} {f}: bytes");
                assert_eq!((&a.1, a.2), (&b.1, b.2), "{acc} {f}: flags and date");
            }
        }
    }

    // Incremental: nothing changed -> nothing fetched, no folder opened, and no STATUS
    // asked: each folder's status came with its account's listing.
    let logged = rawlogs(&rawlog);
    let inc = imap_backup(
        &mut repo,
        &imap_backup_opts(&server, accounts.clone()),
        &NoProgress,
    )
    .unwrap();
    assert_eq!((inc.items_new, inc.items_unchanged), (0, 400));
    assert_eq!(inc.parent.as_deref(), Some(b.snapshot.as_str()));
    let sent = commands_since(&rawlog, &logged);
    let lists: Vec<&String> = (sent.iter())
        .filter(|c| c.contains("RETURN (") && c.contains("STATUS ("))
        .collect();
    assert_eq!(lists.len(), accounts.len(), "{sent:#?}");
    assert_eq!(
        (count(&sent, "STATUS"), count(&sent, "EXAMINE")),
        (0, 0),
        "{sent:#?}"
    );

    // Change flags of one message, delete another, add a third, in the first account.
    let acc = &accounts[0];
    let mut s = server.client().login(&server.master(acc)).unwrap();
    s.select("INBOX").unwrap();
    let uids = s.uid_search(&mailvault_imap::SearchKey::All).unwrap();
    assert!(uids.len() >= 2);
    s.uid_store(
        &SeqSet::from_ids(&uids[..1]),
        StoreMode::Add,
        &["\\Flagged", "Blue"],
    )
    .unwrap();
    s.uid_store(
        &SeqSet::from_ids(&uids[1..2]),
        StoreMode::Add,
        &["\\Deleted"],
    )
    .unwrap();
    s.expunge().unwrap();
    s.append(
        "INBOX",
        &mailvault_imap::AppendMsg {
            flags: vec!["\\Seen".into()],
            internal_date: Some((1_700_000_000, 0).into()),
            data: b"Subject: new\r\nMessage-ID: <new@x>\r\n\r\nhello\r\n",
        },
    )
    .unwrap();
    let mut flags_now = Vec::new();
    s.fetch::<mailvault_imap::Error, _>(&SeqSet::from_ids(&uids[..1]), &FetchQuery::flags(), |m| {
        flags_now = m
            .flags
            .unwrap_or_default()
            .iter()
            .map(|f| f.to_lowercase())
            .collect();
        Ok(())
    })
    .unwrap();
    s.logout().unwrap();
    let inc = imap_backup(
        &mut repo,
        &imap_backup_opts(&server, accounts.clone()),
        &NoProgress,
    )
    .unwrap();
    assert!(inc.failures.is_empty(), "{:?}", inc.failures);
    assert_eq!((inc.items_new, inc.items_unchanged), (1, 399));
    let out2 = dir.path().join("out2");
    maildir_restore(&repo, &inc.snapshot, &out2);
    let back2 = read_store(&out2);
    let acc_dir = {
        let (u, d) = acc.split_once('@').unwrap();
        format!("{d}/{u}/Maildir")
    };
    let inbox = &back2.folders[&acc_dir][""];
    assert_eq!(inbox.len(), back.folders[&acc_dir][""].len());
    assert!(inbox
        .iter()
        .any(|m| m.0 == b"Subject: new\nMessage-ID: <new@x>\n\nhello\n"));
    assert!(inbox
        .iter()
        .any(|m| m.1.contains(&"blue".to_string()) && m.1.contains(&"\\flagged".to_string())));
    assert!(flags_now.contains(&"blue".to_string()));

    // A flag alone changes (no message added or expunged: STATUS shows only HIGHESTMODSEQ
    // moved): the next backup has it; a folder where nothing changed is the parent's.
    let mut s = server.client().login(&server.master(acc)).unwrap();
    s.select("INBOX").unwrap();
    let uids = s.uid_search(&mailvault_imap::SearchKey::All).unwrap();
    s.uid_store(&SeqSet::from_ids(&uids[..1]), StoreMode::Add, &["Green"])
        .unwrap();
    s.logout().unwrap();
    let logged = rawlogs(&rawlog);
    let inc = imap_backup(
        &mut repo,
        &imap_backup_opts(&server, accounts.clone()),
        &NoProgress,
    )
    .unwrap();
    assert!(inc.failures.is_empty(), "{:?}", inc.failures);
    assert_eq!((inc.items_new, inc.items_unchanged), (0, 400));
    // Only that INBOX is opened (its listed status moved); no STATUS asked.
    let sent = commands_since(&rawlog, &logged);
    assert_eq!(
        (count(&sent, "STATUS"), count(&sent, "EXAMINE")),
        (0, 1),
        "{sent:#?}"
    );
    assert!(
        sent.iter().any(|c| c == "EXAMINE INBOX (CONDSTORE)"),
        "{sent:#?}"
    );
    let out3 = dir.path().join("out3");
    maildir_restore(&repo, &inc.snapshot, &out3);
    let back3 = read_store(&out3);
    assert!(back3.folders[&acc_dir][""]
        .iter()
        .any(|m| m.1.contains(&"green".to_string())));
    let mut back2 = back2;
    let mut back3 = back3;
    back2.folders.remove(&acc_dir);
    back3.folders.remove(&acc_dir);
    assert_eq!(back3, back2, "the other accounts are as they were");
}

#[test]
fn refused_messages_are_reported_and_the_run_goes_on() {
    let Some(server) = DovecotServer::start_or_skip().expect("dovecot") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let md = dir.path().join("Maildir");
    put_msg(&md, "", "cur", "1.M1P1.h,S=0:2,S", b"", 1_700_000_000);
    put_msg(
        &md,
        "",
        "cur",
        "2.M2P2.h:2,S",
        b"Subject: ok\n\nbody\n",
        1_700_000_001,
    );
    put_msg(
        &md,
        ".Sent",
        "cur",
        "3.M3P3.h:2,S",
        b"Subject: sent\n\nbody\n",
        1_700_000_002,
    );
    let mut repo = init_repo(&dir.path().join("repo"));
    maildir_backup(&mut repo, &md, vec!["bob@example.org".into()]);
    let r = imap_restore(
        &repo,
        &imap_restore_opts(&server, &dir.path().join("j")),
        &NoProgress,
    )
    .unwrap();
    assert_eq!((r.items_appended, r.items_failed), (2, 1), "{r:?}");
    assert!(
        r.failures[0].error.contains("zero byte"),
        "{:?}",
        r.failures
    );
    assert!(r.failures[0].item.contains("1.M1P1.h,S=0"));

    // Wrong credentials: a clear error naming the account.
    let mut o = imap_restore_opts(&server, &dir.path().join("j2"));
    o.connection.login = Login::User {
        template: "%u".into(),
        password: Password::One("wrong".into()),
    };
    let r = imap_restore(&repo, &o, &NoProgress).unwrap();
    assert_eq!(r.items_failed, 3);
    assert!(
        r.failures[0].item.contains("bob@example.org"),
        "{:?}",
        r.failures
    );
    assert!(r.failures[0].error.contains("refused"), "{:?}", r.failures);
}

/// A Dovecot with ACLs (vfile) and mailbox METADATA (a file dictionary), as
/// bench/imap_incremental.py runs it.
const ACL_METADATA: &str = "mail_plugins = $mail_plugins acl\n\
    mail_attribute_dict = file:%h/dovecot-attributes\n\
    protocol imap {\n  mail_plugins = $mail_plugins imap_acl\n  imap_metadata = yes\n}\n\
    plugin {\n  acl = vfile\n  acl_user = %u\n}\n";

/// Issue 26: an IMAP backup asks every folder's ACL and METADATA for the whole account at
/// once, pipelined (GETACL and GETMETADATA written together, each read in one of the
/// server's reads, as its rawlog shows), not one round trip per folder; and keeps the same
/// `dovecot-acl` and `mailvault-metadata` files as asking each folder alone gives, for
/// folders in modified UTF-7, with quotes, with a space, nested.
#[test]
fn acls_and_metadata_are_asked_pipelined_and_kept_as_before() {
    let (_rawlog, rawlog, mut server_opts) = rawlog_dir();
    server_opts.extra_config.push_str(ACL_METADATA);
    let Some(server) = DovecotServer::start_or_skip_with(&server_opts).expect("dovecot") else {
        return;
    };
    let acc = "alice@example.org";
    let mut folders = vec!["INBOX", "Entw\u{fc}rfe", "Tom & \"Jerry\"", "Archive"];
    folders.extend(["Archive/2024 Q1", "F1", "F2", "F3", "F4", "F5", "F6", "F7"]);
    let mut s = server.client().login(&server.master(acc)).unwrap();
    for f in &folders[1..] {
        s.create(f, None).unwrap();
    }
    let meta = |k: &str, v: &[u8]| vec![(k.to_string(), v.to_vec())];
    s.set_acl("Archive", "bob@example.org", "lr").unwrap();
    s.set_acl(folders[1], "carol@example.org", "lrswi").unwrap();
    s.set_acl(folders[2], "dave@example.org", "lr").unwrap();
    s.set_metadata("INBOX", &meta("/private/comment", b"inbox note"))
        .unwrap();
    (s.set_metadata(folders[2], &meta("/shared/comment", b"two\r\nlines"))).unwrap();
    (s.set_metadata(folders[4], &meta("/private/vendor/x/y", b"q1"))).unwrap();
    // What asking each folder alone gives, in the files the backup keeps.
    let mut alone = BTreeMap::new();
    for f in &folders {
        let dir = String::from_utf8(names::maildir_dir(f)).unwrap();
        let acl = dovecot_acl_file(&s.get_acl(f).unwrap(), acc).0;
        let metadata = names::metadata_file(&s.get_metadata(f).unwrap()).0;
        for (name, data) in [("dovecot-acl", acl), ("mailvault-metadata", metadata)] {
            if let Some(d) = data {
                alone.insert(format!("{dir}/{name}"), String::from_utf8(d).unwrap());
            }
        }
    }
    s.logout().unwrap();
    assert_eq!(alone.len(), 6, "{alone:#?}");
    assert!(alone[".Archive/dovecot-acl"].contains("user=bob@example.org lr"));

    let dir = tempfile::tempdir().unwrap();
    let mut repo = init_repo(&dir.path().join("repo"));
    let opts = imap_backup_opts(&server, vec![acc.to_string()]);
    // The snapshot's folder files (a Maildir restore does not write `mailvault-metadata`).
    let kept = |repo: &mut Repository| {
        let b = imap_backup(repo, &opts, &NoProgress).unwrap();
        assert!(b.failures.is_empty(), "{:?}", b.failures);
        let snap = repo.find_snapshot(&b.snapshot).unwrap();
        let root: RootTree = repo.read_tree(&snap.root).unwrap();
        let mut got = BTreeMap::new();
        for acc in &root.accounts {
            let tree: AccountTree = repo.read_tree(&acc.tree).unwrap();
            for f in &tree.folders {
                for file in &f.files {
                    let name = String::from_utf8_lossy(&file.name);
                    if name == "dovecot-acl" || name == "mailvault-metadata" {
                        let data: Vec<u8> = (repo.file_content(file).unwrap().iter())
                            .flat_map(|id| repo.read_blob(id).unwrap())
                            .collect();
                        let dir = String::from_utf8_lossy(&f.dir);
                        got.insert(format!("{dir}/{name}"), String::from_utf8(data).unwrap());
                    }
                }
            }
        }
        got
    };
    assert_eq!(kept(&mut repo), alone);

    // Nothing changed: the same files again; each session's GETACLs and GETMETADATAs came
    // in a few reads of the server, not one per folder.
    let logged = rawlogs(&rawlog);
    assert_eq!(kept(&mut repo), alone);
    let sessions = reads_since(&rawlog, &logged);
    let mut asked = 0;
    for commands in sessions {
        let ours =
            |c: &&(String, String)| c.1.starts_with("GETACL ") || c.1.starts_with("GETMETADATA ");
        let times: BTreeSet<&str> = commands
            .iter()
            .filter(ours)
            .map(|(t, _)| t.as_str())
            .collect();
        let n = commands.iter().filter(ours).count();
        assert!(
            commands.iter().all(|(t, _)| !t.is_empty()),
            "no read times: {commands:#?}"
        );
        asked += n;
        // Two pipelined calls (ACLs, then METADATA): each one read, maybe split in two.
        assert!(
            n == 0 || times.len() <= 4,
            "{n} commands in {} reads: {commands:#?}",
            times.len()
        );
    }
    assert_eq!(asked, 2 * folders.len());
}
