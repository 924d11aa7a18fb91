//! TLS in front of the depot server: accepts TLS connections (rustls) and relays their
//! plaintext to the HTTP server listening on loopback, so one request handler serves both.
//!
//! tiny_http's own `ssl-rustls` feature is tied to rustls 0.20, which no longer gets fixes;
//! this relay uses the rustls the client already builds. Each connection has two threads:
//! one reads the client's TLS records and writes their plaintext to the backend, the other
//! reads the backend's answers and writes them as TLS records. They share the rustls
//! connection behind a mutex, held only while records are processed or written, never while
//! waiting for input.

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use rustls::ServerConnection;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject as _;

use super::tls::{TlsFileError, read_key};

/// How long a client may take to finish the handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a connection may stay idle (nothing sent either way), or a write block, before
/// it is closed.
const IDLE_TIMEOUT: Duration = Duration::from_secs(60);

/// The server's TLS identity: a certificate chain and its private key.
#[derive(Clone)]
pub struct ServerTls {
    config: Arc<rustls::ServerConfig>,
}

impl std::fmt::Debug for ServerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerTls").finish_non_exhaustive()
    }
}

impl ServerTls {
    /// Reads a PEM certificate chain (server certificate first) and its PEM private key.
    /// Errors name the file.
    pub fn from_pem_files(cert: &Path, key: &Path) -> Result<Self, TlsFileError> {
        let pem = std::fs::read(cert).map_err(|e| TlsFileError {
            path: cert.to_owned(),
            problem: "cannot read",
            source: Some(Box::new(e)),
        })?;
        let chain = CertificateDer::pem_slice_iter(&pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| TlsFileError {
                path: cert.to_owned(),
                problem: "not PEM certificates",
                source: Some(Box::new(e)),
            })?;
        if chain.is_empty() {
            return Err(TlsFileError {
                path: cert.to_owned(),
                problem: "no PEM certificate in it",
                source: None,
            });
        }
        let key_der = read_key(key)?;
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsFileError {
            path: cert.to_owned(),
            problem: "no TLS version available",
            source: Some(Box::new(e)),
        })?
        .with_no_client_auth()
        .with_single_cert(chain, key_der)
        .map_err(|e| TlsFileError {
            path: key.to_owned(),
            problem: "does not match the certificate or is not usable",
            source: Some(Box::new(e)),
        })?;
        Ok(Self {
            config: Arc::new(config),
        })
    }
}

/// A running relay: a listener whose connections are relayed to `backend`.
pub(crate) struct Terminator {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    accept: Option<JoinHandle<()>>,
}

impl Terminator {
    /// Listens on `listen` and relays each TLS connection's plaintext to `backend`.
    pub(crate) fn start(listen: &str, backend: SocketAddr, tls: &ServerTls) -> io::Result<Self> {
        let listener = TcpListener::bind(listen)?;
        let addr = listener.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let config = Arc::clone(&tls.config);
        let accept = {
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || {
                for conn in listener.incoming() {
                    if stop.load(Ordering::SeqCst) {
                        break;
                    }
                    let Ok(conn) = conn else { continue };
                    let config = Arc::clone(&config);
                    // A failed connection concerns only its client: nothing to report.
                    std::thread::spawn(move || {
                        let _ = relay(conn, backend, config);
                    });
                }
            })
        };
        Ok(Self {
            addr,
            stop,
            accept: Some(accept),
        })
    }

    /// The address it listens on.
    pub(crate) fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops accepting connections (those open end on their own).
    pub(crate) fn stop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let mut wake = self.addr;
        if wake.ip().is_unspecified() {
            wake.set_ip(match wake {
                SocketAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
                SocketAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
            });
        }
        // Wakes the blocked accept; if the connect fails the listener is gone already.
        let _ = TcpStream::connect_timeout(&wake, Duration::from_secs(1));
        if let Some(t) = self.accept.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Terminator {
    fn drop(&mut self) {
        self.stop();
    }
}

fn lock(conn: &Mutex<ServerConnection>) -> MutexGuard<'_, ServerConnection> {
    conn.lock().unwrap_or_else(|e| e.into_inner())
}

