//! Restore of a snapshot (or part of it) into a live IMAP server: the "external restore".
//!
//! Three phases, each timed and reported:
//! 1. **provisioning**: per account, the account itself where it is missing and
//!    `create_accounts` asks for it (Cyrus: the admin CREATEs `user/<account>`), the
//!    folders (parents first, special use for Sent, Drafts, Trash, Junk and Archive where
//!    the server can set it) and the subscriptions of the INBOX's `subscriptions` file
//!    that fall within the selection;
//! 2. **data**: per folder, APPEND with flags and keywords (Maildir letters mapped through
//!    the folder's `dovecot-keywords`), INTERNALDATE = the file's mtime, LF -> CRLF, in
//!    the folder's original order (its `dovecot-uidlist`, else the UIDs of an IMAP
//!    backup, else internal date and name), so that UID order is arrival order again.
//!    Several accounts run at once, each over several connections, one folder at a time
//!    per connection; a batch is read from the repository in pack order (bounded memory)
//!    and sent in folder order, as one MULTIAPPEND when the server offers it;
//! 3. **acls**: not in snapshots yet, reported as such.
//!
//! Every batch is written to the [`journal`](super::journal) before it is sent and when
//! the server answered. A re-run trusts an accepted record only when the server still
//! has that UID (a message deleted since is restored again), and checks messages in
//! doubt on the server (Message-ID, size, date) before sending them again;
//! `skip_existing` does that check for every message. Dropped connections reconnect with
//! backoff, throttling slows every connection down ([`super::Pacer`]), and a message the
//! server refuses is reported with the server's words while the run goes on. Every
//! selected message ends up counted exactly once: appended, skipped or failed.

use super::journal::{self, AccountJournal, State};
use super::names::{self, Fingerprint};
use super::prepare::{self, BlobCache, PrepareError};
use super::{login_with_backoff, Connection, Error, Login, Pacer, Phase, Result, Span};
use crate::model::reader::{read_by_spans, Blobs, SpanOptions};
use crate::model::{
    folder_list, folder_name, folder_name_selected, folder_selected, message_selected,
    select_accounts, PickedAccount,
};
use crate::ops::restore::assemble;
use crate::repo::id::Id;
use crate::repo::tree::{AccountRef, AccountTree, FolderNode, MessageEntry};
use crate::repo::{lock, Repository};
use crate::report::{per_sec, Failure, Progress};
use mailvault_imap::maildir_flags::{maildir_to_imap, KeywordTable};
use mailvault_imap::{
    AppendMsg, AppendOutcome, Client, Credentials, FetchQuery, InternalDate, SearchKey, SeqSet,
    Session,
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
    /// Create accounts the server does not have (an account whose INBOX is missing):
    /// the master user (the admin) CREATEs `user/<account>`, as Cyrus wants. Needs a
    /// master-user login; servers that make accounts on their own (Dovecot) need nothing.
    pub create_accounts: bool,
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
            create_accounts: false,
            journal_dir: super::default_journal_dir(),
            batch_messages: 500,
            batch_bytes: 8 << 20,
            blob_cache_bytes: 64 << 20,
        }
    }
}

/// One account's figures, its own (not running totals): `messages` = `appended` +
/// `skipped` + `failed`.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct AccountFigures {
    pub account: String,
    pub messages: u64,
    pub appended: u64,
    /// Already on the server: by the journal of an earlier run, or found there.
    pub skipped: u64,
    pub failed: u64,
    pub secs: f64,
}

/// The end-of-run summary. `items_total` = `items_appended` + `items_journaled` +
/// `items_existing` + `items_failed`, and each is the sum of the accounts' figures.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct ImapRestoreReport {
    pub snapshot: String,
    pub target: String,
    pub accounts: u64,
    /// Accounts this run created on the server (`create_accounts`).
    pub accounts_created: u64,
    pub folders: u64,
    /// Messages selected.
    pub items_total: u64,
    /// Messages appended by this run.
    pub items_appended: u64,
    /// Messages the journal says an earlier run appended, and the server still has.
    pub items_journaled: u64,
    /// Messages found on the server (in doubt, or `skip_existing`) and not sent again.
    pub items_existing: u64,
    /// Messages not restored (each listed in `failures`, or counted in a failure line
    /// that names how many).
    pub items_failed: u64,
    /// Bytes appended (CRLF form).
    pub bytes_appended: u64,
    pub elapsed_secs: f64,
    /// Messages appended per second.
    pub items_per_sec: f64,
    pub mb_per_sec: f64,
    pub phases: Vec<Phase>,
    pub per_account: Vec<AccountFigures>,
    /// The journal directory of this (repository, snapshot, target).
    pub journal: String,
    pub failures: Vec<Failure>,
}

/// One account's counters.
#[derive(Default)]
struct Counts {
    appended: AtomicU64,
    journaled: AtomicU64,
    existing: AtomicU64,
    failed: AtomicU64,
    bytes: AtomicU64,
}

impl Counts {
    fn done(&self) -> u64 {
        self.appended.load(Relaxed)
            + self.journaled.load(Relaxed)
            + self.existing.load(Relaxed)
            + self.failed.load(Relaxed)
    }
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
    provisioning: Span,
    data: Span,
    cache: BlobCache,
}

