//! Pipelined folder commands (`create_many`, `subscribe_many`) against a scripted peer
//! that answers only once it has read every command of the call: a client that waits
//! for each answer before sending the next command times out here. (What the commands
//! do on a real server is tested against Dovecot, in `dovecot.rs`.)

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::time::Duration;

use mailvault_imap::{Client, ClientOptions, Endpoint, Error, SpecialUse};

/// A peer that greets (PREAUTH, LITERAL+), then for each entry of `rounds` reads that
/// many command lines and answers them in reverse order, each with the answer `answer`
/// gives for (its place, the command line).
fn peer(
    rounds: Vec<usize>,
    answer: fn(usize, &str) -> &'static str,
) -> (u16, std::thread::JoinHandle<Vec<String>>) {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = l.local_addr().expect("addr").port();
    let t = std::thread::spawn(move || {
        let (s, _) = l.accept().expect("accept");
        let mut w = s.try_clone().expect("clone");
        w.write_all(b"* PREAUTH [CAPABILITY IMAP4rev1 LITERAL+ CREATE-SPECIAL-USE] ready\r\n")
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
            for (i, line) in lines.iter().enumerate().rev() {
                let tag = line.split(' ').next().unwrap_or("");
                out.push_str(&format!("{tag} {}\r\n", answer(i, line)));
            }
            w.write_all(out.as_bytes()).expect("answer");
            seen.extend(lines);
        }
        seen
    });
    (port, t)
}

fn session(port: u16) -> mailvault_imap::Session {
    let mut o =
        ClientOptions::new(Endpoint::parse(&format!("imap://127.0.0.1:{port}")).expect("url"));
    o.io_timeout = Duration::from_millis(500);
    let mut s = Client::new(o).expect("client").connect().expect("connect");
    s.assume_delimiter(Some('/'));
    s
}

#[test]
fn creates_go_out_together_and_keep_their_own_outcomes() {
    let (port, t) = peer(vec![4], |i, _| match i {
        0 => "OK created",
        1 => "NO [ALREADYEXISTS] exists",
        2 => "NO [CANNOT] no such name",
        _ => "OK created",
    });
    let mut s = session(port);
    let out = s
        .create_many(&[
            ("Sent", Some(SpecialUse::Sent)),
            ("Archive", None),
            ("Bad", None),
            // Not sent: a level holding the delimiter cannot exist.
            ("a//b", None),
            ("Archive/2024", None),
        ])
        .unwrap_or_else(|e| panic!("create_many: {e}"));
    assert_eq!(out.len(), 5);
    let ok = |i: usize| out[i].as_ref().map_err(|e| e.to_string()).copied();
    assert_eq!(
        ok(0).map(|o| (o.existed, o.special_use_set)),
        Ok((false, true))
    );
    assert_eq!(ok(1).map(|o| o.existed), Ok(true));
    assert!(matches!(out[2], Err(Error::Command { .. })), "{:?}", out[2]);
    assert!(
        matches!(out[3], Err(Error::InvalidFolderName { .. })),
        "{:?}",
        out[3]
    );
    assert_eq!(
        ok(4).map(|o| (o.existed, o.special_use_set)),
        Ok((false, false))
    );
    drop(s);
    let seen = t.join().expect("peer");
    assert_eq!(
        seen,
        [
            "A1 CREATE Sent (USE (\\Sent))",
            "A2 CREATE Archive",
            "A3 CREATE Bad",
            "A4 CREATE Archive/2024",
        ]
    );
}

#[test]
fn subscriptions_go_out_together_and_a_refusal_is_its_own() {
    let (port, t) = peer(vec![3, 64, 6], |_, line| {
        if line.ends_with(" Gone") {
            "NO [NONEXISTENT] no such folder"
        } else {
            "OK done"
        }
    });
    let mut s = session(port);
    let out = s
        .subscribe_many(&["Sent", "Gone", "Archive/2024"])
        .unwrap_or_else(|e| panic!("subscribe_many: {e}"));
    assert!(out[0].is_ok() && out[2].is_ok(), "{out:?}");
    assert!(
        matches!(out[1], Err(Error::NoSuchFolder { .. })),
        "{:?}",
        out[1]
    );
    // More than are ever unanswered at once (64): the call reads those answers before
    // it sends the rest.
    let names: Vec<String> = (0..70).map(|i| format!("F{i}")).collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let out = s
        .subscribe_many(&names)
        .unwrap_or_else(|e| panic!("subscribe_many: {e}"));
    assert!(out.iter().all(Result::is_ok), "{out:?}");
    drop(s);
    assert_eq!(t.join().expect("peer").len(), 73);
}
