//! The campaigns' API: start a plan (TOML or JSON; `?dry_run=true` only lays
//! it out), list and read campaigns, pause, resume and cancel the running one,
//! export one whole (JSON, CSV), and test the webhooks. Every change is
//! audited here; what leaves is redacted.

use axum::body::Bytes;
use axum::extract::{FromRequest, Path, Query, Request, State};
use axum::http::header::CONTENT_TYPE;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde::Deserialize;
use shared::campaign::{Campaign, CampaignInfo, CampaignView, analysis};
use shared::restart::{Phase, ServerStatus};

use super::audit::{audited, record};
use super::error::{internal, refused};
use super::ledger::{field, opt};
use super::state::AppState;
use crate::auth::Caller;
use crate::campaign::view::{MAX_ROWS, ViewAsk};
use crate::campaign::{self, Started, plan};
use crate::http::ApiError;
use crate::http::extract::{limit, path_id};

/// A plan's text and whether it is JSON (else TOML), by its content type.
#[derive(Debug)]
pub(super) struct PlanText {
    text: String,
    json: bool,
}

impl<S: Send + Sync> FromRequest<S> for PlanText {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let ct = req
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .split(';')
            .next()
            .unwrap_or_default()
            .trim()
            .to_ascii_lowercase();
        let json = match ct.as_str() {
            "application/json" => true,
            "application/toml" | "text/toml" | "text/x-toml" | "text/plain" => false,
            _ => {
                return Err(ApiError::new(
                    StatusCode::UNSUPPORTED_MEDIA_TYPE,
                    "send the plan as JSON (application/json) or TOML (application/toml)",
                ));
            }
        };
        let bytes = Bytes::from_request(req, state).await.map_err(|r| {
            if r.status() == StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::new(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "the plan is too large (64 KiB at most)",
                )
            } else {
                ApiError::new(StatusCode::BAD_REQUEST, "the plan could not be read")
            }
        })?;
        let text = String::from_utf8(bytes.to_vec()).map_err(|_| {
            ApiError::new(StatusCode::BAD_REQUEST, "the plan is not UTF-8 text")
                .audited_as("plan is not text")
        })?;
        Ok(Self { text, json })
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct StartQuery {
    #[serde(default)]
    dry_run: bool,
}

