//! The IMAP target: a restore into a live IMAP server, the "external restore".
//!
//! The pipeline ([`crate::restore`]) gives it each folder's messages in the folder's
//! original order ([`Order::Folder`]), in batches, so that UID order is arrival order
//! again; accounts run at once, each over several connections (lanes), one folder at a
//! time per connection. What is IMAP's own is here:
//! 1. **provisioning** ([`Target::open_account`]): the account itself where it is missing
//!    and `create_accounts` asks for it (Cyrus: the admin CREATEs `user/<account>`), the
//!    folders (parents first, special use for Sent, Drafts, Trash, Junk and Archive where
//!    the server can set it) and the subscriptions that fall within the selection;
//! 2. **data** ([`Target::write_batch`]): APPEND with flags and keywords, INTERNALDATE,
//!    LF -> CRLF, one MULTIAPPEND per batch when the server offers it;
//! 3. **shares and filters** ([`shares`]), once an account's data is in: its folders'
//!    access control lists (SETACL, from the snapshot's `dovecot-acl` files) and its
//!    sieve scripts (PUTSCRIPT, SETACTIVE over ManageSieve, from its home).
//!
//! Every batch is written to the [`journal`] before it is sent and
//! when the server answered. A re-run trusts an accepted record only when the server still
//! has that UID ([`Target::already_restored`]: such messages are not even read), and
//! checks messages in doubt on the server (Message-ID, size, date, tolerating what the
//! servers change on APPEND: [`crate::imap::names::Fingerprint`]) before sending them
//! again; `skip_existing` does that check for every message. Dropped connections
//! reconnect with backoff, throttling slows every connection down
//! (`crate::imap::Pacer`), and a message the server refuses is reported with the
//! server's words while the run goes on.

pub mod crlf;
pub mod journal;
mod report;
pub mod shares;

pub use report::{AccountFigures, ImapRestoreReport, SharesFigures};

use super::{
    AccountInfo, Caps, FolderInfo, Item, Message, Order, Outcome, RestoreFailures, Target,
};
use crate::imap::names::{self, Fingerprint};
use crate::imap::{login_with_backoff, Login, Pacer, Span};
use crate::repo::tree::MessageEntry;
use crate::repo::{lock, Repository};
use crate::report::per_sec;
use crate::restore::{Opening, RestoreReport, Selection};
use crate::{Error, Result};
use crlf::crlf_parts_into;
use journal::{AccountJournal, State};
use mailvault_imap::{
    AppendMsg, AppendOutcome, Client, Credentials, FetchQuery, InternalDate, SearchKey, SeqSet,
    Session, SpecialUse,
};
use std::collections::{HashMap, HashSet};
use std::ops::Range;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What to restore and where.
#[derive(Clone, Debug)]
pub struct ImapRestoreOptions {
    /// What to take from the snapshot (only the folders that hold the selected messages
    /// are created), pack spans read at once, and the bytes of opened blobs kept for
    /// messages that share them (a message delivered to several mailboxes).
    pub select: Selection,
    pub connection: crate::imap::Connection,
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
    /// Where the journals live (see [`crate::imap::default_journal_dir`]).
    pub journal_dir: PathBuf,
    /// Most messages per batch (one MULTIAPPEND).
    pub batch_messages: usize,
    /// Most bytes per batch.
    pub batch_bytes: usize,
    /// The server's ManageSieve port, where accounts' sieve scripts are put (4190);
    /// 0: none (the scripts are reported as not restored).
    pub sieve_port: u16,
}

impl ImapRestoreOptions {
    /// Defaults for everything but what and where.
    pub fn new(snapshot: &str, connection: crate::imap::Connection) -> Self {
        ImapRestoreOptions {
            select: Selection {
                snapshot: snapshot.into(),
                cache_bytes: Selection::CACHE_BYTES,
                ..Selection::default()
            },
            connection,
            connections: 4,
            parallel_accounts: 4,
            max_rate: None,
            skip_existing: false,
            create_accounts: false,
            journal_dir: crate::imap::default_journal_dir(),
            batch_messages: 500,
            batch_bytes: 8 << 20,
            sieve_port: 4190,
        }
    }
}

