//! The ordinary path: start, restart with new flags, stop.

use std::time::Duration;

use serde_json::json;
use shared::ProcessRole;
use shared::restart::Phase;
use tests::managed::{ServerSpec, spawn_managed};
use tests::{GIB, MIB, SimHost, spawn_foreign};

const T: Duration = Duration::from_secs(30);

#[tokio::test]
async fn restart_with_new_flags_drains_verifies_relaunches_and_records_it() -> anyhow::Result<()> {
    let host = SimHost::new(300);
    let foreign = spawn_foreign(&host, 6, 1.0)?; // a GPU the server does not use
    let app = spawn_managed(&host, &ServerSpec::default(), &[])?;

    let first = app.start_server().await?;
    assert_eq!(first.generation, 1);
    assert_eq!(first.flags["--tp"], "4");
    let old_root = first.root.expect("root");

    let id = app
        .restart(json!({"--tp": "2", "SGLANG_OPT_USE_TILELANG_INDEXER": "1"}))
        .await?;
    let ready = app.wait_phase(Phase::Ready, T).await?;
    assert_eq!(ready.generation, 2);
    assert_eq!(ready.flags["--tp"], "2");
    assert_eq!(ready.flags["SGLANG_OPT_USE_TILELANG_INDEXER"], "1");
    assert_ne!(ready.root, Some(old_root));
    assert!(ready.failure.is_none(), "{:?}", ready.failure);

    // The host: 2 workers now, on GPUs 0 and 1; GPUs 2 and 3 back at baseline; the
    // old server gone; the foreign process untouched.
    let state = app.state().await?;
    let sample = state.latest.expect("sample");
    let ours: Vec<_> = sample
        .processes
        .iter()
        .filter(|p| p.role == ProcessRole::Server)
        .collect();
    assert_eq!(
        ours.iter().filter(|p| !p.gpu_mem.is_empty()).count(),
        2,
        "{ours:#?}"
    );
    assert!(sample.processes.iter().all(|p| p.pid != old_root.pid));
    assert!(sample.gpus[0].mem_used_bytes >= Some(88 * GIB));
    assert_eq!(sample.gpus[2].mem_used_bytes, Some(4 * MIB));
    assert!(
        tests::alive(foreign.pid()),
        "the foreign process was touched"
    );

    // What was stored.
    let d = app.finished_restart(id, T).await?;
    let s = &d["summary"];
    assert_eq!(s["outcome"], "succeeded");
    assert_eq!(s["to_flags"]["--tp"], "2");
    assert_eq!(s["from_flags"]["--tp"], "4");
    for k in ["drain_ms", "verify_ms", "warmup_ms", "total_ms"] {
        assert!(s["durations"][k].as_u64().is_some(), "{k} missing: {s}");
    }
    let phases: Vec<&str> = d["transitions"]
        .as_array()
        .expect("transitions")
        .iter()
        .filter_map(|t| t["phase"].as_str())
        .collect();
    for want in ["draining", "verifying", "launching", "warming_up", "ready"] {
        assert!(phases.contains(&want), "{want} not in {phases:?}");
    }
    let markers: Vec<&str> = d["markers"]
        .as_array()
        .expect("m")
        .iter()
        .filter_map(|m| m["kind"].as_str())
        .collect();
    assert_eq!(markers, ["sigterm", "verified", "launch", "ready"]);
    // The timeline is sampled densely while the operation runs (every 20 ms
    // when the machine keeps up; a loaded one still gives ≥ 10 points a second).
    let points = d["timeline"].as_array().expect("timeline");
    let first_at = points
        .first()
        .and_then(|p| p["at_ms"].as_u64())
        .expect("points");
    let last_at = points
        .last()
        .and_then(|p| p["at_ms"].as_u64())
        .expect("points");
    let rate = points.len() as f64 / ((last_at - first_at) as f64 / 1000.0);
    assert!(
        rate >= 10.0,
        "{} points over {} ms",
        points.len(),
        last_at - first_at
    );
    assert_eq!(
        points[0]["mem_used_bytes"].as_array().map(Vec::len),
        Some(8)
    );

    let list = app.get_json("/api/restarts").await?;
    assert_eq!(list[0]["id"], id);
    assert_eq!(list[1]["kind"], "start");
    Ok(())
}

