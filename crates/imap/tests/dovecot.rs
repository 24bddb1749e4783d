//! Integration tests against a real Dovecot started by the harness. They
//! fail when Dovecot is missing, unless MAILVAULT_SKIP_DOVECOT=1.

use std::collections::BTreeSet;
use std::fs;

use mailvault_imap::maildir_flags::{maildir_to_imap, KeywordTable};
use mailvault_imap::testing::{DovecotOptions, DovecotServer};
use mailvault_imap::{
    client::fetch::StoreMode, to_crlf, AppendMsg, AppendOutcome, AppendStrategy, Client, Code,
    Credentials, Error, FetchQuery, InternalDate, LineEndings, SearchKey, SeqSet, Session,
    SpecialUse,
};

macro_rules! server {
    () => {
        server!(&DovecotOptions::default())
    };
    ($opts:expr) => {
        match DovecotServer::start_or_skip_with($opts) {
            Ok(Some(s)) => s,
            Ok(None) => return,
            Err(e) => panic!("{e}"),
        }
    };
}

fn login(server: &DovecotServer, account: &str) -> Session {
    server
        .client()
        .login(&server.user(account))
        .unwrap_or_else(|e| panic!("login {account}: {e}\n{}", server.log()))
}

/// A deterministic generator (no rand dependency).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        self.0 >> 33
    }
}

/// An LF message as a Maildir holds it.
fn lf_message(i: usize, rng: &mut Lcg) -> Vec<u8> {
    let lines = 3 + (rng.next() % 40) as usize;
    let mut m = format!(
        "Return-Path: <sender{i}@example.net>\nMessage-ID: <msg{i}.{}@example.net>\nFrom: Sender {i} <sender{i}@example.net>\nTo: bob@example.org\nSubject: test message {i} \u{e4}\u{f6}\u{fc}\nDate: Mon, 1 Jan 2024 10:00:00 +0000\nMIME-Version: 1.0\nContent-Type: text/plain; charset=utf-8\n\n",
        rng.next()
    )
    .into_bytes();
    for l in 0..lines {
        m.extend_from_slice(
            format!(
                "line {l} of message {i}: {}\n",
                "x".repeat((rng.next() % 70) as usize)
            )
            .as_bytes(),
        );
    }
    if i.is_multiple_of(7) {
        m.extend_from_slice(b"last line without newline");
    }
    m
}

fn flags_for(i: usize) -> Vec<String> {
    let mut f = Vec::new();
    if i.is_multiple_of(2) {
        f.push("\\Seen".to_string());
    }
    if i.is_multiple_of(3) {
        f.push("\\Answered".to_string());
    }
    if i.is_multiple_of(5) {
        f.push("\\Flagged".to_string());
    }
    if i.is_multiple_of(11) {
        f.push("\\Draft".to_string());
    }
    if i.is_multiple_of(13) {
        f.push("\\Deleted".to_string());
    }
    if i % 4 == 1 {
        f.push("$Forwarded".to_string());
    }
    if i % 6 == 1 {
        f.push("$Label1".to_string());
    }
    if i % 9 == 2 {
        f.push("Project-X".to_string());
    }
    f
}

fn date_for(i: usize) -> InternalDate {
    InternalDate {
        secs: 1_500_000_000 + (i as i64) * 3_600 + 17,
        tz_minutes: [0, 120, -420, 330][i % 4],
    }
}

fn flag_set<S: AsRef<str>>(f: &[S]) -> BTreeSet<String> {
    f.iter()
        .map(|s| s.as_ref().to_ascii_lowercase())
        .filter(|s| s != "\\recent")
        .collect()
}

