//! The flags `backup` and `restore` share for IMAP sources and targets, turned into the
//! engine's [`Connection`].

use anyhow::{bail, Result};
use mailvault_core::imap::client::{ClientOptions, Endpoint};
use mailvault_core::imap::{Connection, Login, Password};
use std::path::PathBuf;

/// IMAP connection flags.
#[derive(clap::Args, Debug, Clone)]
pub struct ImapArgs {
    /// File with the IMAP password (of the master user with --imap-master-user, else of
    /// the account); a directory holds one file per account, named after it. Distinct
    /// from --password-file, which is the repository's.
    #[arg(long, env = "MAILVAULT_IMAP_PASSWORD_FILE")]
    pub imap_password_file: Option<PathBuf>,
    /// Log in through this master user (Dovecot `user*master`, SASL PLAIN with an
    /// authorization identity): one credential for every account.
    #[arg(long)]
    pub imap_master_user: Option<String>,
    /// Login name of an account without master user: %u the account, %n its local part,
    /// %d its domain.
    #[arg(long, default_value = "%u")]
    pub imap_user_template: String,
    /// Upgrade an imap:// connection with STARTTLS (fails if the server does not offer it).
    #[arg(long)]
    pub starttls: bool,
    /// Accept any TLS certificate (test servers): the link is encrypted, the server not
    /// authenticated.
    #[arg(long)]
    pub insecure: bool,
    /// Also trust the CA certificates in this PEM file.
    #[arg(long)]
    pub ca_file: Option<PathBuf>,
    /// IMAP connections per account, at most. Backup deals an account's folders to them;
    /// restore opens more than one only when fewer accounts than --accounts are left to
    /// run beside it, one per 500 messages (every connection is a login, which costs the
    /// server about as much as appending 50-100 messages).
    #[arg(long, default_value_t = 4)]
    pub connections: usize,
    /// Accounts handled at the same time (restore: largest first).
    #[arg(long, default_value_t = 4)]
    pub accounts: usize,
    /// The server's ManageSieve port, where the accounts' sieve scripts are read from
    /// (backup) or put (restore): the IMAP server's host, STARTTLS when the IMAP
    /// connection has TLS. 0: none (a restore reports the scripts as left).
    #[arg(long, value_name = "PORT", default_value_t = 4190)]
    pub sieve_port: u16,
}

impl ImapArgs {
    /// Whether any IMAP-only flag was given (an error for Maildir sources and targets).
    pub fn any_given(&self) -> bool {
        self.imap_password_file.is_some()
            || self.imap_master_user.is_some()
            || self.starttls
            || self.insecure
            || self.ca_file.is_some()
            || self.sieve_port != 4190
    }

    /// The connection to `url` (`imap://host[:port]`, `imaps://host[:port]`).
    pub fn connection(&self, url: &str) -> Result<Connection> {
        let mut target = Endpoint::parse(url)?;
        if self.starttls {
            target = target.with_starttls();
        }
        let mut client = ClientOptions::new(target);
        client.tls.insecure = self.insecure;
        client.tls.ca_file = self.ca_file.clone();
        let Some(f) = &self.imap_password_file else {
            bail!("an IMAP password is needed: give --imap-password-file FILE (the repository's password comes from --password-file / MAILVAULT_PASSWORD_FILE)");
        };
        let password =
            if f.is_dir() {
                crate::secret::warn_if_readable_by_others("IMAP password directory", f);
                Password::PerAccount(f.clone())
            } else {
                let p = crate::secret::read_file("IMAP password file", f)?;
                Password::One(String::from_utf8(p).map_err(|_| {
                    anyhow::anyhow!("IMAP password file {} is not UTF-8", f.display())
                })?)
            };
        let login = match &self.imap_master_user {
            Some(m) => Login::Master {
                master: m.clone(),
                password,
            },
            None => Login::User {
                template: self.imap_user_template.clone(),
                password,
            },
        };
        Ok(Connection { client, login })
    }
}

/// Whether a source or target names an IMAP server.
pub fn is_imap(s: &str) -> bool {
    let l = s.to_ascii_lowercase();
    l.starts_with("imap://") || l.starts_with("imaps://")
}

/// Splits `imap://user@domain@host:port` into (`imap://host:port`, Some(`user@domain`)):
/// the account is everything before the last `@` of the authority.
pub fn split_user(url: &str) -> (String, Option<String>) {
    let Some((scheme, rest)) = url.split_once("://") else {
        return (url.to_string(), None);
    };
    let (auth, path) = match rest.find('/') {
        Some(i) => rest.split_at(i),
        None => (rest, ""),
    };
    match auth.rsplit_once('@') {
        Some((user, host)) => (format!("{scheme}://{host}{path}"), Some(user.to_string())),
        None => (url.to_string(), None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        assert_eq!(
            split_user("imap://bob@example.org@mail:143"),
            ("imap://mail:143".into(), Some("bob@example.org".into()))
        );
        assert_eq!(split_user("imaps://mail"), ("imaps://mail".into(), None));
        assert!(is_imap("IMAPS://x") && !is_imap("maildir:/x"));
    }
}
