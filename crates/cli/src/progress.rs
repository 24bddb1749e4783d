//! Progress bars on a terminal; nothing otherwise.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use mailvault_core::report::Progress;
use std::io::IsTerminal;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

pub struct Bar {
    bar: Option<ProgressBar>,
    bytes: AtomicU64,
    total_bytes: AtomicU64,
}

impl Bar {
    /// A bar on stderr when it is a terminal and `quiet` is off.
    pub fn new(quiet: bool, verb: &str) -> Bar {
        if quiet || !std::io::stderr().is_terminal() {
            return Bar {
                bar: None,
                bytes: AtomicU64::new(0),
                total_bytes: AtomicU64::new(0),
            };
        }
        let bar = ProgressBar::with_draw_target(Some(0), ProgressDrawTarget::stderr_with_hz(5));
        let style = ProgressStyle::with_template(&format!(
            "{verb} {{bar:30}} {{pos}}/{{len}} messages  {{msg}}  {{per_sec}}  ETA {{eta}}"
        ))
        .unwrap_or_else(|_| ProgressStyle::default_bar());
        bar.set_style(style);
        Bar {
            bar: Some(bar),
            bytes: AtomicU64::new(0),
            total_bytes: AtomicU64::new(0),
        }
    }
    pub fn finish(&self) {
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
    }

    /// Runs `f` under a bar (as [`Bar::new`] makes it), cleared when `f` returns.
    pub fn run<R>(quiet: bool, verb: &str, f: impl FnOnce(&Bar) -> R) -> R {
        let bar = Bar::new(quiet, verb);
        let out = f(&bar);
        bar.finish();
        out
    }
}

impl Progress for Bar {
    fn add_total(&self, items: u64, bytes: u64) {
        if let Some(b) = &self.bar {
            self.total_bytes.fetch_add(bytes, Relaxed);
            b.inc_length(items);
        }
    }
    fn advance(&self, items: u64, bytes: u64) {
        if let Some(b) = &self.bar {
            let done = self.bytes.fetch_add(bytes, Relaxed) + bytes;
            b.set_message(format!(
                "{} / {}",
                crate::output::bytes(done),
                crate::output::bytes(self.total_bytes.load(Relaxed))
            ));
            b.inc(items);
        }
    }
}
