//! Scoped worker threads with names, shared by the backup and the restore pipelines.

use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

/// Runs `f(0..n)` on up to `threads` threads named `name`.
pub(crate) fn for_each_parallel(n: usize, threads: usize, name: &str, f: impl Fn(usize) + Sync) {
    let next = AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..threads.clamp(1, n.max(1)) {
            spawn_named(s, name, || loop {
                let i = next.fetch_add(1, Relaxed);
                if i >= n {
                    break;
                }
                f(i);
            });
        }
    });
}

/// Runs `f(0..n)` on the current rayon pool as one task per thread, each taking the next
/// index: at most that many `f` run at once. (A `par_iter` would let a thread that waits
/// inside one `f`, for work of its own it handed to the pool, start another `f` on top of
/// it: a backup's thread then held the listings of up to four folders at once.)
pub(crate) fn for_each_in_pool(n: usize, f: impl Fn(usize) + Sync) {
    let next = AtomicUsize::new(0);
    let (next, f) = (&next, &f);
    rayon::scope(|s| {
        for _ in 0..rayon::current_num_threads().clamp(1, n.max(1)) {
            s.spawn(move |_| loop {
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
pub(crate) fn spawn_named<'s, 'e: 's, F: FnOnce() + Send + 's>(
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
