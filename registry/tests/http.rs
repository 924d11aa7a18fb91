//! The HTTP API driven in process through `api::router` (no socket): error table, upload
//! sessions that survive a restart or move to another instance, and concurrent pushes.

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderMap, Method, Request, StatusCode};
use bytes::Bytes;
use http_body_util::BodyExt;
use registry::storage::FsStore;
use registry::{AppState, RegistryConfig, router};
use tower::ServiceExt;
use validator::{Algorithm, Digest};

struct Resp {
    status: StatusCode,
    headers: HeaderMap,
    body: Bytes,
}

impl Resp {
    fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .unwrap_or_else(|| panic!("no {name} header"))
            .to_str()
            .unwrap()
    }

    fn code(&self) -> String {
        let v: serde_json::Value = serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("error body is not JSON ({e}): {:?}", self.body));
        v["errors"][0]["code"].as_str().unwrap().to_owned()
    }
}

fn app_on(dir: &std::path::Path, config: RegistryConfig) -> Router {
    let store = FsStore::open(dir).unwrap();
    router(AppState::new(Arc::new(store), config))
}

async fn send(
    app: &Router,
    method: Method,
    uri: &str,
    headers: &[(&str, &str)],
    body: impl Into<Body>,
) -> Resp {
    let mut req = Request::builder().method(method).uri(uri);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = app
        .clone()
        .oneshot(req.body(body.into()).unwrap())
        .await
        .unwrap();
    let status = resp.status();
    let headers = resp.headers().clone();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    Resp {
        status,
        headers,
        body,
    }
}

/// Starts an upload session in `repo` with a POST; returns its location.
async fn start_upload(app: &Router, repo: &str) -> String {
    let r = send(
        app,
        Method::POST,
        &format!("/v2/{repo}/blobs/uploads/"),
        &[],
        Body::empty(),
    )
    .await;
    assert_eq!(r.status, StatusCode::ACCEPTED, "{:?}", r.body);
    r.header("location").to_owned()
}

/// A streamed PATCH of `body` to upload `loc` (no Content-Range); returns the Range answered.
async fn patch(app: &Router, loc: &str, body: &[u8]) -> String {
    let r = send(app, Method::PATCH, loc, &[], body.to_vec()).await;
    assert_eq!(r.status, StatusCode::ACCEPTED, "{:?}", r.body);
    r.header("range").to_owned()
}

/// Ends upload `loc` of `data` in `repo` with a PUT of `data[from..]` as the last chunk, and
/// checks the blob is published as `d` and reads back whole.
async fn finish_and_read(
    app: &Router,
    repo: &str,
    loc: &str,
    d: &Digest,
    data: &[u8],
    from: usize,
) {
    let range = format!("{from}-{}", data.len() - 1);
    let r = send(
        app,
        Method::PUT,
        &format!("{loc}?digest={d}"),
        &[("content-range", range.as_str())],
        data[from..].to_vec(),
    )
    .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    assert_eq!(r.header("docker-content-digest"), d.as_str());
    let path = format!("/v2/{repo}/blobs/{d}");
    let r = send(app, Method::GET, &path, &[], Body::empty()).await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(r.body[..] == data[..], "{path}: other bytes");
}

/// Pushes a blob with POST + PUT; returns its digest.
async fn push_blob(app: &Router, repo: &str, data: &[u8]) -> Digest {
    let d = Digest::sha256(data);
    let loc = start_upload(app, repo).await;
    let r = send(
        app,
        Method::PUT,
        &format!("{loc}?digest={d}"),
        &[("content-type", "application/octet-stream")],
        Bytes::copy_from_slice(data),
    )
    .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    d
}

fn image_manifest(config: &Digest, config_len: usize, layer: &Digest, layer_len: usize) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": config, "size": config_len},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": layer, "size": layer_len}],
    }))
    .unwrap()
}

const MT: &str = "application/vnd.oci.image.manifest.v1+json";

