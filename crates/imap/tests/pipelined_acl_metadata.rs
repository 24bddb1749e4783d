//! GETACL and GETMETADATA of many folders pipelined (`get_acl_many`,
//! `get_metadata_many`) against a scripted peer that answers only once it has read every
//! command of a round: a client that waits for each answer before sending the next
//! command times out here. The peer answers the commands in reverse order, naming each
//! mailbox in another form than the command did (a literal, `inbox`, a quoted string
//! with escapes), so each folder's data is found by the mailbox it names; a folder the
//! server refuses (NO) gets its own error, the others their data. (What Dovecot answers
//! is tested in `dovecot.rs`, and the backup's use of it in mailvault-core's
//! `imap_beside_mail.rs`.)

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::time::Duration;

use mailvault_imap::{AclEntry, Client, ClientOptions, Endpoint, Error, Session};

/// A peer that greets (PREAUTH, ACL, METADATA), then for each entry of `rounds` reads
/// that many command lines and answers them in reverse order: for each, the untagged
/// lines and the completion `answer` gives for the command line, then its tag and that
/// completion. Hands back the command lines it read.
fn peer(
    rounds: Vec<usize>,
    answer: fn(&str) -> (String, &'static str),
) -> (u16, std::thread::JoinHandle<Vec<String>>) {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = l.local_addr().expect("addr").port();
    let t = std::thread::spawn(move || {
        let (s, _) = l.accept().expect("accept");
        let mut w = s.try_clone().expect("clone");
        w.write_all(b"* PREAUTH [CAPABILITY IMAP4rev1 LITERAL+ ACL METADATA] ready\r\n")
            .expect("greet");
        let mut r = BufReader::new(s);
        let mut seen = Vec::new();
        for n in rounds {
            let mut lines = Vec::new();
            for _ in 0..n {
                let mut line = String::new();
                if r.read_line(&mut line).expect("read") == 0 {
                    return seen;
                }
                lines.push(line.trim_end().to_string());
            }
            let mut out = String::new();
            for line in lines.iter().rev() {
                let tag = line.split(' ').next().unwrap_or("");
                let (untagged, status) = answer(line);
                out.push_str(&format!("{untagged}{tag} {status}\r\n"));
            }
            w.write_all(out.as_bytes()).expect("answer");
            seen.extend(lines);
        }
        seen
    });
    (port, t)
}

fn session(port: u16) -> Session {
    let mut o =
        ClientOptions::new(Endpoint::parse(&format!("imap://127.0.0.1:{port}")).expect("url"));
    o.io_timeout = Duration::from_millis(500);
    let mut s = Client::new(o).expect("client").connect().expect("connect");
    s.assume_delimiter(Some('/'));
    s
}

/// The folders asked, as mailvault paths: INBOX, one in modified UTF-7, one that needs a
/// quoted string with escapes, one the server refuses, one with a space, and one that
/// cannot be a server name (a level holding the delimiter: not sent).
const FOLDERS: [&str; 6] = [
    "INBOX",
    "Entw\u{fc}rfe",
    "Tom & \"Jerry\"",
    "Secret",
    "a//b",
    "Archive/2024 Q1",
];

/// A literal holding `s`.
fn literal(s: &str) -> String {
    format!("{{{}}}\r\n{s}", s.len())
}

fn acl_answer(line: &str) -> (String, &'static str) {
    let u = if line.ends_with(" INBOX") {
        "* ACL inbox owner lrswipkxtecda anyone lr\r\n".to_string()
    } else if line.ends_with(" Entw&APw-rfe") {
        format!("* ACL {} bob@example.org lrs\r\n", literal("Entw&APw-rfe"))
    } else if line.ends_with(" \"Tom &- \\\"Jerry\\\"\"") {
        format!(
            "* ACL {} owner lr {} lrswi\r\n",
            literal("Tom &- \"Jerry\""),
            literal("we ird")
        )
    } else if line.ends_with(" Secret") {
        return (String::new(), "NO [NOPERM] You lack the ADMIN right");
    } else if line.ends_with(" \"Archive/2024 Q1\"") {
        "* ACL \"Archive/2024 Q1\" carol@example.org lr\r\n".to_string()
    } else {
        return (String::new(), "BAD unexpected");
    };
    (u, "OK Getacl completed.")
}

fn entry(identifier: &str, rights: &str) -> AclEntry {
    AclEntry {
        identifier: identifier.into(),
        rights: rights.into(),
    }
}

#[test]
fn getacls_go_out_together_and_each_folder_gets_its_own_list() {
    let (port, t) = peer(vec![5], acl_answer);
    let mut s = session(port);
    let out = s
        .get_acl_many(&FOLDERS)
        .unwrap_or_else(|e| panic!("get_acl_many: {e}"));
    let ok = |i: usize| out[i].as_ref().map_err(|e| e.to_string()).cloned();
    assert_eq!(
        ok(0),
        Ok(vec![entry("owner", "lrswipkxtecda"), entry("anyone", "lr")])
    );
    assert_eq!(ok(1), Ok(vec![entry("bob@example.org", "lrs")]));
    assert_eq!(
        ok(2),
        Ok(vec![entry("owner", "lr"), entry("we ird", "lrswi")])
    );
    assert!(
        matches!(&out[3], Err(Error::Command { folder: Some(f), response, .. })
            if f == "Secret" && response.contains("NOPERM")),
        "{:?}",
        out[3]
    );
    assert!(
        matches!(out[4], Err(Error::InvalidFolderName { .. })),
        "{:?}",
        out[4]
    );
    assert_eq!(ok(5), Ok(vec![entry("carol@example.org", "lr")]));
    drop(s);
    assert_eq!(
        t.join().expect("peer"),
        [
            "A1 GETACL INBOX",
            "A2 GETACL Entw&APw-rfe",
            "A3 GETACL \"Tom &- \\\"Jerry\\\"\"",
            "A4 GETACL Secret",
            "A5 GETACL \"Archive/2024 Q1\"",
        ]
    );
}

fn metadata_answer(line: &str) -> (String, &'static str) {
    let u = if line.ends_with(" INBOX (/private /shared)") {
        // An entry without a value (NIL) is none.
        "* METADATA inbox (/private/comment \"mine\" /shared/comment NIL)\r\n".to_string()
    } else if line.contains(" Entw&APw-rfe ") {
        format!(
            "* METADATA \"Entw&APw-rfe\" (/shared/vendor/x {} /private/a \"1\")\r\n",
            literal("two\r\nlines")
        )
    } else if line.contains(" Secret ") {
        return (String::new(), "NO [NOPERM] Permission denied");
    } else if line.contains(" \"Archive/2024 Q1\" ") {
        format!(
            "* METADATA {} (/private/comment \"q1\")\r\n",
            literal("Archive/2024 Q1")
        )
    } else {
        String::new()
    };
    (u, "OK Getmetadata completed.")
}

#[test]
fn getmetadatas_go_out_together_and_each_folder_gets_its_own_entries() {
    // The 70 folders of the second call are more than are ever unanswered at once (64):
    // the call reads those answers before it sends the rest.
    let (port, t) = peer(vec![5, 64, 6], metadata_answer);
    let mut s = session(port);
    let out = s
        .get_metadata_many(&FOLDERS)
        .unwrap_or_else(|e| panic!("get_metadata_many: {e}"));
    let ok = |i: usize| out[i].as_ref().map_err(|e| e.to_string()).cloned();
    let e = |k: &str, v: &[u8]| (k.to_string(), v.to_vec());
    assert_eq!(ok(0), Ok(vec![e("/private/comment", b"mine")]));
    assert_eq!(
        ok(1),
        Ok(vec![
            e("/private/a", b"1"),
            e("/shared/vendor/x", b"two\r\nlines")
        ])
    );
    assert_eq!(ok(2), Ok(vec![]));
    assert!(
        matches!(&out[3], Err(Error::Command { folder: Some(f), .. }) if f == "Secret"),
        "{:?}",
        out[3]
    );
    assert!(matches!(out[4], Err(Error::InvalidFolderName { .. })));
    assert_eq!(ok(5), Ok(vec![e("/private/comment", b"q1")]));

    let names: Vec<String> = (0..70).map(|i| format!("F{i}")).collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let out = s
        .get_metadata_many(&names)
        .unwrap_or_else(|e| panic!("get_metadata_many: {e}"));
    assert!(
        out.iter().all(|r| r.as_ref().is_ok_and(Vec::is_empty)),
        "{out:?}"
    );
    drop(s);
    let seen = t.join().expect("peer");
    assert_eq!(seen.len(), 75);
    assert_eq!(
        seen[..5],
        [
            "A1 GETMETADATA (DEPTH infinity) INBOX (/private /shared)",
            "A2 GETMETADATA (DEPTH infinity) Entw&APw-rfe (/private /shared)",
            "A3 GETMETADATA (DEPTH infinity) \"Tom &- \\\"Jerry\\\"\" (/private /shared)",
            "A4 GETMETADATA (DEPTH infinity) Secret (/private /shared)",
            "A5 GETMETADATA (DEPTH infinity) \"Archive/2024 Q1\" (/private /shared)",
        ]
    );
}
