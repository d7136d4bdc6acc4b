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

mod observation;
mod verifying;

pub use observation::Observation;

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
    pub fn can_begin(&self, kind: OpKind) -> Result<(), NotNow> {
        if self.stop_preempts(kind) {
            return Ok(());
        }
        if let Some(op) = &self.op {
            return Err(NotNow::Running {
                kind: op.kind,
                phase: self.phase,
            });
        }
        match kind {
            OpKind::Stop if self.phase == Phase::Stopped && self.alive == 0 => {
                Err(NotNow::AlreadyStopped)
            }
            OpKind::Start if self.phase == Phase::Ready => Err(NotNow::AlreadyRunning),
            _ => Ok(()),
        }
    }

    /// Whether the operation in flight can still be cancelled before its
    /// launch; `Err` says why not.
    pub fn can_cancel(&self) -> Result<(), NotNow> {
        match &self.op {
            None => Err(NotNow::NothingRunning),
            Some(op) if !op.launch => Err(NotNow::LaunchesNothing(op.kind)),
            Some(_) if matches!(self.phase, Phase::Launching | Phase::WarmingUp) => {
                Err(NotNow::Launching)
            }
            Some(_) => Ok(()),
        }
    }

    /// The launch in flight given up for a stop that preempts it: it ends
    /// interrupted, in the phase it was in.
    fn abandon(&mut self, now: u64, fx: &mut Vec<Effect>) {
        let phase = self.phase;
        self.enter(
            phase,
            now,
            "a stop was asked: this launch is abandoned".to_owned(),
            None,
            fx,
        );
        self.op = None;
        fx.push(Effect::Finished {
            outcome: Outcome::Interrupted,
            failure: None,
        });
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
            Input::Abandon if self.stop_preempts(OpKind::Stop) => self.abandon(now, &mut fx),
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
                let cause = match (oom, port_in_use) {
                    (true, _) => LaunchCause::Oom,
                    (false, true) => LaunchCause::PortInUse { holder_pid: None },
                    (false, false) => LaunchCause::Exited { code, signal },
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

/// Why an operation cannot begin, or be cancelled, in the state the server
/// is in: the API answers 409 with its text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum NotNow {
    #[error("a {} is already running ({})", op_name(*kind), phase.label())]
    Running { kind: OpKind, phase: Phase },
    #[error("the server is already stopped")]
    AlreadyStopped,
    #[error("the server is already running; restart it instead")]
    AlreadyRunning,
    #[error("no operation is running")]
    NothingRunning,
    #[error("the {} launches nothing: it ends with the server stopped", op_name(*.0))]
    LaunchesNothing(OpKind),
    #[error("the server is already launching; it can be stopped once it is ready")]
    Launching,
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
mod tests;
