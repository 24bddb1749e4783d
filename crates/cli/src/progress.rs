//! Progress bars on a terminal; nothing otherwise.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use mailvault_core::report::Progress;
use std::io::IsTerminal;

pub struct Bar {
    bar: Option<ProgressBar>,
}

impl Bar {
    /// A bar on stderr when it is a terminal and `quiet` is off.
    pub fn new(quiet: bool, verb: &str) -> Bar {
        if quiet || !std::io::stderr().is_terminal() {
            return Bar { bar: None };
        }
        let bar = ProgressBar::with_draw_target(Some(0), ProgressDrawTarget::stderr_with_hz(5));
        let style = ProgressStyle::with_template(&format!(
            "{verb} {{bar:30}} {{pos}}/{{len}} messages  {{msg}}  {{per_sec}}  ETA {{eta}}"
        ))
        .unwrap_or_else(|_| ProgressStyle::default_bar());
        bar.set_style(style);
        Bar { bar: Some(bar) }
    }
    pub fn finish(&self) {
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
    }
}

impl Progress for Bar {
    fn add_total(&self, items: u64, _bytes: u64) {
        if let Some(b) = &self.bar {
            b.inc_length(items);
        }
    }
    fn advance(&self, items: u64, _bytes: u64) {
        if let Some(b) = &self.bar {
            b.inc(items);
        }
    }
}
