//! `GET /v2/_catalog` with `n`, `last` and a `Link` header.

use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::{Req, hv, pagination};
use crate::errors::ApiResult;

/// Lists repositories.
pub(crate) async fn list(req: Req) -> ApiResult<Response> {
    let (n, last) = pagination(&req)?;
    // With access control, the list holds only what the caller may pull, so names of other
    // repositories do not leak (see docs/auth.md).
    let access = req.access.as_ref();
    let (repos, more) = req
        .state
        .app()
        .repos
        .catalog_page(n, last.as_deref(), |r| access.is_none_or(|a| a.lists(r)))
        .await?;
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
