//! Issue 31, Dovecot as the judge of shared folders: a Dovecot with the acl plugin (vfile
//! ACL files, a shared namespace, the shared-mailbox dictionary as a file in the mail
//! root) where alice shares `Team` with bob (read) and carol (read, write, insert,
//! delete) and carol shares `Projects` with alice; the store is backed up as root and
//! restored into an empty directory; a Dovecot serving the restored store shows each user
//! the same folders (the shared namespace included), the same MYRIGHTS and the same
//! GETACL, read by Python's imaplib.
//!
//! Fails (does not skip) without Dovecot unless MAILVAULT_SKIP_DOVECOT=1.
#![allow(clippy::unwrap_used)]

mod common;
mod judge;

use judge::{
    acl_judge, dovecot, empty_mail_root, imap_backup, imap_restore, maildir_round_trip, Env,
};
use mailvault_imap::testing::DovecotServer;
use std::path::Path;
use std::process::Command;

const USERS: [&str; 3] = ["alice@example.org", "bob@example.org", "carol@example.org"];

/// The configuration for ACLs: vfile files, a shared namespace, and the shared-mailbox
/// dictionary as a file in `mail_root`. A master user acts with the rights of the user it
/// logs in as (`acl_user`), as an IMAP restore through the admin needs: by default
/// Dovecot checks the master user's own rights, and it has none.
fn acl_config(mail_root: &Path) -> String {
    let m = mail_root.display();
    format!(
        "mail_plugins = $mail_plugins acl\n\
         protocol imap {{\n  mail_plugins = $mail_plugins imap_acl\n}}\n\
         plugin {{\n  acl = vfile\n  acl_user = %u\n  acl_shared_dict = file:{m}/shared-mailboxes\n}}\n\
         namespace shared {{\n  type = shared\n  separator = /\n  prefix = shared/%%u/\n\
         \x20 location = maildir:{m}/%%d/%%n/Maildir:INDEXPVT=~/shared/%%u\n\
         \x20 subscriptions = no\n  list = children\n}}\n"
    )
}

/// What each user sees: folders, MYRIGHTS, GETACL.
fn rights(server: &DovecotServer) -> Vec<String> {
    USERS
        .iter()
        .map(|u| {
            format!(
                "{u}: {}",
                acl_judge(server.port(), &["rights", "--account", u])
            )
        })
        .collect()
}

/// A Dovecot with ACLs where alice shares `Team` and `Team/Plans` with bob and carol,
/// and carol shares `Projects` with alice: the server and what each user sees.
fn source_with_shares(e: &Env) -> Option<(DovecotServer, Vec<String>)> {
    let src_root = empty_mail_root(e, "vmail");
    let src = dovecot(Some(src_root.clone()), acl_config(&src_root))?;
    for u in USERS {
        // Each user's Maildir exists before anyone shares with them.
        src.deliver(u, None, b"Subject: hello\r\n\r\nhello\r\n")
            .unwrap();
    }
    let (alice, bob, carol) = (USERS[0], USERS[1], USERS[2]);
    acl_judge(
        src.port(),
        &["share", "--account", alice, "--folder", "Team"],
    );
    let grants = [format!("{bob}=lr"), format!("{carol}=lrwstipe")];
    let mut args = vec!["share", "--account", alice, "--folder", "Team/Plans"];
    for g in &grants {
        args.extend(["--grant", g]);
    }
    acl_judge(src.port(), &args);
    let g = format!("{alice}=lrs");
    acl_judge(
        src.port(),
        &[
            "share",
            "--account",
            carol,
            "--folder",
            "Projects",
            "--grant",
            &g,
        ],
    );
    let before = rights(&src);
    assert!(
        before[1].contains("shared/alice@example.org/Team/Plans"),
        "bob sees alice's folder: {before:?}"
    );
    Some((src, before))
}

#[test]
fn dovecot_judge_shared_folders_and_rights_are_restored() {
    let e = Env::new();
    let Some((src, before)) = source_with_shares(&e) else {
        return;
    };
    let src_root = src.mail_root();
    drop(src);

    // The dictionary is a file in the store's root here: it comes back with the whole
    // snapshot, so the shared namespace lists alice's folder with no `acl recalc`.
    let target = maildir_round_trip(&e, &src_root, "restored");
    assert!(target.join("shared-mailboxes").is_file());
    let served = dovecot(Some(target.clone()), acl_config(&target)).unwrap();
    assert_eq!(rights(&served), before);
}

/// The shared-mailbox dictionary is Dovecot's index of the ACL files (kept outside the
/// store on most servers: /var/lib/dovecot/db; an IMAP backup has none): rebuilt from the
/// restored ones, as docs/imap.md says to after a restore into a store.
fn recalc(served: &DovecotServer) {
    for u in USERS {
        let conf = served.root().join("dovecot.conf");
        let o = Command::new("doveadm")
            .arg("-c")
            .arg(&conf)
            .args(["acl", "recalc", "-u", u])
            .output()
            .unwrap();
        assert!(o.status.success(), "doveadm acl recalc -u {u}: {o:?}");
    }
}

