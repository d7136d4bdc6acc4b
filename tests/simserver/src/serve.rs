//! The launcher's HTTP face: `/health`, an OpenAI-style `/v1/completions`
//! (streamed as server-sent events, or whole), and a Prometheus `/metrics` with
//! SGLang's names — enough for drainwatch to probe readiness and watch requests
//! drain.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use axum::Json;
use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use futures_util::stream::{self, Stream};
use serde::Deserialize;

use crate::modes::Modes;

/// The server's shared state.
#[derive(Debug)]
pub(crate) struct Server {
    pub(crate) tp: usize,
    pub(crate) ready: AtomicUsize,
    /// SIGTERM received: no new requests.
    pub(crate) draining: AtomicBool,
    pub(crate) in_flight: AtomicUsize,
    pub(crate) generation_tokens: AtomicU64,
    pub(crate) prompt_tokens: AtomicU64,
    pub(crate) requests: AtomicU64,
    pub(crate) modes: Modes,
    /// Time to first token and between tokens, per request.
    pub(crate) ttft: Duration,
    pub(crate) itl: Duration,
}

impl Server {
    pub(crate) fn is_ready(&self) -> bool {
        self.ready.load(Ordering::SeqCst) >= self.tp && !self.draining.load(Ordering::SeqCst)
    }
}

pub(crate) fn router(server: Arc<Server>) -> Router {
    Router::new()
        .route("/health", get(health))
        .route("/v1/completions", post(completions))
        .route("/metrics", get(metrics))
        .with_state(server)
}

async fn health(State(s): State<Arc<Server>>) -> (StatusCode, &'static str) {
    if s.is_ready() {
        (StatusCode::OK, "ok")
    } else if s.draining.load(Ordering::SeqCst) {
        (StatusCode::SERVICE_UNAVAILABLE, "draining")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "warming up")
    }
}

#[derive(Debug, Deserialize)]
struct CompletionRequest {
    #[serde(default)]
    prompt: serde_json::Value,
    #[serde(default = "default_max_tokens")]
    max_tokens: u64,
    #[serde(default)]
    stream: bool,
}

fn default_max_tokens() -> u64 {
    16
}

/// Counts a request as in flight until dropped (finished, or the client left).
struct InFlight(Arc<Server>);

impl InFlight {
    fn new(s: &Arc<Server>) -> Self {
        s.in_flight.fetch_add(1, Ordering::SeqCst);
        s.requests.fetch_add(1, Ordering::SeqCst);
        Self(Arc::clone(s))
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

fn prompt_tokens(prompt: &serde_json::Value) -> u64 {
    match prompt {
        serde_json::Value::String(s) => s.split_whitespace().count().max(1) as u64,
        serde_json::Value::Array(a) => a.len().max(1) as u64,
        _ => 1,
    }
}

fn chunk(i: u64, text: &str, finish: Option<&str>) -> serde_json::Value {
    serde_json::json!({
        "id": "cmpl-sim",
        "object": "text_completion",
        "model": "default",
        "choices": [{ "index": 0, "text": text, "finish_reason": finish }],
        "created": i,
    })
}

fn usage(prompt: u64, completion: u64) -> serde_json::Value {
    serde_json::json!({
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    })
}

async fn completions(State(s): State<Arc<Server>>, Json(req): Json<CompletionRequest>) -> Response {
    if !s.is_ready() {
        return (StatusCode::SERVICE_UNAVAILABLE, "not ready").into_response();
    }
    let guard = InFlight::new(&s);
    if s.modes.hang_completions {
        std::future::pending::<()>().await;
    }
    let p = prompt_tokens(&req.prompt);
    s.prompt_tokens.fetch_add(p, Ordering::SeqCst);
    let n = req.max_tokens.clamp(1, 100_000);
    if req.stream {
        Sse::new(token_stream(guard, p, n)).into_response()
    } else {
        tokio::time::sleep(s.ttft + s.itl * (n.saturating_sub(1) as u32)).await;
        s.generation_tokens.fetch_add(n, Ordering::SeqCst);
        let text: String = (0..n).map(|i| format!("tok{i} ")).collect();
        let mut body = chunk(0, &text, Some("length"));
        body["usage"] = usage(p, n);
        drop(guard);
        Json(body).into_response()
    }
}

/// One SSE event per token at the server's pace, then a usage chunk and `[DONE]`.
fn token_stream(
    guard: InFlight,
    prompt: u64,
    n: u64,
) -> impl Stream<Item = Result<Event, Infallible>> {
    stream::unfold((guard, 0u64), move |(guard, i)| async move {
        let s = Arc::clone(&guard.0);
        if i > n + 1 {
            return None;
        }
        let event = if i < n {
            tokio::time::sleep(if i == 0 { s.ttft } else { s.itl }).await;
            s.generation_tokens.fetch_add(1, Ordering::SeqCst);
            let finish = (i + 1 == n).then_some("length");
            Event::default().data(chunk(i, &format!("tok{i} "), finish).to_string())
        } else if i == n {
            let mut last = chunk(i, "", None);
            last["choices"] = serde_json::json!([]);
            last["usage"] = usage(prompt, n);
            Event::default().data(last.to_string())
        } else {
            Event::default().data("[DONE]")
        };
        Some((Ok(event), (guard, i + 1)))
    })
}

async fn metrics(State(s): State<Arc<Server>>) -> impl IntoResponse {
    let labels = "model_name=\"default\",tp_rank=\"0\"";
    let body = format!(
        "# HELP sglang:num_running_reqs The number of running requests.\n\
         # TYPE sglang:num_running_reqs gauge\n\
         sglang:num_running_reqs{{{labels}}} {}\n\
         # HELP sglang:num_queue_reqs The number of requests in the waiting queue.\n\
         # TYPE sglang:num_queue_reqs gauge\n\
         sglang:num_queue_reqs{{{labels}}} 0\n\
         # HELP sglang:generation_tokens_total Number of generation tokens processed.\n\
         # TYPE sglang:generation_tokens_total counter\n\
         sglang:generation_tokens_total{{{labels}}} {}\n\
         # HELP sglang:prompt_tokens_total Number of prefill tokens processed.\n\
         # TYPE sglang:prompt_tokens_total counter\n\
         sglang:prompt_tokens_total{{{labels}}} {}\n\
         # HELP sglang:num_requests_total Number of requests processed.\n\
         # TYPE sglang:num_requests_total counter\n\
         sglang:num_requests_total{{{labels}}} {}\n",
        s.in_flight.load(Ordering::SeqCst),
        s.generation_tokens.load(Ordering::SeqCst),
        s.prompt_tokens.load(Ordering::SeqCst),
        s.requests.load(Ordering::SeqCst),
    );
    ([("content-type", "text/plain; version=0.0.4")], body)
}
