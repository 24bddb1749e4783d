//! The engine's error type: one enum, each variant naming the item it is about.

use std::path::PathBuf;

/// Result alias used throughout the engine.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in the engine.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An I/O error on a file of the mail store or the restore target.
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    /// An I/O error on a repository object (`what` is its path inside the repository).
    #[error("repository {what}: {source}")]
    Store {
        what: String,
        source: std::io::Error,
    },
    /// A repository object does not exist.
    #[error("repository {0}: not found")]
    NotFound(String),
    /// A repository object already exists (put-if-absent refused).
    #[error("repository {0}: already exists")]
    AlreadyExists(String),
    /// No key file opens with the password given.
    #[error("wrong password: none of the repository's keys opens with it")]
    WrongPassword,
    /// Authenticated decryption failed: the object was damaged or tampered with.
    #[error("{0}: damaged or tampered with (authentication failed)")]
    Tampered(String),
    /// A repository object is readable but its content is not what the format says.
    #[error("{what}: corrupt: {detail}")]
    Corrupt { what: String, detail: String },
    /// There is no repository at the location.
    #[error("no mailvault repository at {0}: run `mailvault init` first")]
    NoRepository(String),
    /// `init` on a location that already holds a repository.
    #[error("a repository already exists at {0}")]
    RepositoryExists(String),
    /// A location with repository files (`parts`: which directories) but no `config`:
    /// neither opened nor initialized over.
    #[error("{location} holds parts of a mailvault repository ({parts}) but its config is missing: put `config` back from a copy of the repository; `mailvault init` refuses such a location, since a new config and key could not read what is there")]
    ConfigMissing { location: String, parts: String },
    /// No key file opens with the password given, and some key files are damaged: each
    /// key file with what became of it.
    #[error("no key file opens the repository: {}", .0.join("; "))]
    NoKeyOpens(Vec<String>),
    /// The repository was written by a newer mailvault.
    #[error("repository format version {0} is not supported by this mailvault (it reads formats 1 and 2): use a newer mailvault")]
    UnsupportedVersion(u32),
    /// An object of one repository format found in a repository of another, outside a
    /// migration (whose leftovers are skipped quietly while it is unfinished).
    // While a migration is under way its leftovers are skipped, never reported: this
    // error is about a file that does not belong.
    #[error("{what}: a format-{found} object in a format-{expected} repository: it does not belong here (put there, or copied from an older state of the repository)")]
    OtherFormat {
        what: String,
        found: u32,
        expected: u32,
    },
    /// A format-2 object that does not open as what its place says it is: swapped with
    /// another, renamed, replayed in the wrong place, or damaged.
    #[error(
        "{what}: does not open as {expected}: it was swapped, renamed or moved here, or is damaged"
    )]
    Misplaced { what: String, expected: String },
    /// This host has seen the repository with a higher format version than its config now
    /// says: the config was replaced by an older one (see `seen`).
    #[error("repository {repository}: its config says format version {found}, but this host has seen it with version {seen}: the config was replaced by an older one (a rollback); put back the newer config from a copy of the repository")]
    FormatRollback {
        repository: String,
        seen: u32,
        found: u32,
    },
    /// No snapshot matches what the user asked for.
    #[error("no snapshot matches {0:?}")]
    SnapshotNotFound(String),
    /// A blob referenced by a tree is missing from the index.
    #[error("blob {0} is not in the repository index: an index file is missing or damaged, or the pack that held it is gone; run `mailvault check` to see which, then `mailvault repair index` (it rebuilds the index from the packs there are)")]
    BlobNotFound(String),
    /// The user asked for something that cannot be done.
    #[error("{0}")]
    InvalidInput(String),
    /// The search index (tantivy) failed: `what` it was doing, and why.
    #[error("search index: {what}: {detail}")]
    Search { what: String, detail: String },
    /// A folder of a restore into a tree of files (mbox, EML) cannot be written where its
    /// name puts it (a directory where its file goes, a file taken meanwhile...); or a
    /// message of it cannot be written so that it reads back exactly. Nothing was merged
    /// into another folder or overwritten.
    #[error("folder {folder}: {}: {detail}", path.display())]
    Folder {
        folder: String,
        path: PathBuf,
        detail: String,
    },
    /// Another process holds a conflicting lock on the repository (`holder` says who:
    /// "exclusively by prune on host H (pid P) since T"; `path` is its record).
    #[error("repository locked {holder} ({path}): wait for it to end (--retry-lock), or, if it is not running any more, run `mailvault unlock`")]
    Locked { holder: String, path: String },
    /// This process's lock was not refreshed for so long that another process may have
    /// taken it for stale: the operation stops before it changes anything more.
    #[error("the repository lock {path} was last refreshed {age_secs} s ago and may be taken for stale: stopped (nothing was lost); run the command again")]
    LockLost { path: String, age_secs: u64 },
    /// An index file read when the repository was opened was removed since (a prune
    /// replaced it): the command is refused rather than reading packs that may be gone.
    #[error("{file}: removed since the repository was opened (a prune ran meanwhile): run the command again")]
    IndexChanged { file: String },
    /// `prune` stopped before changing anything (or before deleting anything): `what`
    /// (a snapshot, index file, pack or blob) and why.
    #[error("prune refused: {what} {reason}")]
    PruneRefused { what: String, reason: String },
    /// This host is append-only (`--append-only`): `what` would delete or replace an
    /// object, which only the maintenance host does.
    #[error("{what}: this host is append-only (--append-only): it never deletes or replaces anything in the repository; run this on the maintenance host, whose credentials may delete (docs/security.md)")]
    AppendOnly { what: String },
    /// A request to a storage service failed. `location` names the repository (never
    /// credentials), `detail` says what happened and, where the user can act, what to do.
    #[error("{location}: {detail}")]
    Backend {
        location: String,
        kind: BackendKind,
        detail: String,
    },
    /// A file of the mail store changed each time it was read (rewritten in place): left
    /// out of this snapshot, read again by the next backup.
    #[error("changed while read, twice (rewritten in place: not a Maildir's way); not in this snapshot: the next backup reads it again")]
    ChangedWhileRead { path: PathBuf },
    /// A restore found something else where an item goes (`what`: the file, link or
    /// folder, `detail`: what is there): nothing was overwritten.
    #[error("{what}: {detail}")]
    Conflict { what: String, detail: String },
    /// A restore did not write an item (`what`): it cannot be written to this kind of
    /// destination (a symbolic link outside a `dir:` restore), or an item it depends on
    /// was not restored (a hard link's file); `detail` says which.
    #[error("{what}: {detail}")]
    NotRestored { what: String, detail: String },
    /// An IMAP server or the connection to it failed (it names the server, account and
    /// folder; [`mailvault_imap::Error::is_transient`] says whether waiting helps).
    #[error(transparent)]
    Imap(Box<mailvault_imap::Error>),
    /// An IMAP server did not take a message: it refused it (APPEND answered NO), or the
    /// batch the message was sent in stopped (`detail` says why); `transient` when waiting
    /// may help (`[THROTTLED]`, `[UNAVAILABLE]`, a lost connection).
    #[error("{detail}")]
    Refused { detail: String, transient: bool },
    /// The journal of a restore into IMAP could not be read or written.
    #[error("restore journal {}: {source}", path.display())]
    Journal {
        path: PathBuf,
        source: std::io::Error,
    },
    /// No credential could be found for an account.
    #[error("account {account}: {detail}")]
    Credentials { account: String, detail: String },
    /// An item of a source could not be read as what it is (`what`: an IMAP server sent
    /// a message's FETCH without its body): left out of this snapshot, and reported.
    #[error("{what}: {detail}")]
    Unreadable { what: String, detail: String },
    /// The operating system refused a resource the run needs (worker threads).
    #[error("{0}")]
    Resources(String),
    /// A state the engine's own invariants rule out: a bug, reported rather than
    /// panicking, so that the run ends with its report.
    #[error("internal error (please report it): {0}")]
    Internal(String),
}