/// An IMAP server as a restore target.
pub struct ImapTarget {
    opts: ImapRestoreOptions,
    client: Client,
    pacer: Pacer,
    run_dir: PathBuf,
    header: String,
    provisioning: Span,
    data: Span,
    /// The third phase: its time, and what it did.
    shares_span: Span,
    shares: shares::Done,
    /// Who the target's users are, for the ACL entries that name them.
    users: shares::Users,
    provisioned: Mutex<Vec<Provisioned>>,
    accounts: Mutex<Vec<AccountFigures>>,
    journaled: AtomicU64,
    existing: AtomicU64,
    /// Batch buffers not in use by a lane (see [`Target::write_batch`]), shared by the
    /// accounts: at most as many as lanes write at once.
    buffers: Mutex<Vec<Vec<u8>>>,
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

/// An account being restored: its journal, its sessions (one per lane, reused), its
/// counts.
pub struct ImapAccount(Arc<Shared>);

struct Shared {
    name: String,
    creds: Credentials,
    journal: AccountJournal,
    /// Sessions not in use by a lane.
    sessions: Mutex<Vec<Session>>,
    /// The server's hierarchy delimiter, as provisioning learnt it: a lane's new login
    /// does not ask again.
    delimiter: Option<Option<char>>,
    messages: u64,
    appended: AtomicU64,
    skipped: AtomicU64,
    started: Instant,
    /// Its folders' ACLs and its sieve scripts, for the third phase.
    pending: shares::Pending,
}

/// A folder being restored.
pub struct ImapFolder {
    acc: Arc<Shared>,
    name: String,
    /// The UIDVALIDITY and UIDs the server had when the folder was opened, when the
    /// journal says an earlier run appended some of its messages; `Some(None)`: the
    /// folder does not exist.
    uids: Option<Option<(u32, HashSet<u32>)>>,
    /// UIDVALIDITY and fingerprints of what the server had when last asked (multiset),
    /// for checks.
    on_server: Mutex<Option<(u32, OnServer)>>,
}

/// Fingerprints of a folder's messages on the server -> their UIDs (a multiset).
type OnServer = HashMap<Fingerprint, Vec<u32>>;

const MAX_ATTEMPTS: u32 = 8;

/// How often a message the server refused without a reason (no response code) is sent
/// in all. Such a refusal may pass: Cyrus answers `NO System I/O error` to the first
/// APPENDs of two processes that race to create its staging directory, and the next
/// try succeeds. It may also be the message itself (`NO Message contains invalid
/// header`), so not many tries.
const UNEXPLAINED_ATTEMPTS: u32 = 3;

/// The wait before attempt `attempt + 1`: 200 ms, doubling, at most 25.6 s.
fn backoff(attempt: u32) -> Duration {
    Duration::from_millis(100 << attempt.min(8))
}

/// An account opens a further connection for every this many messages it has to send:
/// a login costs the server about as much as appending 50-100 messages (docs/imap.md).
const MESSAGES_PER_CONNECTION: usize = 500;

impl ImapTarget {
    /// The target of a restore of `snapshot` (a snapshot id, or what names the restore in
    /// its journal and report).
    pub fn new(repo: &Repository, opts: &ImapRestoreOptions, o: &Opening<'_>) -> Result<Self> {
        let snapshot = o.snapshot;
        if opts.create_accounts && !matches!(opts.connection.login, Login::Master { .. }) {
            return Err(Error::InvalidInput(
                "creating accounts needs the server's admin: log in through a master user (--imap-master-user)".into(),
            ));
        }
        let target = opts.connection.url();
        let run_dir = journal::run_dir(&opts.journal_dir, &repo.config().id, snapshot, &target);
        Ok(ImapTarget {
            opts: opts.clone(),
            client: Client::new(opts.connection.client.clone())?,
            pacer: Pacer::new(opts.max_rate),
            header: format!(
                "repo={} snapshot={snapshot} target={target}",
                repo.config().id,
            ),
            run_dir,
            provisioning: Span::default(),
            data: Span::default(),
            shares_span: Span::default(),
            shares: shares::Done::default(),
            users: shares::Users::new(&o.accounts),
            provisioned: Mutex::new(Vec::new()),
            accounts: Mutex::new(Vec::new()),
            journaled: AtomicU64::new(0),
            existing: AtomicU64::new(0),
            buffers: Mutex::new(Vec::new()),
        })
    }

