//! How a request is refused or fails: [`ApiError`] answers `{"error": "…"}`
//! with nothing internal; the manager's refusals and the store's failures are
//! turned into answers here. A refusal whose words may quote the request (which
//! may hold a token) carries a class of reason ([`AuditReason`]) for the audit
//! log instead.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Serialize;

use crate::restart::manager::Refusal;
use crate::store::StoreError;

/// A JSON error body: what is wrong, nothing internal.
#[derive(Debug, Serialize)]
pub struct ApiError {
    #[serde(skip)]
    status: StatusCode,
    error: String,
    /// What the audit log says instead of `error`, when `error` may quote input.
    #[serde(skip)]
    audit: Option<&'static str>,
}

/// On a refusal whose message may quote the request: the words to audit instead.
#[derive(Debug, Clone, Copy)]
pub(super) struct AuditReason(pub(super) &'static str);

impl ApiError {
    pub fn new(status: StatusCode, error: impl Into<String>) -> Self {
        Self {
            status,
            error: error.into(),
            audit: None,
        }
    }

    /// The caller reads `error`; the audit log only `reason`.
    pub fn audited_as(mut self, reason: &'static str) -> Self {
        self.audit = Some(reason);
        self
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let reason = self.audit.map(AuditReason);
        let mut res = (self.status, Json(self)).into_response();
        if let Some(r) = reason {
            res.extensions_mut().insert(r);
        }
        res
    }
}

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