#[tokio::test]
async fn bad_requests_get_the_right_status_and_code() {
    let dir = tempfile::tempdir().unwrap();
    let app = app_on(dir.path(), RegistryConfig::default());
    let cfg = push_blob(&app, "good/repo", b"{}").await;
    let layer = push_blob(&app, "good/repo", &[1u8; 1000]).await;
    let unknown = Digest::sha256(b"never pushed");
    let manifest = image_manifest(&cfg, 2, &layer, 1000);
    let r = send(
        &app,
        Method::PUT,
        "/v2/good/repo/manifests/v1",
        &[("content-type", MT)],
        manifest.clone(),
    )
    .await;
    assert_eq!(r.status, StatusCode::CREATED);

    let big = vec![b' '; (4 << 20) + 1];
    let missing_blob = image_manifest(&cfg, 2, &unknown, 5);
    let dup_key = {
        let text = String::from_utf8(manifest.clone()).unwrap();
        text.replacen(
            "{\"schemaVersion\":2,",
            "{\"schemaVersion\":2,\"schemaVersion\":2,",
            1,
        )
        .into_bytes()
    };
    assert_ne!(dup_key, manifest);
    let upload = send(
        &app,
        Method::POST,
        "/v2/good/repo/blobs/uploads/",
        &[],
        Body::empty(),
    )
    .await;
    let loc = upload.header("location").to_owned();
    let random_upload = format!(
        "/v2/good/repo/blobs/uploads/{}",
        "0b9c2a5e-1f8f-4a8a-9d63-3c1f2b9d7e10"
    );

    type Case<'a> = (
        &'a str,
        Method,
        String,
        Vec<(&'a str, &'a str)>,
        Vec<u8>,
        StatusCode,
        &'a str,
    );
    let cases: Vec<Case> = vec![
        (
            "uppercase name",
            Method::GET,
            "/v2/Bad/tags/list".into(),
            vec![],
            vec![],
            StatusCode::BAD_REQUEST,
            "NAME_INVALID",
        ),
        (
            "name with ..",
            Method::GET,
            "/v2/a..b/blobs/uploads/x".into(),
            vec![],
            vec![],
            StatusCode::BAD_REQUEST,
            "NAME_INVALID",
        ),
        (
            "short digest",
            Method::GET,
            "/v2/good/repo/blobs/sha256:abc".into(),
            vec![],
            vec![],
            StatusCode::BAD_REQUEST,
            "DIGEST_INVALID",
        ),
        (
            "unsupported algorithm",
            Method::HEAD,
            "/v2/good/repo/blobs/md5:d41d8cd98f00b204e9800998ecf8427e".into(),
            vec![],
            vec![],
            StatusCode::BAD_REQUEST,
            "",
        ),
        (
            "unknown blob",
            Method::GET,
            format!("/v2/good/repo/blobs/{unknown}"),
            vec![],
            vec![],
            StatusCode::NOT_FOUND,
            "BLOB_UNKNOWN",
        ),
        (
            "blob of another repo",
            Method::GET,
            format!("/v2/other/blobs/{layer}"),
            vec![],
            vec![],
            StatusCode::NOT_FOUND,
            "BLOB_UNKNOWN",
        ),
        (
            "unknown tag",
            Method::GET,
            "/v2/good/repo/manifests/nope".into(),
            vec![],
            vec![],
            StatusCode::NOT_FOUND,
            "MANIFEST_UNKNOWN",
        ),
        (
            "GET of an invalid tag",
            Method::GET,
            "/v2/good/repo/manifests/.INVALID_MANIFEST_NAME".into(),
            vec![],
            vec![],
            StatusCode::NOT_FOUND,
            "MANIFEST_UNKNOWN",
        ),
        (
            "malformed manifest digest",
            Method::GET,
            "/v2/good/repo/manifests/sha256:totallywrong".into(),
            vec![],
            vec![],
            StatusCode::BAD_REQUEST,
            "DIGEST_INVALID",
        ),
        (
            "unknown repository tags",
            Method::GET,
            "/v2/no/such/tags/list".into(),
            vec![],
            vec![],
            StatusCode::NOT_FOUND,
            "NAME_UNKNOWN",
        ),
        (
            "manifest too large",
            Method::PUT,
            "/v2/good/repo/manifests/big".into(),
            vec![("content-type", MT)],
            big,
            StatusCode::PAYLOAD_TOO_LARGE,
            "SIZE_INVALID",
        ),
        (
            "manifest with a duplicate key (validator rule)",
            Method::PUT,
            "/v2/good/repo/manifests/x".into(),
            vec![("content-type", MT)],
            dup_key.clone(),
            StatusCode::BAD_REQUEST,
            "MANIFEST_INVALID",
        ),
        (
            "manifest not JSON",
            Method::PUT,
            "/v2/good/repo/manifests/x".into(),
            vec![("content-type", MT)],
            b"{nope".to_vec(),
            StatusCode::BAD_REQUEST,
            "MANIFEST_INVALID",
        ),
        (
            "manifest type mismatch",
            Method::PUT,
            "/v2/good/repo/manifests/x".into(),
            vec![("content-type", "application/vnd.oci.image.index.v1+json")],
            manifest.clone(),
            StatusCode::BAD_REQUEST,
            "MANIFEST_INVALID",
        ),
        (
            "manifest with unknown blob",
            Method::PUT,
            "/v2/good/repo/manifests/x".into(),
            vec![("content-type", MT)],
            missing_blob,
            StatusCode::BAD_REQUEST,
            "MANIFEST_BLOB_UNKNOWN",
        ),
        (
            "manifest body digest mismatch",
            Method::PUT,
            format!("/v2/good/repo/manifests/{unknown}"),
            vec![("content-type", MT)],
            manifest.clone(),
            StatusCode::BAD_REQUEST,
            "DIGEST_INVALID",
        ),
        (
            "bad tag",
            Method::PUT,
            "/v2/good/repo/manifests/-tag".into(),
            vec![("content-type", MT)],
            manifest.clone(),
            StatusCode::BAD_REQUEST,
            "MANIFEST_INVALID",
        ),
        (
            "upload id not a uuid",
            Method::PATCH,
            "/v2/good/repo/blobs/uploads/..%2F..%2Fetc".into(),
            vec![],
            b"x".to_vec(),
            StatusCode::NOT_FOUND,
            "BLOB_UPLOAD_UNKNOWN",
        ),
        (
            "unknown upload",
            Method::GET,
            random_upload.clone(),
            vec![],
            vec![],
            StatusCode::NOT_FOUND,
            "BLOB_UPLOAD_UNKNOWN",
        ),
        (
            "upload of another repo",
            Method::GET,
            loc.replace("good/repo", "other"),
            vec![],
            vec![],
            StatusCode::NOT_FOUND,
            "BLOB_UPLOAD_UNKNOWN",
        ),
        (
            "chunk not at offset 0",
            Method::PATCH,
            loc.clone(),
            vec![("content-range", "5-9")],
            b"12345".to_vec(),
            StatusCode::RANGE_NOT_SATISFIABLE,
            "",
        ),
        (
            "body shorter than content-range",
            Method::PATCH,
            loc.clone(),
            vec![("content-range", "0-9")],
            b"12345".to_vec(),
            StatusCode::BAD_REQUEST,
            "SIZE_INVALID",
        ),
        (
            "content-range and length disagree",
            Method::PATCH,
            loc.clone(),
            vec![("content-range", "0-9"), ("content-length", "5")],
            b"12345".to_vec(),
            StatusCode::RANGE_NOT_SATISFIABLE,
            "",
        ),
        (
            "close without digest",
            Method::PUT,
            loc.clone(),
            vec![],
            vec![],
            StatusCode::BAD_REQUEST,
            "DIGEST_INVALID",
        ),
        (
            "bad digest-algorithm",
            Method::POST,
            "/v2/good/repo/blobs/uploads/?digest-algorithm=md5".into(),
            vec![],
            vec![],
            StatusCode::BAD_REQUEST,
            "DIGEST_INVALID",
        ),
        (
            "blob range start past end",
            Method::GET,
            format!("/v2/good/repo/blobs/{layer}"),
            vec![("range", "bytes=1000-")],
            vec![],
            StatusCode::RANGE_NOT_SATISFIABLE,
            "",
        ),
        (
            "blob range end before start",
            Method::GET,
            format!("/v2/good/repo/blobs/{layer}"),
            vec![("range", "bytes=500-0")],
            vec![],
            StatusCode::RANGE_NOT_SATISFIABLE,
            "",
        ),
        (
            "referrers of a bad digest",
            Method::GET,
            "/v2/good/repo/referrers/sha256:zz".into(),
            vec![],
            vec![],
            StatusCode::BAD_REQUEST,
            "DIGEST_INVALID",
        ),
        (
            "delete unknown manifest",
            Method::DELETE,
            format!("/v2/good/repo/manifests/{unknown}"),
            vec![],
            vec![],
            StatusCode::NOT_FOUND,
            "MANIFEST_UNKNOWN",
        ),
        (
            "delete unknown blob",
            Method::DELETE,
            format!("/v2/good/repo/blobs/{unknown}"),
            vec![],
            vec![],
            StatusCode::NOT_FOUND,
            "BLOB_UNKNOWN",
        ),
        (
            "unsupported method",
            Method::POST,
            "/v2/good/repo/tags/list".into(),
            vec![],
            vec![],
            StatusCode::METHOD_NOT_ALLOWED,
            "UNSUPPORTED",
        ),
        (
            "bad page size",
            Method::GET,
            "/v2/good/repo/tags/list?n=many".into(),
            vec![],
            vec![],
            StatusCode::BAD_REQUEST,
            "PAGINATION_NUMBER_INVALID",
        ),
        (
            "no such endpoint",
            Method::GET,
            "/v2/good/repo/nothing/here".into(),
            vec![],
            vec![],
            StatusCode::NOT_FOUND,
            "NAME_UNKNOWN",
        ),
    ];
    for (what, method, uri, headers, body, status, code) in cases {
        let r = send(&app, method.clone(), &uri, &headers, body).await;
        assert_eq!(r.status, status, "{what}: {method} {uri}: {:?}", r.body);
        if !code.is_empty() {
            assert_eq!(r.code(), code, "{what}");
        }
        assert_eq!(r.header("docker-distribution-api-version"), "registry/2.0");
    }
    // The upload survived every refused request: still at 0, and a 416 said so.
    let r = send(&app, Method::GET, &loc, &[], Body::empty()).await;
    assert_eq!(r.status, StatusCode::NO_CONTENT);
    assert_eq!(r.header("range"), "0-0");
    // Nothing was stored by the refused manifest PUTs.
    let r = send(
        &app,
        Method::GET,
        "/v2/good/repo/tags/list",
        &[],
        Body::empty(),
    )
    .await;
    let tags: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(tags["tags"], serde_json::json!(["v1"]));
}