#[test]
fn login_as_user_master_and_wrong_password() {
    let server = server!();
    let client = server.client();

    let mut s = client
        .login(&server.user("alice@example.org"))
        .expect("user login");
    assert_eq!(s.account(), "alice@example.org");
    assert!(
        s.capabilities().has("MULTIAPPEND"),
        "{:?}",
        s.capabilities()
    );
    assert!(s.capabilities().has("LITERAL+"));
    assert!(s.capabilities().has("UIDPLUS"));
    s.create("FromAlice", None).expect("create");
    s.logout().expect("logout");

    // SASL PLAIN with authorization identity = target user.
    let mut s = client
        .login(&server.master("alice@example.org"))
        .expect("master login");
    assert!(s
        .list()
        .expect("list")
        .iter()
        .any(|f| f.name == "FromAlice"));
    s.logout().expect("logout");

    // Dovecot's user*master LOGIN form.
    let creds = Credentials::MasterSeparator {
        user: "alice@example.org".into(),
        master: server.master_user().into(),
        separator: '*',
        password: server.master_password().into(),
    };
    let mut s = client.login(&creds).expect("user*master login");
    assert!(s
        .list()
        .expect("list")
        .iter()
        .any(|f| f.name == "FromAlice"));
    s.logout().expect("logout");

    let err = client
        .login(&Credentials::User {
            user: "carol@example.org".into(),
            password: "wrong".into(),
        })
        .expect_err("wrong password");
    assert!(matches!(err, Error::AuthFailed { .. }), "{err:?}");
    assert!(!err.is_transient());
    let text = err.to_string();
    assert!(text.contains("carol@example.org"), "{text}");
    assert!(text.contains("AUTHENTICATIONFAILED"), "{text}");

    let err = client
        .login(&Credentials::Master {
            user: "carol@example.org".into(),
            master: "admin".into(),
            password: "nope".into(),
        })
        .expect_err("wrong master password");
    let text = err.to_string();
    assert!(
        text.contains("carol@example.org") && text.contains("admin"),
        "{text}"
    );
}

#[test]
fn tls_starttls_and_certificates() {
    let server = server!();
    let Some(tls_opts) = server.tls_client_options() else {
        panic!("no TLS: openssl missing?\n{}", server.log());
    };
    // imaps:// trusting the generated CA.
    let client = Client::new(tls_opts.clone()).expect("tls client");
    let mut s = client
        .login(&server.user("tls@example.org"))
        .expect("imaps login");
    s.noop().expect("noop");
    s.logout().expect("logout");

    // STARTTLS on the plain port.
    let mut o = tls_opts.clone();
    o.endpoint = mailvault_imap::Endpoint::parse(&server.url())
        .expect("url")
        .with_starttls();
    let s = Client::new(o)
        .expect("client")
        .login(&server.user("tls@example.org"))
        .expect("starttls login");
    assert!(
        !s.capabilities().has("STARTTLS"),
        "STARTTLS still offered after TLS"
    );
    s.logout().expect("logout");

    // Not trusted: clear TLS error.
    let mut o = tls_opts.clone();
    o.tls.ca_file = None;
    o.tls.system_roots = true;
    let err = Client::new(o)
        .expect("client")
        .connect()
        .expect_err("untrusted");
    assert!(matches!(err, Error::Tls { .. }), "{err:?}");
    assert!(!err.is_transient());

    // insecure: accepted without verification.
    let mut o = tls_opts;
    o.tls.ca_file = None;
    o.tls.insecure = true;
    let s = Client::new(o)
        .expect("client")
        .login(&server.user("tls@example.org"))
        .expect("insecure");
    s.logout().expect("logout");
}

