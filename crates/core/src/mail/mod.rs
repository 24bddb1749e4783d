//! Mail formats as pure codecs, bytes in and bytes out (no files, no sockets): the mbox
//! reader and writer and the incremental rule for grown mboxes ([`mbox`]), the IMAP flags
//! mbox headers carry ([`flags`]), EML export names and the flags sidecar ([`eml`]), and
//! folder names as paths in mbox and EML trees ([`layout`]). The mbox and EML sources and
//! targets drive these; docs/mail-formats.md describes the formats.

pub mod eml;
pub mod flags;
pub mod layout;
pub mod maildir;
pub mod mbox;

pub use eml::{EmlNames, Sidecar, SidecarEntry};
pub use layout::Tree;
pub use mbox::{Change, MboxMessage, MboxReader, MboxState, MboxWriter, Written};

/// What a mail format keeps about a message besides its bytes: what a source hands the
/// pipeline per message and what a target gets back.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Meta {
    /// IMAP system flags (`\Seen`, `\Answered`, `\Flagged`, `\Deleted`, `\Draft`), named
    /// as `mailvault_imap::maildir_flags` names them, in that order ([`flags::system`]).
    pub flags: Vec<String>,
    /// IMAP keywords (`$Forwarded`, `Junk`, ...), in the order found, without repeats.
    pub keywords: Vec<String>,
    /// The internal date, Unix seconds (`None`: the format gave none that parses).
    pub internal_date: Option<i64>,
}

impl Meta {
    /// A `Meta` from one IMAP flag list that mixes system flags and keywords (as
    /// `maildir_to_imap` and IMAP `FLAGS` give them): `\`-flags the engine knows become
    /// [`Meta::flags`], `\Recent` and unknown `\`-flags are dropped, the rest are keywords.
    pub fn from_imap<S: AsRef<str>>(list: &[S], internal_date: Option<i64>) -> Meta {
        let mut m = Meta {
            internal_date,
            ..Meta::default()
        };
        for f in list {
            let f = f.as_ref();
            if f.starts_with('\\') {
                if let Some(name) = flags::canonical(f) {
                    m.flags.push(name.to_string());
                }
            } else if !m.keywords.iter().any(|k| k.eq_ignore_ascii_case(f)) {
                m.keywords.push(f.to_string());
            }
        }
        m.flags = flags::sorted(&m.flags);
        m
    }

    /// The flags and keywords as one IMAP flag list (system flags first).
    pub fn imap_list(&self) -> Vec<String> {
        self.flags.iter().chain(&self.keywords).cloned().collect()
    }
}

/// What can go wrong in the mail codecs; each error names the place (a byte offset in the
/// mbox, a line of a sidecar, a keyword). The caller adds the file's path.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MailError {
    /// Reading or writing the mbox failed at this byte offset.
    #[error("mbox byte {offset}: {source}")]
    Io { offset: u64, source: std::io::Error },
    /// A keyword that an mbox `X-Keywords:` header cannot carry (empty, or with white
    /// space, a comma or a control character; IMAP keywords are atoms and never do).
    #[error("keyword {keyword:?} cannot be written to an mbox X-Keywords header: it is empty or has white space, a comma or a control character")]
    Keyword { keyword: String },
    /// A line of a flags sidecar (`.mailvault-flags`) does not parse.
    #[error("flags sidecar line {line}: {detail}")]
    Sidecar { line: usize, detail: String },
}
