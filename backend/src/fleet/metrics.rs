//! The hub's `GET /metrics` (OpenMetrics): which agents it reaches, and its
//! coordinated restarts by target and outcome (counted from its records, so
//! they survive a restart of the hub), for the alerts in
//! `deploy/prometheus/rules/alerts.yml`.

use std::sync::atomic::AtomicU64;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use super::HubState;

type Labels = Vec<(String, String)>;

/// The outcomes a finished coordinated restart has, each exported from 0.
const OUTCOMES: [&str; 3] = ["succeeded", "failed", "interrupted"];

pub(super) async fn serve(State(s): State<HubState>) -> Response {
    let mut reg = Registry::default();
    let reachable = Family::<Labels, Gauge>::default();
    reg.register(
        "drainwatch_hub_agent_reachable",
        "Whether the hub follows the agent's stream now (1) or cannot reach it (0)",
        reachable.clone(),
    );
    let seen = Family::<Labels, Gauge<f64, AtomicU64>>::default();
    reg.register(
        "drainwatch_hub_agent_last_seen_timestamp_seconds",
        "When a message last came from the agent (Unix seconds)",
        seen.clone(),
    );
    for a in s.shared.fleet().agents {
        let labels = vec![("agent".to_owned(), a.name.clone())];
        reachable.get_or_create(&labels).set(i64::from(a.reachable));
        if let Some(ms) = a.last_seen_ms {
            seen.get_or_create(&labels).set(ms as f64 / 1e3);
        }
    }
    let coordinated = Family::<Labels, Counter>::default();
    reg.register(
        "drainwatch_hub_coordinated",
        "Finished coordinated restarts by group or deployment and outcome; every pair from 0",
        coordinated.clone(),
    );
    for t in s.coord.config().targets() {
        for outcome in OUTCOMES {
            let _ = coordinated.get_or_create(&vec![
                ("target".to_owned(), t.name.clone()),
                ("outcome".to_owned(), outcome.to_owned()),
            ]);
        }
    }
    match s.coord.records().outcomes() {
        Ok(counts) => {
            for (target, outcome, n) in counts {
                if OUTCOMES.contains(&outcome.as_str()) {
                    coordinated
                        .get_or_create(&vec![
                            ("target".to_owned(), target),
                            ("outcome".to_owned(), outcome),
                        ])
                        .inc_by(n);
                }
            }
        }
        Err(e) => {
            tracing::error!(error = %e, "cannot count the coordinated restarts");
            return StatusCode::INTERNAL_SERVER_ERROR.into_response();
        }
    }
    let running = Gauge::<i64>::default();
    running.set(i64::from(s.coord.running().is_some()));
    reg.register(
        "drainwatch_hub_coordinated_running",
        "Whether a coordinated restart runs now",
        running,
    );
    crate::http::openmetrics(&reg)
}
