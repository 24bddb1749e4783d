#![allow(clippy::unwrap_used)]
//! A Maildir folder whose `cur/` and `new/` are proven unchanged since the parent snapshot
//! is taken from it without a listing; anything that may have changed is listed
//! (docs/format.md, *Folders taken unchanged*). The clock a backup reads when it starts,
//! and the stamps of folders' directories, are set through the test hook
//! (`source::unchanged::hook`) to play a change in the same clock tick, or a filesystem
//! with coarse timestamps, deterministically; listings are counted through the walk's hook
//! (`source::walk::hook`, `Event::Listed`), which the listing of `cur/` and `new/` fires.

mod common;

use common::*;
use mailvault_core::ops::backup::BackupReport;
use mailvault_core::repo::compress::Compression;
use mailvault_core::repo::tree::Timestamp;
use mailvault_core::report::NoProgress;
use mailvault_core::source::unchanged::hook::{self as look, Look};
use mailvault_core::source::walk::{hook as walk_hook, Event};
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// What the hooks make a backup see.
#[derive(Default)]
struct Seen {
    /// The clock read when a backup starts (`None`: the real one).
    clock: Option<Timestamp>,
    /// Seconds added to the real clock.
    later: i64,
    /// The mtime and ctime every directory stamp shows (`None`: the real ones).
    times: Option<Timestamp>,
    /// `cur/` and `new/` directories listed.
    listed: Vec<PathBuf>,
}

/// A store with one account (`bob@example.org`: INBOX and Sent, a few messages each,
/// Dovecot's folder files) and a repository, the hooks on the store.
struct World {
    _t: tempfile::TempDir,
    src: PathBuf,
    md: PathBuf,
    repo_dir: PathBuf,
    repo: mailvault_core::Repository,
    seen: Arc<Mutex<Seen>>,
    _hooks: (look::Guard, walk_hook::Guard),
}

impl World {
    fn new() -> World {
        let t = tempfile::tempdir().unwrap();
        let src = t.path().join("vmail");
        let md = src.join("example.org/bob/Maildir");
        for (i, (folder, sub)) in [("", "cur"), ("", "new"), (".Sent", "cur")]
            .iter()
            .enumerate()
        {
            for j in 0..3 {
                let name = format!("{}{j}.M{i}P1.host:2,S", 1_700_000_000 + i);
                let name = if *sub == "new" {
                    name.split(':').next().unwrap().to_string()
                } else {
                    name
                };
                let body = message("bob@example.org", &format!("m{i}{j}"), "hello");
                put_msg(&md, folder, sub, &name, &body, 1_700_000_000);
            }
        }
        fs::write(md.join("dovecot-uidlist"), b"3 V1 N4\n1 a\n2 b\n3 c\n").unwrap();
        fs::write(md.join(".Sent/maildirfolder"), b"").unwrap();
        let repo_dir = t.path().join("repo");
        let repo = init_repo(&repo_dir);
        let seen = Arc::new(Mutex::new(Seen::default()));
        let s = seen.clone();
        let looks = look::set(&src, move |_, l| {
            let s = s.lock().unwrap();
            match l {
                Look::Clock(at) => {
                    if let Some(c) = s.clock {
                        **at = c;
                    }
                    at.secs += s.later;
                }
                Look::Stamp(st) => {
                    if let Some(t) = s.times {
                        (st.mtime, st.ctime) = (t, t);
                    }
                }
            }
        });
        let s = seen.clone();
        let walks = walk_hook::set(&src, move |e| {
            if let Event::Listed(p) = e {
                if p.ends_with("cur") || p.ends_with("new") {
                    s.lock().unwrap().listed.push(p.to_path_buf());
                }
            }
        });
        World {
            _t: t,
            src,
            md,
            repo_dir,
            repo,
            seen,
            _hooks: (looks, walks),
        }
    }

    /// A backup (`--rescan` if `rescan`); the directories it listed.
    fn backup_with(&mut self, rescan: bool) -> (BackupReport, Vec<PathBuf>) {
        self.seen.lock().unwrap().listed.clear();
        let mut opts = backup_opts(&self.src, vec![]);
        opts.run.rescan = rescan;
        // No dictionary to train: its samples list folders while a repository has none
        // (these messages are too few to make one), which is not the backup's listing.
        opts.run.compression = Some(Compression::Lz4);
        let r = backup(&mut self.repo, &opts, &NoProgress).unwrap();
        assert!(r.failures.is_empty(), "{:?}", r.failures);
        let mut listed = std::mem::take(&mut self.seen.lock().unwrap().listed);
        listed.sort();
        listed.dedup();
        (r, listed)
    }

