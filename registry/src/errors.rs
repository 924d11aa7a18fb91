//! The OCI error-code table and the one error type handlers return.
//!
//! [`Code`] holds every code the registry sends with its HTTP status and message, in one table
//! ([`Code::status`], [`Code::message`]). [`ApiError`] is what handlers return; it renders as the
//! distribution-spec envelope `{"errors":[{"code","message","detail"}]}`. Internal errors answer
//! 500 with a generic message; the real cause is logged here and never sent to the client.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use crate::storage::{ErrorKind, StoreError};

/// An OCI distribution error code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Code {
    /// Blob unknown to registry.
    BlobUnknown,
    /// Blob upload invalid.
    BlobUploadInvalid,
    /// Blob upload unknown to registry.
    BlobUploadUnknown,
    /// Provided digest did not match uploaded content.
    DigestInvalid,
    /// Manifest references a manifest or blob unknown to registry.
    ManifestBlobUnknown,
    /// Manifest invalid.
    ManifestInvalid,
    /// Manifest unknown to registry.
    ManifestUnknown,
    /// A manifest DELETE by digest of a manifest an index in the same repository still lists
    /// (409; the code and status of GitLab's container registry, zot refuses it too).
    ManifestReferenced,
    /// Invalid repository name.
    NameInvalid,
    /// Repository name not known to registry.
    NameUnknown,
    /// Provided length did not match content length.
    SizeInvalid,
    /// Authentication required.
    Unauthorized,
    /// Requested access to the resource is denied.
    Denied,
    /// The operation is unsupported.
    Unsupported,
    /// Too many requests.
    TooManyRequests,
    /// The `n` of a paginated list is not a number (distribution's code).
    PaginationNumberInvalid,
    /// A requested range cannot be satisfied (416, no OCI code of its own).
    RangeInvalid,
    /// Manifest above the size limit (413).
    ManifestTooLarge,
    /// A query parameter of an extension endpoint (`/v2/_rd/...`) is missing or malformed
    /// (400, no OCI code of its own).
    QueryInvalid,
    /// A pull-through upstream could not supply what is not cached (503, distribution's
    /// `UNAVAILABLE`).
    Unavailable,
    /// Something failed inside the registry (500).
    Internal,
}

impl Code {
    /// The code as sent on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Code::BlobUnknown => "BLOB_UNKNOWN",
            Code::BlobUploadInvalid => "BLOB_UPLOAD_INVALID",
            Code::BlobUploadUnknown => "BLOB_UPLOAD_UNKNOWN",
            Code::DigestInvalid => "DIGEST_INVALID",
            Code::ManifestBlobUnknown => "MANIFEST_BLOB_UNKNOWN",
            Code::ManifestInvalid => "MANIFEST_INVALID",
            Code::ManifestUnknown => "MANIFEST_UNKNOWN",
            Code::ManifestReferenced => "MANIFEST_REFERENCED",
            Code::NameInvalid => "NAME_INVALID",
            Code::NameUnknown => "NAME_UNKNOWN",
            Code::SizeInvalid => "SIZE_INVALID",
            Code::Unauthorized => "UNAUTHORIZED",
            Code::Denied => "DENIED",
            Code::Unsupported => "UNSUPPORTED",
            Code::TooManyRequests => "TOOMANYREQUESTS",
            Code::PaginationNumberInvalid => "PAGINATION_NUMBER_INVALID",
            Code::RangeInvalid => "RANGE_INVALID",
            Code::ManifestTooLarge => "SIZE_INVALID",
            Code::QueryInvalid => "QUERY_INVALID",
            Code::Unavailable => "UNAVAILABLE",
            Code::Internal => "UNKNOWN",
        }
    }

    /// The HTTP status the code is sent with.
    pub fn status(self) -> StatusCode {
        match self {
            Code::BlobUnknown
            | Code::BlobUploadUnknown
            | Code::ManifestUnknown
            | Code::NameUnknown => StatusCode::NOT_FOUND,
            Code::BlobUploadInvalid
            | Code::DigestInvalid
            | Code::ManifestBlobUnknown
            | Code::ManifestInvalid
            | Code::NameInvalid
            | Code::SizeInvalid
            | Code::PaginationNumberInvalid
            | Code::QueryInvalid => StatusCode::BAD_REQUEST,
            Code::Unauthorized => StatusCode::UNAUTHORIZED,
            Code::Denied => StatusCode::FORBIDDEN,
            Code::ManifestReferenced => StatusCode::CONFLICT,
            Code::Unsupported => StatusCode::METHOD_NOT_ALLOWED,
            Code::TooManyRequests => StatusCode::TOO_MANY_REQUESTS,
            Code::RangeInvalid => StatusCode::RANGE_NOT_SATISFIABLE,
            Code::ManifestTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            Code::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
            Code::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The spec's message for the code.
    pub fn message(self) -> &'static str {
        match self {
            Code::BlobUnknown => "blob unknown to registry",
            Code::BlobUploadInvalid => "blob upload invalid",
            Code::BlobUploadUnknown => "blob upload unknown to registry",
            Code::DigestInvalid => "provided digest did not match uploaded content",
            Code::ManifestBlobUnknown => {
                "manifest references a manifest or blob unknown to registry"
            }
            Code::ManifestInvalid => "manifest invalid",
            Code::ManifestUnknown => "manifest unknown to registry",
            Code::ManifestReferenced => "manifest referenced by an index",
            Code::NameInvalid => "invalid repository name",
            Code::NameUnknown => "repository name not known to registry",
            Code::SizeInvalid => "provided length did not match content length",
            Code::Unauthorized => "authentication required",
            Code::Denied => "requested access to the resource is denied",
            Code::Unsupported => "the operation is unsupported",
            Code::TooManyRequests => "too many requests",
            Code::PaginationNumberInvalid => "invalid number of results requested",
            Code::RangeInvalid => "requested range not satisfiable",
            Code::ManifestTooLarge => "manifest is larger than the registry accepts",
            Code::QueryInvalid => "invalid query",
            Code::Unavailable => "service unavailable",
            Code::Internal => "internal server error",
        }
    }
}

