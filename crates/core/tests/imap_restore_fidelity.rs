//! What the server and the admin see after an IMAP restore (issue 10), against a real
//! Dovecot: UID order is the original arrival order; `$Forwarded` of an IMAP backup
//! reaches a Dovecot that serves the restored Maildir; messages Dovecot changes on APPEND
//! (`\r\r\n`, a final lone CR, NUL bytes) are recognized by `skip_existing`; per-account figures are each account's own; `--folder`
//! brings its subscriptions; the journal does not stand in the way of restoring a
//! message the user deleted since; the special-use note speaks only of folders created;
//! folders `a.b` and `a_b` stay two folders through an IMAP backup and a Maildir restore.
//! Fails (does not skip) without Dovecot unless MAILVAULT_SKIP_DOVECOT=1.
#![allow(clippy::unwrap_used)]

mod common;

use common::imap_backup;
use common::{
    imap_backup_opts, imap_restore_opts, init_repo, maildir_backup, maildir_restore, message,
    put_msg, small_store,
};
use mailvault_core::dest::imap::ImapRestoreOptions;
use mailvault_core::ops::restore::imap as imap_restore;
use mailvault_core::report::NoProgress;
use mailvault_core::Repository;
use mailvault_imap::testing::{DovecotOptions, DovecotServer};
use mailvault_imap::{AppendMsg, FetchQuery, SearchKey, SeqSet, Session, StoreMode};
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// [`imap_restore_opts`] with batches of 7 messages: these small folders span batches.
fn restore_opts(server: &DovecotServer, journal: &Path) -> ImapRestoreOptions {
    let mut o = imap_restore_opts(server, journal);
    o.batch_messages = 7;
    o
}

fn login(server: &DovecotServer, account: &str) -> Session {
    server.client().login(&server.master(account)).unwrap()
}

/// (UID, Subject, flags in lower case) of every message of a folder, in UID order.
fn messages(s: &mut Session, folder: &str) -> Vec<(u32, String, Vec<String>)> {
    s.examine(folder).unwrap();
    let mut out = Vec::new();
    s.fetch::<mailvault_imap::Error, _>(&SeqSet::all(), &FetchQuery::full(), |m| {
        let body = String::from_utf8_lossy(m.body.unwrap_or_default()).into_owned();
        let subject = body
            .lines()
            .find_map(|l| l.strip_prefix("Subject: "))
            .unwrap_or("")
            .trim()
            .to_string();
        let mut flags: Vec<String> = m
            .flags
            .unwrap_or_default()
            .iter()
            .map(|f| f.to_lowercase())
            .filter(|f| f != "\\recent")
            .collect();
        flags.sort();
        out.push((m.uid, subject, flags));
        Ok(())
    })
    .unwrap();
    s.unselect().unwrap();
    out.sort();
    out
}

/// An IMAP backup of `account` of `source`; its snapshot id. Fails the test on any failure.
fn imap_backup_of(repo: &mut Repository, source: &DovecotServer, account: &str) -> String {
    let b = imap_backup(
        repo,
        &imap_backup_opts(source, vec![account.into()]),
        &NoProgress,
    )
    .unwrap();
    assert!(b.failures.is_empty(), "{:?}", b.failures);
    b.snapshot
}

/// Restores `snapshot` to a Maildir below `dest` and gives it to the owner of `dest`
/// (Dovecot's mail user), as an admin restoring for Dovecot would.
fn maildir_restore_for(repo: &Repository, snapshot: &str, dest: &Path) {
    maildir_restore(repo, snapshot, dest);
    let meta = fs::metadata(dest).unwrap();
    let mut stack = vec![dest.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            std::os::unix::fs::chown(&p, Some(meta.uid()), Some(meta.gid())).unwrap();
            if p.is_dir() {
                stack.push(p);
            }
        }
    }
}

