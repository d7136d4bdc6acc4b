//! The restart manager: one task that owns the [`Machine`], takes operators'
//! requests one at a time (so a second one is refused while the first runs),
//! feeds it observations from every sample, the server's exit and probe results,
//! and carries out its effects through the supervisor, the store and the hub.

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use shared::ProcId;
use shared::flags::Flags;
use shared::restart::{Containment, Operation, Origin, Phase, TimelinePoint};
use tokio::sync::{broadcast, mpsc, watch};

use super::machine::{Input, Machine};
use super::observe::observe;
use super::probe::ProbeEvent;
use crate::clock::now_ms;
use crate::config::file::ServerConfig;
use crate::hub::Hub;
use crate::identity::{self, ServerHint};
use crate::store::{Instance, Store};
use crate::supervisor::cgroup;
use crate::supervisor::{self, Group, LogTail, Members};

mod bench;
mod effects;
mod handle;
mod health;
mod holds;
mod inputs;

pub(crate) use inputs::client as probe_client;
mod requests;
mod status;
mod tracked;

pub use handle::{Command, Event, Lease, Mailbox, ManagerHandle, Refusal, Request};

/// How long a coordinated restart's hold on this node lasts without a word
/// from its hub (each of its requests renews it): a hub that died and never
/// came back does not hold the node for ever.
pub const COORDINATED_HOLD: Duration = Duration::from_secs(3600);

/// A server instance drainwatch is responsible for.
#[derive(Debug)]
struct Running {
    root: ProcId,
    origin: Origin,
    /// The process group of a server drainwatch launched; `None` for an adopted
    /// one, whose group may be a shell's: it is never signalled.
    group: Option<Group>,
    /// The cgroup that holds the root (for people), and whether it is a leaf
    /// of drainwatch's own.
    cgroup: Option<String>,
    contained: bool,
    started_at_ms: u64,
}

/// The operation in flight, as recorded.
#[derive(Debug, Clone)]
struct OpRecord {
    op: Operation,
    entered: Vec<(Phase, u64)>,
    /// Timeline points not yet pushed over the socket (sent with each tick).
    unsent: Vec<TimelinePoint>,
}

/// Everything the manager task owns.
#[derive(Debug)]
pub struct Manager {
    cfg: Arc<ServerConfig>,
    hub: Arc<Hub>,
    store: Store,
    machine: Machine,
    /// Bumped by every launch and adoption: a request names the one it saw.
    generation: u64,
    /// The flags the server runs with, raw (secrets too), to relaunch with.
    flags: Flags,
    running: Option<Running>,
    /// The server's processes, drainwatch's cgroups, what the store has of them.
    tracked: tracked::Tracked,
    containment: Containment,
    /// The launch log of the running server (none for an adopted one).
    log: Option<LogTail>,
    log_dir: PathBuf,
    op: Option<OpRecord>,
    /// The warm-up probe: the machine's `Healthy` and `Ready` inputs.
    probes: inputs::Probes,
    /// The server's metrics, for the status and the timeline.
    scrape: inputs::Scrape,
    /// What only the status shows.
    shown: status::Shown,
    /// The benchmarks, here so that a benchmark and an operation exclude each other.
    bench: bench::Benches,
    /// The campaign or the hub's coordinated restart holding the server,
    /// if one does: every other request is refused.
    holds: holds::Holds,
    /// Operations and benchmarks as they end, for the campaign runner.
    events: broadcast::Sender<Event>,
    /// The health gate: its memory, the operation's overrides, and the
    /// launch it holds before anything stops.
    health: health::HealthGate,
    /// For a server that spans nodes: this node's place in it, as the last
    /// accepted launch gave it.
    node: Option<shared::restart::NodeRole>,
}

/// What [`Manager::new`] needs.
#[derive(Debug)]
pub struct Parts {
    pub cfg: Arc<ServerConfig>,
    pub hub: Arc<Hub>,
    pub store: Store,
    pub hint: Arc<ServerHint>,
    /// Set while an operation runs: the sampler then samples at ≥ 20 Hz.
    pub fast: Arc<AtomicBool>,
    /// Set to have the next sample read the slow health fields afresh.
    pub health_refresh: Arc<AtomicBool>,
    pub log_dir: PathBuf,
    pub recovered: crate::store::Recovered,
    /// `--cgroup`: where to contain the servers it launches.
    pub cgroup: cgroup::Setting,
    /// The config's tokenizer, loaded (`Tokenizer::configured`).
    pub tokenizer: Option<crate::bench::tokens::Tokenizer>,
}

