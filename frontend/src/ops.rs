//! What the restart UI shows, decided away from the DOM: the names of phases,
//! outcomes and operations as attributes and text, which buttons an operator
//! may press, durations in seconds, what a stop would kill, and the parts of a
//! failure.

use std::collections::BTreeSet;

use shared::restart::{Failure, Holder, OpKind, Phase, ServerStatus};
use shared::units::fmt_bytes;
use shared::{ProcessInfo, ProcessRole};

/// Shown for a value that is not there.
pub(crate) use shared::units::{MISSING, fmt_secs, truncate};

/// The kind from its name (a deep link's `?dialog=`).
pub(crate) fn kind_from_key(key: &str) -> Option<OpKind> {
    match key {
        "restart" => Some(OpKind::Restart),
        "stop" => Some(OpKind::Stop),
        "start" => Some(OpKind::Start),
        "adopt" => Some(OpKind::Adopt),
        _ => None,
    }
}

/// "Restart", "Stop", … for buttons and titles.
pub(crate) fn kind_title(kind: OpKind) -> &'static str {
    match kind {
        OpKind::Restart => "Restart",
        OpKind::Stop => "Stop",
        OpKind::Start => "Start",
        OpKind::Adopt => "Adopt",
    }
}

/// The endpoint that performs `kind`.
pub(crate) fn endpoint(kind: OpKind) -> &'static str {
    match kind {
        OpKind::Restart => "/api/restart",
        OpKind::Stop => "/api/stop",
        OpKind::Start => "/api/start",
        OpKind::Adopt => "/api/adopt",
    }
}

/// Whether the dialog for `kind` edits flags.
pub(crate) fn takes_flags(kind: OpKind) -> bool {
    matches!(kind, OpKind::Restart | OpKind::Start)
}

/// "Benchmark…" is enabled while the server is ready and nothing else runs.
pub(crate) fn can_bench(s: &ServerStatus) -> bool {
    s.phase == Phase::Ready && s.bench.is_none() && s.is_free()
}

/// The operation that brings the server up with other flags: a restart while
/// one may be asked for and a server is up, a start while none is; `None`
/// while neither may be.
pub(crate) fn relaunch_kind(s: &ServerStatus) -> Option<OpKind> {
    if can_start(s) {
        Some(OpKind::Start)
    } else if can_restart(s) && !matches!(s.phase, Phase::Stopped) {
        Some(OpKind::Restart)
    } else {
        None
    }
}

/// "Restart…" is enabled while no operation runs.
pub(crate) fn can_restart(s: &ServerStatus) -> bool {
    s.is_free()
}

/// "Stop…" is enabled while the server is up, coming up, or left failed or
/// crashed (its remains may still hold memory).
pub(crate) fn can_stop(s: &ServerStatus) -> bool {
    matches!(
        s.phase,
        Phase::Ready | Phase::WarmingUp | Phase::Crashed | Phase::Failed
    ) && s.held_by.is_none()
}

/// "Start…" is enabled when no server runs and none waits to be adopted.
pub(crate) fn can_start(s: &ServerStatus) -> bool {
    matches!(s.phase, Phase::Stopped | Phase::Failed | Phase::Crashed)
        && s.adoptable.is_none()
        && s.is_free()
}

/// "Adopt…" is offered when a server listens on the port and drainwatch
/// manages none.
pub(crate) fn can_adopt(s: &ServerStatus) -> bool {
    s.adoptable.is_some() && s.root.is_none() && s.is_free()
}

/// A signed offset in seconds from a start: "+4.2 s".
pub(crate) fn fmt_offset(at_ms: u64, start_ms: u64) -> String {
    if at_ms >= start_ms {
        format!("+{}", fmt_secs(Some(at_ms - start_ms)))
    } else {
        format!("−{}", fmt_secs(Some(start_ms - at_ms)))
    }
}

/// One process a stop would kill.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct Victim {
    pub(crate) pid: u32,
    pub(crate) command: String,
    /// GPU memory NVML attributes to it, `None` when none is.
    pub(crate) gpu_bytes: Option<u64>,
}

