//! Turns a sample into what the restart machine needs to know: which processes
//! of ours are alive and on which GPU, what foreign processes hold, and which of
//! the server's GPUs are above their idle baseline. Also the per-phase durations
//! of a finished operation.

use std::collections::HashSet;

use shared::restart::{Durations, Holder, Phase};
use shared::{ProcId, ProcessInfo, ProcessRole, Sample};

use super::machine::Observation;
use crate::config::file::ServerConfig;
use crate::supervisor;

fn holders<'a>(p: &'a ProcessInfo, gpus: &[u32], ours: bool) -> impl Iterator<Item = Holder> + 'a {
    let gpus = gpus.to_vec();
    p.gpu_mem
        .iter()
        .filter(move |g| gpus.contains(&g.gpu_index))
        .map(move |g| Holder {
            pid: p.pid,
            user: p.user.clone(),
            cmdline: p.cmdline.clone(),
            gpu_index: g.gpu_index,
            used_bytes: g.used_bytes,
            ours,
        })
}

/// What the machine needs from `sample`. `members` are all processes of the server
/// tracked so far (alive or not); a PID NVML still lists after its process exited
/// is ours if it was one of them.
pub(crate) fn observe(
    sample: &Sample,
    members: &HashSet<ProcId>,
    cfg: &ServerConfig,
) -> Observation {
    let member_pids: HashSet<u32> = members.iter().map(|m| m.pid).collect();
    let ours_alive = members.iter().filter(|m| supervisor::alive(**m)).count();
    let mut ours_on_gpu = Vec::new();
    let mut foreign_on_gpu = Vec::new();
    for p in &sample.processes {
        let ours = p.role == ProcessRole::Server
            || p.id().is_some_and(|id| members.contains(&id))
            || (p.start_ticks.is_none() && member_pids.contains(&p.pid));
        if ours {
            ours_on_gpu.extend(holders(p, &cfg.gpus, true));
        } else {
            foreign_on_gpu.extend(holders(p, &cfg.gpus, false));
        }
    }
    let over_baseline = sample
        .gpus
        .iter()
        .filter(|g| cfg.gpus.contains(&g.index))
        .filter_map(|g| {
            let used = g.mem_used_bytes?;
            let base = g.mem_baseline_bytes.unwrap_or(cfg.verify.baseline_bytes);
            (used > base.saturating_add(cfg.verify.tolerance_bytes))
                .then_some((g.index, used, base))
        })
        .collect();
    Observation {
        ours_alive,
        ours_on_gpu,
        foreign_on_gpu,
        over_baseline,
    }
}

/// Time spent in each part of an operation, from the phases it entered.
pub(crate) fn durations(entered: &[(Phase, u64)], started_ms: u64, finished_ms: u64) -> Durations {
    let mut d = Durations {
        total_ms: Some(finished_ms.saturating_sub(started_ms)),
        ..Durations::default()
    };
    for (i, (phase, at)) in entered.iter().enumerate() {
        let end = entered.get(i + 1).map_or(finished_ms, |(_, t)| *t);
        let spent = end.saturating_sub(*at);
        let Some(slot) = d.part_mut(*phase) else {
            continue;
        };
        *slot = Some(slot.unwrap_or(0) + spent);
    }
    d
}

/// What a server's Prometheus text says about its load: SGLang's names or vLLM's,
/// summed over label sets.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Metrics {
    pub(crate) running: Option<u32>,
    pub(crate) queued: Option<u32>,
    /// The generated-tokens counter.
    pub(crate) generated: Option<f64>,
}

pub(crate) fn metrics(text: &str) -> Metrics {
    let mut sums: [Option<f64>; 3] = [None; 3];
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('#') {
            continue;
        }
        let name_end = line.find(['{', ' ']).unwrap_or(line.len());
        let slot = match &line[..name_end] {
            "sglang:num_running_reqs" | "vllm:num_requests_running" => 0,
            "sglang:num_queue_reqs" | "vllm:num_requests_waiting" => 1,
            "sglang:generation_tokens_total" | "vllm:generation_tokens_total" => 2,
            _ => continue,
        };
        let value = line
            .rsplit_once('}')
            .map_or(&line[name_end..], |(_, v)| v)
            .split_whitespace()
            .next()
            .and_then(|v| v.parse::<f64>().ok());
        if let Some(v) = value.filter(|v| v.is_finite() && *v >= 0.0) {
            *sums[slot].get_or_insert(0.0) += v;
        }
    }
    Metrics {
        running: sums[0].map(|v| v.round() as u32),
        queued: sums[1].map(|v| v.round() as u32),
        generated: sums[2],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_add_up_per_phase() {
        let entered = [
            (Phase::Draining, 1_000),
            (Phase::Killing, 31_000),
            (Phase::Verifying, 32_000),
            (Phase::Verifying, 33_000),
            (Phase::Launching, 35_000),
            (Phase::WarmingUp, 35_100),
            (Phase::Ready, 125_000),
        ];
        let d = durations(&entered, 1_000, 125_000);
        assert_eq!(d.drain_ms, Some(30_000));
        assert_eq!(d.kill_ms, Some(1_000));
        assert_eq!(d.verify_ms, Some(3_000));
        assert_eq!(d.warmup_ms, Some(90_000));
        assert_eq!(d.total_ms, Some(124_000));
    }

    #[test]
    fn load_from_either_server() {
        let sglang = "# HELP sglang:num_running_reqs x\n\
                      sglang:num_running_reqs{model_name=\"m\",tp_rank=\"0\"} 7.0\n\
                      sglang:num_running_reqs{model_name=\"m\",tp_rank=\"1\"} 2.0\n\
                      sglang:num_queue_reqs{model_name=\"m\"} 3.0\n\
                      sglang:generation_tokens_total{model_name=\"m\"} 1234\n";
        let m = metrics(sglang);
        assert_eq!(
            (m.running, m.queued, m.generated),
            (Some(9), Some(3), Some(1234.0))
        );
        let v = metrics(
            "vllm:num_requests_running{model_name=\"q\"} 4\nvllm:num_requests_waiting 1\nvllm:generation_tokens_total 10\n",
        );
        assert_eq!(
            (v.running, v.queued, v.generated),
            (Some(4), Some(1), Some(10.0))
        );
        assert_eq!(metrics("other 1\n"), Metrics::default());
        assert_eq!(metrics("sglang:num_running_reqs NaN\n").running, None);
    }
}
