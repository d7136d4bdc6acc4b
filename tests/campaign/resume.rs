//! drainwatch SIGKILLed in the middle of a campaign's step — while the old
//! server drains, while the new one warms up, while the benchmark runs — and
//! started again on the same data: the campaign resumes at the interrupted
//! step and ends with the ledger an uninterrupted run leaves: every step
//! measured once, none twice, none lost.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::bail;
use serde_json::Value;
use shared::restart::Phase;
use tests::managed::{ServerSpec, spawn_managed};
use tests::{SimHost, TestApp};

use crate::{BENCH, MEASURING, start, states, wait_over};

/// Three steps, measured each whatever the last one did.
fn plan() -> String {
    format!(
        r#"name = "resume"
reuse = false
{BENCH}
[grid]
SGLANG_OPT_USE_TILELANG_INDEXER = ["", "1"]
"--ep-size" = ["", 2]

[[exclude]]
SGLANG_OPT_USE_TILELANG_INDEXER = "1"
"--ep-size" = 2
"#
    )
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum KillAt {
    Draining,
    /// Draining, the root gone and its workers still tearing down.
    RootGone,
    /// The same where drainwatch has no cgroup of its own (process groups only).
    RootGoneNoCgroup,
    WarmingUp,
    Benchmarking,
}

/// What the ledger holds for a campaign: per flag set, whether it has a
/// result at concurrency 4, its succeeded runs, wrong answers, and the
/// campaign step and outcome it is linked to.
async fn ledger_of(app: &TestApp) -> anyhow::Result<BTreeMap<String, String>> {
    let rows = app.get_json("/api/flagsets").await?;
    let runs = app.get_json("/api/bench/runs?limit=100").await?;
    let mut out = BTreeMap::new();
    for r in rows.as_array().into_iter().flatten() {
        let id = r["set"]["id"].as_str().unwrap_or_default().to_owned();
        let ok_runs = runs
            .as_array()
            .into_iter()
            .flatten()
            .filter(|x| x["flagset"] == id.as_str() && x["status"] == "succeeded")
            .count();
        out.insert(
            id,
            format!(
                "measured={} succeeded_runs={ok_runs} wrong={} step={} outcome={}",
                r["levels"]["4"].is_object(),
                r["wrong_answers"],
                r["campaign"]["step"],
                r["campaign"]["outcome"]
            ),
        );
    }
    Ok(out)
}

/// The ledger an uninterrupted run of `c` leaves: each step's set measured
/// once and linked to its step, done.
fn uninterrupted(c: &Value) -> BTreeMap<String, String> {
    c["steps"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|s| {
            (
                s["flagset"].as_str().unwrap_or_default().to_owned(),
                format!(
                    "measured=true succeeded_runs=1 wrong=false step={} outcome=\"done\"",
                    s["index"]
                ),
            )
        })
        .collect()
}

/// Waits until the second step is in `at`, then SIGKILLs drainwatch.
async fn kill_when(app: TestApp, id: i64, at: KillAt) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let c = app.get_json(&format!("/api/campaigns/{id}")).await?;
        let step = &c["steps"][1];
        let status = app.server().await?;
        let now = match at {
            KillAt::Draining | KillAt::RootGone | KillAt::RootGoneNoCgroup => {
                step["state"] == "restarting"
                    && status.phase == Phase::Draining
                    && status.operation.is_some()
            }
            KillAt::WarmingUp => {
                step["state"] == "restarting"
                    && status.phase == Phase::WarmingUp
                    && status.operation.is_some()
            }
            KillAt::Benchmarking => step["state"] == "benchmarking" && status.bench.is_some(),
        };
        if now {
            if at == KillAt::Benchmarking {
                // Into the repeats, not at their very start.
                tokio::time::sleep(Duration::from_millis(700)).await;
            }
            let workers = server_pids(&app).await?;
            if matches!(at, KillAt::RootGone | KillAt::RootGoneNoCgroup) {
                // The root leaves at once on SIGTERM; its workers hold on.
                let root = status.root.map(|r| r.pid).unwrap_or_default();
                while alive(root) {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            }
            app.proc.kill_alone();
            if matches!(at, KillAt::RootGone | KillAt::RootGoneNoCgroup) {
                let left = workers.iter().filter(|p| alive(**p)).count();
                anyhow::ensure!(
                    left > 0,
                    "no worker outlived the root: the test proves nothing"
                );
            }
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("step 2 never reached {at:?}: {c:#}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The server's processes as drainwatch shows them now.
async fn server_pids(app: &TestApp) -> anyhow::Result<Vec<u32>> {
    let state = app.state().await?;
    Ok(state
        .latest
        .iter()
        .flat_map(|s| &s.processes)
        .filter(|p| p.role == shared::ProcessRole::Server)
        .map(|p| p.pid)
        .collect())
}

/// Whether `pid` runs (a zombie does not).
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .map(|(_, rest)| rest.trim_start().to_owned())
        })
        .is_some_and(|rest| !rest.starts_with('Z') && !rest.starts_with('X'))
}

async fn killed_and_resumed(at: KillAt) -> anyhow::Result<()> {
    let _load = MEASURING.read().await;
    let host = match at {
        KillAt::RootGoneNoCgroup => SimHost::new(100).without_cgroup_room(),
        _ => SimHost::new(100),
    };
    let mut spec = crate::spec("");
    if at == KillAt::Draining {
        // Servers that ignore SIGTERM: each drain lasts its whole timeout.
        spec = ServerSpec {
            env: vec![("SIMSERVER_MODE", "ignore-sigterm")],
            drain: "3s",
            ..spec
        };
    }
    if matches!(at, KillAt::RootGone | KillAt::RootGoneNoCgroup) {
        // Workers that tear down for 2.5 s after their root has left.
        spec = ServerSpec {
            env: vec![("SIMSERVER_MODE", "slow-teardown=2500")],
            ..spec
        };
    }
    if at == KillAt::WarmingUp {
        spec.warmup_ms = 2_000;
    }
    let app = spawn_managed(&host, &spec, &[])?;
    app.start_server().await?;
    let id = start(&app, &plan()).await?;
    kill_when(app, id, at).await?;

    // The same drainwatch, on the same data: it resumes on its own.
    let app = spawn_managed(&host, &spec, &[])?;
    let c = wait_over(&app, id, Duration::from_secs(180)).await?;
    assert_eq!(c["info"]["state"], "done", "{c:#}");
    assert_eq!(states(&c), ["done", "done", "done"], "{c:#}");
    // The interrupted step ran again: its restart is the second one.
    let step = &c["steps"][1];
    assert_eq!(
        step["attempts"], 1,
        "an interruption is not an attempt: {step}"
    );
    let restarts = app.get_json("/api/restarts?limit=50").await?;
    let interrupted = restarts
        .as_array()
        .into_iter()
        .flatten()
        .filter(|r| r["outcome"] == "interrupted")
        .count();
    let runs_interrupted = app
        .get_json("/api/bench/runs?limit=100")
        .await?
        .as_array()
        .into_iter()
        .flatten()
        .filter(|r| r["status"] == "interrupted")
        .count();
    match at {
        KillAt::Benchmarking => assert_eq!(runs_interrupted, 1, "{restarts:#}"),
        _ => assert_eq!(interrupted, 1, "{restarts:#}"),
    }
    assert_eq!(ledger_of(&app).await?, uninterrupted(&c));
    Ok(())
}

#[tokio::test]
async fn sigkilled_mid_drain_the_campaign_resumes_and_its_ledger_is_whole() -> anyhow::Result<()> {
    killed_and_resumed(KillAt::Draining).await
}

/// The old server's workers, still in drainwatch's cgroup leaf and still
/// holding memory when the new drainwatch starts, are its own: waited for,
/// killed if they must be, never called foreign.
#[tokio::test]
async fn sigkilled_mid_drain_with_workers_outliving_their_root_the_campaign_ends_done()
-> anyhow::Result<()> {
    killed_and_resumed(KillAt::RootGone).await
}

/// As above where only the process group and the recorded identities say
/// which processes are the server's.
#[tokio::test]
async fn sigkilled_mid_drain_without_a_cgroup_the_outliving_workers_are_still_ours()
-> anyhow::Result<()> {
    killed_and_resumed(KillAt::RootGoneNoCgroup).await
}

#[tokio::test]
async fn sigkilled_mid_warm_up_the_campaign_resumes_and_its_ledger_is_whole() -> anyhow::Result<()>
{
    killed_and_resumed(KillAt::WarmingUp).await
}

#[tokio::test]
async fn sigkilled_mid_benchmark_the_campaign_resumes_and_its_ledger_is_whole() -> anyhow::Result<()>
{
    killed_and_resumed(KillAt::Benchmarking).await
}
