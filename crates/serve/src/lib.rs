//! `mailvault serve`: a web UI and a JSON API over one repository (issue 28). An admin
//! logs in with the token of `--admin-token-file`, a mail user (`--user-auth`, [`users`])
//! with their own password, to see their own account alone; pages and
//! `/api/v1/` then browse snapshots, accounts, folders (and whom they are shared with),
//! an account's sieve filters and messages, search, download a message as `.eml`, and
//! start restore jobs into the live IMAP server or a directory ([`restore`], `jobs`).
//! The repository is only read, but for the audit log's records (`audit`).
//!
//! The modules: [`token`] reads and checks the admin token, `auth` keeps sessions, login
//! rate limits and CSRF tokens, `headers` puts the security headers on every answer,
//! `read` is the blocking read side over the repository (`home` its part for an
//! account's home: the sieve scripts and the link to the active one), `mail` decodes a
//! message and sanitizes its HTML, `pages` renders HTML, `api` answers JSON, `routes`
//! wires them; `imap` is the read-only IMAP view (`--imap`, issue 29) over the same state.

mod api;
mod audit;
mod audit_read;
mod auth;
mod download;
mod headers;
mod home;
mod html;
mod imap;
/// The IMAP view without sockets, for the fuzz target (feature `fuzzing`).
#[cfg(feature = "fuzzing")]
pub use imap::fuzzing;
mod jobs;
mod mail;
mod openapi;
mod pages;
mod read;
mod reply;
mod repository;
mod requests;
pub mod restore;
mod restore_pages;
mod routes;
mod state;
pub mod tls;
pub mod token;
pub mod users;

use mailvault_core::Repository;
use std::net::SocketAddr;
use std::path::PathBuf;

/// What `serve` needs besides the repository.
pub struct ServeOptions {
    /// Where to listen.
    pub listen: SocketAddr,
    /// Where the read-only IMAP view listens, if it does (`--imap`).
    pub imap: Option<SocketAddr>,
    /// Where the IMAP view listens over TLS from the first byte (`--imaps`, port 993's
    /// way), with `tls`'s certificate.
    pub imaps: Option<SocketAddr>,
    /// Listen on an address other than loopback without TLS.
    pub insecure_listen: bool,
    /// Serve HTTPS with this certificate and key.
    pub tls: Option<tls::TlsFiles>,
    /// The admin token ([`token::read_token_file`]).
    pub admin_token: token::AdminToken,
    /// Where mail users' passwords are checked (`--user-auth`), each user then seeing
    /// their own account only; `None`: the admin alone logs in.
    pub user_auth: Option<users::UserAuth>,
    /// The accounts each mail user may see besides their own (`--user-accounts`:
    /// [`users::accounts_of`]).
    pub user_accounts: Option<PathBuf>,
    /// The search cache directory (the splits' local copies, the places map).
    pub search_cache: PathBuf,
    /// Messages per page of a folder.
    pub page_size: usize,
    /// A source whose last backup is older than this is marked stale (the repository
    /// page, `/metrics`).
    pub stale_after: std::time::Duration,
    /// Check the repository for new snapshots and replaced index files at most this often.
    pub recheck: std::time::Duration,
    /// Close the repository (and give back its read lock) after this long without a
    /// request.
    pub idle_close: std::time::Duration,
    /// Where the web UI's restores may go (none: nowhere).
    pub restore: restore::RestoreTo,
    /// Write the audit events gathered to the repository this often (and at the end).
    pub audit_flush: std::time::Duration,
    /// Reverse proxies in front of the web UI (`--trusted-proxy`): a request from one is
    /// taken to come from the client its `X-Forwarded-For` names, for the login limit and
    /// the audit log.
    pub trusted_proxies: Vec<std::net::IpAddr>,
}

pub use state::Reopen;

/// Why `serve` could not start or stopped.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(
        "{0} is not a loopback address: give --tls-cert and --tls-key, or listen on \
         127.0.0.1 or ::1 (behind a TLS proxy), or give --insecure-listen to send sessions \
         in clear text"
    )]
    NotLoopback(SocketAddr),
    #[error("TLS: {path}: {why}")]
    Tls { path: PathBuf, why: String },
    #[error("TLS: {0}")]
    TlsKey(token::TokenError),
    #[error("--imaps needs a certificate: give --tls-cert and --tls-key")]
    ImapsWithoutTls,
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("the server failed: {0}")]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Core(#[from] mailvault_core::Error),
}

/// Whether `addr` may be listened on: with TLS, or on loopback, or when told to.
pub fn check_listen(addr: SocketAddr, insecure_listen: bool, tls: bool) -> Result<(), Error> {
    match tls || addr.ip().is_loopback() || insecure_listen {
        true => Ok(()),
        false => Err(Error::NotLoopback(addr)),
    }
}

/// The addresses `serve` listens on (with port 0, the ones the system chose).
#[derive(Clone, Copy, Debug)]
pub struct Bound {
    pub http: SocketAddr,
    pub imap: Option<SocketAddr>,
    pub imaps: Option<SocketAddr>,
}