#[tokio::test]
async fn deletes_can_be_switched_off() {
    let dir = tempfile::tempdir().unwrap();
    let config = RegistryConfig {
        delete_enabled: false,
        ..RegistryConfig::default()
    };
    let app = app_on(dir.path(), config);
    let d = push_blob(&app, "r", b"data").await;
    for uri in [
        format!("/v2/r/blobs/{d}"),
        "/v2/r/manifests/latest".to_owned(),
    ] {
        let r = send(&app, Method::DELETE, &uri, &[], Body::empty()).await;
        assert_eq!(r.status, StatusCode::METHOD_NOT_ALLOWED);
        assert_eq!(r.code(), "UNSUPPORTED");
    }
    let r = send(
        &app,
        Method::HEAD,
        &format!("/v2/r/blobs/{d}"),
        &[],
        Body::empty(),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK);
}

#[tokio::test]
async fn chunked_upload_survives_a_restart_and_moves_between_instances() {
    let dir = tempfile::tempdir().unwrap();
    let data: Vec<u8> = (0..300_000u32).map(|i| (i * 31 % 251) as u8).collect();
    for alg in [Algorithm::Sha256, Algorithm::Sha512] {
        let d = Digest::of(alg, &data);
        let first = app_on(dir.path(), RegistryConfig::default());
        let loc = start_upload(&first, "resume").await;
        let r = send(
            &first,
            Method::PATCH,
            &loc,
            &[("content-range", "0-99999")],
            data[..100_000].to_vec(),
        )
        .await;
        assert_eq!(r.status, StatusCode::ACCEPTED);
        assert_eq!(r.header("range"), "0-99999");
        drop(first);

        // A second instance over the same store: the state is all in the store.
        let second = app_on(dir.path(), RegistryConfig::default());
        let r = send(&second, Method::GET, &loc, &[], Body::empty()).await;
        assert_eq!(r.status, StatusCode::NO_CONTENT);
        assert_eq!(r.header("range"), "0-99999");
        // Repeating the first chunk is refused with the true range.
        let r = send(
            &second,
            Method::PATCH,
            &loc,
            &[("content-range", "0-99999")],
            data[..100_000].to_vec(),
        )
        .await;
        assert_eq!(r.status, StatusCode::RANGE_NOT_SATISFIABLE);
        assert_eq!(r.header("range"), "0-99999");
        // Streamed PATCH without Content-Range, then the last chunk on the PUT.
        assert_eq!(
            patch(&second, &loc, &data[100_000..250_000]).await,
            "0-249999"
        );
        finish_and_read(&second, "resume", &loc, &d, &data, 250_000).await;
        let r = send(
            &second,
            Method::GET,
            &format!("/v2/resume/blobs/{d}"),
            &[("range", "bytes=-10")],
            Body::empty(),
        )
        .await;
        assert_eq!(r.status, StatusCode::PARTIAL_CONTENT);
        assert_eq!(r.header("content-range"), "bytes 299990-299999/300000");
        assert_eq!(&r.body[..], &data[299_990..]);
        // The session is gone once committed.
        let r = send(&second, Method::GET, &loc, &[], Body::empty()).await;
        assert_eq!(r.status, StatusCode::NOT_FOUND);
    }
    let left: Vec<_> = std::fs::read_dir(dir.path().join("uploads"))
        .map(|d| d.collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "upload areas left: {left:?}");
}

