//! The campaign runner: one task that takes the API's commands one at a time
//! and drives the active campaign through the manager's handle, as an operator
//! would, while it holds the manager's lease. It reacts to the manager's events
//! (an operation or a benchmark finished); every step's change is written to
//! the store (flushed before the next restart is asked for) and pushed to the
//! hub. On start it picks up a campaign a killed drainwatch left: a step whose
//! benchmark had finished is completed from its recorded run, any other
//! interrupted step runs again.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use shared::campaign::{
    Campaign, CampaignAccepted, CampaignInfo, CampaignState, FailurePolicy, Step, StepFailure,
    StepState,
};
use shared::restart::OpKind;
use tokio::sync::{broadcast, mpsc, watch};
use tokio::time::Instant;

use super::outcome::{self, AfterRestart, AfterRun};
use super::plan::Resolved;
use super::webhook::{Event as HookEvent, Webhooks};
use super::{CampaignCmd, CampaignHandle, Started, shown, shown_info};
use crate::bench::flagset;
use crate::clock::now_ms;
use crate::config::file::ServerConfig;
use crate::hub::Hub;
use crate::restart::manager::{Event, Lease, ManagerHandle, Refusal, Request};
use crate::store::Store;

/// How long to wait before asking a busy manager again.
const BUSY_RETRY: Duration = Duration::from_millis(500);

/// What the active campaign's current step is waiting for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Doing {
    Nothing,
    /// Restart `op` of step `step` is running.
    Restart {
        step: usize,
        op: i64,
    },
    /// Step `step` is restarted; its benchmark is still to be started.
    Bench {
        step: usize,
    },
    /// Benchmark `run` of step `step` is running.
    Run {
        step: usize,
        run: i64,
    },
}

#[derive(Debug)]
struct Active {
    /// Flags raw: what the steps launch with.
    c: Campaign,
    doing: Doing,
}

/// What [`Runner::new`] needs.
#[derive(Debug)]
pub struct Parts {
    pub cfg: Arc<ServerConfig>,
    pub hub: Arc<Hub>,
    pub store: Store,
    pub manager: ManagerHandle,
    pub webhooks: Webhooks,
}

/// The campaign task.
#[derive(Debug)]
pub struct Runner {
    cfg: Arc<ServerConfig>,
    hub: Arc<Hub>,
    store: Store,
    manager: ManagerHandle,
    webhooks: Webhooks,
    rx: mpsc::Receiver<CampaignCmd>,
    events: broadcast::Receiver<Event>,
    active: Option<Active>,
    /// Ask the manager again at this time (it was busy).
    retry_at: Option<Instant>,
}

impl Runner {
    pub fn new(p: Parts) -> (Self, CampaignHandle) {
        let (tx, rx) = mpsc::channel(16);
        let events = p.manager.subscribe();
        (
            Self {
                cfg: p.cfg,
                hub: p.hub,
                store: p.store,
                manager: p.manager,
                webhooks: p.webhooks,
                rx,
                events,
                active: None,
                retry_at: None,
            },
            CampaignHandle { tx },
        )
    }

    /// Runs until `shutdown` flips; first resumes what a previous drainwatch left.
    pub async fn run(mut self, mut shutdown: watch::Receiver<bool>) {
        self.recover().await;
        loop {
            self.advance().await;
            let retry = self.retry_at;
            tokio::select! {
                Some(cmd) = self.rx.recv() => self.command(cmd).await,
                ev = self.events.recv() => match ev {
                    Ok(ev) => self.on_event(ev).await,
                    Err(broadcast::error::RecvError::Lagged(_)) => self.reconcile().await,
                    Err(broadcast::error::RecvError::Closed) => break,
                },
                _ = async { if let Some(t) = retry { tokio::time::sleep_until(t).await } else { std::future::pending().await } } => {
                    self.retry_at = None;
                }
                _ = shutdown.changed() => break,
            }
        }
        self.store.flush().await;
    }

    // ---- recovery -------------------------------------------------------

