//! What the host looks like now, and what that says about a drain.

use super::*;

/// What the host looks like now, as the manager sees it from the latest sample.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Observation {
    /// Processes of the server (tracked by PID + start time) still alive.
    pub ours_alive: usize,
    /// Processes of ours that NVML still lists with memory (alive or being torn down).
    pub ours_on_gpu: Vec<Holder>,
    /// Foreign processes with memory on a GPU the server needs.
    pub foreign_on_gpu: Vec<Holder>,
    /// PIDs from outside drainwatch's PID namespace with memory on a GPU the
    /// server needs: ours or not, no one here can tell, so never refused as
    /// foreign; only their going decides.
    pub outside_on_gpu: Vec<Holder>,
    /// GPUs the server needs that are above baseline + tolerance: (gpu, used, baseline).
    pub over_baseline: Vec<(u32, u64, u64)>,
    /// GPUs the server needs whose memory could not be read: not known to be idle.
    pub unreadable: Vec<u32>,
    /// Why the GPUs' process lists could not be read, if they could not: then no
    /// one can say that nothing of ours is left.
    pub processes_unknown: Option<String>,
    /// The health gate's verdict on the server's GPUs.
    pub health: Verdict,
    /// Processes of ours alive in uninterruptible sleep (read while killing).
    pub stuck: Vec<StuckProcess>,
}

impl Observation {
    /// Nothing of ours on any GPU, nobody else on the server's GPUs, and each of
    /// them read and back at its baseline.
    pub(super) fn clean(&self) -> bool {
        self.ours_on_gpu.is_empty()
            && self.foreign_on_gpu.is_empty()
            && self.outside_on_gpu.is_empty()
            && self.over_baseline.is_empty()
            && self.unreadable.is_empty()
            && self.processes_unknown.is_none()
    }

    /// Everything that still stands between the GPUs and their baselines is foreign.
    pub(super) fn only_foreign_left(&self) -> bool {
        self.ours_alive == 0
            && self.ours_on_gpu.is_empty()
            && self.outside_on_gpu.is_empty()
            && self.unreadable.is_empty()
            && self.processes_unknown.is_none()
            && !self.foreign_on_gpu.is_empty()
    }

    /// GPUs above their baseline when no process at all, ours or not, is on
    /// any of them and every list was read: memory the driver holds for no
    /// one.
    pub(super) fn leaked(&self) -> Vec<LeakedGpu> {
        let nobody = self.ours_alive == 0
            && self.ours_on_gpu.is_empty()
            && self.foreign_on_gpu.is_empty()
            && self.outside_on_gpu.is_empty()
            && self.unreadable.is_empty()
            && self.processes_unknown.is_none();
        if !nobody {
            return Vec::new();
        }
        (self.over_baseline.iter())
            .map(|&(gpu_index, used_bytes, baseline_bytes)| LeakedGpu {
                gpu_index,
                used_bytes,
                baseline_bytes,
            })
            .collect()
    }

    pub(super) fn why_not_clean(&self) -> String {
        // "pid 7 of ours still holds 2.0 GiB on GPU 3"
        let holds = |who: String, h: &Holder, still: &str| {
            let amount =
                (h.used_bytes).map_or_else(|| "memory".to_owned(), shared::units::fmt_bytes);
            format!("{who} {still}holds {amount} on GPU {}", h.gpu_index)
        };
        if let Some(h) = self.ours_on_gpu.first() {
            return holds(format!("pid {} of ours", h.pid), h, "still ");
        }
        if let Some(h) = self.outside_on_gpu.first() {
            let line = holds(format!("host pid {}", h.pid), h, "");
            return format!("{line} ({})", shared::process::OUTSIDE_NOTE);
        }
        if let Some((gpu, used, base)) = self.over_baseline.first() {
            return format!(
                "GPU {gpu} at {} (idle baseline {})",
                shared::units::fmt_bytes(*used),
                shared::units::fmt_bytes(*base)
            );
        }
        if let Some(gpu) = self.unreadable.first() {
            return format!("GPU {gpu}'s memory cannot be read, so it is not known to be idle");
        }
        if let Some(why) = &self.processes_unknown {
            return format!("the GPUs' processes cannot be read ({why})");
        }
        match self.foreign_on_gpu.first() {
            Some(h) => holds(format!("pid {} (not ours)", h.pid), h, ""),
            None => "GPUs not idle".to_owned(),
        }
    }
}
