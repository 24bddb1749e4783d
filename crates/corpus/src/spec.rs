//! What to generate (`CorpusSpec` and its presets, `MutationSpec`, `ImportSpec`) and what
//! was generated (the summaries).

use std::io;
use std::path::PathBuf;

/// 2023-01-01T00:00:00Z: the default first message date.
pub const DEFAULT_START: i64 = 1_672_531_200;
/// 2025-07-01T00:00:00Z: the default "now" of a generated store (last message date).
pub const DEFAULT_END: i64 = 1_751_328_000;

/// The names [`CorpusSpec::preset`] knows, smallest first.
pub const PRESETS: &[&str] = &["tiny", "small", "medium", "large", "huge"];

/// What [`generate`](crate::generate) writes. Start from a preset and change fields:
/// `CorpusSpec { seed: 7, ..CorpusSpec::preset("tiny").expect("preset") }`.
#[derive(Debug, Clone, PartialEq)]
pub struct CorpusSpec {
    /// Everything (names, contents, dates, sizes) derives from this seed.
    pub seed: u64,
    /// Mail accounts (`user@domain`), spread over `domains`.
    pub accounts: usize,
    /// Stored message files in total, copies included.
    pub messages: usize,
    /// Local domains: `ROOT/<domain>/<user>/Maildir`.
    pub domains: usize,
    /// Fraction of messages with base64 attachments (typically 0.10-0.15).
    pub attachment_ratio: f64,
    /// Largest attachment payload, in bytes (before base64).
    pub max_attachment_bytes: usize,
    /// Median attachment payload, in bytes (sizes are log-normal around it).
    pub median_attachment_bytes: usize,
    /// Fraction of stored messages that are extra per-recipient copies of another stored
    /// message: identical bytes except the delivery trace lines at the top (or without
    /// any, for the sender's copy in Sent).
    pub shared_ratio: f64,
    /// Fraction of attachment messages that forward an attachment of an earlier message
    /// (same payload, new message around it).
    pub forward_ratio: f64,
    /// Fraction of messages that are multipart/alternative with an HTML part.
    pub html_ratio: f64,
    /// Fraction of messages with odd-but-valid bytes: CRLF line ends, no final line end,
    /// raw 8-bit UTF-8 in headers. Zero in `tiny`.
    pub odd_ratio: f64,
    /// Unix time of the first message.
    pub start_time: i64,
    /// Unix time of the last message: the store's "now".
    pub end_time: i64,
}

impl CorpusSpec {
    /// A named preset with seed 1: `tiny` (300 messages, for unit tests), `small` (10k,
    /// ~0.4 GB), `medium` (30k), `large` (100k, ~4 GB), `huge` (300k).
    pub fn preset(name: &str) -> Option<CorpusSpec> {
        let base = CorpusSpec::small();
        Some(match name {
            "tiny" => CorpusSpec {
                accounts: 6,
                messages: 300,
                domains: 2,
                max_attachment_bytes: 256 << 10,
                median_attachment_bytes: 24 << 10,
                odd_ratio: 0.0,
                ..base
            },
            "small" => base,
            "medium" => CorpusSpec {
                accounts: 100,
                messages: 30_000,
                domains: 4,
                ..base
            },
            "large" => CorpusSpec {
                accounts: 250,
                messages: 100_000,
                domains: 5,
                ..base
            },
            "huge" => CorpusSpec {
                accounts: 600,
                messages: 300_000,
                domains: 8,
                ..base
            },
            _ => return None,
        })
    }

    /// The `small` preset.
    fn small() -> CorpusSpec {
        CorpusSpec {
            seed: 1,
            accounts: 40,
            messages: 10_000,
            domains: 3,
            attachment_ratio: 0.12,
            max_attachment_bytes: 8 << 20,
            median_attachment_bytes: 80 << 10,
            shared_ratio: 0.5,
            forward_ratio: 0.15,
            html_ratio: 0.3,
            odd_ratio: 0.01,
            start_time: DEFAULT_START,
            end_time: DEFAULT_END,
        }
    }

    /// Checks the fields are usable; `InvalidInput` says which is not.
    pub fn validate(&self) -> io::Result<()> {
        let bad = |what: &str| {
            Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                what.to_string(),
            ))
        };
        let ratio = |r: f64| (0.0..=1.0).contains(&r);
        if self.accounts == 0 {
            return bad("accounts must be at least 1");
        }
        if self.domains == 0 || self.domains > self.accounts {
            return bad("domains must be between 1 and the number of accounts");
        }
        if !ratio(self.attachment_ratio)
            || !ratio(self.shared_ratio)
            || !ratio(self.forward_ratio)
            || !ratio(self.html_ratio)
            || !ratio(self.odd_ratio)
        {
            return bad("ratios must be between 0 and 1");
        }
        if self.shared_ratio >= 1.0 && self.messages > 0 {
            return bad("shared_ratio must be below 1: copies need an original");
        }
        if self.max_attachment_bytes < 1024 || self.median_attachment_bytes == 0 {
            return bad("max_attachment_bytes must be at least 1024 and the median above 0");
        }
        if self.end_time <= self.start_time + 86_400 {
            return bad("end_time must be at least a day after start_time");
        }
        Ok(())
    }
}

