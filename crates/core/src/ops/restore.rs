//! Restore of a snapshot (or part of it) to a Maildir tree.
//!
//! The selected messages are sorted by where their first blob lies in the repository, so
//! packs are read front to back, and their blobs are read by pack span
//! ([`crate::model::reader`]: nearby blobs in one ranged read, several reads in flight,
//! a bounded window ahead), then restored in parallel from memory. Every message is reassembled,
//! checked against its whole-message hash, written as an unnamed file (or, where that is
//! not supported, in the folder's `tmp/`), given its mode, owner (when permitted) and mtime,
//! and linked into `cur/` or `new/` under its original name, never replacing a file. A
//! message whose key is already in the target folder is skipped when the bytes are
//! identical and reported as a conflict otherwise.
//!
//! Confinement: every directory below the target is opened relative to its parent without
//! following symbolic links (the target itself, given by the admin, is followed once), and
//! files are created and read relative to those directories, so a link planted in the
//! target (`example.org -> /elsewhere`, a linked `cur/`, a linked file name) is reported
//! and never written through. Directories get their recorded owner and mode at the end of
//! each batch of accounts (accounts are restored in batches whose messages are read
//! together), deepest first, so that none becomes unwritable before its content is in.

use crate::error::{Error, Result};
use crate::maildir::{self, safe_component, safe_relative};
use crate::model::reader::{read_by_packs, Alone, Blobs, SpanOptions};
use crate::model::{
    folder_selected, message_selected, no_folder_matches, select_accounts, PickedAccount,
};
use crate::repo::id::Id;
use crate::repo::tree::{AccountRef, AccountTree, DirEntry, FileEntry, FolderNode, MessageEntry};
use crate::repo::tree::{OwnerNames, RootTree, Timestamp, NO_OWNER};
use crate::repo::{lock, Repository};
use crate::report::{per_sec, Failure, Progress};
use rustix::fs::{Mode, OFlags};
use rustix::io::Errno;
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use std::ffi::OsStr;
use std::fs::{self, File};
use std::io::{ErrorKind, Read, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

/// What to restore and where.
#[derive(Clone, Debug, Default)]
pub struct RestoreOptions {
    /// `latest` or a snapshot id prefix.
    pub snapshot: String,
    /// The directory to restore into: accounts go to their place below it
    /// (`<domain>/<user>/Maildir`); a single-Maildir snapshot restores into it directly.
    pub target: PathBuf,
    /// Only these accounts (all when empty).
    pub accounts: Vec<String>,
    /// Only these folders and their subfolders (`Sent`, `Archive/2023`; all when empty).
    pub folders: Vec<String>,
    /// Only these messages, by Maildir key or file name (all when empty). Only the folders
    /// that hold them are created, with the `dovecot-keywords` their flags need.
    pub messages: Vec<String>,
    /// Worker threads; 0 means one per core.
    pub jobs: usize,
    /// Whose the restored files and directories become (when run as root).
    pub owners: Owners,
    /// Pack spans read at once; 0: as many as the store suits
    /// ([`SpanOptions::for_store`]).
    pub reads: usize,
}

/// Whose the restored files and directories become. Only root can give files away: run as
/// another user, a restore sets modes and leaves every owner its own.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Owners {
    /// The recorded owners, by name where the snapshot has the name and this system knows
    /// it (as tar does), else by number.
    #[default]
    ByName,
    /// The recorded uids and gids as they are (`--numeric-owner`).
    Numeric,
    /// Everything to one owner (`--chown USER:GROUP`).
    Fixed { uid: u32, gid: u32 },
}

impl Owners {
    /// `USER:GROUP` (names or numbers) for [`Owners::Fixed`].
    pub fn chown(spec: &str) -> Result<Owners> {
        use nix::unistd::{Group, User};
        let bad = |what: &str| Error::InvalidInput(format!("--chown {spec:?}: {what}"));
        let (user, group) = spec
            .split_once(':')
            .ok_or_else(|| bad("expected USER:GROUP"))?;
        let uid = match user.parse::<u32>() {
            Ok(n) => n,
            Err(_) => match User::from_name(user) {
                Ok(Some(u)) => u.uid.as_raw(),
                _ => return Err(bad(&format!("no user {user:?} on this system"))),
            },
        };
        let gid = match group.parse::<u32>() {
            Ok(n) => n,
            Err(_) => match Group::from_name(group) {
                Ok(Some(g)) => g.gid.as_raw(),
                _ => return Err(bad(&format!("no group {group:?} on this system"))),
            },
        };
        Ok(Owners::Fixed { uid, gid })
    }
}

/// Recorded owners to this system's, as [`Owners`] says.
struct OwnerMap {
    /// Only root gives files away; otherwise no owner is set at all.
    root: bool,
    /// Not root: our own uid and gid, and whether an owner other than them was left
    /// unset (said once, in the report's warnings).
    me: (u32, u32),
    not_given: AtomicBool,
    policy: Owners,
    uids: HashMap<u32, u32>,
    gids: HashMap<u32, u32>,
}

impl OwnerMap {
    fn new(policy: Owners, names: &OwnerNames) -> OwnerMap {
        use nix::unistd::{Group, User};
        let root = rustix::process::geteuid().is_root();
        let mut m = OwnerMap {
            root,
            me: (
                rustix::process::geteuid().as_raw(),
                rustix::process::getegid().as_raw(),
            ),
            not_given: AtomicBool::new(false),
            policy,
            uids: HashMap::new(),
            gids: HashMap::new(),
        };
        if root && policy == Owners::ByName {
            for (id, name) in &names.users {
                if let Ok(Some(u)) = User::from_name(name) {
                    m.uids.insert(*id, u.uid.as_raw());
                }
            }
            for (id, name) in &names.groups {
                if let Ok(Some(g)) = Group::from_name(name) {
                    m.gids.insert(*id, g.gid.as_raw());
                }
            }
        }
        m
    }

    /// `--chown`: everything gets one owner.
    fn fixed(&self) -> bool {
        self.root && matches!(self.policy, Owners::Fixed { .. })
    }

    /// The owner to give a restored file recorded as `uid`, `gid`; `None`: leave it.
    fn get(&self, uid: u32, gid: u32) -> Option<(u32, u32)> {
        let (uid, gid) = match self.policy {
            Owners::Fixed { uid, gid } => (uid, gid),
            _ if uid == NO_OWNER || gid == NO_OWNER => return None,
            _ => (uid, gid),
        };
        if !self.root {
            if (uid, gid) != self.me {
                self.not_given.store(true, Relaxed);
            }
            return None;
        }
        if matches!(self.policy, Owners::Fixed { .. }) {
            return Some((uid, gid));
        }
        Some((
            *self.uids.get(&uid).unwrap_or(&uid),
            *self.gids.get(&gid).unwrap_or(&gid),
        ))
    }
}

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
    /// Bytes of messages written.
    pub bytes_written: u64,
    pub elapsed_secs: f64,
    pub items_per_sec: f64,
    pub mb_per_sec: f64,
    pub failures: Vec<Failure>,
    /// What the restore did not do but is not a failure: owners left unset because the
    /// restore does not run as root.
    pub warnings: Vec<String>,
}

struct Ctx<'a> {
    repo: &'a Repository,
    /// How messages' blobs are read.
    spans: SpanOptions,
    /// Folders restored together (their directories open): see [`folder_batch`].
    folder_batch: usize,
    /// The target directory as given, for messages.
    target: &'a Path,
    owners: OwnerMap,
    failures: Mutex<Vec<Failure>>,
    total: AtomicU64,
    restored: AtomicU64,
    unchanged: AtomicU64,
    failed: AtomicU64,
    bytes: AtomicU64,
    progress: &'a dyn Progress,
}

impl Ctx<'_> {
    /// A failure that is not a message's (a folder file, a directory).
    fn fail(&self, item: impl Into<String>, e: impl std::fmt::Display) {
        lock(&self.failures).push(Failure::new(item, e));
    }
    /// A failure that costs `n` messages.
    fn fail_items(&self, item: impl Into<String>, e: impl std::fmt::Display, n: u64) {
        self.failed.fetch_add(n, Relaxed);
        self.fail(item, e);
    }
    /// A path below the target, for messages.
    fn shown(&self, parts: &[&[u8]]) -> PathBuf {
        let mut p = self.target.to_path_buf();
        for c in parts.iter().filter(|c| !c.is_empty()) {
            p.push(OsStr::from_bytes(c));
        }
        p
    }
}

