//! What a benchmark measured: per repeat ([`RunMetrics`]), per level
//! ([`LevelSummary`]), per run ([`BenchRun`]) and per flag set
//! ([`FlagSetResults`]); the running one's progress.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::provenance::{Provenance, RunConditions};
use super::settings::{BenchSettings, FlagSet, LevelKey, Slo, TokenSource};
use super::spread::Spread;

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
    /// The prompt length asked for, in the model's tokens (the input length,
    /// with the shared prefix); none for a dataset's prompts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_tokens_asked: Option<u32>,
    /// The prompt tokens the server itself counted (`usage.prompt_tokens`),
    /// per completed request on average; none where it did not count them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_tokens_counted: Option<f64>,
}

/// A counted prompt length this far from the asked one (a share of it), or
/// farther, is not the workload asked for.
pub const PROMPT_LEN_TOLERANCE: f64 = 0.10;

/// What to say when the server counted prompts of another length than asked
/// (more than [`PROMPT_LEN_TOLERANCE`] off): the result measured another
/// workload.
pub fn prompt_len_warning(asked: u32, counted: f64) -> Option<String> {
    if asked == 0 || !counted.is_finite() {
        return None;
    }
    let off = counted / f64::from(asked) - 1.0;
    // 10 % exactly is within, whatever the last bit of the division says.
    (off.abs() > PROMPT_LEN_TOLERANCE + 1e-9).then(|| {
        format!(
            "prompts were {counted:.0} tokens by the server's count, not the {asked} asked ({:+.0} %)",
            off * 100.0
        )
    })
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
    /// The prompt tokens the server counted per request (the repeats' mean),
    /// where it counted them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_tokens: Option<f64>,
    /// The prompts were not of the length asked for: [`prompt_len_warning`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_len_off: Option<String>,
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
        // Counted only where every repeat's server counted.
        let counted: Option<Vec<f64>> = repeats.iter().map(|m| m.prompt_tokens_counted).collect();
        let prompt_tokens = counted
            .filter(|c| !c.is_empty())
            .map(|c| c.iter().sum::<f64>() / c.len() as f64);
        let asked = repeats.first().and_then(|m| m.prompt_tokens_asked);
        let prompt_len_off = asked
            .zip(prompt_tokens)
            .and_then(|(a, c)| prompt_len_warning(a, c));
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
            prompt_tokens,
            prompt_len_off,
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

wire_names!(RunStatus {
    Running => "running",
    Succeeded => "succeeded",
    Failed => "failed",
    Cancelled => "cancelled",
    Interrupted => "interrupted",
});

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
    /// The campaign and step (from 0) it measured, when a campaign ran it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub campaign_id: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub campaign_step: Option<u32>,
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
    /// The newest campaign step that ran this set, and how it came out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub campaign: Option<CampaignLink>,
}

/// A flag set's place in a campaign: which step ran it, and how that ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CampaignLink {
    pub campaign_id: i64,
    /// The campaign's name.
    pub campaign: String,
    /// The step, from 0.
    pub step: u32,
    /// "done", "reused", or "failed: out of memory at launch".
    pub outcome: String,
}