/// What a machine crash can leave of an upload session on the filesystem store, which does not
/// make session state durable (only the staging bytes a state counts): a state older than the
/// staging bytes (the last PATCH's state lost) resumes from the older offset with the bytes past
/// it cut off, and the blob comes out right; a torn state answers `BLOB_UPLOAD_UNKNOWN`, not a
/// server error, so the client starts again.
#[tokio::test]
async fn an_upload_a_crash_left_behind_resumes_or_is_unknown() {
    let dir = tempfile::tempdir().unwrap();
    let data: Vec<u8> = (0..300_000u32).map(|i| (i * 7 % 253) as u8).collect();
    let d = Digest::of(Algorithm::Sha256, &data);
    let app = app_on(dir.path(), RegistryConfig::default());
    let loc = start_upload(&app, "crash").await;
    let id = loc.rsplit('/').next().unwrap().to_owned();
    let state = dir.path().join("uploads").join(&id).join("state");
    assert_eq!(patch(&app, &loc, &data[..100_000]).await, "0-99999");
    let older = std::fs::read(&state).unwrap();
    assert_eq!(patch(&app, &loc, &data[100_000..200_000]).await, "0-199999");
    drop(app);
    // The crash: the second PATCH's bytes reached the disk, its state did not.
    std::fs::write(&state, &older).unwrap();
    let app = app_on(dir.path(), RegistryConfig::default());
    let r = send(&app, Method::GET, &loc, &[], Body::empty()).await;
    assert_eq!(r.status, StatusCode::NO_CONTENT);
    assert_eq!(r.header("range"), "0-99999");
    finish_and_read(&app, "crash", &loc, &d, &data, 100_000).await;

    // A torn state (a new file whose bytes did not reach the disk).
    for torn in [&b""[..], b"{\"repository\":\"cra"] {
        let loc = start_upload(&app, "crash").await;
        let id = loc.rsplit('/').next().unwrap().to_owned();
        std::fs::write(dir.path().join("uploads").join(&id).join("state"), torn).unwrap();
        for (method, body) in [(Method::GET, vec![]), (Method::PATCH, data[..10].to_vec())] {
            let r = send(&app, method.clone(), &loc, &[], body).await;
            assert_eq!(
                r.status,
                StatusCode::NOT_FOUND,
                "{method} {torn:?}: {:?}",
                r.body
            );
            assert!(
                String::from_utf8_lossy(&r.body).contains("BLOB_UPLOAD_UNKNOWN"),
                "{method}: {:?}",
                r.body
            );
        }
    }
}

#[tokio::test]
async fn a_wrong_digest_publishes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let app = app_on(dir.path(), RegistryConfig::default());
    let claimed = Digest::sha256(b"what the client claims");
    let r = send(
        &app,
        Method::POST,
        &format!("/v2/r/blobs/uploads/?digest={claimed}"),
        &[],
        b"other bytes".to_vec(),
    )
    .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert_eq!(r.code(), "DIGEST_INVALID");
    let r = send(
        &app,
        Method::HEAD,
        &format!("/v2/r/blobs/{claimed}"),
        &[],
        Body::empty(),
    )
    .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    let actual = Digest::sha256(b"other bytes");
    let r = send(
        &app,
        Method::HEAD,
        &format!("/v2/r/blobs/{actual}"),
        &[],
        Body::empty(),
    )
    .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    assert!(
        !dir.path().join("blobs").exists(),
        "nothing may reach the blob area"
    );
}

