//! Access control end to end through `api::router`: every endpoint × (no credentials, wrong
//! credentials, a valid user without the right, a valid user with the right), once with Basic
//! auth and once with bearer tokens of the built-in issuer; the store is compared before and
//! after every refused request, and no refused answer carries content. Then the token rules
//! (scope, expiry, signature, audience, external issuers), anonymous pull, the mount fallback,
//! and the official OCI conformance suite over a real socket with credentials on.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderMap, Method, Request, StatusCode};
use base64::Engine as _;
use bytes::Bytes;
use http_body_util::BodyExt;
use registry::auth::Auth;
use registry::storage::FsStore;
use registry::{AppState, RegistryConfig, router};
use tower::ServiceExt;
use validator::Digest;

const SERVICE: &str = "test-registry";

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/auth")
        .join(name)
}

struct Env {
    store: tempfile::TempDir,
    _conf: tempfile::TempDir,
    app: Router,
    tokens: bool,
    auth: Arc<Auth>,
}

/// Users: `root` may do anything anywhere; `alice` everything in `lib/**` and `src/*`; `bob`
/// pull and push in `bob/*` only. `extra` is appended to the `[auth]` table.
fn setup(tokens: bool, extra: &str) -> Env {
    let store = tempfile::tempdir().unwrap();
    let conf = tempfile::tempdir().unwrap();
    let mut htpasswd = String::from("# test users\n");
    for (u, p) in [
        ("root", "root-pw"),
        ("alice", "alice-pw"),
        ("bob", "bob-pw"),
    ] {
        htpasswd.push_str(&format!("{u}:{}\n", bcrypt::hash(p, 4).unwrap()));
    }
    let users = conf.path().join("htpasswd");
    std::fs::write(&users, htpasswd).unwrap();
    let mut toml = format!(
        r#"
[auth]
realm = "test"
htpasswd = "{}"
{extra}
[[auth.acl]]
subjects = ["root"]
repositories = ["**"]
actions = ["*"]

[[auth.acl]]
subjects = ["alice"]
repositories = ["lib/**", "src/*"]
actions = ["pull", "push", "delete"]

[[auth.acl]]
subjects = ["bob"]
repositories = ["bob/*"]
actions = ["pull", "push"]
"#,
        users.display()
    );
    if tokens {
        toml.push_str(&format!(
            r#"
[auth.token]
service = "{SERVICE}"
signing_key = "{}"
public_key = "{}"

[[auth.token.trusted]]
issuer = "external"
public_key = "{}"
"#,
            data("token-key.pem").display(),
            data("token-pub.pem").display(),
            data("external-pub.pem").display(),
        ));
    }
    let file = conf.path().join("registry.toml");
    std::fs::write(&file, toml).unwrap();
    let c = registry::ServeConfig::load_with_env(Some(&file), &|_| None).unwrap();
    let auth = Arc::new(Auth::load(c.auth.as_ref().expect("an [auth] table")).unwrap());
    let app = router(AppState::new(
        Arc::new(FsStore::open(store.path()).unwrap()),
        RegistryConfig {
            auth: Some(auth.clone()),
            ..RegistryConfig::default()
        },
    ));
    Env {
        store,
        _conf: conf,
        app,
        tokens,
        auth,
    }
}

struct Resp {
    status: StatusCode,
    headers: HeaderMap,
    body: Bytes,
}

impl Resp {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(|v| v.to_str().unwrap())
    }

    fn code(&self) -> String {
        let v: serde_json::Value = serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("error body is not JSON ({e}): {:?}", self.body));
        v["errors"][0]["code"].as_str().unwrap().to_owned()
    }

    fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap()
    }
}

async fn send(app: &Router, method: Method, uri: &str, auth: Option<&str>, body: Vec<u8>) -> Resp {
    let mut req = Request::builder()
        .method(method)
        .uri(uri)
        .header("host", "reg.test");
    if let Some(a) = auth {
        req = req.header("authorization", a);
    }
    if !body.is_empty() {
        req = req.header("content-length", body.len()).header(
            "content-type",
            if uri.contains("/manifests/") {
                "application/vnd.oci.image.manifest.v1+json"
            } else {
                "application/octet-stream"
            },
        );
    }
    let resp = app
        .clone()
        .oneshot(req.body(Body::from(body)).unwrap())
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

fn basic(user: &str, password: &str) -> String {
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"))
    )
}

/// Every file of the store with a digest of its content.
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, Digest> {
    fn walk(dir: &Path, out: &mut BTreeMap<PathBuf, Digest>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(&p, out);
            } else {
                out.insert(p.clone(), Digest::sha256(&std::fs::read(&p).unwrap()));
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, &mut out);
    out
}

/// Marks every byte of content the tests push, so a refused answer can be searched for it.
const SECRET: &str = "SECRET-CONTENT";

struct Seed {
    layer: Digest,
    manifest: Vec<u8>,
    manifest_digest: Digest,
    mount_source: Digest,
}

async fn push_blob(app: &Router, who: &str, repo: &str, bytes: &[u8]) -> Digest {
    let d = Digest::sha256(bytes);
    let r = send(
        app,
        Method::POST,
        &format!("/v2/{repo}/blobs/uploads/?digest={d}"),
        Some(who),
        bytes.to_vec(),
    )
    .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    d
}

