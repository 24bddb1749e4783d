//! A [`Store`] wrapper that retries transient failures with exponential backoff and full
//! jitter, and counts the retries for the report.
//!
//! Only errors for which [`Error::is_transient`] holds are retried (5xx, `SlowDown`,
//! timeouts, reset connections, an unreachable service); authentication, missing bucket,
//! not found, already exists and every other error are returned at once. An unreachable
//! service is retried only once some request through this wrapper has reached it: a wrong
//! endpoint fails fast with one clear error, a service restarting mid-run is waited for.
//!
//! A storage service that fails every request is given up on as a whole, not request by
//! request: when every request through this wrapper has failed transiently for
//! [`RetryPolicy::give_up_after`] (and at least [`RetryPolicy::give_up_failures`] in a
//! row), the breaker opens, every request waiting or to come fails at once with
//! [`BackendKind::Down`], and the operation ends within a bounded time with one error
//! instead of retrying each of its thousands of reads for an hour. One success closes
//! the streak.
//!
//! A put whose earlier attempt failed transiently may have been stored all the same (the
//! answer was lost): when the retry finds the object there, it reads it back, and the
//! same bytes are a success. Not every object is content-named (`writers/<name>`,
//! snapshots), so the bytes are compared rather than assumed.

use super::{Backend, ByteRange, Handle, Hint, Listing, ObjectInfo, Store, WriteMode};
use crate::error::{BackendKind, Error, Result};
use rand::Rng;
use serde::Serialize;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// How often and how long to retry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts in all, the first included.
    pub max_attempts: u32,
    /// The backoff ceiling of the first retry; each further retry doubles it.
    pub base: Duration,
    /// The largest backoff ceiling.
    pub cap: Duration,
    /// How long every request may fail (no success in between) before the storage is
    /// taken for down and the run stops.
    pub give_up_after: Duration,
    /// Failed attempts in a row the breaker needs besides the time, so that one slow
    /// request alone never opens it.
    pub give_up_failures: u64,
}

/// The detail of the error every request fails with once the storage was given up on.
const GIVEN_UP: &str = "not sent: the storage was given up on";

/// How long a storage service may fail every request before a run gives up on it, by
/// default.
pub const DEFAULT_GIVE_UP_AFTER: Duration = Duration::from_secs(120);

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 8,
            base: Duration::from_millis(100),
            cap: Duration::from_secs(10),
            give_up_after: DEFAULT_GIVE_UP_AFTER,
            give_up_failures: 8,
        }
    }
}

impl RetryPolicy {
    /// The wait before retry number `retry` (0 for the first): uniformly random between
    /// zero and `min(cap, base * 2^retry)` ("full jitter").
    pub fn backoff(&self, retry: u32) -> Duration {
        let ceiling = self
            .base
            .checked_mul(1u32.checked_shl(retry).unwrap_or(u32::MAX))
            .unwrap_or(self.cap)
            .min(self.cap);
        let nanos = u64::try_from(ceiling.as_nanos()).unwrap_or(u64::MAX);
        Duration::from_nanos(rand::thread_rng().gen_range(0..=nanos))
    }
}

/// Retries made, in all and by verb (as [`super::RequestCounts`] names them).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct RetryStats {
    pub total: u64,
    /// Whole and ranged reads.
    pub get: u64,
    /// Puts and replaces.
    pub put: u64,
    pub list: u64,
    /// Stats.
    pub head: u64,
    pub delete: u64,
}

#[derive(Clone, Copy, Debug)]
enum Verb {
    Get,
    Put,
    List,
    Head,
    Delete,
}

impl std::fmt::Display for Verb {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Verb::Get => "GET",
            Verb::Put => "PUT",
            Verb::List => "LIST",
            Verb::Head => "HEAD",
            Verb::Delete => "DELETE",
        })
    }
}

#[derive(Default)]
struct Counters {
    get: AtomicU64,
    put: AtomicU64,
    list: AtomicU64,
    head: AtomicU64,
    delete: AtomicU64,
}

/// The streak of failures the breaker watches, shared by every request.
#[derive(Default)]
struct Breaker {
    /// When the streak began (the first failure since the last success).
    since: Option<Instant>,
    /// Failed attempts in the streak.
    failures: u64,
    /// Set when the breaker opened: what every request now fails with.
    open: Option<String>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A poisoned lock only means another thread panicked; the streak is still whole.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Retries transient failures of the inner store (see the module docs).
pub struct Retry {
    inner: Arc<dyn Backend>,
    policy: RetryPolicy,
    /// Whether some request has reached the service.
    reached: AtomicBool,
    counts: Counters,
    breaker: Mutex<Breaker>,
}

impl Retry {
    pub fn new(inner: Arc<dyn Backend>, policy: RetryPolicy) -> Retry {
        Retry {
            inner,
            policy,
            reached: AtomicBool::new(false),
            counts: Counters::default(),
            breaker: Mutex::new(Breaker::default()),
        }
    }

