//! Carrying out the machine's effects: signals, launches, probes, the end of an
//! operation (its record, durations and announcement).

use std::sync::Arc;

use shared::flags::Flags;
use shared::restart::{Failure, OpKind, Origin, Outcome, Phase, RestartSummary, Transition};

use super::{Manager, Running};
use crate::clock::now_ms;
use crate::identity;
use crate::restart::machine::{Effect, Input};
use crate::restart::observe::durations;
use crate::store::Instance;
use crate::supervisor::{self, GroupSignal, LogTail};

impl Manager {
    /// Steps the machine and carries out what it asks. The record's times
    /// are the machine's own: one clock reading decides a transition and
    /// dates it, so a phase that lasted its timeout is never recorded a
    /// little shorter (the effects run a moment after the decision).
    pub(super) fn feed(&mut self, input: Input) {
        let now = now_ms();
        let effects = self.machine.step(input, now);
        let changed = !effects.is_empty();
        for fx in effects {
            self.effect(fx, now);
        }
        if changed {
            self.publish_status(true);
        }
    }

    fn effect(&mut self, fx: Effect, now: u64) {
        match fx {
            Effect::Entered {
                phase,
                mut note,
                marker,
            } => {
                if phase == Phase::Draining {
                    note = self.drain_note();
                    // The timeline begins at the SIGTERM (the next effect),
                    // with what the server was serving just before it.
                    if let Some(latest) = self.hub.latest() {
                        self.timeline_point(&latest.sample, now, phase);
                    }
                }
                if phase == Phase::Verifying {
                    // Stopping ends with cgroup.kill: whatever is still in the
                    // server's cgroup now, tracked or not, is gone.
                    if let Some(cg) = &self.tracked.cgroups {
                        cg.kill_all();
                    }
                }
                tracing::info!(phase = phase.label(), %note, "server phase");
                if let Some(op) = self.op.as_mut() {
                    if op.entered.last().is_none_or(|(p, _)| *p != phase) {
                        op.entered.push((phase, now));
                    }
                    self.store.transition(
                        op.op.id,
                        Transition {
                            at_ms: now,
                            phase,
                            note,
                        },
                        marker,
                    );
                }
            }
            Effect::Sigterm => self.signal_all(libc::SIGTERM),
            Effect::KillAll => self.signal_all(libc::SIGKILL),
            Effect::Launch(flags) => self.launch(flags),
            Effect::Probe => match &self.node {
                // Only rank 0 serves: another rank is ready once it runs, and
                // the group once a completion comes back through rank 0.
                Some(n) if n.rank > 0 => {
                    let note = format!(
                        "{}: no endpoint of its own; ready once started (the group is ready when rank 0 answers)",
                        n.describe()
                    );
                    self.effect(
                        Effect::Entered {
                            phase: Phase::WarmingUp,
                            note,
                            marker: None,
                        },
                        now,
                    );
                    self.feed(Input::Ready);
                }
                _ => self.probes.start(self.generation, &self.cfg),
            },
            Effect::FastSampling(on) => self.scrape.fast(on),
            Effect::Finished { outcome, failure } => self.finished(outcome, failure, now),
            Effect::Crashed(failure) => {
                let failure = self.with_log(failure);
                tracing::warn!(failure = %failure.summary(), "server crashed");
                self.shown.failure = Some(failure);
                self.ended(now);
            }
        }
    }

    /// SIGTERM/SIGKILL to the server: each tracked member through its pidfd
    /// (those that left the group too); the process group when drainwatch made
    /// it and still holds proof it is the same group; and with SIGKILL, the
    /// server's cgroup whole (`cgroup.kill`). An adopted server's group and
    /// cgroup are never signalled.
    fn signal_all(&mut self, sig: i32) {
        self.track_descendants();
        let (group, pgid) = self
            .running
            .as_ref()
            .and_then(|r| r.group.as_ref())
            .map_or((None, None), |g| (Some(g.signal(sig)), Some(g.pgid)));
        let reached = matches!(group, Some(GroupSignal::ByPidfd | GroupSignal::ByNumber));
        let n = self.tracked.members.signal(sig, pgid.filter(|_| reached));
        let killed = match &self.tracked.cgroups {
            Some(cg) if sig == libc::SIGKILL => cg.kill_all(),
            _ => 0,
        };
        if group == Some(GroupSignal::NoProof) {
            tracing::info!(
                "the server's process group is not signalled: its leader is gone and with it the proof that the number is still its group"
            );
        }
        tracing::info!(
            signal = sig,
            processes = n,
            ?group,
            cgroups_killed = killed,
            "signalled the server"
        );
    }