/// `lib/app:v1` (config, one layer) and a blob in `src/base`, pushed by root; again before every
/// case, so deletes of an earlier case do not change what a later one sees.
async fn seed(app: &Router) -> Seed {
    let root = basic("root", "root-pw");
    let layer_bytes = format!("{SECRET} layer");
    let layer = push_blob(app, &root, "lib/app", layer_bytes.as_bytes()).await;
    let config = push_blob(app, &root, "lib/app", b"{}").await;
    let manifest = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": config.to_string(), "size": 2},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": layer.to_string(), "size": layer_bytes.len()}],
        "annotations": {"note": SECRET},
    }))
    .unwrap();
    let r = send(
        app,
        Method::PUT,
        "/v2/lib/app/manifests/v1",
        Some(&root),
        manifest.clone(),
    )
    .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    let mount_source =
        push_blob(app, &root, "src/base", format!("{SECRET} mount").as_bytes()).await;
    Seed {
        layer,
        manifest_digest: Digest::sha256(&manifest),
        manifest,
        mount_source,
    }
}

/// Starts an upload in `lib/app` as root; its path.
async fn upload(app: &Router) -> String {
    let r = send(
        app,
        Method::POST,
        "/v2/lib/app/blobs/uploads/",
        Some(&basic("root", "root-pw")),
        Vec::new(),
    )
    .await;
    assert_eq!(r.status, StatusCode::ACCEPTED);
    r.header("location").unwrap().to_owned()
}

/// The endpoints of `api::router`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Endpoint {
    Base,
    Catalog,
    TagsList,
    ManifestGet,
    ManifestHead,
    ManifestPut,
    ManifestDelete,
    BlobGet,
    BlobHead,
    BlobDelete,
    UploadStart,
    UploadMonolithic,
    UploadMount,
    UploadPatch,
    UploadPut,
    UploadStatus,
    UploadCancel,
    Referrers,
}

const ENDPOINTS: [Endpoint; 18] = [
    Endpoint::Base,
    Endpoint::Catalog,
    Endpoint::TagsList,
    Endpoint::ManifestGet,
    Endpoint::ManifestHead,
    Endpoint::ManifestPut,
    Endpoint::ManifestDelete,
    Endpoint::BlobGet,
    Endpoint::BlobHead,
    Endpoint::BlobDelete,
    Endpoint::UploadStart,
    Endpoint::UploadMonolithic,
    Endpoint::UploadMount,
    Endpoint::UploadPatch,
    Endpoint::UploadPut,
    Endpoint::UploadStatus,
    Endpoint::UploadCancel,
    Endpoint::Referrers,
];

struct Call {
    method: Method,
    uri: String,
    body: Vec<u8>,
    /// Status for a caller with the right.
    ok: StatusCode,
    /// Scope a bearer challenge names (None for `/v2/`).
    scope: Option<&'static str>,
}