#[test]
fn nested_unicode_folders_special_use_and_subscriptions() {
    let server = server!();
    let mut s = login(&server, "bob@example.org");
    assert_eq!(s.delimiter().expect("delimiter"), Some('/'));
    let deep = "Archiv/Gesch\u{e4}ft/2023 \u{dc}n\u{ef}c\u{f8}d\u{e9} \u{65e5}\u{672c} & Co";
    for f in [
        "Archiv",
        "Archiv/Gesch\u{e4}ft",
        deep,
        "Sent",
        "Tom & Jerry",
    ] {
        let out = s
            .create(
                f,
                if f == "Sent" {
                    Some(SpecialUse::Sent)
                } else {
                    None
                },
            )
            .unwrap_or_else(|e| panic!("create {f}: {e}"));
        assert!(!out.existed);
    }
    assert!(
        s.create(deep, None).expect("again").existed,
        "ALREADYEXISTS is not an error"
    );
    s.subscribe(deep).expect("subscribe");
    s.subscribe("Sent").expect("subscribe");
    let folders = s.list().expect("list");
    let get = |n: &str| {
        folders
            .iter()
            .find(|f| f.name == n)
            .unwrap_or_else(|| panic!("{n} missing from {folders:#?}"))
    };
    let d = get(deep);
    assert!(d.subscribed && d.selectable);
    assert_eq!(
        String::from_utf8_lossy(&d.wire_name),
        "Archiv/Gesch&AOQ-ft/2023 &ANw-n&AO8-c&APg-d&AOk- &ZeVnLA- &- Co"
    );
    assert!(!get("Archiv").subscribed);
    assert_eq!(get("Sent").special_use, Some(SpecialUse::Sent));
    assert!(get("Sent").subscribed);
    assert!(get("INBOX").selectable);
    assert!(get("Tom & Jerry").selectable);
    let subs: Vec<String> = s
        .lsub()
        .expect("lsub")
        .into_iter()
        .map(|f| f.name)
        .collect();
    assert!(
        subs.contains(&deep.to_string()) && subs.contains(&"Sent".to_string()),
        "{subs:?}"
    );

    // A level holding the delimiter cannot exist.
    assert!(matches!(
        s.create("a//b", None),
        Err(Error::InvalidFolderName { .. })
    ));

    // Appending and selecting works with the encoded name; Dovecot's
    // Maildir++ directory uses the same modified UTF-7.
    let out = s
        .append(
            deep,
            &AppendMsg {
                flags: vec![],
                internal_date: None,
                data: b"Subject: x\r\n\r\nx\r\n",
            },
        )
        .expect("append");
    assert!(out.is_appended());
    let info = s.examine(deep).expect("examine");
    assert_eq!(info.exists, 1);
    let on_disk = server
        .maildir("bob@example.org")
        .join(".Archiv.Gesch&AOQ-ft.2023 &ANw-n&AO8-c&APg-d&AOk- &ZeVnLA- &- Co");
    assert!(
        on_disk.join("cur").is_dir() || on_disk.join("new").is_dir(),
        "{}",
        on_disk.display()
    );

    // LIST-STATUS: every selectable folder's status comes with the listing, as STATUS
    // tells it; the parent of a folder created alone (`\NonExistent`) has none.
    assert!(s.capabilities().has("LIST-STATUS") && s.capabilities().has("CONDSTORE"));
    s.create("Lone/Child", None).expect("create");
    let folders = s.list_with_status().expect("list with status");
    for f in &folders {
        if !f.selectable {
            assert_eq!(f.status, None, "{}", f.name);
            continue;
        }
        let mut asked = s.status(&f.name).expect("status");
        asked.unseen = None;
        assert_eq!(f.status.as_ref(), Some(&asked), "{}", f.name);
    }
    let deep_status = (folders.iter().find(|f| f.name == deep)).and_then(|f| f.status.clone());
    assert_eq!(deep_status.and_then(|st| st.messages), Some(1));
    let lone = folders.iter().find(|f| f.name == "Lone");
    assert!(lone.is_some_and(|f| !f.selectable), "{lone:?}");
    s.logout().expect("logout");
}

