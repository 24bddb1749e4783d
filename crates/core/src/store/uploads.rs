//! A [`Store`] wrapper that uploads data packs in the background, so that hashing and
//! compression never wait on the network.
//!
//! [`Store::put_pack`] of a data pack copies the pack into a queue served by a few
//! uploader threads and returns at once; once `uploaders + queue` packs are waiting or
//! being sent, the next put waits for a place, so memory stays within that many packs.
//! [`Backend::flush`] waits until every queued pack is stored and returns the first error
//! (the repository flushes before it writes an index that lists packs, and before a
//! snapshot). A read or stat of a pack still queued is served from its queued bytes. A
//! pack found already stored is a success: packs are named by their content. After a
//! failed upload, later data packs are refused at once. Everything else (tree packs,
//! other objects, reads) goes straight to the inner store.
//!
//! Put it above the retries, the request counter and the limits, so that the uploads
//! themselves are retried, counted and limited.

use super::{
    Backend, ByteRange, Handle, Hint, Kind, Listing, ObjectInfo, PackKind, Store, WriteMode,
};
use crate::error::{Error, Result};
use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;

/// Uploads data packs in the background (see the module docs).
pub struct Uploads {
    inner: Arc<dyn Backend>,
    shared: Arc<Shared>,
    jobs: Option<crossbeam_channel::Sender<Job>>,
    threads: Vec<JoinHandle<()>>,
}

struct Job {
    path: String,
    data: Arc<Vec<u8>>,
}

struct Shared {
    state: Mutex<State>,
    changed: Condvar,
    /// Packs waiting or being sent at most.
    room: usize,
}

#[derive(Default)]
struct State {
    /// Packs waiting or being sent, by path.
    queued: HashMap<String, Arc<Vec<u8>>>,
    /// Queued puts not yet done (a pack put twice while queued counts once).
    pending: usize,
    /// The first failed upload, until a flush returns it.
    error: Option<Error>,
    /// What failed first, once any upload has failed: later puts and flushes name it.
    failed: Option<String>,
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, State> {
        // A poisoned lock only means a thread panicked; the state is still whole.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn wait<'a>(&self, g: MutexGuard<'a, State>) -> MutexGuard<'a, State> {
        self.changed.wait(g).unwrap_or_else(|p| p.into_inner())
    }
}

impl Uploads {
    /// `uploaders` threads (at least one) send packs; `queue` more may wait.
    pub fn new(inner: Arc<dyn Backend>, uploaders: usize, queue: usize) -> Result<Uploads> {
        let uploaders = uploaders.max(1);
        let shared = Arc::new(Shared {
            state: Mutex::new(State::default()),
            changed: Condvar::new(),
            room: uploaders + queue,
        });
        // Unbounded: `room` bounds what is in it.
        let (tx, rx) = crossbeam_channel::unbounded::<Job>();
        let mut threads = Vec::with_capacity(uploaders);
        for i in 0..uploaders {
            let (inner, shared, rx) = (inner.clone(), shared.clone(), rx.clone());
            let t = std::thread::Builder::new()
                .name(format!("upload-{i}"))
                .spawn(move || {
                    for job in rx {
                        upload(inner.as_ref(), &shared, job);
                    }
                })
                .map_err(|e| Error::Store {
                    what: "uploader threads".into(),
                    source: e,
                })?;
            threads.push(t);
        }
        Ok(Uploads {
            inner,
            shared,
            jobs: Some(tx),
            threads,
        })
    }

    fn queued(&self, path: &str) -> Option<Arc<Vec<u8>>> {
        self.shared.state().queued.get(path).cloned()
    }
}

fn upload(inner: &dyn Backend, shared: &Shared, job: Job) {
    // A panic in the inner store fails this upload, rather than leaving a flush waiting
    // for it for ever.
    let put = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        inner.put_pack(&job.path, &job.data, PackKind::Data)
    }));
    let r = match put {
        Ok(Err(Error::AlreadyExists(_))) => Ok(()),
        Ok(r) => r,
        Err(_) => Err(Error::Store {
            what: job.path.clone(),
            source: std::io::Error::other("the upload thread panicked"),
        }),
    };
    let mut s = shared.state();
    s.queued.remove(&job.path);
    s.pending -= 1;
    if let Err(e) = r {
        tracing::warn!("upload of {} failed: {e}", job.path);
        if s.failed.is_none() {
            s.failed = Some(e.to_string());
            s.error = Some(e);
        }
    }
    shared.changed.notify_all();
}

/// The error of a put or flush after an upload failed.
fn refused(what: &str, first: &str) -> Error {
    Error::Store {
        what: what.into(),
        source: std::io::Error::other(format!("not stored: an earlier upload failed: {first}")),
    }
}

