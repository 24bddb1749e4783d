#![allow(clippy::unwrap_used)]
//! Backup then restore gives back the same files, bytes, names, mtimes and modes.

mod common;

use common::backup;
use common::*;
use mailvault_core::dest::owners::RestoreOwners;
use mailvault_core::ops::restore::RestoreOptions;
use mailvault_core::report::NoProgress;
use mailvault_core::restore::Selection;
use std::os::unix::ffi::OsStrExt;

#[test]
fn store_round_trip_is_byte_exact() {
    let t = tempfile::tempdir().unwrap();
    let src = t.path().join("vmail");
    small_store(&src);
    let mut repo = init_repo(&t.path().join("repo"));
    let rep = backup(&mut repo, &backup_opts(&src, vec![]), &NoProgress).unwrap();
    assert!(rep.failures.is_empty(), "{:?}", rep.failures);
    assert_eq!(rep.accounts, 3);
    assert_eq!(rep.items_new, rep.items_total);
    assert_eq!(rep.items_total, 3 * 23 + 5);
    // Per-recipient copies: the rest of list-N is stored once for three accounts.
    assert!(
        rep.dedup_ratio.unwrap() > 1.5,
        "dedup ratio {:?}",
        rep.dedup_ratio
    );

    let repo = open_repo(&t.path().join("repo"));
    let out = t.path().join("restored");
    let r = restore_latest(&repo, &out);
    assert!(r.failures.is_empty(), "{:?}", r.failures);
    assert_eq!(r.items_restored, rep.items_total);
    assert_same_tree(&src, &out);

    // Restoring again into the same place: everything is already there.
    let again = restore_latest(&repo, &out);
    assert_eq!(again.items_unchanged, rep.items_total);
    assert_eq!(again.items_restored, 0);
    assert!(again.failures.is_empty());
}

/// Every format and option a repository can be made with round-trips the same store:
/// format 1 (the public chunker, no associated data), format 2, and format 2 with padding
/// (which costs some space and nothing else).
#[test]
fn every_repository_format_round_trips() {
    use mailvault_core::repo::format::Version;
    let t = tempfile::tempdir().unwrap();
    let src = t.path().join("vmail");
    small_store(&src);
    // One large message, cut by the chunker into several blobs.
    let big: Vec<u8> = (0..40_000u32)
        .flat_map(|i| format!("line {} {}\n", i, i.wrapping_mul(2654435761)).into_bytes())
        .collect();
    let mut msg = message("bob@example.org", "big", "see below").to_vec();
    msg.extend_from_slice(&big);
    put_msg(
        &src.join("example.org/bob/Maildir"),
        "",
        "cur",
        "9.M1P1.big:2,S",
        &msg,
        1_700_000_000,
    );
    let mut sizes = Vec::new();
    for (version, pad) in [
        (Version::V1, false),
        (Version::V2, false),
        (Version::V2, true),
    ] {
        let dir = t.path().join(format!("repo-{version}-{pad}"));
        let opts = mailvault_core::InitOptions {
            version,
            pad,
            ..fast_init()
        };
        let store = std::sync::Arc::new(mailvault_core::store::LocalStore::new(&dir));
        let mut repo = mailvault_core::Repository::init(store, PASSWORD, &opts).unwrap();
        let rep = backup(&mut repo, &backup_opts(&src, vec![]), &NoProgress).unwrap();
        assert!(rep.failures.is_empty(), "{:?}", rep.failures);
        let repo = open_repo(&dir);
        assert_eq!((repo.version(), repo.config().pad), (version, pad));
        let c = check_all(&repo);
        assert!(c.ok(), "{version} pad {pad}: {:?}", c.errors);
        let out = t.path().join(format!("out-{version}-{pad}"));
        let r = restore_latest(&repo, &out);
        assert!(r.failures.is_empty(), "{:?}", r.failures);
        assert_same_tree(&src, &out);
        let stats = mailvault_core::ops::stats::stats(&repo).unwrap();
        assert_eq!(stats.format_version, version.number());
        sizes.push(stats.data_stored_bytes);
    }
    // Padding costs a little space: more than nothing, at most 12%.
    assert!(
        sizes[2] > sizes[1] && sizes[2] * 100 <= sizes[1] * 112,
        "{sizes:?}"
    );
}

/// Regression: two backups within one second — `latest` must be the second (snapshots
/// kept only whole seconds, and ties fell to the random id).
#[test]
fn latest_is_the_newest_even_within_one_second() {
    let t = tempfile::tempdir().unwrap();
    let src = t.path().join("vmail");
    small_store(&src);
    let mut repo = init_repo(&t.path().join("repo"));
    let mut last = String::new();
    for i in 0..6 {
        put_msg(
            &src.join("example.org/bob/Maildir"),
            "",
            "new",
            &format!("9{i}.M1P1.x"),
            b"Subject: x\n\nx\n",
            1_700_000_000,
        );
        last = backup(&mut repo, &backup_opts(&src, vec![]), &NoProgress)
            .unwrap()
            .snapshot;
        assert_eq!(
            repo.find_snapshot("latest").unwrap().id.to_hex(),
            last,
            "after backup {i}"
        );
    }
    assert!(!last.is_empty());
}

fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// Issue 10, item 1: a store owned by the mail user (directories 0700, files 0600 and
/// 0640) comes back with every directory's and file's owner and mode, not root's 0755.
#[test]
fn owners_and_modes_of_directories_and_files_round_trip() {
    let t = tempfile::tempdir().unwrap();
    let src = t.path().join("vmail");
    small_store(&src);
    // nobody:nogroup stands in for vmail (as root; otherwise only modes are compared).
    let owner = is_root().then_some((65534, 65534));
    chmod_store(&src, owner);
    let mut repo = init_repo(&t.path().join("repo"));
    let rep = backup(&mut repo, &backup_opts(&src, vec![]), &NoProgress).unwrap();
    assert!(rep.failures.is_empty(), "{:?}", rep.failures);
    let repo = open_repo(&t.path().join("repo"));
    let out = t.path().join("restored");
    let r = restore_latest(&repo, &out);
    assert!(r.failures.is_empty(), "{:?}", r.failures);
    assert_same_tree(&src, &out);
    let a = owner_snapshot(&src);
    let b = owner_snapshot(&out);
    assert_eq!(a.keys().collect::<Vec<_>>(), b.keys().collect::<Vec<_>>());
    for (k, va) in &a {
        let vb = &b[k];
        if owner.is_some() {
            assert_eq!(va, vb, "mode or owner differs for {k}");
        } else {
            assert_eq!(va.1, vb.1, "mode differs for {k}");
        }
    }

    // --chown: everything to one owner, modes as recorded.
    if is_root() {
        let out2 = t.path().join("chown");
        let r = restore_with(
            &repo,
            RestoreOptions {
                select: Selection {
                    snapshot: "latest".into(),
                    ..Default::default()
                },
                target: out2.clone(),
                jobs: 2,
                owners: RestoreOwners::Fixed { uid: 1, gid: 2 },
            },
        );
        assert!(r.failures.is_empty(), "{:?}", r.failures);
        for (k, (_, mode, uid, gid)) in owner_snapshot(&out2) {
            assert_eq!((uid, gid), (1, 2), "owner of {k}");
            assert_eq!(mode, a[&k].1, "mode of {k}");
        }
    }
}

/// Issue 10, item 16: links planted in the target (an account's domain, a folder's
/// `cur/`, a message's and a folder file's name) are reported and never written through;
/// the rest restores.
#[test]
fn restore_never_follows_links_inside_the_target() {
    use std::os::unix::fs::symlink;
    let t = tempfile::tempdir().unwrap();
    let repo = backed_up_small_store(t.path());
    let out = t.path().join("restored");
    let elsewhere = t.path().join("elsewhere");
    for d in ["domain", "cur", "files"] {
        std::fs::create_dir_all(elsewhere.join(d)).unwrap();
    }
    std::fs::write(elsewhere.join("files/victim"), b"precious").unwrap();
    std::fs::create_dir_all(&out).unwrap();
    // example.org -> elsewhere/domain: bob's and carol's accounts are refused.
    symlink(elsewhere.join("domain"), out.join("example.org")).unwrap();
    // dave's Sent/cur -> elsewhere/cur.
    let dave = out.join("other.net/dave/Maildir");
    std::fs::create_dir_all(dave.join(".Sent")).unwrap();
    symlink(elsewhere.join("cur"), dave.join(".Sent/cur")).unwrap();
    // dave's INBOX: a message's name and dovecot-uidlist link to the victim.
    std::fs::create_dir_all(dave.join("cur")).unwrap();
    let msg = "1700000005.M2P5.mail,S=100:2,RS";
    symlink(elsewhere.join("files/victim"), dave.join("cur").join(msg)).unwrap();
    symlink(elsewhere.join("files/victim"), dave.join("dovecot-uidlist")).unwrap();

    let r = restore_latest(&repo, &out);
    assert_counts_add_up(&r);
    let items: Vec<&str> = r.failures.iter().map(|f| f.item.as_str()).collect();
    let errors: Vec<&str> = r.failures.iter().map(|f| f.error.as_str()).collect();
    // Every entry of the elsewhere tree is as it was.
    assert_eq!(
        std::fs::read_dir(elsewhere.join("domain")).unwrap().count(),
        0
    );
    assert_eq!(std::fs::read_dir(elsewhere.join("cur")).unwrap().count(), 0);
    assert_eq!(
        std::fs::read(elsewhere.join("files/victim")).unwrap(),
        b"precious"
    );
    for who in ["bob@example.org", "carol@example.org"] {
        assert!(
            r.failures.iter().any(|f| f.item == format!("account {who}")
                && f.error.contains("example.org")
                && f.error.contains("symbolic link")),
            "{items:?} {errors:?}"
        );
    }
    assert!(
        r.failures.iter().any(|f| f.item == "dave@other.net: Sent"
            && f.error.contains(".Sent/cur")
            && f.error.contains("symbolic link")),
        "{items:?} {errors:?}"
    );
    assert!(items.iter().any(|i| i.contains(msg)), "{items:?}");
    assert!(
        items.iter().any(|i| i.ends_with("dovecot-uidlist")),
        "{items:?}"
    );
    // bob's 28, carol's 23, and dave's Sent message and linked message failed;
    // dave's other messages are there.
    assert_eq!(r.items_failed, 28 + 23 + 2, "{r:?}");
    assert_eq!(r.items_restored, r.items_total - r.items_failed);
    assert!(dave
        .join(".Archive.2023/cur/1600000000.M2P3.mail:2,Sa")
        .is_file());
}