#[test]
fn multiappend_thousand_messages_round_trip() {
    let server = server!();
    let account = "bob@example.org";
    let mut s = login(&server, account);
    s.create("Restore", None).expect("create");
    let mut rng = Lcg(42);
    let originals: Vec<Vec<u8>> = (0..1000).map(|i| lf_message(i, &mut rng)).collect();
    let wire: Vec<Vec<u8>> = originals.iter().map(|m| to_crlf(m).into_owned()).collect();
    let msgs: Vec<AppendMsg<'_>> = wire
        .iter()
        .enumerate()
        .map(|(i, data)| AppendMsg {
            flags: flags_for(i),
            internal_date: Some(date_for(i)),
            data,
        })
        .collect();
    let started = std::time::Instant::now();
    let outcomes = s.append_batch("Restore", &msgs).expect("append batch");
    eprintln!("MULTIAPPEND of 1000 messages: {:?}", started.elapsed());
    assert_eq!(outcomes.len(), 1000);
    let mut uids = Vec::new();
    let mut uidvalidity = None;
    for (i, o) in outcomes.iter().enumerate() {
        match o {
            AppendOutcome::Appended {
                uid: Some(u),
                uidvalidity: Some(v),
            } => {
                uids.push(*u);
                assert!(uidvalidity.is_none() || uidvalidity == Some(*v));
                uidvalidity = Some(*v);
            }
            other => panic!("message {i}: {other:?}"),
        }
    }
    assert!(
        uids.windows(2).all(|w| w[0] < w[1]),
        "APPENDUIDs ascend in batch order"
    );

    let info = s.select("Restore").expect("select");
    assert_eq!(info.exists, 1000);
    assert_eq!(Some(info.uidvalidity), uidvalidity);
    assert_eq!(info.uidnext, uids.last().map(|u| u + 1));
    assert!(info.highestmodseq.is_some(), "CONDSTORE: {info:?}");
    assert!(info.permanent_flags.iter().any(|f| f == "\\*"));

    let mut seen = 0usize;
    s.fetch_batched::<Error, _>(&uids, 150, &FetchQuery::full(), |m| {
        let i = uids.binary_search(&m.uid).expect("known uid");
        let body = m.body.expect("body");
        assert_eq!(body, wire[i].as_slice(), "bytes of message {i}");
        assert_eq!(
            LineEndings::Lf.restore(body).as_ref(),
            originals[i].as_slice(),
            "LF round trip {i}"
        );
        assert_eq!(m.size, Some(wire[i].len() as u64));
        assert_eq!(
            flag_set(m.flags.as_deref().unwrap_or(&[])),
            flag_set(&flags_for(i)),
            "flags {i}"
        );
        // Dovecot keeps the instant (file mtime), not the zone offset.
        assert_eq!(
            m.internal_date.map(|d| d.secs),
            Some(date_for(i).secs),
            "date {i}"
        );
        seen += 1;
        Ok(())
    })
    .expect("fetch");
    assert_eq!(seen, 1000);

    // What Dovecot wrote: LF files, keyword letters through dovecot-keywords.
    let maildir = server.maildir(account).join(".Restore");
    let table = KeywordTable::parse(
        &fs::read_to_string(maildir.join("dovecot-keywords")).unwrap_or_default(),
    );
    assert!(
        table.letter_of("$Label1").is_some() && table.letter_of("Project-X").is_some(),
        "{table:?}"
    );
    let mut checked = 0;
    for entry in fs::read_dir(maildir.join("cur")).expect("cur") {
        let entry = entry.expect("entry");
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some((_, letters)) = name.split_once(":2,") else {
            continue;
        };
        let data = fs::read(entry.path()).expect("read");
        let Some(i) = originals.iter().position(|o| *o == data) else {
            panic!("{name}: file is not byte-identical to an original LF message");
        };
        let flags = maildir_to_imap(letters, &table);
        // Dovecot does not use the P letter for $Forwarded: it is a keyword.
        let mut expected = flag_set(&flags_for(i));
        let got = flag_set(&flags.flags);
        if got.contains("$forwarded") || !expected.contains("$forwarded") {
            assert_eq!(got, expected, "{name}");
        } else {
            expected.remove("$forwarded");
            assert_eq!(
                got.iter()
                    .filter(|f| *f != "$forwarded")
                    .cloned()
                    .collect::<BTreeSet<_>>(),
                expected,
                "{name}"
            );
        }
        checked += 1;
    }
    assert_eq!(checked, 1000);
    s.logout().expect("logout");
}