impl From<mailvault_imap::Error> for Error {
    fn from(e: mailvault_imap::Error) -> Self {
        Error::Imap(Box::new(e))
    }
}

/// What the user can do about a failed item: the kind every error keeps from where it
/// happened to the report.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum FailureKind {
    /// Something else is where the item goes (a file with other content): nothing was
    /// overwritten; move it away, or restore elsewhere.
    Conflict,
    /// It may pass by itself: run the command again later.
    Transient,
    /// Not tried: the storage, or a restore's target, was given up on earlier in the run
    /// (the command's error, or the one failure listed for it, says why, once).
    NotTried,
    /// Trying the same again fails the same way until something is changed.
    Permanent,
}

/// What kind of failure a storage service reported: whether to retry, and what the user
/// can do about it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum BackendKind {
    /// Wrong or missing credentials, or no permission: retrying does not help.
    Auth,
    /// The bucket does not exist.
    NoSuchBucket,
    /// The service could not be reached (no such host, connection refused).
    Unreachable,
    /// The TLS handshake failed (certificate, protocol).
    Tls,
    /// The service ignores conditional puts (`If-None-Match: *`), which write-once
    /// objects need.
    NoConditionalPut,
    /// A failure that may pass: 5xx, `SlowDown`, 429, a timeout, a reset connection.
    Transient,
    /// The service failed every request for so long that the run gave up on it (see
    /// `store::retry`): not retried; the operation stops.
    Down,
    /// Anything else the service refused.
    Other,
}

impl Error {
    /// Whether trying the same again may succeed: transient service failures (5xx,
    /// `SlowDown`, timeouts, reset connections), a service that could not be reached, an
    /// IMAP server that asked to wait; never authentication, permission or missing-bucket
    /// errors.
    pub fn is_transient(&self) -> bool {
        self.kind() == FailureKind::Transient
    }

