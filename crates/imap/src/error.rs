//! The crate's error type. Every variant names the server and, once known,
//! the account (and folder) it is about, and [`Error::is_transient`] tells a
//! retry loop whether waiting can help.

use std::io;

use crate::client::append::AppendOutcome;
use crate::proto::response::{Code, Status};

/// Whether an error may go away by itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// Retry later, slower: dropped connection, timeout, BYE, `[THROTTLED]`,
    /// `[UNAVAILABLE]`, `[INUSE]`, `[SERVERBUG]`.
    Transient,
    /// Retrying the same thing will fail the same way: wrong credentials,
    /// `[OVERQUOTA]`, missing folder, bad input, TLS or protocol failure.
    Permanent,
}

/// An IMAP failure.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The server's URL (its endpoint) or an option is unusable.
    #[error("invalid IMAP server {endpoint:?}: {reason}")]
    InvalidEndpoint {
        /// The URL or option as given.
        endpoint: String,
        /// What is wrong.
        reason: String,
    },

    /// TCP connection could not be established.
    #[error("cannot connect to IMAP server {server}: {source}")]
    Connect {
        /// `host:port`
        server: String,
        /// The OS error.
        #[source]
        source: io::Error,
    },

    /// TLS setup or certificate verification failed.
    #[error("TLS with IMAP server {server} failed: {reason} (for a self-signed test server, pass a CA file or the insecure option)")]
    Tls {
        /// `host:port`
        server: String,
        /// rustls' explanation.
        reason: String,
    },

    /// The server lacks something that was asked for (e.g. STARTTLS).
    #[error("IMAP server {server} does not offer {what}")]
    Unsupported {
        /// `host:port`
        server: String,
        /// The missing capability or mechanism.
        what: String,
    },

    /// Login refused: wrong password, unknown account, master user not allowed.
    #[error("login to {server} as {account} refused: {response} (check the user name, password or master user)")]
    AuthFailed {
        /// `host:port`
        server: String,
        /// The account (`user`, or `user` via `master`).
        account: String,
        /// The server's response (`NO [AUTHENTICATIONFAILED] ...`).
        response: String,
    },

    /// The connection broke: reset, EOF, or a read/write timeout.
    #[error("connection to {server} for {account} lost: {source}")]
    Io {
        /// `host:port`
        server: String,
        /// The account, or `-` before login.
        account: String,
        /// The OS error (`TimedOut`/`WouldBlock` for timeouts).
        #[source]
        source: io::Error,
    },

    /// The server said BYE and closed the connection.
    #[error("IMAP server {server} closed the session of {account}: {response}")]
    Bye {
        /// `host:port`
        server: String,
        /// The account, or `-` before login.
        account: String,
        /// The BYE line.
        response: String,
    },

    /// The server sent something this client cannot parse.
    #[error("protocol error with {server} for {account}: {detail}")]
    Protocol {
        /// `host:port`
        server: String,
        /// The account, or `-` before login.
        account: String,
        /// What went wrong.
        detail: String,
    },

    /// A folder that does not exist (`[TRYCREATE]`, `[NONEXISTENT]`).
    #[error("folder {folder:?} of {account} does not exist: {response}")]
    NoSuchFolder {
        /// The account.
        account: String,
        /// The folder (mailvault form, `/`-separated).
        folder: String,
        /// The server's response.
        response: String,
    },

    /// A folder name this server cannot represent (it holds the server's
    /// hierarchy delimiter inside one level, or is empty).
    #[error("folder name {folder:?} cannot be used on this server for {account}: {reason}")]
    InvalidFolderName {
        /// The account.
        account: String,
        /// The folder (mailvault form).
        folder: String,
        /// Why.
        reason: String,
    },

    /// A flag or keyword that cannot be sent.
    #[error("flag {flag:?} for {account} cannot be sent: {reason}")]
    InvalidFlag {
        /// The account.
        account: String,
        /// The flag.
        flag: String,
        /// Why.
        reason: &'static str,
    },

    /// A value that cannot be sent as what it should be (a quota resource that is no
    /// name): refused before anything was sent.
    #[error("{what} {value:?} for {account} cannot be sent: {reason}")]
    InvalidArgument {
        /// The account.
        account: String,
        /// What the value is (`quota resource`).
        what: &'static str,
        /// The value.
        value: String,
        /// Why.
        reason: &'static str,
    },

    /// `[OVERQUOTA]`: the account is full.
    #[error("account {account} is over quota (folder {folder:?}): {response}")]
    OverQuota {
        /// The account.
        account: String,
        /// The folder being written.
        folder: String,
        /// The server's response.
        response: String,
    },

    /// A command failed with NO or BAD.
    #[error("{command} failed for {account}{}: {response}", folder.as_ref().map(|f| format!(" in folder {f:?}")).unwrap_or_default())]
    Command {
        /// The account.
        account: String,
        /// The folder, when the command is about one.
        folder: Option<String>,
        /// The command name (`SELECT`, `CREATE`...).
        command: &'static str,
        /// NO or BAD.
        status: Status,
        /// The response code, if any (boxed to keep `Error` small).
        code: Option<Box<Code>>,
        /// The whole response as sent.
        response: String,
    },

    /// A batch of APPENDs stopped early: the connection broke, or the server
    /// refused in a way that concerns every message (`[OVERQUOTA]`,
    /// `[TRYCREATE]`, `[THROTTLED]`...). `outcomes[i]` is the known outcome of
    /// message `i`; `None` means it was not stored, except for the indexes
    /// in `in_doubt`, which were sent but not answered: they may have been
    /// stored, so check (e.g. by Message-ID) before sending them again.
    #[error("APPEND to folder {folder:?} of {account} stopped after {} of {} messages: {source}", outcomes.iter().filter(|o| o.is_some()).count(), outcomes.len())]
    AppendInterrupted {
        /// The account.
        account: String,
        /// The folder.
        folder: String,
        /// Per message of the batch: the outcome, if known.
        outcomes: Vec<Option<AppendOutcome>>,
        /// Messages sent whose fate is unknown.
        in_doubt: Vec<usize>,
        /// Why the batch stopped.
        #[source]
        source: Box<Error>,
    },
}

