//! Logins: the admin token as the password of `ACCOUNT*admin` opens ACCOUNT (as
//! Dovecot's master users do). Failures are counted by the web side's [`LoginLimiter`]
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
    Ok(View, Arc<Live>),
    /// The text of the `NO`.
    Failed(String),
}

const FAILED: &str = "authentication failed: log in as ACCOUNT*admin with the admin token";

/// The account an admin's user name names (`alice@example.org*admin`).
pub fn admin_account(user: &[u8]) -> Option<&str> {
    let account = user.strip_suffix(ADMIN)?;
    let account = std::str::from_utf8(account).ok()?;
    let plain = !account.is_empty() && account.chars().all(|c| !c.is_control() && c != '*');
    plain.then_some(account)
}

/// Checks a login from `ip`.
pub fn check(st: &AppState, ip: IpAddr, user: &[u8], pass: &[u8]) -> Login {
    if !st.limiter().allowed(ip, Instant::now()) {
        return Login::Failed("too many failed logins from this address: wait a minute".into());
    }
    let token_ok = st.0.token.matches(pass);
    let account = admin_account(user);
    let found = match (token_ok, account) {
        (true, Some(a)) => match st.live() {
            Ok(live) => match View::build(live.repo(), a) {
                Ok(Some(v)) => Some((v, live)),
                Ok(None) => None,
                Err(e) => return Login::Failed(format!("cannot read the repository: {e}")),
            },
            Err(e) => return Login::Failed(format!("cannot read the repository: {e}")),
        },
        _ => None,
    };
    match found {
        Some((v, live)) => {
            st.limiter().succeeded(ip);
            Login::Ok(v, live)
        }
        None => {
            st.limiter().failed(ip, Instant::now());
            Login::Failed(FAILED.into())
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
