//! TLS for Carillon's HTTP endpoints, shared by the admin node (`http.tls_cert`) and the Rust
//! executor SDK: PEM files read into a rustls `ServerConfig` (with client certificates
//! required when a CA is given), and [`TlsListener`], an `axum::serve` listener that accepts
//! TCP connections and hands over those whose TLS handshake completed.
//!
//! Handshakes run in tasks of their own with a time limit, so a client that connects and says
//! nothing never holds up the others. The client side (dispatch to executors, executors and
//! the CLI calling nodes) is reqwest's, configured with the same PEM files.

use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

pub use rustls::ServerConfig;

/// How long a client has to complete its handshake.
const HANDSHAKE_LIMIT: Duration = Duration::from_secs(10);

/// Why TLS could not be set up; every message names the file at fault.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("reading {path}: {source}")]
    Read { path: PathBuf, source: io::Error },
    #[error("{path}: {reason}")]
    Pem { path: PathBuf, reason: String },
    #[error("the TLS configuration is refused: {0}")]
    Config(String),
}

/// Makes ring this process's rustls provider, unless one is already set. ring is the one
/// provider compiled in (sqlx's TLS uses it, and reqwest is built without one of its own), and
/// code that asks rustls for "the" provider (reqwest's clients, sqlx's certificate verifier
/// for `verify-ca`/`verify-full`) finds none until it is installed. Idempotent.
pub fn install_default_provider() {
    // An error only says a provider was installed first: that one serves.
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// A reqwest client builder over ring. Every HTTP client of Carillon's is built here (clippy's
/// `disallowed-methods` says so to `reqwest::Client::new` and `builder`): reqwest without a
/// provider of its own panics at `build` in a process where none is installed.
pub fn http_client_builder() -> reqwest::ClientBuilder {
    install_default_provider();
    #[allow(clippy::disallowed_methods)]
    reqwest::Client::builder()
}

/// A reqwest client with reqwest's defaults, over ring.
pub fn http_client() -> Result<reqwest::Client, reqwest::Error> {
    http_client_builder().build()
}

/// Every certificate of a PEM file (a chain, or a bundle of CAs).
pub fn certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let bytes = std::fs::read(path).map_err(|source| TlsError::Read {
        path: path.to_owned(),
        source,
    })?;
    let certs = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::Pem {
            path: path.to_owned(),
            reason: format!("not a PEM certificate file: {e}"),
        })?;
    if certs.is_empty() {
        return Err(TlsError::Pem {
            path: path.to_owned(),
            reason: "holds no certificate".to_owned(),
        });
    }
    Ok(certs)
}

/// The private key of a PEM file (PKCS#8, PKCS#1 or SEC1).
pub fn private_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    let bytes = std::fs::read(path).map_err(|source| TlsError::Read {
        path: path.to_owned(),
        source,
    })?;
    PrivateKeyDer::from_pem_slice(&bytes).map_err(|e| TlsError::Pem {
        path: path.to_owned(),
        reason: format!("not a PEM private key: {e}"),
    })
}

/// What an HTTPS endpoint serves with: its certificate chain and key, and, to require client
/// certificates, the CA that signs them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerTls {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub client_ca: Option<PathBuf>,
}

impl ServerTls {
    /// The rustls configuration, with HTTP/1.1 offered by ALPN.
    pub fn config(&self) -> Result<Arc<rustls::ServerConfig>, TlsError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ServerConfig::builder_with_provider(Arc::clone(&provider))
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError::Config(e.to_string()))?;
        let builder = match &self.client_ca {
            None => builder.with_no_client_auth(),
            Some(ca) => {
                let mut roots = rustls::RootCertStore::empty();
                for cert in certificates(ca)? {
                    roots.add(cert).map_err(|e| TlsError::Pem {
                        path: ca.clone(),
                        reason: format!("not a usable CA certificate: {e}"),
                    })?;
                }
                let verifier =
                    WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                        .build()
                        .map_err(|e| TlsError::Config(e.to_string()))?;
                builder.with_client_cert_verifier(verifier)
            }
        };
        let mut config = builder
            .with_single_cert(certificates(&self.cert)?, private_key(&self.key)?)
            .map_err(|e| TlsError::Pem {
                path: self.key.clone(),
                reason: format!("does not match {}: {e}", self.cert.display()),
            })?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Arc::new(config))
    }
}