/// Issue 10, item 17: a folder whose Maildir name is too long for the file system is
/// reported by name and the rest of the account restores.
#[test]
fn an_overlong_folder_name_costs_that_folder_only() {
    use mailvault_core::repo::format::BlobKind;
    use mailvault_core::repo::tree::{self, AccountTree, RootTree};
    use mailvault_core::repo::writer::BlobSaver;
    let t = tempfile::tempdir().unwrap();
    let src = t.path().join("vmail");
    small_store(&src);
    let mut repo = init_repo(&t.path().join("repo"));
    backup(
        &mut repo,
        &backup_opts(&src, vec!["dave@other.net".into()]),
        &NoProgress,
    )
    .unwrap();
    // A copy of the snapshot whose Sent folder is `x` * 300 (as an IMAP backup may give).
    let mut snap = repo.find_snapshot("latest").unwrap();
    let mut root: RootTree = repo.read_tree(&snap.root).unwrap();
    let mut acc: AccountTree = repo.read_tree(&root.accounts[0].tree).unwrap();
    let long = "x".repeat(300);
    let sent = acc.folders.iter_mut().find(|f| f.name == "Sent").unwrap();
    sent.name = long.clone();
    sent.dir = format!(".{long}").into_bytes();
    let saver = BlobSaver::new(&repo, repo.config().compression);
    root.accounts[0].tree = saver.save(BlobKind::Tree, &tree::encode(&acc)).unwrap();
    snap.root = saver.save(BlobKind::Tree, &tree::encode(&root)).unwrap();
    saver.finish().unwrap();
    snap.time += 1;
    repo.save_snapshot(&snap).unwrap();
    let repo = open_repo(&t.path().join("repo"));
    let out = t.path().join("restored");
    let r = restore_latest(&repo, &out);
    assert_counts_add_up(&r);
    assert_eq!(r.items_failed, 1, "{:?}", r.failures);
    assert_eq!(r.failures.len(), 1, "{:?}", r.failures);
    assert_eq!(r.failures[0].item, format!("dave@other.net: {long}"));
    assert!(r.failures[0].error.contains("too long"), "{:?}", r.failures);
    assert_eq!(r.items_restored, r.items_total - 1);
    let md = out.join("other.net/dave/Maildir");
    assert!(md
        .join(".Archive.2023/cur/1600000000.M2P3.mail:2,Sa")
        .is_file());
}

/// Issue 10, item 7: messages that fail count once each, files that fail are listed but
/// not counted as messages: total = restored + already there + failed.
#[test]
fn restore_counts_add_up_when_files_fail_too() {
    let t = tempfile::tempdir().unwrap();
    let repo = backed_up_small_store(t.path());
    let out = t.path().join("restored");
    let first = restore_latest(&repo, &out);
    assert!(first.failures.is_empty());
    // Every file of the target now differs from the snapshot.
    for (rel, _) in tree_snapshot(&out) {
        let p = out.join(std::ffi::OsStr::from_bytes(&rel));
        let mut data = std::fs::read(&p).unwrap();
        data.push(b'!');
        std::fs::write(&p, data).unwrap();
    }
    let r = restore_latest(&repo, &out);
    assert_counts_add_up(&r);
    assert_eq!(r.items_failed, r.items_total);
    assert!(
        r.failures.len() as u64 > r.items_total,
        "files are listed too"
    );
}

