//! The API's commands: a plan laid out and started (or only laid out), pause,
//! resume and cancel of the active campaign.

use shared::campaign::{Campaign, CampaignAccepted, CampaignInfo, CampaignState, Step, StepState};

use super::{Active, Doing, Runner, campaign_settings};
use crate::bench::flagset;
use crate::campaign::plan::Resolved;
use crate::campaign::{CampaignCmd, Started, shown};
use crate::clock::now_ms;
use crate::restart::manager::Refusal;

impl Runner {
    pub(super) async fn command(&mut self, cmd: CampaignCmd) {
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
    pub(super) async fn lay_out(&self, plan: Resolved, by: String) -> Campaign {
        let redactor = crate::redact::global();
        let steps: Vec<Step> = plan
            .steps
            .into_iter()
            .enumerate()
            .map(|(i, s)| Step {
                flagset: flagset::id(redactor, &self.cfg.model, &s.flags),
                flags: s.flags,
                settings: s.settings.map(campaign_settings),
                ..super::search::pending(i as u32, s.plan_index, s.label)
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
    pub(super) async fn step_estimate(&self) -> Option<u64> {
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

    pub(super) async fn start(
        &mut self,
        plan: Resolved,
        by: String,
        dry_run: bool,
    ) -> Result<Started, Refusal> {
        let search = plan.search.clone();
        let mut c = self.lay_out(plan, by).await;
        if let Some(plan) = &search {
            super::search::first_step(&self.cfg, plan, &mut c);
        }
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
        let kept = search.as_ref().and_then(|s| serde_json::to_value(s).ok());
        c.info.id = self
            .store
            .campaign_begin(c.clone(), kept)
            .await
            .map_err(|e| {
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
            search,
        });
        self.publish_info();
        self.lease().await;
        Ok(Started::Running(accepted))
    }

    /// The active campaign if it is `id`, or why not.
    pub(super) fn active_as(&mut self, id: i64) -> Result<&mut Active, Refusal> {
        match self.active.as_mut() {
            Some(a) if a.c.info.id == id => Ok(a),
            _ => Err(Refusal::Conflict {
                message: format!("campaign #{id} is not running"),
                operation: None,
            }),
        }
    }

    pub(super) async fn pause(&mut self, id: i64) -> Result<CampaignAccepted, Refusal> {
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
        if state == CampaignState::Paused {
            self.settled_info().await;
            self.lease().await;
        } else {
            self.changed_info();
        }
        Ok(CampaignAccepted { id, state })
    }

    pub(super) async fn resume(&mut self, id: i64) -> Result<CampaignAccepted, Refusal> {
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

    pub(super) async fn cancel(&mut self, id: i64) -> Result<CampaignAccepted, Refusal> {
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
        // A restart stops before its launch; one already launching ends
        // ready, and its step is skipped.
        if let Doing::Restart { .. } = doing
            && let Err(r) = self.manager.cancel_op(Some(id)).await
        {
            tracing::info!(why = r.message(), "the step's restart goes on to its end");
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
}
