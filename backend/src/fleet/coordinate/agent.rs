//! One agent asked through its own API: its state, an operation followed to
//! its end, a drain, a verification from a fresh sample, a launch.

use super::*;

/// Why a step on one member's agent did not go through. Each is worded for
/// the record, as its member's failure.
#[derive(Debug, Clone, thiserror::Error)]
pub(in crate::fleet) enum MemberError {
    /// Its agent could not be asked, or refused: the client's words.
    #[error("{0}")]
    Call(String),
    #[error("`{0}` is not an agent")]
    NotAgent(String),
    #[error("its drainwatch manages no server (it runs without --config)")]
    NoServer,
    /// Its operation did not end within the limit.
    #[error("its operation #{id} still runs after {}", humanize(*limit))]
    StillRuns { id: i64, limit: Duration },
    /// Its operation ended, not well: why, as its record says.
    #[error("{0}")]
    Failed(String),
    /// Someone else's operation runs there.
    #[error("its agent is running #{id} ({phase}) for {by}{}", if *waiting { ": wait for it to end" } else { ": left to them" })]
    Others {
        id: i64,
        phase: &'static str,
        by: String,
        waiting: bool,
    },
    /// One of this record's own still runs, past the time to unwind.
    #[error(
        "its agent's #{id} still runs ({phase}) after {}",
        humanize(UNWIND_WAIT)
    )]
    Unwinding { id: i64, phase: &'static str },
    #[error("not drained after {}: {}", humanize(*after), reasons.join("; "))]
    NotDrained {
        after: Duration,
        reasons: Vec<String>,
    },
    #[error("not spawned after {}", humanize(*.0))]
    NotSpawned(Duration),
}

impl From<crate::cli::CliError> for MemberError {
    fn from(e: crate::cli::CliError) -> Self {
        Self::Call(e.message)
    }
}

/// A client of agent `name` that acts for `person`.
pub(in crate::fleet) fn client(
    cfg: &FleetConfig,
    name: &str,
    person: &str,
) -> Result<Client, MemberError> {
    let a = cfg
        .agent(name)
        .ok_or_else(|| MemberError::NotAgent(name.to_owned()))?;
    Ok(Client::new(&a.remote())?.acting_for(person))
}

pub(in crate::fleet) async fn state(c: &Client) -> Result<(Snapshot, ServerStatus), MemberError> {
    let s: Snapshot = c.get("api/state").await?;
    let sv = s.server.clone().ok_or(MemberError::NoServer)?;
    Ok((s, sv))
}

pub(in crate::fleet) async fn summary(c: &Client, id: i64) -> Result<RestartSummary, MemberError> {
    let d: RestartDetail = c.get(&format!("api/restarts/{id}")).await?;
    Ok(d.summary)
}

/// Waits until the agent's operation `id` ends.
pub(super) async fn wait_op(
    c: &Client,
    id: i64,
    limit: Duration,
) -> Result<RestartSummary, MemberError> {
    let began = Instant::now();
    loop {
        let s = summary(c, id).await?;
        if s.outcome != Outcome::Running {
            return Ok(s);
        }
        if began.elapsed() >= limit {
            return Err(MemberError::StillRuns { id, limit });
        }
        tokio::time::sleep(POLL).await;
    }
}

/// An agent operation's kind, in a word.
pub(in crate::fleet) fn op_word(kind: shared::restart::OpKind) -> &'static str {
    crate::restart::machine::op_name(kind)
}

pub(super) fn humanize(d: Duration) -> String {
    format!("{} s", d.as_secs().max(1))
}

pub(super) fn why_failed(s: &RestartSummary) -> MemberError {
    MemberError::Failed(match (&s.failure, s.outcome) {
        (Some(f), _) => f.summary(),
        (None, Outcome::Interrupted) => format!("its operation #{} was interrupted", s.id),
        (None, _) => format!("its operation #{} did not succeed", s.id),
    })
}

