//! What every request shares: the repository and the searcher over it (a [`Live`],
//! opened again when the repository changed and closed when unused), the admin token, the
//! sessions and the login limiter.
//!
//! A long-running server must not answer from the repository as it was at start: a
//! backup adds snapshots whose blobs the index read at open does not know, `index` adds
//! splits, a prune replaces index files. So the [`Live`] in use is checked at most every
//! `recheck` (a snapshot it does not know, an index file gone) and opened again when it
//! is stale; requests still running keep the one they started with. It holds a read lock
//! (a prune waits while it lives), so one unused for `idle_close` is closed, and opened
//! again by the next request.

use crate::auth::{LoginLimiter, Sessions};
use crate::restore::RestoreTo;
use crate::token::AdminToken;
use mailvault_core::search::exec::Searcher;
use mailvault_core::{Error, Repository, Result};
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

self_cell::self_cell!(
    /// A repository as opened once, and the searcher borrowing it.
    struct Opened {
        owner: Repository,
        #[covariant]
        dependent: Searcher,
    }
);

/// The repository and its searcher as opened at one time, and the snapshots it knew.
pub struct Live {
    opened: Opened,
    snapshots: BTreeSet<String>,
}

impl Live {
    /// Opens the searcher over `repo` (a read lock, the index's splits copied to `cache`).
    pub fn open(repo: Repository, cache: &std::path::Path) -> Result<Live> {
        let snapshots = snapshot_ids(&repo)?;
        let opened = Opened::try_new(repo, |r| Searcher::open(r, cache))?;
        Ok(Live { opened, snapshots })
    }

    pub fn repo(&self) -> &Repository {
        self.opened.borrow_owner()
    }

    pub fn searcher(&self) -> &Searcher<'_> {
        self.opened.borrow_dependent()
    }

    /// Whether the repository is still as this was opened on: the same snapshots, and
    /// every index file read at open still there.
    fn is_current(&self) -> Result<bool> {
        Ok(self.repo().index_is_current()? && snapshot_ids(self.repo())? == self.snapshots)
    }
}

fn snapshot_ids(repo: &Repository) -> Result<BTreeSet<String>> {
    Ok((repo.snapshots()?.list.iter())
        .map(|s| s.id.to_hex())
        .collect())
}

/// Opens the repository again, as the command line opened it first.
pub type Reopen = Box<dyn Fn() -> std::result::Result<Repository, String> + Send + Sync>;

/// How the [`Live`] is kept fresh.
pub struct Freshness {
    pub reopen: Reopen,
    /// Check the repository for changes at most this often.
    pub recheck: Duration,
    /// Close the repository after this long without a request.
    pub idle_close: Duration,
}

/// The server's shared state (cheap to clone: an `Arc`).
#[derive(Clone)]
pub struct AppState(pub Arc<Inner>);

pub struct Inner {
    current: Mutex<Current>,
    /// Held while a [`Live`] is checked or opened: one at a time.
    opening: Mutex<()>,
    fresh: Freshness,
    pub token: AdminToken,
    /// Where mail users' passwords are checked (`--user-auth`); `None`: the admin alone
    /// logs in.
    pub users: Option<crate::users::UserAuth>,
    /// The accounts each mail user may also see (`--user-accounts`, read at each login).
    pub user_accounts: Option<PathBuf>,
    pub sessions: Mutex<Sessions>,
    pub limiter: Mutex<LoginLimiter>,
    /// Signs the login form's tokens.
    pub login_key: crate::auth::LoginKey,
    pub page_size: usize,
    /// A source whose last backup is older is stale (`--stale-after`).
    pub stale_after: Duration,
    /// The search cache (the splits' copies and the places map).
    pub cache: PathBuf,
    /// Served over TLS: cookies are `Secure`, answers carry HSTS.
    pub secure: bool,
    /// Reverse proxies whose `X-Forwarded-For` names the client (`--trusted-proxy`).
    pub trusted_proxies: Vec<std::net::IpAddr>,
    /// The sorted messages of the folders paged through last.
    pub folders: Mutex<crate::read::FolderCache>,
    /// What each snapshot holds of the accounts mail users see.
    pub held: crate::read::Held,
    /// What the IMAP view's sessions share (its header cache, the mailboxes opened last).
    pub imap: crate::imap::Shared,
    /// Where restores may go (`--restore-imap`, `--restore-dir`).
    pub restore: crate::restore::RestoreTo,
    /// The restore jobs.
    pub jobs: crate::jobs::Jobs,
    /// HTTP requests answered, by method, route and status (`/metrics`).
    pub requests: crate::requests::Requests,
    /// The audit events not written to the repository yet.
    pub audit: crate::audit::AuditLog,
    /// Searches running at once, at most one per core: a search is CPU work of tens of
    /// milliseconds, so more at once only queue on the cores while each holds its hits
    /// in memory (20 clients searching at once took `serve` to 365 MB).
    pub searches: tokio::sync::Semaphore,
}

