//! `GET`/`HEAD`/`DELETE /v2/<name>/blobs/<digest>`, with `Range` (206/416).

use axum::body::Body;
use axum::http::{StatusCode, header};
use axum::response::Response;

use super::{Req, hv, parse_digest};
use crate::errors::{ApiError, ApiResult, Code};
use crate::events::{Action, Target};
use crate::storage::layout;
use validator::{Digest, Name};

/// A satisfiable byte range `start..=end`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ByteRange {
    pub start: u64,
    pub end: u64,
}

/// Parses a single-range `Range: bytes=...` header against an object of `size` bytes.
/// `Ok(None)`: serve the whole object (no header, or a form we ignore as RFC 9110 allows).
pub(crate) fn parse_range(value: &str, size: u64) -> Result<Option<ByteRange>, ()> {
    let Some(spec) = value.trim().strip_prefix("bytes=") else {
        return Ok(None);
    };
    if spec.contains(',') {
        return Ok(None);
    }
    let (a, b) = spec.trim().split_once('-').ok_or(())?;
    let (a, b) = (a.trim(), b.trim());
    let parse = |s: &str| s.parse::<u64>().map_err(|_| ());
    let range = if a.is_empty() {
        // Suffix: the last b bytes.
        let n = parse(b)?;
        if n == 0 || size == 0 {
            return Err(());
        }
        ByteRange {
            start: size.saturating_sub(n),
            end: size - 1,
        }
    } else {
        let start = parse(a)?;
        let end = if b.is_empty() {
            size.checked_sub(1).ok_or(())?
        } else {
            parse(b)?.min(size.saturating_sub(1))
        };
        if start >= size || (!b.is_empty() && parse(b)? < start) {
            return Err(());
        }
        ByteRange { start, end }
    };
    Ok(Some(range))
}

/// GET or HEAD a blob.
pub(crate) async fn get(req: Req, digest: &str) -> ApiResult<Response> {
    let d = parse_digest(digest)?;
    let name = req.name().clone();
    let repos = &req.state.app().repos;
    let unknown = || ApiError::new(Code::BlobUnknown, format!("blob {d} is not in {name}"));
    let linked_size = match repos.blob_linked(&name, &d).await? {
        Some(size) => size,
        None => {
            let Some(proxy) = &req.state.app().proxy else {
                return Err(unknown());
            };
            // A proxied repository fetches it: the first whole GET streams it, the rest wait.
            let whole_get = !req.head && req.header("range").is_none();
            if let Some(r) = proxy.blob(repos, &name, &d, whole_get).await? {
                return Ok(r);
            }
            match repos.blob_linked(&name, &d).await? {
                Some(size) => size,
                None => return Err(unknown()),
            }
        }
    };
    #[cfg(feature = "s3")]
    if !req.head
        && let Some(redirect) = req.state.app().config.blob_redirect.clone()
    {
        let url = store_location(&redirect, repos, &name, &d, linked_size).await?;
        let event = req.event(Action::Pull, "GET");
        if event.wanted() {
            event
                .send(blob_target(&req, &name, &d, Some(linked_size)))
                .await?;
        }
        return Response::builder()
            .status(StatusCode::TEMPORARY_REDIRECT)
            .header(
                header::LOCATION,
                header::HeaderValue::from_str(&url).map_err(ApiError::internal)?,
            )
            .header("docker-content-digest", d.as_str())
            .header(header::CONTENT_LENGTH, 0)
            .body(Body::empty())
            .map_err(ApiError::internal);
    }
    let (key, meta) = linked_blob_stat(repos, &name, &d, req.head).await?;
    // Free to check (both were read anyway): bytes of another size than was pushed are
    // corrupt, and are never served. Same-size damage is scrub's to find (see `crate::scrub`).
    if meta.size != linked_size {
        tracing::error!(digest = %d, repository = %name, stored = meta.size, pushed = linked_size, "blob bytes have another size than was pushed; not served (run rdctl registry scrub)");
        return Err(unknown());
    }
    let size = meta.size;
    let range = match req.header("range") {
        None => None,
        Some(v) => parse_range(v, size).map_err(|()| {
            ApiError::new(
                Code::RangeInvalid,
                format!("range {v:?} not satisfiable for {size} bytes"),
            )
            .with_header(header::CONTENT_RANGE, hv(&format!("bytes */{size}")))
        })?,
    };
    let mut b = Response::builder()
        .header(header::CONTENT_TYPE, "application/octet-stream")
        .header("docker-content-digest", d.as_str())
        .header(header::ACCEPT_RANGES, "bytes");
    let (start, len) = match range {
        Some(r) => {
            b = b.status(StatusCode::PARTIAL_CONTENT).header(
                header::CONTENT_RANGE,
                format!("bytes {}-{}/{size}", r.start, r.end),
            );
            (r.start, r.end - r.start + 1)
        }
        None => (0, size),
    };
    b = b.header(header::CONTENT_LENGTH, len);
    if req.head {
        return b.body(Body::empty()).map_err(ApiError::internal);
    }
    let (_, body) = repos.store().read_chunks(&key, start, len).await?;
    let event = req.event(Action::Pull, "GET");
    if event.wanted() {
        event.send(blob_target(&req, &name, &d, Some(size))).await?;
    }
    b.body(Body::from_stream(body)).map_err(ApiError::internal)
}

