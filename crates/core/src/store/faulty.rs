//! A fault-injecting [`Store`] wrapper, for tests of the wrappers above it and of whole
//! runs over a store that fails now and then.
//!
//! It fails a share of requests with a transient [`Error::Backend`], half of them before
//! the request reaches the inner store (the request was lost) and half after (the
//! response was lost: a put is stored all the same, as on a real service). It can also
//! fail the next few requests with a chosen kind, slow every request down, hold puts
//! until released, and tell how many requests were in flight at most.

use super::{Backend, ByteRange, Handle, Hint, Listing, ObjectInfo, WriteMode};
use crate::error::{BackendKind, Error, Result};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

/// Wraps a store and fails some of its requests (see the module docs).
pub struct FaultyStore {
    inner: Arc<dyn Backend>,
    every: u64,
    /// Only requests for paths below this fail ("": all).
    under: String,
    delay: Duration,
    scripted: Mutex<(u64, BackendKind)>,
    requests: AtomicU64,
    failures: AtomicU64,
    in_flight: AtomicUsize,
    max_in_flight: AtomicUsize,
    held: Mutex<bool>,
    released: Condvar,
}

/// When a failing request fails.
#[derive(Clone, Copy, PartialEq)]
enum When {
    Before,
    After,
}

impl FaultyStore {
    /// Passes every request through, until told otherwise.
    pub fn new(inner: Arc<dyn Backend>) -> FaultyStore {
        FaultyStore {
            inner,
            every: 0,
            under: String::new(),
            delay: Duration::ZERO,
            scripted: Mutex::new((0, BackendKind::Transient)),
            requests: AtomicU64::new(0),
            failures: AtomicU64::new(0),
            in_flight: AtomicUsize::new(0),
            max_in_flight: AtomicUsize::new(0),
            held: Mutex::new(false),
            released: Condvar::new(),
        }
    }

    /// Fails one request in `n` (the `n`-th, the `2n`-th…) transiently; 0: none.
    pub fn fail_every(mut self, n: u64) -> FaultyStore {
        self.every = n;
        self
    }

    /// Fails only requests for paths that start with `prefix` (`data/`: pack writes and
    /// reads); the others pass, and do not count down [`FaultyStore::fail_next`].
    pub fn only_under(mut self, prefix: &str) -> FaultyStore {
        self.under = prefix.to_string();
        self
    }

    /// Sleeps `d` in every request.
    pub fn delay(mut self, d: Duration) -> FaultyStore {
        self.delay = d;
        self
    }

    /// Fails the next `count` requests with `kind`, before they reach the inner store.
    pub fn fail_next(&self, count: u64, kind: BackendKind) {
        *lock(&self.scripted) = (count, kind);
    }

    /// Makes puts wait until [`FaultyStore::release`].
    pub fn hold(&self) {
        *lock(&self.held) = true;
    }

    /// Lets held puts go on.
    pub fn release(&self) {
        *lock(&self.held) = false;
        self.released.notify_all();
    }

    /// Requests made so far, failed ones included.
    pub fn requests(&self) -> u64 {
        self.requests.load(SeqCst)
    }

    /// Requests failed so far.
    pub fn failures(&self) -> u64 {
        self.failures.load(SeqCst)
    }

    /// The most requests that were in flight at once.
    pub fn max_in_flight(&self) -> usize {
        self.max_in_flight.load(SeqCst)
    }

    fn request<T>(&self, path: &str, put: bool, f: impl FnOnce() -> Result<T>) -> Result<T> {
        let now = self.in_flight.fetch_add(1, SeqCst) + 1;
        self.max_in_flight.fetch_max(now, SeqCst);
        let r = self.attempt(path, put, f);
        self.in_flight.fetch_sub(1, SeqCst);
        r
    }

    fn attempt<T>(&self, path: &str, put: bool, f: impl FnOnce() -> Result<T>) -> Result<T> {
        if put {
            let mut held = lock(&self.held);
            while *held {
                held = self.released.wait(held).unwrap_or_else(|p| p.into_inner());
            }
        }
        if !self.delay.is_zero() {
            std::thread::sleep(self.delay);
        }
        let n = self.requests.fetch_add(1, SeqCst) + 1;
        if !path.starts_with(&self.under) {
            return f();
        }
        let scripted = {
            let mut s = lock(&self.scripted);
            match s.0 {
                0 => None,
                _ => {
                    s.0 -= 1;
                    Some(s.1)
                }
            }
        };
        let fault = match scripted {
            Some(kind) => Some((kind, When::Before)),
            None if self.every > 0 && n.is_multiple_of(self.every) => {
                let when = match (n / self.every) % 2 {
                    0 => When::Before,
                    _ => When::After,
                };
                Some((BackendKind::Transient, when))
            }
            None => None,
        };
        let Some((kind, when)) = fault else {
            return f();
        };
        self.failures.fetch_add(1, SeqCst);
        if when == When::After {
            // The request is carried out; only its answer is lost.
            let _ = f();
        }
        Err(Error::backend(
            self.inner.location(),
            kind,
            format!("injected fault on {path}"),
        ))
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A poisoned lock only means a test thread panicked; the value is still whole.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Backend for FaultyStore {
    fn write(&self, h: Handle<'_>, data: &[u8], mode: WriteMode) -> Result<()> {
        self.request(h.path(), true, || self.inner.write(h, data, mode))
    }
    fn read(&self, h: Handle<'_>, range: Option<ByteRange>) -> Result<Vec<u8>> {
        self.request(h.path(), false, || self.inner.read(h, range))
    }
    fn listing(&self, prefix: &str, from: Listing) -> Result<Vec<ObjectInfo>> {
        self.request(prefix, false, || self.inner.listing(prefix, from))
    }
    fn remove(&self, h: Handle<'_>) -> Result<()> {
        self.request(h.path(), false, || self.inner.remove(h))
    }
    fn size(&self, h: Handle<'_>) -> Result<u64> {
        self.request(h.path(), false, || self.inner.size(h))
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
