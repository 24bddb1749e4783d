//! The Cyrus harness itself: a throw-away Cyrus IMAP 3.6 starts, the admin creates an
//! account, which then logs in as itself and through the admin (`proxyservers`), and
//! folders use `/` with special use set on CREATE; a Cyrus that cannot stage a message
//! never runs the message's lines as commands.
//! Fails (does not skip) without Cyrus unless MAILVAULT_SKIP_CYRUS=1.
#![allow(clippy::unwrap_used)]

use mailvault_imap::testing::cyrus::CyrusServer;
use mailvault_imap::{AppendMsg, AppendOutcome, SpecialUse};

#[test]
fn cyrus_harness_serves_accounts_created_by_the_admin() {
    let Some(server) = CyrusServer::start_or_skip().expect("cyrus") else {
        return;
    };
    server.create_account("bob@example.org").unwrap();
    let mut s = server
        .client()
        .login(&server.admin("bob@example.org"))
        .unwrap();
    let created = s.create("Sent", Some(SpecialUse::Sent)).unwrap();
    assert!(created.special_use_set);
    s.create("Archive/2024", None).unwrap();
    s.logout().unwrap();
    let mut s = server
        .client()
        .login(&server.user("bob@example.org"))
        .unwrap();
    let names: Vec<String> = s.list().unwrap().into_iter().map(|f| f.name).collect();
    for want in ["INBOX", "Sent", "Archive/2024"] {
        assert!(names.iter().any(|n| n == want), "{want} in {names:?}");
    }
    s.logout().unwrap();
}

/// Cyrus stages a message before it reads its literal; when staging fails it answers
/// `NO System I/O error` and, for a LITERAL+ literal, reads the message's lines as
/// commands (`x1 CREATE Injected` would run). A file where the partition's `stage.`
/// directory goes makes staging fail. The session waits for `+` until one message is
/// stored, so every APPEND is refused, nothing runs, and the session stays in step;
/// once staging works the messages land (the later ones without waiting).
#[test]
fn message_text_never_runs_as_commands_when_cyrus_cannot_stage() {
    let Some(server) = CyrusServer::start_or_skip().expect("cyrus") else {
        return;
    };
    let acc = "stage@example.org";
    server.create_account(acc).unwrap();
    let stage = server.root().join("spool/stage.");
    std::fs::write(&stage, b"not a directory").unwrap();
    let data: Vec<Vec<u8>> = (0..4)
        .map(|i| format!("Subject: {i}\r\n\r\nx{i} CREATE Injected{i}\r\n").into_bytes())
        .collect();
    let msgs: Vec<AppendMsg<'_>> = data
        .iter()
        .map(|d| AppendMsg {
            flags: vec!["\\Seen".into()],
            internal_date: None,
            data: d,
        })
        .collect();
    let mut s = server.client().login(&server.admin(acc)).unwrap();
    let outcomes = s.append_batch("INBOX", &msgs).unwrap();
    for o in &outcomes {
        let AppendOutcome::Refused(r) = o else {
            panic!("{o:?}")
        };
        assert!(r.response.contains("System I/O error"), "{r:?}");
        assert!(r.is_unexplained(), "{r:?}");
    }
    assert!(!s.is_broken());
    let names = |s: &mut mailvault_imap::Session| -> Vec<String> {
        s.list().unwrap().into_iter().map(|f| f.name).collect()
    };
    let listed = names(&mut s);
    assert!(
        !listed.iter().any(|n| n.starts_with("Injected")),
        "{listed:?}"
    );

    std::fs::remove_file(&stage).unwrap();
    let outcomes = s.append_batch("INBOX", &msgs).unwrap();
    assert!(
        outcomes.iter().all(AppendOutcome::is_appended),
        "{outcomes:?}"
    );
    let listed = names(&mut s);
    assert!(
        !listed.iter().any(|n| n.starts_with("Injected")),
        "{listed:?}"
    );
    assert_eq!(s.examine("INBOX").unwrap().exists, 4);
    s.logout().unwrap();
}
