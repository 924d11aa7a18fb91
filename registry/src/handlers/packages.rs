//! The package index extension (`crate::pkgindex`): `GET /v2/_rd/packages?name=GLOB
//! [&version=OP VERSION][&n=N][&last=REPO@DIGEST]` searches every repository the caller may
//! pull; `GET /v2/<name>/_rd/packages/<tag-or-digest>` lists one image's packages.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use validator::{Digest, Tag};

use super::Req;
use crate::errors::{ApiError, ApiResult, Code};
use crate::pkgindex::{self, Query};

/// Searches the package index.
pub(crate) async fn search(req: Req) -> ApiResult<Response> {
    let q = Query::from_params(
        req.param("name"),
        req.param("version"),
        req.param("n"),
        req.param("last"),
    )?;
    let found = pkgindex::search(&req.state.app().repos, req.access.as_ref(), &q).await?;
    Ok((StatusCode::OK, axum::Json(found)).into_response())
}

/// The indexed packages of one image, by tag or digest.
pub(crate) async fn of_image(req: Req, reference: &str) -> ApiResult<Response> {
    let name = req.name().clone();
    let repos = &req.state.app().repos;
    let unknown = || {
        ApiError::new(
            Code::ManifestUnknown,
            format!("manifest {reference} unknown in {name}"),
        )
    };
    let digest = if reference.contains(':') {
        let d = Digest::parse(reference)
            .map_err(|e| ApiError::new(Code::DigestInvalid, e.to_string()))?;
        repos.manifest_link(&name, &d).await?.ok_or_else(unknown)?;
        d
    } else {
        let t = Tag::parse(reference).map_err(|_| unknown())?;
        repos
            .resolve_tag_target(&name, &t)
            .await?
            .ok_or_else(unknown)?
            .digest
    };
    let found = pkgindex::packages_of(repos, &name, &digest).await?;
    Ok((StatusCode::OK, axum::Json(found)).into_response())
}
