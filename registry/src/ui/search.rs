//! The package search page (`/ui/search`), through the same query parser and search as
//! `GET /v2/_rd/packages`.

use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;

use super::{Viewer, answer, failed, html, pages, param, params};
use crate::pkgindex::{self, Query};
use crate::state::AppState;

/// `GET /ui/search?name=&version=&last=`: the package search form and its results.
pub(super) async fn search(
    State(state): State<AppState>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Response {
    let v = match Viewer::of(&state, &headers).await {
        Ok(v) => v,
        Err(r) => return r,
    };
    let p = params(query.as_deref());
    let (name, version) = (
        param(&p, "name").unwrap_or(""),
        param(&p, "version").unwrap_or(""),
    );
    if name.trim().is_empty() {
        let body = pages::search(name, version, None);
        return answer(StatusCode::OK, html::page("Package search", v.who(), &body));
    }
    // The API's own parser and search: the page finds what `/v2/_rd/packages` finds.
    let q: Query = match Query::from_params(Some(name), Some(version), None, param(&p, "last")) {
        Ok(q) => q,
        Err(e) => {
            let body = pages::search(name, version, Some(Err(&e.detail)));
            return answer(
                StatusCode::BAD_REQUEST,
                html::page("Package search", v.who(), &body),
            );
        }
    };
    match pkgindex::search(&state.app().repos, v.0.as_ref(), &q).await {
        Ok(found) => {
            let body = pages::search(name, version, Some(Ok(&found)));
            answer(StatusCode::OK, html::page("Package search", v.who(), &body))
        }
        Err(e) => failed(&v, e),
    }
}
