//! Throughput per flag set: what a flag set is ([`FlagSet`]), how a serving
//! benchmark is asked for ([`BenchSettings`]), and what it measured
//! ([`RunMetrics`], [`BenchRun`]).

use std::collections::BTreeMap;

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

impl LevelKey {
    fn of(m: &RunMetrics) -> Self {
        Self {
            concurrency: m.concurrency,
            request_rate: m.request_rate,
        }
    }
}

/// Mean and percentiles of one latency, in milliseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Latency {
    pub mean_ms: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
}

/// One repeat at one concurrency.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RunMetrics {
    pub concurrency: u32,
    pub repeat: u32,
    pub duration_s: f64,
    pub completed: u32,
    pub failed: u32,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub output_tok_s: f64,
    pub total_tok_s: f64,
    pub request_s: f64,
    pub ttft: Latency,
    /// Time per output token after the first, per request.
    pub tpot: Latency,
    /// Inter-token latency, per token (an event carrying k tokens counts k
    /// times), or per event where [`Self::token_source`] says so.
    pub itl: Latency,
    pub e2e: Latency,
    /// How tokens were counted per event (the least exact of the repeat's
    /// requests): what [`Self::itl`] is per.
    pub token_source: TokenSource,
    /// Open loop: the requested arrival rate (requests/s); `concurrency` is then
    /// the cap on requests in flight.
    #[serde(default)]
    pub request_rate: Option<f64>,
    /// Open loop: the rate the requests were sent at, first send to last.
    #[serde(default)]
    pub achieved_rate: Option<f64>,
    /// With SLOs: the requests that met every one, and per second of the
    /// repeat's duration (goodput).
    #[serde(default)]
    pub good: Option<u32>,
    #[serde(default)]
    pub goodput_req_s: Option<f64>,
    /// How the load generator itself fared: a saturated client measures
    /// itself, not the server.
    #[serde(default)]
    pub client: Option<ClientHealth>,
}

/// The load generator during one repeat.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ClientHealth {
    /// How late a 10 ms tick on the generator's runtime woke: p99 and the
    /// worst (ms). A busy event loop reads every stream late.
    pub lag_p99_ms: f64,
    pub lag_max_ms: f64,
    /// CPU drainwatch used over the repeat (% of one core), of the cores it
    /// may run on.
    pub cpu_pct: f64,
    pub cores: u32,
    /// Open loop: how late the sender sent requests after their arrival time
    /// (p99, ms), and how many waited for a slot under `max_concurrency`.
    #[serde(default)]
    pub send_late_p99_ms: Option<f64>,
    #[serde(default)]
    pub waited_for_slot: Option<u32>,
    /// Why the client was the bottleneck, if it was: the repeat's numbers
    /// measure the generator, not the server.
    #[serde(default)]
    pub saturated: Option<String>,
}

impl ClientHealth {
    /// The event loop woke this late (p99, ms) or later: saturated.
    pub const LAG_LIMIT_MS: f64 = 25.0;
    /// This share of the cores it may use, or more: saturated.
    pub const CPU_LIMIT: f64 = 0.9;
    /// Open loop: requests sent this late (p99, ms) or later: saturated.
    pub const SEND_LATE_LIMIT_MS: f64 = 25.0;

    /// Sets [`Self::saturated`] from the numbers.
    pub fn judge(mut self) -> Self {
        let mut why = Vec::new();
        if self.lag_p99_ms >= Self::LAG_LIMIT_MS {
            why.push(format!(
                "its event loop woke {:.0} ms late (p99)",
                self.lag_p99_ms
            ));
        }
        if self.cores > 0 && self.cpu_pct >= Self::CPU_LIMIT * 100.0 * f64::from(self.cores) {
            why.push(format!(
                "it used {:.0} % of its {} core{}",
                self.cpu_pct / f64::from(self.cores),
                self.cores,
                if self.cores == 1 { "" } else { "s" }
            ));
        }
        if let Some(late) = self
            .send_late_p99_ms
            .filter(|l| *l >= Self::SEND_LATE_LIMIT_MS)
        {
            why.push(format!(
                "it sent requests {late:.0} ms after their time (p99)"
            ));
        }
        self.saturated = (!why.is_empty())
            .then(|| format!("the load generator was saturated: {}", why.join("; ")));
        self
    }
}

/// Spread of one number across repeats.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Spread {
    pub min: f64,
    pub median: f64,
    pub max: f64,
}

