//! A fault-injecting HTTP proxy in front of an S3 endpoint.
//!
//! Besides answering for SeaweedFS ([`Fault::Status`], [`Fault::Drop`], ...), it can deliver a
//! request *late*, the way a slow or retrying gateway does: [`Fault::Delay`], [`Fault::Hold`],
//! [`Fault::FailAfter`] and the second copy of [`Fault::Duplicate`] reach SeaweedFS on a task of
//! their own, so they arrive even when the client gave up on them meanwhile (its timeout fired,
//! it closed the connection, it retried). [`FaultProxy::delivered`] counts those deliveries, so
//! a test can wait until the late request has done its damage before it looks.

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

use tokio::sync::watch;

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
    /// Forwards the request only after this long, as a slow gateway does: it is delivered even
    /// when the client stopped waiting meanwhile (its timeout fired, it retried, it closed the
    /// connection); a client still waiting gets SeaweedFS's answer.
    Delay(Duration),
    /// Waits this long, then forwards, unless the client gave up meanwhile (then SeaweedFS never
    /// sees the request): for client timeouts alone.
    Stall(Duration),
    /// Holds the request until the test calls [`FaultProxy::release`], then forwards it
    /// (delivered even when the client gave up meanwhile).
    Hold,
    /// Answers this status after the delay and, at the same time, forwards the request: a
    /// gateway that timed out on the client but passed the request on. A retrying client sends
    /// it again on top.
    FailAfter(u16, Duration),
    /// Forwards the request now and the same request again after the delay (a duplicate from a
    /// gateway or a network that retried on its own); the client gets the first answer.
    Duplicate(Duration),
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
    late: Arc<Late>,
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
        for t in self
            .late
            .tasks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain(..)
        {
            t.abort();
        }
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

type Upstream = Client<HttpConnector, ProxyBody>;

fn full(bytes: Bytes) -> ProxyBody {
    http_body_util::Full::new(bytes)
        .map_err(|e| match e {})
        .boxed()
}

async fn forward<B>(
    client: &Upstream,
    upstream: SocketAddr,
    req: Request<B>,
) -> Result<Response<Incoming>, BoxError>
where
    B: Body<Data = Bytes> + Send + Sync + 'static,
    B::Error: Into<BoxError>,
{
    let mut req = req.map(|b| b.map_err(Into::into).boxed());
    let pq = req
        .uri()
        .path_and_query()
        .map(|p| p.as_str().to_owned())
        .unwrap_or_else(|| "/".to_owned());
    *req.uri_mut() = format!("http://{upstream}{pq}").parse()?;
    Ok(client.request(req).await?)
}

/// A request read whole, so it can be sent after its client's connection is gone, and twice.
struct Buffered {
    method: hyper::Method,
    uri: hyper::Uri,
    headers: hyper::HeaderMap,
    body: Bytes,
}

impl Buffered {
    async fn read(req: Request<Incoming>) -> Result<Buffered, BoxError> {
        let (parts, body) = req.into_parts();
        Ok(Buffered {
            method: parts.method,
            uri: parts.uri,
            headers: parts.headers,
            body: body.collect().await?.to_bytes(),
        })
    }

    fn request(&self) -> Request<ProxyBody> {
        let mut req = Request::new(full(self.body.clone()));
        *req.method_mut() = self.method.clone();
        *req.uri_mut() = self.uri.clone();
        *req.headers_mut() = self.headers.clone();
        req
    }
}

/// SeaweedFS's answer to a late request, read whole.
type LateAnswer = Result<(hyper::http::response::Parts, Bytes), String>;

/// Requests delivered late: the release generation [`Fault::Hold`] waits for, the counts, and
/// the delivery tasks (aborted with the proxy).
#[derive(Debug)]
struct Late {
    released: watch::Sender<u64>,
    scheduled: watch::Sender<u64>,
    delivered: watch::Sender<u64>,
    tasks: Mutex<Vec<tokio::task::AbortHandle>>,
}

impl Late {
    fn new() -> Late {
        Late {
            released: watch::Sender::new(0),
            scheduled: watch::Sender::new(0),
            delivered: watch::Sender::new(0),
            tasks: Mutex::new(Vec::new()),
        }
    }

