//! The server's status as every viewer sees it, built from the machine, the
//! running server and what the manager keeps only to show ([`Shown`]), and
//! published to the hub when it changes.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use shared::ProcId;
use shared::restart::{Failure, Phase, ServerStatus};

use super::Manager;
use crate::bench::flagset;

/// What the status shows that no other part of the manager holds. Kept apart
/// from the operation's state: nothing here steers the machine.
#[derive(Debug, Default)]
pub(super) struct Shown {
    /// Why the server last failed or crashed; cleared by a launch that works.
    pub(super) failure: Option<Failure>,
    /// The server found on the port while drainwatch manages none: what an
    /// adoption would take.
    pub(super) adoptable: Option<ProcId>,
    /// Median time per phase over recent successful restarts, re-read from the
    /// store after each one is committed.
    pub(super) typical: Arc<Mutex<BTreeMap<Phase, u64>>>,
    /// The status last published: an unchanged one is not sent again.
    pub(super) last: Option<ServerStatus>,
}

impl Manager {
    /// The status as every viewer sees it: flags and their allowed values with
    /// secrets redacted (the raw flags stay here, for the next launch).
    pub(super) fn status(&self) -> ServerStatus {
        let scraped = self.scrape.read();
        let redactor = crate::redact::global();
        let running = self.running.as_ref();
        ServerStatus {
            name: self.cfg.name.clone(),
            phase: self.machine.phase(),
            phase_since_ms: self.machine.since_ms(),
            generation: self.generation,
            root: running.map(|r| r.root),
            started_at_ms: running.map(|r| r.started_at_ms),
            flags: redactor.flags(&self.flags),
            default_flags: redactor.flags(self.cfg.allow.defaults()),
            allowed: redactor.specs(self.cfg.allow.specs()),
            port: self.cfg.port,
            gpus: self.cfg.gpus.clone(),
            operation: self.op.as_ref().map(|o| o.op.clone()),
            failure: self.shown.failure.clone(),
            adoptable: self.shown.adoptable,
            typical_ms: self
                .shown
                .typical
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone(),
            log_tail: self.log.as_ref().map(|l| l.last(50)).unwrap_or_default(),
            flagset: running.map(|_| flagset::id(redactor, &self.cfg.model, &self.flags)),
            passive: scraped.passive,
            has_metrics: scraped.has_metrics,
            containment: Some(self.containment.clone()),
            origin: running.map(|r| r.origin),
            server_cgroup: running.and_then(|r| r.cgroup.clone()),
            server_contained: running.is_some_and(|r| r.contained),
            held_by: self.holds.lease().cloned(),
            spans_nodes: self.cfg.spans_nodes,
            engine: running.and(self.scrape.identity()),
            bench: self.bench.shown(),
        }
    }

    /// Publishes the status if it changed since the last one (or `force`).
    pub(super) fn publish_status(&mut self, force: bool) {
        let status = self.status();
        if force || self.shown.last.as_ref() != Some(&status) {
            self.hub.publish_server(status.clone());
            self.shown.last = Some(status);
        }
    }
}
