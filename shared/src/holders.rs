//! Who holds a GPU's memory: the managed server's processes, foreign processes,
//! and the rest (the idle baseline, the driver's own share, whatever NVML does
//! not attribute to a process). The UI's stacked memory bar and its "foreign"
//! line are drawn from [`MemHolders`].

use std::collections::HashSet;

use crate::units::{fmt_bytes, fraction};
use crate::{GpuSample, ProcessInfo, ProcessRole};

/// One GPU's memory, split by holder.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MemHolders {
    /// What NVML attributes on this GPU to the managed server's processes.
    pub server_bytes: u64,
    /// What NVML attributes on this GPU to foreign processes.
    pub foreign_bytes: u64,
    /// Memory used minus what is attributed above (never below 0); `None` when
    /// the GPU's memory used is not known.
    pub other_bytes: Option<u64>,
    /// Foreign processes with an entry on this GPU, in list order, each once;
    /// also those NVML lists without an amount.
    pub foreign_pids: Vec<u32>,
    /// What NVML attributes on this GPU to PIDs outside drainwatch's PID
    /// namespace ([`ProcessRole::Outside`]): whose, no one here can tell.
    pub outside_bytes: u64,
    /// Those PIDs (host PIDs), in list order, each once.
    pub outside_pids: Vec<u32>,
    /// True when some process on this GPU (either role) holds an amount NVML
    /// does not report: the split above then undercounts it, and `other_bytes`
    /// includes it.
    pub unattributed: bool,
}

impl MemHolders {
    /// Splits `gpu`'s memory among `processes` (a sample's list). A process
    /// listed twice (same PID and start time) counts once; several entries of one
    /// process for the same GPU add up.
    pub fn of(gpu: &GpuSample, processes: &[ProcessInfo]) -> Self {
        let mut holders = Self::default();
        let mut seen = HashSet::new();
        for p in processes {
            if !seen.insert((p.pid, p.start_ticks)) {
                continue;
            }
            let mut on_gpu = false;
            let mut bytes = 0u64;
            for m in p.gpu_mem.iter().filter(|m| m.gpu_index == gpu.index) {
                on_gpu = true;
                match m.used_bytes {
                    Some(b) => bytes = bytes.saturating_add(b),
                    None => holders.unattributed = true,
                }
            }
            if !on_gpu {
                continue;
            }
            match p.role {
                ProcessRole::Server => {
                    holders.server_bytes = holders.server_bytes.saturating_add(bytes);
                }
                ProcessRole::Foreign => {
                    holders.foreign_bytes = holders.foreign_bytes.saturating_add(bytes);
                    if !holders.foreign_pids.contains(&p.pid) {
                        holders.foreign_pids.push(p.pid);
                    }
                }
                ProcessRole::Outside => {
                    holders.outside_bytes = holders.outside_bytes.saturating_add(bytes);
                    if !holders.outside_pids.contains(&p.pid) {
                        holders.outside_pids.push(p.pid);
                    }
                }
            }
        }
        holders.other_bytes = gpu.mem_used_bytes.map(|used| {
            used.saturating_sub(
                (holders.server_bytes)
                    .saturating_add(holders.foreign_bytes)
                    .saturating_add(holders.outside_bytes),
            )
        });
        holders
    }

    /// True when NVML lists a PID from outside drainwatch's PID namespace on
    /// this GPU.
    pub fn has_outside(&self) -> bool {
        !self.outside_pids.is_empty()
    }

    /// The card's line for memory held by PIDs outside drainwatch's PID
    /// namespace, e.g. "outside this PID namespace 2.0 GiB · pid 4242";
    /// `None` without any.
    pub fn outside_line(&self) -> Option<String> {
        let who = pids_phrase(&self.outside_pids)?;
        Some(format!(
            "outside this PID namespace {} · {who}",
            fmt_bytes(self.outside_bytes)
        ))
    }

    /// True when a foreign process holds memory on this GPU (also when NVML does
    /// not say how much).
    pub fn has_foreign(&self) -> bool {
        !self.foreign_pids.is_empty()
    }

