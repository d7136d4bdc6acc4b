//! Campaigns: an unattended search over flag sets, each step a guarded restart,
//! a correctness check and a benchmark, every result tied to its step. The
//! plan as resolved and run ([`Campaign`], [`Step`]), where each stands
//! ([`CampaignState`], [`StepState`]), why a step failed ([`StepFailure`]),
//! what it measured ([`StepResult`]); and what the views compute from them
//! ([`analysis`]: Δ against the baseline, the best set, the Pareto frontier,
//! each flag's effect, the time left).
//!
//! Every enum here is a unit enum and every struct flat: the UI reads them
//! without serde's buffering path.

pub mod analysis;

use serde::{Deserialize, Serialize};

use crate::bench::{BenchSettings, Spread};
use crate::flags::Flags;

/// The most steps one plan may have.
pub const MAX_STEPS: usize = 1_000;

/// In which order a plan's flag sets run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PlanOrder {
    /// As written (a grid: the first flag's values vary slowest).
    #[default]
    Given,
    /// Sets that differ from the one before only in environment variables
    /// first: grouped by their arguments, a step toward cheaper restarts.
    EnvFirst,
}

/// How a campaign chooses its steps over its plan's `[grid]`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Strategy {
    /// Every combination, in order.
    #[default]
    Grid,
    /// Combinations drawn at random, until the budget is spent.
    Random,
    /// A two-level design (Plackett–Burman): every flag's main effect, with
    /// its interval, in the first multiple of 4 runs above the flags' count.
    Screen,
    /// Model-based proposals (TPE), after a screen unless the plan says
    /// `screen = false`, until the budget is spent or no step gains.
    Search,
}

wire_names!(Strategy {
    Grid => "grid",
    Random => "random",
    Screen => "screen",
    Search => "search",
});

/// What a failed step leads to. A foreign process holding GPU memory always
/// pauses the campaign, whatever the policy: it is not the campaign's to resolve.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailurePolicy {
    /// Record it and go on with the next step.
    #[default]
    Continue,
    /// Try the step once more, then go on.
    Retry,
    /// Stop the campaign.
    Stop,
}

/// Where a campaign stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CampaignState {
    /// Running its steps; it holds the server: nobody else restarts or benchmarks it.
    Running,
    /// Asked to pause: the running step finishes first.
    Pausing,
    /// Paused by an operator, or because a foreign process holds GPU memory
    /// (see the reason); the server is free for people until it resumes.
    Paused,
    /// Every step ran (some may have failed).
    Done,
    /// An operator cancelled it.
    Cancelled,
    /// A failed step stopped it (policy `stop`).
    Stopped,
}

wire_names!(CampaignState {
    Running => "running",
    Pausing => "pausing",
    Paused => "paused",
    Done => "done",
    Cancelled => "cancelled",
    Stopped => "stopped",
});

impl CampaignState {
    /// Running or about to pause: it holds the server.
    pub fn holds_server(self) -> bool {
        matches!(self, Self::Running | Self::Pausing)
    }

    /// It will run no more steps.
    pub fn is_over(self) -> bool {
        matches!(self, Self::Done | Self::Cancelled | Self::Stopped)
    }

    pub fn label(self) -> &'static str {
        match self {
            Self::Running => "running",
            Self::Pausing => "pausing after this step",
            Self::Paused => "paused",
            Self::Done => "done",
            Self::Cancelled => "cancelled",
            Self::Stopped => "stopped",
        }
    }
}

/// Where one step stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StepState {
    Pending,
    /// Its guarded restart runs: drain, verify, launch, warm up.
    Restarting,
    /// Its correctness check and benchmark run.
    Benchmarking,
    /// Measured.
    Done,
    /// Not run: the same flag set was measured before with the same
    /// benchmark settings on the same server version; that result stands.
    Reused,
    Failed,
    /// Not run: the campaign was cancelled or stopped first.
    Skipped,
}

