//! What operations tell their caller while they run (progress) and when they end (reports).

use crate::error::{Error, FailureKind};
use serde::Serialize;

/// Progress callbacks; the CLI draws bars with them. All methods may be called from many
/// threads at once.
pub trait Progress: Sync {
    /// More work was found: `items` messages of `bytes` bytes.
    fn add_total(&self, _items: u64, _bytes: u64) {}
    /// Work was done.
    fn advance(&self, _items: u64, _bytes: u64) {}
}

/// Progress that goes nowhere.
pub struct NoProgress;
impl Progress for NoProgress {}

/// An item that could not be processed, why, and what kind of failure it was.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct Failure {
    /// The file, message or object concerned.
    pub item: String,
    pub error: String,
    pub kind: FailureKind,
}

impl Failure {
    pub fn new(item: impl Into<String>, error: impl Reason) -> Self {
        Failure {
            item: item.into(),
            kind: error.kind(),
            error: error.to_string(),
        }
    }
}

/// Why an item failed: an [`Error`], which keeps its kind, or a text, which is a
/// [`FailureKind::Permanent`] failure.
pub trait Reason: std::fmt::Display {
    fn kind(&self) -> FailureKind {
        FailureKind::Permanent
    }
}

impl Reason for Error {
    fn kind(&self) -> FailureKind {
        Error::kind(self)
    }
}
impl Reason for &Error {
    fn kind(&self) -> FailureKind {
        Error::kind(self)
    }
}
impl Reason for std::io::Error {
    fn kind(&self) -> FailureKind {
        use std::io::ErrorKind as K;
        match std::io::Error::kind(self) {
            K::AlreadyExists => FailureKind::Conflict,
            K::Interrupted | K::TimedOut | K::WouldBlock => FailureKind::Transient,
            _ => FailureKind::Permanent,
        }
    }
}
impl Reason for mailvault_imap::Error {
    fn kind(&self) -> FailureKind {
        match self.is_transient() {
            true => FailureKind::Transient,
            false => FailureKind::Permanent,
        }
    }
}
impl Reason for crate::mail::MailError {
    fn kind(&self) -> FailureKind {
        match self {
            crate::mail::MailError::Io { source, .. } => Reason::kind(source),
            _ => FailureKind::Permanent,
        }
    }
}
impl Reason for String {}
impl Reason for &String {}
impl Reason for &str {}

/// `a / b`, or `None` when `b` is zero.
pub(crate) fn ratio(a: u64, b: u64) -> Option<f64> {
    (b > 0).then(|| a as f64 / b as f64)
}

pub(crate) fn per_sec(n: u64, secs: f64) -> f64 {
    if secs > 0.0 {
        n as f64 / secs
    } else {
        0.0
    }
}
