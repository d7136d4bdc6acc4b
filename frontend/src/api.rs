//! The REST calls: the session (and [`check_session`], which acts on it),
//! submitting an operation, reading one restart's record, and the throughput
//! ledger (flag sets, labels, diffs, benchmarks). Same-origin relative URLs. A
//! refusal's `error` text is returned verbatim: the backend words it for the
//! operator.

use std::cell::RefCell;
use std::collections::BTreeMap;

use gloo_net::http::{Request, RequestBuilder, Response};
use leptos::prelude::*;
use serde::{Deserialize, Serialize};
use shared::auth::SessionInfo;
use shared::bench::LedgerView;
use shared::campaign::CampaignView;
use shared::restart::{ConfirmRequest, DrainChartView, OpKind, RestartDetail, RestartRequest};

use crate::ledger::form::BenchRequest;
use crate::ops;
use crate::state::AppState;

/// The body of every refusal: `{"error": "...", "running"?: ...}`.
#[derive(Debug, Deserialize)]
struct ErrorBody {
    error: String,
}

/// The refusal's own text, else the status and whatever the body says.
async fn refusal(resp: Response) -> String {
    let status = resp.status();
    let text = resp.text().await.unwrap_or_default();
    match crate::json::from_str::<ErrorBody>(&text) {
        Ok(body) => body.error,
        Err(_) if text.trim().is_empty() => format!("HTTP {status} {}", resp.status_text()),
        Err(_) => format!("HTTP {status}: {}", text.trim()),
    }
}

thread_local! {
    /// The session's CSRF token, once `/api/session` said it.
    static CSRF: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// A state-changing request, with the session's CSRF token when it has one.
fn changing(req: RequestBuilder) -> RequestBuilder {
    match CSRF.with(|c| c.borrow().clone()) {
        Some(token) => req.header("X-CSRF-Token", &token),
        None => req,
    }
}

/// What `GET /api/session` said: `Ok(None)` when nobody is logged in.
pub(crate) async fn session() -> Result<Option<SessionInfo>, String> {
    let resp = Request::get(&crate::base::url("/api/session"))
        .send()
        .await
        .map_err(unreachable)?;
    if resp.status() == 401 {
        return Ok(None);
    }
    if !resp.ok() {
        return Err(refusal(resp).await);
    }
    let body = resp.text().await.map_err(unreachable)?;
    let info: SessionInfo = parse(&body)?;
    CSRF.with(|c| *c.borrow_mut() = info.csrf.clone());
    Ok(Some(info))
}

/// Asks who this page is logged in as; a page without a session goes to
/// the login page.
pub(crate) fn check_session(state: AppState) {
    leptos::task::spawn_local(async move {
        match session().await {
            Ok(Some(s)) => {
                state.session.try_set(Some(s));
            }
            Ok(None) => {
                let _ = window().location().replace("/login");
            }
            Err(e) => {
                state
                    .notice
                    .try_set(Some(format!("could not read this page's session: {e}")));
            }
        }
    });
}

/// `POST /api/logout`; the page then goes to `/login`.
pub(crate) async fn logout() -> Result<(), String> {
    accepted(changing(Request::post(&crate::base::url("/api/logout"))).build()).await
}

fn unreachable(err: impl std::fmt::Display) -> String {
    format!("could not reach drainwatch: {err}")
}

/// A successful answer's body as `T`.
fn parse<T: serde::de::DeserializeOwned>(body: &str) -> Result<T, String> {
    crate::json::from_str(body).map_err(|e| format!("unexpected answer from drainwatch: {e}"))
}

/// Parses `GET /api/restarts/{id}`'s body.
pub(crate) fn parse_detail(body: &str) -> Result<RestartDetail, String> {
    parse(body)
}

/// The body of a successful answer, or the refusal's text.
async fn body_of(req: Request) -> Result<String, String> {
    body_from(req, unreachable).await
}

/// The body of a successful answer to `req`, else the refusal's text;
/// `unreachable` words a request that got no answer.
async fn body_from(
    req: Request,
    unreachable: fn(gloo_net::Error) -> String,
) -> Result<String, String> {
    let resp = req.send().await.map_err(unreachable)?;
    if resp.ok() {
        resp.text().await.map_err(unreachable)
    } else {
        Err(refusal(resp).await)
    }
}

/// `Ok` for a successful answer, else the refusal's text.
async fn accepted(req: Result<Request, gloo_net::Error>) -> Result<(), String> {
    let req = req.map_err(|e| format!("could not write the request: {e}"))?;
    body_of(req).await.map(drop)
}

/// `GET /api/restarts/{id}/chart`: its drain chart, drawn by the agent.
pub(crate) async fn restart_chart(id: i64) -> Result<DrainChartView, String> {
    let url = crate::base::url(&format!("/api/restarts/{id}/chart"));
    parse(&body_of(Request::get(&url).build().map_err(unreachable)?).await?)
}

/// `GET /api/flagsets/view`: the ledger drawn by the agent for what the
/// viewer picked (`picks`: the query's parameters, `None` left out).
pub(crate) async fn ledger_view(picks: &[(&str, Option<String>)]) -> Result<LedgerView, String> {
    let query: Vec<String> = picks
        .iter()
        .filter_map(|(k, v)| {
            let v = v.as_deref()?;
            Some(format!(
                "{k}={}",
                String::from(js_sys::encode_uri_component(v))
            ))
        })
        .collect();
    let url = crate::base::url(&format!("/api/flagsets/view?{}", query.join("&")));
    parse(&body_of(Request::get(&url).build().map_err(unreachable)?).await?)
}

/// `PATCH /api/flagsets/{id}`'s body: both are replaced (absent clears).
#[derive(Debug, Serialize)]
struct Edit<'a> {
    label: &'a str,
    notes: &'a str,
}

