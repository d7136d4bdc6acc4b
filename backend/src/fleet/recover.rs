//! A hub that stopped in the middle of a coordinated restart (killed, the
//! host rebooted): on its next start, each record it left running is taken
//! up again before any new operation may begin. Every member's agent is
//! asked what it did — each operation the record caused there, and where its
//! server stands now — and the answers go on the member's timeline. Then the
//! stated policy brings the members to a known state: **stop and verify
//! every node** (a launch is never finished blind: the flags asked for are
//! recorded redacted, and half a group serves nothing). The record ends
//! interrupted, naming what was found and done.

use shared::fleet::{CoordFailure, CoordKind, CoordRecord, CoordStep};
use shared::restart::Outcome;

use super::coordinate::{Coordinator, Log, client, drain, state, summary, verify};

/// What the hub does with a member of an operation it was killed during.
pub(super) const POLICY: &str = "stop and verify every node";

impl Coordinator {
    /// Holds the hub's one operation slot for the recovery of `unfinished`
    /// (the records a stopped hub left running), before the hub serves: no
    /// new coordinated restart begins, and no change reaches their agents
    /// through the hub, until it is done. `None` when there is nothing to do.
    pub fn begin_recovery(
        &self,
        unfinished: &[CoordRecord],
    ) -> Option<tokio::sync::OwnedMutexGuard<()>> {
        let first = unfinished.first()?;
        let guard = self.busy_lock().try_lock_owned().ok()?;
        self.set_acting_on(Some((first.id, self.member_agents(first))));
        Some(guard)
    }

    /// Takes up every record a stopped hub left running, one after another,
    /// holding `guard` (from [`Coordinator::begin_recovery`]) throughout.
    pub async fn recover(
        &self,
        unfinished: Vec<CoordRecord>,
        guard: tokio::sync::OwnedMutexGuard<()>,
    ) {
        let n = unfinished.len();
        for (i, rec) in unfinished.iter().enumerate() {
            let id = rec.id;
            self.set_acting_on(Some((id, self.member_agents(rec))));
            tracing::warn!(id, target = %rec.target, "taking up a coordinated restart the hub stopped during");
            let log = Log::new(rec.clone(), self.records().clone());
            let failure = recover_one(self, &log).await;
            let next =
                (i + 1 < n).then(|| (unfinished[i + 1].id, self.member_agents(&unfinished[i + 1])));
            self.end_acting(&log, Outcome::Interrupted, Some(failure), next);
        }
        drop(guard);
    }
}

/// Asks, records, stops and verifies each member of `log`'s record; what
/// the record ends with.
async fn recover_one(coord: &Coordinator, log: &Log) -> CoordFailure {
    let rec = log.snapshot();
    let cfg = coord.config();
    let person = format!("{} (hub recovery)", rec.requested_by);
    let members = super::coordinate::members(cfg, &rec.target)
        .map(|(_, m)| m)
        .unwrap_or_default();
    let mut troubles = Vec::new();
    for (m, member) in members.iter().enumerate() {
        if m >= rec.members.len() {
            break;
        }
        let c = match client(cfg, &member.agent, &person) {
            Ok(c) => c,
            Err(e) => {
                log.event(m, CoordStep::Recover, format!("cannot ask its agent: {e}"));
                troubles.push(format!("`{}`: {e}", member.label));
                continue;
            }
        };
        // What it did for this record: each operation and how it ended.
        let mut said = Vec::new();
        for op in log.ops(m) {
            said.push(match summary(&c, op).await {
                Ok(s) => format!(
                    "#{op} ({}) {}",
                    super::coordinate::op_word(s.kind),
                    outcome_word(s.outcome)
                ),
                Err(e) => format!("#{op}: {e}"),
            });
        }
        let now = match state(&c).await {
            Ok((_, sv)) => format!(
                "its server {} (generation {}{})",
                sv.phase.label(),
                sv.generation,
                sv.operation
                    .as_ref()
                    .map(|o| format!(", #{} running", o.id))
                    .unwrap_or_default()
            ),
            Err(e) => format!("its agent cannot be reached: {e}"),
        };
        let did = if said.is_empty() {
            "nothing done there yet".to_owned()
        } else {
            format!("its agent did {}", said.join(", "))
        };
        log.event(
            m,
            CoordStep::Recover,
            format!("the hub stopped during the operation; {did}; {now}; policy: {POLICY}"),
        );
        // Stop (waiting for an operation of this record's own that a stop
        // may not cut short yet) and verify.
        let timeout = group_of(coord, &rec, m)
            .map_or(std::time::Duration::from_secs(60), |g| g.verify_timeout);
        let tolerance = group_of(coord, &rec, m).map_or(0, |g| g.tolerance_bytes);
        let res = match drain(log, m, &c, CoordStep::Recover).await {
            Ok(()) => verify(log, m, &c, timeout, tolerance, CoordStep::Recover).await,
            Err(e) => Err(e),
        };
        if let Err(e) = res {
            log.event(
                m,
                CoordStep::Recover,
                format!("not brought to a known state: {e}"),
            );
            troubles.push(format!("`{}`: {e}", member.label));
        }
    }
    // Let go of the nodes, then end the record.
    let agents = coord.member_agents(&rec);
    log.release(cfg, &agents, &person).await;
    let reason = if troubles.is_empty() {
        format!(
            "the hub stopped during the operation; on its restart every node was stopped and verified ({POLICY})"
        )
    } else {
        format!(
            "the hub stopped during the operation; on its restart not every node could be stopped and verified: {}",
            troubles.join("; ")
        )
    };
    CoordFailure {
        member: String::new(),
        reason,
    }
}

/// The group member `m` of `rec` belongs to, if it is a group's node.
fn group_of<'a>(
    coord: &'a Coordinator,
    rec: &CoordRecord,
    m: usize,
) -> Option<&'a super::config::GroupConfig> {
    let cfg = coord.config();
    match rec.kind {
        CoordKind::Group => cfg.group(&rec.target),
        CoordKind::Deployment => {
            let name = rec.members.get(m)?.name.split_once('/')?.0.to_owned();
            cfg.group(&name)
        }
    }
}

fn outcome_word(o: Outcome) -> &'static str {
    match o {
        Outcome::Running => "still running",
        Outcome::Succeeded => "succeeded",
        Outcome::Failed => "failed",
        Outcome::Interrupted => "was interrupted",
        Outcome::Cancelled => "was cancelled",
    }
}
