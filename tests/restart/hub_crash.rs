//! A hub SIGKILLed in the middle of a coordinated restart, then started again
//! on the same records: it takes the operation up before anything new, asks
//! each node's agent what it did, writes that on the node's timeline, stops
//! and verifies every node (its stated policy), and ends the record
//! interrupted. Mid-drain, and mid-launch of rank 1. Meanwhile, a change
//! asked of a node directly is refused, naming the coordinated restart. A
//! coordinated restart cancelled at the hub stops before the launch.

use std::time::{Duration, Instant};

use serde_json::json;
use shared::fleet::{CoordRecord, CoordStep};
use shared::restart::{Outcome, Phase};

use crate::coordinated::{Fleet, fleet};

/// Waits until `pred` holds of record `id` and of both agents' phases.
async fn until(
    f: &Fleet,
    id: i64,
    what: &str,
    pred: impl Fn(&CoordRecord, [Phase; 2]) -> bool,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let r = f.record(id).await?;
        let phases = [
            f.agents[0].server().await?.phase,
            f.agents[1].server().await?.phase,
        ];
        if pred(&r, phases) {
            return Ok(());
        }
        if std::env::var_os("TEST_LOG").is_some() {
            eprintln!(
                "{phases:?} {:?}",
                r.members.iter().map(|m| m.events.len()).collect::<Vec<_>>()
            );
        }
        anyhow::ensure!(Instant::now() < deadline, "never {what}: {phases:?} {r:#?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The group up, then restarted again, with node b draining: b ignores
/// SIGTERM, so its drain runs its whole timeout. The fleet and the record.
async fn draining() -> anyhow::Result<(Fleet, i64)> {
    let f = fleet(vec![("SIMSERVER_MODE", "ignore-sigterm")]).await?;
    let up = f.run(json!({})).await?;
    assert_eq!(up.outcome, Outcome::Succeeded, "{up:#?}");
    let (code, body) = f.ask(&f.olga, json!({"confirm": "dsv3"})).await?;
    assert_eq!(code, 202, "{body}");
    let id = body["id"].as_i64().unwrap_or_default();
    until(&f, id, "b draining", |_, p| p[1] == Phase::Draining).await?;
    Ok((f, id))
}

/// SIGKILLs the hub, starts it again on the same records, and returns the
/// record `id` once the recovery ended it.
async fn killed_and_back(f: Fleet, id: i64) -> anyhow::Result<(Fleet, CoordRecord)> {
    let Fleet { _hub, _dir, .. } = &f;
    let pid = _hub.pid();
    tests::signal(pid, libc::SIGKILL);
    while tests::alive(pid) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let config = _dir.path().join("fleet.toml");
    let auth = _dir.path().join("auth.toml");
    let (hub, url) =
        tests::spawn_hub_with(&config, &["--auth", auth.to_str().expect("utf-8 path")])?;
    let f = Fleet {
        hub: url,
        _hub: hub,
        ..f
    };
    let r = f.wait(id).await?;
    Ok((f, r))
}

/// What every recovered record must show: interrupted, each node's agent
/// asked and its answer recorded, each node stopped and verified after.
async fn recovered(f: &Fleet, r: &CoordRecord) -> anyhow::Result<()> {
    if std::env::var_os("TEST_LOG").is_some() {
        for m in &r.members {
            for e in &m.events {
                eprintln!("{} {:?} {}", m.name, e.step, e.note);
            }
        }
    }
    assert_eq!(r.outcome, Outcome::Interrupted, "{r:#?}");
    let reason = r
        .failure
        .as_ref()
        .map(|f| f.reason.clone())
        .unwrap_or_default();
    assert!(
        reason.contains("every node was stopped and verified"),
        "{reason}"
    );
    for m in &r.members {
        let notes: Vec<&str> = (m.events.iter())
            .filter(|e| e.step == CoordStep::Recover)
            .map(|e| e.note.as_str())
            .collect();
        assert!(
            notes
                .iter()
                .any(|n| n.contains("the hub stopped during the operation")
                    && n.contains("its agent did #")
                    && n.contains("policy: stop and verify every node")),
            "{}: {notes:#?}",
            m.name
        );
        assert!(
            notes.iter().any(|n| n.starts_with("verified")),
            "{}: {notes:#?}",
            m.name
        );
    }
    for a in &f.agents {
        let s = a.server().await?;
        assert_eq!(s.phase, Phase::Stopped, "{s:#?}");
        assert!(s.root.is_none() && s.operation.is_none(), "{s:#?}");
    }
    // Taken up and ended: a new restart may begin.
    let (code, body) = f.ask(&f.olga, json!({"confirm": "dsv3"})).await?;
    assert_eq!(code, 202, "{body}");
    let again = f.wait(body["id"].as_i64().unwrap_or_default()).await?;
    assert_eq!(again.outcome, Outcome::Succeeded, "{again:#?}");
    for h in &f.hosts {
        assert!(h.foreign_signals().is_empty());
    }
    Ok(())
}

#[tokio::test]
async fn a_hub_killed_mid_drain_stops_and_verifies_every_node_when_it_is_back() -> anyhow::Result<()>
{
    let (f, id) = draining().await?;
    let (f, r) = killed_and_back(f, id).await?;
    recovered(&f, &r).await
}

#[tokio::test]
async fn a_hub_killed_mid_launch_of_rank_1_stops_and_verifies_every_node_when_it_is_back()
-> anyhow::Result<()> {
    let f = fleet(Vec::new()).await?;
    // A long warm-up: rank 1 is still warming up when the hub dies.
    let (code, body) = f
        .ask(
            &f.olga,
            json!({"confirm": "dsv3", "flags": {"--warmup-ms": "6000"}}),
        )
        .await?;
    assert_eq!(code, 202, "{body}");
    let id = body["id"].as_i64().unwrap_or_default();
    // Rank 1 launched, the group not ready yet (rank 0 still warming up).
    until(&f, id, "rank 1 launched", |r, p| {
        p[0] == Phase::WarmingUp
            && r.outcome == Outcome::Running
            && r.members[1]
                .events
                .iter()
                .any(|e| e.step == CoordStep::Launch)
    })
    .await?;
    let (f, r) = killed_and_back(f, id).await?;
    recovered(&f, &r).await
}

#[tokio::test]
async fn a_direct_stop_at_a_node_during_a_coordinated_restart_is_refused_naming_it()
-> anyhow::Result<()> {
    let (f, id) = draining().await?;
    // Straight at each agent, past the hub: refused, naming the operation.
    for a in &f.agents {
        let s = a.server().await?;
        let (code, body) = a
            .post(
                "/api/stop",
                &json!({"generation": s.generation, "confirm": s.name}),
            )
            .await?;
        assert_eq!(code, 409, "{body}");
        let error = body["error"].as_str().unwrap_or_default();
        assert!(
            error.contains(&format!("coordinated restart #{id}")),
            "{error}"
        );
    }
    let r = f.wait(id).await?;
    assert_eq!(r.outcome, Outcome::Succeeded, "{r:#?}");
    // Released at its end: the node is anyone's again.
    let s = f.agents[1].server().await?;
    let (code, body) = f.agents[1]
        .post(
            "/api/stop",
            &json!({"generation": s.generation, "confirm": s.name}),
        )
        .await?;
    assert_eq!(code, 202, "{body}");
    for h in &f.hosts {
        assert!(h.foreign_signals().is_empty());
    }
    Ok(())
}

#[tokio::test]
async fn a_coordinated_restart_cancelled_mid_drain_launches_nothing_and_says_cancelled()
-> anyhow::Result<()> {
    let (f, id) = draining().await?;
    // A viewer may not; an operator may.
    let url = format!("{}/api/coordinated/{id}/cancel", f.hub);
    assert_eq!(f.victor.post(&url).send().await?.status(), 403);
    let r = f.olga.post(&url).send().await?;
    assert_eq!(r.status(), 202);
    let r = f.wait(id).await?;
    assert_eq!(r.outcome, Outcome::Cancelled, "{r:#?}");
    for m in &r.members {
        assert!(
            !m.events.iter().any(|e| e.step == CoordStep::Launch),
            "{}: launched after the cancel: {:#?}",
            m.name,
            m.events
        );
        assert!(
            m.events.iter().any(|e| e.step == CoordStep::Cancel
                && e.note.contains("every node stopped and verified")),
            "{}: {:#?}",
            m.name,
            m.events
        );
    }
    for a in &f.agents {
        let s = a.server().await?;
        assert_eq!(s.phase, Phase::Stopped, "{s:#?}");
    }
    // Over: nothing left to cancel.
    assert_eq!(f.olga.post(&url).send().await?.status(), 409);
    for h in &f.hosts {
        assert!(h.foreign_signals().is_empty());
    }
    Ok(())
}