/// The presigned URL of a blob's bytes in the S3 store, for a GET answered with
/// `307 Temporary Redirect` (`s3_redirect`) after the same checks as a GET the registry
/// answers itself: the caller may pull (the request got here), `name` links the blob, and the
/// stored bytes have the pushed size. The client sends its `Range`, if any, to the URL, and
/// the store answers it. Missing bytes are handled as in [`linked_blob_stat`].
#[cfg(feature = "s3")]
async fn store_location(
    redirect: &crate::storage::BlobRedirect,
    repos: &crate::repo::Repos,
    name: &Name,
    d: &Digest,
    linked_size: u64,
) -> ApiResult<String> {
    let mut miss = 0;
    loop {
        let key = match repos.blob_find(d).await? {
            Some((key, _)) => key,
            None => layout::blob_data(d),
        };
        match redirect.location(&key).await {
            Ok((meta, url)) => {
                if meta.size != linked_size {
                    tracing::error!(digest = %d, repository = %name, stored = meta.size, pushed = linked_size, "blob bytes have another size than was pushed; not served (run rdctl registry scrub)");
                    return Err(ApiError::new(
                        Code::BlobUnknown,
                        format!("blob {d} is not in {name}"),
                    ));
                }
                return Ok(url);
            }
            Err(e) if e.is_not_found() => {}
            Err(e) => return Err(e.into()),
        }
        if let Some(e) = bytes_missing(repos, name, d, false, miss).await? {
            return Err(e);
        }
        miss += 1;
    }
}

/// How long a linked blob whose bytes read as missing waits before each read again: about
/// 2.5 s in all.
const REREAD_WAITS_MS: [u64; 4] = [100, 300, 700, 1400];

/// The bytes of a blob that `name` links. The registry leaves a link without bytes behind in
/// one case only: a scrub quarantined the bytes as corrupt, and its record says so; that blob
/// is unknown until it is pushed again (404). Otherwise bytes are committed before they are
/// linked and a collector removes the links before the bytes, so a miss is read again for
/// about 2.5 s: under filer faults SeaweedFS has answered 404 for committed content that the
/// next reads found (`docs/s3.md`, "A seventh run failed"). Bytes still missing after that
/// are a store fault (a lagging or failing store, or bytes lost): a GET answers `503
/// UNAVAILABLE` with `Retry-After`, which clients retry, where a 404 would tell them an
/// acknowledged push is gone for good. A HEAD answers 404: clients HEAD a blob before they
/// push it, and the upload that follows repairs lost bytes.
async fn linked_blob_stat(
    repos: &crate::repo::Repos,
    name: &Name,
    d: &Digest,
    head: bool,
) -> ApiResult<(crate::storage::Key, crate::storage::ObjectMeta)> {
    let mut miss = 0;
    loop {
        if let Some(found) = repos.blob_find(d).await? {
            return Ok(found);
        }
        if let Some(e) = bytes_missing(repos, name, d, head, miss).await? {
            return Err(e);
        }
        miss += 1;
    }
}

