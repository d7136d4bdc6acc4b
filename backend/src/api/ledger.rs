//! The throughput ledger's API: start and cancel benchmarks, the flag sets with
//! their results, labels and notes, diffs between sets, the ledger drawn for
//! the page, and export (JSON, CSV).
//! What leaves here is redacted ([`crate::redact`]): secret flag values, and
//! known secrets in labels, notes and errors, also in rows stored before.

use std::collections::HashMap;

use axum::extract::{Path, Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde::Deserialize;
use shared::bench::{BenchRun, FlagSet, FlagSetResults, LedgerSort, LedgerView};

use super::audit::{audited, record};
use super::error::{internal, refused};
use super::state::AppState;
use crate::auth::Caller;
use crate::bench::view::{LedgerAsk, MAX_FILTER};
use crate::http::ApiError;
use crate::http::extract::{Body, limit, path_id};
use crate::restart::manager::Refusal;

pub(super) async fn start(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Body(overrides): Body<serde_json::Value>,
) -> Response {
    let m = match state.manager() {
        Ok(m) => m,
        Err(e) => return e.into_response(),
    };
    let request = overrides.to_string();
    let result = m.bench(overrides, caller.who()).await;
    // A refused body is not kept: what it got wrong may be anything pasted.
    let request = if result.is_ok() {
        request
    } else {
        String::new()
    };
    answer(&state, &caller, "benchmark", request, result, "accepted as")
}

pub(super) async fn cancel(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
) -> Response {
    let m = match state.manager() {
        Ok(m) => m,
        Err(e) => return e.into_response(),
    };
    let result = m.cancel_bench(None).await;
    answer(
        &state,
        &caller,
        "cancel benchmark",
        String::new(),
        result,
        "cancelled",
    )
}

/// Audits what the manager said to a benchmark's start or cancel, and answers
/// it: 202 with the run's id (audited as `done` run #id), or the refusal.
fn answer(
    state: &AppState,
    caller: &Caller,
    action: &str,
    request: String,
    result: Result<i64, Refusal>,
    done: &str,
) -> Response {
    record(
        state,
        caller,
        action,
        request,
        result
            .as_ref()
            .map(|id| format!("{done} run #{id}"))
            .map_err(|r| r.message()),
    );
    audited(match result {
        Ok(id) => (StatusCode::ACCEPTED, Json(serde_json::json!({ "id": id }))).into_response(),
        Err(r) => refused(r),
    })
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RunsQuery {
    flagset: Option<String>,
    limit: Option<u32>,
}

/// A flag set as shown: secret values redacted, known secrets out of its words.
fn shown_set(mut set: FlagSet) -> FlagSet {
    let r = crate::redact::global();
    set.flags = r.flags(&set.flags);
    set.label = set.label.map(|l| r.known(&l));
    set.notes = set.notes.map(|n| r.known(&n));
    set
}

/// A benchmark run as shown: known secrets out of its error and answer.
fn shown_run(mut run: BenchRun) -> BenchRun {
    let r = crate::redact::global();
    run.error = run.error.map(|e| r.known(&e));
    if let Some(c) = run.correctness.as_mut() {
        c.answer = r.known(&c.answer);
    }
    run
}

pub(super) async fn runs(
    State(state): State<AppState>,
    Query(q): Query<RunsQuery>,
) -> Result<Json<Vec<BenchRun>>, ApiError> {
    let n = limit(q.limit, 100)?;
    state
        .store()?
        .bench_runs(q.flagset, n)
        .await
        .map(|runs| Json(runs.into_iter().map(shown_run).collect()))
        .map_err(internal)
}

pub(super) async fn run(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<BenchRun>, ApiError> {
    let id = path_id(&id, "run")?;
    match state.store()?.bench_run(id).await.map_err(internal)? {
        Some(r) => Ok(Json(shown_run(r))),
        None => Err(ApiError::new(
            StatusCode::NOT_FOUND,
            format!("no benchmark run #{id}"),
        )),
    }
}

pub(super) async fn flagsets(
    State(state): State<AppState>,
) -> Result<Json<Vec<FlagSetResults>>, ApiError> {
    let mut ledger = state.store()?.ledger().await.map_err(internal)?;
    for row in &mut ledger {
        row.set = shown_set(row.set.clone());
    }
    Ok(Json(ledger))
}

/// `GET /api/flagsets/view`: what the viewer picked.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ViewQuery {
    c: Option<u32>,
    baseline: Option<String>,
    sort: Option<String>,
    filter: Option<String>,
    target: Option<f64>,
    /// Ids, comma-separated: two compare.
    compare: Option<String>,
}

/// `GET /api/flagsets/view`: the ledger drawn for the page, as the viewer
/// picked it (`?c=&baseline=&sort=throughput|first&filter=&target=&compare=a,b`),
/// with the caller's role and the set the server runs now.
pub(super) async fn view(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Query(q): Query<ViewQuery>,
) -> Result<Json<LedgerView>, ApiError> {
    let bad = |what: String| Err(ApiError::new(StatusCode::BAD_REQUEST, what));
    let sort = match q.sort.as_deref() {
        None | Some("throughput") => LedgerSort::Throughput,
        Some("first") => LedgerSort::FirstSeen,
        Some(_) => return bad("sort is `throughput` or `first`".to_owned()),
    };
    let filter = q.filter.unwrap_or_default();
    if filter.chars().count() > MAX_FILTER {
        return bad(format!("the filter is longer than {MAX_FILTER} characters"));
    }
    let target = q.target.unwrap_or(1000.0);
    if !(target.is_finite() && target > 0.0 && target <= 1e9) {
        return bad("target is a number of tok/s above 0 and at most 1e9".to_owned());
    }
    let compare: Vec<String> = q
        .compare
        .as_deref()
        .unwrap_or_default()
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect();
    let long = |s: &String| s.chars().count() > 64;
    if compare.len() > 2 || compare.iter().any(long) || q.baseline.as_ref().is_some_and(long) {
        return bad(
            "compare names at most two flag sets, each id at most 64 characters".to_owned(),
        );
    }
    let mut ledger = state.store()?.ledger().await.map_err(internal)?;
    for row in &mut ledger {
        row.set = shown_set(row.set.clone());
    }
    let ask = LedgerAsk {
        c: q.c,
        baseline: q.baseline,
        sort,
        filter,
        target,
        compare,
        may: caller.role.may_operate(),
        running: state.hub.server_status().and_then(|s| s.flagset),
    };
    Ok(Json(crate::bench::view::view(&ledger, &ask)))
}

/// `PATCH /api/flagsets/{id}`: a label (≤ 80 characters) and notes (≤ 4000).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Edit {
    label: Option<String>,
    notes: Option<String>,
}

fn clean(
    v: Option<String>,
    max: usize,
    what: &str,
    newlines: bool,
) -> Result<Option<String>, ApiError> {
    let Some(v) = v.map(|s| s.trim().to_owned()).filter(|s| !s.is_empty()) else {
        return Ok(None);
    };
    if v.chars().count() > max {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            format!("{what} is longer than {max} characters"),
        ));
    }
    if v.chars()
        .any(|c| c.is_control() && !(newlines && (c == '\n' || c == '\t')))
    {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            format!("{what} contains control characters"),
        ));
    }
    Ok(Some(v))
}