/// One client connection: handshake, then relay both ways until either side ends.
fn relay(
    client: TcpStream,
    backend: SocketAddr,
    config: Arc<rustls::ServerConfig>,
) -> io::Result<()> {
    client.set_read_timeout(Some(HANDSHAKE_TIMEOUT))?;
    client.set_write_timeout(Some(IDLE_TIMEOUT))?;
    let mut conn = ServerConnection::new(config).map_err(io::Error::other)?;
    let mut sock = &client;
    while conn.is_handshaking() {
        if let Err(e) = conn.complete_io(&mut sock) {
            // Tell the client why (an alert), if rustls has one queued.
            let _ = conn.write_tls(&mut sock);
            return Err(e);
        }
    }
    client.set_read_timeout(Some(IDLE_TIMEOUT))?;
    let upstream = TcpStream::connect(backend)?;
    let conn = Arc::new(Mutex::new(conn));
    let answering = Arc::new(AtomicBool::new(false));
    let answers = {
        let conn = Arc::clone(&conn);
        let client = client.try_clone()?;
        let upstream = upstream.try_clone()?;
        let answering = Arc::clone(&answering);
        std::thread::spawn(move || relay_answers(&conn, &client, &upstream, &answering))
    };
    let requests = relay_requests(&conn, &client, &upstream, &answering);
    // A clean end lets the backend finish its answer; an error ends both directions.
    let how = if requests.is_ok() {
        Shutdown::Write
    } else {
        Shutdown::Both
    };
    let _ = upstream.shutdown(how);
    let _ = answers.join();
    requests
}

/// Client → backend: TLS records in, plaintext out, until the client closes. A read that
/// times out ends the connection unless answers went out meanwhile (`answering`): a long
/// download keeps the connection open, an idle one is closed.
fn relay_requests(
    conn: &Mutex<ServerConnection>,
    client: &TcpStream,
    upstream: &TcpStream,
    answering: &AtomicBool,
) -> io::Result<()> {
    let mut buf = vec![0u8; 16 * 1024];
    // The handshake may have read the first request's records already.
    let (mut plain, mut closed) = take_plaintext(&mut lock(conn), client)?;
    loop {
        if !plain.is_empty() {
            let mut up = upstream;
            up.write_all(&plain)?;
        }
        if closed {
            return Ok(());
        }
        let n = loop {
            let mut sock = client;
            match sock.read(&mut buf) {
                Ok(n) => break n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) && answering.swap(false, Ordering::SeqCst) =>
                {
                    continue;
                }
                Err(e) => return Err(e),
            }
        };
        if n == 0 {
            return Ok(());
        }
        let mut guard = lock(conn);
        let mut input = &buf[..n];
        plain = Vec::new();
        closed = false;
        while !input.is_empty() {
            guard.read_tls(&mut input)?;
            let (more, end) = take_plaintext(&mut guard, client)?;
            plain.extend(more);
            closed |= end;
        }
    }
}

/// Processes the records read so far: the plaintext they carry and whether the client sent
/// close_notify. Whatever rustls has to send back (an alert, a key update) is sent.
fn take_plaintext(conn: &mut ServerConnection, client: &TcpStream) -> io::Result<(Vec<u8>, bool)> {
    let mut sock = client;
    let state = match conn.process_new_packets() {
        Ok(s) => s,
        Err(e) => {
            let _ = conn.write_tls(&mut sock);
            return Err(io::Error::new(io::ErrorKind::InvalidData, e));
        }
    };
    let (want, closed) = (state.plaintext_bytes_to_read(), state.peer_has_closed());
    let mut plain = vec![0u8; want];
    conn.reader().read_exact(&mut plain)?;
    while conn.wants_write() {
        conn.write_tls(&mut sock)?;
    }
    Ok((plain, closed))
}

/// Backend → client: plaintext in, TLS records out, until the backend closes; then
/// close_notify and the connection ends.
fn relay_answers(
    conn: &Mutex<ServerConnection>,
    client: &TcpStream,
    upstream: &TcpStream,
    answering: &AtomicBool,
) {
    let mut buf = vec![0u8; 64 * 1024];
    let mut sock = client;
    loop {
        let mut up = upstream;
        let n = match up.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        answering.store(true, Ordering::SeqCst);
        let mut guard = lock(conn);
        if guard.writer().write_all(&buf[..n]).is_err() {
            break;
        }
        let mut failed = false;
        while guard.wants_write() {
            if guard.write_tls(&mut sock).is_err() {
                failed = true;
                break;
            }
        }
        if failed {
            break;
        }
    }
    let mut guard = lock(conn);
    guard.send_close_notify();
    while guard.wants_write() {
        if guard.write_tls(&mut sock).is_err() {
            break;
        }
    }
    drop(guard);
    let _ = client.shutdown(Shutdown::Both);
}
