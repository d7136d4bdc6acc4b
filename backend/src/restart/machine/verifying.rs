//! The machine watching the host: a drain ending, the verification counting
//! clean samples, and what a failed verification names.

use super::*;

impl Machine {
    pub(super) fn observe(&mut self, obs: &Observation, now: u64, fx: &mut Vec<Effect>) {
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
    pub(super) fn count(&mut self, foreign: bool) -> u32 {
        self.streak = if self.foreign_streak == foreign {
            self.streak + 1
        } else {
            1
        };
        self.foreign_streak = foreign;
        self.streak
    }

    pub(super) fn verify(&mut self, obs: &Observation, now: u64, fx: &mut Vec<Effect>) {
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

    pub(super) fn verified(&mut self, obs: &Observation, now: u64, fx: &mut Vec<Effect>) {
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
}