#[test]
fn pipelined_and_synchronous_paths() {
    let server = server!();
    for (strategy, folder) in [
        (AppendStrategy::Pipelined, "Pipelined"),
        (AppendStrategy::Synchronous, "Sync"),
        (AppendStrategy::MultiAppend, "Multi"),
    ] {
        let mut opts = server.client_options();
        opts.append.strategy = strategy;
        opts.append.pipeline_depth = 8;
        opts.append.max_command_messages = 7;
        let mut s = Client::new(opts)
            .expect("client")
            .login(&server.user("pipe@example.org"))
            .expect("login");
        s.create(folder, None).expect("create");
        let mut rng = Lcg(7);
        let wire: Vec<Vec<u8>> = (0..40)
            .map(|i| to_crlf(&lf_message(i, &mut rng)).into_owned())
            .collect();
        let msgs: Vec<AppendMsg<'_>> = wire
            .iter()
            .enumerate()
            .map(|(i, d)| AppendMsg {
                flags: flags_for(i),
                internal_date: Some(date_for(i)),
                data: d,
            })
            .collect();
        let out = s.append_batch(folder, &msgs).expect("append");
        let uids: Vec<u32> = out
            .iter()
            .map(|o| match o {
                AppendOutcome::Appended { uid: Some(u), .. } => *u,
                other => panic!("{strategy:?}: {other:?}"),
            })
            .collect();
        assert_eq!(uids, (1..=40).collect::<Vec<u32>>(), "{strategy:?}");
        let info = s.examine(folder).expect("examine");
        assert_eq!(info.exists, 40, "{strategy:?}");
        let mut n = 0;
        s.fetch::<Error, _>(&SeqSet::all(), &FetchQuery::full(), |m| {
            assert_eq!(m.body, Some(wire[(m.uid - 1) as usize].as_slice()));
            n += 1;
            Ok(())
        })
        .expect("fetch");
        assert_eq!(n, 40);
        s.logout().expect("logout");
    }
}

#[test]
fn refused_messages_are_reported_and_the_rest_lands() {
    let server = server!();
    let mut opts = server.client_options();
    opts.append.max_message_bytes = Some(10_000);
    let mut s = Client::new(opts)
        .expect("client")
        .login(&server.user("ref@example.org"))
        .expect("login");
    s.create("Mixed", None).expect("create");
    let big = to_crlf(&[b"Subject: big\n\n".as_slice(), &vec![b'x'; 20_000]].concat()).into_owned();
    let good: Vec<Vec<u8>> = (0..200)
        .map(|i| format!("Subject: {i}\r\n\r\nbody {i}\r\n").into_bytes())
        .collect();
    let mut msgs: Vec<AppendMsg<'_>> = good
        .iter()
        .map(|d| AppendMsg {
            flags: vec!["\\Seen".into()],
            internal_date: None,
            data: d,
        })
        .collect();
    // The server refuses an empty message (Dovecot: "Can't save a zero byte message").
    msgs[5] = AppendMsg {
        flags: vec![],
        internal_date: None,
        data: b"",
    };
    msgs[150] = AppendMsg {
        flags: vec![],
        internal_date: None,
        data: b"",
    };
    // The client refuses what the server would answer BAD to, and what is too large.
    msgs[9].flags = vec!["\\Bogus".into()];
    msgs[12] = AppendMsg {
        flags: vec![],
        internal_date: None,
        data: &big,
    };
    msgs[15].flags = vec!["has space".into()];
    let out = s.append_batch("Mixed", &msgs).expect("append");
    for (i, o) in out.iter().enumerate() {
        match (i, o) {
            (5 | 150, AppendOutcome::Refused(r)) => {
                assert!(r.by_server, "{r:?}");
                assert!(r.response.starts_with("NO"), "{r:?}");
                assert!(
                    r.response.contains("zero byte"),
                    "server's own words: {r:?}"
                );
                assert!(!r.is_transient());
            }
            (9 | 12 | 15, AppendOutcome::Refused(r)) => assert!(!r.by_server, "{r:?}"),
            (_, AppendOutcome::Appended { uid: Some(_), .. })
                if ![5, 9, 12, 15, 150].contains(&i) => {}
            other => panic!("{other:?}"),
        }
    }
    let info = s.examine("Mixed").expect("examine");
    assert_eq!(info.exists, 195);
    assert!(!s.is_broken());
    s.logout().expect("logout");
}