/// Item 2: every folder's messages get UIDs in their original order: the order of the
/// folder's `dovecot-uidlist` where it has one (here the reverse of names and dates),
/// else internal date then name.
#[test]
fn uid_order_is_the_original_arrival_order() {
    let Some(server) = DovecotServer::start_or_skip().expect("dovecot") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let md = dir.path().join("Maildir");
    let mut uidlist = String::from("3 V1600000000 N41 G0\n");
    for i in 0..40u32 {
        let key = format!("{}.M{i}P1.h", 1_700_000_000 + i);
        put_msg(
            &md,
            "",
            "cur",
            &format!("{key},S=100:2,S"),
            &message("bob@example.org", &format!("inbox-{i:02}"), "text"),
            1_700_000_000 + i as i64,
        );
        // Arrived in the reverse order of their names and dates.
        uidlist.push_str(&format!("{} :{key},S=100\n", 40 - i));
    }
    fs::write(md.join("dovecot-uidlist"), uidlist).unwrap();
    // No uidlist: by date, then name; names sort differently from dates.
    for i in 0..30u32 {
        put_msg(
            &md,
            ".Sent",
            "cur",
            &format!("z{:02}.M{i}P2.h:2,S", 29 - i),
            &message("bob@example.org", &format!("sent-{i:02}"), "text"),
            1_700_100_000 + (i / 2) as i64,
        );
    }
    let mut repo = init_repo(&dir.path().join("repo"));
    maildir_backup(&mut repo, &md, vec!["bob@example.org".into()]);
    let r = imap_restore(
        &repo,
        &restore_opts(&server, &dir.path().join("j")),
        &NoProgress,
    )
    .unwrap();
    assert!(r.failures.is_empty(), "{:?}", r.failures);
    assert_eq!(r.items_appended, 70);

    let mut s = login(&server, "bob@example.org");
    let inbox: Vec<String> = messages(&mut s, "INBOX").into_iter().map(|m| m.1).collect();
    let want: Vec<String> = (0..40).rev().map(|i| format!("inbox-{i:02}")).collect();
    assert_eq!(
        inbox, want,
        "INBOX: UID order is not the dovecot-uidlist order"
    );
    let sent: Vec<String> = messages(&mut s, "Sent").into_iter().map(|m| m.1).collect();
    // Same second for each pair: the name decides (z29 before z28 ... by name: i odd first).
    let mut want: Vec<(i64, String, String)> = (0..30u32)
        .map(|i| {
            (
                (i / 2) as i64,
                format!("z{:02}", 29 - i),
                format!("sent-{i:02}"),
            )
        })
        .collect();
    want.sort();
    let want: Vec<String> = want.into_iter().map(|w| w.2).collect();
    assert_eq!(sent, want, "Sent: UID order is not date-then-name order");
}

/// Item 4: `$Forwarded` of an IMAP backup is kept as Dovecot keeps it (a keyword letter
/// in `dovecot-keywords`, not the letter P it ignores), so a Dovecot serving the
/// restored Maildir shows it.
#[test]
fn forwarded_survives_imap_backup_and_maildir_restore() {
    let Some(source) = DovecotServer::start_or_skip().expect("dovecot") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let acc = "bob@example.org";
    let mut s = login(&source, acc);
    s.append(
        "INBOX",
        &AppendMsg {
            flags: vec!["$Forwarded".into(), "\\Seen".into(), "$Label1".into()],
            internal_date: Some((1_700_000_000, 0).into()),
            data: b"Subject: fwd\r\nMessage-ID: <fwd@x>\r\n\r\nbody\r\n",
        },
    )
    .unwrap();
    s.logout().unwrap();
    let mut repo = init_repo(&dir.path().join("repo"));
    let snapshot = imap_backup_of(&mut repo, &source, acc);

    let Some(target) = DovecotServer::start_or_skip().expect("dovecot") else {
        return;
    };
    maildir_restore_for(&repo, &snapshot, &target.mail_root());
    let mut s = login(&target, acc);
    let got = messages(&mut s, "INBOX");
    assert_eq!(got.len(), 1);
    assert_eq!(
        got[0].2,
        ["$forwarded", "$label1", "\\seen"],
        "flags as the Dovecot serving the restored Maildir sees them"
    );
}