    /// The IMAP report: the pipeline's report and what this target adds (phases, the
    /// accounts' figures, the journal).
    pub fn report(self, r: RestoreReport) -> ImapRestoreReport {
        let provisioned = self
            .provisioned
            .into_inner()
            .unwrap_or_else(|p| p.into_inner());
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
        let incapable = (provisioned.iter()).any(|p| !p.special_capable && p.special_wanted > 0);
        if wanted > set && incapable {
            note.push_str(&format!(
                "; special use: the server cannot set it on CREATE (no CREATE-SPECIAL-USE) for {} folders; it keeps its own configuration",
                wanted - set
            ));
        }
        let appended = r.items_restored;
        let journaled = self.journaled.load(Relaxed);
        let existing = self.existing.load(Relaxed);
        let phases = vec![
            self.provisioning.phase(
                "provisioning",
                created + subscribed + accounts_created,
                note,
            ),
            self.data.phase(
                "data",
                appended,
                format!(
                    "{appended} appended, {journaled} already done by an earlier run, {existing} found on the server"
                ),
            ),
            self.shares.phase(&self.shares_span),
        ];
        let mut per_account = self
            .accounts
            .into_inner()
            .unwrap_or_else(|p| p.into_inner());
        per_account.sort_by(|a, b| a.account.cmp(&b.account));
        ImapRestoreReport {
            snapshot: r.snapshot,
            target: self.opts.connection.url(),
            accounts: r.accounts,
            accounts_created,
            folders: r.folders,
            items_total: r.items_total,
            items_appended: appended,
            items_journaled: journaled,
            items_existing: existing,
            items_failed: r.items_failed,
            items_not_tried: r.items_not_tried,
            cancelled: r.cancelled,
            bytes_appended: r.bytes_written,
            shares: self.shares.figures(),
            elapsed_secs: r.elapsed_secs,
            items_per_sec: per_sec(appended, r.elapsed_secs),
            mb_per_sec: r.mb_per_sec,
            phases,
            per_account,
            journal: self.run_dir.display().to_string(),
            warnings: r.warnings,
            failures: r.failures,
        }
    }

    fn credentials(&self, account: &str) -> Result<Credentials> {
        self.opts.connection.login.credentials(account)
    }

    /// Logs in, creates the account where it is missing and `create_accounts` asks for
    /// it, then the folders (parents first) and the subscriptions. Returns the session,
    /// for the account's data, and what was done.
    fn provision(&self, info: &AccountInfo) -> Result<(Session, Provisioned)> {
        let name = &info.account.name;
        let creds = self.credentials(name)?;
        let mut s = login_with_backoff(&self.client, &creds, 6)?;
        let mut p = Provisioned {
            special_capable: s.capabilities().has("CREATE-SPECIAL-USE"),
            ..Provisioned::default()
        };
        let mut existing: HashSet<String> = s.list()?.into_iter().map(|f| f.name).collect();
        let has_inbox = |e: &HashSet<String>| e.iter().any(|n| n.eq_ignore_ascii_case("INBOX"));
        if self.opts.create_accounts && !has_inbox(&existing) {
            // Cyrus: an account is its INBOX, `user/<account>`, which only an admin
            // creates. (Dovecot makes the INBOX at the first login: nothing to do there.)
            self.create_account(name)?;
            p.account_created = true;
            let _ = s.logout();
            s = login_with_backoff(&self.client, &creds, 6)?;
            existing = s.list()?.into_iter().map(|f| f.name).collect();
        }
        self.create_folders(&mut s, info, &existing, &mut p)?;
        self.subscribe(&mut s, info, &existing, &mut p);
        Ok((s, p))
    }