wire_names!(StepState {
    Pending => "pending",
    Restarting => "restarting",
    Benchmarking => "benchmarking",
    Done => "done",
    Reused => "reused",
    Failed => "failed",
    Skipped => "skipped",
});

impl StepState {
    /// It will not run again.
    pub fn is_final(self) -> bool {
        matches!(
            self,
            Self::Done | Self::Reused | Self::Failed | Self::Skipped
        )
    }

    pub fn label(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Restarting => "restarting",
            Self::Benchmarking => "benchmarking",
            Self::Done => "done",
            Self::Reused => "reused",
            Self::Failed => "failed",
            Self::Skipped => "skipped",
        }
    }
}

/// Why a step failed, classified as restarts are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureKind {
    /// The server ran out of GPU memory while it launched.
    Oom,
    WarmupTimeout,
    /// The server exited during its warm-up or benchmark.
    Crashed,
    /// Any other launch failure (port in use, refused, could not start).
    LaunchFailed,
    /// GPU memory did not come back to baseline: nothing was launched.
    VerifyFailed,
    /// A foreign process holds GPU memory the server needs (the campaign pauses).
    ForeignHolders,
    /// A GPU failed the health check before launch (the campaign pauses).
    Unhealthy,
    /// The correctness check's answer was wrong: the benchmark did not run.
    WrongAnswer,
    /// The benchmark itself failed (the server stopped answering, say).
    BenchFailed,
    /// A GPU needs a person (memory the driver leaked, a process SIGKILL
    /// cannot end): the campaign stops, whatever its failure policy.
    NeedsPerson,
}

impl FailureKind {
    pub fn label(self) -> &'static str {
        match self {
            Self::Oom => "out of memory at launch",
            Self::WarmupTimeout => "warm-up timeout",
            Self::Crashed => "crashed",
            Self::LaunchFailed => "launch failed",
            Self::VerifyFailed => "verify failed",
            Self::ForeignHolders => "foreign process holds GPU memory",
            Self::Unhealthy => "GPU failed the health check",
            Self::WrongAnswer => "wrong answer",
            Self::BenchFailed => "benchmark failed",
            Self::NeedsPerson => "a GPU needs a person (reset or reboot)",
        }
    }

    /// A few words, for a table's cell.
    pub fn short(self) -> &'static str {
        match self {
            Self::Oom => "OOM at launch",
            Self::WarmupTimeout => "warm-up timeout",
            Self::Crashed => "crashed",
            Self::LaunchFailed => "launch failed",
            Self::VerifyFailed => "verify failed",
            Self::ForeignHolders => "foreign holder",
            Self::Unhealthy => "unhealthy GPU",
            Self::WrongAnswer => "wrong answer",
            Self::BenchFailed => "bench failed",
            Self::NeedsPerson => "needs a person",
        }
    }
}

/// A step's failure: its class and the one-line reason.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepFailure {
    pub kind: FailureKind,
    pub message: String,
}

/// What a step measured, at its first level (a concurrency, or a request rate).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepResult {
    /// The benchmark run (for a reused step: the earlier run it stands on).
    pub run_id: i64,
    pub concurrency: u32,
    /// Open loop: the level's request rate (req/s).
    #[serde(default)]
    pub request_rate: Option<f64>,
    pub output_tok_s: Spread,
    pub ttft_p99_ms: Spread,
    /// With SLOs: good requests per second.
    #[serde(default)]
    pub goodput_req_s: Option<Spread>,
    /// Open loop: the rate the requests were sent at.
    #[serde(default)]
    pub achieved_rate: Option<Spread>,
    /// The load generator was the bottleneck in some repeat.
    #[serde(default)]
    pub client_saturated: bool,
}

impl StepResult {
    /// The number the campaign optimises: goodput for an open-loop level that
    /// has SLOs, otherwise output tok/s.
    pub fn metric(&self) -> Spread {
        match (self.request_rate, self.goodput_req_s) {
            (Some(_), Some(g)) => g,
            _ => self.output_tok_s,
        }
    }