impl Spread {
    pub fn of(values: &[f64]) -> Self {
        let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
        if v.is_empty() {
            return Self::default();
        }
        v.sort_by(f64::total_cmp);
        let mid = v.len() / 2;
        let median = if v.len() % 2 == 1 {
            v[mid]
        } else {
            (v[mid - 1] + v[mid]) / 2.0
        };
        Self {
            min: v[0],
            median,
            max: v[v.len() - 1],
        }
    }
}

/// The repeats at one concurrency, summarised.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LevelSummary {
    pub concurrency: u32,
    pub output_tok_s: Spread,
    pub total_tok_s: Spread,
    pub request_s: Spread,
    pub ttft_p50_ms: Spread,
    pub ttft_p99_ms: Spread,
    pub itl_p50_ms: Spread,
    pub itl_p99_ms: Spread,
    pub e2e_p50_ms: Spread,
    pub failed: u32,
    /// The least exact token count of the repeats: what the ITL is per.
    #[serde(default)]
    pub token_source: TokenSource,
    /// Open loop: the requested rate, and the rates achieved.
    #[serde(default)]
    pub request_rate: Option<f64>,
    #[serde(default)]
    pub achieved_rate: Option<Spread>,
    /// With SLOs: good requests per second, and whether the median repeat's
    /// share of good requests reached the SLOs' `attainment_pct`.
    #[serde(default)]
    pub goodput_req_s: Option<Spread>,
    #[serde(default)]
    pub meets_slo: Option<bool>,
    /// Why the load generator was the bottleneck in some repeat, if it was.
    #[serde(default)]
    pub client_saturated: Option<String>,
}

impl LevelSummary {
    /// The repeats summarised per level, in the order of `levels`; a level
    /// without repeats is left out.
    pub fn group(levels: &[LevelKey], repeats: &[RunMetrics], slo: Option<&Slo>) -> Vec<Self> {
        levels
            .iter()
            .filter_map(|k| {
                let of: Vec<RunMetrics> = repeats
                    .iter()
                    .filter(|m| LevelKey::of(m) == *k)
                    .cloned()
                    .collect();
                (!of.is_empty()).then(|| Self::of_level(*k, &of, slo))
            })
            .collect()
    }

    /// Every level of `repeats`, in the order first seen.
    pub fn group_all(repeats: &[RunMetrics], slo: Option<&Slo>) -> Vec<Self> {
        let mut keys: Vec<LevelKey> = Vec::new();
        for m in repeats {
            let k = LevelKey::of(m);
            if !keys.contains(&k) {
                keys.push(k);
            }
        }
        Self::group(&keys, repeats, slo)
    }

    fn of_level(key: LevelKey, repeats: &[RunMetrics], slo: Option<&Slo>) -> Self {
        let spread = |f: &dyn Fn(&RunMetrics) -> Option<f64>| {
            let v: Vec<f64> = repeats.iter().filter_map(f).collect();
            (!v.is_empty()).then(|| Spread::of(&v))
        };
        let attainment = spread(&|m| {
            let n = m.completed + m.failed;
            m.good.map(|g| {
                if n == 0 {
                    0.0
                } else {
                    100.0 * f64::from(g) / f64::from(n)
                }
            })
        });
        Self {
            request_rate: key.request_rate,
            achieved_rate: spread(&|m| m.achieved_rate),
            goodput_req_s: spread(&|m| m.goodput_req_s),
            meets_slo: slo
                .zip(attainment)
                .map(|(slo, a)| a.median >= slo.attainment_pct),
            client_saturated: repeats
                .iter()
                .find_map(|m| m.client.as_ref().and_then(|c| c.saturated.clone())),
            ..Self::of(key.concurrency, repeats)
        }
    }

    pub fn of(concurrency: u32, repeats: &[RunMetrics]) -> Self {
        let s = |f: fn(&RunMetrics) -> f64| Spread::of(&repeats.iter().map(f).collect::<Vec<_>>());
        Self {
            concurrency,
            output_tok_s: s(|m| m.output_tok_s),
            total_tok_s: s(|m| m.total_tok_s),
            request_s: s(|m| m.request_s),
            ttft_p50_ms: s(|m| m.ttft.p50_ms),
            ttft_p99_ms: s(|m| m.ttft.p99_ms),
            itl_p50_ms: s(|m| m.itl.p50_ms),
            itl_p99_ms: s(|m| m.itl.p99_ms),
            e2e_p50_ms: s(|m| m.e2e.p50_ms),
            failed: repeats.iter().map(|m| m.failed).sum(),
            token_source: TokenSource::least_exact(repeats.iter().map(|m| m.token_source)),
            request_rate: None,
            achieved_rate: None,
            goodput_req_s: None,
            meets_slo: None,
            client_saturated: None,
        }
    }
}