    /// What a drain signals, in words, for the record.
    fn drain_note(&self) -> String {
        let n = self.tracked.members.alive();
        match self.running.as_ref() {
            Some(r) if r.origin == Origin::Adopted => {
                let head = format!(
                    "SIGTERM to the adopted server's {n} tracked process(es), never its process group"
                );
                let sweeps = self
                    .tracked
                    .cgroups
                    .as_ref()
                    .is_some_and(|c| !c.has_kill_file());
                match (&r.cgroup, r.contained) {
                    (Some(cg), true) if sweeps => {
                        format!("{head}; killing each process left in {cg} ends the stop")
                    }
                    (Some(cg), true) => format!("{head}; cgroup.kill of {cg} ends the stop"),
                    (Some(cg), false) => format!(
                        "{head}; it runs in cgroup {cg}, which is not drainwatch's, so anything it started outside drainwatch's view stays"
                    ),
                    (None, _) => head,
                }
            }
            Some(r) => match (&r.cgroup, r.contained) {
                (Some(cg), true) => format!(
                    "SIGTERM to the server's process group and its {n} process(es) in cgroup {cg}; {} ends the stop",
                    if self
                        .tracked
                        .cgroups
                        .as_ref()
                        .is_some_and(|c| !c.has_kill_file())
                    {
                        "killing each process left in it"
                    } else {
                        "cgroup.kill"
                    }
                ),
                _ => format!(
                    "SIGTERM to the server's process group and its {n} tracked process(es) ({})",
                    self.containment.summary()
                ),
            },
            None => "SIGTERM to what is left of the server".to_owned(),
        }
    }

    /// How the servers of the operation in flight are contained, for its record.
    pub(super) fn record_containment(&self) {
        let Some(op) = &self.op else { return };
        let r = self.running.as_ref();
        let text = self.containment.of_server(
            r.map(|r| r.origin),
            r.and_then(|r| r.cgroup.as_deref()),
            r.is_some_and(|r| r.contained),
        );
        self.store.containment(op.op.id, text);
    }

    fn launch(&mut self, flags: Flags) {
        self.probes.stop();
        // The last launch's log is not this one's, whatever happens next.
        self.log = None;
        if let Some(holder_pid) = identity::port_holder(self.cfg.port) {
            self.feed(Input::SpawnFailed(
                shared::restart::LaunchCause::PortInUse { holder_pid },
            ));
            return;
        }
        self.generation += 1;
        let inv = match &self.node {
            Some(n) if self.cfg.spans_nodes => {
                use crate::config::file::fill_node;
                let args: Vec<String> = self.cfg.args.iter().map(|a| fill_node(a, n)).collect();
                let env = (self.cfg.env.iter())
                    .map(|(k, v)| (k.clone(), fill_node(v, n)))
                    .collect();
                self.cfg.allow.invocation(&args, &env, &flags)
            }
            _ => self
                .cfg
                .allow
                .invocation(&self.cfg.args, &self.cfg.env, &flags),
        };
        let log_path = self.log_dir.join(format!("launch-{}.log", self.generation));
        let leaf = match &self.tracked.cgroups {
            // Empty leaves of earlier launches go on the manager's tick.
            Some(cg) => match cg.new_leaf(self.generation) {
                Ok(leaf) => Some(leaf),
                Err(e) => {
                    self.feed(Input::SpawnFailed(
                        shared::restart::LaunchCause::SpawnError {
                            message: e.to_string(),
                        },
                    ));
                    return;
                }
            },
            None => None,
        };
        let launched = supervisor::launch(&self.cfg, &inv, &log_path, leaf.as_ref());
        supervisor::prune(&self.log_dir);
        match launched {
            Ok(l) => {
                let now = now_ms();
                tracing::info!(
                    pid = l.root.pid,
                    generation = self.generation,
                    "server launched"
                );
                self.flags = flags;
                crate::redact::global().learn_pairs(&self.flags);
                self.shown.failure = None;
                let set = self.current_flagset();
                if let Some(op) = &self.op {
                    self.store.restart_flagset(op.op.id, set.id.clone());
                }
                self.store.flagset_seen(set);
                self.log = Some(LogTail::follow(&l.log_path, true));
                let cgroup = leaf.map(|l| l.name);
                self.store.instance(Instance {
                    generation: self.generation,
                    root: l.root,
                    pgid: l.group.pgid,
                    flags: self.flags.clone(),
                    started_at_ms: now,
                    log_path: Some(l.log_path.clone()),
                    origin: Origin::Launched,
                    cgroup: cgroup.clone(),
                });
                self.set_running(
                    Running {
                        root: l.root,
                        origin: Origin::Launched,
                        group: Some(l.group),
                        contained: cgroup.is_some(),
                        cgroup,
                        started_at_ms: now,
                    },
                    true,
                );
                self.record_containment();
                self.feed(Input::Spawned);
            }
            Err(cause) => self.feed(Input::SpawnFailed(cause)),
        }
    }

