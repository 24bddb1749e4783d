//! `index`, `search`, `show` and `restore --message`: messages planted in a generated
//! Maildir store (a word only in a base64 HTML part, one in a latin-1 quoted-printable
//! part, an ISO-2022-JP subject, attachment names, an address only in Cc, dates, flags, a
//! message deleted before the second backup, one message delivered to 50 mailboxes), each
//! query form answering exactly the expected set; indexing counted (each content once,
//! only the new ones after an incremental backup).
#![allow(clippy::unwrap_used)]

mod common;

use common::{maildir_message as write, Env};
use serde_json::Value;
use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

/// A message: its account, folder directory (`""` INBOX, `.Archive`), file name and bytes.
struct Planted {
    account: &'static str,
    dir: &'static str,
    name: String,
    data: String,
}

fn plain(key: &str, from: &str, to: &str, subject: &str, date: &str, body: &str) -> String {
    format!(
        "From: {from}\r\nTo: {to}\r\nSubject: {subject}\r\nDate: {date}\r\n\
         Message-ID: <{key}@example.org>\r\n\r\n{body}\r\n"
    )
}

const DATE: &str = "Mon, 15 Jan 2024 10:00:00 +0000";

/// The planted messages, by key (the part of the file name before `:2,`).
fn planted() -> Vec<Planted> {
    let mut v = Vec::new();
    let mut put = |account, dir, key: &str, flags: &str, data: String| {
        v.push(Planted {
            account,
            dir,
            name: format!("{key}:2,{flags}"),
            data,
        })
    };
    const A: &str = "alice@example.org";
    const B: &str = "bob@example.org";
    put(A, "", "html64", "S", format!(
        "From: Shipping <ship@example.com>\r\nTo: alice@example.org\r\nSubject: your order\r\n\
         Date: {DATE}\r\nMIME-Version: 1.0\r\nContent-Type: text/html; charset=utf-8\r\n\
         Content-Transfer-Encoding: base64\r\n\r\n\
         PGh0bWw+PGJvZHk+PHA+VGhlIDxiPnplYnJhcXVhcnR6PC9iPiBzaGlwbWVudDwvcD48c2NyaXB0PnZhciBoaWRkZW5zY3JpcHR3b3JkPTE7PC9zY3JpcHQ+PC9ib2R5PjwvaHRtbD4=\r\n"
    ));
    put(
        A,
        "",
        "latin1",
        "S",
        format!(
            "From: Hans <hans@example.de>\r\nTo: alice@example.org\r\nSubject: Gruss\r\n\
         Date: {DATE}\r\nMIME-Version: 1.0\r\nContent-Type: text/plain; charset=iso-8859-1\r\n\
         Content-Transfer-Encoding: quoted-printable\r\n\r\nViele Gr=FC=DFe aus M=FCnchen\r\n"
        ),
    );
    put(A, "", "japanese", "", format!(
        "From: Taro <taro@example.jp>\r\nTo: alice@example.org\r\n\
         Subject: =?ISO-2022-JP?B?GyRCMnE1RCROTT1EahsoQiBrYWlnaQ==?=\r\nDate: {DATE}\r\n\r\nsee subject\r\n"
    ));
    put(
        A,
        ".Archive",
        "attached",
        "",
        format!(
            "From: Accounts <acc@example.com>\r\nTo: alice@example.org\r\nSubject: statement\r\n\
         Date: {DATE}\r\nMIME-Version: 1.0\r\nContent-Type: multipart/mixed; boundary=XX\r\n\r\n\
         --XX\r\nContent-Type: text/plain\r\n\r\nsee attached\r\n\
         --XX\r\nContent-Type: application/pdf\r\n\
         Content-Disposition: attachment; filename*=UTF-8''r%C3%A9sum%C3%A9-quarterly.pdf\r\n\
         Content-Transfer-Encoding: base64\r\n\r\nJVBERi0xLjQK\r\n--XX--\r\n"
        ),
    );
    put(
        A,
        ".Archive",
        "ccd",
        "F",
        plain(
            "ccd",
            "Dave <dave@example.com>",
            "alice@example.org",
            "lunch",
            DATE,
            "Cc is below\r\nCc: nobody",
        )
        .replace(
            "To: alice@example.org\r\n",
            "To: alice@example.org\r\nCc: Carol Ccaddress <carol@example.net>\r\n",
        ),
    );
    put(
        A,
        ".Sent",
        "old2021",
        "S",
        plain(
            "old2021",
            "alice@example.org",
            "bob@example.org",
            "tax papers 2021",
            "Mon, 15 Mar 2021 10:00:00 +0000",
            "the invoice for march",
        ),
    );
    put(
        A,
        ".Sent",
        "mid2023",
        "S",
        plain(
            "mid2023",
            "alice@example.org",
            "bob@example.org",
            "summer plans",
            "Sat, 01 Jul 2023 10:00:00 +0000",
            "an invoicing question",
        ),
    );
    put(
        B,
        "",
        "gone",
        "S",
        plain(
            "gone",
            "Eve <eve@example.com>",
            "bob@example.org",
            "the vanishing note",
            DATE,
            "this one is deleted before the second backup: pomegranate",
        ),
    );
    put(
        B,
        "",
        "stays",
        "",
        plain(
            "stays",
            "Eve <eve@example.com>",
            "bob@example.org",
            "the lasting note",
            DATE,
            "this one stays: invoice attached soon",
        ),
    );
    v
}

