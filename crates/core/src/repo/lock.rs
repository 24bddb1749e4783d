//! Repository locks: who is using the repository, so that a prune never deletes what a
//! running backup, restore or check relies on.
//!
//! A lock is a sealed JSON record `locks/<random name>` ([`LockRecord`]: host, pid, time,
//! exclusive or shared, operation). Backup, restore and check take a **shared** lock;
//! prune takes an **exclusive** one. Taking a lock: write one's own record, then list
//! `locks/` (and the `writers/` records older mailvaults write for a running backup, read
//! as shared locks): a live conflicting lock that is older (by `created`, then `lock` id)
//! makes this one withdraw its record and try again later; a conflicting lock that is
//! younger is waited for with one's own record kept (the younger one withdraws when it
//! sees it, or, when it did not see this one, finishes). So two that start together never
//! both run, and never both withdraw forever. A lock is **refreshed** every
//! [`REFRESH`] by a thread that writes a new record and deletes the old one (objects are
//! write-once); it is **stale** when not refreshed for [`STALE`], or at once when it was
//! taken on this host by a process that is gone. `mailvault unlock` removes stale locks.
//!
//! An **append-only** host (`Repository::set_append_only`: its credentials cannot
//! delete) deletes no record: a refresh leaves the old record beside the new one (the
//! newest record of a lock id is the lock), and a lock ends by a record of its own with
//! `released` set. Every host reads records so: a lock id with a `released` record is
//! over, and its other records and a lock's older ones are [`Found::Ended`], which no
//! command waits for; `prune` and `unlock` on a host that may delete remove them.

use crate::error::{Error, Result};
use crate::repo::crypto::MasterKey;
use crate::repo::format::{Object, Version};
use crate::repo::seal::{open_as, seal_as};
use crate::store::Backend;
use crate::store::Store;
use serde::{Deserialize, Serialize};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Where locks are.
pub const LOCKS: &str = "locks/";
/// Where older mailvaults record a running backup (read as shared locks).
pub const WRITERS: &str = "writers/";
/// A held lock writes a fresh record this often.
pub const REFRESH: Duration = Duration::from_secs(5 * 60);
/// A lock not refreshed for this long is stale, wherever it was taken.
pub const STALE: Duration = Duration::from_secs(30 * 60);

/// Shared (backup, restore, check) or exclusive (prune).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LockKind {
    Shared,
    Exclusive,
}

/// How commands lock the repository.
#[derive(Clone, Debug)]
pub struct LockOptions {
    /// How long to wait for a conflicting lock to go before giving up.
    pub wait: Duration,
    /// Take no lock at all (read-only credentials; restore and check only).
    pub no_lock: bool,
    /// How often a held lock is refreshed ([`REFRESH`]; shorter in tests).
    pub refresh: Duration,
    /// When a lock not refreshed is stale ([`STALE`]; shorter in tests).
    pub stale: Duration,
}

impl Default for LockOptions {
    fn default() -> Self {
        LockOptions {
            wait: Duration::ZERO,
            no_lock: false,
            refresh: REFRESH,
            stale: STALE,
        }
    }
}

/// The sealed JSON of `locks/<name>`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct LockRecord {
    pub hostname: String,
    pub pid: u32,
    /// When this record was written (Unix seconds): the lock's last refresh.
    pub time: i64,
    /// When the lock was first taken (Unix seconds); with `lock`, its rank.
    pub created: i64,
    pub exclusive: bool,
    /// `backup`, `restore`, `check`, `prune`...
    pub operation: String,
    /// The lock's id (random hex), the same in every record a refresh writes.
    pub lock: String,
    /// The lock is over: written by an append-only host in place of deleting its
    /// records (see the module's docs).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub released: bool,
    /// How often its holder refreshes it, in seconds (0 in records of older mailvaults:
    /// [`REFRESH`]).
    #[serde(default)]
    pub refresh_secs: u64,
}

impl LockRecord {
    /// Whether the lock is stale: not refreshed for `stale`, or taken on this host by a
    /// process that is gone.
    pub fn is_stale(&self, stale: Duration) -> bool {
        crate::now_unix() - self.time > stale.as_secs() as i64
            || (self.hostname == crate::hostname() && !process_exists(self.pid))
            || (self.hostname == crate::hostname()
                && self.pid == std::process::id()
                && !crate::repo::lock(&HELD).contains(&self.lock))
    }

    /// Which of two conflicting locks goes first: the older by `created`, then by id.
    fn rank(&self) -> (i64, &str) {
        (self.created, &self.lock)
    }

    fn describe(&self) -> String {
        let since = std::time::UNIX_EPOCH + Duration::from_secs(self.created.max(0) as u64);
        format!(
            "{} {} on host {} (pid {}) since {}",
            if self.exclusive {
                "exclusively by"
            } else {
                "by"
            },
            self.operation,
            self.hostname,
            self.pid,
            humantime::format_rfc3339_seconds(since)
        )
    }
}

/// Lock records read at once.
const READERS: usize = 8;

/// The ids of the locks this process holds: a record of this process whose lock is not
/// among them was left by a command of this process that failed and could not remove it
/// (its store refused the delete), and is stale as if the process were gone.
static HELD: std::sync::Mutex<std::collections::BTreeSet<String>> =
    std::sync::Mutex::new(std::collections::BTreeSet::new());

