//! drainwatch's overhead on a restart (method and results in docs/PERFORMANCE.md):
//! 20 restarts of the simulated server through the real API, each compared with
//! what the server and the driver themselves took — the old server's SIGTERM →
//! exit (from its log), the driver's memory release delay, the new server's
//! start → all workers ready (from its log) and the readiness completion.

use std::time::Duration;

use serde_json::json;
use tests::managed::{ServerSpec, spawn_managed};
use tests::{SimHost, TestApp};

const RESTARTS: usize = 20;
const RELEASE_DELAY_MS: u64 = 300;
/// The readiness probe asks for 4 tokens: TTFT 40 ms + 3 × ITL 20 ms.
const PROBE_MS: u64 = 100;

/// `<what> at <ms> ms` in a simulated server's log.
fn logged_at(log: &str, what: &str) -> Option<u64> {
    log.lines()
        .filter(|l| l.contains(what))
        .filter_map(|l| {
            l.split(" at ")
                .nth(1)?
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        })
        .next_back()
}

fn launch_log(host: &SimHost, generation: u64) -> String {
    let p = host
        .scratch()
        .join(format!("data/logs/launch-{generation}.log"));
    std::fs::read_to_string(p).unwrap_or_default()
}

async fn one(app: &TestApp, host: &SimHost) -> anyhow::Result<(u64, u64)> {
    let g = app.server().await?.generation;
    let id = app.restart(json!({})).await?;
    let d = app.finished_restart(id, Duration::from_secs(60)).await?;
    anyhow::ensure!(
        d["summary"]["outcome"] == "succeeded",
        "restart failed: {d}"
    );
    let total = d["summary"]["durations"]["total_ms"].as_u64().unwrap_or(0);
    let (old, new) = (launch_log(host, g), launch_log(host, g + 1));
    let drain = logged_at(&old, "exiting with code").zip(logged_at(&old, "SIGTERM"));
    let warm = logged_at(&new, "all workers ready").zip(logged_at(&new, "started"));
    let (Some((exit, term)), Some((ready, started))) = (drain, warm) else {
        anyhow::bail!("timestamps missing from the launch logs");
    };
    let truth = (exit - term) + RELEASE_DELAY_MS + (ready - started) + PROBE_MS;
    Ok((total, truth))
}

fn main() -> anyhow::Result<()> {
    if !tests::bench_wanted("restart") {
        return Ok(());
    }
    let rt = tokio::runtime::Runtime::new()?;
    rt.block_on(async {
        let host = SimHost::new(RELEASE_DELAY_MS);
        let spec = ServerSpec {
            tp: 4,
            warmup_ms: 1_000,
            ..ServerSpec::default()
        };
        let app = spawn_managed(&host, &spec, &[])?;
        app.start_server().await?;
        let mut overhead = Vec::new();
        let mut totals = Vec::new();
        for _ in 0..RESTARTS {
            let (total, truth) = one(&app, &host).await?;
            overhead.push(total as i64 - truth as i64);
            totals.push(total);
        }
        overhead.sort_unstable();
        totals.sort_unstable();
        println!(
            "restart: {RESTARTS} restarts, total median {} ms; drainwatch overhead over the server's own drain + release + warm-up + probe: median {} ms, min {} ms, max {} ms",
            totals[RESTARTS / 2],
            overhead[RESTARTS / 2],
            overhead[0],
            overhead[RESTARTS - 1]
        );
        Ok(())
    })
}