/// A blob the repository links whose bytes the store does not find (a lagging store, or bytes
/// lost) is read again for a while; then a GET answers 503 with Retry-After, which a client
/// retries, and a HEAD answers 404, so a pusher uploads the bytes again, which repairs it.
#[tokio::test]
async fn a_linked_blob_whose_bytes_are_missing_is_unavailable_to_a_get_and_pushed_again() {
    let dir = tempfile::tempdir().unwrap();
    let app = app_on(dir.path(), RegistryConfig::default());
    let data = b"bytes the store will lose".to_vec();
    let d = push_blob(&app, "r", &data).await;
    let hex = d.encoded();
    let bytes = dir
        .path()
        .join(format!("blobs/sha256/{}/{hex}/data", &hex[..2]));
    std::fs::remove_file(&bytes).unwrap_or_else(|e| panic!("{}: {e}", bytes.display()));
    let uri = format!("/v2/r/blobs/{d}");

    let started = std::time::Instant::now();
    let r = send(&app, Method::GET, &uri, &[], Body::empty()).await;
    assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE, "{:?}", r.body);
    assert_eq!(r.code(), "UNAVAILABLE");
    assert_eq!(r.header("retry-after"), "2");
    assert!(
        String::from_utf8_lossy(&r.body).contains(d.as_str()),
        "the error names the blob: {:?}",
        r.body
    );
    assert!(
        started.elapsed() >= std::time::Duration::from_secs(2),
        "answered before reading again: {:?}",
        started.elapsed()
    );
    let r = send(&app, Method::HEAD, &uri, &[], Body::empty()).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);

    assert_eq!(push_blob(&app, "r", &data).await, d);
    let r = send(&app, Method::GET, &uri, &[], Body::empty()).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(&r.body[..], &data[..]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn eight_clients_push_the_same_blob_and_tag() {
    let dir = tempfile::tempdir().unwrap();
    let app = app_on(dir.path(), RegistryConfig::default());
    let layer: Vec<u8> = (0..2_000_000u32).map(|i| (i % 241) as u8).collect();
    let layer_d = Digest::sha256(&layer);
    let cfg = b"{\"architecture\":\"amd64\",\"os\":\"illumos\"}".to_vec();
    let cfg_d = Digest::sha256(&cfg);
    let manifest = image_manifest(&cfg_d, cfg.len(), &layer_d, layer.len());
    let tasks: Vec<_> = (0..8)
        .map(|i| {
            let app = app.clone();
            let layer = layer.clone();
            let cfg = cfg.clone();
            let manifest = manifest.clone();
            let layer_d = layer_d.clone();
            tokio::spawn(async move {
                let r = send(
                    &app,
                    Method::POST,
                    "/v2/same/blobs/uploads/",
                    &[],
                    Body::empty(),
                )
                .await;
                let loc = r.header("location").to_owned();
                // Different chunkings per client.
                let step = 100_000 * (i + 1);
                let mut off = 0;
                while off < layer.len() {
                    let end = (off + step).min(layer.len());
                    let range = format!("{off}-{}", end - 1);
                    let r = send(
                        &app,
                        Method::PATCH,
                        &loc,
                        &[("content-range", &range)],
                        layer[off..end].to_vec(),
                    )
                    .await;
                    assert_eq!(r.status, StatusCode::ACCEPTED);
                    off = end;
                }
                let r = send(
                    &app,
                    Method::PUT,
                    &format!("{loc}?digest={layer_d}"),
                    &[],
                    Body::empty(),
                )
                .await;
                assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
                push_blob(&app, "same", &cfg).await;
                let r = send(
                    &app,
                    Method::PUT,
                    "/v2/same/manifests/latest",
                    &[("content-type", MT)],
                    manifest,
                )
                .await;
                assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
                r.header("docker-content-digest").to_owned()
            })
        })
        .collect();
    let mut digests = Vec::new();
    for t in tasks {
        digests.push(t.await.unwrap());
    }
    digests.dedup();
    assert_eq!(digests.len(), 1);
    let r = send(
        &app,
        Method::GET,
        &format!("/v2/same/blobs/{layer_d}"),
        &[],
        Body::empty(),
    )
    .await;
    assert!(
        r.body[..] == layer[..],
        "the published blob is not the pushed one"
    );
    let r = send(
        &app,
        Method::GET,
        "/v2/same/manifests/latest",
        &[],
        Body::empty(),
    )
    .await;
    assert_eq!(r.header("docker-content-digest"), digests[0]);
    assert_eq!(&r.body[..], &manifest[..]);
    let r = send(&app, Method::GET, "/v2/same/tags/list", &[], Body::empty()).await;
    let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(v["tags"], serde_json::json!(["latest"]));
    let r = send(&app, Method::GET, "/v2/_catalog", &[], Body::empty()).await;
    let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(v["repositories"], serde_json::json!(["same"]));
}

/// `?tag=` on a PUT by digest: repeated tags count once, and more than 64 distinct ones are
/// refused before anything is written (each is one rewrite of the tag index). A manifest that
/// names one blob thousands of times is checked once per distinct blob.
#[tokio::test]
async fn tag_parameters_are_bounded_and_repeated_references_checked_once() {
    let dir = tempfile::tempdir().unwrap();
    let app = app_on(dir.path(), RegistryConfig::default());
    let cfg = push_blob(&app, "p", b"{}").await;
    let layer = push_blob(&app, "p", b"layer").await;
    let m = image_manifest(&cfg, 2, &layer, 5);
    let d = Digest::sha256(&m);
    let many: Vec<String> = (0..65).map(|i| format!("tag={i}")).collect();
    let r = send(
        &app,
        Method::PUT,
        &format!("/v2/p/manifests/{d}?{}", many.join("&")),
        &[("content-type", MT)],
        m.clone(),
    )
    .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert_eq!(r.code(), "MANIFEST_INVALID");
    assert!(String::from_utf8_lossy(&r.body).contains("more than 64 tag parameters"));
    let r = send(
        &app,
        Method::GET,
        &format!("/v2/p/manifests/{d}"),
        &[],
        Body::empty(),
    )
    .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "nothing was written");
    // 64 distinct tags, each given twice: accepted, each tag once.
    let twice: Vec<String> = (0..128).map(|i| format!("tag={}", i % 64)).collect();
    let r = send(
        &app,
        Method::PUT,
        &format!("/v2/p/manifests/{d}?{}", twice.join("&")),
        &[("content-type", MT)],
        m.clone(),
    )
    .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    assert_eq!(r.headers.get_all("oci-tag").iter().count(), 64);
    let r = send(&app, Method::GET, "/v2/p/tags/list", &[], Body::empty()).await;
    let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(v["tags"].as_array().unwrap().len(), 64);
    // One blob named 5,000 times.
    let layers: Vec<serde_json::Value> = (0..5000)
        .map(|_| serde_json::json!({"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": layer, "size": 5}))
        .collect();
    let big = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2, "mediaType": MT,
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": cfg, "size": 2},
        "layers": layers,
    }))
    .unwrap();
    let r = send(
        &app,
        Method::PUT,
        "/v2/p/manifests/repeated",
        &[("content-type", MT)],
        big,
    )
    .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
}