/// The keys of a search's hits (`--json`), sorted.
fn keys(v: &Value) -> BTreeSet<String> {
    v["hits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["key"].as_str().unwrap().to_string())
        .collect()
}

fn search(e: &Env, args: &[&str]) -> Value {
    let mut all = vec!["search", "--limit", "1000"];
    all.extend_from_slice(args);
    e.json(0, &all)
}

fn set(keys: &[&str]) -> BTreeSet<String> {
    keys.iter().map(|k| k.to_string()).collect()
}

/// An account of `n` messages in INBOX, keys `{prefix}{i}`, bodies `{word}{i}` plus `extra`,
/// backed up into a new repository; the source and the snapshot's id.
fn numbered(
    e: &Env,
    account: &str,
    prefix: &str,
    n: u64,
    word: &str,
    extra: &str,
) -> (String, String) {
    let store = e.path("mail");
    for i in 0..n {
        let body = format!("{word}{i}{extra}");
        let data = plain(
            &format!("{prefix}{i}"),
            "x@example.com",
            account,
            "s",
            DATE,
            &body,
        );
        write(
            &store,
            account,
            "",
            &format!("{prefix}{i}:2,"),
            data.as_bytes(),
        );
    }
    let src = format!("maildir:{}", store.display());
    e.ok(&["init"]);
    e.ok(&["backup", &src]);
    let first = e.json(0, &["snapshots"])[0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    (src, first)
}

#[test]
fn planted_messages_are_found_by_every_query_form() {
    let e = Env::new();
    let store = e.path("mail");
    for p in planted() {
        write(&store, p.account, p.dir, &p.name, p.data.as_bytes());
    }
    // One message delivered to 50 mailboxes.
    let shared = plain(
        "shared",
        "news@example.com",
        "all@example.org",
        "newsletter",
        DATE,
        "the quarterly xylophone newsletter",
    );
    for n in 0..50 {
        write(
            &store,
            &format!("user{n}@example.org"),
            "",
            "shared:2,",
            shared.as_bytes(),
        );
    }
    // Keywords: Dovecot's letters, named by the folder's dovecot-keywords.
    for (name, text) in [
        ("kwa:2,Sa", "one"),
        ("kwb:2,Sb", "two"),
        ("kwp:2,PS", "three"),
    ] {
        let data = plain(
            name.split(':').next().unwrap(),
            "k@example.com",
            "kw@example.org",
            "kiwiword",
            DATE,
            text,
        );
        write(&store, "kw@example.org", "", name, data.as_bytes());
    }
    fs::write(
        store.join("example.org/kw/Maildir/dovecot-keywords"),
        "0 $Junk\n1 Project\n",
    )
    .unwrap();
    let src = format!("maildir:{}", store.display());
    e.ok(&["init"]);
    e.ok(&["backup", &src]);
    let first = e.json(0, &["index"]);
    assert_eq!(first["indexed"], 13, "each content once: {first}");
    assert_eq!(first["contents"], 13);
    assert_eq!(first["splits"].as_array().unwrap().len(), 1);

    // The second backup: `gone` deleted, two new messages.
    let bob = store.join("example.org/bob/Maildir/cur");
    fs::remove_file(bob.join("gone:2,S")).unwrap();
    for key in ["new1", "new2"] {
        let data = plain(
            key,
            "Frank <frank@example.com>",
            "bob@example.org",
            "fresh",
            DATE,
            "fresh kumquat",
        );
        fs::write(bob.join(format!("{key}:2,")), data).unwrap();
    }
    e.ok(&["backup", &src]);
    let second = e.json(0, &["index"]);
    assert_eq!(second["indexed"], 2, "only the new contents: {second}");
    assert_eq!(second["already_indexed"], 13);
    let third = e.json(0, &["index"]);
    assert_eq!(third["indexed"], 0, "{third}");
    assert_eq!(third["splits"].as_array().unwrap().len(), 0);

    let cases: &[(&[&str], &[&str])] = &[
        (&["zebraquartz"], &["html64"]),
        (&["hiddenscriptword"], &[]),
        (&["münchen"], &["latin1"]),
        (&["MUNCHEN"], &["latin1"]),
        (&["subject:会議"], &["japanese"]),
        (&["subject:予定"], &["japanese"]),
        (&["subject:会議の予定"], &["japanese"]),
        (&["kaigi"], &["japanese"]),
        (&["filename:résumé"], &["attached"]),
        (&["filename:quarterly"], &["attached"]),
        (&["has:attachment"], &["attached"]),
        (&["to:carol"], &["ccd"]),
        (&["from:carol"], &[]),
        (&["to:carol@example.net"], &["ccd"]),
        (&["before:2022-01-01"], &["old2021"]),
        (&["after:2021-03-16", "before:2024-01-01"], &["mid2023"]),
        (&["on:2023-07"], &["mid2023"]),
        (&["flag:flagged"], &["ccd"]),
        (&["folder:Sent"], &["old2021", "mid2023"]),
        (&["folder:Sent -invoice"], &["mid2023"]),
        (&["invoice"], &["old2021", "stays"]),
        (&["invoic*"], &["old2021", "mid2023", "stays"]),
        (&["\"lasting note\""], &["stays"]),
        (&["\"note lasting\""], &[]),
        // Phrases in the body: found by their words, then checked on the message.
        (&["\"invoice attached soon\""], &["stays"]),
        (&["\"attached invoice\""], &[]),
        (&["\"one stays\" -kumquat"], &["stays"]),
        // A phrase under a negation: its candidates are checked before it hides them.
        (
            &["account:bob@example.org -\"invoice attached soon\""],
            &["new1", "new2"],
        ),
        (
            &["account:bob@example.org -\"attached invoice\""],
            &["stays", "new1", "new2"],
        ),
        (&["from:hans OR from:taro"], &["latin1", "japanese"]),
        (&["account:bob@example.org"], &["stays", "new1", "new2"]),
        (&["kumquat"], &["new1", "new2"]),
        (&["keyword:project"], &["kwb"]),
        (&["keyword:$junk kiwiword"], &["kwa"]),
        (&["keyword:$Forwarded"], &["kwp"]),
        (&["kiwiword -keyword:project"], &["kwa", "kwp"]),
        (&["keyword:nonesuch"], &[]),
        (&["pomegranate"], &[]),
        (&["larger:100000"], &[]),
    ];
    for (q, want) in cases {
        let got = keys(&search(&e, q));
        assert_eq!(got, set(want), "query {q:?}");
    }
    // Every snapshot: the deleted message too, and `deleted` finds it alone.
    let all = search(&e, &["--all-snapshots", "pomegranate"]);
    assert_eq!(keys(&all), set(&["gone"]));
    assert_eq!(all["hits"][0]["deleted"], true);
    assert_eq!(keys(&search(&e, &["deleted"])), set(&["gone"]));
    // One content, 50 places.
    let shared_hits = search(&e, &["xylophone"]);
    assert_eq!(shared_hits["total"], 50, "{shared_hits}");
    // --account narrows.
    let narrowed = search(&e, &["--account", "user7@example.org", "xylophone"]);
    assert_eq!(narrowed["total"], 1);

    // find → look → put back.
    let hit = &search(&e, &["zebraquartz"])["hits"][0];
    let id = hit["id"].as_str().unwrap();
    let shown = e.ok(&["show", &id[..16]]);
    assert!(shown.contains("Subject:  your order"), "{shown}");
    assert!(shown.contains("zebraquartz"), "{shown}");
    assert!(
        !shown.contains("hiddenscriptword"),
        "no script text: {shown}"
    );
    let target = e.path("restored");
    e.ok(&[
        "restore",
        "latest",
        "--message",
        &id[..16],
        "--target",
        &format!("maildir:{}", target.display()),
    ]);
    let back = fs::read(target.join("example.org/alice/Maildir/cur/html64:2,S")).unwrap();
    let want = planted()
        .into_iter()
        .find(|p| p.name == "html64:2,S")
        .unwrap();
    assert!(back == want.data.as_bytes(), "restored byte for byte");
    let restored: Vec<_> = walk(&target);
    assert_eq!(restored.len(), 1, "only that message: {restored:?}");
}

fn walk(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for e in fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p.display().to_string());
        }
    }
    out
}

