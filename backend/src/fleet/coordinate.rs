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
use shared::fleet::{
    CoordEvent, CoordFailure, CoordKind, CoordRecord, CoordRequest, CoordStep, MemberTimeline,
};
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
type Changes = std::collections::BTreeMap<String, Option<String>>;

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
                Err(e) => Err(Refused::Internal(e)),
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
            clients.push(client(&self.cfg, &m.agent, person).map_err(Refused::Internal)?);
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
        let mut req = req;
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
            members: members
                .iter()
                .map(|m| MemberTimeline {
                    name: m.label.clone(),
                    rank: m.rank,
                    agent_ops: Vec::new(),
                    events: Vec::new(),
                })
                .collect(),
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

/// One member of a coordinated restart, as its record names it.
#[derive(Debug, Clone)]
pub(super) struct Member {
    /// `gpu-01`, or `dsv3/gpu-01` for a group's node in a deployment.
    pub(super) label: String,
    pub(super) agent: String,
    /// Its rank, for a node of a group.
    rank: Option<u32>,
}

/// What `target` restarts: a group's nodes in rank order, or a deployment's
/// members in its order (a group's as its nodes); `None` for no such target.
pub(super) fn members(cfg: &FleetConfig, target: &str) -> Option<(CoordKind, Vec<Member>)> {
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
pub(super) struct Log {
    rec: Arc<Mutex<CoordRecord>>,
    records: Records,
    /// Set when a person cancels it.
    cancel: Arc<std::sync::atomic::AtomicBool>,
}

impl Log {
    pub(super) fn new(rec: CoordRecord, records: Records) -> Self {
        Self {
            rec: Arc::new(Mutex::new(rec)),
            records,
            cancel: Arc::default(),
        }
    }

    /// The same, cancelled when `flag` is set.
    fn cancelled_by(mut self, flag: Arc<std::sync::atomic::AtomicBool>) -> Self {
        self.cancel = flag;
        self
    }

    fn cancelled(&self) -> bool {
        self.cancel.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// At a safe point: a cancel stops the operation here, as every
    /// member's timeline says.
    fn stop_if_cancelled(&self, members: &[usize], what: &str) -> Result<(), CoordFailure> {
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
    pub(super) fn id(&self) -> i64 {
        self.rec.lock().unwrap_or_else(|p| p.into_inner()).id
    }

    /// Tells every member's agent that this record is done with it (best
    /// effort: a hold an agent keeps lapses on its own).
    pub(super) async fn release(&self, cfg: &FleetConfig, agents: &[String], person: &str) {
        let id = self.id();
        for name in agents {
            let res = match client(cfg, name, person) {
                Ok(c) => c
                    .post_empty(&format!("api/coordinated/{id}/release"))
                    .await
                    .map_err(|e| e.message),
                Err(e) => Err(e),
            };
            if let Err(e) = res {
                tracing::warn!(id, agent = %name, error = %e, "cannot release the agent");
            }
        }
    }

    /// The record as it stands.
    pub(super) fn snapshot(&self) -> CoordRecord {
        self.rec.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn with(&self, f: impl FnOnce(&mut CoordRecord)) {
        let mut rec = self.rec.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut rec);
        if let Err(e) = self.records.save(&rec) {
            tracing::error!(error = %e, id = rec.id, "cannot save the coordinated restart");
        }
    }

    pub(super) fn event(&self, m: usize, step: CoordStep, note: impl Into<String>) {
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

    fn op(&self, m: usize, id: i64) {
        self.with(|r| {
            if let Some(t) = r.members.get_mut(m) {
                t.agent_ops.push(id);
            }
        });
    }

    /// The agent operations this record caused on member `m`.
    pub(super) fn ops(&self, m: usize) -> Vec<i64> {
        let rec = self.rec.lock().unwrap_or_else(|p| p.into_inner());
        rec.members
            .get(m)
            .map(|t| t.agent_ops.clone())
            .unwrap_or_default()
    }

    fn name(&self, m: usize) -> String {
        let rec = self.rec.lock().unwrap_or_else(|p| p.into_inner());
        rec.members
            .get(m)
            .map(|t| t.name.clone())
            .unwrap_or_default()
    }

    /// A failure of member `m`: on its timeline, and as the record's failure.
    fn failed(&self, m: usize, reason: String) -> CoordFailure {
        self.event(m, CoordStep::Failed, reason.clone());
        CoordFailure {
            member: self.name(m),
            reason,
        }
    }

    fn finish(&self, failure: Option<CoordFailure>) {
        let outcome = match &failure {
            Some(_) if self.cancelled() => Outcome::Cancelled,
            Some(_) => Outcome::Failed,
            None => Outcome::Succeeded,
        };
        self.end(outcome, failure);
    }

    /// Ends the record with `outcome`, and counts it.
    pub(super) fn end(&self, outcome: Outcome, failure: Option<CoordFailure>) {
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

/// A client of agent `name` that acts for `person`.
pub(super) fn client(cfg: &FleetConfig, name: &str, person: &str) -> Result<Client, String> {
    let a = cfg
        .agent(name)
        .ok_or_else(|| format!("`{name}` is not an agent"))?;
    Client::new(&a.remote())
        .map(|c| c.acting_for(person))
        .map_err(|e| e.message)
}

pub(super) async fn state(c: &Client) -> Result<(Snapshot, ServerStatus), String> {
    let s: Snapshot = c.get("api/state").await.map_err(|e| e.message)?;
    let sv = s
        .server
        .clone()
        .ok_or("its drainwatch manages no server (it runs without --config)")?;
    Ok((s, sv))
}

pub(super) async fn summary(c: &Client, id: i64) -> Result<RestartSummary, String> {
    let d: RestartDetail = c
        .get(&format!("api/restarts/{id}"))
        .await
        .map_err(|e| e.message)?;
    Ok(d.summary)
}

/// Waits until the agent's operation `id` ends.
async fn wait_op(c: &Client, id: i64, limit: Duration) -> Result<RestartSummary, String> {
    let began = Instant::now();
    loop {
        let s = summary(c, id).await?;
        if s.outcome != Outcome::Running {
            return Ok(s);
        }
        if began.elapsed() >= limit {
            return Err(format!(
                "its operation #{id} still runs after {}",
                humanize(limit)
            ));
        }
        tokio::time::sleep(POLL).await;
    }
}

/// An agent operation's kind, in a word.
pub(super) fn op_word(kind: shared::restart::OpKind) -> &'static str {
    crate::restart::machine::op_name(kind)
}

fn humanize(d: Duration) -> String {
    format!("{} s", d.as_secs().max(1))
}

fn why_failed(s: &RestartSummary) -> String {
    match (&s.failure, s.outcome) {
        (Some(f), _) => f.summary(),
        (None, Outcome::Interrupted) => format!("its operation #{} was interrupted", s.id),
        (None, _) => format!("its operation #{} did not succeed", s.id),
    }
}

/// Has the agent stop its own server (if it runs) and verify it. An
/// operation of someone else's running there fails the drain, naming it
/// (nothing of theirs is cut short); while unwinding, one of this record's
/// own is stopped once it may be (a launch warming up) or waited for.
pub(super) async fn drain(log: &Log, m: usize, c: &Client, step: CoordStep) -> Result<(), String> {
    let began = Instant::now();
    let sv = loop {
        let (_, sv) = state(c).await?;
        let Some(op) = &sv.operation else { break sv };
        let ours = log.ops(m).contains(&op.id);
        if !ours {
            // Someone else's: never cut short, and what it launches is theirs.
            return Err(format!(
                "its agent is running #{} ({}) for {}{}",
                op.id,
                sv.phase.label(),
                op.requested_by,
                if step == CoordStep::Drain {
                    ": wait for it to end"
                } else {
                    ": left to them"
                }
            ));
        }
        if ours && matches!(sv.phase, Phase::Launching | Phase::WarmingUp) {
            break sv;
        }
        if began.elapsed() >= UNWIND_WAIT {
            return Err(format!(
                "its agent's #{} still runs ({}) after {}",
                op.id,
                sv.phase.label(),
                humanize(UNWIND_WAIT)
            ));
        }
        tokio::time::sleep(POLL).await;
    };
    if sv.phase == Phase::Stopped && sv.root.is_none() && sv.operation.is_none() {
        log.event(m, step, "already stopped");
        return Ok(());
    }
    let acc: Accepted = c
        .post(
            "api/stop",
            &ConfirmRequest {
                generation: sv.generation,
                confirm: sv.name.clone(),
                contain: false,
                coordinated: Some(log.id()),
            },
        )
        .await
        .map_err(|e| e.message)?;
    log.op(m, acc.id);
    let what = match sv.root {
        Some(root) => format!(
            "SIGTERM to its own server (pid {}, {})",
            root.pid,
            sv.phase.label()
        ),
        None => format!(
            "no server process alive ({}); checking its GPUs",
            sv.phase.label()
        ),
    };
    log.event(m, step, format!("stop #{} on its agent: {what}", acc.id));
    let s = wait_op(c, acc.id, OP_LIMIT).await?;
    if s.outcome != Outcome::Succeeded {
        return Err(why_failed(&s));
    }
    let took = (s.finished_at_ms.unwrap_or(s.started_at_ms)).saturating_sub(s.started_at_ms);
    log.event(
        m,
        step,
        format!("stopped and verified by its agent (#{}, {took} ms)", acc.id),
    );
    Ok(())
}

/// Proves the node drained from a sample newer than this check: no process
/// of its server, nothing on its GPUs, every GPU at its idle baseline.
pub(super) async fn verify(
    log: &Log,
    m: usize,
    c: &Client,
    timeout: Duration,
    tolerance: u64,
    step: CoordStep,
) -> Result<(), String> {
    let began = Instant::now();
    let (first, _) = state(c).await?;
    // The agent's clock, not ours: a newer sample is one with a later time.
    let seen = first.latest.as_ref().map_or(0, |l| l.at_ms);
    loop {
        let (s, sv) = state(c).await?;
        let fresh = s.latest.as_ref().is_some_and(|l| l.at_ms > seen);
        let reasons = if fresh {
            crate::cli::hooks::not_drained(&s, None, tolerance)
        } else {
            vec!["no sample newer than the drain yet".to_owned()]
        };
        if reasons.is_empty() {
            let gpus = sv
                .gpus
                .iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(", ");
            log.event(
                m,
                step,
                format!("verified: no process of its server, GPU {gpus} free and at idle baseline"),
            );
            return Ok(());
        }
        if began.elapsed() >= timeout {
            return Err(format!(
                "not drained after {}: {}",
                humanize(timeout),
                reasons.join("; ")
            ));
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Why a member is not fit for a coordinated restart now.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Problem {
    Unreachable(String),
    /// Its config or the request does not fit: a request to fix.
    Invalid(String),
    /// Something else runs on it or holds it: wait.
    Busy(String),
}

impl Problem {
    fn text(&self) -> String {
        match self {
            Self::Unreachable(e) => format!("cannot be reached: {e}"),
            Self::Invalid(e) | Self::Busy(e) => e.clone(),
        }
    }
}

/// What a member must be.
#[derive(Debug, Clone, Copy)]
enum Fit<'a> {
    /// A node of a group, to launch with these flag changes.
    Node(&'a Changes),
    /// A server of its own, restarted by its own agent.
    Single,
}

/// Every member reachable, its server of the right kind, the flag changes
/// within its allow-list, nothing else running on it or holding it; else
/// the first that is not, and why.
async fn fit(wants: &[(&Client, Fit<'_>)]) -> Result<(), (usize, Problem)> {
    let found = join_all(wants.iter().map(|(c, _)| state(c))).await;
    for (r, (found, &(_, want))) in found.into_iter().zip(wants).enumerate() {
        let (_, sv) = found.map_err(|e| (r, Problem::Unreachable(e)))?;
        let invalid = match want {
            Fit::Node(_) if !sv.spans_nodes => Some(
                "its server does not span nodes (its config's argv has no {node_rank})".to_owned(),
            ),
            Fit::Node(changes) => refuses_flags(&sv, changes),
            Fit::Single if sv.spans_nodes => {
                Some("its server spans nodes: restart it with its group".to_owned())
            }
            Fit::Single => None,
        };
        if let Some(why) = invalid {
            return Err((r, Problem::Invalid(why)));
        }
        let busy = sv.held_by.map(|h| h.refusal()).or_else(|| {
            sv.operation.map(|op| {
                format!(
                    "its agent is running #{} for {}: wait for it to end",
                    op.id, op.requested_by
                )
            })
        });
        if let Some(why) = busy {
            return Err((r, Problem::Busy(why)));
        }
    }
    Ok(())
}

/// Why the node's allow-list refuses `changes`, checked before anything is
/// stopped (its agent checks them again when it launches).
fn refuses_flags(sv: &ServerStatus, changes: &Changes) -> Option<String> {
    changes.iter().find_map(|(name, value)| {
        let Some(spec) = sv.allowed.iter().find(|s| &s.name == name) else {
            return Some(format!("flag `{name}` is not in its allow-list"));
        };
        let v = value.as_deref()?;
        shared::flags::check(spec, v)
            .err()
            .map(|r| format!("flag `{name}`: {}", r.hint(spec)))
    })
}

/// Asks the agent to launch its node; returns its operation's id.
async fn launch(
    log: &Log,
    m: usize,
    c: &Client,
    role: NodeRole,
    changes: &Changes,
) -> Result<i64, String> {
    let (_, sv) = state(c).await?;
    let acc: Accepted = c
        .post(
            "api/start",
            &RestartRequest {
                generation: sv.generation,
                flags: changes.clone(),
                confirm: sv.name.clone(),
                override_health: None,
                node: Some(role.clone()),
                coordinated: Some(log.id()),
            },
        )
        .await
        .map_err(|e| e.message)?;
    log.op(m, acc.id);
    log.event(
        m,
        CoordStep::Launch,
        format!("start #{} on its agent: {}", acc.id, role.describe()),
    );
    Ok(acc.id)
}

/// Waits until the agent's start `id` has spawned the server (warming up),
/// or has ended well.
async fn wait_spawned(c: &Client, id: i64, limit: Duration) -> Result<(), String> {
    let began = Instant::now();
    loop {
        let (_, sv) = state(c).await?;
        let ours = sv.operation.as_ref().is_some_and(|o| o.id == id);
        if ours && sv.phase == Phase::WarmingUp {
            return Ok(());
        }
        if !ours {
            let s = summary(c, id).await?;
            if s.outcome == Outcome::Succeeded {
                return Ok(());
            }
            if s.outcome != Outcome::Running {
                return Err(why_failed(&s));
            }
        }
        if began.elapsed() >= limit {
            return Err(format!("not spawned after {}", humanize(limit)));
        }
        tokio::time::sleep(POLL).await;
    }
}

/// The coordinated restart of group `g`, whose nodes are the record's
/// members `idx` (in rank order).
async fn run_group(
    log: &Log,
    cfg: &FleetConfig,
    g: &GroupConfig,
    idx: &[usize],
    person: &str,
    changes: &Changes,
) -> Result<(), CoordFailure> {
    let mut clients = Vec::new();
    for (rank, name) in g.nodes.iter().enumerate() {
        clients.push(client(cfg, name, person).map_err(|e| log.failed(idx[rank], e))?);
    }
    // Every node launches with its current flags and these changes, applied
    // by its own agent (its allow-list decides).
    let flags = changes;
    // 0. Checked again (it was when the restart was asked for, and a member
    // of a deployment may have changed since): else nothing is touched.
    let wants: Vec<(&Client, Fit<'_>)> = clients.iter().map(|c| (c, Fit::Node(flags))).collect();
    if let Err((r, problem)) = fit(&wants).await {
        let failure = log.failed(idx[r], problem.text());
        for o in (0..clients.len()).filter(|o| *o != r) {
            log.event(
                idx[o],
                CoordStep::Failed,
                format!(
                    "nothing stopped: node `{}` is not ready for it",
                    failure.member
                ),
            );
        }
        return Err(failure);
    }
    // 1. Drain every node; 2. verify every node. Nothing launches before all pass.
    let drained = join_all(
        clients
            .iter()
            .enumerate()
            .map(|(r, c)| drain(log, idx[r], c, CoordStep::Drain)),
    )
    .await;
    let verified = join_all(clients.iter().enumerate().map(|(r, c)| {
        let ok = drained[r].is_ok();
        async move {
            if !ok {
                return Err(String::new());
            }
            verify(
                log,
                idx[r],
                c,
                g.verify_timeout,
                g.tolerance_bytes,
                CoordStep::Verify,
            )
            .await
        }
    }))
    .await;
    for r in 0..clients.len() {
        let why = match (&drained[r], &verified[r]) {
            (Err(e), _) => format!("drain: {e}"),
            (Ok(()), Err(e)) => format!("verify: {e}"),
            _ => continue,
        };
        let failure = log.failed(idx[r], why);
        for (o, _) in clients.iter().enumerate().filter(|(o, _)| *o != r) {
            log.event(
                idx[o],
                CoordStep::Failed,
                format!("nothing launched: node `{}` is not clean", failure.member),
            );
        }
        return Err(failure);
    }
    // A cancel asked meanwhile stops here: every node stopped and verified.
    log.stop_if_cancelled(idx, "every node stopped and verified, nothing launched")?;
    // 3. Rank 0, then 4. the others, then 5. a completion through rank 0.
    let launched = async {
        let id0 = launch(log, idx[0], &clients[0], g.role(0), flags)
            .await
            .map_err(|e| (0, format!("launch: {e}")))?;
        wait_spawned(&clients[0], id0, g.launch_timeout)
            .await
            .map_err(|e| (0, format!("launch: {e}")))?;
        log.event(
            idx[0],
            CoordStep::Launch,
            "spawned; waiting for the other ranks to join",
        );
        if log.cancelled() {
            return Err((0, "cancelled during the launch".to_owned()));
        }
        let others = join_all((1..clients.len()).map(|r| {
            let clients = &clients;
            async move {
                let id = launch(log, idx[r], &clients[r], g.role(r), flags).await?;
                let s = wait_op(&clients[r], id, g.launch_timeout).await?;
                match s.outcome {
                    Outcome::Succeeded => Ok(()),
                    _ => Err(why_failed(&s)),
                }
            }
        }))
        .await;
        for (r, res) in others.into_iter().enumerate() {
            res.map_err(|e| (r + 1, format!("launch: {e}")))?;
        }
        wait_ready(log, g, idx, &clients, id0).await
    }
    .await;
    match launched {
        Ok(()) => Ok(()),
        // Cancelled once rank 0 was launched: every node is stopped again.
        Err(_) if log.cancelled() => {
            unwind(log, g, idx, &clients).await;
            log.stop_if_cancelled(
                idx,
                "the launch was stopped, every node stopped and verified",
            )
        }
        Err((r, why)) => {
            let failure = log.failed(idx[r], why);
            unwind(log, g, idx, &clients).await;
            Err(failure)
        }
    }
}

/// Waits for rank 0's start to end ready (its agent's probe is a real
/// completion through it), while watching that no other rank dies.
async fn wait_ready(
    log: &Log,
    g: &GroupConfig,
    idx: &[usize],
    clients: &[Client],
    id0: i64,
) -> Result<(), (usize, String)> {
    let began = Instant::now();
    loop {
        if log.cancelled() {
            return Err((0, "cancelled during the warm-up".to_owned()));
        }
        let s0 = summary(&clients[0], id0).await.map_err(|e| (0, e))?;
        match s0.outcome {
            Outcome::Succeeded => {
                log.event(
                    idx[0],
                    CoordStep::Ready,
                    format!("ready: a completion came back through rank 0 (its agent's #{id0})"),
                );
                for &m in &idx[1..] {
                    log.event(
                        m,
                        CoordStep::Ready,
                        "ready: the group answers through rank 0",
                    );
                }
                return Ok(());
            }
            Outcome::Running => {}
            _ => return Err((0, format!("warm-up: {}", why_failed(&s0)))),
        }
        for (r, c) in clients.iter().enumerate().skip(1) {
            let (_, sv) = state(c).await.map_err(|e| (r, e))?;
            if matches!(sv.phase, Phase::Crashed | Phase::Failed | Phase::Stopped) {
                let why = sv
                    .failure
                    .map_or_else(|| sv.phase.label().to_owned(), |f| f.summary());
                return Err((
                    r,
                    format!("its server ended before the group was ready: {why}"),
                ));
            }
        }
        if began.elapsed() >= g.launch_timeout {
            return Err((
                0,
                format!(
                    "no completion through rank 0 after {}",
                    humanize(g.launch_timeout)
                ),
            ));
        }
        tokio::time::sleep(POLL).await;
    }
}

/// After a failure once something launched: stop every node and verify it.
async fn unwind(log: &Log, g: &GroupConfig, idx: &[usize], clients: &[Client]) {
    join_all(clients.iter().enumerate().map(|(r, c)| async move {
        let m = idx[r];
        let res = match drain(log, m, c, CoordStep::Unwind).await {
            Ok(()) => {
                verify(
                    log,
                    m,
                    c,
                    g.verify_timeout,
                    g.tolerance_bytes,
                    CoordStep::Unwind,
                )
                .await
            }
            Err(e) => Err(e),
        };
        if let Err(e) = res {
            log.event(
                m,
                CoordStep::Unwind,
                format!("not clean after the failure: {e}"),
            );
        }
    }))
    .await;
}

/// A deployment: each member in order, stopping at the first that fails.
async fn run_deployment(
    log: &Log,
    cfg: &FleetConfig,
    name: &str,
    person: &str,
) -> Result<(), CoordFailure> {
    let Some(d) = cfg.deployment(name) else {
        return Ok(());
    };
    let mut at = 0;
    for member in &d.order {
        // Between members: a cancel leaves the rest as they are.
        let rest: Vec<usize> = (at..log.snapshot().members.len()).collect();
        log.stop_if_cancelled(&rest, "before this member; the ones before it are done")?;
        if let Some(g) = cfg.group(member) {
            let idx: Vec<usize> = (at..at + g.nodes.len()).collect();
            at += g.nodes.len();
            run_group(log, cfg, g, &idx, person, &Default::default()).await?;
            continue;
        }
        let m = at;
        at += 1;
        let c = client(cfg, member, person).map_err(|e| log.failed(m, e))?;
        restart_one(log, m, &c)
            .await
            .map_err(|e| log.failed(m, e))?;
    }
    Ok(())
}

/// One server's own guarded restart, on its agent, to ready.
async fn restart_one(log: &Log, m: usize, c: &Client) -> Result<(), String> {
    let (_, sv) = state(c).await?;
    let path = if sv.phase == Phase::Ready {
        "api/restart"
    } else {
        "api/start"
    };
    let acc: Accepted = c
        .post(
            path,
            &RestartRequest {
                generation: sv.generation,
                flags: Default::default(),
                confirm: sv.name.clone(),
                override_health: None,
                node: None,
                coordinated: Some(log.id()),
            },
        )
        .await
        .map_err(|e| e.message)?;
    log.op(m, acc.id);
    log.event(
        m,
        CoordStep::Launch,
        format!(
            "{} #{} on its agent: drain, verify, launch, a real completion",
            if sv.phase == Phase::Ready {
                "restart"
            } else {
                "start"
            },
            acc.id
        ),
    );
    let s = wait_op(c, acc.id, OP_LIMIT).await?;
    if s.outcome != Outcome::Succeeded {
        return Err(why_failed(&s));
    }
    log.event(
        m,
        CoordStep::Ready,
        format!("ready: its agent's #{} ended with a completion", acc.id),
    );
    Ok(())
}

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
