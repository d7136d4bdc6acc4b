//! What a flood and a big benchmark cost drainwatch (method and results in
//! docs/PERFORMANCE.md), on the release build through the real API.
//!
//! `audit-flood`: 200,000 anonymous refused requests (`POST /api/x`, one in a
//! hundred with a 60 KB path) from 8 loopback addresses, 32 in flight, against
//! drainwatch with `--auth` and a store: the store's growth on disk (database
//! and write-ahead log), the refusal rows and their counts, drainwatch's RSS.
//!
//! `bench-cancel`: a benchmark of 300 prompts of 131,072 tokens (one at a
//! time), cancelled after 2 s, five times: RSS before and at its peak, and the
//! time from the cancel's 202 to a status without the benchmark (when a
//! restart is taken again).

use std::net::IpAddr;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use serde_json::{Value, json};
use tests::managed::{ServerSpec, spawn_managed};
use tests::{SimHost, TestApp, auth_file};

fn rss(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kib| kib * 1024)
}

fn mib(b: u64) -> f64 {
    b as f64 / f64::from(1 << 20)
}

fn store_bytes(host: &SimHost) -> u64 {
    let data = host.scratch().join("data");
    ["drainwatch.sqlite3", "drainwatch.sqlite3-wal"]
        .iter()
        .filter_map(|f| std::fs::metadata(data.join(f)).ok())
        .map(|m| m.len())
        .sum()
}

async fn audit_flood() -> anyhow::Result<()> {
    const N: u32 = 200_000;
    const ADDRS: u32 = 8;
    let host = SimHost::new(100);
    let (auth, op, _) = auth_file(host.scratch(), "");
    let app = spawn_managed(
        &host,
        &ServerSpec::default(),
        &["--auth", auth.to_str().expect("utf-8")],
    )?
    .with_token(&op);
    app.start_server().await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (before, rss0) = (store_bytes(&host), rss(app.proc.pid()));
    let long = app.url(&format!("/api/{}", "x".repeat(60_000)));
    let t0 = Instant::now();
    let mut tasks = Vec::new();
    for a in 0..ADDRS {
        let client = reqwest::Client::builder()
            .local_address(format!("127.0.3.{}", a + 1).parse::<IpAddr>().ok())
            .build()?;
        let (short, long) = (app.url("/api/x"), long.clone());
        tasks.push(tokio::spawn(async move {
            let mut s = futures_util::stream::iter(0..N / ADDRS)
                .map(|i| {
                    let url = if i % 100 == 0 { &long } else { &short };
                    client.post(url).body("{}").send()
                })
                .buffer_unordered(32 / ADDRS as usize);
            let mut refused = 0u32;
            while let Some(r) = s.next().await {
                refused += u32::from(r?.status() == 401);
            }
            Ok::<u32, anyhow::Error>(refused)
        }));
    }
    let mut refused = 0;
    for t in tasks {
        refused += t.await??;
    }
    let took = t0.elapsed().as_secs_f64();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let log: Vec<Value> = app
        .get_json("/api/audit?limit=1000")
        .await?
        .as_array()
        .cloned()
        .unwrap_or_default();
    let rows = log.iter().filter(|a| a["kind"] == "refusals").count();
    let counted: u64 = log
        .iter()
        .filter(|a| a["kind"] == "refusals")
        .filter_map(|a| a["count"].as_u64())
        .sum();
    let actions_kept = log
        .iter()
        .any(|a| a["kind"] == "action" && a["action"] == "start");
    let grew = store_bytes(&host).saturating_sub(before);
    println!(
        "audit-flood: {refused} of {N} refused in {took:.1} s ({:.0} req/s); {rows} refusal rows counting {counted}; the operator's start kept: {actions_kept}; store grew {:.3} MiB; RSS {:.1} → {:.1} MiB",
        f64::from(N) / took,
        mib(grew),
        mib(rss0),
        mib(rss(app.proc.pid())),
    );
    Ok(())
}

async fn bench_cancel() -> anyhow::Result<()> {
    let host = SimHost::new(100);
    let app: TestApp = spawn_managed(&host, &ServerSpec::default(), &[])?;
    app.start_server().await?;
    let pid = app.proc.pid();
    let mut freed_ms = Vec::new();
    let (mut base, mut peak) = (u64::MAX, 0);
    for _ in 0..5 {
        base = base.min(rss(pid));
        let (code, body) = app
            .post(
                "/api/bench",
                &json!({"concurrency": [1], "num_prompts": 300, "input_len": 131072,
                        "output_len": 4, "warmup": 0, "repeats": 3}),
            )
            .await?;
        anyhow::ensure!(code == 202, "{code} {body}");
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(2) {
            peak = peak.max(rss(pid));
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let (code, _) = app.post("/api/bench/cancel", &json!({})).await?;
        anyhow::ensure!(code == 202);
        let t = Instant::now();
        while app.server().await?.bench.is_some() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        freed_ms.push(t.elapsed().as_secs_f64() * 1e3);
    }
    freed_ms.sort_by(f64::total_cmp);
    println!(
        "bench-cancel: RSS {:.1} MiB before, {:.1} MiB at the peak of a 300 × 131072-token run; cancel → no benchmark: median {:.0} ms (min {:.0}, max {:.0}) over 5",
        mib(base),
        mib(peak),
        freed_ms[2],
        freed_ms[0],
        freed_ms[4],
    );
    Ok(())
}

fn main() -> anyhow::Result<()> {
    let rt = tokio::runtime::Runtime::new()?;
    rt.block_on(async {
        if tests::bench_wanted("audit-flood") {
            audit_flood().await?;
        }
        if tests::bench_wanted("bench-cancel") {
            bench_cancel().await?;
        }
        Ok(())
    })
}
