//! The operations' API: `POST /api/restart | start | stop | adopt` and their
//! history (`GET /api/restarts`, `/api/restarts/{id}`, `/api/audit`). The
//! manager audits every request it sees, accepted or refused (what is refused
//! before it: see `refusals`); refusals change nothing.

use std::collections::BTreeMap;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde::Deserialize;
use shared::restart::{
    Accepted, ConfirmRequest, DrainChartView, OpKind, RestartDetail, RestartRequest, RestartSummary,
};

use super::audit::audited;
use super::error::{internal, refused};
use super::state::AppState;
use crate::auth::Caller;
use crate::http::ApiError;
use crate::http::extract::{Body, limit, path_id};
use crate::restart::manager::Request as OpRequest;
use crate::store::{AuditEntry, AuditKind};

/// What an operation's body asks for, whichever of its two forms it came in.
#[derive(Debug)]
pub(super) struct Ask {
    generation: u64,
    confirm: String,
    flags: BTreeMap<String, Option<String>>,
    contain: bool,
    override_health: Option<String>,
    node: Option<shared::restart::NodeRole>,
    coordinated: Option<i64>,
}

/// `/api/restart` and `/api/start`: flags to change, never a containment.
impl From<RestartRequest> for Ask {
    fn from(r: RestartRequest) -> Self {
        let RestartRequest {
            generation,
            flags,
            confirm,
            override_health,
            node,
            coordinated,
        } = r;
        Self {
            generation,
            confirm,
            flags,
            contain: false,
            override_health,
            node,
            coordinated,
        }
    }
}

/// `/api/stop` and `/api/adopt`: a confirmation only (and for an adoption,
/// whether to contain the server).
impl From<ConfirmRequest> for Ask {
    fn from(r: ConfirmRequest) -> Self {
        let ConfirmRequest {
            generation,
            confirm,
            contain,
            coordinated,
        } = r;
        Self {
            generation,
            confirm,
            flags: BTreeMap::new(),
            contain,
            override_health: None,
            node: None,
            coordinated,
        }
    }
}

/// `POST /api/restart | start | stop | adopt`: `T` is the body's form for
/// `kind` ([`RestartRequest`] or [`ConfirmRequest`]).
pub(super) async fn operation<T: Into<Ask>>(
    kind: OpKind,
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Body(body): Body<T>,
) -> Response {
    let m = match state.manager() {
        Ok(m) => m,
        Err(e) => return e.into_response(),
    };
    let ask: Ask = body.into();
    if ask.coordinated.is_some() && !caller.may_act_for {
        return audited(
            ApiError::new(
                StatusCode::FORBIDDEN,
                "only a hub's token (`hub = true`) may act for a coordinated restart",
            )
            .into_response(),
        );
    }
    let req = OpRequest {
        kind,
        generation: ask.generation,
        confirm: ask.confirm,
        flags: ask.flags,
        contain: ask.contain,
        peer: caller.who(),
        campaign: None,
        override_health: ask.override_health,
        node: ask.node,
        coordinated: ask.coordinated,
    };
    audited(match m.submit(req).await {
        Ok(accepted) => (StatusCode::ACCEPTED, Json::<Accepted>(accepted)).into_response(),
        Err(r) => refused(r),
    })
}

/// `POST /api/coordinated/{id}/release`: the hub's coordinated restart
/// `id` is done with this node (204); refused (409) while another holds it.
pub(super) async fn release(State(state): State<AppState>, Path(id): Path<String>) -> Response {
    let (m, id) = match (state.manager(), path_id(&id, "coordinated restart")) {
        (Ok(m), Ok(id)) => (m, id),
        (Err(e), _) | (_, Err(e)) => return e.into_response(),
    };
    match m.release(id).await {
        Ok(()) => StatusCode::NO_CONTENT.into_response(),
        Err(r) => refused(r),
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Page {
    limit: Option<u32>,
}

pub(super) async fn restarts(
    State(state): State<AppState>,
    Query(page): Query<Page>,
) -> Result<Json<Vec<RestartSummary>>, ApiError> {
    let n = limit(page.limit, 50)?;
    state.store()?.restarts(n).await.map(Json).map_err(internal)
}

pub(super) async fn restart_detail(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<RestartDetail>, ApiError> {
    let id = path_id(&id, "restart")?;
    match state.store()?.detail(id).await.map_err(internal)? {
        Some(d) => Ok(Json(d)),
        None => Err(ApiError::new(
            StatusCode::NOT_FOUND,
            format!("no restart #{id}"),
        )),
    }
}

/// `GET /api/restarts/{id}/chart`: its drain chart drawn for the page,
/// against the GPUs' total memory in the latest sample.
pub(super) async fn restart_chart(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<DrainChartView>, ApiError> {
    let id = path_id(&id, "restart")?;
    let Some(d) = state.store()?.detail(id).await.map_err(internal)? else {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            format!("no restart #{id}"),
        ));
    };
    let (totals, indices): (Vec<Option<u64>>, Vec<u32>) = state
        .hub
        .latest()
        .map(|p| {
            p.sample
                .gpus
                .iter()
                .map(|g| (g.mem_total_bytes, g.index))
                .unzip()
        })
        .unwrap_or_default();
    Ok(Json(crate::restart::chart::view(&d, &totals, &indices)))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct AuditQuery {
    limit: Option<u32>,
    /// `action` or `refusals`: one part of the log only (a flood of refusal
    /// rows never hides an action from whoever asks for actions).
    kind: Option<AuditKind>,
}

pub(super) async fn audit(
    State(state): State<AppState>,
    Query(q): Query<AuditQuery>,
) -> Result<Json<Vec<AuditEntry>>, ApiError> {
    let n = limit(q.limit, 50)?;
    state
        .store()?
        .audit_log(n, q.kind)
        .await
        .map(Json)
        .map_err(internal)
}
