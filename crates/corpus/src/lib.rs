//! Deterministic generator of realistic Maildir mail stores, for mailvault's tests, its
//! benchmark (`bench/`) and the CLI's `demo` command.
//!
//! - [`generate`] writes `ROOT/<domain>/<user>/Maildir` trees as Dovecot keeps them:
//!   Maildir++ folders, `subscriptions`, `dovecot-keywords`, Dovecot file names with
//!   `S=`/`W=` sizes and flags, mtimes at delivery time. Account sizes are skewed (a few
//!   huge mailboxes, many small); about [`CorpusSpec::shared_ratio`] of the messages are
//!   per-recipient copies of list, CC and internal mail that differ only in their
//!   delivery trace lines; some messages carry base64 attachments of incompressible
//!   bytes, and some forward an earlier attachment again.
//! - [`mutate`] applies a day of changes for incremental runs: flag renames, new mail,
//!   deletions.
//! - [`import_eml_dir`] files a directory of `.eml` files (the SpamAssassin corpus) into
//!   a Maildir, bytes unchanged.
//! - [`scan`] counts what a store holds.
//!
//! The same spec gives byte-identical trees (names, contents, mtimes) on every run, on
//! any thread count.
//!
//! ```no_run
//! use mailvault_corpus::{generate, CorpusSpec};
//! let spec = CorpusSpec::preset("tiny").expect("known preset");
//! let summary = generate(&spec, std::path::Path::new("/tmp/vmail"))?;
//! assert_eq!(summary.messages, spec.messages);
//! # Ok::<(), std::io::Error>(())
//! ```

mod date;
mod encode;
mod generate;
mod import;
mod maildir;
mod mutate;
mod plan;
mod render;
mod rng;
mod scan;
mod spec;
mod words;
mod world;

pub use generate::generate;
pub use import::import_eml_dir;
pub use mutate::mutate;
pub use scan::scan;
pub use spec::{
    AccountSummary, CorpusSpec, CorpusSummary, ImportSpec, ImportSummary, MutationSpec,
    MutationSummary, StoreStats, DEFAULT_END, DEFAULT_START, PRESETS,
};