    fn backup(&mut self) -> (BackupReport, Vec<PathBuf>) {
        self.backup_with(false)
    }

    /// Restores the latest snapshot and checks it is the store, byte for byte.
    fn restores_exactly(&self) {
        let out = self._t.path().join(format!("restored-{}", rand_suffix()));
        let repo = open_repo(&self.repo_dir);
        let r = restore_latest(&repo, &out);
        assert!(r.failures.is_empty(), "{:?}", r.failures);
        assert_same_tree(&self.src, &out);
    }

    fn set(&self, f: impl FnOnce(&mut Seen)) {
        f(&mut self.seen.lock().unwrap());
    }

    fn cur(&self) -> PathBuf {
        self.md.join("cur")
    }
}

fn rand_suffix() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    N.fetch_add(1, Ordering::Relaxed)
}

fn ts(secs: i64, nanos: u32) -> Timestamp {
    Timestamp { secs, nanos }
}

/// The real clock's second now.
fn this_second() -> i64 {
    mailvault_core::now().0
}

/// A change to a Maildir, named.
type Change = (&'static str, fn(&Path));

/// The three changes the rule must never miss, each made after the parent started.
fn changes() -> Vec<Change> {
    vec![
        ("a message added", |md: &Path| {
            let body = message("bob@example.org", "late", "arrived late");
            put_msg(
                md,
                "",
                "cur",
                "1800000000.M9P9.host:2,",
                &body,
                1_700_000_000,
            );
        }),
        ("a message removed", |md: &Path| {
            fs::remove_file(first_in(&md.join("cur"))).unwrap();
        }),
        ("a message renamed (flags)", |md: &Path| {
            let from = first_in(&md.join("cur"));
            let to = from.to_str().unwrap().replace(":2,S", ":2,RS");
            fs::rename(&from, to).unwrap();
        }),
    ]
}

fn first_in(dir: &Path) -> PathBuf {
    let mut names: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    names.sort();
    names.remove(0)
}

/// The proof: an unchanged folder is not listed (its `cur/` and `new/` are not read), its
/// messages count as unchanged, and the snapshot restores byte for byte. A folder file
/// replaced by a rename (as Dovecot writes `dovecot-uidlist`) is stored anew without a
/// listing of `cur/` or `new/`.
#[test]
fn an_unchanged_folder_is_not_listed() {
    let mut w = World::new();
    // Backups 10 s after the store was written: its directories are old enough.
    w.set(|s| s.later = 10);
    let (first, listed) = w.backup();
    assert_eq!(first.items_new, 9);
    assert_eq!(listed.len(), 4, "{listed:?}");
    let (second, listed) = w.backup();
    assert!(listed.is_empty(), "listed: {listed:?}");
    assert_eq!(
        (second.items_total, second.items_unchanged, second.items_new),
        (9, 9, 0),
        "{second:?}"
    );
    assert_eq!(second.bytes_total, first.bytes_total);
    // Its nodes are the parent's, scans included: no tree blob is new.
    assert_eq!(second.packs_written, 0, "{second:?}");
    w.restores_exactly();

    let tmp = w.md.join("tmp/uidlist");
    fs::write(&tmp, b"3 V1 N5\n1 a\n2 b\n3 c\n4 d\n").unwrap();
    fs::rename(&tmp, w.md.join("dovecot-uidlist")).unwrap();
    let (third, listed) = w.backup();
    assert!(listed.is_empty(), "listed: {listed:?}");
    assert_eq!((third.items_unchanged, third.items_new), (9, 0));
    w.restores_exactly();

    // `--rescan` lists them all, and finds nothing new: the nodes are the parent's.
    let (fourth, listed) = w.backup_with(true);
    assert_eq!(listed.len(), 4, "{listed:?}");
    assert_eq!((fourth.items_unchanged, fourth.items_new), (9, 0));
    assert_eq!(fourth.packs_written, 0, "{fourth:?}");
}

/// A message added, removed or renamed after the parent's start, in the same clock tick
/// (the stamps of `cur/` show the same times before and after, as a coarse clock leaves
/// them), is never missed: times not older than the parent's start by the margin prove
/// nothing, and the folder is listed. With nanosecond times (a change between the clock
/// reading and the `stat`) and whole seconds alike.
#[test]
fn changes_in_the_same_tick_as_the_parents_start_are_never_missed() {
    for (what, change) in changes() {
        for nanos in [600_000_000, 0] {
            let mut w = World::new();
            let x = this_second();
            // The parent started at x.5; the directories show x.6 (or x.0, whole seconds)
            // before and after the change.
            w.set(|s| {
                s.clock = Some(ts(x, 500_000_000));
                s.times = Some(ts(x, nanos));
            });
            w.backup();
            change(&w.md);
            let (r, listed) = w.backup();
            assert!(listed.contains(&w.cur()), "{what}, {nanos}: {listed:?}");
            w.restores_exactly();
            let _ = r;
        }
    }
}

/// A folder touched (its `cur/` mtime set, even to what it was: the ctime moves) is
/// listed again and found unchanged; the next backup proves it unchanged again.
#[test]
fn a_touched_folder_is_listed_again_and_found_unchanged() {
    let mut w = World::new();
    w.set(|s| s.later = 10);
    w.backup();
    let cur = w.cur();
    for now in [true, false] {
        // Now, then the mtime it has (only the ctime moves).
        let mtime = match now {
            true => filetime::FileTime::now(),
            false => filetime::FileTime::from_last_modification_time(&fs::metadata(&cur).unwrap()),
        };
        filetime::set_file_mtime(&cur, mtime).unwrap();
        let (r, listed) = w.backup();
        // The folder is listed (both its directories), the other one not.
        assert_eq!(listed, vec![cur.clone(), w.md.join("new")], "INBOX only");
        assert_eq!((r.items_unchanged, r.items_new), (9, 0), "{r:?}");
        let (r, listed) = w.backup();
        assert!(listed.is_empty(), "{listed:?}");
        assert_eq!((r.items_unchanged, r.items_new), (9, 0), "{r:?}");
    }
    w.restores_exactly();
}

/// Times with zero nanoseconds are taken for a filesystem with coarse timestamps (up to
/// 2 s, FAT's): 2.5 s before the parent's start proves nothing there, and the folder is
/// listed; the same age with nanoseconds proves the folder unchanged.
#[test]
fn coarse_timestamps_fall_back_to_listing_within_the_margin() {
    for (nanos, listed_again) in [(0, true), (100_000_000, false)] {
        let mut w = World::new();
        let x = this_second() - 100;
        w.set(|s| {
            s.clock = Some(ts(x + 2, 500_000_000 + nanos));
            s.times = Some(ts(x, nanos));
        });
        w.backup();
        let (r, listed) = w.backup();
        assert_eq!(!listed.is_empty(), listed_again, "{nanos}: {listed:?}");
        assert_eq!((r.items_unchanged, r.items_new), (9, 0), "{r:?}");
    }
}

/// The stamps a backup records are real: a `DirStamp` carries the directory's device and
/// inode (a `cur/` swapped for another directory, times and all, is listed).
#[test]
fn a_cur_swapped_for_another_directory_is_listed() {
    let mut w = World::new();
    w.set(|s| {
        s.later = 10;
        s.times = Some(ts(1_600_000_000, 5));
    });
    w.backup();
    let cur = w.cur();
    let other = w.md.join("cur.new");
    fs::create_dir(&other).unwrap();
    for e in fs::read_dir(&cur).unwrap() {
        let e = e.unwrap();
        fs::rename(e.path(), other.join(e.file_name())).unwrap();
    }
    let body = message("bob@example.org", "swapped", "in");
    fs::write(other.join("1800000001.M1P1.host:2,S"), body).unwrap();
    fs::remove_dir(&cur).unwrap();
    fs::rename(&other, &cur).unwrap();
    let (r, listed) = w.backup();
    assert!(listed.contains(&cur), "{listed:?}");
    assert_eq!(r.items_new, 1, "{r:?}");
    w.restores_exactly();
}