/// Has the agent stop its own server (if it runs) and verify it. An
/// operation of someone else's running there fails the drain, naming it
/// (nothing of theirs is cut short); while unwinding, one of this record's
/// own is stopped once it may be (a launch warming up) or waited for.
pub(in crate::fleet) async fn drain(
    log: &Log,
    m: usize,
    c: &Client,
    step: CoordStep,
) -> Result<(), MemberError> {
    let began = Instant::now();
    let sv = loop {
        let (_, sv) = state(c).await?;
        let Some(op) = &sv.operation else { break sv };
        let ours = log.ops(m).contains(&op.id);
        if !ours {
            // Someone else's: never cut short, and what it launches is theirs.
            return Err(MemberError::Others {
                id: op.id,
                phase: sv.phase.label(),
                by: op.requested_by.clone(),
                waiting: step == CoordStep::Drain,
            });
        }
        if ours && matches!(sv.phase, Phase::Launching | Phase::WarmingUp) {
            break sv;
        }
        if began.elapsed() >= UNWIND_WAIT {
            return Err(MemberError::Unwinding {
                id: op.id,
                phase: sv.phase.label(),
            });
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
        .await?;
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
pub(in crate::fleet) async fn verify(
    log: &Log,
    m: usize,
    c: &Client,
    timeout: Duration,
    tolerance: u64,
    step: CoordStep,
) -> Result<(), MemberError> {
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
            return Err(MemberError::NotDrained {
                after: timeout,
                reasons,
            });
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Why a member is not fit for a coordinated restart now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Problem {
    Unreachable(String),
    /// Its config or the request does not fit: a request to fix.
    Invalid(String),
    /// Something else runs on it or holds it: wait.
    Busy(String),
}

impl Problem {
    pub(super) fn text(&self) -> String {
        match self {
            Self::Unreachable(e) => format!("cannot be reached: {e}"),
            Self::Invalid(e) | Self::Busy(e) => e.clone(),
        }
    }
}

/// What a member must be.
#[derive(Debug, Clone, Copy)]
pub(super) enum Fit<'a> {
    /// A node of a group, to launch with these flag changes.
    Node(&'a Changes),
    /// A server of its own, restarted by its own agent.
    Single,
}

/// Every member reachable, its server of the right kind, the flag changes
/// within its allow-list, nothing else running on it or holding it; else
/// the first that is not, and why.
pub(super) async fn fit(wants: &[(&Client, Fit<'_>)]) -> Result<(), (usize, Problem)> {
    let found = join_all(wants.iter().map(|(c, _)| state(c))).await;
    for (r, (found, &(_, want))) in found.into_iter().zip(wants).enumerate() {
        let (_, sv) = found.map_err(|e| (r, Problem::Unreachable(e.to_string())))?;
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
pub(super) fn refuses_flags(sv: &ServerStatus, changes: &Changes) -> Option<String> {
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
pub(super) async fn launch(
    log: &Log,
    m: usize,
    c: &Client,
    role: NodeRole,
    changes: &Changes,
) -> Result<i64, MemberError> {
    let (_, sv) = state(c).await?;
    let id = ask(
        log,
        m,
        c,
        "api/start",
        &sv,
        changes.clone(),
        Some(role.clone()),
    )
    .await?;
    log.event(
        m,
        CoordStep::Launch,
        format!("start #{id} on its agent: {}", role.describe()),
    );
    Ok(id)
}

/// Asks the agent for the operation at `path` on its server as `sv` shows it
/// (its generation and name confirm it), as a step of this record; returns
/// the operation's id, recorded as the member's.
pub(super) async fn ask(
    log: &Log,
    m: usize,
    c: &Client,
    path: &str,
    sv: &ServerStatus,
    flags: Changes,
    node: Option<NodeRole>,
) -> Result<i64, MemberError> {
    let req = RestartRequest {
        generation: sv.generation,
        flags,
        confirm: sv.name.clone(),
        override_health: None,
        node,
        coordinated: Some(log.id()),
    };
    let acc: Accepted = c.post(path, &req).await?;
    log.op(m, acc.id);
    Ok(acc.id)
}

/// Waits until the agent's start `id` has spawned the server (warming up),
/// or has ended well.
pub(super) async fn wait_spawned(c: &Client, id: i64, limit: Duration) -> Result<(), MemberError> {
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
            return Err(MemberError::NotSpawned(limit));
        }
        tokio::time::sleep(POLL).await;
    }
}