    /// Creates the folders of `info` the server does not have (`existing`), pipelined a
    /// level at a time: every folder of a level in one round trip, after the level of
    /// its parent (a parent the snapshot does not have is left to the server, as
    /// Maildir++ has no such folder either). A folder the server refuses fails the
    /// account, as before its data could be sent.
    fn create_folders(
        &self,
        s: &mut Session,
        info: &AccountInfo,
        existing: &HashSet<String>,
        p: &mut Provisioned,
    ) -> Result<()> {
        let missing: Vec<&str> = (info.folders.iter())
            .map(String::as_str)
            .filter(|n| !n.eq_ignore_ascii_case("INBOX") && !existing.contains(*n))
            .collect();
        let level = |n: &str| n.matches('/').count();
        let deepest = missing.iter().map(|n| level(n)).max().unwrap_or(0);
        for depth in 0..=deepest {
            let wave: Vec<(&str, Option<SpecialUse>)> = (missing.iter())
                .filter(|n| level(n) == depth)
                .map(|n| (*n, names::special_use_for(n)))
                .collect();
            if wave.is_empty() {
                continue;
            }
            for ((_, special), out) in wave.iter().zip(s.create_many(&wave)?) {
                let out = out?;
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
        }
        Ok(())
    }

    /// Subscribes to the subscriptions of `info`, pipelined (one round trip). One the
    /// server refuses is a failure of its own; the account goes on.
    fn subscribe(
        &self,
        s: &mut Session,
        info: &AccountInfo,
        existing: &HashSet<String>,
        p: &mut Provisioned,
    ) {
        let name = &info.account.name;
        let subs: Vec<&str> = info.subscriptions.iter().map(String::as_str).collect();
        if subs.is_empty() {
            return;
        }
        let results = match s.subscribe_many(&subs) {
            Ok(r) => r,
            Err(e) => {
                // The connection failed: the data lanes log in again.
                return info.failures.add(format!("{name}: subscriptions"), e);
            }
        };
        let selected: HashSet<&str> = info.folders.iter().map(String::as_str).collect();
        for (sub, r) in subs.into_iter().zip(results) {
            match r {
                Ok(()) => p.subscribed += 1,
                // A subscription to a folder that no longer exists: Dovecot refuses to
                // SUBSCRIBE to a missing folder but keeps the subscription when a folder
                // is deleted, which is how it came about.
                Err(e) if !existing.contains(sub) && !selected.contains(sub) => {
                    let dangling = s.create(sub, None).and_then(|_| {
                        s.subscribe(sub)?;
                        s.delete(sub)
                    });
                    match dangling {
                        Ok(()) => p.subscribed += 1,
                        Err(_) => info
                            .failures
                            .add(format!("{name}: subscription {sub:?}"), e),
                    }
                }
                Err(e) => info
                    .failures
                    .add(format!("{name}: subscription {sub:?}"), e),
            }
        }
    }

    /// Creates `account` on the server as its admin (the master user logging in as
    /// itself): CREATE `user/<account>`, with the server's hierarchy delimiter.
    fn create_account(&self, account: &str) -> Result<()> {
        let mut s = self.admin_session(account, "create it")?;
        let r = s.create(&format!("user/{account}"), None);
        let _ = s.logout();
        r?;
        Ok(())
    }

    /// A session of the server's admin (the master user logging in as itself), to do for
    /// `account` what only the admin may (`what`: create it, set its quota).
    fn admin_session(&self, account: &str, what: &str) -> Result<Session> {
        let Login::Master { master, password } = &self.opts.connection.login else {
            return Err(Error::InvalidInput(format!(
                "only the server's admin (a master user, --imap-master-user) can {what}: account {account}"
            )));
        };
        let admin = Login::User {
            template: master.clone(),
            password: password.clone(),
        }
        .credentials(account)?;
        Ok(login_with_backoff(&self.client, &admin, 6)?)
    }

    /// A session of `user` through the master user, to learn whether the server has
    /// such a user; `None`: no master user, so no way to tell.
    fn session_as(&self, user: &str) -> Option<mailvault_imap::Result<Session>> {
        let Login::Master { .. } = &self.opts.connection.login else {
            return None;
        };
        Some(self.client.login(&self.credentials(user).ok()?))
    }

    /// Whether a message is to be looked for on the server before it is sent (in doubt,
    /// or `skip_existing`); `None`: the journal says it is there, and the server agrees.
    fn check(&self, folder: &ImapFolder, key: &[u8]) -> Option<bool> {
        let skip_existing = self.opts.skip_existing;
        Some(match folder.acc.journal.state(&folder.name, key) {
            Some(State::Accepted { uidvalidity, uid }) => match &folder.uids {
                Some(Some((v, uids))) if uid != 0 && *v == uidvalidity => {
                    if uids.contains(&uid) {
                        return None;
                    }
                    // Gone from the server: a deliberate restore.
                    skip_existing
                }
                // The folder is gone: nothing to look for.
                Some(None) => false,
                _ => true,
            },
            Some(State::Pending) => true,
            None => skip_existing,
        })
    }
}

impl Target for ImapTarget {
    type Account = ImapAccount;
    type Folder = ImapFolder;