/// Between formats: the store's `dovecot-acl` files restored over IMAP into an empty
/// Dovecot become SETACLs in the restore's third phase; each user then sees the same
/// folders, shared namespace included, the same MYRIGHTS and GETACL (Dovecot keeps its
/// shared-mailbox dictionary itself when rights are set over IMAP); a second restore
/// changes nothing.
#[test]
fn dovecot_judge_shared_folders_are_restored_over_imap() {
    let e = Env::new();
    let Some((src, before)) = source_with_shares(&e) else {
        return;
    };
    e.ok(&["init"]);
    e.ok(&["backup", &format!("maildir:{}", src.mail_root().display())]);
    drop(src);

    let root = empty_mail_root(&e, "empty");
    let to = dovecot(Some(root.clone()), acl_config(&root)).unwrap();
    for round in ["first", "second"] {
        let (code, out, err) = imap_restore(&e, &to, &["--sieve-port", "0"]);
        assert_eq!(code, Some(0), "{round} restore: {out}{err}");
        assert!(
            out.contains("3 ACL entries set on 2 folders"),
            "{round} restore's third phase: {out}"
        );
        assert_eq!(rights(&to), before, "after the {round} restore");
    }
}

/// An ACL entry for a user the target server does not have, on Dovecot: its user
/// database has alice alone (a passwd-file). Restoring alice, the entries of her `Team`
/// for bob and carol are each a failure of its own, not set; her mail is restored; exit
/// 1. GETACL shows neither.
#[test]
fn dovecot_judge_an_acl_entry_for_no_user_is_reported() {
    let e = Env::new();
    let Some((src, _)) = source_with_shares(&e) else {
        return;
    };
    e.ok(&["init"]);
    e.ok(&["backup", &format!("maildir:{}", src.mail_root().display())]);
    drop(src);

    let alice = USERS[0];
    let root = empty_mail_root(&e, "alice-only");
    let to = judge::dovecot_of(Some(root.clone()), acl_config(&root), &[alice]).unwrap();
    let (code, out, err) = imap_restore(&e, &to, &["--sieve-port", "0", "--account", alice]);
    let text = format!("{out}{err}");
    assert_eq!(code, Some(1), "{text}");
    for u in &USERS[1..] {
        let why = format!("ACL {u}: the target server has no user");
        assert_eq!(text.matches(&why).count(), 1, "{u}: {text}");
    }
    assert!(out.contains("0 failed"), "alice's mail: {out}");
    let acl = acl_judge(to.port(), &["rights", "--account", alice]);
    assert!(!acl.contains("bob@") && !acl.contains("carol@"), "{acl}");
}

/// An IMAP backup keeps each folder's ACL (GETACL) as its `dovecot-acl` file, the same
/// form a Maildir store has: restored over IMAP into an empty Dovecot, and into an empty
/// store a Dovecot then serves (its `dovecot-acl` files written), each user sees the
/// same folders, MYRIGHTS and GETACL.
/// Folders of other users' shared namespace are not the account's and are not taken.
#[test]
fn dovecot_judge_shared_folders_are_backed_up_over_imap() {
    let e = Env::new();
    let Some((src, before)) = source_with_shares(&e) else {
        return;
    };
    e.ok(&["init"]);
    imap_backup(&e, &src, &USERS, &["--sieve-port", "0"]);
    drop(src);

    let root = empty_mail_root(&e, "empty");
    let to = dovecot(Some(root.clone()), acl_config(&root)).unwrap();
    let (code, out, err) = imap_restore(&e, &to, &["--sieve-port", "0"]);
    assert_eq!(code, Some(0), "{out}{err}");
    // The owner's default entry, which GETACL lists too, is not set.
    assert!(out.contains("3 ACL entries set on 2 folders"), "{out}");
    assert_eq!(rights(&to), before, "restored over IMAP");

    let target = empty_mail_root(&e, "restored");
    let mut args = vec![
        "restore".to_string(),
        "latest".into(),
        "--target".into(),
        format!("maildir:{}", target.display()),
    ];
    if judge::is_root() {
        args.extend(["--chown".into(), format!("{0}:{0}", judge::MAIL_USER)]);
    }
    e.ok(&args.iter().map(String::as_str).collect::<Vec<_>>());
    let served = dovecot(Some(target.clone()), acl_config(&target)).unwrap();
    recalc(&served);
    assert_eq!(rights(&served), before, "restored into a store");
}

