//! Restore of a snapshot (or part of it) into a live IMAP server: the "external restore".
//!
//! Three phases, each timed and reported:
//! 1. **provisioning**: per account, the folders (parents first, special use for Sent,
//!    Drafts, Trash, Junk and Archive where the server can set it) and the subscriptions
//!    of the INBOX's `subscriptions` file;
//! 2. **data**: per folder, APPEND with flags and keywords (Maildir letters mapped through
//!    the folder's `dovecot-keywords`), INTERNALDATE = the file's mtime, LF -> CRLF.
//!    Several accounts run at once, each over several connections; a folder's messages
//!    are read from the repository in pack order, in batches (bounded memory), and each
//!    batch is one MULTIAPPEND when the server offers it;
//! 3. **acls**: not in snapshots yet, reported as such.
//!
//! Every batch is written to the [`journal`](super::journal) before it is sent and when
//! the server answered, so a re-run skips what the server accepted and checks messages
//! in doubt on the server (Message-ID, size, date) before sending them again;
//! `skip_existing` does that check for every message. Dropped connections reconnect with
//! backoff, throttling slows every connection down ([`super::Pacer`]), and a message the
//! server refuses is reported with the server's words while the run goes on.

use super::journal::{self, AccountJournal, State};
use super::names::{self, Fingerprint};
use super::prepare::{self, BlobCache, PrepareError};
use super::{login_with_backoff, Connection, Error, Pacer, Phase, Result, Span};
use crate::id::Id;
use crate::model::{folder_selected, message_selected, select_accounts};
use crate::repo::{lock, Repository};
use crate::report::{per_sec, Failure, Progress};
use crate::restore::assemble;
use crate::tree::{AccountRef, AccountTree, FolderNode, MessageEntry};
use mailvault_imap::maildir_flags::{maildir_to_imap, KeywordTable};
use mailvault_imap::{
    AppendMsg, AppendOutcome, Client, Credentials, FetchQuery, InternalDate, SeqSet, Session,
};
use serde::Serialize;
use std::collections::{HashMap, HashSet, VecDeque};
use std::ops::Range;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// What to restore and where.
#[derive(Clone, Debug)]
pub struct ImapRestoreOptions {
    /// `latest` or a snapshot id prefix.
    pub snapshot: String,
    /// Only these accounts (all when empty).
    pub accounts: Vec<String>,
    /// Only these folders and their subfolders (all when empty).
    pub folders: Vec<String>,
    /// Only these messages, by Maildir key or file name (all when empty); only the
    /// folders that hold them are created.
    pub messages: Vec<String>,
    pub connection: Connection,
    /// Connections per account.
    pub connections: usize,
    /// Accounts restored at the same time.
    pub parallel_accounts: usize,
    /// At most this many messages per second over all connections.
    pub max_rate: Option<f64>,
    /// Look for every message on the server (Message-ID, size, date) before sending it.
    pub skip_existing: bool,
    /// Where the journals live (see [`super::default_journal_dir`]).
    pub journal_dir: PathBuf,
    /// Most messages per batch (one MULTIAPPEND).
    pub batch_messages: usize,
    /// Most bytes per batch.
    pub batch_bytes: usize,
    /// Opened blobs kept for messages that share them (a message delivered to several
    /// mailboxes), in bytes; 0 turns the cache off.
    pub blob_cache_bytes: usize,
}

impl ImapRestoreOptions {
    /// Defaults for everything but what and where.
    pub fn new(snapshot: &str, connection: Connection) -> Self {
        ImapRestoreOptions {
            snapshot: snapshot.into(),
            accounts: Vec::new(),
            folders: Vec::new(),
            messages: Vec::new(),
            connection,
            connections: 4,
            parallel_accounts: 4,
            max_rate: None,
            skip_existing: false,
            journal_dir: super::default_journal_dir(),
            batch_messages: 500,
            batch_bytes: 8 << 20,
            blob_cache_bytes: 64 << 20,
        }
    }
}

/// One account's figures.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct AccountFigures {
    pub account: String,
    pub messages: u64,
    pub appended: u64,
    pub skipped: u64,
    pub failed: u64,
    pub secs: f64,
}

/// The end-of-run summary.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct ImapRestoreReport {
    pub snapshot: String,
    pub target: String,
    pub accounts: u64,
    pub folders: u64,
    /// Messages selected.
    pub items_total: u64,
    /// Messages appended by this run.
    pub items_appended: u64,
    /// Messages the journal says an earlier run appended.
    pub items_journaled: u64,
    /// Messages found on the server (in doubt, or `skip_existing`) and not sent again.
    pub items_existing: u64,
    pub items_failed: u64,
    /// Bytes appended (CRLF form).
    pub bytes_appended: u64,
    pub elapsed_secs: f64,
    pub items_per_sec: f64,
    pub mb_per_sec: f64,
    pub phases: Vec<Phase>,
    pub per_account: Vec<AccountFigures>,
    /// The journal directory of this (repository, snapshot, target).
    pub journal: String,
    pub failures: Vec<Failure>,
}

