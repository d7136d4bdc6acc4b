//! drainwatch's own load generator: a closed loop of `c` clients, each sending
//! the next streaming request as soon as its last one finished, against an
//! OpenAI-compatible server or SGLang's `/generate`. Every server-sent event is
//! timed on arrival and its tokens counted, in this order of preference:
//! 1. the server's own cumulative count in the chunk (vLLM's `usage` with
//!    `continuous_usage_stats`, SGLang's `meta_info.completion_tokens`,
//!    llama.cpp's `timings.predicted_n` with `timings_per_token`);
//! 2. the event's text counted with the model's tokenizer, where one is known;
//! 3. else one per event, and the ITL is then per event ([`TokenSource::Event`]),
//!    never an invented per-token spread.
//!
//! The request's output length comes from the final usage where the server
//! sends one, else from the per-event counts.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use futures_util::StreamExt;
use shared::bench::{BenchApi, TokenSource};
use tokio::sync::watch;
use tokio::time::Instant;

use super::events::{Chunk, Events, find_event_end};
use super::prompts::Prompts;
use super::tokens::Tokenizer;
use crate::config::file::{ApiKey, Engine};

/// Where and how to send requests.
#[derive(Debug, Clone)]
pub struct Target {
    /// `http://127.0.0.1:PORT`
    pub base_url: String,
    pub api: BenchApi,
    pub model: String,
    /// Sent as `Authorization: Bearer` when the server wants one.
    pub api_key: Option<ApiKey>,
    /// Counts each event's tokens where the server does not.
    pub tokenizer: Option<Tokenizer>,
    /// Which server it is, where that changes a request or how it is read.
    pub engine: Engine,
}

impl Target {
    /// A POST to [`Self::url`], with the API key if there is one.
    pub fn post(&self, client: &reqwest::Client) -> reqwest::RequestBuilder {
        let req = client.post(self.url());
        match &self.api_key {
            Some(key) => req.header(reqwest::header::AUTHORIZATION, key.bearer()),
            None => req,
        }
    }

    pub fn url(&self) -> String {
        match self.api {
            BenchApi::Completions => format!("{}/v1/completions", self.base_url),
            BenchApi::Chat => format!("{}/v1/chat/completions", self.base_url),
            BenchApi::Generate => format!("{}/generate", self.base_url),
        }
    }

    /// A streaming request for exactly `output_len` tokens.
    pub fn body(&self, prompt: &str, output_len: u32, stream: bool) -> serde_json::Value {
        if self.api == BenchApi::Generate {
            return serde_json::json!({
                "text": prompt,
                "sampling_params": {
                    "max_new_tokens": output_len,
                    "min_new_tokens": output_len,
                    "temperature": 0,
                    "ignore_eos": true,
                },
                "stream": stream,
            });
        }
        let mut b = serde_json::json!({
            "model": self.model,
            "max_tokens": output_len,
            "temperature": 0,
            "ignore_eos": true,
            "min_tokens": output_len,
            "stream": stream,
        });
        if stream {
            b["stream_options"] =
                serde_json::json!({"include_usage": true, "continuous_usage_stats": true});
            if self.engine == Engine::Llamacpp {
                // Every chunk then says how many tokens were generated so far.
                b["timings_per_token"] = true.into();
            }
        }
        match self.api {
            BenchApi::Completions => b["prompt"] = prompt.into(),
            BenchApi::Chat => {
                b["messages"] = serde_json::json!([{"role": "user", "content": prompt}])
            }
            BenchApi::Generate => {}
        }
        b
    }
}

