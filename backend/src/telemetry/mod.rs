//! Telemetry: one [`Sample`] of the host from NVML ([`nvml`], its [`health`]
//! fields and the XID watcher: the only NVML users) joined with `/proc` ([`procfs`]),
//! and the [`sampler`] that takes one per period and publishes it. This module
//! reads; it never signals or kills anything.

pub mod health;
pub mod nvml;
mod nvml_error;
pub mod procfs;
pub mod sampler;
pub mod server;
mod xid;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use shared::{GpuMemUse, GpuSample, NvmlStatus, ProcId, ProcessInfo, ProcessRole, Sample};

use self::nvml::NvmlReader;
use self::procfs::{ProcDetails, ProcReader};
use crate::clock::now_ms;
use crate::identity::ServerHint;

/// Reads the whole host; owned by the sampler thread.
#[derive(Debug)]
pub struct Telemetry {
    nvml: NvmlReader,
    procs: ProcReader,
    finder: server::Finder,
    /// Per GPU: the least memory seen used while NVML listed no process on it (a
    /// leak can only raise what an idle GPU shows, so the minimum is the baseline).
    baselines: Vec<Option<u64>>,
    /// drainwatch runs in a PID namespace of its own: NVML's PIDs (the
    /// host's) are never looked up in this `/proc`.
    nvml_pids_outside: bool,
    seq: u64,
}

impl Telemetry {
    /// `server_port` finds the server by its listener when `hint` names no root;
    /// XID errors go to `xid_sink` as they arrive.
    pub fn new(
        nvml_lib: &Path,
        server_port: Option<u16>,
        hint: Arc<ServerHint>,
        xid_sink: Option<health::XidSink>,
    ) -> Self {
        Self {
            nvml: NvmlReader::open(nvml_lib, xid_sink),
            procs: ProcReader::new(),
            finder: server::Finder::new(server_port, hint),
            baselines: Vec::new(),
            nvml_pids_outside: crate::identity::in_own_pid_namespace(),
            seq: 0,
        }
    }

    pub fn nvml_status(&self) -> &NvmlStatus {
        self.nvml.status()
    }

    /// Set it, and the slow health fields are read afresh (within ~20 ms of
    /// it, on their own thread); samples carry when that reading began.
    pub fn health_refresh(&self) -> Arc<std::sync::atomic::AtomicBool> {
        self.nvml.health_refresh()
    }

    /// How long the last pass over every GPU's slow health fields took, on
    /// their own thread (the samples do not wait for it).
    pub fn health_slow_pass(&self) -> Option<std::time::Duration> {
        self.nvml.health_slow_pass()
    }

    /// Takes one sample. Never fails: what could not be read is `None` with a reason.
    pub fn sample(&mut self) -> Sample {
        let started = Instant::now();
        let at_ms = now_ms();
        self.seq += 1;

        let mut processes_error = None;
        let mut gpus: Vec<GpuSample> = Vec::new();
        let mut gpu_mem: BTreeMap<u32, Vec<GpuMemUse>> = BTreeMap::new();
        match self.nvml.read() {
            Ok(readings) => {
                self.baselines.resize(readings.len(), None);
                for (r, baseline) in readings.into_iter().zip(self.baselines.iter_mut()) {
                    let mut gpu = r.gpu;
                    match &r.processes {
                        Some(list) if list.is_empty() => {
                            *baseline = lowest(*baseline, gpu.mem_used_bytes)
                        }
                        Some(list) => {
                            for p in list {
                                gpu_mem.entry(p.pid).or_default().push(GpuMemUse {
                                    gpu_index: gpu.index,
                                    used_bytes: p.used_bytes,
                                    sm_percent: p.sm_percent,
                                });
                            }
                        }
                        None => {
                            processes_error =
                                Some(format!("GPU {}: process list unavailable", gpu.index))
                        }
                    }
                    gpu.mem_baseline_bytes = *baseline;
                    gpus.push(gpu);
                }
            }
            Err(reason) => {
                if matches!(self.nvml.status(), NvmlStatus::Ok { .. }) {
                    processes_error = Some(reason.to_string());
                }
            }
        }

        let (server, tree) = self.finder.find(&mut self.procs);
        // The driver's PIDs are the host's: from a namespace of our own, one
        // names no process here, or another one.
        let outside: Vec<ProcessInfo> = if self.nvml_pids_outside {
            std::mem::take(&mut gpu_mem)
                .into_iter()
                .map(|(pid, mem)| {
                    let why = shared::process::OUTSIDE_REASON.to_owned();
                    ProcessInfo::without_proc(pid, mem, ProcessRole::Outside, why)
                })
                .collect()
        } else {
            Vec::new()
        };
        let mut pids: Vec<u32> = gpu_mem.keys().copied().collect();
        pids.extend(tree.iter().map(|d| d.id.pid));
        pids.sort_unstable();
        pids.dedup();
        let in_tree: HashMap<u32, &ProcDetails> = tree.iter().map(|d| (d.id.pid, d)).collect();

        let processes: Vec<ProcessInfo> = pids
            .into_iter()
            .map(|pid| {
                let mem = gpu_mem.remove(&pid).unwrap_or_default();
                match in_tree.get(&pid) {
                    Some(d) => process_info(Ok((*d).clone()), pid, mem, ProcessRole::Server),
                    None => process_info(self.procs.read(pid), pid, mem, ProcessRole::Foreign),
                }
            })
            .chain(outside)
            .collect();
        let seen: Vec<ProcId> = processes.iter().filter_map(ProcessInfo::id).collect();
        self.procs.retain(&seen);

        Sample {
            seq: self.seq,
            at_ms,
            took_us: started.elapsed().as_micros().min(u128::from(u32::MAX)) as u32,
            gpus,
            processes: order_tree(processes),
            server,
            processes_error,
        }
    }
}

