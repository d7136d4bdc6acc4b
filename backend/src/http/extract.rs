//! Reading requests: every JSON body ([`Body`]: an object or a refusal worded
//! for people, serde's words to the sender and only a class of reason to the
//! audit log), a numeric id in the path, a page's `limit`.

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::StatusCode;
use axum::http::header::CONTENT_TYPE;

use super::error::ApiError;

/// A JSON object body, with refusals worded for people: 415 without a JSON
/// content type, 413 for too big, 400 for anything that is not the expected
/// object (an array is not read as one, field by field, as serde would).
#[derive(Debug)]
pub(crate) struct Body<T>(pub(crate) T);

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

/// A numeric id from the path; `what` names it in the refusal (`restart`, `run`).
pub(crate) fn path_id(id: &str, what: &str) -> Result<i64, ApiError> {
    id.parse().map_err(|_| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            format!("`{}` is not a {what} id", crate::store::cut(id, 64)),
        )
    })
}

/// A page's `limit`: `default` when not given, else from 1 to 1000.
pub(crate) fn limit(given: Option<u32>, default: u32) -> Result<u32, ApiError> {
    match given.unwrap_or(default) {
        n @ 1..=1000 => Ok(n),
        _ => Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "limit must be from 1 to 1000",
        )),
    }
}
