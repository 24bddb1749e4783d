//! Mail users' own logins (`--user-auth`), for the web UI and the IMAP view alike: a user
//! logs in with their mail address and mail password and sees the account of that name
//! (and in the web UI those `--user-accounts` gives them: [`accounts_of`]), nothing else.
//! The password is checked where the mail server checks it:
//!
//! - `imap://HOST[:PORT]` or `imaps://HOST[:PORT]`: a LOGIN on the live IMAP server, as
//!   MailStore and piler do (the session is closed at once). `imap://` to a host other
//!   than loopback upgrades with STARTTLS: a password never crosses a network in clear.
//! - `passwd-file:PATH`: a Dovecot passwd-file (`user:{SCHEME}hash:...`, read at each
//!   login, so a changed password counts at once). Schemes: `SHA512-CRYPT`,
//!   `SHA256-CRYPT` and `CRYPT` of those (`$6$`, `$5$`; `sha-crypt`), `BLF-CRYPT`
//!   (`$2y$`; `bcrypt`), `ARGON2I` / `ARGON2ID` (PHC strings; `argon2`), and `PLAIN` /
//!   `CLEAR` (compared in constant time). Another scheme refuses the login and says so in
//!   the log (never the hash, never the password).
//!
//! Neither the user's name nor the password is logged.

use std::net::IpAddr;
use std::path::PathBuf;
use subtle::ConstantTimeEq;

/// Where mail users' passwords are checked.
#[derive(Debug, Clone)]
pub enum UserAuth {
    Imap(mailvault_imap::Client),
    PasswdFile(PathBuf),
}

/// Why a password could not be checked (not a wrong password: that is `Ok(false)`).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct CheckError(String);

impl UserAuth {
    /// `--user-auth SPEC`: `imap://HOST[:PORT]`, `imaps://HOST[:PORT]` or
    /// `passwd-file:PATH`.
    pub fn parse(spec: &str) -> Result<UserAuth, String> {
        if let Some(path) = spec.strip_prefix("passwd-file:") {
            if path.is_empty() {
                return Err("--user-auth passwd-file: give the file's path".into());
            }
            return Ok(UserAuth::PasswdFile(PathBuf::from(path)));
        }
        if spec.starts_with("imap://") || spec.starts_with("imaps://") {
            use mailvault_imap::{ClientOptions, Endpoint, Security};
            let mut ep = Endpoint::parse(spec).map_err(|e| format!("--user-auth: {e}"))?;
            let loopback = (ep.host.parse::<IpAddr>()).is_ok_and(|ip| ip.is_loopback())
                || ep.host == "localhost";
            if ep.security == Security::Plain && !loopback {
                ep.security = Security::StartTls;
            }
            let mut opts = ClientOptions::new(ep);
            opts.connect_timeout = std::time::Duration::from_secs(10);
            opts.io_timeout = std::time::Duration::from_secs(30);
            let client =
                mailvault_imap::Client::new(opts).map_err(|e| format!("--user-auth: {e}"))?;
            return Ok(UserAuth::Imap(client));
        }
        Err(format!(
            "--user-auth {spec:?}: give imap://HOST[:PORT], imaps://HOST[:PORT] or passwd-file:PATH"
        ))
    }

    /// Whether `password` is `user`'s (blocking: a network round trip or a file read).
    pub fn check(&self, user: &str, password: &[u8]) -> Result<bool, CheckError> {
        if !plain_user(user) || password.is_empty() {
            return Ok(false);
        }
        match self {
            UserAuth::Imap(client) => {
                let Ok(password) = String::from_utf8(password.to_vec()) else {
                    return Ok(false);
                };
                let password = zeroize::Zeroizing::new(password);
                let creds = mailvault_imap::Credentials::User {
                    user: user.to_string(),
                    password: password.to_string(),
                };
                match client.login(&creds) {
                    Ok(s) => {
                        let _ = s.logout();
                        Ok(true)
                    }
                    Err(mailvault_imap::Error::AuthFailed { .. }) => Ok(false),
                    Err(e) => Err(CheckError(format!("the IMAP server: {e}"))),
                }
            }
            UserAuth::PasswdFile(path) => {
                let text = std::fs::read_to_string(path)
                    .map_err(|e| CheckError(format!("{}: {e}", path.display())))?;
                let text = zeroize::Zeroizing::new(text);
                let Some(stored) = passwd_entry(&text, user) else {
                    return Ok(false);
                };
                verify(stored, password).map_err(|e| CheckError(format!("{}: {e}", path.display())))
            }
        }
    }
}

