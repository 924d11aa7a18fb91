//! TLS for the registry: certificate, key and optional client CA from PEM files, a rustls
//! server configuration that offers HTTP/2 and HTTP/1.1 by ALPN, reload on demand (SIGHUP),
//! and [`TlsListener`], which hands finished TLS streams to the accept loop ([`crate::conn`]).
//!
//! Why a listener (axum's `Listener` trait) rather than axum-server: the plain and the TLS
//! server then share one serve path, with the same limits, graceful bounded shutdown and
//! per-connection peer address, and no second HTTP server stack enters the build. Handshakes run in their own tasks with a time limit, so a client that stalls
//! its handshake cannot hold up the accept loop.
//!
//! Reload builds a whole new [`ServerConfig`] from the files and swaps it in only when every
//! file loaded and the key matches the certificate. Each connection takes the configuration
//! current at its accept, so connections that are already open keep their session and new
//! handshakes get the new certificate; a bad file leaves the old configuration serving.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use rustls::ServerConfig;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::sign::CertifiedKey;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

/// How long a client may take to finish its TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Handshaken connections waiting for the accept loop to take them.
const ACCEPT_QUEUE: usize = 64;

/// The `[tls]` table: where the PEM files are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsSettings {
    /// The certificate chain, leaf first (`tls.cert`).
    pub cert: PathBuf,
    /// The private key of the leaf certificate: PKCS#8, PKCS#1 (RSA) or SEC1 (EC) (`tls.key`).
    pub key: PathBuf,
    /// CA certificates that client certificates must chain to; when set, every client must
    /// present one (`tls.client_ca`, mutual TLS).
    pub client_ca: Option<PathBuf>,
}

/// Why a TLS file could not be used. Every variant names the file.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TlsError {
    /// The file could not be read.
    #[error("cannot read {what} file {path}")]
    Read {
        /// What the file should hold (`TLS certificate`, `TLS private key`, `TLS client CA`).
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The file is not PEM of the expected kind, or holds none of it.
    #[error("invalid {what} file {path}: {reason}")]
    Invalid {
        /// What the file should hold.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The private key does not belong to the certificate.
    #[error("the TLS private key {key} does not match the certificate {cert}")]
    KeyMismatch {
        /// The certificate file.
        cert: PathBuf,
        /// The key file.
        key: PathBuf,
    },
}

fn read(what: &'static str, path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        what,
        path: path.to_owned(),
        source,
    })
}

fn invalid(what: &'static str, path: &Path, reason: impl std::fmt::Display) -> TlsError {
    TlsError::Invalid {
        what,
        path: path.to_owned(),
        reason: reason.to_string(),
    }
}

/// Every certificate in a PEM file, in order; at least one.
fn load_certs(what: &'static str, path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let pem = read(what, path)?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| invalid(what, path, e))?;
    if certs.is_empty() {
        return Err(invalid(what, path, "no CERTIFICATE block in it"));
    }
    Ok(certs)
}

/// The crypto provider of the server: ring, as the rest of the workspace uses. Named
/// explicitly so the build never depends on which provider features other crates switch on.
fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

impl TlsSettings {
    /// Loads the files and builds a server configuration that offers `h2` and `http/1.1`.
    pub fn server_config(&self) -> Result<Arc<ServerConfig>, TlsError> {
        const CERT: &str = "TLS certificate";
        const KEY: &str = "TLS private key";
        const CA: &str = "TLS client CA";
        let provider = provider();
        let chain = load_certs(CERT, &self.cert)?;
        let key_pem = read(KEY, &self.key)?;
        let key = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| {
            invalid(
                KEY,
                &self.key,
                match e {
                    rustls::pki_types::pem::Error::NoItemsFound => {
                        "no PRIVATE KEY block (PKCS#8, RSA or EC) in it".to_owned()
                    }
                    e => e.to_string(),
                },
            )
        })?;
        let signing = provider
            .key_provider
            .load_private_key(key)
            .map_err(|e| invalid(KEY, &self.key, e))?;
        let certified = CertifiedKey::new(chain, signing);
        match certified.keys_match() {
            Ok(()) => {}
            Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::KeyMismatch)) => {
                return Err(TlsError::KeyMismatch {
                    cert: self.cert.clone(),
                    key: self.key.clone(),
                });
            }
            // The key type cannot report its public key: nothing to compare, the handshake
            // will tell.
            Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::Unknown)) => {}
            Err(e) => return Err(invalid(CERT, &self.cert, e)),
        }
        let builder = ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| invalid(CERT, &self.cert, e))?;
        let builder = match &self.client_ca {
            None => builder.with_no_client_auth(),
            Some(path) => {
                let mut roots = rustls::RootCertStore::empty();
                for c in load_certs(CA, path)? {
                    roots.add(c).map_err(|e| invalid(CA, path, e))?;
                }
                let verifier = WebPkiClientVerifier::builder_with_provider(roots.into(), provider)
                    .build()
                    .map_err(|e| invalid(CA, path, e))?;
                builder.with_client_cert_verifier(verifier)
            }
        };
        let mut config =
            builder.with_cert_resolver(Arc::new(rustls::sign::SingleCertAndKey::from(certified)));
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(Arc::new(config))
    }
}

/// The configuration new connections use, replaceable while serving.
#[derive(Debug, Clone)]
pub struct TlsConfig {
    settings: TlsSettings,
    current: Arc<RwLock<Arc<ServerConfig>>>,
}