/// How a benchmark run stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    Running,
    Succeeded,
    Failed,
    Cancelled,
    Interrupted,
}

/// The correctness check's result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CorrectnessResult {
    pub passed: bool,
    /// What the server answered (cut to 500 characters).
    pub answer: String,
}

/// A benchmark run: its settings, flag set, results.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BenchRun {
    pub id: i64,
    pub flagset: String,
    /// The restart it followed, when run automatically.
    pub restart_id: Option<i64>,
    pub requested_by: String,
    pub settings: BenchSettings,
    pub status: RunStatus,
    pub started_at_ms: u64,
    pub finished_at_ms: Option<u64>,
    pub error: Option<String>,
    pub correctness: Option<CorrectnessResult>,
    pub repeats: Vec<RunMetrics>,
    pub levels: Vec<LevelSummary>,
    /// What the result was measured with and under: versions, the seed, and
    /// what the GPUs did meanwhile (none for runs recorded before it was kept).
    #[serde(default)]
    pub provenance: Option<Provenance>,
}

/// The context that makes a result believable later.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Provenance {
    pub drainwatch_version: String,
    pub hostname: String,
    /// The GPUs were drainwatch's simulated host, not real ones.
    pub simulated: bool,
    pub driver_version: Option<String>,
    /// CUDA driver API version, e.g. "12.9".
    pub cuda_version: Option<String>,
    /// The server's own version (SGLang's `/get_server_info`, vLLM's
    /// `/version`), and which endpoint said so.
    pub server_version: Option<String>,
    pub server_version_from: Option<String>,
    /// The model as the server was told, and its revision when pinned.
    pub model: String,
    pub revision: Option<String>,
    /// The prompts' seed: each level and repeat derives its own from it.
    pub seed: u64,
    /// What was asked: random words, a dataset file, or shared prefixes.
    #[serde(default)]
    pub workload: Workload,
    /// Per GPU over the run's repeats: min, median and max.
    pub gpus: Vec<GpuConditions>,
}

/// The prompts of a run. Two results compare only with the same workload.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Workload {
    /// "random", "dataset" or "shared_prefix".
    pub kind: String,
    pub input_len: u32,
    pub output_len: u32,
    /// The dataset's file name, its SHA-256 and how many prompts it has.
    pub dataset: Option<String>,
    pub dataset_sha256: Option<String>,
    pub dataset_prompts: Option<u32>,
    pub prefix_groups: Option<u32>,
    pub prefix_len: Option<u32>,
}

impl Workload {
    /// Why two workloads make two results incomparable, if they do. The
    /// seed is not part of it: random prompts of one length are alike.
    pub fn differs(&self, other: &Self) -> Option<String> {
        if self.kind != other.kind {
            return Some(format!(
                "one ran {} prompts, the other {} prompts",
                self.kind.replace('_', "-"),
                other.kind.replace('_', "-")
            ));
        }
        if self.dataset_sha256 != other.dataset_sha256 {
            return Some("they ran different dataset files".to_owned());
        }
        if (self.prefix_groups, self.prefix_len) != (other.prefix_groups, other.prefix_len) {
            return Some("their shared prefixes differ".to_owned());
        }
        // A dataset's own lengths make the settings' moot where it gives them.
        if self.kind != "dataset"
            && (self.input_len, self.output_len) != (other.input_len, other.output_len)
        {
            return Some(format!(
                "one ran {} → {} tokens, the other {} → {}",
                self.input_len, self.output_len, other.input_len, other.output_len
            ));
        }
        None
    }
}

/// A run's GPU conditions in brief, for the ledger.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RunConditions {
    /// The lowest power cap of any GPU during the run (W).
    pub power_limit_w: Option<f64>,
    /// The hottest any GPU got (°C).
    pub temp_max_c: Option<f64>,
    pub server_version: Option<String>,
    /// Its workload: the compare panel says when two sets' differ.
    #[serde(default)]
    pub workload: Workload,
}

impl RunConditions {
    /// From this temperature on, a GPU may be slowing itself down.
    pub const HOT_C: f64 = 85.0;

    pub fn of(p: &Provenance) -> Self {
        Self {
            power_limit_w: p
                .gpus
                .iter()
                .filter_map(|g| g.power_limit_w)
                .reduce(f64::min),
            temp_max_c: p
                .gpus
                .iter()
                .filter_map(|g| g.temp_c.map(|t| t.max))
                .reduce(f64::max),
            server_version: p.server_version.clone(),
            workload: p.workload.clone(),
        }
    }
}