    fn caps(&self) -> Caps {
        Caps {
            order: Order::Folder,
            jobs: 0,
            open_folders: usize::MAX,
            accounts: self.opts.parallel_accounts.max(1),
            lanes: self.opts.connections.max(1),
            batch_messages: self.opts.batch_messages.max(1),
            batch_bytes: self.opts.batch_bytes,
            lane_messages: MESSAGES_PER_CONNECTION,
            folder_files: false,
            home: true,
            store: false,
            keywords: true,
            hard_links: false,
            parts: true,
        }
    }

    fn open_account(&self, info: &AccountInfo) -> Result<ImapAccount> {
        let t = Instant::now();
        let result = self.provision(info);
        self.provisioning.add(t);
        let name = info.account.name.clone();
        let opened = result.and_then(|(session, p)| {
            lock(&self.provisioned).push(p);
            let journal = AccountJournal::open(&self.run_dir, &self.header, &name)?;
            Ok(ImapAccount(Arc::new(Shared {
                creds: self.credentials(&name)?,
                name: name.clone(),
                journal,
                delimiter: session.known_delimiter(),
                sessions: Mutex::new(vec![session]),
                messages: info.messages,
                appended: AtomicU64::new(0),
                skipped: AtomicU64::new(0),
                started: Instant::now(),
                pending: shares::Pending::default(),
            })))
        });
        if opened.is_err() {
            // Its messages fail (the pipeline counts them): the account's figures say so.
            lock(&self.accounts).push(AccountFigures {
                account: name,
                messages: info.messages,
                appended: 0,
                skipped: 0,
                failed: info.messages,
                secs: t.elapsed().as_secs_f64(),
            });
        }
        opened
    }

    fn open_folder(&self, acc: &ImapAccount, info: &FolderInfo) -> Result<ImapFolder> {
        let acc = &acc.0;
        let name = info.name.to_string();
        acc.pending
            .take(&acc.name, &self.opts.select.map_users, info);
        // A message the journal says was accepted counts only if the server still has
        // it: deleted since, it is restored again; without a UID to look for (no
        // UIDPLUS) or with a new UIDVALIDITY, it is looked for like one in doubt.
        let accepted = (info.entries.iter()).any(|e| {
            matches!(
                acc.journal.state(&name, &e.key),
                Some(State::Accepted { .. })
            )
        });
        let uids = if accepted {
            let mut lane = Lane::new(self, acc);
            let s = lane.session()?;
            let uids = uids_on_server(s, &name)?;
            let _ = s.unselect();
            Some(uids)
        } else {
            None
        };
        Ok(ImapFolder {
            acc: Arc::clone(acc),
            name,
            uids,
            on_server: Mutex::new(None),
        })
    }

    fn already_restored(&self, folder: &ImapFolder, entry: &MessageEntry) -> bool {
        let done = self.check(folder, &entry.key).is_none();
        if done {
            self.journaled.fetch_add(1, Relaxed);
            folder.acc.skipped.fetch_add(1, Relaxed);
        }
        done
    }

    fn write(&self, folder: &ImapFolder, msg: &Message) -> Result<Outcome> {
        let mut done = [None];
        self.write_batch(folder, std::slice::from_ref(msg), &mut done)?;
        done[0].take().unwrap_or_else(|| {
            Err(Error::Internal(
                "a batch left a message without an outcome".into(),
            ))
        })
    }