struct Ctx<'a> {
    repo: &'a Repository,
    opts: &'a ImapRestoreOptions,
    client: Client,
    pacer: Pacer,
    run_dir: PathBuf,
    header: String,
    progress: &'a dyn Progress,
    failures: Mutex<Vec<Failure>>,
    appended: AtomicU64,
    journaled: AtomicU64,
    existing: AtomicU64,
    failed: AtomicU64,
    bytes: AtomicU64,
    per_account: Mutex<Vec<AccountFigures>>,
    provisioning: Span,
    data: Span,
    cache: BlobCache,
}

impl Ctx<'_> {
    fn fail(&self, item: impl Into<String>, e: impl std::fmt::Display) {
        lock(&self.failures).push(Failure::new(item, e));
    }
    fn fail_messages(&self, acc: &str, folder: &str, keys: &[&MessageEntry], e: &str) {
        for m in keys {
            self.fail(
                format!("{acc}: {folder}: {}", String::from_utf8_lossy(&m.key)),
                e,
            );
            self.failed.fetch_add(1, Relaxed);
            self.progress.advance(1, m.size);
        }
    }
}

/// Restores a snapshot into an IMAP server.
pub fn restore(
    repo: &Repository,
    opts: &ImapRestoreOptions,
    progress: &dyn Progress,
) -> Result<ImapRestoreReport> {
    let started = Instant::now();
    let snap = repo.find_snapshot(&opts.snapshot)?;
    let root = repo.read_tree(&snap.root)?;
    let accounts = select_accounts(root, &opts.accounts)?;
    let target = opts.connection.url();
    let run_dir = journal::run_dir(
        &opts.journal_dir,
        &repo.config().id,
        &snap.id.to_hex(),
        &target,
    );
    let ctx = Ctx {
        repo,
        opts,
        client: Client::new(opts.connection.client.clone())?,
        pacer: Pacer::new(opts.max_rate),
        header: format!(
            "repo={} snapshot={} target={target}",
            repo.config().id,
            snap.id.to_hex()
        ),
        run_dir,
        progress,
        failures: Mutex::new(Vec::new()),
        appended: AtomicU64::new(0),
        journaled: AtomicU64::new(0),
        existing: AtomicU64::new(0),
        failed: AtomicU64::new(0),
        bytes: AtomicU64::new(0),
        per_account: Mutex::new(Vec::new()),
        provisioning: Span::default(),
        data: Span::default(),
        cache: BlobCache::new(opts.blob_cache_bytes),
    };

    // Which folders of which account: read every account tree once, up front (small).
    let mut plans = Vec::new();
    let mut folders = 0u64;
    for acc in &accounts {
        let tree: AccountTree = repo.read_tree(&acc.tree)?;
        let selected: Vec<FolderNode> = tree
            .folders
            .into_iter()
            .filter(|f| folder_selected(f, &opts.folders))
            .collect();
        folders += selected.len() as u64;
        plans.push((acc.clone(), selected));
    }
    if !opts.folders.is_empty() && folders == 0 {
        return Err(Error::InvalidInput(format!(
            "no folder matches {:?} in the selected accounts",
            opts.folders
        )));
    }
    if !opts.messages.is_empty() {
        // Keep the folders that hold a selected message, counting only those messages:
        // restoring one message creates one folder, not the account's every folder.
        folders = 0;
        for (_, selected) in &mut plans {
            let mut kept = Vec::new();
            for mut node in std::mem::take(selected) {
                let (mut n, mut bytes) = (0u64, 0u64);
                for c in &node.chunks {
                    for e in repo.read_chunk(c)? {
                        if message_selected(&e, &opts.messages) {
                            n += 1;
                            bytes += e.size;
                        }
                    }
                }
                if n > 0 {
                    (node.messages, node.bytes) = (n, bytes);
                    kept.push(node);
                }
            }
            folders += kept.len() as u64;
            *selected = kept;
        }
        plans.retain(|(_, selected)| !selected.is_empty());
        if folders == 0 {
            return Err(Error::InvalidInput(format!(
                "no message matches {:?} in the selected accounts and folders",
                opts.messages
            )));
        }
    }
    tracing::debug!(
        "{} accounts, {folders} folders planned at {:.3} s",
        plans.len(),
        started.elapsed().as_secs_f64()
    );
    // Provisioning and data run as one pipeline per account: an account's data starts
    // as soon as its folders exist, over the session that created them, while other
    // accounts are still being provisioned or restored.
    let total: u64 = plans
        .iter()
        .flat_map(|(_, f)| f.iter().map(|f| f.messages))
        .sum();
    progress.add_total(
        total,
        plans
            .iter()
            .flat_map(|(_, f)| f.iter().map(|f| f.bytes))
            .sum(),
    );
    let created = AtomicU64::new(0);
    let subscribed = AtomicU64::new(0);
    let special = AtomicU64::new(0);
    // Domains in snapshot order (their accounts share the most blobs, mail to several
    // colleagues: together, they make the most of the blob cache), and within a domain
    // the largest accounts first, so that a run does not end with one big account on
    // one connection while the others are done.
    let domain = |i: usize| plans[i].0.name.rsplit_once('@').map(|(_, d)| d);
    let mut first_seen: HashMap<Option<&str>, usize> = HashMap::new();
    for i in 0..plans.len() {
        first_seen.entry(domain(i)).or_insert(i);
    }
    let mut order: Vec<usize> = (0..plans.len()).collect();
    order.sort_by_key(|&i| {
        (
            first_seen.get(&domain(i)).copied().unwrap_or(i),
            std::cmp::Reverse(plans[i].1.iter().map(|f| f.messages).sum::<u64>()),
        )
    });
    let lanes = opts.parallel_accounts.max(1);
    for_each_parallel(order.len(), lanes, |k| {
        let i = order[k];
        let (acc, selected) = &plans[i];
        // An account gets more than one connection only when fewer accounts than
        // `lanes` are left to run beside it: every connection is a login, which costs
        // the server about as much as appending 50-100 messages (see docs/imap.md).
        let share = (lanes / lanes.min(order.len() - k)).max(1);
        let t = Instant::now();
        let provisioned = provision(&ctx, acc, selected);
        ctx.provisioning.add(t);
        tracing::debug!(
            "{}: provisioned at {:.3} s in {:.3} s",
            acc.name,
            started.elapsed().as_secs_f64(),
            t.elapsed().as_secs_f64()
        );
        let session = match provisioned {
            Ok((s, (c, sub, u))) => {
                created.fetch_add(c, Relaxed);
                subscribed.fetch_add(sub, Relaxed);
                special.fetch_add(u, Relaxed);
                s
            }
            Err(e) => {
                let n: u64 = selected.iter().map(|f| f.messages).sum();
                ctx.failed.fetch_add(n, Relaxed);
                ctx.progress
                    .advance(n, selected.iter().map(|f| f.bytes).sum());
                ctx.fail(
                    format!("account {}", acc.name),
                    format!("{e}; none of its {n} messages restored"),
                );
                return;
            }
        };
        let t = Instant::now();
        let before = (
            ctx.appended.load(Relaxed),
            ctx.journaled.load(Relaxed) + ctx.existing.load(Relaxed),
            ctx.failed.load(Relaxed),
        );
        if let Err(e) = restore_account(&ctx, acc, selected, session, share) {
            ctx.fail(format!("account {}", acc.name), e);
        }
        ctx.data.add(t);
        tracing::debug!(
            "{}: data done at {:.3} s in {:.3} s",
            acc.name,
            started.elapsed().as_secs_f64(),
            t.elapsed().as_secs_f64()
        );
        // Figures of accounts running at the same time mix; they are exact with
        // --accounts 1 and indicative otherwise.
        lock(&ctx.per_account).push(AccountFigures {
            account: acc.name.clone(),
            messages: selected.iter().map(|f| f.messages).sum(),
            appended: ctx.appended.load(Relaxed).saturating_sub(before.0),
            skipped: (ctx.journaled.load(Relaxed) + ctx.existing.load(Relaxed))
                .saturating_sub(before.1),
            failed: ctx.failed.load(Relaxed).saturating_sub(before.2),
            secs: t.elapsed().as_secs_f64(),
        });
    });
    let special_note = if special.load(Relaxed) > 0 {
        format!("special use set on {} folders", special.load(Relaxed))
    } else {
        "special use: the server cannot set it on CREATE (no CREATE-SPECIAL-USE); it keeps its own configuration".into()
    };
    let (hits, misses) = ctx.cache.stats();
    tracing::debug!("blob cache: {hits} hits, {misses} misses");
    let appended = ctx.appended.load(Relaxed);
    let phases = vec![
        ctx.provisioning.phase(
            "provisioning",
            created.load(Relaxed) + subscribed.load(Relaxed),
            format!(
                "{} folders created, {} subscriptions; {special_note}",
                created.load(Relaxed),
                subscribed.load(Relaxed)
            ),
        ),
        ctx.data.phase(
            "data",
            appended,
            format!(
                "{appended} appended, {} already done by an earlier run, {} found on the server",
                ctx.journaled.load(Relaxed),
                ctx.existing.load(Relaxed)
            ),
        ),
        Phase::new(
            "acls",
            0,
            Instant::now(),
            "ACLs and shared folders are not in snapshots yet: nothing to restore".into(),
        ),
    ];

    let mut failures = std::mem::take(&mut *lock(&ctx.failures));
    failures.sort_by(|a, b| a.item.cmp(&b.item));
    let mut per_account = std::mem::take(&mut *lock(&ctx.per_account));
    per_account.sort_by(|a, b| a.account.cmp(&b.account));
    let elapsed = started.elapsed().as_secs_f64();
    let bytes = ctx.bytes.load(Relaxed);
    Ok(ImapRestoreReport {
        snapshot: snap.id.to_hex(),
        target,
        accounts: accounts.len() as u64,
        folders,
        items_total: total,
        items_appended: appended,
        items_journaled: ctx.journaled.load(Relaxed),
        items_existing: ctx.existing.load(Relaxed),
        items_failed: ctx.failed.load(Relaxed),
        bytes_appended: bytes,
        elapsed_secs: elapsed,
        items_per_sec: per_sec(total, elapsed),
        mb_per_sec: per_sec(bytes, elapsed) / 1e6,
        phases,
        per_account,
        journal: ctx.run_dir.display().to_string(),
        failures,
    })
}