pub(super) async fn edit(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    Body(e): Body<Edit>,
) -> Result<Response, ApiError> {
    let label = clean(e.label, 80, "label", false)?;
    let notes = clean(e.notes, 4000, "notes", true)?;
    // Audited as shown: a secret pasted into a label is not kept in the log.
    let r = crate::redact::global();
    let shown = |t: &Option<String>| t.as_deref().map(|t| r.known(t));
    let request =
        serde_json::json!({ "flagset": id, "label": shown(&label), "notes": shown(&notes) })
            .to_string();
    let found = state.store()?.edit_flagset(&id, label, notes).await;
    let missing = format!("no flag set `{}`", crate::store::cut(&id, 64));
    record(
        &state,
        &caller,
        "edit flag set",
        request,
        if found {
            Ok("done".to_owned())
        } else {
            Err(&missing)
        },
    );
    Ok(audited(if found {
        StatusCode::NO_CONTENT.into_response()
    } else {
        ApiError::new(StatusCode::NOT_FOUND, missing).into_response()
    }))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct DiffQuery {
    a: String,
    b: String,
}

pub(super) async fn diff(
    State(state): State<AppState>,
    Query(q): Query<DiffQuery>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let s = state.store()?;
    let get = |id: String| async move {
        s.flagset(id.clone())
            .await
            .map_err(internal)?
            .ok_or_else(|| {
                ApiError::new(
                    StatusCode::NOT_FOUND,
                    format!("no flag set `{}`", crate::store::cut(&id, 64)),
                )
            })
    };
    let (a, b): (FlagSet, FlagSet) = (shown_set(get(q.a).await?), shown_set(get(q.b).await?));
    let changes = crate::bench::view::set_changes(&a, &b);
    Ok(Json(
        serde_json::json!({ "a": a, "b": b, "changes": changes }),
    ))
}

pub(super) async fn export_json(State(state): State<AppState>) -> Result<Response, ApiError> {
    let runs: Vec<BenchRun> = state
        .store()?
        .bench_runs(None, 100_000)
        .await
        .map_err(internal)?
        .into_iter()
        .map(shown_run)
        .collect();
    Ok((
        [(
            header::CONTENT_DISPOSITION,
            "attachment; filename=\"drainwatch-bench.json\"",
        )],
        Json(runs),
    )
        .into_response())
}

/// The CSV columns: one row per repeat.
pub(super) const CSV_HEADER: &str = "run_id,flagset,label,status,started_at_ms,concurrency,repeat,\
completed,failed,duration_s,input_tokens,output_tokens,output_tok_s,total_tok_s,request_s,\
ttft_mean_ms,ttft_p50_ms,ttft_p99_ms,tpot_mean_ms,tpot_p50_ms,tpot_p99_ms,\
itl_mean_ms,itl_p50_ms,itl_p99_ms,e2e_mean_ms,e2e_p50_ms,e2e_p99_ms,token_source,\
request_rate,achieved_rate,good,goodput_req_s,client_lag_p99_ms,client_cpu_pct,client_saturated,\
prompt_tokens_asked,prompt_tokens_counted";

/// A text field, quoted when it must be; one a spreadsheet would run as a
/// formula (`=`, `+`, `-`, `@`, tab) is kept as text with a leading `'`.
pub(super) fn field(s: &str) -> String {
    let s = if s.starts_with(['=', '+', '-', '@', '\t', '\r']) {
        format!("'{s}")
    } else {
        s.to_owned()
    };
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s
    }
}

