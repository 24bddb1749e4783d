//! `backup --index`: the contents a backup adds, indexed as it reads them, answer every
//! query as a repository indexed by `index` afterwards does; each content once (a message
//! delivered to many mailboxes, one copied to another folder later), a message stored as
//! several blobs, and a repository backed up before without an index (the rest indexed
//! after the backup). The splits' local copies are the directories they were built in.
#![allow(clippy::unwrap_used)]

mod common;

use common::{maildir_message as write, named, Env};
use serde_json::Value;
use std::collections::BTreeSet;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

fn message(key: &str, from: &str, subject: &str, body: &str) -> String {
    format!(
        "From: {from}\r\nTo: someone@example.org\r\nSubject: {subject}\r\n\
         Date: Mon, 15 Jan 2024 10:00:00 +0000\r\nMessage-ID: <{key}@example.org>\r\n\r\n{body}\r\n"
    )
}

/// A large body of distinct words (stored as several blobs), starting with `first`
/// (extraction keeps the first megabyte or so of the text).
fn long_body(first: &str) -> String {
    let mut s = format!("{first} ");
    let mut x: u64 = 7;
    while s.len() < 3 << 20 {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        s.push_str(&format!("w{:x} ", x >> 40));
        if s.len() % 64 < 8 {
            s.push_str("\r\n");
        }
    }
    s
}

/// The store: three accounts of ten messages each (words `alpha{i}`, `beta{i}`,
/// `gamma{i}`), one message delivered to five mailboxes, one large message.
fn store(root: &Path) {
    for (account, word) in [
        ("a@example.org", "alpha"),
        ("b@example.org", "beta"),
        ("c@example.com", "gamma"),
    ] {
        for i in 0..10 {
            let data = message(
                &format!("{word}{i}"),
                "x@example.com",
                "s",
                &format!("{word}{i} common"),
            );
            write(
                root,
                account,
                "",
                &format!("{word}{i}:2,S"),
                data.as_bytes(),
            );
        }
    }
    let shared = message(
        "shared",
        "news@example.com",
        "newsletter",
        "quarterly xylophone",
    );
    for n in 0..5 {
        write(
            root,
            &format!("u{n}@example.org"),
            "",
            "shared:2,",
            shared.as_bytes(),
        );
    }
    let big = message("big", "big@example.com", "large", &long_body("zanzibar"));
    write(root, "a@example.org", ".Archive", "big:2,S", big.as_bytes());
}

fn keys(v: &Value) -> BTreeSet<String> {
    v["hits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| format!("{} {}", h["account"], h["key"]))
        .collect()
}

const QUERIES: &[&str] = &[
    "common",
    "alpha3",
    "beta*",
    "xylophone",
    "zanzibar",
    "from:news@example.com",
    "subject:large",
    "account:c@example.com",
    "large -common",
];

#[test]
fn a_backup_that_indexes_answers_as_an_index_run_after_it() {
    let (inline, after) = (Env::new(), Env::new());
    for e in [&inline, &after] {
        store(&e.path("mail"));
        e.ok(&["init"]);
    }
    let src = |e: &Env| format!("maildir:{}", e.path("mail").display());
    let rep = inline.json(0, &["backup", "--index", &src(&inline)]);
    // 30 + the shared one + the large one, each once.
    assert_eq!(rep["index"]["indexed"], 32, "{rep}");
    assert_eq!(rep["index"]["as_read"], 32, "{rep}");
    assert_eq!(rep["index"]["already_indexed"], 0, "{rep}");
    assert_eq!(rep["index"]["contents"], 32, "{rep}");
    after.ok(&["backup", &src(&after)]);
    assert_eq!(after.json(0, &["index"])["indexed"], 32);
    for q in QUERIES {
        let got = inline.json(0, &["search", "--limit", "100", q]);
        let want = after.json(0, &["search", "--limit", "100", q]);
        assert!(!keys(&want).is_empty(), "{q}: {want}");
        assert_eq!(keys(&got), keys(&want), "{q}");
    }
    assert_eq!(keys(&inline.json(0, &["search", "xylophone"])).len(), 5);
    // The splits' local copies: built in place, the cache's owner's alone, no
    // temporary left.
    assert!(named(&inline.path("cache"), ".build-").is_empty());
    let splits: Vec<_> = fs::read_dir(inline.repo().join("search"))
        .unwrap()
        .flatten()
        .collect();
    assert_eq!(splits.len(), 1);
    let name = splits[0].file_name().to_string_lossy().into_owned();
    let local = named(&inline.path("cache"), &name);
    assert_eq!(local.len(), 1, "{local:?}");
    assert_eq!(
        fs::metadata(&local[0]).unwrap().permissions().mode() & 0o777,
        0o700
    );
    for f in fs::read_dir(&local[0]).unwrap().flatten() {
        let mode = f.metadata().unwrap().permissions().mode() & 0o777;
        let n = f.file_name().to_string_lossy().into_owned();
        assert!(mode == 0o600 || n.starts_with(".tantivy"), "{n}: {mode:o}");
    }
    let check = inline.json(0, &["check"]);
    assert_eq!(check["search"]["not_indexed"], 0, "{}", check["search"]);
    assert_eq!(check["errors"].as_array().unwrap().len(), 0, "{check}");

    // Three new messages and a copy of one the repository has (in another folder): the
    // copy's content is not new, and a split holds it already.
    let store = inline.path("mail");
    for i in 0..3 {
        let data = message(
            &format!("delta{i}"),
            "y@example.com",
            "s",
            &format!("delta{i}"),
        );
        write(
            &store,
            "b@example.org",
            "",
            &format!("delta{i}:2,"),
            data.as_bytes(),
        );
    }
    let copy = fs::read(store.join("example.org/a/Maildir/cur/alpha3:2,S")).unwrap();
    write(&store, "a@example.org", ".Kept", "alpha3copy:2,S", &copy);
    let rep = inline.json(0, &["backup", "--index", &src(&inline)]);
    assert_eq!(rep["index"]["indexed"], 3, "only the new contents: {rep}");
    assert_eq!(rep["index"]["as_read"], 3, "{rep}");
    assert_eq!(rep["index"]["already_indexed"], 32, "{rep}");
    let found = inline.json(0, &["search", "alpha3"]);
    assert_eq!(found["total"], 2, "both copies: {found}");
}

#[test]
fn a_backup_that_indexes_indexes_what_earlier_backups_left() {
    let e = Env::new();
    store(&e.path("mail"));
    e.ok(&["init"]);
    let src = format!("maildir:{}", e.path("mail").display());
    e.ok(&["backup", &src]);
    let data = message("late", "z@example.com", "s", "latecomer");
    write(
        &e.path("mail"),
        "a@example.org",
        "",
        "late:2,",
        data.as_bytes(),
    );
    let rep = e.json(0, &["backup", "--index", &src]);
    // One as it was read; the 32 of the first backup after it.
    assert_eq!(rep["index"]["indexed"], 33, "{rep}");
    assert_eq!(rep["index"]["as_read"], 1, "{rep}");
    assert_eq!(rep["index"]["splits"].as_array().unwrap().len(), 2, "{rep}");
    assert_eq!(e.json(0, &["search", "latecomer"])["total"], 1);
    assert_eq!(e.json(0, &["search", "common"])["total"], 30);
    assert_eq!(e.json(0, &["index"])["indexed"], 0);
}