    /// Why the storage was given up on, once it was: every request failed for the
    /// policy's time (see the module docs).
    pub fn given_up(&self) -> Option<String> {
        lock(&self.breaker).open.clone()
    }

    /// The error every request fails with once the breaker is open: short, since every
    /// item left fails with it; [`Retry::given_up`] says why, once.
    fn down(&self) -> Option<Error> {
        self.given_up()?;
        Some(Error::backend(
            self.inner.location(),
            BackendKind::Down,
            GIVEN_UP,
        ))
    }

    /// Notes a request's result in the breaker's streak.
    fn note(&self, failed: Option<&Error>) {
        let mut b = lock(&self.breaker);
        let Some(e) = failed else {
            if b.open.is_none() {
                (b.since, b.failures) = (None, 0);
            }
            return;
        };
        let since = *b.since.get_or_insert_with(Instant::now);
        b.failures += 1;
        let failing = since.elapsed();
        if b.open.is_none()
            && b.failures >= self.policy.give_up_failures
            && failing >= self.policy.give_up_after
        {
            let why = format!(
                "the storage failed every request for {} s ({} attempts in a row, the last: {e}): stopped; what was done is kept, run the command again once the storage answers",
                failing.as_secs(),
                b.failures
            );
            tracing::debug!("{why}");
            b.open = Some(why);
        }
    }

    /// The retries so far.
    pub fn stats(&self) -> RetryStats {
        let c = &self.counts;
        let s = RetryStats {
            total: 0,
            get: c.get.load(Relaxed),
            put: c.put.load(Relaxed),
            list: c.list.load(Relaxed),
            head: c.head.load(Relaxed),
            delete: c.delete.load(Relaxed),
        };
        RetryStats {
            total: s.get + s.put + s.list + s.head + s.delete,
            ..s
        }
    }

    fn counter(&self, verb: Verb) -> &AtomicU64 {
        match verb {
            Verb::Get => &self.counts.get,
            Verb::Put => &self.counts.put,
            Verb::List => &self.counts.list,
            Verb::Head => &self.counts.head,
            Verb::Delete => &self.counts.delete,
        }
    }

    /// Runs `f` until it succeeds, fails for good, or the attempts are used up; the
    /// error returned is the inner store's own.
    fn run<T>(&self, verb: Verb, path: &str, mut f: impl FnMut() -> Result<T>) -> Result<T> {
        let mut attempt = 1;
        loop {
            if let Some(down) = self.down() {
                return Err(down);
            }
            let e = match f() {
                Ok(v) => {
                    self.reached.store(true, Relaxed);
                    self.note(None);
                    return Ok(v);
                }
                Err(e) => e,
            };
            if e.is_transient() {
                self.note(Some(&e));
            } else {
                self.note(None);
            }
            let unreachable = matches!(
                e,
                Error::Backend {
                    kind: BackendKind::Unreachable,
                    ..
                }
            );
            if !matches!(e, Error::Backend { .. }) {
                // The service answered (not found, already exists…).
                self.reached.store(true, Relaxed);
            }
            let retry = e.is_transient()
                && attempt < self.policy.max_attempts
                && (!unreachable || self.reached.load(Relaxed));
            if !retry {
                if e.is_transient() && attempt > 1 {
                    // The operation reports the item the request was for.
                    tracing::debug!("{verb} {path}: giving up after {attempt} attempts: {e}");
                }
                return Err(e);
            }
            let wait = self.policy.backoff(attempt - 1);
            tracing::info!(
                "{verb} {path}: {e}; retrying in {} ms (attempt {} of {})",
                wait.as_millis(),
                attempt + 1,
                self.policy.max_attempts,
            );
            self.counter(verb).fetch_add(1, Relaxed);
            std::thread::sleep(wait);
            attempt += 1;
        }
    }