/// Restores a snapshot to a Maildir tree.
pub fn restore(
    repo: &Repository,
    opts: &RestoreOptions,
    progress: &dyn Progress,
) -> Result<RestoreReport> {
    let started = Instant::now();
    // A shared lock: no prune deletes a pack while this restore reads it.
    let _lock = repo.lock_for_reading("restore")?;
    let snap = repo.find_snapshot(&opts.snapshot)?;
    let root: RootTree = repo.read_tree(&snap.root)?;
    let owners = OwnerMap::new(opts.owners, &root.owners);
    let accounts = select_accounts(root, &opts.accounts)?;
    let n_accounts = accounts.len() as u64;
    let ctx = Ctx::new(repo, opts, owners, progress);
    let pool = worker_pool(opts.jobs)?;
    let mut folders = 0u64;
    let mut folder_matched = opts.folders.is_empty();
    if opts.messages.is_empty() {
        let target = open_target(&opts.target)?;
        // Accounts in batches (of folders and of messages), restored together.
        let mut batch = Vec::new();
        let (mut batch_folders, mut batch_messages) = (0, 0);
        for acc in accounts.iter().cloned() {
            let (plan, f) = match plan_account(&ctx, acc, opts) {
                Ok(p) => p,
                Err(e) => {
                    // The accounts planned so far are restored, as they were before
                    // accounts were batched.
                    pool.install(|| execute_batch(&ctx, target.as_fd(), batch, false));
                    return Err(e);
                }
            };
            folder_matched |= f > 0;
            folders += plan.folders.len() as u64;
            batch_folders += plan.folders.len();
            batch_messages += (plan.folders.iter())
                .map(|f| f.entries.len() as u64)
                .sum::<u64>();
            batch.push(plan);
            if batch_folders >= ctx.folder_batch || batch_messages >= ACCOUNT_BATCH_MESSAGES {
                let plans = std::mem::take(&mut batch);
                pool.install(|| execute_batch(&ctx, target.as_fd(), plans, false));
                (batch_folders, batch_messages) = (0, 0);
            }
        }
        pool.install(|| execute_batch(&ctx, target.as_fd(), batch, false));
        if !folder_matched {
            return Err(no_folder_matches(repo, &accounts, &opts.folders));
        }
    } else {
        // Single messages: every account is planned first (the plans are small), so that
        // a key found nowhere is an error before anything is created.
        let mut plans = Vec::new();
        for acc in accounts.iter().cloned() {
            let (plan, f) = plan_account(&ctx, acc, opts)?;
            folder_matched |= f > 0;
            plans.push(plan);
        }
        if !folder_matched {
            return Err(no_folder_matches(repo, &accounts, &opts.folders));
        }
        let missing: Vec<&String> = opts
            .messages
            .iter()
            .filter(|m| {
                !plans.iter().any(|p| {
                    (p.folders.iter()).any(|f| {
                        f.entries
                            .iter()
                            .any(|e| message_selected(e, &[m.to_string()]))
                    })
                })
            })
            .collect();
        if missing.len() == opts.messages.len() {
            return Err(Error::InvalidInput(format!(
                "no message {} in the selected accounts and folders of the snapshot",
                quoted(&missing)
            )));
        }
        for m in missing {
            ctx.fail(
                format!("message {m:?}"),
                "not in the selected accounts and folders of the snapshot",
            );
        }
        let target = open_target(&opts.target)?;
        folders += plans.iter().map(|p| p.folders.len() as u64).sum::<u64>();
        pool.install(|| execute_batch(&ctx, target.as_fd(), plans, true));
    }
    Ok(ctx.report(snap.id.to_hex(), n_accounts, folders, started))
}

/// Restores messages picked one by one (`undelete`: each from the snapshot that last
/// held it) as single messages are restored (`--message`): only their folders are
/// created, with the `dovecot-keywords` their flags need; a key already in the target
/// folder with identical bytes is left as it is. `owners`: the recorded owners' names
/// (of the snapshots the messages come from); `label` names the restore in its report.
pub fn restore_picked(
    repo: &Repository,
    opts: &RestoreOptions,
    owners: &OwnerNames,
    picked: Vec<PickedAccount>,
    label: &str,
    progress: &dyn Progress,
) -> Result<RestoreReport> {
    let started = Instant::now();
    let _lock = repo.lock_for_reading("undelete")?;
    let ctx = Ctx::new(repo, opts, OwnerMap::new(opts.owners, owners), progress);
    let pool = worker_pool(opts.jobs)?;
    let n_accounts = picked.len() as u64;
    let mut plans = Vec::new();
    for p in picked {
        let mut plan = AccountPlan {
            acc: p.account,
            folders: Vec::new(),
        };
        let n: u64 = p.folders.iter().map(|f| f.entries.len() as u64).sum();
        ctx.total.fetch_add(n, Relaxed);
        if !safe_relative(&plan.acc.rel_path) {
            let item = format!("account {}", plan.acc.name);
            ctx.fail_items(item, "unsafe path in snapshot; skipped", n);
            continue;
        }
        for f in p.folders {
            let item = format!("{}: {}", plan.acc.name, f.node.name);
            if !(f.node.dir.is_empty() || safe_component(&f.node.dir)) {
                let n = f.entries.len() as u64;
                ctx.fail_items(item, "unsafe folder directory in snapshot; skipped", n);
                continue;
            }
            let mut entries = Vec::new();
            for e in f.entries {
                if safe_component(&e.name) {
                    entries.push(e);
                } else {
                    let shown = String::from_utf8_lossy(&e.name);
                    let what = "unsafe file name in snapshot; skipped";
                    ctx.fail_items(format!("{item}: {shown}"), what, 1);
                }
            }
            if !entries.is_empty() {
                plan.folders.push(FolderPlan {
                    node: f.node,
                    entries,
                });
            }
        }
        plans.push(plan);
    }
    let folders = plans.iter().map(|p| p.folders.len() as u64).sum();
    let target = open_target(&opts.target)?;
    pool.install(|| execute_batch(&ctx, target.as_fd(), plans, true));
    Ok(ctx.report(label.to_string(), n_accounts, folders, started))
}

/// The pool of `jobs` worker threads (0: one per core) that writes messages.
fn worker_pool(jobs: usize) -> Result<rayon::ThreadPool> {
    rayon::ThreadPoolBuilder::new()
        .num_threads(jobs)
        .build()
        .map_err(|e| Error::InvalidInput(format!("cannot start {jobs} worker threads: {e}")))
}

impl<'a> Ctx<'a> {
    fn new(
        repo: &'a Repository,
        opts: &'a RestoreOptions,
        owners: OwnerMap,
        progress: &'a dyn Progress,
    ) -> Ctx<'a> {
        Ctx {
            repo,
            spans: SpanOptions::for_store(repo.store(), opts.reads),
            folder_batch: folder_batch(),
            target: &opts.target,
            owners,
            failures: Mutex::new(Vec::new()),
            total: AtomicU64::new(0),
            restored: AtomicU64::new(0),
            unchanged: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            progress,
        }
    }

    /// The report of a restore that began at `started`.
    fn report(
        &self,
        snapshot: String,
        accounts: u64,
        folders: u64,
        started: Instant,
    ) -> RestoreReport {
        let mut failures = std::mem::take(&mut *lock(&self.failures));
        failures.sort_by(|a, b| a.item.cmp(&b.item));
        let elapsed = started.elapsed().as_secs_f64();
        let bytes = self.bytes.load(Relaxed);
        let total = self.total.load(Relaxed);
        let mut warnings = Vec::new();
        if self.owners.not_given.load(Relaxed) {
            warnings.push(
                "owners are not restored: the restore does not run as root (only root can give \
                 files to another user); the files belong to the user running it"
                    .to_string(),
            );
        }
        RestoreReport {
            snapshot,
            accounts,
            folders,
            items_total: total,
            items_restored: self.restored.load(Relaxed),
            items_unchanged: self.unchanged.load(Relaxed),
            items_failed: self.failed.load(Relaxed),
            bytes_written: bytes,
            elapsed_secs: elapsed,
            items_per_sec: per_sec(total, elapsed),
            mb_per_sec: per_sec(bytes, elapsed) / 1e6,
            failures,
            warnings,
        }
    }
}

/// A restore holds three directories open per folder of a batch (the folder, `cur/`,
/// `new/`): the soft limit on open files goes up to the hard one, as Go programs do, and
/// a batch has as many folders as a third of it allows (less some for everything else),
/// from [`MIN_FOLDER_BATCH`] to [`MAX_FOLDER_BATCH`]. Every pack span is read once per
/// batch, so the fewer batches, the fewer reads. If the limit is still too low, the
/// folders past it are reported (too many open files), not lost silently.
fn folder_batch() -> usize {
    use rustix::process::{getrlimit, setrlimit, Resource};
    let mut l = getrlimit(Resource::Nofile);
    if l.current < l.maximum {
        l.current = l.maximum;
        if setrlimit(Resource::Nofile, l).is_err() {
            l = getrlimit(Resource::Nofile);
        }
    }
    let open = l.current.unwrap_or(u64::MAX).saturating_sub(256) / 3;
    (open as usize).clamp(MIN_FOLDER_BATCH, MAX_FOLDER_BATCH)
}

fn quoted(keys: &[&String]) -> String {
    let q: Vec<String> = keys.iter().map(|k| format!("{k:?}")).collect();
    q.join(", ")
}

/// Creates the target directory if need be and opens it (following it if it is a link:
/// the admin named it).
fn open_target(target: &Path) -> Result<OwnedFd> {
    fs::create_dir_all(target).map_err(|e| Error::io(target, e))?;
    rustix::fs::open(
        target,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| Error::io(target, e.into()))
}

/// One folder to restore: its node and its selected messages.
struct FolderPlan {
    node: FolderNode,
    entries: Vec<MessageEntry>,
}

/// One account to restore.
struct AccountPlan {
    acc: AccountRef,
    folders: Vec<FolderPlan>,
}

