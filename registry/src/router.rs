//! Every route of the registry in one function, [`router`], and the dispatcher that maps a
//! parsed `/v2/` path ([`crate::api::Route`]) and a method to one handler. The middleware stack
//! around them is built in [`crate::middleware::stack`].

use axum::Router;
use axum::body::Body;
use axum::extract::{RawQuery, Request, State};
use axum::http::Method;
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get};
use validator::Name;

use crate::api::Route;
use crate::auth;
use crate::errors::{ApiError, ApiResult, Code};
use crate::handlers::{self, Req};
use crate::middleware;
use crate::state::AppState;

/// Every route of the registry.
pub fn router(state: AppState) -> Router {
    // Access control runs on the API routes only, before their handlers read the body.
    let api = Router::new()
        .route("/v2", get(handlers::base::check))
        .route("/v2/", get(handlers::base::check))
        .route("/v2/{*rest}", any(dispatch))
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            auth::http::middleware,
        ))
        // Outside access control, so it decides on the repository really asked for.
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            mirror_namespace,
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
    if state.app().config.ui_enabled {
        r = r.merge(crate::ui::routes());
    }
    let r = r
        .route("/healthz", get(handlers::probes::healthz))
        .route("/readyz", get(handlers::probes::readyz))
        .route("/metrics", get(handlers::probes::metrics))
        .fallback(handlers::base::not_found);
    middleware::stack(r, &state).with_state(state)
}

/// containerd's mirror requests: `/v2/NAME/...?ns=HOST` is `/v2/PREFIX/REST/...` of the
/// `[[proxy]]` rule with an upstream at `HOST` (`REST`: `NAME` without that upstream's
/// repository prefix); an `ns` no rule serves is `404 NAME_UNKNOWN` naming it. Requests
/// without `ns` (or for `/v2/` itself) pass unchanged.
async fn mirror_namespace(
    State(state): State<AppState>,
    mut req: Request,
    next: axum::middleware::Next,
) -> Response {
    let Some(ns) = req.uri().query().and_then(|q| {
        form_urlencoded::parse(q.as_bytes())
            .find(|(k, _)| k == "ns")
            .map(|(_, v)| v.into_owned())
    }) else {
        return next.run(req).await;
    };
    let path = req.uri().path().to_owned();
    let Some((name, rest)) = path.strip_prefix("/v2/").and_then(|rest| {
        let name = Route::parse(rest)?.name()?.to_owned();
        Some((name, rest))
    }) else {
        return next.run(req).await;
    };
    let local = match state.app().proxy.as_ref() {
        Some(p) => p.local_name_for_namespace(&ns, &name),
        None => Err(format!(
            "ns={ns:?}: this registry has no [[proxy]] rules, so it mirrors no registry"
        )),
    };
    let local = match local {
        Ok(l) => l,
        Err(e) => {
            return ApiError::new(Code::NameUnknown, e)
                .with_reason()
                .into_response();
        }
    };
    let after = rest.strip_prefix(name.as_str()).unwrap_or(rest);
    let mut uri = format!("/v2/{local}{after}");
    if let Some(q) = req.uri().query() {
        uri.push('?');
        uri.push_str(q);
    }
    match uri.parse() {
        Ok(u) => *req.uri_mut() = u,
        Err(e) => {
            return ApiError::new(Code::NameInvalid, format!("{uri:?}: {e}")).into_response();
        }
    }
    next.run(req).await
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
    let peer = parts
        .extensions
        .get::<axum::extract::ConnectInfo<crate::ratelimit::PeerAddr>>()
        .map(|c| c.0.0);
    let r = Req {
        state,
        name,
        query,
        headers: parts.headers,
        body,
        head: method == Method::HEAD,
        access,
        peer,
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
        (PackageSearch, Method::GET) => handlers::packages::search(r).await,
        (SyncStatus, Method::GET) => handlers::sync::status(r).await,
        (Packages { reference, .. }, Method::GET) => {
            handlers::packages::of_image(r, &reference).await
        }
        (_, m) => Err(ApiError::new(
            Code::Unsupported,
            format!("method {m} is not supported on {path:?}"),
        )),
    }
}
