//! What a client connects to and how: target URL, TLS, timeouts, APPEND
//! tuning, credentials. Plain data; no clap, no config files.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use crate::error::{Error, Result};

/// Transport security.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Security {
    /// Plain TCP (`imap://`).
    Plain,
    /// Plain TCP upgraded with STARTTLS (`imap://` + `--starttls`); fails if
    /// the server does not offer it.
    StartTls,
    /// TLS from the first byte (`imaps://`).
    Tls,
}

/// Where to connect: the server's host, port and transport security (an IMAP URL).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// Host name or IP address (IPv6 without brackets).
    pub host: String,
    /// TCP port.
    pub port: u16,
    /// Transport security.
    pub security: Security,
}

impl Endpoint {
    /// Parses `imap://host[:port][/]` (port 143) or `imaps://host[:port][/]`
    /// (port 993). IPv6 addresses go in brackets: `imap://[::1]:143`.
    pub fn parse(url: &str) -> Result<Endpoint> {
        let bad = |reason: &str| Error::InvalidEndpoint {
            endpoint: url.to_string(),
            reason: reason.to_string(),
        };
        let (security, rest, default_port) = if let Some(r) = strip_prefix_ci(url, "imaps://") {
            (Security::Tls, r, 993)
        } else if let Some(r) = strip_prefix_ci(url, "imap://") {
            (Security::Plain, r, 143)
        } else {
            return Err(bad("expected imap://host[:port] or imaps://host[:port]"));
        };
        let rest = rest.strip_suffix('/').unwrap_or(rest);
        if let Some((_, server)) = rest.split('/').next().unwrap_or(rest).rsplit_once('@') {
            // The URL is not quoted: it holds a secret.
            return Err(Error::InvalidEndpoint {
                endpoint: format!("{}{server}", &url[..url.len() - rest.len()]),
                reason: "credentials in the URL are refused (they would show in process lists and logs): give the password in --imap-password-file and the user with --imap-user-template or --imap-master-user".into(),
            });
        }
        if rest.contains('/') || rest.contains('?') {
            return Err(bad(
                "only host and port are allowed (credentials and paths go in options)",
            ));
        }
        let (host, port) = if let Some(v6) = rest.strip_prefix('[') {
            let (h, after) = v6.split_once(']').ok_or_else(|| bad("unclosed '['"))?;
            match after.strip_prefix(':') {
                Some(p) => (h, Some(p)),
                None if after.is_empty() => (h, None),
                None => return Err(bad("garbage after IPv6 address")),
            }
        } else {
            match rest.rsplit_once(':') {
                Some((h, p)) => (h, Some(p)),
                None => (rest, None),
            }
        };
        if host.is_empty() {
            return Err(bad("missing host"));
        }
        let port = match port {
            Some(p) => p
                .parse::<u16>()
                .ok()
                .filter(|&p| p > 0)
                .ok_or_else(|| bad("bad port"))?,
            None => default_port,
        };
        Ok(Endpoint {
            host: host.to_string(),
            port,
            security,
        })
    }

    /// Switches a plain target to STARTTLS.
    pub fn with_starttls(mut self) -> Self {
        if self.security == Security::Plain {
            self.security = Security::StartTls;
        }
        self
    }

    /// `host:port` (brackets around IPv6), for messages and `connect`.
    pub fn server(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

fn strip_prefix_ci<'a>(s: &'a str, prefix: &str) -> Option<&'a str> {
    if s.len() >= prefix.len() && s[..prefix.len()].eq_ignore_ascii_case(prefix) {
        Some(&s[prefix.len()..])
    } else {
        None
    }
}

/// TLS trust settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsOptions {
    /// Trust the operating system's root certificates.
    pub system_roots: bool,
    /// Also trust the CA certificates in this PEM file.
    pub ca_file: Option<PathBuf>,
    /// Accept any certificate (self-signed test servers, labs). The link is
    /// encrypted but the server is not authenticated.
    pub insecure: bool,
}

impl Default for TlsOptions {
    fn default() -> Self {
        TlsOptions {
            system_roots: true,
            ca_file: None,
            insecure: false,
        }
    }
}

/// How [`Session::append_batch`](crate::Session::append_batch) sends messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AppendStrategy {
    /// The fastest the server allows: MULTIAPPEND with non-synchronizing
    /// literals, else pipelined APPENDs with LITERAL+, else one APPEND at a
    /// time with synchronizing literals.
    #[default]
    Auto,
    /// MULTIAPPEND (literals as the server allows); falls back to `Auto` if
    /// MULTIAPPEND is not offered.
    MultiAppend,
    /// One APPEND per message, pipelined when literals need no `+`.
    Pipelined,
    /// One APPEND per message, waiting for each `+` and each answer (the
    /// slowest path; what a server without LITERAL+ gets).
    Synchronous,
}

