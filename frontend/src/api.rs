//! The REST calls: submitting an operation and reading one restart's record.
//! Same-origin relative URLs. A refusal's `error` text is returned verbatim: the
//! backend words it for the operator.

use std::collections::BTreeMap;

use gloo_net::http::{Request, Response};
use serde::Deserialize;
use shared::restart::{Accepted, ConfirmRequest, OpKind, RestartDetail, RestartRequest};

use crate::ops;

/// The body of every refusal: `{"error": "...", "running"?: ...}`.
#[derive(Debug, Deserialize)]
struct ErrorBody {
    error: String,
}

/// The refusal's own text, else the status and whatever the body says.
async fn refusal(resp: Response) -> String {
    let status = resp.status();
    let text = resp.text().await.unwrap_or_default();
    match serde_json::from_str::<ErrorBody>(&text) {
        Ok(body) => body.error,
        Err(_) if text.trim().is_empty() => format!("HTTP {status} {}", resp.status_text()),
        Err(_) => format!("HTTP {status}: {}", text.trim()),
    }
}

fn unreachable(err: impl std::fmt::Display) -> String {
    format!("could not reach drainwatch: {err}")
}

/// Asks for `kind` (restart, start with `flags`; stop, adopt without), guarded
/// by the `generation` the operator looked at and the typed `confirm`.
pub(crate) async fn submit(
    kind: OpKind,
    generation: u64,
    confirm: String,
    flags: BTreeMap<String, Option<String>>,
) -> Result<Accepted, String> {
    let req = Request::post(ops::endpoint(kind));
    let req = if ops::takes_flags(kind) {
        req.json(&RestartRequest {
            generation,
            flags,
            confirm,
        })
    } else {
        req.json(&ConfirmRequest {
            generation,
            confirm,
        })
    }
    .map_err(|e| format!("could not write the request: {e}"))?;
    let resp = req.send().await.map_err(unreachable)?;
    if resp.ok() {
        resp.json::<Accepted>()
            .await
            .map_err(|e| format!("unexpected answer from drainwatch: {e}"))
    } else {
        Err(refusal(resp).await)
    }
}

/// `GET /api/restarts/{id}`.
pub(crate) async fn restart_detail(id: i64) -> Result<RestartDetail, String> {
    let resp = Request::get(&format!("/api/restarts/{id}"))
        .send()
        .await
        .map_err(unreachable)?;
    if resp.ok() {
        resp.json::<RestartDetail>()
            .await
            .map_err(|e| format!("unexpected answer from drainwatch: {e}"))
    } else {
        Err(refusal(resp).await)
    }
}