/// Sets a flag set's label and notes (empty clears them).
pub(crate) async fn edit_flagset(id: &str, label: &str, notes: &str) -> Result<(), String> {
    accepted(
        changing(Request::patch(&crate::base::url(&format!(
            "/api/flagsets/{id}"
        ))))
        .json(&Edit { label, notes }),
    )
    .await
}

/// `POST /api/bench` with the settings to change from the server's defaults.
pub(crate) async fn start_bench(req: &BenchRequest) -> Result<(), String> {
    accepted(changing(Request::post(&crate::base::url("/api/bench"))).json(req)).await
}

/// `POST /api/bench/cancel`.
pub(crate) async fn cancel_bench() -> Result<(), String> {
    accepted(changing(Request::post(&crate::base::url("/api/bench/cancel"))).build()).await
}

/// Asks for `kind` (restart, start with `flags`; stop, adopt without), guarded
/// by the `generation` the operator looked at and the typed `confirm`; a
/// launch may carry the typed GPUs that override a health refusal once. `Ok`
/// once the backend accepted it (202); the operation's progress then arrives
/// over the socket.
pub(crate) async fn submit(
    kind: OpKind,
    generation: u64,
    confirm: String,
    flags: BTreeMap<String, Option<String>>,
    contain: bool,
    override_health: Option<String>,
) -> Result<(), String> {
    let req = changing(Request::post(&crate::base::url(ops::endpoint(kind))));
    let req = if ops::takes_flags(kind) {
        req.json(&RestartRequest {
            generation,
            flags,
            confirm,
            override_health,
            node: None,
            coordinated: None,
        })
    } else {
        req.json(&ConfirmRequest {
            generation,
            confirm,
            contain,
            coordinated: None,
        })
    }
    .map_err(|e| format!("could not write the request: {e}"))?;
    let resp = req.send().await.map_err(unreachable)?;
    if resp.ok() {
        Ok(())
    } else {
        Err(refusal(resp).await)
    }
}

/// `GET /api/campaigns/{id}/view`: the campaign drawn by the agent, with
/// step `selected` chosen and the rows of steps `rows`.
pub(crate) async fn campaign_view(
    id: i64,
    selected: Option<u32>,
    rows: std::ops::Range<usize>,
) -> Result<CampaignView, String> {
    let mut path = format!(
        "/api/campaigns/{id}/view?from={}&to={}",
        rows.start, rows.end
    );
    if let Some(s) = selected {
        path.push_str(&format!("&selected={s}"));
    }
    let url = crate::base::url(&path);
    parse(&body_of(Request::get(&url).build().map_err(unreachable)?).await?)
}