/// Reads what an account's restore needs: its selected folders and messages (only folders
/// with selected messages when single messages are asked for). Counts the messages it
/// selects, and those it cannot (a damaged chunk, an unsafe name) as failed. Returns the
/// plan and the number of folders the folder filter matched.
fn plan_account(ctx: &Ctx, acc: AccountRef, opts: &RestoreOptions) -> Result<(AccountPlan, u64)> {
    let mut plan = AccountPlan {
        acc,
        folders: Vec::new(),
    };
    let acc = &plan.acc;
    let whole = opts.messages.is_empty();
    if !safe_relative(&acc.rel_path) {
        let n = if whole { acc.messages } else { 0 };
        ctx.total.fetch_add(n, Relaxed);
        ctx.fail_items(
            format!("account {}", acc.name),
            "unsafe path in snapshot; skipped",
            n,
        );
        return Ok((plan, 0));
    }
    let tree: AccountTree = ctx.repo.read_tree(&acc.tree)?;
    let mut matched = 0;
    for node in tree.folders {
        if !folder_selected(&node, &opts.folders) {
            continue;
        }
        matched += 1;
        let item = format!("{}: {}", acc.name, node.name);
        if !(node.dir.is_empty() || safe_component(&node.dir)) {
            let n = if whole { node.messages } else { 0 };
            ctx.total.fetch_add(n, Relaxed);
            ctx.fail_items(item, "unsafe folder directory in snapshot; skipped", n);
            continue;
        }
        let mut entries = Vec::new();
        let mut seen = 0u64;
        let mut damaged = false;
        for c in &node.chunks {
            let chunk = match ctx.repo.read_chunk(c) {
                Ok(c) => c,
                Err(e) => {
                    ctx.fail(&*item, e);
                    damaged = true;
                    continue;
                }
            };
            seen += chunk.len() as u64;
            for entry in chunk
                .into_iter()
                .filter(|e| message_selected(e, &opts.messages))
            {
                if !safe_component(&entry.name) {
                    ctx.total.fetch_add(1, Relaxed);
                    ctx.fail_items(
                        format!("{}: {}", item, String::from_utf8_lossy(&entry.name)),
                        "unsafe file name in snapshot; skipped",
                        1,
                    );
                    continue;
                }
                entries.push(entry);
            }
        }
        if damaged && whole {
            // The messages of the chunks that could not be read.
            let lost = node.messages.saturating_sub(seen);
            ctx.total.fetch_add(lost, Relaxed);
            ctx.failed.fetch_add(lost, Relaxed);
        }
        if !whole && entries.is_empty() {
            continue;
        }
        ctx.total.fetch_add(entries.len() as u64, Relaxed);
        plan.folders.push(FolderPlan { node, entries });
    }
    Ok((plan, matched))
}

/// A folder's directories in the target, open.
struct FolderDirs {
    /// Where it is, for messages.
    path: PathBuf,
    dir: OwnedFd,
    cur: OwnedFd,
    new: OwnedFd,
}

impl FolderDirs {
    fn sub(&self, new: bool) -> &OwnedFd {
        if new {
            &self.new
        } else {
            &self.cur
        }
    }
    fn shown(&self, new: Option<bool>, name: &[u8]) -> PathBuf {
        let p = match new {
            Some(true) => self.path.join("new"),
            Some(false) => self.path.join("cur"),
            None => self.path.clone(),
        };
        p.join(OsStr::from_bytes(name))
    }
}

struct Job<'a> {
    folder: &'a FolderDirs,
    /// The account's name, for messages.
    account: &'a str,
    what: What,
}

/// What a job writes.
enum What {
    Message {
        entry: MessageEntry,
        /// A file with the same key already in the target folder: (in `new/`, its name).
        existing: Option<(bool, Vec<u8>)>,
    },
    /// A file of the folder (`dovecot-keywords`, `dovecot-uidlist`, ...).
    File(FileEntry),
}

/// Folders whose directories are open at once (three descriptors each): see
/// [`folder_batch`].
const MIN_FOLDER_BATCH: usize = 100;
const MAX_FOLDER_BATCH: usize = 20_000;

/// Directories whose recorded owner and mode are set once their content is in: by
/// their path below the target (components).
type DirAttrs = BTreeMap<Vec<Vec<u8>>, DirEntry>;

/// Accounts restored together hold at most this many messages (their plans are in
/// memory), unless one account alone has more.
const ACCOUNT_BATCH_MESSAGES: u64 = 200_000;

/// An account of a batch: where it goes below the target and the directories whose
/// owner and mode are set once its content is in.
struct BatchAccount {
    acc: AccountRef,
    parts: Vec<Vec<u8>>,
    attrs: DirAttrs,
}

/// Restores a batch of accounts. Their messages are read together, by pack span in pack
/// order, so a pack range that several accounts need is read once, not once per account.
fn execute_batch(ctx: &Ctx, target: BorrowedFd, plans: Vec<AccountPlan>, single: bool) {
    let mut accs: Vec<BatchAccount> = Vec::new();
    let mut rest: Vec<(usize, FolderPlan)> = Vec::new();
    for plan in plans {
        let acc = plan.acc;
        if plan.folders.is_empty() {
            continue;
        }
        let n_acc: u64 = plan.folders.iter().map(|f| f.entries.len() as u64).sum();
        let parts: Vec<&[u8]> = if acc.rel_path.is_empty() {
            Vec::new()
        } else {
            acc.rel_path.split(|&c| c == b'/').collect()
        };
        let mut attrs = DirAttrs::new();
        for (i, part) in parts.iter().enumerate() {
            let recorded = acc.dirs.get(i).filter(|d| d.name == *part).cloned();
            if let Some(d) = recorded.or_else(|| ctx.owners.fixed().then(|| unrecorded_dir(part))) {
                attrs.insert(parts[..=i].iter().map(|p| p.to_vec()).collect(), d);
            }
        }
        // Created now, opened again for each batch of folders.
        if let Err((at, e)) = open_path(target, &parts, true) {
            let shown = ctx.shown(&parts[..at]);
            ctx.fail_items(format!("account {}", acc.name), Error::io(shown, e), n_acc);
            continue;
        }
        let parts = parts.iter().map(|p| p.to_vec()).collect();
        rest.extend(plan.folders.into_iter().map(|f| (accs.len(), f)));
        accs.push(BatchAccount { acc, parts, attrs });
    }
    // Folders in batches, each with its directories open while its messages are written.
    while !rest.is_empty() {
        let batch: Vec<(usize, FolderPlan)> =
            rest.drain(..rest.len().min(ctx.folder_batch)).collect();
        let mut acc_dirs: HashMap<usize, OwnedFd> = HashMap::new();
        let mut dirs = Vec::new();
        let mut jobs_of = Vec::new();
        for (a, fp) in batch {
            let BatchAccount { acc, parts, attrs } = &mut accs[a];
            let item = format!("{}: {}", acc.name, fp.node.name);
            let parts: Vec<&[u8]> = parts.iter().map(|p| &p[..]).collect();
            let acc_dir = match acc_dirs.entry(a) {
                std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
                std::collections::hash_map::Entry::Vacant(v) => {
                    match open_path(target, &parts, true) {
                        Ok(fd) => v.insert(fd),
                        Err((at, e)) => {
                            let e = Error::io(ctx.shown(&parts[..at]), e);
                            ctx.fail_items(item, e, fp.entries.len() as u64);
                            continue;
                        }
                    }
                }
            };
            let mut fparts = parts.clone();
            fparts.push(&fp.node.dir);
            let base: Vec<Vec<u8>> = fparts
                .iter()
                .filter(|p| !p.is_empty())
                .map(|p| p.to_vec())
                .collect();
            let mut mine = DirAttrs::new();
            for d in &fp.node.dirs {
                let mut p = base.clone();
                if !d.name.is_empty() {
                    p.push(d.name.clone());
                }
                mine.insert(p, d.clone());
            }
            if ctx.owners.fixed() {
                // `--chown` gives every directory of the folder its owner, recorded or not
                // (an IMAP backup or a version-1 snapshot records none).
                for sub in [&[][..], b"cur", b"new", b"tmp"] {
                    let mut p = base.clone();
                    if !sub.is_empty() {
                        p.push(sub.to_vec());
                    }
                    mine.entry(p).or_insert_with(|| unrecorded_dir(sub));
                }
            }
            match open_folder(ctx, acc_dir.as_fd(), &fparts, &fp.node) {
                Ok(f) => {
                    attrs.append(&mut mine);
                    dirs.push((a, f));
                    jobs_of.push(fp);
                }
                Err(e) => ctx.fail_items(item, e, fp.entries.len() as u64),
            }
        }
        drop(acc_dirs);
        let mut jobs = Vec::new();
        for ((a, folder), mut fp) in dirs.iter().zip(jobs_of) {
            if single {
                keywords_for(ctx, folder, &fp.node, &mut fp.entries);
                if let Some(f) = fp.node.files.iter().find(|f| f.name == b"maildirfolder") {
                    restore_file(ctx, folder, f, &Alone(ctx.repo));
                }
            } else {
                // Read with the messages, from the same spans. An IMAP backup's sync state
                // is for the next IMAP backup, not for a Maildir.
                let files = std::mem::take(&mut fp.node.files);
                for f in files
                    .into_iter()
                    .filter(|f| f.name != crate::imap::names::STATE_FILE)
                {
                    jobs.push(Job {
                        folder,
                        account: &accs[*a].acc.name,
                        what: What::File(f),
                    });
                }
            }
            let existing = existing_keys(ctx, folder);
            for mut entry in fp.entries {
                let existing = existing.get(&entry.key).cloned();
                // Kept for `ls`, not needed here: a batch holds many messages.
                (entry.from, entry.subject) = (String::new(), String::new());
                jobs.push(Job {
                    folder,
                    account: &accs[*a].acc.name,
                    what: What::Message { entry, existing },
                });
            }
        }
        let messages = jobs.iter().filter_map(|j| match &j.what {
            What::Message { entry, .. } => Some(entry.size),
            What::File(_) => None,
        });
        let (n, bytes) = messages.fold((0, 0), |(n, b), size| (n + 1, b + size));
        ctx.progress.add_total(n, bytes);
        // Each pack span read once, front to back; a message is written as soon as the
        // last span holding its blobs is in.
        read_by_packs(
            ctx.repo,
            &jobs,
            job_content,
            &ctx.spans,
            |j, blobs| match &j.what {
                What::File(f) => restore_file(ctx, j.folder, f, blobs),
                What::Message { entry, existing } => {
                    if let Err(e) = restore_message(ctx, j.folder, entry, existing, blobs) {
                        let item = j.folder.shown(Some(entry.new), &entry.name);
                        ctx.fail_items(format!("{} ({})", item.display(), j.account), e, 1);
                    }
                    ctx.progress.advance(1, entry.size);
                }
            },
        );
        drop(jobs);
        drop(dirs);
    }
    for a in &accs {
        set_dir_attrs(ctx, target, &a.attrs);
    }
}

