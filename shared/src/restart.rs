//! The managed server and its guarded restarts: where the server is in its life
//! ([`Phase`]), which flags a restart may change ([`FlagSpec`]), why an operation
//! failed ([`Failure`]), and the recorded history ([`RestartSummary`],
//! [`RestartDetail`]).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::ProcId;
pub use crate::failure::{Failure, Holder, LaunchCause, LeakedGpu, StuckProcess, exit_text};

use crate::flags::{FlagSpec, Flags};

/// Where the managed server is. Ready → Draining → Killing → Verifying →
/// Launching → WarmingUp → Ready is a restart; Failed and Crashed say why in
/// [`ServerStatus::failure`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// No server is running under drainwatch (never started, stopped, or not adopted yet).
    Stopped,
    /// SIGTERM sent to the server's process group; waiting for it to finish its
    /// in-flight requests and exit.
    Draining,
    /// SIGKILL sent to the group and to every tracked descendant still alive.
    Killing,
    /// Waiting until NVML shows no process of ours and every GPU is back at its idle
    /// baseline, for several consecutive samples.
    Verifying,
    /// Spawning the server with the new flags.
    Launching,
    /// Spawned; waiting for `/health`, then for a real completion to answer.
    WarmingUp,
    Ready,
    /// An operation failed; the server is not running (see the failure).
    Failed,
    /// The server died while nobody was restarting it.
    Crashed,
}

impl Phase {
    /// Phases during which an operation is in flight.
    pub fn is_busy(self) -> bool {
        matches!(
            self,
            Self::Draining | Self::Killing | Self::Verifying | Self::Launching | Self::WarmingUp
        )
    }

    pub fn label(self) -> &'static str {
        match self {
            Self::Stopped => "stopped",
            Self::Draining => "draining",
            Self::Killing => "killing",
            Self::Verifying => "verifying",
            Self::Launching => "launching",
            Self::WarmingUp => "warming up",
            Self::Ready => "ready",
            Self::Failed => "failed",
            Self::Crashed => "crashed",
        }
    }
}

wire_names!(Phase {
    Stopped => "stopped",
    Draining => "draining",
    Killing => "killing",
    Verifying => "verifying",
    Launching => "launching",
    WarmingUp => "warming_up",
    Ready => "ready",
    Failed => "failed",
    Crashed => "crashed",
});

/// What an operation does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OpKind {
    Restart,
    Stop,
    Start,
    /// Take over a server that was already running on the configured port.
    Adopt,
}

impl OpKind {
    /// "restart", "stop", "start", "adopt".
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Restart => "restart",
            Self::Stop => "stop",
            Self::Start => "start",
            Self::Adopt => "adopt",
        }
    }
}

/// An operation in flight (or the last one).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Operation {
    /// The restart record's id in the history.
    pub id: i64,
    pub kind: OpKind,
    pub started_at_ms: u64,
    /// Who asked (the client's address, or a user once authentication exists).
    pub requested_by: String,
    pub from_flags: Flags,
    pub to_flags: Flags,
}

/// How the servers drainwatch launches are kept apart from everything else.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ContainmentKind {
    /// Each launch in a cgroup v2 leaf of drainwatch's: nothing it forks escapes,
    /// and stopping it ends with `cgroup.kill`.
    Cgroup,
    /// Fallback: the server's process group, drainwatch as child subreaper, and
    /// the processes tracked by PID + start time.
    ProcessGroup,
}

/// Containment in force on this host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Containment {
    pub kind: ContainmentKind,
    /// Why cgroup containment is not in force (with `process_group`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The cgroup (from the hierarchy's root) drainwatch launches servers under.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cgroup: Option<String>,
    /// Single processes are signalled through pidfds; otherwise the PID is
    /// re-checked just before the signal (a small race with PID reuse remains).
    pub pidfd: bool,
    /// Why pidfds are not used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(target_arch = "wasm32", serde(skip_deserializing))]
    pub pidfd_reason: Option<String>,
    /// What this kernel lacks that drainwatch would use, or what this host
    /// hides from it (the host's PIDs, in a container), and what it does
    /// instead, one sentence each ("no cgroup.kill (Linux < 5.14): …").
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fallbacks: Vec<String>,
}

