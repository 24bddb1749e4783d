//! Test support for this crate's and the CLI's integration tests (feature `testing`): a
//! throw-away MinIO ([`minio`]), a proxy that injects the failures object storage has
//! ([`fault_proxy`]), and the conformance suite every [`crate::store::Backend`] passes
//! ([`crate::store::conformance`]).
//!
//! Other crates enable it from their `[dev-dependencies]`, as `mailvault-imap`'s
//! `testing` feature is enabled for its Dovecot harness.

pub mod audit;
pub mod data_reads;
pub mod fault_proxy;
pub mod minio;
pub mod minio_iam;

/// Why a test server could not be started or used.
#[derive(Debug, thiserror::Error)]
pub enum HarnessError {
    /// No MinIO binary.
    #[error("MinIO not found (looked in {searched}): run scripts/setup.sh (it builds MinIO with go once), or point MAILVAULT_MINIO at a minio binary")]
    NotInstalled {
        /// Where it was looked for.
        searched: String,
    },
    /// A file, socket or process operation failed.
    #[error("test server: {what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The server did not come up.
    #[error("test MinIO did not start: {detail}\n--- log ---\n{log}")]
    Start {
        /// What happened.
        detail: String,
        /// Its log.
        log: String,
    },
    /// A store on the server could not be made.
    #[error("test MinIO: {0}")]
    Store(#[from] crate::Error),
}

pub(crate) fn io_err(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> HarnessError {
    let what = what.into();
    move |source| HarnessError::Io { what, source }
}
