//! Campaigns: an unattended search over flag sets. A plan ([`plan`]) is
//! checked whole against the allow-list, then run step by step by one task
//! ([`runner`]) that drives the restart manager as an operator would — a
//! guarded restart to the step's flags, then its correctness check and
//! benchmark — while it holds the manager's lease, so no person's restart or
//! benchmark interleaves. Every change is recorded (the store) before the next
//! action and pushed to every client (the hub); a drainwatch killed in any
//! phase resumes the campaign at the interrupted step. What failed is
//! classified ([`outcome`]) and the failure policy decides what follows; a
//! foreign holder of GPU memory always pauses. When a campaign ends (or pauses
//! for a person) the configured webhooks hear of it ([`webhook`]).
//!
//! This module signals nothing and launches nothing itself: only the manager does.

pub mod outcome;
pub mod plan;
pub mod runner;
pub mod search;
pub mod view;
pub mod webhook;

use shared::campaign::{Campaign, CampaignAccepted, CampaignInfo};
use tokio::sync::oneshot;

use crate::restart::manager::{Mailbox, Refusal};

/// What the API asks of the runner, each with where its answer goes.
#[derive(Debug)]
pub enum CampaignCmd {
    /// Start a resolved plan (`dry_run`: only show what it would run).
    Start {
        plan: Box<plan::Resolved>,
        by: String,
        dry_run: bool,
        reply: oneshot::Sender<Result<Started, Refusal>>,
    },
    Pause {
        id: i64,
        by: String,
        reply: oneshot::Sender<Result<CampaignAccepted, Refusal>>,
    },
    Resume {
        id: i64,
        by: String,
        reply: oneshot::Sender<Result<CampaignAccepted, Refusal>>,
    },
    Cancel {
        id: i64,
        by: String,
        reply: oneshot::Sender<Result<CampaignAccepted, Refusal>>,
    },
}

/// A plan accepted: started, or (a dry run) only laid out.
#[derive(Debug)]
pub enum Started {
    Running(CampaignAccepted),
    Preview(Box<Campaign>),
}

/// The API's way to the runner.
#[derive(Debug, Clone)]
pub struct CampaignHandle {
    inbox: Mailbox<CampaignCmd>,
}

impl CampaignHandle {
    pub async fn start(
        &self,
        plan: plan::Resolved,
        by: String,
        dry_run: bool,
    ) -> Result<Started, Refusal> {
        self.inbox
            .ask(|reply| CampaignCmd::Start {
                plan: Box::new(plan),
                by,
                dry_run,
                reply,
            })
            .await
    }

    pub async fn pause(&self, id: i64, by: String) -> Result<CampaignAccepted, Refusal> {
        self.inbox
            .ask(|reply| CampaignCmd::Pause { id, by, reply })
            .await
    }

    pub async fn resume(&self, id: i64, by: String) -> Result<CampaignAccepted, Refusal> {
        self.inbox
            .ask(|reply| CampaignCmd::Resume { id, by, reply })
            .await
    }

    pub async fn cancel(&self, id: i64, by: String) -> Result<CampaignAccepted, Refusal> {
        self.inbox
            .ask(|reply| CampaignCmd::Cancel { id, by, reply })
            .await
    }
}

/// A campaign as every view shows it: secret flag values redacted.
pub fn shown(mut c: Campaign) -> Campaign {
    let r = crate::redact::global();
    for s in &mut c.steps {
        s.flags = r.flags(&s.flags);
        s.label = s.label.as_deref().map(|l| r.known(l));
        if let Some(f) = s.failure.as_mut() {
            f.message = r.known(&f.message);
        }
    }
    c.info = shown_info(c.info);
    c
}

/// A campaign's header as shown.
pub fn shown_info(mut i: CampaignInfo) -> CampaignInfo {
    let r = crate::redact::global();
    i.name = r.known(&i.name);
    i.reason = i.reason.as_deref().map(|x| r.known(x));
    i
}