/// Serves `repo` until SIGINT or SIGTERM. `ready` is told the addresses bound once the
/// server accepts connections. `reopen` opens the
/// repository again when it changed (a backup, `index`, a prune) or after it was closed
/// for being idle (see `state`).
pub fn serve(
    repo: Repository,
    reopen: Reopen,
    opts: ServeOptions,
    ready: impl FnOnce(Bound),
) -> Result<(), Error> {
    check_listen(opts.listen, opts.insecure_listen, opts.tls.is_some())?;
    if let Some(a) = opts.imap {
        // Plain IMAP: on any address with a certificate (STARTTLS, logins only after it
        // there), else only loopback unless told otherwise.
        check_listen(a, opts.insecure_listen, opts.tls.is_some())?;
    }
    let certificates = opts.tls.as_ref().map(tls::Certificates::load).transpose()?;
    let acceptor = (certificates.as_ref())
        .map(|c| c.acceptor(b"http/1.1"))
        .transpose()?;
    // The IMAP view's TLS, for `--imaps` and STARTTLS on `--imap` alike.
    let imap_acceptor = match (opts.imap.or(opts.imaps), &certificates) {
        (Some(_), Some(c)) => Some(c.acceptor(b"imap")?),
        _ => None,
    };
    if opts.imaps.is_some() && opts.tls.is_none() {
        return Err(Error::ImapsWithoutTls);
    }
    let live = state::Live::open(repo, &opts.search_cache)?;
    let fresh = state::Freshness {
        reopen,
        recheck: opts.recheck,
        idle_close: opts.idle_close,
    };
    let state = state::AppState::new(
        live,
        fresh,
        (
            opts.admin_token,
            (opts.user_auth, opts.user_accounts),
            opts.restore,
        ),
        (opts.page_size, opts.stale_after),
        opts.search_cache,
        (acceptor.is_some(), opts.trusted_proxies),
    );
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let listener =
            (tokio::net::TcpListener::bind(opts.listen).await).map_err(|source| Error::Listen {
                addr: opts.listen,
                source,
            })?;
        let bind = |addr: Option<SocketAddr>| async move {
            match addr {
                Some(addr) => (tokio::net::TcpListener::bind(addr).await)
                    .map(Some)
                    .map_err(|source| Error::Listen { addr, source }),
                None => Ok(None),
            }
        };
        let (imap, imaps) = (bind(opts.imap).await?, bind(opts.imaps).await?);
        let addr = |l: &Option<tokio::net::TcpListener>| l.as_ref().map(|l| l.local_addr());
        ready(Bound {
            http: listener.local_addr()?,
            imap: addr(&imap).transpose()?,
            imaps: addr(&imaps).transpose()?,
        });
        if let (Some(l), Some(a)) = (imap, opts.imap) {
            let p = imap::Protection::Plain {
                starttls: imap_acceptor.clone(),
                // Without a certificate the address is loopback or --insecure-listen's;
                // with one, logins wait for STARTTLS unless the address is loopback.
                plain_login: a.ip().is_loopback() || imap_acceptor.is_none(),
            };
            tokio::spawn(imap::run(l, state.clone(), p));
        }
        if let (Some(l), Some(a)) = (imaps, imap_acceptor) {
            tokio::spawn(imap::run(l, state.clone(), imap::Protection::Tls(a)));
        }
        tokio::spawn(close_when_idle(state.clone()));
        tokio::spawn(audit::flush_every(state.clone(), opts.audit_flush));
        let last = state.clone();
        let app = routes::router(state).into_make_service_with_connect_info::<SocketAddr>();
        match acceptor {
            Some(acceptor) => {
                use axum::serve::ListenerExt;
                // `tap_io` (doing nothing) gives the peer's address to the handlers as
                // for plain TCP (axum has that for any listener only through it).
                let tls = tls::TlsListener::new(listener, acceptor)?.tap_io(|_| {});
                axum::serve(tls, app)
                    .with_graceful_shutdown(shutdown())
                    .await?
            }
            None => {
                use axum::serve::ListenerExt;
                axum::serve(listener.tap_io(|tcp| no_delay(tcp)), app)
                    .with_graceful_shutdown(shutdown())
                    .await?
            }
        }
        // What came since the last batch.
        let _ = tokio::task::spawn_blocking(move || audit::flush(&last)).await;
        Ok(())
    })
}

/// Sets TCP_NODELAY on an accepted connection (the web UI's and the IMAP view's): an
/// answer written in pieces (IMAP's untagged lines then the tagged one; a streamed
/// download's chunks) must not wait for the client's delayed ACK, 40 ms each time.
pub(crate) fn no_delay(tcp: &tokio::net::TcpStream) {
    if let Err(e) = tcp.set_nodelay(true) {
        tracing::warn!("serve: cannot set TCP_NODELAY: {e}");
    }
}

/// Closes the repository when no request came for a while (its read lock given back, so
/// that a prune need not wait for an idle server).
async fn close_when_idle(st: state::AppState) {
    loop {
        tokio::time::sleep(st.idle_tick()).await;
        let s = st.clone();
        let closed = tokio::task::spawn_blocking(move || s.take_if_idle().is_some()).await;
        if let Ok(true) = closed {
            tracing::debug!("serve: the repository closed after an idle time");
        }
    }
}

/// Resolves on SIGINT or SIGTERM.
async fn shutdown() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_loopback_without_the_insecure_flag() {
        let ok = |s: &str, insecure| check_listen(s.parse().unwrap(), insecure, false).is_ok();
        assert!(ok("127.0.0.1:8080", false));
        assert!(ok("[::1]:8080", false));
        assert!(ok("127.0.0.2:0", false));
        assert!(!ok("0.0.0.0:8080", false));
        assert!(!ok("[::]:8080", false));
        assert!(!ok("192.0.2.1:80", false));
        assert!(ok("0.0.0.0:8080", true));
        assert!(check_listen("0.0.0.0:443".parse().unwrap(), false, true).is_ok());
    }
}
