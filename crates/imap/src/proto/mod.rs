//! The IMAP protocol as pure code: bytes in, bytes out, no sockets.
//!
//! - [`command`] encodes commands (atoms, quoted strings, synchronizing and
//!   LITERAL+ literals) with borrowed payloads.
//! - [`framing`] finds where a server response ends, literals included.
//! - [`response`] parses one framed response.
//! - [`mutf7`] encodes and decodes modified UTF-7 mailbox names.
//! - [`date`] formats and parses INTERNALDATE.
//! - [`seqset`] holds sequence and UID sets.
//! - [`capability`] reads capabilities and builds SASL PLAIN.

pub mod capability;
pub mod command;
pub mod date;
pub mod framing;
pub mod mutf7;
pub mod response;
pub mod seqset;