#[test]
fn changedsince_returns_only_changed_flags() {
    let server = server!();
    let mut s = login(&server, "cs@example.org");
    let data: Vec<Vec<u8>> = (0..10)
        .map(|i| format!("Subject: {i}\r\n\r\n{i}\r\n").into_bytes())
        .collect();
    let msgs: Vec<AppendMsg<'_>> = data
        .iter()
        .map(|d| AppendMsg {
            flags: vec![],
            internal_date: None,
            data: d,
        })
        .collect();
    s.append_batch("INBOX", &msgs).expect("append");
    let before = s.select("INBOX").expect("select");
    let modseq = before.highestmodseq.expect("HIGHESTMODSEQ");
    s.uid_store(
        &SeqSet::from_ids(&[3, 7]),
        StoreMode::Add,
        &["\\Flagged", "Important"],
    )
    .expect("store");
    s.uid_store(&SeqSet::from_ids(&[9]), StoreMode::Add, &["\\Deleted"])
        .expect("store");
    s.expunge().expect("expunge");
    let mut changed = Vec::new();
    let changes = s
        .fetch_changes::<Error, _>(modseq, |m| {
            changed.push((m.uid, flag_set(m.flags.as_deref().unwrap_or(&[]))));
            assert!(m.modseq.is_some_and(|x| x > modseq));
            Ok(())
        })
        .expect("changes");
    changed.sort();
    let want: BTreeSet<String> = ["\\flagged", "important"].map(String::from).into();
    assert_eq!(changed, vec![(3, want.clone()), (7, want)]);
    // QRESYNC is on in Dovecot: expunges are reported too.
    assert_eq!(changes.vanished.and_then(|v| v.expand(10)), Some(vec![9]));
    let after = s.select("INBOX").expect("select");
    assert!(after.highestmodseq > before.highestmodseq);
    assert_eq!(after.uidvalidity, before.uidvalidity);

    // Incremental: only new UIDs.
    s.append("INBOX", &msgs[0]).expect("append");
    assert_eq!(
        s.new_uids(after.uidnext.expect("uidnext")).expect("new"),
        vec![11]
    );
    assert_eq!(s.new_uids(100).expect("none"), Vec::<u32>::new());
    s.logout().expect("logout");
}

#[test]
fn skip_existing_by_message_id_and_fingerprint() {
    let server = server!();
    let mut s = login(&server, "skip@example.org");
    let data: Vec<Vec<u8>> = (0..5)
        .map(|i| {
            format!("Message-ID: <m{i}@example.net>\r\nSubject: {i}\r\n\r\n{i}\r\n").into_bytes()
        })
        .collect();
    let msgs: Vec<AppendMsg<'_>> = data
        .iter()
        .enumerate()
        .map(|(i, d)| AppendMsg {
            flags: vec![],
            internal_date: Some(date_for(i)),
            data: d,
        })
        .collect();
    s.append_batch("INBOX", &msgs).expect("append");
    s.examine("INBOX").expect("examine");
    let hit = s
        .uid_search(&SearchKey::Header {
            name: "Message-ID".into(),
            value: "<m3@example.net>".into(),
        })
        .expect("search");
    assert_eq!(hit, vec![4]);
    assert_eq!(
        s.uid_search(&SearchKey::All).expect("all"),
        vec![1, 2, 3, 4, 5]
    );
    let mut prints = Vec::new();
    s.fetch::<Error, _>(&SeqSet::all(), &FetchQuery::fingerprint(), |m| {
        prints.push((
            m.uid,
            m.message_id(),
            m.size,
            m.internal_date.map(|d| d.secs),
        ));
        Ok(())
    })
    .expect("fingerprints");
    assert_eq!(prints.len(), 5);
    assert_eq!(
        prints[2],
        (
            3,
            Some("<m2@example.net>".to_string()),
            Some(data[2].len() as u64),
            Some(date_for(2).secs)
        )
    );
    // A failing callback stops delivery but leaves the session usable.
    let mut calls = 0;
    let r: Result<(), Error> = s.fetch(&SeqSet::all(), &FetchQuery::full(), |_| {
        calls += 1;
        Err(Error::InvalidEndpoint {
            endpoint: "x".into(),
            reason: "stop".into(),
        })
    });
    assert!(r.is_err());
    assert_eq!(calls, 1);
    s.noop().expect("still usable");
    s.logout().expect("logout");
}

