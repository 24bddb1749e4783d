#![allow(clippy::unwrap_used)]
//! A Maildir folder larger than the window a backup reads and saves at a time (issue 26,
//! item 3: its entries go to the folder's chunks as they come, in key order, and the
//! parent's messages are found by key in its chunks, not in a map of its entries): backed
//! up, then changed every way a mail server changes a folder (messages moved to another
//! folder, flags changed, moved from `new/` to `cur/`, deleted, delivered), backed up
//! again reading only what is new, and restored byte for byte each time.

mod common;

use common::*;
use std::fs;
use std::path::Path;

/// Messages in INBOX: more than two windows of the backup's.
const INBOX: usize = 9_500;

fn name(i: usize) -> String {
    format!("{}.M{i}P7.host", 1_700_000_000 + i)
}

/// Renames every `n`th message of `from` (a `cur/` or `new/`) to `to`, as `rename(i)`.
fn rename_each(from: &Path, to: &Path, n: usize, rename: impl Fn(&str) -> String) -> usize {
    let mut names: Vec<String> = (fs::read_dir(from).unwrap())
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    let mut moved = 0;
    for old in names.iter().step_by(n) {
        fs::rename(from.join(old), to.join(rename(old))).unwrap();
        moved += 1;
    }
    moved
}

#[test]
fn a_folder_larger_than_a_window_is_backed_up_as_it_changes_and_restored_whole() {
    let t = tempfile::tempdir().unwrap();
    let src = t.path().join("vmail");
    let md = src.join("example.org/bob/Maildir");
    let _rest = at_rest(&src);
    for i in 0..INBOX {
        let (sub, n) = match i % 10 {
            0 => ("new", name(i)),
            _ => ("cur", format!("{}:2,S", name(i))),
        };
        let body = message("bob@example.org", &format!("m{i}"), &format!("body {i}"));
        put_msg(&md, "", sub, &n, &body, 1_700_000_000 + i as i64);
    }
    put_msg(
        &md,
        ".Archive",
        "cur",
        "1600000000.M1P1.host:2,S",
        b"Subject: old\n\nold\n",
        1_600_000_000,
    );
    fs::write(md.join(".Archive/maildirfolder"), b"").unwrap();
    let mut repo = init_repo(&t.path().join("repo"));
    let first = maildir_backup(&mut repo, &src, vec![]);
    assert_eq!(
        (first.items_new, first.items_unchanged),
        (INBOX as u64 + 1, 0)
    );
    maildir_restore(&repo, "latest", &t.path().join("r1"));
    assert_same_tree(&src, &t.path().join("r1"));

    // Every way a server changes a folder, all through INBOX.
    let (cur, new) = (md.join("cur"), md.join("new"));
    let archived = rename_each(&cur, &md.join(".Archive/cur"), 37, |n| n.to_string());
    let flagged = rename_each(&cur, &cur, 11, |n| format!("{n}R"));
    let seen = rename_each(&new, &cur, 3, |n| format!("{n}:2,S"));
    let mut deleted = 0;
    for i in (5..INBOX).step_by(401) {
        let p = cur.join(format!("{}:2,S", name(i)));
        if fs::remove_file(&p).is_ok() {
            deleted += 1;
        }
    }
    for i in 0..7 {
        let n = format!("{}.M{i}P9.host", 1_800_000_000 + i);
        put_msg(
            &md,
            "",
            "new",
            &n,
            &message("bob@example.org", &n, "new"),
            1_800_000_000,
        );
    }
    assert!(archived > 200 && flagged > 700 && seen > 250 && deleted > 10);

    let second = maildir_backup(&mut repo, &src, vec![]);
    let total = (INBOX + 1 - deleted + 7) as u64;
    assert_eq!(second.items_total, total, "{second:?}");
    assert_eq!(
        (second.items_new, second.items_unchanged),
        (7, total - 7),
        "only the delivered messages are read; the moved ones are found by key"
    );
    maildir_restore(&repo, "latest", &t.path().join("r2"));
    assert_same_tree(&src, &t.path().join("r2"));
    let c = check_all(&repo);
    assert!(c.ok(), "{:?}", c.errors);
}