#[test]
fn a_query_that_does_not_parse_is_an_error_naming_where() {
    let e = Env::new();
    e.ok(&["init"]);
    let (code, _, err) = e.run_text(&["search", "colour:red"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("unknown field `colour:`"), "{err}");
}

/// The repository's splits (`search/`).
fn splits(e: &Env) -> usize {
    fs::read_dir(e.repo().join("search")).map_or(0, |d| d.count())
}

#[test]
fn splits_are_merged_and_pruned_and_answers_stay_the_same() {
    let e = Env::new();
    let store = e.path("mail");
    let (src, first) = numbered(&e, "y@example.org", "k", 12, "uniqueword", "");
    // A split per message: more than eight, so the run merges them into one.
    let rep = e.json(0, &["index", "--split-docs", "1"]);
    assert_eq!(rep["indexed"], 12, "{rep}");
    assert_eq!(rep["merged"], 12, "{rep}");
    assert_eq!(splits(&e), 13, "the merged ones stay until a prune");
    let found = |word: &str, all: bool| {
        let mut args = vec!["search"];
        if all {
            args.push("--all-snapshots");
        }
        args.push(word);
        search(&e, &args[1..])["total"].as_u64().unwrap()
    };
    for n in 0..12 {
        assert_eq!(
            found(&format!("uniqueword{n}"), false),
            1,
            "word {n} after the merge"
        );
    }
    let pruned = e.json(0, &["prune"]);
    assert_eq!(pruned["search"]["deleted"], 12, "{pruned}");
    assert_eq!(pruned["search"]["merged"], 0, "nothing dead yet: {pruned}");
    assert_eq!(splits(&e), 1);
    assert_eq!(found("uniqueword5", false), 1);

    // Three messages deleted, the snapshot that held them forgotten: gone from every
    // answer at once, then from the index by the prune.
    for n in 0..3 {
        fs::remove_file(store.join(format!("example.org/y/Maildir/cur/k{n}:2,"))).unwrap();
    }
    e.ok(&["backup", &src]);
    assert_eq!(
        found("uniqueword1", true),
        1,
        "an older snapshot still holds it"
    );
    e.ok(&["forget", &first]);
    assert_eq!(
        found("uniqueword1", true),
        0,
        "its only snapshot is forgotten"
    );
    let pruned = e.json(0, &["prune"]);
    assert_eq!(pruned["search"]["merged"], 1, "{pruned}");
    assert_eq!(pruned["search"]["deleted"], 1, "{pruned}");
    assert_eq!(splits(&e), 1);
    for n in 3..12 {
        assert_eq!(
            found(&format!("uniqueword{n}"), true),
            1,
            "word {n} after the prune"
        );
    }
    let again = e.json(0, &["index"]);
    assert_eq!(
        again["indexed"], 0,
        "every live content is still indexed: {again}"
    );
    assert_eq!(again["already_indexed"], 9, "{again}");
}

#[test]
fn a_killed_index_resumes_and_check_and_repair_keep_the_index_whole() {
    let e = Env::new();
    const N: u64 = 3000;
    numbered(&e, "z@example.org", "m", N, "word", " common");
    // Killed once a few splits are in the repository.
    let mut child = e
        .cmd(&["index", "-q", "--split-docs", "20"])
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while splits(&e) < 3 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    assert!(
        child.try_wait().unwrap().is_none(),
        "the index run finished before it could be killed: make the store bigger"
    );
    child.kill().unwrap();
    child.wait().unwrap();
    let check = e.json(0, &["check"]);
    let not_indexed = check["search"]["not_indexed"].as_u64().unwrap();
    assert!(not_indexed > 0 && not_indexed < N, "{}", check["search"]);
    assert!(
        check["warnings"].to_string().contains("not indexed"),
        "{check}"
    );

    let resumed = e.json(0, &["index"]);
    assert_eq!(
        resumed["indexed"].as_u64().unwrap(),
        not_indexed,
        "{resumed}"
    );
    assert_eq!(
        resumed["already_indexed"].as_u64().unwrap(),
        N - not_indexed
    );
    let check = e.json(0, &["check"]);
    assert_eq!(check["search"]["not_indexed"], 0, "{}", check["search"]);
    assert_eq!(check["search"]["dead"], 0, "{}", check["search"]);
    assert_eq!(search(&e, &["common"])["total"], N);

    // A live split damaged: check names it, repair sets it aside, index brings its
    // messages back.
    let live = e.json(0, &["check"])["search"].clone();
    assert_eq!(live["damaged"].as_array().unwrap().len(), 0);
    e.ok(&["prune"]);
    let dir = e.repo().join("search");
    let split = fs::read_dir(&dir).unwrap().next().unwrap().unwrap().path();
    let mut bytes = fs::read(&split).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x40;
    fs::write(&split, bytes).unwrap();
    let bad = e.json(2, &["check"]);
    assert_eq!(bad["errors"][0]["kind"], "search", "{bad}");
    assert_eq!(bad["errors"][0]["repair"], "mailvault repair index");
    let repaired = e.json(0, &["repair", "index"]);
    assert_eq!(
        repaired["search_damaged"].as_array().unwrap().len(),
        1,
        "{repaired}"
    );
    assert!(
        search(&e, &["common"])["total"].as_u64().unwrap() < N,
        "its messages are gone from the index"
    );
    let again = e.json(0, &["index"]);
    assert!(again["indexed"].as_u64().unwrap() > 0, "{again}");
    let check = e.json(0, &["check"]);
    assert_eq!(check["errors"].as_array().unwrap().len(), 0, "{check}");
    assert_eq!(check["search"]["not_indexed"], 0, "{}", check["search"]);
    assert_eq!(search(&e, &["common"])["total"], N);
}

/// A second host (a cache of its own) searches what the first indexed in a MinIO bucket;
/// a prune running meanwhile, merging and deleting splits, leaves both working.
#[test]
fn a_second_host_searches_an_index_on_s3_while_a_prune_runs() {
    let e = Env::s3("search-two-hosts");
    let store = e.path("mail");
    let (src, first) = numbered(&e, "w@example.org", "s", 40, "s3word", " shared");
    e.ok(&["index", "--split-docs", "4"]);
    for n in 0..10 {
        fs::remove_file(store.join(format!("example.org/w/Maildir/cur/s{n}:2,"))).unwrap();
    }
    e.ok(&["backup", &src]);
    e.ok(&["forget", &first]);
    let other_cache = e.path("host-b-cache");
    let other = other_cache.to_str().unwrap();
    let on_b = |q: &str| {
        let v = e.json(0, &["--cache-dir", other, "search", "--limit", "100", q]);
        v["total"].as_u64().unwrap()
    };
    assert_eq!(on_b("shared"), 30, "host B sees host A's index");
    std::thread::scope(|s| {
        let prune = s.spawn(|| e.json(0, &["prune"]));
        let searches = s.spawn(|| (0..5).map(|_| on_b("shared")).collect::<Vec<_>>());
        let pruned = prune.join().unwrap();
        assert!(
            pruned["search"]["deleted"].as_u64().unwrap() > 0,
            "{pruned}"
        );
        assert!(searches.join().unwrap().iter().all(|&n| n == 30));
    });
    assert_eq!(on_b("shared"), 30, "host B after the prune");
    assert_eq!(
        search(&e, &["shared"])["total"],
        30,
        "host A after the prune"
    );
    assert_eq!(on_b("s3word3"), 0);
    assert_eq!(on_b("s3word33"), 1);
}

/// A phrase in the body: the hits shown are checked on the messages, and the total says
/// when hits after the page were not.
#[test]
fn a_phrase_page_is_checked_and_its_total_says_when_it_is_not() {
    let e = Env::new();
    // 12 messages hold "amber beacon"; 40 hold both words, not in that order.
    let store = e.path("mail");
    for i in 0..52u64 {
        let body = match i < 12 {
            true => format!("met at the amber beacon today {i}"),
            false => format!("the beacon was amber today {i}"),
        };
        let data = plain(
            &format!("m{i}"),
            "x@example.com",
            "p@example.org",
            "s",
            DATE,
            &body,
        );
        write(
            &store,
            "p@example.org",
            "",
            &format!("m{i}:2,"),
            data.as_bytes(),
        );
    }
    e.ok(&["init"]);
    e.ok(&["backup", &format!("maildir:{}", store.display())]);
    e.ok(&["index"]);
    let holds: BTreeSet<String> = (0..12).map(|i| format!("m{i}")).collect();
    let page = e.json(0, &["search", "--limit", "5", "\"amber beacon\""]);
    let got = keys(&page);
    assert_eq!(got.len(), 5, "{page}");
    assert!(
        got.is_subset(&holds),
        "only messages holding the phrase: {got:?}"
    );
    let total = page["total"].as_u64().unwrap();
    match page["total_unsure"].as_bool().unwrap() {
        true => assert!((12..=52).contains(&total), "{page}"),
        false => assert_eq!(total, 12, "{page}"),
    }
    // Page 3 of 5 a page: the 11th and 12th.
    let third = e.json(
        0,
        &["search", "--limit", "5", "--page", "3", "\"amber beacon\""],
    );
    assert_eq!(keys(&third).len(), 2, "{third}");
    assert!(keys(&third).is_subset(&holds));
    assert_eq!(third["total"], 12, "all checked to reach page 3: {third}");
    assert_eq!(third["total_unsure"], false);
    let all = search(&e, &["\"amber beacon\""]);
    assert_eq!(keys(&all), holds);
    assert_eq!(all["total_unsure"], false);

    // A batch: one process, one JSON line per query, a bad query reported in its line.
    let file = e.path("queries.txt");
    fs::write(
        &file,
        "# phrases\n\"amber beacon\"\n\nfrom:(\n-\"amber beacon\" today\n",
    )
    .unwrap();
    let out = e.expect(
        1,
        &["--json", "search", "--queries", file.to_str().unwrap()],
    );
    let lines: Vec<Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 3, "{out}");
    assert_eq!(lines[0]["query"], "\"amber beacon\"");
    assert_eq!(lines[0]["result"]["total"], 12);
    assert!(lines[0]["elapsed_ms"].as_f64().unwrap() >= 0.0);
    assert!(
        lines[1]["error"].as_str().unwrap().contains("from:"),
        "{}",
        lines[1]
    );
    assert_eq!(lines[2]["result"]["total"], 40, "{}", lines[2]);
}

