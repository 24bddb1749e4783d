//! mailvault engine: a deduplicating, compressing, encrypting backup repository for mail
//! stores, and the backup, restore, check and listing operations on it.
//!
//! The CLI (`crates/cli`) turns flags into the option structs here and calls one function
//! per command; nothing in this crate knows about command lines.

pub mod dest;
pub mod error;
pub mod host;
pub mod imap;
pub mod mail;
pub mod model;
pub mod ops;
pub mod parallel;
pub mod repo;
pub mod report;
pub mod restore;
pub mod search;
pub mod source;
pub mod store;
#[cfg(feature = "testing")]
pub mod testing;

pub use error::{Error, Result};
pub use repo::compress::Compression;
pub use repo::id::Id;
pub use repo::{InitOptions, Repository};

/// Seconds and nanoseconds since the Unix epoch, now.
pub fn now() -> (i64, u32) {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| (d.as_secs() as i64, d.subsec_nanos()))
        .unwrap_or((0, 0))
}

/// Seconds since the Unix epoch, now.
pub fn now_unix() -> i64 {
    now().0
}

/// This machine's host name, for snapshots and key files.
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .or_else(|_| std::fs::read_to_string("/etc/hostname"))
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "localhost".into())
}
