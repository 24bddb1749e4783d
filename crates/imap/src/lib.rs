//! mailvault's IMAP layer.
//!
//! - [`proto`]: the protocol as pure code (command encoding, response
//!   framing and parsing, modified UTF-7, INTERNALDATE), tested with wire
//!   transcripts.
//! - [`client`]: blocking sessions over TCP, STARTTLS or TLS: login (as the
//!   user or through a master user), folders, fast batched APPEND for
//!   restores, streamed FETCH and CONDSTORE changes for backups.
//! - [`crlf`] and [`maildir_flags`]: the bridges between Maildir files and
//!   IMAP (line endings, flag letters).
//! - `testing` (feature `testing`): a throw-away Dovecot (and, in
//!   `testing::cyrus`, Cyrus IMAP) for integration tests.
//!
//! The engine uses threads, so everything here is synchronous: one
//! [`Session`] per connection, moved to the thread that drives it.

pub mod client;
pub mod crlf;
mod error;
pub mod maildir_flags;
pub mod proto;
#[cfg(feature = "testing")]
pub mod testing;

pub use client::acl::AclEntry;
pub use client::append::{AppendMsg, AppendOutcome, Refusal};
pub use client::fetch::{Changes, FetchQuery, FetchedMessage, SearchKey, StoreMode};
pub use client::mailbox::{
    CreateOutcome, Folder, MailboxInfo, MailboxStatus, Namespaces, SpecialUse,
};
pub use client::options::{
    AppendOptions, AppendStrategy, ClientOptions, Credentials, Endpoint, Security, TlsOptions,
};
pub use client::quota::Quota;
pub use client::session::{Client, Session};
pub use client::sieve::{Script, SieveSession};
pub use crlf::{from_crlf, to_crlf, LineEndings};
pub use error::{Error, ErrorKind, Result};
pub use proto::capability::Capabilities;
pub use proto::date::InternalDate;
pub use proto::response::Code;
pub use proto::seqset::SeqSet;