/// Splits `ready` into the messages at the positions `a` and those at `b` (both sorted);
/// the others are dropped.
fn take_two(ready: Vec<Ready>, a: &[usize], b: &[usize]) -> (Vec<Ready>, Vec<Ready>) {
    let (mut x, mut y) = (Vec::new(), Vec::new());
    for (i, r) in ready.into_iter().enumerate() {
        if a.binary_search(&i).is_ok() {
            x.push(r);
        } else if b.binary_search(&i).is_ok() {
            y.push(r);
        }
    }
    (x, y)
}

/// Runs `f(0..n)` on up to `threads` threads.
pub(crate) fn for_each_parallel(n: usize, threads: usize, f: impl Fn(usize) + Sync) {
    let next = AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..threads.clamp(1, n.max(1)) {
            spawn_named(s, "imap-account", || loop {
                let i = next.fetch_add(1, Relaxed);
                if i >= n {
                    break;
                }
                f(i);
            });
        }
    });
}

/// `s.spawn(f)` with a thread name (for profilers and debuggers).
fn spawn_named<'s, 'e: 's, F: FnOnce() + Send + 's>(
    s: &'s std::thread::Scope<'s, 'e>,
    name: &str,
    f: F,
) {
    if let Err(e) = std::thread::Builder::new()
        .name(name.into())
        .spawn_scoped(s, f)
    {
        // What `Scope::spawn` does too.
        panic!("cannot start a thread: {e}");
    }
}