fn job_content<'a>(j: &'a Job) -> &'a [Id] {
    match &j.what {
        What::Message { entry, .. } => &entry.content,
        What::File(f) => &f.content,
    }
}

/// Opens (creating what is missing) the directories `parts` below `base`, none of them
/// through a symbolic link. Directories are created 0700 (mail is private): a recorded
/// mode is set at the end, once their content is in. Errors say at which component.
fn open_path(
    base: BorrowedFd,
    parts: &[&[u8]],
    create: bool,
) -> std::result::Result<OwnedFd, (usize, std::io::Error)> {
    let mut fd = rustix::io::dup(base).map_err(|e| (0, e.into()))?;
    let mut path: Vec<Vec<u8>> = Vec::new();
    for (i, p) in parts.iter().enumerate() {
        if p.is_empty() {
            continue;
        }
        path.push(p.to_vec());
        fd = open_dir_at(fd.as_fd(), p, create.then_some(0o700)).map_err(|e| (i + 1, e))?;
    }
    Ok(fd)
}

/// Opens the directory `name` in `parent` without following a symbolic link, creating it
/// with `create` (a mode, before the umask) if it is missing.
fn open_dir_at(parent: BorrowedFd, name: &[u8], create: Option<u32>) -> std::io::Result<OwnedFd> {
    if let Some(mode) = create {
        match rustix::fs::mkdirat(parent, name, Mode::from_raw_mode(mode)) {
            Ok(()) => {}
            Err(e) if e == Errno::EXIST => {}
            Err(e) => return Err(e.into()),
        }
    }
    rustix::fs::openat(
        parent,
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| {
        // A link to a directory opened with O_DIRECTORY | O_NOFOLLOW: ENOTDIR.
        let link = rustix::fs::statat(parent, name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW)
            .is_ok_and(|st| rustix::fs::FileType::from_raw_mode(st.st_mode).is_symlink());
        not_followed(if link { Errno::LOOP } else { e })
    })
}

/// `ELOOP` from an `O_NOFOLLOW` open: the name is a symbolic link.
fn not_followed(e: Errno) -> std::io::Error {
    if e == Errno::LOOP {
        std::io::Error::other("a symbolic link inside the target: not followed")
    } else {
        e.into()
    }
}

/// Opens a folder's directory and its `cur`, `new` and `tmp`, creating them as needed.
fn open_folder(
    ctx: &Ctx,
    acc_dir: BorrowedFd,
    fparts: &[&[u8]],
    node: &FolderNode,
) -> Result<FolderDirs> {
    let shown = ctx.shown(fparts);
    let dir = if node.dir.is_empty() {
        rustix::io::dup(acc_dir).map_err(|e| Error::io(&shown, e.into()))?
    } else {
        open_dir_at(acc_dir, &node.dir, Some(0o700)).map_err(|e| Error::io(&shown, e))?
    };
    let sub = |name: &str| {
        open_dir_at(dir.as_fd(), name.as_bytes(), Some(0o700))
            .map_err(|e| Error::io(shown.join(name), e))
    };
    let cur = sub("cur")?;
    let new = sub("new")?;
    sub("tmp")?;
    Ok(FolderDirs {
        path: shown.clone(),
        dir,
        cur,
        new,
    })
}

/// A directory the snapshot records nothing of, listed only so that `--chown` gives it
/// its owner: no recorded owner, and its mode (0700 when the restore created it) is kept.
fn unrecorded_dir(name: &[u8]) -> DirEntry {
    DirEntry {
        name: name.to_vec(),
        mode: 0,
        uid: NO_OWNER,
        gid: NO_OWNER,
    }
}

/// Gives the directories their recorded owner and mode, deepest first.
fn set_dir_attrs(ctx: &Ctx, target: BorrowedFd, attrs: &DirAttrs) {
    let mut order: Vec<(&Vec<Vec<u8>>, &DirEntry)> = attrs.iter().collect();
    order.sort_by_key(|(p, _)| std::cmp::Reverse(p.len()));
    for (path, d) in order {
        let parts: Vec<&[u8]> = path.iter().map(|p| &p[..]).collect();
        let shown = ctx.shown(&parts);
        let result = open_path(target, &parts, false)
            .map_err(|(_, e)| e)
            .and_then(|fd| {
                if let Some((uid, gid)) = ctx.owners.get(d.uid, d.gid) {
                    std::os::unix::fs::fchown(&fd, Some(uid), Some(gid))?;
                }
                if d.uid != NO_OWNER {
                    rustix::fs::fchmod(&fd, Mode::from_raw_mode(d.mode))?;
                }
                Ok(())
            });
        if let Err(e) = result {
            ctx.fail(shown.display().to_string(), e);
        }
    }
}

/// Maildir keys already present in a target folder: where each is and its name.
fn existing_keys(ctx: &Ctx, folder: &FolderDirs) -> HashMap<Vec<u8>, (bool, Vec<u8>)> {
    let mut out = HashMap::new();
    for new in [false, true] {
        let dir = match rustix::fs::Dir::read_from(folder.sub(new)) {
            Ok(d) => d,
            Err(e) => {
                ctx.fail(
                    folder.shown(Some(new), b"").display().to_string(),
                    std::io::Error::from(e),
                );
                continue;
            }
        };
        for ent in dir.flatten() {
            let name = ent.file_name().to_bytes();
            if name == b"." || name == b".." || ent.file_type() == rustix::fs::FileType::Directory {
                continue;
            }
            let key = maildir::split_name(name).0.to_vec();
            out.insert(key, (new, name.to_vec()));
        }
    }
    out
}

/// Reads a file of the target without following a symbolic link.
fn read_at(dir: BorrowedFd, name: &[u8]) -> std::io::Result<Vec<u8>> {
    let fd = rustix::fs::openat(
        dir,
        name,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(not_followed)?;
    let mut data = Vec::new();
    File::from(fd).read_to_end(&mut data)?;
    Ok(data)
}

/// Reassembles content from its blobs and checks it against the recorded hash and size.
pub fn assemble(
    repo: &Repository,
    content: &[Id],
    size: u64,
    hash: Option<&Id>,
) -> Result<Vec<u8>> {
    // With a whole-content hash to check, the blobs need not be hashed one by one too.
    assemble_by(repo, content, size, hash, |id| match hash {
        Some(_) => repo.read_blob_unverified(id),
        None => repo.read_blob(id),
    })
}

/// [`assemble`] with the blobs given by `blob` (hashed against their ids or not: with
/// `hash`, the whole is checked); if the whole does not match, the blobs are read again
/// verified to name the culprit.
fn assemble_by(
    repo: &Repository,
    content: &[Id],
    size: u64,
    hash: Option<&Id>,
    blob: impl Fn(&Id) -> Result<Vec<u8>>,
) -> Result<Vec<u8>> {
    let mut data = Vec::with_capacity(size as usize);
    for id in content {
        data.extend_from_slice(&blob(id)?);
    }
    if data.len() as u64 != size || hash.is_some_and(|h| repo.key().blob_id(&data) != *h) {
        for id in content {
            repo.read_blob(id)?;
        }
        return Err(Error::corrupt(
            "message",
            "reassembled content does not match its hash",
        ));
    }
    Ok(data)
}

fn restore_message(
    ctx: &Ctx,
    folder: &FolderDirs,
    e: &MessageEntry,
    existing: &Option<(bool, Vec<u8>)>,
    blobs: &dyn Blobs,
) -> Result<()> {
    let data = assemble_by(ctx.repo, &e.content, e.size, Some(&e.hash), |id| {
        blobs.blob_unverified(id)
    })?;
    if let Some((new, name)) = existing {
        let shown = folder.shown(Some(*new), name);
        return match read_at(folder.sub(*new).as_fd(), name) {
            Ok(have) if have == data => {
                ctx.unchanged.fetch_add(1, Relaxed);
                Ok(())
            }
            Ok(_) => Err(Error::InvalidInput(format!(
                "{} already exists with other content: not overwritten",
                shown.display()
            ))),
            Err(err) => Err(Error::io(shown, err)),
        };
    }
    write_new_file(
        folder,
        Some(e.new),
        &e.name,
        &data,
        Attrs {
            mode: e.mode,
            mtime: e.mtime,
            owner: ctx.owners.get(e.uid, e.gid),
        },
    )?;
    ctx.restored.fetch_add(1, Relaxed);
    ctx.bytes.fetch_add(data.len() as u64, Relaxed);
    Ok(())
}

/// Writes `data` as `name` in the folder's `new/` or `cur/` (`new`: `Some`) or in the
/// folder directory itself (`None`), atomically and without replacing anything, with mode,
/// owner and mtime set before the file appears.
///
/// Where the file system allows, the file is created unnamed (`O_TMPFILE`) in its
/// directory and linked to its name once complete: one directory operation per message
/// instead of the create in `tmp/` plus the rename, and a killed restore leaves nothing
/// behind. Elsewhere (NFS, no `/proc`), a temporary file in `tmp/` renamed into place.
fn write_new_file(
    folder: &FolderDirs,
    new: Option<bool>,
    name: &[u8],
    data: &[u8],
    attrs: Attrs,
) -> Result<()> {
    use std::sync::atomic::AtomicBool;
    static NO_TMPFILE: AtomicBool = AtomicBool::new(false);
    let dir = match new {
        Some(n) => folder.sub(n).as_fd(),
        None => folder.dir.as_fd(),
    };
    let result = if NO_TMPFILE.load(Relaxed) {
        Err(None)
    } else {
        write_unnamed(dir, name, data, attrs)
    };
    let result = match result {
        Ok(()) => Ok(()),
        Err(Some(e)) => Err(e),
        Err(None) => {
            NO_TMPFILE.store(true, Relaxed);
            write_renamed(folder.dir.as_fd(), dir, name, data, attrs)
        }
    };
    let shown = folder.shown(new, name);
    result.map_err(|e| {
        if e.kind() == ErrorKind::AlreadyExists {
            Error::InvalidInput(format!(
                "{} already exists: not overwritten",
                shown.display()
            ))
        } else {
            Error::io(shown, e)
        }
    })
}

/// What a restored file gets besides its bytes.
#[derive(Clone, Copy)]
struct Attrs {
    mode: u32,
    mtime: Timestamp,
    /// (uid, gid) to set, if any.
    owner: Option<(u32, u32)>,
}

/// Mode, owner and times of a file being written.
fn set_attributes(f: &File, attrs: Attrs) -> std::io::Result<()> {
    let Attrs { mode, mtime, owner } = attrs;
    if let Some((uid, gid)) = owner {
        std::os::unix::fs::fchown(f, Some(uid), Some(gid))?;
    }
    // After the owner: chown clears set-id bits.
    if mode != 0 {
        rustix::fs::fchmod(f, Mode::from_raw_mode(mode))?;
    }
    let t = if mtime.secs < 0 {
        SystemTime::UNIX_EPOCH - Duration::new(mtime.secs.unsigned_abs(), 0)
    } else {
        SystemTime::UNIX_EPOCH
            .checked_add(Duration::new(mtime.secs as u64, mtime.nanos))
            .unwrap_or(SystemTime::UNIX_EPOCH)
    };
    f.set_times(fs::FileTimes::new().set_modified(t).set_accessed(t))
}

/// `O_TMPFILE` in `dir`, then `linkat` through `/proc/self/fd` (which fails if the name
/// exists, and never follows a link at the new name: nothing is replaced). `Err(None)`:
/// not supported here.
fn write_unnamed(
    dir: BorrowedFd,
    name: &[u8],
    data: &[u8],
    attrs: Attrs,
) -> std::result::Result<(), Option<std::io::Error>> {
    use rustix::fs::{linkat, openat, AtFlags, CWD};
    let fd = match openat(
        dir,
        c".",
        OFlags::TMPFILE | OFlags::WRONLY | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o600),
    ) {
        Ok(fd) => fd,
        Err(e) if e == Errno::OPNOTSUPP || e == Errno::ISDIR || e == Errno::INVAL => {
            return Err(None)
        }
        Err(e) => return Err(Some(e.into())),
    };
    let mut f = File::from(fd);
    f.write_all(data).map_err(Some)?;
    set_attributes(&f, attrs).map_err(Some)?;
    let proc_path = format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&f));
    match linkat(CWD, proc_path.as_str(), dir, name, AtFlags::SYMLINK_FOLLOW) {
        Ok(()) => Ok(()),
        // No /proc: the caller writes the file again the other way.
        Err(e) if e == Errno::NOENT => Err(None),
        Err(e) => Err(Some(e.into())),
    }
}

