//! Logins: the admin token as the password of `ACCOUNT*admin` opens ACCOUNT (as
//! Dovecot's master users do); with `--user-auth`, a mail user's own name and mail
//! password open their own account ([`crate::users`]), nothing else. Failures are counted by the web side's [`LoginLimiter`]
//! (shared: five a minute per address, then every try is refused for the rest of the
//! minute) and answered after [`FAIL_DELAY`]. Passwords are never logged; the user name
//! is not either.
//!
//! [`LoginLimiter`]: crate::auth::LoginLimiter

use super::view::View;
use crate::state::{AppState, Live};
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long a failed login waits before its answer.
pub const FAIL_DELAY: Duration = Duration::from_secs(1);
/// The suffix of an admin's user name.
const ADMIN: &[u8] = b"*admin";

pub enum Login {
    Ok(Arc<View>, Arc<Live>),
    /// The text of the `NO`.
    Failed(String),
}

const FAILED: &str = "authentication failed: log in with your mail address and password, \
                      or as ACCOUNT*admin with the admin token";

/// The account an admin's user name names (`alice@example.org*admin`).
pub fn admin_account(user: &[u8]) -> Option<&str> {
    let account = user.strip_suffix(ADMIN)?;
    let account = std::str::from_utf8(account).ok()?;
    let plain = !account.is_empty() && account.chars().all(|c| !c.is_control() && c != '*');
    plain.then_some(account)
}

/// Checks a login from `ip` (blocking: a mail user's password may be checked on the
/// IMAP server), recorded in the audit log: who (`admin`, or the mail user; a failed
/// one's name only when it is an address) and which account.
pub fn check(st: &AppState, ip: IpAddr, user: &[u8], pass: &[u8]) -> Login {
    let login = try_login(st, ip, user, pass);
    let name = std::str::from_utf8(user).ok();
    let (who, action, detail, status) = match (&login, admin_account(user)) {
        (Login::Ok(v, _), Some(_)) => ("admin".into(), "imap login", &v.account[..], 200),
        (Login::Ok(v, _), None) => (v.account.clone(), "imap login", &v.account[..], 200),
        (Login::Failed(_), Some(a)) => ("admin".into(), "imap login failed", a, 401),
        (Login::Failed(_), None) => (crate::audit::given_name(name), "imap login failed", "", 401),
    };
    let detail = format!("IMAP view {detail}");
    st.0.audit
        .record(&who, &ip.to_string(), action, detail.trim_end(), status);
    login
}

fn try_login(st: &AppState, ip: IpAddr, user: &[u8], pass: &[u8]) -> Login {
    const LIMITED: &str = "too many failed logins from this address: wait a minute";
    let now = Instant::now();
    let account = match admin_account(user) {
        // The token is compared at once: counted when wrong, the count cleared when right,
        // as on the web side. Many sessions of one client may log in at the same moment.
        Some(a) => {
            let mut limiter = st.limiter();
            if !limiter.allowed(ip, now) {
                return Login::Failed(LIMITED.into());
            }
            if !st.0.token.matches(pass) {
                limiter.failed(ip, now);
                return Login::Failed(FAILED.into());
            }
            limiter.succeeded(ip);
            a.to_string()
        }
        // A mail user's password is counted as a failure before it is checked (which may
        // take a round trip: tries made meanwhile cannot slip past the limit), and the
        // count taken back as soon as it proved right (`LoginLimiter::refund`), before
        // the view is built.
        None => {
            {
                let mut limiter = st.limiter();
                if !limiter.allowed(ip, now) {
                    return Login::Failed(LIMITED.into());
                }
                limiter.failed(ip, now);
            }
            let Some(account) = mail_user(st, user, pass) else {
                return Login::Failed(FAILED.into());
            };
            st.limiter().refund(ip);
            account
        }
    };
    let live = match st.live() {
        Ok(live) => live,
        Err(e) => return Login::Failed(format!("cannot read the repository: {e}")),
    };
    match st.0.imap.view(&account, &live) {
        Ok(Some(v)) => Login::Ok(v, live),
        Ok(None) => Login::Failed(FAILED.into()),
        Err(e) => Login::Failed(format!("cannot read the repository: {e}")),
    }
}

/// The account of mail user `user` when `pass` is their password (`--user-auth`);
/// `None` without `--user-auth`, for a wrong password, or when it cannot be checked (said
/// in the log).
fn mail_user(st: &AppState, user: &[u8], pass: &[u8]) -> Option<String> {
    let auth = st.0.users.as_ref()?;
    let user = std::str::from_utf8(user).ok()?;
    match auth.check(user, pass) {
        Ok(true) => Some(user.to_string()),
        Ok(false) => None,
        Err(e) => {
            tracing::error!("a mail user's password could not be checked: {e}");
            None
        }
    }
}

/// The user name and password of a SASL PLAIN message (`authzid NUL authcid NUL
/// password`); an authorization identity, when given, must be the user.
pub fn plain(msg: &[u8]) -> Option<(Vec<u8>, zeroize::Zeroizing<Vec<u8>>)> {
    let mut parts = msg.splitn(3, |&b| b == 0);
    let (authz, user, pass) = (parts.next()?, parts.next()?, parts.next()?);
    if !authz.is_empty() && authz != user {
        return None;
    }
    Some((user.to_vec(), zeroize::Zeroizing::new(pass.to_vec())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admin_names() {
        assert_eq!(
            admin_account(b"alice@example.org*admin"),
            Some("alice@example.org")
        );
        assert_eq!(admin_account(b"*admin"), None);
        assert_eq!(admin_account(b"alice"), None);
        assert_eq!(admin_account(b"a*b*admin"), None);
        assert_eq!(admin_account(b"a\r\n*admin"), None);
    }

    #[test]
    fn sasl_plain() {
        let (u, p) = plain(b"\0u*admin\0secret").unwrap();
        assert_eq!(
            (u.as_slice(), p.as_slice()),
            (&b"u*admin"[..], &b"secret"[..])
        );
        assert!(plain(b"other\0u\0p").is_none());
        assert!(plain(b"u\0p").is_none());
    }
}