async fn call(app: &Router, s: &Seed, e: Endpoint) -> Call {
    let lib = "/v2/lib/app";
    let new = format!("{SECRET} new blob").into_bytes();
    let new_d = Digest::sha256(&new);
    let (method, uri, body, ok, scope) = match e {
        Endpoint::Base => (Method::GET, "/v2/".to_owned(), vec![], StatusCode::OK, None),
        Endpoint::Catalog => (
            Method::GET,
            "/v2/_catalog".to_owned(),
            vec![],
            StatusCode::OK,
            Some("registry:catalog:*"),
        ),
        Endpoint::TagsList => (
            Method::GET,
            format!("{lib}/tags/list"),
            vec![],
            StatusCode::OK,
            Some("repository:lib/app:pull"),
        ),
        Endpoint::ManifestGet | Endpoint::ManifestHead => (
            if e == Endpoint::ManifestGet {
                Method::GET
            } else {
                Method::HEAD
            },
            format!("{lib}/manifests/v1"),
            vec![],
            StatusCode::OK,
            Some("repository:lib/app:pull"),
        ),
        Endpoint::ManifestPut => (
            Method::PUT,
            format!("{lib}/manifests/v2"),
            s.manifest.clone(),
            StatusCode::CREATED,
            Some("repository:lib/app:pull,push"),
        ),
        Endpoint::ManifestDelete => (
            Method::DELETE,
            format!("{lib}/manifests/{}", s.manifest_digest),
            vec![],
            StatusCode::ACCEPTED,
            Some("repository:lib/app:delete"),
        ),
        Endpoint::BlobGet | Endpoint::BlobHead => (
            if e == Endpoint::BlobGet {
                Method::GET
            } else {
                Method::HEAD
            },
            format!("{lib}/blobs/{}", s.layer),
            vec![],
            StatusCode::OK,
            Some("repository:lib/app:pull"),
        ),
        Endpoint::BlobDelete => (
            Method::DELETE,
            format!("{lib}/blobs/{}", s.layer),
            vec![],
            StatusCode::ACCEPTED,
            Some("repository:lib/app:delete"),
        ),
        Endpoint::UploadStart => (
            Method::POST,
            format!("{lib}/blobs/uploads/"),
            vec![],
            StatusCode::ACCEPTED,
            Some("repository:lib/app:pull,push"),
        ),
        Endpoint::UploadMonolithic => (
            Method::POST,
            format!("{lib}/blobs/uploads/?digest={new_d}"),
            new,
            StatusCode::CREATED,
            Some("repository:lib/app:pull,push"),
        ),
        Endpoint::UploadMount => (
            Method::POST,
            format!(
                "{lib}/blobs/uploads/?mount={}&from=src/base",
                s.mount_source
            ),
            vec![],
            StatusCode::CREATED,
            Some("repository:lib/app:pull,push repository:src/base:pull"),
        ),
        Endpoint::UploadPatch => (
            Method::PATCH,
            upload(app).await,
            new,
            StatusCode::ACCEPTED,
            Some("repository:lib/app:pull,push"),
        ),
        Endpoint::UploadPut => (
            Method::PUT,
            format!("{}?digest={new_d}", upload(app).await),
            new,
            StatusCode::CREATED,
            Some("repository:lib/app:pull,push"),
        ),
        Endpoint::UploadStatus => (
            Method::GET,
            upload(app).await,
            vec![],
            StatusCode::NO_CONTENT,
            Some("repository:lib/app:pull,push"),
        ),
        Endpoint::UploadCancel => (
            Method::DELETE,
            upload(app).await,
            vec![],
            StatusCode::NO_CONTENT,
            Some("repository:lib/app:pull,push"),
        ),
        Endpoint::Referrers => (
            Method::GET,
            format!("{lib}/referrers/{}", s.manifest_digest),
            vec![],
            StatusCode::OK,
            Some("repository:lib/app:pull"),
        ),
    };
    Call {
        method,
        uri,
        body,
        ok,
        scope,
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cred {
    None,
    Wrong,
    NoRight,
    Right,
}

/// A bearer token from the built-in endpoint, as a client gets it after a challenge.
async fn token(app: &Router, who: Option<(&str, &str)>, scope: Option<&str>) -> String {
    let mut uri = format!("/token?service={SERVICE}");
    if let Some(s) = scope {
        uri.push_str("&scope=");
        uri.push_str(&form_urlencoded::byte_serialize(s.as_bytes()).collect::<String>());
    }
    let auth = who.map(|(u, p)| basic(u, p));
    let r = send(app, Method::GET, &uri, auth.as_deref(), vec![]).await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    let v = r.json();
    assert_eq!(v["token"], v["access_token"]);
    assert!(v["expires_in"].as_u64().unwrap() > 0 && v["issued_at"].is_string());
    format!("Bearer {}", v["token"].as_str().unwrap())
}

/// A token signed with a key the registry does not trust for its issuer.
fn forged_token() -> String {
    let key =
        jsonwebtoken::EncodingKey::from_rsa_pem(&std::fs::read(data("external-key.pem")).unwrap())
            .unwrap();
    let now = jsonwebtoken::get_current_timestamp();
    let claims = serde_json::json!({
        "iss": "rdctl-registry", "sub": "alice", "aud": SERVICE, "exp": now + 300, "nbf": now - 5, "iat": now,
        "access": [{"type": "repository", "name": "lib/app", "actions": ["pull", "push", "delete"]},
                   {"type": "registry", "name": "catalog", "actions": ["*"]}],
    });
    let t = jsonwebtoken::encode(
        &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::RS256),
        &claims,
        &key,
    )
    .unwrap();
    format!("Bearer {t}")
}

async fn authorization(env: &Env, cred: Cred, scope: Option<&str>) -> Option<String> {
    let (user, pw) = match cred {
        Cred::None => return None,
        Cred::Wrong if env.tokens => return Some(forged_token()),
        Cred::Wrong => ("alice", "not-alice-pw"),
        Cred::NoRight => ("bob", "bob-pw"),
        Cred::Right => ("alice", "alice-pw"),
    };
    Some(if env.tokens {
        token(&env.app, Some((user, pw)), scope).await
    } else {
        basic(user, pw)
    })
}

async fn matrix(tokens: bool) {
    let env = setup(tokens, "");
    // Without an anonymous rule `/v2/` answers anonymous callers 401 in both modes, which
    // docker follows: nothing to warn about at start.
    assert_eq!(env.auth.start_hint(), None);
    let app = &env.app;
    for e in ENDPOINTS {
        for cred in [Cred::None, Cred::Wrong, Cred::NoRight, Cred::Right] {
            let seed = seed(app).await;
            let c = call(app, &seed, e).await;
            let auth = authorization(&env, cred, c.scope).await;
            let before = snapshot(env.store.path());
            let r = send(
                app,
                c.method.clone(),
                &c.uri,
                auth.as_deref(),
                c.body.clone(),
            )
            .await;
            let what = format!("{e:?} {cred:?} (tokens: {tokens}): {} {}", c.method, c.uri);
            let refused = match (cred, e) {
                (Cred::Right, _) | (Cred::NoRight, Endpoint::Base | Endpoint::Catalog) => {
                    assert_eq!(r.status, c.ok, "{what}: {:?}", r.body);
                    assert!(r.header("www-authenticate").is_none(), "{what}");
                    false
                }
                (Cred::None | Cred::Wrong, _) => {
                    assert_eq!(r.status, StatusCode::UNAUTHORIZED, "{what}");
                    let challenge = r.header("www-authenticate").expect("a challenge");
                    if tokens {
                        assert!(
                            challenge.starts_with(
                                "Bearer realm=\"http://reg.test/token\",service=\"test-registry\""
                            ),
                            "{what}: {challenge}"
                        );
                        match c.scope {
                            Some(s) => assert!(
                                challenge.contains(&format!("scope=\"{s}\"")),
                                "{what}: {challenge}"
                            ),
                            None => assert!(!challenge.contains("scope="), "{what}: {challenge}"),
                        }
                        assert_eq!(
                            challenge.contains("error=\"invalid_token\""),
                            cred == Cred::Wrong,
                            "{what}: {challenge}"
                        );
                    } else {
                        assert_eq!(
                            challenge, "Basic realm=\"test\",charset=\"UTF-8\"",
                            "{what}"
                        );
                    }
                    if c.method != Method::HEAD {
                        assert_eq!(r.code(), "UNAUTHORIZED", "{what}");
                    }
                    true
                }
                (Cred::NoRight, _) => {
                    assert_eq!(r.status, StatusCode::FORBIDDEN, "{what}: {:?}", r.body);
                    assert!(r.header("www-authenticate").is_none(), "{what}");
                    if c.method != Method::HEAD {
                        assert_eq!(r.code(), "DENIED", "{what}");
                    }
                    true
                }
            };
            if e == Endpoint::Catalog && r.status == StatusCode::OK {
                let repos = r.json()["repositories"].clone();
                let want: &[&str] = if cred == Cred::Right {
                    &["lib/app", "src/base"]
                } else {
                    &[]
                };
                assert_eq!(
                    repos,
                    serde_json::json!(want),
                    "{what}: the catalog lists what the caller may pull"
                );
            }
            if refused {
                assert_eq!(
                    before,
                    snapshot(env.store.path()),
                    "{what}: the store changed"
                );
                let text = String::from_utf8_lossy(&r.body);
                assert!(
                    !text.contains(SECRET),
                    "{what}: content in a refused answer: {text}"
                );
                for h in [
                    "docker-content-digest",
                    "location",
                    "range",
                    "docker-upload-uuid",
                ] {
                    assert!(r.header(h).is_none(), "{what}: {h} in a refused answer");
                }
            }
        }
    }
}

#[tokio::test]
async fn every_endpoint_by_every_caller_with_basic_auth() {
    matrix(false).await;
}

#[tokio::test]
async fn every_endpoint_by_every_caller_with_bearer_tokens() {
    matrix(true).await;
}

fn claims(iss: &str, aud: &str, exp_in: i64, access: serde_json::Value) -> serde_json::Value {
    let now = jsonwebtoken::get_current_timestamp() as i64;
    serde_json::json!({
        "iss": iss, "sub": "alice", "aud": aud, "exp": now + exp_in, "nbf": now - 10, "iat": now - 10,
        "jti": "test", "access": access,
    })
}

fn sign(key: &str, alg: jsonwebtoken::Algorithm, claims: &serde_json::Value) -> String {
    let pem = std::fs::read(data(key)).unwrap();
    let key = match alg {
        jsonwebtoken::Algorithm::ES256 => jsonwebtoken::EncodingKey::from_ec_pem(&pem),
        _ => jsonwebtoken::EncodingKey::from_rsa_pem(&pem),
    }
    .unwrap();
    let t = jsonwebtoken::encode(&jsonwebtoken::Header::new(alg), claims, &key).unwrap();
    format!("Bearer {t}")
}

#[tokio::test]
async fn tokens_hold_only_for_their_scope_issuer_audience_and_lifetime() {
    let env = setup(true, "");
    let app = &env.app;
    let _ = seed(app).await;
    let get = |auth: String, uri: &'static str| {
        let app = app.clone();
        async move { send(&app, Method::GET, uri, Some(&auth), vec![]).await }
    };
    let manifest = "/v2/lib/app/manifests/v1";
    let pull_lib =
        serde_json::json!([{"type": "repository", "name": "lib/app", "actions": ["pull"]}]);

    // A token for lib/app works there and nowhere else; alice may pull src/base, so the answer
    // there is a challenge for the right scope, not a denial.
    let t = token(
        app,
        Some(("alice", "alice-pw")),
        Some("repository:lib/app:pull"),
    )
    .await;
    assert_eq!(get(t.clone(), manifest).await.status, StatusCode::OK);
    let r = get(t.clone(), "/v2/src/base/tags/list").await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
    let challenge = r.header("www-authenticate").unwrap();
    assert!(
        challenge.contains("scope=\"repository:src/base:pull\"")
            && challenge.contains("error=\"insufficient_scope\""),
        "{challenge}"
    );
    // Pull only: no push, no delete with it.
    let r = send(
        app,
        Method::DELETE,
        "/v2/lib/app/manifests/v1",
        Some(&t),
        vec![],
    )
    .await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED, "{:?}", r.body);

    // Bob asks for lib/app and gets a token that grants nothing there: 403.
    let t = token(
        app,
        Some(("bob", "bob-pw")),
        Some("repository:lib/app:pull,push"),
    )
    .await;
    assert_eq!(get(t, manifest).await.status, StatusCode::FORBIDDEN);

    // The built-in key, but expired, for another audience, or tampered with: refused.
    let good = claims("rdctl-registry", SERVICE, 300, pull_lib.clone());
    assert_eq!(
        get(
            sign("token-key.pem", jsonwebtoken::Algorithm::ES256, &good),
            manifest
        )
        .await
        .status,
        StatusCode::OK
    );
    for (what, c) in [
        (
            "expired",
            claims("rdctl-registry", SERVICE, -60, pull_lib.clone()),
        ),
        (
            "other audience",
            claims("rdctl-registry", "other-registry", 300, pull_lib.clone()),
        ),
        (
            "unknown issuer",
            claims("someone", SERVICE, 300, pull_lib.clone()),
        ),
    ] {
        let r = get(
            sign("token-key.pem", jsonwebtoken::Algorithm::ES256, &c),
            manifest,
        )
        .await;
        assert_eq!(r.status, StatusCode::UNAUTHORIZED, "{what}");
        assert!(
            r.header("www-authenticate")
                .unwrap()
                .contains("error=\"invalid_token\""),
            "{what}"
        );
        assert_eq!(r.code(), "UNAUTHORIZED");
    }
    let t = sign("token-key.pem", jsonwebtoken::Algorithm::ES256, &good);
    let (head, sig) = t.rsplit_once('.').unwrap();
    // Another payload under the old signature, and a changed signature.
    let parts: Vec<&str> = head.split('.').collect();
    let wider = claims(
        "rdctl-registry",
        SERVICE,
        300,
        serde_json::json!([{"type": "repository", "name": "lib/app", "actions": ["pull", "push", "delete"]}]),
    );
    let payload = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .encode(serde_json::to_vec(&wider).unwrap());
    let swapped = format!("{}.{payload}.{sig}", parts[0]);
    let mut flipped = sig.as_bytes().to_vec();
    flipped[10] = if flipped[10] == b'A' { b'B' } else { b'A' };
    let flipped = format!("{head}.{}", String::from_utf8(flipped).unwrap());
    for (what, t) in [("payload swapped", swapped), ("signature changed", flipped)] {
        let r = get(t, manifest).await;
        assert_eq!(r.status, StatusCode::UNAUTHORIZED, "{what}");
    }

    // An external issuer's token verifies with its own key; with our issuer's name it does not.
    let ext = claims("external", SERVICE, 300, pull_lib.clone());
    assert_eq!(
        get(
            sign("external-key.pem", jsonwebtoken::Algorithm::RS256, &ext),
            manifest
        )
        .await
        .status,
        StatusCode::OK
    );
    let r = get(
        sign("external-key.pem", jsonwebtoken::Algorithm::RS256, &ext),
        "/v2/src/base/tags/list",
    )
    .await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);

    // The token endpoint: wrong password, other service, anonymous, OAuth2 form.
    let r = send(
        app,
        Method::GET,
        &format!("/token?service={SERVICE}&scope=repository:lib/app:pull"),
        Some(&basic("alice", "nope")),
        vec![],
    )
    .await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
    assert!(
        r.header("www-authenticate")
            .unwrap()
            .starts_with("Basic realm=\"test\"")
    );
    assert!(
        !r.body.windows(3).any(|w| w == b"eyJ"),
        "a token in a refused answer"
    );
    let r = send(
        app,
        Method::GET,
        "/token?service=other",
        Some(&basic("alice", "alice-pw")),
        vec![],
    )
    .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    let anon = token(app, None, Some("repository:lib/app:pull")).await;
    let r = get(anon, manifest).await;
    assert_eq!(
        r.status,
        StatusCode::UNAUTHORIZED,
        "anonymous callers have no rule here"
    );
    let form = format!(
        "grant_type=password&username=alice&password=alice-pw&service={SERVICE}&scope=repository%3Alib%2Fapp%3Apull"
    );
    let mut req = Request::builder()
        .method(Method::POST)
        .uri("/token")
        .header("content-type", "application/x-www-form-urlencoded");
    req = req.header("host", "reg.test");
    let resp = app
        .clone()
        .oneshot(req.body(Body::from(form.clone())).unwrap())
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let v: serde_json::Value =
        serde_json::from_slice(&resp.into_body().collect().await.unwrap().to_bytes()).unwrap();
    assert_eq!(v["scope"], "repository:lib/app:pull");
    let t = format!("Bearer {}", v["access_token"].as_str().unwrap());
    assert_eq!(get(t, manifest).await.status, StatusCode::OK);

    // A wrong password on the form: 401 with the OAuth error body and, as on every 401
    // (RFC 7235), a challenge.
    let resp = app
        .clone()
        .oneshot(
            Request::builder()
                .method(Method::POST)
                .uri("/token")
                .header("content-type", "application/x-www-form-urlencoded")
                .header("host", "reg.test")
                .body(Body::from(form.replace("alice-pw", "wrong")))
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::UNAUTHORIZED);
    let challenge = resp
        .headers()
        .get("www-authenticate")
        .expect("a 401 carries WWW-Authenticate")
        .to_str()
        .unwrap()
        .to_owned();
    assert!(challenge.starts_with("Basic realm="), "{challenge}");
    let v: serde_json::Value =
        serde_json::from_slice(&resp.into_body().collect().await.unwrap().to_bytes()).unwrap();
    assert_eq!(v["error"], "invalid_grant");

    // The token endpoint's answers are counted under a route of their own.
    let m = send(app, Method::GET, "/metrics", None, vec![]).await;
    let text = String::from_utf8_lossy(&m.body);
    for line in [
        r#"registry_http_requests_total{route="token",method="POST",status="200"} 1"#,
        r#"registry_http_requests_total{route="token",method="POST",status="401"} 1"#,
        r#"registry_http_requests_total{route="token",method="GET",status="401"} 1"#,
    ] {
        assert!(text.contains(line), "no {line} in\n{text}");
    }
}