/// The accounts `user` may see besides their own, from the file of `--user-accounts`:
/// lines `LOGIN: ACCOUNT, ACCOUNT...` (commas or spaces between them; `#` comments; a
/// login on several lines gets them all). Read at each login, so a change counts at the
/// next one. A name that cannot be an account's ([`plain_user`]) is an error, never
/// skipped: the file is the admin's, and a mistake there must show.
pub fn accounts_of(path: &std::path::Path, user: &str) -> Result<Vec<String>, CheckError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| CheckError(format!("{}: {e}", path.display())))?;
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let bad = |why: &str| CheckError(format!("{} line {}: {why}", path.display(), n + 1));
        let (login, accounts) = line
            .split_once(':')
            .ok_or_else(|| bad("no `:` after the login"))?;
        if login.trim() != user {
            continue;
        }
        for a in accounts.split([',', ' ', '\t']).filter(|a| !a.is_empty()) {
            if !plain_user(a) {
                return Err(bad("an account name with a control character, `*` or `:`"));
            }
            if a != user && !out.iter().any(|o| o == a) {
                out.push(a.to_string());
            }
        }
    }
    Ok(out)
}

/// A user name that can be an account's: not empty, no control characters, no `*`
/// (Dovecot's master-user separator, the IMAP view's `ACCOUNT*admin`), no `:`.
pub fn plain_user(user: &str) -> bool {
    !user.is_empty()
        && user.len() <= 320
        && !user.chars().any(|c| c.is_control() || c == '*' || c == ':')
}

/// The password field of `user`'s line in a passwd-file (`user:password:uid:...`);
/// comments and blank lines skipped.
fn passwd_entry<'a>(text: &'a str, user: &str) -> Option<&'a str> {
    (text.lines())
        .filter(|l| !l.trim_start().starts_with('#'))
        .find_map(|l| {
            let mut fields = l.splitn(3, ':');
            (fields.next()? == user).then(|| fields.next().unwrap_or(""))
        })
}

/// Whether `password` matches `stored` (`{SCHEME}data`, or a crypt string without a
/// scheme, as Dovecot's default `CRYPT`).
fn verify(stored: &str, password: &[u8]) -> Result<bool, String> {
    let (scheme, data) = match stored.strip_prefix('{').and_then(|s| s.split_once('}')) {
        Some((scheme, data)) => (scheme.to_ascii_uppercase(), data),
        None => ("CRYPT".to_string(), stored),
    };
    match scheme.as_str() {
        "PLAIN" | "CLEAR" | "CLEARTEXT" => {
            let (a, b) = (data.as_bytes(), password);
            Ok(a.len() == b.len() && bool::from(a.ct_eq(b)))
        }
        "SHA512-CRYPT" | "SHA256-CRYPT" | "CRYPT" | "BLF-CRYPT" | "ARGON2I" | "ARGON2ID" => {
            crypt(data, password)
        }
        other => Err(format!("password scheme {other:?} is not supported")),
    }
}