/// Whether a process of this host with `pid` exists (true when that cannot be known).
/// One that has exited and not been waited for by its parent (a zombie) does not: it
/// runs nothing any more.
fn process_exists(pid: u32) -> bool {
    if !std::path::Path::new("/proc/self").exists() {
        return true;
    }
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the command name, which is in parentheses and may hold any
        // character: read after the last `)`.
        Ok(stat) => !matches!(
            stat.rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().next()),
            Some("Z" | "X")
        ),
        Err(_) => false,
    }
}

/// What a file in `locks/` or `writers/` is.
#[derive(Debug)]
pub enum Found {
    /// A lock record.
    Lock(LockRecord),
    /// A record an older mailvault writes for a running backup: a shared lock that never
    /// withdraws.
    Writer {
        hostname: String,
        pid: u32,
        started: i64,
        gone: bool,
    },
    /// A record of a lock that is over (its id has a `released` record) or of an older
    /// refresh of a lock (its id has a newer record): no one waits for it, and a host
    /// that may delete removes it.
    Ended { lock: String },
    /// Not a record (a stray or damaged file): ignored, with a warning.
    Unreadable(Error),
}

/// One file of `locks/` or `writers/` and what it is.
#[derive(Debug)]
pub struct FoundLock {
    pub path: String,
    pub found: Found,
    /// A lock whose holder wrote a `released` record too recently to be taken at its
    /// word (see the module's docs).
    pub releasing: bool,
}

impl FoundLock {
    /// Whether the holder is gone (a record that is not one is not stale: it is junk).
    pub fn is_stale(&self, stale: Duration) -> bool {
        match &self.found {
            Found::Lock(r) => r.is_stale(stale),
            Found::Writer { gone, .. } => *gone,
            Found::Ended { .. } | Found::Unreadable(_) => false,
        }
    }

    /// Whether the record can go: a stale lock or writer, or an ended lock's record.
    pub fn is_removable(&self, stale: Duration) -> bool {
        matches!(self.found, Found::Ended { .. }) || self.is_stale(stale)
    }

    fn describe(&self) -> String {
        match &self.found {
            Found::Lock(r) => r.describe(),
            Found::Writer {
                hostname,
                pid,
                started,
                ..
            } => LockRecord {
                hostname: hostname.clone(),
                pid: *pid,
                time: *started,
                created: *started,
                exclusive: false,
                operation: "backup".into(),
                lock: String::new(),
                released: false,
                refresh_secs: 0,
            }
            .describe(),
            Found::Ended { lock } => format!("lock {lock}, over"),
            Found::Unreadable(e) => e.to_string(),
        }
    }
}

/// The associated data a lock record is sealed with: a writer record's, with the path
/// (`locks/<name>`) as its name, so that it differs from any `writers/` record.
fn lock_object(path: &str) -> Object<'_> {
    Object::Writer(path)
}

/// Everything needed to read and write lock records, without the repository.
#[derive(Clone)]
pub(crate) struct LockStore {
    pub(crate) store: Arc<dyn Backend>,
    pub(crate) key: MasterKey,
    pub(crate) version: Version,
    /// Delete no record (see the module's docs).
    pub(crate) append_only: bool,
}

impl LockStore {
    /// Every record in `locks/` and, with `writers`, in `writers/`, each with what it
    /// is; `except` (one's own record) is left out unread.
    pub(crate) fn list(&self, except: Option<&str>, writers: bool) -> Result<Vec<FoundLock>> {
        // One's own record is left out; in an append-only repository its earlier records
        // are there too, and are read as ended like any other's.
        let listed: Vec<String> = (self.store.list(LOCKS)?.into_iter())
            .filter(|o| Some(o.path.as_str()) != except || self.append_only)
            .map(|o| o.path)
            .collect();
        // Read READERS at a time: append-only hosts leave records until the next prune,
        // and one read at a time would cost each command a round trip per record.
        let read = |path: String| -> Option<FoundLock> {
            Some(FoundLock {
                releasing: false,
                found: match self.read_record(&path) {
                    Ok(r) => Found::Lock(r),
                    Err(Error::NotFound(_)) => return None, // removed meanwhile
                    Err(e) => Found::Unreadable(e),
                },
                path,
            })
        };
        let mut out: Vec<FoundLock> = match listed.len() {
            0..=2 => listed.into_iter().filter_map(read).collect(),
            _ => {
                use rayon::prelude::*;
                rayon::ThreadPoolBuilder::new()
                    .num_threads(READERS)
                    .build()
                    .map_err(|e| {
                        Error::InvalidInput(format!("cannot start {READERS} threads: {e}"))
                    })?
                    .install(|| listed.into_par_iter().filter_map(read).collect())
            }
        };
        end_superseded(&mut out);
        out.retain(|f| Some(f.path.as_str()) != except);
        if writers {
            out.extend(self.list_writers()?);
        }
        Ok(out)
    }

    /// One lock record, opened (a lock taken before a migration's commit is of the other
    /// format).
    fn read_record(&self, path: &str) -> Result<LockRecord> {
        let b = self.store.get(path)?;
        let obj = lock_object(path);
        let opened =
            open_as(&self.key, self.version, obj, b.clone(), path).or_else(|e| match e {
                Error::OtherFormat { .. } => {
                    let other = match self.version {
                        Version::V1 => Version::V2,
                        Version::V2 => Version::V1,
                    };
                    open_as(&self.key, other, obj, b, path)
                }
                e => Err(e),
            })?;
        serde_json::from_slice::<LockRecord>(&opened)
            .map_err(|e| Error::corrupt(path, format!("not a lock record: {e}")))
    }

