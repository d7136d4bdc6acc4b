//! How a request is refused: [`ApiError`] answers `{"error": "…"}` with
//! nothing internal. A refusal whose words may quote the request (which may
//! hold a token) carries a class of reason ([`AuditReason`]) for the audit log
//! instead.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Serialize;

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
pub(crate) struct AuditReason(pub(crate) &'static str);

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