/// Where each hit is and since when, for comparing two answers.
fn places_of(v: &Value) -> BTreeSet<String> {
    (v["hits"].as_array().unwrap().iter())
        .map(|h| {
            let s = |k: &str| h[k].to_string();
            [
                "account",
                "folder",
                "key",
                "flags",
                "first_snapshot",
                "last_snapshot",
                "deleted",
            ]
            .map(s)
            .join(" ")
        })
        .collect()
}

/// The places map kept in the cache, folded a snapshot at a time, answers as one built
/// afresh from the repository (`--no-cache`): after flag changes, deletions, new mail,
/// a forget, and a damaged cache file.
#[test]
fn the_places_kept_in_the_cache_answer_as_a_fresh_build() {
    let e = Env::new();
    // A folder that never changes, and one of many chunks that changes a little.
    let quiet = plain(
        "q0",
        "x@example.com",
        "q@example.org",
        "s",
        DATE,
        "quiet common",
    );
    write(
        &e.path("mail"),
        "q@example.org",
        "",
        "q0:2,S",
        quiet.as_bytes(),
    );
    let (src, first) = numbered(&e, "p@example.org", "m", 400, "w", " common");
    let same = |what: &str| {
        for q in [
            &["--all-snapshots", "common"][..],
            &["common"],
            &["--all-snapshots", "flag:flagged"],
            &["deleted"],
            &["--all-snapshots", "w7 OR w8 OR w399 OR quiet"],
        ] {
            let kept = search(&e, q);
            let mut fresh = vec!["--no-cache"];
            fresh.extend_from_slice(q);
            let fresh = search(&e, &fresh);
            assert_eq!(places_of(&kept), places_of(&fresh), "{what}: {q:?}");
            assert_eq!(kept["total"], fresh["total"], "{what}: {q:?}");
        }
    };
    e.ok(&["index"]);
    same("one snapshot");
    let cur = e.path("mail/example.org/p/Maildir/cur");
    for round in 0..3u64 {
        // A flag change, a deletion, a new message.
        let i = round * 50;
        fs::rename(cur.join(format!("m{i}:2,")), cur.join(format!("m{i}:2,F"))).unwrap();
        fs::remove_file(cur.join(format!("m{}:2,", i + 1))).unwrap();
        let data = plain(
            &format!("n{round}"),
            "x@example.com",
            "p@example.org",
            "s",
            DATE,
            "new common",
        );
        write(
            &e.path("mail"),
            "p@example.org",
            "",
            &format!("n{round}:2,"),
            data.as_bytes(),
        );
        e.ok(&["backup", &src]);
        e.ok(&["index"]);
        same(&format!("after backup {round}"));
    }
    let all = search(&e, &["--all-snapshots", "common"]);
    assert_eq!(all["snapshots"], 4);
    // m0 flagged in the second snapshot: two hits (two file names), first and last apart.
    assert!(keys(&search(&e, &["--all-snapshots", "flag:flagged"])).contains("m0"));
    e.ok(&["forget", &first]);
    same("after a forget");
    assert_eq!(search(&e, &["--all-snapshots", "common"])["snapshots"], 3);
    // A damaged cache file is built again.
    let cached: Vec<PathBuf> = walk(&e.path("cache"))
        .into_iter()
        .filter(|p| p.ends_with("/places"))
        .map(PathBuf::from)
        .collect();
    assert_eq!(cached.len(), 1, "one places file");
    let mut bytes = fs::read(&cached[0]).unwrap();
    let mid = bytes.len() / 3;
    bytes[mid] ^= 0x55;
    fs::write(&cached[0], &bytes).unwrap();
    same("after damage");
}