/// Item 5 of issue 10, item 9 of issue 24: what Dovecot changes on APPEND (a CR dropped
/// before CRLF and at the very end, NUL bytes as 0x80; docs/imap.md) does not keep
/// `skip_existing` from recognizing a message: the same snapshot restored three times,
/// each with a journal of its own, leaves one copy of each message (two of the twins).
#[test]
fn every_normalized_message_is_found_again() {
    let Some(server) = DovecotServer::start_or_skip().expect("dovecot") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let md = dir.path().join("Maildir");
    let n = common::put_server_normalized(&md);
    let mut repo = init_repo(&dir.path().join("repo"));
    maildir_backup(&mut repo, &md, vec!["bob@example.org".into()]);
    for (run, j) in ["j1", "j2", "j3"].iter().enumerate() {
        let mut o = restore_opts(&server, &dir.path().join(j));
        o.skip_existing = true;
        let r = imap_restore(&repo, &o, &NoProgress).unwrap();
        assert!(r.failures.is_empty(), "{:?}", r.failures);
        let want = if run == 0 { (n, 0) } else { (0, n) };
        assert_eq!(
            (r.items_appended as usize, r.items_existing as usize),
            want,
            "run {}: {r:?}",
            run + 1
        );
    }
    let mut s = login(&server, "bob@example.org");
    assert_eq!(
        common::copies_by_subject(&mut s, "INBOX"),
        common::expected_copies(&[])
    );
}

/// Item 7: with several accounts restored at once, each account's figures are its own
/// (not running totals) and they add up to the report's.
#[test]
fn per_account_figures_are_each_accounts_own() {
    let Some(server) = DovecotServer::start_or_skip().expect("dovecot") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    small_store(&src);
    let mut repo = init_repo(&dir.path().join("repo"));
    maildir_backup(&mut repo, &src, vec![]);
    let mut o = restore_opts(&server, &dir.path().join("j"));
    o.parallel_accounts = 3;
    o.batch_messages = 2;
    let r = imap_restore(&repo, &o, &NoProgress).unwrap();
    assert_eq!(r.per_account.len(), 3, "{r:?}");
    for a in &r.per_account {
        assert_eq!(a.messages, a.appended + a.skipped + a.failed, "{a:?}");
    }
    let sum = |f: fn(&mailvault_core::dest::imap::AccountFigures) -> u64| {
        r.per_account.iter().map(f).sum::<u64>()
    };
    assert_eq!(sum(|a| a.appended), r.items_appended, "{r:?}");
    assert_eq!(sum(|a| a.failed), r.items_failed, "{r:?}");
    assert_eq!(sum(|a| a.messages), r.items_total, "{r:?}");
    assert_eq!(
        r.items_total,
        r.items_appended + r.items_journaled + r.items_existing + r.items_failed
    );
    // bob's zero-byte message is refused; the others have 23 messages each.
    let bob = r
        .per_account
        .iter()
        .find(|a| a.account == "bob@example.org")
        .unwrap();
    assert_eq!((bob.appended, bob.failed), (bob.messages - 1, 1), "{bob:?}");
}

/// Item 8: `--folder Archive` restores the subscriptions of Archive and its subfolders
/// (also one to a subfolder that no longer exists), and no other.
#[test]
fn folder_restore_brings_its_subscriptions() {
    let Some(server) = DovecotServer::start_or_skip().expect("dovecot") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let md = dir.path().join("Maildir");
    for (f, i) in [("", 1), (".Sent", 2), (".Archive", 3), (".Archive.2023", 4)] {
        put_msg(
            &md,
            f,
            "cur",
            &format!("{i}.M{i}P1.h:2,S"),
            &message("bob@example.org", &format!("m{i}"), "x"),
            1_700_000_000 + i,
        );
    }
    fs::write(
        md.join("subscriptions"),
        b"V\t2\n\nSent\nArchive\nArchive\t2023\nArchive\tGone\n",
    )
    .unwrap();
    let mut repo = init_repo(&dir.path().join("repo"));
    maildir_backup(&mut repo, &md, vec!["bob@example.org".into()]);
    let mut o = restore_opts(&server, &dir.path().join("j"));
    o.select.folders = vec!["Archive".into()];
    let r = imap_restore(&repo, &o, &NoProgress).unwrap();
    assert!(r.failures.is_empty(), "{:?}", r.failures);
    assert_eq!(r.items_appended, 2);
    let mut s = login(&server, "bob@example.org");
    let mut subs: Vec<String> = s.lsub().unwrap().into_iter().map(|f| f.name).collect();
    subs.sort();
    assert_eq!(subs, ["Archive", "Archive/2023", "Archive/Gone"]);
}

