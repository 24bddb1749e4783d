//! HTTPS: `--tls-cert` and `--tls-key` (PEM files, as a certificate authority or
//! certbot writes them) served with rustls (the ring provider the IMAP client uses, TLS
//! 1.2 and 1.3). The key file must be readable by its owner alone (0600 or 0400), as the
//! admin token's.
//!
//! [`TlsListener`] is an `axum::serve::Listener`: connections are accepted on their own
//! task and each handshake runs on a task of its own, with a time limit, so that a client
//! that never finishes its handshake holds up nobody else.

use crate::Error;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use std::net::SocketAddr;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

/// A handshake that takes longer is dropped.
pub const HANDSHAKE_TIME: Duration = Duration::from_secs(10);
/// Handshaken connections waiting for the server to take them.
const WAITING: usize = 64;

/// The certificate chain and the private key, PEM files.
#[derive(Clone, Debug)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// How often the files are looked at again (two `stat`s, on a thread of their own).
const CHECK_EVERY: Duration = Duration::from_secs(2);

/// The certificate and key the server presents, read again when their files change: a
/// renewed certificate (certbot, acme.sh, a CA's tooling replacing the files or the
/// symbolic links to them) is served within two seconds of the change, by the
/// web UI and the IMAP view alike, with no restart. A new pair that does not load (the
/// files caught half-written, a key that is not the certificate's) leaves the old one in
/// place, logged once, and is read again at the next change.
#[derive(Debug)]
pub struct Certificates {
    files: TlsFiles,
    provider: Arc<rustls::crypto::CryptoProvider>,
    current: RwLock<Arc<CertifiedKey>>,
}

/// Both files' device, inode, size and modification time (through symbolic links).
type Stamp = [(u64, u64, u64, i64, i64); 2];

fn stamp(files: &TlsFiles) -> std::io::Result<Stamp> {
    let one = |p: &Path| {
        std::fs::metadata(p).map(|m| (m.dev(), m.ino(), m.size(), m.mtime(), m.mtime_nsec()))
    };
    Ok([one(&files.cert)?, one(&files.key)?])
}

impl Certificates {
    /// Reads the files: the key's mode checked first, then both parsed and matched; every
    /// failure names its file.
    pub fn load(files: &TlsFiles) -> Result<Arc<Certificates>, Error> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let stamp = stamp(files).map_err(|e| Error::Tls {
            path: files.cert.clone(),
            why: e.to_string(),
        })?;
        let key = read(files, &provider)?;
        let certs = Arc::new(Certificates {
            files: files.clone(),
            provider,
            current: RwLock::new(Arc::new(key)),
        });
        // The files are looked at on a thread of their own, not in a handshake on the
        // runtime's threads (a slow disk would hold every handshake); it ends with them.
        let watched = Arc::downgrade(&certs);
        let watch = move || {
            let mut seen = stamp;
            while let Some(c) = watched.upgrade() {
                c.refresh(&mut seen);
                drop(c);
                std::thread::sleep(CHECK_EVERY);
            }
        };
        std::thread::Builder::new()
            .name("tls-files".into())
            .spawn(watch)
            .map_err(|e| Error::Tls {
                path: files.cert.clone(),
                why: e.to_string(),
            })?;
        Ok(certs)
    }

    /// An acceptor presenting these certificates, whose ALPN protocol is `alpn`
    /// (`http/1.1`, or `imap` for the IMAP view, RFC 7301's registry).
    pub fn acceptor(self: &Arc<Self>, alpn: &[u8]) -> Result<TlsAcceptor, Error> {
        let mut config = rustls::ServerConfig::builder_with_provider(self.provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| Error::Tls {
                path: self.files.cert.clone(),
                why: e.to_string(),
            })?
            .with_no_client_auth()
            .with_cert_resolver(self.clone());
        config.alpn_protocols = vec![alpn.to_vec()];
        Ok(TlsAcceptor::from(Arc::new(config)))
    }

    /// Reads the files again if they changed since they looked as `seen` (by the thread
    /// [`Certificates::load`] starts, every [`CHECK_EVERY`]).
    fn refresh(&self, seen: &mut Stamp) {
        let Ok(now) = stamp(&self.files) else {
            return;
        };
        if now == *seen {
            return;
        }
        *seen = now;
        match read(&self.files, &self.provider) {
            Ok(key) => {
                *self.current.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(key);
                tracing::info!("serve: {} read again", self.files.cert.display());
            }
            Err(e) => tracing::warn!("serve: the changed certificate is not used: {e}"),
        }
    }
}

impl ResolvesServerCert for Certificates {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(
            self.current
                .read()
                .unwrap_or_else(|p| p.into_inner())
                .clone(),
        )
    }
}

/// The certificate chain and the key of `files`, which must go together.
fn read(
    files: &TlsFiles,
    provider: &rustls::crypto::CryptoProvider,
) -> Result<CertifiedKey, Error> {
    let bad = |path: &Path, why: String| Error::Tls {
        path: path.to_path_buf(),
        why,
    };
    crate::token::check_private(&files.key, "TLS key").map_err(Error::TlsKey)?;
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&files.cert)
        .and_then(|i| i.collect::<Result<_, _>>())
        .map_err(|e| bad(&files.cert, e.to_string()))?;
    if certs.is_empty() {
        return Err(bad(&files.cert, "no certificate in it".into()));
    }
    let key =
        PrivateKeyDer::from_pem_file(&files.key).map_err(|e| bad(&files.key, e.to_string()))?;
    CertifiedKey::from_der(certs, key, provider)
        .map_err(|e| bad(&files.key, format!("does not go with the certificate: {e}")))
}

/// TLS connections on a TCP listener, handshaken.
pub struct TlsListener {
    rx: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
    local: SocketAddr,
}

impl TlsListener {
    /// Starts accepting on `tcp` (on the current runtime).
    pub fn new(tcp: TcpListener, acceptor: TlsAcceptor) -> std::io::Result<TlsListener> {
        let local = tcp.local_addr()?;
        let (tx, rx) = mpsc::channel(WAITING);
        tokio::spawn(async move {
            loop {
                let (stream, peer) = match tcp.accept().await {
                    Ok(c) => c,
                    Err(e) => {
                        // Out of descriptors and the like: wait, as axum's own loop does.
                        tracing::warn!("serve: accepting a connection: {e}");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                };
                if tx.is_closed() {
                    return;
                }
                crate::no_delay(&stream);
                let (acceptor, tx) = (acceptor.clone(), tx.clone());
                tokio::spawn(async move {
                    match tokio::time::timeout(HANDSHAKE_TIME, acceptor.accept(stream)).await {
                        Ok(Ok(tls)) => {
                            let _ = tx.send((tls, peer)).await;
                        }
                        Ok(Err(e)) => tracing::debug!("serve: TLS handshake with {peer}: {e}"),
                        Err(_) => tracing::debug!("serve: TLS handshake with {peer} timed out"),
                    }
                });
            }
        });
        Ok(TlsListener { rx, local })
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.rx.recv().await {
            Some(c) => c,
            // The accepting task ended only because this listener is gone.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<SocketAddr> {
        Ok(self.local)
    }
}
