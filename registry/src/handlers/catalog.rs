//! `GET /v2/_catalog` with `n`, `last` and a `Link` header.

use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::{Req, hv, page, pagination};
use crate::errors::ApiResult;

/// Lists repositories.
pub(crate) async fn list(req: Req) -> ApiResult<Response> {
    let (n, last) = pagination(&req)?;
    let mut all = req.state.app().repos.catalog().await?;
    // With access control, the list holds only what the caller may pull, so names of other
    // repositories do not leak (see docs/auth.md).
    if let Some(access) = &req.access {
        all.retain(|r| access.lists(r));
    }
    let (repos, more) = page(all, n, last.as_deref());
    let body = serde_json::json!({ "repositories": repos });
    let mut resp = (StatusCode::OK, axum::Json(body)).into_response();
    if more && let (Some(n), Some(l)) = (n, repos.last()) {
        let link = format!(
            "</v2/_catalog?n={n}&last={}>; rel=\"next\"",
            form_urlencoded::byte_serialize(l.as_bytes()).collect::<String>()
        );
        resp.headers_mut().insert(header::LINK, hv(&link));
    }
    Ok(resp)
}
