//! drainwatch's overhead on a restart (method and results in docs/PERFORMANCE.md):
//! 20 restarts of the simulated server through the real API, each compared with
//! what the server and the driver themselves took — the old server's SIGTERM →
//! exit (from its log), the driver's memory release delay, the new server's
//! start → all workers ready (from its log) and the readiness completion. Run
//! twice, interleaved restart by restart: with cgroup containment (the
//! default) and with `--cgroup off` (process group and tracked processes).
//!
//! `cgroup-kill`: the time from writing `cgroup.kill` to an empty
//! `cgroup.procs`, for a simulated server (launcher and 4 workers) in a leaf.

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
    // The drain starts when drainwatch sent SIGTERM (its marker): the server
    // may see a worker's exit before its own signal and not log the SIGTERM.
    let sigterm = d["markers"]
        .as_array()
        .and_then(|m| m.iter().find(|m| m["kind"] == "sigterm"))
        .and_then(|m| m["at_ms"].as_u64());
    let drain = logged_at(&old, "exiting with code").zip(sigterm);
    let warm = logged_at(&new, "all workers ready").zip(logged_at(&new, "started"));
    let (Some((exit, term)), Some((ready, started))) = (drain, warm) else {
        anyhow::bail!(
            "timestamps missing from the launch logs of generations {g} and {}:\n{old}\n---\n{new}",
            g + 1
        );
    };
    let truth = (exit - term) + RELEASE_DELAY_MS + (ready - started) + PROBE_MS;
    Ok((total, truth))
}

fn median(mut v: Vec<i64>) -> (i64, i64, i64) {
    v.sort_unstable();
    (v[v.len() / 2], v[0], v[v.len() - 1])
}

async fn restarts() -> anyhow::Result<()> {
    let spec = |_| ServerSpec {
        tp: 4,
        warmup_ms: 1_000,
        ..ServerSpec::default()
    };
    let (cg_host, pg_host) = (
        SimHost::new(RELEASE_DELAY_MS),
        SimHost::new(RELEASE_DELAY_MS),
    );
    let cg = spawn_managed(&cg_host, &spec(0), &[])?;
    let pg = spawn_managed(&pg_host, &spec(1), &["--cgroup", "off"])?;
    for (app, want) in [(&cg, "cgroup"), (&pg, "process_group")] {
        let s = app.start_server().await?;
        let kind = s.containment.map(|c| c.kind);
        anyhow::ensure!(
            serde_json::to_value(kind)? == want,
            "containment is {kind:?}, not {want}"
        );
    }
    let (mut over_cg, mut over_pg, mut totals) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..RESTARTS {
        let (total, truth) = one(&cg, &cg_host).await?;
        over_cg.push(total as i64 - truth as i64);
        totals.push(total as i64);
        let (total, truth) = one(&pg, &pg_host).await?;
        over_pg.push(total as i64 - truth as i64);
    }
    let mut diff: Vec<i64> = over_cg.iter().zip(&over_pg).map(|(a, b)| a - b).collect();
    diff.sort_unstable();
    let (c, cmin, cmax) = median(over_cg);
    let (p, pmin, pmax) = median(over_pg);
    println!(
        "restart: {RESTARTS} restarts each, total median {} ms; drainwatch overhead over the server's own drain + release + warm-up + probe: cgroup median {c} ms (min {cmin}, max {cmax}), process group only median {p} ms (min {pmin}, max {pmax}); cgroup − process group, restart by restart: median {} ms",
        median(totals).0,
        diff[RESTARTS / 2]
    );
    Ok(())
}

#[allow(unsafe_code)]
fn reap(pid: i32) {
    // SAFETY: waitpid on this process's own child; the status is discarded.
    unsafe { libc::waitpid(pid, std::ptr::null_mut(), 0) };
}

/// `cgroup.kill` → empty `cgroup.procs` for a launcher and 4 workers.
async fn cgroup_kill() -> anyhow::Result<()> {
    const ROUNDS: usize = 20;
    let host = SimHost::new(0);
    let cg = host.require_cgroup();
    let mut took_us = Vec::new();
    for _ in 0..ROUNDS {
        let mut cmd = std::process::Command::new(tests::bin("simserver"));
        cmd.args(["launch", "--port", "0", "--tp", "4", "--warmup-ms", "100"])
            .env(simhost::HOST_DIR_ENV, host.path())
            .stdout(std::process::Stdio::piped());
        cg.place(&mut cmd)?;
        let mut server = tests::Proc::spawn(&mut cmd)?;
        server.read_line_with("simserver listening on ")?;
        while cg.procs().len() < 5 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        // Reaped at once, as drainwatch reaps its child on SIGCHLD.
        let pid = server.pid() as i32;
        let reaper = std::thread::spawn(move || reap(pid));
        let start = std::time::Instant::now();
        std::fs::write(cg.dir.join("cgroup.kill"), "1")?;
        while !cg.procs().is_empty() {
            std::thread::sleep(Duration::from_micros(50));
        }
        took_us.push(start.elapsed().as_micros() as i64);
        let _ = reaper.join();
        drop(server);
    }
    let (m, lo, hi) = median(took_us);
    println!(
        "cgroup-kill: {ROUNDS} rounds, a launcher and 4 workers: cgroup.kill → empty cgroup.procs median {m} µs (min {lo}, max {hi})"
    );
    Ok(())
}

fn main() -> anyhow::Result<()> {
    let rt = tokio::runtime::Runtime::new()?;
    rt.block_on(async {
        if tests::bench_wanted("restart") {
            restarts().await?;
        }
        if tests::bench_wanted("cgroup-kill") {
            cgroup_kill().await?;
        }
        Ok(())
    })
}
