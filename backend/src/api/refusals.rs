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

use axum::extract::{ConnectInfo, Request, State};
use axum::http::header::CONTENT_TYPE;
use axum::http::{Method, StatusCode};
use axum::middleware::Next;
use axum::response::Response;

use super::audit::{Audited, record_refusal};
use super::state::AppState;
use crate::auth::Caller;
use crate::http::AuditReason;
use crate::http::refusals::{read_error, rewrite};

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
