//! drainwatch's own load generator: a closed loop of `c` clients, each sending
//! the next streaming request as soon as its last one finished, against an
//! OpenAI-compatible server. Every server-sent event is timed on arrival; token
//! counts come from the server's `usage` (cumulative per chunk where it reports
//! that, as vLLM does with `continuous_usage_stats`; else the final usage chunk:
//! the first event is one token and the rest are spread evenly over the others),
//! else one token per content event.

use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use futures_util::StreamExt;
use serde::Deserialize;
use shared::bench::BenchApi;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::config::file::ApiKey;

/// Where and how to send requests.
#[derive(Debug, Clone)]
pub struct Target {
    /// `http://127.0.0.1:PORT`
    pub base_url: String,
    pub api: BenchApi,
    pub model: String,
    /// Sent as `Authorization: Bearer` when the server wants one.
    pub api_key: Option<ApiKey>,
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
        }
    }

    /// A streaming request for exactly `output_len` tokens.
    pub fn body(&self, prompt: &str, output_len: u32, stream: bool) -> serde_json::Value {
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
        }
        match self.api {
            BenchApi::Completions => b["prompt"] = prompt.into(),
            BenchApi::Chat => {
                b["messages"] = serde_json::json!([{"role": "user", "content": prompt}])
            }
        }
        b
    }
}

/// One request's timing, in seconds.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Outcome {
    pub ok: bool,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub ttft: f64,
    pub e2e: f64,
    /// Per token after the first.
    pub itls: Vec<f64>,
    /// Token counts came from the server's usage.
    pub from_usage: bool,
    /// When it finished, relative to the level's start.
    pub end: f64,
}

#[derive(Debug, Deserialize)]
struct Chunk {
    #[serde(default)]
    choices: Vec<Choice>,
    usage: Option<Usage>,
}

#[derive(Debug, Deserialize)]
struct Choice {
    text: Option<String>,
    delta: Option<Delta>,
}

#[derive(Debug, Deserialize)]
struct Delta {
    content: Option<String>,
}

#[derive(Debug, Deserialize, Clone, Copy)]
struct Usage {
    prompt_tokens: Option<u64>,
    completion_tokens: Option<u64>,
}

impl Chunk {
    fn has_content(&self) -> bool {
        self.choices.iter().any(|c| {
            c.text.as_deref().is_some_and(|t| !t.is_empty())
                || c.delta
                    .as_ref()
                    .and_then(|d| d.content.as_deref())
                    .is_some_and(|t| !t.is_empty())
        })
    }
}

/// Content events of one stream: arrival time and tokens (if the server said).
#[derive(Debug, Default)]
struct Events {
    at: Vec<f64>,
    tokens: Vec<Option<u64>>,
    final_usage: Option<Usage>,
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
    let mut out = Outcome::default();
    let Ok(resp) = target
        .post(client)
        .json(&target.body(prompt, output_len, true))
        .send()
        .await
    else {
        out.end = t0.elapsed().as_secs_f64();
        return out;
    };
    if !resp.status().is_success() {
        out.end = t0.elapsed().as_secs_f64();
        return out;
    }
    let mut ev = Events::default();
    let mut buf: Vec<u8> = Vec::with_capacity(4096);
    let mut done = false;
    let mut cumulative: Option<u64> = None;
    let mut body = resp.bytes_stream();
    'read: while let Some(piece) = body.next().await {
        let Ok(piece) = piece else { break };
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
                let usage = chunk.usage;
                if chunk.has_content() {
                    let tokens = usage.and_then(|u| u.completion_tokens).map(|c| {
                        let k = c.saturating_sub(cumulative.unwrap_or(0));
                        cumulative = Some(c);
                        k
                    });
                    ev.at.push(now);
                    ev.tokens.push(tokens);
                } else if usage.is_some() {
                    ev.final_usage = usage;
                }
            }
        }
    }
    out.e2e = start.elapsed().as_secs_f64();
    out.end = t0.elapsed().as_secs_f64();
    out.ok = done && !ev.at.is_empty();
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

/// `(payload length, separator length)` of the first complete event in `buf`.
fn find_event_end(buf: &[u8]) -> Option<(usize, usize)> {
    let lf = buf.windows(2).position(|w| w == b"\n\n").map(|i| (i, 2));
    let crlf = buf
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|i| (i, 4));
    match (lf, crlf) {
        (Some(a), Some(b)) => Some(if a.0 < b.0 { a } else { b }),
        (a, b) => a.or(b),
    }
}

