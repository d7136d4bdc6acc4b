//! drainwatch itself dies: SIGKILL in the middle of a drain, or while the server
//! runs. The history survives, the cut restart is marked interrupted, and the
//! next drainwatch re-finds the server by its recorded PID + start time.

use std::time::Duration;

use serde_json::json;
use shared::restart::Phase;
use tests::managed::{ServerSpec, spawn_managed};
use tests::{SimHost, TestApp};

const T: Duration = Duration::from_secs(30);

/// drainwatch with its server started. The server outlives a killed drainwatch;
/// the host's cgroup (which holds both) is killed when the test ends, so no
/// process group is ever killed by a number that may have been reused.
async fn started(host: &SimHost, spec: &ServerSpec) -> anyhow::Result<TestApp> {
    host.require_cgroup();
    let app = spawn_managed(host, spec, &[])?;
    app.start_server().await?;
    Ok(app)
}

/// Polls the stored record of restart `id` until it has `n` timeline points
/// and its log tail has the server's line about the SIGTERM.
async fn committed_points(app: &TestApp, id: i64, n: usize) -> anyhow::Result<()> {
    let deadline = std::time::Instant::now() + T;
    loop {
        let d = app.get_json(&format!("/api/restarts/{id}")).await?;
        let points = d["timeline"].as_array().map_or(0, Vec::len);
        if points >= n && d["log_tail"].to_string().contains("SIGTERM at") {
            return Ok(());
        }
        anyhow::ensure!(
            std::time::Instant::now() < deadline,
            "only {points} timeline points stored, or no SIGTERM in the log: {d}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn sigkill_mid_drain_keeps_the_history_and_marks_the_restart_interrupted()
-> anyhow::Result<()> {
    let host = SimHost::new(200);
    // The server drains for up to 15 s and drainwatch waits up to 20 s, so the
    // drain outlasts the test's wait by far.
    let spec = ServerSpec {
        env: vec![("SIMSERVER_MODE", "slow-drain=15000")],
        drain: "20s",
        ..ServerSpec::default()
    };
    let app = started(&host, &spec).await?;
    let port = app.server().await?.port;
    // A request that would take minutes keeps the drain busy.
    let long = reqwest::Client::new()
        .post(format!("http://127.0.0.1:{port}/v1/completions"))
        .json(&json!({"prompt": "x", "max_tokens": 100_000, "stream": true}))
        .send();
    let _long = tokio::spawn(long);
    app.wait_running(1, T).await?;
    let id = app.restart(json!({"--tp": "2"})).await?;
    // Wait until the database holds part of the drain, then kill mid-drain.
    committed_points(&app, id, 10).await?;
    assert_eq!(app.server().await?.phase, Phase::Draining);
    app.proc.kill_alone();

    let app = spawn_managed(&host, &spec, &[])?;
    let d = app.finished_restart(id, T).await?;
    assert_eq!(d["summary"]["outcome"], "interrupted", "{d}");
    assert_eq!(d["summary"]["failure"]["kind"], "interrupted");
    let phases: Vec<&str> = d["transitions"]
        .as_array()
        .expect("t")
        .iter()
        .filter_map(|t| t["phase"].as_str())
        .collect();
    assert_eq!(phases.first(), Some(&"draining"), "{phases:?}");
    assert_eq!(phases.last(), Some(&"failed"), "{phases:?}");
    let points = d["timeline"].as_array().expect("timeline").len();
    assert!(points >= 10, "only {points} timeline points survived");
    assert!(
        d["log_tail"].to_string().contains("SIGTERM at"),
        "the log tail written during the drain was lost: {d}"
    );
    // The start before it is intact too.
    let list = app.get_json("/api/restarts").await?;
    assert_eq!(list[1]["kind"], "start");
    assert_eq!(list[1]["outcome"], "succeeded");
    Ok(())
}

#[tokio::test]
async fn a_restarted_drainwatch_re_finds_the_running_server_and_can_restart_it()
-> anyhow::Result<()> {
    let host = SimHost::new(200);
    let spec = ServerSpec::default();
    let app = started(&host, &spec).await?;
    let before = app.server().await?;
    app.proc.kill_alone();

    let app = spawn_managed(&host, &spec, &[])?;
    let s = app.wait_phase(Phase::Ready, T).await?;
    assert_eq!(s.root, before.root, "not the same server");
    assert_eq!(s.generation, before.generation);
    // Its processes are still the server's, and a restart replaces them cleanly.
    let id = app.restart(json!({"--tp": "3"})).await?;
    let d = app.finished_restart(id, T).await?;
    assert_eq!(d["summary"]["outcome"], "succeeded", "{d}");
    let after = app.server().await?;
    assert_ne!(after.root, before.root);
    assert!(!tests::alive(before.root.expect("root").pid));
    Ok(())
}
