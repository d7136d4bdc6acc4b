//! One real restart per misbehaviour of the simulated server: each ends in the
//! right state, leaves no GPU memory of ours behind, never touches the foreign
//! look-alike, and is recorded as it happened.

use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::{Value, json};
use shared::restart::Phase;
use shared::{ProcessRole, Sample};
use simhost::ProcStat;
use tests::managed::{ServerSpec, notes, spawn_managed};
use tests::{GIB, MIB, Proc, SimHost, TestApp, spawn_foreign};

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

/// No process of ours holds memory and the server's GPUs are at baseline.
fn clean(s: &Sample) -> bool {
    s.processes
        .iter()
        .all(|p| p.role != ProcessRole::Server || p.gpu_mem.is_empty())
        && s.gpus[..4]
            .iter()
            .all(|g| g.mem_used_bytes == Some(4 * MIB))
}

/// A process as `/proc` shows it now (PID and start time: its identity).
fn stat(pid: u32) -> anyhow::Result<ProcStat> {
    simhost::read_proc_stat(pid)?.with_context(|| format!("process {pid} is not in /proc"))
}

/// Still the process `was`: the same PID, started at the same time, not exited.
fn still(was: &ProcStat) -> bool {
    simhost::read_proc_stat(was.pid)
        .ok()
        .flatten()
        .is_some_and(|now| now.start_ticks == was.start_ticks && !now.has_exited())
}

/// The generation running now, from `/proc` rather than drainwatch's process
/// list: its root and every descendant (whatever their session), root first.
async fn generation(app: &TestApp) -> anyhow::Result<Vec<ProcStat>> {
    let root = app.server().await?.root.context("a running server")?;
    let first = stat(root.pid)?;
    anyhow::ensure!(
        first.start_ticks == root.start_ticks,
        "the root {} was replaced",
        root.pid
    );
    let mut all = vec![first];
    all.extend(simhost::descendants(root.pid));
    // The launcher and its 4 workers at least.
    anyhow::ensure!(all.len() >= 5, "not a whole server: {all:?}");
    Ok(all)
}

/// After a restart, by the host's own truth: no process of the `old`
/// generation is alive or holds memory on any GPU, and the foreign decoy is
/// the same live process, holding exactly its 1 GiB on GPU 6 and nothing else.
fn old_gone_and_decoy_untouched(
    host: &SimHost,
    old: &[ProcStat],
    decoy: &ProcStat,
) -> anyhow::Result<()> {
    let held = host.held()?;
    for &(gpu, pid, bytes) in &held {
        if let Some(was) = old.iter().find(|o| o.pid == pid) {
            // The PID taken since by a process started later is not the old one.
            let reused =
                simhost::read_proc_stat(pid)?.is_some_and(|now| now.start_ticks != was.start_ticks);
            anyhow::ensure!(
                reused,
                "process {pid} of the old generation still holds {bytes} bytes on GPU {gpu}: {held:?}"
            );
        }
    }
    let alive: Vec<u32> = old.iter().filter(|o| still(o)).map(|o| o.pid).collect();
    anyhow::ensure!(
        alive.is_empty(),
        "processes of the old generation are still alive: {alive:?}"
    );
    anyhow::ensure!(still(decoy), "the foreign decoy {} is gone", decoy.pid);
    let mine: Vec<(usize, u64)> = held
        .iter()
        .filter(|h| h.1 == decoy.pid)
        .map(|h| (h.0, h.2))
        .collect();
    anyhow::ensure!(
        mine == vec![(6_usize, GIB)],
        "the decoy holds {mine:?}, not its 1 GiB on GPU 6"
    );
    Ok(())
}

#[tokio::test]
async fn a_server_that_ignores_sigterm_is_killed_after_the_drain_timeout() -> anyhow::Result<()> {
    let spec = ServerSpec {
        drain: "2s",
        ..ServerSpec::default()
    };
    let (host, foreign, app) = running(spec).await?;
    let decoy = stat(foreign.pid())?;
    // This generation ignores SIGTERM; restarting it must escalate.
    restart_into(&app, "ignore-sigterm").await?;
    let old = generation(&app).await?;
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
    // Not only drainwatch's word: the host itself says the killed generation
    // is gone from every GPU, and the decoy is untouched.
    old_gone_and_decoy_untouched(&host, &old, &decoy)?;
    Ok(())
}

