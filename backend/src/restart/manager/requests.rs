//! Operators' requests: checked against the current state (typed confirmation,
//! generation, single flight, flags), audited, then begun or refused.

use shared::ProcId;
use shared::flags::Flags;
use shared::restart::{Accepted, OpKind, Operation, Origin, Outcome};

use super::health::{Parked, Reply};
use super::{Manager, OpRecord, Refusal, Request, Running};
use crate::clock::now_ms;
use crate::identity;
use crate::restart::gate;
use crate::restart::machine::{Input, op_name};
use crate::store::{AuditEntry, Instance};
use crate::supervisor::{self, cgroup};

impl Manager {
    /// Validates a request against the current state; accepts at most one at a
    /// time. A launch waits for the health gate's fresh reading first
    /// ([`health::HealthGate::park`](super::health::HealthGate::park)); every answer is audited before it is sent.
    pub(super) async fn request(&mut self, req: Request, reply: Reply) {
        if let Err(refusal) = self.coordinated(req.coordinated) {
            return self.answer(&req, Err(refusal), String::new(), reply);
        }
        let checked = self
            .check(&req)
            .and_then(|flags| Ok((flags, self.check_override(&req)?)));
        match checked {
            Err(refusal) => self.answer(&req, Err(refusal), String::new(), reply),
            Ok((to_flags, health)) => {
                let mut overridden = String::new();
                if let Some(v) = &health {
                    let lines: Vec<String> = v.refuse.iter().map(|i| i.line()).collect();
                    overridden = format!("health check overridden: {}", lines.join("; "));
                }
                let gpus = health.map(|v| v.refused_gpus()).unwrap_or_default();
                let parked = Parked {
                    req,
                    to_flags,
                    overridden: gpus,
                    override_note: overridden,
                    reply,
                };
                if matches!(parked.req.kind, OpKind::Restart | OpKind::Start) {
                    self.health.park(parked);
                    self.scrape.fast(true);
                } else {
                    self.go(parked).await;
                }
            }
        }
    }

    /// Acts on the health gate's decision on the launch it held: begins it,
    /// or answers it with the refusal.
    pub(super) async fn gate_decided(&mut self, decided: Option<super::health::Decision>) {
        let Some(d) = decided else { return };
        self.scrape.fast(self.machine.busy().is_some());
        match d.refusal {
            None => self.go(d.parked).await,
            Some(refusal) => {
                let p = d.parked;
                self.answer(&p.req, Err(refusal), p.override_note, p.reply);
            }
        }
    }

    /// Begins a request that passed every check (and, for a launch, the gate).
    pub(super) async fn go(&mut self, p: Parked) {
        let result = self.accept(&p.req, p.to_flags, p.overridden).await;
        self.answer(&p.req, result, p.override_note, p.reply);
    }

    /// Audits the answer to `req`, then sends it.
    pub(super) fn answer(
        &mut self,
        req: &Request,
        result: Result<Accepted, Refusal>,
        overridden: String,
        reply: Reply,
    ) {
        self.store.audit(AuditEntry {
            at_ms: now_ms(),
            peer: req.peer.clone(),
            action: op_name(req.kind).to_owned(),
            request: serde_json::to_string(&crate::redact::shown_changes(&req.flags))
                .unwrap_or_default(),
            outcome: match &result {
                Ok(a) => format!("accepted as #{}", a.id),
                Err(_) => "refused".to_owned(),
            },
            detail: match &result {
                Ok(_) => match &req.node {
                    Some(n) if overridden.is_empty() => n.describe(),
                    Some(n) => format!("{}; {overridden}", n.describe()),
                    None => overridden,
                },
                Err(r) => r.message().to_owned(),
            },
            count: 1,
            ..Default::default()
        });
        let _ = reply.send(result);
    }

