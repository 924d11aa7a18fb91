//! The service endpoints beside the API: liveness (`/healthz`), readiness (`/readyz`) and the
//! Prometheus metrics (`/metrics`).

use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};

use crate::state::AppState;
use crate::storage::Key;

/// Alive as long as the process answers.
pub(crate) async fn healthz() -> &'static str {
    "ok"
}

/// Ready when the store answers.
pub(crate) async fn readyz(State(state): State<AppState>) -> Response {
    let probe = Key::new("catalog").expect("a valid key");
    match state.app().repos.store().stat(&probe).await {
        Ok(_) => (StatusCode::OK, "ok").into_response(),
        Err(e) if e.is_not_found() => (StatusCode::OK, "ok").into_response(),
        Err(e) => {
            tracing::warn!(error = %e, "readiness probe failed");
            (StatusCode::SERVICE_UNAVAILABLE, "store unavailable").into_response()
        }
    }
}

/// The exposition text of [`crate::metrics::Metrics`].
pub(crate) async fn metrics(State(state): State<AppState>) -> Response {
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        state.app().metrics.render(),
    )
        .into_response()
}
