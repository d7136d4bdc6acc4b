//! What a flag set is ([`FlagSet`]) and how a serving benchmark is asked for
//! ([`BenchSettings`], with its [`Slo`]s and how tokens are counted).

use serde::{Deserialize, Serialize};

use crate::flags::Flags;

/// What the server ran with, in canonical form: its identity is the hash of this.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FlagSet {
    /// Short hash of the canonical form (12 hex digits).
    pub id: String,
    /// Model path and revision, as the server was told.
    pub model: String,
    /// Every allow-listed flag's effective value, sorted by name.
    pub flags: Flags,
    /// A name people gave it ("baseline", "+tilelang").
    pub label: Option<String>,
    pub notes: Option<String>,
    pub first_seen_ms: u64,
    pub last_seen_ms: u64,
}

/// Which endpoint to load.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BenchApi {
    /// OpenAI-compatible `/v1/completions`.
    Completions,
    /// OpenAI-compatible `/v1/chat/completions`.
    Chat,
    /// SGLang's native `/generate`: every streamed chunk carries the number of
    /// tokens generated so far (`meta_info.completion_tokens`), also with
    /// speculative decoding, where the OpenAI endpoints only count at the end.
    Generate,
}

/// How a repeat's output tokens were counted per streamed event, which decides
/// what its inter-token latency means.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TokenSource {
    /// The server's own count in every chunk (vLLM's `continuous_usage_stats`,
    /// SGLang's `/generate`): ITL per token.
    ChunkUsage,
    /// Each event's text counted with the model's tokenizer: ITL per token.
    Tokenizer,
    /// Neither: each event counts as one, and ITL is the time between events,
    /// which is longer than per token when an event carries several.
    #[default]
    #[serde(alias = "stream")]
    Event,
    /// Recorded before per-event counts were kept: the server's count, either
    /// per chunk or the final one spread evenly over the events.
    #[serde(rename = "usage")]
    Usage,
}

impl TokenSource {
    /// True when ITL is per token.
    pub fn per_token(self) -> bool {
        !matches!(self, Self::Event)
    }

    /// How exact a count is, to find the least exact of several: the server's
    /// own, then the tokenizer's, then the old spread, then none.
    pub fn exactness(self) -> u8 {
        match self {
            Self::ChunkUsage => 3,
            Self::Tokenizer => 2,
            Self::Usage => 1,
            Self::Event => 0,
        }
    }

    /// The least exact of several sources (none: [`Self::Event`]): what a
    /// group's ITL is per.
    pub fn least_exact(sources: impl IntoIterator<Item = Self>) -> Self {
        sources
            .into_iter()
            .min_by_key(|s| s.exactness())
            .unwrap_or_default()
    }

    /// Its name on the wire and in exports.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ChunkUsage => "chunk_usage",
            Self::Tokenizer => "tokenizer",
            Self::Event => "event",
            Self::Usage => "usage",
        }
    }

    /// How the UI and the CLI name it.
    pub fn label(self) -> &'static str {
        match self {
            Self::ChunkUsage => "server's per-chunk count",
            Self::Tokenizer => "model's tokenizer",
            Self::Event => "per event (ITL between events, not tokens)",
            Self::Usage => "server's count (per-chunk or spread: not recorded)",
        }
    }
}

/// A prompt with a known answer, asked before the load.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Correctness {
    pub prompt: String,
    /// The answer must contain this (case-insensitive).
    pub expect: String,
}

/// The most a benchmark may hold in memory (see [`BenchSettings::memory_bytes`]).
pub const MAX_BENCH_MEMORY: u64 = 64 << 20;

/// Service-level objectives: a request is good when it met every one given.
/// Goodput is the good requests per second.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Slo {
    /// Time to first token, at most (ms).
    #[serde(default)]
    pub ttft_ms: Option<f64>,
    /// Time per output token after the first, at most (ms).
    #[serde(default)]
    pub tpot_ms: Option<f64>,
    /// The whole request, at most (ms).
    #[serde(default)]
    pub e2e_ms: Option<f64>,
    /// A level meets the SLOs when at least this share of its requests (%)
    /// met every one: what a rate sweep looks for.
    #[serde(default = "Slo::default_attainment")]
    pub attainment_pct: f64,
}

impl Slo {
    fn default_attainment() -> f64 {
        90.0
    }

