//! The health gate's state: its history across samples, the operation's
//! overrides, and the launch it holds before anything stops. A launch
//! (restart, start) that passed every other check waits here for a sample
//! whose slow health fields were read after it was asked, and is refused on
//! that reading, with the server still serving, or begun. The same gate runs
//! again after the drain (in the machine's Verifying), for whatever changed
//! meanwhile.
//!
//! The gate decides; the manager acts on its [`Decision`]s.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use shared::Sample;
use shared::flags::Flags;
use shared::restart::{Accepted, OpKind};
use tokio::sync::oneshot;
use tokio::time::Instant;

use super::{Refusal, Request};
use crate::clock::now_ms;
use crate::config::file::ServerConfig;
use crate::restart::gate;
use crate::store::{HealthMark, Store};

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
struct Waiting {
    parked: Parked,
    /// Slow fields read before this are too old to decide on.
    since_ms: u64,
    deadline: Instant,
}

/// What the gate decided on a held launch: begin it (`refusal` none) or
/// answer it with the refusal. Nothing has stopped either way.
#[derive(Debug)]
pub(super) struct Decision {
    pub(super) parked: Parked,
    pub(super) refusal: Option<Refusal>,
}

/// What the health gate needs across samples.
#[derive(Debug)]
pub(super) struct HealthGate {
    history: gate::History,
    /// Set to have the next sample read the slow fields afresh.
    refresh: Arc<AtomicBool>,
    /// For the operation in flight: when it began (slow fields read before
    /// are too old to decide on), and the GPUs an operator overrode.
    fresh_since_ms: Option<u64>,
    overridden: Vec<u32>,
    /// The launch waiting for a fresh reading, if one is.
    waiting: Option<Waiting>,
}

impl HealthGate {
    /// The gate with its history: every GPU's last-launch mark, and the
    /// stored XIDs each GPU has not launched past (the store keeps the newest
    /// 10,000). Unreadable, it starts empty (and says so): the live samples
    /// still carry every XID seen from now on.
    pub(super) async fn load(store: &Store, refresh: Arc<AtomicBool>) -> Self {
        let marks = store.marks().await.unwrap_or_else(|e| {
            tracing::warn!(error = %e, "cannot read the GPUs' last-launch marks");
            Vec::new()
        });
        let xids = store.xids_since(0).await.unwrap_or_else(|e| {
            tracing::warn!(error = %e, "cannot read the stored XID errors");
            Vec::new()
        });
        Self {
            history: gate::History::new(marks, xids),
            refresh,
            fresh_since_ms: None,
            overridden: Vec::new(),
            waiting: None,
        }
    }

    /// Holds a launch until the next sample reads the GPUs' health afresh.
    pub(super) fn park(&mut self, parked: Parked) {
        self.refresh.store(true, Ordering::Relaxed);
        self.waiting = Some(Waiting {
            parked,
            since_ms: now_ms(),
            deadline: Instant::now() + FRESH_WITHIN,
        });
    }

    /// The kind of launch waiting for the gate, if one is.
    pub(super) fn waiting(&self) -> Option<OpKind> {
        self.waiting.as_ref().map(|w| w.parked.req.kind)
    }

    /// Decides the held launch on `sample`, once it is fresh enough (or once
    /// no fresh reading came in time).
    pub(super) fn decide(&mut self, sample: &Sample, cfg: &ServerConfig) -> Option<Decision> {
        let w = self.waiting.as_ref()?;
        let verdict = gate::check(
            sample,
            &cfg.gpus,
            &self.history,
            &cfg.health,
            &w.parked.overridden,
            Some(w.since_ms),
        );
        if verdict.stale {
            return self.expired();
        }
        let parked = self.waiting.take()?.parked;
        if verdict.refuse.is_empty() {
            return Some(Decision {
                parked,
                refusal: None,
            });
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
        Some(Decision {
            parked,
            refusal: Some(Refusal::Unhealthy {
                message,
                issues: verdict.refuse,
            }),
        })
    }

    /// Refuses the held launch once no fresh reading came in time.
    pub(super) fn expired(&mut self) -> Option<Decision> {
        if self
            .waiting
            .as_ref()
            .is_none_or(|w| Instant::now() < w.deadline)
        {
            return None;
        }
        let parked = self.waiting.take()?.parked;
        Some(Decision {
            parked,
            refusal: Some(Refusal::Conflict {
                message: format!(
                    "the GPUs' health could not be read afresh within {} s; nothing was stopped; try again",
                    FRESH_WITHIN.as_secs()
                ),
                operation: None,
            }),
        })
    }

    /// The gate's verdict on `sample` now, with no override and whatever its
    /// age: what an override must name.
    pub(super) fn now(&self, sample: &Sample, cfg: &ServerConfig) -> gate::Verdict {
        gate::check(sample, &cfg.gpus, &self.history, &cfg.health, &[], None)
    }

    /// The gate's verdict after the drain, for the operation in flight.
    pub(super) fn verify(&self, sample: &Sample, cfg: &ServerConfig) -> gate::Verdict {
        gate::check(
            sample,
            &cfg.gpus,
            &self.history,
            &cfg.health,
            &self.overridden,
            self.fresh_since_ms,
        )
    }

    /// An operation begins at `now`: the gate decides on slow fields read
    /// after it, with `overridden`'s GPUs let through.
    pub(super) fn begin(&mut self, now: u64, overridden: Vec<u32>) {
        self.fresh_since_ms = Some(now);
        self.overridden = overridden;
        self.refresh.store(true, Ordering::Relaxed);
    }

    /// The operation ended; a launch that succeeded marks its GPUs
    /// (`launched`: the latest sample then), and the marks come back to be
    /// stored.
    pub(super) fn end(
        &mut self,
        launched: Option<&Sample>,
        cfg: &ServerConfig,
        now: u64,
    ) -> Vec<HealthMark> {
        self.fresh_since_ms = None;
        self.overridden.clear();
        launched.map_or_else(Vec::new, |s| self.history.mark(s, &cfg.gpus, now))
    }
}