#[tokio::test]
async fn an_orphan_that_escaped_the_group_is_found_and_killed() -> anyhow::Result<()> {
    let (host, foreign, app) = running(ServerSpec::default()).await?;
    let decoy = stat(foreign.pid())?;
    restart_into(&app, "orphan").await?;
    // The leftover: a process of ours in another session, holding 2 GiB on GPU 0.
    let s = app.state().await?.latest.expect("sample");
    let ours = s.processes.iter().filter(|p| p.role == ProcessRole::Server);
    let root_sid = app.server().await?.root.map(|r| r.pid as i32);
    let escaped: Vec<u32> = ours.filter(|p| p.sid != root_sid).map(|p| p.pid).collect();
    assert_eq!(escaped.len(), 1, "{s:#?}");
    // The same, by /proc and the host: the one process of this generation
    // outside the launcher's group, and its 2 GiB on GPU 0.
    let old = generation(&app).await?;
    let outside: Vec<u32> = old
        .iter()
        .filter(|p| p.pgid != old[0].pgid)
        .map(|p| p.pid)
        .collect();
    assert_eq!(outside, escaped, "{old:?}");
    let deadline = Instant::now() + T;
    while !host.held()?.contains(&(0, escaped[0], 2 * GIB)) {
        anyhow::ensure!(
            Instant::now() < deadline,
            "the leftover never held its 2 GiB on GPU 0: {:?}",
            host.held()?
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let d = restart_into(&app, "normal").await?;
    assert_eq!(d["summary"]["outcome"], "succeeded", "{d}");
    assert!(!tests::alive(escaped[0]), "the escaped leftover survived");
    let ready = app.wait_phase(Phase::Ready, T).await?;
    assert!(ready.failure.is_none());
    assert!(tests::alive(foreign.pid()));
    // The record: the leftover ignores SIGTERM and outlives its group, so the
    // drain runs out (one process of ours still alive) and SIGKILL ends it.
    assert_eq!(
        markers(&d),
        ["sigterm", "sigkill", "verified", "launch", "ready"]
    );
    assert!(
        notes(&d).contains("drain timed out") && notes(&d).contains("1 process(es) alive"),
        "{}",
        notes(&d)
    );
    let drain = d["summary"]["durations"]["drain_ms"]
        .as_u64()
        .expect("drain");
    assert!(
        drain >= 5_000,
        "the drain ended at {drain} ms, before its timeout"
    );
    assert!(d["summary"]["durations"]["kill_ms"].as_u64().is_some());
    let phases: Vec<&str> = d["transitions"]
        .as_array()
        .expect("transitions")
        .iter()
        .filter_map(|t| t["phase"].as_str())
        .collect();
    assert_eq!(phases.first(), Some(&"draining"), "{phases:?}");
    assert!(phases.contains(&"killing"), "{phases:?}");
    assert_eq!(phases.last(), Some(&"ready"), "{phases:?}");
    // The timeline saw the leftover alone: during the drain, GPU 0 still held
    // its 2 GiB once the workers' memory on GPUs 1–3 was back at baseline.
    let alone = d["timeline"]
        .as_array()
        .expect("timeline")
        .iter()
        .filter(|p| p["phase"] == "draining")
        .any(|p| {
            let mem = |i: usize| p["mem_used_bytes"][i].as_u64();
            mem(0).is_some_and(|b| b >= 2 * GIB) && (1..4).all(|i| mem(i) == Some(4 * MIB))
        });
    assert!(
        alone,
        "no drain point shows the leftover alone on GPU 0: {d}"
    );
    // And the host itself: the whole orphan generation, leftover included,
    // is gone from every GPU; the decoy is untouched.
    old_gone_and_decoy_untouched(&host, &old, &decoy)?;
    Ok(())
}

#[tokio::test]
async fn a_slow_drain_finishes_in_flight_requests_and_the_timeline_shows_them() -> anyhow::Result<()>
{
    // The server waits up to 15 s for its requests, drainwatch up to 30 s: only
    // the requests' own lengths end the drain.
    let (host, foreign, app) = running(ServerSpec {
        drain: "30s",
        ..ServerSpec::default()
    })
    .await?;
    let decoy = stat(foreign.pid())?;
    restart_into(&app, "slow-drain=15000").await?;
    let old = generation(&app).await?;
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
    // The drained generation is gone from every GPU by the host's own
    // account, and the decoy is untouched.
    old_gone_and_decoy_untouched(&host, &old, &decoy)?;
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
