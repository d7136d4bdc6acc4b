//! The health gate before anything stops: a launch (restart, start) that
//! passed every other check waits here for a sample whose slow health fields
//! were read after it was asked, and is refused on that reading, with the
//! server still serving, or begun. The same gate runs again after the drain
//! (in the machine's Verifying), for whatever changed meanwhile.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use shared::Sample;
use shared::flags::Flags;
use shared::restart::Accepted;
use tokio::sync::oneshot;
use tokio::time::Instant;

use super::{Manager, Refusal, Request};
use crate::clock::now_ms;
use crate::restart::gate;
use crate::store::Store;

/// Where a request's answer goes.
pub(crate) type Reply = oneshot::Sender<Result<Accepted, Refusal>>;

/// How long a launch waits for a fresh reading of the GPUs' health before it
/// is refused as unknown (a sampler that reads every field of 8 GPUs takes
/// well under a second; a stuck one must not hold the request forever).
const FRESH_WITHIN: Duration = Duration::from_secs(10);

/// A request that passed the checks, with what accepting it needs.
#[derive(Debug)]
pub(crate) struct Parked {
    pub(super) req: Request,
    pub(super) to_flags: Flags,
    /// GPUs an operator overrode the gate on, for this launch.
    pub(super) overridden: Vec<u32>,
    /// The audit's words for that override.
    pub(super) override_note: String,
    pub(super) reply: Reply,
}

/// A launch waiting for the gate's fresh reading.
#[derive(Debug)]
pub(crate) struct Pregate {
    pub(super) parked: Parked,
    /// Slow fields read before this are too old to decide on.
    since_ms: u64,
    deadline: Instant,
}

impl Manager {
    /// Holds a launch until the next sample reads the GPUs' health afresh.
    pub(super) fn park(&mut self, parked: Parked) {
        self.health.refresh.store(true, Ordering::Relaxed);
        self.scrape.fast(true);
        self.pregate = Some(Pregate {
            parked,
            since_ms: now_ms(),
            deadline: Instant::now() + FRESH_WITHIN,
        });
    }

    /// Decides the parked launch on `sample`, once it is fresh enough.
    pub(super) async fn pregate_sample(&mut self, sample: &Sample) {
        let Some(p) = &self.pregate else { return };
        let verdict = gate::check(
            sample,
            &self.cfg.gpus,
            &self.health.history,
            &self.cfg.health,
            &p.parked.overridden,
            Some(p.since_ms),
        );
        if verdict.stale {
            return self.pregate_deadline().await;
        }
        let Some(p) = self.pregate.take() else { return };
        self.scrape.fast(self.machine.busy().is_some());
        if verdict.refuse.is_empty() {
            return self.go(p.parked).await;
        }
        let gpus: Vec<String> = verdict.refused_gpus().iter().map(u32::to_string).collect();
        // Each issue, named by its GPU where there are several.
        let lines: Vec<String> = (verdict.refuse.iter())
            .map(|i| match gpus.len() {
                1 => format!("{} ({})", i.reason.label(), i.detail),
                _ => i.line(),
            })
            .collect();
        let message = format!(
            "the health check refuses GPU {}: {}; nothing was stopped. A GPU reset or a reboot clears it; to launch anyway, type `GPU {}` as the override",
            gpus.join(", "),
            lines.join("; "),
            gpus.join(", ")
        );
        tracing::warn!(%message, "launch refused before the drain");
        let refusal = Refusal::Unhealthy {
            message,
            issues: verdict.refuse,
        };
        self.answer(
            &p.parked.req,
            Err(refusal),
            p.parked.override_note,
            p.parked.reply,
        );
    }

    /// Refuses the parked launch once no fresh reading came in time.
    pub(super) async fn pregate_deadline(&mut self) {
        if self
            .pregate
            .as_ref()
            .is_none_or(|p| Instant::now() < p.deadline)
        {
            return;
        }
        let Some(p) = self.pregate.take() else { return };
        self.scrape.fast(self.machine.busy().is_some());
        let refusal = Refusal::Conflict {
            message: format!(
                "the GPUs' health could not be read afresh within {} s; nothing was stopped; try again",
                FRESH_WITHIN.as_secs()
            ),
            operation: None,
        };
        self.answer(
            &p.parked.req,
            Err(refusal),
            p.parked.override_note,
            p.parked.reply,
        );
    }
}

/// What the health gate needs across samples.
#[derive(Debug)]
pub(super) struct HealthGate {
    pub(super) history: gate::History,
    /// Set to have the next sample read the slow fields afresh.
    pub(super) refresh: Arc<AtomicBool>,
    /// For the operation in flight: when it began (slow fields read before
    /// are too old to decide on), and the GPUs an operator overrode.
    pub(super) fresh_since_ms: Option<u64>,
    pub(super) overridden: Vec<u32>,
}

/// The gate's history: every GPU's last-launch mark, and the stored XIDs
/// each GPU has not launched past (the store keeps the newest 10,000).
/// Unreadable, it starts empty (and says so): the live samples still carry
/// every XID seen from now on.
pub(super) async fn load_health_history(store: &Store) -> gate::History {
    let marks = store.marks().await.unwrap_or_else(|e| {
        tracing::warn!(error = %e, "cannot read the GPUs' last-launch marks");
        Vec::new()
    });
    let xids = store.xids_since(0).await.unwrap_or_else(|e| {
        tracing::warn!(error = %e, "cannot read the stored XID errors");
        Vec::new()
    });
    gate::History::new(marks, xids)
}