    /// Ends this lock (its holder's, or a stale one's): removes its record, or on an
    /// append-only host writes a `released` record of it.
    pub(crate) fn end(&self, path: &str, rec: &LockRecord) -> Result<()> {
        if self.append_only {
            let mut over = rec.clone();
            over.released = true;
            over.time = crate::now_unix();
            self.put(&over).map(|_| ())
        } else {
            self.store.delete(path)
        }
    }

    /// A refresh wrote `rec` at a new path: the record at `old` goes, unless this host is
    /// append-only (the newer record supersedes it).
    fn drop_old(&self, old: &str) -> Result<()> {
        if self.append_only {
            Ok(())
        } else {
            self.store.delete(old)
        }
    }

    /// The records in `writers/` (of older mailvaults' backups), each with what it is.
    pub(crate) fn list_writers(&self) -> Result<Vec<FoundLock>> {
        let mut out = Vec::new();
        for o in self.store.list(WRITERS)? {
            let name = o.path.rsplit('/').next().unwrap_or(&o.path);
            let found = self
                .store
                .get(&o.path)
                .and_then(|b| open_as(&self.key, self.version, Object::Writer(name), b, &o.path))
                .and_then(|b| {
                    serde_json::from_slice::<WriterRecord>(&b)
                        .map_err(|e| Error::corrupt(&o.path, format!("not a writer record: {e}")))
                });
            out.push(FoundLock {
                releasing: false,
                found: match found {
                    Ok(w) => Found::Writer {
                        gone: w.gone(),
                        hostname: w.hostname,
                        pid: w.pid,
                        started: w.started,
                    },
                    Err(Error::NotFound(_)) => continue,
                    Err(e) => Found::Unreadable(e),
                },
                path: o.path,
            });
        }
        Ok(out)
    }

    /// Writes `rec` under a new name; returns the path.
    fn put(&self, rec: &LockRecord) -> Result<String> {
        let path = format!("{LOCKS}{}", hex::encode(rand::random::<[u8; 16]>()));
        let json = serde_json::to_vec(rec).map_err(|e| Error::corrupt(&path, e.to_string()))?;
        let sealed = seal_as(&self.key, self.version, lock_object(&path), &json);
        self.store.put(&path, &sealed)?;
        // Durable (a local directory's fsync). A flush also waits for a backup's queued
        // uploads and reports their failure, which is the backup's to see, not the lock's.
        if let Err(e) = self.store.flush() {
            tracing::debug!("flush after writing the lock {path}: {e}");
        }
        Ok(path)
    }
}

/// A lock this process holds: refreshed by a thread until dropped, when its record is
/// removed. [`RepoLock::none`] holds nothing (`--no-lock`).
pub struct RepoLock {
    held: Option<Held>,
    /// The other records seen when the lock was taken (none conflicting, or stale).
    found: Vec<FoundLock>,
}

/// See [`RepoLock::watch`]; holds no lock itself.
#[derive(Clone, Default)]
pub struct LockWatch(Option<Arc<Shared>>);

impl LockWatch {
    /// See [`RepoLock::verify`].
    pub fn verify(&self) -> Result<()> {
        let Some(s) = &self.0 else { return Ok(()) };
        let age = crate::repo::lock(&s.written).elapsed();
        if age + s.stale / 6 >= s.stale {
            let path = crate::repo::lock(&s.current).0.clone();
            return Err(Error::LockLost {
                path,
                age_secs: age.as_secs(),
            });
        }
        Ok(())
    }
}

struct Held {
    shared: Arc<Shared>,
    stop: Option<mpsc::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

struct Shared {
    locks: LockStore,
    /// The current record's path, and the record.
    current: Mutex<(String, LockRecord)>,
    /// When the record now in place was written.
    written: Mutex<Instant>,
    stale: Duration,
}

impl std::fmt::Debug for RepoLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.held {
            Some(h) => write!(f, "RepoLock({})", crate::repo::lock(&h.shared.current).0),
            None => write!(f, "RepoLock(none)"),
        }
    }
}

impl RepoLock {
    /// No lock (`--no-lock`).
    pub fn none() -> RepoLock {
        RepoLock {
            held: None,
            found: Vec::new(),
        }
    }

    /// The other records in `locks/` (and, for an exclusive lock, `writers/`) when the
    /// lock was taken: none of them conflicting, or stale.
    pub(crate) fn found(&self) -> &[FoundLock] {
        &self.found
    }

    /// The path of the record now in place, if a lock is held.
    pub fn path(&self) -> Option<String> {
        (self.held.as_ref()).map(|h| crate::repo::lock(&h.shared.current).0.clone())
    }

    /// An error unless the lock is still good: refreshed recently enough that no other
    /// process can have taken it for stale (with a margin of a sixth of the stale
    /// time). A prune calls it before it deletes anything, a backup before it saves its
    /// snapshot.
    pub fn verify(&self) -> Result<()> {
        self.watch().verify()
    }

    /// A handle that can [`LockWatch::verify`] this lock from elsewhere.
    pub fn watch(&self) -> LockWatch {
        LockWatch(self.held.as_ref().map(|h| h.shared.clone()))
    }

