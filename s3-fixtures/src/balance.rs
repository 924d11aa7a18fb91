//! A round-robin HTTP load balancer: each request (not each connection) goes to the next
//! backend, so consecutive requests of one client, on one kept-alive connection, land on
//! different registry replicas.

use std::fmt;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use http_body_util::BodyExt;
use http_body_util::combinators::BoxBody;
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};

use crate::{FixtureError, io_err};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A loopback HTTP/1.1 proxy sending request `n` to backend `n % backends.len()`. Bodies are
/// streamed both ways; `Host` is kept, so `Location` headers name the balancer. It runs on the
/// current tokio runtime and stops when dropped.
pub struct RoundRobin {
    addr: SocketAddr,
    counts: Arc<Vec<AtomicU64>>,
    task: tokio::task::JoinHandle<()>,
}

impl fmt::Debug for RoundRobin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RoundRobin")
            .field("addr", &self.addr)
            .finish()
    }
}

impl Drop for RoundRobin {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The body the balancer sends upstream: the client's, or an empty one when it asks again.
type UpBody = BoxBody<Bytes, hyper::Error>;

async fn forward(
    client: Client<HttpConnector, UpBody>,
    backend: SocketAddr,
    req: Request<Incoming>,
) -> Result<Response<BoxBody<Bytes, BoxError>>, BoxError> {
    let pq = req
        .uri()
        .path_and_query()
        .map(|p| p.as_str().to_owned())
        .unwrap_or_else(|| "/".to_owned());
    let (mut parts, body) = req.into_parts();
    parts.uri = format!("http://{backend}{pq}").parse()?;
    // A request without a body can be sent again when the kept-alive connection the pool gave
    // it turns out closed by the backend (an idle timeout, or a close after an error answer,
    // racing the reuse), as nginx's `proxy_next_upstream error` does: the client would
    // otherwise see its connection cut for no fault of the registry it talks to.
    let again = hyper::body::Body::size_hint(&body).exact() == Some(0)
        && matches!(
            parts.method,
            hyper::Method::GET | hyper::Method::HEAD | hyper::Method::DELETE
        );
    let first = Request::from_parts(parts.clone(), body.boxed());
    let resp = match client.request(first).await {
        Err(e) if again && closed_under_it(&e) => {
            let empty = http_body_util::Empty::<Bytes>::new()
                .map_err(|never| match never {})
                .boxed();
            client.request(Request::from_parts(parts, empty)).await?
        }
        r => r?,
    };
    Ok(resp.map(|b| b.map_err(BoxError::from).boxed()))
}

/// Whether a request failed because its pooled connection was closed before any answer.
fn closed_under_it(e: &hyper_util::client::legacy::Error) -> bool {
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        if let Some(h) = s.downcast_ref::<hyper::Error>() {
            return h.is_incomplete_message() || h.is_canceled() || h.is_closed();
        }
        if let Some(io) = s.downcast_ref::<std::io::Error>() {
            return matches!(
                io.kind(),
                std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::BrokenPipe
            );
        }
        source = s.source();
    }
    false
}

impl RoundRobin {
    /// Starts a balancer over `backends` (at least one) on a free loopback port. Needs a tokio
    /// runtime.
    pub async fn start(backends: Vec<SocketAddr>) -> Result<RoundRobin, FixtureError> {
        assert!(!backends.is_empty(), "a balancer needs a backend");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(io_err("binding the balancer"))?;
        let addr = listener
            .local_addr()
            .map_err(io_err("reading the balancer's address"))?;
        let counts: Arc<Vec<AtomicU64>> =
            Arc::new(backends.iter().map(|_| AtomicU64::new(0)).collect());
        let next = Arc::new(AtomicU64::new(0));
        let backends = Arc::new(backends);
        let client: Client<HttpConnector, UpBody> =
            Client::builder(TokioExecutor::new()).build_http();
        let c = counts.clone();
        let task = tokio::spawn(async move {
            let mut conns = tokio::task::JoinSet::new();
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let (client, next, backends, counts) =
                    (client.clone(), next.clone(), backends.clone(), c.clone());
                let svc = hyper::service::service_fn(move |req| {
                    let i = (next.fetch_add(1, Ordering::Relaxed) % backends.len() as u64) as usize;
                    counts[i].fetch_add(1, Ordering::Relaxed);
                    forward(client.clone(), backends[i], req)
                });
                conns.spawn(async move {
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), svc)
                        .await;
                });
                while conns.try_join_next().is_some() {}
            }
        });
        Ok(RoundRobin { addr, counts, task })
    }

    /// The balancer's address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Requests sent to each backend so far, in the order the backends were given.
    pub fn requests(&self) -> Vec<u64> {
        self.counts
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpListener, TcpStream};

    use super::*;

    /// Reads one HTTP/1.1 message head (and a `Content-Length` body) from `s`; empty at EOF.
    async fn message(s: &mut TcpStream) -> String {
        let mut buf = Vec::new();
        let mut byte = [0u8; 1];
        while !buf.ends_with(b"\r\n\r\n") {
            if s.read(&mut byte).await.unwrap() == 0 {
                return String::from_utf8_lossy(&buf).into_owned();
            }
            buf.push(byte[0]);
        }
        let head = String::from_utf8_lossy(&buf).into_owned();
        let len = head
            .lines()
            .find_map(|l| {
                l.to_ascii_lowercase()
                    .strip_prefix("content-length:")
                    .map(|v| v.trim().parse::<usize>().unwrap())
            })
            .unwrap_or(0);
        let mut body = vec![0u8; len];
        s.read_exact(&mut body).await.unwrap();
        head + &String::from_utf8_lossy(&body)
    }

    #[tokio::test]
    async fn a_bodiless_request_whose_kept_alive_backend_connection_closes_under_it_is_sent_again()
    {
        let backend = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = backend.local_addr().unwrap();
        // The backend answers the first request on its first connection, keeps it open as if
        // kept alive, reads the next request and closes without an answer (an idle close racing
        // the pool's reuse); on a new connection it answers.
        let server = tokio::spawn(async move {
            let (mut first, _) = backend.accept().await.unwrap();
            assert!(message(&mut first).await.starts_with("GET /a "));
            first
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
                .await
                .unwrap();
            assert!(message(&mut first).await.starts_with("DELETE /b "));
            drop(first);
            let (mut second, _) = backend.accept().await.unwrap();
            assert!(message(&mut second).await.starts_with("DELETE /b "));
            second
                .write_all(b"HTTP/1.1 202 Accepted\r\ncontent-length: 0\r\n\r\n")
                .await
                .unwrap();
        });
        let lb = RoundRobin::start(vec![addr]).await.unwrap();
        let mut client = TcpStream::connect(lb.addr()).await.unwrap();
        client
            .write_all(b"GET /a HTTP/1.1\r\nhost: lb\r\n\r\n")
            .await
            .unwrap();
        assert!(message(&mut client).await.starts_with("HTTP/1.1 200"));
        client
            .write_all(b"DELETE /b HTTP/1.1\r\nhost: lb\r\n\r\n")
            .await
            .unwrap();
        let answer = message(&mut client).await;
        assert!(answer.starts_with("HTTP/1.1 202"), "{answer:?}");
        server.await.unwrap();
        assert_eq!(lb.requests(), [2]);
    }
}
