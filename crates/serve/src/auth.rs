//! Sessions, login rate limits and CSRF tokens (OWASP's session management and CSRF
//! cheat sheets): a session id is 32 random bytes from the OS, sent only in an `HttpOnly;
//! SameSite=Strict` cookie and kept server-side with an idle and an absolute expiry; each
//! session has its own CSRF token, required on every state-changing request (a hidden
//! form field or the `X-CSRF-Token` header), compared in constant time.

use rand::RngCore;
use std::collections::HashMap;
use std::net::IpAddr;
use std::time::{Duration, Instant};
use subtle::ConstantTimeEq;

/// The session cookie's name.
pub const COOKIE: &str = "mailvault_session";
/// A session unused this long ends.
pub const IDLE: Duration = Duration::from_secs(30 * 60);
/// A session ends this long after login, used or not.
pub const ABSOLUTE: Duration = Duration::from_secs(12 * 3600);
/// Sessions kept at most; past it the oldest is dropped.
const MAX_SESSIONS: usize = 1000;
/// Failed logins allowed per address and [`WINDOW`]; the next ones answer 429.
pub const MAX_FAILURES: usize = 5;
pub const WINDOW: Duration = Duration::from_secs(60);
/// Addresses the limiter remembers at most (an attacker with many cannot grow it).
const MAX_ADDRESSES: usize = 10_000;

/// 32 random bytes from the OS, hex.
pub(crate) fn random_hex() -> String {
    let mut b = [0u8; 32];
    rand::rngs::OsRng.fill_bytes(&mut b);
    hex::encode(b)
}

/// The login form's cookie: the form's token before there is a session.
pub const LOGIN_COOKIE: &str = "mailvault_login";
/// A login form's token is good this long.
const LOGIN_FORM_AGE: Duration = Duration::from_secs(3600);

/// The login form's CSRF tokens (login CSRF: another site posting its own credentials to
/// our form so that the browser works, unaware, in the attacker's session). OWASP's
/// signed double-submit cookie: a form's token is 16 random bytes and their keyed hash
/// under this process's key; the same token goes in an `HttpOnly; SameSite=Strict`
/// cookie and in the form, and a login through the form needs both, equal and signed.
/// Another site can neither read the cookie nor make the browser send it on its POST,
/// and a cookie planted from elsewhere (a sibling subdomain) lacks our signature. A
/// restart makes a new key: a form left open then asks to be sent again.
pub struct LoginKey([u8; 32]);

impl Default for LoginKey {
    fn default() -> LoginKey {
        let mut key = [0u8; 32];
        rand::rngs::OsRng.fill_bytes(&mut key);
        LoginKey(key)
    }
}

impl LoginKey {
    /// A new token for a login form.
    pub fn token(&self) -> String {
        let mut nonce = [0u8; 16];
        rand::rngs::OsRng.fill_bytes(&mut nonce);
        let mac = blake3::keyed_hash(&self.0, &nonce);
        format!(
            "{}{}",
            hex::encode(nonce),
            hex::encode(&mac.as_bytes()[..16])
        )
    }

    /// Whether a login form's `field` and the request's `cookie` hold one token of ours.
    pub fn valid(&self, field: &str, cookie: Option<&str>) -> bool {
        let Some(cookie) = cookie else {
            return false;
        };
        let (Ok(given), true) = (hex::decode(field), field.len() == 64) else {
            return false;
        };
        let mac = blake3::keyed_hash(&self.0, &given[..16]);
        let same =
            field.len() == cookie.len() && bool::from(field.as_bytes().ct_eq(cookie.as_bytes()));
        same && bool::from(mac.as_bytes()[..16].ct_eq(&given[16..]))
    }
}

/// The `Set-Cookie` value holding a login form's `token`, for the login form alone.
pub fn login_cookie(token: &str, secure: bool) -> String {
    let secure = if secure { "; Secure" } else { "" };
    format!(
        "{LOGIN_COOKIE}={token}; HttpOnly; SameSite=Strict; Path=/login; Max-Age={}{secure}",
        LOGIN_FORM_AGE.as_secs()
    )
}

/// A cookie's value in a `Cookie` header.
pub fn cookie<'a>(cookie_header: &'a str, name: &str) -> Option<&'a str> {
    (cookie_header.split(';'))
        .filter_map(|c| c.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}

/// A logged-in session.
#[derive(Clone, Debug)]
pub struct Session {
    pub csrf: String,
    /// The mail user logged in (`--user-auth`), who sees their own account and those
    /// `--user-accounts` gives them (`accounts`); `None`: the admin.
    pub user: Option<String>,
    /// A mail user's accounts: their own first, then the others they may see. Empty for
    /// the admin, who sees every account.
    accounts: Vec<String>,
    created: Instant,
    used: Instant,
}