/// An error answered to a client.
#[derive(Debug, thiserror::Error)]
#[error("{}: {detail}", code.as_str())]
pub struct ApiError {
    /// The code.
    pub code: Code,
    /// What exactly was wrong, naming the input (sent as `detail`, except for internal errors).
    pub detail: String,
    /// A message in place of the code's spec message (see [`ApiError::with_reason`]).
    message: Option<String>,
    /// Extra headers (for example `Range` on a 416 for an upload).
    headers: Vec<(header::HeaderName, HeaderValue)>,
}

impl ApiError {
    /// An error with a code and a detail naming the input.
    pub fn new(code: Code, detail: impl Into<String>) -> ApiError {
        ApiError {
            code,
            detail: detail.into(),
            message: None,
            headers: Vec::new(),
        }
    }

    /// The detail also as the `message`: containers/image (skopeo, podman), docker and
    /// containerd print only `message`, so a refusal whose reason the user can act on (a
    /// quota, an immutable tag) would otherwise read as the code's generic words.
    pub fn with_reason(mut self) -> ApiError {
        self.message = Some(self.detail.clone());
        self
    }

    /// Adds a response header.
    pub fn with_header(mut self, name: header::HeaderName, value: HeaderValue) -> ApiError {
        self.headers.push((name, value));
        self
    }

    /// An internal error: logged in full, answered as a generic 500.
    pub fn internal(detail: impl std::fmt::Display) -> ApiError {
        ApiError::new(Code::Internal, detail.to_string())
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        // Store errors that reach here unhandled are the registry's fault, not the client's.
        let mut chain = e.to_string();
        let mut src = std::error::Error::source(&e);
        while let Some(s) = src {
            chain.push_str(": ");
            chain.push_str(&s.to_string());
            src = s.source();
        }
        // A store request whose lock was taken over (a filesystem stripe lock its process kept
        // too long: stopped or stalled) changed nothing: the client retries.
        let timed_out = matches!(&e, StoreError::Backend { source, .. } if source.kind() == std::io::ErrorKind::TimedOut);
        if timed_out {
            return ApiError::new(Code::Unavailable, chain).with_header(
                axum::http::header::RETRY_AFTER,
                axum::http::HeaderValue::from_static("2"),
            );
        }
        match e.kind() {
            ErrorKind::Backend | ErrorKind::InvalidKey => ApiError::internal(chain),
            _ => ApiError::internal(format!("unexpected store answer: {chain}")),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.code.status();
        let detail = if self.code == Code::Internal {
            tracing::error!(error = %self.detail, "internal error");
            serde_json::Value::Null
        } else {
            serde_json::Value::String(self.detail)
        };
        let body = serde_json::json!({
            "errors": [{
                "code": self.code.as_str(),
                "message": self.message.as_deref().unwrap_or(self.code.message()),
                "detail": detail,
            }]
        });
        let mut resp = (status, axum::Json(body)).into_response();
        for (k, v) in self.headers {
            resp.headers_mut().insert(k, v);
        }
        resp
    }
}

/// Result type of every handler.
pub type ApiResult<T> = Result<T, ApiError>;