    fn write_batch(
        &self,
        folder: &ImapFolder,
        msgs: &[Message],
        done: &mut [Option<Result<Outcome>>],
    ) -> Result<()> {
        // A buffer reused: a fresh one of up to `batch_bytes` per batch was a fifth of the
        // client's CPU in page faults and zeroed pages, and one per account still cost
        // every account its own (100 accounts: 2% of the client's CPU).
        let mut buf = lock(&self.buffers).pop().unwrap_or_default();
        buf.clear();
        let mut ready = Vec::with_capacity(msgs.len());
        for (i, m) in msgs.iter().enumerate() {
            let start = buf.len();
            // In pieces (`Caps::parts`), or whole from a caller that has it so.
            if m.parts.is_empty() {
                crlf_parts_into(&mut buf, &[m.data]);
            } else {
                crlf_parts_into(&mut buf, m.parts);
            }
            let mut flags: Vec<String> =
                m.meta.flags.imap().iter().map(|f| f.to_string()).collect();
            flags.extend(m.meta.keywords.iter().cloned());
            ready.push(Ready {
                i,
                key: m.entry.key.clone(),
                date: m.meta.internal_date.secs,
                flags,
                range: start..buf.len(),
                check: self.check(folder, &m.entry.key).unwrap_or(true),
            });
        }
        let mut lane = Lane::new(self, &folder.acc);
        let result = lane.run(folder, &mut ready, &buf, done);
        drop(lane);
        if buf.capacity() <= 2 * self.opts.batch_bytes.max(1 << 20) {
            lock(&self.buffers).push(buf);
        }
        let acc = &folder.acc;
        let appended = done
            .iter()
            .filter(|d| matches!(d, Some(Ok(Outcome::Written { .. }))))
            .count() as u64;
        let skipped = done
            .iter()
            .filter(|d| matches!(d, Some(Ok(Outcome::AlreadyThere))))
            .count() as u64;
        acc.appended.fetch_add(appended, Relaxed);
        acc.skipped.fetch_add(skipped, Relaxed);
        self.existing.fetch_add(skipped, Relaxed);
        match result {
            Ok(()) => Ok(()),
            Err(Stop::Batch { why, transient }) => {
                for r in &ready {
                    let detail = why.clone();
                    done[r.i] = Some(Err(Error::Refused { detail, transient }));
                }
                Ok(())
            }
            Err(Stop::Account(e)) => Err(e),
        }
    }

    fn finish_account(&self, acc: ImapAccount, failures: &RestoreFailures) {
        let acc = acc.0;
        if let Err(e) = acc.journal.sync() {
            failures.add(format!("account {}", acc.name), e);
        }
        self.data.add(acc.started);
        if !acc.pending.is_empty() {
            let t = Instant::now();
            let mut lane = Lane::new(self, &acc);
            let admin = || self.admin_session(&acc.name, "set its quota");
            let session_as = |user: &str| self.session_as(user);
            let reach = shares::Reach {
                session: lane.session(),
                sieve: self.opts.connection.sieve(self.opts.sieve_port),
                creds: &acc.creds,
                admin: &admin,
                users: (&self.users, &session_as),
            };
            acc.pending.apply(&acc.name, reach, &self.shares, failures);
            drop(lane);
            self.shares_span.add(t);
        }
        for s in std::mem::take(&mut *lock(&acc.sessions)) {
            let _ = s.logout();
        }
        let (appended, skipped) = (acc.appended.load(Relaxed), acc.skipped.load(Relaxed));
        lock(&self.accounts).push(AccountFigures {
            account: acc.name.clone(),
            messages: acc.messages,
            appended,
            skipped,
            failed: acc.messages.saturating_sub(appended + skipped),
            secs: acc.started.elapsed().as_secs_f64(),
        });
    }

    fn warnings(&self) -> Vec<String> {
        self.shares.warnings()
    }