/// `ls` shows a folder's ACL; `--part acls` puts ACLs back alone, into a store and over
/// IMAP. A migration: `--map-user` restores bob as dave. Into a store, dave gets his own place
/// (his home's scripts with it) and alice's `dovecot-acl` names dave; over IMAP into an
/// empty Dovecot, dave sees alice's folder with bob's rights, and bob has nothing. Two
/// accounts are never merged into one.
#[test]
fn dovecot_judge_map_user_renames_accounts_and_acl_entries() {
    let e = Env::new();
    let root = judge::store_with_shares_and_filters(&e);
    e.ok(&["init"]);
    e.ok(&["backup", &format!("maildir:{}", root.display())]);
    // `ls` shows who else may do what in a folder.
    let ls = e.ok(&["ls", "latest", "--account", "alice@example.org"]);
    let plans = ls.lines().skip_while(|l| !l.contains("Team/Plans")).nth(1);
    assert_eq!(
        plans.map(str::trim),
        Some("shared: bob@example.org lr, carol@example.org lrwstipe, owner lrwstipekxa"),
        "{ls}"
    );
    let json = e.ok(&["ls", "latest", "--account", "alice@example.org", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    let plans = (v["items"].as_array().unwrap().iter()).find(|f| f["name"] == "Team/Plans");
    assert_eq!(
        plans.map(|f| f["acl"][0].clone()),
        Some(serde_json::json!({"identifier": "bob@example.org", "rights": "lr"})),
        "{json}"
    );
    let map = ["--map-user", "bob@example.org=dave@example.org"];
    let target = e.path("migrated");
    let to = format!("maildir:{}", target.display());
    let mut args = vec!["restore", "latest", "--target", &to];
    args.extend(map);
    e.ok(&args);
    let acl = target.join("example.org/alice/Maildir/.Team.Plans/dovecot-acl");
    assert_eq!(
        std::fs::read_to_string(acl).unwrap(),
        "user=dave@example.org lr\nuser=carol@example.org lrwstipe\nowner lrwstipekxa\n"
    );
    assert!(target.join("example.org/dave/Maildir/cur").is_dir());
    assert!(target.join("example.org/dave/sieve/rules.sieve").is_file());
    assert!(!target.join("example.org/bob").exists());
    // `--part acls` puts a lost ACL back, and nothing else: a message deleted since stays so.
    let acl = target.join("example.org/alice/Maildir/.Team.Plans/dovecot-acl");
    let want = std::fs::read(&acl).unwrap();
    std::fs::remove_file(&acl).unwrap();
    let cur = target.join("example.org/alice/Maildir/cur");
    for m in std::fs::read_dir(&cur).unwrap() {
        std::fs::remove_file(m.unwrap().path()).unwrap();
    }
    let mut args = vec!["restore", "latest", "--target", &to, "--part", "acls"];
    args.extend(map);
    e.ok(&args);
    assert!(std::fs::read(&acl).unwrap() == want, "the ACL is back");
    assert_eq!(
        std::fs::read_dir(&cur).unwrap().count(),
        0,
        "no message restored"
    );
    let merged = e.expect_output(
        2,
        &[
            "restore",
            "latest",
            "--target",
            &to,
            "--map-user",
            "bob@example.org=x@example.org",
            "--map-user",
            "carol@example.org=x@example.org",
        ],
    );
    let err = String::from_utf8_lossy(&merged.stderr);
    assert!(err.contains("never merged"), "{err}");
    let onto = e.expect(
        2,
        &[
            "restore",
            "latest",
            "--target",
            &to,
            "--map-user",
            "bob@example.org=carol@example.org",
        ],
    );
    assert!(onto.contains("never merged"), "{onto}");

    let empty = empty_mail_root(&e, "empty");
    let Some(server) = dovecot(Some(empty.clone()), acl_config(&empty)) else {
        return;
    };
    let mut args = vec!["--part", "mail"];
    args.extend(map);
    let (code, out, err) = imap_restore(&e, &server, &args);
    assert_eq!(code, Some(0), "{out}{err}");
    let dave = acl_judge(server.port(), &["rights", "--account", "dave@example.org"]);
    assert!(
        dave.contains(
            "\"shared/alice@example.org/Team/Plans\": {\"acl\": \"NO\", \"myrights\": \"lr\"}"
        ),
        "{dave}"
    );
    let bob = acl_judge(server.port(), &["rights", "--account", "bob@example.org"]);
    assert!(!bob.contains("Team/Plans"), "{bob}");

    // `--part acls` into an empty server: the shares alone (their folders made, no mail).
    let empty = empty_mail_root(&e, "empty2");
    let server = dovecot(Some(empty.clone()), acl_config(&empty)).unwrap();
    let (code, out, err) = imap_restore(&e, &server, &["--part", "acls"]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(
        out.contains("0 appended") && out.contains("3 ACL entries set on 1 folders"),
        "{out}"
    );
    let bob = acl_judge(server.port(), &["rights", "--account", "bob@example.org"]);
    assert!(
        bob.contains(
            "\"shared/alice@example.org/Team/Plans\": {\"acl\": \"NO\", \"myrights\": \"lr\"}"
        ),
        "{bob}"
    );
}
