//! The accept loop: every connection, plain or TLS, served by hyper with the limits a server
//! facing unknown clients needs.
//!
//! Why not `axum::serve`: it builds hyper's connection builder without a timer, so hyper's
//! header-read timeout never fires, and it offers no way to set one. A client that sent part of
//! a request head, or that stopped reading a response, then held its connection (and the
//! response's memory) for as long as it liked. This loop is `axum::serve`'s, with:
//!
//! - [`ConnLimits::header_read`]: the whole request head must arrive within this time (hyper's
//!   HTTP/1 `header_read_timeout`, with a Tokio timer), or the connection is closed;
//! - [`ConnLimits::write_stall`]: a response write that makes no progress for this long (the
//!   client stopped reading) fails and closes the connection;
//! - request bodies that send nothing for [`ConnLimits::body_idle`] fail
//!   (`tower_http::timeout::RequestBodyTimeoutLayer` around the app), so an upload that
//!   stalls ends.
//!
//! Graceful shutdown is `axum::serve`'s: on the stop signal the listener is dropped, every
//! connection is told to finish its in-flight requests, and the returned future ends when the
//! last connection has closed (the caller bounds that wait).

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::extract::ConnectInfo;
use axum::serve::Listener;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::watch;
use tower::ServiceExt as _;
use tower_http::timeout::RequestBodyTimeoutLayer;

use crate::ratelimit::PeerAddr;

/// Per-connection limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnLimits {
    /// Time to receive a whole request head, from its first byte (HTTP/1).
    pub header_read: Duration,
    /// Time a response write may make no progress.
    pub write_stall: Duration,
    /// Time a request body may send nothing.
    pub body_idle: Duration,
    /// Whether blob bytes go out with `sendfile(2)` on plain TCP (see `storage::file_region`).
    pub sendfile: bool,
    /// Blob GETs shorter than this are written from a pre-faulted mapping even when
    /// [`ConnLimits::sendfile`] is on: for small bodies the copy is cheaper than `sendfile`'s
    /// per-call setup (measured in docs/benchmarks.md).
    pub sendfile_min_size: u64,
}

impl Default for ConnLimits {
    /// 30 s for a request head (hyper's own default, which needs a timer to apply), 60 s for a
    /// stalled write or body.
    fn default() -> Self {
        ConnLimits {
            header_read: Duration::from_secs(30),
            write_stall: Duration::from_secs(60),
            body_idle: Duration::from_secs(60),
            sendfile: true,
            sendfile_min_size: DEFAULT_SENDFILE_MIN_SIZE,
        }
    }
}

/// The default [`ConnLimits::sendfile_min_size`].
pub const DEFAULT_SENDFILE_MIN_SIZE: u64 = 4 << 20;

/// Serves `app` on every connection `listener` accepts until `stop` resolves, then waits for
/// the open connections to finish their requests.
pub(crate) async fn serve<L>(
    mut listener: L,
    app: Router,
    limits: ConnLimits,
    stop: impl Future<Output = ()> + Send,
) where
    L: Listener<Addr = SocketAddr>,
    L::Io: SendFile,
{
    // Dropped to tell every connection to shut down gracefully.
    let (signal_tx, signal_rx) = watch::channel(());
    // Each connection holds a receiver; `closed()` resolves when the last is gone.
    let (close_tx, close_rx) = watch::channel(());
    let app = app.layer(RequestBodyTimeoutLayer::new(limits.body_idle));
    tokio::pin!(stop);
    loop {
        let (io, peer) = tokio::select! {
            conn = listener.accept() => conn,
            () = &mut stop => break,
        };
        let service = app
            .clone()
            .map_request(move |req: hyper::Request<Incoming>| {
                let mut req = req.map(axum::body::Body::new);
                req.extensions_mut().insert(ConnectInfo(PeerAddr(peer)));
                req
            });
        let service = TowerToHyperService::new(service);
        let mut signal = signal_rx.clone();
        let close = close_rx.clone();
        tokio::spawn(async move {
            let mut builder = Builder::new(TokioExecutor::new());
            builder
                .http1()
                .timer(TokioTimer::new())
                .header_read_timeout(limits.header_read);
            builder.http2().timer(TokioTimer::new());
            let mut guard = StallGuard::new(io, limits.write_stall);
            guard.sendfile = limits.sendfile;
            let io = TokioIo::new(guard);
            let conn = builder.serve_connection_with_upgrades(io, service);
            tokio::pin!(conn);
            let mut shutting_down = false;
            loop {
                tokio::select! {
                    r = conn.as_mut() => {
                        if let Err(e) = r {
                            tracing::debug!(%peer, error = %e, "connection ended with an error");
                        }
                        break;
                    }
                    _ = signal.changed(), if !shutting_down => {
                        shutting_down = true;
                        conn.as_mut().graceful_shutdown();
                    }
                }
            }
            drop(close);
        });
    }
    drop(listener);
    drop(signal_rx);
    drop(signal_tx);
    drop(close_rx);
    close_tx.closed().await;
}

/// An IO whose writes fail with `TimedOut` after making no progress for `limit`: a client
/// that stops reading would otherwise keep its connection, and the response it is not
/// reading, forever.
struct StallGuard<T> {
    inner: T,
    limit: Duration,
    /// The clock, made on the first stall and reset on later ones (a fast pull fills the
    /// socket buffer many times a second).
    clock: Option<Pin<Box<tokio::time::Sleep>>>,
    /// Whether the clock runs: a write is pending.
    stalled: bool,
    /// Whether slices of mapped blob files go out with `sendfile` (when the IO can).
    sendfile: bool,
}