/// Miss number `miss` (from 0) of a linked blob's bytes (see [`linked_blob_stat`]): the error
/// to answer with, or `None` after waiting to read again. The first miss checks for a scrub's
/// quarantine record.
async fn bytes_missing(
    repos: &crate::repo::Repos,
    name: &Name,
    d: &Digest,
    head: bool,
    miss: usize,
) -> ApiResult<Option<ApiError>> {
    if miss == 0 {
        match repos.store().stat(&layout::quarantine_record(d)).await {
            Ok(_) => {
                return Ok(Some(ApiError::new(
                    Code::BlobUnknown,
                    format!(
                        "blob {d} is not in {name}: a scrub found its bytes corrupt and set them aside; push it again"
                    ),
                )));
            }
            Err(e) if e.is_not_found() => {}
            Err(e) => return Err(e.into()),
        }
    }
    let Some(&wait_ms) = REREAD_WAITS_MS.get(miss) else {
        if head {
            return Ok(Some(ApiError::new(
                Code::BlobUnknown,
                format!("blob {d} is not in {name}"),
            )));
        }
        tracing::error!(digest = %d, repository = %name, "a linked blob's bytes are still not found after reading again; answered 503 (if this persists, run rdctl registry scrub)");
        return Ok(Some(
            ApiError::new(
                Code::Unavailable,
                format!(
                    "blob {d} is in {name}, but the store did not find its bytes; try again later"
                ),
            )
            .with_header(header::RETRY_AFTER, header::HeaderValue::from_static("2")),
        ));
    };
    tracing::warn!(digest = %d, repository = %name, "a linked blob's bytes were not found; reading again");
    tokio::time::sleep(std::time::Duration::from_millis(wait_ms)).await;
    Ok(None)
}

/// The event target of a blob (distribution gives blobs `application/octet-stream`).
pub(crate) fn blob_target(req: &Req, name: &Name, d: &Digest, size: Option<u64>) -> Target {
    Target {
        media_type: Some("application/octet-stream".to_owned()),
        digest: Some(d.to_string()),
        size,
        length: size,
        repository: name.to_string(),
        url: req.target_url(&format!("/v2/{name}/blobs/{d}")),
        tag: None,
        ..Target::default()
    }
}

/// DELETE a blob from the repository (its bytes stay until garbage collection).
pub(crate) async fn delete(req: Req, digest: &str) -> ApiResult<Response> {
    req.deletes_allowed()?;
    let d = parse_digest(digest)?;
    let name = req.name().clone();
    if !req.state.app().repos.unlink_blob(&name, &d).await? {
        return Err(ApiError::new(
            Code::BlobUnknown,
            format!("blob {d} is not in {name}"),
        ));
    }
    let target = Target {
        repository: name.to_string(),
        digest: Some(d.to_string()),
        ..Target::default()
    };
    req.notify(Action::Delete, "DELETE", target).await?;
    Response::builder()
        .status(StatusCode::ACCEPTED)
        .header(header::CONTENT_LENGTH, 0)
        .body(Body::empty())
        .map_err(ApiError::internal)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges() {
        let r = |s, e| Ok(Some(ByteRange { start: s, end: e }));
        assert_eq!(parse_range("bytes=0-9", 100), r(0, 9));
        assert_eq!(parse_range("bytes=500-", 1000), r(500, 999));
        assert_eq!(parse_range("bytes=-500", 1000), r(500, 999));
        assert_eq!(parse_range("bytes=-5000", 1000), r(0, 999));
        assert_eq!(parse_range("bytes=900-5000", 1000), r(900, 999));
        assert_eq!(parse_range("bytes=500-0", 1000), Err(()));
        assert_eq!(parse_range("bytes=1000-", 1000), Err(()));
        assert_eq!(parse_range("bytes=x-1", 1000), Err(()));
        assert_eq!(parse_range("bytes=0-1,3-4", 1000), Ok(None));
        assert_eq!(parse_range("items=0-1", 1000), Ok(None));
    }
}