impl Ctx<'_> {
    fn fail(&self, item: impl Into<String>, e: impl std::fmt::Display) {
        lock(&self.failures).push(Failure::new(item, e));
    }
    fn fail_messages(&self, n: &Counts, acc: &str, folder: &str, keys: &[&MessageEntry], e: &str) {
        for m in keys {
            self.fail(
                format!("{acc}: {folder}: {}", String::from_utf8_lossy(&m.key)),
                e,
            );
            n.failed.fetch_add(1, Relaxed);
            self.progress.advance(1, m.size);
        }
    }
}

/// What to restore of one account.
struct AccountPlan {
    acc: AccountRef,
    folders: Vec<FolderNode>,
    /// The subscriptions of the snapshot's INBOX (IMAP names), selected or not.
    subscriptions: Vec<String>,
    /// Messages picked one by one ([`restore_picked`]), per folder (in the order of
    /// `folders`, whose chunks are then empty); empty for a snapshot's selection.
    given: Vec<Vec<MessageEntry>>,
}

impl AccountPlan {
    fn messages(&self) -> u64 {
        self.folders.iter().map(|f| f.messages).sum()
    }
    fn bytes(&self) -> u64 {
        self.folders.iter().map(|f| f.bytes).sum()
    }
}

/// What provisioning did for one account.
#[derive(Default)]
struct Provisioned {
    account_created: bool,
    created: u64,
    subscribed: u64,
    /// Folders created that have a special use by their name...
    special_wanted: u64,
    /// ...and those the server set it on (CREATE-SPECIAL-USE).
    special_set: u64,
    /// The server offers CREATE-SPECIAL-USE.
    special_capable: bool,
}

