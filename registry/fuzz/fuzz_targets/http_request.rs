//! Any bytes as an HTTP request to the registry's router, on a filesystem store that lives for
//! the whole run (so uploads, blobs, manifests and tags pushed by earlier inputs are there for
//! later ones): a response, never a panic, and never `500 INTERNAL` for client input alone.
//!
//! The input is a request written out as on the wire: the first line `METHOD TARGET` (path and
//! query string), then `name: value` header lines up to an empty line, then the body. The seeds
//! (`seeds/http_request`) are requests of every route with bodies from the test corpora.
#![no_main]

use std::sync::OnceLock;

use axum::body::Body;
use axum::http::{HeaderName, HeaderValue, Method, Request, StatusCode};
use http_body_util::BodyExt as _;
use libfuzzer_sys::fuzz_target;
use tower::ServiceExt as _;

struct Registry {
    _dir: tempfile::TempDir,
    app: axum::Router,
    rt: tokio::runtime::Runtime,
}

fn registry() -> &'static Registry {
    static REGISTRY: OnceLock<Registry> = OnceLock::new();
    REGISTRY.get_or_init(|| {
        let dir = tempfile::tempdir().expect("a scratch directory");
        let store = registry::storage::FsStore::open(dir.path()).expect("a filesystem store");
        let state = registry::AppState::new(
            std::sync::Arc::new(store),
            registry::RegistryConfig::default(),
        );
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        // Built inside the runtime: the state may start timers.
        let app = rt.block_on(async { registry::router(state) });
        Registry { _dir: dir, app, rt }
    })
}

/// The request the bytes write out, when they do.
fn parse(data: &[u8]) -> Option<Request<Body>> {
    let split = data.windows(2).position(|w| w == b"\n\n");
    let (head, body) = match split {
        Some(at) => (&data[..at], &data[at + 2..]),
        None => (data, &[][..]),
    };
    let head = std::str::from_utf8(head).ok()?;
    let mut lines = head.lines();
    let (method, target) = lines.next()?.trim_end_matches('\r').split_once(' ')?;
    let mut req = Request::builder()
        .method(Method::from_bytes(method.as_bytes()).ok()?)
        .uri(target);
    for line in lines {
        let Some((name, value)) = line.trim_end_matches('\r').split_once(':') else {
            continue;
        };
        let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(name.trim().as_bytes()),
            HeaderValue::from_str(value.trim()),
        ) else {
            continue;
        };
        req = req.header(name, value);
    }
    req.body(Body::from(body.to_vec())).ok()
}

fuzz_target!(|data: &[u8]| {
    let Some(req) = parse(data) else {
        return;
    };
    let what = format!("{} {}", req.method(), req.uri());
    let r = registry();
    let (status, body) = r.rt.block_on(async {
        let resp = r.app.clone().oneshot(req).await.expect("the router is infallible");
        let status = resp.status();
        let body = resp.into_body().collect().await.map(|b| b.to_bytes());
        (status, body)
    });
    assert_ne!(
        status,
        StatusCode::INTERNAL_SERVER_ERROR,
        "{what}: {:?}",
        body.map(|b| String::from_utf8_lossy(&b).into_owned())
    );
});