#[tokio::test]
async fn tag_and_catalog_pagination_with_link() {
    let dir = tempfile::tempdir().unwrap();
    let app = app_on(dir.path(), RegistryConfig::default());
    let cfg = push_blob(&app, "p", b"{}").await;
    let layer = push_blob(&app, "p", b"layer").await;
    let m = image_manifest(&cfg, 2, &layer, 5);
    for t in ["d", "a", "c", "b", "e"] {
        let r = send(
            &app,
            Method::PUT,
            &format!("/v2/p/manifests/{t}"),
            &[("content-type", MT)],
            m.clone(),
        )
        .await;
        assert_eq!(r.status, StatusCode::CREATED);
    }
    let r = send(&app, Method::GET, "/v2/p/tags/list?n=2", &[], Body::empty()).await;
    let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(v["tags"], serde_json::json!(["a", "b"]));
    assert_eq!(
        r.header("link"),
        "</v2/p/tags/list?n=2&last=b>; rel=\"next\""
    );
    let r = send(
        &app,
        Method::GET,
        "/v2/p/tags/list?n=2&last=d",
        &[],
        Body::empty(),
    )
    .await;
    let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(v["tags"], serde_json::json!(["e"]));
    assert!(r.headers.get("link").is_none());
    let r = send(&app, Method::GET, "/v2/p/tags/list?n=0", &[], Body::empty()).await;
    let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(v["tags"], serde_json::json!([]));
    push_blob(&app, "q/r", b"x").await;
    let r = send(&app, Method::GET, "/v2/_catalog?n=1", &[], Body::empty()).await;
    let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(v["repositories"], serde_json::json!(["p"]));
    assert_eq!(r.header("link"), "</v2/_catalog?n=1&last=p>; rel=\"next\"");
    // Deleting the manifest removes every tag that pointed at it.
    let d = Digest::sha256(&m);
    let r = send(
        &app,
        Method::DELETE,
        &format!("/v2/p/manifests/{d}"),
        &[],
        Body::empty(),
    )
    .await;
    assert_eq!(r.status, StatusCode::ACCEPTED);
    let r = send(&app, Method::GET, "/v2/p/manifests/a", &[], Body::empty()).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    let r = send(&app, Method::GET, "/v2/p/tags/list", &[], Body::empty()).await;
    let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(v["tags"], serde_json::json!([]));
}