/// Issue 10, item 3: `--message` creates only the folder of the message, with the
/// `dovecot-keywords` that gives its keyword letters meaning; an unknown key creates
/// nothing; into a folder with its own keywords, the letters are mapped to its letters.
#[test]
fn single_messages_bring_their_keywords_and_nothing_else() {
    let t = tempfile::tempdir().unwrap();
    let repo = backed_up_small_store(t.path());
    let opts = |target: &std::path::Path, key: &str| RestoreOptions {
        select: Selection {
            snapshot: "latest".into(),
            accounts: vec!["bob@example.org".into()],
            messages: vec![key.into()],
            ..Default::default()
        },
        target: target.to_path_buf(),
        jobs: 2,
        ..Default::default()
    };
    let key = "1600000000.M0P3.mail";
    // An unknown key: an error naming it, nothing created.
    let none = t.path().join("none");
    let err = mailvault_core::ops::restore::restore(&repo, &opts(&none, "nope.M1"), &NoProgress)
        .unwrap_err()
        .to_string();
    assert!(err.contains("nope.M1"), "{err}");
    assert!(!none.exists());

    let out = t.path().join("one");
    let r = restore_with(&repo, opts(&out, key));
    assert!(r.failures.is_empty(), "{:?}", r.failures);
    assert_eq!((r.items_total, r.items_restored, r.folders), (1, 1, 1));
    let md = out.join("example.org/bob/Maildir");
    let mut names: Vec<String> = tree_snapshot(&out)
        .keys()
        .map(|k| String::from_utf8_lossy(k).to_string())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "example.org/bob/Maildir/.Archive.2023/cur/1600000000.M0P3.mail:2,Sa",
            "example.org/bob/Maildir/.Archive.2023/dovecot-keywords",
            "example.org/bob/Maildir/.Archive.2023/maildirfolder",
        ]
    );
    assert!(!md.join("cur").exists() && !md.join(".Sent").exists());

    // A target folder whose letter `a` is another keyword: `$Junk` gets the next letter.
    let other = t.path().join("other");
    let arch = other.join("example.org/bob/Maildir/.Archive.2023");
    for s in ["cur", "new", "tmp"] {
        std::fs::create_dir_all(arch.join(s)).unwrap();
    }
    std::fs::write(arch.join("dovecot-keywords"), b"0 $Label1\n").unwrap();
    let r = restore_with(&repo, opts(&other, key));
    assert!(r.failures.is_empty(), "{:?}", r.failures);
    assert!(arch.join("cur/1600000000.M0P3.mail:2,Sb").is_file());
    assert_eq!(
        std::fs::read(arch.join("dovecot-keywords")).unwrap(),
        b"0 $Label1\n1 $Junk\n"
    );
}

/// Issue 10, item 21: messages renamed (flag changes, `new/` to `cur/`) all through a
/// backup are all in its snapshot, run after run.
#[test]
fn messages_renamed_during_backups_are_never_dropped() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let t = tempfile::tempdir().unwrap();
    let md = t.path().join("Maildir");
    const N: usize = 3000;
    for i in 0..N {
        let sub = if i % 2 == 0 { "cur" } else { "new" };
        let name = if sub == "cur" {
            format!("{i}.M1P1.h:2,")
        } else {
            format!("{i}.M1P1.h")
        };
        put_msg(
            &md,
            "",
            sub,
            &name,
            format!("Subject: {i}\n\n{i}\n").as_bytes(),
            1_700_000_000,
        );
    }
    let mut repo = init_repo(&t.path().join("repo"));
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            // Rename every message over and over: flags toggled in cur/, new/ moved on.
            let mut round = 0u64;
            while !stop.load(Ordering::Relaxed) {
                round += 1;
                for sub in ["new", "cur"] {
                    for ent in std::fs::read_dir(md.join(sub)).unwrap().flatten() {
                        let name = ent.file_name().to_string_lossy().to_string();
                        let key = name.split(":2,").next().unwrap().to_string();
                        let flags = if round.is_multiple_of(2) { "S" } else { "" };
                        let _ = std::fs::rename(
                            ent.path(),
                            md.join("cur").join(format!("{key}:2,{flags}")),
                        );
                    }
                }
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
        });
        // Stops the renaming thread however this ends (a failed assertion included).
        struct Stop<'a>(&'a AtomicBool);
        impl Drop for Stop<'_> {
            fn drop(&mut self) {
                self.0.store(true, Ordering::Relaxed);
            }
        }
        let _stop = Stop(&stop);
        for run in 0..5u32 {
            let mut o = backup_opts(&md, vec!["bob".into()]);
            o.run.force = run.is_multiple_of(2);
            let rep = backup(&mut repo, &o, &NoProgress).unwrap();
            assert!(rep.failures.is_empty(), "run {run}: {:?}", rep.failures);
            assert_eq!(rep.items_total, N as u64, "run {run}: {rep:?}");
        }
    });
}