impl Manager {
    pub async fn new(p: Parts) -> (Self, ManagerHandle, mpsc::Receiver<Command>) {
        let now = now_ms();
        let (tx, rx) = mpsc::channel(16);
        let events = broadcast::channel(64).0;
        let client = inputs::client(p.cfg.api_key.as_ref());
        let scrape = inputs::Scrape::spawn(client.clone(), &p.cfg, p.fast);
        let typical = p.store.typical().await.unwrap_or_default();
        let health = health::HealthGate::load(&p.store, p.health_refresh).await;
        let (cgroups, containment) = supervisor::contain(&p.cgroup, p.cfg.port);
        let members = Members::new(Arc::clone(&p.hint), containment.pidfd);
        let mut m = Self {
            machine: Machine::new(p.cfg.timeouts, p.cfg.verify.samples, now),
            flags: p.cfg.allow.defaults().clone(),
            generation: p.recovered.generation,
            cfg: p.cfg,
            hub: p.hub,
            store: p.store,
            running: None,
            tracked: tracked::Tracked::new(members, cgroups),
            containment,
            log: None,
            log_dir: p.log_dir,
            op: None,
            probes: inputs::Probes::new(client),
            scrape,
            shown: status::Shown {
                typical: Arc::new(Mutex::new(typical)),
                ..Default::default()
            },
            bench: bench::Benches::new(p.tokenizer),
            holds: holds::Holds::default(),
            events: events.clone(),
            health,
            node: None,
        };
        if let Some(inst) = p.recovered.instance {
            m.reattach(inst, &p.recovered.members);
        }
        m.publish_status(true);
        (m, ManagerHandle::new(tx, events), rx)
    }

    /// Picks up the server a previous drainwatch ran, if it still lives, with
    /// the processes recorded as its own (`members`). Its root gone, what is
    /// left of it (recorded processes, its process group, its cgroup leaves)
    /// is still ours: drained by the next operation, never called foreign.
    fn reattach(&mut self, inst: Instance, members: &[ProcId]) {
        self.tracked.recorded_already(inst.generation, members);
        if !identity::alive(inst.root) {
            // Only a group drainwatch made says who is ours.
            let pgid = if inst.origin == Origin::Launched {
                inst.pgid
            } else {
                0
            };
            let left = identity::leftovers(inst.root, pgid, members);
            if left.is_empty() && self.tracked.contained() == 0 {
                tracing::info!(pid = inst.root.pid, "the recorded server is gone");
                self.store.instance_ended(inst.generation, now_ms());
                return;
            }
            tracing::warn!(
                pid = inst.root.pid,
                generation = inst.generation,
                processes = left.len(),
                "the recorded server's root is gone but processes of it still live: they are ours, and the next operation drains them"
            );
            self.tracked.members.reset(None, false, left);
            self.tracked.contained();
            self.tracked.leftover = Some(inst.generation);
            return;
        }
        tracing::info!(
            pid = inst.root.pid,
            generation = inst.generation,
            "re-attached to the recorded server"
        );
        self.flags = inst.flags;
        crate::redact::global().learn_pairs(&self.flags);
        self.log = inst.log_path.map(|p| LogTail::follow(&p, false));
        // Only a group drainwatch made is ever signalled, and only through its
        // leader's pidfd now that the leader is no longer our child.
        let group = (inst.origin == Origin::Launched).then(|| Group::refound(inst.pgid, inst.root));
        let contained = self.tracked.leaf_of(inst.cgroup.as_deref()).is_some();
        self.set_running(
            Running {
                root: inst.root,
                origin: inst.origin,
                group,
                cgroup: inst.cgroup,
                contained,
                started_at_ms: inst.started_at_ms,
            },
            false,
        );
        // Those that left the root's tree (reparented, in a session of their own).
        self.tracked
            .members
            .extend(members.iter().copied().filter(|id| identity::alive(*id)));
        self.feed(Input::Attached);
    }

    /// Records the members not recorded yet, for the running instance (or
    /// what is left of one).
    fn record_members(&mut self) {
        let running = self.running.as_ref().map(|_| self.generation);
        if let Some((generation, new)) = self.tracked.unrecorded(running) {
            self.store.members(generation, new);
        }
    }

    /// Ends the leftover instance once nothing of it lives (a launch since
    /// was verified past it).
    fn settle_leftover(&mut self) {
        if let Some(g) = self.tracked.settled_leftover(self.running.is_some()) {
            self.store.instance_ended(g, now_ms());
        }
    }

    fn set_running(&mut self, r: Running, own_children: bool) {
        self.tracked
            .members
            .reset(Some(r.root), own_children, identity::descendants(r.root));
        self.shown.adoptable = None;
        self.running = Some(r);
        self.tracked.contained();
    }