fn credentials(ctx: &Ctx, account: &str) -> Result<Credentials> {
    ctx.opts.connection.login.credentials(account)
}

/// Reads a folder file of the snapshot.
fn folder_file(repo: &Repository, node: &FolderNode, name: &[u8]) -> Option<Vec<u8>> {
    let f = node.files.iter().find(|f| f.name == name)?;
    match assemble(repo, &f.content, f.size, None) {
        Ok(d) => Some(d),
        Err(e) => {
            tracing::warn!("{}: {}: {e}", node.name, String::from_utf8_lossy(name));
            None
        }
    }
}

/// Logs in and creates the folders (parents first) and subscriptions. Returns the
/// session, for the account's data, and (created, subscribed, special use set).
fn provision(
    ctx: &Ctx,
    acc: &AccountRef,
    selected: &[FolderNode],
) -> Result<(Session, (u64, u64, u64))> {
    let creds = credentials(ctx, &acc.name)?;
    let mut s = login_with_backoff(&ctx.client, &creds, 6)?;
    let existing: HashSet<String> = s.list()?.into_iter().map(|f| f.name).collect();
    // Sorted, so parents come before their children. A parent the snapshot does not
    // have is left to the server (Maildir++ has no such folder either).
    let mut wanted: Vec<String> = selected
        .iter()
        .map(|f| names::imap_folder_name(&f.name))
        .collect();
    wanted.sort();
    wanted.dedup();
    let (mut created, mut special) = (0, 0);
    for name in &wanted {
        if name.eq_ignore_ascii_case("INBOX") || existing.contains(name) {
            continue;
        }
        let out = s.create(name, names::special_use_for(name))?;
        if !out.existed {
            created += 1;
        }
        if out.special_use_set {
            special += 1;
        }
    }
    let mut subscribed = 0;
    let inbox = selected.iter().find(|f| f.dir.is_empty());
    let subs = inbox
        .and_then(|n| folder_file(ctx.repo, n, b"subscriptions"))
        .map(|d| names::parse_subscriptions(&d))
        .unwrap_or_default();
    let in_snapshot: HashSet<String> = selected
        .iter()
        .map(|f| names::imap_folder_name(&f.name))
        .collect();
    for name in subs {
        if !ctx.opts.folders.is_empty() && !in_snapshot.contains(&name) {
            continue;
        }
        match s.subscribe(&name) {
            Ok(()) => subscribed += 1,
            Err(e) => ctx.fail(format!("{}: subscription {name:?}", acc.name), e),
        }
    }
    Ok((s, (created, subscribed, special)))
}

