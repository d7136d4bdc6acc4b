//! The restart API: `POST /api/restart | stop | start | adopt` and the history
//! (`GET /api/restarts`, `/api/restarts/{id}`, `/api/audit`). The manager audits
//! every request it sees, accepted or refused (what is refused before it: see
//! `refusals`); refusals change nothing.

use axum::body::Bytes;
use axum::extract::{FromRequest, Path, Query, Request, State};
use axum::http::StatusCode;
use axum::http::header::CONTENT_TYPE;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde::Deserialize;
use shared::restart::{
    Accepted, ConfirmRequest, OpKind, RestartDetail, RestartRequest, RestartSummary,
};

use super::refusals::audited;
use super::{ApiError, AppState};
use crate::auth::Caller;
use crate::restart::manager::{ManagerHandle, Refusal, Request as OpRequest};
use crate::store::{AuditEntry, AuditKind, Store};

/// A JSON object body, with refusals worded for people: 415 without a JSON
/// content type, 413 for too big, 400 for anything that is not the expected
/// object (an array is not read as one, field by field, as serde would).
#[derive(Debug)]
pub(super) struct Body<T>(pub(super) T);

/// Whether `content-type` is JSON: `application/json` or `application/…+json`.
fn is_json(content_type: Option<&str>) -> bool {
    let Some(ct) = content_type else { return false };
    let essence = ct
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    essence == "application/json"
        || essence
            .strip_prefix("application/")
            .is_some_and(|s| s.ends_with("+json"))
}

impl<S, T> FromRequest<S> for Body<T>
where
    T: serde::de::DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let content_type = req
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok());
        if !is_json(content_type) {
            return Err(ApiError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "send the body as JSON (Content-Type: application/json)",
            ));
        }
        let bytes = Bytes::from_request(req, state).await.map_err(|r| {
            if r.status() == StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, "request body too large")
            } else {
                ApiError::new(
                    StatusCode::BAD_REQUEST,
                    "the request body could not be read",
                )
            }
        })?;
        // serde's words quote the body (which may hold a token): the caller
        // reads them, the audit log only the class.
        let not_json = |e: serde_json::Error| {
            ApiError::new(StatusCode::BAD_REQUEST, format!("invalid request: {e}"))
                .audited_as("body is not JSON")
        };
        let value: serde_json::Value = serde_json::from_slice(&bytes).map_err(not_json)?;
        if !value.is_object() {
            return Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                "invalid request: the body must be a JSON object",
            )
            .audited_as("body is not the expected JSON"));
        }
        // The error names the field: `generation: invalid type: …`.
        serde_path_to_error::deserialize(value)
            .map(Body)
            .map_err(|e| {
                ApiError::new(StatusCode::BAD_REQUEST, format!("invalid request: {e}"))
                    .audited_as("body is not the expected JSON")
            })
    }
}

pub(super) fn manager(state: &AppState) -> Result<&ManagerHandle, ApiError> {
    state.manager.as_ref().ok_or_else(|| {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "drainwatch runs without a server config (--config): there is no server to control",
        )
    })
}

pub(super) fn store(state: &AppState) -> Result<&Store, ApiError> {
    state.store.as_ref().ok_or_else(|| {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "drainwatch runs without a server config: no history",
        )
    })
}

/// Audits what an operator did outside an operation (benchmarks, flag-set
/// labels): `result` is the outcome, or why it was refused.
pub(super) fn record(
    state: &AppState,
    caller: &Caller,
    action: &str,
    request: String,
    result: Result<String, &str>,
) {
    record_as(state, caller.who(), action, request, result);
}

/// [`record`] for a caller known only as `who` (one the gate refused, say).
pub(super) fn record_as(
    state: &AppState,
    who: String,
    action: &str,
    request: String,
    result: Result<String, &str>,
) {
    let Some(store) = &state.store else { return };
    let (outcome, detail) = match result {
        Ok(outcome) => (outcome, String::new()),
        Err(why) => ("refused".to_owned(), why.to_owned()),
    };
    store.audit(AuditEntry {
        at_ms: crate::telemetry::now_ms(),
        peer: who,
        action: action.to_owned(),
        request,
        outcome,
        detail,
        count: 1,
        ..Default::default()
    });
}