    /// Takes a lock of `kind` for `operation`, waiting up to `opts.wait` for conflicting
    /// locks to go.
    pub(crate) fn acquire(
        locks: LockStore,
        kind: LockKind,
        operation: &str,
        opts: &LockOptions,
    ) -> Result<RepoLock> {
        if opts.no_lock {
            return Ok(RepoLock::none());
        }
        let now = crate::now_unix();
        let rec = LockRecord {
            hostname: crate::hostname(),
            pid: std::process::id(),
            time: now,
            created: now,
            exclusive: kind == LockKind::Exclusive,
            operation: operation.into(),
            lock: hex::encode(rand::random::<[u8; 16]>()),
            released: false,
            refresh_secs: opts.refresh.as_secs().max(1),
        };
        let id = rec.lock.clone();
        crate::repo::lock(&HELD).insert(id.clone());
        let taken = Self::take(locks, rec, opts);
        if taken.is_err() {
            crate::repo::lock(&HELD).remove(&id);
        }
        taken
    }

    fn take(locks: LockStore, mut rec: LockRecord, opts: &LockOptions) -> Result<RepoLock> {
        let deadline = Instant::now() + opts.wait;
        let mut pause = Duration::from_millis(200);
        let mut mine: Option<String> = None;
        // Withdrawn for an older conflicting lock: look before writing a record again.
        // (An append-only host's withdrawn records stay until the maintenance host's
        // prune, and a prune waits a while for each: see [`end_superseded`].)
        let mut withdrawn = false;
        // The ids this taker withdrew on an append-only host (their records stay).
        let mut past: Vec<String> = Vec::new();
        loop {
            if withdrawn {
                let found = locks.list(None, rec.exclusive)?;
                let conflicts = conflicts(&found, &rec, &past, opts.stale);
                tracing::debug!(
                    "lock {} ({}) withdrawn: conflicts {:?}",
                    rec.lock,
                    rec.operation,
                    (conflicts.iter())
                        .map(|f| format!("{} {} releasing={}", f.path, f.describe(), f.releasing))
                        .collect::<Vec<_>>()
                );
                if conflicts.iter().any(|f| older(f, &rec)) {
                    if Instant::now() >= deadline {
                        return Err(locked(&conflicts, &rec));
                    }
                    pause = wait(pause, deadline);
                    continue;
                }
                withdrawn = false;
            }
            let path = match &mine {
                // Waiting with the record in place: it must not go stale meanwhile.
                Some(p) if crate::now_unix() - rec.time >= opts.refresh.as_secs() as i64 => {
                    rec.time = crate::now_unix();
                    let new = locks.put(&rec)?;
                    locks.drop_old(p)?;
                    mine = Some(new.clone());
                    new
                }
                Some(p) => p.clone(),
                None => {
                    rec.time = crate::now_unix();
                    let p = locks.put(&rec)?;
                    mine = Some(p.clone());
                    p
                }
            };
            // A shared lock conflicts with no backup of an older mailvault: `writers/` is
            // read for exclusive ones only.
            let found = match locks.list(Some(&path), rec.exclusive) {
                Ok(f) => f,
                Err(e) => {
                    let _ = locks.end(&path, &rec);
                    return Err(e);
                }
            };
            let conflicts = conflicts(&found, &rec, &past, opts.stale);
            tracing::debug!(
                "lock {} ({}): conflicts {:?}",
                rec.lock,
                rec.operation,
                (conflicts.iter())
                    .map(|f| format!("{} {} releasing={}", f.path, f.describe(), f.releasing))
                    .collect::<Vec<_>>()
            );
            if conflicts.is_empty() {
                return Ok(RepoLock::hold(locks, path, rec, opts, found));
            }
            // An older conflicting lock (or a backup of an older mailvault, which never
            // withdraws) goes first: withdraw and try again. Younger ones are waited for.
            let older = conflicts.iter().any(|f| older(f, &rec));
            if older || Instant::now() >= deadline {
                locks.end(&path, &rec)?;
                locks.store.flush()?;
                mine = None;
                withdrawn = true;
                // A withdrawn lock comes back under a new id: its ended one stays ended.
                if locks.append_only {
                    past.push(rec.lock.clone());
                    let mut held = crate::repo::lock(&HELD);
                    held.remove(&rec.lock);
                    rec.lock = hex::encode(rand::random::<[u8; 16]>());
                    held.insert(rec.lock.clone());
                }
            }
            if Instant::now() >= deadline {
                // `acquire` forgets the first id; a new one taken on a withdrawal goes here.
                crate::repo::lock(&HELD).remove(&rec.lock);
                return Err(locked(&conflicts, &rec));
            }
            pause = wait(pause, deadline);
        }
    }

    fn hold(
        locks: LockStore,
        path: String,
        rec: LockRecord,
        opts: &LockOptions,
        found: Vec<FoundLock>,
    ) -> RepoLock {
        let shared = Arc::new(Shared {
            locks,
            current: Mutex::new((path, rec)),
            written: Mutex::new(Instant::now()),
            stale: opts.stale,
        });
        let (stop, rx) = mpsc::channel::<()>();
        let s = shared.clone();
        let every = opts.refresh;
        let thread = std::thread::Builder::new()
            .name("lock refresh".into())
            .spawn(move || {
                while let Err(mpsc::RecvTimeoutError::Timeout) = rx.recv_timeout(every) {
                    if let Err(e) = s.refresh() {
                        tracing::warn!("could not refresh the repository lock: {e}");
                    }
                }
            })
            .ok();
        RepoLock {
            held: Some(Held {
                shared,
                stop: Some(stop),
                thread,
            }),
            found,
        }
    }
}