    async fn command(&mut self, cmd: Command) {
        match cmd {
            Command::Op { request, reply } => self.request(request, reply).await,
            Command::Bench {
                overrides,
                peer,
                reply,
            } => {
                let r = match (
                    self.coordinated(None).and_then(|()| self.held(None)),
                    self.bench_settings(overrides),
                ) {
                    (Err(e), _) | (_, Err(e)) => Err(e),
                    (Ok(()), Ok(settings)) => self.start_bench(settings, peer, None, None).await,
                };
                let _ = reply.send(r);
            }
            Command::BenchFor {
                settings,
                by,
                tag,
                reply,
            } => {
                let r = match self.held(Some(tag.0)) {
                    Ok(()) => self.start_bench(*settings, by, None, Some(tag)).await,
                    Err(e) => Err(e),
                };
                let _ = reply.send(r);
            }
            Command::CancelBench { campaign, reply } => {
                let r = match self.held(campaign) {
                    Ok(()) => self.bench.cancel(),
                    Err(e) => Err(e),
                };
                let _ = reply.send(r);
            }
            Command::Release { id, reply } => {
                let r = match self.holds.release(id) {
                    Ok(released) => {
                        if released {
                            self.publish_status(true);
                        }
                        Ok(())
                    }
                    Err(e) => Err(Refusal::Conflict {
                        message: e.to_string(),
                        operation: None,
                    }),
                };
                let _ = reply.send(r);
            }
            Command::CancelOp { campaign, reply } => {
                let r = self.held(campaign).and_then(|()| self.cancel_op());
                let _ = reply.send(r);
            }
            Command::Lease { lease, reply } => {
                if self.holds.set_lease(lease) {
                    self.publish_status(true);
                }
                let _ = reply.send(Ok(()));
            }
        }
        self.after_events().await;
    }

    /// Refuses what is not the coordinated restart's that holds this node
    /// (`by`: the one asking, if one is).
    fn coordinated(&mut self, by: Option<i64>) -> Result<(), Refusal> {
        match self.holds.coordinated_by_another(by) {
            Some(message) => Err(Refusal::Conflict {
                message,
                operation: self.op.as_ref().map(|o| o.op.clone()),
            }),
            None => Ok(()),
        }
    }

    /// Refuses a request that is not the holding campaign's (`by`: the
    /// campaign asking, if one is).
    fn held(&self, by: Option<i64>) -> Result<(), Refusal> {
        match self.holds.leased_to_another(by) {
            Some(message) => Err(Refusal::Conflict {
                message,
                operation: self.op.as_ref().map(|o| o.op.clone()),
            }),
            None => Ok(()),
        }
    }

    /// Cancels the launch in flight before it launches.
    fn cancel_op(&mut self) -> Result<i64, Refusal> {
        let conflict = |message: String| Refusal::Conflict {
            message,
            operation: self.op.as_ref().map(|o| o.op.clone()),
        };
        self.machine
            .can_cancel()
            .map_err(|e| conflict(e.to_string()))?;
        let id = self.op.as_ref().map_or(0, |o| o.op.id);
        tracing::info!(op = id, "the operation is cancelled before its launch");
        self.feed(Input::Cancel);
        Ok(id)
    }

    /// Work that must wait for an await point: the benchmark after a restart.
    async fn after_events(&mut self) {
        if let Some((kind, id)) = self.bench.take_pending() {
            self.bench_after(kind, id).await;
        }
    }

    /// Adds the root's current descendants to the tracked members.
    fn track_descendants(&mut self) {
        self.tracked.contained();
        let Some(root) = self.running.as_ref().map(|r| r.root) else {
            return;
        };
        self.tracked.members.extend(identity::descendants(root));
    }