#[tokio::test]
async fn referrers_with_filter_and_subject_header() {
    let dir = tempfile::tempdir().unwrap();
    let app = app_on(dir.path(), RegistryConfig::default());
    let cfg = push_blob(&app, "ref", b"{}").await;
    let layer = push_blob(&app, "ref", b"layer").await;
    let subject = image_manifest(&cfg, 2, &layer, 5);
    let subject_d = Digest::sha256(&subject);
    // The subject need not exist when its referrer is pushed.
    let mut ids = Vec::new();
    for (i, at) in [
        "application/vnd.example.sbom",
        "application/vnd.example.sig",
    ]
    .iter()
    .enumerate()
    {
        let art = serde_json::to_vec(&serde_json::json!({
            "schemaVersion": 2,
            "mediaType": MT,
            "artifactType": at,
            "config": {"mediaType": "application/vnd.oci.empty.v1+json", "digest": cfg, "size": 2},
            "layers": [],
            "subject": {"mediaType": MT, "digest": subject_d, "size": subject.len()},
            "annotations": {"n": i.to_string()},
        }))
        .unwrap();
        let d = Digest::sha256(&art);
        let r = send(
            &app,
            Method::PUT,
            &format!("/v2/ref/manifests/{d}"),
            &[("content-type", MT)],
            art,
        )
        .await;
        assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
        assert_eq!(r.header("oci-subject"), subject_d.as_str());
        ids.push(d);
    }
    let r = send(
        &app,
        Method::GET,
        &format!("/v2/ref/referrers/{subject_d}"),
        &[],
        Body::empty(),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(
        r.header("content-type"),
        "application/vnd.oci.image.index.v1+json"
    );
    let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(v["manifests"].as_array().unwrap().len(), 2);
    let r = send(
        &app,
        Method::GET,
        &format!("/v2/ref/referrers/{subject_d}?artifactType=application/vnd.example.sig"),
        &[],
        Body::empty(),
    )
    .await;
    assert_eq!(r.header("oci-filters-applied"), "artifactType");
    let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(v["manifests"][0]["digest"], ids[1].as_str());
    assert_eq!(v["manifests"][0]["annotations"]["n"], "1");
    let r = send(
        &app,
        Method::DELETE,
        &format!("/v2/ref/manifests/{}", ids[0]),
        &[],
        Body::empty(),
    )
    .await;
    assert_eq!(r.status, StatusCode::ACCEPTED);
    let r = send(
        &app,
        Method::GET,
        &format!("/v2/ref/referrers/{subject_d}"),
        &[],
        Body::empty(),
    )
    .await;
    let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(v["manifests"].as_array().unwrap().len(), 1);
    // Unknown subject: 200 and an empty index, never 404.
    let r = send(
        &app,
        Method::GET,
        &format!("/v2/nowhere/referrers/{}", Digest::sha256(b"?")),
        &[],
        Body::empty(),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK);
    let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(v["manifests"], serde_json::json!([]));
}

#[tokio::test]
async fn stale_uploads_expire() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(FsStore::open(dir.path()).unwrap());
    let state = AppState::new(store, RegistryConfig::default());
    let app = router(state.clone());
    let r = send(
        &app,
        Method::POST,
        "/v2/x/blobs/uploads/",
        &[],
        Body::empty(),
    )
    .await;
    let loc = r.header("location").to_owned();
    assert_eq!(
        state
            .expire_uploads(std::time::Duration::from_secs(3600))
            .await
            .unwrap(),
        0
    );
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    assert_eq!(
        state
            .expire_uploads(std::time::Duration::ZERO)
            .await
            .unwrap(),
        2
    );
    let r = send(&app, Method::GET, &loc, &[], Body::empty()).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn health_readiness_and_metrics() {
    let dir = tempfile::tempdir().unwrap();
    let app = app_on(dir.path(), RegistryConfig::default());
    for path in ["/healthz", "/readyz", "/v2/"] {
        let r = send(&app, Method::GET, path, &[], Body::empty()).await;
        assert_eq!(r.status, StatusCode::OK, "{path}");
    }
    push_blob(&app, "m", &[5u8; 1234]).await;
    let r = send(
        &app,
        Method::GET,
        "/v2/m/blobs/sha256:zz",
        &[],
        Body::empty(),
    )
    .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    let r = send(&app, Method::GET, "/metrics", &[], Body::empty()).await;
    let text = String::from_utf8(r.body.to_vec()).unwrap();
    for want in [
        "registry_http_requests_total{route=\"upload\",method=\"POST\",status=\"202\"} 1",
        "registry_http_requests_total{route=\"upload\",method=\"PUT\",status=\"201\"} 1",
        "registry_http_requests_total{route=\"blob\",method=\"GET\",status=\"400\"} 1",
        "registry_http_requests_total{route=\"readyz\",method=\"GET\",status=\"200\"} 1",
        "registry_commit_duration_seconds_count 1",
        "registry_store_operations_total{store=\"fs\",op=\"writer\"}",
    ] {
        assert!(text.contains(want), "missing {want:?} in\n{text}");
    }
}

/// On the filesystem store an upload started without `digest-algorithm` hashes only sha256 as
/// its bytes arrive (hashing sha512 alongside cost half the server's CPU in a push); a sha512
/// digest on the PUT is verified by reading the staged bytes back, and a wrong one publishes
/// nothing.
#[tokio::test]
async fn sha512_without_digest_algorithm_is_verified_by_reading_back() {
    let dir = tempfile::tempdir().unwrap();
    let app = app_on(dir.path(), RegistryConfig::default());
    let data: Vec<u8> = (0..700_000u32).map(|i| (i * 13 % 253) as u8).collect();
    let good = Digest::of(Algorithm::Sha512, &data);
    let wrong = Digest::of(Algorithm::Sha512, &data[1..]);
    for (digest, ok) in [(&wrong, false), (&good, true)] {
        let r = send(
            &app,
            Method::POST,
            "/v2/r512/blobs/uploads/",
            &[],
            Body::empty(),
        )
        .await;
        assert_eq!(r.status, StatusCode::ACCEPTED);
        let loc = r.header("location").to_owned();
        let id = r.header("docker-upload-uuid").to_owned();
        let state: serde_json::Value = serde_json::from_slice(
            &std::fs::read(dir.path().join("uploads").join(&id).join("state")).unwrap(),
        )
        .unwrap();
        assert_eq!(state["hashes"].as_array().unwrap().len(), 1, "{state}");
        let r = send(
            &app,
            Method::PATCH,
            &loc,
            &[("content-range", "0-399999")],
            data[..400_000].to_vec(),
        )
        .await;
        assert_eq!(r.status, StatusCode::ACCEPTED);
        // The last bytes come with the PUT, so the read-back must see bytes written in the
        // same request.
        let r = send(
            &app,
            Method::PUT,
            &format!("{loc}?digest={digest}"),
            &[("content-range", "400000-699999")],
            data[400_000..].to_vec(),
        )
        .await;
        let blob = send(
            &app,
            Method::GET,
            &format!("/v2/r512/blobs/{digest}"),
            &[],
            Body::empty(),
        )
        .await;
        if ok {
            assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
            assert_eq!(blob.status, StatusCode::OK);
            assert!(blob.body[..] == data[..]);
        } else {
            assert_eq!(r.status, StatusCode::BAD_REQUEST);
            assert_eq!(r.code(), "DIGEST_INVALID");
            assert!(
                String::from_utf8_lossy(&r.body).contains(good.encoded()),
                "the error names the digest found: {:?}",
                r.body
            );
            assert_eq!(blob.status, StatusCode::NOT_FOUND);
        }
    }
}

/// A manifest an index of the same repository lists is not deleted by digest (409
/// `MANIFEST_REFERENCED`, naming the index) unless the DELETE says `?force=true`; once the
/// index is gone it is.
#[tokio::test]
async fn a_manifest_an_index_lists_is_deleted_only_when_asked() {
    let dir = tempfile::tempdir().unwrap();
    let app = app_on(dir.path(), RegistryConfig::default());
    let config = push_blob(&app, "r", b"{}").await;
    let mut manifests = Vec::new();
    for layer in [&b"one"[..], b"two", b"three"] {
        let l = push_blob(&app, "r", layer).await;
        let m = image_manifest(&config, 2, &l, layer.len());
        let d = Digest::sha256(&m);
        let r = send(
            &app,
            Method::PUT,
            &format!("/v2/r/manifests/{d}"),
            &[("content-type", MT)],
            m.clone(),
        )
        .await;
        assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
        manifests.push((d, m.len()));
    }
    let index = |children: &[&(Digest, usize)]| {
        serde_json::to_vec(&serde_json::json!({
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.index.v1+json",
            "manifests": children.iter().map(|(d, n)| serde_json::json!({
                "mediaType": MT, "digest": d, "size": n,
                "platform": {"os": "illumos", "architecture": "amd64"},
            })).collect::<Vec<_>>(),
        }))
        .unwrap()
    };
    let mut indexes = Vec::new();
    for (tag, children) in [
        ("multi", vec![&manifests[0]]),
        ("other", vec![&manifests[1]]),
    ] {
        let i = index(&children);
        let r = send(
            &app,
            Method::PUT,
            &format!("/v2/r/manifests/{tag}"),
            &[("content-type", "application/vnd.oci.image.index.v1+json")],
            i.clone(),
        )
        .await;
        assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
        indexes.push(Digest::sha256(&i));
    }
    let delete = |what: String| {
        let app = app.clone();
        async move { send(&app, Method::DELETE, &what, &[], Body::empty()).await }
    };
    let child = &manifests[0].0;
    let r = delete(format!("/v2/r/manifests/{child}")).await;
    assert_eq!(r.status, StatusCode::CONFLICT, "{:?}", r.body);
    assert_eq!(r.code(), "MANIFEST_REFERENCED");
    let body: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    let detail = body["errors"][0]["detail"].as_str().unwrap();
    assert!(
        detail.contains(indexes[0].as_str()) && !detail.contains(indexes[1].as_str()),
        "{detail}"
    );
    assert!(detail.contains("?force=true"), "{detail}");
    let r = send(
        &app,
        Method::GET,
        &format!("/v2/r/manifests/{child}"),
        &[],
        Body::empty(),
    )
    .await;
    assert_eq!(
        r.status,
        StatusCode::OK,
        "the refused DELETE removed nothing"
    );
    // A malformed force is refused, not read as either answer.
    let r = delete(format!("/v2/r/manifests/{child}?force=yes")).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert_eq!(r.code(), "QUERY_INVALID");
    // A manifest no index lists goes as before.
    let r = delete(format!("/v2/r/manifests/{}", manifests[2].0)).await;
    assert_eq!(r.status, StatusCode::ACCEPTED, "{:?}", r.body);
    // Asked for: deleted although listed.
    let r = delete(format!("/v2/r/manifests/{}?force=true", manifests[1].0)).await;
    assert_eq!(r.status, StatusCode::ACCEPTED, "{:?}", r.body);
    // The index first, then the child.
    let r = delete(format!("/v2/r/manifests/{}", indexes[0])).await;
    assert_eq!(r.status, StatusCode::ACCEPTED, "{:?}", r.body);
    let r = delete(format!("/v2/r/manifests/{child}")).await;
    assert_eq!(r.status, StatusCode::ACCEPTED, "{:?}", r.body);
}

/// A manifest GET by tag answers from the document cache once it has read the bytes, and the
/// cache never outlives them: a manifest whose stored bytes are removed (garbage collection,
/// a scrub's withdrawal) answers no more bytes, and one pushed again is served again.
#[tokio::test]
async fn a_cached_manifest_whose_bytes_are_gone_is_not_served() {
    let dir = tempfile::tempdir().unwrap();
    let app = app_on(dir.path(), RegistryConfig::default());
    let config = push_blob(&app, "r", b"{}").await;
    let layer = push_blob(&app, "r", b"layer").await;
    let m = image_manifest(&config, 2, &layer, 5);
    let r = send(
        &app,
        Method::PUT,
        "/v2/r/manifests/v1",
        &[("content-type", MT)],
        m.clone(),
    )
    .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    for _ in 0..3 {
        let r = send(
            &app,
            Method::GET,
            "/v2/r/manifests/v1",
            &[("accept", MT)],
            Body::empty(),
        )
        .await;
        assert_eq!(r.status, StatusCode::OK);
        assert_eq!(&r.body[..], &m[..]);
    }
    let d = Digest::sha256(&m);
    let hex = d.encoded();
    let bytes = dir
        .path()
        .join(format!("blobs/sha256/{}/{hex}/data", &hex[..2]));
    std::fs::remove_file(&bytes).unwrap_or_else(|e| panic!("{}: {e}", bytes.display()));
    let r = send(
        &app,
        Method::GET,
        "/v2/r/manifests/v1",
        &[("accept", MT)],
        Body::empty(),
    )
    .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{:?}", r.body);
    assert_eq!(r.code(), "MANIFEST_UNKNOWN");

    let r = send(
        &app,
        Method::PUT,
        "/v2/r/manifests/v1",
        &[("content-type", MT)],
        m.clone(),
    )
    .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    let r = send(
        &app,
        Method::GET,
        "/v2/r/manifests/v1",
        &[("accept", MT)],
        Body::empty(),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(&r.body[..], &m[..]);
}
