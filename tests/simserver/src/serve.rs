//! The launcher's HTTP face: `/health`, OpenAI-style `/v1/completions` and
//! `/v1/chat/completions` and SGLang's native `/generate` (streamed as
//! server-sent events, or whole) served at the pace of the [`RateModel`], and a
//! Prometheus `/metrics` with SGLang's names whose counters match exactly what
//! was sent. With an API key (`SIMSERVER_API_KEY`,
//! as `--api-key` on vLLM), everything but `/health` answers 401 JSON to a
//! request without `Authorization: Bearer <key>`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

use axum::Json;
use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use futures_util::stream::{self, Stream};
use serde::Deserialize;
use std::time::Duration;

use tokio::time::Instant;

use crate::hist::Histogram;
use crate::modes::Modes;
use simserver::rate::RateModel;

/// The server's shared state.
#[derive(Debug)]
pub(crate) struct Server {
    /// The nodes this server spans, when more than one.
    pub(crate) group: Option<Arc<crate::nodes::Group>>,
    pub(crate) tp: usize,
    pub(crate) ready: Arc<AtomicUsize>,
    /// SIGTERM received: no new requests.
    pub(crate) draining: AtomicBool,
    pub(crate) in_flight: AtomicUsize,
    pub(crate) generation_tokens: AtomicU64,
    pub(crate) prompt_tokens: AtomicU64,
    pub(crate) requests: AtomicU64,
    /// Requests made slow by `slow-every`.
    pub(crate) slow_requests: AtomicU64,
    pub(crate) modes: Modes,
    pub(crate) rate: RateModel,
    /// How late the runtime's timer wakes us, on average (µs): tokio's timer
    /// rounds up to whole milliseconds, so every sleep aims this much early.
    pub(crate) lateness_us: AtomicU64,
    /// Time to first token of every streamed request, as sent.
    pub(crate) ttft: Histogram,
    /// Time between tokens, per token (an event of k tokens counts k times).
    pub(crate) itl: Histogram,
    /// The key clients must send as `Authorization: Bearer`, if any.
    pub(crate) api_key: Option<String>,
    /// What `/version` and `/get_server_info` report (see [`version`]);
    /// `None`: a server that does not say (`"version": null`).
    pub(crate) version: Option<String>,
}

/// Where the launcher takes its API key from (as vLLM's `VLLM_API_KEY`).
pub(crate) const API_KEY_ENV: &str = "SIMSERVER_API_KEY";

/// The API key of this launch: `SIMSERVER_API_KEY`, if set and not empty.
pub(crate) fn api_key_from_env() -> Option<String> {
    std::env::var(API_KEY_ENV).ok().filter(|k| !k.is_empty())
}

impl Server {
    /// Sleeps until `deadline`, on time on average (see `lateness_us`).
    async fn wait_until(&self, deadline: Instant) {
        let early = Duration::from_micros(self.lateness_us.load(Ordering::Relaxed));
        let target = deadline.checked_sub(early).unwrap_or(deadline);
        if target <= Instant::now() {
            return;
        }
        tokio::time::sleep_until(target).await;
        let late = Instant::now().saturating_duration_since(target).as_micros() as u64;
        // Exponentially weighted mean over about the last 32 wake-ups.
        let old = self.lateness_us.load(Ordering::Relaxed);
        let new = (old * 31 + late.min(5_000)) / 32;
        self.lateness_us.store(new, Ordering::Relaxed);
    }

    pub(crate) fn is_ready(&self) -> bool {
        self.ready.load(Ordering::SeqCst) >= self.tp
            && !self.draining.load(Ordering::SeqCst)
            && self.group.as_ref().is_none_or(|g| g.complete())
    }
}

pub(crate) fn router(server: Arc<Server>) -> Router {
    let guarded = Router::new()
        .route(
            "/v1/completions",
            post(|s, j| generate(s, j, Api::Completions)),
        )
        .route(
            "/v1/chat/completions",
            post(|s, j| generate(s, j, Api::Chat)),
        )
        .route("/generate", post(native))
        // As SGLang and vLLM say who they are.
        .route("/get_server_info", get(server_info))
        .route(
            "/version",
            get(|State(s): State<Arc<Server>>| async move {
                // `simulated`: drainwatch's page then says the server's numbers are made up.
                Json(serde_json::json!({"version": s.version, "simulated": true}))
            }),
        )
        .route("/metrics", get(metrics))
        .route_layer(axum::middleware::from_fn_with_state(
            Arc::clone(&server),
            require_key,
        ));
    Router::new()
        .route("/health", get(health))
        .merge(guarded)
        .with_state(server)
}