/// `POST /api/campaigns`: the plan checked whole, then started (202) or, with
/// `?dry_run=true`, laid out (200: every step, in the order it would run).
pub(super) async fn start(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Query(q): Query<StartQuery>,
    body: PlanText,
) -> Response {
    let (runner, cfg) = match (state.campaigns(), state.server_config()) {
        (Ok(r), Ok(c)) => (r, c),
        (Err(e), _) | (_, Err(e)) => return e.into_response(),
    };
    let parsed = plan::parse(&body.text, body.json);
    // A text that is not a plan may hold anything (a pasted token): the
    // audit keeps only that it did not parse, as for any body not the
    // request expected. One that parses is quoted, as a restart's flags are.
    let unparsed = parsed.is_err();
    let resolved = parsed.and_then(|spec| plan::resolve(spec, &cfg.allow, &cfg.bench.defaults));
    let action = if q.dry_run {
        "campaign dry run"
    } else {
        "campaign start"
    };
    let resolved = match resolved {
        Ok(r) => r,
        Err(e) => {
            if !q.dry_run {
                let why = if unparsed {
                    "the plan does not parse"
                } else {
                    &e.0
                };
                record(&state, &caller, action, String::new(), Err(why));
            }
            // The message may quote the plan's values: the audit keeps it,
            // bounded, since only an operator gets this far.
            return audited(
                ApiError::new(StatusCode::BAD_REQUEST, format!("invalid plan: {e}"))
                    .into_response(),
            );
        }
    };
    let summary = format!("“{}”: {} steps", resolved.name, resolved.steps.len());
    match runner.start(resolved, caller.who(), q.dry_run).await {
        Ok(Started::Preview(c)) => (StatusCode::OK, Json(*c)).into_response(),
        Ok(Started::Running(a)) => {
            record(
                &state,
                &caller,
                action,
                summary,
                Ok(format!("started as #{}", a.id)),
            );
            audited((StatusCode::ACCEPTED, Json(a)).into_response())
        }
        Err(r) => {
            if !q.dry_run {
                record(&state, &caller, action, summary, Err(r.message()));
            }
            audited(refused(r))
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Page {
    limit: Option<u32>,
}

pub(super) async fn list(
    State(state): State<AppState>,
    Query(page): Query<Page>,
) -> Result<Json<Vec<CampaignInfo>>, ApiError> {
    let n = limit(page.limit, 50)?;
    let list = state.store()?.campaigns(n).await.map_err(internal)?;
    Ok(Json(list.into_iter().map(campaign::shown_info).collect()))
}

async fn read(state: &AppState, id: &str) -> Result<Campaign, ApiError> {
    let id = path_id(id, "campaign")?;
    match state.store()?.campaign(id).await.map_err(internal)? {
        Some(c) => Ok(campaign::shown(c)),
        None => Err(ApiError::new(
            StatusCode::NOT_FOUND,
            format!("no campaign #{id}"),
        )),
    }
}

pub(super) async fn detail(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<Campaign>, ApiError> {
    read(&state, &id).await.map(Json)
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ViewQuery {
    /// The chosen step.
    selected: Option<u32>,
    /// The rows to draw: steps `from..to`.
    from: Option<u32>,
    to: Option<u32>,
}

/// `GET /api/campaigns/{id}/view`: the campaign drawn for the page, with
/// step `selected` chosen and the rows of steps `from..to` (at most
/// [`MAX_ROWS`]; the first 50 when not given), drawn with the caller's role
/// and the server as it is now.
pub(super) async fn view(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    Query(q): Query<ViewQuery>,
) -> Result<Json<CampaignView>, ApiError> {
    let from = q.from.unwrap_or(0) as usize;
    let to = q.to.map_or(from + 50, |t| t as usize);
    if to < from || to - from > MAX_ROWS {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            format!(
                "rows from..to: `to` must be at least `from` and at most {MAX_ROWS} rows after it"
            ),
        ));
    }
    let c = read(&state, &id).await?;
    let server = state.hub.server_status();
    let ask = ViewAsk {
        selected: q.selected,
        rows: from..to,
        may: caller.role.may_operate(),
        free: server.as_ref().is_some_and(ServerStatus::is_free),
        phase: server.map_or(Phase::Stopped, |s| s.phase),
        now_ms: crate::clock::now_ms(),
    };
    Ok(Json(campaign::view::view(&c, &ask)))
}

/// `POST /api/campaigns/{id}/{pause|resume|cancel}`.
pub(super) async fn act(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path((id, verb)): Path<(String, String)>,
) -> Response {
    let runner = match state.campaigns() {
        Ok(r) => r,
        Err(e) => return e.into_response(),
    };
    let id = match path_id(&id, "campaign") {
        Ok(id) => id,
        Err(e) => return e.into_response(),
    };
    // One that never was is not found; one that is over, a conflict.
    if !matches!(verb.as_str(), "pause" | "resume" | "cancel") {
        return ApiError::new(
            StatusCode::NOT_FOUND,
            "no such action: pause, resume or cancel",
        )
        .into_response();
    }
    match state.store().map(|s| s.campaign(id)) {
        Ok(found) => match found.await {
            Ok(Some(_)) => {}
            Ok(None) => {
                return ApiError::new(StatusCode::NOT_FOUND, format!("no campaign #{id}"))
                    .into_response();
            }
            Err(e) => return internal(e).into_response(),
        },
        Err(e) => return e.into_response(),
    }
    let by = caller.who();
    let result = match verb.as_str() {
        "pause" => runner.pause(id, by).await,
        "resume" => runner.resume(id, by).await,
        "cancel" => runner.cancel(id, by).await,
        _ => {
            return ApiError::new(
                StatusCode::NOT_FOUND,
                "no such action: pause, resume or cancel",
            )
            .into_response();
        }
    };
    let action = format!("campaign {verb}");
    record(
        &state,
        &caller,
        &action,
        format!("campaign #{id}"),
        result
            .as_ref()
            .map(|a| format!("campaign #{} {}", a.id, a.state.label()))
            .map_err(|r| r.message()),
    );
    audited(match result {
        Ok(a) => (StatusCode::ACCEPTED, Json(a)).into_response(),
        Err(r) => refused(r),
    })
}

/// `GET /api/campaigns/{id}/export.json`: the campaign, each step's Δ against
/// the baseline, the best step and every flag's effect.
pub(super) async fn export_json(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let c = read(&state, &id).await?;
    let host = state.hub.host();
    let body = serde_json::json!({
        // Never a simulated number taken for a real one.
        "host": host.hostname,
        "simulated": host.nvml.is_simulated(),
        "delta_pct": analysis::deltas(&c),
        "best_step": analysis::best(&c).map(|s| s.index),
        "effects": analysis::attribution(&c),
        "campaign": c,
    });
    Ok((
        [(
            header::CONTENT_DISPOSITION,
            format!(
                "attachment; filename=\"drainwatch-campaign-{}.json\"",
                c.info.id
            ),
        )],
        Json(body),
    )
        .into_response())
}

/// The campaign CSV's columns: one row per step.
pub(super) const CSV_HEADER: &str = "campaign_id,campaign,step,plan_index,label,state,attempts,\
flagset,changes,concurrency,request_rate,metric,unit,metric_min,metric_max,output_tok_s,\
ttft_p99_ms,goodput_req_s,delta_pct,failure,failure_message,restart_id,run_id,took_s";

/// `GET /api/campaigns/{id}/export.csv`.
pub(super) async fn export_csv(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let c = read(&state, &id).await?;
    let deltas = analysis::deltas(&c);
    let base = c.baseline().map(|b| b.flags.clone()).unwrap_or_default();
    let now = crate::clock::now_ms();
    let mut out = String::from(CSV_HEADER);
    out.push('\n');
    for (s, d) in c.steps.iter().zip(deltas) {
        let changes: Vec<String> = shared::flags::diff(&base, &s.flags)
            .iter()
            .map(ToString::to_string)
            .collect();
        let r = s.result.as_ref();
        out.push_str(&format!(
            "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}\n",
            c.info.id,
            field(&c.info.name),
            s.index + 1,
            s.plan_index + 1,
            field(s.label.as_deref().unwrap_or("")),
            s.state.label(),
            s.attempts,
            field(&s.flagset),
            field(&changes.join("; ")),
            opt(r.map(|r| r.concurrency)),
            opt(r.and_then(|r| r.request_rate)),
            opt(r.map(|r| r.metric().median)),
            field(r.map(|r| r.metric_unit()).unwrap_or("")),
            opt(r.map(|r| r.metric().min)),
            opt(r.map(|r| r.metric().max)),
            opt(r.map(|r| r.output_tok_s.median)),
            opt(r.map(|r| r.ttft_p99_ms.median)),
            opt(r.and_then(|r| r.goodput_req_s.map(|g| g.median))),
            opt(d.map(|d| (d * 10.0).round() / 10.0)),
            field(s.failure.as_ref().map(|f| f.kind.label()).unwrap_or("")),
            field(s.failure.as_ref().map(|f| f.message.as_str()).unwrap_or("")),
            opt(s.restart_id),
            opt(r.map(|r| r.run_id).or(s.run_id)),
            opt(s.took_ms(now).map(|t| t as f64 / 1000.0)),
        ));
    }
    Ok((
        [
            (header::CONTENT_TYPE, "text/csv; charset=utf-8".to_owned()),
            (
                header::CONTENT_DISPOSITION,
                format!(
                    "attachment; filename=\"drainwatch-campaign-{}.csv\"",
                    c.info.id
                ),
            ),
        ],
        out,
    )
        .into_response())
}

/// `POST /api/webhooks/test`: a test message to every configured hook; how
/// each answered (never its URL).
pub(super) async fn test_webhooks(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
) -> Response {
    let Some(hooks) = state.webhooks.as_ref() else {
        return ApiError::new(
            StatusCode::NOT_FOUND,
            "drainwatch runs without a server config: no webhooks",
        )
        .into_response();
    };
    if hooks.is_empty() {
        record(
            &state,
            &caller,
            "test webhooks",
            String::new(),
            Err("no webhooks configured"),
        );
        return audited(
            ApiError::new(
                StatusCode::CONFLICT,
                "no webhooks are configured: add [[webhooks]] to the server's config",
            )
            .into_response(),
        );
    }
    let results = hooks.test(state.hub.host()).await;
    let ok = results.iter().filter(|d| d.ok).count();
    record(
        &state,
        &caller,
        "test webhooks",
        String::new(),
        Ok(format!("{ok} of {} delivered", results.len())),
    );
    audited((StatusCode::OK, Json(results)).into_response())
}