    fn check(&self, req: &Request) -> Result<Flags, Refusal> {
        self.held(req.campaign)?;
        if let Some(kind) = self.health.waiting() {
            return Err(Refusal::Conflict {
                message: format!(
                    "a {} was asked first and waits for the GPUs' health check; try again in a moment",
                    op_name(kind)
                ),
                operation: None,
            });
        }
        // A restart or a stop cuts a person's benchmark short (see `accept`);
        // nothing else begins beside one.
        if let Some(run) = self.bench.running()
            && !matches!(req.kind, OpKind::Restart | OpKind::Stop)
        {
            return Err(Refusal::Conflict {
                message: format!("benchmark #{run} is running; cancel it or wait"),
                operation: None,
            });
        }
        if req.confirm.trim() != self.cfg.name {
            return Err(Refusal::BadRequest(format!(
                "type the server's name, `{}`, to confirm",
                self.cfg.name
            )));
        }
        if req.contain && req.kind != OpKind::Adopt {
            return Err(Refusal::BadRequest(
                "only an adoption can move a server into drainwatch's cgroup".to_owned(),
            ));
        }
        if req.contain && self.tracked.cgroups.is_none() {
            return Err(Refusal::BadRequest(format!(
                "cannot contain the adopted server: {}",
                self.containment.summary()
            )));
        }
        if req.generation != self.generation {
            return Err(Refusal::Stale(format!(
                "the server changed since you looked (generation {} is now {}); review and try again",
                req.generation, self.generation
            )));
        }
        let conflict = |message: String| Refusal::Conflict {
            message,
            operation: self.op.as_ref().map(|o| o.op.clone()),
        };
        if req.kind == OpKind::Adopt {
            if self.op.is_some() || self.running.is_some() {
                return Err(conflict("drainwatch already manages a server".to_owned()));
            }
            let Some(root) = self.shown.adoptable else {
                let port = self.cfg.port;
                return Err(conflict(match identity::port_holder(port) {
                    // Another user's: /proc hides its descriptors from us.
                    Some(None) => format!(
                        "a process drainwatch cannot see listens on port {port} (another user's: \
                         its sockets are hidden from drainwatch's user); run drainwatch as that \
                         user, or with CAP_SYS_PTRACE and CAP_KILL, to adopt it"
                    ),
                    _ => format!("no server is listening on port {port}"),
                }));
            };
            if let Some(uid) = crate::identity::owner(root.pid) {
                supervisor::may_signal(uid).map_err(|why| {
                    conflict(format!(
                        "cannot adopt the server on port {}: {why}",
                        self.cfg.port
                    ))
                })?;
            }
        } else {
            self.machine
                .can_begin(req.kind)
                .map_err(|e| conflict(e.to_string()))?;
        }
        self.check_node(req)?;
        if matches!(req.kind, OpKind::Stop | OpKind::Adopt) && !req.flags.is_empty() {
            return Err(Refusal::BadRequest(format!(
                "a {} takes no flags",
                op_name(req.kind)
            )));
        }
        self.cfg
            .allow
            .resolve(crate::redact::global(), &self.flags, &req.flags)
            .map_err(|e| Refusal::BadRequest(e.0))
    }

    /// A launch of a server that spans nodes says which node this is; no other
    /// request does.
    fn check_node(&self, req: &Request) -> Result<(), Refusal> {
        let launches = matches!(req.kind, OpKind::Restart | OpKind::Start);
        match (&req.node, self.cfg.spans_nodes) {
            (Some(n), true) if launches => n
                .check()
                .map_err(|e| Refusal::BadRequest(format!("node: {e}"))),
            (Some(_), true) => Err(Refusal::BadRequest(format!(
                "a {} takes no node",
                op_name(req.kind)
            ))),
            (Some(_), false) => Err(Refusal::BadRequest(
                "this server does not span nodes (its argv has no {node_rank}): send no node"
                    .to_owned(),
            )),
            (None, true) if launches => Err(Refusal::BadRequest(
                "this server spans nodes (its argv has {node_rank}): it is launched by the hub's coordinated restart, which says which node this is".to_owned(),
            )),
            (None, _) => Ok(()),
        }
    }

    /// An override of the health gate, checked: only with a launch, and
    /// naming exactly the server's GPUs the gate refuses now. Returns the
    /// verdict it overrides.
    fn check_override(&self, req: &Request) -> Result<Option<gate::Verdict>, Refusal> {
        let Some(typed) = req.override_health.as_deref() else {
            return Ok(None);
        };
        if !matches!(req.kind, OpKind::Restart | OpKind::Start) {
            return Err(Refusal::BadRequest(
                "only a restart or a start launches, so only they can override the health check"
                    .to_owned(),
            ));
        }
        let verdict = (self.hub.latest())
            .map(|p| self.health.now(&p.sample, &self.cfg))
            .unwrap_or_default();
        let refused = verdict.refused_gpus();
        if refused.is_empty() {
            return Err(Refusal::BadRequest(
                "nothing to override: the server's GPUs pass the health check".to_owned(),
            ));
        }
        let phrase = format!(
            "GPU {}",
            refused
                .iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        );
        if typed_gpus(typed) != Some(refused) {
            let lines: Vec<String> = verdict.refuse.iter().map(|i| i.line()).collect();
            return Err(Refusal::BadRequest(format!(
                "to launch anyway, type the GPUs the health check refuses, `{phrase}` ({})",
                lines.join("; ")
            )));
        }
        Ok(Some(verdict))
    }