    /// The stacked bar's three segments as fractions of `total`, left to right:
    /// other, server, foreign. Their sum never exceeds 1. When NVML attributes
    /// more than `used` (per-process and device figures are read at slightly
    /// different times), the attributed parts are cut to `used`, server first.
    /// All zero when `total` is unknown or 0.
    pub fn bar_fractions(&self, used: Option<u64>, total: Option<u64>) -> [f64; 3] {
        let Some(total) = total.filter(|t| *t > 0) else {
            return [0.0; 3];
        };
        let attributed = self.server_bytes.saturating_add(self.foreign_bytes);
        let used = used.unwrap_or(attributed);
        let server = self.server_bytes.min(used);
        let foreign = self.foreign_bytes.min(used - server);
        let other = used - server - foreign;
        // Cumulative ends, each clamped to the bar, then turned back into widths.
        let end_other = fraction(other, total);
        let end_server = fraction(other.saturating_add(server), total);
        let end_foreign = fraction(other.saturating_add(server).saturating_add(foreign), total);
        [end_other, end_server - end_other, end_foreign - end_server]
    }

    /// The card's foreign line, e.g. "foreign 1.5 GiB · pid 4242", "foreign
    /// 3.0 GiB · pids 4242, 4243", "foreign 4.5 GiB · 3 pids"; `None` without
    /// foreign processes. An amount NVML does not report is "?".
    pub fn foreign_line(&self) -> Option<String> {
        let amount = if self.foreign_bytes == 0 && self.unattributed {
            "?".to_owned()
        } else {
            fmt_bytes(self.foreign_bytes)
        };
        let who = pids_phrase(&self.foreign_pids)?;
        Some(format!("foreign {amount} · {who}"))
    }
}

