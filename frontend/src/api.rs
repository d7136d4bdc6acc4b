//! The REST calls: submitting an operation and reading one restart's record.
//! Same-origin relative URLs. A refusal's `error` text is returned verbatim: the
//! backend words it for the operator.

use std::collections::BTreeMap;

use gloo_net::http::{Request, Response};
use serde::Deserialize;
use shared::restart::{ConfirmRequest, OpKind, RestartDetail, RestartRequest};

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

/// A restart record, read the way the socket's messages are read.
///
/// The socket's messages are internally tagged (`"type": …`), so serde reads
/// the shared types in them through its buffered path; reading this body
/// directly would compile a second copy of every shared type's reader into
/// the bundle. Tagging the body the same way shares one copy.
#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Tagged {
    Detail(RestartDetail),
}

/// Parses `GET /api/restarts/{id}`'s body.
pub(crate) fn parse_detail(body: &str) -> Result<RestartDetail, String> {
    let rest = body
        .trim_start()
        .strip_prefix('{')
        .ok_or_else(|| "unexpected answer from drainwatch: not a JSON object".to_owned())?;
    let tagged = format!(r#"{{"type":"detail",{rest}"#);
    match serde_json::from_str::<Tagged>(&tagged) {
        Ok(Tagged::Detail(d)) => Ok(d),
        Err(e) => Err(format!("unexpected answer from drainwatch: {e}")),
    }
}

/// Asks for `kind` (restart, start with `flags`; stop, adopt without), guarded
/// by the `generation` the operator looked at and the typed `confirm`. `Ok`
/// once the backend accepted it (202); the operation's progress then arrives
/// over the socket.
pub(crate) async fn submit(
    kind: OpKind,
    generation: u64,
    confirm: String,
    flags: BTreeMap<String, Option<String>>,
) -> Result<(), String> {
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
        Ok(())
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
        let text = resp.text().await.map_err(unreachable)?;
        parse_detail(&text)
    } else {
        Err(refusal(resp).await)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shared::restart::{Durations, MarkerKind, Outcome, Phase, RestartSummary};

    #[test]
    fn detail_bodies_parse_through_the_tagged_path() {
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
        };
        let body = serde_json::to_string(&detail).expect("serialize");
        assert_eq!(parse_detail(&format!("  {body}")), Ok(detail));
        assert!(parse_detail("[]").is_err());
        assert!(parse_detail("{}").is_err());
        assert!(parse_detail(r#"{"error":"x"}"#).is_err());
    }
}
