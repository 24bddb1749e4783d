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
    /// Whether the caller asks the work to stop (a restore cancelled from the web UI):
    /// a restore then reads and writes nothing more, and counts what is left as not
    /// tried. Asked between pieces of work, so it should be cheap.
    fn cancelled(&self) -> bool {
        false
    }
}

/// Progress that goes nowhere.
pub struct NoProgress;
impl Progress for NoProgress {}

/// An item that could not be processed, why, and what kind of failure it was.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
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

/// A label value as Prometheus' text format wants it: `\`, `"` and line feeds escaped
/// (the metrics file of the commands, `serve`'s `/metrics`).
pub fn prometheus_label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// A byte count for people: `512 B`, `1.5 KiB`, `3.2 MiB` (what the CLI prints and the
/// web UI shows).
pub fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    match u {
        0 => format!("{n} B"),
        _ => format!("{v:.1} {}", UNITS[u]),
    }
}

/// Unix seconds as `YYYY-MM-DD HH:MM:SS` in UTC (the seconds themselves when out of
/// any calendar's range).
pub fn utc_time(secs: i64) -> String {
    jiff::Timestamp::from_second(secs).map_or_else(
        |_| secs.to_string(),
        |t| t.strftime("%Y-%m-%d %H:%M:%S").to_string(),
    )
}

pub(crate) fn per_sec(n: u64, secs: f64) -> f64 {
    if secs > 0.0 {
        n as f64 / secs
    } else {
        0.0
    }
}
