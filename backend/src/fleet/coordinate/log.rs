//! Who takes part in a coordinated operation, and the record it writes as it goes.

use super::*;

/// One member of a coordinated restart, as its record names it.
#[derive(Debug, Clone)]
pub(in crate::fleet) struct Member {
    /// `gpu-01`, or `dsv3/gpu-01` for a group's node in a deployment.
    pub(in crate::fleet) label: String,
    pub(in crate::fleet) agent: String,
    /// Its rank, for a node of a group.
    pub(super) rank: Option<u32>,
}

impl Member {
    /// Its timeline in a new record: empty.
    pub(super) fn timeline(&self) -> shared::fleet::MemberTimeline {
        shared::fleet::MemberTimeline {
            name: self.label.clone(),
            rank: self.rank,
            agent_ops: Vec::new(),
            events: Vec::new(),
        }
    }
}

/// What `target` restarts: a group's nodes in rank order, or a deployment's
/// members in its order (a group's as its nodes); `None` for no such target.
pub(in crate::fleet) fn members(
    cfg: &FleetConfig,
    target: &str,
) -> Option<(CoordKind, Vec<Member>)> {
    let nodes = |g: &GroupConfig, prefix: &str| {
        (g.nodes.iter().enumerate())
            .map(|(rank, n)| Member {
                label: format!("{prefix}{n}"),
                agent: n.clone(),
                rank: Some(rank as u32),
            })
            .collect::<Vec<_>>()
    };
    if let Some(g) = cfg.group(target) {
        return Some((CoordKind::Group, nodes(g, "")));
    }
    let d = cfg.deployment(target)?;
    let mut out = Vec::new();
    for m in &d.order {
        match cfg.group(m) {
            Some(g) => out.extend(nodes(g, &format!("{m}/"))),
            None => out.push(Member {
                label: m.clone(),
                agent: m.clone(),
                rank: None,
            }),
        }
    }
    Some((CoordKind::Deployment, out))
}

/// The record of the operation in flight, saved whole at every event.
#[derive(Debug, Clone)]
pub(in crate::fleet) struct Log {
    pub(super) rec: Arc<Mutex<CoordRecord>>,
    pub(super) records: Records,
    /// Set when a person cancels it.
    pub(super) cancel: Arc<std::sync::atomic::AtomicBool>,
}

impl Log {
    pub(in crate::fleet) fn new(rec: CoordRecord, records: Records) -> Self {
        Self {
            rec: Arc::new(Mutex::new(rec)),
            records,
            cancel: Arc::default(),
        }
    }

    /// The same, cancelled when `flag` is set.
    pub(super) fn cancelled_by(mut self, flag: Arc<std::sync::atomic::AtomicBool>) -> Self {
        self.cancel = flag;
        self
    }

    pub(super) fn cancelled(&self) -> bool {
        self.cancel.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// At a safe point: a cancel stops the operation here, as every
    /// member's timeline says.
    pub(super) fn stop_if_cancelled(
        &self,
        members: &[usize],
        what: &str,
    ) -> Result<(), CoordFailure> {
        if !self.cancelled() {
            return Ok(());
        }
        for &m in members {
            self.event(m, CoordStep::Cancel, format!("cancelled: {what}"));
        }
        Err(CoordFailure {
            member: String::new(),
            reason: format!("cancelled by a person: {what}"),
        })
    }

    /// The record's id.
    pub(in crate::fleet) fn id(&self) -> i64 {
        self.rec.lock().unwrap_or_else(|p| p.into_inner()).id
    }

    /// Tells every member's agent that this record is done with it (best
    /// effort: a hold an agent keeps lapses on its own).
    pub(in crate::fleet) async fn release(
        &self,
        cfg: &FleetConfig,
        agents: &[String],
        person: &str,
    ) {
        let id = self.id();
        for name in agents {
            let res = match client(cfg, name, person) {
                Ok(c) => (c.post_empty(&format!("api/coordinated/{id}/release")).await)
                    .map_err(MemberError::from),
                Err(e) => Err(e),
            };
            if let Err(e) = res {
                tracing::warn!(id, agent = %name, error = %e, "cannot release the agent");
            }
        }
    }

    /// The record as it stands.
    pub(in crate::fleet) fn snapshot(&self) -> CoordRecord {
        self.rec.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    pub(super) fn with(&self, f: impl FnOnce(&mut CoordRecord)) {
        let mut rec = self.rec.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut rec);
        if let Err(e) = self.records.save(&rec) {
            tracing::error!(error = %e, id = rec.id, "cannot save the coordinated restart");
        }
    }

    pub(in crate::fleet) fn event(&self, m: usize, step: CoordStep, note: impl Into<String>) {
        let note = note.into();
        self.with(|r| {
            if let Some(t) = r.members.get_mut(m) {
                tracing::info!(id = r.id, member = %t.name, ?step, %note, "coordinated step");
                t.events.push(CoordEvent {
                    at_ms: now_ms(),
                    step,
                    note,
                });
            }
        });
    }

    pub(super) fn op(&self, m: usize, id: i64) {
        self.with(|r| {
            if let Some(t) = r.members.get_mut(m) {
                t.agent_ops.push(id);
            }
        });
    }

    /// The agent operations this record caused on member `m`.
    pub(in crate::fleet) fn ops(&self, m: usize) -> Vec<i64> {
        let rec = self.rec.lock().unwrap_or_else(|p| p.into_inner());
        rec.members
            .get(m)
            .map(|t| t.agent_ops.clone())
            .unwrap_or_default()
    }

    pub(super) fn name(&self, m: usize) -> String {
        let rec = self.rec.lock().unwrap_or_else(|p| p.into_inner());
        rec.members
            .get(m)
            .map(|t| t.name.clone())
            .unwrap_or_default()
    }

    /// A failure of member `m`: on its timeline, and as the record's failure.
    pub(super) fn failed(&self, m: usize, reason: impl std::fmt::Display) -> CoordFailure {
        let reason = reason.to_string();
        self.event(m, CoordStep::Failed, reason.clone());
        CoordFailure {
            member: self.name(m),
            reason,
        }
    }

    pub(super) fn finish(&self, failure: Option<CoordFailure>) {
        let outcome = match &failure {
            Some(_) if self.cancelled() => Outcome::Cancelled,
            Some(_) => Outcome::Failed,
            None => Outcome::Succeeded,
        };
        self.end(outcome, failure);
    }

    /// Ends the record with `outcome`, and counts it.
    pub(in crate::fleet) fn end(&self, outcome: Outcome, failure: Option<CoordFailure>) {
        let mut counted = None;
        self.with(|r| {
            r.finished_at_ms = Some(now_ms());
            r.outcome = outcome;
            tracing::info!(id = r.id, outcome = ?r.outcome, failure = ?failure, "coordinated restart ended");
            r.failure = failure;
            counted = Some((r.target.clone(), r.outcome));
        });
        if let Some((target, outcome)) = counted
            && let Err(e) = self.records.count(&target, outcome)
        {
            tracing::error!(error = %e, "cannot count the coordinated restart");
        }
    }
}