    /// Serves until `shutdown` flips.
    pub async fn run(
        mut self,
        mut requests: mpsc::Receiver<Command>,
        mut shutdown: watch::Receiver<bool>,
    ) {
        let mut samples = self.hub.watch_latest();
        let mut sigchld = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::child())
        {
            Ok(s) => Some(s),
            Err(e) => {
                tracing::warn!(error = %e, "no SIGCHLD stream; reaping on the tick only");
                None
            }
        };
        let mut tick = tokio::time::interval(Duration::from_millis(200));
        loop {
            tokio::select! {
                Some(cmd) = requests.recv() => self.command(cmd).await,
                Some(run) = self.bench.rx.recv() => self.bench_done(run),
                changed = samples.changed() => {
                    if changed.is_err() { break; }
                    let latest = samples.borrow_and_update().clone();
                    if let Some(p) = latest {
                        self.on_sample(&p.sample);
                        let decided = self.health.decide(&p.sample, &self.cfg);
                        self.gate_decided(decided).await;
                    }
                }
                _ = async { match sigchld.as_mut() { Some(s) => { s.recv().await; } None => std::future::pending().await } } => {
                    self.on_exits();
                }
                Some((generation, event)) = self.probes.rx.recv() => {
                    if generation == self.generation {
                        self.feed(match event { ProbeEvent::Healthy => Input::Healthy, ProbeEvent::Ready => Input::Ready, ProbeEvent::Refused(status) => Input::Refused { status } });
                    }
                }
                _ = tick.tick() => {
                    let expired = self.health.expired();
                    self.gate_decided(expired).await;
                    self.on_exits();
                    if let Some(cg) = &self.tracked.cgroups {
                        cg.remove_empty_leaves();
                    }
                    self.tracked.members.release_exited();
                    self.record_members();
                    self.settle_leftover();
                    self.follow_log();
                    self.send_timeline();
                    self.publish_status(false);
                }
                _ = shutdown.changed() => break,
            }
            self.after_events().await;
        }
        self.store.flush().await;
    }

    fn on_exits(&mut self) {
        for exit in supervisor::reap() {
            let is_root = self
                .running
                .as_ref()
                .is_some_and(|r| r.root.pid == exit.pid);
            if !is_root {
                continue;
            }
            // Its PID, the group's number, is free from now on.
            if let Some(g) = self.running.as_mut().and_then(|r| r.group.as_mut()) {
                g.leader_unreaped = false;
            }
            tracing::info!(pid = exit.pid, code = ?exit.code, signal = ?exit.signal, "server root exited");
            let last = self
                .log
                .as_mut()
                .map(|l| {
                    l.poll();
                    l.last(100)
                })
                .unwrap_or_default();
            self.feed(Input::RootExited {
                code: exit.code,
                signal: exit.signal,
                oom: supervisor::looks_like_oom(&last),
                port_in_use: supervisor::looks_like_port_in_use(&last, self.cfg.port),
            });
        }
    }

    /// Pushes the timeline points taken since the last push to every client.
    pub(super) fn send_timeline(&mut self) {
        let Some(op) = self.op.as_mut() else { return };
        if op.unsent.is_empty() {
            return;
        }
        let points = std::mem::take(&mut op.unsent);
        self.hub.publish_timeline(op.op.id, points);
    }

    fn on_sample(&mut self, sample: &shared::Sample) {
        // An exit the sample already shows is taken from its reaping first, so
        // a server that died is known by its exit status, not only by absence.
        self.on_exits();
        // A sample's server tree is ours only when it was found from our root: one
        // taken before a launch may show whoever listened on the port then.
        let ours = self
            .running
            .as_ref()
            .is_some_and(|r| sample.server.is_some_and(|s| s.root == r.root));
        if ours {
            self.tracked.members.extend(
                sample
                    .processes
                    .iter()
                    .filter(|p| p.role == shared::ProcessRole::Server)
                    .filter_map(shared::ProcessInfo::id),
            );
        } else if self.running.is_none() {
            self.shown.adoptable = sample.server.map(|s| s.root);
        }
        // Nothing of ours is alive only when no tracked member lives and the
        // server's cgroup is empty.
        let contained = self.tracked.contained();
        let ours_alive = self.tracked.members.alive().max(contained);
        let mut obs = observe(sample, self.tracked.members.ids(), ours_alive, &self.cfg);
        if self.machine.phase() == Phase::Killing {
            obs.stuck = self.stuck(sample);
        }
        if self.machine.phase() == Phase::Verifying {
            obs.health = self.health.verify(sample, &self.cfg);
        }
        self.feed(Input::Observe(Box::new(obs)));
        if self.machine.phase().is_busy() {
            self.timeline_point(sample, sample.at_ms, self.machine.phase());
        }
    }

    /// A point of the operation's drain timeline: `sample`'s memory and the
    /// requests the server's own metrics last said were running.
    pub(super) fn timeline_point(&mut self, sample: &shared::Sample, at_ms: u64, phase: Phase) {
        let running_requests = self.scrape.read().passive.running;
        let Some(op) = self.op.as_mut() else { return };
        let point = TimelinePoint {
            at_ms,
            phase,
            mem_used_bytes: sample.gpus.iter().map(|g| g.mem_used_bytes).collect(),
            running_requests,
        };
        op.unsent.push(point.clone());
        self.store.point(op.op.id, point);
    }
}

impl Manager {
    /// The members alive in uninterruptible sleep (`D`), where SIGKILL
    /// waits until the kernel lets go: stuck inside the driver, if it never does.
    fn stuck(&self, sample: &shared::Sample) -> Vec<shared::restart::StuckProcess> {
        (self.tracked.members.ids().iter())
            .filter_map(|id| identity::live(*id))
            .filter(|i| i.state == 'D')
            .map(|i| shared::restart::StuckProcess {
                pid: i.id.pid,
                state: i.state.to_string(),
                wchan: identity::wchan(i.id.pid),
                gpus: (sample.processes.iter())
                    .filter(|p| p.pid == i.id.pid)
                    .flat_map(|p| p.gpu_mem.iter().map(|g| g.gpu_index))
                    .collect(),
            })
            .collect()
    }
}