/// What one GPU did while the benchmark ran, from drainwatch's own samples.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GpuConditions {
    pub index: u32,
    pub samples: u32,
    pub util_pct: Option<Spread>,
    pub power_w: Option<Spread>,
    /// The power cap it ran under (its lowest during the run).
    pub power_limit_w: Option<f64>,
    pub temp_c: Option<Spread>,
    pub mem_used_gib: Option<Spread>,
}

/// Progress of the running benchmark, pushed over `/ws`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BenchProgress {
    pub run_id: i64,
    pub status: RunStatus,
    /// The level: a concurrency, or (open loop) the cap with a request rate.
    pub concurrency: u32,
    #[serde(default)]
    pub request_rate: Option<f64>,
    /// The repeat in progress, from 0.
    pub repeat: u32,
    /// Repeats per concurrency (0 from a server that does not say).
    #[serde(default)]
    pub repeats: u32,
    /// Requests finished out of all the run will send.
    pub done: u32,
    pub total: u32,
    /// Output tok/s of the repeat in progress so far.
    pub output_tok_s: f64,
    /// Who started it ("after restart" when a restart did).
    #[serde(default)]
    pub requested_by: String,
}

/// Live throughput from the server's own metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Passive {
    /// Output tokens per second over the last scrape interval.
    pub output_tok_s: Option<f64>,
    pub running: Option<u32>,
    pub queued: Option<u32>,
    /// Median time to first token of the requests served over the last ten
    /// seconds, from the server's histogram; `None` when it has none, or
    /// served nothing.
    #[serde(default)]
    pub ttft_p50_ms: Option<f64>,
    /// Median time between tokens over the last ten seconds, likewise.
    #[serde(default)]
    pub itl_p50_ms: Option<f64>,
}

