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

async fn forward(
    client: Client<HttpConnector, Incoming>,
    backend: SocketAddr,
    mut req: Request<Incoming>,
) -> Result<Response<BoxBody<Bytes, BoxError>>, BoxError> {
    let pq = req
        .uri()
        .path_and_query()
        .map(|p| p.as_str().to_owned())
        .unwrap_or_else(|| "/".to_owned());
    *req.uri_mut() = format!("http://{backend}{pq}").parse()?;
    let resp = client.request(req).await?;
    Ok(resp.map(|b| b.map_err(BoxError::from).boxed()))
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
        let client: Client<HttpConnector, Incoming> =
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