impl Containment {
    /// "cgroup /drainwatch-8000", "process group only (…)": one line for people.
    pub fn summary(&self) -> String {
        let s = match (self.kind, &self.cgroup, &self.reason) {
            (ContainmentKind::Cgroup, Some(cg), _) => format!("cgroup {cg}"),
            (ContainmentKind::Cgroup, None, _) => "cgroup".to_owned(),
            (ContainmentKind::ProcessGroup, _, Some(why)) => format!("process group only ({why})"),
            (ContainmentKind::ProcessGroup, _, None) => "process group only".to_owned(),
        };
        self.with_pidfd_note(s)
    }

    fn with_pidfd_note(&self, mut s: String) -> String {
        if !self.pidfd {
            s.push_str("; no pidfds: PIDs re-checked before each signal");
        }
        for f in &self.fallbacks {
            s.push_str("; ");
            s.push_str(f);
        }
        s
    }

    /// Whether containment is weaker than the newest kernels give: no cgroup
    /// leaves, no pidfds, or a fallback for something the kernel lacks.
    pub fn degraded(&self) -> bool {
        self.kind != ContainmentKind::Cgroup || !self.pidfd || !self.fallbacks.is_empty()
    }
}

impl ServerStatus {
    /// Nothing holds the server: no operation runs and no campaign holds it,
    /// so a person may ask for a restart (a stop or start has its own phase
    /// rules besides).
    pub fn is_free(&self) -> bool {
        self.operation.is_none() && self.held_by.is_none()
    }

    /// How the running server is contained (or, with none running, how the next
    /// launch will be), in one line for the UI and the CLI.
    pub fn containment_line(&self) -> Option<String> {
        let c = self.containment.as_ref()?;
        Some(c.of_server(
            self.origin,
            self.server_cgroup.as_deref(),
            self.server_contained,
        ))
    }
}

impl Containment {
    /// How a server of `origin` (none: no server running, so the next launch)
    /// held by `cgroup` is contained, in one line; `contained`: that cgroup is
    /// one of drainwatch's leaves.
    pub fn of_server(
        &self,
        origin: Option<Origin>,
        cgroup: Option<&str>,
        contained: bool,
    ) -> String {
        let line = match (origin, cgroup, contained) {
            (Some(Origin::Adopted), Some(cg), true) => {
                format!("adopted, moved into drainwatch's cgroup {cg}")
            }
            (Some(Origin::Adopted), Some(cg), false) => format!(
                "adopted, in cgroup {cg} (not drainwatch's): only its tracked processes are signalled"
            ),
            (Some(Origin::Adopted), None, _) => {
                "adopted: only its tracked processes are signalled".to_owned()
            }
            (Some(Origin::Launched), Some(cg), true) => format!("cgroup {cg}"),
            _ => return self.summary(),
        };
        self.with_pidfd_note(line)
    }
}

/// Where the running server came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Origin {
    /// drainwatch launched it: its session and process group are the server's.
    Launched,
    /// It was running already and drainwatch took it over: its group may be a
    /// shell's, so only its tracked processes are ever signalled.
    Adopted,
}