/// Restores a snapshot into an IMAP server.
pub fn restore(
    repo: &Repository,
    opts: &ImapRestoreOptions,
    progress: &dyn Progress,
) -> Result<ImapRestoreReport> {
    let started = Instant::now();
    // A shared lock: no prune deletes a pack while this restore reads it.
    let _lock = repo.lock_for_reading("restore")?;
    let snap = repo.find_snapshot(&opts.snapshot)?;
    let root = repo.read_tree(&snap.root)?;
    let accounts = select_accounts(root, &opts.accounts)?;
    let ctx = Ctx::new(repo, opts, &snap.id.to_hex(), progress)?;

    // Which folders of which account: read every account tree once, up front (small).
    let mut plans = Vec::new();
    let mut folders = 0u64;
    let mut all_names = Vec::new();
    for acc in &accounts {
        let tree: AccountTree = repo.read_tree(&acc.tree)?;
        let subscriptions = tree
            .folders
            .iter()
            .find(|f| f.dir.is_empty())
            .and_then(|n| folder_file(repo, n, b"subscriptions"))
            .map(|d| names::parse_subscriptions(&d))
            .unwrap_or_default();
        if !opts.folders.is_empty() {
            all_names.extend(tree.folders.iter().map(|f| folder_name(f).into_owned()));
        }
        let selected: Vec<FolderNode> = tree
            .folders
            .into_iter()
            .filter(|f| folder_selected(f, &opts.folders))
            .collect();
        folders += selected.len() as u64;
        plans.push(AccountPlan {
            acc: acc.clone(),
            folders: selected,
            subscriptions,
            given: Vec::new(),
        });
    }
    if !opts.folders.is_empty() && folders == 0 {
        return Err(Error::InvalidInput(format!(
            "no folder matches {:?} in the selected accounts (they have: {})",
            opts.folders,
            folder_list(all_names)
        )));
    }
    if !opts.messages.is_empty() {
        // Keep the folders that hold a selected message, counting only those messages:
        // restoring one message creates one folder, not the account's every folder.
        folders = 0;
        for plan in &mut plans {
            let mut kept = Vec::new();
            for mut node in std::mem::take(&mut plan.folders) {
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
            plan.folders = kept;
        }
        plans.retain(|p| !p.folders.is_empty());
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
    run(ctx, plans, folders, started, snap.id.to_hex())
}

/// Restores messages picked one by one (`undelete`: each from the snapshot that last
/// held it) as single messages are restored (`--message`): only their folders are
/// created (no subscriptions), each message appended with the flags and keywords of its
/// entry, through the journal of (repository, `label`, target), so a re-run appends
/// nothing twice. `opts.snapshot`, `accounts`, `folders` and `messages` are not used.
pub fn restore_picked(
    repo: &Repository,
    opts: &ImapRestoreOptions,
    picked: Vec<PickedAccount>,
    label: &str,
    progress: &dyn Progress,
) -> Result<ImapRestoreReport> {
    let started = Instant::now();
    let _lock = repo.lock_for_reading("undelete")?;
    let ctx = Ctx::new(repo, opts, label, progress)?;
    let mut folders = 0;
    let plans: Vec<AccountPlan> = picked
        .into_iter()
        .map(|p| {
            let (mut nodes, mut given) = (Vec::new(), Vec::new());
            for mut f in p.folders {
                f.node.chunks.clear();
                f.node.messages = f.entries.len() as u64;
                f.node.bytes = f.entries.iter().map(|e| e.size).sum();
                nodes.push(f.node);
                given.push(f.entries);
            }
            folders += nodes.len() as u64;
            AccountPlan {
                acc: p.account,
                folders: nodes,
                subscriptions: Vec::new(),
                given,
            }
        })
        .collect();
    run(ctx, plans, folders, started, label.to_string())
}

impl<'a> Ctx<'a> {
    /// The context of a restore of `snapshot` (a snapshot id, or what names the restore
    /// in its journal and report).
    fn new(
        repo: &'a Repository,
        opts: &'a ImapRestoreOptions,
        snapshot: &str,
        progress: &'a dyn Progress,
    ) -> Result<Ctx<'a>> {
        if opts.create_accounts && !matches!(opts.connection.login, Login::Master { .. }) {
            return Err(Error::InvalidInput(
                "creating accounts needs the server's admin: log in through a master user (--imap-master-user)".into(),
            ));
        }
        let target = opts.connection.url();
        let run_dir = journal::run_dir(&opts.journal_dir, &repo.config().id, snapshot, &target);
        Ok(Ctx {
            repo,
            opts,
            client: Client::new(opts.connection.client.clone())?,
            pacer: Pacer::new(opts.max_rate),
            header: format!(
                "repo={} snapshot={snapshot} target={target}",
                repo.config().id,
            ),
            run_dir,
            progress,
            failures: Mutex::new(Vec::new()),
            provisioning: Span::default(),
            data: Span::default(),
            cache: BlobCache::new(opts.blob_cache_bytes),
        })
    }
}

/// Provisions and restores the accounts of `plans`, and reports.
fn run(
    ctx: Ctx,
    plans: Vec<AccountPlan>,
    folders: u64,
    started: Instant,
    snapshot: String,
) -> Result<ImapRestoreReport> {
    let (opts, progress) = (ctx.opts, ctx.progress);
    // Provisioning and data run as one pipeline per account: an account's data starts
    // as soon as its folders exist, over the session that created them, while other
    // accounts are still being provisioned or restored.
    let total: u64 = plans.iter().map(AccountPlan::messages).sum();
    progress.add_total(total, plans.iter().map(AccountPlan::bytes).sum());
    let provisioned: Mutex<Vec<Provisioned>> = Mutex::new(Vec::new());
    let counts: Vec<Counts> = plans.iter().map(|_| Counts::default()).collect();
    let secs: Vec<Mutex<f64>> = plans.iter().map(|_| Mutex::new(0.0)).collect();
    // Domains in snapshot order (their accounts share the most blobs, mail to several
    // colleagues: together, they make the most of the blob cache), and within a domain
    // the largest accounts first, so that a run does not end with one big account on
    // one connection while the others are done.
    let domain = |i: usize| plans[i].acc.name.rsplit_once('@').map(|(_, d)| d);
    let mut first_seen: HashMap<Option<&str>, usize> = HashMap::new();
    for i in 0..plans.len() {
        first_seen.entry(domain(i)).or_insert(i);
    }
    let mut order: Vec<usize> = (0..plans.len()).collect();
    order.sort_by_key(|&i| {
        (
            first_seen.get(&domain(i)).copied().unwrap_or(i),
            std::cmp::Reverse(plans[i].messages()),
        )
    });
    let lanes = opts.parallel_accounts.max(1);
    for_each_parallel(order.len(), lanes, |k| {
        let i = order[k];
        let plan = &plans[i];
        let n = &counts[i];
        let acc = &plan.acc;
        // An account gets more than one connection only when fewer accounts than
        // `lanes` are left to run beside it: every connection is a login, which costs
        // the server about as much as appending 50-100 messages (see docs/imap.md).
        let share = (lanes / lanes.min(order.len() - k)).max(1);
        let t = Instant::now();
        let result = provision(&ctx, plan);
        ctx.provisioning.add(t);
        tracing::debug!(
            "{}: provisioned at {:.3} s in {:.3} s",
            acc.name,
            started.elapsed().as_secs_f64(),
            t.elapsed().as_secs_f64()
        );
        let reason = match result {
            Ok((session, p)) => {
                lock(&provisioned).push(p);
                let t = Instant::now();
                let r = restore_account(&ctx, n, plan, session, share);
                ctx.data.add(t);
                tracing::debug!(
                    "{}: data done at {:.3} s in {:.3} s",
                    acc.name,
                    started.elapsed().as_secs_f64(),
                    t.elapsed().as_secs_f64()
                );
                r.err().map(|e| e.to_string())
            }
            Err(e) => Some(e.to_string()),
        };
        // Whatever was not accounted for (the account could not be provisioned, its
        // journal not opened...) failed, and says so once.
        let left = plan.messages().saturating_sub(n.done());
        match reason {
            Some(why) if left > 0 => ctx.fail(
                format!("account {}", acc.name),
                format!(
                    "{why}; {left} of its {} messages not restored",
                    plan.messages()
                ),
            ),
            Some(why) => ctx.fail(format!("account {}", acc.name), why),
            None if left > 0 => ctx.fail(
                format!("account {}", acc.name),
                format!("{left} of its {} messages not restored", plan.messages()),
            ),
            None => {}
        }
        if left > 0 {
            n.failed.fetch_add(left, Relaxed);
            ctx.progress.advance(left, 0);
        }
        *lock(&secs[i]) = t.elapsed().as_secs_f64();
    });
    let provisioned = provisioned.into_inner().unwrap_or_else(|p| p.into_inner());
    let sum = |f: fn(&Provisioned) -> u64| provisioned.iter().map(f).sum::<u64>();
    let (created, subscribed) = (sum(|p| p.created), sum(|p| p.subscribed));
    let accounts_created = sum(|p| u64::from(p.account_created));
    let (wanted, set) = (sum(|p| p.special_wanted), sum(|p| p.special_set));
    let mut note = format!("{created} folders created, {subscribed} subscriptions");
    if accounts_created > 0 {
        note = format!("{accounts_created} accounts created, {note}");
    }
    if set > 0 {
        note.push_str(&format!("; special use set on {set} folders"));
    }
    let incapable = provisioned
        .iter()
        .any(|p| !p.special_capable && p.special_wanted > 0);
    if wanted > set && incapable {
        note.push_str(&format!(
            "; special use: the server cannot set it on CREATE (no CREATE-SPECIAL-USE) for {} folders; it keeps its own configuration",
            wanted - set
        ));
    }
    let (hits, misses) = ctx.cache.stats();
    tracing::debug!("blob cache: {hits} hits, {misses} misses");
    let per_account: Vec<AccountFigures> = plans
        .iter()
        .zip(&counts)
        .zip(&secs)
        .map(|((p, n), s)| AccountFigures {
            account: p.acc.name.clone(),
            messages: p.messages(),
            appended: n.appended.load(Relaxed),
            skipped: n.journaled.load(Relaxed) + n.existing.load(Relaxed),
            failed: n.failed.load(Relaxed),
            secs: *lock(s),
        })
        .collect();
    let total_of =
        |f: fn(&Counts) -> &AtomicU64| counts.iter().map(|n| f(n).load(Relaxed)).sum::<u64>();
    let appended = total_of(|n| &n.appended);
    let journaled = total_of(|n| &n.journaled);
    let existing = total_of(|n| &n.existing);
    let phases = vec![
        ctx.provisioning.phase(
            "provisioning",
            created + subscribed + accounts_created,
            note,
        ),
        ctx.data.phase(
            "data",
            appended,
            format!(
                "{appended} appended, {journaled} already done by an earlier run, {existing} found on the server"
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
    let mut per_account = per_account;
    per_account.sort_by(|a, b| a.account.cmp(&b.account));
    let elapsed = started.elapsed().as_secs_f64();
    let bytes = total_of(|n| &n.bytes);
    Ok(ImapRestoreReport {
        snapshot,
        target: opts.connection.url(),
        accounts: plans.len() as u64,
        accounts_created,
        folders,
        items_total: total,
        items_appended: appended,
        items_journaled: journaled,
        items_existing: existing,
        items_failed: total_of(|n| &n.failed),
        bytes_appended: bytes,
        elapsed_secs: elapsed,
        items_per_sec: per_sec(appended, elapsed),
        mb_per_sec: per_sec(bytes, elapsed) / 1e6,
        phases,
        per_account,
        journal: ctx.run_dir.display().to_string(),
        failures,
    })
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

/// Logs in, creates the account where it is missing and `create_accounts` asks for it,
/// then the folders (parents first) and the subscriptions that fall within the
/// selection. Returns the session, for the account's data, and what was done.
fn provision(ctx: &Ctx, plan: &AccountPlan) -> Result<(Session, Provisioned)> {
    let acc = &plan.acc;
    let creds = credentials(ctx, &acc.name)?;
    let mut s = login_with_backoff(&ctx.client, &creds, 6)?;
    let mut p = Provisioned {
        special_capable: s.capabilities().has("CREATE-SPECIAL-USE"),
        ..Provisioned::default()
    };
    let mut existing: HashSet<String> = s.list()?.into_iter().map(|f| f.name).collect();
    let has_inbox = |e: &HashSet<String>| e.iter().any(|n| n.eq_ignore_ascii_case("INBOX"));
    if ctx.opts.create_accounts && !has_inbox(&existing) {
        // Cyrus: an account is its INBOX, `user/<account>`, which only an admin
        // creates. (Dovecot makes the INBOX at the first login: nothing to do there.)
        create_account(ctx, &acc.name)?;
        p.account_created = true;
        let _ = s.logout();
        s = login_with_backoff(&ctx.client, &creds, 6)?;
        existing = s.list()?.into_iter().map(|f| f.name).collect();
    }
    // Sorted, so parents come before their children. A parent the snapshot does not
    // have is left to the server (Maildir++ has no such folder either).
    let mut wanted: Vec<String> = plan
        .folders
        .iter()
        .map(|f| folder_name(f).into_owned())
        .collect();
    wanted.sort();
    wanted.dedup();
    for name in &wanted {
        if name.eq_ignore_ascii_case("INBOX") || existing.contains(name) {
            continue;
        }
        let special = names::special_use_for(name);
        let out = s.create(name, special)?;
        if out.existed {
            continue;
        }
        p.created += 1;
        if special.is_some() {
            p.special_wanted += 1;
        }
        if out.special_use_set {
            p.special_set += 1;
        }
    }
    // The subscriptions of the folders restored; with `--folder` also those of its
    // subfolders the snapshot lacks, and without a selection every one (a subscription
    // may name a folder that no longer exists).
    let selected: HashSet<&str> = wanted.iter().map(String::as_str).collect();
    for name in &plan.subscriptions {
        let within = selected.contains(name.as_str())
            || (ctx.opts.messages.is_empty() && folder_name_selected(name, &ctx.opts.folders));
        if !within {
            continue;
        }
        match s.subscribe(name) {
            Ok(()) => p.subscribed += 1,
            // A subscription to a folder that no longer exists: Dovecot refuses to
            // SUBSCRIBE to a missing folder but keeps the subscription when a folder is
            // deleted, which is how it came about.
            Err(e) if !existing.contains(name) && !selected.contains(name.as_str()) => {
                let dangling = s.create(name, None).and_then(|_| {
                    s.subscribe(name)?;
                    s.delete(name)
                });
                match dangling {
                    Ok(()) => p.subscribed += 1,
                    Err(_) => ctx.fail(format!("{}: subscription {name:?}", acc.name), e),
                }
            }
            Err(e) => ctx.fail(format!("{}: subscription {name:?}", acc.name), e),
        }
    }
    Ok((s, p))
}

/// Creates `account` on the server as its admin (the master user logging in as itself):
/// CREATE `user/<account>`, with the server's hierarchy delimiter.
fn create_account(ctx: &Ctx, account: &str) -> Result<()> {
    let Login::Master { master, password } = &ctx.opts.connection.login else {
        return Err(Error::InvalidInput(format!(
            "account {account} does not exist on the server, and only its admin (a master user) can create it"
        )));
    };
    let admin = Login::User {
        template: master.clone(),
        password: password.clone(),
    }
    .credentials(account)?;
    let mut s = login_with_backoff(&ctx.client, &admin, 6)?;
    let r = s.create(&format!("user/{account}"), None);
    let _ = s.logout();
    r?;
    Ok(())
}

/// One batch of one folder: messages to send together, in the folder's order.
struct Batch<'p> {
    folder: &'p FolderPlan,
    /// The messages, each with whether to look for it on the server first (in doubt,
    /// or skip-existing) and its place in the folder's order.
    entries: Vec<(MessageEntry, bool, usize)>,
}

/// A batch read, checked and converted, ready for the wire: the messages' CRLF forms lie
/// in `buf` (in the order they were read), `msgs` in the folder's order.
struct Prepared<'p> {
    folder: &'p FolderPlan,
    msgs: Vec<Ready>,
    buf: Vec<u8>,
}

/// One message ready to send.
struct Ready {
    entry: MessageEntry,
    flags: Vec<String>,
    /// Where its CRLF form is in the batch's buffer.
    range: Range<usize>,
    /// Look for it on the server before sending it.
    check: bool,
    /// Its place in the folder's order.
    pos: usize,
}

/// A folder of the account being restored.
struct FolderPlan {
    name: String,
    keywords: KeywordTable,
    /// UIDVALIDITY and fingerprints of what the server had when last asked (multiset),
    /// for checks.
    on_server: Mutex<Option<(u32, OnServer)>>,
}

/// Fingerprints of a folder's messages on the server -> their UIDs (a multiset).
type OnServer = HashMap<Fingerprint, Vec<u32>>;

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

/// The order a folder's messages are appended in, so that UID order on the server is
/// the original arrival order: the folder's `dovecot-uidlist` (Maildir backups of a
/// Dovecot store), else the UID in the synthesized keys of an IMAP backup, else internal
/// date (mtime) and name; messages a `dovecot-uidlist` lacks (delivered since Dovecot
/// last looked) come after those it has, by date and name.
fn arrival_order(
    uidlist: Option<&HashMap<Vec<u8>, u32>>,
    e: &MessageEntry,
) -> (u8, i64, u32, Vec<u8>) {
    if let Some(uid) = uidlist.and_then(|l| l.get(&e.key)) {
        return (0, i64::from(*uid), 0, Vec::new());
    }
    if uidlist.is_none() {
        if let Some((uid, _)) = names::parse_key(&e.key) {
            return (1, i64::from(uid), 0, Vec::new());
        }
    }
    (2, e.mtime.secs, e.mtime.nanos, e.key.clone())
}

/// Restores an account's messages over up to `connections` sessions (`session`: one
/// already logged in). Each connection takes one folder at a time (its UIDs follow the
/// order of the appends) and has a thread that reads and converts its next batch while
/// the current one is on the wire.
fn restore_account(
    ctx: &Ctx,
    n: &Counts,
    plan: &AccountPlan,
    mut session: Session,
    share: usize,
) -> Result<()> {
    let acc = &plan.acc;
    let journal = AccountJournal::open(&ctx.run_dir, &ctx.header, &acc.name)?;
    let mut plans = Vec::new();
    let mut lists: Vec<Vec<(MessageEntry, bool)>> = Vec::new();
    for (fi, node) in plan.folders.iter().enumerate() {
        let name = folder_name(node).into_owned();
        let keywords = folder_file(ctx.repo, node, b"dovecot-keywords")
            .map(|d| KeywordTable::parse(&String::from_utf8_lossy(&d)))
            .unwrap_or_default();
        let uidlist =
            folder_file(ctx.repo, node, b"dovecot-uidlist").map(|d| names::parse_uidlist(&d));
        plans.push(FolderPlan {
            name: name.clone(),
            keywords,
            on_server: Mutex::new(None),
        });
        let mut entries = plan.given.get(fi).cloned().unwrap_or_default();
        let mut unread = false;
        for c in &node.chunks {
            match ctx.repo.read_chunk(c) {
                Ok(chunk) => entries.extend(
                    chunk
                        .into_iter()
                        .filter(|e| message_selected(e, &ctx.opts.messages)),
                ),
                Err(e) => {
                    unread = true;
                    ctx.fail(format!("{}: {}", acc.name, name), e);
                }
            }
        }
        if unread {
            // The messages of unreadable chunks are counted by the account's tally.
            tracing::warn!(
                "{}: {name}: part of the folder's list is unreadable",
                acc.name
            );
        }
        // A message the journal says was accepted counts only if the server still has
        // it: deleted since, it is restored again; without a UID to look for (no
        // UIDPLUS) or with a new UIDVALIDITY, it is looked for like one in doubt.
        let accepted = entries
            .iter()
            .any(|e| matches!(journal.state(&name, &e.key), Some(State::Accepted { .. })));
        let on_server = if accepted {
            Some(uids_on_server(&mut session, &name)?)
        } else {
            None
        };
        let mut list = Vec::with_capacity(entries.len());
        for e in entries {
            let check = match journal.state(&name, &e.key) {
                Some(State::Accepted { uidvalidity, uid }) => match &on_server {
                    Some(Some((v, uids))) if uid != 0 && *v == uidvalidity => {
                        if uids.contains(&uid) {
                            n.journaled.fetch_add(1, Relaxed);
                            ctx.progress.advance(1, e.size);
                            continue;
                        }
                        // Gone from the server: a deliberate restore.
                        ctx.opts.skip_existing
                    }
                    // The folder is gone: nothing to look for.
                    Some(None) => false,
                    _ => true,
                },
                Some(State::Pending) => true,
                None => ctx.opts.skip_existing,
            };
            list.push((e, check));
        }
        list.sort_by_cached_key(|(e, _)| arrival_order(uidlist.as_ref(), e));
        lists.push(list);
    }
    let _ = session.unselect();
    // Per folder, its batches in order; folders largest first, so connections end
    // together.
    let mut jobs: Vec<(usize, Vec<Batch>)> = Vec::new();
    for (fi, list) in lists.into_iter().enumerate() {
        let mut batches = Vec::new();
        let mut cur: Vec<(MessageEntry, bool, usize)> = Vec::new();
        let mut bytes = 0usize;
        for (pos, (e, check)) in list.into_iter().enumerate() {
            let size = e.size as usize + e.size as usize / 32;
            if !cur.is_empty()
                && (cur.len() >= ctx.opts.batch_messages.max(1)
                    || bytes + size > ctx.opts.batch_bytes)
            {
                batches.push(Batch {
                    folder: &plans[fi],
                    entries: std::mem::take(&mut cur),
                });
                bytes = 0;
            }
            bytes += size;
            cur.push((e, check, pos));
        }
        if !cur.is_empty() {
            batches.push(Batch {
                folder: &plans[fi],
                entries: cur,
            });
        }
        if !batches.is_empty() {
            let count = batches.iter().map(|b| b.entries.len()).sum();
            jobs.push((count, batches));
        }
    }
    jobs.sort_by_key(|(count, _)| std::cmp::Reverse(*count));
    let to_send: usize = jobs.iter().map(|(c, _)| c).sum();
    // Connections: at most `--connections`, at most `share`, one per folder at most,
    // and one per MESSAGES_PER_CONNECTION messages to send (a login is not free).
    let conns = ctx
        .opts
        .connections
        .min(share)
        .min(jobs.len())
        .min(to_send.div_ceil(MESSAGES_PER_CONNECTION))
        .max(1);
    let queue: Mutex<VecDeque<Vec<Batch>>> = Mutex::new(jobs.into_iter().map(|(_, b)| b).collect());
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
                // One folder at a time, its batches in order, all over this connection.
                while let Some(batches) = lock(queue).pop_front() {
                    for batch in batches {
                        if let Some(reason) = abort.reason() {
                            let refs: Vec<&MessageEntry> =
                                batch.entries.iter().map(|(e, _, _)| e).collect();
                            ctx.fail_messages(n, acc, &batch.folder.name, &refs, &reason);
                            continue;
                        }
                        let buf = back_rx.try_recv().unwrap_or_default();
                        if let Err(back) = tx.send(prepare(ctx, n, acc, batch, buf)) {
                            // The connection's thread is gone: its batch is not sent.
                            let p = back.0;
                            let refs: Vec<&MessageEntry> =
                                p.msgs.iter().map(|r| &r.entry).collect();
                            ctx.fail_messages(
                                n,
                                acc,
                                &p.folder.name,
                                &refs,
                                "not restored: the connection ended",
                            );
                        }
                    }
                }
            });
            let session = first.take();
            let (creds, journal) = (&creds, &journal);
            spawn_named(s, "imap-append", move || {
                let mut w = Worker {
                    ctx,
                    n,
                    acc,
                    creds,
                    journal,
                    session,
                };
                for p in rx {
                    let Prepared {
                        folder,
                        mut msgs,
                        buf,
                    } = p;
                    let why = match abort.reason() {
                        Some(reason) => Some(reason),
                        None => match w.run(folder, &mut msgs, &buf) {
                            Ok(()) => None,
                            Err(Stop::Batch(why)) => Some(why),
                            Err(Stop::Account(e)) => {
                                // The whole account is unusable (login refused, over
                                // quota, server gone...).
                                let why = format!("not restored: {e}");
                                abort.set(why.clone());
                                Some(why)
                            }
                        },
                    };
                    // Every message not accounted for by the run failed.
                    if !msgs.is_empty() {
                        let why = why.unwrap_or_else(|| "not restored".into());
                        let refs: Vec<&MessageEntry> = msgs.iter().map(|r| &r.entry).collect();
                        ctx.fail_messages(n, acc, &folder.name, &refs, &why);
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

/// The UIDVALIDITY and UIDs of a folder on the server; `None` when it does not exist.
fn uids_on_server(s: &mut Session, folder: &str) -> Result<Option<(u32, HashSet<u32>)>> {
    let info = match s.examine(folder) {
        Ok(i) => i,
        Err(mailvault_imap::Error::NoSuchFolder { .. }) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let uids = s.uid_search(&SearchKey::All)?;
    Ok(Some((info.uidvalidity, uids.into_iter().collect())))
}

/// Reads, checks and converts a batch into `buf` (a buffer of an earlier batch, reused),
/// in pack order (packs front to back) and by pack span (nearby blobs in one read, see
/// [`crate::model::reader`]), while the messages keep the folder's order. Messages that
/// cannot be read are reported here and left out.
fn prepare<'p>(
    ctx: &Ctx,
    n: &Counts,
    acc: &str,
    batch: Batch<'p>,
    mut buf: Vec<u8>,
) -> Prepared<'p> {
    let folder = batch.folder;
    buf.clear();
    let index = ctx.repo.index();
    let mut entries = batch.entries;
    entries.sort_by_cached_key(|(e, _, _)| {
        e.content
            .first()
            .and_then(|id: &Id| index.get(id))
            .map(|l| (l.pack, l.offset))
            .unwrap_or((u32::MAX, 0))
    });
    let mut read = Vec::with_capacity(entries.len());
    read_by_spans(
        ctx.repo,
        &entries,
        entry_content,
        // Blobs the cache holds are not read again.
        |id| !ctx.cache.contains(id),
        &SpanOptions::for_store(ctx.repo.store(), 0),
        |group, fetched| {
            for (e, _, _) in group {
                let blob = |id: &Id| fetched.blob(id);
                read.push(prepare::read_message_crlf(&ctx.cache, e, &mut buf, blob));
            }
        },
    );
    let mut msgs = Vec::with_capacity(entries.len());
    for ((e, check, pos), got) in entries.into_iter().zip(read) {
        match got {
            Ok(range) => {
                let letters = String::from_utf8_lossy(e.flags()).into_owned();
                let flags = maildir_to_imap(&letters, &folder.keywords).flags;
                msgs.push(Ready {
                    entry: e,
                    flags,
                    range,
                    check,
                    pos,
                });
            }
            Err(err) => {
                let why = match err {
                    PrepareError::Read(err) => err.to_string(),
                    PrepareError::Mismatch => {
                        "reassembled content does not have the message's size".into()
                    }
                };
                ctx.fail_messages(n, acc, &folder.name, &[&e], &why);
            }
        }
    }
    msgs.sort_by_key(|r| r.pos);
    Prepared { folder, msgs, buf }
}

fn entry_content<C, P>(entry: &(MessageEntry, C, P)) -> &[Id] {
    &entry.0.content
}

/// One connection of an account.
struct Worker<'a> {
    ctx: &'a Ctx<'a>,
    n: &'a Counts,
    acc: &'a str,
    creds: &'a Credentials,
    journal: &'a AccountJournal,
    session: Option<Session>,
}

/// Why [`Worker::run`] stopped before every message of its batch was accounted for.
enum Stop {
    /// The batch's remaining messages failed (this reason); the account goes on.
    Batch(String),
    /// The account cannot go on.
    Account(Error),
}

impl From<Error> for Stop {
    fn from(e: Error) -> Stop {
        Stop::Account(e)
    }
}

impl From<mailvault_imap::Error> for Stop {
    fn from(e: mailvault_imap::Error) -> Stop {
        Stop::Account(e.into())
    }
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

    /// Sends one prepared batch (`buf` holds its messages) in order. Every message it
    /// accounts for (appended, found on the server, refused) leaves `ready`; what is left
    /// when it returns an error has not been restored, and the caller reports it.
    fn run(&mut self, folder: &FolderPlan, ready: &mut Vec<Ready>, buf: &[u8]) -> Result<(), Stop> {
        let ctx = self.ctx;
        self.drop_existing(folder, ready, buf, false)?;
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
            let result = self.session()?.append_batch(&folder.name, &msgs);
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
            let mut accepted: Vec<(&[u8], u32, u32)> = Vec::new();
            let mut done_bytes = 0u64;
            let mut refused = Vec::new();
            // What is still to do after this attempt: messages to send again and those in
            // doubt (to look for first), in the folder's order.
            let mut left = vec![false; ready.len()];
            let mut doubt = vec![false; ready.len()];
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
                        left[i] = true
                    }
                    Some(AppendOutcome::Refused(refusal)) => {
                        let why = if refusal.by_server {
                            format!("refused by the server: {}", refusal.response)
                        } else {
                            refusal.response.clone()
                        };
                        refused.push((i, why));
                    }
                    None => {
                        left[i] = true;
                        doubt[i] = in_doubt.contains(&i);
                    }
                }
            }
            for (i, why) in &refused {
                ctx.fail_messages(self.n, self.acc, &folder.name, &[&ready[*i].entry], why);
            }
            self.n.appended.fetch_add(accepted.len() as u64, Relaxed);
            self.n.bytes.fetch_add(done_bytes, Relaxed);
            let journaled = self.journal.accepted(&folder.name, &accepted);
            drop(accepted);
            let mut i = 0;
            ready.retain_mut(|r| {
                i += 1;
                r.check = doubt[i - 1];
                left[i - 1]
            });
            journaled?;
            let Some(err) = err else {
                ctx.pacer.ok();
                continue;
            };
            let root = err.root();
            match root {
                mailvault_imap::Error::OverQuota { .. }
                | mailvault_imap::Error::AuthFailed { .. } => {
                    return Err(Stop::Account(err.into()));
                }
                mailvault_imap::Error::NoSuchFolder { .. } if attempt < MAX_ATTEMPTS => {
                    // Deleted behind our back, or provisioning failed: create it and retry.
                    let su = names::special_use_for(&folder.name);
                    if let Err(e) = self.session().and_then(|s| Ok(s.create(&folder.name, su)?)) {
                        return Err(Stop::Batch(e.to_string()));
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
                _ => return Err(Stop::Batch(err.to_string())),
            }
            // Sent but not answered: look for them before sending them again.
            if ready.iter().any(|r| r.check) {
                self.drop_existing(folder, ready, buf, true)?;
            }
        }
        Ok(())
    }

    /// Removes from `ready` the messages to check (`check`) that the server already has
    /// (by fingerprint), recording them as accepted; the others are no longer to check.
    /// `fresh`: ask the server again rather than use what it said first.
    fn drop_existing(
        &mut self,
        folder: &FolderPlan,
        ready: &mut Vec<Ready>,
        buf: &[u8],
        fresh: bool,
    ) -> Result<()> {
        if !ready.iter().any(|r| r.check) {
            return Ok(());
        }
        let mut guard = lock(&folder.on_server);
        if guard.is_none() || fresh {
            *guard = Some(self.fingerprints(&folder.name)?);
        }
        let Some((uidvalidity, have)) = guard.as_mut() else {
            return Ok(());
        };
        let mut found: Vec<(Vec<u8>, u32)> = Vec::new();
        ready.retain_mut(|r| {
            if !r.check {
                return true;
            }
            r.check = false;
            let data = &buf[r.range.clone()];
            let uid = Fingerprint::candidates(data, r.entry.mtime.secs)
                .find_map(|fp| have.get_mut(&fp).and_then(|uids| uids.pop()));
            match uid {
                Some(uid) => {
                    found.push((r.entry.key.clone(), uid));
                    self.ctx.progress.advance(1, r.entry.size);
                    false
                }
                None => true,
            }
        });
        let v = *uidvalidity;
        drop(guard);
        self.n.existing.fetch_add(found.len() as u64, Relaxed);
        let found: Vec<(&[u8], u32, u32)> =
            found.iter().map(|(k, u)| (k.as_slice(), v, *u)).collect();
        self.journal.accepted(&folder.name, &found)
    }

    /// UIDVALIDITY and fingerprints of every message in a folder (a multiset:
    /// fingerprint -> UIDs).
    fn fingerprints(&mut self, folder: &str) -> Result<(u32, OnServer)> {
        let s = self.session()?;
        let mut out = OnServer::new();
        let uidvalidity = match s.examine(folder) {
            Ok(info) => info.uidvalidity,
            Err(mailvault_imap::Error::NoSuchFolder { .. }) => return Ok((0, out)),
            Err(e) => return Err(e.into()),
        };
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
        Ok((uidvalidity, out))
    }
}
