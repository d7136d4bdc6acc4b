//! The agent's HTTP surface: `/healthz`, `/api/*`, `/metrics`, `/ws` and the
//! UI's files. Handlers read the [`Hub`](crate::hub::Hub); nothing here touches
//! NVML or `/proc`. This file is the router: the handlers' modules share
//! [`AppState`] (`state.rs`) and the audit log's writers (`audit.rs`), and
//! none of them reads from here. What the hub's surface shares with this one
//! (the JSON error, the body reader, the gate, the route table, the headers)
//! is in [`crate::http`].

mod audit;
mod campaigns;
mod error;
mod ledger;
mod metrics;
mod ops;
mod refusals;
mod state;
mod ws;

use std::time::Duration;

use axum::Json;
use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::{any, get, post};
use serde::Serialize;

use shared::restart::{ConfirmRequest, OpKind, RestartRequest};

pub use state::AppState;

use crate::http::routes::{self, Query, Route, Table};
use crate::http::{ApiError, assets, browser_headers, gate};

/// Largest request body accepted; restart requests are a few hundred bytes.
const MAX_BODY: usize = 64 * 1024;

/// The agent's HTTP surface, route by route, with the query parameters each
/// reads: the router is built from it, and the whole-API walk covers it.
fn table() -> Table<AppState> {
    use routes::{NONE, Query::Only};
    const GET: &[(&str, Query)] = &[("GET", NONE)];
    const POST: &[(&str, Query)] = &[("POST", NONE)];
    const PAGED: &[(&str, Query)] = &[("GET", Only(&["limit"]))];
    gate::session_routes(Table::default())
        .route("/healthz", get(healthz), GET)
        .route("/api/state", get(api_state), GET)
        .route(
            "/api/restart",
            post(|s, c, b| ops::operation::<RestartRequest>(OpKind::Restart, s, c, b)),
            POST,
        )
        .route(
            "/api/start",
            post(|s, c, b| ops::operation::<RestartRequest>(OpKind::Start, s, c, b)),
            POST,
        )
        .route(
            "/api/stop",
            post(|s, c, b| ops::operation::<ConfirmRequest>(OpKind::Stop, s, c, b)),
            POST,
        )
        .route(
            "/api/adopt",
            post(|s, c, b| ops::operation::<ConfirmRequest>(OpKind::Adopt, s, c, b)),
            POST,
        )
        .route("/api/coordinated/{id}/release", post(ops::release), POST)
        .route("/api/restarts", get(ops::restarts), PAGED)
        .route("/api/restarts/{id}", get(ops::restart_detail), GET)
        .route("/api/restarts/{id}/chart", get(ops::restart_chart), GET)
        .route(
            "/api/audit",
            get(ops::audit),
            &[("GET", Only(&["limit", "kind"]))],
        )
        .route("/api/bench", post(ledger::start), POST)
        .route("/api/bench/cancel", post(ledger::cancel), POST)
        .route(
            "/api/bench/runs",
            get(ledger::runs),
            &[("GET", Only(&["limit", "flagset"]))],
        )
        .route("/api/bench/runs/{id}", get(ledger::run), GET)
        .route("/api/flagsets", get(ledger::flagsets), GET)
        .route(
            "/api/flagsets/view",
            get(ledger::view),
            &[(
                "GET",
                Only(&["c", "baseline", "sort", "filter", "target", "compare"]),
            )],
        )
        .route(
            "/api/flagsets/diff",
            get(ledger::diff),
            &[("GET", Only(&["a", "b"]))],
        )
        .route(
            "/api/flagsets/{id}",
            axum::routing::patch(ledger::edit),
            &[("PATCH", NONE)],
        )
        .route("/api/export/bench.json", get(ledger::export_json), GET)
        .route("/api/export/bench.csv", get(ledger::export_csv), GET)
        .route(
            "/api/campaigns",
            get(campaigns::list).post(campaigns::start),
            &[("GET", Only(&["limit"])), ("POST", Only(&["dry_run"]))],
        )
        .route("/api/campaigns/{id}", get(campaigns::detail), GET)
        .route(
            "/api/campaigns/{id}/view",
            get(campaigns::view),
            &[("GET", Only(&["selected", "from", "to"]))],
        )
        .route(
            "/api/campaigns/{id}/export.json",
            get(campaigns::export_json),
            GET,
        )
        .route(
            "/api/campaigns/{id}/export.csv",
            get(campaigns::export_csv),
            GET,
        )
        .route("/api/campaigns/{id}/{verb}", post(campaigns::act), POST)
        .route("/api/webhooks/test", post(campaigns::test_webhooks), POST)
        .route("/metrics", get(metrics::serve), GET)
        .route("/api/{*rest}", any(api_not_found), &[("*", NONE)])
        .route("/ws", get(ws::upgrade), GET)
}

/// Every route of the agent, as its router answers them.
pub fn routes() -> Vec<Route> {
    table().routes()
}

/// The whole HTTP surface; tests may drive it without a socket.
pub fn router(state: AppState) -> Router {
    let router = table()
        .router()
        .fallback(assets::serve)
        .layer(axum::middleware::from_fn_with_state(
            state.auth.clone(),
            gate::gate,
        ))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            refusals::layer,
        ))
        .layer(axum::middleware::from_fn_with_state(
            state.auth.clone(),
            gate::forwarded,
        ))
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .layer(axum::middleware::from_fn(
            crate::http::refusals::close_after_refused_body,
        ));
    browser_headers(router).with_state(state)
}

#[derive(Debug, Serialize)]
struct Health {
    status: &'static str,
    nvml: &'static str,
    last_sample_age_ms: Option<u64>,
}

/// 200 while samples are fresh; 503 when the sampler has stalled. Open to
/// anyone, so it says only that: not who or how many are connected.
async fn healthz(State(state): State<AppState>) -> impl IntoResponse {
    let hub = &state.hub;
    let age = hub
        .latest()
        .map(|p| crate::clock::now_ms().saturating_sub(p.sample.at_ms));
    let interval = hub.host().sample_interval_ms;
    let stale_after = Duration::from_millis(interval * 10 + 1_000).as_millis() as u64;
    let fresh = age.is_some_and(|a| a <= stale_after);
    let body = Health {
        status: if fresh { "ok" } else { "stalled" },
        nvml: match hub.host().nvml {
            shared::NvmlStatus::Ok { .. } => "ok",
            shared::NvmlStatus::Unavailable { .. } => "unavailable",
        },
        last_sample_age_ms: age,
    };
    let code = if fresh {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (code, Json(body))
}

/// The same [`shared::Snapshot`] a socket gets first.
async fn api_state(State(state): State<AppState>) -> Json<shared::Snapshot> {
    Json(state.hub.snapshot())
}

async fn api_not_found() -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, "no such endpoint")
}