/// The managed server as drainwatch supervises it. Pushed over `/ws` on every change.
/// The browser's page skips the fields it does not show (marked for
/// wasm32), which keeps their readers out of its bundle.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ServerStatus {
    /// The name an operator types to confirm a restart.
    pub name: String,
    pub phase: Phase,
    pub phase_since_ms: u64,
    /// Increases by one with every launch or adoption: a client that saw another
    /// generation is looking at a stale view.
    pub generation: u64,
    pub root: Option<ProcId>,
    /// When the running server was launched (or adopted).
    pub started_at_ms: Option<u64>,
    /// The flags the server runs (or last ran) with.
    pub flags: Flags,
    /// The config's base flags: what `null` in a request resets a flag to.
    pub default_flags: Flags,
    pub allowed: Vec<FlagSpec>,
    pub port: u16,
    /// The GPUs the server needs.
    pub gpus: Vec<u32>,
    /// The operation in flight, if any.
    pub operation: Option<Operation>,
    /// Why the last operation failed, or the server crashed.
    pub failure: Option<Failure>,
    /// A server found listening on the port that drainwatch does not manage yet.
    pub adoptable: Option<ProcId>,
    /// Typical duration of each phase over recent successful restarts (ms).
    #[serde(default)]
    pub typical_ms: BTreeMap<Phase, u64>,
    /// The newest lines of the running (or last) launch's log.
    pub log_tail: Vec<String>,
    /// The flag set the server runs (see [`crate::bench::FlagSet`]).
    #[serde(default)]
    pub flagset: Option<String>,
    /// Live throughput from the server's metrics, attributed to `flagset`.
    #[serde(default)]
    pub passive: crate::bench::Passive,
    /// Whether the server exposes metrics at all (`false`: it has none).
    #[serde(default)]
    pub has_metrics: bool,
    /// The benchmark in progress.
    #[serde(default)]
    pub bench: Option<crate::bench::BenchProgress>,
    /// How drainwatch contains the servers it launches, and why not more.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub containment: Option<Containment>,
    /// Whether the running server was launched by drainwatch or adopted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<Origin>,
    /// The cgroup v2 path that holds the running server's root.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_cgroup: Option<String>,
    /// That cgroup is drainwatch's own leaf for the server: stopping it ends
    /// with `cgroup.kill`. Otherwise (an adopted server's own unit, container or
    /// job) drainwatch signals only the server's tracked processes.
    #[serde(default)]
    pub server_contained: bool,
    /// A campaign holds the server: nobody else restarts or benchmarks it
    /// until it pauses or ends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held_by: Option<HeldBy>,
    /// The server spans nodes (its argv names `{node_rank}`): it is launched
    /// only by a hub's coordinated restart, which says which node this is.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    #[cfg_attr(target_arch = "wasm32", serde(skip_deserializing))]
    pub spans_nodes: bool,
    /// What the running server says it is, read from it once it answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine: Option<EngineIdentity>,
}

/// The running server's account of itself: the engine the config names, the
/// version it reports (SGLang's `/get_server_info`, vLLM's `/version`,
/// llama.cpp's `/props`), and whether it is drainwatch's simulated server
/// (which says so in those answers). A real engine's numbers are real even
/// when the GPUs beside it are simulated, and the page says which is which.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EngineIdentity {
    /// "llama.cpp", "SGLang", "vLLM", or "server".
    pub engine: String,
    pub version: Option<String>,
    pub simulated: bool,
}

/// The campaign that holds the server, and how far it is. The browser's page
/// asks only whether one holds it (the campaign panel says which), so it
/// skips the fields.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeldBy {
    #[cfg_attr(target_arch = "wasm32", serde(skip_deserializing))]
    pub campaign_id: i64,
    #[cfg_attr(target_arch = "wasm32", serde(skip_deserializing))]
    pub name: String,
    /// The step running (from 1), of `steps`.
    #[cfg_attr(target_arch = "wasm32", serde(skip_deserializing))]
    pub step: u32,
    #[cfg_attr(target_arch = "wasm32", serde(skip_deserializing))]
    pub steps: u32,
}

impl HeldBy {
    /// "campaign “x” (#3) holds the server: step 2 of 8 is running".
    pub fn refusal(&self) -> String {
        format!(
            "campaign “{}” (#{}) holds the server: step {} of {} is running; pause or cancel it, or wait for it to end",
            self.name, self.campaign_id, self.step, self.steps
        )
    }
}

/// How an operation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    Running,
    Succeeded,
    Failed,
    Interrupted,
    /// Cancelled before the launch (by the campaign that asked for it): the
    /// server was stopped and verified, and nothing was launched.
    Cancelled,
}

wire_names!(Outcome {
    Running => "running",
    Succeeded => "succeeded",
    Failed => "failed",
    Interrupted => "interrupted",
    Cancelled => "cancelled",
});

/// Time spent in each part of a restart, where it got that far.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Durations {
    pub drain_ms: Option<u64>,
    pub kill_ms: Option<u64>,
    pub verify_ms: Option<u64>,
    /// Launch and warm-up together: spawn → ready.
    pub warmup_ms: Option<u64>,
    pub total_ms: Option<u64>,
}

impl Durations {
    /// The timed parts, keyed by the phase each begins with, in order.
    pub fn parts(&self) -> [(Phase, Option<u64>); 4] {
        [
            (Phase::Draining, self.drain_ms),
            (Phase::Killing, self.kill_ms),
            (Phase::Verifying, self.verify_ms),
            (Phase::WarmingUp, self.warmup_ms),
        ]
    }