/// A flag set with its measured results (the ledger's row).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FlagSetResults {
    pub set: FlagSet,
    /// Per concurrency, the latest successful closed-loop run's summary.
    pub levels: BTreeMap<u32, LevelSummary>,
    /// The latest successful open-loop run's levels (by request rate), and the
    /// highest rate among them that met its SLOs: what a team ships on.
    #[serde(default)]
    pub rate_levels: Vec<LevelSummary>,
    #[serde(default)]
    pub best_rate: Option<f64>,
    /// What the GPUs did in the newest successful run (none before it was
    /// recorded): a result at a lower power cap or hot is marked as such.
    #[serde(default)]
    pub conditions: Option<RunConditions>,
    pub runs: u32,
    /// A run's correctness check failed with this set.
    pub wrong_answers: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_sources_name_themselves_as_on_the_wire_and_read_old_names() {
        for s in [
            TokenSource::ChunkUsage,
            TokenSource::Tokenizer,
            TokenSource::Event,
            TokenSource::Usage,
        ] {
            let wire = serde_json::to_value(s).expect("serializes");
            assert_eq!(wire, s.as_str());
            assert_eq!(serde_json::from_value::<TokenSource>(wire).ok(), Some(s));
        }
        // Before per-event counts, a run without the server's count said `stream`.
        let old: TokenSource = serde_json::from_str("\"stream\"").expect("old name");
        assert_eq!(old, TokenSource::Event);
        assert!(!old.per_token() && TokenSource::Tokenizer.per_token());
    }

    #[test]
    fn open_loop_settings_and_slos_are_checked() {
        let open = BenchSettings {
            request_rate: vec![2.0, 8.0],
            max_concurrency: Some(32),
            slo: Some(Slo {
                ttft_ms: Some(500.0),
                tpot_ms: None,
                e2e_ms: None,
                attainment_pct: 90.0,
            }),
            ..BenchSettings::default()
        };
        assert!(open.validate().is_ok(), "{:?}", open.validate());
        let keys = open.levels();
        assert_eq!(keys.len(), 2);
        assert_eq!((keys[1].concurrency, keys[1].request_rate), (32, Some(8.0)));
        assert_eq!(open.max_in_flight(), 32);
        // Without a cap, at most the requests of a repeat (and never over 1024).
        let uncapped = BenchSettings {
            max_concurrency: None,
            num_prompts: 5_000,
            ..open.clone()
        };
        assert_eq!(uncapped.open_loop_cap(), 1024);
        let bad = |f: fn(&mut BenchSettings)| {
            let mut s = open.clone();
            f(&mut s);
            s.validate().expect_err("refused")
        };
        assert!(bad(|s| s.request_rate = vec![0.0]).contains("request_rate 0"));
        assert!(bad(|s| s.request_rate = vec![f64::NAN]).contains("request_rate"));
        assert!(bad(|s| s.request_rate = vec![1.0; 13]).contains("at most 12"));
        assert!(bad(|s| s.burstiness = 0.0).contains("burstiness"));
        assert!(bad(|s| s.max_concurrency = Some(0)).contains("max_concurrency"));
        assert!(
            bad(|s| s.slo = Some(Slo {
                ttft_ms: None,
                ..s.slo.expect("slo")
            }))
            .contains("at least one")
        );
        assert!(
            bad(|s| s.slo = Some(Slo {
                ttft_ms: Some(-1.0),
                ..s.slo.expect("slo")
            }))
            .contains("slo.ttft_ms")
        );
        assert!(
            bad(|s| s.slo = Some(Slo {
                attainment_pct: 0.0,
                ..s.slo.expect("slo")
            }))
            .contains("attainment_pct")
        );
        // A level meets the SLOs when its median repeat's share of good
        // requests reaches the attainment.
        let repeat = |good: u32| RunMetrics {
            concurrency: 32,
            completed: 10,
            request_rate: Some(8.0),
            good: Some(good),
            goodput_req_s: Some(f64::from(good)),
            ..RunMetrics::default()
        };
        let levels = LevelSummary::group(
            &keys,
            &[repeat(9), repeat(10), repeat(8)],
            open.slo.as_ref(),
        );
        assert_eq!(levels.len(), 1, "the 2 req/s level has no repeats");
        assert_eq!(levels[0].request_rate, Some(8.0));
        assert_eq!(levels[0].meets_slo, Some(true));
        assert_eq!(levels[0].goodput_req_s.map(|g| g.median), Some(9.0));
        let levels =
            LevelSummary::group(&keys, &[repeat(9), repeat(7), repeat(8)], open.slo.as_ref());
        assert_eq!(levels[0].meets_slo, Some(false));
    }

    #[test]
    fn workloads_compare_by_what_was_asked_not_the_seed() {
        let random = Workload {
            kind: "random".into(),
            input_len: 256,
            output_len: 128,
            ..Workload::default()
        };
        assert_eq!(random.differs(&random.clone()), None);
        let longer = Workload {
            output_len: 512,
            ..random.clone()
        };
        assert_eq!(
            random.differs(&longer).as_deref(),
            Some("one ran 256 → 128 tokens, the other 256 → 512")
        );
        let data = |sha: &str| Workload {
            kind: "dataset".into(),
            dataset_sha256: Some(sha.into()),
            ..random.clone()
        };
        // A dataset's own lengths win: the settings' do not matter.
        assert_eq!(
            data("a").differs(&Workload {
                output_len: 9,
                ..data("a")
            }),
            None
        );
        assert!(
            data("a")
                .differs(&data("b"))
                .is_some_and(|w| w.contains("different dataset"))
        );
        let prefix = Workload {
            kind: "shared_prefix".into(),
            ..random.clone()
        };
        assert!(
            random
                .differs(&prefix)
                .is_some_and(|w| w.contains("shared-prefix prompts"))
        );
    }

    #[test]
    fn spread_and_settings() {
        assert_eq!(
            Spread::of(&[3.0, 1.0, 2.0]),
            Spread {
                min: 1.0,
                median: 2.0,
                max: 3.0
            }
        );
        assert_eq!(Spread::of(&[]), Spread::default());
        assert!(BenchSettings::default().validate().is_ok());
        let bad = BenchSettings {
            repeats: 2,
            ..BenchSettings::default()
        };
        assert!(bad.validate().expect_err("2 repeats").contains("repeats"));
        let bad = BenchSettings {
            concurrency: vec![0],
            ..BenchSettings::default()
        };
        assert!(bad.validate().is_err());
    }

    #[test]
    fn a_benchmark_too_big_to_hold_is_refused_by_its_bound() {
        // 300 prompts of the longest input, one at a time: well within.
        let long = BenchSettings {
            concurrency: vec![1],
            num_prompts: 300,
            input_len: 131_072,
            ..BenchSettings::default()
        };
        assert!(long.validate().is_ok(), "{:?}", long.validate());
        // Every limit at its top: refused, naming the bound.
        let top = BenchSettings {
            concurrency: vec![1024],
            num_prompts: 100_000,
            input_len: 131_072,
            output_len: 32_768,
            ..BenchSettings::default()
        };
        let e = top.validate().expect_err("too big");
        assert!(e.contains("the bound is 64 MiB"), "{e}");
        let many_long_outputs = BenchSettings {
            num_prompts: 100_000,
            output_len: 1_024,
            ..BenchSettings::default()
        };
        assert!(many_long_outputs.validate().is_err());
        let wide = BenchSettings {
            concurrency: vec![1024],
            input_len: 16_384,
            ..BenchSettings::default()
        };
        assert!(wide.validate().is_err());
    }
}