/// How a client (reqwest) trusts servers and identifies itself: CA certificates trusted
/// beside the system's roots, and an optional client certificate with its key.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClientTls {
    pub ca: Option<PathBuf>,
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
}

impl ClientTls {
    /// `builder` trusting `ca` too and presenting the client certificate, if set.
    pub fn apply(
        &self,
        mut builder: reqwest::ClientBuilder,
    ) -> Result<reqwest::ClientBuilder, TlsError> {
        if let Some(ca) = &self.ca {
            for cert in certificates(ca)? {
                let cert = reqwest::Certificate::from_der(&cert).map_err(|e| TlsError::Pem {
                    path: ca.clone(),
                    reason: e.to_string(),
                })?;
                builder = builder.add_root_certificate(cert);
            }
        }
        match (&self.cert, &self.key) {
            (None, None) => {}
            (Some(cert), Some(key)) => {
                // Checked here, so a bad file is named at start rather than at the first call.
                let chain = certificates(cert)?;
                private_key(key)?;
                let mut pem = Vec::new();
                for path in [cert, key] {
                    let bytes = std::fs::read(path).map_err(|source| TlsError::Read {
                        path: path.clone(),
                        source,
                    })?;
                    pem.extend_from_slice(&bytes);
                    pem.push(b'\n');
                }
                let identity = reqwest::Identity::from_pem(&pem).map_err(|e| TlsError::Pem {
                    path: key.clone(),
                    reason: format!(
                        "with {} ({} certificates): {e}",
                        cert.display(),
                        chain.len()
                    ),
                })?;
                builder = builder.identity(identity);
            }
            _ => {
                return Err(TlsError::Config(
                    "a client certificate needs both its certificate and its key file".to_owned(),
                ));
            }
        }
        Ok(builder)
    }
}

/// An error with its causes, as one line: reqwest says "builder error" or "error sending
/// request" and keeps the reason (no root certificates, a refused certificate, a reset) in its
/// sources.
pub fn with_causes(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// Whether a failed call failed in TLS (a certificate refused by either side, or a broken
/// handshake), looking through its causes: rustls' own error, or an I/O error carrying one.
pub fn is_tls_failure(err: &(dyn std::error::Error + 'static)) -> bool {
    let mut current = Some(err);
    while let Some(e) = current {
        if e.downcast_ref::<rustls::Error>().is_some() {
            return true;
        }
        // An I/O error's `source` skips the error it carries: look into it.
        let carried = e
            .downcast_ref::<io::Error>()
            .and_then(io::Error::get_ref)
            .map(|inner| inner as &(dyn std::error::Error + 'static));
        if carried.is_some_and(is_tls_failure) {
            return true;
        }
        current = e.source();
    }
    false
}

/// An `axum::serve` listener that serves TLS: connections whose handshake completed, in the
/// order they completed.
#[derive(Debug)]
pub struct TlsListener {
    handshaken: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
    local: SocketAddr,
    acceptor: tokio::task::JoinHandle<()>,
}

impl TlsListener {
    pub fn new(listener: TcpListener, config: Arc<rustls::ServerConfig>) -> io::Result<Self> {
        let local = listener.local_addr()?;
        let (tx, handshaken) = mpsc::channel(64);
        let tls = TlsAcceptor::from(config);
        let acceptor = tokio::spawn(async move {
            loop {
                let (tcp, peer) = match listener.accept().await {
                    Ok(accepted) => accepted,
                    Err(err) => {
                        // Out of file descriptors and the like: wait, as axum's own does.
                        tracing::warn!(error = %err, "accepting a connection failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                if tx.is_closed() {
                    return;
                }
                let tls = tls.clone();
                let tx = tx.clone();
                tokio::spawn(async move {
                    match tokio::time::timeout(HANDSHAKE_LIMIT, tls.accept(tcp)).await {
                        Ok(Ok(stream)) => {
                            let _ = tx.send((stream, peer)).await;
                        }
                        Ok(Err(err)) => {
                            tracing::debug!(%peer, error = %err, "TLS handshake refused");
                        }
                        Err(_) => tracing::debug!(%peer, "TLS handshake timed out"),
                    }
                });
            }
        });
        Ok(Self {
            handshaken,
            local,
            acceptor,
        })
    }
}

impl Drop for TlsListener {
    fn drop(&mut self) {
        self.acceptor.abort();
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.handshaken.recv().await {
            Some(connection) => connection,
            // The acceptor task is gone: nothing will ever come.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        Ok(self.local)
    }
}