#[tokio::test]
async fn anonymous_pull_and_the_mount_fallback() {
    let env = setup(
        false,
        "[[auth.acl]]\nsubjects = [\"anonymous\"]\nrepositories = [\"lib/*\"]\nactions = [\"pull\"]\n",
    );
    let app = &env.app;
    let s = seed(app).await;
    let secret = push_blob(
        app,
        &basic("root", "root-pw"),
        "secret/x",
        format!("{SECRET} private").as_bytes(),
    )
    .await;
    // Anonymous: /v2/, the catalog (what anonymous callers may pull) and pulls of lib/*.
    assert_eq!(
        send(app, Method::GET, "/v2/", None, vec![]).await.status,
        StatusCode::OK
    );
    let r = send(app, Method::GET, "/v2/_catalog", None, vec![]).await;
    assert_eq!(r.json()["repositories"], serde_json::json!(["lib/app"]));
    let r = send(app, Method::GET, "/v2/lib/app/manifests/v1", None, vec![]).await;
    assert_eq!(r.status, StatusCode::OK);
    // No push, and nothing of src/base; a wrong password is refused, not taken as anonymous.
    let r = send(
        app,
        Method::POST,
        "/v2/lib/app/blobs/uploads/",
        None,
        vec![],
    )
    .await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
    let r = send(app, Method::GET, "/v2/src/base/tags/list", None, vec![]).await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
    let r = send(
        app,
        Method::GET,
        "/v2/lib/app/manifests/v1",
        Some(&basic("alice", "x")),
        vec![],
    )
    .await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
    // Alice may not read secret/x: mounting from it starts a plain upload and links nothing.
    let alice = basic("alice", "alice-pw");
    let r = send(
        app,
        Method::POST,
        &format!("/v2/lib/app/blobs/uploads/?mount={secret}&from=secret/x"),
        Some(&alice),
        vec![],
    )
    .await;
    assert_eq!(r.status, StatusCode::ACCEPTED, "{:?}", r.body);
    let r = send(
        app,
        Method::HEAD,
        &format!("/v2/lib/app/blobs/{secret}"),
        Some(&alice),
        vec![],
    )
    .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    // Without `from`, no search through other repositories either.
    let r = send(
        app,
        Method::POST,
        &format!("/v2/lib/app/blobs/uploads/?mount={secret}"),
        Some(&alice),
        vec![],
    )
    .await;
    assert_eq!(r.status, StatusCode::ACCEPTED);
    // From a repository she may pull, the mount happens.
    let r = send(
        app,
        Method::POST,
        &format!(
            "/v2/lib/app/blobs/uploads/?mount={}&from=src/base",
            s.mount_source
        ),
        Some(&alice),
        vec![],
    )
    .await;
    assert_eq!(r.status, StatusCode::CREATED);
}

