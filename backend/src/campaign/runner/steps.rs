//! Driving the active campaign: the next step begun (reused, restarted),
//! its benchmark once the restart is ready, the manager's events turned into
//! the step's outcome, the failure policy, the campaign's end.

use std::collections::BTreeMap;

use shared::campaign::{CampaignState, FailurePolicy, StepFailure, StepState};
use shared::restart::OpKind;
use tokio::time::Instant;

use super::{BUSY_RETRY, Doing, Runner};
use crate::campaign::outcome::{self, AfterRestart, AfterRun};
use crate::campaign::webhook::Event as HookEvent;
use crate::clock::now_ms;
use crate::restart::manager::{Event, Refusal, Request};

impl Runner {
    /// Starts what comes next, if the campaign runs and nothing is in flight.
    pub(super) async fn advance(&mut self) {
        loop {
            if self.retry_at.is_some() {
                return;
            }
            let Some(a) = self.active.as_mut() else {
                return;
            };
            match a.doing {
                Doing::Bench { step } => {
                    if a.c.info.state.holds_server() {
                        self.begin_bench(step).await;
                    }
                    return;
                }
                Doing::Restart { .. } | Doing::Run { .. } => return,
                Doing::Nothing => {}
            }
            match a.c.info.state {
                CampaignState::Running => {}
                CampaignState::Pausing => {
                    a.c.info.state = CampaignState::Paused;
                    self.settled_info().await;
                    self.lease().await;
                    return;
                }
                _ => return,
            }
            let Some(i) = a.c.steps.iter().position(|s| s.state == StepState::Pending) else {
                match self.extend_search() {
                    super::search::Extended::Added(_) => continue,
                    super::search::Extended::Over(words) => {
                        self.finish(CampaignState::Done, words).await
                    }
                }
                return;
            };
            if a.c.info.current != Some(a.c.steps[i].index) {
                a.c.info.current = Some(a.c.steps[i].index);
                self.changed_info();
                self.lease().await;
            }
            if self.try_reuse(i).await {
                continue;
            }
            self.begin_restart(i).await;
            return;
        }
    }

    /// Completes step `i` from an earlier run, where the campaign reuses and one fits.
    pub(super) async fn try_reuse(&mut self, i: usize) -> bool {
        let Some(a) = &self.active else { return false };
        let s = &a.c.steps[i];
        // A search's re-test measures its set again: that is its point.
        let retest = crate::campaign::search::steps::is_retest(&a.c.steps, i);
        if !a.c.info.reuse || s.attempts > 0 || retest {
            return false;
        }
        let settings = a.c.settings_of(s).clone();
        let flagset = s.flagset.clone();
        // An unknown version matches nothing: measured again.
        let Some(version) = self.server_version().await else {
            tracing::info!(
                step = s.index,
                "the server's version is unknown: nothing is reused"
            );
            return false;
        };
        let Ok(Some(run)) = self.store.reusable_run(flagset, settings, version).await else {
            return false;
        };
        let Some(result) = outcome::result(&run) else {
            return false;
        };
        tracing::info!(step = s.index, run = run.id, "reusing an earlier result");
        let now = now_ms();
        self.set_step(i, |s| {
            s.state = StepState::Reused;
            s.result = Some(result);
            s.started_at_ms = Some(now);
            s.finished_at_ms = Some(now);
        });
        true
    }

    /// The server's version, as the running server says it now (SGLang's
    /// `/get_server_info`, vLLM's `/version`, llama.cpp's `/props`). Never
    /// one taken from history: a server upgraded while it was down must not
    /// reuse what the old one measured. `None` when no server is up or it
    /// does not say.
    pub(super) async fn server_version(&self) -> Option<String> {
        let up = self
            .hub
            .server_status()
            .is_some_and(|s| s.phase == shared::restart::Phase::Ready);
        if !up {
            return None;
        }
        let target = crate::bench::load::Target {
            base_url: self.cfg.base_url.clone(),
            api: self.cfg.bench.defaults.api,
            model: self.cfg.bench.request_model.clone(),
            api_key: self.cfg.api_key.clone(),
            tokenizer: None,
            engine: self.cfg.engine,
        };
        let client = crate::bench::load::client(1);
        crate::bench::server_version(&client, &target).await.0
    }

