//! The middleware stack around every route, built in one function ([`stack`]); access control
//! is not here but a route layer on the API routes (declared with them), so it runs only
//! on requests that name an endpoint.

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::api::Route;
use crate::ratelimit::{PeerAddr, client_ip};
use crate::state::AppState;

/// Wraps `routes` in the registry's middleware, innermost first: the rate limit, the API
/// version header, the request counter, and tracing outermost.
pub(crate) fn stack(routes: Router<AppState>, state: &AppState) -> Router<AppState> {
    routes
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            rate_limit,
        ))
        .layer(axum::middleware::map_response(api_version))
        .layer(axum::middleware::from_fn_with_state(state.clone(), count))
        .layer(tower_http::trace::TraceLayer::new_for_http())
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
async fn rate_limit(State(state): State<AppState>, req: Request, next: Next) -> Response {
    if let Some(limiter) = &state.app().limiter
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
async fn count(State(state): State<AppState>, req: Request, next: Next) -> Response {
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
    state.app().metrics.request(
        route,
        method.as_str(),
        resp.status().as_u16(),
        bytes_in,
        bytes_out,
    );
    resp
}