#[tokio::test]
async fn stop_leaves_every_gpu_at_baseline() -> anyhow::Result<()> {
    let host = SimHost::new(300);
    let app = spawn_managed(&host, &ServerSpec::default(), &[])?;
    let ready = app.start_server().await?;
    let (code, body) = app
        .post(
            "/api/stop",
            &json!({"generation": ready.generation, "confirm": "sim"}),
        )
        .await?;
    assert_eq!(code, 202, "{body}");
    let stopped = app.wait_phase(Phase::Stopped, T).await?;
    assert!(stopped.root.is_none());
    let s = app.state().await?.latest.expect("sample");
    for g in &s.gpus[..4] {
        assert_eq!(g.mem_used_bytes, Some(4 * MIB), "GPU {}", g.index);
    }
    assert!(s.processes.iter().all(|p| p.role != ProcessRole::Server));
    Ok(())
}

#[tokio::test]
async fn a_server_started_by_hand_is_adopted_on_request_then_restarted() -> anyhow::Result<()> {
    let host = SimHost::new(300);
    let spec = ServerSpec::default();
    let by_hand = tests::SimServer::launch_on(&host, spec.port, 4, 300)?;
    // Adopted, it is drainwatch's to stop: its tracked processes, never its group.
    host.allow_signals_to(by_hand.proc.pid());
    let app = spawn_managed(&host, &spec, &[])?;
    // Seen, but not taken over without an explicit action.
    let s = app.wait_adoptable(T).await?;
    assert_eq!(s.phase, Phase::Stopped);
    assert_eq!(s.adoptable.map(|r| r.pid), Some(by_hand.proc.pid()));

    let (code, body) = app
        .post(
            "/api/adopt",
            &json!({"generation": s.generation, "confirm": "sim"}),
        )
        .await?;
    assert_eq!(code, 202, "{body}");
    let adopted = app.wait_phase(Phase::Ready, T).await?;
    assert_eq!(adopted.root.map(|r| r.pid), Some(by_hand.proc.pid()));
    assert_eq!(adopted.generation, s.generation + 1);

    let id = app.restart(json!({})).await?;
    let d = app.finished_restart(id, T).await?;
    assert_eq!(d["summary"]["outcome"], "succeeded", "{d}");
    let now = app.server().await?;
    assert_ne!(now.root.map(|r| r.pid), Some(by_hand.proc.pid()));
    let kinds: Vec<String> = app
        .get_json("/api/restarts")
        .await?
        .as_array()
        .expect("list")
        .iter()
        .filter_map(|r| r["kind"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(kinds, ["restart", "adopt"]);
    Ok(())
}

/// Every browser sees the drain chart grow: the points taken during an
/// operation reach an open socket as they are taken, and they are the points
/// the record keeps.
#[tokio::test]
async fn the_timeline_reaches_every_socket_as_it_is_taken() -> anyhow::Result<()> {
    use shared::ServerMsg;
    let host = SimHost::new(300);
    let spec = ServerSpec {
        warmup_ms: 2_000,
        ..ServerSpec::default()
    };
    let app = spawn_managed(&host, &spec, &[])?;
    app.start_server().await?;
    let mut ws = tests::ws::WsClient::connect(&app.addr).await?;
    let id = app.restart(json!({"--tp": "3"})).await?;
    let mut pushed: Vec<u64> = Vec::new();
    let mut messages = 0;
    let deadline = std::time::Instant::now() + T;
    loop {
        anyhow::ensure!(std::time::Instant::now() < deadline, "restart never ended");
        match ws.next_msg(T).await? {
            ServerMsg::Timeline { restart_id, points } => {
                assert_eq!(restart_id, id);
                messages += 1;
                for p in points {
                    assert!(pushed.last().is_none_or(|l| p.at_ms > *l), "out of order");
                    pushed.push(p.at_ms);
                }
            }
            ServerMsg::Restart(s)
                if s.id == id && s.outcome != shared::restart::Outcome::Running =>
            {
                break;
            }
            _ => {}
        }
    }
    // Several points to a message, many messages over the ≥ 2 s the restart took.
    assert!(messages >= 5, "{messages} timeline messages");
    assert!(
        pushed.len() > messages,
        "{} points in {messages} messages",
        pushed.len()
    );
    let d = app.finished_restart(id, T).await?;
    let stored: Vec<u64> = d["timeline"]
        .as_array()
        .expect("timeline")
        .iter()
        .filter_map(|p| p["at_ms"].as_u64())
        .collect();
    assert_eq!(pushed, stored, "the socket and the record disagree");
    Ok(())
}