    /// Sends `req` once `when` is done, on a task of its own (so a client that gave up does
    /// not cancel it), and hands back SeaweedFS's answer if anyone still wants it.
    fn deliver(
        self: &Arc<Self>,
        client: Upstream,
        upstream: SocketAddr,
        req: Request<ProxyBody>,
        when: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> tokio::sync::oneshot::Receiver<LateAnswer> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.scheduled.send_modify(|n| *n += 1);
        let late = self.clone();
        let task = tokio::spawn(async move {
            when.await;
            let answer = match forward(&client, upstream, req).await {
                Ok(resp) => {
                    let (parts, body) = resp.into_parts();
                    body.collect()
                        .await
                        .map(|b| (parts, b.to_bytes()))
                        .map_err(|e| e.to_string())
                }
                Err(e) => Err(e.to_string()),
            };
            // Counted once SeaweedFS answered: whatever the request does has been done.
            late.delivered.send_modify(|n| *n += 1);
            let _ = tx.send(answer);
        });
        let mut tasks = self.tasks.lock().unwrap_or_else(|e| e.into_inner());
        tasks.retain(|t| !t.is_finished());
        tasks.push(task.abort_handle());
        rx
    }
}

/// The answer to the client of a late request: SeaweedFS's, or a failed connection.
async fn late_answer(
    rx: tokio::sync::oneshot::Receiver<LateAnswer>,
) -> Result<Response<ProxyBody>, BoxError> {
    let (parts, body) = rx.await.map_err(|_| "the late delivery was aborted")??;
    Ok(Response::from_parts(parts, full(body)))
}