    pub(super) async fn begin_restart(&mut self, i: usize) {
        let Some(a) = &self.active else { return };
        let s = &a.c.steps[i];
        // Every allow-listed flag to the step's value (absent: the config's).
        let flags: BTreeMap<String, Option<String>> = self
            .cfg
            .allow
            .specs()
            .iter()
            .map(|f| (f.name.clone(), s.flags.get(&f.name).cloned()))
            .collect();
        let generation = self.hub.server_status().map_or(0, |st| st.generation);
        let req = Request {
            kind: OpKind::Restart,
            generation,
            confirm: self.cfg.name.clone(),
            flags,
            contain: false,
            peer: format!(
                "campaign #{} step {} ({})",
                a.c.info.id,
                s.index + 1,
                a.c.info.requested_by
            ),
            campaign: Some(a.c.info.id),
            override_health: None,
            node: None,
            coordinated: None,
        };
        match self.manager.submit(req).await {
            Ok(accepted) => {
                let now = now_ms();
                self.set_step(i, |s| {
                    s.state = StepState::Restarting;
                    s.attempts += 1;
                    s.restart_id = Some(accepted.id);
                    s.started_at_ms = s.started_at_ms.or(Some(now));
                });
                if let Some(a) = self.active.as_mut() {
                    a.doing = Doing::Restart {
                        step: i,
                        op: accepted.id,
                    };
                }
                self.store.flush().await;
            }
            // The server changed or is busy (a person's operation ending, a
            // benchmark started before the campaign): ask again shortly.
            Err(Refusal::Stale(_)) | Err(Refusal::Conflict { .. }) => {
                self.retry_at = Some(Instant::now() + BUSY_RETRY);
            }
            // Refused before anything stopped: the server still serves
            // the last step's flags, and a person decides.
            Err(Refusal::Unhealthy { issues, .. }) => {
                let lines: Vec<String> = issues.iter().map(|i| i.line()).collect();
                let why = format!(
                    "paused: the health check refused the restart before anything stopped ({}); the server still serves; resume once the GPU is reset",
                    lines.join("; ")
                );
                self.pause_for_person(why).await;
            }
            Err(Refusal::BadRequest(m)) => {
                self.step_failed(
                    i,
                    StepFailure {
                        kind: shared::campaign::FailureKind::LaunchFailed,
                        message: m,
                    },
                )
                .await;
            }
        }
    }

    pub(super) async fn begin_bench(&mut self, i: usize) {
        let Some(a) = &self.active else { return };
        let s = &a.c.steps[i];
        let settings = a.c.settings_of(s).clone();
        let tag = (a.c.info.id, s.index);
        let by = format!(
            "campaign #{} step {} ({})",
            a.c.info.id,
            s.index + 1,
            a.c.info.requested_by
        );
        match self.manager.bench_for(settings, by, tag).await {
            Ok(run) => {
                self.set_step(i, |s| {
                    s.state = StepState::Benchmarking;
                    s.run_id = Some(run);
                });
                if let Some(a) = self.active.as_mut() {
                    a.doing = Doing::Run { step: i, run };
                }
            }
            Err(Refusal::BadRequest(m)) => {
                if let Some(a) = self.active.as_mut() {
                    a.doing = Doing::Nothing;
                }
                self.step_failed(
                    i,
                    StepFailure {
                        kind: shared::campaign::FailureKind::BenchFailed,
                        message: m,
                    },
                )
                .await;
            }
            Err(_) => self.retry_at = Some(Instant::now() + BUSY_RETRY),
        }
    }

    pub(super) async fn on_event(&mut self, ev: Event) {
        let Some(a) = &self.active else { return };
        match (a.doing, ev) {
            (Doing::Restart { step, op }, Event::OpFinished(r)) if r.id == op => {
                self.restart_done(step, outcome::of_restart(&r)).await;
            }
            (Doing::Run { step, run }, Event::BenchFinished(r)) if r.id == run => {
                self.run_done(step, outcome::of_run(&r)).await;
            }
            _ => {}
        }
    }

    pub(super) async fn restart_done(&mut self, i: usize, after: AfterRestart) {
        let Some(a) = self.active.as_mut() else {
            return;
        };
        a.doing = Doing::Nothing;
        let cancelled = a.c.info.state == CampaignState::Cancelled;
        match after {
            AfterRestart::Ready if cancelled => {
                self.set_step(i, |s| {
                    s.state = StepState::Skipped;
                    s.finished_at_ms = Some(now_ms());
                });
            }
            AfterRestart::Ready => {
                a.doing = Doing::Bench { step: i };
                self.begin_bench(i).await;
            }
            // Not the step's failure: it runs again (unless the campaign is
            // cancelled), and this attempt does not count.
            AfterRestart::Interrupted | AfterRestart::Foreign(_) => {
                self.set_step(i, |s| {
                    s.state = if cancelled {
                        StepState::Skipped
                    } else {
                        StepState::Pending
                    };
                    s.attempts = s.attempts.saturating_sub(1);
                });
                if let (AfterRestart::Foreign(why), false) = (after, cancelled) {
                    self.pause_for_person(format!("paused: {why}; resume once it is gone"))
                        .await;
                }
            }
            AfterRestart::Failed(f) => self.step_failed(i, f).await,
        }
        self.end_if_idle().await;
    }