    /// The part that time spent in `phase` counts towards (launching is part
    /// of the warm-up); `None` for phases that are not timed.
    pub fn part_mut(&mut self, phase: Phase) -> Option<&mut Option<u64>> {
        match phase {
            Phase::Draining => Some(&mut self.drain_ms),
            Phase::Killing => Some(&mut self.kill_ms),
            Phase::Verifying => Some(&mut self.verify_ms),
            Phase::Launching | Phase::WarmingUp => Some(&mut self.warmup_ms),
            _ => None,
        }
    }
}

/// One row of the restart history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RestartSummary {
    pub id: i64,
    pub kind: OpKind,
    pub requested_by: String,
    pub started_at_ms: u64,
    pub finished_at_ms: Option<u64>,
    pub from_flags: Flags,
    pub to_flags: Flags,
    pub outcome: Outcome,
    pub failure: Option<Failure>,
    pub durations: Durations,
}

/// Puts `summary` into `list` (newest first): replaces the record with its
/// id, or inserts it in order. Keeps at most `max`.
pub fn upsert_summary(list: &mut Vec<RestartSummary>, summary: RestartSummary, max: usize) {
    if let Some(old) = list.iter_mut().find(|r| r.id == summary.id) {
        *old = summary;
        return;
    }
    let at = list
        .iter()
        .position(|r| r.id < summary.id)
        .unwrap_or(list.len());
    list.insert(at, summary);
    list.truncate(max);
}

/// A phase change, with when it happened.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Transition {
    pub at_ms: u64,
    pub phase: Phase,
    /// What happened (e.g. "SIGTERM to process group 4200").
    pub note: String,
}

/// Notable instants on a restart's timeline chart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MarkerKind {
    Sigterm,
    Sigkill,
    Verified,
    Launch,
    Ready,
    Failed,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Marker {
    pub kind: MarkerKind,
    pub at_ms: u64,
}

/// One point of a restart's per-GPU drain timeline.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TimelinePoint {
    pub at_ms: u64,
    pub phase: Phase,
    /// Per GPU, index order.
    pub mem_used_bytes: Vec<Option<u64>>,
    /// Requests the server was still running (from its metrics), when known.
    pub running_requests: Option<u32>,
}

/// The drain chart's drawing box (width, height), in user units: the page
/// sizes the chart's `<svg>` by it before the agent's drawing arrives.
pub const DRAIN_CHART_BOX: (f64, f64) = (760.0, 310.0);

/// A restart's drain chart as the agent draws it for the page
/// (`GET /api/restarts/{id}/chart`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DrainChartView {
    /// Timeline points drawn.
    pub points: u32,
    /// The `<svg>`'s content.
    pub svg: String,
    /// A swatch and "GPU n" per line (HTML).
    pub legend: String,
}

/// A restart with everything recorded about it. The browser's page, which
/// asks the agent for the drain chart (`DrainChartView`), skips the markers
/// and the timeline, which keeps their readers out of its bundle.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RestartDetail {
    pub summary: RestartSummary,
    pub transitions: Vec<Transition>,
    #[cfg_attr(target_arch = "wasm32", serde(skip_deserializing))]
    pub markers: Vec<Marker>,
    #[cfg_attr(target_arch = "wasm32", serde(skip_deserializing))]
    pub timeline: Vec<TimelinePoint>,
    pub log_tail: Vec<String>,
    /// How the servers of this operation were contained ("cgroup …", "process
    /// group only (…)", "adopted: …").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub containment: Option<String>,
}

/// `POST /api/restart` (and `/api/start`): the flags to change and the guards.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RestartRequest {
    /// The server generation the client saw; a different current one means its view
    /// is stale and the request is refused.
    pub generation: u64,
    /// Flags to change: a value sets it, `null` resets it to the config's default.
    /// Flags not named keep their current value.
    #[serde(default)]
    pub flags: BTreeMap<String, Option<String>>,
    /// The server's name, typed by the operator.
    pub confirm: String,
    /// To launch although the health gate refuses some of the server's GPUs:
    /// those GPUs, typed by the operator (`GPU 3, 5`). For this launch only;
    /// audited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub override_health: Option<String>,
    /// For a server that spans nodes (its argv has `{node_rank}`): which node
    /// this host is. Sent by the hub's coordinated restart.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<NodeRole>,
    /// Sent by a hub (its token only): the coordinated restart this is a
    /// step of. Until the hub releases it, the node refuses every change
    /// that is not that restart's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub coordinated: Option<i64>,
}

