//! `mailvault serve`: the web UI and JSON API (crates/serve) over the repository.

use crate::{repo, GlobalOpts, Outcome};
use anyhow::{Context, Result};
use mailvault_core::repo::lock::LockOptions;
use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;

/// How long opening the repository again for a request waits for a conflicting lock.
const REOPEN_LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Address and port to listen on (port 0: any free port; the address bound is printed
    /// as `listening on http://ADDR`, or https). Only loopback without --tls-cert or
    /// --insecure-listen.
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,
    /// Also serve a read-only IMAP view of the backups on this address and port (port 0:
    /// any free port, printed as `listening on imap://ADDR`). Log in as `ACCOUNT*admin`
    /// with the admin token as the password, or (--user-auth) as a mail user with their
    /// own password. With --tls-cert and --tls-key it offers STARTTLS and may listen on
    /// any address (logins then only after STARTTLS, unless on loopback); without, only
    /// loopback unless --insecure-listen. See docs/imap-view.md.
    #[arg(long, value_name = "ADDR")]
    pub imap: Option<SocketAddr>,
    /// Also serve the IMAP view over TLS from the first byte (IMAPS, as port 993) on this
    /// address and port, with the certificate of --tls-cert and --tls-key (needed); any
    /// address (printed as `listening on imaps://ADDR`).
    #[arg(long, value_name = "ADDR", requires = "tls_cert")]
    pub imaps: Option<SocketAddr>,
    /// File holding the admin token (at least 16 characters; mode 0600 or 0400, else
    /// refused), e.g. made with `openssl rand -hex 32`.
    #[arg(long, env = "MAILVAULT_ADMIN_TOKEN_FILE", value_name = "FILE")]
    pub admin_token_file: PathBuf,
    /// Let mail users log in with their mail address and mail password, each seeing only
    /// their own account (web UI and IMAP view): checked by a LOGIN on the live server
    /// (`imap://HOST[:PORT]`, STARTTLS unless on loopback; `imaps://HOST[:PORT]`) or in a
    /// Dovecot passwd-file (`passwd-file:PATH`: SHA512-CRYPT, SHA256-CRYPT, BLF-CRYPT,
    /// ARGON2I/ARGON2ID, PLAIN). See docs/web.md.
    #[arg(long, value_name = "SPEC", value_parser = mailvault_serve::users::UserAuth::parse)]
    pub user_auth: Option<mailvault_serve::users::UserAuth>,
    /// The accounts each mail user may see besides their own (aliases, team or shared
    /// mailboxes), in the web UI: lines `LOGIN: ACCOUNT, ACCOUNT...` (`#` comments), read
    /// at each login. They see, search and download those too, and restore their own
    /// mailbox alone. See docs/web.md.
    #[arg(long, value_name = "FILE", requires = "user_auth")]
    pub user_accounts: Option<PathBuf>,
    /// Let restores from the web UI and the API go into this live IMAP server
    /// (`imap://HOST[:PORT]`, STARTTLS unless on loopback; `imaps://HOST[:PORT]`): the
    /// admin's into any account, a mail user's into their own mailbox alone. Default: the
    /// server of --user-auth when it is one. See docs/web.md.
    #[arg(long, value_name = "URL", value_parser = mailvault_serve::restore::ImapTo::parse)]
    pub restore_imap: Option<mailvault_core::imap::client::ClientOptions>,
    /// Restores into the IMAP server log in as this master user (Dovecot `user*master`,
    /// SASL PLAIN with an authorization identity), its password in
    /// --restore-password-file. Without it, the restore form asks for the account's own
    /// password (and a whole snapshot cannot be restored into IMAP).
    #[arg(long, value_name = "USER", requires = "restore_password_file")]
    pub restore_master_user: Option<String>,
    /// File holding the password of --restore-master-user (mode 0600 or 0400).
    #[arg(long, value_name = "FILE", requires = "restore_master_user")]
    pub restore_password_file: Option<PathBuf>,
    /// Also trust the CA certificates in this PEM file for --restore-imap.
    #[arg(long, value_name = "FILE")]
    pub restore_ca_file: Option<PathBuf>,
    /// Let the admin restore to Maildir trees in directories below this one (named in
    /// the form; never above it). Mail users never restore to a directory.
    #[arg(long, value_name = "DIR")]
    pub restore_dir: Option<PathBuf>,
    /// A reverse proxy in front of the web UI (its address; may repeat): a request from it
    /// is taken to come from the client its `X-Forwarded-For` header names (the nearest
    /// address there that is not a trusted proxy), for the login limit and the audit log.
    /// From any other address the header is ignored.
    #[arg(long, value_name = "IP")]
    pub trusted_proxy: Vec<std::net::IpAddr>,
    /// Listen on a non-loopback address without TLS: session cookies and the token then
    /// cross the network in clear text.
    #[arg(long)]
    pub insecure_listen: bool,
    /// Serve HTTPS with this certificate chain (PEM); needs --tls-key.
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// The certificate's private key (PEM; mode 0600 or 0400, else refused).
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Messages per page of a folder.
    #[arg(long, default_value_t = 100)]
    pub page_size: usize,
    /// A source whose last backup is older than this is marked stale on the repository
    /// page and in /metrics (`26h`: a nightly backup that missed a night).
    #[arg(long, default_value = "26h", value_parser = humantime::parse_duration)]
    pub stale_after: std::time::Duration,
    /// Check the repository for new snapshots and replaced index files at most this often
    /// (tests make it short).
    #[arg(long, hide = true, default_value = "10s", value_parser = humantime::parse_duration)]
    pub recheck: std::time::Duration,
    /// Close the repository, giving back its read lock so that a prune need not wait, after
    /// this long without a request.
    #[arg(long, hide = true, default_value = "60s", value_parser = humantime::parse_duration)]
    pub idle_close: std::time::Duration,
    /// Write the audit events gathered to the repository this often (and when the server
    /// stops); tests make it short.
    #[arg(long, hide = true, default_value = "60s", value_parser = humantime::parse_duration)]
    pub audit_flush: std::time::Duration,
}