/// One batch of one folder: messages to send together.
struct Batch<'p> {
    folder: &'p FolderPlan,
    entries: Vec<MessageEntry>,
    /// Look for these on the server first (in doubt, or skip-existing).
    check: bool,
}

/// A batch read, checked and converted, ready for the wire: the messages' CRLF forms lie
/// back to back in `buf`.
struct Prepared<'p> {
    folder: &'p FolderPlan,
    check: bool,
    msgs: Vec<Ready>,
    buf: Vec<u8>,
}

/// One message ready to send.
struct Ready {
    entry: MessageEntry,
    flags: Vec<String>,
    /// Where its CRLF form is in the batch's buffer.
    range: Range<usize>,
}

/// A folder of the account being restored.
struct FolderPlan {
    name: String,
    keywords: KeywordTable,
    /// Fingerprints of what the server had when first asked (multiset), for checks.
    on_server: Mutex<Option<HashMap<Fingerprint, Vec<u32>>>>,
}

/// Why the account cannot go on (login refused, over quota...), once one connection
/// found out; the other connections then report their messages instead of sending them.
#[derive(Default)]
struct Abort {
    set: AtomicBool,
    reason: Mutex<Option<String>>,
}

impl Abort {
    fn set(&self, reason: String) {
        lock(&self.reason).get_or_insert(reason);
        self.set.store(true, Relaxed);
    }
    fn reason(&self) -> Option<String> {
        if self.set.load(Relaxed) {
            lock(&self.reason).clone()
        } else {
            None
        }
    }
}

