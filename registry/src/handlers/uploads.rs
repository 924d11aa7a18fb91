//! Blob uploads: POST (start, single POST, mount), PATCH (chunked or streamed), PUT (close),
//! GET (status) and DELETE (cancel) on `/v2/<name>/blobs/uploads/...`.

use std::time::Instant;

use axum::body::Body;
use axum::http::{StatusCode, header};
use axum::response::Response;
use validator::Algorithm;

use super::{Req, hv, parse_digest};
use crate::auth::acl::Action;
use crate::errors::{ApiError, ApiResult, Code};
use crate::events::{Action as EventAction, Target};
use crate::upload::{ChunkRange, Upload, range_header};
use validator::Name;

fn upload_location(name: &Name, upload: &Upload) -> String {
    format!("/v2/{name}/blobs/uploads/{}", upload.id.as_hyphenated())
}

/// 202 (or 204) with the upload's Location, Range and id, and `OCI-Chunk-Min-Length` when the
/// store has a minimum (S3: the part size).
fn progress(
    min_chunk: Option<u64>,
    name: &Name,
    upload: &Upload,
    status: StatusCode,
) -> ApiResult<Response> {
    let mut b = Response::builder();
    if let Some(min) = min_chunk {
        b = b.header("oci-chunk-min-length", min);
    }
    b.status(status)
        .header(header::LOCATION, upload_location(name, upload))
        .header(header::RANGE, range_header(upload.state.offset))
        .header("docker-upload-uuid", upload.id.as_hyphenated().to_string())
        .header(header::CONTENT_LENGTH, 0)
        .body(Body::empty())
        .map_err(ApiError::internal)
}

/// 201 with the blob's Location and digest.
fn created(name: &Name, digest: &validator::Digest) -> ApiResult<Response> {
    Response::builder()
        .status(StatusCode::CREATED)
        .header(header::LOCATION, format!("/v2/{name}/blobs/{digest}"))
        .header("docker-content-digest", hv(digest.as_str()))
        .header(header::CONTENT_LENGTH, 0)
        .body(Body::empty())
        .map_err(ApiError::internal)
}

/// Records the push event of a blob just committed into `name`.
fn notify_push(
    req: &Req,
    name: &Name,
    d: &validator::Digest,
) -> impl std::future::Future<Output = ApiResult<()>> + Send + 'static {
    let event = req.event(EventAction::Push, "PUT");
    let repos = req.state.app().repos.clone();
    let mut target = super::blobs::blob_target(req, name, d, None);
    let (name, d) = (name.clone(), d.clone());
    async move {
        if !event.wanted() {
            return Ok(());
        }
        // The size is the link's: read only when an endpoint takes pushes.
        target.size = repos.blob_linked(&name, &d).await?;
        target.length = target.size;
        event.send(target).await
    }
}

/// `Content-Range: <start>-<end>` of a chunk (a `bytes ` prefix is tolerated).
fn chunk_range(req: &Req) -> ApiResult<Option<ChunkRange>> {
    let Some(v) = req.header("content-range") else {
        return Ok(None);
    };
    let s = v
        .trim()
        .trim_start_matches("bytes ")
        .trim_start_matches("bytes=");
    let s = s.split('/').next().unwrap_or(s);
    let parsed = s
        .split_once('-')
        .and_then(|(a, b)| Some((a.trim().parse().ok()?, b.trim().parse().ok()?)));
    match parsed {
        Some((start, end)) => Ok(Some(ChunkRange { start, end })),
        None => Err(ApiError::new(
            Code::RangeInvalid,
            format!("bad Content-Range {v:?}"),
        )),
    }
}