    /// Picks up the campaign a previous drainwatch left running, pausing or
    /// paused: each interrupted step is completed from its recorded run, if its
    /// benchmark had finished, or made to run again.
    async fn recover(&mut self) {
        let c = match self.store.unfinished_campaign().await {
            Ok(Some(c)) => c,
            Ok(None) => return,
            Err(e) => {
                tracing::error!(error = %e, "cannot read the unfinished campaign");
                return;
            }
        };
        let mut a = Active {
            c,
            doing: Doing::Nothing,
        };
        let id = a.c.info.id;
        for i in 0..a.c.steps.len() {
            if !matches!(
                a.c.steps[i].state,
                StepState::Restarting | StepState::Benchmarking
            ) {
                continue;
            }
            let idx = a.c.steps[i].index;
            let run = match self.store.campaign_step_run(id, idx).await {
                Ok(Some(run)) => self.store.bench_run(run).await.ok().flatten(),
                _ => None,
            };
            let s = &mut a.c.steps[i];
            match run.as_ref().map(outcome::of_run) {
                Some(AfterRun::Measured(r)) => {
                    tracing::info!(
                        campaign = id,
                        step = idx,
                        run = r.run_id,
                        "step's benchmark had finished; completed from its record"
                    );
                    s.run_id = Some(r.run_id);
                    s.result = Some(r);
                    s.failure = None;
                    s.state = StepState::Done;
                    s.finished_at_ms = s.finished_at_ms.or(Some(now_ms()));
                }
                _ => {
                    tracing::info!(
                        campaign = id,
                        step = idx,
                        "step interrupted by drainwatch's restart; it runs again"
                    );
                    s.state = StepState::Pending;
                    // The interrupted attempt was not the step's failure.
                    s.attempts = s.attempts.saturating_sub(1);
                }
            }
            self.store.campaign_step(id, s.clone());
        }
        if a.c.info.state == CampaignState::Pausing {
            a.c.info.state = CampaignState::Paused;
            a.c.info.reason = Some("paused (drainwatch restarted mid-step)".to_owned());
        }
        a.c.recount();
        self.store.campaign_info(a.c.info.clone());
        tracing::info!(
            campaign = id,
            state = a.c.info.state.label(),
            "resuming the campaign drainwatch was running"
        );
        self.active = Some(a);
        self.publish_info();
        self.lease().await;
    }

    /// After missed events: asks the store how the awaited operation or run ended.
    async fn reconcile(&mut self) {
        let Some(a) = &self.active else { return };
        match a.doing {
            Doing::Restart { op, .. } => {
                if let Ok(Some(d)) = self.store.detail(op).await
                    && d.summary.finished_at_ms.is_some()
                {
                    self.on_event(Event::OpFinished(Box::new(d.summary))).await;
                }
            }
            Doing::Run { run, .. } => {
                if let Ok(Some(r)) = self.store.bench_run(run).await
                    && r.finished_at_ms.is_some()
                {
                    self.on_event(Event::BenchFinished(Box::new(r))).await;
                }
            }
            Doing::Nothing | Doing::Bench { .. } => {}
        }
    }

    // ---- commands -------------------------------------------------------

    async fn command(&mut self, cmd: CampaignCmd) {
        match cmd {
            CampaignCmd::Start {
                plan,
                by,
                dry_run,
                reply,
            } => {
                let _ = reply.send(self.start(*plan, by, dry_run).await);
            }
            CampaignCmd::Pause { id, reply, .. } => {
                let r = self.pause(id).await;
                let _ = reply.send(r);
            }
            CampaignCmd::Resume { id, reply, .. } => {
                let r = self.resume(id).await;
                let _ = reply.send(r);
            }
            CampaignCmd::Cancel { id, reply, .. } => {
                let r = self.cancel(id).await;
                let _ = reply.send(r);
            }
        }
    }

