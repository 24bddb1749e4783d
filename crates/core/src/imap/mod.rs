//! What the IMAP backup ([`crate::source::imap`]) and the restore into a live IMAP server
//! ([`crate::dest::imap`], which also keeps its journal) share: connections and logins,
//! and in [`names`] the pure conversions between the two worlds (Maildir++ directories,
//! synthesized Maildir names, `subscriptions` files), so that any snapshot restores to a
//! Maildir or to IMAP alike.
//!
//! The wire protocol is `mailvault-imap`'s; this module only decides what to send and
//! keeps the books. What is normalized on the way is written down in `docs/imap.md`.

pub mod acl;
pub mod names;

pub use mailvault_imap as client;

use crate::{Error, Result};
use mailvault_imap::{Client, ClientOptions, Credentials, Session};
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Where a login password comes from.
#[derive(Clone)]
pub enum Password {
    /// One password for every login (the master user's, or every account's).
    One(String),
    /// A directory holding one file per account, named after the account
    /// (`bob@example.org`), each with that account's password.
    PerAccount(PathBuf),
}

impl std::fmt::Debug for Password {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Password::One(_) => f.write_str("Password(..)"),
            Password::PerAccount(d) => write!(f, "PasswordDir({})", d.display()),
        }
    }
}

/// How to log in for an account.
#[derive(Clone, Debug)]
pub enum Login {
    /// As the account itself; the login name is `template` with `%u` replaced by the
    /// account (`bob@example.org`), `%n` by its local part and `%d` by its domain.
    User {
        template: String,
        password: Password,
    },
    /// Through a master user (Dovecot `user*master`, SASL PLAIN with an authorization
    /// identity): one credential for every account.
    Master { master: String, password: Password },
}

impl Login {
    /// The credentials that open `account`.
    pub fn credentials(&self, account: &str) -> Result<Credentials> {
        let password = |p: &Password| -> Result<String> {
            match p {
                Password::One(s) => Ok(s.clone()),
                Password::PerAccount(dir) => {
                    let path = dir.join(account);
                    let s = std::fs::read_to_string(&path).map_err(|e| Error::Credentials {
                        account: account.into(),
                        detail: format!("cannot read password file {}: {e}", path.display()),
                    })?;
                    Ok(s.trim_end_matches(['\n', '\r']).to_string())
                }
            }
        };
        Ok(match self {
            Login::User {
                template,
                password: p,
            } => Credentials::User {
                user: login_name(template, account),
                password: password(p)?,
            },
            Login::Master {
                master,
                password: p,
            } => Credentials::Master {
                user: account.to_string(),
                master: master.clone(),
                password: password(p)?,
            },
        })
    }
}

/// Applies a login template: `%u` account, `%n` local part, `%d` domain, `%%` a `%`.
pub fn login_name(template: &str, account: &str) -> String {
    let (local, domain) = account.split_once('@').unwrap_or((account, ""));
    let mut out = String::new();
    let mut chars = template.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('u') => out.push_str(account),
            Some('n') => out.push_str(local),
            Some('d') => out.push_str(domain),
            Some('%') => out.push('%'),
            Some(o) => {
                out.push('%');
                out.push(o);
            }
            None => out.push('%'),
        }
    }
    out
}

/// The server and how to log in.
#[derive(Clone, Debug)]
pub struct Connection {
    /// Target, TLS, timeouts, APPEND tuning.
    pub client: ClientOptions,
    pub login: Login,
}

impl Connection {
    /// `imap://host:port` or `imaps://host:port`, for reports, labels and journal keys.
    pub fn url(&self) -> String {
        let t = &self.client.endpoint;
        let scheme = match t.security {
            mailvault_imap::Security::Tls => "imaps",
            _ => "imap",
        };
        format!("{scheme}://{}", t.server())
    }

    /// The server's ManageSieve (RFC 5804) on `port`: the IMAP server's host, with
    /// STARTTLS when the IMAP connection has TLS (ManageSieve has no implicit-TLS port);
    /// `None` for port 0 (none).
    pub fn sieve(&self, port: u16) -> Option<ClientOptions> {
        if port == 0 {
            return None;
        }
        let mut o = self.client.clone();
        o.endpoint.port = port;
        if o.endpoint.security == mailvault_imap::Security::Tls {
            o.endpoint.security = mailvault_imap::Security::StartTls;
        }
        Some(o)
    }
}

/// One phase of a run: how many items in how long.
#[derive(Clone, Debug, serde::Serialize, PartialEq)]
pub struct Phase {
    pub name: String,
    pub items: u64,
    pub secs: f64,
    pub items_per_sec: f64,
    /// What the phase did or could not do, in words.
    pub note: String,
}

impl Phase {
    fn of_secs(name: &str, items: u64, secs: f64, note: String) -> Phase {
        Phase {
            name: name.into(),
            items,
            secs,
            items_per_sec: crate::report::per_sec(items, secs),
            note,
        }
    }
}