impl<T> StallGuard<T> {
    fn new(inner: T, limit: Duration) -> StallGuard<T> {
        StallGuard {
            inner,
            limit,
            clock: None,
            stalled: false,
            sendfile: false,
        }
    }

    /// After the inner IO said `Pending`: starts the clock if it is not running, and fails
    /// once it has run out.
    fn pending<R>(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<R>> {
        let limit = self.limit;
        let deadline = tokio::time::Instant::now() + limit;
        let clock = self
            .clock
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
        if !self.stalled {
            clock.as_mut().reset(deadline);
            self.stalled = true;
        }
        match clock.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("the client read nothing for {limit:?}"),
            ))),
            Poll::Pending => Poll::Pending,
        }
    }

    fn progress<R>(&mut self, r: Poll<io::Result<R>>, cx: &mut Context<'_>) -> Poll<io::Result<R>> {
        match r {
            Poll::Pending => self.pending(cx),
            ready => {
                self.stalled = false;
                ready
            }
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for StallGuard<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

/// A connection's socket as `sendfile(2)` sees it (see `storage::file_region`): a plain TCP
/// socket takes bytes from a file; a TLS stream does not (its bytes are encrypted on the way),
/// and is written as before.
pub trait SendFile {
    /// Whether [`SendFile::poll_send_file`] can send (otherwise no slice is looked up).
    const SENDS_FILES: bool = false;

    /// Sends up to `len` bytes of `file` from `offset` (only called when
    /// [`SendFile::SENDS_FILES`]).
    fn poll_send_file(
        &self,
        _cx: &mut Context<'_>,
        _file: &std::fs::File,
        _offset: u64,
        _len: usize,
    ) -> Poll<io::Result<usize>> {
        Poll::Ready(Err(io::Error::other(
            "this stream does not send from files",
        )))
    }
}

/// `sendfile(2)` as Linux has it (rustix offers it on Linux only). Elsewhere, illumos among
/// them, a plain TCP socket is written from the mapping like a TLS stream.
#[cfg(not(target_os = "linux"))]
impl SendFile for tokio::net::TcpStream {}

#[cfg(target_os = "linux")]
impl SendFile for tokio::net::TcpStream {
    const SENDS_FILES: bool = true;

    fn poll_send_file(
        &self,
        cx: &mut Context<'_>,
        file: &std::fs::File,
        offset: u64,
        len: usize,
    ) -> Poll<io::Result<usize>> {
        loop {
            std::task::ready!(self.poll_write_ready(cx))?;
            let mut at = offset;
            let sent = self.try_io(tokio::io::Interest::WRITABLE, || {
                rustix::fs::sendfile(self, file, Some(&mut at), len).map_err(io::Error::from)
            });
            return Poll::Ready(match sent {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                // Committed blobs never shrink: a file that ends early is not served short.
                Ok(0) => Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the blob's file ended before the bytes the response promised",
                )),
                r => r,
            });
        }
    }
}

impl<T> SendFile for tokio_rustls::server::TlsStream<T> {}

/// Bytes asked of one `sendfile` call at most. A call holds the socket's lock while it fills
/// the send buffer, and the acknowledgements that would make room wait behind it: with a whole
/// 32 MiB window per call a single pull ran at 1,260 MiB/s, with 2 MiB at 1,600–1,800.
const SENDFILE_CALL: usize = 1 << 20;

impl<T: AsyncWrite + Unpin + SendFile> StallGuard<T> {
    /// Writes `bufs` with `sendfile` when their first slice shows a blob file's bytes (the
    /// same bytes, taken from the page cache instead of copied from the mapping), or the
    /// plain slices before the first one that does; `None` when no slice does.
    fn poll_from_file(
        &mut self,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Option<Poll<io::Result<usize>>> {
        if !self.sendfile || !T::SENDS_FILES {
            return None;
        }
        let first = bufs.iter().position(|b| !b.is_empty())?;
        let (at, (file, offset)) = bufs[first..]
            .iter()
            .enumerate()
            .find_map(|(i, b)| crate::storage::file_region::lookup(b).map(|f| (first + i, f)))?;
        if at > first {
            return Some(Pin::new(&mut self.inner).poll_write_vectored(cx, &bufs[..at]));
        }
        let len = bufs[at].len().min(SENDFILE_CALL);
        let r = self.inner.poll_send_file(cx, &file, offset, len);
        if let Poll::Ready(Ok(n)) = r {
            crate::storage::file_region::sent(n);
        }
        Some(r)
    }
}

impl<T: AsyncWrite + Unpin + SendFile> AsyncWrite for StallGuard<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let r = match self.poll_from_file(cx, &[io::IoSlice::new(buf)]) {
            Some(r) => r,
            None => Pin::new(&mut self.inner).poll_write(cx, buf),
        };
        self.progress(r, cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let r = match self.poll_from_file(cx, bufs) {
            Some(r) => r,
            None => Pin::new(&mut self.inner).poll_write_vectored(cx, bufs),
        };
        self.progress(r, cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let r = Pin::new(&mut self.inner).poll_flush(cx);
        self.progress(r, cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let r = Pin::new(&mut self.inner).poll_shutdown(cx);
        self.progress(r, cx)
    }
}