    /// Whether a request with these latencies (ms) met every objective; a
    /// request of one token has no TPOT and meets that one.
    pub fn met(&self, ttft_ms: f64, tpot_ms: Option<f64>, e2e_ms: f64) -> bool {
        self.ttft_ms.is_none_or(|t| ttft_ms <= t)
            && self.tpot_ms.is_none_or(|t| tpot_ms.is_none_or(|v| v <= t))
            && self.e2e_ms.is_none_or(|t| e2e_ms <= t)
    }

    fn validate(&self) -> Result<(), String> {
        let given = [
            ("ttft_ms", self.ttft_ms),
            ("tpot_ms", self.tpot_ms),
            ("e2e_ms", self.e2e_ms),
        ];
        if given.iter().all(|(_, v)| v.is_none()) {
            return Err("slo: give at least one of ttft_ms, tpot_ms and e2e_ms".to_owned());
        }
        for (name, v) in given {
            if let Some(v) = v
                && !(v.is_finite() && v > 0.0 && v <= 3_600_000.0)
            {
                return Err(format!("slo.{name} must be from 0 to 3600000 ms, got {v}"));
            }
        }
        if !(self.attainment_pct > 0.0 && self.attainment_pct <= 100.0) {
            return Err(format!(
                "slo.attainment_pct must be above 0 and at most 100, got {}",
                self.attainment_pct
            ));
        }
        Ok(())
    }
}

/// The most open-loop levels (request rates) of one run.
pub const MAX_RATE_LEVELS: usize = 12;

/// `POST /api/bench`: what to measure. Every field has a default.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BenchSettings {
    pub api: BenchApi,
    /// One concurrency, or several for a sweep (1, 4, 16, 64, …).
    pub concurrency: Vec<u32>,
    /// Requests per repeat (after warm-up).
    pub num_prompts: u32,
    /// Prompt length in tokens (random token-like words).
    pub input_len: u32,
    /// Output length in tokens (fixed: `ignore_eos`).
    pub output_len: u32,
    /// Requests sent before each concurrency's repeats and not counted.
    pub warmup: u32,
    pub repeats: u32,
    pub correctness: Option<Correctness>,
    /// The prompts' seed; unset: the run's id, so every run differs.
    pub seed: Option<u64>,
    /// Prompts from this file of the server's `[bench] datasets` directory
    /// (ShareGPT JSON or JSONL) instead of random words; its output lengths
    /// where it gives them.
    pub dataset: Option<String>,
    /// Shared prefixes: the prompts fall in this many groups, each sharing a
    /// system prompt of `prefix_len` words before its own `input_len` (what
    /// prefix caching and RadixAttention change).
    pub prefix_groups: Option<u32>,
    pub prefix_len: u32,
    /// Open loop: requests per second, one level each (several: a sweep);
    /// empty: closed loop at each `concurrency`.
    pub request_rate: Vec<f64>,
    /// Open loop: the shape of the gamma-distributed gaps between arrivals (1:
    /// Poisson; below 1 burstier, above steadier), as `vllm bench serve`.
    pub burstiness: f64,
    /// Open loop: at most this many requests in flight; an arrival beyond it
    /// waits (and the run reports how long). Unset: `num_prompts`, at most 1024.
    pub max_concurrency: Option<u32>,
    /// Goodput under these objectives; the server's `[bench.defaults.slo]`
    /// unless the request gives its own.
    pub slo: Option<Slo>,
    /// Stop at a wrong answer to the correctness check, before the load (a
    /// campaign's steps do: there is nothing to measure there).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub abort_on_wrong_answer: bool,
}

impl Default for BenchSettings {
    fn default() -> Self {
        Self {
            api: BenchApi::Completions,
            concurrency: vec![16],
            num_prompts: 64,
            input_len: 256,
            output_len: 128,
            warmup: 16,
            repeats: 3,
            correctness: None,
            seed: None,
            dataset: None,
            prefix_groups: None,
            prefix_len: 0,
            request_rate: Vec::new(),
            burstiness: 1.0,
            max_concurrency: None,
            slo: None,
            abort_on_wrong_answer: false,
        }
    }
}

