//! The launcher's HTTP face, the least of the simulated server's API that
//! drainwatch uses: `/health` (503 while warming up or draining, 200 once every
//! worker holds its memory), `/v1/completions` and `/v1/chat/completions` (a
//! fixed short answer, whole), `/v1/models`, `/get_server_info` and `/version`
//! (who it is), and a Prometheus `/metrics` with SGLang's request gauges.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Instant;

use axum::Json;
use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};

/// What every answer says the model is.
const MODEL: &str = "gpuhog";
/// The whole of every completion.
const ANSWER: &str = " OK";

/// The server's shared state.
#[derive(Debug)]
pub(crate) struct Hog {
    pub(crate) workers: usize,
    /// Workers that hold their memory.
    pub(crate) ready: Arc<AtomicUsize>,
    /// Not ready before this, however soon the memory is held (`--warmup-ms`).
    pub(crate) warm_at: Instant,
    /// SIGTERM received: no new requests.
    pub(crate) draining: AtomicBool,
    pub(crate) in_flight: AtomicUsize,
    pub(crate) requests: AtomicU64,
}

impl Hog {
    pub(crate) fn new(workers: usize, warm_at: Instant) -> Self {
        Self {
            workers,
            ready: Arc::new(AtomicUsize::new(0)),
            warm_at,
            draining: AtomicBool::new(false),
            in_flight: AtomicUsize::new(0),
            requests: AtomicU64::new(0),
        }
    }

    pub(crate) fn is_ready(&self) -> bool {
        self.ready.load(Ordering::SeqCst) >= self.workers
            && Instant::now() >= self.warm_at
            && !self.draining.load(Ordering::SeqCst)
    }
}

pub(crate) fn router(hog: Arc<Hog>) -> Router {
    Router::new()
        .route("/health", get(health))
        .route("/v1/models", get(models))
        .route("/v1/completions", post(|s, b| complete(s, b, false)))
        .route("/v1/chat/completions", post(|s, b| complete(s, b, true)))
        .route("/get_server_info", get(server_info))
        .route(
            "/version",
            get(|| async { Json(json!({"version": version()})) }),
        )
        .route("/metrics", get(metrics))
        .with_state(hog)
}

fn version() -> String {
    concat!("gpuhog-", env!("CARGO_PKG_VERSION")).to_owned()
}

async fn health(State(h): State<Arc<Hog>>) -> (StatusCode, &'static str) {
    if h.is_ready() {
        (StatusCode::OK, "ok")
    } else if h.draining.load(Ordering::SeqCst) {
        (StatusCode::SERVICE_UNAVAILABLE, "draining")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "warming up")
    }
}

async fn models() -> Json<Value> {
    Json(
        json!({"object": "list", "data": [{"id": MODEL, "object": "model", "owned_by": "gpuhog"}]}),
    )
}

async fn server_info(State(h): State<Arc<Hog>>) -> Json<Value> {
    Json(json!({"model_path": MODEL, "tp_size": h.workers, "version": version()}))
}

/// Words of the prompt (or of the messages' contents), at least one.
fn prompt_tokens(body: &Value) -> u64 {
    let words = |v: &Value| {
        v.as_str()
            .map_or(0, |s| s.split_whitespace().count() as u64)
    };
    let messages: u64 = body["messages"]
        .as_array()
        .map_or(0, |m| m.iter().map(|m| words(&m["content"])).sum());
    (words(&body["prompt"]) + messages).max(1)
}

/// A completion of one token, once the server is ready.
async fn complete(State(h): State<Arc<Hog>>, Json(body): Json<Value>, chat: bool) -> Response {
    if !h.is_ready() {
        return (StatusCode::SERVICE_UNAVAILABLE, "not ready").into_response();
    }
    h.in_flight.fetch_add(1, Ordering::SeqCst);
    h.requests.fetch_add(1, Ordering::SeqCst);
    let prompt = prompt_tokens(&body);
    let choice = if chat {
        json!({"index": 0, "message": {"role": "assistant", "content": ANSWER}, "finish_reason": "stop"})
    } else {
        json!({"index": 0, "text": ANSWER, "finish_reason": "stop"})
    };
    let answer = json!({
        "id": "cmpl-gpuhog",
        "object": if chat { "chat.completion" } else { "text_completion" },
        "model": MODEL,
        "choices": [choice],
        "usage": {"prompt_tokens": prompt, "completion_tokens": 1, "total_tokens": prompt + 1},
    });
    h.in_flight.fetch_sub(1, Ordering::SeqCst);
    Json(answer).into_response()
}

async fn metrics(State(h): State<Arc<Hog>>) -> impl IntoResponse {
    let labels = format!("model_name=\"{MODEL}\",tp_rank=\"0\"");
    let body = format!(
        "# HELP sglang:num_running_reqs The number of running requests.\n\
         # TYPE sglang:num_running_reqs gauge\n\
         sglang:num_running_reqs{{{labels}}} {}\n\
         # HELP sglang:num_queue_reqs The number of requests in the waiting queue.\n\
         # TYPE sglang:num_queue_reqs gauge\n\
         sglang:num_queue_reqs{{{labels}}} 0\n\
         # HELP sglang:num_requests_total Number of requests processed.\n\
         # TYPE sglang:num_requests_total counter\n\
         sglang:num_requests_total{{{labels}}} {}\n",
        h.in_flight.load(Ordering::SeqCst),
        h.requests.load(Ordering::SeqCst),
    );
    ([("content-type", "text/plain; version=0.0.4")], body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_prompt_words_of_either_api() {
        assert_eq!(prompt_tokens(&json!({"prompt": "Say OK."})), 2);
        assert_eq!(
            prompt_tokens(&json!({"messages": [{"role": "user", "content": "a b c"}]})),
            3
        );
        assert_eq!(prompt_tokens(&json!({})), 1);
    }
}
