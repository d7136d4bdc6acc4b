//! The simulated GPU host: what a machine with GPUs would show a driver, kept in
//! one directory so that the fake NVML library (the reader) and the simulated
//! model server (the writers) can share it across processes.
//!
//! Layout of the host directory (path in [`HOST_DIR_ENV`]):
//! - `host.json`: the [`Inventory`] (GPUs, driver version, release delay); absent means
//!   [`Inventory::default`], 8 GPUs. Each GPU's `faults` ([`GpuFaults`]) make chosen
//!   driver queries fail, and its `health` ([`GpuHealth`]: throttling, ECC, the
//!   PCIe link, MIG, XID errors…) is what the driver reports of it; both are read
//!   live, the rest is fixed when a driver starts.
//! - `alloc-<pid>-<start_ticks>.json`: one [`Allocation`] per process that holds GPU
//!   memory, written by that process through a [`Registration`].
//! - `alloc-<pid>-<start_ticks>.gone`: written by the first reader that saw that
//!   process dead; the memory is released `release_delay_ms` later, like a driver
//!   tearing down a context.
//! - `alloc-<pid>-<start_ticks>.life`: locked by a process that registered
//!   itself, for as long as it lives; `<pid>` is its PID in the host's PID
//!   namespace (see [`driver`]), whatever namespace it runs in.
//! - `driver.sock`: a test host's [`driver::Driver`], which tells a process its
//!   host PID.
//!
//! - `roster/<pid>-<start_ticks>.json`: one line per simulated-server process, written
//!   as it starts (see [`roster`]): who existed, and who launched them.
//!
//! Every write is atomic (temp file, then rename or link), so a reader never sees
//! a torn file. Nothing here identifies a process by name: PID + start time only.

pub mod driver;
mod faults;
mod fsutil;
mod health;
mod inventory;
mod observe;
mod proc_stat;
mod roster;
pub mod stuck;

pub use faults::{Fault, GpuFaults, clear_faults, set_faults};
pub use health::{
    EccCounts, GpuHealth, MigInstance, PcieLink, RemappedRows, RetiredPages, Xid, raise_xid,
    set_health,
};
pub use inventory::{GpuSpec, Inventory};
pub use observe::{GpuView, HostView, ProcessUse, observe, observe_with};
pub use proc_stat::{ProcStat, descendants, parse_proc_stat, read_proc_stat};
pub use roster::{Enlisted, OWNER_ENV, enlist, roster};

use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The environment variable that names the host directory.
pub const HOST_DIR_ENV: &str = "DRAINWATCH_SIM_HOST";

/// What one process holds, per GPU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Allocation {
    pub pid: u32,
    pub start_ticks: u64,
    pub gpus: Vec<GpuUse>,
    /// The driver keeps this memory after the process exits (a driver-side
    /// leak): charged to the GPU with no process listed, until the GPU is
    /// reset ([`reset_gpu`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub leaks: bool,
}

/// Memory and load one process puts on one GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuUse {
    pub gpu: u32,
    pub used_bytes: u64,
    /// How busy this process keeps the GPU, 0–100.
    pub util_percent: u32,
}

/// A live process's handle on its own allocation file.
#[derive(Debug)]
pub struct Registration {
    path: PathBuf,
    pid: u32,
    start_ticks: u64,
    leaks: bool,
}

impl Registration {
    /// Registers the calling process: its PID as the host's driver sees it
    /// (see [`driver`]), its start time from `/proc/self`, and a life lock
    /// it holds until it exits.
    pub fn for_self(dir: &Path) -> io::Result<Self> {
        let stat = read_proc_stat(std::process::id())?
            .ok_or_else(|| io::Error::other("no /proc entry for this process"))?;
        let me = Self::new(dir, driver::host_pid(dir)?, stat.start_ticks);
        // Held until this process exits, whatever ends it.
        std::mem::forget(driver::hold_life(&me.path)?);
        Ok(me)
    }

    /// Registers any process by identity (tests use this for processes they spawn).
    pub fn new(dir: &Path, pid: u32, start_ticks: u64) -> Self {
        Self {
            path: alloc_path(dir, pid, start_ticks),
            pid,
            start_ticks,
            leaks: false,
        }
    }

    /// From the next [`Registration::set`] on, the memory outlives the
    /// process (see [`Allocation::leaks`]).
    pub fn leaking(mut self) -> Self {
        self.leaks = true;
        self
    }

    /// Replaces what this process holds. Atomic: readers see the old or the new.
    pub fn set(&self, gpus: &[GpuUse]) -> io::Result<()> {
        let alloc = Allocation {
            pid: self.pid,
            start_ticks: self.start_ticks,
            gpus: gpus.to_vec(),
            leaks: self.leaks,
        };
        let body = serde_json::to_vec(&alloc).map_err(io::Error::other)?;
        fsutil::write_atomic(&self.path, &body)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// `nvidia-smi --gpu-reset -i <gpu>`: frees what exited processes leaked on
/// `gpu` (memory of live processes stays: a real reset is refused while a
/// process uses the GPU). Returns how many leaked allocations were freed.
pub fn reset_gpu(dir: &Path, gpu: u32) -> io::Result<usize> {
    let mut freed = 0;
    for (path, a) in allocations(dir)? {
        if a.leaks && !owner_lives(&path, &a)? && a.gpus.iter().any(|u| u.gpu == gpu) {
            release(&path)?;
            freed += 1;
        }
    }
    Ok(freed)
}

/// Whether the process an allocation is charged to still lives: by its life
/// lock where it took one, else by `/proc` (PID and start time).
pub(crate) fn owner_lives(path: &Path, a: &Allocation) -> io::Result<bool> {
    if let Some(alive) = driver::lives(path) {
        return Ok(alive);
    }
    Ok(
        read_proc_stat(a.pid)?
            .is_some_and(|st| st.start_ticks == a.start_ticks && !st.has_exited()),
    )
}

/// Frees an allocation: its file, its tombstone and its life lock.
pub(crate) fn release(path: &Path) -> io::Result<()> {
    fsutil::remove_if_present(path)?;
    fsutil::remove_if_present(&path.with_extension("gone"))?;
    fsutil::remove_if_present(&driver::life_path(path))
}

/// Every allocation file in `dir`, read. Written atomically, so an
/// unparsable file is not ours; an unreadable one (another user's, say) or
/// one released meanwhile is skipped too.
pub(crate) fn allocations(dir: &Path) -> io::Result<Vec<(PathBuf, Allocation)>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        if !(name.starts_with("alloc-") && name.ends_with(".json")) {
            continue;
        }
        if let Some(a) = std::fs::read(&path)
            .ok()
            .and_then(|b| serde_json::from_slice::<Allocation>(&b).ok())
        {
            out.push((path, a));
        }
    }
    Ok(out)
}

fn alloc_stem(pid: u32, start_ticks: u64) -> String {
    format!("alloc-{pid}-{start_ticks}")
}

fn alloc_path(dir: &Path, pid: u32, start_ticks: u64) -> PathBuf {
    dir.join(format!("{}.json", alloc_stem(pid, start_ticks)))
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}