    pub(super) async fn run_done(&mut self, i: usize, after: AfterRun) {
        let Some(a) = self.active.as_mut() else {
            return;
        };
        a.doing = Doing::Nothing;
        let cancelled = a.c.info.state == CampaignState::Cancelled;
        let now = now_ms();
        match after {
            AfterRun::Measured(r) => self.set_step(i, |s| {
                s.state = StepState::Done;
                s.result = Some(r);
                s.failure = None;
                s.finished_at_ms = Some(now);
            }),
            AfterRun::Failed(f) => self.step_failed(i, f).await,
            AfterRun::Stopped => self.set_step(i, |s| {
                s.state = if cancelled {
                    StepState::Skipped
                } else {
                    StepState::Pending
                };
                s.finished_at_ms = cancelled.then_some(now);
            }),
        }
        self.end_if_idle().await;
    }

    /// A step failed: the policy decides what follows.
    pub(super) async fn step_failed(&mut self, i: usize, f: StepFailure) {
        let Some(a) = self.active.as_mut() else {
            return;
        };
        a.doing = Doing::Nothing;
        let policy = a.c.info.on_failure;
        let attempts = a.c.steps[i].attempts;
        let cancelled = a.c.info.state == CampaignState::Cancelled;
        // No restart fixes what needs a person: never again, and the night ends.
        let person = f.kind == shared::campaign::FailureKind::NeedsPerson;
        let again = policy == FailurePolicy::Retry && attempts < 2 && !cancelled && !person;
        tracing::warn!(step = a.c.steps[i].index, failure = %f.message, again, "campaign step failed");
        let message = f.message.clone();
        let now = now_ms();
        self.set_step(i, |s| {
            s.failure = Some(f);
            if again {
                s.state = StepState::Pending;
            } else {
                s.state = StepState::Failed;
                s.finished_at_ms = Some(now);
            }
        });
        if (policy == FailurePolicy::Stop || person) && !cancelled {
            let n = self.active.as_ref().map_or(0, |a| a.c.steps[i].index + 1);
            self.skip_pending();
            let why = if person {
                "no restart can fix it, so the campaign stops whatever its failure policy"
            } else {
                "the policy stops the campaign"
            };
            self.finish(
                CampaignState::Stopped,
                Some(format!("step {n} failed ({message}); {why}")),
            )
            .await;
        }
    }

    /// A foreign process holds GPU memory, or a GPU is unhealthy: not the
    /// campaign's to resolve. `reason` says why and what a person does.
    pub(super) async fn pause_for_person(&mut self, reason: String) {
        let Some(a) = self.active.as_mut() else {
            return;
        };
        a.c.info.state = CampaignState::Paused;
        a.c.info.reason = Some(reason);
        self.settled_info().await;
        self.lease().await;
        self.notify(HookEvent::Paused);
    }

    /// Marks every pending step skipped.
    pub(super) fn skip_pending(&mut self) {
        let Some(a) = &self.active else { return };
        let pending: Vec<usize> = (0..a.c.steps.len())
            .filter(|&i| a.c.steps[i].state == StepState::Pending)
            .collect();
        for i in pending {
            self.set_step(i, |s| s.state = StepState::Skipped);
        }
    }

    /// A cancelled (or stopped) campaign ends once nothing of it is in flight.
    pub(super) async fn end_if_idle(&mut self) {
        let Some(a) = &self.active else { return };
        if a.doing == Doing::Nothing
            && a.c.info.state.is_over()
            && a.c.info.finished_at_ms.is_none()
        {
            let (state, reason) = (a.c.info.state, a.c.info.reason.clone());
            self.finish(state, reason).await;
        }
    }

    pub(super) async fn finish(&mut self, state: CampaignState, reason: Option<String>) {
        let Some(a) = self.active.as_mut() else {
            return;
        };
        if a.doing != Doing::Nothing {
            // Stopped while something runs: it ends when that does.
            a.c.info.state = state;
            a.c.info.reason = reason;
            self.changed_info();
            return;
        }
        a.c.info.state = state;
        a.c.info.reason = reason;
        a.c.info.current = None;
        a.c.info.finished_at_ms = Some(now_ms());
        tracing::info!(
            campaign = a.c.info.id,
            state = state.label(),
            "campaign ended"
        );
        // Committed, then pushed: a client told that the campaign ended reads it ended.
        self.settled_info().await;
        self.lease().await;
        self.notify(HookEvent::Finished);
    }
}