#[test]
fn missing_folder_and_over_quota_are_clear_errors() {
    let server = server!(&DovecotOptions {
        quota_storage_bytes: Some(20_000),
        ..DovecotOptions::default()
    });
    let mut s = login(&server, "full@example.org");
    let data: Vec<Vec<u8>> = (0..40)
        .map(|i| format!("Subject: {i}\r\n\r\n{}\r\n", "y".repeat(1000)).into_bytes())
        .collect();
    let msgs: Vec<AppendMsg<'_>> = data
        .iter()
        .map(|d| AppendMsg {
            flags: vec![],
            internal_date: None,
            data: d,
        })
        .collect();

    let err = s
        .append_batch("Nope", &msgs[..2])
        .expect_err("missing folder");
    assert!(
        matches!(err.root(), Error::NoSuchFolder { folder, .. } if folder == "Nope"),
        "{err:?}"
    );
    assert!(!err.is_transient());

    let err = s.append_batch("INBOX", &msgs).expect_err("over quota");
    let text = err.to_string();
    assert!(
        matches!(err.root(), Error::OverQuota { account, .. } if account == "full@example.org"),
        "{err:?}"
    );
    assert!(
        text.contains("full@example.org") && text.contains("OVERQUOTA"),
        "{text}"
    );
    assert!(!err.is_transient());
    let Error::AppendInterrupted {
        outcomes, in_doubt, ..
    } = &err
    else {
        panic!("{err:?}")
    };
    assert!(in_doubt.is_empty());
    let stored = outcomes
        .iter()
        .filter(|o| o.as_ref().is_some_and(AppendOutcome::is_appended))
        .count();
    let info = s.examine("INBOX").expect("examine");
    assert_eq!(
        info.exists as usize, stored,
        "outcomes say exactly what landed"
    );

    // The first message of a session goes alone, waiting for '+' (see
    // `append_batch`), and lands; MULTIAPPEND is atomic: nothing of the
    // refused command that carried the others landed.
    assert_eq!(stored, 1);
    assert!(outcomes[0].as_ref().is_some_and(AppendOutcome::is_appended));

    // One APPEND per message: the messages before the quota was hit land,
    // and the outcomes say which.
    let mut opts = server.client_options();
    opts.append.strategy = AppendStrategy::Pipelined;
    let mut s2 = Client::new(opts)
        .expect("client")
        .login(&server.user("full@example.org"))
        .expect("login");
    let err = s2
        .append_batch("INBOX", &msgs)
        .expect_err("over quota, pipelined");
    eprintln!("{err}");
    assert!(matches!(err.root(), Error::OverQuota { .. }), "{err:?}");
    let Error::AppendInterrupted {
        outcomes, in_doubt, ..
    } = &err
    else {
        panic!("{err:?}")
    };
    assert!(in_doubt.is_empty());
    let stored = outcomes
        .iter()
        .filter(|o| o.as_ref().is_some_and(AppendOutcome::is_appended))
        .count();
    assert!(stored > 5 && stored < 40, "{stored}");
    let info = s2.examine("INBOX").expect("examine");
    assert_eq!(
        info.exists as usize,
        stored + 1,
        "outcomes say exactly what landed (and the first session's one)"
    );
    assert!(!s2.is_broken());
    let _ = Code::OverQuota;
}

