//! Coordinated restarts, run by the hub through each agent's own API: every
//! signal is sent by the agent that owns the process, under its containment
//! and guards; the hub only orders the steps and proves each one from the
//! agents' samples.
//!
//! A group (one server that spans nodes):
//! 1. drain every node at once (each agent stops its own server: SIGTERM,
//!    SIGKILL after its drain timeout, then its own verification);
//! 2. verify every node again from a sample newer than the drain: no process
//!    of its server, no process at all on its GPUs, every GPU at its idle
//!    baseline. Nothing is launched anywhere until every node passes;
//! 3. launch rank 0, and wait until it is spawned;
//! 4. launch the other ranks (each with its `{node_rank}`);
//! 5. ready only when rank 0's agent got a real completion back through it.
//!
//! Any failure names its node and reason; once anything was launched, every
//! node is stopped and verified again (a stop cuts short a launch still
//! warming up). A deployment restarts its members one after another in its
//! declared order, each with its own guarded restart (a group as above), and
//! stops at the first that fails.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::future::join_all;
use shared::Snapshot;
use shared::fleet::{CoordEvent, CoordFailure, CoordKind, CoordRecord, CoordRequest, CoordStep};
use shared::restart::{
    Accepted, ConfirmRequest, NodeRole, Outcome, Phase, RestartDetail, RestartRequest,
    RestartSummary, ServerStatus,
};

use super::config::{FleetConfig, GroupConfig};
use crate::cli::client::Client;
use crate::clock::now_ms;
use crate::store::hub::Records;

/// How often an agent is asked while waiting on it.
const POLL: Duration = Duration::from_millis(200);
/// The longest the hub waits for one agent operation (a drain or a
/// single-server restart): each agent bounds its own phases well below this.
const OP_LIMIT: Duration = Duration::from_secs(3600);
/// How long an unwind waits for an operation of this record's own on a node
/// that a stop may not cut short yet (a start still verifying).
const UNWIND_WAIT: Duration = Duration::from_secs(600);

/// Flag changes: a value sets a flag, `None` resets it to the config's.
use shared::flags::Changes;

/// Why a coordinated restart was not begun. Nothing was touched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refused {
    NotFound(String),
    BadRequest(String),
    Busy(String),
    /// A member's agent cannot be reached.
    Unreachable(String),
    Internal(String),
}

/// Runs one coordinated operation at a time.
#[derive(Debug)]
pub struct Coordinator {
    cfg: Arc<FleetConfig>,
    records: Records,
    /// Held by the operation in flight.
    busy: Arc<tokio::sync::Mutex<()>>,
    /// The operation in flight and the agents it acts on: what others may
    /// not change through the hub meanwhile.
    acting_on: Arc<Mutex<Option<ActingOn>>>,
    /// Set to cancel the operation in flight at its next safe point.
    cancel: Arc<std::sync::atomic::AtomicBool>,
}

/// A coordinated restart's record id and the agents it acts on.
type ActingOn = (i64, Vec<String>);

/// A restart request as asked of `target` (a `kind`): its flag changes
/// read from the typed text when they came so, the name typed to confirm,
/// no flags for a deployment, at most 64 changes.
fn checked(mut req: CoordRequest, target: &str, kind: CoordKind) -> Result<CoordRequest, Refused> {
    if let Some(text) = req.flags_text.take() {
        if !req.flags.is_empty() {
            return Err(Refused::BadRequest(
                "send flags or flags_text, not both".to_owned(),
            ));
        }
        req.flags = shared::fleet::parse_flags_text(&text)
            .map_err(|e| Refused::BadRequest(format!("flags: {e}")))?;
    }
    if req.confirm.trim() != target {
        return Err(Refused::BadRequest(format!(
            "type the name, `{target}`, to confirm"
        )));
    }
    if kind == CoordKind::Deployment && !req.flags.is_empty() {
        return Err(Refused::BadRequest(
            "a deployment restarts each member with its own flags: send no flags".to_owned(),
        ));
    }
    if req.flags.len() > 64 {
        return Err(Refused::BadRequest("at most 64 flag changes".to_owned()));
    }
    Ok(req)
}

impl Coordinator {
    pub fn new(cfg: Arc<FleetConfig>, records: Records) -> Self {
        Self {
            cfg,
            records,
            busy: Arc::new(tokio::sync::Mutex::new(())),
            acting_on: Arc::new(Mutex::new(None)),
            cancel: Arc::new(std::sync::atomic::AtomicBool::new(false)),
        }
    }

