//! The gate in front of every route (see [`crate::auth`]): who is calling,
//! whether they may, and the login, logout and session endpoints with the
//! login page.
//!
//! - Without authentication: only this machine's names in `Host` (no DNS
//!   rebinding), and a browser's `Origin` must be ours for state changes and
//!   sockets (no cross-site requests); every caller is an operator.
//! - With it: `/api/*` and `/ws` need a caller (401); state changes need an
//!   operator (403), our `Origin`, and from a browser session the CSRF header
//!   (403); `/metrics` needs a token; the UI's page sends a stranger to
//!   `/login`. Its files, `/healthz` and the login itself are open.

use std::net::SocketAddr;

use axum::Json;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::header::{CACHE_CONTROL, CONTENT_TYPE, LOCATION, RETRY_AFTER, SET_COOKIE};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{Html, IntoResponse, Response};
use serde::Deserialize;
use shared::auth::SessionInfo;

use super::error::ApiError;
use super::extract::Body;
use std::sync::Arc;

use crate::auth::{Auth, Caller, InvalidToken, LoginError, Via, cookie, csrf_ok};

/// What a path is, for the gate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// Open to anyone who may reach us: the UI's files, `/healthz`, login.
    Open,
    /// The UI's page itself: a stranger is sent to `/login`.
    Page,
    /// `/metrics`: a token, the scrape token or none without authentication.
    Metrics,
    /// `/api/*` and `/ws`.
    Api,
}

/// A path as its agent sees it: a hub serves each agent's dashboard under
/// `/agents/{name}/`, and judges the rest as an agent would.
fn local(path: &str) -> &str {
    match path
        .strip_prefix("/agents/")
        .and_then(|r| r.split_once('/'))
    {
        Some((_, rest)) => &path[path.len() - rest.len() - 1..],
        None => path,
    }
}

fn kind(path: &str) -> Kind {
    let l = local(path);
    // Through a hub, an agent's whole API needs a caller but the session
    // (the hub's own); its login page and API are the hub's alone.
    if l.len() < path.len() && l.starts_with("/api/") && l != "/api/session" {
        return Kind::Api;
    }
    match l {
        "/api/login" | "/api/session" | "/login" | "/healthz" => Kind::Open,
        "/" | "/index.html" | "/fleet" => Kind::Page,
        "/metrics" => Kind::Metrics,
        p if p.starts_with("/api/") || p == "/ws" => Kind::Api,
        _ => Kind::Open,
    }
}

fn changes_state(m: &Method) -> bool {
    !matches!(*m, Method::GET | Method::HEAD | Method::OPTIONS)
}

/// Outermost: a request a trusted proxy passes on is from the client its
/// `X-Forwarded-For` names, for everything after (limits, presence, audit).
pub(crate) async fn forwarded(
    State(auth): State<Arc<Auth>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    mut req: Request,
    next: Next,
) -> Response {
    let client = auth.client(peer, req.headers());
    if client != peer {
        req.extensions_mut().insert(ConnectInfo(client));
    }
    next.run(req).await
}

