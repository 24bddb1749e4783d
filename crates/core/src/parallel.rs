//! Scoped worker threads with names, shared by the backup and the restore pipelines.

use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::Mutex;

/// Runs `f(0..n)` on up to `threads` threads named `name`.
pub(crate) fn for_each_parallel(n: usize, threads: usize, name: &str, f: impl Fn(usize) + Sync) {
    let next = AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..threads.clamp(1, n.max(1)) {
            spawn_named(s, name, || take_each(&next, n, &f));
        }
    });
}

/// [`for_each_parallel`] of `f`, its results in index order.
pub(crate) fn map_parallel<R: Send>(
    n: usize,
    threads: usize,
    name: &str,
    f: impl Fn(usize) -> R + Sync,
) -> Vec<R> {
    mapped(n, f, |each| for_each_parallel(n, threads, name, each))
}

/// Runs `f(0..n)` on the current rayon pool as one task per thread (at most `most`), each
/// taking the next index, and returns the results in index order: at most that many `f`
/// run at once. (A `par_iter` would let a thread that waits inside one `f`, for work of its
/// own it handed to the pool, start another `f` on top of it: a backup's thread could then
/// hold the listings of several folders at once.)
pub(crate) fn map_in_pool<R: Send>(n: usize, most: usize, f: impl Fn(usize) -> R + Sync) -> Vec<R> {
    mapped(n, f, |each| {
        let next = AtomicUsize::new(0);
        let next = &next;
        rayon::scope(|s| {
            for _ in 0..rayon::current_num_threads().min(most).clamp(1, n.max(1)) {
                s.spawn(move |_| take_each(next, n, each));
            }
        });
    })
}

/// A worker's loop: the next index not taken, until there is none.
fn take_each(next: &AtomicUsize, n: usize, f: &(impl Fn(usize) + ?Sized)) {
    loop {
        let i = next.fetch_add(1, Relaxed);
        if i >= n {
            break;
        }
        f(i);
    }
}

/// `f(0..n)` as `run` calls it, once for each index from any thread; the results in
/// index order (one whose `f` panicked is missing: the panic goes on in `run`).
fn mapped<R: Send>(
    n: usize,
    f: impl Fn(usize) -> R + Sync,
    run: impl FnOnce(&(dyn Fn(usize) + Sync)),
) -> Vec<R> {
    let slots: Vec<Mutex<Option<R>>> = (0..n).map(|_| Mutex::new(None)).collect();
    run(&|i| *crate::repo::lock(&slots[i]) = Some(f(i)));
    (slots.into_iter())
        .filter_map(|m| m.into_inner().unwrap_or_else(|p| p.into_inner()))
        .collect()
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
