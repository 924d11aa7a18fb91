//! A fault-injecting HTTP proxy in front of an S3 endpoint.

use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::BodyExt;
use http_body_util::combinators::BoxBody;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::{Request, Response, StatusCode};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};

use crate::{FixtureError, io_err};

type BoxError = Box<dyn std::error::Error + Send + Sync>;
type ProxyBody = BoxBody<Bytes, BoxError>;

/// The S3 operation a request performs, told from its method, query and headers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum S3Op {
    /// `PUT /<bucket>`.
    CreateBucket,
    /// `PUT /<bucket>/<key>`.
    PutObject,
    /// `GET /<bucket>/<key>`.
    GetObject,
    /// `HEAD /<bucket>/<key>`.
    HeadObject,
    /// `DELETE /<bucket>/<key>`.
    DeleteObject,
    /// `POST /<bucket>?delete`.
    DeleteObjects,
    /// `GET /<bucket>?list-type=2`.
    ListObjectsV2,
    /// `POST /<bucket>/<key>?uploads`.
    CreateMultipartUpload,
    /// `PUT /<bucket>/<key>?partNumber&uploadId`.
    UploadPart,
    /// `POST /<bucket>/<key>?uploadId`.
    CompleteMultipartUpload,
    /// `DELETE /<bucket>/<key>?uploadId`.
    AbortMultipartUpload,
    /// `GET /<bucket>/<key>?uploadId`.
    ListParts,
    /// `GET /<bucket>?uploads`.
    ListMultipartUploads,
    /// `PUT` with `x-amz-copy-source`.
    CopyObject,
    /// `PUT ?partNumber&uploadId` with `x-amz-copy-source`.
    UploadPartCopy,
    /// Anything else (health checks, bucket-level GETs without a known query).
    Other,
}

impl fmt::Display for S3Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

impl S3Op {
    /// Classifies a request.
    pub fn of<B>(req: &Request<B>) -> S3Op {
        let path = req.uri().path().trim_start_matches('/');
        let has_key = path.split_once('/').is_some_and(|(_, k)| !k.is_empty());
        let query = req.uri().query().unwrap_or("");
        let has = |name: &str| {
            query
                .split('&')
                .any(|kv| kv.split('=').next() == Some(name))
        };
        let copy = req.headers().contains_key("x-amz-copy-source");
        match req.method().as_str() {
            "PUT" if !has_key => S3Op::CreateBucket,
            "PUT" if has("uploadId") && copy => S3Op::UploadPartCopy,
            "PUT" if has("uploadId") => S3Op::UploadPart,
            "PUT" if copy => S3Op::CopyObject,
            "PUT" => S3Op::PutObject,
            "POST" if has("uploads") => S3Op::CreateMultipartUpload,
            "POST" if has("uploadId") => S3Op::CompleteMultipartUpload,
            "POST" if has("delete") => S3Op::DeleteObjects,
            "DELETE" if has("uploadId") => S3Op::AbortMultipartUpload,
            "DELETE" if has_key => S3Op::DeleteObject,
            "GET" if has("uploadId") => S3Op::ListParts,
            "GET" if has("uploads") => S3Op::ListMultipartUploads,
            "GET" if has("list-type") => S3Op::ListObjectsV2,
            "GET" if has_key => S3Op::GetObject,
            "HEAD" if has_key => S3Op::HeadObject,
            _ => S3Op::Other,
        }
    }
}

/// What the proxy does to a request chosen by a [`Rule`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Fault {
    /// Answers with this status and an S3 error document; SeaweedFS never sees the request.
    Status(u16),
    /// Forwards the request, then replaces SeaweedFS's answer with this status, so the
    /// operation took effect but the client is told it failed.
    StatusAfter(u16),
    /// Waits this long, then forwards (for client timeouts).
    Delay(Duration),
    /// Closes the connection without an answer; SeaweedFS never sees the request.
    Drop,
    /// Forwards, then sends the answer's head and half of its body and closes the connection
    /// (a body-less answer is dropped after forwarding).
    Truncate,
}

/// Which requests a [`Fault`] hits: by operation, after skipping some, a limited number of
/// times, and with a probability (from a seeded generator, so runs repeat).
#[derive(Debug, Clone)]
pub struct Rule {
    op: Option<S3Op>,
    path: Option<String>,
    fault: Fault,
    skip: u64,
    times: Option<u64>,
    rate: f64,
    seen: u64,
    applied: u64,
}