impl Uploads {
    /// Queues a data pack (see the module docs).
    fn queue(&self, jobs: &crossbeam_channel::Sender<Job>, path: &str, data: &[u8]) -> Result<()> {
        let mut s = self.shared.state();
        loop {
            if let Some(first) = &s.failed {
                return Err(refused(path, first));
            }
            if s.queued.contains_key(path) {
                // The same content, already on its way.
                return Ok(());
            }
            if s.pending < self.shared.room {
                break;
            }
            s = self.shared.wait(s);
        }
        let data = Arc::new(data.to_vec());
        s.queued.insert(path.to_string(), data.clone());
        s.pending += 1;
        drop(s);
        let job = Job {
            path: path.to_string(),
            data,
        };
        if let Err(crossbeam_channel::SendError(job)) = jobs.send(job) {
            // Unreachable while `self` lives (the threads hold the receiver); put it
            // in the foreground rather than lose it.
            upload(self.inner.as_ref(), &self.shared, job);
        }
        Ok(())
    }
}

impl Backend for Uploads {
    fn write(&self, h: Handle<'_>, data: &[u8], mode: WriteMode) -> Result<()> {
        let data_pack = mode == WriteMode::Create && h.kind() == Kind::Pack(Some(PackKind::Data));
        match self.jobs.as_ref().filter(|_| data_pack) {
            Some(jobs) => self.queue(jobs, h.path(), data),
            None => self.inner.write(h, data, mode),
        }
    }
    fn read(&self, h: Handle<'_>, range: Option<ByteRange>) -> Result<Vec<u8>> {
        match (self.queued(h.path()), range) {
            (Some(d), None) => Ok(d.to_vec()),
            (Some(d), Some(r)) => self::range(h.path(), &d, r.offset, r.len),
            (None, _) => self.inner.read(h, range),
        }
    }
    fn listing(&self, prefix: &str, from: Listing) -> Result<Vec<ObjectInfo>> {
        self.inner.listing(prefix, from)
    }
    fn remove(&self, h: Handle<'_>) -> Result<()> {
        self.inner.remove(h)
    }
    fn size(&self, h: Handle<'_>) -> Result<u64> {
        match self.queued(h.path()) {
            Some(d) => Ok(d.len() as u64),
            None => self.inner.size(h),
        }
    }
    fn location(&self) -> String {
        self.inner.location()
    }
    fn flush(&self) -> Result<()> {
        let mut s = self.shared.state();
        while s.pending > 0 {
            s = self.shared.wait(s);
        }
        if let Some(e) = s.error.take() {
            return Err(e);
        }
        if let Some(first) = &s.failed {
            return Err(refused("flush", first));
        }
        drop(s);
        self.inner.flush()
    }
    fn local_dir(&self) -> Option<std::path::PathBuf> {
        self.inner.local_dir()
    }
    fn hint(&self, hint: Hint<'_>) {
        match hint {
            // A queued pack is read from memory.
            Hint::Prefetch(h, _) if self.queued(h.path()).is_some() => {}
            _ => self.inner.hint(hint),
        }
    }
}

/// `len` bytes at `offset` of a queued pack, or the error a store gives for a range past
/// the end.
fn range(path: &str, d: &[u8], offset: u64, len: u64) -> Result<Vec<u8>> {
    offset
        .checked_add(len)
        .filter(|end| *end <= d.len() as u64)
        .map(|end| d[offset as usize..end as usize].to_vec())
        .ok_or_else(|| {
            Error::corrupt(
                path,
                format!("range {offset}+{len} past the end ({} bytes)", d.len()),
            )
        })
}