/// One request's timing, in seconds.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Outcome {
    pub ok: bool,
    pub input_tokens: u64,
    /// [`Self::input_tokens`] is the server's own count (`usage.prompt_tokens`),
    /// not the words sent.
    pub input_counted: bool,
    pub output_tokens: u64,
    pub ttft: f64,
    pub e2e: f64,
    /// Per token after the first (per event after the first with
    /// [`TokenSource::Event`]).
    pub itls: Vec<f64>,
    /// How the events' tokens were counted.
    pub token_source: TokenSource,
    /// When it was sent and when it finished, relative to the level's start.
    pub sent: f64,
    pub end: f64,
    /// Open loop: how late the sender got to it after its arrival time, and
    /// then how long it waited for a free slot under the cap.
    pub send_late: f64,
    pub waited: f64,
}

/// Sends one streaming request; never fails, a failure is `ok: false`.
pub async fn one(
    client: &reqwest::Client,
    target: &Target,
    prompt: &str,
    output_len: u32,
    t0: Instant,
) -> Outcome {
    let start = Instant::now();
    let mut out = Outcome {
        sent: start.saturating_duration_since(t0).as_secs_f64(),
        ..Outcome::default()
    };
    let mut req = target
        .post(client)
        .json(&target.body(prompt, output_len, true));
    if target.engine == Engine::Llamacpp {
        // llama.cpp's server closes the connection after every streamed
        // answer without saying so; a pooled connection reused meanwhile
        // fails the next request. Each stream asks for its own.
        req = req.header(reqwest::header::CONNECTION, "close");
    }
    let resp = match req.send().await {
        Ok(r) => r,
        Err(e) => {
            tracing::debug!(error = ?e, "a benchmark request failed to send");
            out.end = t0.elapsed().as_secs_f64();
            return out;
        }
    };
    if !resp.status().is_success() {
        tracing::debug!(status = %resp.status(), "a benchmark request was refused");
        out.end = t0.elapsed().as_secs_f64();
        return out;
    }
    let mut ev = Events::default();
    let mut buf: Vec<u8> = Vec::with_capacity(4096);
    let mut done = false;
    let (mut cumulative, mut text_len) = (0u64, 0usize);
    let mut body = resp.bytes_stream();
    'read: while let Some(piece) = body.next().await {
        let piece = match piece {
            Ok(p) => p,
            Err(e) => {
                tracing::debug!(error = %e, "a benchmark stream broke");
                break;
            }
        };
        let now = start.elapsed().as_secs_f64();
        buf.extend_from_slice(&piece);
        while let Some(end) = find_event_end(&buf) {
            let event: Vec<u8> = buf.drain(..end.0 + end.1).collect();
            for line in event[..end.0].split(|b| *b == b'\n') {
                let Some(data) = line.strip_prefix(b"data:") else {
                    continue;
                };
                let data = data.trim_ascii();
                if data == b"[DONE]" {
                    done = true;
                    break 'read;
                }
                let Ok(chunk) = serde_json::from_slice::<Chunk>(data) else {
                    continue;
                };
                ev.read(
                    chunk,
                    now,
                    target.tokenizer.as_ref(),
                    &mut cumulative,
                    &mut text_len,
                );
            }
        }
    }
    out.e2e = start.elapsed().as_secs_f64();
    out.end = t0.elapsed().as_secs_f64();
    out.ok = done && !ev.at.is_empty();
    if !out.ok {
        tracing::debug!(
            done,
            events = ev.at.len(),
            "a benchmark stream ended without its answer"
        );
    }
    if out.ok {
        // Without the server's count, the prompt is as long as the words we sent.
        fill(
            &mut out,
            &ev,
            prompt.split_ascii_whitespace().count() as u64,
        );
    }
    out
}

