//! What the agent and the hub answer alike on a refusal: every error in JSON
//! ([`json_errors`]), and a refused request whose body may be unread ends its
//! connection ([`close_after_refused_body`]).

use axum::body::{Body, to_bytes};
use axum::extract::Request;
use axum::http::header::{CONTENT_LENGTH, CONTENT_TYPE};
use axum::http::{HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::Response;

/// Error bodies are a line or two; anything longer is not read.
const MAX_ERROR_BODY: usize = 16 * 1024;

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
pub(crate) async fn read_error(
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
pub(crate) fn rewrite(
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