/// `POST /api/campaigns` with the plan as JSON (`dry_run`: only laid out, and
/// the laid-out campaign comes back).
pub(crate) async fn post_plan(
    json: String,
    dry_run: bool,
) -> Result<Option<crate::campaign::plan::Laid>, String> {
    let url = if dry_run {
        "/api/campaigns?dry_run=true"
    } else {
        "/api/campaigns"
    };
    let req = changing(Request::post(&crate::base::url(url)))
        .header("Content-Type", "application/json")
        .body(json)
        .map_err(|e| format!("could not write the request: {e}"))?;
    let body = body_of(req).await?;
    if dry_run {
        parse(&body).map(Some)
    } else {
        Ok(None)
    }
}

/// `POST /api/campaigns/{id}/{pause|resume|cancel}`.
pub(crate) async fn campaign_act(id: i64, verb: &str) -> Result<(), String> {
    accepted(
        changing(Request::post(&crate::base::url(&format!(
            "/api/campaigns/{id}/{verb}"
        ))))
        .build(),
    )
    .await
}

/// One webhook's answer to a test.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct Delivery {
    pub(crate) name: String,
    pub(crate) ok: bool,
    pub(crate) error: Option<String>,
}

/// `POST /api/webhooks/test`: how each hook answered.
pub(crate) async fn test_webhooks() -> Result<Vec<Delivery>, String> {
    parse(
        &body_of(
            changing(Request::post(&crate::base::url("/api/webhooks/test")))
                .build()
                .map_err(unreachable)?,
        )
        .await?,
    )
}

/// `GET /api/restarts/{id}`.
pub(crate) async fn restart_detail(id: i64) -> Result<RestartDetail, String> {
    let url = crate::base::url(&format!("/api/restarts/{id}"));
    parse_detail(&body_of(Request::get(&url).build().map_err(unreachable)?).await?)
}

/// `GET /api/fleet/panel` at the hub: the fleet's rows as HTML, rendered
/// there.
pub(crate) async fn fleet_panel() -> Result<String, String> {
    fn hub(e: gloo_net::Error) -> String {
        format!("could not reach the hub: {e}")
    }
    body_from(Request::get("/api/fleet/panel").build().map_err(hub)?, hub).await
}

/// `GET /api/coordinated/panel` at the hub: the coordinated restarts'
/// panel as HTML, rendered there.
pub(crate) async fn coord_panel() -> Result<String, String> {
    body_of(
        Request::get("/api/coordinated/panel")
            .build()
            .map_err(unreachable)?,
    )
    .await
}

/// `POST /api/groups/{target}/restart` at the hub, confirmed by `confirm`.
pub(crate) async fn coord_restart(target: &str, confirm: &str, flags: &str) -> Result<(), String> {
    // Written by hand: the hub reads the flag changes as typed.
    let q = |s: &str| serde_json::to_string(s).unwrap_or_default();
    let body = format!(r#"{{"confirm":{},"flags_text":{}}}"#, q(confirm), q(flags));
    accepted(
        changing(Request::post(&format!("/api/groups/{target}/restart")))
            .header("Content-Type", "application/json")
            .body(body),
    )
    .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use shared::restart::{Durations, MarkerKind, Outcome, Phase, RestartSummary};

    #[test]
    fn detail_bodies_parse() {
        let detail = RestartDetail {
            summary: RestartSummary {
                id: 3,
                kind: OpKind::Restart,
                requested_by: "127.0.0.1:1".to_owned(),
                started_at_ms: 1,
                finished_at_ms: None,
                from_flags: Default::default(),
                to_flags: Default::default(),
                outcome: Outcome::Running,
                failure: None,
                durations: Durations::default(),
            },
            transitions: Vec::new(),
            markers: vec![shared::restart::Marker {
                kind: MarkerKind::Sigterm,
                at_ms: 2,
            }],
            timeline: vec![shared::restart::TimelinePoint {
                at_ms: 3,
                phase: Phase::Draining,
                mem_used_bytes: vec![Some(4), None],
                running_requests: Some(1),
            }],
            log_tail: vec!["a".to_owned()],
            containment: Some("process group only (no cgroup v2)".to_owned()),
        };
        let body = serde_json::to_string(&detail).expect("serialize");
        assert_eq!(parse_detail(&format!("  {body}")), Ok(detail));
        assert!(parse_detail("[]").is_err());
        assert!(parse_detail("{}").is_err());
        assert!(parse_detail(r#"{"error":"x"}"#).is_err());
    }
}
