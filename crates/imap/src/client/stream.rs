//! The byte stream under a session: plain TCP or TLS (rustls, ring provider),
//! and the TLS client configuration (system roots, an extra CA file, or no
//! verification at all for labs and tests).

use std::io::{self, IoSlice, Read, Write};
use std::net::TcpStream;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{
    ClientConfig, ClientConnection, DigitallySignedStruct, RootCertStore, SignatureScheme,
    StreamOwned,
};

use super::options::TlsOptions;
use crate::error::{Error, Result};

/// Plain TCP or TLS over TCP.
#[derive(Debug)]
pub(crate) enum Stream {
    Plain(TcpStream),
    Tls(Box<StreamOwned<ClientConnection, TcpStream>>),
}

impl Stream {
    pub(crate) fn tcp(&self) -> &TcpStream {
        match self {
            Stream::Plain(s) => s,
            Stream::Tls(s) => s.get_ref(),
        }
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Plain(s) => s.read(buf),
            Stream::Tls(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Plain(s) => s.write(buf),
            Stream::Tls(s) => s.write(buf),
        }
    }

    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        match self {
            Stream::Plain(s) => s.write_vectored(bufs),
            Stream::Tls(s) => s.write_vectored(bufs),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Stream::Plain(s) => s.flush(),
            Stream::Tls(s) => s.flush(),
        }
    }
}

/// Builds the rustls client configuration once; sessions share it.
pub(crate) fn tls_config(opts: &TlsOptions, server: &str) -> Result<Arc<ClientConfig>> {
    let tls_err = |reason: String| Error::Tls {
        server: server.to_string(),
        reason,
    };
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| tls_err(e.to_string()))?;
    let config = if opts.insecure {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AcceptAnyCert(provider)))
            .with_no_client_auth()
    } else {
        let mut roots = RootCertStore::empty();
        if opts.system_roots {
            let native = rustls_native_certs::load_native_certs();
            roots.add_parsable_certificates(native.certs);
        }
        if let Some(path) = &opts.ca_file {
            let certs = CertificateDer::pem_file_iter(path)
                .map_err(|e| tls_err(format!("cannot read CA file {}: {e}", path.display())))?;
            for cert in certs {
                let cert =
                    cert.map_err(|e| tls_err(format!("bad CA file {}: {e}", path.display())))?;
                roots
                    .add(cert)
                    .map_err(|e| tls_err(format!("bad CA in {}: {e}", path.display())))?;
            }
        }
        if roots.is_empty() {
            return Err(tls_err(
                "no trusted root certificates (none in the system store and no CA file)".into(),
            ));
        }
        builder.with_root_certificates(roots).with_no_client_auth()
    };
    Ok(Arc::new(config))
}

/// Wraps `tcp` in TLS and completes the handshake, so certificate errors
/// surface here as [`Error::Tls`].
pub(crate) fn start_tls(
    config: Arc<ClientConfig>,
    host: &str,
    server: &str,
    mut tcp: TcpStream,
) -> Result<Stream> {
    let tls_err = |reason: String| Error::Tls {
        server: server.to_string(),
        reason,
    };
    let name = ServerName::try_from(
        host.trim_start_matches('[')
            .trim_end_matches(']')
            .to_string(),
    )
    .map_err(|e| tls_err(format!("bad server name {host:?}: {e}")))?;
    let mut conn = ClientConnection::new(config, name).map_err(|e| tls_err(e.to_string()))?;
    while conn.is_handshaking() {
        if let Err(e) = conn.complete_io(&mut tcp) {
            let rustls_reason = e
                .get_ref()
                .and_then(|inner| inner.downcast_ref::<rustls::Error>())
                .map(ToString::to_string);
            return Err(match rustls_reason {
                Some(reason) => tls_err(reason),
                None => Error::Connect {
                    server: server.to_string(),
                    source: e,
                },
            });
        }
    }
    Ok(Stream::Tls(Box::new(StreamOwned::new(conn, tcp))))
}

/// Accepts any server certificate (the `insecure` option). Signatures are
/// still checked, so the handshake itself is sound; only identity is not.
#[derive(Debug)]
struct AcceptAnyCert(Arc<CryptoProvider>);

impl ServerCertVerifier for AcceptAnyCert {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
