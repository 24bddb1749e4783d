//! Restore into a live IMAP server: the IMAP target of the one restore pipeline
//! ([`crate::dest::imap`], [`crate::ops::restore`]), under the name the CLI and the
//! tests know.

pub use crate::dest::imap::{
    restore, restore_picked, AccountFigures, ImapRestoreOptions, ImapRestoreReport,
};

/// Runs `f(0..n)` on up to `threads` threads (the IMAP backup's accounts).
pub(crate) fn for_each_parallel(n: usize, threads: usize, f: impl Fn(usize) + Sync) {
    crate::ops::restore::for_each_parallel(n, threads, "imap-account", f)
}
