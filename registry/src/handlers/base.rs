//! The API version check (`GET /v2/`) and the answer for paths that name no endpoint.

use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};

use crate::errors::{ApiError, Code};

/// `GET /v2/`: the registry speaks the Distribution API (access control ran before).
pub(crate) async fn check() -> Response {
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        "{}",
    )
        .into_response()
}

/// Any path outside the routes: `NAME_UNKNOWN` (404), in the OCI error envelope.
pub(crate) async fn not_found() -> ApiError {
    ApiError::new(Code::NameUnknown, "no such endpoint")
}