impl Drop for Uploads {
    /// Waits for the queued packs to be sent.
    fn drop(&mut self) {
        drop(self.jobs.take());
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::BackendKind;
    use crate::store::{FaultyStore, MemoryStore};
    use std::time::Duration;

    #[test]
    fn passes_the_conformance_suite() {
        crate::store::conformance::run(&Uploads::new(Arc::new(MemoryStore::new()), 2, 2).unwrap());
    }

    /// Releases held puts when dropped, before the [`Uploads`] declared ahead of it: a
    /// failed assertion then fails the test rather than hanging it.
    struct Release(Arc<FaultyStore>);

    impl Drop for Release {
        fn drop(&mut self) {
            self.0.release();
        }
    }

    /// 2 uploaders, 3 places in the queue, over a store that holds puts.
    fn held() -> (Arc<MemoryStore>, Arc<FaultyStore>, Uploads, Release) {
        let mem = Arc::new(MemoryStore::new());
        let f = Arc::new(FaultyStore::new(mem.clone()));
        f.hold();
        let u = Uploads::new(f.clone(), 2, 3).unwrap();
        (mem, f.clone(), u, Release(f))
    }

    #[test]
    fn data_packs_return_at_once_and_flush_waits_for_them() {
        let (mem, f, u, _release) = held();
        for i in 0..5 {
            u.put_pack(&format!("data/{i}"), &[i; 100], PackKind::Data)
                .unwrap();
        }
        // Held by the inner store: nothing is there yet.
        assert!(mem.list("data/").unwrap().is_empty());
        std::thread::scope(|s| {
            let flush = s.spawn(|| u.flush());
            std::thread::sleep(Duration::from_millis(100));
            let early = flush.is_finished();
            f.release();
            assert!(!early, "flush returned before the packs were stored");
            flush.join().unwrap().unwrap();
        });
        assert_eq!(mem.list("data/").unwrap().len(), 5);
        for i in 0..5 {
            assert_eq!(mem.get(&format!("data/{i}")).unwrap(), [i; 100]);
        }
    }

    #[test]
    fn queued_packs_are_read_from_the_queue() {
        let (mem, f, u, _release) = held();
        u.put_pack("data/p", b"0123456789", PackKind::Data).unwrap();
        assert_eq!(u.get("data/p").unwrap(), b"0123456789");
        assert_eq!(u.get_range("data/p", 2, 3).unwrap(), b"234");
        assert_eq!(
            u.get_pack_range("data/p", 8, 2, PackKind::Data).unwrap(),
            b"89"
        );
        assert!(u.get_range("data/p", 8, 5).is_err());
        assert_eq!(u.stat("data/p").unwrap(), 10);
        assert!(mem.get("data/p").is_err());
        // Put twice while queued: the same content, one upload.
        u.put_pack("data/p", b"0123456789", PackKind::Data).unwrap();
        f.release();
        u.flush().unwrap();
        assert_eq!(mem.get("data/p").unwrap(), b"0123456789");
        assert_eq!(u.get_range("data/p", 2, 3).unwrap(), b"234");
    }

    #[test]
    fn tree_packs_and_other_objects_are_put_in_the_foreground() {
        let mem = Arc::new(MemoryStore::new());
        let u = Uploads::new(mem.clone(), 1, 1).unwrap();
        u.put_pack("data/t", b"tree", PackKind::Tree).unwrap();
        u.put("index/i", b"index").unwrap();
        assert_eq!(mem.get("data/t").unwrap(), b"tree");
        assert_eq!(mem.get("index/i").unwrap(), b"index");
        assert!(matches!(
            u.put_pack("data/t", b"tree", PackKind::Tree),
            Err(Error::AlreadyExists(_))
        ));
    }

    #[test]
    fn a_pack_already_stored_is_a_success() {
        let mem = Arc::new(MemoryStore::new());
        mem.put("data/p", b"pack").unwrap();
        let u = Uploads::new(mem.clone(), 1, 1).unwrap();
        u.put_pack("data/p", b"pack", PackKind::Data).unwrap();
        u.flush().unwrap();
    }

    #[test]
    fn a_failed_upload_surfaces_at_flush_and_refuses_later_puts() {
        let (mem, f, u, _release) = held();
        u.put_pack("data/a", b"a", PackKind::Data).unwrap();
        f.fail_next(1, BackendKind::Auth);
        f.release();
        match u.flush() {
            Err(Error::Backend {
                kind: BackendKind::Auth,
                detail,
                ..
            }) => assert!(detail.contains("data/a"), "{detail}"),
            other => panic!("{other:?}"),
        }
        assert!(mem.get("data/a").is_err());
        let e = u.put_pack("data/b", b"b", PackKind::Data).unwrap_err();
        assert!(e.to_string().contains("data/b"), "{e}");
        assert!(e.to_string().contains("injected fault on data/a"), "{e}");
        assert!(u.flush().is_err());
        assert!(mem.get("data/b").is_err());
    }

    #[test]
    fn memory_is_bounded_by_uploaders_plus_queue() {
        // 2 uploaders and 3 places in the queue: the 6th put waits.
        let (mem, f, u, _release) = held();
        let done = std::sync::atomic::AtomicUsize::new(0);
        std::thread::scope(|s| {
            let producer = s.spawn(|| {
                for i in 0..8u8 {
                    u.put_pack(&format!("data/{i}"), &[i; 10], PackKind::Data)
                        .unwrap();
                    done.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                }
            });
            // Wait for the first 5 (however loaded the machine), then give the 6th time.
            let start = std::time::Instant::now();
            while done.load(std::sync::atomic::Ordering::SeqCst) < 5
                && start.elapsed() < Duration::from_secs(20)
            {
                std::thread::sleep(Duration::from_millis(5));
            }
            std::thread::sleep(Duration::from_millis(200));
            let queued = done.load(std::sync::atomic::Ordering::SeqCst);
            let finished = producer.is_finished();
            f.release();
            assert_eq!(queued, 5);
            assert!(!finished);
            producer.join().unwrap();
        });
        u.flush().unwrap();
        assert_eq!(mem.list("data/").unwrap().len(), 8);
    }

    #[test]
    fn drop_waits_for_the_queued_packs() {
        let mem = Arc::new(MemoryStore::new());
        let slow = Arc::new(FaultyStore::new(mem.clone()).delay(Duration::from_millis(20)));
        let u = Uploads::new(slow, 2, 4).unwrap();
        for i in 0..6u8 {
            u.put_pack(&format!("data/{i}"), &[i], PackKind::Data)
                .unwrap();
        }
        drop(u);
        assert_eq!(mem.list("data/").unwrap().len(), 6);
    }
}