/// A crypt(3) string: `$6$`, `$5$` (SHA-crypt), `$2y$`/`$2b$`/`$2a$` (bcrypt),
/// `$argon2i$`/`$argon2id$` (PHC).
fn crypt(data: &str, password: &[u8]) -> Result<bool, String> {
    let unsupported =
        || Err("a crypt scheme that is not supported (not $6$, $5$, $2y$ or $argon2)".to_string());
    if data.starts_with("$6$") || data.starts_with("$5$") {
        // SHA-crypt takes text: a password that is not UTF-8 matches nothing (a lossy
        // conversion would let different passwords meet in the same text).
        let Ok(text) = std::str::from_utf8(password) else {
            return Ok(false);
        };
        return Ok(match data.starts_with("$6$") {
            true => sha_crypt::sha512_check(text, data).is_ok(),
            false => sha_crypt::sha256_check(text, data).is_ok(),
        });
    }
    if data.starts_with("$2") {
        return bcrypt::verify(password, data).map_err(|e| format!("bcrypt: {e}"));
    }
    if data.starts_with("$argon2") {
        use argon2::password_hash::{PasswordHash, PasswordVerifier};
        let hash = PasswordHash::new(data).map_err(|e| format!("argon2: {e}"))?;
        return Ok(argon2::Argon2::default()
            .verify_password(password, &hash)
            .is_ok());
    }
    unsupported()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwd_file_schemes() {
        let sha512 =
            sha_crypt::sha512_simple("s3cret", &sha_crypt::Sha512Params::new(5000).unwrap())
                .unwrap();
        let bcrypt = bcrypt::hash("s3cret", 4).unwrap();
        let argon = {
            use argon2::password_hash::{PasswordHasher, SaltString};
            let salt = SaltString::encode_b64(b"0123456789abcdef").unwrap();
            argon2::Argon2::default()
                .hash_password(b"s3cret", &salt)
                .unwrap()
                .to_string()
        };
        let file = format!(
            "# users\nbob@example.org:{{SHA512-CRYPT}}{sha512}:1000:1000::/home/bob::\n\
             carol@example.org:{{BLF-CRYPT}}{bcrypt}::\n\
             dave@example.org:{{ARGON2ID}}{argon}\n\
             erin@example.org:{{PLAIN}}s3cret::\n\
             frank@example.org:{sha512}\n\
             gina@example.org:{{MD5}}abc\n"
        );
        for u in [
            "bob@example.org",
            "carol@example.org",
            "dave@example.org",
            "erin@example.org",
            "frank@example.org",
        ] {
            let stored = passwd_entry(&file, u).unwrap();
            assert_eq!(verify(stored, b"s3cret"), Ok(true), "{u}");
            assert_eq!(verify(stored, b"s3cret!"), Ok(false), "{u}");
            assert_eq!(verify(stored, b""), Ok(false), "{u}");
            assert_eq!(verify(stored, b"s3cret\xff"), Ok(false), "{u}");
        }
        assert!(verify(passwd_entry(&file, "gina@example.org").unwrap(), b"abc").is_err());
        // Bytes that are not UTF-8 never meet the text a lossy conversion would give.
        let replaced =
            sha_crypt::sha512_simple("pw\u{fffd}", &sha_crypt::Sha512Params::new(5000).unwrap())
                .unwrap();
        assert_eq!(
            verify(&format!("{{SHA512-CRYPT}}{replaced}"), b"pw\xff"),
            Ok(false)
        );
        assert_eq!(passwd_entry(&file, "nobody@example.org"), None);
        assert_eq!(
            passwd_entry(&file, "example.org"),
            None,
            "a whole field only"
        );
        assert_eq!(
            passwd_entry(&file, "# users"),
            None,
            "comments are not users"
        );
    }

    #[test]
    fn user_names() {
        assert!(plain_user("bob@example.org"));
        for bad in ["", "bob*admin", "bob\r\n", "bob:x", "a\u{7f}"] {
            assert!(!plain_user(bad), "{bad:?}");
        }
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("passwd");
        std::fs::write(&f, "bob:{PLAIN}pw\n").unwrap();
        let auth = UserAuth::parse(&format!("passwd-file:{}", f.display())).unwrap();
        assert!(auth.check("bob", b"pw").unwrap());
        assert!(!auth.check("bob", b"pW").unwrap());
        assert!(!auth.check("bob*admin", b"pw").unwrap());
        assert!(UserAuth::parse("ldap://x").is_err());
        assert!(UserAuth::parse("passwd-file:").is_err());
    }
}