    async fn accept(
        &mut self,
        req: &Request,
        to_flags: Flags,
        overridden: Vec<u32>,
    ) -> Result<Accepted, Refusal> {
        let now = now_ms();
        if let Some(id) = req.coordinated {
            // Held for the hub's restart from now on (renewed by each step).
            self.holds.coordinate(id);
        }
        // The record and every view of the operation show the flags redacted;
        // the machine gets them raw, to launch with.
        let redactor = crate::redact::global();
        let (from_shown, to_shown) = (redactor.flags(&self.flags), redactor.flags(&to_flags));
        let id = self
            .store
            .begin(req.kind, &req.peer, &from_shown, &to_shown, now)
            .await
            .map_err(|e| {
                tracing::error!(error = %e, "cannot record the operation");
                Refusal::Conflict {
                    message: "cannot record the operation; drainwatch's log says why".to_owned(),
                    operation: None,
                }
            })?;
        if let Some(run) = self.bench.interrupt() {
            tracing::info!(run, op = id, "the restart cuts the benchmark short");
        }
        if self.op.is_some() && self.machine.stop_preempts(req.kind) {
            // The launch in flight ends (recorded, interrupted) once the
            // stop's own record exists, and before the stop begins.
            self.feed(Input::Abandon);
        }
        self.op = Some(OpRecord {
            op: Operation {
                id,
                kind: req.kind,
                started_at_ms: now,
                requested_by: req.peer.clone(),
                from_flags: from_shown,
                to_flags: to_shown,
            },
            entered: Vec::new(),
            unsent: Vec::new(),
        });
        // The gate decides on slow fields read after this moment.
        self.health.begin(now, overridden);
        if req.kind == OpKind::Adopt {
            self.adopt(now, req.contain);
        } else {
            self.record_containment();
            // Whatever the server spawned since the last sample is ours too.
            self.track_descendants();
            if req.node.is_some() {
                self.node = req.node.clone();
            }
            self.feed(Input::Begin {
                kind: req.kind,
                to_flags,
            });
        }
        self.publish_status(true);
        Ok(Accepted { id, kind: req.kind })
    }

    fn adopt(&mut self, now: u64, contain: bool) {
        let Some(root) = self.shown.adoptable else {
            return;
        };
        let pgid = identity::of(root.pid).map_or(0, |i| i.pgid);
        self.generation += 1;
        let mut cgroup = cgroup::of_process(root.pid);
        let mut contained = false;
        if contain && let Some(cg) = &self.tracked.cgroups {
            // Moved on the operator's word only, parents first, so what they
            // fork from now on is born inside.
            match cg.new_leaf(self.generation) {
                Ok(leaf) => {
                    // Each by its pidfd: the PID written is that process's only
                    // if it is still alive after the write.
                    let moved: Vec<ProcId> = identity::descendants(root)
                        .into_iter()
                        .filter(|p| {
                            supervisor::Pidfd::open(*p)
                                .is_ok_and(|fd| leaf.add(p.pid).is_ok() && !fd.exited())
                        })
                        .collect();
                    tracing::info!(cgroup = %leaf.name, processes = moved.len(), "moved the adopted server into drainwatch's cgroup");
                    contained = moved.contains(&root);
                    if contained {
                        cgroup = Some(leaf.name);
                    }
                }
                Err(e) => tracing::warn!(error = %e, "cannot contain the adopted server"),
            }
        }
        self.store.instance(Instance {
            generation: self.generation,
            root,
            pgid,
            flags: self.flags.clone(),
            started_at_ms: now,
            log_path: None,
            origin: Origin::Adopted,
            cgroup: cgroup.clone(),
        });
        // Not our session: signal members one by one, never its group (it may be
        // a shell's).
        self.set_running(
            Running {
                root,
                origin: Origin::Adopted,
                group: None,
                cgroup,
                contained,
                started_at_ms: now,
            },
            false,
        );
        self.record_containment();
        self.log = None;
        self.feed(Input::Attached);
        self.finished(Outcome::Succeeded, None, now);
    }
}

/// The GPU indices an operator typed (`GPU 3, 5`, `3,5`, `gpu 5 and 3`), in
/// order; `None` when there are none or the text is long or holds no digits.
fn typed_gpus(typed: &str) -> Option<Vec<u32>> {
    if typed.len() > 200 {
        return None;
    }
    let mut gpus: Vec<u32> = typed
        .split(|c: char| !c.is_ascii_digit())
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().ok())
        .collect::<Option<_>>()?;
    gpus.sort_unstable();
    gpus.dedup();
    (!gpus.is_empty()).then_some(gpus)
}

#[cfg(test)]
mod tests {
    use super::typed_gpus;

    #[test]
    fn typed_gpus_are_read_leniently_but_must_name_some() {
        assert_eq!(typed_gpus("GPU 3"), Some(vec![3]));
        assert_eq!(typed_gpus("gpu 5, 3 and 3"), Some(vec![3, 5]));
        assert_eq!(typed_gpus("yes"), None);
        assert_eq!(typed_gpus("GPU 99999999999"), None);
        assert_eq!(typed_gpus(&"1".repeat(300)), None);
    }
}