fn process_info(
    details: Result<ProcDetails, procfs::Unreadable>,
    pid: u32,
    gpu_mem: Vec<GpuMemUse>,
    role: ProcessRole,
) -> ProcessInfo {
    match details {
        Ok(d) => ProcessInfo {
            proc_error: d
                .exited()
                .then(|| "exited (zombie: its parent has not reaped it yet)".to_owned()),
            pid,
            start_ticks: Some(d.id.start_ticks),
            started_at_ms: Some(d.started_at_ms),
            ppid: Some(d.ppid),
            pgid: Some(d.pgid),
            sid: Some(d.sid),
            uid: d.uid,
            user: d.user,
            cmdline: d.cmdline,
            rss_bytes: Some(d.rss_bytes),
            gpu_mem,
            role,
        },
        Err(reason) => ProcessInfo::without_proc(pid, gpu_mem, role, reason.to_string()),
    }
}

/// Orders processes so that each parent precedes its children (depth first), roots
/// by role (server first) then PID.
pub fn order_tree(mut procs: Vec<ProcessInfo>) -> Vec<ProcessInfo> {
    procs.sort_by_key(|p| (p.role != ProcessRole::Server, p.pid));
    let pids: HashSet<u32> = procs.iter().map(|p| p.pid).collect();
    let mut kids: HashMap<u32, Vec<usize>> = HashMap::new();
    let mut roots = Vec::new();
    for (i, p) in procs.iter().enumerate() {
        match p.ppid {
            Some(pp) if pp != p.pid && pids.contains(&pp) => kids.entry(pp).or_default().push(i),
            _ => roots.push(i),
        }
    }
    let mut order = Vec::with_capacity(procs.len());
    let mut placed = vec![false; procs.len()];
    let mut stack: Vec<usize> = roots.into_iter().rev().collect();
    while let Some(i) = stack.pop() {
        if std::mem::replace(&mut placed[i], true) {
            continue;
        }
        order.push(i);
        if let Some(children) = kids.get(&procs[i].pid) {
            stack.extend(children.iter().rev());
        }
    }
    // A parentage cycle (PID reuse mid-read) leaves entries unplaced: keep them.
    order.extend((0..procs.len()).filter(|i| !placed[*i]));
    let mut slots: Vec<Option<ProcessInfo>> = procs.into_iter().map(Some).collect();
    order.into_iter().filter_map(|i| slots[i].take()).collect()
}

/// The lower of a GPU's known baseline and what it shows now, idle.
fn lowest(known: Option<u64>, now: Option<u64>) -> Option<u64> {
    match (known, now) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(pid: u32, ppid: u32, role: ProcessRole) -> ProcessInfo {
        process_info(Err(procfs::Unreadable::Exited), pid, Vec::new(), role).tap_ppid(ppid)
    }

    trait TapPpid {
        fn tap_ppid(self, ppid: u32) -> Self;
    }
    impl TapPpid for ProcessInfo {
        fn tap_ppid(mut self, ppid: u32) -> Self {
            self.ppid = Some(ppid);
            self
        }
    }

    #[test]
    fn parents_precede_children_server_first() {
        use ProcessRole::*;
        let ordered = order_tree(vec![
            p(30, 10, Server),
            p(5, 1, Foreign),
            p(10, 1, Server),
            p(20, 10, Server),
            p(40, 30, Server),
        ]);
        let pids: Vec<u32> = ordered.iter().map(|p| p.pid).collect();
        assert_eq!(pids, vec![10, 20, 30, 40, 5]);
    }

    #[test]
    fn a_baseline_only_goes_down() {
        // Memory an invisible holder keeps after the listed process is gone must not
        // become the GPU's idle baseline, or verification would accept a leak.
        let mut b = lowest(None, Some(4 << 20));
        b = lowest(b, Some(90 << 30));
        b = lowest(b, None);
        assert_eq!(b, Some(4 << 20));
        assert_eq!(lowest(b, Some(2 << 20)), Some(2 << 20));
        assert_eq!(lowest(None, None), None);
    }

    #[test]
    fn cycles_do_not_lose_processes() {
        use ProcessRole::*;
        let ordered = order_tree(vec![p(1, 2, Foreign), p(2, 1, Foreign), p(3, 3, Foreign)]);
        let mut pids: Vec<u32> = ordered.iter().map(|p| p.pid).collect();
        pids.sort_unstable();
        assert_eq!(pids, vec![1, 2, 3]);
    }
}
