//! A host's own dashboard through the hub, at `/agents/{name}/`: the UI's
//! files are the hub's (the same build), its `/api/*` and `/ws` go to that
//! agent with the hub's token for it, naming the person behind the request
//! (`X-Drainwatch-For`), so the agent's audit names both. What the person
//! may do is the hub's gate's to say first (a viewer at the hub changes
//! nothing), then the agent's (the hub's token there may be a viewer's).
//! The session and logout are the hub's own.

use axum::body::Body;
use axum::extract::ws::{Message as AxMessage, WebSocket, WebSocketUpgrade};
use axum::extract::{Path, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, Uri, header};
use axum::response::{IntoResponse, Redirect, Response};
use futures_util::{SinkExt, StreamExt};
use tokio_tungstenite::tungstenite::Message as TMessage;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

use super::{HubState, person};
use crate::auth::{Caller, FOR_HEADER};
use crate::http::ApiError;

/// The largest request body passed on (an agent takes no more either).
const MAX_BODY: usize = 64 * 1024;
/// The largest message a browser may send through to an agent's `/ws`.
const MAX_WS_IN: usize = 64 * 1024;

/// Headers of an agent's answer that the browser gets (its content type
/// is judged apart: see [`content_type`]).
const PASSED_BACK: [header::HeaderName; 4] = [
    header::CACHE_CONTROL,
    header::CONTENT_DISPOSITION,
    header::RETRY_AFTER,
    header::ETAG,
];

/// What an agent's API answers with, as the hub passes it on: JSON, CSV or
/// plain text; anything else is bytes to save, never a page or a script in
/// the hub's origin (an agent is not trusted with the hub's sessions).
fn content_type(agent: Option<&HeaderValue>) -> HeaderValue {
    let t = agent.and_then(|v| v.to_str().ok()).unwrap_or_default();
    let essence = t.split(';').next().unwrap_or_default().trim();
    if ["application/json", "text/csv", "text/plain"]
        .iter()
        .any(|ok| essence.eq_ignore_ascii_case(ok))
    {
        HeaderValue::from_str(t).unwrap_or(HeaderValue::from_static("application/octet-stream"))
    } else {
        HeaderValue::from_static("application/octet-stream")
    }
}

/// The part of `raw` (the request's path, still percent-encoded) after
/// `/agents/{name}/api/`, if it stays inside the agent's API: no `.` or
/// `..` segment, no encoded `/` or `\\`, no `\\`.
fn api_rest(raw: &str) -> Option<&str> {
    let mut parts = raw.splitn(5, '/');
    let (Some(""), Some("agents"), Some(_), Some("api"), Some(rest)) = (
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
    ) else {
        return None;
    };
    let lower = rest.to_ascii_lowercase();
    if lower.contains("%2f") || lower.contains("%5c") || lower.contains('\\') {
        return None;
    }
    let dots = |seg: &str| {
        let s = seg.to_ascii_lowercase().replace("%2e", ".");
        s == "." || s == ".."
    };
    if rest.split('/').any(dots) {
        return None;
    }
    Some(rest)
}

fn agent<'a>(s: &'a HubState, name: &str) -> Result<&'a super::config::AgentConfig, ApiError> {
    s.coord.config().agent(name).ok_or_else(|| {
        ApiError::new(
            StatusCode::NOT_FOUND,
            format!("no agent `{name}` in the hub's config"),
        )
    })
}

/// `/agents/{name}`: the dashboard lives at `/agents/{name}/`.
pub(super) async fn bare(Path(name): Path<String>) -> Redirect {
    Redirect::to(&format!("/agents/{name}/"))
}

/// `/agents/{name}/…` other than its API and socket: the UI's own files.
pub(super) async fn files(
    State(s): State<HubState>,
    Path((name, rest)): Path<(String, String)>,
    headers: HeaderMap,
) -> Response {
    if let Err(e) = agent(&s, &name) {
        return e.into_response();
    }
    let uri = Uri::try_from(format!("/{rest}")).unwrap_or_else(|_| Uri::from_static("/"));
    crate::http::assets::serve(uri, headers).await
}