/// Lets a request through only with the right `Authorization: Bearer` when
/// the server has a key, as vLLM and SGLang do: else 401 and a JSON error.
async fn require_key(
    State(s): State<Arc<Server>>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let Some(key) = &s.api_key else {
        return next.run(req).await;
    };
    let sent = req
        .headers()
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    if sent == Some(key.as_str()) {
        return next.run(req).await;
    }
    (
        StatusCode::UNAUTHORIZED,
        Json(serde_json::json!({"error": "Unauthorized"})),
    )
        .into_response()
}

/// The version the simulated server reports: the first line of the file
/// `SIMSERVER_VERSION_FILE` names, read at launch (so a test can upgrade the
/// server between launches; an empty file: a server that does not say), else
/// its own.
pub(crate) fn version() -> Option<String> {
    match std::env::var_os("SIMSERVER_VERSION_FILE").map(std::fs::read_to_string) {
        Some(Ok(t)) => t
            .lines()
            .next()
            .map(|l| l.trim().to_owned())
            .filter(|v| !v.is_empty()),
        _ => Some(concat!("simserver-", env!("CARGO_PKG_VERSION")).to_owned()),
    }
}

/// SGLang's `/get_server_info`: its arguments and version.
async fn server_info(State(s): State<Arc<Server>>) -> Json<serde_json::Value> {
    Json(serde_json::json!({
        "model_path": "sim",
        "tp_size": s.tp,
        "version": s.version,
        "simulated": true,
    }))
}

async fn health(State(s): State<Arc<Server>>) -> (StatusCode, &'static str) {
    if s.is_ready() {
        (StatusCode::OK, "ok")
    } else if s.draining.load(Ordering::SeqCst) {
        (StatusCode::SERVICE_UNAVAILABLE, "draining")
    } else if s.group.as_ref().is_some_and(|g| g.broken()) {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "a node of the group was lost",
        )
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "warming up")
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Api {
    Completions,
    Chat,
    /// SGLang's `/generate`: the text so far and `meta_info` in every chunk.
    Generate,
}

#[derive(Debug, Deserialize)]
struct StreamOptions {
    #[serde(default)]
    include_usage: bool,
    /// vLLM's: every chunk carries the usage so far.
    #[serde(default)]
    continuous_usage_stats: bool,
}

/// The fields of either API this server looks at. Output is always exactly
/// `max_tokens` long (as with `ignore_eos`).
#[derive(Debug, Deserialize)]
struct GenRequest {
    #[serde(default)]
    prompt: serde_json::Value,
    #[serde(default)]
    messages: Vec<serde_json::Value>,
    #[serde(default = "default_max_tokens", alias = "max_completion_tokens")]
    max_tokens: u64,
    #[serde(default)]
    stream: bool,
    stream_options: Option<StreamOptions>,
}

fn default_max_tokens() -> u64 {
    16
}

/// The fields of SGLang's `/generate` this server looks at.
#[derive(Debug, Deserialize)]
struct NativeRequest {
    #[serde(default)]
    text: serde_json::Value,
    #[serde(default)]
    sampling_params: SamplingParams,
    #[serde(default)]
    stream: bool,
}

#[derive(Debug, Deserialize)]
struct SamplingParams {
    #[serde(default = "default_max_tokens")]
    max_new_tokens: u64,
}

impl Default for SamplingParams {
    fn default() -> Self {
        Self {
            max_new_tokens: default_max_tokens(),
        }
    }
}

/// `/generate` as the OpenAI handler's request: the same pacing and counters.
async fn native(s: State<Arc<Server>>, Json(req): Json<NativeRequest>) -> Response {
    let req = GenRequest {
        prompt: req.text,
        messages: Vec::new(),
        max_tokens: req.sampling_params.max_new_tokens,
        stream: req.stream,
        stream_options: None,
    };
    generate(s, Json(req), Api::Generate).await
}

/// Counts a request as in flight until dropped (finished, or the client left).
struct InFlight(Arc<Server>);

impl InFlight {
    fn new(s: &Arc<Server>) -> Self {
        s.in_flight.fetch_add(1, Ordering::SeqCst);
        s.requests.fetch_add(1, Ordering::SeqCst);
        Self(Arc::clone(s))
    }