/// A phase that runs in pieces, one per account, overlapping other accounts' pieces of
/// it and of other phases: it lasts from the start of its first piece to the end of its
/// last.
#[derive(Default)]
pub(crate) struct Span(Mutex<Option<(Instant, Instant)>>);

impl Span {
    /// A piece that started at `started` ends now.
    pub(crate) fn add(&self, started: Instant) {
        let now = Instant::now();
        let mut g = crate::repo::lock(&self.0);
        *g = Some(match *g {
            Some((a, b)) => (a.min(started), b.max(now)),
            None => (started, now),
        });
    }

    pub(crate) fn phase(&self, name: &str, items: u64, note: String) -> Phase {
        let secs = crate::repo::lock(&self.0)
            .map(|(a, b)| (b - a).as_secs_f64())
            .unwrap_or(0.0);
        Phase::of_secs(name, items, secs, note)
    }
}

/// Logs in, retrying transient failures (refused connection, BYE, timeouts) with
/// exponential backoff; wrong credentials fail at once.
pub(crate) fn login_with_backoff(
    client: &Client,
    creds: &Credentials,
    attempts: u32,
) -> mailvault_imap::Result<Session> {
    let mut delay = Duration::from_millis(200);
    let mut n = 0;
    loop {
        match client.login(creds) {
            Ok(s) => return Ok(s),
            Err(e) if e.is_transient() && n + 1 < attempts => {
                tracing::warn!("login for {}: {e}; retrying in {delay:?}", creds.account());
                std::thread::sleep(delay);
                delay = (delay * 2).min(Duration::from_secs(30));
                n += 1;
            }
            Err(e) => return Err(e),
        }
    }
}

/// Paces a run: an optional cap in items per second (`--max-rate`, shared by every
/// connection) and an adaptive delay that doubles when the server throttles (`NO
/// [THROTTLED]`, `[UNAVAILABLE]`, BYE, timeouts) and halves again on every success.
pub(crate) struct Pacer {
    max_rate: Option<f64>,
    state: Mutex<PacerState>,
}

struct PacerState {
    next: Instant,
    penalty: Duration,
}

impl Pacer {
    pub(crate) fn new(max_rate: Option<f64>) -> Pacer {
        Pacer {
            max_rate: max_rate.filter(|r| *r > 0.0),
            state: Mutex::new(PacerState {
                next: Instant::now(),
                penalty: Duration::ZERO,
            }),
        }
    }

    /// Waits until `items` more may be sent.
    pub(crate) fn wait(&self, items: u64) {
        let (start, penalty) = {
            let mut s = crate::repo::lock(&self.state);
            let now = Instant::now();
            let start = s.next.max(now);
            if let Some(r) = self.max_rate {
                s.next = start + Duration::from_secs_f64(items as f64 / r);
            }
            (start, s.penalty)
        };
        let now = Instant::now();
        if start > now {
            std::thread::sleep(start - now);
        }
        if !penalty.is_zero() {
            std::thread::sleep(penalty);
        }
    }

    /// The server asked us to slow down.
    pub(crate) fn throttled(&self) {
        let mut s = crate::repo::lock(&self.state);
        s.penalty = (s.penalty * 2)
            .max(Duration::from_millis(250))
            .min(Duration::from_secs(30));
    }

    /// A batch went through.
    pub(crate) fn ok(&self) {
        let mut s = crate::repo::lock(&self.state);
        s.penalty /= 2;
        if s.penalty < Duration::from_millis(10) {
            s.penalty = Duration::ZERO;
        }
    }
}

/// The default journal directory: `$XDG_CACHE_HOME/mailvault/imap-journal`, else
/// `$HOME/.cache/mailvault/imap-journal`, else a directory below the system temp dir.
pub fn default_journal_dir() -> PathBuf {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .filter(|v| !v.is_empty())
                .map(|h| PathBuf::from(h).join(".cache"))
        })
        .unwrap_or_else(std::env::temp_dir);
    base.join("mailvault").join("imap-journal")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates() {
        assert_eq!(login_name("%u", "bob@example.org"), "bob@example.org");
        assert_eq!(login_name("%n", "bob@example.org"), "bob");
        assert_eq!(
            login_name("%d\\%n%%", "bob@example.org"),
            "example.org\\bob%"
        );
        assert_eq!(login_name("x%", "bob"), "x%");
    }

    #[test]
    fn pacer_caps_rate() {
        let p = Pacer::new(Some(1000.0));
        let t = Instant::now();
        for _ in 0..5 {
            p.wait(20);
        }
        // 100 items at 1000/s: the last wait starts at 80 ms.
        assert!(t.elapsed() >= Duration::from_millis(75));
        p.throttled();
        p.ok();
        p.ok();
        p.ok();
        p.ok();
        p.ok();
        assert!(crate::repo::lock(&p.state).penalty.is_zero());
    }
}