/// "pid 4242", "pids 4242, 4243", "3 pids"; `None` for none.
fn pids_phrase(pids: &[u32]) -> Option<String> {
    Some(match pids {
        [] => return None,
        [pid] => format!("pid {pid}"),
        [a, b] => format!("pids {a}, {b}"),
        many => format!("{} pids", many.len()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::GpuMemUse;

    const GIB: u64 = 1024 * 1024 * 1024;

    fn gpu(index: u32, used: Option<u64>) -> GpuSample {
        GpuSample {
            mem_total_bytes: Some(96 * GIB),
            mem_used_bytes: used,
            ..GpuSample::unreadable(index, String::new())
        }
    }

    fn proc(pid: u32, role: ProcessRole, mem: &[(u32, Option<u64>)]) -> ProcessInfo {
        ProcessInfo {
            pid,
            start_ticks: Some(u64::from(pid) * 10),
            started_at_ms: None,
            ppid: None,
            pgid: None,
            sid: None,
            uid: None,
            user: None,
            cmdline: Vec::new(),
            rss_bytes: None,
            gpu_mem: mem
                .iter()
                .map(|&(gpu_index, used_bytes)| GpuMemUse {
                    gpu_index,
                    used_bytes,
                    sm_percent: None,
                })
                .collect(),
            role,
            proc_error: None,
        }
    }

    #[test]
    fn splits_by_role_on_this_gpu_only() {
        let procs = [
            proc(100, ProcessRole::Server, &[]),
            proc(
                101,
                ProcessRole::Server,
                &[(0, Some(80 * GIB)), (3, Some(80 * GIB))],
            ),
            proc(4242, ProcessRole::Foreign, &[(3, Some(GIB + GIB / 2))]),
        ];
        let g0 = MemHolders::of(&gpu(0, Some(88 * GIB)), &procs);
        assert_eq!(g0.server_bytes, 80 * GIB);
        assert_eq!(g0.foreign_bytes, 0);
        assert_eq!(g0.other_bytes, Some(8 * GIB));
        assert!(!g0.has_foreign());
        assert_eq!(g0.foreign_line(), None);

        let g3 = MemHolders::of(&gpu(3, Some(90 * GIB)), &procs);
        assert_eq!(g3.server_bytes, 80 * GIB);
        assert_eq!(g3.foreign_bytes, GIB + GIB / 2);
        assert_eq!(g3.other_bytes, Some(8 * GIB + GIB / 2));
        assert_eq!(g3.foreign_pids, [4242]);
        assert_eq!(
            g3.foreign_line().as_deref(),
            Some("foreign 1.5 GiB · pid 4242")
        );
        assert!(!g3.unattributed);
    }

    #[test]
    fn pids_from_outside_the_namespace_are_neither_server_nor_foreign() {
        let procs = [
            proc(7, ProcessRole::Server, &[]),
            proc(4242, ProcessRole::Outside, &[(7, Some(2 * GIB))]),
            proc(4243, ProcessRole::Outside, &[(7, Some(GIB))]),
        ];
        let h = MemHolders::of(&gpu(7, Some(3 * GIB + 4 * 1024 * 1024)), &procs);
        assert_eq!(h.server_bytes, 0);
        assert!(!h.has_foreign());
        assert_eq!(h.foreign_line(), None);
        assert!(h.has_outside());
        assert_eq!(h.outside_bytes, 3 * GIB);
        assert_eq!(h.other_bytes, Some(4 * 1024 * 1024));
        assert_eq!(
            h.outside_line().as_deref(),
            Some("outside this PID namespace 3.0 GiB · pids 4242, 4243")
        );
        assert_eq!(
            MemHolders::of(&gpu(6, Some(GIB)), &procs).outside_line(),
            None
        );
    }

    #[test]
    fn no_process_leaves_everything_to_other() {
        let h = MemHolders::of(&gpu(1, Some(GIB)), &[]);
        assert_eq!(
            h,
            MemHolders {
                other_bytes: Some(GIB),
                ..MemHolders::default()
            }
        );
        assert_eq!(MemHolders::of(&gpu(1, None), &[]).other_bytes, None);
    }

    #[test]
    fn repeated_processes_count_once_and_entries_add_up() {
        let p = proc(7, ProcessRole::Server, &[(0, Some(GIB)), (0, Some(GIB))]);
        let h = MemHolders::of(&gpu(0, Some(10 * GIB)), &[p.clone(), p]);
        assert_eq!(h.server_bytes, 2 * GIB);
        assert_eq!(h.other_bytes, Some(8 * GIB));
    }

    #[test]
    fn unreported_amounts_are_flagged_and_left_in_other() {
        let procs = [
            proc(5, ProcessRole::Foreign, &[(2, None)]),
            proc(6, ProcessRole::Server, &[(2, Some(GIB))]),
        ];
        let h = MemHolders::of(&gpu(2, Some(4 * GIB)), &procs);
        assert!(h.unattributed);
        assert!(h.has_foreign());
        assert_eq!(h.foreign_bytes, 0);
        assert_eq!(h.other_bytes, Some(3 * GIB));
        assert_eq!(h.foreign_line().as_deref(), Some("foreign ? · pid 5"));
    }

    #[test]
    fn attributed_beyond_used_leaves_no_negative_other() {
        let procs = [proc(9, ProcessRole::Server, &[(0, Some(5 * GIB))])];
        let h = MemHolders::of(&gpu(0, Some(4 * GIB)), &procs);
        assert_eq!(h.other_bytes, Some(0));
    }

    #[test]
    fn foreign_line_names_up_to_two_pids() {
        let mut h = MemHolders {
            foreign_bytes: 3 * GIB,
            foreign_pids: vec![4242, 4243],
            ..MemHolders::default()
        };
        assert_eq!(
            h.foreign_line().as_deref(),
            Some("foreign 3.0 GiB · pids 4242, 4243")
        );
        h.foreign_pids.push(4244);
        assert_eq!(
            h.foreign_line().as_deref(),
            Some("foreign 3.0 GiB · 3 pids")
        );
    }

    #[test]
    fn bar_fractions_stack_and_clamp() {
        let h = MemHolders {
            server_bytes: 48 * GIB,
            foreign_bytes: 12 * GIB,
            other_bytes: Some(12 * GIB),
            ..MemHolders::default()
        };
        assert_eq!(
            h.bar_fractions(Some(72 * GIB), Some(96 * GIB)),
            [0.125, 0.5, 0.125]
        );
        assert_eq!(h.bar_fractions(Some(72 * GIB), None), [0.0; 3]);
        assert_eq!(h.bar_fractions(Some(72 * GIB), Some(0)), [0.0; 3]);
        // Used unknown: the attributed parts alone.
        assert_eq!(h.bar_fractions(None, Some(96 * GIB)), [0.0, 0.5, 0.125]);
        // More attributed than used: cut to used, server first.
        assert_eq!(
            h.bar_fractions(Some(54 * GIB), Some(96 * GIB)),
            [0.0, 0.5, 0.0625]
        );
        // Used beyond total: the bar is full, never longer.
        let [o, s, f] = h.bar_fractions(Some(200 * GIB), Some(96 * GIB));
        assert_eq!(o + s + f, 1.0);
        assert_eq!(f, 0.0);
    }
}
