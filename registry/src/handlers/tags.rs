//! `GET /v2/<name>/tags/list` with `n`, `last` and a `Link` header.

use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::{Req, hv, pagination};
use crate::errors::{ApiError, ApiResult, Code};

/// Lists a repository's tags in lexical order.
pub(crate) async fn list(req: Req) -> ApiResult<Response> {
    let name = req.name().clone();
    let (n, last) = pagination(&req)?;
    let Some((tags, more)) = req
        .state
        .app()
        .repos
        .tags_page(&name, n, last.as_deref())
        .await?
    else {
        return Err(ApiError::new(
            Code::NameUnknown,
            format!("repository {name} is not known"),
        ));
    };
    let body = serde_json::json!({ "name": name.as_str(), "tags": tags });
    let mut resp = (StatusCode::OK, axum::Json(body)).into_response();
    if more && let (Some(n), Some(l)) = (n, tags.last()) {
        let link = format!("</v2/{name}/tags/list?n={n}&last={l}>; rel=\"next\"");
        resp.headers_mut().insert(header::LINK, hv(&link));
    }
    Ok(resp)
}
