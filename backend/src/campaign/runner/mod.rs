//! The campaign runner: one task that takes the API's commands one at a time
//! and drives the active campaign through the manager's handle, as an operator
//! would, while it holds the manager's lease. It reacts to the manager's events
//! (an operation or a benchmark finished); every step's change is written to
//! the store (flushed before the next restart is asked for) and pushed to the
//! hub. On start it picks up a campaign a killed drainwatch left: a step whose
//! benchmark had finished is completed from its recorded run, any other
//! interrupted step runs again.
//!
//! Here: the task, its recovery and its bookkeeping; [`commands`] what the
//! API asks; [`steps`] how a step is driven and ends.

mod commands;
mod search;
mod steps;

use std::sync::Arc;
use std::time::Duration;

use shared::campaign::{Campaign, CampaignState, Step, StepState};
use tokio::sync::{broadcast, mpsc, watch};
use tokio::time::Instant;

use super::outcome::{self, AfterRun};
use super::webhook::{Event as HookEvent, Webhooks};
use super::{CampaignCmd, CampaignHandle, shown, shown_info};
use crate::clock::now_ms;
use crate::config::file::ServerConfig;
use crate::hub::Hub;
use crate::restart::manager::Mailbox;
use crate::restart::manager::{Event, Lease, ManagerHandle};
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
    /// How a campaign that does not walk its grid chooses its next steps.
    search: Option<crate::campaign::search::SearchPlan>,
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
            CampaignHandle {
                inbox: Mailbox::new(tx),
            },
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
        let id = c.info.id;
        let search = match self.store.campaign_search(id).await {
            Ok(v) => v.and_then(|v| serde_json::from_value(v).ok()),
            Err(e) => {
                tracing::error!(error = %e, "cannot read the campaign's search");
                None
            }
        };
        let mut a = Active {
            c,
            doing: Doing::Nothing,
            search,
        };
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

    /// As [`Self::changed_info`] for a state a reader acts on (paused, or
    /// over): committed before it is pushed, so that whoever reads the
    /// campaign after the push (the CLI that followed it, to print its table
    /// and choose its exit code) reads that state, never the one before.
    async fn settled_info(&mut self) {
        let Some(a) = self.active.as_mut() else {
            return;
        };
        a.c.recount();
        self.store.campaign_info(a.c.info.clone());
        self.store.flush().await;
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
