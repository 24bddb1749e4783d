//! What operations tell their caller while they run (progress) and when they end (reports).

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

/// An item that could not be processed, and why.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct Failure {
    /// The file, message or object concerned.
    pub item: String,
    pub error: String,
}

impl Failure {
    pub fn new(item: impl Into<String>, error: impl std::fmt::Display) -> Self {
        Failure {
            item: item.into(),
            error: error.to_string(),
        }
    }
}

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