/// A temporary file in the folder's `tmp/` renamed to `name` in `dir` (renameat2
/// NOREPLACE).
fn write_renamed(
    folder: BorrowedFd,
    dir: BorrowedFd,
    name: &[u8],
    data: &[u8],
    attrs: Attrs,
) -> std::io::Result<()> {
    through_tmp(
        folder,
        data,
        |f| set_attributes(f, attrs),
        |tmp_dir, tmp| rename_noreplace(tmp_dir, tmp, dir, name),
    )
}

/// Writes `data` to a new temporary file in the `tmp/` of `folder`, gives it its
/// attributes (`attrs`) and puts it in place (`place`, given `tmp/` and the temporary's
/// name); the temporary is removed when a step fails.
fn through_tmp(
    folder: BorrowedFd,
    data: &[u8],
    attrs: impl FnOnce(&File) -> std::io::Result<()>,
    place: impl FnOnce(BorrowedFd, &str) -> std::io::Result<()>,
) -> std::io::Result<()> {
    let tmp_dir = open_dir_at(folder, b"tmp", Some(0o700))?;
    let tmp = format!(".mailvault-{:016x}", rand::random::<u64>());
    let result = (|| -> std::io::Result<()> {
        let fd = rustix::fs::openat(
            &tmp_dir,
            tmp.as_str(),
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        )?;
        let mut f = File::from(fd);
        f.write_all(data)?;
        attrs(&f)?;
        drop(f);
        place(tmp_dir.as_fd(), &tmp)
    })();
    if result.is_err() {
        let _ = rustix::fs::unlinkat(&tmp_dir, tmp.as_str(), rustix::fs::AtFlags::empty());
    }
    result
}

/// Moves `from` to `to` unless `to` exists: renameat2(RENAME_NOREPLACE), one directory
/// operation where link + unlink are two; falls back to those on file systems without it.
fn rename_noreplace(
    from_dir: BorrowedFd,
    from: &str,
    to_dir: BorrowedFd,
    to: &[u8],
) -> std::io::Result<()> {
    use rustix::fs::{linkat, renameat_with, unlinkat, AtFlags, RenameFlags};
    match renameat_with(from_dir, from, to_dir, to, RenameFlags::NOREPLACE) {
        Ok(()) => Ok(()),
        Err(e) if e == Errno::INVAL || e == Errno::NOSYS => {
            linkat(from_dir, from, to_dir, to, AtFlags::empty())?;
            Ok(unlinkat(from_dir, from, AtFlags::empty())?)
        }
        Err(e) => Err(e.into()),
    }
}

/// Restores a folder file; one already there with the same bytes is left, one with other
/// bytes is reported and kept.
fn restore_file(ctx: &Ctx, folder: &FolderDirs, f: &FileEntry, blobs: &dyn Blobs) {
    let item = folder.shown(None, &f.name).display().to_string();
    if !safe_component(&f.name) {
        ctx.fail(item, "unsafe file name in snapshot; skipped");
        return;
    }
    let data = match assemble_by(ctx.repo, &f.content, f.size, None, |id| blobs.blob(id)) {
        Ok(d) => d,
        Err(e) => return ctx.fail(item, e),
    };
    match read_at(folder.dir.as_fd(), &f.name) {
        Ok(have) if have == data => return,
        Ok(_) => return ctx.fail(item, "already exists with other content: not overwritten"),
        Err(e) if e.kind() == ErrorKind::NotFound => {}
        Err(e) => return ctx.fail(item, e),
    }
    let attrs = Attrs {
        mode: f.mode,
        mtime: f.mtime,
        owner: ctx.owners.get(f.uid, f.gid),
    };
    if let Err(e) = write_new_file(folder, None, &f.name, &data, attrs) {
        ctx.fail(item, e);
    }
}

/// Dovecot's `dovecot-keywords`: `<index> <name>` per line; index 0 is the letter `a`.
const KEYWORDS: &[u8] = b"dovecot-keywords";

fn parse_keywords(data: &[u8]) -> Vec<(u8, Vec<u8>)> {
    data.split(|&c| c == b'\n')
        .filter_map(|line| {
            let sp = line.iter().position(|&c| c == b' ')?;
            let i: u8 = std::str::from_utf8(&line[..sp]).ok()?.parse().ok()?;
            (i < 26).then(|| (i, line[sp + 1..].to_vec()))
        })
        .collect()
}

/// For single messages: gives the keyword letters of `entries` their meaning in the target
/// folder. Without a `dovecot-keywords` there, the snapshot's is written; with one, the
/// letters are mapped to its letters for the same names, and the names it lacks are added
/// to it (a letter means different keywords in different folders).
fn keywords_for(ctx: &Ctx, folder: &FolderDirs, node: &FolderNode, entries: &mut [MessageEntry]) {
    let uses = entries
        .iter()
        .any(|e| e.flags().iter().any(u8::is_ascii_lowercase));
    let Some(file) = node.files.iter().find(|f| f.name == KEYWORDS) else {
        return;
    };
    if !uses {
        return;
    }
    let item = folder.shown(None, KEYWORDS).display().to_string();
    let theirs = match read_at(folder.dir.as_fd(), KEYWORDS) {
        Ok(d) => d,
        Err(e) if e.kind() == ErrorKind::NotFound => {
            return restore_file(ctx, folder, file, &Alone(ctx.repo))
        }
        Err(e) => return ctx.fail(item, e),
    };
    let ours = match assemble(ctx.repo, &file.content, file.size, None) {
        Ok(d) => parse_keywords(&d),
        Err(e) => return ctx.fail(item, e),
    };
    let mut known = parse_keywords(&theirs);
    let mut added = Vec::new();
    // Snapshot letter index -> target letter index.
    let mut map: [Option<u8>; 26] = [None; 26];
    for (i, name) in &ours {
        let to = match known.iter().find(|(_, n)| n == name) {
            Some((j, _)) => Some(*j),
            None => (0..26u8)
                .find(|j| !known.iter().any(|(k, _)| k == j))
                .inspect(|&j| {
                    known.push((j, name.clone()));
                    added.push((j, name.clone()));
                }),
        };
        if to.is_none() {
            ctx.fail(
                &*item,
                format!(
                    "no letter left for keyword {:?}",
                    String::from_utf8_lossy(name)
                ),
            );
        }
        map[*i as usize] = to;
    }
    if !added.is_empty() {
        let mut data = theirs.clone();
        if !data.is_empty() && !data.ends_with(b"\n") {
            data.push(b'\n');
        }
        for (j, name) in &added {
            data.extend_from_slice(format!("{j} ").as_bytes());
            data.extend_from_slice(name);
            data.push(b'\n');
        }
        if let Err(e) = replace_file(folder, KEYWORDS, &data) {
            return ctx.fail(item, e);
        }
    }
    for e in entries.iter_mut() {
        let (key, info) = maildir::split_name(&e.name);
        if !info.iter().any(u8::is_ascii_lowercase) {
            continue;
        }
        let mut flags: Vec<u8> = info
            .iter()
            .filter_map(|&c| match c {
                b'a'..=b'z' => map[(c - b'a') as usize].map(|j| b'a' + j),
                c => Some(c),
            })
            .collect();
        flags.sort_unstable();
        flags.dedup();
        let sep = &e.name[key.len()..e.name.len() - info.len()];
        let mut name = key.to_vec();
        name.extend_from_slice(sep);
        name.extend_from_slice(&flags);
        e.name = name;
    }
}