/// Where anonymous callers may pull, an anonymous `GET /v2/` carries the challenge: with
/// Basic auth on a 200 (containers/image clients authenticate only after a challenge on that
/// ping, and docker's anonymous pulls need the 200), with tokens on a 401 as Docker Hub's
/// (docker reads challenges only from a 401 there; anonymous callers then take an anonymous
/// token, which opens it). The empty Basic credential containers/image clients send when they
/// have none (`Basic Og==`) is anonymous. Only the Basic configuration is reported at start as
/// one where docker cannot log in.
#[tokio::test]
async fn anonymous_ping_carries_the_challenge_and_an_empty_basic_credential_is_anonymous() {
    for tokens in [false, true] {
        let env = setup(
            tokens,
            "[[auth.acl]]\nsubjects = [\"anonymous\"]\nrepositories = [\"lib/*\"]\nactions = [\"pull\"]\n",
        );
        let app = &env.app;
        seed(app).await;
        let r = send(app, Method::GET, "/v2/", None, vec![]).await;
        let (status, expected) = if tokens {
            (
                StatusCode::UNAUTHORIZED,
                format!("Bearer realm=\"http://reg.test/token\",service=\"{SERVICE}\""),
            )
        } else {
            (
                StatusCode::OK,
                "Basic realm=\"test\",charset=\"UTF-8\"".to_owned(),
            )
        };
        assert_eq!(r.status, status, "tokens {tokens}");
        assert_eq!(r.header("www-authenticate"), Some(expected.as_str()));
        let hint = env.auth.start_hint();
        if tokens {
            assert_eq!(hint, None);
            // What docker does next: an anonymous token without a scope opens `/v2/`.
            let r = send(
                app,
                Method::GET,
                &format!("/token?service={SERVICE}"),
                None,
                vec![],
            )
            .await;
            assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
            let bearer = format!("Bearer {}", r.json()["token"].as_str().unwrap());
            let r = send(app, Method::GET, "/v2/", Some(&bearer), vec![]).await;
            assert_eq!(r.status, StatusCode::OK);
            assert_eq!(r.header("www-authenticate"), None);
        } else {
            let hint = hint.expect("a start hint for docker");
            assert!(
                hint.contains("docker") && hint.contains("[auth.token]"),
                "{hint}"
            );
        }
        // Callers with credentials get no challenge on their 200.
        let r = send(
            app,
            Method::GET,
            "/v2/",
            Some(&basic("alice", "alice-pw")),
            vec![],
        )
        .await;
        assert_eq!(r.status, StatusCode::OK);
        assert_eq!(r.header("www-authenticate"), None);
        // Other anonymous 200s carry none either.
        let r = send(app, Method::GET, "/v2/lib/app/manifests/v1", None, vec![]).await;
        assert_eq!(r.status, StatusCode::OK);
        assert_eq!(r.header("www-authenticate"), None);

        let empty = basic("", "");
        assert_eq!(empty, "Basic Og==");
        let r = send(
            app,
            Method::GET,
            "/v2/lib/app/manifests/v1",
            Some(&empty),
            vec![],
        )
        .await;
        assert_eq!(r.status, StatusCode::OK, "tokens {tokens}: {:?}", r.body);
        let r = send(
            app,
            Method::POST,
            "/v2/lib/app/blobs/uploads/",
            Some(&empty),
            vec![],
        )
        .await;
        assert_eq!(r.status, StatusCode::UNAUTHORIZED);
        assert!(r.header("www-authenticate").is_some());
        let r = send(
            app,
            Method::GET,
            "/v2/src/base/tags/list",
            Some(&empty),
            vec![],
        )
        .await;
        assert_eq!(r.status, StatusCode::UNAUTHORIZED);
        // Only both empty: a user with an empty password, or a password without a user, is a
        // wrong credential.
        for half in [basic("alice", ""), basic("", "alice-pw")] {
            let r = send(
                app,
                Method::GET,
                "/v2/lib/app/manifests/v1",
                Some(&half),
                vec![],
            )
            .await;
            assert_eq!(r.status, StatusCode::UNAUTHORIZED, "{half}");
        }
        if tokens {
            // The token endpoint reads it as anonymous too: a token for what anonymous may do.
            let r = send(
                app,
                Method::GET,
                &format!("/token?service={SERVICE}&scope=repository:lib/app:pull,push"),
                Some(&empty),
                vec![],
            )
            .await;
            assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
            let bearer = format!("Bearer {}", r.json()["token"].as_str().unwrap());
            let r = send(
                app,
                Method::GET,
                "/v2/lib/app/manifests/v1",
                Some(&bearer),
                vec![],
            )
            .await;
            assert_eq!(r.status, StatusCode::OK);
            let r = send(
                app,
                Method::POST,
                "/v2/lib/app/blobs/uploads/",
                Some(&bearer),
                vec![],
            )
            .await;
            assert_eq!(r.status, StatusCode::UNAUTHORIZED);
        }
    }
}