pub(super) fn refused(r: Refusal) -> Response {
    match r {
        Refusal::BadRequest(m) => ApiError::new(StatusCode::BAD_REQUEST, m).into_response(),
        Refusal::Stale(m) => ApiError::new(StatusCode::CONFLICT, m).into_response(),
        Refusal::Conflict { message, operation } => (
            StatusCode::CONFLICT,
            Json(serde_json::json!({ "error": message, "running": operation })),
        )
            .into_response(),
    }
}

async fn submit(
    state: &AppState,
    caller: &Caller,
    kind: OpKind,
    generation: u64,
    confirm: String,
    flags: std::collections::BTreeMap<String, Option<String>>,
    contain: bool,
) -> Response {
    let m = match manager(state) {
        Ok(m) => m,
        Err(e) => return e.into_response(),
    };
    let (reply, _) = tokio::sync::oneshot::channel();
    let req = OpRequest {
        kind,
        generation,
        confirm,
        flags,
        contain,
        peer: caller.who(),
        reply,
    };
    audited(match m.submit(req).await {
        Ok(accepted) => (StatusCode::ACCEPTED, Json::<Accepted>(accepted)).into_response(),
        Err(r) => refused(r),
    })
}

/// `POST /api/restart` and `/api/start`: an operation that may change flags.
pub(super) async fn with_flags(
    kind: OpKind,
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Body(req): Body<RestartRequest>,
) -> Response {
    submit(
        &state,
        &caller,
        kind,
        req.generation,
        req.confirm,
        req.flags,
        false,
    )
    .await
}

/// `POST /api/stop` and `/api/adopt`: an operation that only needs confirming.
pub(super) async fn confirmed(
    kind: OpKind,
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Body(req): Body<ConfirmRequest>,
) -> Response {
    submit(
        &state,
        &caller,
        kind,
        req.generation,
        req.confirm,
        Default::default(),
        req.contain,
    )
    .await
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Page {
    limit: Option<u32>,
}

fn limit(p: &Page) -> Result<u32, ApiError> {
    match p.limit.unwrap_or(50) {
        n @ 1..=1000 => Ok(n),
        _ => Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "limit must be from 1 to 1000",
        )),
    }
}

pub(super) fn internal(e: crate::store::StoreError) -> ApiError {
    tracing::error!(error = %e, "reading the history failed");
    ApiError::new(
        StatusCode::INTERNAL_SERVER_ERROR,
        "reading the history failed",
    )
}

pub(super) async fn restarts(
    State(state): State<AppState>,
    Query(page): Query<Page>,
) -> Result<Json<Vec<RestartSummary>>, ApiError> {
    let n = limit(&page)?;
    store(&state)?.restarts(n).await.map(Json).map_err(internal)
}

pub(super) async fn restart_detail(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<RestartDetail>, ApiError> {
    let id: i64 = id.parse().map_err(|_| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            format!("`{}` is not a restart id", crate::store::cut(&id, 64)),
        )
    })?;
    match store(&state)?.detail(id).await.map_err(internal)? {
        Some(d) => Ok(Json(d)),
        None => Err(ApiError::new(
            StatusCode::NOT_FOUND,
            format!("no restart #{id}"),
        )),
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct AuditQuery {
    limit: Option<u32>,
    /// `action` or `refusals`: one part of the log only (a flood of refusal
    /// rows never hides an action from whoever asks for actions).
    kind: Option<AuditKind>,
}

pub(super) async fn audit(
    State(state): State<AppState>,
    Query(q): Query<AuditQuery>,
) -> Result<Json<Vec<AuditEntry>>, ApiError> {
    let n = limit(&Page { limit: q.limit })?;
    store(&state)?
        .audit_log(n, q.kind)
        .await
        .map(Json)
        .map_err(internal)
}