impl Shared {
    /// Writes a new record of the lock, then removes the old one.
    fn refresh(&self) -> Result<()> {
        let (old, mut rec) = crate::repo::lock(&self.current).clone();
        rec.time = crate::now_unix();
        let new = self.locks.put(&rec)?;
        *crate::repo::lock(&self.written) = Instant::now();
        *crate::repo::lock(&self.current) = (new, rec);
        self.locks.drop_old(&old)?;
        Ok(())
    }
}

impl Drop for RepoLock {
    fn drop(&mut self) {
        let Some(mut h) = self.held.take() else {
            return;
        };
        let id = crate::repo::lock(&h.shared.current).1.lock.clone();
        crate::repo::lock(&HELD).remove(&id);
        drop(h.stop.take());
        if let Some(t) = h.thread.take() {
            let _ = t.join();
        }
        let (path, rec) = crate::repo::lock(&h.shared.current).clone();
        if let Err(e) = h.shared.locks.end(&path, &rec) {
            tracing::warn!(
                "could not remove the lock {path}: {e} (`mailvault unlock` removes it once stale)"
            );
        }
        let _ = h.shared.locks.store.flush();
    }
}

/// The live locks `found` that conflict with `rec` (whose earlier ids are `past`).
fn conflicts<'a>(
    found: &'a [FoundLock],
    rec: &LockRecord,
    past: &[String],
    stale: Duration,
) -> Vec<&'a FoundLock> {
    found
        .iter()
        .filter(|f| !f.is_stale(stale))
        .filter(|f| match &f.found {
            // A younger lock that released itself never went ahead of this one, which it
            // saw (a younger taker withdraws before an older one) or waited for: it is
            // over at once, not after the wait that guards an older one.
            Found::Lock(r) if f.releasing && r.rank() > rec.rank() => false,
            Found::Lock(r) => {
                r.lock != rec.lock && !past.contains(&r.lock) && (r.exclusive || rec.exclusive)
            }
            Found::Writer { .. } => rec.exclusive,
            Found::Ended { .. } => false,
            Found::Unreadable(e) => {
                tracing::warn!("ignoring {}: {e} (not a lock record)", f.path);
                false
            }
        })
        .collect()
}

/// Whether a conflicting lock goes before `rec` (a backup of an older mailvault always
/// does: it never withdraws).
fn older(f: &FoundLock, rec: &LockRecord) -> bool {
    match &f.found {
        Found::Lock(r) => r.rank() < rec.rank(),
        _ => true,
    }
}

/// The error of a taker that waited long enough, naming a holder it waited for.
fn locked(conflicts: &[&FoundLock], rec: &LockRecord) -> Error {
    let holder = conflicts
        .iter()
        .find(|f| !matches!(&f.found, Found::Lock(r) if r.rank() > rec.rank()))
        .or(conflicts.first())
        .map(|f| (f.path.clone(), f.describe()))
        .unwrap_or_default();
    Error::Locked {
        holder: holder.1,
        path: holder.0,
    }
}

/// Sleeps `pause` with jitter (not past `deadline`); the next pause, doubled up to 10 s.
fn wait(pause: Duration, deadline: Instant) -> Duration {
    let jitter = Duration::from_millis(rand::random::<u64>() % 200);
    let left = deadline.saturating_duration_since(Instant::now());
    std::thread::sleep((pause + jitter).min(left));
    (pause * 2).min(Duration::from_secs(10))
}

/// Deletes the records of locks that are over: ended ([`Found::Ended`]: left by
/// append-only hosts) or stale (a killed command's); returns how many. Called under the exclusive lock (prune): no
/// holder of a stale lock goes on. Live locks are left as they are.
pub(crate) fn remove_over(locks: &LockStore, stale: Duration) -> Result<u64> {
    let mut n = 0;
    for f in locks.list(None, false)? {
        if f.is_removable(stale) {
            match locks.store.delete(&f.path) {
                Ok(()) | Err(Error::NotFound(_)) => n += 1,
                Err(e) => return Err(e),
            }
        }
    }
    if n > 0 {
        locks.store.flush()?;
    }
    Ok(n)
}

/// Marks as [`Found::Ended`] the records of locks that are over, and each record of a
/// lock that has a newer one (a refresh by an append-only host).
///
/// A lock is over when its newest record is a `released` one written at least one and
/// a half of its refresh intervals ago (the longest interval any record of it promises),
/// and not dated in the future. Anyone with the key can write a released record for
/// another host's lock (an intruder on one mail server could so let a prune run beside
/// another server's backup and delete what it is writing); a holder that is still there
/// refreshes within its interval, so its newer record keeps the lock live.
fn end_superseded(found: &mut [FoundLock]) {
    use std::collections::HashMap;
    #[derive(Default)]
    struct Lock {
        /// The newest record that is not a release: (time, path).
        live: Option<(i64, String)>,
        /// The newest release's time.
        released: Option<i64>,
        refresh: u64,
    }
    let now = crate::now_unix();
    let mut locks: HashMap<String, Lock> = HashMap::new();
    for f in found.iter() {
        if let Found::Lock(r) = &f.found {
            let l = locks.entry(r.lock.clone()).or_default();
            l.refresh = l.refresh.max(r.refresh_secs);
            if r.released {
                // One dated in the future is no one's: it would keep the lock live forever.
                if r.time <= now {
                    l.released = l.released.max(Some(r.time));
                }
            } else if l
                .live
                .as_ref()
                .is_none_or(|(t, p)| (r.time, &f.path) > (*t, p))
            {
                l.live = Some((r.time, f.path.clone()));
            }
        }
    }
    for f in found.iter_mut() {
        let Found::Lock(r) = &f.found else { continue };
        let l = &locks[&r.lock];
        let refresh = match l.refresh {
            0 => REFRESH.as_secs(),
            n => n,
        } as i64;
        let over = match (l.released, &l.live) {
            (None, _) => false,
            (Some(_), None) => true,
            (Some(t), Some((live, _))) => t >= *live && now - t >= refresh * 3 / 2,
        };
        let newest = matches!(&l.live, Some((_, p)) if *p == f.path);
        if over || !newest {
            f.found = Found::Ended {
                lock: r.lock.clone(),
            };
        } else {
            f.releasing = l.released.is_some();
        }
    }
}