#[test]
fn parallel_sessions_from_threads() {
    let server = server!();
    let client = server.client();
    {
        let mut s = client
            .login(&server.master("par@example.org"))
            .expect("login");
        s.create("Par", None).expect("create");
        s.logout().expect("logout");
    }
    let handles: Vec<_> = (0..4)
        .map(|t| {
            let client = client.clone();
            let creds = server.master("par@example.org");
            std::thread::spawn(move || {
                let mut s = client.login(&creds).expect("login");
                let data: Vec<Vec<u8>> = (0..100)
                    .map(|i| format!("Subject: t{t} m{i}\r\n\r\nx\r\n").into_bytes())
                    .collect();
                let msgs: Vec<AppendMsg<'_>> = data
                    .iter()
                    .map(|d| AppendMsg {
                        flags: vec![],
                        internal_date: None,
                        data: d,
                    })
                    .collect();
                for chunk in msgs.chunks(25) {
                    let out = s.append_batch("Par", chunk).expect("append");
                    assert!(out.iter().all(AppendOutcome::is_appended));
                }
                s.logout().expect("logout");
            })
        })
        .collect();
    for h in handles {
        h.join().expect("thread");
    }
    let mut s = client
        .login(&server.user("par@example.org"))
        .expect("login");
    assert_eq!(s.status("Par").expect("status").messages, Some(400));
    s.logout().expect("logout");
}

#[test]
fn server_going_away_is_transient_and_reported_in_doubt() {
    let mut server = server!();
    let mut s = login(&server, "gone@example.org");
    let data: Vec<Vec<u8>> = (0..50)
        .map(|i| format!("Subject: {i}\r\n\r\n{i}\r\n").into_bytes())
        .collect();
    let msgs: Vec<AppendMsg<'_>> = data
        .iter()
        .map(|d| AppendMsg {
            flags: vec![],
            internal_date: None,
            data: d,
        })
        .collect();
    assert!(s
        .append_batch("INBOX", &msgs[..10])
        .expect("append")
        .iter()
        .all(AppendOutcome::is_appended));
    server.stop();
    let err = s
        .append_batch("INBOX", &msgs[10..])
        .expect_err("server gone");
    assert!(err.is_transient(), "{err:?}");
    assert!(err.is_connection_lost(), "{err:?}");
    assert!(s.is_broken());
    if let Error::AppendInterrupted { outcomes, .. } = &err {
        assert!(
            outcomes.iter().all(Option::is_none),
            "nothing confirmed: {outcomes:?}"
        );
    }
    // A broken session fails fast instead of hanging.
    assert!(s.noop().expect_err("broken").is_connection_lost());
}

#[test]
fn server_size_limit_refuses_only_the_large_message() {
    let server = server!(&DovecotOptions {
        quota_max_mail_size: Some(5_000),
        ..DovecotOptions::default()
    });
    let mut s = login(&server, "limit@example.org");
    let big = to_crlf(&[b"Subject: big\n\n".as_slice(), &vec![b'z'; 8_000]].concat()).into_owned();
    let small: Vec<Vec<u8>> = (0..6)
        .map(|i| format!("Subject: {i}\r\n\r\n{i}\r\n").into_bytes())
        .collect();
    let mut msgs: Vec<AppendMsg<'_>> = small
        .iter()
        .map(|d| AppendMsg {
            flags: vec![],
            internal_date: None,
            data: d,
        })
        .collect();
    msgs[3] = AppendMsg {
        flags: vec![],
        internal_date: None,
        data: &big,
    };
    let out = s.append_batch("INBOX", &msgs).expect("append");
    for (i, o) in out.iter().enumerate() {
        match o {
            AppendOutcome::Refused(r) if i == 3 => {
                eprintln!("server refused: {}", r.response);
                assert!(r.by_server && r.response.starts_with("NO"), "{r:?}");
            }
            AppendOutcome::Appended { .. } if i != 3 => {}
            other => panic!("{i}: {other:?}"),
        }
    }
    assert_eq!(s.examine("INBOX").expect("examine").exists, 5);
}