/// Item 13: the journal keeps a re-run from appending twice, but a message the user
/// deleted since it was restored is restored again when asked for.
#[test]
fn deleted_message_can_be_restored_again() {
    let Some(server) = DovecotServer::start_or_skip().expect("dovecot") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let md = dir.path().join("Maildir");
    for i in 0..3 {
        put_msg(
            &md,
            "",
            "cur",
            &format!("{i}.M{i}P1.h:2,S"),
            &message("bob@example.org", &format!("m{i}"), "x"),
            1_700_000_000 + i,
        );
    }
    let mut repo = init_repo(&dir.path().join("repo"));
    maildir_backup(&mut repo, &md, vec!["bob@example.org".into()]);
    let mut o = restore_opts(&server, &dir.path().join("j"));
    o.select.messages = vec!["1.M1P1.h".into()];
    let r = imap_restore(&repo, &o, &NoProgress).unwrap();
    assert_eq!(r.items_appended, 1, "{r:?}");
    // A re-run: the journal knows, the server has it, nothing is sent.
    let r = imap_restore(&repo, &o, &NoProgress).unwrap();
    assert_eq!((r.items_appended, r.items_journaled), (0, 1), "{r:?}");
    // The user deletes it; restoring it again puts it back.
    let mut s = login(&server, "bob@example.org");
    s.select("INBOX").unwrap();
    let uids = s.uid_search(&SearchKey::All).unwrap();
    assert_eq!(uids.len(), 1);
    s.uid_store(&SeqSet::from_ids(&uids), StoreMode::Add, &["\\Deleted"])
        .unwrap();
    s.expunge().unwrap();
    s.unselect().unwrap();
    let r = imap_restore(&repo, &o, &NoProgress).unwrap();
    assert_eq!((r.items_appended, r.items_journaled), (1, 0), "{r:?}");
    assert_eq!(messages(&mut s, "INBOX").len(), 1);
    // And the whole restore afterwards sends the two others only.
    let mut all = restore_opts(&server, &dir.path().join("j"));
    all.select.messages.clear();
    let r = imap_restore(&repo, &all, &NoProgress).unwrap();
    assert_eq!((r.items_appended, r.items_journaled), (2, 1), "{r:?}");
    assert_eq!(messages(&mut s, "INBOX").len(), 3);
}

/// Item 15: the special-use note speaks of folders this run created, not of every run;
/// a run that writes nothing reports no rate.
#[test]
fn special_use_note_only_when_folders_were_created() {
    let Some(server) = DovecotServer::start_or_skip().expect("dovecot") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let md = dir.path().join("Maildir");
    put_msg(
        &md,
        "",
        "cur",
        "1.M1P1.h:2,S",
        &message("bob@example.org", "i", "x"),
        1_700_000_000,
    );
    put_msg(
        &md,
        ".Sent",
        "cur",
        "2.M2P1.h:2,S",
        &message("bob@example.org", "s", "x"),
        1_700_000_000,
    );
    let mut repo = init_repo(&dir.path().join("repo"));
    maildir_backup(&mut repo, &md, vec!["bob@example.org".into()]);
    let o = restore_opts(&server, &dir.path().join("j"));
    let first = imap_restore(&repo, &o, &NoProgress).unwrap();
    // Dovecot 2.3 has no CREATE-SPECIAL-USE: said once, for the one folder created.
    assert!(
        first.phases[0]
            .note
            .contains("no CREATE-SPECIAL-USE) for 1 folders"),
        "{:?}",
        first.phases[0]
    );
    let again = imap_restore(&repo, &o, &NoProgress).unwrap();
    assert!(
        !again.phases[0].note.contains("special use"),
        "{:?}",
        again.phases[0]
    );
    assert_eq!((again.items_appended, again.bytes_appended), (0, 0));
    assert_eq!(again.items_per_sec, 0.0, "{again:?}");
}

