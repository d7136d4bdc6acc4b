//! Two promises kept for every route, whoever answered:
//!
//! - An error answers in JSON (`{"error": "…"}`). axum's own rejections — a
//!   query string that does not parse, a method a route does not take, a plain
//!   GET on `/ws` — come as text or nothing; a server error says nothing internal.
//! - A refused attempt to change something is audited, also when it never reached
//!   a handler that audits: the gate's 401 and 403, a body that is not the JSON
//!   expected. Handlers that audit themselves mark their response [`Audited`].
//!   These refusals are counted per caller (a token's name and address, or the
//!   address alone) per minute, so that a stranger's flood is one row, and the
//!   reason recorded is a class ([`AuditReason`]), never the input: a body
//!   that does not parse may hold a token.

use std::net::SocketAddr;

use axum::body::{Body, to_bytes};
use axum::extract::{ConnectInfo, Request, State};
use axum::http::header::{CONTENT_LENGTH, CONTENT_TYPE};
use axum::http::{HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::Response;

use super::audit::{Audited, record_refusal};
use super::error::AuditReason;
use super::state::AppState;
use crate::auth::Caller;

/// Error bodies are a line or two; anything longer is not read.
const MAX_ERROR_BODY: usize = 16 * 1024;

/// Whether a refused `method path` is an attempt to change something.
fn is_attempt(method: &Method, path: &str) -> bool {
    !matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
        && path.starts_with("/api/")
        && path != "/api/logout"
}

pub(super) async fn layer(
    State(state): State<AppState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    req: Request,
    next: Next,
) -> Response {
    let attempt = is_attempt(req.method(), req.uri().path());
    let action = crate::store::cut(
        req.uri().path().trim_start_matches("/api/"),
        crate::store::MAX_AUDIT_TEXT,
    );
    // Per caller and address, not per connection: a port is new every time.
    let who = match attempt.then(|| state.auth.identify(req.headers(), peer)) {
        Some(Ok(Some(Caller { name: Some(n), .. }))) => format!("{n} ({})", peer.ip()),
        _ => peer.ip().to_string(),
    };
    let res = next.run(req).await;
    let status = res.status();
    if !(status.is_client_error() || status.is_server_error()) {
        return res;
    }
    let is_json = res
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    // A flood of refusals for going too fast is not written down one by one.
    let audit = attempt
        && status != StatusCode::TOO_MANY_REQUESTS
        && res.extensions().get::<Audited>().is_none();
    if is_json && !audit {
        return res;
    }
    let (parts, bytes, is_json, message) = read_error(res, is_json).await;
    if audit {
        let reason = parts
            .extensions
            .get::<AuditReason>()
            .map_or(&*message, |r| r.0);
        record_refusal(
            &state,
            who,
            action,
            format!("{}: {reason}", parts.status.as_u16()),
        );
    }
    rewrite(parts, bytes, is_json, &message)
}

/// A request refused with its body perhaps unread (the gate answers before
/// any handler reads it) ends its connection, and says so: the server drops
/// the connection after such a refusal, and a client that kept it for its
/// next request would have that request fail unanswered.
pub(crate) async fn close_after_refused_body(req: Request, next: Next) -> Response {
    let has_body = req
        .headers()
        .get(CONTENT_LENGTH)
        .is_some_and(|v| v.as_bytes() != b"0")
        || req
            .headers()
            .contains_key(axum::http::header::TRANSFER_ENCODING);
    let mut res = next.run(req).await;
    if has_body && res.status().as_u16() >= 400 {
        res.headers_mut().insert(
            axum::http::header::CONNECTION,
            HeaderValue::from_static("close"),
        );
    }
    res
}

/// The first promise alone, for the hub: every error answers in JSON.
pub(crate) async fn json_errors(req: Request, next: Next) -> Response {
    let res = next.run(req).await;
    let status = res.status();
    let is_json = res
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if is_json || !(status.is_client_error() || status.is_server_error()) {
        return res;
    }
    let (parts, bytes, is_json, message) = read_error(res, is_json).await;
    rewrite(parts, bytes, is_json, &message)
}

/// An error response's parts, body and message (its JSON `error`, its text,
/// or the status's words; never a server error's own words).
async fn read_error(
    res: Response,
    is_json: bool,
) -> (axum::http::response::Parts, axum::body::Bytes, bool, String) {
    let status = res.status();
    let (parts, body) = res.into_parts();
    // A body too long to read is rewritten whole, like a non-JSON one.
    let (bytes, is_json) = match to_bytes(body, MAX_ERROR_BODY).await {
        Ok(b) => (b, is_json),
        Err(_) => (Default::default(), false),
    };
    let message = if is_json {
        serde_json::from_slice::<serde_json::Value>(&bytes)
            .ok()
            .and_then(|v| v["error"].as_str().map(str::to_owned))
    } else if status.is_server_error() {
        None
    } else {
        Some(String::from_utf8_lossy(&bytes).trim().to_owned()).filter(|m| !m.is_empty())
    }
    .unwrap_or_else(|| match status {
        StatusCode::METHOD_NOT_ALLOWED => "this endpoint does not take that method".to_owned(),
        s if s.is_server_error() => "internal error; drainwatch's log says why".to_owned(),
        s => s.canonical_reason().unwrap_or("refused").to_lowercase(),
    });
    (parts, bytes, is_json, message)
}

/// The response again: as it was when it was JSON, else `{"error": message}`.
fn rewrite(
    mut parts: axum::http::response::Parts,
    bytes: axum::body::Bytes,
    is_json: bool,
    message: &str,
) -> Response {
    parts.headers.remove(CONTENT_LENGTH);
    if is_json {
        return Response::from_parts(parts, Body::from(bytes));
    }
    let json = serde_json::json!({ "error": message }).to_string();
    parts
        .headers
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    Response::from_parts(parts, Body::from(json))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attempts_are_changes_to_the_api() {
        assert!(is_attempt(&Method::POST, "/api/restart"));
        assert!(is_attempt(&Method::PATCH, "/api/flagsets/abc"));
        assert!(is_attempt(&Method::DELETE, "/api/restart"));
        assert!(is_attempt(&Method::POST, "/api/login"));
        assert!(!is_attempt(&Method::POST, "/api/logout"));
        assert!(!is_attempt(&Method::GET, "/api/restarts"));
        assert!(!is_attempt(&Method::POST, "/ws"));
    }
}