/// Why a response's body was not read whole.
#[derive(Debug, thiserror::Error)]
pub enum BodyError {
    #[error(transparent)]
    Read(#[from] reqwest::Error),
    #[error("the answer is over {0} bytes")]
    TooLong(usize),
}

/// A response's body, refused past `limit` bytes (a server cannot make the
/// benchmark hold more).
pub async fn read_limited(resp: reqwest::Response, limit: usize) -> Result<Vec<u8>, BodyError> {
    let mut body = Vec::new();
    let mut stream = resp.bytes_stream();
    while let Some(piece) = stream.next().await {
        let piece = piece?;
        if body.len() + piece.len() > limit {
            return Err(BodyError::TooLong(limit));
        }
        body.extend_from_slice(&piece);
    }
    Ok(body)
}

/// A server's JSON answer to `req`, refused past 1 MiB (said or read);
/// `None` for anything else than a 2xx with JSON.
pub async fn read_json(req: reqwest::RequestBuilder) -> Option<serde_json::Value> {
    let resp = req.send().await.ok()?;
    if !resp.status().is_success() || resp.content_length().is_some_and(|n| n > 1 << 20) {
        return None;
    }
    let body = read_limited(resp, 1 << 20).await.ok()?;
    serde_json::from_slice(&body).ok()
}

/// Token counts, TTFT and ITL from the timed events: per token where every
/// event was counted, else per event.
fn fill(out: &mut Outcome, ev: &Events, prompt_words: u64) {
    let counted: Option<Vec<(u64, TokenSource)>> = ev.tokens.iter().copied().collect();
    let (per_event, source): (Vec<u64>, TokenSource) = match counted {
        Some(c) => {
            let source = TokenSource::least_exact(c.iter().map(|(_, s)| *s));
            (c.iter().map(|(k, _)| *k).collect(), source)
        }
        None => (vec![1; ev.at.len()], TokenSource::Event),
    };
    out.token_source = source;
    let counted_total: u64 = per_event.iter().sum();
    out.output_tokens = ev
        .final_usage
        .and_then(|u| u.completion_tokens)
        .unwrap_or(counted_total);
    let counted = ev.final_usage.and_then(|u| u.prompt_tokens);
    out.input_counted = counted.is_some();
    out.input_tokens = counted.unwrap_or(prompt_words);
    out.ttft = ev.at[0];
    for (i, pair) in ev.at.windows(2).enumerate() {
        let gap = pair[1] - pair[0];
        if source == TokenSource::Event {
            out.itls.push(gap);
            continue;
        }
        // An event of k tokens is k tokens' worth of waiting: k gaps of gap / k.
        let k = per_event[i + 1].max(1);
        for _ in 0..k {
            out.itls.push(gap / k as f64);
        }
    }
}

/// Live counters of a level in progress.
#[derive(Debug, Default)]
pub struct Counters {
    pub done: AtomicU32,
    pub output_tokens: AtomicU64,
}

/// What a run is told while it runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Halt {
    /// Go on.
    #[default]
    Run,
    /// A restart cuts the run short: send nothing more, and leave the
    /// requests in flight to end with the server (drained, not cancelled).
    Drain,
    /// Cancelled: drop everything now.
    Cancel,
}

impl Halt {
    /// Nothing more is sent.
    pub fn stops_sending(self) -> bool {
        self != Self::Run
    }

    pub fn cancelled(self) -> bool {
        self == Self::Cancel
    }
}

/// Sends `n` requests from `c` clients in a closed loop; returns each outcome and
/// the level's duration (first send → last completion), in seconds.
pub async fn level(
    client: &reqwest::Client,
    target: &Target,
    prompts: Prompts,
    c: u32,
    output_len: u32,
    counters: Arc<Counters>,
    cancel: watch::Receiver<Halt>,
) -> (Vec<Outcome>, f64) {
    let next = Arc::new(AtomicU32::new(0));
    let t0 = Instant::now();
    let mut workers = Vec::new();
    for _ in 0..c {
        let (client, target, prompts, next, counters) = (
            client.clone(),
            target.clone(),
            prompts.clone(),
            Arc::clone(&next),
            Arc::clone(&counters),
        );
        let mut cancel = cancel.clone();
        workers.push(tokio::spawn(async move {
            let mut mine = Vec::new();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed) as usize;
                if i >= prompts.len() || cancel.borrow().stops_sending() {
                    break;
                }
                let (prompt, len) = prompts.get(i);
                let o = tokio::select! {
                    o = one(&client, &target, &prompt, len.unwrap_or(output_len), t0) => o,
                    _ = cancel.wait_for(|c| c.cancelled()) => break,
                };
                counters.done.fetch_add(1, Ordering::Relaxed);
                counters
                    .output_tokens
                    .fetch_add(o.output_tokens, Ordering::Relaxed);
                mine.push(o);
            }
            mine
        }));
    }
    let mut all = Vec::new();
    for w in workers {
        if let Ok(mine) = w.await {
            all.extend(mine);
        }
    }
    let d = duration(&all, t0);
    (all, d)
}