/// What [`Repository::unlock`](crate::repo::Repository::unlock) removed and left.
#[derive(Debug, Default, Serialize)]
pub struct UnlockReport {
    /// Records removed.
    pub removed: Vec<String>,
    /// Live locks left in place (not with `remove_all`), described.
    pub kept: Vec<String>,
}

/// Removes stale locks, ended locks' records and stale `writers/` records, or every lock
/// with `remove_all`. Files that are not records are left alone (and listed as kept). An
/// append-only host deletes nothing: it ends each stale lock by a `released` record, and
/// refuses `remove_all`, which would end live ones.
pub(crate) fn unlock(locks: &LockStore, remove_all: bool, stale: Duration) -> Result<UnlockReport> {
    if remove_all && locks.append_only {
        return Err(Error::AppendOnly {
            what: "unlock --remove-all".into(),
        });
    }
    let mut rep = UnlockReport::default();
    for f in locks.list(None, true)? {
        let junk = matches!(f.found, Found::Unreadable(_));
        if locks.append_only {
            match &f.found {
                // One released already (its release not yet counted) needs no second.
                Found::Lock(r) if f.is_stale(stale) && !f.releasing => {
                    locks.end(&f.path, r)?;
                    rep.removed.push(f.path);
                }
                Found::Ended { .. } => {}
                _ => rep.kept.push(format!("{}: {}", f.path, f.describe())),
            }
        } else if !junk && (remove_all || f.is_removable(stale)) {
            locks.store.delete(&f.path)?;
            rep.removed.push(f.path);
        } else {
            rep.kept.push(format!("{}: {}", f.path, f.describe()));
        }
    }
    locks.store.flush()?;
    Ok(rep)
}

/// A backup in progress, as recorded in `writers/<random id>` (sealed JSON); also the
/// record of a migration in progress (`crate::ops::migrate`).
#[derive(Serialize, Deserialize)]
pub(crate) struct WriterRecord {
    pub(crate) hostname: String,
    pub(crate) pid: u32,
    /// Unix seconds.
    pub(crate) started: i64,
}

impl WriterRecord {
    /// The record of this process, now.
    pub(crate) fn this_process() -> WriterRecord {
        WriterRecord {
            hostname: crate::hostname(),
            pid: std::process::id(),
            started: crate::now_unix(),
        }
    }

    /// Whether its writer is gone: on this host and no such process, or older than a day.
    pub(crate) fn gone(&self) -> bool {
        crate::now_unix() - self.started > WRITER_MAX_AGE_SECS
            || (self.hostname == crate::hostname()
                && !std::path::Path::new(&format!("/proc/{}", self.pid)).exists()
                && std::path::Path::new("/proc/self").exists())
    }
}