impl Rule {
    /// A rule applying `fault` to every request.
    pub fn new(fault: Fault) -> Rule {
        Rule {
            op: None,
            path: None,
            fault,
            skip: 0,
            times: None,
            rate: 1.0,
            seen: 0,
            applied: 0,
        }
    }

    /// Only requests performing `op`.
    pub fn on(mut self, op: S3Op) -> Rule {
        self.op = Some(op);
        self
    }

    /// Only requests whose path (bucket and key, no query) contains `part`: aims a fault at one
    /// object, such as the final write of a blob, whatever else the client does around it.
    pub fn path_contains(mut self, part: impl Into<String>) -> Rule {
        self.path = Some(part.into());
        self
    }

    /// Lets the first `n` matching requests through.
    pub fn skip(mut self, n: u64) -> Rule {
        self.skip = n;
        self
    }

    /// Applies at most `n` times.
    pub fn times(mut self, n: u64) -> Rule {
        self.times = Some(n);
        self
    }

    /// Applies to each matching request with probability `rate` (0..=1).
    pub fn rate(mut self, rate: f64) -> Rule {
        self.rate = rate.clamp(0.0, 1.0);
        self
    }
}

#[derive(Debug)]
struct State {
    rules: Vec<Rule>,
    requests: BTreeMap<S3Op, u64>,
    faults: BTreeMap<S3Op, u64>,
    rng: u64,
}

impl State {
    fn next_f64(&mut self) -> f64 {
        // xorshift64*: reproducible and good enough to spread faults.
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        (self.rng.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) as f64 / (1u64 << 53) as f64
    }

    fn decide(&mut self, op: S3Op, path: &str) -> Option<Fault> {
        *self.requests.entry(op).or_default() += 1;
        for i in 0..self.rules.len() {
            let r = &mut self.rules[i];
            if r.op.is_some_and(|o| o != op)
                || r.path.as_deref().is_some_and(|p| !path.contains(p))
                || r.times.is_some_and(|t| r.applied >= t)
            {
                continue;
            }
            r.seen += 1;
            if r.seen <= r.skip {
                continue;
            }
            let rate = r.rate;
            if rate < 1.0 && self.next_f64() >= rate {
                continue;
            }
            let r = &mut self.rules[i];
            r.applied += 1;
            *self.faults.entry(op).or_default() += 1;
            return Some(r.fault);
        }
        None
    }
}

/// A proxy on a loopback port forwarding to an S3 endpoint, counting requests per [`S3Op`] and
/// injecting faults chosen by [`Rule`]s. It runs on the current tokio runtime and stops with it
/// or when dropped.
pub struct FaultProxy {
    addr: SocketAddr,
    state: Arc<Mutex<State>>,
    task: tokio::task::JoinHandle<()>,
}

impl fmt::Debug for FaultProxy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FaultProxy")
            .field("addr", &self.addr)
            .finish()
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn s3_error(status: u16) -> Response<ProxyBody> {
    let code = match status {
        503 => "SlowDown",
        500 => "InternalError",
        _ => "InjectedFault",
    };
    let body = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>{code}</Code>\
         <Message>injected by the fault proxy</Message></Error>"
    );
    Response::builder()
        .status(StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR))
        .header("content-type", "application/xml")
        .body(
            http_body_util::Full::new(Bytes::from(body))
                .map_err(|e| match e {})
                .boxed(),
        )
        .expect("a valid response")
}

/// A body that yields its first part and then fails, so the connection is cut mid-body while
/// the head still announces the full length.
struct Cut {
    first: Option<Bytes>,
    full: u64,
}

impl Body for Cut {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        match self.first.take() {
            Some(b) => Poll::Ready(Some(Ok(Frame::data(b)))),
            None => Poll::Ready(Some(Err("body truncated by the fault proxy".into()))),
        }
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.full)
    }
}

type Upstream = Client<HttpConnector, Incoming>;

