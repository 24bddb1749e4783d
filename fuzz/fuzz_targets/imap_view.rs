//! The IMAP view (`serve --imap`): any bytes as a client's on a connection, parsed by
//! imap-next and imap-codec and answered by a session logged in to an account of a real
//! repository (a small Maildir backed up once into a temporary directory: three folders,
//! an encoded subject, a base64 body, a multipart message), every answer encoded, without
//! panicking. `mailvault_serve::fuzzing` drives it without sockets.
#![no_main]
use libfuzzer_sys::fuzz_target;
use mailvault_core::repo::crypto::KdfParams;
use mailvault_core::report::NoProgress;
use mailvault_core::source::maildir::{BackupOptions, MaildirSource};
use mailvault_core::source::RunOptions;
use mailvault_core::store::LocalStore;
use mailvault_core::{InitOptions, Repository};
use mailvault_serve::fuzzing::Harness;
use std::path::Path;
use std::sync::{Arc, OnceLock};

const ACCOUNT: &str = "alice@example.org";

const MESSAGES: [(&str, &str, &[u8]); 4] = [
    (
        "",
        "1704103200.M1P1.host:2,S",
        b"From: =?utf-8?q?J=C3=B6rg?= <j@example.org>\r\nTo: alice@example.org\r\n\
Subject: =?utf-8?b?R3LDvMOfZQ==?= and more\r\nDate: Mon, 01 Jan 2024 10:00:00 +0000\r\n\
Content-Type: text/plain; charset=utf-8\r\nContent-Transfer-Encoding: base64\r\n\r\n\
w5xiZXJyYXNjaHVuZw==\r\n",
    ),
    ("", "1704189600.M2P1.host:2,RF", b"Subject: lf only\n\nline one\n"),
    (
        ".Archive",
        "1700000000.M3P1.host:2,S",
        b"From: e@example.org\r\nSubject: parts\r\nMIME-Version: 1.0\r\n\
Content-Type: multipart/mixed; boundary=\"XX\"\r\n\r\n--XX\r\n\
Content-Type: text/plain\r\n\r\npart one\r\n--XX\r\nContent-Type: message/rfc822\r\n\r\n\
Subject: inner\r\n\r\ninner body\r\n--XX--\r\n",
    ),
    (".Archive.2023", "1690000000.M4P1.host", b"Subject: nested\r\n\r\nx\r\n"),
];

/// The repository, backed up once per process.
fn harness() -> &'static Harness {
    static H: OnceLock<Harness> = OnceLock::new();
    H.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("mailvault-fuzz-imap-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let md = dir.join("mail/example.org/alice/Maildir");
        for (folder, name, data) in MESSAGES {
            let sub = if name.contains(":2,") { "cur" } else { "new" };
            for s in ["cur", "new", "tmp"] {
                std::fs::create_dir_all(md.join(folder).join(s)).unwrap();
            }
            std::fs::write(md.join(folder).join(sub).join(name), data).unwrap();
        }
        let init = InitOptions {
            kdf: KdfParams {
                m_cost: 256,
                t_cost: 1,
                p_cost: 1,
            },
            ..Default::default()
        };
        let store = Arc::new(LocalStore::new(&dir.join("repo")));
        let mut repo = Repository::init(store, b"fuzz", &init).unwrap();
        let opts = BackupOptions {
            source: dir.join("mail"),
            accounts: Vec::new(),
            jobs: 1,
            stat_unchanged: false,
            run: RunOptions::new("fuzz"),
        };
        let source = MaildirSource::new(&opts).unwrap();
        let time = mailvault_core::now();
        mailvault_core::ops::backup::run(&mut repo, &source, &opts.run, time, &NoProgress).unwrap();
        let cache = dir.join("cache");
        std::fs::create_dir_all(&cache).unwrap();
        Harness::new(repo, Path::new(&cache), ACCOUNT).unwrap()
    })
}

fuzz_target!(|data: &[u8]| {
    let out = harness().run(data).expect("the harness logs in");
    // Everything sent is lines and literals: the greeting at least.
    assert!(out.starts_with(b"* OK"));
});