pub(crate) async fn gate(
    State(auth): State<Arc<Auth>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    mut req: Request,
    next: Next,
) -> Response {
    let headers = req.headers();
    if !auth.host_ok(headers) {
        return ApiError::new(
            StatusCode::FORBIDDEN,
            "this address is not one drainwatch answers to without authentication: use localhost or 127.0.0.1, or run it with --auth",
        )
        .into_response();
    }
    let path = req.uri().path().to_owned();
    let k = kind(&path);
    let mutating = changes_state(req.method());
    if (mutating || local(&path) == "/ws") && !auth.origin_ok(headers) {
        return ApiError::new(
            StatusCode::FORBIDDEN,
            "request from another site refused (its Origin is not drainwatch's)",
        )
        .into_response();
    }
    let caller = match auth.identify(headers, peer) {
        Ok(c) => c,
        // The scrape token is not a caller's: `may_scrape` judges it below.
        Err(InvalidToken) if matches!(k, Kind::Open | Kind::Metrics) => None,
        Err(e @ InvalidToken) => {
            return ApiError::new(StatusCode::UNAUTHORIZED, e.to_string()).into_response();
        }
    };
    match (k, &caller) {
        (Kind::Metrics, _) if !auth.may_scrape(headers) => {
            return ApiError::new(
                StatusCode::UNAUTHORIZED,
                "/metrics needs Authorization: Bearer with the scrape token",
            )
            .into_response();
        }
        (Kind::Page, None) => {
            return (StatusCode::SEE_OTHER, [(LOCATION, "/login")]).into_response();
        }
        (Kind::Api, None) => {
            return ApiError::new(
                StatusCode::UNAUTHORIZED,
                "log in first (/login), or send Authorization: Bearer <token>",
            )
            .into_response();
        }
        _ => {}
    }
    if mutating
        && k == Kind::Api
        && let Some(c) = &caller
    {
        if let Via::Session { csrf, .. } = &c.via
            && !csrf_ok(headers, csrf)
        {
            return ApiError::new(
                StatusCode::FORBIDDEN,
                "missing or wrong X-CSRF-Token header (reload the page)",
            )
            .into_response();
        }
        if local(&path) != "/api/logout" && !c.role.may_operate() {
            return ApiError::new(
                StatusCode::FORBIDDEN,
                format!(
                    "{} is a viewer: only an operator may change anything",
                    c.name.as_deref().unwrap_or("this token")
                ),
            )
            .into_response();
        }
    }
    if let Some(mut c) = caller {
        match crate::auth::for_whom(req.headers(), &c) {
            Ok(p) => c.for_whom = p,
            Err(e) => return ApiError::new(StatusCode::BAD_REQUEST, e.to_string()).into_response(),
        }
        req.extensions_mut().insert(c);
    }
    next.run(req).await
}

fn session_info(auth: &Auth, c: &Caller) -> SessionInfo {
    SessionInfo {
        auth: auth.enabled(),
        name: c.name.clone(),
        role: c.role,
        csrf: match &c.via {
            Via::Session { csrf, .. } => Some(csrf.clone()),
            _ => None,
        },
    }
}

/// `GET /api/session`: the caller, or 401 for nobody.
/// Logging in and out, the same at an agent and at the hub: the session,
/// the login and logout, the login page and its script.
pub(crate) fn session_routes<S>(t: super::Table<S>) -> super::Table<S>
where
    S: Clone + Send + Sync + 'static,
    Arc<Auth>: axum::extract::FromRef<S>,
{
    use axum::routing::{get, post};
    const GET: &[(&str, super::Query)] = &[("GET", super::routes::NONE)];
    const POST: &[(&str, super::Query)] = &[("POST", super::routes::NONE)];
    t.route("/api/session", get(session), GET)
        .route("/api/login", post(login), POST)
        .route("/api/logout", post(logout), POST)
        .route("/login", get(login_page), GET)
        .route("/login.js", get(login_script), GET)
}