    /// The campaign a resolved plan makes (not yet recorded: id 0).
    async fn lay_out(&self, plan: Resolved, by: String) -> Campaign {
        let redactor = crate::redact::global();
        let steps: Vec<Step> = plan
            .steps
            .into_iter()
            .enumerate()
            .map(|(i, s)| Step {
                index: i as u32,
                plan_index: s.plan_index,
                label: s.label,
                flagset: flagset::id(redactor, &self.cfg.model, &s.flags),
                flags: s.flags,
                settings: s.settings.map(campaign_settings),
                state: StepState::Pending,
                attempts: 0,
                restart_id: None,
                run_id: None,
                failure: None,
                result: None,
                started_at_ms: None,
                finished_at_ms: None,
            })
            .collect();
        let mut c = Campaign {
            info: CampaignInfo {
                id: 0,
                name: plan.name,
                state: CampaignState::Running,
                reason: None,
                requested_by: by,
                created_at_ms: now_ms(),
                finished_at_ms: None,
                order: plan.order,
                on_failure: plan.on_failure,
                reuse: plan.reuse,
                target: plan.target,
                baseline: 0,
                current: None,
                steps: 0,
                done: 0,
                reused: 0,
                failed: 0,
                skipped: 0,
                varied: plan.varied,
                step_estimate_ms: self.step_estimate().await,
            },
            bench: campaign_settings(plan.bench),
            steps,
        };
        c.recount();
        c
    }

    /// A step's likely duration before any has run: the typical restart's
    /// phases and the typical benchmark.
    async fn step_estimate(&self) -> Option<u64> {
        let restart: u64 = self
            .hub
            .server_status()
            .map(|s| s.typical_ms.values().sum())
            .unwrap_or(0);
        let bench = self.store.typical_bench_ms().await.ok().flatten();
        match (restart, bench) {
            (0, None) => None,
            (r, b) => Some(r + b.unwrap_or(0)),
        }
    }

    async fn start(
        &mut self,
        plan: Resolved,
        by: String,
        dry_run: bool,
    ) -> Result<Started, Refusal> {
        let c = self.lay_out(plan, by).await;
        if dry_run {
            return Ok(Started::Preview(Box::new(shown(c))));
        }
        if let Some(a) = &self.active
            && !a.c.info.state.is_over()
        {
            return Err(Refusal::Conflict {
                message: format!(
                    "campaign “{}” (#{}) is {}: resume or cancel it first; one campaign runs at a time",
                    a.c.info.name,
                    a.c.info.id,
                    a.c.info.state.label()
                ),
                operation: None,
            });
        }
        let mut c = c;
        c.info.id = self.store.campaign_begin(c.clone()).await.map_err(|e| {
            tracing::error!(error = %e, "cannot record the campaign");
            Refusal::Conflict {
                message: "cannot record the campaign; drainwatch's log says why".to_owned(),
                operation: None,
            }
        })?;
        tracing::info!(campaign = c.info.id, steps = c.steps.len(), name = %c.info.name, "campaign started");
        let accepted = CampaignAccepted {
            id: c.info.id,
            state: c.info.state,
        };
        self.active = Some(Active {
            c,
            doing: Doing::Nothing,
        });
        self.publish_info();
        self.lease().await;
        Ok(Started::Running(accepted))
    }

    /// The active campaign if it is `id`, or why not.
    fn active_as(&mut self, id: i64) -> Result<&mut Active, Refusal> {
        match self.active.as_mut() {
            Some(a) if a.c.info.id == id => Ok(a),
            _ => Err(Refusal::Conflict {
                message: format!("campaign #{id} is not running"),
                operation: None,
            }),
        }
    }

    async fn pause(&mut self, id: i64) -> Result<CampaignAccepted, Refusal> {
        let a = self.active_as(id)?;
        match a.c.info.state {
            CampaignState::Running => {}
            s => {
                return Err(Refusal::Conflict {
                    message: format!("campaign #{id} is {}, not running", s.label()),
                    operation: None,
                });
            }
        }
        a.c.info.state = if a.doing == Doing::Nothing {
            CampaignState::Paused
        } else {
            CampaignState::Pausing
        };
        a.c.info.reason = Some("paused by an operator".to_owned());
        let state = a.c.info.state;
        self.changed_info();
        if state == CampaignState::Paused {
            self.lease().await;
        }
        Ok(CampaignAccepted { id, state })
    }

