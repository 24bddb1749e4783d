//! What every step of a restore shares: the repository, the target and its [`Caps`],
//! how blobs are read, the counts ([`Tally`]) and the end-of-run [`RestoreReport`].

use crate::dest::{Caps, Order, RestoreFailures, Target};
use crate::error::{Error, Result};
use crate::model::reader::{BlobCache, SpanOptions};
use crate::repo::Repository;
use crate::report::{per_sec, Progress};
use serde::Serialize;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Instant;

/// The end-of-run summary. `items_total` = `items_restored` + `items_unchanged` +
/// `items_failed`; `failures` also lists what is not a message (folder files,
/// directories), which `items_failed` does not count.
#[derive(Clone, Debug, Serialize, Default)]
pub struct RestoreReport {
    pub snapshot: String,
    pub accounts: u64,
    pub folders: u64,
    /// Messages selected for restore.
    pub items_total: u64,
    /// Messages written.
    pub items_restored: u64,
    /// Messages already in the target with identical bytes.
    pub items_unchanged: u64,
    /// Messages not restored.
    pub items_failed: u64,
    /// Of `items_failed`, those not tried: the target could take no more (its filesystem
    /// full, over quota or read-only: the one failure listed for it says which), so the
    /// restore stopped writing; or the restore was cancelled (`cancelled`). Run it again
    /// once there is room: what was restored is found and kept.
    pub items_not_tried: u64,
    /// The caller cancelled the restore ([`crate::report::Progress::cancelled`]): what
    /// was left is counted in `items_not_tried` and `files_not_tried`.
    pub cancelled: bool,
    /// Folder files not tried, for the same reason.
    pub files_not_tried: u64,
    /// Bytes of messages written.
    pub bytes_written: u64,
    /// Files of folders written whole: a Maildir's `dovecot-uidlist` and the like, the
    /// files of a `file:` snapshot (a failed one is listed in `failures`).
    pub files_restored: u64,
    /// Files of a `file:` snapshot made as hard links of another file restored (`dir:`
    /// targets), not written.
    pub files_linked: u64,
    /// Their bytes.
    pub file_bytes_written: u64,
    /// Files already in the target (the same bytes; a large file: complete, the same size
    /// and mtime), and hard links and symbolic links already there: not written.
    pub files_unchanged: u64,
    pub elapsed_secs: f64,
    pub items_per_sec: f64,
    pub mb_per_sec: f64,
    pub failures: Vec<crate::report::Failure>,
    /// What the restore did not do but is not a failure: owners left unset because the
    /// restore does not run as root.
    pub warnings: Vec<String>,
}

/// The counts of a restore, shared by its threads.
#[derive(Default)]
pub(super) struct Tally {
    pub(super) failures: RestoreFailures,
    pub(super) total: AtomicU64,
    pub(super) restored: AtomicU64,
    pub(super) unchanged: AtomicU64,
    pub(super) failed: AtomicU64,
    pub(super) bytes: AtomicU64,
    pub(super) files: AtomicU64,
    pub(super) file_bytes: AtomicU64,
    pub(super) files_present: AtomicU64,
    pub(super) files_linked: AtomicU64,
    /// Set by the first write that failed for a reason every later write would share
    /// ([`Error::stops_writes`]); what is left is then counted, not written.
    pub(super) stopped: std::sync::atomic::AtomicBool,
    pub(super) not_tried: AtomicU64,
    pub(super) files_not_tried: AtomicU64,
    /// Set with `stopped` when the caller cancelled ([`Progress::cancelled`]).
    pub(super) cancelled: std::sync::atomic::AtomicBool,
    /// Accounts whose home files (sieve scripts) the target has no place for.
    pub(super) homes_left: AtomicU64,
    /// Folders whose IMAP METADATA the target has no place for (a Maildir).
    pub(super) metadata_left: AtomicU64,
    /// Accounts whose IMAP quotas the target has no place for (a Maildir).
    pub(super) quota_left: AtomicU64,
    /// The store's own files ([`crate::repo::tree::RootTree::store`]) a whole restore
    /// left: the target has no place for them, or accounts are renamed.
    pub(super) store_left: AtomicU64,
    /// The most messages an [`Order::Any`] restore held at once (read from the snapshot,
    /// not written yet).
    #[cfg(test)]
    pub(super) most_held: std::sync::atomic::AtomicUsize,
}