/// Replaces a folder file of the target (keeping its owner and mode): a temporary in
/// `tmp/` renamed over it.
fn replace_file(folder: &FolderDirs, name: &[u8], data: &[u8]) -> std::io::Result<()> {
    let st = rustix::fs::statat(&folder.dir, name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW)?;
    through_tmp(
        folder.dir.as_fd(),
        data,
        |f| {
            let _ = std::os::unix::fs::fchown(f, Some(st.st_uid), Some(st.st_gid));
            Ok(rustix::fs::fchmod(
                f,
                Mode::from_raw_mode(st.st_mode & 0o7777),
            )?)
        },
        |tmp_dir, tmp| Ok(rustix::fs::renameat(tmp_dir, tmp, &folder.dir, name)?),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    fn check_written(path: &Path, data: &[u8]) {
        assert_eq!(fs::read(path).unwrap(), data);
        let m = fs::metadata(path).unwrap();
        assert_eq!(m.mode() & 0o7777, 0o640);
        assert_eq!((m.mtime(), m.mtime_nsec()), (1_000_000_000, 5));
    }

    fn open(p: &Path) -> OwnedFd {
        rustix::fs::open(p, OFlags::RDONLY | OFlags::DIRECTORY, Mode::empty()).unwrap()
    }

    /// Both ways of writing a message: complete with mode and mtime, never replacing a
    /// file, and nothing left in `tmp/`.
    #[test]
    fn writes_never_replace_and_leave_nothing() {
        let dir = tempfile::tempdir().unwrap();
        for sub in ["tmp", "cur", "new"] {
            fs::create_dir(dir.path().join(sub)).unwrap();
        }
        let t = Timestamp {
            secs: 1_000_000_000,
            nanos: 5,
        };
        let t = Attrs {
            mode: 0o640,
            mtime: t,
            owner: None,
        };
        let folder = FolderDirs {
            path: dir.path().to_path_buf(),
            dir: open(dir.path()),
            cur: open(&dir.path().join("cur")),
            new: open(&dir.path().join("new")),
        };
        let tmp = dir.path().join("tmp");
        let a = dir.path().join("cur/a");
        match write_unnamed(folder.cur.as_fd(), b"a", b"unnamed", t) {
            Ok(()) => {
                check_written(&a, b"unnamed");
                let again = write_unnamed(folder.cur.as_fd(), b"a", b"other", t);
                assert!(matches!(again, Err(Some(e)) if e.kind() == ErrorKind::AlreadyExists));
                check_written(&a, b"unnamed");
            }
            Err(None) => eprintln!("O_TMPFILE not supported here; only the fallback is tested"),
            Err(Some(e)) => panic!("{e}"),
        }
        let b = dir.path().join("cur/b");
        write_renamed(folder.dir.as_fd(), folder.cur.as_fd(), b"b", b"renamed", t).unwrap();
        check_written(&b, b"renamed");
        let again =
            write_renamed(folder.dir.as_fd(), folder.cur.as_fd(), b"b", b"other", t).unwrap_err();
        assert_eq!(again.kind(), ErrorKind::AlreadyExists);
        check_written(&b, b"renamed");
        assert_eq!(fs::read_dir(&tmp).unwrap().count(), 0);
        // And through the caller, the error names the file.
        let err = write_new_file(&folder, Some(false), b"b", b"x", t).unwrap_err();
        assert!(err.to_string().contains("cur/b"), "{err}");
    }

    /// Issue 10, item 1: owners map by recorded name (as tar does) unless numbers are
    /// asked for; only root sets owners at all.
    #[test]
    fn owners_map_by_name_or_number() {
        let names = OwnerNames {
            users: vec![(1234, "nobody".into()), (7, "no-such-user-here".into())],
            groups: vec![(1234, "nogroup".into())],
        };
        let by_name = OwnerMap::new(Owners::ByName, &names);
        let numeric = OwnerMap::new(Owners::Numeric, &names);
        let fixed = OwnerMap::new(Owners::Fixed { uid: 1, gid: 2 }, &names);
        if !by_name.root {
            assert_eq!(by_name.get(1234, 1234), None);
            return;
        }
        assert_eq!(by_name.get(1234, 1234), Some((65534, 65534)));
        assert_eq!(
            by_name.get(7, 8),
            Some((7, 8)),
            "unknown names keep the number"
        );
        assert_eq!(numeric.get(1234, 1234), Some((1234, 1234)));
        assert_eq!(fixed.get(1234, NO_OWNER), Some((1, 2)));
        assert_eq!(by_name.get(NO_OWNER, NO_OWNER), None, "not recorded (v1)");
        assert!(matches!(
            Owners::chown("nobody:nogroup"),
            Ok(Owners::Fixed {
                uid: 65534,
                gid: 65534
            })
        ));
        assert!(matches!(
            Owners::chown("5:6"),
            Ok(Owners::Fixed { uid: 5, gid: 6 })
        ));
        assert!(Owners::chown("no-such-user-here:x").is_err());
        assert!(Owners::chown("nobody").is_err());
    }

    /// Without root no owner is set; one other than the user's own (recorded, or given
    /// with `--chown`) is noted once, for the report's warning.
    #[test]
    fn owners_not_given_without_root_are_noted() {
        let names = OwnerNames {
            users: vec![],
            groups: vec![],
        };
        let not_root = |policy| {
            let mut m = OwnerMap::new(policy, &names);
            m.root = false;
            m.me = (1000, 1000);
            m
        };
        let own = not_root(Owners::ByName);
        assert_eq!(own.get(1000, 1000), None);
        assert_eq!(own.get(NO_OWNER, NO_OWNER), None);
        assert!(!own.not_given.load(Relaxed), "nothing to give");
        assert_eq!(own.get(0, 0), None);
        assert!(own.not_given.load(Relaxed));
        let fixed = not_root(Owners::Fixed { uid: 1, gid: 2 });
        assert_eq!(fixed.get(NO_OWNER, NO_OWNER), None);
        assert!(fixed.not_given.load(Relaxed), "--chown to another user");
    }

    mod spans {
        //! Issue 12: restores read pack spans, not blobs.
        use super::super::*;
        use crate::model::reader::{plan, read_by_packs, read_by_spans, PackPlan, SpanOptions};
        use crate::ops::backup::{backup, BackupOptions};
        use crate::repo::crypto::KdfParams;
        use crate::repo::tree::{AccountTree, RootTree};
        use crate::report::NoProgress;
        use crate::store::{LocalStore, MemoryStore, Metered, Store};
        use std::collections::BTreeMap;
        use std::sync::Arc;

        use crate::testing::data_reads::DataReads;

        fn recording(inner: Arc<dyn Store>) -> Arc<DataReads> {
            DataReads::new(inner)
        }

        /// Incompressible-ish text, different for every seed.
        fn body(seed: u64, len: usize) -> Vec<u8> {
            let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
            (0..len)
                .map(|i| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    if i % 70 == 69 {
                        b'\n'
                    } else {
                        b'a' + (x % 26) as u8
                    }
                })
                .collect()
        }

        /// A Maildir of three folders (INBOX, .Sent, .Archive) with `n` messages each;
        /// every tenth message of `.Archive` is a copy of one in INBOX (one blob, two
        /// messages).
        fn maildir(root: &Path, n: u64) {
            maildir_from(root, n, 0)
        }

        /// [`maildir`] with its own messages for every `base`.
        fn maildir_from(root: &Path, n: u64, base: u64) {
            for (f, folder) in ["", ".Sent", ".Archive"].iter().enumerate() {
                for sub in ["cur", "new", "tmp"] {
                    fs::create_dir_all(root.join(folder).join(sub)).unwrap();
                }
                let uidlist = format!("3 V{base} N{}\n", n + 1);
                fs::write(root.join(folder).join("dovecot-uidlist"), uidlist).unwrap();
                for i in 0..n {
                    let seed = base
                        + if f == 2 && i % 10 == 0 {
                            i
                        } else {
                            f as u64 * n + i
                        };
                    let mut m = format!("From: a@example.org\nSubject: {seed}\n\n").into_bytes();
                    m.extend(body(seed, 2000 + (seed as usize * 37) % 5000));
                    let name = format!("{}.M{f}P{i}.host:2,S", 1_600_000_000 + i);
                    fs::write(root.join(folder).join("cur").join(name), m).unwrap();
                }
            }
        }

        /// Every file below `cur/` and `new/` of every folder, and its `dovecot-uidlist`,
        /// by path.
        fn messages(root: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
            let mut out = BTreeMap::new();
            for folder in ["", ".Sent", ".Archive"] {
                let uidlist = Path::new(folder).join("dovecot-uidlist");
                if let Ok(data) = fs::read(root.join(&uidlist)) {
                    out.insert(uidlist, data);
                }
                for sub in ["cur", "new"] {
                    let dir = root.join(folder).join(sub);
                    for e in fs::read_dir(&dir).into_iter().flatten() {
                        let p = e.unwrap().path();
                        let rel = p.strip_prefix(root).unwrap().to_path_buf();
                        out.insert(rel, fs::read(&p).unwrap());
                    }
                }
            }
            out
        }

        /// A repository with small packs (64 KiB) on `store`, holding a backup of `src`,
        /// opened again (as a restore opens it).
        fn backed_up(store: Arc<dyn Store>, src: &Path) -> Repository {
            backed_up_accounts(store, src, vec!["bob".into()])
        }

        /// [`backed_up`] for a mail store of `accounts` (all: empty).
        fn backed_up_accounts(
            store: Arc<dyn Store>,
            src: &Path,
            accounts: Vec<String>,
        ) -> Repository {
            let opts = crate::repo::InitOptions {
                kdf: KdfParams {
                    m_cost: 64,
                    t_cost: 1,
                    p_cost: 1,
                },
                pack_size: 64 << 10,
                ..Default::default()
            };
            let mut repo = Repository::init(store.clone(), b"pw", &opts).unwrap();
            let r = backup(
                &mut repo,
                &BackupOptions {
                    source: src.to_path_buf(),
                    accounts,
                    jobs: 2,
                    compression: None,
                    tags: vec![],
                    hostname: "h".into(),
                    force: false,
                    stat_unchanged: false,
                },
                &NoProgress,
            )
            .unwrap();
            assert!(r.failures.is_empty(), "{:?}", r.failures);
            Repository::open(store, b"pw").unwrap()
        }

        /// The spans the restore of the messages of `folders` (all: empty) reads, each
        /// once. Also the number of tree blobs the restore reads (the account's tree and
        /// its folders' chunks, two blobs each).
        fn planned(repo: &Repository, folders: &[&str]) -> (usize, Vec<Vec<Id>>, usize) {
            let snap = repo.find_snapshot("latest").unwrap();
            let root: RootTree = repo.read_tree(&snap.root).unwrap();
            let (mut contents, mut files) = (Vec::new(), Vec::new());
            let mut trees = 0;
            for acc in &root.accounts {
                let acc: AccountTree = repo.read_tree(&acc.tree).unwrap();
                trees += 1;
                for node in &acc.folders {
                    if !folders.is_empty() && !folders.contains(&&node.name[..]) {
                        continue;
                    }
                    trees += 2 * node.chunks.len();
                    for c in &node.chunks {
                        let entries = repo.read_chunk(c).unwrap();
                        contents.extend(entries.into_iter().map(|e| e.content));
                    }
                    files.extend(node.files.iter().map(|f| f.content.clone()));
                }
            }
            // The folder files are read from the same spans.
            let all: Vec<Vec<Id>> = contents.iter().chain(&files).cloned().collect();
            let plan = PackPlan::new(repo.index(), &all, |c| c, &SpanOptions::default());
            (plan.spans.len(), contents, trees)
        }

        /// No byte of a pack was read twice.
        fn read_once(reads: &[(String, u64, u64)]) {
            let mut r = reads.to_vec();
            r.sort();
            for w in r.windows(2) {
                assert!(
                    w[0].0 != w[1].0 || w[0].1 + w[0].2 <= w[1].1,
                    "read twice: {:?} and {:?}",
                    w[0],
                    w[1]
                );
            }
        }

        fn restore_to(repo: &Repository, target: &Path, folders: &[&str]) -> RestoreReport {
            let opts = RestoreOptions {
                snapshot: "latest".into(),
                target: target.to_path_buf(),
                folders: folders.iter().map(|f| f.to_string()).collect(),
                jobs: 2,
                ..Default::default()
            };
            restore(repo, &opts, &NoProgress).unwrap()
        }

        /// A restore of 300 messages reads each pack span once: as many data reads as
        /// the plan has spans (one per pack here, packs being small), far fewer than
        /// messages, and byte-exact. Before, every blob was its own read.
        #[test]
        fn a_restore_reads_spans_not_blobs() {
            let t = tempfile::tempdir().unwrap();
            let src = t.path().join("src");
            maildir(&src, 100);
            let recording = recording(Arc::new(MemoryStore::new()));
            let metered = Arc::new(Metered::new(recording.clone()));
            let repo = backed_up(metered.clone(), &src);
            let (spans, contents, trees) = planned(&repo, &[]);
            let blobs: usize = contents.iter().map(Vec::len).sum();
            let packs = repo.index().packs().len();
            assert!(spans <= packs, "{spans} spans, {packs} packs");
            assert!(blobs >= 300, "{blobs} blobs");
            recording.reads().clear();
            let before = metered.counts();
            let out = t.path().join("out");
            let r = restore_to(&repo, &out, &[]);
            let gets = metered.counts().get - before.get;
            assert!(r.failures.is_empty(), "{:?}", r.failures);
            assert_eq!(r.items_restored, 300);
            assert_eq!(messages(&out), messages(&src), "byte-exact");
            let data_reads = recording.reads().len();
            assert_eq!(data_reads, spans, "one read per planned span");
            read_once(&recording.reads());
            // Besides: the snapshot file, the root tree, the account's trees.
            assert_eq!(gets, (spans + 2 + trees) as u64, "{trees} tree blobs");
            assert!(gets * 5 < 300, "{gets} GETs for 300 messages");
        }

        /// The readers stay within the window: while group `g` is written, no span of a
        /// group past `g + ahead` has been read; every blob opens from the spans as a
        /// single read opens it, and nothing is read twice.
        #[test]
        fn span_reads_stay_within_the_window() {
            let t = tempfile::tempdir().unwrap();
            let src = t.path().join("src");
            maildir(&src, 100);
            let recording = recording(Arc::new(MemoryStore::new()));
            let repo = backed_up(recording.clone(), &src);
            let (_, contents, _) = planned(&repo, &[]);
            let opts = SpanOptions {
                group_bytes: 100 << 10,
                readers: 4,
                ahead: 1,
                ..Default::default()
            };
            let groups = plan(repo.index(), &contents, |c| c, |_| true, &opts);
            assert!(groups.len() >= 5, "{} groups", groups.len());
            // Spans in groups 0..=g, for each g.
            let upto: Vec<usize> = (groups.iter())
                .scan(0, |n, g| {
                    *n += g.spans.len();
                    Some(*n)
                })
                .collect();
            // Single reads to compare with, not recorded.
            let plain = Repository::open(recording.inner(), b"pw").unwrap();
            recording.reads().clear();
            let mut g = 0;
            let mut written = 0;
            read_by_spans(
                &repo,
                &contents,
                |c| c,
                |_| true,
                &opts,
                |jobs, fetched| {
                    let reads = recording.reads().len();
                    let limit = upto[(g + opts.ahead).min(groups.len() - 1)];
                    assert!(
                        reads <= limit,
                        "group {g}: {reads} spans read, {limit} allowed"
                    );
                    assert!(reads >= upto[g], "group {g} handed over before its spans");
                    for id in jobs.iter().flatten() {
                        assert_eq!(fetched.blob(id).unwrap(), plain.read_blob(id).unwrap());
                    }
                    written += jobs.len();
                    g += 1;
                },
            );
            assert_eq!((g, written), (groups.len(), contents.len()));
            assert_eq!(recording.reads().len(), upto[groups.len() - 1]);
        }

        /// A blob that several groups need (a message in two folders) is read by the
        /// first and kept for the others, and opens from there as a single read opens
        /// it. Without keeping, each group reads it again.
        #[test]
        fn shared_blobs_are_read_once() {
            let t = tempfile::tempdir().unwrap();
            let src = t.path().join("src");
            maildir(&src, 100);
            let recording = recording(Arc::new(MemoryStore::new()));
            let repo = backed_up(recording.clone(), &src);
            // In folder order: the copies in Archive come far from their originals.
            let (_, contents, _) = planned(&repo, &[]);
            let mut uses: HashMap<Id, usize> = HashMap::new();
            for id in contents.iter().flatten() {
                *uses.entry(*id).or_default() += 1;
            }
            assert_eq!(uses.values().filter(|&&n| n > 1).count(), 10, "ten copies");
            let opts = |keep_bytes| SpanOptions {
                group_bytes: 100 << 10,
                keep_bytes,
                ..Default::default()
            };
            let read_by = |keep_bytes| {
                let groups = plan(repo.index(), &contents, |c| c, |_| true, &opts(keep_bytes));
                assert!(groups.len() >= 5, "{} groups", groups.len());
                let mut n: HashMap<Id, usize> = HashMap::new();
                for id in uses.keys() {
                    n.insert(*id, groups.iter().filter(|g| g.reads(id)).count());
                }
                (n, groups.iter().map(|g| g.spans.len()).sum::<usize>())
            };
            let (once, spans) = read_by(64 << 20);
            assert!(
                once.values().all(|&n| n == 1),
                "every blob read by one group"
            );
            let (again, _) = read_by(0);
            let twice = (again.iter()).filter(|(id, n)| uses[*id] > 1 && **n > 1);
            assert_eq!(twice.count(), 10, "without keeping, copies are read again");
            // And read so: the kept blobs open as single reads do.
            let plain = Repository::open(recording.inner(), b"pw").unwrap();
            recording.reads().clear();
            read_by_spans(
                &repo,
                &contents,
                |c| c,
                |_| true,
                &opts(64 << 20),
                |jobs, f| {
                    for id in jobs.iter().flatten() {
                        assert_eq!(f.blob(id).unwrap(), plain.read_blob(id).unwrap());
                    }
                },
            );
            assert_eq!(recording.reads().len(), spans);
        }

        /// Reading by packs: every span is read once whatever the order of the jobs,
        /// each job is delivered once, after the last span holding its blobs, and every
        /// blob opens as a single read opens it, whether its job got it from the span
        /// being delivered or from the spool (in memory, or on disk past the budget).
        #[test]
        fn packs_are_read_once_in_any_job_order() {
            let t = tempfile::tempdir().unwrap();
            let src = t.path().join("src");
            // 150 deliveries of 50 messages: three copies of each body, each with its own
            // trace prefix (two blobs a message; the body's blob shared by three).
            for sub in ["cur", "new", "tmp"] {
                fs::create_dir_all(src.join(sub)).unwrap();
            }
            for i in 0..150u64 {
                let mut m = format!(
                    "Received: from h{i} by mx; Tue, 1 Sep 2020 00:00:00 +0000\n\
                     From: a@example.org\nSubject: {}\n\n",
                    i % 50
                )
                .into_bytes();
                m.extend(body(i % 50, 3000));
                let name = format!("{}.M{i}.host:2,S", 1_600_000_000 + i);
                fs::write(src.join("cur").join(name), m).unwrap();
            }
            let recording = recording(Arc::new(MemoryStore::new()));
            let repo = backed_up(recording.clone(), &src);
            let (_, mut contents, _) = planned(&repo, &[]);
            assert!(contents.iter().all(|c| c.len() == 2), "prefix and body");
            // Far from pack order: reversed, then every other one first.
            contents.reverse();
            let (even, odd): (Vec<_>, Vec<_>) = contents
                .into_iter()
                .enumerate()
                .partition(|(i, _)| i % 2 == 0);
            let contents: Vec<Vec<Id>> = even.into_iter().chain(odd).map(|(_, c)| c).collect();
            let plain = Repository::open(recording.inner(), b"pw").unwrap();
            // One blob per span (no merging): every two-blob message needs two spans.
            for keep_bytes in [64 << 20, 0] {
                let opts = SpanOptions {
                    gap: 0,
                    max_span: 1,
                    keep_bytes,
                    readers: 3,
                    ahead: 1,
                    ..Default::default()
                };
                let plan = PackPlan::new(repo.index(), &contents, |c| c, &opts);
                let split = contents.iter().filter(|c| {
                    let spans: std::collections::HashSet<_> = c
                        .iter()
                        .map(|id| repo.index().get(id).unwrap().offset)
                        .collect();
                    spans.len() > 1
                });
                assert_eq!(split.count(), 150, "every message over two spans");
                recording.reads().clear();
                let delivered: Vec<AtomicU64> =
                    (0..contents.len()).map(|_| AtomicU64::new(0)).collect();
                let pos = |c: &Vec<Id>| (contents.iter()).position(|x| std::ptr::eq(x, c)).unwrap();
                read_by_packs(
                    &repo,
                    &contents,
                    |c| c,
                    &opts,
                    |c, blobs| {
                        delivered[pos(c)].fetch_add(1, Relaxed);
                        for id in c {
                            assert_eq!(blobs.blob(id).unwrap(), plain.read_blob(id).unwrap());
                        }
                    },
                );
                assert!(
                    delivered.iter().all(|n| n.load(Relaxed) == 1),
                    "each job once"
                );
                let reads = recording.reads().clone();
                assert_eq!(reads.len(), plan.spans.len(), "keep_bytes {keep_bytes}");
                read_once(&reads);
            }
        }

        /// Accounts are restored together: a pack span that holds several accounts'
        /// messages is read once, not once per account.
        #[test]
        fn accounts_share_their_span_reads() {
            let t = tempfile::tempdir().unwrap();
            let src = t.path().join("src");
            let users = ["ann", "bob", "cid", "dan"];
            for (i, user) in users.iter().enumerate() {
                let dir = src.join("example.org").join(user).join("Maildir");
                maildir_from(&dir, 25, 1000 * i as u64);
            }
            let recording = recording(Arc::new(MemoryStore::new()));
            let repo = backed_up_accounts(recording.clone(), &src, vec![]);
            let (spans, contents, _) = planned(&repo, &[]);
            assert_eq!(contents.len(), 300);
            recording.reads().clear();
            let out = t.path().join("out");
            let r = restore_to(&repo, &out, &[]);
            assert!(r.failures.is_empty(), "{:?}", r.failures);
            assert_eq!((r.accounts, r.items_restored), (4, 300));
            for user in users {
                let rel = Path::new("example.org").join(user).join("Maildir");
                assert_eq!(
                    messages(&out.join(&rel)),
                    messages(&src.join(&rel)),
                    "{user}"
                );
            }
            let reads = recording.reads().len();
            assert_eq!(reads, spans, "one read per planned span, for all accounts");
            read_once(&recording.reads());
        }

        /// An account whose tree cannot be read stops the restore with its error, after
        /// the accounts planned before it (batched, not yet written) are restored.
        #[test]
        fn accounts_before_an_unreadable_one_are_restored() {
            let t = tempfile::tempdir().unwrap();
            let src = t.path().join("src");
            for (i, user) in ["ann", "bob"].iter().enumerate() {
                let dir = src.join("example.org").join(user).join("Maildir");
                maildir_from(&dir, 5, 1000 * i as u64);
            }
            let store_dir = t.path().join("repo");
            let repo = backed_up_accounts(Arc::new(LocalStore::new(&store_dir)), &src, vec![]);
            let snap = repo.find_snapshot("latest").unwrap();
            let root: RootTree = repo.read_tree(&snap.root).unwrap();
            assert_eq!(root.accounts[1].name, "bob@example.org");
            let loc = *repo.index().get(&root.accounts[1].tree).unwrap();
            let file = store_dir.join(crate::repo::pack::pack_path(
                &repo.index().pack_id(loc.pack),
            ));
            let mut bytes = fs::read(&file).unwrap();
            bytes[(loc.offset + loc.stored_len / 2) as usize] ^= 1;
            let mut perm = fs::metadata(&file).unwrap().permissions();
            std::os::unix::fs::PermissionsExt::set_mode(&mut perm, 0o600);
            fs::set_permissions(&file, perm).unwrap();
            fs::write(&file, bytes).unwrap();
            let out = t.path().join("out");
            let opts = RestoreOptions {
                snapshot: "latest".into(),
                target: out.clone(),
                jobs: 2,
                ..Default::default()
            };
            let err = restore(&repo, &opts, &NoProgress).unwrap_err();
            assert!(
                err.to_string().contains(&root.accounts[1].tree.short()),
                "{err}"
            );
            let ann = Path::new("example.org/ann/Maildir");
            assert_eq!(
                messages(&out.join(ann)).len(),
                15 + 3,
                "ann's messages (and folder files) restored"
            );
            assert!(
                messages(&out.join(ann)) == messages(&src.join(ann)),
                "byte-exact"
            );
        }

        /// A restore of one folder reads only spans that hold its blobs, as many as its
        /// plan has.
        #[test]
        fn a_partial_restore_reads_only_its_spans() {
            let t = tempfile::tempdir().unwrap();
            let src = t.path().join("src");
            maildir(&src, 100);
            let recording = recording(Arc::new(MemoryStore::new()));
            let repo = backed_up(recording.clone(), &src);
            let (spans, contents, _) = planned(&repo, &["Sent"]);
            recording.reads().clear();
            let out = t.path().join("out");
            let r = restore_to(&repo, &out, &["Sent"]);
            assert!(r.failures.is_empty(), "{:?}", r.failures);
            assert_eq!(r.items_restored, 100);
            let want: BTreeMap<_, _> = messages(&src)
                .into_iter()
                .filter(|(p, _)| p.starts_with(".Sent"))
                .collect();
            assert_eq!(messages(&out), want, "byte-exact, and nothing else");
            let reads = recording.reads().clone();
            assert_eq!(reads.len(), spans, "one read per planned span");
            assert!(
                reads.len() * 5 < 100,
                "{} reads for 100 messages",
                reads.len()
            );
            let index = repo.index();
            for (path, offset, len) in &reads {
                let holds = contents.iter().flatten().any(|id| {
                    let l = index.get(id).unwrap();
                    crate::repo::pack::pack_path(&index.pack_id(l.pack)) == *path
                        && u64::from(l.offset) >= *offset
                        && u64::from(l.offset) + u64::from(l.stored_len) <= offset + len
                });
                assert!(holds, "{path} {offset}+{len} holds none of Sent's blobs");
            }
        }

        /// A damaged blob read in a span fails its message only, named with the blob and
        /// its pack; every other message is restored.
        #[test]
        fn a_damaged_blob_in_a_span_is_named() {
            let t = tempfile::tempdir().unwrap();
            let src = t.path().join("src");
            maildir(&src, 30);
            let store_dir = t.path().join("repo");
            let repo = backed_up(Arc::new(LocalStore::new(&store_dir)), &src);
            // The first blob of one message of Sent: flip a byte in its middle.
            let snap = repo.find_snapshot("latest").unwrap();
            let root: RootTree = repo.read_tree(&snap.root).unwrap();
            let acc: AccountTree = repo.read_tree(&root.accounts[0].tree).unwrap();
            let sent = acc.folders.iter().find(|f| f.name == "Sent").unwrap();
            let entry = repo.read_chunk(&sent.chunks[0]).unwrap().remove(7);
            let id = entry.content[0];
            let loc = *repo.index().get(&id).unwrap();
            let pack = crate::repo::pack::pack_path(&repo.index().pack_id(loc.pack));
            let file = store_dir.join(&pack);
            let mut bytes = fs::read(&file).unwrap();
            bytes[(loc.offset + loc.stored_len / 2) as usize] ^= 1;
            let mut perm = fs::metadata(&file).unwrap().permissions();
            std::os::unix::fs::PermissionsExt::set_mode(&mut perm, 0o600);
            fs::set_permissions(&file, perm).unwrap();
            fs::write(&file, bytes).unwrap();
            let out = t.path().join("out");
            let r = restore_to(&repo, &out, &[]);
            assert_eq!(
                (r.items_restored, r.items_failed),
                (89, 1),
                "{:?}",
                r.failures
            );
            let name = String::from_utf8_lossy(&entry.name).to_string();
            let f = &r.failures[0];
            assert!(f.item.contains(&name), "{f:?}");
            assert!(f.error.contains(&id.short()), "{f:?}");
            assert!(f.error.contains(&pack), "{f:?}");
            let mut want = messages(&src);
            want.retain(|p, _| !p.ends_with(&name));
            assert_eq!(messages(&out), want);
        }
    }

    #[test]
    fn keyword_files_parse() {
        assert_eq!(
            parse_keywords(b"0 $Label1\n1 $Forwarded\nbad\n30 x\n"),
            vec![(0, b"$Label1".to_vec()), (1, b"$Forwarded".to_vec())]
        );
    }
}