impl Session {
    /// Whether this session may see `account`: the admin any, a mail user their own.
    pub fn may_see(&self, account: &str) -> bool {
        self.user.is_none() || self.accounts.iter().any(|a| a == account)
    }

    /// The accounts this session sees: `None` for the admin (every one), else the mail
    /// user's (their own first).
    pub fn sees(&self) -> Option<&[String]> {
        self.user.as_ref().map(|_| &self.accounts[..])
    }

    /// Whether `given` is this session's CSRF token.
    pub fn csrf_ok(&self, given: &str) -> bool {
        given.len() == self.csrf.len() && bool::from(given.as_bytes().ct_eq(self.csrf.as_bytes()))
    }
}

/// The sessions, by id.
#[derive(Default)]
pub struct Sessions {
    map: HashMap<String, Session>,
}

impl Sessions {
    /// A new session of `user` (`None`: the admin): its id (for the cookie) and its CSRF
    /// token.
    /// A new session: the admin's (`user` `None`), or mail user `user`'s, who may also see
    /// the accounts `also` names.
    pub fn create(
        &mut self,
        now: Instant,
        user: Option<String>,
        also: Vec<String>,
    ) -> (String, Session) {
        self.expire(now);
        if self.map.len() >= MAX_SESSIONS {
            if let Some(oldest) = (self.map.iter())
                .min_by_key(|(_, s)| s.used)
                .map(|(k, _)| k.clone())
            {
                self.map.remove(&oldest);
            }
        }
        let accounts = (user.iter().cloned()).chain(also).collect();
        let s = Session {
            csrf: random_hex(),
            user,
            accounts,
            created: now,
            used: now,
        };
        let id = random_hex();
        self.map.insert(id.clone(), s.clone());
        (id, s)
    }

    /// The live session `id`, marked used now; an expired one is removed.
    pub fn touch(&mut self, id: &str, now: Instant) -> Option<Session> {
        let s = self.map.get_mut(id)?;
        if expired(s, now) {
            self.map.remove(id);
            return None;
        }
        s.used = now;
        Some(s.clone())
    }

    pub fn remove(&mut self, id: &str) {
        self.map.remove(id);
    }

    fn expire(&mut self, now: Instant) {
        self.map.retain(|_, s| !expired(s, now));
    }

    /// Sessions open now.
    pub fn len(&self) -> usize {
        self.map.len()
    }
}

fn expired(s: &Session, now: Instant) -> bool {
    now.duration_since(s.used) >= IDLE || now.duration_since(s.created) >= ABSOLUTE
}

/// Failed logins per client address in the last [`WINDOW`].
#[derive(Default)]
pub struct LoginLimiter {
    failures: HashMap<IpAddr, Vec<Instant>>,
}

impl LoginLimiter {
    /// Whether `ip` may try now (fewer than [`MAX_FAILURES`] failures in the window).
    pub fn allowed(&mut self, ip: IpAddr, now: Instant) -> bool {
        match self.failures.get_mut(&ip) {
            Some(v) => {
                v.retain(|t| now.duration_since(*t) < WINDOW);
                v.len() < MAX_FAILURES
            }
            None => true,
        }
    }

    /// Counts a failure of `ip`.
    pub fn failed(&mut self, ip: IpAddr, now: Instant) {
        if self.failures.len() >= MAX_ADDRESSES {
            self.failures
                .retain(|_, v| v.iter().any(|t| now.duration_since(*t) < WINDOW));
        }
        if self.failures.len() >= MAX_ADDRESSES && !self.failures.contains_key(&ip) {
            // Still full: every address limited at once rather than none.
            self.failures.clear();
        }
        self.failures.entry(ip).or_default().push(now);
    }

    /// Forgets `ip`'s failures (after a login that worked).
    pub fn succeeded(&mut self, ip: IpAddr) {
        self.failures.remove(&ip);
    }

    /// Takes back the failure counted last for `ip`: a mail user's login is counted as a
    /// failure before its password is checked (a check takes time, and tries made meanwhile
    /// must not slip past the limit), and one that worked takes only its own back. Unlike
    /// [`LoginLimiter::succeeded`] it keeps the others: a user who knows their own password
    /// cannot clear the count between guesses at someone else's.
    pub fn refund(&mut self, ip: IpAddr) {
        if let Some(v) = self.failures.get_mut(&ip) {
            v.pop();
            if v.is_empty() {
                self.failures.remove(&ip);
            }
        }
    }
}