    /// "tok/s" or "req/s": the metric's unit.
    pub fn metric_unit(&self) -> &'static str {
        match (self.request_rate, self.goodput_req_s) {
            (Some(_), Some(_)) => "good req/s",
            _ => "tok/s",
        }
    }
}

/// One flag set of the plan and how far it got.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Step {
    /// Position in the order run, from 0.
    pub index: u32,
    /// Position in the plan as written, from 0.
    pub plan_index: u32,
    /// A name from the plan, if it gave one.
    #[serde(default)]
    pub label: Option<String>,
    /// Every allow-listed flag's value for this step (secrets redacted in views).
    pub flags: Flags,
    /// The flag set's id in the ledger.
    pub flagset: String,
    /// This step's own benchmark settings, where the plan gave it some;
    /// otherwise the campaign's. (The browser's page does not read them: it
    /// shows none, and their reader would weigh on its bundle.)
    #[serde(default)]
    #[cfg_attr(target_arch = "wasm32", serde(skip_deserializing))]
    pub settings: Option<BenchSettings>,
    pub state: StepState,
    /// Attempts begun (a retry is a second one).
    pub attempts: u32,
    /// The newest restart of this step.
    #[serde(default)]
    pub restart_id: Option<i64>,
    /// The newest benchmark run of this step (a reused step: none; its result
    /// names the run it stands on).
    #[serde(default)]
    pub run_id: Option<i64>,
    #[serde(default)]
    pub failure: Option<StepFailure>,
    #[serde(default)]
    pub result: Option<StepResult>,
    #[serde(default)]
    pub started_at_ms: Option<u64>,
    #[serde(default)]
    pub finished_at_ms: Option<u64>,
}

impl Step {
    /// How long it took (running: so far).
    pub fn took_ms(&self, now_ms: u64) -> Option<u64> {
        let start = self.started_at_ms?;
        Some(self.finished_at_ms.unwrap_or(now_ms).saturating_sub(start))
    }

    /// Measured, by itself or by an earlier run.
    pub fn measured(&self) -> bool {
        matches!(self.state, StepState::Done | StepState::Reused) && self.result.is_some()
    }
}

/// A campaign's header: everything but its steps. Pushed over `/ws` when it changes.
/// The browser's page reads its number, name, state and step count only (the
/// agent draws the rest, `CampaignView`): it skips the other fields, which
/// keeps their readers out of its bundle.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CampaignInfo {
    pub id: i64,
    pub name: String,
    pub state: CampaignState,
    /// Why it paused or stopped.
    #[serde(default)]
    #[cfg_attr(target_arch = "wasm32", serde(skip_deserializing))]
    pub reason: Option<String>,
    #[cfg_attr(target_arch = "wasm32", serde(skip_deserializing))]
    pub requested_by: String,
    #[cfg_attr(target_arch = "wasm32", serde(skip_deserializing))]
    pub created_at_ms: u64,
    #[serde(default)]
    #[cfg_attr(target_arch = "wasm32", serde(skip_deserializing))]
    pub finished_at_ms: Option<u64>,
    #[cfg_attr(target_arch = "wasm32", serde(skip_deserializing))]
    pub order: PlanOrder,
    #[cfg_attr(target_arch = "wasm32", serde(skip_deserializing))]
    pub on_failure: FailurePolicy,
    /// Skip a set already measured with the same settings on the same server version.
    #[cfg_attr(target_arch = "wasm32", serde(skip_deserializing))]
    pub reuse: bool,
    /// The goal, in the metric's unit (output tok/s, or good req/s in open loop).
    #[serde(default)]
    #[cfg_attr(target_arch = "wasm32", serde(skip_deserializing))]
    pub target: Option<f64>,
    /// The step every other is compared with (plan index 0).
    #[cfg_attr(target_arch = "wasm32", serde(skip_deserializing))]
    pub baseline: u32,
    /// The step running (or next to run).
    #[serde(default)]
    #[cfg_attr(target_arch = "wasm32", serde(skip_deserializing))]
    pub current: Option<u32>,
    pub steps: u32,
    /// Steps per state so far: done, reused, failed, skipped.
    #[cfg_attr(target_arch = "wasm32", serde(skip_deserializing))]
    pub done: u32,
    #[cfg_attr(target_arch = "wasm32", serde(skip_deserializing))]
    pub reused: u32,
    #[cfg_attr(target_arch = "wasm32", serde(skip_deserializing))]
    pub failed: u32,
    #[cfg_attr(target_arch = "wasm32", serde(skip_deserializing))]
    pub skipped: u32,
    /// The flags the plan varies, in the plan's order: what attribution is over.
    #[cfg_attr(target_arch = "wasm32", serde(skip_deserializing))]
    pub varied: Vec<String>,
    /// A step's likely duration before any has run (ms): typical restart
    /// phases and benchmark, when drainwatch has seen some.
    #[serde(default)]
    #[cfg_attr(target_arch = "wasm32", serde(skip_deserializing))]
    pub step_estimate_ms: Option<u64>,
}

