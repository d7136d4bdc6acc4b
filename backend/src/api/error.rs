//! The manager's refusals and the store's failures as answers
//! ([`ApiError`](crate::http::ApiError) and its JSON bodies).

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use crate::http::ApiError;
use crate::restart::manager::Refusal;
use crate::store::StoreError;

/// The manager's refusal as answered: 400 for a wrong request, 409 for a stale
/// view or a conflict (with the operation that is running, if any), and for
/// a launch the health gate refuses before anything stopped (`code`:
/// `unhealthy`, with the issues).
pub(super) fn refused(r: Refusal) -> Response {
    match r {
        Refusal::BadRequest(m) => ApiError::new(StatusCode::BAD_REQUEST, m).into_response(),
        Refusal::Stale(m) => ApiError::new(StatusCode::CONFLICT, m).into_response(),
        Refusal::Conflict { message, operation } => (
            StatusCode::CONFLICT,
            Json(serde_json::json!({ "error": message, "running": operation })),
        )
            .into_response(),
        Refusal::Unhealthy { message, issues } => (
            StatusCode::CONFLICT,
            Json(serde_json::json!({ "error": message, "code": "unhealthy", "unhealthy": issues })),
        )
            .into_response(),
    }
}

/// A failed read of the history: the log says why, the caller only that it failed.
pub(super) fn internal(e: StoreError) -> ApiError {
    tracing::error!(error = %e, "reading the history failed");
    ApiError::new(
        StatusCode::INTERNAL_SERVER_ERROR,
        "reading the history failed",
    )
}
