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
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
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

/// Reads the files into an HTTPS server's acceptor (ALPN `http/1.1`): see [`acceptor_for`].
pub fn acceptor(files: &TlsFiles) -> Result<TlsAcceptor, Error> {
    acceptor_for(files, b"http/1.1")
}

/// Reads the files into a server configuration whose ALPN protocol is `alpn` (`http/1.1`,
/// or `imap` for the IMAP view's `--imaps`, RFC 7301's registry): the key's mode checked
/// first, then both parsed; every failure names its file.
pub fn acceptor_for(files: &TlsFiles, alpn: &[u8]) -> Result<TlsAcceptor, Error> {
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
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| bad(&files.cert, e.to_string()))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| bad(&files.key, format!("does not go with the certificate: {e}")))?;
    config.alpn_protocols = vec![alpn.to_vec()];
    Ok(TlsAcceptor::from(Arc::new(config)))
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
