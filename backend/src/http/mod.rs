//! The HTTP pieces the agent's API (`api/`) and the hub (`fleet/`) share: the
//! JSON error ([`ApiError`]), the body reader ([`extract`]), the gate in front
//! of every route ([`gate`]), the route tables ([`routes`]), the UI's files
//! ([`assets`]), the answers to refusals ([`refusals`]), the headers every
//! response carries ([`browser_headers`]) and OpenMetrics answers
//! ([`openmetrics`]), HTML fragments a page sets as they come
//! ([`html_fragment`]). Nothing here knows the agent's or the hub's state.

pub(crate) mod assets;
mod error;
pub(crate) mod extract;
pub(crate) mod gate;
pub(crate) mod refusals;
pub mod routes;

use axum::Router;
use axum::http::header::CONTENT_TYPE;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use prometheus_client::encoding::text::encode;
use prometheus_client::registry::Registry;
use tower_http::compression::CompressionLayer;
use tower_http::set_header::SetResponseHeaderLayer;

pub use error::ApiError;
pub(crate) use error::AuditReason;
pub use routes::{Query, Route, Table};

/// Compression and what every response tells the browser (see [`CSP`]);
/// the hub's pages get the same.
pub(crate) fn browser_headers<S: Clone + Send + Sync + 'static>(router: Router<S>) -> Router<S> {
    router
        .layer(CompressionLayer::new())
        .layer(always(header::CONTENT_SECURITY_POLICY, CSP))
        .layer(always(header::X_FRAME_OPTIONS, "DENY"))
        .layer(always(header::X_CONTENT_TYPE_OPTIONS, "nosniff"))
        .layer(always(header::REFERRER_POLICY, "no-referrer"))
}

/// What every response tells the browser: run only our own scripts (and the
/// app's WebAssembly), talk only to us, never be framed (no clickjacking of
/// the restart button), sniff no content type, send no referrer. Styles may be
/// inline (the UI sets widths and heights on elements).
pub const CSP: &str = "default-src 'self'; script-src 'self' 'wasm-unsafe-eval'; \
     style-src 'self' 'unsafe-inline'; img-src 'self' data:; connect-src 'self'; \
     object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

fn always(name: header::HeaderName, value: &'static str) -> SetResponseHeaderLayer<HeaderValue> {
    SetResponseHeaderLayer::overriding(name, HeaderValue::from_static(value))
}

/// An HTML fragment rendered for a page to set as it comes, never cached.
pub(crate) fn html_fragment(body: String) -> Response {
    (
        [
            (CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        body,
    )
        .into_response()
}

/// `reg` as an OpenMetrics answer (the agent's and the hub's `/metrics`).
pub(crate) fn openmetrics(reg: &Registry) -> Response {
    let mut out = String::new();
    if encode(&mut out, reg).is_err() {
        return StatusCode::INTERNAL_SERVER_ERROR.into_response();
    }
    (
        [(
            CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        out,
    )
        .into_response()
}