#[test]
fn bad_auth_settings_name_the_key_or_line() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("r.toml");
    let load = |text: &str| {
        std::fs::write(&file, text).unwrap();
        registry::ServeConfig::load_with_env(Some(&file), &|_| None)
    };
    let chain = |e: &dyn std::error::Error| {
        let mut s = e.to_string();
        let mut c = e.source();
        while let Some(x) = c {
            s.push_str(": ");
            s.push_str(&x.to_string());
            c = x.source();
        }
        s
    };
    for (text, want) in [
        (
            "[auth]\n[[auth.acl]]\nsubjects = [\"group:ops\"]\nrepositories = [\"a\"]\nactions = [\"pull\"]\n",
            "auth.acl[0].subjects[0]",
        ),
        (
            "[auth]\n[[auth.acl]]\nsubjects = [\"a\"]\nrepositories = [\"a\"]\nactions = [\"write\"]\n",
            "auth.acl[0].actions[0]",
        ),
        ("[auth.token]\nservice = \"s\"\n", "auth.token"),
        ("[auth.token]\nsigning_key = \"k\"\n", "auth.token.service"),
        ("[auth]\nbogus = 1\n", "bogus"),
    ] {
        let e = load(text).unwrap_err();
        assert!(chain(&e).contains(want), "{text}: {}", chain(&e));
    }
    // Files are checked when the server starts: a non-bcrypt hash names file and line, a
    // public key that does not match the signing key is refused.
    let users = dir.path().join("htpasswd");
    std::fs::write(&users, "# x\nalice:$apr1$abc$def\n").unwrap();
    let c = load(&format!("[auth]\nhtpasswd = \"{}\"\n", users.display())).unwrap();
    let e = Auth::load(c.auth.as_ref().unwrap()).unwrap_err();
    assert_eq!(
        e.to_string().split(": ").next().unwrap(),
        format!("{}:2", users.display())
    );
    let c = load(&format!(
        "[auth.token]\nservice = \"s\"\nsigning_key = \"{}\"\npublic_key = \"{}\"\n",
        data("token-key.pem").display(),
        data("external-pub.pem").display()
    ))
    .unwrap();
    let e = Auth::load(c.auth.as_ref().unwrap()).unwrap_err();
    assert!(e.to_string().contains("auth.token.public_key"), "{e}");
}