/// Restores an account's messages over up to `connections` sessions (`session`: one
/// already logged in). Each connection has a thread that reads and converts its next
/// batch while the current one is on the wire.
fn restore_account(
    ctx: &Ctx,
    acc: &AccountRef,
    selected: &[FolderNode],
    session: Session,
    share: usize,
) -> Result<()> {
    let journal = AccountJournal::open(&ctx.run_dir, &ctx.header, &acc.name)?;
    let index = ctx.repo.index();
    let mut plans = Vec::new();
    let mut work: Vec<(usize, Vec<MessageEntry>, bool)> = Vec::new();
    for node in selected {
        let name = names::imap_folder_name(&node.name);
        let keywords = folder_file(ctx.repo, node, b"dovecot-keywords")
            .map(|d| KeywordTable::parse(&String::from_utf8_lossy(&d)))
            .unwrap_or_default();
        let fi = plans.len();
        plans.push(FolderPlan {
            name: name.clone(),
            keywords,
            on_server: Mutex::new(None),
        });
        let mut todo = Vec::new();
        let mut doubt = Vec::new();
        for c in &node.chunks {
            let chunk = match ctx.repo.read_chunk(c) {
                Ok(c) => c,
                Err(e) => {
                    ctx.fail(format!("{}: {}", acc.name, name), e);
                    continue;
                }
            };
            for e in chunk {
                if !message_selected(&e, &ctx.opts.messages) {
                    continue;
                }
                match journal.state(&name, &e.key) {
                    Some(State::Accepted { .. }) => {
                        ctx.journaled.fetch_add(1, Relaxed);
                        ctx.progress.advance(1, e.size);
                    }
                    Some(State::Pending) => doubt.push(e),
                    None => todo.push(e),
                }
            }
        }
        // Packs front to back.
        let loc = |e: &MessageEntry| {
            e.content
                .first()
                .and_then(|id: &Id| index.get(id))
                .map(|l| (l.pack, l.offset))
                .unwrap_or((u32::MAX, 0))
        };
        todo.sort_by_cached_key(loc);
        doubt.sort_by_cached_key(loc);
        for (list, check) in [(doubt, true), (todo, ctx.opts.skip_existing)] {
            let mut cur: Vec<MessageEntry> = Vec::new();
            let mut bytes = 0usize;
            for e in list {
                let size = e.size as usize + e.size as usize / 32;
                if !cur.is_empty()
                    && (cur.len() >= ctx.opts.batch_messages.max(1)
                        || bytes + size > ctx.opts.batch_bytes)
                {
                    work.push((fi, std::mem::take(&mut cur), check));
                    bytes = 0;
                }
                bytes += size;
                cur.push(e);
            }
            if !cur.is_empty() {
                work.push((fi, cur, check));
            }
        }
    }
    let queue: Mutex<VecDeque<Batch>> = Mutex::new(
        work.into_iter()
            .map(|(fi, entries, check)| Batch {
                folder: &plans[fi],
                entries,
                check,
            })
            .collect(),
    );
    // Connections: at most `--connections`, at most `share`, one per batch at most, and
    // one per MESSAGES_PER_CONNECTION messages to send (a login is not free).
    let to_send: usize = lock(&queue).iter().map(|b| b.entries.len()).sum();
    let conns = ctx
        .opts
        .connections
        .min(share)
        .min(lock(&queue).len())
        .min(to_send.div_ceil(MESSAGES_PER_CONNECTION))
        .max(1);
    tracing::debug!("{}: {to_send} messages over {conns} connections", acc.name);
    let abort = Abort::default();
    let creds = credentials(ctx, &acc.name)?;
    let mut first = Some(session);
    std::thread::scope(|s| {
        for _ in 0..conns {
            // The handover is a rendezvous: at most one batch prepared ahead per
            // connection, so memory stays at two batches per connection.
            let (tx, rx) = std::sync::mpsc::sync_channel::<Prepared>(0);
            let (back_tx, back_rx) = std::sync::mpsc::channel::<Vec<u8>>();
            let (queue, abort, acc) = (&queue, &abort, &acc.name);
            spawn_named(s, "imap-prepare", move || {
                while let Some(batch) = lock(queue).pop_front() {
                    if let Some(reason) = abort.reason() {
                        let refs: Vec<&MessageEntry> = batch.entries.iter().collect();
                        ctx.fail_messages(acc, &batch.folder.name, &refs, &reason);
                        continue;
                    }
                    let buf = back_rx.try_recv().unwrap_or_default();
                    if tx.send(prepare(ctx, acc, batch, buf)).is_err() {
                        break;
                    }
                }
            });
            let session = first.take();
            let (creds, journal) = (&creds, &journal);
            spawn_named(s, "imap-append", move || {
                let mut w = Worker {
                    ctx,
                    acc,
                    creds,
                    journal,
                    session,
                };
                if let Err(e) = w.session() {
                    abort.set(format!("not restored: {e}"));
                }
                for p in rx {
                    let Prepared {
                        folder,
                        check,
                        msgs,
                        buf,
                    } = p;
                    if let Some(reason) = abort.reason() {
                        let refs: Vec<&MessageEntry> = msgs.iter().map(|r| &r.entry).collect();
                        ctx.fail_messages(acc, &folder.name, &refs, &reason);
                    } else if let Err(e) = w.run(folder, check, msgs, &buf) {
                        // The whole account is unusable (login refused, over quota...).
                        abort.set(format!("not restored: {e}"));
                    }
                    let _ = back_tx.send(buf);
                }
                if let Some(s) = w.session.take() {
                    let _ = s.logout();
                }
            });
        }
        if let Some(s) = first.take() {
            let _ = s.logout();
        }
    });
    journal.sync()?;
    if let Some(reason) = abort.reason() {
        ctx.fail(format!("account {}", acc.name), reason);
    }
    Ok(())
}

/// Reads, checks and converts a batch into `buf` (a buffer of an earlier batch, reused).
/// Messages that cannot be read are reported here and left out.
fn prepare<'p>(ctx: &Ctx, acc: &str, batch: Batch<'p>, mut buf: Vec<u8>) -> Prepared<'p> {
    let folder = batch.folder;
    buf.clear();
    let mut msgs = Vec::with_capacity(batch.entries.len());
    for e in batch.entries {
        match prepare::read_message_crlf(ctx.repo, &ctx.cache, &e, &mut buf) {
            Ok(range) => {
                let letters = String::from_utf8_lossy(e.flags()).into_owned();
                let flags = maildir_to_imap(&letters, &folder.keywords).flags;
                msgs.push(Ready {
                    entry: e,
                    flags,
                    range,
                });
            }
            Err(err) => {
                let why = match err {
                    PrepareError::Read(err) => err.to_string(),
                    PrepareError::Mismatch => {
                        "reassembled content does not have the message's size".into()
                    }
                };
                ctx.fail_messages(acc, &folder.name, &[&e], &why);
            }
        }
    }
    Prepared {
        folder,
        check: batch.check,
        msgs,
        buf,
    }
}

