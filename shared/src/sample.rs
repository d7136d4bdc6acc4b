//! One reading of the whole host, the host's static facts, and the compact
//! history a late-joining client draws its sparklines from.

use serde::{Deserialize, Serialize};

use crate::flat::{BadField, need};
use crate::restart::{RestartSummary, ServerStatus};
use crate::{GpuSample, ProcId, ProcessInfo};

/// What the backend knows about NVML itself. Initialised once; a failure is kept
/// and shown, never retried in a loop and never turned into an empty GPU list.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case", try_from = "NvmlFields")]
pub enum NvmlStatus {
    Ok {
        /// The library that was loaded (a path, or the name the loader resolved).
        library: String,
        driver_version: Option<String>,
        nvml_version: Option<String>,
        /// CUDA driver API version as NVML encodes it (12080 = 12.8).
        cuda_driver_version: Option<i32>,
        /// True when the library is drainwatch's simulated host, not a real driver:
        /// every number on screen is then simulated, and the UI says so.
        simulated: bool,
    },
    Unavailable {
        library: String,
        /// NVML's error, e.g. the library could not be loaded or the driver is not running.
        reason: String,
    },
}

impl NvmlStatus {
    pub fn is_simulated(&self) -> bool {
        matches!(
            self,
            Self::Ok {
                simulated: true,
                ..
            }
        )
    }
}

/// The host's facts that do not change between samples.
/// The browser's page skips the fields it does not show (marked for
/// wasm32), which keeps their readers out of its bundle.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostInfo {
    pub hostname: String,
    /// drainwatch's own version.
    pub version: String,
    pub nvml: NvmlStatus,
    pub sample_interval_ms: u64,
    /// How far back the backend keeps history.
    #[cfg_attr(target_arch = "wasm32", serde(skip_deserializing))]
    pub history_ms: u64,
    /// The port the managed server listens on; its listener identifies the server.
    pub server_port: Option<u16>,
    /// drainwatch runs in a PID namespace of its own (a container without
    /// the host's PIDs): NVML's PIDs are the host's and name no process here
    /// (see [`crate::process::OUTSIDE_NOTE`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub own_pid_namespace: bool,
}

/// The managed server's root process, when one is found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServerIdentity {
    pub root: ProcId,
    pub port: u16,
}

/// One reading of NVML and `/proc`, taken at `at_ms`.
/// The browser's page skips the fields it does not show (marked for
/// wasm32), which keeps their readers out of its bundle.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sample {
    /// Increases by one per sample; a client that sees a gap knows it missed some.
    pub seq: u64,
    /// When the reading started (Unix milliseconds).
    pub at_ms: u64,
    /// How long the reading took.
    #[cfg_attr(target_arch = "wasm32", serde(skip_deserializing))]
    pub took_us: u32,
    /// One entry per GPU NVML counts, in index order. Empty when NVML is unavailable
    /// (see [`HostInfo::nvml`]).
    pub gpus: Vec<GpuSample>,
    /// Processes that hold GPU memory, plus the managed server's whole tree. Parents
    /// come before their children.
    pub processes: Vec<ProcessInfo>,
    pub server: Option<ServerIdentity>,
    /// Why the process list is incomplete (NVML's per-process query failed, or /proc
    /// could not be read), if it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub processes_error: Option<String>,
}

/// A compact point of history: per-GPU memory and utilisation, index order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HistoryPoint {
    pub at_ms: u64,
    pub mem_used_bytes: Vec<Option<u64>>,
    pub util_gpu_percent: Vec<Option<u32>>,
}

impl HistoryPoint {
    pub fn of(sample: &Sample) -> Self {
        Self {
            at_ms: sample.at_ms,
            mem_used_bytes: sample.gpus.iter().map(|g| g.mem_used_bytes).collect(),
            util_gpu_percent: sample.gpus.iter().map(|g| g.util_gpu_percent).collect(),
        }
    }
}

/// Everything a client needs to draw the page from nothing: sent on connect, after
/// a resync, and by `GET /api/state`.
/// The browser's page skips the fields it does not show (marked for
/// wasm32), which keeps their readers out of its bundle.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Snapshot {
    pub host: HostInfo,
    /// The newest sample; `None` only before the first one is taken.
    pub latest: Option<Sample>,
    /// Oldest first, at most one point per `history_step_ms`.
    pub history: Vec<HistoryPoint>,
    #[cfg_attr(target_arch = "wasm32", serde(skip_deserializing))]
    pub history_step_ms: u64,
    /// The managed server; `None` when drainwatch runs without a server config
    /// (view only).
    #[serde(default)]
    pub server: Option<ServerStatus>,
    /// The newest restarts, newest first.
    #[serde(default)]
    pub restarts: Vec<RestartSummary>,
    /// Who is connected now.
    #[serde(default)]
    pub presence: Vec<crate::auth::Presence>,
    /// The newest campaign (running, paused or ended), without its steps.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub campaign: Option<crate::campaign::CampaignInfo>,
}

// Reading an `NvmlStatus`: one flat struct, checked against the tag (see
// [`crate::flat`]).

#[derive(Debug, Deserialize)]
#[serde(rename_all = "snake_case")]
enum NvmlState {
    Ok,
    Unavailable,
}

/// Every field of both [`NvmlStatus`] states.
#[derive(Debug, Deserialize)]
struct NvmlFields {
    state: NvmlState,
    library: String,
    driver_version: Option<String>,
    nvml_version: Option<String>,
    cuda_driver_version: Option<i32>,
    simulated: Option<bool>,
    reason: Option<String>,
}

impl TryFrom<NvmlFields> for NvmlStatus {
    type Error = BadField;

    fn try_from(f: NvmlFields) -> Result<Self, BadField> {
        Ok(match f.state {
            NvmlState::Ok => Self::Ok {
                library: f.library,
                driver_version: f.driver_version,
                nvml_version: f.nvml_version,
                cuda_driver_version: f.cuda_driver_version,
                simulated: need(f.simulated, "simulated")?,
            },
            NvmlState::Unavailable => Self::Unavailable {
                library: f.library,
                reason: need(f.reason, "reason")?,
            },
        })
    }
}
