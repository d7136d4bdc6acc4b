//! The guarded restart as a pure state machine: inputs (an operator's request, an
//! observation of the host, a spawn result, the root's exit, probe results) and
//! the current time go in; the next phase and the effects to carry out come out.
//! No I/O and no clock of its own, so every path is tested with explicit times.
//!
//! Restart: Ready → Draining (SIGTERM) → Killing (SIGKILL, if the drain timed out)
//! → Verifying (no process of ours on any GPU and every GPU at baseline, for N
//! samples) → Launching → WarmingUp (health, then a real completion) → Ready.
//! Stop ends after Verifying; Start begins at Verifying.

use shared::flags::Flags;
use shared::restart::{
    Failure, Holder, LaunchCause, LeakedGpu, MarkerKind, OpKind, Outcome, Phase, StuckProcess,
};

use super::gate::Verdict;
use crate::config::file::Timeouts;

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
    fn clean(&self) -> bool {
        self.ours_on_gpu.is_empty()
            && self.foreign_on_gpu.is_empty()
            && self.outside_on_gpu.is_empty()
            && self.over_baseline.is_empty()
            && self.unreadable.is_empty()
            && self.processes_unknown.is_none()
    }

    /// Everything that still stands between the GPUs and their baselines is foreign.
    fn only_foreign_left(&self) -> bool {
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
    fn leaked(&self) -> Vec<LeakedGpu> {
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

    fn why_not_clean(&self) -> String {
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

/// Something that happened, fed to [`Machine::step`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input {
    /// An accepted operation (the manager already checked the guards).
    Begin { kind: OpKind, to_flags: Flags },
    /// A stop preempts the launch in flight ([`Machine::stop_preempts`]):
    /// end it, interrupted, before the stop begins.
    Abandon,
    /// Whoever asked for the launch in flight cancels it: it stops at the
    /// next safe point, before the launch ([`Machine::can_cancel`]), and ends
    /// cancelled with the server stopped and verified.
    Cancel,
    /// A new sample was turned into an observation.
    Observe(Box<Observation>),
    /// The server process was started.
    Spawned,
    /// The server could not be started.
    SpawnFailed(LaunchCause),
    /// The server's root process exited.
    RootExited {
        code: Option<i32>,
        signal: Option<i32>,
        /// The exit looked like running out of GPU memory (from the log).
        oom: bool,
        /// The server said its address was already in use (from the log).
        port_in_use: bool,
    },
    /// `/health` answered 200.
    Healthy,
    /// The readiness probe (a real completion) succeeded.
    Ready,
    /// The server refused a probe's request (401, 403): it wants an API key.
    Refused { status: u16 },
    /// An already running server was taken over (adopted or re-found after a restart
    /// of drainwatch).
    Attached,
}

/// What the manager must do, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Effect {
    /// A phase change, to record and push: the new phase, what happened, and the
    /// timeline marker it sets, if any.
    Entered {
        phase: Phase,
        note: String,
        marker: Option<MarkerKind>,
    },
    /// SIGTERM to the server's process group.
    Sigterm,
    /// SIGKILL to the group and to every tracked process still alive.
    KillAll,
    /// Start the server with these flags.
    Launch(Flags),
    /// Start probing `/health` and readiness for the new server.
    Probe,
    /// Sample fast (≥ 20 Hz) while an operation runs.
    FastSampling(bool),
    /// The operation ended.
    Finished {
        outcome: Outcome,
        failure: Option<Failure>,
    },
    /// The server died outside an operation.
    Crashed(Failure),
}

#[derive(Debug, Clone)]
struct Op {
    kind: OpKind,
    to_flags: Flags,
    /// Launch after verifying (restart, start) or stop there (stop).
    launch: bool,
    /// Cancelled before its launch: it ends at Verifying, cancelled.
    cancelled: bool,
}

/// The restart state machine.
#[derive(Debug, Clone)]
pub struct Machine {
    timeouts: Timeouts,
    verify_samples: u32,
    phase: Phase,
    since_ms: u64,
    op: Option<Op>,
    /// Consecutive observations with the same verdict while verifying…
    streak: u32,
    /// …which is "only foreign processes left" when set, else "clean".
    foreign_streak: bool,
    /// Processes of ours alive at the last observation.
    alive: usize,
}

impl Machine {
    pub fn new(timeouts: Timeouts, verify_samples: u32, now_ms: u64) -> Self {
        Self {
            timeouts,
            verify_samples: verify_samples.max(1),
            phase: Phase::Stopped,
            since_ms: now_ms,
            op: None,
            streak: 0,
            foreign_streak: false,
            alive: 0,
        }
    }

    pub fn phase(&self) -> Phase {
        self.phase
    }

    pub fn since_ms(&self) -> u64 {
        self.since_ms
    }

    /// The operation in flight.
    pub fn busy(&self) -> Option<OpKind> {
        self.op.as_ref().map(|o| o.kind)
    }

    /// Whether `kind` may begin now; `Err` says why not.
    pub fn can_begin(&self, kind: OpKind) -> Result<(), String> {
        if self.stop_preempts(kind) {
            return Ok(());
        }
        if let Some(op) = &self.op {
            return Err(format!(
                "a {} is already running ({})",
                op_name(op.kind),
                self.phase.label()
            ));
        }
        match kind {
            OpKind::Stop if self.phase == Phase::Stopped && self.alive == 0 => {
                Err("the server is already stopped".to_owned())
            }
            OpKind::Start if self.phase == Phase::Ready => {
                Err("the server is already running; restart it instead".to_owned())
            }
            _ => Ok(()),
        }
    }

    /// Whether the operation in flight can still be cancelled before its
    /// launch; `Err` says why not.
    pub fn can_cancel(&self) -> Result<(), String> {
        match &self.op {
            None => Err("no operation is running".to_owned()),
            Some(op) if !op.launch => Err(format!(
                "the {} launches nothing: it ends with the server stopped",
                op_name(op.kind)
            )),
            Some(_) if matches!(self.phase, Phase::Launching | Phase::WarmingUp) => Err(
                "the server is already launching; it can be stopped once it is ready".to_owned(),
            ),
            Some(_) => Ok(()),
        }
    }

    /// A stop may cut short a launch that is still warming up (a node of a
    /// group whose other node failed, or an operator who gives up waiting):
    /// the launch ends interrupted and the stop drains what it started.
    pub fn stop_preempts(&self, kind: OpKind) -> bool {
        kind == OpKind::Stop
            && self.op.as_ref().is_some_and(|o| o.launch)
            && matches!(self.phase, Phase::Launching | Phase::WarmingUp)
    }

    fn enter(
        &mut self,
        phase: Phase,
        now: u64,
        note: String,
        marker: Option<MarkerKind>,
        fx: &mut Vec<Effect>,
    ) {
        self.phase = phase;
        self.since_ms = now;
        self.streak = 0;
        self.foreign_streak = false;
        fx.push(Effect::Entered {
            phase,
            note,
            marker,
        });
    }

    fn elapsed(&self, now: u64) -> u64 {
        now.saturating_sub(self.since_ms)
    }

    fn finish(&mut self, phase: Phase, now: u64, failure: Option<Failure>, fx: &mut Vec<Effect>) {
        let cancelled = self.op.as_ref().is_some_and(|o| o.cancelled);
        let note = match &failure {
            Some(f) => f.summary(),
            None if cancelled => "cancelled before the launch; the server is stopped".to_owned(),
            None => phase.label().to_owned(),
        };
        let marker = if failure.is_some() {
            Some(MarkerKind::Failed)
        } else if phase == Phase::Ready {
            Some(MarkerKind::Ready)
        } else {
            None
        };
        self.enter(phase, now, note, marker, fx);
        self.op = None;
        fx.push(Effect::FastSampling(false));
        fx.push(Effect::Finished {
            outcome: if failure.is_some() {
                Outcome::Failed
            } else if cancelled {
                Outcome::Cancelled
            } else {
                Outcome::Succeeded
            },
            failure,
        });
    }

    fn fail(&mut self, now: u64, failure: Failure, fx: &mut Vec<Effect>) {
        self.finish(Phase::Failed, now, Some(failure), fx);
    }

    /// Advances the machine; returns what to do.
    pub fn step(&mut self, input: Input, now: u64) -> Vec<Effect> {
        let mut fx = Vec::new();
        match input {
            Input::Begin { kind, to_flags } => self.begin(kind, to_flags, now, &mut fx),
            Input::Abandon if self.stop_preempts(OpKind::Stop) => {
                let phase = self.phase;
                self.enter(
                    phase,
                    now,
                    "a stop was asked: this launch is abandoned".to_owned(),
                    None,
                    &mut fx,
                );
                self.op = None;
                fx.push(Effect::Finished {
                    outcome: Outcome::Interrupted,
                    failure: None,
                });
            }
            Input::Cancel if self.can_cancel().is_ok() => {
                if let Some(op) = self.op.as_mut() {
                    op.launch = false;
                    op.cancelled = true;
                }
                fx.push(Effect::Entered {
                    phase: self.phase,
                    note: "cancelled: it stops here, before the launch".to_owned(),
                    marker: None,
                });
            }
            Input::Observe(obs) => self.observe(&obs, now, &mut fx),
            Input::Spawned if self.phase == Phase::Launching => {
                // Alive from now, whatever the next sample says: a stop
                // before it still begins with SIGTERM.
                self.alive = self.alive.max(1);
                self.enter(
                    Phase::WarmingUp,
                    now,
                    "spawned; waiting for /health".to_owned(),
                    None,
                    &mut fx,
                );
                fx.push(Effect::Probe);
            }
            Input::SpawnFailed(cause) if self.phase == Phase::Launching => {
                let failure = Failure::LaunchFailed {
                    cause,
                    log_tail: Vec::new(),
                };
                self.fail(now, failure, &mut fx);
            }
            Input::RootExited {
                code,
                signal,
                oom,
                port_in_use,
            } => {
                let cause = if oom {
                    LaunchCause::Oom
                } else if port_in_use {
                    LaunchCause::PortInUse { holder_pid: None }
                } else {
                    LaunchCause::Exited { code, signal }
                };
                self.root_exited(code, signal, cause, now, &mut fx)
            }
            Input::Healthy if self.phase == Phase::WarmingUp => fx.push(Effect::Entered {
                phase: Phase::WarmingUp,
                note: "/health answers 200; probing with a completion".to_owned(),
                marker: None,
            }),
            Input::Ready if self.phase == Phase::WarmingUp => {
                self.finish(Phase::Ready, now, None, &mut fx);
            }
            Input::Refused { status } if self.phase == Phase::WarmingUp => {
                fx.push(Effect::KillAll);
                let failure = Failure::LaunchFailed {
                    cause: LaunchCause::Refused { status },
                    log_tail: Vec::new(),
                };
                self.fail(now, failure, &mut fx);
            }
            Input::Attached => {
                self.op = None;
                self.alive = self.alive.max(1);
                self.enter(
                    Phase::Ready,
                    now,
                    "attached to the running server".to_owned(),
                    None,
                    &mut fx,
                );
            }
            // Late or stray results (a probe after a failure, say) change nothing.
            Input::Spawned
            | Input::SpawnFailed(_)
            | Input::Healthy
            | Input::Ready
            | Input::Refused { .. }
            | Input::Abandon
            | Input::Cancel => {}
        }
        fx
    }

    fn begin(&mut self, kind: OpKind, to_flags: Flags, now: u64, fx: &mut Vec<Effect>) {
        if self.can_begin(kind).is_err() {
            return;
        }
        let launch = matches!(kind, OpKind::Restart | OpKind::Start);
        self.op = Some(Op {
            kind,
            to_flags,
            launch,
            cancelled: false,
        });
        fx.push(Effect::FastSampling(true));
        if self.alive > 0 {
            self.enter(
                Phase::Draining,
                now,
                "SIGTERM to the server's process group".to_owned(),
                Some(MarkerKind::Sigterm),
                fx,
            );
            fx.push(Effect::Sigterm);
        } else {
            self.enter(
                Phase::Verifying,
                now,
                "no process of ours alive; checking the GPUs".to_owned(),
                None,
                fx,
            );
        }
    }

    fn observe(&mut self, obs: &Observation, now: u64, fx: &mut Vec<Effect>) {
        self.alive = obs.ours_alive;
        match self.phase {
            Phase::Draining if obs.ours_alive == 0 => self.enter(
                Phase::Verifying,
                now,
                "all processes of ours exited".to_owned(),
                None,
                fx,
            ),
            Phase::Draining if self.elapsed(now) >= ms(self.timeouts.drain) => {
                self.enter(
                    Phase::Killing,
                    now,
                    format!(
                        "drain timed out after {} s with {} process(es) alive; SIGKILL",
                        self.timeouts.drain.as_secs(),
                        obs.ours_alive
                    ),
                    Some(MarkerKind::Sigkill),
                    fx,
                );
                fx.push(Effect::KillAll);
            }
            Phase::Killing if obs.ours_alive == 0 => self.enter(
                Phase::Verifying,
                now,
                "all processes of ours are gone".to_owned(),
                None,
                fx,
            ),
            Phase::Killing if self.elapsed(now) >= ms(self.timeouts.kill_grace) => {
                // Asleep in the kernel where SIGKILL cannot reach: a person's.
                let failure = if obs.stuck.is_empty() {
                    let reason = format!("{} process(es) of ours survived SIGKILL", obs.ours_alive);
                    Failure::VerifyFailed {
                        reason,
                        holders: obs.ours_on_gpu.clone(),
                    }
                } else {
                    Failure::Unkillable {
                        processes: obs.stuck.clone(),
                    }
                };
                self.fail(now, failure, fx);
            }
            // New descendants can appear until the last one is gone.
            Phase::Killing => fx.push(Effect::KillAll),
            Phase::Verifying => self.verify(obs, now, fx),
            Phase::WarmingUp if self.elapsed(now) >= ms(self.timeouts.warmup) => {
                fx.push(Effect::KillAll);
                let cause = LaunchCause::WarmupTimeout {
                    after_ms: self.elapsed(now),
                };
                let failure = Failure::LaunchFailed {
                    cause,
                    log_tail: Vec::new(),
                };
                self.fail(now, failure, fx);
            }
            Phase::Ready if obs.ours_alive == 0 => {
                let failure = Failure::Crashed {
                    code: None,
                    signal: None,
                    log_tail: Vec::new(),
                };
                self.crashed(failure, now, fx);
            }
            _ => {}
        }
    }

    /// Counts one more observation with the same verdict (only foreign left, or
    /// clean); a streak counts one verdict, so the other one starts it over.
    fn count(&mut self, foreign: bool) -> u32 {
        self.streak = if self.foreign_streak == foreign {
            self.streak + 1
        } else {
            1
        };
        self.foreign_streak = foreign;
        self.streak
    }

    fn verify(&mut self, obs: &Observation, now: u64, fx: &mut Vec<Effect>) {
        if obs.ours_alive > 0 {
            // Something of ours came back (or was never killed): kill it again.
            self.streak = 0;
            fx.push(Effect::KillAll);
        } else if obs.clean() && !obs.health.stale {
            if self.count(false) >= self.verify_samples {
                self.verified(obs, now, fx);
                return;
            }
        } else if obs.only_foreign_left() {
            if self.count(true) >= self.verify_samples {
                let failure = Failure::ForeignHolders {
                    holders: obs.foreign_on_gpu.clone(),
                };
                self.fail(now, failure, fx);
                return;
            }
        } else {
            self.streak = 0;
        }
        if self.elapsed(now) >= ms(self.timeouts.verify) {
            let gpus = obs.leaked();
            if !gpus.is_empty() {
                self.fail(now, Failure::MemoryLeaked { gpus }, fx);
                return;
            }
            let mut holders = obs.ours_on_gpu.clone();
            holders.extend(obs.outside_on_gpu.iter().cloned());
            holders.extend(obs.foreign_on_gpu.iter().cloned());
            let failure = Failure::VerifyFailed {
                reason: format!(
                    "not idle after {} s: {}",
                    self.timeouts.verify.as_secs(),
                    obs.why_not_clean()
                ),
                holders,
            };
            self.fail(now, failure, fx);
        }
    }

    fn verified(&mut self, obs: &Observation, now: u64, fx: &mut Vec<Effect>) {
        let Some(op) = self.op.clone() else { return };
        if op.launch {
            let mut note = format!(
                "verified: every GPU idle for {} samples",
                self.verify_samples
            );
            if !obs.health.refuse.is_empty() {
                fx.push(Effect::Entered {
                    phase: Phase::Verifying,
                    note,
                    marker: Some(MarkerKind::Verified),
                });
                let failure = Failure::Unhealthy {
                    issues: obs.health.refuse.clone(),
                };
                self.fail(now, failure, fx);
                return;
            }
            if !obs.health.warn.is_empty() {
                let lines: Vec<String> = obs.health.warn.iter().map(|i| i.line()).collect();
                note.push_str(&format!("; health warnings: {}", lines.join("; ")));
            }
            fx.push(Effect::Entered {
                phase: Phase::Verifying,
                note,
                marker: Some(MarkerKind::Verified),
            });
            self.enter(
                Phase::Launching,
                now,
                "launching".to_owned(),
                Some(MarkerKind::Launch),
                fx,
            );
            fx.push(Effect::Launch(op.to_flags));
        } else {
            fx.push(Effect::Entered {
                phase: Phase::Verifying,
                note: "verified: every GPU idle".to_owned(),
                marker: Some(MarkerKind::Verified),
            });
            self.finish(Phase::Stopped, now, None, fx);
        }
    }

    /// The root exited; `cause` is what that means for a launch.
    fn root_exited(
        &mut self,
        code: Option<i32>,
        signal: Option<i32>,
        cause: LaunchCause,
        now: u64,
        fx: &mut Vec<Effect>,
    ) {
        match self.phase {
            Phase::Launching | Phase::WarmingUp => {
                fx.push(Effect::KillAll);
                let failure = Failure::LaunchFailed {
                    cause,
                    log_tail: Vec::new(),
                };
                self.fail(now, failure, fx);
            }
            Phase::Ready => {
                fx.push(Effect::KillAll);
                let failure = Failure::Crashed {
                    code,
                    signal,
                    log_tail: Vec::new(),
                };
                self.crashed(failure, now, fx);
            }
            // Draining, Killing: expected; the observations carry on from here.
            _ => {}
        }
    }

    fn crashed(&mut self, failure: Failure, now: u64, fx: &mut Vec<Effect>) {
        self.enter(
            Phase::Crashed,
            now,
            failure.summary(),
            Some(MarkerKind::Failed),
            fx,
        );
        fx.push(Effect::Crashed(failure));
    }
}

fn ms(d: std::time::Duration) -> u64 {
    d.as_millis() as u64
}

pub fn op_name(kind: OpKind) -> &'static str {
    match kind {
        OpKind::Restart => "restart",
        OpKind::Stop => "stop",
        OpKind::Start => "start",
        OpKind::Adopt => "adoption",
    }
}

#[cfg(test)]
#[path = "machine_tests.rs"]
mod tests;