    fn item(&self, folder: &ImapFolder, item: Item) -> String {
        match item {
            Item::Message(e) => format!(
                "{}: {}: {}",
                folder.acc.name,
                folder.name,
                String::from_utf8_lossy(&e.key)
            ),
            Item::File(f) => format!(
                "{}: {}: {}",
                folder.acc.name,
                folder.name,
                String::from_utf8_lossy(f)
            ),
        }
    }
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

/// One message ready to send.
struct Ready {
    /// Its place in the batch.
    i: usize,
    key: Vec<u8>,
    /// Its internal date.
    date: i64,
    flags: Vec<String>,
    /// Where its CRLF form is in the batch's buffer.
    range: Range<usize>,
    /// Look for it on the server before sending it.
    check: bool,
}

/// Why [`Lane::run`] stopped before every message of its batch was accounted for.
enum Stop {
    /// The batch's remaining messages failed (this reason, which may pass by itself or
    /// not); the account goes on.
    Batch { why: String, transient: bool },
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

/// One connection of an account, for the time of a batch: a session taken from the
/// account's idle ones (or a new login), given back when done unless broken.
struct Lane<'a> {
    t: &'a ImapTarget,
    acc: &'a Shared,
    session: Option<Session>,
}

impl Drop for Lane<'_> {
    fn drop(&mut self) {
        if let Some(s) = self.session.take() {
            if !s.is_broken() {
                lock(&self.acc.sessions).push(s);
            }
        }
    }
}

/// What became of an attempt's messages: those accepted (key, UIDVALIDITY, UID), and,
/// in the batch's order, those to send again and those in doubt (to look for first).
struct Sorted<'r> {
    accepted: Vec<(&'r [u8], u32, u32)>,
    left: Vec<bool>,
    doubt: Vec<bool>,
    /// The server asked to wait.
    throttled: bool,
    /// The first refusal without a reason, to try again.
    again: Option<String>,
}

/// Sorts the server's answers to an attempt at appending `ready` (see [`Sorted`]); a
/// message accepted or refused for good gets its result in `done`.
fn sort_outcomes<'r>(
    ready: &'r [Ready],
    outcomes: Vec<Option<AppendOutcome>>,
    in_doubt: &[usize],
    attempt: u32,
    done: &mut [Option<Result<Outcome>>],
) -> Sorted<'r> {
    let mut accepted: Vec<(&[u8], u32, u32)> = Vec::new();
    // What is still to do after this attempt: messages to send again and those
    // in doubt (to look for first), in the folder's order.
    let mut left = vec![false; ready.len()];
    let mut doubt = vec![false; ready.len()];
    // Refusals to try again: the server asked to wait (`throttled`), or gave no
    // reason (`again`, the first such answer).
    let (mut throttled, mut again) = (false, None);
    for (i, (r, o)) in ready.iter().zip(outcomes).enumerate() {
        match o {
            Some(AppendOutcome::Appended { uid, uidvalidity }) => {
                accepted.push((r.key.as_slice(), uidvalidity.unwrap_or(0), uid.unwrap_or(0)));
                let bytes = r.range.len() as u64;
                done[r.i] = Some(Ok(Outcome::Written { bytes }));
            }
            Some(AppendOutcome::Refused(refusal))
                if refusal.is_transient() && attempt < MAX_ATTEMPTS =>
            {
                left[i] = true;
                throttled = true;
            }
            Some(AppendOutcome::Refused(refusal))
                if refusal.is_unexplained() && attempt < UNEXPLAINED_ATTEMPTS =>
            {
                left[i] = true;
                if again.is_none() {
                    again = Some(refusal.response.clone());
                }
            }
            Some(AppendOutcome::Refused(refusal)) => {
                let why = if refusal.by_server {
                    format!("refused by the server: {}", refusal.response)
                } else {
                    refusal.response.clone()
                };
                let transient = refusal.is_transient();
                done[r.i] = Some(Err(Error::Refused {
                    detail: why,
                    transient,
                }));
            }
            None => {
                left[i] = true;
                doubt[i] = in_doubt.contains(&i);
            }
        }
    }
    Sorted {
        accepted,
        left,
        doubt,
        throttled,
        again,
    }
}