/// `/agents/{name}/` itself.
pub(super) async fn index(
    State(s): State<HubState>,
    Path(name): Path<String>,
    headers: HeaderMap,
) -> Response {
    if let Err(e) = agent(&s, &name) {
        return e.into_response();
    }
    crate::http::assets::serve(Uri::from_static("/"), headers).await
}

/// `/agents/{name}/api/{*rest}`: passed on to the agent.
pub(super) async fn api(
    State(s): State<HubState>,
    caller: Option<axum::Extension<Caller>>,
    Path((name, _)): Path<(String, String)>,
    req: Request,
) -> Response {
    let a = match agent(&s, &name) {
        Ok(a) => a.clone(),
        Err(e) => return e.into_response(),
    };
    let Some(rest) = api_rest(req.uri().path()) else {
        return ApiError::new(StatusCode::BAD_REQUEST, "not a path of the agent's API")
            .into_response();
    };
    if req.method() != axum::http::Method::GET
        && let Some(id) = s.coord.acting_on(&name)
    {
        return ApiError::new(
            StatusCode::CONFLICT,
            format!("coordinated restart #{id} is acting on `{name}`: wait for it to end"),
        )
        .into_response();
    }
    let mut url = format!("{}/api/{rest}", a.url.trim_end_matches('/'));
    if let Some(q) = req.uri().query() {
        url.push('?');
        url.push_str(q);
    }
    let method = req.method().clone();
    let sent_type = req.headers().get(header::CONTENT_TYPE).cloned();
    let body = match axum::body::to_bytes(req.into_body(), MAX_BODY).await {
        Ok(b) => b,
        Err(_) => {
            return ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, "request body too large")
                .into_response();
        }
    };
    let mut out = s.http.request(method, &url).body(body);
    if let Some(ct) = sent_type {
        out = out.header(header::CONTENT_TYPE, ct);
    }
    if let Some(t) = &a.token {
        out = out.bearer_auth(t);
    }
    if let Some(axum::Extension(c)) = &caller {
        out = out.header(FOR_HEADER, person(c));
    }
    let resp = match out.send().await {
        Ok(r) => r,
        Err(e) => {
            tracing::debug!(agent = %name, error = %e, "agent unreachable through the hub");
            return ApiError::new(
                StatusCode::BAD_GATEWAY,
                format!("agent `{name}` cannot be reached"),
            )
            .into_response();
        }
    };
    if resp.status() == reqwest::StatusCode::UNAUTHORIZED {
        // Not the person's session: the hub's token there.
        return ApiError::new(
            StatusCode::BAD_GATEWAY,
            format!("agent `{name}` refused the hub's token (401): check its token_file"),
        )
        .into_response();
    }
    let mut back = Response::builder().status(resp.status().as_u16());
    if let Some(h) = back.headers_mut() {
        h.insert(
            header::CONTENT_TYPE,
            content_type(resp.headers().get(header::CONTENT_TYPE)),
        );
        for name in PASSED_BACK {
            if let Some(v) = resp.headers().get(name.as_str())
                && let Ok(v) = HeaderValue::from_bytes(v.as_bytes())
            {
                h.insert(name, v);
            }
        }
    }
    back.body(Body::from_stream(resp.bytes_stream()))
        .unwrap_or_else(|_| StatusCode::BAD_GATEWAY.into_response())
}