/// Runs the official conformance suite (`.tools/bin/conformance.test`, see
/// tests/registry_e2e.rs) against `app` served on a loopback socket with `user`/`password`.
/// The suite's client (reggie) answers a Basic challenge with the credentials and a Bearer
/// challenge by fetching a token from the realm with them, so the same run covers both flows.
/// Returns how many requests went to `/token` and how many to `/v2/` carried Basic credentials.
async fn conformance(app: Router, results: &str) -> (usize, usize) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let token_requests = Arc::new(AtomicUsize::new(0));
    let basic_requests = Arc::new(AtomicUsize::new(0));
    let app = app.layer(axum::middleware::from_fn({
        let (t, b) = (token_requests.clone(), basic_requests.clone());
        move |req: axum::extract::Request, next: axum::middleware::Next| {
            let (t, b) = (t.clone(), b.clone());
            async move {
                let path = req.uri().path();
                if path == "/token" {
                    t.fetch_add(1, Ordering::Relaxed);
                } else if path.starts_with("/v2")
                    && req
                        .headers()
                        .get("authorization")
                        .is_some_and(|v| v.as_bytes().starts_with(b"Basic "))
                {
                    b.fetch_add(1, Ordering::Relaxed);
                }
                next.run(req).await
            }
        }
    }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move { axum::serve(listener, app).await });
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_owned();
    let results = root.join("target").join(results);
    let _ = std::fs::remove_dir_all(&results);
    std::fs::create_dir_all(&results).unwrap();
    let suite = root.join(".tools/bin/conformance.test");
    let out = tokio::task::spawn_blocking({
        let results = results.clone();
        move || {
            std::process::Command::new(&suite)
                .current_dir(&results)
                .env("OCI_ROOT_URL", format!("http://{addr}"))
                .env("OCI_USERNAME", "alice")
                .env("OCI_PASSWORD", "alice-pw")
                .env("OCI_NAMESPACE", "lib/conformance/repo1")
                .env("OCI_CROSSMOUNT_NAMESPACE", "lib/conformance/repo2")
                .env("OCI_TEST_PULL", "1")
                .env("OCI_TEST_PUSH", "1")
                .env("OCI_TEST_CONTENT_DISCOVERY", "1")
                .env("OCI_TEST_CONTENT_MANAGEMENT", "1")
                .env("OCI_VERSION", "1.1")
                .env("OCI_DATA_SHA512", "true")
                .env("OCI_API_BLOBS_UPLOAD_CANCEL", "true")
                .env("OCI_API_BLOBS_DIGEST_HEADER", "true")
                .env("OCI_API_MANIFESTS_DIGEST_HEADER", "true")
                .env("OCI_API_MANIFESTS_TAG_PARAM", "true")
                .env("OCI_RESULTS_DIR", &results)
                .env("OCI_LOG", "warn")
                .output()
                .unwrap_or_else(|e| panic!("run {}: {e}", suite.display()))
        }
    })
    .await
    .unwrap();
    server.abort();
    let tail = |b: &[u8]| {
        let s = String::from_utf8_lossy(b);
        s.chars()
            .rev()
            .take(6000)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect::<String>()
    };
    let junit = std::fs::read_to_string(results.join("junit.xml")).unwrap_or_else(|e| {
        panic!(
            "no junit.xml ({e}):\n{}\n{}",
            tail(&out.stdout),
            tail(&out.stderr)
        )
    });
    let count = |name: &str| -> u64 {
        let suite = &junit[junit.find("<testsuite ").unwrap()..];
        let suite = &suite[..suite.find('>').unwrap()];
        let key = format!(" {name}=\"");
        suite.find(&key).map_or(0, |i| {
            let v = &suite[i + key.len()..];
            v[..v.find('"').unwrap()].parse().unwrap()
        })
    };
    let (tests, failures, errors) = (count("tests"), count("failures"), count("errors"));
    eprintln!(
        "OCI conformance with auth ({results:?}): {tests} tests, {failures} failures, {errors} errors"
    );
    assert!(
        out.status.success() && failures == 0 && errors == 0 && tests > 500,
        "conformance failed: {tests} tests, {failures} failures, {errors} errors\n{}\n{}",
        tail(&out.stdout),
        tail(&out.stderr)
    );
    (
        token_requests.load(Ordering::Relaxed),
        basic_requests.load(Ordering::Relaxed),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_suite_passes_with_basic_auth() {
    let env = setup(false, "");
    let (tokens, basic) = conformance(env.app.clone(), "auth-conformance-basic").await;
    assert!(
        tokens == 0 && basic > 500,
        "{tokens} token requests, {basic} with Basic"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_suite_passes_with_the_token_flow() {
    // The token realm is derived from the Host the suite sends, so no port is configured.
    let env = setup(true, "");
    let (tokens, basic) = conformance(env.app.clone(), "auth-conformance-token").await;
    // Every API request went with a bearer token from the built-in endpoint.
    assert!(
        tokens > 0 && basic == 0,
        "{tokens} token requests, {basic} with Basic"
    );
}
