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
    let mut outside_on_gpu = Vec::new();
    // The sample's server tree is ours only if its root is one of ours: with no
    // server running, it is whoever listens on the port.
    let tree_is_ours = sample.server.is_some_and(|s| members.contains(&s.root));
    for p in &sample.processes {
        if p.role == ProcessRole::Outside {
            // A host PID: ours or not, no one here can tell.
            outside_on_gpu.extend(holders(p, Some(&cfg.gpus), false));
            continue;
        }
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
        outside_on_gpu,
        over_baseline,
        unreadable,
        processes_unknown: sample.processes_error.clone(),
        health: Default::default(),
        stuck: Vec::new(),
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
                    sm_percent: None,
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
}
