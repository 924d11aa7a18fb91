//! `registry_client` against the real registry over TCP, and against the same registry behind
//! middleware that denies, fails, truncates or corrupts: 401/403 are final, 5xx are retried,
//! cut bodies resume with Range, and corrupted content never verifies.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::Request;
use axum::http::{Method, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use registry::storage::FsStore;
use registry::{AppState, RegistryConfig, router};
use registry_client::{Client, ErrorKind, PushOutcome, Reference, Retry};
use tokio::io::AsyncReadExt;
use validator::{Digest, VerifyError};

struct Running {
    addr: String,
    _dir: tempfile::TempDir,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn start(wrap: impl FnOnce(Router) -> Router) -> Running {
    let dir = tempfile::tempdir().unwrap();
    let store = FsStore::open(dir.path()).unwrap();
    let app = wrap(router(AppState::new(
        Arc::new(store),
        RegistryConfig::default(),
    )));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let task = tokio::spawn(async move {
        axum::serve(listener, app).await.unwrap();
    });
    Running {
        addr,
        _dir: dir,
        task,
    }
}

fn client() -> Client {
    Client::builder()
        .chunk_size(64 << 10)
        .retry(Retry {
            attempts: 4,
            base_delay: Duration::from_millis(10),
            max_delay: Duration::from_millis(50),
        })
        .build()
        .unwrap()
}

fn data(n: usize, seed: u32) -> Vec<u8> {
    (0..n as u32)
        .map(|i| ((i * 13 + seed) % 251) as u8)
        .collect()
}

/// Pushes config + one layer + a manifest tagged `v1`; returns (reference, layer, layer digest).
async fn push_image(c: &Client, addr: &str, layer_len: usize) -> (Reference, Vec<u8>, Digest) {
    let r = Reference::parse(&format!("{addr}/client/test:v1")).unwrap();
    let cfg = br#"{"architecture":"amd64","os":"illumos"}"#.to_vec();
    let cfg_d = Digest::sha256(&cfg);
    let layer = data(layer_len, 7);
    let layer_d = Digest::sha256(&layer);
    let out = c
        .push_blob(addr, r.name(), &cfg_d, cfg.len() as u64, &cfg[..])
        .await
        .unwrap();
    assert_eq!(out, PushOutcome::Uploaded);
    let out = c
        .push_blob(addr, r.name(), &layer_d, layer.len() as u64, &layer[..])
        .await
        .unwrap();
    assert_eq!(out, PushOutcome::Uploaded);
    let manifest = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": cfg_d, "size": cfg.len()},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": layer_d, "size": layer.len()}],
    }))
    .unwrap();
    let d = c
        .push_manifest(
            &r,
            "application/vnd.oci.image.manifest.v1+json",
            Bytes::from(manifest.clone()),
        )
        .await
        .unwrap();
    assert_eq!(d, Digest::sha256(&manifest));
    (r, layer, layer_d)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn push_resolve_pull_round_trip() {
    let reg = start(|r| r).await;
    let c = client();
    // 300 KB: five 64 KiB chunks; the config goes in one PUT.
    let (r, layer, layer_d) = push_image(&c, &reg.addr, 300_000).await;
    let desc = c.resolve(&r).await.unwrap();
    assert_eq!(
        desc.media_type,
        "application/vnd.oci.image.manifest.v1+json"
    );
    let (d2, bytes) = c
        .get_manifest(&r.with_digest(desc.digest.clone()))
        .await
        .unwrap();
    assert_eq!(d2, desc);
    assert_eq!(bytes.len() as u64, desc.size);
    let mut reader = c
        .get_blob(&reg.addr, r.name(), &layer_d, layer.len() as u64)
        .await
        .unwrap();
    let mut back = Vec::new();
    reader.read_to_end(&mut back).await.unwrap();
    assert!(reader.is_verified());
    assert!(back == layer);
    // Already there: skipped without reading the source.
    let out = c
        .push_blob(
            &reg.addr,
            r.name(),
            &layer_d,
            layer.len() as u64,
            tokio::io::empty(),
        )
        .await
        .unwrap();
    assert_eq!(out, PushOutcome::Skipped);
    // A source that does not hash to the digest is refused (and the registry refuses it too).
    let wrong = Digest::sha256(b"something else");
    let err = c
        .push_blob(&reg.addr, r.name(), &wrong, 5, &b"hello"[..])
        .await
        .unwrap_err();
    assert!(
        matches!(err.kind(), ErrorKind::Invalid | ErrorKind::Verify),
        "{err}"
    );
    // Missing things are NotFound.
    let missing = Reference::parse(&format!("{}/client/test:nope", reg.addr)).unwrap();
    assert_eq!(
        c.resolve(&missing).await.unwrap_err().kind(),
        ErrorKind::NotFound
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unauthorized_is_final() {
    let hits = Arc::new(AtomicUsize::new(0));
    for status in [StatusCode::UNAUTHORIZED, StatusCode::FORBIDDEN] {
        hits.store(0, Ordering::SeqCst);
        let h = hits.clone();
        let reg = start(move |r| {
            r.layer(middleware::from_fn(move |_req: Request, _next: Next| {
                let h = h.clone();
                async move {
                    h.fetch_add(1, Ordering::SeqCst);
                    status.into_response()
                }
            }))
        })
        .await;
        let r = Reference::parse(&format!("{}/x/y:v1", reg.addr)).unwrap();
        let err = client().resolve(&r).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Unauthorized, "{err}");
        assert_eq!(
            hits.load(Ordering::SeqCst),
            1,
            "a denied request was retried"
        );
    }
}

/// Fails the first `n` requests with 503, then lets requests through.
fn flaky(n: usize, hits: Arc<AtomicUsize>) -> impl FnOnce(Router) -> Router {
    move |r: Router| {
        r.layer(middleware::from_fn(move |req: Request, next: Next| {
            let hits = hits.clone();
            async move {
                if hits.fetch_add(1, Ordering::SeqCst) < n {
                    return StatusCode::SERVICE_UNAVAILABLE.into_response();
                }
                next.run(req).await
            }
        }))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transient_failures_are_retried_then_reported() {
    let hits = Arc::new(AtomicUsize::new(0));
    let reg = start(flaky(3, hits.clone())).await;
    let c = client();
    // Three 503s, then it works: every request of the push still succeeds.
    let (r, _, _) = push_image(&c, &reg.addr, 1000).await;
    c.resolve(&r).await.unwrap();

    let always = Arc::new(AtomicUsize::new(0));
    let reg = start(flaky(usize::MAX, always.clone())).await;
    let r = Reference::parse(&format!("{}/x/y:v1", reg.addr)).unwrap();
    let err = c.resolve(&r).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Transient, "{err}");
    assert_eq!(always.load(Ordering::SeqCst), 4, "one request per attempt");
}

/// Cuts every full-blob GET in half (the connection dies mid-body); ranged GETs pass.
async fn truncate(req: Request, next: Next) -> Response {
    let is_full_blob_get = req.method() == Method::GET
        && req.uri().path().contains("/blobs/sha")
        && !req.headers().contains_key("range");
    let resp = next.run(req).await;
    if !is_full_blob_get || resp.status() != StatusCode::OK {
        return resp;
    }
    let (parts, body) = resp.into_parts();
    let bytes = axum::body::to_bytes(body, usize::MAX).await.unwrap();
    let half = bytes.slice(..bytes.len() / 2);
    // Headers and half the body go out; then the connection dies.
    use futures_util::StreamExt;
    let stream = futures_util::stream::iter([Ok::<Bytes, std::io::Error>(half)]).chain(
        futures_util::stream::once(async {
            tokio::time::sleep(Duration::from_millis(200)).await;
            Err(std::io::Error::other("connection cut"))
        }),
    );
    Response::from_parts(parts, Body::from_stream(stream))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_blob_body_resumes_with_range() {
    // Every full GET of a blob is cut in half, so only a resumed (ranged) read can complete.
    let reg = start(|r| r.layer(middleware::from_fn(truncate))).await;
    let c = client();
    let (r, layer, layer_d) = push_image(&c, &reg.addr, 200_000).await;
    let mut reader = c
        .get_blob(&reg.addr, r.name(), &layer_d, layer.len() as u64)
        .await
        .unwrap();
    let mut back = Vec::new();
    reader.read_to_end(&mut back).await.unwrap();
    assert!(reader.is_verified());
    assert!(back == layer);
}

/// Flips one byte of every blob body.
async fn corrupt(req: Request, next: Next) -> Response {
    let is_blob = req.uri().path().contains("/blobs/sha") && req.method() == Method::GET;
    let resp = next.run(req).await;
    if !is_blob {
        return resp;
    }
    let (parts, body) = resp.into_parts();
    let mut bytes = axum::body::to_bytes(body, usize::MAX)
        .await
        .unwrap()
        .to_vec();
    bytes[0] ^= 0xff;
    Response::from_parts(parts, Body::from(bytes))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn corrupted_content_never_verifies() {
    let reg = start(|r| r.layer(middleware::from_fn(corrupt))).await;
    let c = client();
    let (r, layer, layer_d) = push_image(&c, &reg.addr, 5000).await;
    let mut reader = c
        .get_blob(&reg.addr, r.name(), &layer_d, layer.len() as u64)
        .await
        .unwrap();
    let mut back = Vec::new();
    let err = reader.read_to_end(&mut back).await.unwrap_err();
    assert!(
        matches!(
            VerifyError::from_io(&err),
            Some(VerifyError::DigestMismatch { .. })
        ),
        "{err}"
    );
    assert!(!reader.is_verified());
}
