//! The HTTP surface: [`router`] declares every route in one place, and [`Route`] splits a
//! `/v2/...` path from the right, because repository names may hold any number of `/`.

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::{RawQuery, Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get};

use crate::auth::{self, Auth};
use crate::errors::{ApiError, ApiResult, Code};
use crate::handlers::{self, Req};
use crate::metrics::Metrics;
use crate::ratelimit::{Limiter, PeerAddr, RateLimit, client_ip};
use crate::repo::Repos;
use crate::storage::{Instrumented, Key, Store};
use validator::Name;

/// Registry behaviour that handlers consult.
#[derive(Debug, Clone)]
pub struct RegistryConfig {
    /// Whether DELETE of manifests, tags and blobs is allowed (405 `UNSUPPORTED` otherwise).
    pub delete_enabled: bool,
    /// Largest manifest accepted on PUT (413 above it).
    pub max_manifest_bytes: u64,
    /// Access control; None: every request is allowed.
    pub auth: Option<Arc<Auth>>,
    /// Whether clients reach the registry over HTTPS (the default token realm uses it).
    pub https: bool,
    /// Per-client rate limit (429 `TOOMANYREQUESTS` above it); none by default.
    pub rate_limit: Option<RateLimit>,
}

impl Default for RegistryConfig {
    fn default() -> Self {
        RegistryConfig {
            delete_enabled: true,
            max_manifest_bytes: 4 << 20,
            auth: None,
            https: false,
            rate_limit: None,
        }
    }
}

/// Shared state of every request: the store and the configuration.
#[derive(Debug, Clone)]
pub struct AppState(Arc<App>);

/// What [`AppState`] holds.
#[derive(Debug)]
pub(crate) struct App {
    pub repos: Repos,
    pub config: RegistryConfig,
    pub metrics: Arc<Metrics>,
    limiter: Option<Limiter>,
}

impl AppState {
    /// State over `store` (wrapped in [`Instrumented`]) with `config`.
    pub fn new(store: Arc<dyn Store>, config: RegistryConfig) -> AppState {
        let metrics = Arc::new(Metrics::default());
        let store: Arc<dyn Store> = Arc::new(Instrumented::new(store, metrics.clone()));
        AppState(Arc::new(App {
            repos: Repos::new(store),
            limiter: config.rate_limit.map(Limiter::new),
            config,
            metrics,
        }))
    }

    /// The registry's metrics.
    pub fn metrics(&self) -> &Metrics {
        &self.0.metrics
    }

    pub(crate) fn app(&self) -> &App {
        &self.0
    }

    /// Runs one garbage collection over this registry's store and records it in the metrics.
    pub async fn collect_garbage(
        &self,
        opts: &crate::gc::GcOptions,
    ) -> Result<crate::gc::GcReport, crate::gc::GcError> {
        let r = crate::gc::collect(self.0.repos.store().clone(), opts).await;
        self.0.metrics.gc_run(r.as_ref().ok());
        r
    }

    /// Removes uploads untouched for `max_age`; returns how many objects went.
    pub async fn expire_uploads(&self, max_age: std::time::Duration) -> Result<usize, ApiError> {
        self.0.repos.expire_uploads(max_age).await
    }
}

/// A parsed `/v2/<...>` path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Route {
    /// `/v2/_catalog`
    Catalog,
    /// `/v2/<name>/blobs/<digest>`
    Blob { name: String, digest: String },
    /// `/v2/<name>/blobs/uploads/` and `/v2/<name>/blobs/uploads/<id>`
    Upload { name: String, id: Option<String> },
    /// `/v2/<name>/manifests/<reference>`
    Manifest { name: String, reference: String },
    /// `/v2/<name>/tags/list`
    Tags { name: String },
    /// `/v2/<name>/referrers/<digest>`
    Referrers { name: String, digest: String },
}

impl Route {
    /// Parses the path after `/v2/`; `None` when it names no endpoint.
    pub fn parse(rest: &str) -> Option<Route> {
        if rest == "_catalog" {
            return Some(Route::Catalog);
        }
        if let Some(name) = rest
            .strip_suffix("/blobs/uploads/")
            .or_else(|| rest.strip_suffix("/blobs/uploads"))
        {
            return Some(Route::Upload {
                name: name.to_owned(),
                id: None,
            });
        }
        let (head, last) = rest.rsplit_once('/')?;
        let (head2, kind) = head.rsplit_once('/')?;
        let name = head2.to_owned();
        let arg = last.to_owned();
        match kind {
            "uploads" => {
                let name = head2.strip_suffix("/blobs")?.to_owned();
                Some(Route::Upload {
                    name,
                    id: Some(arg),
                })
            }
            "blobs" => Some(Route::Blob { name, digest: arg }),
            "manifests" => Some(Route::Manifest {
                name,
                reference: arg,
            }),
            "tags" if last == "list" => Some(Route::Tags { name }),
            "referrers" => Some(Route::Referrers { name, digest: arg }),
            _ => None,
        }
    }

