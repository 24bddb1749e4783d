//! LIST-STATUS (RFC 5819) against a scripted peer: the LIST command
//! [`Session::list_with_status`] sends, and each folder's STATUS reply attached to its
//! folder, whatever the order the replies come in; a folder the server sent no STATUS
//! for (`\Noselect`, or one it failed) has none. (What Dovecot answers is tested in
//! `dovecot.rs`.)

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::time::Duration;

use mailvault_imap::{Client, ClientOptions, Endpoint, MailboxStatus, Session};

/// A peer that greets with `caps` (PREAUTH), then answers the n-th command line with the
/// untagged lines `untagged[n]` and the tagged OK, and hands back the command lines it
/// read.
fn peer(
    caps: &'static str,
    untagged: Vec<&'static str>,
) -> (u16, std::thread::JoinHandle<Vec<String>>) {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = l.local_addr().expect("addr").port();
    let t = std::thread::spawn(move || {
        let (s, _) = l.accept().expect("accept");
        let mut w = s.try_clone().expect("clone");
        w.write_all(format!("* PREAUTH [CAPABILITY {caps}] ready\r\n").as_bytes())
            .expect("greet");
        let mut r = BufReader::new(s);
        let mut seen = Vec::new();
        loop {
            let mut line = String::new();
            if r.read_line(&mut line).expect("read") == 0 {
                return seen;
            }
            let line = line.trim_end().to_string();
            let tag = line.split(' ').next().unwrap_or("").to_string();
            let lines = untagged.get(seen.len()).copied().unwrap_or("");
            let out = format!("{lines}{tag} OK done\r\n");
            w.write_all(out.as_bytes()).expect("answer");
            seen.push(line);
        }
    });
    (port, t)
}

fn session(port: u16) -> Session {
    let mut o =
        ClientOptions::new(Endpoint::parse(&format!("imap://127.0.0.1:{port}")).expect("url"));
    o.io_timeout = Duration::from_millis(2000);
    let mut s = Client::new(o).expect("client").connect().expect("connect");
    s.assume_delimiter(Some('/'));
    s
}

fn status(messages: u32, uidnext: u32, uidvalidity: u32, modseq: u64) -> MailboxStatus {
    MailboxStatus {
        messages: Some(messages),
        uidnext: Some(uidnext),
        uidvalidity: Some(uidvalidity),
        unseen: None,
        highestmodseq: Some(modseq),
    }
}

#[test]
fn statuses_come_with_the_listing_and_find_their_folders() {
    // STATUS before and after its LIST line; the INBOX spelled otherwise in each; none
    // for the \Noselect parent, nor for `Broken` (the server failed it); one for a
    // folder not listed, which is dropped.
    let replies = vec![
        "* STATUS \"Entw&APw-rfe\" (MESSAGES 2 UIDNEXT 9 UIDVALIDITY 77 HIGHESTMODSEQ 40)\r\n\
         * LIST (\\HasNoChildren \\Subscribed) \"/\" INBOX\r\n\
         * LIST (\\HasNoChildren \\Drafts) \"/\" \"Entw&APw-rfe\"\r\n\
         * LIST (\\Noselect \\HasChildren) \"/\" Archive\r\n\
         * LIST (\\HasNoChildren) \"/\" Archive/2024\r\n\
         * LIST (\\HasNoChildren) \"/\" Broken\r\n\
         * STATUS inbox (MESSAGES 5 UIDNEXT 6 UIDVALIDITY 77 HIGHESTMODSEQ 12)\r\n\
         * STATUS Archive/2024 (MESSAGES 0 UIDNEXT 1 UIDVALIDITY 78 HIGHESTMODSEQ 1)\r\n\
         * STATUS Gone (MESSAGES 1 UIDNEXT 2 UIDVALIDITY 79 HIGHESTMODSEQ 3)\r\n",
        "* LIST (\\HasNoChildren) \"/\" INBOX\r\n",
    ];
    let (port, t) = peer(
        "IMAP4rev1 LIST-EXTENDED LIST-STATUS SPECIAL-USE CONDSTORE",
        replies,
    );
    let mut s = session(port);
    let folders = s.list_with_status().unwrap_or_else(|e| panic!("list: {e}"));
    let got: Vec<(&str, Option<&MailboxStatus>)> = (folders.iter())
        .map(|f| (f.name.as_str(), f.status.as_ref()))
        .collect();
    assert_eq!(
        got,
        [
            ("INBOX", Some(&status(5, 6, 77, 12))),
            ("Entw\u{fc}rfe", Some(&status(2, 9, 77, 40))),
            ("Archive", None),
            ("Archive/2024", Some(&status(0, 1, 78, 1))),
            ("Broken", None),
        ]
    );
    assert!(folders[0].subscribed && !folders[2].selectable);
    // A plain listing asks no status, and has none.
    let folders = s.list().unwrap_or_else(|e| panic!("list: {e}"));
    assert_eq!(folders.len(), 1);
    assert_eq!(folders[0].status, None);
    drop(s);
    assert_eq!(
        t.join().expect("peer"),
        [
            "A1 LIST \"\" \"*\" RETURN (SUBSCRIBED SPECIAL-USE STATUS (MESSAGES UIDNEXT UIDVALIDITY HIGHESTMODSEQ))",
            "A2 LIST \"\" \"*\" RETURN (SUBSCRIBED SPECIAL-USE)",
        ]
    );
}

#[test]
fn without_list_status_no_status_is_asked() {
    let (port, t) = peer(
        "IMAP4rev1 LIST-EXTENDED CONDSTORE",
        vec!["* LIST (\\HasNoChildren) \"/\" INBOX\r\n"],
    );
    let mut s = session(port);
    let folders = s.list_with_status().unwrap_or_else(|e| panic!("list: {e}"));
    assert_eq!(folders.len(), 1);
    assert_eq!(folders[0].status, None);
    drop(s);
    assert_eq!(
        t.join().expect("peer"),
        ["A1 LIST \"\" \"*\" RETURN (SUBSCRIBED)"]
    );
}