/// A campaign with its steps and the benchmark its steps run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Campaign {
    pub info: CampaignInfo,
    /// The benchmark of every step that gives none of its own (not read by
    /// the browser's page, as [`Step::settings`]).
    #[cfg_attr(target_arch = "wasm32", serde(skip_deserializing))]
    pub bench: BenchSettings,
    pub steps: Vec<Step>,
}

impl Campaign {
    /// The settings step `s` runs with.
    pub fn settings_of<'a>(&'a self, s: &'a Step) -> &'a BenchSettings {
        s.settings.as_ref().unwrap_or(&self.bench)
    }

    /// The baseline step.
    pub fn baseline(&self) -> Option<&Step> {
        self.steps
            .iter()
            .find(|s| s.plan_index == self.info.baseline)
    }

    /// Recounts the header's per-state counts from the steps.
    pub fn recount(&mut self) {
        let n = |st: StepState| self.steps.iter().filter(|s| s.state == st).count() as u32;
        self.info.steps = self.steps.len() as u32;
        self.info.done = n(StepState::Done);
        self.info.reused = n(StepState::Reused);
        self.info.failed = n(StepState::Failed);
        self.info.skipped = n(StepState::Skipped);
    }
}

/// A campaign as the agent draws it for the page
/// (`GET /api/campaigns/{id}/view`): the read-only blocks as HTML, the window
/// of step rows asked for, and what the page acts on. The page holds no
/// campaign of its own: a `campaign` or `campaign_step` message, a choice or
/// a scroll asks for the view again.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CampaignView {
    pub id: i64,
    /// Steps in the plan.
    pub steps: u32,
    /// The step running now.
    #[serde(default)]
    pub current: Option<u32>,
    /// The restart the live chart follows: the running step's, else the
    /// newest step's.
    #[serde(default)]
    pub live_restart: Option<i64>,
    /// How far, how long is left, the best set, the step running now (HTML).
    /// Times that follow the clock are of class `tick` and carry it in
    /// attributes: `data-since` (ms; the text is the time since) or
    /// `data-end` and `data-floor` (ms; the text is "≈ … left", the time to
    /// the end but never below the floor).
    pub summary: String,
    /// The chart, the chosen step and each flag's effect (HTML).
    pub side: String,
    /// The step of the first row.
    pub first: u32,
    /// One `<tr>` per step from `first`, in the order the steps run.
    pub rows: Vec<String>,
    /// The chosen step's set, for "restart with this set".
    #[serde(default)]
    pub chosen: Option<ChosenSet>,
}

/// A step's flag set, as "restart with this set" fills the restart dialog.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChosenSet {
    /// The set's id in the ledger.
    pub flagset: String,
    /// Its label, else "step N".
    pub name: String,
    pub flags: Flags,
}

/// `POST /api/campaigns/{id}/pause | resume | cancel` and `POST /api/campaigns`
/// answer with this.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CampaignAccepted {
    pub id: i64,
    pub state: CampaignState,
}