    async fn resume(&mut self, id: i64) -> Result<CampaignAccepted, Refusal> {
        let a = self.active_as(id)?;
        if !matches!(
            a.c.info.state,
            CampaignState::Paused | CampaignState::Pausing
        ) {
            return Err(Refusal::Conflict {
                message: format!("campaign #{id} is {}, not paused", a.c.info.state.label()),
                operation: None,
            });
        }
        a.c.info.state = CampaignState::Running;
        a.c.info.reason = None;
        self.changed_info();
        self.lease().await;
        Ok(CampaignAccepted {
            id,
            state: CampaignState::Running,
        })
    }

    async fn cancel(&mut self, id: i64) -> Result<CampaignAccepted, Refusal> {
        let a = self.active_as(id)?;
        if a.c.info.state.is_over() {
            return Err(Refusal::Conflict {
                message: format!("campaign #{id} is already {}", a.c.info.state.label()),
                operation: None,
            });
        }
        a.c.info.state = CampaignState::Cancelled;
        a.c.info.reason = Some("cancelled by an operator".to_owned());
        let doing = a.doing;
        if let Doing::Run { .. } = doing
            && let Err(r) = self.manager.cancel_bench(Some(id)).await
        {
            tracing::warn!(?r, "cannot cancel the campaign's benchmark");
        }
        if let Doing::Bench { step } = doing {
            self.set_step(step, |s| {
                s.state = StepState::Skipped;
                s.finished_at_ms = Some(now_ms());
            });
            if let Some(a) = self.active.as_mut() {
                a.doing = Doing::Nothing;
            }
        }
        self.skip_pending();
        // With nothing in flight it ends now; else when the restart or run does.
        self.end_if_idle().await;
        Ok(CampaignAccepted {
            id,
            state: CampaignState::Cancelled,
        })
    }

    // ---- driving ----------------------------------------------------------