/// `/agents/{name}/ws`: the agent's stream, both ways, through the hub.
pub(super) async fn ws(
    State(s): State<HubState>,
    caller: Option<axum::Extension<Caller>>,
    Path(name): Path<String>,
    uri: Uri,
    up: WebSocketUpgrade,
) -> Response {
    let a = match agent(&s, &name) {
        Ok(a) => a.clone(),
        Err(e) => return e.into_response(),
    };
    let base = a.url.trim_end_matches('/');
    let scheme_less = base
        .strip_prefix("https://")
        .map(|r| format!("wss://{r}"))
        .or_else(|| base.strip_prefix("http://").map(|r| format!("ws://{r}")))
        .unwrap_or_default();
    let mut url = format!("{scheme_less}/ws");
    if let Some(q) = uri.query() {
        url.push('?');
        url.push_str(q);
    }
    let Ok(mut req) = url.as_str().into_client_request() else {
        return ApiError::new(StatusCode::BAD_GATEWAY, "bad agent URL").into_response();
    };
    if let Some(t) = &a.token
        && let Ok(v) = HeaderValue::from_str(&format!("Bearer {t}"))
    {
        req.headers_mut().insert(header::AUTHORIZATION, v);
    }
    if let Some(axum::Extension(c)) = &caller
        && let Ok(v) = HeaderValue::from_str(&person(c))
    {
        req.headers_mut().insert(FOR_HEADER, v);
    }
    let Ok(permit) = std::sync::Arc::clone(&s.sockets).try_acquire_owned() else {
        return ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "the hub serves no more sockets now",
        )
        .into_response();
    };
    let connect = tokio_tungstenite::connect_async(req);
    let upstream = match tokio::time::timeout(std::time::Duration::from_secs(10), connect).await {
        Ok(Ok((socket, _))) => socket,
        Err(_) => {
            return ApiError::new(
                StatusCode::GATEWAY_TIMEOUT,
                format!("agent `{name}`'s stream did not open within 10 s"),
            )
            .into_response();
        }
        Ok(Err(e)) => {
            tracing::debug!(agent = %name, error = %e, "agent's /ws unreachable through the hub");
            return ApiError::new(
                StatusCode::BAD_GATEWAY,
                format!("agent `{name}`'s stream cannot be opened"),
            )
            .into_response();
        }
    };
    up.max_message_size(MAX_WS_IN)
        .on_upgrade(move |browser| async move {
            let _permit = permit;
            pump(browser, upstream).await;
        })
}

type Upstream =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// Passes messages both ways until either side closes.
async fn pump(browser: WebSocket, upstream: Upstream) {
    let (mut b_tx, mut b_rx) = browser.split();
    let (mut u_tx, mut u_rx) = upstream.split();
    let down = async {
        while let Some(Ok(m)) = u_rx.next().await {
            let m = match m {
                TMessage::Text(t) => AxMessage::Text(t.as_str().into()),
                TMessage::Binary(b) => AxMessage::Binary(b),
                TMessage::Ping(p) => AxMessage::Ping(p),
                TMessage::Pong(p) => AxMessage::Pong(p),
                TMessage::Close(_) => break,
                TMessage::Frame(_) => continue,
            };
            if b_tx.send(m).await.is_err() {
                break;
            }
        }
        let _ = b_tx.close().await;
    };
    let up = async {
        while let Some(Ok(m)) = b_rx.next().await {
            let m = match m {
                AxMessage::Text(t) => TMessage::Text(t.as_str().into()),
                AxMessage::Binary(b) => TMessage::Binary(b),
                AxMessage::Ping(p) => TMessage::Ping(p),
                AxMessage::Pong(p) => TMessage::Pong(p),
                AxMessage::Close(_) => break,
            };
            if u_tx.send(m).await.is_err() {
                break;
            }
        }
        let _ = u_tx.close().await;
    };
    tokio::select! {
        () = down => {},
        () = up => {},
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_through_the_hub_stays_in_the_agent_s_api() {
        assert_eq!(api_rest("/agents/a/api/restarts/3"), Some("restarts/3"));
        assert_eq!(
            api_rest("/agents/a/api/export/bench.csv"),
            Some("export/bench.csv")
        );
        for bad in [
            "/agents/a/api/../metrics",
            "/agents/a/api/..%2Fmetrics",
            "/agents/a/api/%2e%2e/metrics",
            "/agents/a/api/x/%2E./y",
            "/agents/a/api/.",
            "/agents/a/api/a%5Cb",
            "/agents/a/other",
        ] {
            assert_eq!(api_rest(bad), None, "{bad}");
        }
    }

    #[test]
    fn only_data_comes_back_as_itself() {
        let t = |v: &'static str| content_type(Some(&HeaderValue::from_static(v)));
        assert_eq!(t("application/json"), "application/json");
        assert_eq!(t("text/csv; charset=utf-8"), "text/csv; charset=utf-8");
        assert_eq!(t("text/html"), "application/octet-stream");
        assert_eq!(t("text/javascript"), "application/octet-stream");
        assert_eq!(content_type(None), "application/octet-stream");
    }
}
