#![allow(clippy::unwrap_used)]
//! Issue 31: a Maildir store account's home beside its Maildir (Dovecot's sieve scripts,
//! the link to the active one, the duplicate-delivery database) is kept with the
//! account and comes back with it; compiled scripts are left out; a link out of the home
//! is reported, never made.

mod common;

use common::*;

use mailvault_core::ops::backup::BackupReport;
use mailvault_core::ops::restore::RestoreOptions;
use mailvault_core::report::NoProgress;
use mailvault_core::restore::Selection;
use std::fs;
use std::os::unix::fs::{symlink, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

const VACATION: &[u8] = b"require \"vacation\";\nvacation :days 7 \"Away until Monday.\";\n";
const RULES: &[u8] =
    b"require \"fileinto\";\nif header :contains \"subject\" \"[list]\" { fileinto \"Lists\"; }\n";

/// bob's home: two scripts, the active one linked, a compiled one of each (left out),
/// the LDA's duplicate database (mode 0600), an empty `sieve/tmp`.
fn bob_home(home: &Path) {
    let sieve = home.join("sieve");
    fs::create_dir_all(sieve.join("tmp")).unwrap();
    fs::write(sieve.join("vacation.sieve"), VACATION).unwrap();
    fs::write(sieve.join("rules.sieve"), RULES).unwrap();
    fs::write(sieve.join("rules.svbin"), b"compiled").unwrap();
    fs::write(home.join(".dovecot.svbin"), b"compiled").unwrap();
    fs::write(home.join(".dovecot.lda-dupes"), b"dupes db").unwrap();
    fs::set_permissions(
        home.join(".dovecot.lda-dupes"),
        fs::Permissions::from_mode(0o600),
    )
    .unwrap();
    symlink("sieve/vacation.sieve", home.join(".dovecot.sieve")).unwrap();
    for f in [
        "sieve/vacation.sieve",
        "sieve/rules.sieve",
        ".dovecot.lda-dupes",
    ] {
        set_mtime(&home.join(f), 1_650_000_000);
    }
}

/// The small store below `dir` (`dir/vmail`), bob's home made by `fill`, backed up once
/// into `dir/repo`: the store, bob's home, the backup's report.
fn backed_up_with_home(dir: &Path, fill: impl FnOnce(&Path)) -> (PathBuf, PathBuf, BackupReport) {
    let src = dir.join("vmail");
    small_store(&src);
    let home = src.join("example.org/bob");
    fill(&home);
    let mut repo = init_repo(&dir.join("repo"));
    let rep = maildir_backup(&mut repo, &src, vec![]);
    (src, home, rep)
}

#[test]
fn an_accounts_sieve_scripts_and_their_link_come_back_with_it() {
    let t = tempfile::tempdir().unwrap();
    let (src, home, rep) = backed_up_with_home(t.path(), bob_home);
    assert_eq!(rep.accounts, 3);
    // The home's files are not messages: 4 (two scripts, the link, the dupes database).
    assert_eq!((rep.home_files, rep.home_files_new), (4, 4));
    assert_eq!(rep.items_total, 3 * 23 + 5, "messages only");
    assert_eq!(rep.folders, 3 * 3 + 1, "mail folders only");

    let repo = open_repo(&t.path().join("repo"));
    let out = t.path().join("out");
    let r = restore_latest(&repo, &out);
    assert!(r.failures.is_empty(), "{:?}", r.failures);
    assert!(r.warnings.is_empty(), "{:?}", r.warnings);
    let back = out.join("example.org/bob");
    assert_eq!(
        fs::read(back.join("sieve/vacation.sieve")).unwrap(),
        VACATION
    );
    assert_eq!(fs::read(back.join("sieve/rules.sieve")).unwrap(), RULES);
    assert_eq!(
        fs::read_link(back.join(".dovecot.sieve")).unwrap(),
        Path::new("sieve/vacation.sieve"),
        "the active script is a link again, not a copy"
    );
    for f in [
        "sieve/vacation.sieve",
        "sieve/rules.sieve",
        ".dovecot.lda-dupes",
    ] {
        let (a, b) = (
            fs::metadata(home.join(f)).unwrap(),
            fs::metadata(back.join(f)).unwrap(),
        );
        assert_eq!((b.mtime(), b.mode()), (a.mtime(), a.mode()), "{f}");
    }
    assert!(back.join("sieve/tmp").is_dir());
    assert!(
        !back.join("sieve/rules.svbin").exists(),
        "compiled: left out"
    );
    assert!(!back.join(".dovecot.svbin").exists(), "compiled: left out");
    // The mail is as it was, and nothing of the home went into the Maildir.
    for user in ["bob", "carol"] {
        let md = format!("example.org/{user}/Maildir");
        assert_same_tree(&src.join(&md), &out.join(&md));
    }

    // Again into the same place: everything is there, nothing is reported.
    // Unchanged, the home's files are not read again.
    let mut repo2 = open_repo(&t.path().join("repo"));
    let rep = maildir_backup(&mut repo2, &src, vec![]);
    assert_eq!((rep.home_files, rep.home_files_new), (4, 0));
    assert_eq!(rep.items_new, 0);
    let again = restore_latest(&repo, &out);
    assert!(again.failures.is_empty(), "{:?}", again.failures);
    assert_eq!(again.files_restored, 0);

    // One folder, or another kind of target: no home (a warning for the target).
    let one = t.path().join("one");
    let r = restore_with(
        &repo,
        RestoreOptions {
            select: Selection {
                snapshot: "latest".into(),
                folders: vec!["INBOX".into()],
                ..Default::default()
            },
            target: one.clone(),
            jobs: 2,
            ..Default::default()
        },
    );
    assert!(r.failures.is_empty(), "{:?}", r.failures);
    assert!(!one.join("example.org/bob/sieve").exists());
    let mbox = t.path().join("mbox");
    let request = mailvault_core::restore::Request::Selection(Selection {
        snapshot: "latest".into(),
        ..Default::default()
    });
    let (r, _) = mailvault_core::ops::restore::run(&repo, request, &NoProgress, |_| {
        mailvault_core::dest::mbox::MboxTarget::open(&mbox, 2)
    })
    .unwrap();
    assert!(r.failures.is_empty(), "{:?}", r.failures);
    assert!(
        r.warnings
            .iter()
            .any(|w| w.starts_with("1 account(s) have home files")),
        "{:?}",
        r.warnings
    );
}

#[test]
fn a_link_out_of_the_home_is_reported_not_made() {
    let t = tempfile::tempdir().unwrap();
    backed_up_with_home(t.path(), |home| {
        fs::create_dir_all(home.join("sieve")).unwrap();
        fs::write(home.join("sieve/a.sieve"), VACATION).unwrap();
        symlink("/etc/passwd", home.join(".dovecot.sieve")).unwrap();
        symlink("../../other/secret", home.join("sieve/up.sieve")).unwrap();
    });
    let repo = open_repo(&t.path().join("repo"));
    let out = t.path().join("out");
    let r = restore_latest(&repo, &out);
    let back = out.join("example.org/bob");
    assert_eq!(fs::read(back.join("sieve/a.sieve")).unwrap(), VACATION);
    for link in [".dovecot.sieve", "sieve/up.sieve"] {
        assert!(
            fs::symlink_metadata(back.join(link)).is_err(),
            "{link} made"
        );
        assert!(
            (r.failures.iter()).any(|f| f.item.ends_with(link) && f.error.contains("out of")),
            "{link}: {:?}",
            r.failures
        );
    }
    assert_eq!(r.failures.len(), 2, "{:?}", r.failures);
}

/// A filter bob deleted is put back from last week's snapshot into the live store with
/// `--part home`: nothing of his mail is touched, the scripts he kept are left as they are;
/// `--part mail` brings no home. Prune keeps the home's blobs (both snapshots need
/// them), and `check --read-data` reads them.
#[test]
fn a_deleted_filter_is_put_back_alone_and_prune_keeps_homes() {
    use mailvault_core::ops::prune::{prune, PruneOptions};
    use mailvault_core::restore::Part;
    let t = tempfile::tempdir().unwrap();
    let (src, home, first) = backed_up_with_home(t.path(), bob_home);
    let first = first.snapshot;
    fs::remove_file(home.join("sieve/vacation.sieve")).unwrap();
    let md = home.join("Maildir");
    put_msg(
        &md,
        "",
        "new",
        "2.M2P2.new",
        b"Subject: new\n\nnew\n",
        1_700_000_100,
    );
    let mut repo = open_repo(&t.path().join("repo"));
    maildir_backup(&mut repo, &src, vec![]);
    let opts = PruneOptions {
        max_unused: 0.0,
        ..Default::default()
    };
    prune(&mut repo, &opts, &NoProgress).unwrap();
    let repo = open_repo(&t.path().join("repo"));
    let c = check_all(&repo);
    assert!(c.ok(), "{:?}", c.errors);

    let mail_before = tree_snapshot(&md);
    let part = |part, target: &Path| {
        restore_with(
            &repo,
            RestoreOptions {
                select: Selection {
                    snapshot: first[..12].to_string(),
                    accounts: vec!["bob@example.org".into()],
                    part,
                    ..Default::default()
                },
                target: target.to_path_buf(),
                jobs: 2,
                ..Default::default()
            },
        )
    };
    let r = part(Part::Home, &src);
    assert!(r.failures.is_empty(), "{:?}", r.failures);
    assert_eq!(
        fs::read(home.join("sieve/vacation.sieve")).unwrap(),
        VACATION
    );
    assert_eq!((r.items_total, r.items_restored), (0, 0), "no mail");
    assert_eq!(r.files_restored, 1, "only the deleted script");
    assert!(
        r.files_unchanged >= 3,
        "{} left as they are",
        r.files_unchanged
    );
    assert_eq!(tree_snapshot(&md), mail_before, "the mail is untouched");

    let mail_only = t.path().join("mail-only");
    let r = part(Part::Mail, &mail_only);
    assert!(r.failures.is_empty(), "{:?}", r.failures);
    assert!(r.items_restored > 0);
    assert!(!mail_only.join("example.org/bob/sieve").exists());
    assert!(mail_only.join("example.org/bob/Maildir/cur").is_dir());
}

/// `undelete` compares the home too: a script bob deleted (with the link that made it
/// active) is listed and put back into the live store, not the link; a script he edited
/// is not deleted; his mail is untouched; again, nothing is written; a script of that name
/// he has made since is a conflict, kept.
#[test]
fn undelete_puts_back_a_deleted_filter_not_its_link() {
    use mailvault_core::ops::undelete::{find_deleted, undelete, DeletedOptions, UndeleteOptions};
    let t = tempfile::tempdir().unwrap();
    let (src, home, _) = backed_up_with_home(t.path(), bob_home);
    fs::remove_file(home.join(".dovecot.sieve")).unwrap();
    fs::remove_file(home.join("sieve/vacation.sieve")).unwrap();
    fs::write(home.join("sieve/rules.sieve"), b"# edited\n").unwrap();
    let mut repo = open_repo(&t.path().join("repo"));
    maildir_backup(&mut repo, &src, vec![]);

    let find = DeletedOptions {
        account: "bob@example.org".into(),
        ..Default::default()
    };
    let d = find_deleted(&repo, &find).unwrap();
    let paths: Vec<&str> = d.files.iter().map(|f| f.path.as_str()).collect();
    assert_eq!(
        paths,
        ["~/sieve/vacation.sieve"],
        "not the link, not the edited one"
    );
    assert!(d.messages.is_empty());
    assert_eq!(d.files[0].size, VACATION.len() as u64);
    let inbox_only = DeletedOptions {
        folders: vec!["INBOX".into()],
        ..find.clone()
    };
    assert!(find_deleted(&repo, &inbox_only).unwrap().files.is_empty());
    let sieve_only = DeletedOptions {
        folders: vec!["~/sieve".into()],
        ..find.clone()
    };
    assert_eq!(find_deleted(&repo, &sieve_only).unwrap().files.len(), 1);

    let md = home.join("Maildir");
    let mail_before = tree_snapshot(&md);
    let opts = UndeleteOptions {
        find,
        ..Default::default()
    };
    let restore = RestoreOptions {
        target: src.clone(),
        jobs: 2,
        ..Default::default()
    };
    let r = undelete(&repo, &opts, &restore, &NoProgress).unwrap();
    let r = r.restore.expect("restored");
    assert!(r.failures.is_empty(), "{:?}", r.failures);
    assert_eq!((r.files_restored, r.items_total), (1, 0));
    let back = home.join("sieve/vacation.sieve");
    assert_eq!(fs::read(&back).unwrap(), VACATION);
    assert_eq!(fs::metadata(&back).unwrap().mtime(), 1_650_000_000);
    assert_eq!(
        fs::read(home.join("sieve/rules.sieve")).unwrap(),
        b"# edited\n"
    );
    assert!(
        fs::symlink_metadata(home.join(".dovecot.sieve")).is_err(),
        "not made active"
    );
    assert_eq!(tree_snapshot(&md), mail_before, "the mail is untouched");

    let again = undelete(&repo, &opts, &restore, &NoProgress).unwrap();
    let again = again.restore.unwrap();
    assert!(again.failures.is_empty(), "{:?}", again.failures);
    assert_eq!((again.files_restored, again.files_unchanged), (0, 1));

    fs::write(&back, b"# bob's new vacation\n").unwrap();
    let r = undelete(&repo, &opts, &restore, &NoProgress).unwrap();
    let r = r.restore.unwrap();
    assert_eq!(r.failures.len(), 1, "{:?}", r.failures);
    assert_eq!(fs::read(&back).unwrap(), b"# bob's new vacation\n", "kept");
}

/// The store's own files (Dovecot's shared-mailbox dictionary at its root, a file in a
/// domain's directory) are kept beside the accounts, nothing hidden, listed by
/// `ls --store`, not read again when unchanged; the whole snapshot brings them back
/// (bytes, mode, mtime), a partial restore or a renaming one does not, a target without
/// homes says so; a file already there with other bytes is kept and reported; prune keeps
/// them.
#[test]
fn the_stores_own_files_come_back_with_the_whole_snapshot_only() {
    use mailvault_core::ops::ls::store_files;
    use mailvault_core::ops::prune::{prune, PruneOptions};
    use mailvault_core::repo::tree::RootTree;
    const DICT: &[u8] = b"shared/shared-boxes/user/bob/alice@example.org\n1\n";
    let t = tempfile::tempdir().unwrap();
    let (src, _, rep) = backed_up_with_home(t.path(), |home| {
        let root = home.parent().unwrap().parent().unwrap();
        fs::write(root.join("shared-mailboxes"), DICT).unwrap();
        fs::set_permissions(
            root.join("shared-mailboxes"),
            fs::Permissions::from_mode(0o640),
        )
        .unwrap();
        set_mtime(&root.join("shared-mailboxes"), 1_650_000_000);
        fs::write(root.join(".lock"), b"").unwrap();
        fs::write(root.join("example.org/notes"), b"domain notes\n").unwrap();
        set_mtime(&root.join("example.org/notes"), 1_650_000_000);
        fs::write(root.join("example.org/.hidden"), b"").unwrap();
    });
    assert_eq!((rep.home_files, rep.home_files_new), (2, 2));
    assert!(rep.warnings.is_empty(), "{:?}", rep.warnings);
    let repo = open_repo(&t.path().join("repo"));
    let listed: Vec<(String, String)> = (store_files(&repo, "latest").unwrap().into_iter())
        .map(|f| (f.folder, f.name))
        .collect();
    assert_eq!(
        listed,
        [
            (".".into(), "shared-mailboxes".into()),
            ("example.org".into(), "notes".into())
        ]
    );
    let store_tree = |repo: &mailvault_core::repo::Repository| {
        let snap = repo.find_snapshot("latest").unwrap();
        repo.read_tree::<RootTree>(&snap.root).unwrap().store
    };
    let first = store_tree(&repo);
    assert!(first.is_some());
    // Unchanged: not read again, the same tree.
    let mut repo = open_repo(&t.path().join("repo"));
    let rep = maildir_backup(&mut repo, &src, vec![]);
    assert_eq!((rep.home_files, rep.home_files_new), (2, 0));
    assert_eq!(store_tree(&repo), first);
    prune(
        &mut repo,
        &PruneOptions {
            max_unused: 0.0,
            ..Default::default()
        },
        &NoProgress,
    )
    .unwrap();
    let repo = open_repo(&t.path().join("repo"));
    let c = check_all(&repo);
    assert!(c.ok(), "{:?}", c.errors);

    // The whole snapshot: back where they were, as they were; nothing hidden.
    let out = t.path().join("out");
    let r = restore_latest(&repo, &out);
    assert!(r.failures.is_empty(), "{:?}", r.failures);
    assert_eq!(fs::read(out.join("shared-mailboxes")).unwrap(), DICT);
    let m = fs::metadata(out.join("shared-mailboxes")).unwrap();
    assert_eq!((m.mode() & 0o7777, m.mtime()), (0o640, 1_650_000_000));
    assert_eq!(
        fs::read(out.join("example.org/notes")).unwrap(),
        b"domain notes\n"
    );
    assert!(!out.join(".lock").exists() && !out.join("example.org/.hidden").exists());
    // Changed since: kept, reported, never overwritten.
    fs::write(out.join("shared-mailboxes"), b"newer\n").unwrap();
    let r = restore_latest(&repo, &out);
    assert_eq!(fs::read(out.join("shared-mailboxes")).unwrap(), b"newer\n");
    assert!(
        (r.failures.iter())
            .any(|f| f.item.ends_with("shared-mailboxes") && f.error.contains("not overwritten")),
        "{:?}",
        r.failures
    );
    assert_eq!(r.failures.len(), 1, "{:?}", r.failures);

    // One account, or accounts renamed: not the store's files.
    let select = |sel: Selection, target: &Path| {
        restore_with(
            &repo,
            RestoreOptions {
                select: Selection {
                    snapshot: "latest".into(),
                    ..sel
                },
                target: target.to_path_buf(),
                jobs: 2,
                ..Default::default()
            },
        )
    };
    let one = t.path().join("one");
    let r = select(
        Selection {
            accounts: vec!["bob@example.org".into()],
            ..Default::default()
        },
        &one,
    );
    assert!(r.failures.is_empty() && r.warnings.is_empty(), "{r:?}");
    assert!(!one.join("shared-mailboxes").exists());
    let renamed = t.path().join("renamed");
    let r = select(
        Selection {
            map_users: vec![("bob@example.org".into(), "robert@example.org".into())],
            ..Default::default()
        },
        &renamed,
    );
    assert!(!renamed.join("shared-mailboxes").exists());
    assert!(
        (r.warnings.iter())
            .any(|w| w.starts_with("2 file(s) of the store's own") && w.contains("--map-user")),
        "{:?}",
        r.warnings
    );
    // A target without homes says what it left.
    let mbox = t.path().join("mbox");
    let request = mailvault_core::restore::Request::Selection(Selection {
        snapshot: "latest".into(),
        ..Default::default()
    });
    let (r, _) = mailvault_core::ops::restore::run(&repo, request, &NoProgress, |_| {
        mailvault_core::dest::mbox::MboxTarget::open(&mbox, 2)
    })
    .unwrap();
    assert!(
        (r.warnings.iter())
            .any(|w| w.starts_with("2 file(s) of the store's own")
                && w.contains("only a Maildir store")),
        "{:?}",
        r.warnings
    );
}