/// A level's duration: first send (`t0`) → last completion, or until now when
/// nothing completed.
fn duration(all: &[Outcome], t0: Instant) -> f64 {
    let end = all.iter().map(|o| o.end).fold(0.0, f64::max);
    if end > 0.0 {
        end
    } else {
        t0.elapsed().as_secs_f64()
    }
}

/// When each of `n` requests arrives (seconds from the level's start) at
/// `rate` per second: the first at once, then gaps drawn from a gamma
/// distribution of shape `burstiness` (1: exponential, a Poisson process),
/// scaled so that they add up to exactly `(n − 1) / rate`. For a Poisson
/// process that is the same as conditioning on its count (the arrivals are
/// then uniform order statistics), so the rate scheduled is the rate
/// requested, and what the run achieves measures only how well it kept to it.
pub fn arrivals(n: u32, rate: f64, burstiness: f64, seed: u64) -> Vec<f64> {
    use rand::SeedableRng;
    use rand_distr::Distribution;
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let gamma = rand_distr::Gamma::new(burstiness, 1.0 / (rate * burstiness))
        .or_else(|_| rand_distr::Gamma::new(1.0, 1.0 / rate.max(1e-9)))
        .ok();
    let gaps: Vec<f64> = (1..n)
        .map(|_| gamma.as_ref().map_or(1.0, |g| g.sample(&mut rng)))
        .collect();
    let sum: f64 = gaps.iter().sum();
    let scale = if sum > 0.0 {
        f64::from(n.saturating_sub(1)) / rate / sum
    } else {
        0.0
    };
    let mut at = 0.0;
    let mut out = Vec::with_capacity(n as usize);
    if n > 0 {
        out.push(0.0);
    }
    for g in gaps {
        at += g * scale;
        out.push(at);
    }
    out
}

/// Sends request `i` at `schedule[i]` (seconds from the start) whatever the
/// server's pace, with at most `cap` in flight (an arrival beyond it waits for
/// a slot, and its outcome says how long); returns each outcome and the level's
/// duration (first send → last completion), in seconds.
#[allow(clippy::too_many_arguments)]
pub async fn open_level(
    client: &reqwest::Client,
    target: &Target,
    prompts: Prompts,
    schedule: &[f64],
    cap: u32,
    output_len: u32,
    counters: Arc<Counters>,
    mut cancel: watch::Receiver<Halt>,
) -> (Vec<Outcome>, f64) {
    let slots = Arc::new(tokio::sync::Semaphore::new(cap.max(1) as usize));
    let t0 = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for (i, &at) in schedule.iter().enumerate().take(prompts.len()) {
        let due = t0 + Duration::from_secs_f64(at);
        tokio::select! {
            _ = tokio::time::sleep_until(due) => {}
            _ = cancel.wait_for(|c| c.stops_sending()) => break,
        }
        let send_late = t0.elapsed().as_secs_f64() - at;
        let slot = tokio::select! {
            s = Arc::clone(&slots).acquire_owned() => s,
            _ = cancel.wait_for(|c| c.stops_sending()) => break,
        };
        let Ok(slot) = slot else { break };
        let waited = t0.elapsed().as_secs_f64() - at - send_late;
        let (client, target, counters) = (client.clone(), target.clone(), Arc::clone(&counters));
        let (prompt, len) = prompts.get(i);
        tasks.spawn(async move {
            let mut o = one(&client, &target, &prompt, len.unwrap_or(output_len), t0).await;
            drop(slot);
            o.send_late = send_late.max(0.0);
            o.waited = waited.max(0.0);
            counters.done.fetch_add(1, Ordering::Relaxed);
            counters
                .output_tokens
                .fetch_add(o.output_tokens, Ordering::Relaxed);
            o
        });
    }
    let mut all = Vec::new();
    loop {
        tokio::select! {
            next = tasks.join_next() => match next {
                Some(Ok(o)) => all.push(o),
                Some(Err(_)) => {}
                None => break,
            },
            // Dropping the set aborts what is still in flight.
            _ = cancel.wait_for(|c| c.cancelled()) => break,
        }
    }
    let d = duration(&all, t0);
    (all, d)
}