pub(super) struct Ctx<'a, T> {
    pub(super) repo: &'a Repository,
    /// How messages' blobs are read.
    pub(super) spans: SpanOptions,
    pub(super) target: &'a T,
    pub(super) caps: Caps,
    pub(super) n: Tally,
    pub(super) progress: &'a dyn Progress,
    /// Opened blobs kept for messages that share them ([`Order::Folder`]).
    pub(super) cache: BlobCache,
    /// [`Order::Any`]: messages restored together, at most ([`WINDOW_MESSAGES`]).
    pub(super) window: usize,
    /// Accounts renamed ([`super::Selection::map_users`]): the ACL entries of the
    /// `dovecot-acl` files written name the new names.
    pub(super) users: &'a [(String, String)],
}

/// The messages an [`Order::Any`] restore hands to the target together, at most: each
/// window is planned by pack span and read front to back
/// ([`crate::model::reader::read_by_packs`]), so memory follows the window (its entries,
/// jobs and span plan: about 650 bytes a message), not the selection; the windows follow
/// one another in pack order (`window.rs`). A selection that fits one window reads every
/// pack span once; past it, a message whose blobs lie in the packs of two windows (a body
/// shared by several mailboxes) has its foreign blobs read again: the `medium` preset
/// (30,928 messages and files) read 16% more bytes in two windows of 20,000 than in one.
/// 32,768 keeps `medium` in one window (81 MB of memory against 74 MB in two, 167 MB
/// before windows) and a 500,000-message account within 130 MB (414 MB before; release
/// builds), most of it the repository's index.
pub(super) const WINDOW_MESSAGES: usize = 32_768;

impl Tally {
    /// A folder file of `size` bytes written.
    pub(super) fn wrote_file(&self, size: u64) {
        self.files.fetch_add(1, Relaxed);
        self.file_bytes.fetch_add(size, Relaxed);
    }

    /// `n` messages are held at once.
    #[cfg(test)]
    pub(super) fn held(&self, n: usize) {
        self.most_held.fetch_max(n, Relaxed);
    }

    /// A failure that costs `n` messages.
    pub(super) fn fail_items(
        &self,
        item: impl Into<String>,
        e: impl crate::report::Reason,
        n: u64,
    ) {
        self.failed.fetch_add(n, Relaxed);
        self.failures.add(item, e);
    }

    /// A write of `n` messages failed: listed, unless the target was already given up on
    /// (then counted as not tried); a failure every later write would share gives it up.
    pub(super) fn write_failed(&self, item: impl FnOnce() -> String, e: Error, n: u64) {
        if self.given_up_before(&e) {
            self.not_tried(n);
        } else {
            self.fail_items(item(), e, n);
        }
    }

    /// Whether `e` gives the target up ([`Error::stops_writes`]) and an earlier failure
    /// already did (then `e` is not listed: the first one says why).
    fn given_up_before(&self, e: &Error) -> bool {
        e.stops_writes() && self.stopped.swap(true, Relaxed)
    }

    /// Whether the target was given up on ([`Tally::write_failed`]).
    pub(super) fn is_stopped(&self) -> bool {
        self.stopped.load(Relaxed)
    }

    /// `n` messages left unwritten once the target was given up on.
    pub(super) fn not_tried(&self, n: u64) {
        self.failed.fetch_add(n, Relaxed);
        self.not_tried.fetch_add(n, Relaxed);
    }

    /// A folder file's write failed: as [`Tally::write_failed`], for a file.
    pub(super) fn file_failed(&self, item: impl FnOnce() -> String, e: Error) {
        if self.given_up_before(&e) {
            self.files_not_tried.fetch_add(1, Relaxed);
        } else {
            self.failures.add(item(), e);
        }
    }
}

/// The pool of worker threads (the target's `jobs`; 0: one per core) that writes
/// messages.
pub(super) fn worker_pool(caps: &Caps) -> Result<rayon::ThreadPool> {
    let jobs = caps.jobs;
    rayon::ThreadPoolBuilder::new()
        .num_threads(jobs)
        .build()
        .map_err(|e| Error::Resources(format!("cannot start {jobs} worker threads: {e}")))
}

impl<'a> Ctx<'a, ()> {
    /// A context for planning only, before the target is open.
    pub(super) fn planner(repo: &'a Repository, progress: &'a dyn Progress) -> Ctx<'a, ()> {
        Ctx {
            repo,
            spans: SpanOptions::default(),
            target: &(),
            caps: NO_CAPS,
            n: Tally::default(),
            progress,
            cache: BlobCache::new(0),
            window: WINDOW_MESSAGES,
            users: &[],
        }
    }
}