impl BenchSettings {
    /// Refuses settings that make no sense or would run for hours.
    pub fn validate(&self) -> Result<(), String> {
        if self.concurrency.is_empty() || self.concurrency.len() > 12 {
            return Err("concurrency: give 1 to 12 levels".to_owned());
        }
        if let Some(c) = self.concurrency.iter().find(|c| !(1..=1024).contains(*c)) {
            return Err(format!("concurrency {c} is out of range (1–1024)"));
        }
        let checks = [
            ("num_prompts", self.num_prompts, 1, 100_000),
            ("input_len", self.input_len, 1, 131_072),
            ("output_len", self.output_len, 1, 32_768),
            ("warmup", self.warmup, 0, 10_000),
            ("repeats", self.repeats, 3, 20),
        ];
        for (name, v, lo, hi) in checks {
            if !(lo..=hi).contains(&v) {
                return Err(format!("{name} must be from {lo} to {hi}, got {v}"));
            }
        }
        if let Some(c) = &self.correctness
            && (c.prompt.trim().is_empty() || c.expect.trim().is_empty())
        {
            return Err("correctness needs a prompt and an expected answer".to_owned());
        }
        if self.request_rate.len() > MAX_RATE_LEVELS {
            return Err(format!(
                "request_rate: give at most {MAX_RATE_LEVELS} rates"
            ));
        }
        if let Some(r) = self
            .request_rate
            .iter()
            .find(|r| !(r.is_finite() && **r > 0.0 && **r <= 10_000.0))
        {
            return Err(format!(
                "request_rate {r} is out of range (above 0, at most 10000 requests/s)"
            ));
        }
        if !(self.burstiness.is_finite() && (0.05..=100.0).contains(&self.burstiness)) {
            return Err(format!(
                "burstiness must be from 0.05 to 100, got {}",
                self.burstiness
            ));
        }
        if let Some(m) = self.max_concurrency
            && !(1..=1024).contains(&m)
        {
            return Err(format!("max_concurrency {m} is out of range (1–1024)"));
        }
        if let Some(slo) = &self.slo {
            slo.validate()?;
        }
        match self.prefix_groups {
            Some(g) if !(1..=1024).contains(&g) => {
                return Err(format!("prefix_groups {g} is out of range (1–1024)"));
            }
            Some(_) if !(1..=131_072).contains(&self.prefix_len) => {
                return Err(
                    "prefix_len: give the shared prefix's length, 1 to 131072 words".to_owned(),
                );
            }
            Some(_) if self.dataset.is_some() => {
                return Err(
                    "a dataset and shared prefixes do not go together: choose one".to_owned(),
                );
            }
            None if self.prefix_len > 0 => {
                return Err("prefix_len needs prefix_groups".to_owned());
            }
            _ => {}
        }
        let need = self.memory_bytes();
        if need > MAX_BENCH_MEMORY {
            return Err(format!(
                "this benchmark would hold about {} MiB at once (prompts in flight: highest \
                 concurrency × input_len × 8 B; token timings: the larger of num_prompts and \
                 warmup × output_len × 8 B); the bound is {} MiB: lower the concurrency, \
                 the lengths or num_prompts",
                need.div_ceil(1 << 20),
                MAX_BENCH_MEMORY >> 20
            ));
        }
        Ok(())
    }

    /// About what a run holds in memory at once: the prompt text of the
    /// requests in flight (prompts are made as they are sent), and the
    /// per-token timings of one repeat (or warm-up), 8 bytes a token each.
    pub fn memory_bytes(&self) -> u64 {
        let c = u64::from(self.max_in_flight());
        let in_flight = c * u64::from(self.input_len + self.prefix_len) * 8;
        let timings = u64::from(self.num_prompts.max(self.warmup)) * u64::from(self.output_len) * 8;
        in_flight + timings
    }
}

impl BenchSettings {
    /// Open loop (request rates) rather than closed loop (concurrency).
    pub fn open_loop(&self) -> bool {
        !self.request_rate.is_empty()
    }

    /// An open-loop level's cap on requests in flight.
    pub fn open_loop_cap(&self) -> u32 {
        self.max_concurrency
            .unwrap_or(self.num_prompts.max(self.warmup))
            .clamp(1, 1024)
    }

    /// The most requests a run has in flight at once.
    pub fn max_in_flight(&self) -> u32 {
        if self.open_loop() {
            self.open_loop_cap()
        } else {
            self.concurrency.iter().copied().max().unwrap_or(1)
        }
    }

    /// The levels in the order they run.
    pub fn levels(&self) -> Vec<LevelKey> {
        if self.open_loop() {
            let cap = self.open_loop_cap();
            self.request_rate
                .iter()
                .map(|&r| LevelKey {
                    concurrency: cap,
                    request_rate: Some(r),
                })
                .collect()
        } else {
            self.concurrency
                .iter()
                .map(|&c| LevelKey {
                    concurrency: c,
                    request_rate: None,
                })
                .collect()
        }
    }
}

/// One level of a run: a concurrency (closed loop), or a request rate with
/// the cap on what is in flight (open loop).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LevelKey {
    pub concurrency: u32,
    pub request_rate: Option<f64>,
}