/// Item 18: IMAP folders `a.b` and `a_b` are two Maildir folders after an IMAP backup
/// and a Maildir restore (the `.` escaped as Dovecot's listescape does), which a Dovecot
/// with listescape serves as `a.b` and `a_b` again.
#[test]
fn dotted_folder_names_stay_apart() {
    let opts = DovecotOptions {
        extra_config: "mail_plugins = $mail_plugins listescape\n".into(),
        ..Default::default()
    };
    let Some(source) = DovecotServer::start_or_skip_with(&opts).expect("dovecot") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let acc = "bob@example.org";
    let mut s = login(&source, acc);
    for f in ["a.b", "a_b"] {
        s.create(f, None).unwrap();
        for i in 0..3 {
            s.append(
                f,
                &AppendMsg {
                    flags: vec!["\\Seen".into()],
                    internal_date: Some((1_700_000_000, 0).into()),
                    data: format!("Subject: {f} {i}\r\n\r\nbody\r\n").as_bytes(),
                },
            )
            .unwrap();
        }
    }
    s.logout().unwrap();
    // What Dovecot itself writes for them.
    let on_disk = |md: &Path| {
        let mut dirs: Vec<String> = fs::read_dir(md)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with(".a"))
            .collect();
        dirs.sort();
        dirs
    };
    assert_eq!(on_disk(&source.maildir(acc)), [".a\\2eb", ".a_b"]);
    let mut repo = init_repo(&dir.path().join("repo"));
    let snapshot = imap_backup_of(&mut repo, &source, acc);

    let target = DovecotServer::start_with(&opts).unwrap();
    maildir_restore_for(&repo, &snapshot, &target.mail_root());
    assert_eq!(on_disk(&target.maildir(acc)), [".a\\2eb", ".a_b"]);
    let mut s = login(&target, acc);
    for f in ["a.b", "a_b"] {
        let got: Vec<String> = messages(&mut s, f).into_iter().map(|m| m.1).collect();
        let want: Vec<String> = (0..3).map(|i| format!("{f} {i}")).collect();
        assert_eq!(got, want, "{f}");
    }
}

/// A folder of an IMAP backup keeps its name through an IMAP restore, even one that looks
/// like modified UTF-7 (`Tom &- Jerry` is a name of its own, not `Tom & Jerry`), as `ls`
/// and `--folder` show it.
#[test]
fn imap_folder_names_are_restored_as_they_are() {
    let Some(source) = DovecotServer::start_or_skip().expect("dovecot") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let acc = "bob@example.org";
    let folders = ["Tom &- Jerry", "Entw\u{fc}rfe"];
    let mut s = login(&source, acc);
    for f in folders {
        s.create(f, None).unwrap();
        s.append(
            f,
            &AppendMsg {
                flags: vec!["\\Seen".into()],
                internal_date: Some((1_700_000_000, 0).into()),
                data: format!("Subject: {f}\r\n\r\nbody\r\n").as_bytes(),
            },
        )
        .unwrap();
    }
    s.logout().unwrap();
    let mut repo = init_repo(&dir.path().join("repo"));
    imap_backup_of(&mut repo, &source, acc);

    let target = DovecotServer::start().unwrap();
    let r = imap_restore(
        &repo,
        &restore_opts(&target, &dir.path().join("j")),
        &NoProgress,
    )
    .unwrap();
    assert!(r.failures.is_empty(), "{:?}", r.failures);
    let mut s = login(&target, acc);
    let mut names: Vec<String> = s.list().unwrap().into_iter().map(|f| f.name).collect();
    names.sort();
    assert_eq!(names, ["Entw\u{fc}rfe", "INBOX", "Tom &- Jerry"]);
    for f in folders {
        let got: Vec<String> = messages(&mut s, f).into_iter().map(|m| m.1).collect();
        assert_eq!(got, [f], "{f}");
    }
}