/// What stopping the server kills: every server process of the sample, the
/// memory they hold and on how many GPUs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct KillList {
    pub(crate) victims: Vec<Victim>,
    pub(crate) total_bytes: u64,
    pub(crate) gpus: usize,
}

impl KillList {
    pub(crate) fn of(processes: &[ProcessInfo]) -> Self {
        let mut list = Self::default();
        let mut gpus = BTreeSet::new();
        let mut seen = BTreeSet::new();
        for p in processes.iter().filter(|p| p.role == ProcessRole::Server) {
            if !seen.insert((p.pid, p.start_ticks)) {
                continue;
            }
            let held = p.gpu_mem.iter().any(|m| m.used_bytes.is_some());
            let bytes = p.gpu_mem_total_bytes();
            gpus.extend(p.gpu_mem.iter().map(|m| m.gpu_index));
            list.total_bytes = list.total_bytes.saturating_add(bytes);
            list.victims.push(Victim {
                pid: p.pid,
                command: if p.cmdline.is_empty() {
                    MISSING.to_owned()
                } else {
                    p.cmdline.join(" ")
                },
                gpu_bytes: held.then_some(bytes),
            });
        }
        list.gpus = gpus.len();
        list
    }

    /// "will stop 9 processes holding 704.0 GiB on 8 GPUs".
    pub(crate) fn summary(&self) -> String {
        let n = self.victims.len();
        if n == 0 {
            return "no process of the server is running: nothing will be stopped".to_owned();
        }
        let procs = plural(n, "process", "processes");
        if self.gpus == 0 {
            return format!("will stop {procs} holding no GPU memory");
        }
        format!(
            "will stop {procs} holding {} on {}",
            fmt_bytes(self.total_bytes),
            plural(self.gpus, "GPU", "GPUs")
        )
    }
}