/// A number, or an empty field.
pub(super) fn opt<T: std::fmt::Display>(v: Option<T>) -> String {
    v.map(|v| v.to_string()).unwrap_or_default()
}

pub(super) async fn export_csv(State(state): State<AppState>) -> Result<Response, ApiError> {
    let s = state.store()?;
    let runs = s.bench_runs(None, 100_000).await.map_err(internal)?;
    let labels: HashMap<String, String> = s
        .ledger()
        .await
        .map_err(internal)?
        .into_iter()
        .filter_map(|r| Some((r.set.id.clone(), shown_set(r.set).label?)))
        .collect();
    let mut out = String::from(CSV_HEADER);
    out.push('\n');
    for r in &runs {
        let status = crate::store::name(&r.status);
        let label = labels.get(&r.flagset).map(String::as_str).unwrap_or("");
        for m in &r.repeats {
            let l = |x: &shared::bench::Latency| format!("{},{},{}", x.mean_ms, x.p50_ms, x.p99_ms);
            out.push_str(&format!(
                "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}\n",
                r.id,
                field(&r.flagset),
                field(label),
                status,
                r.started_at_ms,
                m.concurrency,
                m.repeat,
                m.completed,
                m.failed,
                m.duration_s,
                m.input_tokens,
                m.output_tokens,
                m.output_tok_s,
                m.total_tok_s,
                m.request_s,
                l(&m.ttft),
                l(&m.tpot),
                l(&m.itl),
                l(&m.e2e),
                field(m.token_source.as_str()),
                opt(m.request_rate),
                opt(m.achieved_rate),
                opt(m.good),
                opt(m.goodput_req_s),
                opt(m.client.as_ref().map(|c| c.lag_p99_ms)),
                opt(m.client.as_ref().map(|c| c.cpu_pct)),
                field(
                    m.client
                        .as_ref()
                        .and_then(|c| c.saturated.as_deref())
                        .unwrap_or("")
                ),
                opt(m.prompt_tokens_asked),
                opt(m.prompt_tokens_counted),
            ));
        }
    }
    Ok((
        [
            (header::CONTENT_TYPE, "text/csv; charset=utf-8"),
            (
                header::CONTENT_DISPOSITION,
                "attachment; filename=\"drainwatch-bench.csv\"",
            ),
        ],
        out,
    )
        .into_response())
}

#[cfg(test)]
mod tests {
    use super::field;

    #[test]
    fn csv_fields_are_quoted_and_never_formulas() {
        assert_eq!(field("tilelang on"), "tilelang on");
        assert_eq!(field("a,b"), "\"a,b\"");
        assert_eq!(field("say \"hi\""), "\"say \"\"hi\"\"\"");
        assert_eq!(field("=HYPERLINK(\"x\")"), "\"'=HYPERLINK(\"\"x\"\")\"");
        assert_eq!(field("@SUM(A1)"), "'@SUM(A1)");
        assert_eq!(field("-2+3"), "'-2+3");
    }
}