/// Where mail users' passwords are checked, and the file of the accounts each may also
/// see.
pub type Users = (Option<crate::users::UserAuth>, Option<PathBuf>);

struct Current {
    live: Option<Arc<Live>>,
    checked: Instant,
    used: Instant,
}

impl AppState {
    pub fn new(
        live: Live,
        fresh: Freshness,
        (token, (users, user_accounts), restore): (AdminToken, Users, RestoreTo),
        (page_size, stale_after): (usize, Duration),
        cache: PathBuf,
        (secure, trusted_proxies): (bool, Vec<std::net::IpAddr>),
    ) -> AppState {
        let now = Instant::now();
        let jobs = crate::jobs::Jobs::open(cache.join(crate::jobs::JOBS_FILE));
        AppState(Arc::new(Inner {
            current: Mutex::new(Current {
                live: Some(Arc::new(live)),
                checked: now,
                used: now,
            }),
            opening: Mutex::new(()),
            fresh,
            token,
            users,
            user_accounts,
            sessions: Mutex::new(Sessions::default()),
            limiter: Mutex::new(LoginLimiter::default()),
            login_key: Default::default(),
            page_size: page_size.clamp(1, 1000),
            stale_after,
            cache,
            secure,
            trusted_proxies,
            folders: Mutex::new(Default::default()),
            held: Default::default(),
            imap: Default::default(),
            restore,
            jobs,
            audit: Default::default(),
            requests: Default::default(),
            searches: tokio::sync::Semaphore::new(
                std::thread::available_parallelism().map_or(2, |n| n.get().clamp(1, 8)),
            ),
        }))
    }

    pub fn sessions(&self) -> MutexGuard<'_, Sessions> {
        lock(&self.0.sessions)
    }

    pub fn limiter(&self) -> MutexGuard<'_, LoginLimiter> {
        lock(&self.0.limiter)
    }

    /// The [`Live`] to answer with (blocking: it may check or open the repository).
    pub fn live(&self) -> Result<Arc<Live>> {
        let now = Instant::now();
        {
            let mut c = lock(&self.0.current);
            c.used = now;
            if let Some(l) = &c.live {
                if now.duration_since(c.checked) < self.0.fresh.recheck {
                    return Ok(l.clone());
                }
            }
        }
        let _one = lock(&self.0.opening);
        let held = lock(&self.0.current).live.clone();
        if let Some(l) = held {
            if l.is_current()? {
                lock(&self.0.current).checked = Instant::now();
                return Ok(l);
            }
        }
        let repo = (self.0.fresh.reopen)().map_err(Error::Internal)?;
        let fresh = Arc::new(Live::open(repo, &self.0.cache)?);
        lock(&self.0.folders).clear();
        self.0.imap.clear();
        let mut c = lock(&self.0.current);
        // The one replaced is dropped when its last request ends.
        c.live = Some(fresh.clone());
        c.checked = Instant::now();
        Ok(fresh)
    }

    /// Takes the [`Live`] away when no request came for `idle_close` (dropped by the
    /// caller, outside the lock: dropping gives back the read lock).
    pub fn take_if_idle(&self) -> Option<Arc<Live>> {
        let _one = lock(&self.0.opening);
        let mut c = lock(&self.0.current);
        match Instant::now().duration_since(c.used) >= self.0.fresh.idle_close {
            true => c.live.take(),
            false => None,
        }
    }

    /// How often the idle check runs.
    pub fn idle_tick(&self) -> Duration {
        (self.0.fresh.idle_close / 4).clamp(Duration::from_millis(200), Duration::from_secs(15))
    }
}

/// A mutex's guard, poisoned or not: what each of the server's mutexes guards stays
/// consistent at every step (the one helper every module uses).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