    /// What kind of failure this is, for the report and for retry decisions.
    pub fn kind(&self) -> FailureKind {
        match self {
            Error::Conflict { .. } => FailureKind::Conflict,
            Error::Io { source, .. } | Error::Journal { source, .. }
                if source.kind() == std::io::ErrorKind::AlreadyExists =>
            {
                FailureKind::Conflict
            }
            Error::Backend { kind, .. } => match kind {
                BackendKind::Transient | BackendKind::Unreachable => FailureKind::Transient,
                BackendKind::Down => FailureKind::NotTried,
                _ => FailureKind::Permanent,
            },
            Error::Imap(e) if e.is_transient() => FailureKind::Transient,
            Error::Refused {
                transient: true, ..
            }
            | Error::ChangedWhileRead { .. } => FailureKind::Transient,
            _ => FailureKind::Permanent,
        }
    }

    /// Whether every later write to the same place would fail the same way: its
    /// filesystem is full, over quota or read-only. A restore stops writing at the first
    /// such failure instead of failing each message in turn.
    pub fn stops_writes(&self) -> bool {
        use std::io::ErrorKind as K;
        match self {
            Error::Io { source, .. } | Error::Journal { source, .. } => matches!(
                source.kind(),
                K::StorageFull | K::QuotaExceeded | K::ReadOnlyFilesystem
            ),
            _ => false,
        }
    }

    /// A storage-service error.
    pub fn backend(
        location: impl Into<String>,
        kind: BackendKind,
        detail: impl Into<String>,
    ) -> Self {
        Error::Backend {
            location: location.into(),
            kind,
            detail: detail.into(),
        }
    }

    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            source,
        }
    }
    /// Something else is where `what` goes: nothing was overwritten.
    pub(crate) fn conflict(what: impl std::fmt::Display, detail: impl Into<String>) -> Self {
        Error::Conflict {
            what: what.to_string(),
            detail: detail.into(),
        }
    }
    /// `what` was not written, for `detail`.
    pub(crate) fn not_restored(what: impl std::fmt::Display, detail: impl Into<String>) -> Self {
        Error::NotRestored {
            what: what.to_string(),
            detail: detail.into(),
        }
    }
    /// The search index failed at `what`.
    pub(crate) fn search(what: impl Into<String>, e: impl std::fmt::Display) -> Self {
        Error::Search {
            what: what.into(),
            detail: e.to_string(),
        }
    }
    pub(crate) fn corrupt(what: impl Into<String>, detail: impl Into<String>) -> Self {
        Error::Corrupt {
            what: what.into(),
            detail: detail.into(),
        }
    }
}

/// `message` about the file or object at `place`, as `place: message`, unless the message
/// already starts with it (errors carry the item they are about, so a caller that adds
/// the place again would print it twice).
pub fn at_place(place: &str, message: &str) -> String {
    match message.strip_prefix(place) {
        Some(rest) if rest.starts_with(": ") => message.to_string(),
        _ => format!("{place}: {message}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::ErrorKind as Io;

    #[test]
    fn every_failure_keeps_its_kind() {
        let io = |k: Io| Error::io("/x", std::io::Error::new(k, "e"));
        assert_eq!(io(Io::AlreadyExists).kind(), FailureKind::Conflict);
        assert_eq!(io(Io::PermissionDenied).kind(), FailureKind::Permanent);
        assert_eq!(Error::conflict("/x", "taken").kind(), FailureKind::Conflict);
        let refused = |transient| Error::Refused {
            detail: "NO".into(),
            transient,
        };
        assert_eq!(refused(true).kind(), FailureKind::Transient);
        assert_eq!(refused(false).kind(), FailureKind::Permanent);
        let backend = |k| Error::backend("s3", k, "d");
        assert_eq!(backend(BackendKind::Down).kind(), FailureKind::NotTried);
        assert_eq!(
            backend(BackendKind::Transient).kind(),
            FailureKind::Transient
        );
        assert_eq!(backend(BackendKind::Auth).kind(), FailureKind::Permanent);
        let imap = |source| -> Error {
            mailvault_imap::Error::Connect {
                server: "127.0.0.1:1".into(),
                source,
            }
            .into()
        };
        let lost = imap(std::io::Error::from(Io::ConnectionRefused));
        assert_eq!(lost.kind(), FailureKind::Transient);
        assert!(lost.is_transient());
        assert!(!Error::not_restored("/x", "a link").is_transient());
        // The report keeps the kind beside the text.
        let f = crate::report::Failure::new("item", refused(true));
        assert_eq!((f.kind, f.error.as_str()), (FailureKind::Transient, "NO"));
        let f = crate::report::Failure::new("item", "a text");
        assert_eq!(f.kind, FailureKind::Permanent);
    }
}