/// APPEND tuning.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppendOptions {
    /// Path selection.
    pub strategy: AppendStrategy,
    /// Largest MULTIAPPEND command; a batch above it is split.
    pub max_command_bytes: usize,
    /// Most MULTIAPPEND messages in one command.
    pub max_command_messages: usize,
    /// Most pipelined APPENDs awaiting their answer.
    pub pipeline_depth: usize,
    /// A client-side size limit, applied on top of the server's APPENDLIMIT.
    pub max_message_bytes: Option<u64>,
}

impl Default for AppendOptions {
    fn default() -> Self {
        AppendOptions {
            strategy: AppendStrategy::Auto,
            max_command_bytes: 16 << 20,
            max_command_messages: 1000,
            pipeline_depth: 64,
            max_message_bytes: None,
        }
    }
}

/// Everything needed to open sessions to one server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientOptions {
    /// Server and transport.
    pub endpoint: Endpoint,
    /// Certificate trust.
    pub tls: TlsOptions,
    /// TCP connect timeout.
    pub connect_timeout: Duration,
    /// Read and write timeout of every socket operation; a server busy with
    /// a large MULTIAPPEND must answer within it.
    pub io_timeout: Duration,
    /// APPEND tuning.
    pub append: AppendOptions,
}

impl ClientOptions {
    /// Defaults for `endpoint`: system roots, 30 s connect, 300 s I/O timeout.
    pub fn new(endpoint: Endpoint) -> Self {
        ClientOptions {
            endpoint,
            tls: TlsOptions::default(),
            connect_timeout: Duration::from_secs(30),
            io_timeout: Duration::from_secs(300),
            append: AppendOptions::default(),
        }
    }
}

/// How to log in.
#[derive(Clone, PartialEq, Eq)]
pub enum Credentials {
    /// As the account itself: `LOGIN` (or `AUTHENTICATE PLAIN` when the
    /// server disables LOGIN).
    User {
        /// The account.
        user: String,
        /// Its password.
        password: String,
    },
    /// As a master user acting for `user`: SASL PLAIN with authorization
    /// identity `user` and authentication identity `master` (RFC 4616;
    /// Dovecot master users, Cyrus admins).
    Master {
        /// The account to act for.
        user: String,
        /// The master (admin) user.
        master: String,
        /// The master user's password.
        password: String,
    },
    /// As a master user through Dovecot's `LOGIN user*master password` form
    /// (`auth_master_user_separator`), for clients or proxies without SASL.
    MasterSeparator {
        /// The account to act for.
        user: String,
        /// The master user.
        master: String,
        /// The separator, usually `*`.
        separator: char,
        /// The master user's password.
        password: String,
    },
}

impl Credentials {
    /// The account these credentials open.
    pub fn account(&self) -> &str {
        match self {
            Credentials::User { user, .. }
            | Credentials::Master { user, .. }
            | Credentials::MasterSeparator { user, .. } => user,
        }
    }

    /// `user` or `user (via master admin)`, for messages.
    pub fn describe(&self) -> String {
        match self {
            Credentials::User { user, .. } => user.clone(),
            Credentials::Master { user, master, .. }
            | Credentials::MasterSeparator { user, master, .. } => {
                format!("{user} (via master user {master})")
            }
        }
    }
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never print the password.
        write!(f, "Credentials({})", self.describe())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        let t = Endpoint::parse("imap://mail.example.org").expect("plain");
        assert_eq!((t.port, t.security), (143, Security::Plain));
        let t = Endpoint::parse("IMAPS://mail.example.org:1993/").expect("tls");
        assert_eq!(
            (t.host.as_str(), t.port, t.security),
            ("mail.example.org", 1993, Security::Tls)
        );
        let t = Endpoint::parse("imap://[::1]:1143")
            .expect("v6")
            .with_starttls();
        assert_eq!((t.host.as_str(), t.security), ("::1", Security::StartTls));
        assert_eq!(t.server(), "[::1]:1143");
        for bad in [
            "http://x",
            "imap://",
            "imap://h:0",
            "imap://h:x",
            "imap://u@h",
            "imap://h/INBOX",
        ] {
            assert!(Endpoint::parse(bad).is_err(), "{bad}");
        }
        let e = Endpoint::parse("imaps://bob:s3cret@mail.example.org:993/")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("credentials") && e.contains("mail.example.org"),
            "{e}"
        );
        assert!(!e.contains("s3cret") && !e.contains("bob"), "{e}");
    }

    #[test]
    fn credentials_hide_password() {
        let c = Credentials::Master {
            user: "bob".into(),
            master: "admin".into(),
            password: "s3cret".into(),
        };
        let d = format!("{c:?}");
        assert!(!d.contains("s3cret"));
        assert!(d.contains("admin"));
    }
}
