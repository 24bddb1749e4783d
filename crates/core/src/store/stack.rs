//! The store a command works on: the backend and the wrappers around it, built in one
//! place, and what the storage was asked during the run ([`StoreUsage`]) for every
//! command's report.
//!
//! A local directory gets only the request counter. Object storage gets, from the top:
//! the local cache (metadata that every run needs again is read from disk), retries of
//! transient failures, the request counter (below the retries: every request sent is
//! counted, as the provider bills it), and the limits on requests in flight and bandwidth.

use super::{CacheStats, Cached, Limit, Metered, RequestCounts, Retry, RetryPolicy, RetryStats};
use super::{S3Store, Uploads};
use crate::error::Result;
use crate::store::Backend;
use serde::Serialize;
use std::path::PathBuf;
use std::sync::Arc;

/// Requests in flight at most on object storage, unless configured.
pub const DEFAULT_CONNECTIONS: usize = 8;

/// Data packs uploaded at once at most (each up to the pack size, 16 MiB by default).
const UPLOADERS: usize = 4;

/// How to build the stack for a remote store.
#[derive(Clone, Debug, Default)]
pub struct StackOptions {
    /// Requests in flight at most.
    pub connections: usize,
    /// Upload cap in KiB/s.
    pub upload_kib: Option<u64>,
    /// Download cap in KiB/s.
    pub download_kib: Option<u64>,
    /// The root of the local cache; `None`: no cache.
    pub cache_root: Option<PathBuf>,
    /// How long the storage may fail every request before the run gives up on it
    /// ([`RetryPolicy::give_up_after`]).
    pub give_up_after: std::time::Duration,
}

/// What the storage was asked during a run.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct StoreUsage {
    /// Requests by verb and bytes each way.
    pub requests: RequestCounts,
    /// Requests sent again after a transient failure (object storage).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retries: Option<RetryStats>,
    /// The local cache's hits and misses, when there is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache: Option<CacheStats>,
}

/// A store with its wrappers, and handles on the ones that count.
pub struct Stack {
    /// The top of the stack: what the repository uses.
    pub store: Arc<dyn Backend>,
    /// The S3 backend, when the repository is on object storage.
    pub s3: Option<Arc<S3Store>>,
    metered: Arc<Metered>,
    retry: Option<Arc<Retry>>,
    cache: Option<Arc<Cached>>,
}

impl Stack {
    /// A local directory (or any store without a network): counted only.
    pub fn local(store: Arc<dyn Backend>) -> Stack {
        let metered = Arc::new(Metered::new(store));
        Stack {
            store: metered.clone(),
            s3: None,
            metered,
            retry: None,
            cache: None,
        }
    }

    /// An S3 store with the wrappers object storage needs, from the top: the cache;
    /// background uploads of data packs; retries (above the uploads' requests, so a
    /// failed upload is sent again; below the uploads, so that the queue's bytes are
    /// still there); the counter (every request sent, retries included); the limits on
    /// requests in flight and bandwidth.
    pub fn remote(s3: Arc<S3Store>, opts: &StackOptions) -> Result<Stack> {
        let connections = opts.connections.max(1);
        let limited: Arc<dyn Backend> = Arc::new(
            Limit::new(s3.clone(), connections)
                .with_upload_kib(opts.upload_kib)
                .with_download_kib(opts.download_kib),
        );
        let metered = Arc::new(Metered::new(limited));
        let policy = RetryPolicy {
            give_up_after: opts.give_up_after,
            ..RetryPolicy::default()
        };
        let retry = Arc::new(Retry::new(metered.clone(), policy));
        // Packs queued plus packs being sent: memory for about twice this many packs.
        let uploaders = connections.min(UPLOADERS);
        let uploads: Arc<dyn Backend> =
            Arc::new(Uploads::new(retry.clone(), uploaders, uploaders)?);
        let cache =
            (opts.cache_root.clone()).map(|root| Arc::new(Cached::new(uploads.clone(), root)));
        Ok(Stack {
            store: match &cache {
                Some(c) => c.clone(),
                None => uploads,
            },
            s3: Some(s3),
            metered,
            retry: Some(retry),
            cache,
        })
    }

    /// The S3 store's Object Lock calls, retried like every request of the run (object
    /// storage only).
    pub fn object_lock(&self) -> Option<Arc<dyn super::ObjectLock>> {
        let s3: Arc<dyn super::ObjectLock> = self.s3.clone()?;
        Some(match &self.retry {
            Some(r) => Arc::new(super::retry::RetriedCalls::new(r.clone(), s3)),
            None => s3,
        })
    }

    /// Why the run gave up on the storage, once it did: it failed every request for
    /// the policy's time (object storage only).
    pub fn given_up(&self) -> Option<String> {
        self.retry.as_ref().and_then(|r| r.given_up())
    }

    /// What the storage was asked so far.
    pub fn usage(&self) -> StoreUsage {
        StoreUsage {
            // With the calls the S3 store makes beside the stack (Object Lock's).
            requests: (self.metered.counts()).plus(
                self.s3
                    .as_ref()
                    .map(|s| s.call_counts())
                    .unwrap_or_default(),
            ),
            retries: self.retry.as_ref().map(|r| r.stats()),
            cache: self.cache.as_ref().map(|c| c.stats()),
        }
    }
}

/// The default root of the local cache: `$XDG_CACHE_HOME/mailvault`, else
/// `$HOME/.cache/mailvault`.
pub fn default_cache_root() -> Option<PathBuf> {
    let env = |k: &str| {
        std::env::var_os(k)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    env("XDG_CACHE_HOME")
        .filter(|p| p.is_absolute())
        .or_else(|| env("HOME").map(|h| h.join(".cache")))
        .map(|p| p.join("mailvault"))
}