impl Default for CorpusSpec {
    /// The `small` preset.
    fn default() -> CorpusSpec {
        CorpusSpec::small()
    }
}

/// One account of a generated or scanned store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccountSummary {
    /// `user@domain`.
    pub address: String,
    /// The Maildir, relative to the store root: `domain/user/Maildir` (empty when the
    /// root is itself a Maildir).
    pub maildir: PathBuf,
    /// Message files in all folders.
    pub messages: usize,
    /// Bytes of those files.
    pub bytes: u64,
}

/// What [`generate`](crate::generate) wrote.
#[derive(Debug, Clone, PartialEq)]
pub struct CorpusSummary {
    pub accounts: usize,
    pub domains: usize,
    /// Folders, INBOX included, over all accounts.
    pub folders: usize,
    /// Message files.
    pub messages: usize,
    /// Bytes of message files.
    pub bytes: u64,
    /// Messages that are an extra per-recipient copy of another stored message.
    pub copies: usize,
    /// Messages with at least one attachment.
    pub attachments: usize,
    /// Messages forwarding an attachment seen in an earlier message.
    pub forwarded: usize,
    /// Messages with odd-but-valid bytes (CRLF, no final line end, 8-bit headers).
    pub odd: usize,
    /// Messages in `new/` (not yet seen by a client).
    pub new_messages: usize,
    /// Per account, in store order (domain, then user).
    pub per_account: Vec<AccountSummary>,
}

impl CorpusSummary {
    /// The account with the most bytes.
    pub fn largest_account(&self) -> Option<&AccountSummary> {
        largest(&self.per_account)
    }
}

pub(crate) fn largest(accounts: &[AccountSummary]) -> Option<&AccountSummary> {
    accounts
        .iter()
        .max_by(|a, b| a.bytes.cmp(&b.bytes).then(b.address.cmp(&a.address)))
}

/// Changes [`mutate`](crate::mutate) makes to a store, as fractions of its messages.
#[derive(Debug, Clone, PartialEq)]
pub struct MutationSpec {
    pub seed: u64,
    /// Messages whose flags change (file renamed; `new/` ones move to `cur/`).
    pub flag_rename_ratio: f64,
    /// New messages delivered (per-recipient copies included).
    pub new_ratio: f64,
    /// Messages deleted.
    pub delete_ratio: f64,
}

impl Default for MutationSpec {
    /// The mutation: 5% flag renames, 1% new, 0.5% deleted.
    fn default() -> MutationSpec {
        MutationSpec {
            seed: 2,
            flag_rename_ratio: 0.05,
            new_ratio: 0.01,
            delete_ratio: 0.005,
        }
    }
}

/// What [`mutate`](crate::mutate) changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MutationSummary {
    /// Message files before the mutation.
    pub messages_before: usize,
    /// Files renamed for a flag change (`new_to_cur` included).
    pub flag_renames: usize,
    /// Of those, files moved from `new/` to `cur/`.
    pub new_to_cur: usize,
    /// New message files (copies included).
    pub new_messages: usize,
    /// Of those, extra per-recipient copies.
    pub new_copies: usize,
    /// Bytes of the new message files.
    pub new_bytes: u64,
    /// Files deleted.
    pub deleted: usize,
    /// Bytes of the deleted files.
    pub deleted_bytes: u64,
    /// Message files after the mutation.
    pub messages_after: usize,
}

/// How [`import_eml_dir`](crate::import_eml_dir) files messages.
#[derive(Debug, Clone, PartialEq)]
pub struct ImportSpec {
    /// Drives flags, folders and file names.
    pub seed: u64,
    /// Fraction of non-spam messages filed in `Archive` rather than INBOX.
    pub archive_ratio: f64,
}

impl Default for ImportSpec {
    fn default() -> ImportSpec {
        ImportSpec {
            seed: 1,
            archive_ratio: 0.3,
        }
    }
}

/// What [`import_eml_dir`](crate::import_eml_dir) wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImportSummary {
    pub messages: usize,
    pub bytes: u64,
    /// Messages per folder (`INBOX`, `Archive`, `Junk`).
    pub folders: Vec<(String, usize)>,
}

/// What [`scan`](crate::scan) found in a store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreStats {
    pub accounts: usize,
    pub folders: usize,
    pub messages: usize,
    pub bytes: u64,
    pub new_messages: usize,
    pub per_account: Vec<AccountSummary>,
}

impl StoreStats {
    /// The account with the most bytes.
    pub fn largest_account(&self) -> Option<&AccountSummary> {
        largest(&self.per_account)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_are_valid() {
        for name in PRESETS {
            let spec = CorpusSpec::preset(name).expect("known preset");
            spec.validate().expect("valid preset");
        }
        assert!(CorpusSpec::preset("nope").is_none());
        assert_eq!(
            CorpusSpec::default(),
            CorpusSpec::preset("small").expect("small")
        );
        let bad = CorpusSpec {
            domains: 0,
            ..CorpusSpec::default()
        };
        assert!(bad.validate().is_err());
    }
}
