//! A group's and a deployment's whole operation, step by step, and the unwind
//! after a failure.

use super::agent::{ask, humanize, launch, wait_op, wait_spawned, why_failed};
use super::*;

/// The group's node of rank `r` (member `idx[r]`) failed for `why`; every
/// other node is told, in `others`' words naming the failed member, that it
/// went no further.
fn one_failed(
    log: &Log,
    idx: &[usize],
    r: usize,
    why: String,
    others: impl Fn(&str) -> String,
) -> CoordFailure {
    let failure = log.failed(idx[r], why);
    for (_, &m) in idx.iter().enumerate().filter(|(o, _)| *o != r) {
        log.event(m, CoordStep::Failed, others(&failure.member));
    }
    failure
}

/// Drains every node of group `g` (step 1), then verifies every node (step
/// 2). Nothing launches before all pass: the first that did not is the
/// failure, the others are told why nothing launched.
async fn stop_all(
    log: &Log,
    g: &GroupConfig,
    idx: &[usize],
    clients: &[Client],
) -> Result<(), CoordFailure> {
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
                return Err(MemberError::Failed(String::new()));
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
        return Err(one_failed(log, idx, r, why, |m| {
            format!("nothing launched: node `{m}` is not clean")
        }));
    }
    Ok(())
}

/// Launches rank 0 (step 3), then the others (step 4), then waits for a
/// completion through rank 0 (step 5); `Err`: the rank that failed, and why.
async fn launch_all(
    log: &Log,
    g: &GroupConfig,
    idx: &[usize],
    clients: &[Client],
    flags: &Changes,
) -> Result<(), (usize, String)> {
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
    let others = join_all((1..clients.len()).map(|r| async move {
        let id = launch(log, idx[r], &clients[r], g.role(r), flags).await?;
        let s = wait_op(&clients[r], id, g.launch_timeout).await?;
        match s.outcome {
            Outcome::Succeeded => Ok(()),
            _ => Err(why_failed(&s)),
        }
    }))
    .await;
    for (r, res) in others.into_iter().enumerate() {
        res.map_err(|e| (r + 1, format!("launch: {e}")))?;
    }
    wait_ready(log, g, idx, clients, id0).await
}

/// The coordinated restart of group `g`, whose nodes are the record's
/// members `idx` (in rank order).
pub(super) async fn run_group(
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
        return Err(one_failed(log, idx, r, problem.text(), |m| {
            format!("nothing stopped: node `{m}` is not ready for it")
        }));
    }
    stop_all(log, g, idx, &clients).await?;
    // A cancel asked meanwhile stops here: every node stopped and verified.
    log.stop_if_cancelled(idx, "every node stopped and verified, nothing launched")?;
    // 3. Rank 0, then 4. the others, then 5. a completion through rank 0.
    let launched = launch_all(log, g, idx, &clients, flags).await;
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
pub(super) async fn wait_ready(
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
        let s0 = (summary(&clients[0], id0).await).map_err(|e| (0, e.to_string()))?;
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
            let (_, sv) = state(c).await.map_err(|e| (r, e.to_string()))?;
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
pub(super) async fn unwind(log: &Log, g: &GroupConfig, idx: &[usize], clients: &[Client]) {
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
pub(super) async fn run_deployment(
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
pub(super) async fn restart_one(log: &Log, m: usize, c: &Client) -> Result<(), MemberError> {
    let (_, sv) = state(c).await?;
    let path = if sv.phase == Phase::Ready {
        "api/restart"
    } else {
        "api/start"
    };
    let id = ask(log, m, c, path, &sv, Changes::new(), None).await?;
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
            id
        ),
    );
    let s = wait_op(c, id, OP_LIMIT).await?;
    if s.outcome != Outcome::Succeeded {
        return Err(why_failed(&s));
    }
    log.event(
        m,
        CoordStep::Ready,
        format!("ready: its agent's #{id} ended with a completion"),
    );
    Ok(())
}