/// A writer record older than this belongs to a writer that is gone, wherever it ran.
const WRITER_MAX_AGE_SECS: i64 = 24 * 3600;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::MemoryStore;

    fn locks() -> (Arc<MemoryStore>, LockStore) {
        let store = Arc::new(MemoryStore::new());
        let ls = LockStore {
            store: store.clone(),
            key: MasterKey::random(),
            version: Version::V2,
            append_only: false,
        };
        (store, ls)
    }

    /// Locks of an append-only host, over a store that refuses deletes and counts the
    /// requests that reach it; and the same store as a host that may delete sees it.
    fn append_only_locks() -> (Arc<crate::store::Metered>, LockStore, LockStore) {
        let counted = Arc::new(crate::store::Metered::new(Arc::new(MemoryStore::new())));
        let key = MasterKey::random();
        let ls = LockStore {
            store: Arc::new(crate::store::AppendOnly::new(counted.clone())),
            key: key.clone(),
            version: Version::V2,
            append_only: true,
        };
        let maintenance = LockStore {
            store: counted.clone(),
            key,
            version: Version::V2,
            append_only: false,
        };
        (counted, ls, maintenance)
    }

    fn fast(wait_ms: u64) -> LockOptions {
        LockOptions {
            wait: Duration::from_millis(wait_ms),
            refresh: Duration::from_millis(50),
            stale: Duration::from_secs(30),
            no_lock: false,
        }
    }

    /// A record as another process left it.
    fn plant(ls: &LockStore, rec: LockRecord) -> String {
        ls.put(&rec).unwrap()
    }

    fn record(exclusive: bool, host: &str, pid: u32, age: i64) -> LockRecord {
        let t = crate::now_unix() - age;
        LockRecord {
            hostname: host.into(),
            pid,
            time: t,
            created: t,
            exclusive,
            operation: if exclusive { "prune" } else { "backup" }.into(),
            lock: hex::encode(rand::random::<[u8; 16]>()),
            released: false,
            refresh_secs: 0,
        }
    }

    #[test]
    fn shared_locks_coexist_and_exclusive_ones_exclude() {
        let (store, ls) = locks();
        let a = RepoLock::acquire(ls.clone(), LockKind::Shared, "backup", &fast(0)).unwrap();
        let b = RepoLock::acquire(ls.clone(), LockKind::Shared, "restore", &fast(0)).unwrap();
        assert_eq!(store.list(LOCKS).unwrap().len(), 2);
        let e = RepoLock::acquire(ls.clone(), LockKind::Exclusive, "prune", &fast(300))
            .unwrap_err()
            .to_string();
        assert!(e.contains("locked by") && e.contains("on host"), "{e}");
        // The refused one withdrew its record.
        assert_eq!(store.list(LOCKS).unwrap().len(), 2);
        drop((a, b));
        assert!(store.list(LOCKS).unwrap().is_empty());
        let p = RepoLock::acquire(ls.clone(), LockKind::Exclusive, "prune", &fast(0)).unwrap();
        let e = RepoLock::acquire(ls.clone(), LockKind::Shared, "backup", &fast(0))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("locked exclusively by prune on host")
                && e.contains(&format!("(pid {})", std::process::id())),
            "{e}"
        );
        drop(p);
        RepoLock::acquire(ls, LockKind::Shared, "backup", &fast(0)).unwrap();
    }

    #[test]
    fn a_waiting_lock_gets_the_repository_when_the_holder_ends() {
        let (_, ls) = locks();
        let p = RepoLock::acquire(ls.clone(), LockKind::Exclusive, "prune", &fast(0)).unwrap();
        let t = std::thread::spawn({
            let ls = ls.clone();
            move || RepoLock::acquire(ls, LockKind::Shared, "backup", &fast(20_000)).map(|_| ())
        });
        std::thread::sleep(Duration::from_millis(500));
        drop(p);
        t.join().unwrap().unwrap();
    }

    #[test]
    fn locks_are_refreshed_and_stale_ones_are_ignored_and_unlocked() {
        let (store, ls) = locks();
        let l = RepoLock::acquire(ls.clone(), LockKind::Shared, "check", &fast(0)).unwrap();
        let first = l.path().unwrap();
        std::thread::sleep(Duration::from_millis(300));
        let now = l.path().unwrap();
        assert_ne!(first, now, "not refreshed");
        assert!(store.get(&first).is_err(), "the old record stays");
        assert_eq!(store.list(LOCKS).unwrap().len(), 1);
        l.verify().unwrap();
        drop(l);
        // Stale: not refreshed for too long (another host), or a gone process here.
        let old = plant(&ls, record(true, "elsewhere", 1, 3600));
        let gone = plant(&ls, record(true, &crate::hostname(), 4_000_000_000, 0));
        let live = plant(&ls, record(false, "elsewhere", 1, 0));
        store.put("locks/junk", b"x").unwrap();
        // Neither stale exclusive lock stops a backup.
        drop(RepoLock::acquire(ls.clone(), LockKind::Shared, "backup", &fast(0)).unwrap());
        let rep = unlock(&ls, false, STALE).unwrap();
        let mut removed = rep.removed.clone();
        removed.sort();
        let mut want = vec![old, gone];
        want.sort();
        assert_eq!(removed, want);
        assert_eq!(rep.kept.len(), 2, "{:?}", rep.kept);
        assert!(store.get(&live).is_ok());
        let rep = unlock(&ls, true, STALE).unwrap();
        assert_eq!(rep.removed, [live]);
        assert_eq!(store.list(LOCKS).unwrap().len(), 1, "junk is left alone");
    }

    #[test]
    fn an_older_backup_record_is_a_shared_lock() {
        let (_, ls) = locks();
        let w = WriterRecord::this_process();
        let json = serde_json::to_vec(&w).unwrap();
        ls.store
            .put(
                "writers/abc",
                &seal_as(&ls.key, ls.version, Object::Writer("abc"), &json),
            )
            .unwrap();
        RepoLock::acquire(ls.clone(), LockKind::Shared, "backup", &fast(0)).unwrap();
        let e = RepoLock::acquire(ls, LockKind::Exclusive, "prune", &fast(0))
            .unwrap_err()
            .to_string();
        assert!(e.contains("by backup on host"), "{e}");
    }

    /// Many takers at once, each of either kind: never two holders when one is
    /// exclusive, and every one ends up holding the lock.
    #[test]
    fn takers_that_start_together_all_get_through_one_exclusive_at_a_time() {
        race(&locks().1);
    }

    /// Six takers on `ls` at once, every third exclusive: asserts that an exclusive
    /// holder is alone and that every taker gets the lock.
    fn race(ls: &LockStore) {
        let active = Arc::new(Mutex::new((0u32, 0u32))); // (shared, exclusive)
        std::thread::scope(|s| {
            for i in 0..6 {
                let ls = ls.clone();
                let active = active.clone();
                s.spawn(move || {
                    let kind = match i % 3 {
                        0 => LockKind::Exclusive,
                        _ => LockKind::Shared,
                    };
                    let l = RepoLock::acquire(ls, kind, "t", &fast(60_000)).unwrap();
                    let count = |d: i32| {
                        let mut a = crate::repo::lock(&active);
                        let n = match kind {
                            LockKind::Exclusive => &mut a.1,
                            LockKind::Shared => &mut a.0,
                        };
                        *n = n.wrapping_add_signed(d);
                        assert!(a.1 == 0 || (a.1 == 1 && a.0 == 0), "{a:?}");
                    };
                    count(1);
                    std::thread::sleep(Duration::from_millis(100));
                    count(-1);
                    drop(l);
                });
            }
        });
    }

    #[test]
    fn an_append_only_host_locks_without_deleting_and_maintenance_clears_the_records() {
        let (counted, ls, maintenance) = append_only_locks();
        let live = |ls: &LockStore| {
            let f = ls.list(None, true).unwrap();
            (f.iter())
                .filter(|f| matches!(f.found, Found::Lock(_)) && !f.is_stale(STALE))
                .count()
        };
        let a = RepoLock::acquire(ls.clone(), LockKind::Shared, "backup", &fast(0)).unwrap();
        let first = a.path().unwrap();
        std::thread::sleep(Duration::from_millis(300));
        assert_ne!(a.path().unwrap(), first, "not refreshed");
        assert!(
            counted.get(&first).is_ok(),
            "an append-only host deletes no record"
        );
        assert_eq!(live(&ls), 1, "one lock however many records it has");
        // Its older records do not stop a second shared lock; an exclusive one waits.
        let b = RepoLock::acquire(ls.clone(), LockKind::Shared, "restore", &fast(0)).unwrap();
        let e = RepoLock::acquire(ls.clone(), LockKind::Exclusive, "prune", &fast(300))
            .unwrap_err()
            .to_string();
        assert!(e.contains("locked by"), "{e}");
        std::thread::sleep(Duration::from_millis(2100));
        assert_eq!(live(&ls), 2, "the refused one ended its record");
        drop((a, b));
        assert_eq!(live(&ls), 0, "both ended by a record");
        assert!(counted.list(LOCKS).unwrap().len() > 4);
        let p = RepoLock::acquire(ls.clone(), LockKind::Exclusive, "prune", &fast(0)).unwrap();
        drop(p);
        assert_eq!(
            counted.counts().delete,
            0,
            "no delete ever reached the store"
        );
        // Stale locks: ended by a record, never deleted; --remove-all is refused.
        let old = plant(&ls, record(true, "elsewhere", 1, 3600));
        let records = counted.list(LOCKS).unwrap().len();
        let rep = unlock(&ls, false, STALE).unwrap();
        assert!(rep.removed.contains(&old), "{rep:?}");
        assert!(
            counted.list(LOCKS).unwrap().len() > records,
            "ended by a record"
        );
        let e = unlock(&ls, true, STALE).unwrap_err();
        assert!(matches!(e, Error::AppendOnly { .. }), "{e}");
        assert_eq!(counted.counts().delete, 0);
        // A host that may delete removes every ended record; a live lock stays.
        let slow = LockOptions {
            refresh: Duration::from_secs(60),
            ..fast(0)
        };
        let held = RepoLock::acquire(ls.clone(), LockKind::Shared, "backup", &slow).unwrap();
        let rep = unlock(&maintenance, false, STALE).unwrap();
        assert!(rep.removed.len() > 4, "{rep:?}");
        assert_eq!(counted.list(LOCKS).unwrap().len(), 1);
        assert_eq!(counted.list(LOCKS).unwrap()[0].path, held.path().unwrap());
    }

    /// The race of the test above, with append-only takers: ended records and new ids
    /// after a withdrawal never let two exclusive holders in.
    #[test]
    fn append_only_takers_that_start_together_all_get_through_one_exclusive_at_a_time() {
        let (counted, ls, _) = append_only_locks();
        race(&ls);
        assert_eq!(counted.counts().delete, 0);
    }

    #[test]
    fn a_release_counts_once_aged_and_a_forged_one_never() {
        let (_, ls, _) = append_only_locks();
        let prune = || RepoLock::acquire(ls.clone(), LockKind::Exclusive, "prune", &fast(0));
        // Two seconds: a release counts 3 s after it, whatever second boundary the
        // first attempt below falls after (with 1 s it could count at once).
        // Older than the prunes below (taken a second before them): a younger lock's
        // release counts at once.
        let mut rec = record(false, "mx2", 1, 1);
        rec.refresh_secs = 2;
        plant(&ls, rec.clone());
        let release = |r: &LockRecord, time: i64| {
            let mut r = r.clone();
            r.released = true;
            r.time = time;
            plant(&ls, r)
        };
        release(&rec, crate::now_unix());
        let e = prune().unwrap_err().to_string();
        assert!(e.contains("locked by backup on host mx2"), "{e}");
        std::thread::sleep(Duration::from_millis(3100));
        drop(prune().unwrap());
        // A live lock of mx3 with forged releases.
        let mut live = record(false, "mx3", 1, 1);
        live.refresh_secs = 2;
        plant(&ls, live.clone());
        release(&live, crate::now_unix() - 3600);
        release(&live, crate::now_unix() + 3600);
        std::thread::sleep(Duration::from_millis(3100));
        let e = prune().unwrap_err().to_string();
        assert!(e.contains("locked by backup on host mx3"), "{e}");
    }

    /// A command that has exited but was not waited for (a zombie) holds no lock: its
    /// parent (a test, a cron wrapper) may reap it only later.
    #[test]
    fn an_exited_process_not_yet_waited_for_is_gone() {
        let mut running = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        let mut exited = std::process::Command::new("true").spawn().unwrap();
        std::thread::sleep(Duration::from_millis(300));
        assert!(process_exists(running.id()));
        assert!(!process_exists(exited.id()), "a zombie runs nothing");
        assert!(!process_exists(4_000_000_000));
        running.kill().unwrap();
        let _ = running.wait();
        let _ = exited.wait();
    }
}