impl<'a> Lane<'a> {
    fn new(t: &'a ImapTarget, acc: &'a Shared) -> Lane<'a> {
        let session = lock(&acc.sessions).pop();
        Lane { t, acc, session }
    }

    fn session(&mut self) -> Result<&mut Session> {
        if self.session.as_ref().is_none_or(|s| s.is_broken()) {
            let mut s = login_with_backoff(&self.t.client, &self.acc.creds, MAX_ATTEMPTS)?;
            if let Some(d) = self.acc.delimiter {
                s.assume_delimiter(d);
            }
            self.session = Some(s);
        }
        match self.session.as_mut() {
            Some(s) => Ok(s),
            None => Err(Error::Internal("a lane without a session".into())),
        }
    }

    /// Sends one batch (`buf` holds its messages) in order. Every message it accounts
    /// for (appended, found on the server, refused) leaves `ready` with its result in
    /// `done`; what is left when it returns an error has not been restored.
    fn run(
        &mut self,
        folder: &ImapFolder,
        ready: &mut Vec<Ready>,
        buf: &[u8],
        done: &mut [Option<Result<Outcome>>],
    ) -> std::result::Result<(), Stop> {
        let t = self.t;
        self.drop_existing(folder, ready, buf, false, done)?;
        (self.acc.journal).pending(&folder.name, ready.iter().map(|r| r.key.as_slice()))?;
        let mut attempt = 0;
        while !ready.is_empty() {
            attempt += 1;
            t.pacer.wait(ready.len() as u64);
            let msgs: Vec<AppendMsg> = ready
                .iter()
                .map(|r| AppendMsg {
                    flags: r.flags.clone(),
                    internal_date: Some(InternalDate {
                        secs: r.date,
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
            let Sorted {
                accepted,
                left,
                doubt,
                throttled,
                again,
            } = sort_outcomes(ready, outcomes, &in_doubt, attempt, done);
            let journaled = self.acc.journal.accepted(&folder.name, &accepted);
            drop(accepted);
            let mut i = 0;
            ready.retain_mut(|r| {
                i += 1;
                r.check = doubt[i - 1];
                left[i - 1]
            });
            journaled?;
            if throttled {
                t.pacer.throttled();
            }
            if let Some(why) = again {
                tracing::warn!(
                    "{}: {}: refused by the server without a reason code: {why}; trying again (attempt {attempt})",
                    self.acc.name,
                    folder.name,
                );
                std::thread::sleep(backoff(attempt));
            }
            let Some(err) = err else {
                if !throttled {
                    t.pacer.ok();
                }
                continue;
            };
            self.recover(folder, err, attempt)?;
            // Sent but not answered: look for them before sending them again.
            if ready.iter().any(|r| r.check) {
                self.drop_existing(folder, ready, buf, true, done)?;
            }
        }
        Ok(())
    }

    /// After a failed attempt at appending to `folder`: what can be recovered from
    /// (a folder deleted behind our back, a transient error, a lost connection) is, for a
    /// next attempt; what cannot stops the batch or the account.
    fn recover(
        &mut self,
        folder: &ImapFolder,
        err: mailvault_imap::Error,
        attempt: u32,
    ) -> std::result::Result<(), Stop> {
        let t = self.t;
        let root = err.root();
        match root {
            mailvault_imap::Error::OverQuota { .. } | mailvault_imap::Error::AuthFailed { .. } => {
                return Err(Stop::Account(err.into()));
            }
            mailvault_imap::Error::NoSuchFolder { .. } if attempt < MAX_ATTEMPTS => {
                // Deleted behind our back, or provisioning failed: create it and retry.
                let su = names::special_use_for(&folder.name);
                if let Err(e) = self.session().and_then(|s| Ok(s.create(&folder.name, su)?)) {
                    let transient = e.is_transient();
                    return Err(Stop::Batch {
                        why: e.to_string(),
                        transient,
                    });
                }
            }
            _ if (err.is_transient() || err.is_connection_lost()) && attempt < MAX_ATTEMPTS => {
                t.pacer.throttled();
                tracing::warn!(
                    "{}: {}: {err}; retrying (attempt {attempt})",
                    self.acc.name,
                    folder.name
                );
                if err.is_connection_lost() {
                    self.session = None;
                }
                std::thread::sleep(backoff(attempt));
            }
            _ => {
                let transient = err.is_transient();
                return Err(Stop::Batch {
                    why: err.to_string(),
                    transient,
                });
            }
        }
        Ok(())
    }

    /// Removes from `ready` the messages to check (`check`) that the server already has
    /// (by fingerprint), recording them as accepted; the others are no longer to check.
    /// `fresh`: ask the server again rather than use what it said first.
    fn drop_existing(
        &mut self,
        folder: &ImapFolder,
        ready: &mut Vec<Ready>,
        buf: &[u8],
        fresh: bool,
        done: &mut [Option<Result<Outcome>>],
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
            let uid = Fingerprint::candidates(data, r.date)
                .find_map(|fp| have.get_mut(&fp).and_then(|uids| uids.pop()));
            match uid {
                Some(uid) => {
                    found.push((r.key.clone(), uid));
                    done[r.i] = Some(Ok(Outcome::AlreadyThere));
                    false
                }
                None => true,
            }
        });
        let v = *uidvalidity;
        drop(guard);
        let found: Vec<(&[u8], u32, u32)> =
            found.iter().map(|(k, u)| (k.as_slice(), v, *u)).collect();
        self.acc.journal.accepted(&folder.name, &found)
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
            let fp = Fingerprint::on_server(
                m.header,
                m.size.unwrap_or(0),
                m.internal_date.map(|d| d.secs).unwrap_or(0),
            );
            out.entry(fp).or_default().push(m.uid);
            Ok(())
        })?;
        s.unselect()?;
        Ok((uidvalidity, out))
    }
}