/// The capabilities of no target (a context that only plans).
pub(super) const NO_CAPS: Caps = Caps {
    order: Order::Any,
    jobs: 1,
    open_folders: 1,
    accounts: 1,
    lanes: 1,
    batch_messages: 1,
    batch_bytes: 0,
    lane_messages: 0,
    folder_files: false,
    home: false,
    store: false,
    keywords: false,
    hard_links: false,
    parts: false,
};

impl<'a, T: Target> Ctx<'a, T> {
    pub(super) fn new(
        repo: &'a Repository,
        target: &'a T,
        (reads, cache_bytes): (usize, usize),
        progress: &'a dyn Progress,
    ) -> Ctx<'a, T> {
        Ctx {
            repo,
            spans: SpanOptions::for_store(repo.store(), reads),
            target,
            caps: target.caps(),
            n: Tally::default(),
            progress,
            cache: BlobCache::new(cache_bytes),
            window: WINDOW_MESSAGES,
            users: &[],
        }
    }

    /// Whether what is left goes unread and unwritten, counted as not tried: the target
    /// was given up on ([`Tally::write_failed`]), or the caller cancelled the restore
    /// ([`Progress::cancelled`]; then no later failure is listed either).
    pub(super) fn stopped(&self) -> bool {
        if self.n.is_stopped() {
            return true;
        }
        if self.progress.cancelled() {
            self.n.cancelled.store(true, Relaxed);
            self.n.stopped.store(true, Relaxed);
            return true;
        }
        false
    }

    /// The report of a restore that began at `started`.
    /// The target's warnings, and the accounts' homes it has no place for.
    fn warnings(&self) -> Vec<String> {
        let mut w = self.target.warnings();
        match self.n.homes_left.load(Relaxed) {
            0 => {}
            n => w.push(format!(
                "{n} account(s) have home files (sieve scripts) this target has no place \
                 for: restore to a Maildir store or an IMAP server to get them"
            )),
        }
        match self.n.store_left.load(Relaxed) {
            0 => {}
            n if self.users.is_empty() => w.push(format!(
                "{n} file(s) of the store's own (a shared-mailbox dictionary) not restored: \
                 only a Maildir store has a place for them (an IMAP server keeps its own, \
                 updated as ACLs are set)"
            )),
            n => w.push(format!(
                "{n} file(s) of the store's own (a shared-mailbox dictionary) not restored: \
                 they name the accounts by their old names (--map-user); `doveadm acl \
                 recalc` rebuilds Dovecot's dictionary"
            )),
        }
        match self.n.metadata_left.load(Relaxed) {
            0 => {}
            n => w.push(format!(
                "{n} folder(s) have IMAP METADATA (RFC 5464) a Maildir has no place for \
                 (Dovecot keeps it outside the store): restore into an IMAP server to get it"
            )),
        }
        match self.n.quota_left.load(Relaxed) {
            0 => {}
            n => w.push(format!(
                "{n} account(s) have IMAP quotas a Maildir has no place for (the limits \
                 live in the server's user database): restore into an IMAP server to set them"
            )),
        }
        w
    }

    pub(super) fn report(
        &self,
        snapshot: String,
        accounts: u64,
        folders: u64,
        started: Instant,
    ) -> RestoreReport {
        let elapsed = started.elapsed().as_secs_f64();
        let n = &self.n;
        let bytes = n.bytes.load(Relaxed);
        let file_bytes = n.file_bytes.load(Relaxed);
        let total = n.total.load(Relaxed);
        RestoreReport {
            snapshot,
            accounts,
            folders,
            items_total: total,
            items_restored: n.restored.load(Relaxed),
            items_unchanged: n.unchanged.load(Relaxed),
            items_failed: n.failed.load(Relaxed),
            items_not_tried: n.not_tried.load(Relaxed),
            cancelled: n.cancelled.load(Relaxed),
            files_not_tried: n.files_not_tried.load(Relaxed),
            bytes_written: bytes,
            files_restored: n.files.load(Relaxed),
            files_linked: n.files_linked.load(Relaxed),
            file_bytes_written: file_bytes,
            files_unchanged: n.files_present.load(Relaxed),
            elapsed_secs: elapsed,
            items_per_sec: per_sec(total, elapsed),
            mb_per_sec: per_sec(bytes + file_bytes, elapsed) / 1e6,
            failures: n.failures.take(),
            warnings: self.warnings(),
        }
    }
}
