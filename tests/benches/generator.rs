//! drainwatch's load generator at high concurrency (method and results in
//! docs/PERFORMANCE.md): 256 closed-loop clients against the release simulated
//! server tuned to ~28k output tok/s, three repeats, one token per event and
//! then three (speculative decoding); reports measured / true rate and the CPU
//! both processes used.

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Instant;

use drainwatch::bench::load::{self, Counters, Target};
use drainwatch::bench::stats;
use shared::bench::BenchApi;
use tests::{Proc, SimHost, bin};

const C: u32 = 256;
const N: u32 = 256;
const PROMPTS: u32 = 512;
const ITL_MS: f64 = 6.0;
const TTFT_MS: f64 = 10.0;
const KNEE: f64 = 512.0;

fn cpu_s(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let after = &stat[stat.rfind(')').map_or(0, |i| i + 1)..];
    let f: Vec<&str> = after.split_whitespace().collect();
    let ticks: u64 = f.get(11).and_then(|v| v.parse().ok()).unwrap_or(0)
        + f.get(12).and_then(|v| v.parse().ok()).unwrap_or(0);
    ticks as f64 / 100.0
}

fn truth(speed: f64) -> f64 {
    let load = 1.0 + f64::from(C - 1) / KNEE;
    let per = TTFT_MS * load + f64::from(N - 1) * ITL_MS * load / speed;
    f64::from(C) * f64::from(N) / (per / 1e3)
}

fn main() -> anyhow::Result<()> {
    if !tests::bench_wanted("generator") {
        return Ok(());
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    for (name, extra, speed) in [
        ("1 token/event", None, 1.0),
        ("3 tokens/event", Some("EAGLE"), 1.8),
    ] {
        let host = SimHost::new(100);
        let port = tests::managed::free_port();
        let mut cmd = Command::new(bin("simserver"));
        cmd.args([
            "launch",
            "--port",
            &port.to_string(),
            "--tp",
            "1",
            "--warmup-ms",
            "100",
        ])
        .args([
            "--itl-ms",
            &ITL_MS.to_string(),
            "--ttft-ms",
            &TTFT_MS.to_string(),
            "--batch-knee",
            &KNEE.to_string(),
        ])
        .env(simhost::HOST_DIR_ENV, host.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
        if let Some(alg) = extra {
            cmd.args(["--speculative-algorithm", alg]);
        }
        let mut server = Proc::spawn(&mut cmd)?;
        server.read_line_with("simserver listening on ")?;
        std::thread::sleep(std::time::Duration::from_millis(800));
        let target = Target {
            base_url: format!("http://127.0.0.1:{port}"),
            api: BenchApi::Completions,
            model: "default".into(),
            api_key: None,
            tokenizer: None,
        };
        rt.block_on(async {
            let client = load::client(C);
            let (_stop, cancel) = tokio::sync::watch::channel(false);
            let counters = Arc::new(Counters::default());
            let warm = load::Prompts::new(C, 16, 1);
            load::level(&client, &target, warm, C, N, Arc::clone(&counters), cancel.clone()).await;
            let (me, srv) = (std::process::id(), server.pid());
            let (c0, s0, t0) = (cpu_s(me), cpu_s(srv), Instant::now());
            let mut rates = Vec::new();
            for r in 0..3u64 {
                let prompts = load::Prompts::new(PROMPTS, 16, 100 + r);
                let (outcomes, d) = load::level(&client, &target, prompts, C, N, Arc::clone(&counters), cancel.clone()).await;
                let m = stats::metrics(C, r as u32, &outcomes, d);
                anyhow::ensure!(m.failed == 0, "{} failed requests", m.failed);
                rates.push(m.output_tok_s);
            }
            let wall = t0.elapsed().as_secs_f64();
            rates.sort_by(f64::total_cmp);
            let t = truth(speed);
            println!(
                "generator ({name}): c={C}, {N} tokens/request: measured median {:.0} tok/s (min {:.0}, max {:.0}), true {t:.0} tok/s, ratio {:.4}; CPU: generator {:.0} %, simulated server {:.0} % of one core",
                rates[1], rates[0], rates[2], rates[1] / t,
                (cpu_s(me) - c0) / wall * 100.0,
                (cpu_s(srv) - s0) / wall * 100.0,
            );
            Ok::<(), anyhow::Error>(())
        })?;
        drop(server);
    }
    Ok(())
}