impl TlsConfig {
    /// Loads the files once; errors name the file.
    pub fn load(settings: TlsSettings) -> Result<TlsConfig, TlsError> {
        let config = settings.server_config()?;
        Ok(TlsConfig {
            settings,
            current: Arc::new(RwLock::new(config)),
        })
    }

    /// Loads the files again and, if all of them are good, makes new connections use them.
    /// On error the configuration in use stays.
    pub fn reload(&self) -> Result<(), TlsError> {
        let config = self.settings.server_config()?;
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = config;
        Ok(())
    }

    /// The files this configuration comes from.
    pub fn settings(&self) -> &TlsSettings {
        &self.settings
    }

    fn acceptor(&self) -> TlsAcceptor {
        TlsAcceptor::from(
            self.current
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .clone(),
        )
    }
}

/// A listener for the accept loop that yields connections whose TLS handshake has finished.
///
/// A background task accepts TCP connections and runs each handshake in its own task; when
/// this value is dropped (graceful shutdown), that task ends and the socket closes, so new
/// connections are refused.
#[derive(Debug)]
pub struct TlsListener {
    ready: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
    local: SocketAddr,
    acceptor: tokio::task::JoinHandle<()>,
}

impl TlsListener {
    /// Serves TLS with `config` on `tcp`.
    pub fn new(tcp: TcpListener, config: TlsConfig) -> std::io::Result<TlsListener> {
        let local = tcp.local_addr()?;
        let (tx, ready) = mpsc::channel(ACCEPT_QUEUE);
        let acceptor = tokio::spawn(accept_loop(tcp, config, tx));
        Ok(TlsListener {
            ready,
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

async fn accept_loop(
    tcp: TcpListener,
    config: TlsConfig,
    tx: mpsc::Sender<(TlsStream<TcpStream>, SocketAddr)>,
) {
    loop {
        let (stream, peer) = tokio::select! {
            () = tx.closed() => return,
            r = tcp.accept() => match r {
                Ok(c) => c,
                Err(e) => {
                    // Out of file descriptors and the like: wait instead of spinning, as
                    // axum's own TCP listener does.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    continue;
                }
            },
        };
        let acceptor = config.acceptor();
        let tx = tx.clone();
        tokio::spawn(async move {
            match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                Ok(Ok(tls)) => {
                    let _ = tx.send((tls, peer)).await;
                }
                Ok(Err(e)) => tracing::debug!(%peer, error = %e, "TLS handshake failed"),
                Err(_) => tracing::debug!(%peer, "TLS handshake timed out"),
            }
        });
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.ready.recv().await {
            Some(c) => c,
            // The TCP accept loop only ends when this listener is dropped; never reached
            // while the serving loop holds it.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(self.local)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write_pair(dir: &Path, name: &str) -> (PathBuf, PathBuf) {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["localhost".to_owned()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        let (c, k) = (
            dir.join(format!("{name}.crt")),
            dir.join(format!("{name}.key")),
        );
        std::fs::write(&c, cert.pem()).unwrap();
        std::fs::write(&k, key.serialize_pem()).unwrap();
        (c, k)
    }

    #[test]
    fn errors_name_the_file_and_reload_keeps_the_old_config() {
        let dir = tempfile::tempdir().unwrap();
        let (cert, key) = write_pair(dir.path(), "a");
        let (_, other_key) = write_pair(dir.path(), "b");
        let settings = TlsSettings {
            cert: cert.clone(),
            key: key.clone(),
            client_ca: None,
        };
        let config = TlsConfig::load(settings.clone()).unwrap();
        let first = config.current.read().unwrap().clone();
        assert_eq!(
            first.alpn_protocols,
            vec![b"h2".to_vec(), b"http/1.1".to_vec()]
        );

        let missing = dir.path().join("missing.crt");
        let e = TlsSettings {
            cert: missing.clone(),
            ..settings.clone()
        }
        .server_config()
        .unwrap_err();
        assert!(
            matches!(&e, TlsError::Read { path, .. } if *path == missing),
            "{e}"
        );

        let e = TlsSettings {
            key: cert.clone(),
            ..settings.clone()
        }
        .server_config()
        .unwrap_err();
        assert!(
            e.to_string()
                .starts_with(&format!("invalid TLS private key file {}", cert.display())),
            "{e}"
        );

        let e = TlsSettings {
            key: other_key.clone(),
            ..settings.clone()
        }
        .server_config()
        .unwrap_err();
        assert!(matches!(e, TlsError::KeyMismatch { .. }), "{e}");
        assert!(e.to_string().contains(&*other_key.to_string_lossy()), "{e}");

        // A broken certificate file: reload fails and the configuration in use stays.
        std::fs::write(&cert, "-----BEGIN CERTIFICATE-----\nnot base64\n").unwrap();
        let e = config.reload().unwrap_err();
        assert!(
            matches!(&e, TlsError::Invalid { path, .. } if *path == cert),
            "{e}"
        );
        assert!(Arc::ptr_eq(&first, &config.current.read().unwrap()));

        // Good files again: reload swaps the configuration.
        let (c2, k2) = write_pair(dir.path(), "c");
        std::fs::rename(c2, &cert).unwrap();
        std::fs::rename(k2, &key).unwrap();
        config.reload().unwrap();
        assert!(!Arc::ptr_eq(&first, &config.current.read().unwrap()));
    }
}