pub(crate) async fn session(
    State(auth): State<Arc<Auth>>,
    caller: Option<axum::Extension<Caller>>,
) -> Response {
    match caller {
        Some(axum::Extension(c)) => Json(session_info(&auth, &c)).into_response(),
        None => ApiError::new(StatusCode::UNAUTHORIZED, "not logged in").into_response(),
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Login {
    token: String,
}

/// `POST /api/login` `{"token": "…"}`: a session cookie and the session.
pub(crate) async fn login(
    State(auth): State<Arc<Auth>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    Body(body): Body<Login>,
) -> Response {
    if !auth.enabled() {
        return ApiError::new(
            StatusCode::BAD_REQUEST,
            "drainwatch runs without authentication: there is nothing to log in to",
        )
        .into_response();
    }
    match auth.login(peer.ip(), &body.token) {
        Ok(s) => {
            tracing::info!(name = %s.name, role = s.role.as_str(), %peer, "logged in");
            let secure = if auth.secure_cookies() {
                "; Secure"
            } else {
                ""
            };
            let set = format!(
                "{}={}; Path=/; HttpOnly; SameSite=Strict; Max-Age={}{secure}",
                auth.cookie_name(),
                s.id,
                s.ttl.as_secs()
            );
            let info = SessionInfo {
                auth: true,
                name: Some(s.name),
                role: s.role,
                csrf: Some(s.csrf),
            };
            let mut resp = Json(info).into_response();
            if let Ok(v) = HeaderValue::from_str(&set) {
                resp.headers_mut().insert(SET_COOKIE, v);
            }
            resp.headers_mut()
                .insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
            resp
        }
        Err(LoginError::Invalid) => {
            tracing::warn!(%peer, "failed login");
            ApiError::new(StatusCode::UNAUTHORIZED, "unknown token").into_response()
        }
        Err(e @ (LoginError::TooMany { retry_after } | LoginError::TooManyAll { retry_after })) => {
            let secs = retry_after.as_secs().max(1);
            let from = if matches!(e, LoginError::TooMany { .. }) {
                "from this address"
            } else {
                "from everyone together"
            };
            let mut resp = ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                format!("too many failed logins {from}: try again in {secs} s"),
            )
            .into_response();
            resp.headers_mut()
                .insert(RETRY_AFTER, HeaderValue::from(secs));
            resp
        }
    }
}

/// `POST /api/logout`: ends the browser session.
pub(crate) async fn logout(State(auth): State<Arc<Auth>>, headers: HeaderMap) -> Response {
    let name = auth.cookie_name();
    if let Some(id) = cookie(&headers, name) {
        auth.logout(&id);
    }
    let secure = if auth.secure_cookies() {
        "; Secure"
    } else {
        ""
    };
    (
        StatusCode::NO_CONTENT,
        [(
            SET_COOKIE,
            format!("{name}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0{secure}"),
        )],
    )
        .into_response()
}

/// `GET /login`: a page that asks for a token (no script of its own beyond
/// the request; the UI is not loaded until the session exists).
pub(crate) async fn login_page() -> impl IntoResponse {
    (
        [(CACHE_CONTROL, "no-store")],
        Html(include_str!("login.html")),
    )
}

/// `GET /login.js`: the login page's script (a file, for the page's CSP).
pub(crate) async fn login_script() -> impl IntoResponse {
    (
        [
            (CONTENT_TYPE, "text/javascript; charset=utf-8"),
            (CACHE_CONTROL, "no-cache"),
        ],
        include_str!("login.js"),
    )
}

#[cfg(test)]
mod tests {
    use super::{Kind, kind, local};

    #[test]
    fn an_agent_s_dashboard_through_a_hub_is_judged_as_the_agent_would() {
        assert_eq!(local("/agents/gpu-01/api/state"), "/api/state");
        assert_eq!(local("/agents/gpu-01/ws"), "/ws");
        assert_eq!(local("/agents/gpu-01/"), "/");
        assert_eq!(local("/agents/gpu-01"), "/agents/gpu-01");
        assert_eq!(local("/api/state"), "/api/state");
        assert_eq!(kind("/agents/a/api/restart"), Kind::Api);
        assert_eq!(kind("/agents/a/ws"), Kind::Api);
        assert_eq!(kind("/agents/a/"), Kind::Page);
        assert_eq!(kind("/fleet"), Kind::Page);
        assert_eq!(kind("/agents/a/style.css"), Kind::Open);
        assert_eq!(kind("/agents/a/api/session"), Kind::Open);
        assert_eq!(kind("/agents/a/api/login"), Kind::Api);
        assert_eq!(kind("/api/login"), Kind::Open);
    }
}
