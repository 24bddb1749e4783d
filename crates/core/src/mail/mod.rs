//! Mail formats as pure codecs, bytes in and bytes out (no files, no sockets): the mbox
//! reader and writer and the incremental rule for grown mboxes ([`mbox`]), the IMAP flags
//! mbox headers carry ([`flags`]), EML export names and the flags sidecar ([`eml`]), a header's fields as IMAP reads them
//! ([`header`]), and
//! folder names as paths in mbox and EML trees ([`layout`]). The mbox and EML sources and
//! targets drive these; docs/mail-formats.md describes the formats.

pub mod eml;
pub mod flags;
pub mod header;
pub mod layout;
pub mod maildir;
pub mod mbox;
pub mod summary;

pub use eml::{EmlNames, Sidecar, SidecarEntry};
pub use flags::Meta;
pub use layout::Tree;
pub use mbox::{Change, MboxMessage, MboxReader, MboxState, MboxWriter, Written};

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