/// POST: start an upload, upload in one request (`?digest=`), or mount (`?mount=&from=`).
pub(crate) async fn start(mut req: Req) -> ApiResult<Response> {
    let name = req.name().clone();
    let repos = req.state.app().repos.clone();
    // With access control, a mount needs pull on its source; without that right (or without
    // a `from`, which would search every repository) it falls back to a plain upload, as the
    // spec allows, and reveals nothing about the source.
    let may_mount = match (&req.access, req.param("from")) {
        (None, _) => true,
        (Some(a), Some(from)) => a.may(from, Action::Pull),
        (Some(_), None) => false,
    };
    if let Some(mount) = req.param("mount").filter(|_| may_mount) {
        let d = parse_digest(mount)?;
        let from = match req.param("from") {
            Some(from) => Some(
                Name::parse(from).map_err(|e| ApiError::new(Code::NameInvalid, e.to_string()))?,
            ),
            None => None,
        };
        // Hold the blob first, so a collector cannot remove it between this check and the link.
        let held = repos.hold(&d).await?;
        let size = if !(held.data || repos.revive(&d, &held.epochs).await?) {
            None
        } else if let Some(from) = &from {
            // Any link of the source proves it has the blob (one of an earlier epoch too).
            repos.blob_linked(from, &d).await?
        } else {
            // No `from`: mount any blob the registry holds (automatic content discovery).
            repos.blob_stat(&d).await?.map(|m| m.size)
        };
        if let Some(size) = size {
            repos.link_blob(&name, &d, &held.epochs, size).await?;
            let target = Target {
                from_repository: from.as_ref().map(Name::to_string),
                ..super::blobs::blob_target(&req, &name, &d, Some(size))
            };
            req.notify(EventAction::Mount, "POST", target).await?;
            return created(&name, &d);
        }
    }
    let algorithm = match req.param("digest-algorithm") {
        None => None,
        Some(a) => Some(
            a.parse::<Algorithm>()
                .map_err(|e| ApiError::new(Code::DigestInvalid, e.to_string()))?,
        ),
    };
    if let Some(digest) = req.param("digest") {
        let d = parse_digest(digest)?;
        let len = req.content_length()?;
        let upload = repos.start_upload(&name, Some(d.algorithm())).await?;
        let id = upload.id;
        let started = Instant::now();
        let body = std::mem::take(&mut req.body).into_data_stream();
        if let Err(e) = repos
            .finish_upload(&name, upload, body, None, len, &d)
            .await
        {
            if let Ok(u) = repos.load_upload(&name, &id.to_string()).await {
                let _ = repos.cancel_upload(u).await;
            }
            return Err(e);
        }
        req.state.app().metrics.commit_duration(started.elapsed());
        notify_push(&req, &name, &d).await?;
        return created(&name, &d);
    }
    let upload = repos.start_upload(&name, algorithm).await?;
    progress(
        repos.store().min_chunk_length(),
        &name,
        &upload,
        StatusCode::ACCEPTED,
    )
}

/// PATCH: append a chunk (with `Content-Range`) or a stream (without).
pub(crate) async fn patch(req: Req, id: &str) -> ApiResult<Response> {
    let name = req.name().clone();
    let repos = req.state.app().repos.clone();
    let upload = repos.load_upload(&name, id).await?;
    let range = chunk_range(&req)?;
    let len = req.content_length()?;
    let started = Instant::now();
    let body = req.body.into_data_stream();
    let upload = repos.patch_upload(upload, body, range, len).await?;
    req.state.app().metrics.upload_duration(started.elapsed());
    progress(
        repos.store().min_chunk_length(),
        &name,
        &upload,
        StatusCode::ACCEPTED,
    )
}

/// PUT: close the upload with its digest, optionally carrying the last chunk.
pub(crate) async fn finish(mut req: Req, id: &str) -> ApiResult<Response> {
    let name = req.name().clone();
    let repos = req.state.app().repos.clone();
    let upload = repos.load_upload(&name, id).await?;
    let Some(digest) = req.param("digest") else {
        return Err(ApiError::new(
            Code::DigestInvalid,
            "closing an upload needs ?digest=",
        ));
    };
    let d = parse_digest(digest)?;
    let range = chunk_range(&req)?;
    let len = req.content_length()?;
    let started = Instant::now();
    let body = std::mem::take(&mut req.body).into_data_stream();
    repos
        .finish_upload(&name, upload, body, range, len, &d)
        .await?;
    req.state.app().metrics.commit_duration(started.elapsed());
    notify_push(&req, &name, &d).await?;
    created(&name, &d)
}

/// GET: where the upload stands.
pub(crate) async fn status(req: Req, id: &str) -> ApiResult<Response> {
    let name = req.name().clone();
    let repos = &req.state.app().repos;
    let upload = repos.load_upload(&name, id).await?;
    progress(
        repos.store().min_chunk_length(),
        &name,
        &upload,
        StatusCode::NO_CONTENT,
    )
}

/// DELETE: cancel the upload.
pub(crate) async fn cancel(req: Req, id: &str) -> ApiResult<Response> {
    let name = req.name().clone();
    let repos = &req.state.app().repos;
    let upload = repos.load_upload(&name, id).await?;
    repos.cancel_upload(upload).await?;
    Response::builder()
        .status(StatusCode::NO_CONTENT)
        .body(Body::empty())
        .map_err(ApiError::internal)
}
