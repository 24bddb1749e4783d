//! The blocking IMAP client: [`Client`](session::Client) holds connection settings, each
//! [`Session`](session::Session) is one connection (one per thread).

pub mod acl;
pub mod append;
mod conn;
pub mod fetch;
pub mod mailbox;
pub mod metadata;
pub mod options;
mod pipeline;
pub mod quota;
pub mod session;
pub mod sieve;
mod stream;