async fn handle(
    state: Arc<Mutex<State>>,
    late: Arc<Late>,
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
        Some(Fault::Stall(d)) => {
            tokio::time::sleep(d).await;
            let resp = forward(&client, upstream, req).await?;
            Ok(resp.map(|b| b.map_err(BoxError::from).boxed()))
        }
        Some(Fault::Delay(d)) => {
            let req = Buffered::read(req).await?.request();
            late_answer(late.deliver(client, upstream, req, tokio::time::sleep(d))).await
        }
        Some(Fault::Hold) => {
            let req = Buffered::read(req).await?.request();
            // Held until a release after this request arrived.
            let mut released = late.released.subscribe();
            let arrived = *released.borrow_and_update();
            let when = async move {
                let _ = released.wait_for(|g| *g > arrived).await;
            };
            late_answer(late.deliver(client, upstream, req, when)).await
        }
        Some(Fault::FailAfter(code, d)) => {
            let req = Buffered::read(req).await?.request();
            // Not waited for: the client's answer is the error, the store's goes nowhere.
            drop(late.deliver(client, upstream, req, tokio::time::sleep(d)));
            tokio::time::sleep(d).await;
            Ok(s3_error(code))
        }
        Some(Fault::Duplicate(d)) => {
            let buffered = Buffered::read(req).await?;
            drop(late.deliver(
                client.clone(),
                upstream,
                buffered.request(),
                tokio::time::sleep(d),
            ));
            let resp = forward(&client, upstream, buffered.request()).await?;
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
        let late = Arc::new(Late::new());
        let st = state.clone();
        let lt = late.clone();
        let task = tokio::spawn(async move {
            let mut conns = tokio::task::JoinSet::new();
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let (st, lt) = (st.clone(), lt.clone());
                let client = client.clone();
                // A service error makes hyper close the connection without writing an answer,
                // which is exactly a dropped connection.
                let svc = hyper::service::service_fn(move |req| {
                    handle(st.clone(), lt.clone(), client.clone(), upstream, req)
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
        Ok(FaultProxy {
            addr,
            state,
            late,
            task,
        })
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

    /// Forwards every request [`Fault::Hold`] holds now; later ones wait for the next call.
    pub fn release(&self) {
        self.late.released.send_modify(|g| *g += 1);
    }

    /// Late deliveries ([`Fault::Delay`], [`Fault::Hold`], [`Fault::FailAfter`], the second
    /// copy of [`Fault::Duplicate`]) taken on so far, delivered or not.
    pub fn scheduled(&self) -> u64 {
        *self.late.scheduled.borrow()
    }

    /// Late deliveries SeaweedFS has answered (or that failed to reach it): what they do to
    /// the store is done.
    pub fn delivered(&self) -> u64 {
        *self.late.delivered.borrow()
    }

    /// Waits until `n` late requests were taken on (the request a fault aims at is in flight).
    pub async fn until_scheduled(&self, n: u64) {
        let _ = self.late.scheduled.subscribe().wait_for(|s| *s >= n).await;
    }

    /// Waits until `n` late requests were delivered.
    pub async fn until_delivered(&self, n: u64) {
        let _ = self.late.delivered.subscribe().wait_for(|d| *d >= n).await;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    //! The late faults against a tiny loopback HTTP server that records when each request
    //! reached it: the point of these faults is *when* the store sees a request, whatever the
    //! client did meanwhile.

    use std::time::Instant;

    use http_body_util::Full;

    use super::*;

    /// Requests the upstream saw: method, path, and when.
    type Seen = Arc<Mutex<Vec<(String, String, Instant)>>>;

    /// A loopback HTTP server answering 204 to everything and recording each request.
    async fn upstream() -> (SocketAddr, Seen) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let seen: Seen = Arc::default();
        let log = seen.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let log = log.clone();
                let svc = hyper::service::service_fn(move |req: Request<Incoming>| {
                    let log = log.clone();
                    async move {
                        log.lock().unwrap().push((
                            req.method().to_string(),
                            req.uri().path().to_owned(),
                            Instant::now(),
                        ));
                        Response::builder()
                            .status(204)
                            .body(Full::new(Bytes::new()))
                    }
                });
                tokio::spawn(async move {
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), svc)
                        .await;
                });
            }
        });
        (addr, seen)
    }

    /// One request on a fresh connection, given up after `patience` (`None`: timed out).
    async fn send(proxy: &FaultProxy, method: &str, path: &str, patience: Duration) -> Option<u16> {
        let client = Client::builder(TokioExecutor::new())
            .pool_max_idle_per_host(0)
            .build_http::<Full<Bytes>>();
        let req = Request::builder()
            .method(method)
            .uri(format!("{}{path}", proxy.endpoint()))
            .body(Full::new(Bytes::new()))
            .unwrap();
        let resp = tokio::time::timeout(patience, client.request(req))
            .await
            .ok()?
            .unwrap();
        Some(resp.status().as_u16())
    }

    fn arrivals(seen: &Seen, path: &str) -> Vec<Instant> {
        seen.lock()
            .unwrap()
            .iter()
            .filter(|(_, p, _)| p == path)
            .map(|(_, _, t)| *t)
            .collect()
    }

    async fn setup() -> (FaultProxy, Seen) {
        let (addr, seen) = upstream().await;
        (FaultProxy::start(addr).await.unwrap(), seen)
    }

    fn delete_of(part: &str, fault: Fault) -> Rule {
        Rule::new(fault)
            .on(S3Op::DeleteObject)
            .path_contains(part)
            .times(1)
    }

    #[tokio::test]
    async fn delay_delivers_after_the_client_gave_up() {
        let (proxy, seen) = setup().await;
        proxy.inject(delete_of("abc", Fault::Delay(Duration::from_millis(800))));
        let sent = Instant::now();
        // The client times out long before the store sees the request...
        assert_eq!(
            send(&proxy, "DELETE", "/b/k-abc", Duration::from_millis(100)).await,
            None
        );
        assert_eq!(proxy.scheduled(), 1);
        assert!(arrivals(&seen, "/b/k-abc").is_empty());
        // ...and the store sees it anyway, once, after the delay.
        tokio::time::timeout(Duration::from_secs(5), proxy.until_delivered(1))
            .await
            .unwrap();
        let at = arrivals(&seen, "/b/k-abc");
        assert_eq!(at.len(), 1);
        assert!(at[0] - sent >= Duration::from_millis(800));
        // Other requests pass at once; a client that waits gets the store's answer.
        assert_eq!(
            send(&proxy, "DELETE", "/b/k-abc", Duration::from_secs(5)).await,
            Some(204)
        );
        proxy.inject(delete_of("xyz", Fault::Delay(Duration::from_millis(300))));
        let t = Instant::now();
        assert_eq!(
            send(&proxy, "DELETE", "/b/k-xyz", Duration::from_secs(5)).await,
            Some(204)
        );
        assert!(t.elapsed() >= Duration::from_millis(300));
        assert_eq!(proxy.delivered(), 2);
    }

    #[tokio::test]
    async fn stall_is_lost_with_its_client() {
        let (proxy, seen) = setup().await;
        proxy.inject(delete_of("abc", Fault::Stall(Duration::from_millis(300))));
        assert_eq!(
            send(&proxy, "DELETE", "/b/k-abc", Duration::from_millis(50)).await,
            None
        );
        tokio::time::sleep(Duration::from_millis(600)).await;
        assert!(arrivals(&seen, "/b/k-abc").is_empty());
        assert_eq!(proxy.scheduled(), 0);
    }

    #[tokio::test]
    async fn hold_waits_for_release() {
        let (proxy, seen) = setup().await;
        proxy.inject(delete_of("abc", Fault::Hold));
        let waiting = tokio::spawn({
            let url = proxy.endpoint();
            async move {
                let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
                let req = Request::delete(format!("{url}/b/k-abc"))
                    .body(Full::new(Bytes::new()))
                    .unwrap();
                client.request(req).await.unwrap().status().as_u16()
            }
        });
        tokio::time::timeout(Duration::from_secs(5), proxy.until_scheduled(1))
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert!(
            arrivals(&seen, "/b/k-abc").is_empty(),
            "delivered before release"
        );
        assert!(!waiting.is_finished());
        let released = Instant::now();
        proxy.release();
        assert_eq!(waiting.await.unwrap(), 204);
        let at = arrivals(&seen, "/b/k-abc");
        assert_eq!(at.len(), 1);
        assert!(at[0] >= released);
        assert_eq!(proxy.delivered(), 1);
        // A held request whose client gave up is still delivered on release.
        proxy.inject(delete_of("def", Fault::Hold));
        assert_eq!(
            send(&proxy, "DELETE", "/b/k-def", Duration::from_millis(100)).await,
            None
        );
        proxy.release();
        tokio::time::timeout(Duration::from_secs(5), proxy.until_delivered(2))
            .await
            .unwrap();
        assert_eq!(arrivals(&seen, "/b/k-def").len(), 1);
    }

    #[tokio::test]
    async fn fail_after_answers_an_error_and_delivers_anyway() {
        let (proxy, seen) = setup().await;
        proxy.inject(delete_of(
            "abc",
            Fault::FailAfter(503, Duration::from_millis(500)),
        ));
        let t = Instant::now();
        assert_eq!(
            send(&proxy, "DELETE", "/b/k-abc", Duration::from_secs(5)).await,
            Some(503)
        );
        assert!(t.elapsed() >= Duration::from_millis(500));
        tokio::time::timeout(Duration::from_secs(5), proxy.until_delivered(1))
            .await
            .unwrap();
        let at = arrivals(&seen, "/b/k-abc");
        assert_eq!(at.len(), 1, "the failed request must still reach the store");
        assert!(at[0] - t >= Duration::from_millis(500));
        // The client's retry is not faulted (times(1)) and arrives as a second request.
        assert_eq!(
            send(&proxy, "DELETE", "/b/k-abc", Duration::from_secs(5)).await,
            Some(204)
        );
        assert_eq!(arrivals(&seen, "/b/k-abc").len(), 2);
    }

    #[tokio::test]
    async fn duplicate_delivers_twice() {
        let (proxy, seen) = setup().await;
        proxy.inject(delete_of(
            "abc",
            Fault::Duplicate(Duration::from_millis(600)),
        ));
        let t = Instant::now();
        assert_eq!(
            send(&proxy, "DELETE", "/b/k-abc", Duration::from_secs(5)).await,
            Some(204)
        );
        assert_eq!(arrivals(&seen, "/b/k-abc").len(), 1);
        assert!(t.elapsed() < Duration::from_millis(600));
        tokio::time::timeout(Duration::from_secs(5), proxy.until_delivered(1))
            .await
            .unwrap();
        let at = arrivals(&seen, "/b/k-abc");
        assert_eq!(at.len(), 2);
        assert!(at[1] - t >= Duration::from_millis(600));
        // Only the matching request: another key and another operation pass untouched.
        assert_eq!(
            send(&proxy, "GET", "/b/k-abc", Duration::from_secs(5)).await,
            Some(204)
        );
        assert_eq!(proxy.scheduled(), 1);
    }
}