async fn forward(
    client: &Upstream,
    upstream: SocketAddr,
    mut req: Request<Incoming>,
) -> Result<Response<Incoming>, BoxError> {
    let pq = req
        .uri()
        .path_and_query()
        .map(|p| p.as_str().to_owned())
        .unwrap_or_else(|| "/".to_owned());
    *req.uri_mut() = format!("http://{upstream}{pq}").parse()?;
    Ok(client.request(req).await?)
}

async fn handle(
    state: Arc<Mutex<State>>,
    client: Upstream,
    upstream: SocketAddr,
    req: Request<Incoming>,
) -> Result<Response<ProxyBody>, BoxError> {
    let op = S3Op::of(&req);
    let fault = state
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .decide(op, req.uri().path());
    match fault {
        Some(Fault::Status(code)) => {
            // Read the body first, as a server would, so the client is not cut off mid-send.
            let _ = req.into_body().collect().await;
            Ok(s3_error(code))
        }
        Some(Fault::Drop) => Err(format!("{op} dropped by the fault proxy").into()),
        Some(Fault::Delay(d)) => {
            tokio::time::sleep(d).await;
            let resp = forward(&client, upstream, req).await?;
            Ok(resp.map(|b| b.map_err(BoxError::from).boxed()))
        }
        Some(Fault::StatusAfter(code)) => {
            let resp = forward(&client, upstream, req).await?;
            let _ = resp.into_body().collect().await;
            Ok(s3_error(code))
        }
        Some(Fault::Truncate) => {
            let resp = forward(&client, upstream, req).await?;
            let (parts, body) = resp.into_parts();
            let body = body.collect().await?.to_bytes();
            if body.is_empty() {
                return Err(format!("{op} answer dropped by the fault proxy").into());
            }
            let half = body.slice(..body.len() / 2);
            let cut = Cut {
                first: Some(half),
                full: body.len() as u64,
            };
            Ok(Response::from_parts(parts, cut.boxed()))
        }
        None => {
            let resp = forward(&client, upstream, req).await?;
            Ok(resp.map(|b| b.map_err(BoxError::from).boxed()))
        }
    }
}

impl FaultProxy {
    /// Starts a proxy to `upstream` on a free loopback port. Needs a tokio runtime.
    pub async fn start(upstream: SocketAddr) -> Result<FaultProxy, FixtureError> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(io_err("binding the fault proxy"))?;
        let addr = listener
            .local_addr()
            .map_err(io_err("reading the fault proxy's address"))?;
        let state = Arc::new(Mutex::new(State {
            rules: Vec::new(),
            requests: BTreeMap::new(),
            faults: BTreeMap::new(),
            rng: 0x9E37_79B9_7F4A_7C15,
        }));
        let client: Upstream = Client::builder(TokioExecutor::new()).build_http();
        let st = state.clone();
        let task = tokio::spawn(async move {
            let mut conns = tokio::task::JoinSet::new();
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let st = st.clone();
                let client = client.clone();
                // A service error makes hyper close the connection without writing an answer,
                // which is exactly a dropped connection.
                let svc = hyper::service::service_fn(move |req| {
                    handle(st.clone(), client.clone(), upstream, req)
                });
                conns.spawn(async move {
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), svc)
                        .await;
                });
                // Reap finished connection tasks so the set stays small.
                while conns.try_join_next().is_some() {}
            }
        });
        Ok(FaultProxy { addr, state, task })
    }

    /// The proxy's endpoint, `http://127.0.0.1:<port>`.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Adds a rule. Rules are tried in the order added; the first that applies wins.
    pub fn inject(&self, rule: Rule) {
        self.lock().rules.push(rule);
    }

    /// Removes every rule.
    pub fn clear_faults(&self) {
        self.lock().rules.clear();
    }

    /// Requests seen per operation (faulted ones included) since the start or the last reset.
    pub fn requests(&self) -> BTreeMap<S3Op, u64> {
        self.lock().requests.clone()
    }

    /// Faults injected per operation since the start or the last reset.
    pub fn faults(&self) -> BTreeMap<S3Op, u64> {
        self.lock().faults.clone()
    }

    /// Total faults injected since the start or the last reset.
    pub fn fault_count(&self) -> u64 {
        self.lock().faults.values().sum()
    }

    /// Zeroes the request and fault counts.
    pub fn reset_counts(&self) {
        let mut s = self.lock();
        s.requests.clear();
        s.faults.clear();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}
