//! Turns a sample into what the restart machine needs to know: which processes
//! of ours are alive and on which GPU, what foreign processes hold, and which of
//! the server's GPUs are above their idle baseline. Also the per-phase durations
//! of a finished operation.

use std::collections::HashSet;

use shared::restart::{Durations, Holder, Phase};
use shared::{ProcId, ProcessInfo, ProcessRole, Sample};

use super::machine::Observation;
use crate::config::file::ServerConfig;

/// `p`'s memory on `gpus` (on every GPU when `None`).
fn holders<'a>(
    p: &'a ProcessInfo,
    gpus: Option<&[u32]>,
    ours: bool,
) -> impl Iterator<Item = Holder> + 'a {
    let gpus = gpus.map(<[u32]>::to_vec);
    p.gpu_mem
        .iter()
        .filter(move |g| gpus.as_ref().is_none_or(|l| l.contains(&g.gpu_index)))
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
/// is ours if it was one of them. `ours_alive`: how many of ours live now (tracked
/// members, and whatever the server's cgroup holds).
pub(crate) fn observe(
    sample: &Sample,
    members: &HashSet<ProcId>,
    ours_alive: usize,
    cfg: &ServerConfig,
) -> Observation {
    let member_pids: HashSet<u32> = members.iter().map(|m| m.pid).collect();
    let mut ours_on_gpu = Vec::new();
    let mut foreign_on_gpu = Vec::new();
    // The sample's server tree is ours only if its root is one of ours: with no
    // server running, it is whoever listens on the port.
    let tree_is_ours = sample.server.is_some_and(|s| members.contains(&s.root));
    for p in &sample.processes {
        let ours = (tree_is_ours && p.role == ProcessRole::Server)
            || p.id().is_some_and(|id| members.contains(&id))
            || (p.start_ticks.is_none() && member_pids.contains(&p.pid));
        if ours {
            ours_on_gpu.extend(holders(p, None, true));
        } else {
            foreign_on_gpu.extend(holders(p, Some(&cfg.gpus), false));
        }
    }
    let unreadable = cfg
        .gpus
        .iter()
        .copied()
        .filter(|i| {
            !sample
                .gpus
                .iter()
                .any(|g| g.index == *i && g.mem_used_bytes.is_some())
        })
        .collect();
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
        unreadable,
        processes_unknown: sample.processes_error.clone(),
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
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Metrics {
    pub(crate) running: Option<u32>,
    pub(crate) queued: Option<u32>,
    /// The generated-tokens counter.
    pub(crate) generated: Option<f64>,
    /// SGLang's own tok/s gauge (`sglang:gen_throughput`), for a server that
    /// has no generated-tokens counter.
    pub(crate) gen_throughput: Option<f64>,
    /// Time to first token: cumulative bucket counts by upper bound (seconds).
    pub(crate) ttft: Buckets,
    /// Time between tokens, likewise.
    pub(crate) itl: Buckets,
}

/// A histogram's cumulative counts by upper bound, ascending (`+Inf` last).
pub(crate) type Buckets = Vec<(f64, f64)>;

pub(crate) fn metrics(text: &str) -> Metrics {
    let mut sums: [Option<f64>; 4] = [None; 4];
    // TTFT; ITL; vLLM's older per-output-token time, used when ITL is absent.
    let mut hists: [Buckets; 3] = Default::default();
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('#') {
            continue;
        }
        let name_end = line.find(['{', ' ']).unwrap_or(line.len());
        let value = line
            .rsplit_once('}')
            .map_or(&line[name_end..], |(_, v)| v)
            .split_whitespace()
            .next()
            .and_then(|v| v.parse::<f64>().ok())
            .filter(|v| v.is_finite() && *v >= 0.0);
        let Some(v) = value else { continue };
        let hist = match &line[..name_end] {
            "sglang:time_to_first_token_seconds_bucket"
            | "vllm:time_to_first_token_seconds_bucket" => Some(0),
            "sglang:inter_token_latency_seconds_bucket"
            | "vllm:inter_token_latency_seconds_bucket" => Some(1),
            "vllm:time_per_output_token_seconds_bucket" => Some(2),
            _ => None,
        };
        if let Some(h) = hist {
            if let Some(le) = le_of(line) {
                add_bucket(&mut hists[h], le, v);
            }
            continue;
        }
        let slot = match &line[..name_end] {
            "sglang:num_running_reqs" | "vllm:num_requests_running" => 0,
            "sglang:num_queue_reqs" | "vllm:num_requests_waiting" => 1,
            "sglang:generation_tokens_total" | "vllm:generation_tokens_total" => 2,
            "sglang:gen_throughput" => 3,
            _ => continue,
        };
        *sums[slot].get_or_insert(0.0) += v;
    }
    let [ttft, itl, tpot] = hists;
    Metrics {
        running: sums[0].map(|v| v.round() as u32),
        queued: sums[1].map(|v| v.round() as u32),
        generated: sums[2],
        gen_throughput: sums[3],
        ttft,
        itl: if itl.is_empty() { tpot } else { itl },
    }
}