/// The session id in a `Cookie` header's value, if it has one that looks like ours.
pub fn session_id(cookie_header: &str) -> Option<&str> {
    cookie(cookie_header, COOKIE)
        .filter(|v| v.len() == 64 && v.bytes().all(|c| c.is_ascii_hexdigit()))
}

/// The `Set-Cookie` value of a new session (`Secure` once there is TLS).
pub fn set_cookie(id: &str, secure: bool) -> String {
    let secure = if secure { "; Secure" } else { "" };
    format!(
        "{COOKIE}={id}; HttpOnly; SameSite=Strict; Path=/; Max-Age={}{secure}",
        ABSOLUTE.as_secs()
    )
}

/// The `Set-Cookie` value that removes the session cookie.
pub fn clear_cookie() -> String {
    format!("{COOKIE}=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A login form's token is good in its form and its cookie together, signed by this
    /// process's key: not alone, not changed, not another key's, not another form's.
    #[test]
    fn a_login_forms_token_needs_its_cookie_and_our_signature() {
        let key = LoginKey::default();
        let t = key.token();
        assert_eq!(t.len(), 64);
        assert!(key.valid(&t, Some(&t)));
        assert!(!key.valid(&t, None));
        assert!(!key.valid(&t, Some(&key.token())));
        let other = LoginKey::default().token();
        assert!(!key.valid(&other, Some(&other)));
        let mut changed = t.clone().into_bytes();
        changed[63] = if changed[63] == b'0' { b'1' } else { b'0' };
        let changed = String::from_utf8(changed).unwrap();
        assert!(!key.valid(&changed, Some(&changed)));
        assert!(!key.valid("", Some("")));
        assert!(!key.valid("zz", Some("zz")));
        let header = format!("a=b; {LOGIN_COOKIE}={t}; {COOKIE}=x");
        assert_eq!(cookie(&header, LOGIN_COOKIE), Some(t.as_str()));
    }

    #[test]
    fn sessions_expire_when_idle_and_at_their_absolute_end() {
        let t0 = Instant::now();
        let mut s = Sessions::default();
        let (id, sess) = s.create(t0, None, Vec::new());
        assert_eq!(id.len(), 64);
        assert_ne!(id, sess.csrf);
        assert!(s.touch(&id, t0 + IDLE / 2).is_some());
        assert!(s.touch(&id, t0 + IDLE / 2 + IDLE).is_none());
        assert_eq!(s.len(), 0);
        let (id, _) = s.create(t0, None, Vec::new());
        let mut t = t0;
        while t < t0 + ABSOLUTE - IDLE / 2 {
            t += IDLE / 2;
            assert!(s.touch(&id, t).is_some());
        }
        assert!(s.touch(&id, t0 + ABSOLUTE).is_none());
        assert!(s.touch("nope", t0).is_none());
    }

    #[test]
    fn csrf_tokens_are_compared_whole() {
        let mut s = Sessions::default();
        let (_, sess) = s.create(Instant::now(), None, Vec::new());
        assert!(sess.csrf_ok(&sess.csrf.clone()));
        assert!(!sess.csrf_ok(&sess.csrf[..63]));
        assert!(!sess.csrf_ok(""));
        assert!(!sess.csrf_ok(&"0".repeat(64)));
    }

    #[test]
    fn five_failures_a_minute_then_refused() {
        let t0 = Instant::now();
        let ip: IpAddr = "127.0.0.1".parse().unwrap();
        let other: IpAddr = "127.0.0.2".parse().unwrap();
        let mut l = LoginLimiter::default();
        for _ in 0..MAX_FAILURES {
            assert!(l.allowed(ip, t0));
            l.failed(ip, t0);
        }
        assert!(!l.allowed(ip, t0));
        assert!(l.allowed(other, t0));
        assert!(l.allowed(ip, t0 + WINDOW));
        // A refund takes back one failure, never the others.
        for _ in 0..MAX_FAILURES {
            l.failed(other, t0);
        }
        l.refund(other);
        assert!(l.allowed(other, t0));
        l.failed(other, t0);
        assert!(!l.allowed(other, t0));
    }

    #[test]
    fn cookies() {
        let id = "a".repeat(64);
        assert_eq!(session_id(&format!("x=1; {COOKIE}={id}")), Some(&id[..]));
        assert_eq!(session_id(&format!("{COOKIE}=short")), None);
        assert_eq!(session_id(&format!("{COOKIE}x={id}")), None);
        let c = set_cookie(&id, false);
        assert!(c.contains("HttpOnly; SameSite=Strict; Path=/") && !c.contains("Secure"));
        assert!(set_cookie(&id, true).ends_with("; Secure"));
    }
}