    fn batch(&self) -> usize {
        self.0.in_flight.load(Ordering::SeqCst)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Prompt length in tokens: whitespace-separated words (or token ids).
fn prompt_tokens(req: &GenRequest) -> u64 {
    let words = |v: &serde_json::Value| match v {
        serde_json::Value::String(s) => s.split_whitespace().count() as u64,
        serde_json::Value::Array(a) => a.len() as u64,
        _ => 0,
    };
    let n = words(&req.prompt)
        + req
            .messages
            .iter()
            .map(|m| words(&m["content"]))
            .sum::<u64>();
    n.max(1)
}

/// Tokens `first..first + count` of every answer: `tok0 tok1 …`; with
/// `wrong-answers`, `tok0 tok1 tok2 tok0 …` (it never counts to three).
fn text_of(wrong: bool, first: u64, count: u64) -> String {
    (first..first + count)
        .map(|i| format!("tok{} ", if wrong { i % 3 } else { i }))
        .collect()
}

fn chunk(api: Api, text: &str, finish: Option<&str>) -> serde_json::Value {
    match api {
        // Filled in by the caller, which knows the text and counts so far.
        Api::Generate => serde_json::json!({ "text": text, "index": 0 }),
        Api::Completions => serde_json::json!({
            "id": "cmpl-sim", "object": "text_completion", "model": "default",
            "choices": [{ "index": 0, "text": text, "finish_reason": finish }],
        }),
        Api::Chat => serde_json::json!({
            "id": "chatcmpl-sim", "object": "chat.completion.chunk", "model": "default",
            "choices": [{ "index": 0, "delta": { "content": text }, "finish_reason": finish }],
        }),
    }
}

/// `/generate`'s counts: in every chunk, `finish_reason` set in the last.
fn meta_info(prompt: u64, completion: u64, finish: Option<&str>) -> serde_json::Value {
    serde_json::json!({
        "id": "sim",
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "cached_tokens": 0,
        "finish_reason": finish.map(|f| serde_json::json!({"type": f, "length": completion})),
    })
}

fn usage(prompt: u64, completion: u64) -> serde_json::Value {
    serde_json::json!({
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    })
}

async fn generate(State(s): State<Arc<Server>>, Json(req): Json<GenRequest>, api: Api) -> Response {
    if !s.is_ready() {
        return (StatusCode::SERVICE_UNAVAILABLE, "not ready").into_response();
    }
    let guard = InFlight::new(&s);
    if s.modes.hang_completions || s.group.as_ref().is_some_and(|g| g.broken()) {
        std::future::pending::<()>().await;
    }
    let p = prompt_tokens(&req);
    s.prompt_tokens.fetch_add(p, Ordering::SeqCst);
    let n = req.max_tokens.clamp(1, 100_000);
    let nth = s.requests.load(Ordering::SeqCst);
    let cut_at = s
        .modes
        .drop_every
        .filter(|every| nth % every == 0)
        .map(|_| n / 2);
    let slow = s.modes.slow_every.is_some_and(|every| nth % every == 0);
    if slow {
        s.slow_requests.fetch_add(1, Ordering::SeqCst);
    }
    let pace = if slow { 3 } else { 1 };
    if req.stream {
        let usage = Usage {
            at_end: req.stream_options.as_ref().is_some_and(|o| o.include_usage),
            every_chunk: !s.modes.final_usage
                && req
                    .stream_options
                    .as_ref()
                    .is_some_and(|o| o.continuous_usage_stats),
        };
        return Sse::new(token_stream(guard, api, p, n, usage, cut_at, pace)).into_response();
    }
    let mut due = Instant::now() + s.rate.ttft(guard.batch());
    for _ in 1..n {
        due += s.rate.itl(guard.batch()) * pace;
    }
    s.wait_until(due).await;
    s.generation_tokens.fetch_add(n, Ordering::SeqCst);
    let mut body = chunk(api, &text_of(s.modes.wrong_answers, 0, n), Some("length"));
    if api == Api::Generate {
        body["meta_info"] = meta_info(p, n, Some("length"));
        drop(guard);
        return Json(body).into_response();
    }
    if api == Api::Chat {
        body["object"] = "chat.completion".into();
        body["choices"][0]["message"] = serde_json::json!({"role": "assistant", "content": text_of(s.modes.wrong_answers, 0, n)});
    }
    body["usage"] = usage(p, n);
    drop(guard);
    Json(body).into_response()
}

/// Which usage a stream reports.
#[derive(Debug, Clone, Copy)]
struct Usage {
    at_end: bool,
    every_chunk: bool,
}

/// Where a stream is.
struct Progress {
    guard: InFlight,
    sent: u64,
    due: Instant,
    done: bool,
    /// When the request came, then when the last event went out.
    last: Instant,
    /// Content events sent.
    events: u64,
}

/// Server-sent events at the model's pace: tokens (several per event with
/// speculative decoding), then the usage chunk if asked for, then `[DONE]`.
/// With `cut_at`, the connection fails after that many tokens.
fn token_stream(
    guard: InFlight,
    api: Api,
    prompt: u64,
    n: u64,
    with_usage: Usage,
    cut_at: Option<u64>,
    pace: u32,
) -> impl Stream<Item = Result<Event, std::io::Error>> {
    let start = Instant::now() + guard.0.rate.ttft(guard.batch());
    let state = Progress {
        guard,
        sent: 0,
        due: start,
        done: false,
        last: Instant::now(),
        events: 0,
    };
    stream::unfold(state, move |mut st| async move {
        if st.done {
            return None;
        }
        let s = Arc::clone(&st.guard.0);
        if st.sent < n {
            if cut_at.is_some_and(|c| st.sent >= c.max(1)) {
                st.done = true;
                return Some((Err(std::io::Error::other("connection dropped")), st));
            }
            let k = if st.sent == 0 {
                1
            } else if s.modes.mixed_events {
                (if st.events % 5 == 0 { 3 } else { 1 }).min(n - st.sent)
            } else {
                s.rate.tokens_per_event.min(n - st.sent)
            };
            st.events += 1;
            // Token i is due one inter-token latency after token i − 1.
            if st.sent > 0 {
                for _ in 0..k {
                    st.due += s.rate.itl(st.guard.batch()) * pace;
                }
            }
            s.wait_until(st.due).await;
            let now = Instant::now();
            let since = now.saturating_duration_since(st.last);
            st.last = now;
            if st.sent == 0 {
                s.ttft.observe(since, 1);
            } else {
                s.itl.observe(since / k as u32, k);
            }
            s.generation_tokens.fetch_add(k, Ordering::SeqCst);
            let first = st.sent;
            st.sent += k;
            let finish = (st.sent == n).then_some("length");
            let mut body = chunk(api, &text_of(s.modes.wrong_answers, first, k), finish);
            if api == Api::Generate {
                // The text so far, not just the new part (SGLang's default).
                body["text"] = text_of(s.modes.wrong_answers, 0, st.sent).into();
                body["meta_info"] = meta_info(prompt, st.sent, finish);
            } else if with_usage.every_chunk {
                body["usage"] = usage(prompt, st.sent);
            }
            let event = Event::default().data(body.to_string());
            return Some((Ok(event), st));
        }
        if with_usage.at_end && st.sent == n && api != Api::Generate {
            st.sent += 1;
            let mut last = chunk(api, "", None);
            last["choices"] = serde_json::json!([]);
            last["usage"] = usage(prompt, n);
            return Some((Ok(Event::default().data(last.to_string())), st));
        }
        st.done = true;
        Some((Ok(Event::default().data("[DONE]")), st))
    })
}

async fn metrics(State(s): State<Arc<Server>>) -> impl IntoResponse {
    let labels = "model_name=\"default\",tp_rank=\"0\"";
    let mut body = format!(
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
         sglang:num_requests_total{{{labels}}} {}\n\
         # HELP simserver_slow_requests_total Requests made slow by SIMSERVER_MODE=slow-every.\n\
         # TYPE simserver_slow_requests_total counter\n\
         simserver_slow_requests_total {}\n",
        s.in_flight.load(Ordering::SeqCst),
        s.generation_tokens.load(Ordering::SeqCst),
        s.prompt_tokens.load(Ordering::SeqCst),
        s.requests.load(Ordering::SeqCst),
        s.slow_requests.load(Ordering::SeqCst),
    );
    s.ttft.write(
        &mut body,
        "sglang:time_to_first_token_seconds",
        "Histogram of time to first token in seconds.",
        labels,
    );
    s.itl.write(
        &mut body,
        "sglang:inter_token_latency_seconds",
        "Histogram of inter-token latency in seconds.",
        labels,
    );
    ([("content-type", "text/plain; version=0.0.4")], body)
}