impl Error {
    /// Transient or permanent.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::Connect { .. } | Error::Io { .. } | Error::Bye { .. } => ErrorKind::Transient,
            Error::Command { code: Some(c), .. } if c.is_transient() => ErrorKind::Transient,
            Error::AppendInterrupted { source, .. } => source.kind(),
            _ => ErrorKind::Permanent,
        }
    }

    /// Whether waiting and retrying may help.
    pub fn is_transient(&self) -> bool {
        self.kind() == ErrorKind::Transient
    }

    /// Whether this is a read or write timeout.
    pub fn is_timeout(&self) -> bool {
        match self {
            Error::Io { source, .. } => matches!(
                source.kind(),
                io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock
            ),
            Error::AppendInterrupted { source, .. } => source.is_timeout(),
            _ => false,
        }
    }

    /// The underlying error of an [`Error::AppendInterrupted`], else `self`.
    pub fn root(&self) -> &Error {
        match self {
            Error::AppendInterrupted { source, .. } => source.root(),
            other => other,
        }
    }

    /// Whether the session is unusable after this error (reconnect).
    pub fn is_connection_lost(&self) -> bool {
        match self {
            Error::Io { .. } | Error::Bye { .. } | Error::Protocol { .. } => true,
            Error::AppendInterrupted { source, .. } => source.is_connection_lost(),
            _ => false,
        }
    }
}

/// Short for `Result<T, Error>`.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_and_messages() {
        let e = Error::Command {
            account: "a@b".into(),
            folder: Some("Sent".into()),
            command: "APPEND",
            status: Status::No,
            code: Some(Box::new(Code::Throttled)),
            response: "NO [THROTTLED] slow down".into(),
        };
        assert!(e.is_transient());
        assert_eq!(
            e.to_string(),
            "APPEND failed for a@b in folder \"Sent\": NO [THROTTLED] slow down"
        );
        let e = Error::AuthFailed {
            server: "h:143".into(),
            account: "bob@example.org".into(),
            response: "NO [AUTHENTICATIONFAILED] Authentication failed.".into(),
        };
        assert!(!e.is_transient());
        assert!(e.to_string().contains("bob@example.org"));
        let e = Error::Io {
            server: "h:143".into(),
            account: "x".into(),
            source: io::Error::new(io::ErrorKind::TimedOut, "t"),
        };
        assert!(e.is_transient() && e.is_timeout() && e.is_connection_lost());
    }
}