    /// A low-cardinality label for metrics.
    fn label(&self) -> &'static str {
        match self {
            Route::Catalog => "catalog",
            Route::Blob { .. } => "blob",
            Route::Upload { .. } => "upload",
            Route::Manifest { .. } => "manifest",
            Route::Tags { .. } => "tags",
            Route::Referrers { .. } => "referrers",
        }
    }

    fn name(&self) -> Option<&str> {
        match self {
            Route::Catalog => None,
            Route::Blob { name, .. }
            | Route::Upload { name, .. }
            | Route::Manifest { name, .. }
            | Route::Tags { name }
            | Route::Referrers { name, .. } => Some(name),
        }
    }
}

/// Every route of the registry.
pub fn router(state: AppState) -> Router {
    // Access control runs on the API routes only, before their handlers read the body.
    let api = Router::new()
        .route("/v2", get(base))
        .route("/v2/", get(base))
        .route("/v2/{*rest}", any(dispatch))
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            auth::http::middleware,
        ));
    let mut r = Router::new().merge(api);
    if state
        .app()
        .config
        .auth
        .as_ref()
        .is_some_and(|a| a.issues_tokens())
    {
        r = r.route(
            "/token",
            get(auth::http::token_get).post(auth::http::token_post),
        );
    }
    r.route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .fallback(not_found)
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            rate_limit,
        ))
        .layer(axum::middleware::map_response(api_version))
        .layer(axum::middleware::from_fn_with_state(state.clone(), count))
        .layer(tower_http::trace::TraceLayer::new_for_http())
        .with_state(state)
}

async fn api_version(mut resp: Response) -> Response {
    resp.headers_mut().insert(
        "docker-distribution-api-version",
        HeaderValue::from_static("registry/2.0"),
    );
    resp
}

/// Refuses requests over the client's rate (when `[rate_limit]` is set). Health probes and
/// metrics are never limited: a load balancer polling them must not see the registry as down.
async fn rate_limit(
    State(state): State<AppState>,
    req: Request,
    next: axum::middleware::Next,
) -> Response {
    if let Some(limiter) = &state.0.limiter
        && !matches!(req.uri().path(), "/healthz" | "/readyz" | "/metrics")
        && let Err(e) = limiter.check(client_ip(
            req.extensions()
                .get::<axum::extract::ConnectInfo<PeerAddr>>(),
        ))
    {
        return e.into_response();
    }
    next.run(req).await
}

/// Counts every answered request by route, method and status, with bytes in and out.
async fn count(
    State(state): State<AppState>,
    req: Request,
    next: axum::middleware::Next,
) -> Response {
    let path = req.uri().path();
    let route = match path.strip_prefix("/v2/") {
        Some("") => "base",
        Some(rest) => Route::parse(rest).map_or("unknown", |r| r.label()),
        None if path == "/v2" => "base",
        None => match path {
            "/healthz" => "healthz",
            "/readyz" => "readyz",
            "/metrics" => "metrics",
            "/token" => "token",
            _ => "unknown",
        },
    };
    let method = req.method().clone();
    let len = |h: &axum::http::HeaderMap| {
        h.get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    let bytes_in = len(req.headers());
    let resp = next.run(req).await;
    let bytes_out = if method == Method::HEAD {
        0
    } else {
        len(resp.headers())
    };
    state.0.metrics.request(
        route,
        method.as_str(),
        resp.status().as_u16(),
        bytes_in,
        bytes_out,
    );
    resp
}

/// Ready when the store answers.
async fn readyz(State(state): State<AppState>) -> Response {
    let probe = Key::new("catalog").expect("a valid key");
    match state.0.repos.store().stat(&probe).await {
        Ok(_) => (StatusCode::OK, "ok").into_response(),
        Err(e) if e.is_not_found() => (StatusCode::OK, "ok").into_response(),
        Err(e) => {
            tracing::warn!(error = %e, "readiness probe failed");
            (StatusCode::SERVICE_UNAVAILABLE, "store unavailable").into_response()
        }
    }
}

async fn metrics(State(state): State<AppState>) -> Response {
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        state.0.metrics.render(),
    )
        .into_response()
}

