//! One process: who it is (PID + start time, never a name), what it holds on
//! which GPU, and whether it belongs to the managed server.

use serde::{Deserialize, Serialize};

/// A process's identity. A PID alone is reused by the kernel; PID plus the start
/// time in clock ticks since boot (field 22 of `/proc/<pid>/stat`) is not.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ProcId {
    pub pid: u32,
    pub start_ticks: u64,
}

/// How a process relates to the managed model server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProcessRole {
    /// The server's root process or one of its descendants.
    Server,
    /// Anything else: whatever its command line says, it is not ours to kill.
    Foreign,
    /// A PID NVML reports from outside drainwatch's PID namespace (drainwatch
    /// in a container without the host's PIDs): the driver gives host PIDs,
    /// which name no process here, so whose it is cannot be told. Never
    /// matched to `/proc` here, never signalled, never called foreign.
    Outside,
}

wire_names!(ProcessRole {
    Server => "server",
    Foreign => "foreign",
    Outside => "outside",
});

/// Why a process NVML reports from outside drainwatch's PID namespace has no
/// `/proc` details.
pub const OUTSIDE_REASON: &str =
    "a PID of the host's, outside drainwatch's PID namespace: no /proc of it here";

/// What drainwatch says wherever its containment is shown when it runs in a
/// PID namespace of its own.
pub const OUTSIDE_NOTE: &str = "NVML reports PIDs outside this PID namespace; run with hostPID \
     (whose GPU memory is whose cannot be told from here: a drain is verified by \
     every GPU the server needs being idle, with no process listed on it)";

/// GPU memory one process holds on one GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuMemUse {
    pub gpu_index: u32,
    /// `None` when NVML cannot attribute memory per process (e.g. some MIG or
    /// container setups).
    pub used_bytes: Option<u64>,
    /// Its share of the GPU's SMs over the last second, as NVML attributes it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sm_percent: Option<u32>,
}

/// One process as NVML and `/proc` see it together.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessInfo {
    pub pid: u32,
    /// `None` only when `/proc` has no entry for a PID NVML reported (another PID
    /// namespace, or the process just exited): then the identity is incomplete.
    pub start_ticks: Option<u64>,
    /// Wall-clock start (Unix milliseconds), derived from `start_ticks` and boot time.
    pub started_at_ms: Option<u64>,
    pub ppid: Option<u32>,
    #[cfg_attr(target_arch = "wasm32", serde(skip_deserializing))]
    pub pgid: Option<i32>,
    #[cfg_attr(target_arch = "wasm32", serde(skip_deserializing))]
    pub sid: Option<i32>,
    pub uid: Option<u32>,
    pub user: Option<String>,
    /// argv as the process has it (`/proc/<pid>/cmdline`); for a kernel thread or a
    /// zombie, the short name in brackets.
    pub cmdline: Vec<String>,
    pub rss_bytes: Option<u64>,
    /// Per GPU, what NVML reports this process holds; empty for a server process
    /// that holds no GPU memory (the launcher parent, say).
    pub gpu_mem: Vec<GpuMemUse>,
    pub role: ProcessRole,
    /// Why `/proc` details are missing, if they are.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proc_error: Option<String>,
}

impl ProcessInfo {
    /// A PID known only from NVML: `/proc` had nothing for it, for `reason`.
    pub fn without_proc(
        pid: u32,
        gpu_mem: Vec<GpuMemUse>,
        role: ProcessRole,
        reason: String,
    ) -> Self {
        Self {
            pid,
            start_ticks: None,
            started_at_ms: None,
            ppid: None,
            pgid: None,
            sid: None,
            uid: None,
            user: None,
            cmdline: Vec::new(),
            rss_bytes: None,
            gpu_mem,
            role,
            proc_error: Some(reason),
        }
    }

    /// The full identity, when `/proc` gave the start time.
    pub fn id(&self) -> Option<ProcId> {
        self.start_ticks.map(|start_ticks| ProcId {
            pid: self.pid,
            start_ticks,
        })
    }

    /// GPU memory held across all GPUs, counting only what NVML attributed.
    pub fn gpu_mem_total_bytes(&self) -> u64 {
        self.gpu_mem.iter().filter_map(|g| g.used_bytes).sum()
    }
}
