//! A [`Store`] wrapper that bounds the requests in flight and, optionally, the bandwidth
//! each way.
//!
//! At most `connections` requests run at once, whatever the number of threads above (a
//! counting semaphore). Bandwidth caps, in KiB/s, are token buckets shared by all
//! threads: a put waits for its bytes before it is sent; a read is charged once its bytes
//! are in, and the next request waits for it. A bucket starts empty and saves at most a
//! quarter of a second of unused bandwidth, so a cap holds from the first byte.

use super::{Backend, ByteRange, Handle, Hint, Listing, ObjectInfo, WriteMode};
use crate::error::Result;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Bounds the requests in flight and the bandwidth of the inner store.
pub struct Limit {
    inner: Arc<dyn Backend>,
    slots: Semaphore,
    up: Option<Bucket>,
    down: Option<Bucket>,
}

impl Limit {
    /// At most `connections` requests in flight (at least one), no bandwidth cap.
    pub fn new(inner: Arc<dyn Backend>, connections: usize) -> Limit {
        Limit {
            inner,
            slots: Semaphore::new(connections.max(1)),
            up: None,
            down: None,
        }
    }

    /// Caps uploads at `kib` KiB/s; `None` or 0: no cap.
    pub fn with_upload_kib(mut self, kib: Option<u64>) -> Limit {
        self.up = Bucket::new(kib);
        self
    }

    /// Caps downloads at `kib` KiB/s; `None` or 0: no cap.
    pub fn with_download_kib(mut self, kib: Option<u64>) -> Limit {
        self.down = Bucket::new(kib);
        self
    }

    fn send<T>(&self, bytes: usize, f: impl FnOnce() -> Result<T>) -> Result<T> {
        if let Some(b) = &self.up {
            b.take(bytes as u64);
        }
        let _slot = self.slots.acquire();
        f()
    }

    fn receive(&self, f: impl FnOnce() -> Result<Vec<u8>>) -> Result<Vec<u8>> {
        let r = {
            let _slot = self.slots.acquire();
            f()
        };
        if let (Some(b), Ok(d)) = (&self.down, &r) {
            b.take(d.len() as u64);
        }
        r
    }

    fn request<T>(&self, f: impl FnOnce() -> Result<T>) -> Result<T> {
        let _slot = self.slots.acquire();
        f()
    }
}

impl Backend for Limit {
    fn write(&self, h: Handle<'_>, data: &[u8], mode: WriteMode) -> Result<()> {
        self.send(data.len(), || self.inner.write(h, data, mode))
    }
    fn read(&self, h: Handle<'_>, range: Option<ByteRange>) -> Result<Vec<u8>> {
        self.receive(|| self.inner.read(h, range))
    }
    fn listing(&self, prefix: &str, from: Listing) -> Result<Vec<ObjectInfo>> {
        self.request(|| self.inner.listing(prefix, from))
    }
    fn remove(&self, h: Handle<'_>) -> Result<()> {
        self.request(|| self.inner.remove(h))
    }
    fn size(&self, h: Handle<'_>) -> Result<u64> {
        self.request(|| self.inner.size(h))
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

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A poisoned lock only means another thread panicked; the count is still whole.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A counting semaphore.
struct Semaphore {
    free: Mutex<usize>,
    freed: Condvar,
}

struct Permit<'a>(&'a Semaphore);

impl Semaphore {
    fn new(n: usize) -> Semaphore {
        Semaphore {
            free: Mutex::new(n),
            freed: Condvar::new(),
        }
    }

    fn acquire(&self) -> Permit<'_> {
        let mut free = lock(&self.free);
        while *free == 0 {
            free = self.freed.wait(free).unwrap_or_else(|p| p.into_inner());
        }
        *free -= 1;
        Permit(self)
    }
}

impl Drop for Permit<'_> {
    fn drop(&mut self) {
        *lock(&self.0.free) += 1;
        self.0.freed.notify_one();
    }
}

/// A token bucket of bytes. Taking more than there is runs into debt, which the taker
/// waits off (outside the lock); later takers wait behind it.
struct Bucket {
    /// Bytes per second.
    rate: f64,
    /// Bytes saved at most.
    burst: f64,
    state: Mutex<(f64, Instant)>,
}

impl Bucket {
    fn new(kib: Option<u64>) -> Option<Bucket> {
        let rate = kib.filter(|k| *k > 0)? as f64 * 1024.0;
        Some(Bucket {
            rate,
            burst: rate / 4.0,
            state: Mutex::new((0.0, Instant::now())),
        })
    }

    fn take(&self, bytes: u64) {
        let wait = {
            let mut s = lock(&self.state);
            let now = Instant::now();
            let tokens = (s.0 + now.duration_since(s.1).as_secs_f64() * self.rate).min(self.burst)
                - bytes as f64;
            *s = (tokens, now);
            match tokens < 0.0 {
                true => Duration::from_secs_f64(-tokens / self.rate),
                false => Duration::ZERO,
            }
        };
        if !wait.is_zero() {
            std::thread::sleep(wait);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{FaultyStore, MemoryStore, Store};

    #[test]
    fn passes_the_conformance_suite() {
        let l = Limit::new(Arc::new(MemoryStore::new()), 2)
            .with_upload_kib(Some(100_000))
            .with_download_kib(Some(100_000));
        crate::store::conformance::run(&l);
    }

    #[test]
    fn never_more_requests_in_flight_than_connections() {
        let slow = Arc::new(
            FaultyStore::new(Arc::new(MemoryStore::new())).delay(Duration::from_millis(5)),
        );
        let l = Limit::new(slow.clone(), 2);
        std::thread::scope(|s| {
            for t in 0..4 {
                let l = &l;
                s.spawn(move || {
                    for i in 0..10 {
                        l.put(&format!("data/{t}-{i}"), b"x").unwrap();
                        l.get(&format!("data/{t}-{i}")).unwrap();
                    }
                });
            }
        });
        assert_eq!(slow.requests(), 80);
        assert_eq!(slow.max_in_flight(), 2);
    }

    #[test]
    fn an_upload_cap_holds_from_the_first_byte() {
        let l = Limit::new(Arc::new(MemoryStore::new()), 4).with_upload_kib(Some(512));
        let start = Instant::now();
        std::thread::scope(|s| {
            for t in 0..4 {
                let l = &l;
                s.spawn(move || {
                    for i in 0..4 {
                        l.put(&format!("data/{t}-{i}"), &[0; 64 << 10]).unwrap();
                    }
                });
            }
        });
        // 1 MiB at 512 KiB/s.
        let took = start.elapsed();
        assert!(took >= Duration::from_millis(1800), "{took:?}");
    }

    #[test]
    fn a_download_cap_charges_what_was_received() {
        let mem = Arc::new(MemoryStore::new());
        mem.put("big", &vec![7; 1 << 20]).unwrap();
        let l = Limit::new(mem, 4).with_download_kib(Some(512));
        let start = Instant::now();
        assert_eq!(l.get_range("big", 0, 512 << 10).unwrap().len(), 512 << 10);
        // Each read is charged once its bytes are in: 512 KiB (1 s), then 1 MiB (2 s).
        assert_eq!(l.get("big").unwrap().len(), 1 << 20);
        l.stat("big").unwrap();
        let took = start.elapsed();
        assert!(took >= Duration::from_millis(2700), "{took:?}");
    }
}
