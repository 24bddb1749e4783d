//! The Cyrus harness itself: a throw-away Cyrus IMAP 3.6 starts, the admin creates an
//! account, which then logs in as itself and through the admin (`proxyservers`), and
//! folders use `/` with special use set on CREATE.
//! Fails (does not skip) without Cyrus unless MAILVAULT_SKIP_CYRUS=1.
#![allow(clippy::unwrap_used)]

use mailvault_imap::testing::cyrus::CyrusServer;
use mailvault_imap::SpecialUse;

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