/// One node's place in a server that spans nodes: what the `{node_rank}`,
/// `{nnodes}` and `{dist_init_addr}` of its argv become.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeRole {
    pub rank: u32,
    pub nnodes: u32,
    /// `host:port` of rank 0's rendezvous (`[v6]:port` for IPv6).
    pub dist_init_addr: String,
}

/// The most nodes one server may span.
pub const MAX_NODES: u32 = 256;

impl NodeRole {
    /// Checks the values before any of them reaches an argv: a rank below
    /// the node count, at most [`MAX_NODES`], and an address that is a host
    /// name or IP and a port, with nothing else in it.
    pub fn check(&self) -> Result<(), String> {
        if self.nnodes == 0 || self.nnodes > MAX_NODES {
            return Err(format!(
                "nnodes must be 1 to {MAX_NODES}, not {}",
                self.nnodes
            ));
        }
        if self.rank >= self.nnodes {
            return Err(format!(
                "node rank {} is not below nnodes {}",
                self.rank, self.nnodes
            ));
        }
        check_host_port(&self.dist_init_addr)
            .map_err(|why| format!("dist_init_addr must be host:port ({why})"))
    }

    /// "node rank 1 of 2 (rendezvous 10.0.0.1:5000)".
    pub fn describe(&self) -> String {
        format!(
            "node rank {} of {} (rendezvous {})",
            self.rank, self.nnodes, self.dist_init_addr
        )
    }
}

fn check_host_port(s: &str) -> Result<(), &'static str> {
    if s.len() > 255 {
        return Err("too long");
    }
    let port = if let Some(rest) = s.strip_prefix('[') {
        let (h, p) = rest
            .split_once("]:")
            .ok_or("no ]:port after an IPv6 host")?;
        if h.is_empty()
            || !h
                .chars()
                .all(|c| c.is_ascii_hexdigit() || c == ':' || c == '.')
        {
            return Err("not an IPv6 address");
        }
        p
    } else {
        let (h, p) = s.rsplit_once(':').ok_or("no port")?;
        let ok = |c: char| c.is_ascii_alphanumeric() || c == '.' || c == '-' || c == '_';
        if h.is_empty() || !h.chars().all(ok) || h.starts_with('-') {
            return Err("not a host name or IP");
        }
        p
    };
    match port.parse::<u16>() {
        Ok(p) if p > 0 && port.chars().all(|c| c.is_ascii_digit()) => Ok(()),
        _ => Err("not a port"),
    }
}

/// `POST /api/stop` and `/api/adopt`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfirmRequest {
    pub generation: u64,
    pub confirm: String,
    /// With `/api/adopt`: move the adopted server into a cgroup leaf of
    /// drainwatch's, so that stopping it ends with `cgroup.kill`. Only where
    /// cgroup containment is in force; never without being asked.
    #[serde(default)]
    pub contain: bool,
    /// As [`RestartRequest::coordinated`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub coordinated: Option<i64>,
}

/// An accepted operation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Accepted {
    pub id: i64,
    pub kind: OpKind,
}

#[cfg(test)]
mod node_tests {
    use super::NodeRole;

    fn role(rank: u32, nnodes: u32, addr: &str) -> NodeRole {
        NodeRole {
            rank,
            nnodes,
            dist_init_addr: addr.to_owned(),
        }
    }

    #[test]
    fn a_node_role_is_checked_before_it_reaches_an_argv() {
        assert!(role(0, 2, "10.0.0.1:5000").check().is_ok());
        assert!(role(1, 2, "node-a.cluster:29500").check().is_ok());
        assert!(role(1, 2, "[fd00::1]:5000").check().is_ok());
        for (r, why) in [
            (role(2, 2, "a:1"), "not below"),
            (role(0, 0, "a:1"), "nnodes"),
            (role(0, 300, "a:1"), "nnodes"),
            (role(0, 2, "a"), "no port"),
            (role(0, 2, "a:0"), "not a port"),
            (role(0, 2, "a:+80"), "not a port"),
            (role(0, 2, "a b:80"), "host"),
            (role(0, 2, "a;rm -rf /:80"), "host"),
            (role(0, 2, "--x:80"), "host"),
            (role(0, 2, "[zz]:80"), "IPv6"),
        ] {
            let e = r.check().expect_err("refused");
            assert!(e.contains(why), "{r:?}: {e}");
        }
    }
}