/// "1 GPU", "8 GPUs".
pub(crate) fn plural(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// The processes a failure names as holding memory.
pub(crate) fn failure_holders(f: &Failure) -> &[Holder] {
    match f {
        Failure::VerifyFailed { holders, .. } | Failure::ForeignHolders { holders } => holders,
        _ => &[],
    }
}

/// The log lines a failure carries.
pub(crate) fn failure_log(f: &Failure) -> &[String] {
    match f {
        Failure::LaunchFailed { log_tail, .. } | Failure::Crashed { log_tail, .. } => log_tail,
        _ => &[],
    }
}

/// The last `n` lines.
pub(crate) fn last_lines(lines: &[String], n: usize) -> &[String] {
    &lines[lines.len().saturating_sub(n)..]
}

#[cfg(test)]
mod tests {
    use super::*;
    use shared::GpuMemUse;
    use shared::restart::LaunchCause;

    const G: u64 = 1 << 30;

    fn status(phase: Phase) -> ServerStatus {
        ServerStatus {
            name: "demo".to_owned(),
            phase,
            phase_since_ms: 0,
            generation: 1,
            root: None,
            started_at_ms: None,
            flags: Default::default(),
            default_flags: Default::default(),
            allowed: Vec::new(),
            port: 30000,
            gpus: Vec::new(),
            operation: None,
            failure: None,
            adoptable: None,
            typical_ms: Default::default(),
            log_tail: Vec::new(),
            flagset: None,
            passive: Default::default(),
            has_metrics: false,
            bench: None,
            containment: None,
            origin: None,
            server_cgroup: None,
            server_contained: false,
            held_by: None,
            spans_nodes: false,
            engine: None,
        }
    }

    fn proc(pid: u32, role: ProcessRole, mem: &[(u32, u64)]) -> ProcessInfo {
        let mut p = ProcessInfo::without_proc(
            pid,
            mem.iter()
                .map(|&(gpu_index, b)| GpuMemUse {
                    gpu_index,
                    used_bytes: Some(b),
                    sm_percent: None,
                })
                .collect(),
            role,
            String::new(),
        );
        p.start_ticks = Some(u64::from(pid));
        p.cmdline = vec!["python3".to_owned(), format!("worker{pid}")];
        p
    }

    #[test]
    fn wire_names() {
        for k in [OpKind::Restart, OpKind::Stop, OpKind::Start, OpKind::Adopt] {
            assert_eq!(kind_from_key(k.as_str()), Some(k));
        }
        assert_eq!(kind_from_key("x"), None);
        assert_eq!(endpoint(OpKind::Adopt), "/api/adopt");
    }

    #[test]
    fn buttons_follow_the_phase() {
        let ready = status(Phase::Ready);
        assert!(can_restart(&ready) && can_stop(&ready) && !can_start(&ready));
        let stopped = status(Phase::Stopped);
        assert!(can_start(&stopped) && !can_stop(&stopped));
        let mut adoptable = status(Phase::Stopped);
        adoptable.adoptable = Some(shared::ProcId {
            pid: 7,
            start_ticks: 1,
        });
        assert!(!can_start(&adoptable) && can_adopt(&adoptable));
        let mut busy = status(Phase::Draining);
        busy.operation = Some(shared::restart::Operation {
            id: 1,
            kind: OpKind::Restart,
            started_at_ms: 0,
            requested_by: String::new(),
            from_flags: Default::default(),
            to_flags: Default::default(),
        });
        assert!(!can_restart(&busy) && !can_stop(&busy) && !can_start(&busy));
        assert!(can_stop(&status(Phase::Crashed)) && can_start(&status(Phase::Failed)));
        assert!(!can_bench(&busy) && can_bench(&ready) && !can_bench(&stopped));
        let mut benching = status(Phase::Ready);
        benching.bench = Some(shared::bench::BenchProgress {
            request_rate: None,
            run_id: 1,
            status: shared::bench::RunStatus::Running,
            concurrency: 0,
            repeat: 0,
            repeats: 3,
            done: 0,
            total: 0,
            output_tok_s: 0.0,
            requested_by: "olga".to_owned(),
        });
        assert!(!can_bench(&benching));
        assert_eq!(relaunch_kind(&ready), Some(OpKind::Restart));
        assert_eq!(relaunch_kind(&stopped), Some(OpKind::Start));
        assert_eq!(relaunch_kind(&busy), None);
        assert_eq!(relaunch_kind(&adoptable), None);
    }

    #[test]
    fn seconds_with_one_decimal() {
        assert_eq!(fmt_offset(5_200, 1_000), "+4.2 s");
        assert_eq!(fmt_offset(1_000, 1_500), "−0.5 s");
    }

    #[test]
    fn kill_list_counts_server_processes_only() {
        let mut procs = vec![proc(100, ProcessRole::Server, &[])];
        for i in 0..8 {
            procs.push(proc(101 + i, ProcessRole::Server, &[(i, 88 * G)]));
        }
        procs.push(proc(4242, ProcessRole::Foreign, &[(3, G)]));
        procs.push(procs[1].clone());
        let k = KillList::of(&procs);
        assert_eq!(k.victims.len(), 9);
        assert_eq!(k.gpus, 8);
        assert_eq!(k.total_bytes, 704 * G);
        assert_eq!(k.victims[0].gpu_bytes, None);
        assert_eq!(k.victims[1].gpu_bytes, Some(88 * G));
        assert_eq!(
            k.summary(),
            "will stop 9 processes holding 704.0 GiB on 8 GPUs"
        );
        let one = KillList::of(&procs[1..2]);
        assert_eq!(
            one.summary(),
            "will stop 1 process holding 88.0 GiB on 1 GPU"
        );
        assert!(
            KillList::of(&procs[..1])
                .summary()
                .contains("no GPU memory")
        );
        assert!(
            KillList::of(&[])
                .summary()
                .contains("nothing will be stopped")
        );
    }

    #[test]
    fn failure_parts() {
        let f = Failure::LaunchFailed {
            cause: LaunchCause::Oom,
            log_tail: vec!["a".to_owned(), "b".to_owned()],
        };
        assert_eq!(f.kind(), "launch_failed");
        assert_eq!(failure_log(&f).len(), 2);
        assert!(failure_holders(&f).is_empty());
        assert!(failure_log(&Failure::Interrupted).is_empty());
        let lines: Vec<String> = (0..30).map(|i| i.to_string()).collect();
        assert_eq!(last_lines(&lines, 8).len(), 8);
        assert_eq!(last_lines(&lines, 8)[0], "22");
        assert_eq!(last_lines(&lines[..3], 8).len(), 3);
    }
}