    /// Reads what the server logged since the last look; during an operation the
    /// record's log tail is stored as it grows, so a crash of drainwatch loses
    /// no more of it than of the timeline.
    pub(super) fn follow_log(&mut self) {
        let Some(l) = self.log.as_mut() else { return };
        if l.poll()
            && let Some(op) = &self.op
        {
            self.store.log_tail(op.op.id, l.last(200));
        }
    }

    /// Puts the launch log's tail into a failure that carries one.
    pub(super) fn with_log(&mut self, mut failure: Failure) -> Failure {
        let tail = self.log.as_mut().map(|l| {
            l.poll();
            l.last(40)
        });
        if let (
            Some(tail),
            Failure::LaunchFailed { log_tail, .. } | Failure::Crashed { log_tail, .. },
        ) = (tail, &mut failure)
        {
            *log_tail = tail;
        }
        failure
    }

    /// The server is gone for good (stopped, crashed, failed launch).
    pub(super) fn ended(&mut self, now: u64) {
        if self.running.take().is_some() {
            self.store.instance_ended(self.generation, now);
        }
        self.probes.stop();
        self.tracked.members.root_gone();
    }

    pub(super) fn finished(&mut self, outcome: Outcome, failure: Option<Failure>, now: u64) {
        // The last points go out under this operation's id, not the next one's.
        self.send_timeline();
        let failure = failure.map(|f| self.with_log(f));
        let phase = self.machine.phase();
        if matches!(phase, Phase::Stopped | Phase::Failed) {
            self.ended(now);
        }
        self.shown.failure = failure.clone();
        let Some(op) = self.op.take() else { return };
        let d = durations(&op.entered, op.op.started_at_ms, now);
        if let Some(l) = self.log.as_mut() {
            l.poll();
            self.store.log_tail(op.op.id, l.last(200));
        }
        self.store
            .finish(op.op.id, now, outcome, failure.clone(), d.clone());
        if outcome == Outcome::Succeeded && phase == Phase::Ready {
            self.bench.after(op.op.kind, op.op.id);
        }
        let launched = (outcome == Outcome::Succeeded
            && phase == Phase::Ready
            && matches!(op.op.kind, OpKind::Restart | OpKind::Start))
        .then(|| self.hub.latest())
        .flatten();
        let marks = (self.health).end(launched.as_ref().map(|p| &p.sample), &self.cfg, now);
        if !marks.is_empty() {
            self.store.health_marks(marks);
        }
        let summary = RestartSummary {
            id: op.op.id,
            kind: op.op.kind,
            requested_by: op.op.requested_by,
            started_at_ms: op.op.started_at_ms,
            finished_at_ms: Some(now),
            from_flags: op.op.from_flags,
            to_flags: op.op.to_flags,
            outcome,
            failure,
            durations: d,
        };
        let _ = self
            .events
            .send(super::Event::OpFinished(Box::new(summary.clone())));
        // Announce the finished record only once it is committed, so a client
        // that fetches it on the announcement reads it whole.
        let (store, hub) = (self.store.clone(), Arc::clone(&self.hub));
        let typical = Arc::clone(&self.shown.typical);
        tokio::spawn(async move {
            store.flush().await;
            hub.publish_restart(summary);
            match store.typical().await {
                Ok(t) => *typical.lock().unwrap_or_else(|p| p.into_inner()) = t,
                Err(e) => tracing::warn!(error = %e, "cannot re-read the typical durations"),
            }
        });
    }
}
