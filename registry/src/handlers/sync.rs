//! `GET /v2/_rd/sync`: the status of every `[[sync]]` entry ([`crate::mirror::status`]), read
//! from the store, so every replica answers the same.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use super::Req;
use crate::errors::{ApiError, ApiResult};

/// The status of every entry: `{"sync": [..]}`.
pub(crate) async fn status(req: Req) -> ApiResult<Response> {
    let app = req.state.app();
    let entries = crate::mirror::status(app.repos.store().as_ref(), &app.config.sync)
        .await
        .map_err(ApiError::internal)?;
    Ok((
        StatusCode::OK,
        axum::Json(serde_json::json!({ "sync": entries })),
    )
        .into_response())
}
