//! `registry_client` authentication against the real registry over TCP behind an auth layer
//! written here (Basic, or Bearer with a token endpoint on its own port), and a blob "CDN" on
//! another port that the registry redirects to: challenges are answered once, tokens cached
//! per scope and renewed when they expire, wrong credentials fail with the registry and the 401
//! named, and credentials never reach the redirect target.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use bytes::Bytes;
use registry::storage::FsStore;
use registry::{AppState, RegistryConfig, router};
use registry_client::{Client, Credential, ErrorKind, Keychain, Reference, Retry};
use tokio::io::AsyncReadExt;
use validator::Digest;

struct Running {
    addr: String,
    _dir: Option<tempfile::TempDir>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn serve(app: Router, dir: Option<tempfile::TempDir>) -> Running {
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

/// Our registry with `wrap` applied to its router.
async fn registry(wrap: impl FnOnce(Router) -> Router) -> Running {
    let dir = tempfile::tempdir().unwrap();
    let store = FsStore::open(dir.path()).unwrap();
    let app = wrap(router(AppState::new(
        Arc::new(store),
        RegistryConfig::default(),
    )));
    serve(app, Some(dir)).await
}

fn client(keychain: Keychain) -> Client {
    Client::builder()
        .keychain(keychain)
        .retry(Retry {
            attempts: 3,
            base_delay: Duration::from_millis(10),
            max_delay: Duration::from_millis(50),
        })
        .build()
        .unwrap()
}

fn basic(user: &str, pw: &str) -> Credential {
    Credential::Basic {
        username: user.into(),
        password: pw.into(),
    }
}

/// What the auth layers saw.
#[derive(Default)]
struct Seen {
    /// Requests answered 401.
    challenged: AtomicUsize,
    /// Requests let through.
    passed: AtomicUsize,
    /// Every Authorization header value the CDN received.
    cdn_auth: Mutex<Vec<String>>,
}

/// Requires `Authorization: Basic alice:pw`, answering 401 with a Basic challenge otherwise.
fn basic_layer(seen: Arc<Seen>) -> impl FnOnce(Router) -> Router {
    move |r: Router| {
        r.layer(middleware::from_fn(move |req: Request, next: Next| {
            let seen = seen.clone();
            async move {
                let ok = req
                    .headers()
                    .get(header::AUTHORIZATION)
                    .is_some_and(|v| v == "Basic YWxpY2U6cHc="); // alice:pw
                if !ok {
                    seen.challenged.fetch_add(1, Ordering::SeqCst);
                    return (
                        StatusCode::UNAUTHORIZED,
                        [(header::WWW_AUTHENTICATE, "Basic realm=\"test\"")],
                        r#"{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}"#,
                    )
                        .into_response();
                }
                seen.passed.fetch_add(1, Ordering::SeqCst);
                next.run(req).await
            }
        }))
    }
}

async fn push_and_pull(c: &Client, host: &str) -> Result<(), registry_client::ClientError> {
    let r = Reference::parse(&format!("{host}/team/app:v1")).unwrap();
    let blob = Bytes::from(vec![7u8; 100_000]);
    let d = Digest::sha256(&blob);
    c.push_blob(host, r.name(), &d, blob.len() as u64, &blob[..])
        .await?;
    let mut rd = c.get_blob(host, r.name(), &d, blob.len() as u64).await?;
    let mut back = Vec::new();
    rd.read_to_end(&mut back).await.unwrap();
    assert_eq!(back, blob);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn basic_challenge_is_answered_once_then_sent_up_front() {
    let seen = Arc::new(Seen::default());
    let reg = registry(basic_layer(seen.clone())).await;
    let c = client(Keychain::empty().with_credential(&reg.addr, basic("alice", "pw")));
    push_and_pull(&c, &reg.addr).await.unwrap();
    // The first request learned the challenge; every later one carried the credentials.
    assert_eq!(seen.challenged.load(Ordering::SeqCst), 1);
    assert!(seen.passed.load(Ordering::SeqCst) >= 4);
    assert_eq!(c.token_fetches(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_or_missing_basic_credentials_fail_once_naming_the_registry() {
    let seen = Arc::new(Seen::default());
    let reg = registry(basic_layer(seen.clone())).await;
    let c = client(Keychain::empty().with_credential(&reg.addr, basic("alice", "wrong-pw")));
    let err = push_and_pull(&c, &reg.addr).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unauthorized);
    let msg = err.to_string();
    assert!(
        msg.starts_with(&format!("registry {}: 401 Unauthorized", reg.addr))
            && msg.contains("user \"alice\" (credentials from the command line) refused")
            && !msg.contains("wrong-pw"),
        "{msg}"
    );
    // Anonymous, then once with the credentials: no retry loop.
    assert_eq!(seen.challenged.load(Ordering::SeqCst), 2);

    let anon = client(Keychain::empty());
    let err = push_and_pull(&anon, &reg.addr).await.unwrap_err();
    assert!(err.to_string().contains("no credentials for"), "{err}");
    assert_eq!(seen.challenged.load(Ordering::SeqCst), 3);
}

/// A token endpoint and a registry layer that accepts only its tokens, for the scope asked.
struct TokenWorld {
    /// Tokens issued: token → (scopes granted, still valid).
    tokens: Mutex<HashMap<String, (Vec<String>, bool)>>,
    expires_in: u64,
    issued: AtomicUsize,
    challenged: AtomicUsize,
    /// Authorization headers the token endpoint received (to check what was sent to it).
    endpoint_auth: Mutex<Vec<String>>,
}

async fn token_endpoint(world: Arc<TokenWorld>) -> Running {
    let w = world.clone();
    let app = Router::new().route(
        "/token",
        get(move |uri: axum::http::Uri, headers: HeaderMap| {
            let w = w.clone();
            async move {
                let q: Vec<(String, String)> =
                    form_urlencoded::parse(uri.query().unwrap_or("").as_bytes())
                        .map(|(k, v)| (k.into_owned(), v.into_owned()))
                        .collect();
                let auth = headers
                    .get(header::AUTHORIZATION)
                    .map(|v| v.to_str().unwrap().to_owned())
                    .unwrap_or_default();
                w.endpoint_auth.lock().unwrap().push(auth.clone());
                if auth != "Basic YWxpY2U6cHc=" {
                    return (StatusCode::UNAUTHORIZED, "bad credentials").into_response();
                }
                assert!(q.contains(&("service".into(), "test-svc".into())), "{q:?}");
                let scopes: Vec<String> = q
                    .iter()
                    .filter(|(k, _)| k == "scope")
                    .map(|(_, v)| v.clone())
                    .collect();
                let n = w.issued.fetch_add(1, Ordering::SeqCst);
                let token = format!("tok-{n}");
                w.tokens
                    .lock()
                    .unwrap()
                    .insert(token.clone(), (scopes, true));
                axum::Json(serde_json::json!({"token": token, "expires_in": w.expires_in}))
                    .into_response()
            }
        }),
    );
    serve(app, None).await
}

/// The scope a registry request needs: `repository:<name>:pull` or `...:pull,push`.
fn needed_scope(req: &Request) -> String {
    let path = req.uri().path();
    let rest = path.strip_prefix("/v2/").unwrap_or("");
    let name = ["/blobs/", "/manifests/", "/tags/"]
        .iter()
        .find_map(|m| rest.split_once(m).map(|(n, _)| n))
        .unwrap_or("");
    let push = !matches!(
        *req.method(),
        axum::http::Method::GET | axum::http::Method::HEAD
    ) || path.contains("/uploads/");
    format!(
        "repository:{name}:{}",
        if push { "pull,push" } else { "pull" }
    )
}

fn bearer_layer(world: Arc<TokenWorld>, realm: String) -> impl FnOnce(Router) -> Router {
    move |r: Router| {
        r.layer(middleware::from_fn(move |req: Request, next: Next| {
            let (world, realm) = (world.clone(), realm.clone());
            async move {
                let scope = needed_scope(&req);
                let token = req
                    .headers()
                    .get(header::AUTHORIZATION)
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.strip_prefix("Bearer "))
                    .map(str::to_owned);
                let granted = token.as_ref().is_some_and(|t| {
                    world
                        .tokens
                        .lock()
                        .unwrap()
                        .get(t)
                        .is_some_and(|(scopes, valid)| *valid && scopes.contains(&scope))
                });
                if !granted {
                    world.challenged.fetch_add(1, Ordering::SeqCst);
                    let challenge =
                        format!("Bearer realm=\"{realm}\",service=\"test-svc\",scope=\"{scope}\"");
                    return (
                        StatusCode::UNAUTHORIZED,
                        [(header::WWW_AUTHENTICATE, challenge)],
                        "",
                    )
                        .into_response();
                }
                next.run(req).await
            }
        }))
    }
}

fn world(expires_in: u64) -> Arc<TokenWorld> {
    Arc::new(TokenWorld {
        tokens: Mutex::new(HashMap::new()),
        expires_in,
        issued: AtomicUsize::new(0),
        challenged: AtomicUsize::new(0),
        endpoint_auth: Mutex::new(Vec::new()),
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bearer_tokens_are_fetched_per_scope_cached_and_renewed() {
    let w = world(300);
    let issuer = token_endpoint(w.clone()).await;
    let reg = registry(bearer_layer(
        w.clone(),
        format!("http://{}/token", issuer.addr),
    ))
    .await;
    let c = client(Keychain::empty().with_credential(&reg.addr, basic("alice", "pw")));
    push_and_pull(&c, &reg.addr).await.unwrap();
    // One 401 to learn the challenge; then one token for pull,push (the push) and one for
    // pull (the pull), each reused for all the requests in its scope.
    assert_eq!(w.challenged.load(Ordering::SeqCst), 1);
    assert_eq!(w.issued.load(Ordering::SeqCst), 2);
    assert_eq!(c.token_fetches(), 2);
    push_and_pull(&c, &reg.addr).await.unwrap();
    assert_eq!(
        w.issued.load(Ordering::SeqCst),
        2,
        "cached tokens were not reused"
    );

    // The registry revokes every token: the next request gets a 401, the client fetches a
    // new token once and goes on.
    for (_, valid) in w.tokens.lock().unwrap().values_mut() {
        *valid = false;
    }
    push_and_pull(&c, &reg.addr).await.unwrap();
    assert_eq!(w.challenged.load(Ordering::SeqCst), 3);
    assert_eq!(w.issued.load(Ordering::SeqCst), 4);
    // Only the token endpoint saw the password, and only as Basic.
    assert!(
        w.endpoint_auth
            .lock()
            .unwrap()
            .iter()
            .all(|a| a == "Basic YWxpY2U6cHc=")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_token_is_renewed_before_use() {
    let w = world(1);
    let issuer = token_endpoint(w.clone()).await;
    let reg = registry(bearer_layer(
        w.clone(),
        format!("http://{}/token", issuer.addr),
    ))
    .await;
    let c = client(Keychain::empty().with_credential(&reg.addr, basic("alice", "pw")));
    let r = Reference::parse(&format!("{}/team/app:v1", reg.addr)).unwrap();
    let d = Digest::sha256(b"x");
    c.blob_exists(&reg.addr, r.name(), &d).await.unwrap();
    assert_eq!(
        (
            w.challenged.load(Ordering::SeqCst),
            w.issued.load(Ordering::SeqCst)
        ),
        (1, 1)
    );
    // The token lives 1 s (renewed at 0.9 s); after 1.5 s it is fetched again up front,
    // without another 401.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    c.blob_exists(&reg.addr, r.name(), &d).await.unwrap();
    assert_eq!(
        (
            w.challenged.load(Ordering::SeqCst),
            w.issued.load(Ordering::SeqCst)
        ),
        (1, 2)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_token_request_is_final_and_names_the_registry() {
    let w = world(300);
    let issuer = token_endpoint(w.clone()).await;
    let reg = registry(bearer_layer(
        w.clone(),
        format!("http://{}/token", issuer.addr),
    ))
    .await;
    let c = client(Keychain::empty().with_credential(&reg.addr, basic("alice", "nope")));
    let err = push_and_pull(&c, &reg.addr).await.unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.starts_with(&format!("registry {}: 401 Unauthorized", reg.addr))
            && msg.contains("token endpoint refused")
            && msg.contains(&issuer.addr),
        "{msg}"
    );
    assert_eq!(
        w.endpoint_auth.lock().unwrap().len(),
        1,
        "the token request was retried"
    );
}

/// A blob CDN on its own port: serves `blobs` by digest, records Authorization headers, and
/// answers 401 with a Basic challenge for digests in `deny`.
async fn cdn(seen: Arc<Seen>, blobs: HashMap<String, Bytes>, deny: Vec<String>) -> Running {
    let app = Router::new().route(
        "/b/{digest}",
        get(
            move |axum::extract::Path(digest): axum::extract::Path<String>, headers: HeaderMap| {
                let (seen, blobs, deny) = (seen.clone(), blobs.clone(), deny.clone());
                async move {
                    if let Some(a) = headers.get(header::AUTHORIZATION) {
                        seen.cdn_auth
                            .lock()
                            .unwrap()
                            .push(a.to_str().unwrap().to_owned());
                    }
                    if deny.contains(&digest) {
                        return (
                            StatusCode::UNAUTHORIZED,
                            [(header::WWW_AUTHENTICATE, "Basic realm=\"cdn\"")],
                        )
                            .into_response();
                    }
                    match blobs.get(&digest) {
                        Some(b) => Response::new(Body::from(b.clone())),
                        None => StatusCode::NOT_FOUND.into_response(),
                    }
                }
            },
        ),
    );
    serve(app, None).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_never_follow_a_redirect_to_another_host() {
    let seen = Arc::new(Seen::default());
    let ok_blob = Bytes::from_static(b"served by the cdn");
    let denied_blob = Bytes::from_static(b"the cdn wants credentials");
    let (ok_d, denied_d) = (Digest::sha256(&ok_blob), Digest::sha256(&denied_blob));
    let cdn = cdn(
        seen.clone(),
        HashMap::from([
            (ok_d.to_string(), ok_blob.clone()),
            (denied_d.to_string(), denied_blob.clone()),
        ]),
        vec![denied_d.to_string()],
    )
    .await;
    let cdn_addr = cdn.addr.clone();
    let seen2 = seen.clone();
    // Basic auth in front; blob GETs redirected to the CDN, as registries on S3 do.
    let reg = registry(move |r: Router| {
        let r = r.layer(middleware::from_fn(move |req: Request, next: Next| {
            let cdn_addr = cdn_addr.clone();
            async move {
                let path = req.uri().path().to_owned();
                if req.method() == axum::http::Method::GET
                    && let Some((_, digest)) = path.split_once("/blobs/")
                {
                    return (
                        StatusCode::TEMPORARY_REDIRECT,
                        [(header::LOCATION, format!("http://{cdn_addr}/b/{digest}"))],
                    )
                        .into_response();
                }
                next.run(req).await
            }
        }));
        basic_layer(seen2)(r)
    })
    .await;
    let c = client(Keychain::empty().with_credential(&reg.addr, basic("alice", "pw")));
    let name = Reference::parse(&format!("{}/team/app:v1", reg.addr))
        .unwrap()
        .name()
        .clone();
    let mut rd = c
        .get_blob(&reg.addr, &name, &ok_d, ok_blob.len() as u64)
        .await
        .unwrap();
    let mut back = Vec::new();
    rd.read_to_end(&mut back).await.unwrap();
    assert_eq!(back, ok_blob);
    // The CDN's own challenge is not answered with the registry's credentials.
    let err = c
        .get_blob(&reg.addr, &name, &denied_d, denied_blob.len() as u64)
        .await
        .err()
        .expect("the CDN refused");
    assert_eq!(err.kind(), ErrorKind::Unauthorized, "{err}");
    assert!(err.to_string().contains(&cdn.addr), "{err}");
    assert_eq!(*seen.cdn_auth.lock().unwrap(), Vec::<String>::new());
    assert!(seen.passed.load(Ordering::SeqCst) >= 2);
}