/// A connection pool sized for `c` concurrent streams.
pub fn client(c: u32) -> reqwest::Client {
    reqwest::Client::builder()
        .pool_max_idle_per_host(c as usize + 4)
        .connect_timeout(Duration::from_secs(5))
        .tcp_nodelay(true)
        .build()
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::events::Usage;

    /// Coefficient of variation of the gaps between arrivals.
    fn gap_cv(at: &[f64]) -> f64 {
        let gaps: Vec<f64> = at.windows(2).map(|w| w[1] - w[0]).collect();
        let mean = gaps.iter().sum::<f64>() / gaps.len() as f64;
        let var = gaps.iter().map(|g| (g - mean).powi(2)).sum::<f64>() / gaps.len() as f64;
        var.sqrt() / mean
    }

    #[test]
    fn arrivals_keep_the_rate_exactly_and_their_burstiness() {
        for (burstiness, cv) in [(1.0, 1.0), (0.25, 2.0), (4.0, 0.5)] {
            let at = arrivals(20_000, 50.0, burstiness, 7);
            assert_eq!(at.len(), 20_000);
            assert_eq!(at[0], 0.0);
            assert!(at.windows(2).all(|w| w[1] >= w[0]));
            // n − 1 gaps span exactly (n − 1) / rate.
            assert!((at[at.len() - 1] - 19_999.0 / 50.0).abs() < 1e-6);
            // Gamma of shape k: the gaps' CV is 1 / √k (Poisson: 1).
            let got = gap_cv(&at);
            assert!(
                (got / cv - 1.0).abs() < 0.05,
                "burstiness {burstiness}: CV {got}"
            );
        }
        // The same seed, the same schedule; another seed, another.
        assert_eq!(arrivals(100, 5.0, 1.0, 3), arrivals(100, 5.0, 1.0, 3));
        assert_ne!(arrivals(100, 5.0, 1.0, 3), arrivals(100, 5.0, 1.0, 4));
        assert_eq!(arrivals(1, 5.0, 1.0, 3), vec![0.0]);
        assert!(arrivals(0, 5.0, 1.0, 3).is_empty());
    }

    #[test]
    fn events_split_on_blank_lines() {
        assert_eq!(find_event_end(b"data: x\n\ndata: y"), Some((7, 2)));
        assert_eq!(find_event_end(b"data: x\r\n\r\n"), Some((7, 4)));
        assert_eq!(find_event_end(b"data: x\n"), None);
    }

    #[test]
    fn itl_is_per_token_when_events_carry_several() {
        let ev = Events {
            at: vec![0.040, 0.100, 0.160],
            tokens: vec![
                Some((1, TokenSource::ChunkUsage)),
                Some((3, TokenSource::ChunkUsage)),
                Some((3, TokenSource::Tokenizer)),
            ],
            final_usage: None,
        };
        let mut o = Outcome::default();
        fill(&mut o, &ev, 5);
        assert_eq!(o.output_tokens, 7);
        assert_eq!(o.token_source, TokenSource::Tokenizer);
        assert_eq!(o.itls.len(), 6);
        assert!(
            o.itls.iter().all(|g| (g - 0.020).abs() < 1e-9),
            "{:?}",
            o.itls
        );
        assert!((o.ttft - 0.040).abs() < 1e-12);
    }

    #[test]
    fn without_per_event_counts_itl_is_per_event_and_the_total_is_the_servers() {
        let ev = Events {
            at: vec![0.0, 0.1, 0.13],
            tokens: vec![Some((1, TokenSource::ChunkUsage)), None, None],
            final_usage: Some(Usage {
                prompt_tokens: Some(12),
                completion_tokens: Some(5),
            }),
        };
        let mut o = Outcome::default();
        fill(&mut o, &ev, 4);
        assert_eq!((o.output_tokens, o.input_tokens), (5, 12));
        assert_eq!(o.token_source, TokenSource::Event);
        assert_eq!(o.itls.len(), 2);
        assert!((o.itls[0] - 0.1).abs() < 1e-9 && (o.itls[1] - 0.03).abs() < 1e-9);
    }

    fn chunk(json: serde_json::Value) -> Chunk {
        serde_json::from_value(json).expect("chunk")
    }

    #[test]
    fn generate_chunks_count_by_meta_info_and_openai_ones_by_usage_or_tokenizer() {
        let (mut cum, mut len) = (0, 0);
        let mut ev = Events::default();
        for (i, (text, count)) in [("a", 1), ("a b c", 3), ("a b c", 3), ("a b c d", 4)]
            .into_iter()
            .enumerate()
        {
            let c = chunk(
                serde_json::json!({"text": text, "meta_info": {"prompt_tokens": 9, "completion_tokens": count}}),
            );
            ev.read(c, i as f64, None, &mut cum, &mut len);
        }
        // The repeated chunk (nothing new) is not an event.
        assert_eq!(ev.at, vec![0.0, 1.0, 3.0]);
        let k: Vec<_> = ev.tokens.iter().map(|t| t.map(|(k, _)| k)).collect();
        assert_eq!(k, vec![Some(1), Some(2), Some(1)]);
        assert_eq!(ev.final_usage.and_then(|u| u.completion_tokens), Some(4));

        let dir = tempfile::tempdir().expect("tmp");
        let file = dir.path().join("tokenizer.json");
        std::fs::write(
            &file,
            include_str!("../../../tests/data/sim-model/tokenizer.json"),
        )
        .expect("write");
        let tok = Tokenizer::load(&file).expect("tokenizer");
        let (mut cum, mut len) = (0, 0);
        let mut ev = Events::default();
        for text in ["tok0 ", "tok1 tok2 tok3 "] {
            let c = chunk(serde_json::json!({"choices": [{"index": 0, "text": text}]}));
            ev.read(c, 0.0, Some(&tok), &mut cum, &mut len);
        }
        let c = chunk(
            serde_json::json!({"choices": [{"index": 0, "delta": {"content": "tok4 tok5 "}}]}),
        );
        ev.read(c, 0.0, Some(&tok), &mut cum, &mut len);
        let c = chunk(
            serde_json::json!({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 6}}),
        );
        ev.read(c, 0.0, Some(&tok), &mut cum, &mut len);
        let k: Vec<_> = ev.tokens.iter().map(|t| t.map(|(k, _)| k)).collect();
        assert_eq!(k, vec![Some(1), Some(3), Some(2)]);
        assert!(
            ev.tokens
                .iter()
                .all(|t| t.is_some_and(|(_, s)| s == TokenSource::Tokenizer))
        );
        assert_eq!(ev.final_usage.and_then(|u| u.completion_tokens), Some(6));
    }
}