    /// A put-if-absent `f` of `data` at `path`, retried; an object found there after a
    /// failed attempt is read back and, holding `data`, taken for that attempt's.
    fn put_once(&self, path: &str, data: &[u8], mut f: impl FnMut() -> Result<()>) -> Result<()> {
        let mut failed = false;
        self.run(Verb::Put, path, || match f() {
            Err(Error::AlreadyExists(p)) if failed => {
                match self.run(Verb::Get, path, || self.inner.get(path))? == data {
                    true => {
                        tracing::info!("PUT {path}: stored by an earlier attempt");
                        Ok(())
                    }
                    false => Err(Error::AlreadyExists(p)),
                }
            }
            r => {
                failed |= r.is_err();
                r
            }
        })
    }
}

impl Backend for Retry {
    fn write(&self, h: Handle<'_>, data: &[u8], mode: WriteMode) -> Result<()> {
        let write = || self.inner.write(h, data, mode);
        match mode {
            WriteMode::Create => self.put_once(h.path(), data, write),
            WriteMode::Replace => self.run(Verb::Put, h.path(), write),
        }
    }
    fn read(&self, h: Handle<'_>, range: Option<ByteRange>) -> Result<Vec<u8>> {
        self.run(Verb::Get, h.path(), || self.inner.read(h, range))
    }
    fn listing(&self, prefix: &str, from: Listing) -> Result<Vec<ObjectInfo>> {
        self.run(Verb::List, prefix, || self.inner.listing(prefix, from))
    }
    fn remove(&self, h: Handle<'_>) -> Result<()> {
        self.run(Verb::Delete, h.path(), || self.inner.remove(h))
    }
    fn size(&self, h: Handle<'_>) -> Result<u64> {
        self.run(Verb::Head, h.path(), || self.inner.size(h))
    }
    fn location(&self) -> String {
        self.inner.location()
    }
    fn flush(&self) -> Result<()> {
        self.inner.flush()
    }
    fn local_dir(&self) -> Option<std::path::PathBuf> {
        self.inner.local_dir()
    }
    fn hint(&self, hint: Hint<'_>) {
        self.inner.hint(hint)
    }
}

/// The store's Object Lock calls with the same retries, backoff and breaker as every other
/// request of the run (one retry loop: [`Retry`]'s), counted in its stats. Every call is
/// idempotent (a retention or a hold set twice, a version deleted twice: absent is fine).
pub struct RetriedCalls {
    retry: Arc<Retry>,
    inner: Arc<dyn super::ObjectLock>,
}

impl RetriedCalls {
    pub fn new(retry: Arc<Retry>, inner: Arc<dyn super::ObjectLock>) -> RetriedCalls {
        RetriedCalls { retry, inner }
    }
}

impl super::ObjectLock for RetriedCalls {
    fn policy(&self) -> Result<Option<super::LockPolicy>> {
        self.retry
            .run(Verb::Get, "?object-lock", || self.inner.policy())
    }
    fn versions(&self, prefix: &str) -> Result<Vec<super::object_lock::Version>> {
        self.retry
            .run(Verb::List, prefix, || self.inner.versions(prefix))
    }
    fn retention(&self, path: &str, version: Option<&str>) -> Result<super::Retention> {
        self.retry
            .run(Verb::Head, path, || self.inner.retention(path, version))
    }
    fn extend(&self, path: &str, mode: super::LockMode, until: jiff::Timestamp) -> Result<()> {
        self.retry
            .run(Verb::Put, path, || self.inner.extend(path, mode, until))
    }
    fn legal_hold(&self, path: &str, on: bool) -> Result<()> {
        self.retry
            .run(Verb::Put, path, || self.inner.legal_hold(path, on))
    }
    fn read_version(&self, path: &str, version: &str) -> Result<Vec<u8>> {
        self.retry
            .run(Verb::Get, path, || self.inner.read_version(path, version))
    }
    fn remove_version(&self, path: &str, version: &str) -> Result<()> {
        self.retry.run(Verb::Delete, path, || {
            self.inner.remove_version(path, version)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{FaultyStore, MemoryStore, PackKind};

    /// An Object Lock that fails its first `fail` calls with `kind`.
    struct Flaky {
        calls: AtomicU64,
        fail: u64,
        kind: BackendKind,
    }

    impl crate::store::ObjectLock for Flaky {
        fn policy(&self) -> Result<Option<crate::store::LockPolicy>> {
            match self.calls.fetch_add(1, Relaxed) < self.fail {
                true => Err(Error::backend("s3:x", self.kind, "HTTP 503")),
                false => Ok(None),
            }
        }
        fn versions(&self, _: &str) -> Result<Vec<crate::store::object_lock::Version>> {
            Ok(Vec::new())
        }
        fn retention(&self, _: &str, _: Option<&str>) -> Result<crate::store::Retention> {
            Ok(Default::default())
        }
        fn extend(&self, _: &str, _: crate::store::LockMode, _: jiff::Timestamp) -> Result<()> {
            Ok(())
        }
        fn legal_hold(&self, _: &str, _: bool) -> Result<()> {
            Ok(())
        }
        fn read_version(&self, _: &str, _: &str) -> Result<Vec<u8>> {
            Ok(Vec::new())
        }
        fn remove_version(&self, _: &str, _: &str) -> Result<()> {
            Ok(())
        }
    }

    #[test]
    fn object_lock_calls_are_retried_by_the_same_loop() {
        use crate::store::ObjectLock;
        let retry = Arc::new(Retry::new(Arc::new(MemoryStore::new()), fast()));
        let flaky = |fail, kind| {
            Arc::new(Flaky {
                calls: AtomicU64::new(0),
                fail,
                kind,
            })
        };
        let calls = RetriedCalls::new(retry.clone(), flaky(2, BackendKind::Transient));
        assert_eq!(calls.policy().unwrap(), None);
        assert_eq!(retry.stats().get, 2);
        let denied = RetriedCalls::new(retry.clone(), flaky(1, BackendKind::Auth));
        assert!(denied.policy().is_err(), "not retried");
        assert_eq!(retry.stats().total, 2);
    }

    fn fast() -> RetryPolicy {
        RetryPolicy {
            max_attempts: 8,
            base: Duration::from_millis(1),
            cap: Duration::from_millis(5),
            ..RetryPolicy::default()
        }
    }

    fn stack(faulty: FaultyStore) -> (Arc<FaultyStore>, Retry) {
        let f = Arc::new(faulty);
        (f.clone(), Retry::new(f, fast()))
    }

    #[test]
    fn passes_the_conformance_suite_over_a_flaky_store() {
        // Enough attempts that no request fails every one of them, however the
        // concurrent puts interleave.
        let f = Arc::new(FaultyStore::new(Arc::new(MemoryStore::new())).fail_every(3));
        let policy = RetryPolicy {
            max_attempts: 40,
            ..fast()
        };
        let r = Retry::new(f.clone(), policy);
        crate::store::conformance::run(&r);
        assert!(f.failures() > 10, "{} failures", f.failures());
        assert_eq!(r.stats().total, f.failures());
    }

    #[test]
    fn transient_failures_are_retried_and_counted_by_verb() {
        let mem = Arc::new(MemoryStore::new());
        mem.put("a", b"1").unwrap();
        let (f, r) = stack(FaultyStore::new(mem));
        f.fail_next(3, BackendKind::Transient);
        assert_eq!(r.get("a").unwrap(), b"1");
        f.fail_next(2, BackendKind::Transient);
        r.list("").unwrap();
        f.fail_next(1, BackendKind::Transient);
        r.stat("a").unwrap();
        f.fail_next(1, BackendKind::Transient);
        r.put("b", b"2").unwrap();
        f.fail_next(1, BackendKind::Transient);
        r.delete("b").unwrap();
        assert_eq!(
            r.stats(),
            RetryStats {
                total: 8,
                get: 3,
                put: 1,
                list: 2,
                head: 1,
                delete: 1,
            }
        );
    }

    #[test]
    fn gives_up_after_max_attempts_with_the_original_error() {
        let (f, r) = stack(FaultyStore::new(Arc::new(MemoryStore::new())));
        f.fail_next(100, BackendKind::Transient);
        match r.get("a") {
            Err(Error::Backend {
                kind: BackendKind::Transient,
                detail,
                ..
            }) => assert!(detail.contains("injected fault on a"), "{detail}"),
            other => panic!("{other:?}"),
        }
        assert_eq!(f.requests(), 8);
        assert_eq!(r.stats().get, 7);
    }

    #[test]
    fn permanent_errors_are_not_retried() {
        let mem = Arc::new(MemoryStore::new());
        mem.put("a", b"1").unwrap();
        let (f, r) = stack(FaultyStore::new(mem));
        for kind in [
            BackendKind::Auth,
            BackendKind::NoSuchBucket,
            BackendKind::NoConditionalPut,
            BackendKind::Tls,
            BackendKind::Other,
        ] {
            f.fail_next(1, kind);
            let before = f.requests();
            assert!(matches!(r.get("a"), Err(Error::Backend { kind: k, .. }) if k == kind));
            assert_eq!(f.requests(), before + 1, "{kind:?} retried");
        }
        assert!(matches!(r.get("nope"), Err(Error::NotFound(_))));
        assert!(matches!(r.put("a", b"1"), Err(Error::AlreadyExists(_))));
        assert_eq!(r.stats().total, 0);
    }

    #[test]
    fn an_unreachable_service_fails_fast_until_reached_once() {
        let mem = Arc::new(MemoryStore::new());
        mem.put("a", b"1").unwrap();
        let (f, r) = stack(FaultyStore::new(mem));
        // A wrong endpoint: one request, one error.
        f.fail_next(100, BackendKind::Unreachable);
        assert!(matches!(
            r.get("a"),
            Err(Error::Backend {
                kind: BackendKind::Unreachable,
                ..
            })
        ));
        assert_eq!(f.requests(), 1);
        // Once the service has answered, a restart is waited for.
        f.fail_next(0, BackendKind::Transient);
        r.get("a").unwrap();
        f.fail_next(3, BackendKind::Unreachable);
        assert_eq!(r.get("a").unwrap(), b"1");
        assert_eq!(r.stats().get, 3);
    }

    #[test]
    fn a_put_stored_by_a_failed_attempt_is_a_success() {
        // A put whose answer was lost is stored; its retry finds it.
        let mem = Arc::new(MemoryStore::new());
        let (f, r) = stack(FaultyStore::new(mem.clone()).fail_every(2));
        f.put("pad", b"").unwrap(); // request 1 passes; the next one fails after storing.
        r.put("writers/w", b"record").unwrap();
        assert_eq!(mem.get("writers/w").unwrap(), b"record");
        assert_eq!(r.stats().put, 1);
        // Other bytes under the same name are still refused.
        let (f, r) = stack(FaultyStore::new(mem.clone()));
        f.fail_next(1, BackendKind::Transient);
        assert!(matches!(
            r.put("writers/w", b"other"),
            Err(Error::AlreadyExists(p)) if p == "writers/w"
        ));
        // And a put that finds the object on its first attempt fails as before.
        assert!(matches!(
            r.put_pack("writers/w", b"record", PackKind::Data),
            Err(Error::AlreadyExists(_))
        ));
    }

    /// Issue 24 item 11: a store that fails every request is given up on as a whole once
    /// it has failed for the policy's time: every request after that, from any thread,
    /// fails at once (no more attempts reach it), and one success before that resets
    /// the streak.
    #[test]
    fn a_store_failing_every_request_is_given_up_on_as_a_whole() {
        let mem = Arc::new(MemoryStore::new());
        mem.put("a", b"1").unwrap();
        let f = Arc::new(FaultyStore::new(mem));
        let policy = RetryPolicy {
            give_up_after: Duration::from_millis(150),
            give_up_failures: 8,
            ..fast()
        };
        let r = Retry::new(f.clone(), policy);
        // Failures for less than the time, then a success: no breaker.
        f.fail_next(7, BackendKind::Transient);
        assert_eq!(r.get("a").unwrap(), b"1");
        assert!(r.given_up().is_none());
        // Dead storage: requests fail until the time is up, then all fail at once.
        f.fail_next(u64::MAX / 2, BackendKind::Transient);
        let started = Instant::now();
        let mut tried = 0;
        let down = loop {
            tried += 1;
            match r.get("a") {
                Err(Error::Backend {
                    kind: BackendKind::Down,
                    detail,
                    ..
                }) => break r.given_up().unwrap_or(detail),
                Err(e) => assert!(e.is_transient(), "{e}"),
                Ok(_) => panic!("a dead store answered"),
            }
            assert!(started.elapsed() < Duration::from_secs(10), "never gave up");
        };
        assert!(tried > 1, "{tried}");
        assert!(started.elapsed() >= Duration::from_millis(150));
        assert!(down.contains("failed every request"), "{down}");
        assert_eq!(r.given_up().as_deref(), Some(down.as_str()));
        let before = f.requests();
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    let e = r.put("b", b"2").unwrap_err();
                    assert!(
                        matches!(
                            e,
                            Error::Backend {
                                kind: BackendKind::Down,
                                ..
                            }
                        ),
                        "{e}"
                    );
                });
            }
        });
        assert_eq!(f.requests(), before, "requests reached a store given up on");
        assert!(!Error::backend("x", BackendKind::Down, "d").is_transient());
    }

    #[test]
    fn backoff_is_full_jitter_below_a_doubling_ceiling() {
        let p = RetryPolicy {
            max_attempts: 8,
            base: Duration::from_millis(100),
            cap: Duration::from_secs(10),
            ..RetryPolicy::default()
        };
        for _ in 0..200 {
            assert!(p.backoff(0) <= Duration::from_millis(100));
            assert!(p.backoff(3) <= Duration::from_millis(800));
            assert!(p.backoff(40) <= Duration::from_secs(10));
        }
        let waits: Vec<_> = (0..200).map(|_| p.backoff(6)).collect();
        assert!(waits.iter().any(|w| *w < Duration::from_millis(3200)));
        assert!(waits.iter().any(|w| *w > Duration::from_millis(3200)));
    }
}
