//! One real restart per misbehaviour of the simulated server: each ends in the
//! right state, leaves no GPU memory of ours behind, never touches the foreign
//! look-alike, and is recorded as it happened.

use std::time::Duration;

use serde_json::{Value, json};
use shared::restart::Phase;
use shared::{ProcessRole, Sample};
use tests::managed::{ServerSpec, spawn_managed};
use tests::{MIB, Proc, SimHost, TestApp, spawn_foreign};

const T: Duration = Duration::from_secs(40);

/// A managed server on GPUs 0–3, started, plus a foreign decoy on GPU 6.
async fn running(spec: ServerSpec) -> anyhow::Result<(SimHost, Proc, TestApp)> {
    let host = SimHost::new(300);
    let foreign = spawn_foreign(&host, 6, 1.0)?;
    let app = spawn_managed(&host, &spec, &[])?;
    app.start_server().await?;
    Ok((host, foreign, app))
}

/// Restarts into `mode`, then back to normal; returns both records.
async fn restart_into(app: &TestApp, mode: &str) -> anyhow::Result<Value> {
    let id = app.restart(json!({"SIMSERVER_MODE": mode})).await?;
    app.finished_restart(id, T).await
}

fn markers(d: &Value) -> Vec<String> {
    d["markers"]
        .as_array()
        .map(|m| {
            m.iter()
                .filter_map(|x| x["kind"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

fn notes(d: &Value) -> String {
    d["transitions"]
        .as_array()
        .map(|t| {
            t.iter()
                .filter_map(|x| x["note"].as_str())
                .collect::<Vec<_>>()
                .join(" | ")
        })
        .unwrap_or_default()
}

/// No process of ours holds memory and the server's GPUs are at baseline.
fn clean(s: &Sample) -> bool {
    s.processes
        .iter()
        .all(|p| p.role != ProcessRole::Server || p.gpu_mem.is_empty())
        && s.gpus[..4]
            .iter()
            .all(|g| g.mem_used_bytes == Some(4 * MIB))
}

#[tokio::test]
async fn a_server_that_ignores_sigterm_is_killed_after_the_drain_timeout() -> anyhow::Result<()> {
    let spec = ServerSpec {
        drain: "2s",
        ..ServerSpec::default()
    };
    let (_host, foreign, app) = running(spec).await?;
    // This generation ignores SIGTERM; restarting it must escalate.
    restart_into(&app, "ignore-sigterm").await?;
    let d = restart_into(&app, "normal").await?;
    assert_eq!(d["summary"]["outcome"], "succeeded", "{d}");
    assert_eq!(
        markers(&d),
        ["sigterm", "sigkill", "verified", "launch", "ready"]
    );
    assert!(notes(&d).contains("drain timed out"), "{}", notes(&d));
    let drain = d["summary"]["durations"]["drain_ms"]
        .as_u64()
        .expect("drain");
    assert!((2_000..4_000).contains(&drain), "drain took {drain} ms");
    assert!(d["summary"]["durations"]["kill_ms"].as_u64().is_some());
    assert!(tests::alive(foreign.pid()));
    Ok(())
}

#[tokio::test]
async fn an_orphan_that_escaped_the_group_is_found_and_killed() -> anyhow::Result<()> {
    let (_host, foreign, app) = running(ServerSpec::default()).await?;
    restart_into(&app, "orphan").await?;
    // The leftover: a process of ours in another session, holding 2 GiB on GPU 0.
    let s = app.state().await?.latest.expect("sample");
    let ours = s.processes.iter().filter(|p| p.role == ProcessRole::Server);
    let root_sid = app.server().await?.root.map(|r| r.pid as i32);
    let escaped: Vec<u32> = ours.filter(|p| p.sid != root_sid).map(|p| p.pid).collect();
    assert_eq!(escaped.len(), 1, "{s:#?}");

    let d = restart_into(&app, "normal").await?;
    assert_eq!(d["summary"]["outcome"], "succeeded", "{d}");
    assert!(!tests::alive(escaped[0]), "the escaped leftover survived");
    let ready = app.wait_phase(Phase::Ready, T).await?;
    assert!(ready.failure.is_none());
    assert!(tests::alive(foreign.pid()));
    Ok(())
}

#[tokio::test]
async fn a_slow_drain_finishes_in_flight_requests_and_the_timeline_shows_them() -> anyhow::Result<()>
{
    // The server waits up to 15 s for its requests, drainwatch up to 30 s: only
    // the requests' own lengths end the drain.
    let (_host, foreign, app) = running(ServerSpec {
        drain: "30s",
        ..ServerSpec::default()
    })
    .await?;
    restart_into(&app, "slow-drain=15000").await?;
    let port = app.server().await?.port;
    // Three streaming requests in flight when the restart begins, ending about
    // 1, 3.5 and 6 s later: the drain sees them finish one by one.
    let client = reqwest::Client::new();
    let mut streams = Vec::new();
    for tokens in [40, 150, 260] {
        let req = client
            .post(format!("http://127.0.0.1:{port}/v1/completions"))
            .json(&json!({"prompt": "hello", "max_tokens": tokens, "stream": true}))
            .send();
        streams.push(tokio::spawn(async move { req.await?.text().await }));
    }
    app.wait_running(3, T).await?;
    let d = restart_into(&app, "normal").await?;
    assert_eq!(d["summary"]["outcome"], "succeeded", "{d}");
    // The requests were allowed to finish (up to 260 tokens × 22.5 ms ≈ 6 s).
    for s in streams {
        let body = s.await??;
        assert!(body.contains("[DONE]"), "a request was cut off: {body}");
    }
    let running: Vec<u64> = d["timeline"]
        .as_array()
        .expect("timeline")
        .iter()
        .filter(|p| p["phase"] == "draining")
        .filter_map(|p| p["running_requests"].as_u64())
        .collect();
    // The drain shows requests finishing one by one.
    let most = running.iter().copied().max().unwrap_or(0);
    assert!(most >= 1, "{running:?}");
    assert!(running.last().is_some_and(|l| *l < most), "{running:?}");
    assert!(!markers(&d).contains(&"sigkill".to_owned()));
    assert!(tests::alive(foreign.pid()));
    Ok(())
}

#[tokio::test]
async fn an_oom_during_warm_up_fails_the_launch_with_the_log() -> anyhow::Result<()> {
    let (_host, foreign, app) = running(ServerSpec::default()).await?;
    let d = restart_into(&app, "oom").await?;
    assert_eq!(d["summary"]["outcome"], "failed", "{d}");
    let f = &d["summary"]["failure"];
    assert_eq!(f["kind"], "launch_failed");
    assert_eq!(f["cause"], "oom");
    let log = f["log_tail"].to_string();
    assert!(log.contains("CUDA out of memory"), "{log}");
    let status = app.wait_phase(Phase::Failed, T).await?;
    assert!(status.root.is_none());
    // The failed launch's memory is released like any other.
    app.wait_for_state("clean GPUs", T, |s| s.latest.as_ref().is_some_and(clean))
        .await?;
    assert!(tests::alive(foreign.pid()));
    // And the server can be started again from Failed.
    let id = app.restart(json!({"SIMSERVER_MODE": "normal"})).await?;
    assert_eq!(
        app.finished_restart(id, T).await?["summary"]["outcome"],
        "succeeded"
    );
    Ok(())
}

#[tokio::test]
async fn a_server_that_dies_on_its_own_is_reported_crashed() -> anyhow::Result<()> {
    let (_host, foreign, app) = running(ServerSpec::default()).await?;
    // Long enough after ready that the restart is recorded as succeeded first.
    let d = restart_into(&app, "crash=6000").await?;
    assert_eq!(d["summary"]["outcome"], "succeeded");
    let crashed = app.wait_phase(Phase::Crashed, T).await?;
    let f = serde_json::to_value(crashed.failure.expect("a failure"))?;
    assert_eq!(f["kind"], "crashed");
    assert_eq!(f["code"], 1, "{f}");
    assert!(f["log_tail"].to_string().contains("died"), "{f}");
    app.wait_for_state("clean GPUs", T, |s| s.latest.as_ref().is_some_and(clean))
        .await?;
    assert!(tests::alive(foreign.pid()));
    Ok(())
}

#[tokio::test]
async fn health_200_but_hanging_completions_time_out_the_warm_up() -> anyhow::Result<()> {
    let spec = ServerSpec {
        warmup_timeout: "10s",
        ..ServerSpec::default()
    };
    let (_host, foreign, app) = running(spec).await?;
    let d = restart_into(&app, "hang-completions").await?;
    assert_eq!(d["summary"]["outcome"], "failed", "{d}");
    let f = &d["summary"]["failure"];
    assert_eq!(f["cause"], "warmup_timeout", "{f}");
    assert!(notes(&d).contains("/health answers 200"), "{}", notes(&d));
    // The half-started server was killed.
    app.wait_for_state("clean GPUs", T, |s| s.latest.as_ref().is_some_and(clean))
        .await?;
    assert!(tests::alive(foreign.pid()));
    Ok(())
}

#[tokio::test]
async fn a_foreign_process_on_a_needed_gpu_blocks_the_launch_and_is_named() -> anyhow::Result<()> {
    let (host, other, app) = running(ServerSpec::default()).await?;
    // A colleague's notebook grabs 3 GiB on GPU 2, which the server needs.
    let squatter = spawn_foreign(&host, 2, 3.0)?;
    app.wait_for_state("the squatter's memory on GPU 2", T, |s| {
        s.latest.as_ref().is_some_and(|l| {
            l.processes
                .iter()
                .any(|p| p.pid == squatter.pid() && p.gpu_mem.iter().any(|g| g.gpu_index == 2))
        })
    })
    .await?;
    let d = restart_into(&app, "normal").await?;
    assert_eq!(d["summary"]["outcome"], "failed", "{d}");
    let f = &d["summary"]["failure"];
    assert_eq!(f["kind"], "foreign_holders", "{f}");
    assert_eq!(f["holders"][0]["pid"], squatter.pid());
    assert_eq!(f["holders"][0]["gpu_index"], 2);
    assert!(
        !markers(&d).contains(&"launch".to_owned()),
        "launched anyway"
    );
    assert!(tests::alive(squatter.pid()) && tests::alive(other.pid()));
    Ok(())
}
