//! `GET /v2/<name>/referrers/<digest>` with the `artifactType` filter; in a pull-through
//! repository, merged with what its upstreams list ([`crate::proxy::Proxy::referrers`]).

use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::{Req, parse_digest};
use crate::errors::ApiResult;

/// The index of manifests in the repository whose subject is the digest (never 404).
pub(crate) async fn list(req: Req, digest: &str) -> ApiResult<Response> {
    let subject = parse_digest(digest)?;
    let name = req.name().clone();
    let mut manifests = req.state.app().repos.referrers(&name, &subject).await?;
    if let Some(proxy) = &req.state.app().proxy
        && let Some(merged) = proxy.referrers(&name, &subject, manifests.clone()).await
    {
        manifests = merged;
    }
    let filter = req.param("artifactType").map(str::to_owned);
    if let Some(t) = &filter {
        manifests.retain(|m| m.get("artifactType").and_then(|v| v.as_str()) == Some(t.as_str()));
    }
    let body = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": manifests,
    });
    let bytes = serde_json::to_vec(&body).map_err(crate::errors::ApiError::internal)?;
    let mut resp = (
        StatusCode::OK,
        [(
            header::CONTENT_TYPE,
            "application/vnd.oci.image.index.v1+json",
        )],
        bytes,
    )
        .into_response();
    if filter.is_some() {
        resp.headers_mut().insert(
            "oci-filters-applied",
            axum::http::HeaderValue::from_static("artifactType"),
        );
    }
    Ok(resp)
}
