//! Issue 31, Dovecot as the judge of an account's sieve filters: a Dovecot with Pigeonhole
//! (the LDA's sieve plugin, ManageSieve) files a list message by bob's active script; his
//! store is backed up as root and restored into an empty directory; a second Dovecot
//! serving the restored store lists the same scripts over ManageSieve, the same one
//! active, and files the next list message by the restored rule. Compiled scripts
//! (`*.svbin`) are not restored: Dovecot compiles them again.
//!
//! Fails (does not skip) without Dovecot unless MAILVAULT_SKIP_DOVECOT=1.
#![allow(clippy::unwrap_used)]

mod common;
mod judge;

use judge::{
    chown_tree, dovecot, imap_backup, imap_restore, is_root, list_scripts, mail_owner,
    maildir_round_trip, Env,
};
use mailvault_imap::testing::DovecotServer;
use std::fs;
use std::os::unix::fs::symlink;
use std::path::Path;

const BOB: &str = "bob@example.org";
const RULES: &str = "require [\"fileinto\", \"mailbox\"];\n\
                     if header :contains \"subject\" \"[list]\" { fileinto :create \"Lists\"; }\n";
const VACATION: &str = "require \"vacation\";\nvacation :days 7 \"Away until Monday.\";\n";

/// The configuration for sieve: the LDA's plugin, ManageSieve on `sieve_port`.
fn sieve_config(sieve_port: u16) -> String {
    let mut extra = format!(
        "protocols = imap sieve\n\
         protocol lda {{\n  mail_plugins = $mail_plugins sieve\n}}\n\
         plugin {{\n  sieve = file:~/sieve;active=~/.dovecot.sieve\n}}\n\
         service managesieve-login {{\n  inet_listener sieve {{\n    address = 127.0.0.1\n    port = {sieve_port}\n  }}\n"
    );
    if !is_root() {
        extra.push_str("  chroot =\n");
    }
    extra.push_str("}\n");
    extra
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The messages Dovecot filed into bob's `Lists` folder.
fn filed_into_lists(mail_root: &Path) -> usize {
    let lists = mail_root.join("example.org/bob/Maildir/.Lists");
    ["new", "cur"]
        .iter()
        .map(|s| fs::read_dir(lists.join(s)).map_or(0, |d| d.count()))
        .sum()
}

fn list_message(n: u32) -> Vec<u8> {
    format!(
        "From: list@example.net\r\nTo: {BOB}\r\nSubject: [list] issue {n}\r\n\
         Message-ID: <list-{n}@example.net>\r\n\r\nbody {n}\r\n"
    )
    .into_bytes()
}

/// A Dovecot (ManageSieve on `port`) where bob has two scripts, `rules` active, which
/// filed a list message: the server, and the scripts as LISTSCRIPTS shows them.
fn source_with_scripts(port: u16) -> Option<(DovecotServer, Vec<(String, bool)>)> {
    let src = dovecot(None, sieve_config(port))?;
    // bob's first delivery makes his home and Maildir; then his scripts, one active.
    src.deliver(BOB, None, b"Subject: hello\r\n\r\nfirst\r\n")
        .unwrap();
    let home = src.mail_root().join("example.org/bob");
    fs::create_dir_all(home.join("sieve")).unwrap();
    fs::write(home.join("sieve/rules.sieve"), RULES).unwrap();
    fs::write(home.join("sieve/vacation.sieve"), VACATION).unwrap();
    symlink("sieve/rules.sieve", home.join(".dovecot.sieve")).unwrap();
    chown_tree(&home, mail_owner());
    src.deliver(BOB, None, &list_message(1)).unwrap();
    assert_eq!(
        filed_into_lists(&src.mail_root()),
        1,
        "the source's rule files it"
    );
    let want = vec![("rules".to_string(), true), ("vacation".to_string(), false)];
    assert_eq!(list_scripts(port, BOB, src.password()), want);
    assert!(
        home.join(".dovecot.svbin").exists(),
        "Dovecot compiled the active script"
    );
    Some((src, want))
}

#[test]
fn dovecot_judge_sieve_scripts_are_restored_and_file_mail() {
    let port = free_port();
    let Some((src, want)) = source_with_scripts(port) else {
        return;
    };

    let e = Env::new();
    let target = maildir_round_trip(&e, &src.mail_root(), "restored");
    let back = target.join("example.org/bob");
    assert_eq!(
        fs::read_link(back.join(".dovecot.sieve")).unwrap(),
        Path::new("sieve/rules.sieve")
    );
    for f in [".dovecot.svbin", "sieve/rules.svbin"] {
        assert!(!back.join(f).exists(), "compiled scripts are left out: {f}");
    }

    let port = free_port();
    let served = dovecot(Some(target.clone()), sieve_config(port)).unwrap();
    assert_eq!(
        list_scripts(port, BOB, served.password()),
        want,
        "the restored store's scripts, the same one active"
    );
    served.deliver(BOB, None, &list_message(2)).unwrap();
    assert_eq!(
        filed_into_lists(&target),
        2,
        "the restored rule files the next list message"
    );
}

/// Between formats: the Maildir store's scripts restored over IMAP into an empty Dovecot
/// go in by ManageSieve (PUTSCRIPT, SETACTIVE), in the restore's third phase; that
/// server files the next list message by the restored rule; a second restore changes
/// nothing; a script bob deleted is put back by `undelete` (not made active), and one he
/// has changed on the server since is kept, a conflict; `--part home` puts the scripts
/// alone into another empty server; with ManageSieve off, the scripts are reported as
/// left and the exit is 1.
#[test]
fn dovecot_judge_sieve_scripts_are_restored_over_managesieve() {
    let port = free_port();
    let Some((src, want)) = source_with_scripts(port) else {
        return;
    };
    let e = Env::new();
    e.ok(&["init"]);
    let store = format!("maildir:{}", src.mail_root().display());
    e.ok(&["backup", &store]);

    let sieve = free_port();
    let to = dovecot(None, sieve_config(sieve)).unwrap();
    let port = sieve.to_string();
    let (code, out, err) = imap_restore(&e, &to, &["--sieve-port", &port]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(
        out.contains("2 sieve scripts put (0 already there), 1 active scripts set"),
        "the third phase says what it did: {out}"
    );
    assert_eq!(list_scripts(sieve, BOB, to.password()), want);
    to.deliver(BOB, None, &list_message(2)).unwrap();
    let lists = to.mail_root().join("example.org/bob/Maildir/.Lists");
    let filed: usize = ["new", "cur"]
        .iter()
        .map(|s| fs::read_dir(lists.join(s)).map_or(0, |d| d.count()))
        .sum();
    assert_eq!(filed, 2, "the restored rule files the next list message");

    let (code, out, err) = imap_restore(&e, &to, &["--sieve-port", &port]);
    assert_eq!(code, Some(0), "a second restore: {out}{err}");
    assert!(
        out.contains("0 sieve scripts put (2 already there)"),
        "{out}"
    );
    assert_eq!(list_scripts(sieve, BOB, to.password()), want);

    // bob deletes his vacation script: gone from the store and from the live server.
    fs::remove_file(src.mail_root().join("example.org/bob/sieve/vacation.sieve")).unwrap();
    e.ok(&["backup", &store]);
    drop(src);
    fs::remove_file(to.mail_root().join("example.org/bob/sieve/vacation.sieve")).unwrap();
    assert_eq!(list_scripts(sieve, BOB, to.password()), want[..1]);
    let mut undelete = vec![
        "undelete".to_string(),
        "--account".into(),
        BOB.into(),
        "--target".into(),
        format!("imap://127.0.0.1:{}", to.port()),
        "--sieve-port".into(),
        port.clone(),
    ];
    undelete.extend(judge::master_args(&e, &to));
    let undelete: Vec<&str> = undelete.iter().map(String::as_str).collect();
    let (code, out, err) = e.run_text(&undelete);
    assert_eq!(code, Some(0), "undelete: {out}{err}");
    assert!(out.contains("~/sieve/vacation.sieve"), "listed: {out}");
    assert!(out.contains("1 sieve scripts put"), "{out}");
    assert_eq!(
        list_scripts(sieve, BOB, to.password()),
        want,
        "back, rules still active"
    );
    let vacation = to.mail_root().join("example.org/bob/sieve/vacation.sieve");
    assert_eq!(fs::read_to_string(&vacation).unwrap(), VACATION);
    fs::write(&vacation, "# bob's new vacation\n").unwrap();
    let (code, out, err) = e.run_text(&undelete);
    assert_eq!(code, Some(1), "a conflict: {out}{err}");
    assert!(
        (out.clone() + &err).contains("not overwritten"),
        "{out}{err}"
    );
    assert_eq!(
        fs::read_to_string(&vacation).unwrap(),
        "# bob's new vacation\n"
    );

    // The scripts alone: an empty server gets the latest snapshot's (bob's rules) and no
    // mail.
    let port = free_port();
    let fresh = dovecot(None, sieve_config(port)).unwrap();
    let p = port.to_string();
    let (code, out, err) = imap_restore(&e, &fresh, &["--sieve-port", &p, "--part", "home"]);
    assert_eq!(code, Some(0), "--part home: {out}{err}");
    assert!(out.contains("0 appended"), "no mail: {out}");
    assert_eq!(list_scripts(port, BOB, fresh.password()), want[..1]);

    let (code, out, err) = imap_restore(&e, &to, &["--sieve-port", "0"]);
    assert_eq!(code, Some(1), "{out}{err}");
    assert!(
        (out.clone() + &err).contains("1 script(s) not restored: ManageSieve is off"),
        "{out}{err}"
    );
}

/// An IMAP backup keeps the account's scripts (ManageSieve LISTSCRIPTS, GETSCRIPT) as a
/// Dovecot home: restored into an empty store, a Dovecot serving it lists the same
/// scripts, the same one active, and files by the restored rule; restored over IMAP into
/// another empty Dovecot, the same. A second backup finds them unchanged.
#[test]
fn dovecot_judge_sieve_scripts_are_backed_up_over_managesieve() {
    let port = free_port();
    let Some((src, want)) = source_with_scripts(port) else {
        return;
    };
    let e = Env::new();
    e.ok(&["init"]);
    let sieve = port.to_string();
    let out = imap_backup(&e, &src, &[BOB], &["--sieve-port", &sieve]);
    assert!(
        out.contains("3 files of the accounts' homes (sieve scripts): 3 new"),
        "{out}"
    );
    let again = imap_backup(&e, &src, &[BOB], &["--sieve-port", &sieve]);
    assert!(
        again.contains("3 files of the accounts' homes (sieve scripts): 0 new"),
        "nothing changed: {again}"
    );
    drop(src);

    let target = judge::empty_mail_root(&e, "restored");
    let mut args = vec![
        "restore".to_string(),
        "latest".into(),
        "--target".into(),
        format!("maildir:{}", target.display()),
    ];
    if is_root() {
        args.extend(["--chown".into(), format!("{0}:{0}", judge::MAIL_USER)]);
    }
    e.ok(&args.iter().map(String::as_str).collect::<Vec<_>>());
    let back = target.join("example.org/bob");
    assert_eq!(
        fs::read_link(back.join(".dovecot.sieve")).unwrap(),
        Path::new("sieve/rules.sieve")
    );
    let port = free_port();
    let served = dovecot(Some(target.clone()), sieve_config(port)).unwrap();
    assert_eq!(list_scripts(port, BOB, served.password()), want);
    served.deliver(BOB, None, &list_message(2)).unwrap();
    assert_eq!(filed_into_lists(&target), 2, "filed by the restored rule");

    let port = free_port();
    let to = dovecot(None, sieve_config(port)).unwrap();
    let p = port.to_string();
    let (code, out, err) = imap_restore(&e, &to, &["--sieve-port", &p]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert_eq!(list_scripts(port, BOB, to.password()), want);
}