    /// Starts what comes next, if the campaign runs and nothing is in flight.
    async fn advance(&mut self) {
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
                    self.changed_info();
                    self.lease().await;
                    return;
                }
                _ => return,
            }
            let Some(i) = a.c.steps.iter().position(|s| s.state == StepState::Pending) else {
                self.finish(CampaignState::Done, None).await;
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
    async fn try_reuse(&mut self, i: usize) -> bool {
        let Some(a) = &self.active else { return false };
        let s = &a.c.steps[i];
        if !a.c.info.reuse || s.attempts > 0 {
            return false;
        }
        let settings = a.c.settings_of(s).clone();
        let version = self.server_version().await;
        let Ok(Some(run)) = self
            .store
            .reusable_run(s.flagset.clone(), settings, version)
            .await
        else {
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

    /// The server's version as the newest benchmark recorded it.
    async fn server_version(&self) -> Option<String> {
        self.store
            .bench_runs(None, 20)
            .await
            .ok()?
            .into_iter()
            .find_map(|r| r.provenance.and_then(|p| p.server_version))
    }

    async fn begin_restart(&mut self, i: usize) {
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

    async fn begin_bench(&mut self, i: usize) {
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

    async fn on_event(&mut self, ev: Event) {
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

    async fn restart_done(&mut self, i: usize, after: AfterRestart) {
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
            AfterRestart::Interrupted => {
                self.set_step(i, |s| {
                    s.state = if cancelled {
                        StepState::Skipped
                    } else {
                        StepState::Pending
                    };
                    s.attempts = s.attempts.saturating_sub(1);
                });
            }
            AfterRestart::Foreign(why) => {
                self.set_step(i, |s| {
                    s.state = if cancelled {
                        StepState::Skipped
                    } else {
                        StepState::Pending
                    };
                    s.attempts = s.attempts.saturating_sub(1);
                });
                if !cancelled {
                    self.pause_for_person(why).await;
                }
            }
            AfterRestart::Failed(f) => self.step_failed(i, f).await,
        }
        self.end_if_idle().await;
    }

    async fn run_done(&mut self, i: usize, after: AfterRun) {
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
    async fn step_failed(&mut self, i: usize, f: StepFailure) {
        let Some(a) = self.active.as_mut() else {
            return;
        };
        a.doing = Doing::Nothing;
        let policy = a.c.info.on_failure;
        let attempts = a.c.steps[i].attempts;
        let cancelled = a.c.info.state == CampaignState::Cancelled;
        let again = policy == FailurePolicy::Retry && attempts < 2 && !cancelled;
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
        if policy == FailurePolicy::Stop && !cancelled {
            let n = self.active.as_ref().map_or(0, |a| a.c.steps[i].index + 1);
            self.skip_pending();
            self.finish(
                CampaignState::Stopped,
                Some(format!(
                    "step {n} failed ({message}); the policy stops the campaign"
                )),
            )
            .await;
        }
    }

    /// A foreign process holds GPU memory: not the campaign's to resolve.
    async fn pause_for_person(&mut self, why: String) {
        let Some(a) = self.active.as_mut() else {
            return;
        };
        a.c.info.state = CampaignState::Paused;
        a.c.info.reason = Some(format!("paused: {why}; resume once it is gone"));
        self.changed_info();
        self.lease().await;
        self.notify(HookEvent::Paused);
    }

    /// Marks every pending step skipped.
    fn skip_pending(&mut self) {
        let Some(a) = &self.active else { return };
        let pending: Vec<usize> = (0..a.c.steps.len())
            .filter(|&i| a.c.steps[i].state == StepState::Pending)
            .collect();
        for i in pending {
            self.set_step(i, |s| s.state = StepState::Skipped);
        }
    }

    /// A cancelled (or stopped) campaign ends once nothing of it is in flight.
    async fn end_if_idle(&mut self) {
        let Some(a) = &self.active else { return };
        if a.doing == Doing::Nothing
            && a.c.info.state.is_over()
            && a.c.info.finished_at_ms.is_none()
        {
            let (state, reason) = (a.c.info.state, a.c.info.reason.clone());
            self.finish(state, reason).await;
        }
    }

    async fn finish(&mut self, state: CampaignState, reason: Option<String>) {
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
        self.changed_info();
        self.lease().await;
        self.store.flush().await;
        self.notify(HookEvent::Finished);
    }

    // ---- bookkeeping --------------------------------------------------------

    /// Changes step `i`, records it and pushes it.
    fn set_step(&mut self, i: usize, f: impl FnOnce(&mut Step)) {
        let Some(a) = self.active.as_mut() else {
            return;
        };
        let Some(s) = a.c.steps.get_mut(i) else {
            return;
        };
        f(s);
        let (id, step) = (a.c.info.id, s.clone());
        a.c.recount();
        self.store.campaign_step(id, step.clone());
        self.store.campaign_info(a.c.info.clone());
        let mut shown_step = step;
        let r = crate::redact::global();
        shown_step.flags = r.flags(&shown_step.flags);
        self.hub.publish_campaign_step(id, shown_step);
        self.publish_info();
    }

    /// The header changed: record it and push it.
    fn changed_info(&mut self) {
        let Some(a) = self.active.as_mut() else {
            return;
        };
        a.c.recount();
        self.store.campaign_info(a.c.info.clone());
        self.publish_info();
    }

    fn publish_info(&self) {
        if let Some(a) = &self.active {
            self.hub.publish_campaign(shown_info(a.c.info.clone()));
        }
    }

    /// Tells the manager who holds the server: the running campaign, or nobody.
    async fn lease(&self) {
        let lease = self.active.as_ref().and_then(|a| {
            let i = &a.c.info;
            (i.state.holds_server() || a.doing != Doing::Nothing).then(|| Lease {
                campaign_id: i.id,
                name: i.name.clone(),
                step: i.current.map_or(0, |c| c + 1),
                steps: i.steps,
            })
        });
        self.manager.lease(lease).await;
    }

    /// Sends the webhooks the campaign's news (in the background).
    fn notify(&self, event: HookEvent) {
        if let Some(a) = &self.active {
            self.webhooks
                .send(event, shown(a.c.clone()), self.hub.host().clone());
        }
    }
}

/// A campaign's benchmark stops at a wrong answer: nothing to measure there.
fn campaign_settings(mut s: shared::bench::BenchSettings) -> shared::bench::BenchSettings {
    s.abort_on_wrong_answer = true;
    s
}