/// The `le` label of a bucket line, `+Inf` as infinity.
fn le_of(line: &str) -> Option<f64> {
    let labels = &line[line.find('{')? + 1..];
    // `le` itself, not a label whose name ends in it (`role`, `module`).
    let at = labels
        .match_indices("le=\"")
        .map(|(i, _)| i)
        .find(|i| *i == 0 || matches!(labels.as_bytes()[i - 1], b',' | b' '))?;
    let (le, _) = labels[at + 4..].split_once('"')?;
    match le {
        "+Inf" => Some(f64::INFINITY),
        v => v.parse().ok(),
    }
}

/// Adds `count` to the bucket bounded by `le`, keeping the bounds in order.
fn add_bucket(b: &mut Buckets, le: f64, count: f64) {
    match b.iter().position(|(bound, _)| *bound >= le) {
        Some(i) if b[i].0 == le => b[i].1 += count,
        Some(i) => b.insert(i, (le, count)),
        None => b.push((le, count)),
    }
}

/// The `q` quantile of what was observed between two readings of a histogram
/// (as Prometheus's `histogram_quantile` estimates it: linear within the bucket
/// it falls in); `None` when nothing was observed. A counter that went down (the
/// server restarted) counts from zero.
pub(crate) fn quantile(before: &Buckets, now: &Buckets, q: f64) -> Option<f64> {
    let restarted = now.iter().zip(before).any(|(n, b)| n.1 < b.1) || now.len() != before.len();
    let delta: Vec<(f64, f64)> = now
        .iter()
        .enumerate()
        .map(|(i, (le, c))| {
            let was = if restarted { 0.0 } else { before[i].1 };
            (*le, c - was)
        })
        .collect();
    let total = delta.last().map(|(_, c)| *c).filter(|c| *c > 0.0)?;
    let rank = q * total;
    let mut below = (0.0, 0.0);
    for (le, c) in delta {
        if c >= rank {
            if le.is_infinite() {
                // Beyond the last bound: the last bound is all that can be said.
                return Some(below.0);
            }
            let within = if c > below.1 {
                (rank - below.1) / (c - below.1)
            } else {
                1.0
            };
            return Some(below.0 + (le - below.0) * within);
        }
        below = (le, c);
    }
    None
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
    fn ours_anywhere_foreign_on_our_gpus_and_unread_gpus_count() {
        let cfg = ServerConfig::parse(
            "[server]\nname = \"s\"\nprogram = \"/bin/true\"\nport = 30000\ngpus = [0, 1, 2]\n",
        )
        .expect("config");
        let gpu = |index: u32, used: Option<u64>| {
            let mut g = shared::GpuSample::unreadable(index, "test".into());
            g.mem_used_bytes = used;
            g.mem_baseline_bytes = Some(4 << 20);
            g
        };
        let on = |pid: u32, gpu_index: u32, role: ProcessRole| {
            ProcessInfo::without_proc(
                pid,
                vec![shared::GpuMemUse {
                    gpu_index,
                    used_bytes: Some(8 << 20),
                }],
                role,
                "gone".into(),
            )
        };
        let root = shared::ProcId {
            pid: 9,
            start_ticks: 1,
        };
        let sample = Sample {
            seq: 1,
            at_ms: 0,
            took_us: 0,
            // GPU 2 is missing, GPU 1 cannot say how much it uses.
            gpus: vec![gpu(0, Some(4 << 20)), gpu(1, None), gpu(7, Some(4 << 20))],
            processes: vec![
                // Ours on a GPU the server does not need: still ours, still there.
                on(10, 7, ProcessRole::Server),
                // Foreign on a GPU the server does not need: none of its business.
                on(11, 6, ProcessRole::Foreign),
                // Foreign on GPU 0, under the tolerance: it is there all the same.
                on(12, 0, ProcessRole::Foreign),
            ],
            server: Some(shared::ServerIdentity { root, port: 30000 }),
            processes_error: None,
        };
        let obs = observe(&sample, &HashSet::from([root]), 0, &cfg);
        assert_eq!(
            obs.ours_on_gpu
                .iter()
                .map(|h| (h.pid, h.gpu_index))
                .collect::<Vec<_>>(),
            vec![(10, 7)]
        );
        // A tree found from a root that is not ours (whoever listens on the
        // port while no server runs) is nobody's server.
        let strangers = observe(&sample, &HashSet::new(), 0, &cfg);
        assert!(strangers.ours_on_gpu.is_empty());
        assert_eq!(
            obs.foreign_on_gpu
                .iter()
                .map(|h| (h.pid, h.gpu_index))
                .collect::<Vec<_>>(),
            vec![(12, 0)]
        );
        assert_eq!(obs.unreadable, vec![1, 2]);
        assert!(obs.over_baseline.is_empty());
        assert_eq!(obs.processes_unknown, None);
    }

    #[test]
    fn latency_histograms_from_either_server() {
        let sglang = "sglang:time_to_first_token_seconds_bucket{tp_rank=\"0\",le=\"0.05\"} 2\n\
                      sglang:time_to_first_token_seconds_bucket{tp_rank=\"0\",le=\"0.1\"} 6\n\
                      sglang:time_to_first_token_seconds_bucket{tp_rank=\"0\",le=\"+Inf\"} 8\n\
                      sglang:time_to_first_token_seconds_bucket{tp_rank=\"1\",le=\"0.05\"} 1\n\
                      sglang:time_to_first_token_seconds_bucket{tp_rank=\"1\",le=\"0.1\"} 1\n\
                      sglang:time_to_first_token_seconds_bucket{tp_rank=\"1\",le=\"+Inf\"} 2\n\
                      sglang:time_to_first_token_seconds_sum{tp_rank=\"0\"} 0.7\n\
                      sglang:gen_throughput{tp_rank=\"0\"} 612.5\n";
        let m = metrics(sglang);
        assert_eq!(m.ttft, vec![(0.05, 3.0), (0.1, 7.0), (f64::INFINITY, 10.0)]);
        assert_eq!(m.gen_throughput, Some(612.5));
        assert!(m.itl.is_empty());
        // vLLM's older name stands in for the inter-token latency.
        let v = metrics("vllm:time_per_output_token_seconds_bucket{role=\"x\",le=\"0.02\"} 4\n");
        assert_eq!(v.itl, vec![(0.02, 4.0)]);
        let both = metrics(
            "vllm:time_per_output_token_seconds_bucket{le=\"0.02\"} 4\n\
             vllm:inter_token_latency_seconds_bucket{le=\"0.01\"} 9\n",
        );
        assert_eq!(both.itl, vec![(0.01, 9.0)]);
    }

    #[test]
    fn quantiles_of_what_was_observed_between_two_readings() {
        let inf = f64::INFINITY;
        let before = vec![(0.01, 0.0), (0.02, 0.0), (0.04, 0.0), (inf, 0.0)];
        // 10 observations in (0.02, 0.04]: the median is halfway through it.
        let now = vec![(0.01, 0.0), (0.02, 0.0), (0.04, 10.0), (inf, 10.0)];
        let p50 = quantile(&before, &now, 0.5).expect("p50");
        assert!((p50 - 0.03).abs() < 1e-9, "{p50}");
        // Only the change counts: 10 more, all at or under 10 ms.
        let later = vec![(0.01, 10.0), (0.02, 10.0), (0.04, 20.0), (inf, 20.0)];
        let p50 = quantile(&now, &later, 0.5).expect("p50");
        assert!((p50 - 0.005).abs() < 1e-9, "{p50}");
        // Nothing new: nothing to say.
        assert_eq!(quantile(&later, &later, 0.5), None);
        // Beyond the last bound: the last bound.
        let slow = vec![(0.01, 10.0), (0.02, 10.0), (0.04, 20.0), (inf, 30.0)];
        assert_eq!(quantile(&later, &slow, 0.9), Some(0.04));
        // The server restarted (its counters went down): from zero.
        let fresh = vec![(0.01, 2.0), (0.02, 2.0), (0.04, 2.0), (inf, 2.0)];
        let p50 = quantile(&later, &fresh, 0.5).expect("p50");
        assert!((p50 - 0.005).abs() < 1e-9, "{p50}");
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