async fn base() -> Response {
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        "{}",
    )
        .into_response()
}

async fn not_found() -> ApiError {
    ApiError::new(Code::NameUnknown, "no such endpoint")
}

/// Splits the path, checks the name, and calls the handler for the route and method.
async fn dispatch(
    State(state): State<AppState>,
    RawQuery(query): RawQuery,
    req: Request,
) -> Response {
    match dispatch_inner(state, query, req).await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    }
}

async fn dispatch_inner(
    state: AppState,
    query: Option<String>,
    req: Request<Body>,
) -> ApiResult<Response> {
    let path = req.uri().path().to_owned();
    let rest = path.strip_prefix("/v2/").unwrap_or("");
    let Some(route) = Route::parse(rest) else {
        return Err(ApiError::new(
            Code::NameUnknown,
            format!("no endpoint at {path:?}"),
        ));
    };
    let name = match route.name() {
        Some(n) => {
            Some(Name::parse(n).map_err(|e| ApiError::new(Code::NameInvalid, e.to_string()))?)
        }
        None => None,
    };
    let query: Vec<(String, String)> = query
        .as_deref()
        .map(|q| form_urlencoded::parse(q.as_bytes()).into_owned().collect())
        .unwrap_or_default();
    let (mut parts, body) = req.into_parts();
    let method = parts.method.clone();
    let access = parts.extensions.remove::<auth::Access>();
    let r = Req {
        state,
        name,
        query,
        headers: parts.headers,
        body,
        head: method == Method::HEAD,
        access,
    };
    use Route::*;
    match (route, method) {
        (Catalog, Method::GET) => handlers::catalog::list(r).await,
        (Blob { digest, .. }, Method::GET | Method::HEAD) => handlers::blobs::get(r, &digest).await,
        (Blob { digest, .. }, Method::DELETE) => handlers::blobs::delete(r, &digest).await,
        (Upload { id: None, .. }, Method::POST) => handlers::uploads::start(r).await,
        (Upload { id: Some(id), .. }, Method::PATCH) => handlers::uploads::patch(r, &id).await,
        (Upload { id: Some(id), .. }, Method::PUT) => handlers::uploads::finish(r, &id).await,
        (Upload { id: Some(id), .. }, Method::GET) => handlers::uploads::status(r, &id).await,
        (Upload { id: Some(id), .. }, Method::DELETE) => handlers::uploads::cancel(r, &id).await,
        (Manifest { reference, .. }, Method::GET | Method::HEAD) => {
            handlers::manifests::get(r, &reference).await
        }
        (Manifest { reference, .. }, Method::PUT) => handlers::manifests::put(r, &reference).await,
        (Manifest { reference, .. }, Method::DELETE) => {
            handlers::manifests::delete(r, &reference).await
        }
        (Tags { .. }, Method::GET) => handlers::tags::list(r).await,
        (Referrers { digest, .. }, Method::GET) => handlers::referrers::list(r, &digest).await,
        (_, m) => Err(ApiError::new(
            Code::Unsupported,
            format!("method {m} is not supported on {path:?}"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_split_from_the_right() {
        let s = |x: &str| x.to_owned();
        let cases = [
            ("_catalog", Some(Route::Catalog)),
            (
                "a/b/blobs/sha256:x",
                Some(Route::Blob {
                    name: s("a/b"),
                    digest: s("sha256:x"),
                }),
            ),
            (
                "a/blobs/uploads/",
                Some(Route::Upload {
                    name: s("a"),
                    id: None,
                }),
            ),
            (
                "a/blobs/uploads/u-1",
                Some(Route::Upload {
                    name: s("a"),
                    id: Some(s("u-1")),
                }),
            ),
            (
                "x/manifests/y/manifests/latest",
                Some(Route::Manifest {
                    name: s("x/manifests/y"),
                    reference: s("latest"),
                }),
            ),
            ("a/b/tags/list", Some(Route::Tags { name: s("a/b") })),
            (
                "r/referrers/sha256:x",
                Some(Route::Referrers {
                    name: s("r"),
                    digest: s("sha256:x"),
                }),
            ),
            ("a/tags/other", None),
            ("a", None),
            ("a/unknown/x", None),
        ];
        for (path, want) in cases {
            assert_eq!(Route::parse(path), want, "{path}");
        }
    }
}