/// Token counts, TTFT and per-token ITL from the timed events.
fn fill(out: &mut Outcome, ev: &Events, prompt_words: u64) {
    let per_event: Vec<f64> = if ev.tokens.iter().all(Option::is_some) {
        out.from_usage = true;
        ev.tokens.iter().map(|t| t.unwrap_or(1) as f64).collect()
    } else if let Some(total) = ev.final_usage.and_then(|u| u.completion_tokens) {
        // The first event is the first token; the rest share what remains.
        out.from_usage = true;
        let rest = ev.at.len().saturating_sub(1).max(1) as f64;
        let mut v = vec![(total.saturating_sub(1)) as f64 / rest; ev.at.len()];
        v[0] = 1.0;
        v
    } else {
        vec![1.0; ev.at.len()]
    };
    out.output_tokens = per_event.iter().sum::<f64>().round() as u64;
    out.input_tokens = ev
        .final_usage
        .and_then(|u| u.prompt_tokens)
        .unwrap_or(prompt_words);
    out.ttft = ev.at[0];
    for (i, pair) in ev.at.windows(2).enumerate() {
        let k = per_event[i + 1].max(1.0);
        let gap = (pair[1] - pair[0]) / k;
        for _ in 0..k.round() as usize {
            out.itls.push(gap);
        }
    }
}

/// Live counters of a level in progress.
#[derive(Debug, Default)]
pub struct Counters {
    pub done: AtomicU32,
    pub output_tokens: AtomicU64,
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
    cancel: watch::Receiver<bool>,
) -> (Vec<Outcome>, f64) {
    let next = Arc::new(AtomicU32::new(0));
    let t0 = Instant::now();
    let mut workers = Vec::new();
    for _ in 0..c {
        let (client, target, prompts, next, counters) = (
            client.clone(),
            target.clone(),
            prompts,
            Arc::clone(&next),
            Arc::clone(&counters),
        );
        let mut cancel = cancel.clone();
        workers.push(tokio::spawn(async move {
            let mut mine = Vec::new();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed) as usize;
                if i >= prompts.len() || *cancel.borrow() {
                    break;
                }
                let prompt = prompts.get(i);
                let o = tokio::select! {
                    o = one(&client, &target, &prompt, output_len, t0) => o,
                    _ = cancel.wait_for(|c| *c) => break,
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
    let end = all.iter().map(|o| o.end).fold(0.0, f64::max);
    (
        all,
        if end > 0.0 {
            end
        } else {
            t0.elapsed().as_secs_f64()
        },
    )
}

/// `n` distinct prompts of `len` token-like words (deterministic per seed),
/// each made when it is sent: a run holds only the prompts in flight, however
/// many it sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Prompts {
    n: u32,
    len: u32,
    seed: u64,
}

impl Prompts {
    pub fn new(n: u32, len: u32, seed: u64) -> Self {
        Self { n, len, seed }
    }

    pub fn len(&self) -> usize {
        self.n as usize
    }

    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// Prompt `i`: words `w0`…`w49999` from a xorshift64 seeded by the run's
    /// seed and `i` (through splitmix64, so neighbouring prompts differ).
    pub fn get(&self, i: usize) -> String {
        let mut z = self.seed ^ (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        let mut x = (z ^ (z >> 31)) | 1;
        let mut out = String::with_capacity(self.len as usize * 7);
        for k in 0..self.len {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            if k > 0 {
                out.push(' ');
            }
            let _ = write!(out, "w{}", x % 50_000);
        }
        out
    }
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
            tokens: vec![Some(1), Some(3), Some(3)],
            final_usage: None,
        };
        let mut o = Outcome::default();
        fill(&mut o, &ev, 5);
        assert_eq!(o.output_tokens, 7);
        assert!(o.from_usage);
        assert_eq!(o.itls.len(), 6);
        assert!(
            o.itls.iter().all(|g| (g - 0.020).abs() < 1e-9),
            "{:?}",
            o.itls
        );
        assert!((o.ttft - 0.040).abs() < 1e-12);
    }

    #[test]
    fn final_usage_is_spread_over_events_without_per_chunk_counts() {
        let ev = Events {
            at: vec![0.0, 0.1],
            tokens: vec![None, None],
            final_usage: Some(Usage {
                prompt_tokens: Some(12),
                completion_tokens: Some(4),
            }),
        };
        let mut o = Outcome::default();
        fill(&mut o, &ev, 4);
        assert_eq!((o.output_tokens, o.input_tokens), (4, 12));
        assert_eq!(o.itls.len(), 3);
        assert!(
            o.itls.iter().all(|g| (g - 0.1 / 3.0).abs() < 1e-9),
            "{:?}",
            o.itls
        );
    }

    #[test]
    fn prompts_are_distinct_and_sized() {
        let p = Prompts::new(3, 5, 42);
        assert_eq!(p.len(), 3);
        assert_eq!(p.get(0).split(' ').count(), 5);
        assert_ne!(p.get(0), p.get(1));
        assert_eq!(p.get(2), Prompts::new(3, 5, 42).get(2));
        assert_ne!(p.get(0), Prompts::new(3, 5, 43).get(0));
    }
}