    /// Cancels coordinated restart `id`, which must be the one running: it
    /// stops at its next safe point, before a launch, with every node
    /// stopped and verified, and ends cancelled.
    pub fn cancel(&self, id: i64, person: &str) -> Result<(), Refused> {
        let a = self.acting_on.lock().unwrap_or_else(|p| p.into_inner());
        match a.as_ref() {
            Some((running, _)) if *running == id => {
                tracing::info!(id, %person, "coordinated restart cancelled");
                self.cancel.store(true, std::sync::atomic::Ordering::SeqCst);
                Ok(())
            }
            _ => match self.records.get(id) {
                Ok(Some(_)) => Err(Refused::Busy(format!(
                    "coordinated restart #{id} is not running"
                ))),
                Ok(None) => Err(Refused::NotFound(format!("no coordinated restart #{id}"))),
                Err(e) => {
                    tracing::error!(id, error = %e, "reading a coordinated record failed");
                    Err(Refused::Internal(
                        "reading the hub's records failed; its log says why".to_owned(),
                    ))
                }
            },
        }
    }

    /// Every member fit before anything is recorded or touched: a refusal
    /// here names the member, and is the asker's to fix (or to wait for),
    /// not a failed restart.
    async fn check(
        &self,
        members: &[Member],
        changes: &Changes,
        person: &str,
    ) -> Result<(), Refused> {
        let mut clients = Vec::new();
        for m in members {
            clients.push(
                client(&self.cfg, &m.agent, person)
                    .map_err(|e| Refused::Internal(e.to_string()))?,
            );
        }
        let wants: Vec<(&Client, Fit<'_>)> = (clients.iter().zip(members))
            .map(|(c, m)| match m.rank {
                Some(_) => (c, Fit::Node(changes)),
                None => (c, Fit::Single),
            })
            .collect();
        if let Err((r, problem)) = fit(&wants).await {
            let who = format!("`{}`", members[r].label);
            return Err(match problem {
                Problem::Unreachable(e) => {
                    Refused::Unreachable(format!("{who} cannot be reached: {e}"))
                }
                Problem::Invalid(e) => Refused::BadRequest(format!("{who}: {e}; nothing was done")),
                Problem::Busy(e) => Refused::Busy(format!("{who}: {e}; nothing was done")),
            });
        }
        Ok(())
    }

    /// Waits (at most `limit`) until no coordinated restart runs: a hub
    /// asked to stop lets the one in flight end rather than leave a group
    /// half launched.
    pub async fn wait_idle(&self, limit: Duration) {
        if let Some(id) = self.running() {
            tracing::info!(id, "waiting for the coordinated restart in flight to end");
        }
        if tokio::time::timeout(limit, self.busy.lock()).await.is_err() {
            tracing::warn!(
                "stopping with a coordinated restart still running: its record will say interrupted"
            );
        }
    }

    /// The coordinated restart running now, if one is.
    pub fn running(&self) -> Option<i64> {
        let a = self.acting_on.lock().unwrap_or_else(|p| p.into_inner());
        a.as_ref().map(|(id, _)| *id)
    }

    /// The coordinated restart acting on `agent` now, if one is.
    pub fn acting_on(&self, agent: &str) -> Option<i64> {
        let a = self.acting_on.lock().unwrap_or_else(|p| p.into_inner());
        a.as_ref()
            .filter(|(_, agents)| agents.iter().any(|n| n == agent))
            .map(|(id, _)| *id)
    }

    pub fn records(&self) -> &Records {
        &self.records
    }

    /// The lock the operation in flight holds.
    pub(super) fn busy_lock(&self) -> Arc<tokio::sync::Mutex<()>> {
        Arc::clone(&self.busy)
    }

    /// Says which record acts on which agents (`None`: none).
    pub(super) fn set_acting_on(&self, a: Option<ActingOn>) {
        *self.acting_on.lock().unwrap_or_else(|p| p.into_inner()) = a;
    }

    /// Ends `log`'s record and, at once for every reader, the hold on its
    /// agents (`next`: the record the hub acts on after it, if any).
    pub(super) fn end_acting(
        &self,
        log: &Log,
        outcome: Outcome,
        failure: Option<CoordFailure>,
        next: Option<ActingOn>,
    ) {
        let mut a = self.acting_on.lock().unwrap_or_else(|p| p.into_inner());
        log.end(outcome, failure);
        *a = next;
    }

    /// The agents record `rec`'s members run on.
    pub(super) fn member_agents(&self, rec: &CoordRecord) -> Vec<String> {
        members(&self.cfg, &rec.target)
            .map(|(_, m)| m.into_iter().map(|m| m.agent).collect())
            .unwrap_or_default()
    }

    pub fn config(&self) -> &FleetConfig {
        &self.cfg
    }

    /// Checks the request, records it and runs it in the background; the
    /// record's id comes back at once.
    pub async fn begin(
        &self,
        target: &str,
        req: CoordRequest,
        person: String,
    ) -> Result<i64, Refused> {
        let Some((kind, members)) = members(&self.cfg, target) else {
            return Err(Refused::NotFound(format!(
                "no group or deployment `{target}` in the hub's config"
            )));
        };
        let req = checked(req, target, kind)?;
        let guard = match Arc::clone(&self.busy).try_lock_owned() {
            Ok(g) => g,
            // Over (its record ended, its nodes let go) and letting go of
            // the slot this instant: it is this one's.
            Err(_) if self.running().is_none() => Arc::clone(&self.busy).lock_owned().await,
            Err(_) => {
                return Err(Refused::Busy(
                    "a coordinated restart is already running; wait for it".to_owned(),
                ));
            }
        };
        self.check(&members, &req.flags, &person).await?;
        let mut rec = CoordRecord {
            id: 0,
            target: target.to_owned(),
            kind,
            requested_by: person.clone(),
            started_at_ms: now_ms(),
            finished_at_ms: None,
            outcome: Outcome::Running,
            failure: None,
            flags: crate::redact::shown_changes(&req.flags),
            members: members.iter().map(Member::timeline).collect(),
        };
        self.records.begin(&mut rec).map_err(|e| {
            tracing::error!(error = %e, "cannot record a coordinated restart");
            Refused::Internal("cannot record the operation; the hub's log says why".to_owned())
        })?;
        let id = rec.id;
        let agents: Vec<String> = members.into_iter().map(|m| m.agent).collect();
        let agents_done = agents.clone();
        *self.acting_on.lock().unwrap_or_else(|p| p.into_inner()) = Some((id, agents));
        let acting_on = Arc::clone(&self.acting_on);
        tracing::info!(id, %target, %person, "coordinated restart begun");
        self.cancel
            .store(false, std::sync::atomic::Ordering::SeqCst);
        let log = Log::new(rec, self.records.clone()).cancelled_by(Arc::clone(&self.cancel));
        let cfg = Arc::clone(&self.cfg);
        let target = target.to_owned();
        tokio::spawn(async move {
            let result = match kind {
                CoordKind::Group => match cfg.group(&target) {
                    Some(g) => {
                        let idx: Vec<usize> = (0..g.nodes.len()).collect();
                        run_group(&log, &cfg, g, &idx, &person, &req.flags).await
                    }
                    None => Ok(()),
                },
                CoordKind::Deployment => run_deployment(&log, &cfg, &target, &person).await,
            };
            // Let go of the nodes, then end the record and the hold at once:
            // whoever reads it ended finds the nodes free and the hub ready
            // for the next.
            log.release(&cfg, &agents_done, &person).await;
            {
                let mut a = acting_on.lock().unwrap_or_else(|p| p.into_inner());
                log.finish(result.err());
                *a = None;
            }
            drop(guard);
        });
        Ok(id)
    }
}

mod agent;
mod log;
mod run;

use agent::{Fit, MemberError, Problem, fit};
pub(in crate::fleet) use agent::{client, drain, op_word, state, summary, verify};
pub(in crate::fleet) use log::{Log, Member, members};
use run::{run_deployment, run_group};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_never_holds_a_secret_flag_s_value() {
        let changes = Changes::from([
            (
                "--api-key".to_owned(),
                Some("sk-live-0123456789".to_owned()),
            ),
            ("--tp".to_owned(), Some("8".to_owned())),
            ("--warmup-ms".to_owned(), None),
        ]);
        let shown = crate::redact::shown_changes(&changes);
        let key = shown["--api-key"].clone().unwrap_or_default();
        assert!(!key.contains("0123456789"), "{key}");
        assert_eq!(shown["--tp"].as_deref(), Some("8"));
        assert_eq!(shown["--warmup-ms"], None);
    }
}