pub fn run(g: &GlobalOpts, a: Args) -> Result<Outcome> {
    // Refused before the repository is opened: a bad token file or address is the
    // admin's to fix first.
    let token = mailvault_serve::token::read_token_file(&a.admin_token_file)?;
    let restore = restore_to(&a)?;
    let tls = match (a.tls_cert, a.tls_key) {
        (Some(cert), Some(key)) => Some(mailvault_serve::tls::TlsFiles { cert, key }),
        _ => None,
    };
    if let Some(t) = &tls {
        // Refused before the repository is opened, as the token.
        mailvault_serve::tls::Certificates::load(t)?;
    }
    mailvault_serve::check_listen(a.listen, a.insecure_listen, tls.is_some())?;
    if let Some(imap) = a.imap {
        // Plain IMAP: across a network with STARTTLS (a certificate), or when told to.
        mailvault_serve::check_listen(imap, a.insecure_listen, tls.is_some())?;
    }
    if a.insecure_listen && tls.is_none() && !a.listen.ip().is_loopback() {
        eprintln!(
            "warning: listening on {} without TLS: the admin token and session cookies cross the network in clear text",
            a.listen
        );
    }
    if let Some(imap) = a
        .imap
        .filter(|i| a.insecure_listen && tls.is_none() && !i.ip().is_loopback())
    {
        eprintln!(
            "warning: IMAP on {imap} without TLS: the admin token and mail passwords cross the network in clear text"
        );
    }
    let r = repo::open(g)?;
    let cache = repo::search_cache(g, &r)?;
    let opts = mailvault_serve::ServeOptions {
        listen: a.listen,
        imap: a.imap,
        imaps: a.imaps,
        insecure_listen: a.insecure_listen,
        tls: tls.clone(),
        admin_token: token,
        user_auth: a.user_auth.clone(),
        user_accounts: a.user_accounts.clone(),
        search_cache: cache.path().to_path_buf(),
        page_size: a.page_size,
        stale_after: a.stale_after,
        recheck: a.recheck,
        idle_close: a.idle_close,
        restore,
        audit_flush: a.audit_flush,
        trusted_proxies: a.trusted_proxy.clone(),
    };
    let again = g.clone();
    let reopen: mailvault_serve::Reopen = Box::new(move || {
        let mut r = repo::open(&again).map_err(|e| format!("{e:#}"))?;
        // A request waits this long at most for a prune's lock; then it answers 503.
        r.set_lock_options(LockOptions {
            wait: REOPEN_LOCK_WAIT.min(again.retry_lock),
            no_lock: again.no_lock,
            ..LockOptions::default()
        });
        Ok(r)
    });
    mailvault_serve::serve(r, reopen, opts, |bound| {
        let mut out = std::io::stdout().lock();
        let scheme = if tls.is_some() { "https" } else { "http" };
        let _ = writeln!(out, "listening on {scheme}://{}", bound.http);
        if let Some(imap) = bound.imap {
            let _ = writeln!(out, "listening on imap://{imap}");
        }
        if let Some(imaps) = bound.imaps {
            let _ = writeln!(out, "listening on imaps://{imaps}");
        }
        let _ = out.flush();
    })
    .context("mailvault serve")?;
    // The cache directory of a --no-cache run lives as long as the server.
    drop(cache);
    Ok(Outcome::Ok)
}

/// Where the web UI's restores may go: `--restore-imap` (or --user-auth's server) with its
/// login, and `--restore-dir`. Refused before the repository is opened, as the token.
fn restore_to(a: &Args) -> Result<mailvault_serve::restore::RestoreTo> {
    use mailvault_core::imap::client::ClientOptions;
    use mailvault_serve::restore::{ImapTo, RestoreTo};
    use mailvault_serve::users::UserAuth;
    let client = match (&a.restore_imap, &a.user_auth) {
        (Some(c), _) => Some(c.clone()),
        (None, Some(UserAuth::Imap(c))) => {
            // The login check's short I/O timeout is no restore's: a server busy with a
            // large MULTIAPPEND answers within the client's default.
            let mut o = c.options().clone();
            o.io_timeout = ClientOptions::new(o.endpoint.clone()).io_timeout;
            Some(o)
        }
        _ => None,
    };
    let imap = match client {
        Some(mut client) => {
            client.tls.ca_file = a.restore_ca_file.clone();
            let master = match (&a.restore_master_user, &a.restore_password_file) {
                (Some(m), Some(f)) => {
                    let pw = crate::secret::read_file("restore master password file", f)?;
                    let pw = String::from_utf8(pw).map_err(|_| {
                        anyhow::anyhow!("restore master password file {} is not UTF-8", f.display())
                    })?;
                    Some((m.clone(), mailvault_serve::restore::Zeroizing::new(pw)))
                }
                _ => None,
            };
            Some(ImapTo { client, master })
        }
        None if a.restore_master_user.is_some() || a.restore_ca_file.is_some() => {
            anyhow::bail!("--restore-master-user and --restore-ca-file need --restore-imap (or --user-auth imap://)")
        }
        None => None,
    };
    let dir = match &a.restore_dir {
        Some(d) => {
            let d = std::fs::canonicalize(d)
                .with_context(|| format!("--restore-dir {}", d.display()))?;
            if !d.is_dir() {
                anyhow::bail!("--restore-dir {}: not a directory", d.display());
            }
            Some(d)
        }
        None => None,
    };
    Ok(RestoreTo { imap, dir })
}