/// One connection of an account.
struct Worker<'a> {
    ctx: &'a Ctx<'a>,
    acc: &'a str,
    creds: &'a Credentials,
    journal: &'a AccountJournal,
    session: Option<Session>,
}

const MAX_ATTEMPTS: u32 = 8;

/// An account opens a further connection for every this many messages it has to send.
const MESSAGES_PER_CONNECTION: usize = 500;

impl Worker<'_> {
    fn session(&mut self) -> Result<&mut Session> {
        if self.session.as_ref().is_none_or(|s| s.is_broken()) {
            self.session = Some(login_with_backoff(
                &self.ctx.client,
                self.creds,
                MAX_ATTEMPTS,
            )?);
        }
        match self.session.as_mut() {
            Some(s) => Ok(s),
            None => Err(Error::InvalidInput("no session".into())),
        }
    }

    /// Sends one prepared batch (`buf` holds its messages). An error means the account
    /// cannot go on (its messages are then reported by the caller); per-message problems
    /// are reported here.
    fn run(
        &mut self,
        folder: &FolderPlan,
        check: bool,
        mut ready: Vec<Ready>,
        buf: &[u8],
    ) -> Result<()> {
        let ctx = self.ctx;
        if check {
            ready = self.drop_existing(folder, ready, buf, false)?;
        }
        self.journal
            .pending(&folder.name, ready.iter().map(|r| r.entry.key.as_slice()))?;
        let mut attempt = 0;
        while !ready.is_empty() {
            attempt += 1;
            ctx.pacer.wait(ready.len() as u64);
            let msgs: Vec<AppendMsg> = ready
                .iter()
                .map(|r| AppendMsg {
                    flags: r.flags.clone(),
                    internal_date: Some(InternalDate {
                        secs: r.entry.mtime.secs,
                        tz_minutes: 0,
                    }),
                    data: &buf[r.range.clone()],
                })
                .collect();
            let session = match self.session() {
                Ok(s) => s,
                Err(e) => {
                    let rest: Vec<&MessageEntry> = ready.iter().map(|r| &r.entry).collect();
                    ctx.fail_messages(self.acc, &folder.name, &rest, &e.to_string());
                    return Err(e);
                }
            };
            let result = session.append_batch(&folder.name, &msgs);
            drop(msgs);
            let (outcomes, in_doubt, err) = match result {
                Ok(o) => (o.into_iter().map(Some).collect(), Vec::new(), None),
                Err(mailvault_imap::Error::AppendInterrupted {
                    outcomes,
                    in_doubt,
                    source,
                    ..
                }) => (outcomes, in_doubt, Some(*source)),
                Err(e) => (vec![None; ready.len()], Vec::new(), Some(e)),
            };
            let mut retry = Vec::new();
            let mut doubt = Vec::new();
            let mut accepted: Vec<(&[u8], u32, u32)> = Vec::new();
            let mut done_bytes = 0u64;
            let mut refused = Vec::new();
            for (i, (r, o)) in ready.iter().zip(outcomes).enumerate() {
                match o {
                    Some(AppendOutcome::Appended { uid, uidvalidity }) => {
                        accepted.push((
                            r.entry.key.as_slice(),
                            uidvalidity.unwrap_or(0),
                            uid.unwrap_or(0),
                        ));
                        done_bytes += r.range.len() as u64;
                        ctx.progress.advance(1, r.entry.size);
                    }
                    Some(AppendOutcome::Refused(refusal)) if refusal.is_transient() => {
                        retry.push(i)
                    }
                    Some(AppendOutcome::Refused(refusal)) => {
                        let why = if refusal.by_server {
                            format!("refused by the server: {}", refusal.response)
                        } else {
                            refusal.response.clone()
                        };
                        refused.push((i, why));
                    }
                    None if in_doubt.contains(&i) => doubt.push(i),
                    None => retry.push(i),
                }
            }
            for (i, why) in refused {
                ctx.fail_messages(self.acc, &folder.name, &[&ready[i].entry], &why);
            }
            ctx.appended.fetch_add(accepted.len() as u64, Relaxed);
            ctx.bytes.fetch_add(done_bytes, Relaxed);
            self.journal.accepted(&folder.name, &accepted)?;
            drop(accepted);
            let (mut retry, doubt) = take_two(ready, &retry, &doubt);
            let Some(err) = err else {
                ctx.pacer.ok();
                ready = retry;
                continue;
            };
            let root = err.root();
            match root {
                mailvault_imap::Error::OverQuota { .. }
                | mailvault_imap::Error::AuthFailed { .. } => {
                    let rest: Vec<&MessageEntry> =
                        retry.iter().chain(&doubt).map(|r| &r.entry).collect();
                    ctx.fail_messages(self.acc, &folder.name, &rest, &err.to_string());
                    return Err(err.into());
                }
                mailvault_imap::Error::NoSuchFolder { .. } if attempt < MAX_ATTEMPTS => {
                    // Deleted behind our back, or provisioning failed: create it and retry.
                    let su = names::special_use_for(&folder.name);
                    if let Err(e) = self.session().and_then(|s| Ok(s.create(&folder.name, su)?)) {
                        let rest: Vec<&MessageEntry> =
                            retry.iter().chain(&doubt).map(|r| &r.entry).collect();
                        ctx.fail_messages(self.acc, &folder.name, &rest, &e.to_string());
                        return Ok(());
                    }
                }
                _ if (err.is_transient() || err.is_connection_lost()) && attempt < MAX_ATTEMPTS => {
                    ctx.pacer.throttled();
                    tracing::warn!(
                        "{}: {}: {err}; retrying (attempt {attempt})",
                        self.acc,
                        folder.name
                    );
                    if err.is_connection_lost() {
                        self.session = None;
                    }
                    std::thread::sleep(Duration::from_millis(100 << attempt.min(8)));
                }
                _ => {
                    let rest: Vec<&MessageEntry> =
                        retry.iter().chain(&doubt).map(|r| &r.entry).collect();
                    ctx.fail_messages(self.acc, &folder.name, &rest, &err.to_string());
                    return Ok(());
                }
            }
            if !doubt.is_empty() {
                // Sent but not answered: look for them before sending them again.
                let mut left = self.drop_existing(folder, doubt, buf, true)?;
                retry.append(&mut left);
            }
            ready = retry;
        }
        Ok(())
    }

    /// Removes the messages the server already has (by fingerprint) from `ready`, recording
    /// them as accepted. `fresh`: ask the server again rather than use what it said first.
    fn drop_existing(
        &mut self,
        folder: &FolderPlan,
        ready: Vec<Ready>,
        buf: &[u8],
        fresh: bool,
    ) -> Result<Vec<Ready>> {
        if ready.is_empty() {
            return Ok(ready);
        }
        let mut guard = lock(&folder.on_server);
        if guard.is_none() || fresh {
            *guard = Some(self.fingerprints(&folder.name)?);
        }
        let Some(have) = guard.as_mut() else {
            return Ok(ready);
        };
        let mut left = Vec::new();
        let mut found: Vec<(Vec<u8>, u32, u32)> = Vec::new();
        for r in ready {
            let data = &buf[r.range.clone()];
            let fp = Fingerprint {
                message_id: names::message_id(data),
                size: data.len() as u64,
                date: r.entry.mtime.secs,
            };
            match have.get_mut(&fp).and_then(|uids| uids.pop()) {
                Some(uid) => {
                    found.push((r.entry.key.clone(), 0, uid));
                    self.ctx.progress.advance(1, r.entry.size);
                }
                None => left.push(r),
            }
        }
        drop(guard);
        self.ctx.existing.fetch_add(found.len() as u64, Relaxed);
        let found: Vec<(&[u8], u32, u32)> = found
            .iter()
            .map(|(k, v, u)| (k.as_slice(), *v, *u))
            .collect();
        self.journal.accepted(&folder.name, &found)?;
        Ok(left)
    }

    /// Fingerprints of every message in a folder (a multiset: fingerprint -> UIDs).
    fn fingerprints(&mut self, folder: &str) -> Result<HashMap<Fingerprint, Vec<u32>>> {
        let s = self.session()?;
        let mut out: HashMap<Fingerprint, Vec<u32>> = HashMap::new();
        match s.examine(folder) {
            Ok(_) => {}
            Err(mailvault_imap::Error::NoSuchFolder { .. }) => return Ok(out),
            Err(e) => return Err(e.into()),
        }
        s.fetch::<mailvault_imap::Error, _>(&SeqSet::all(), &FetchQuery::fingerprint(), |m| {
            let fp = Fingerprint {
                message_id: m.message_id(),
                size: m.size.unwrap_or(0),
                date: m.internal_date.map(|d| d.secs).unwrap_or(0),
            };
            out.entry(fp).or_default().push(m.uid);
            Ok(())
        })?;
        s.unselect()?;
        Ok(out)
    }
}
