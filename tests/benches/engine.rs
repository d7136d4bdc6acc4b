//! drainwatch against the real engine (method and results in
//! docs/PERFORMANCE.md), llama.cpp's llama-server with Gemma 3 270M on the CPU:
//!
//! `engine-restart`: 10 restarts through the real API, each compared with what
//! the engine took by itself: its SIGTERM → exit (drainwatch's SIGTERM marker
//! to the exit this process sees on the old engine's pidfd), its start →
//! listening (its own log's clock), and the readiness completion (its own
//! `total time` for that request). The rest is drainwatch's.
//!
//! `engine-accuracy`: drainwatch's benchmark at concurrency 1 and 4 against
//! the engine's own counters: output tokens against
//! `llamacpp:tokens_predicted_total`, and ITL mean against its decode time
//! per token (`llamacpp:tokens_predicted_seconds_total`).
//!
//! `engine-peer`: the same workload from drainwatch and from NVIDIA's AIPerf
//! (a client no one here wrote, `DRAINWATCH_AIPERF`, with the model's
//! tokenizer written from the GGUF, `DRAINWATCH_AIPERF_TOKENIZER`), on the
//! same server in the same run, interleaved: drainwatch, AIPerf, drainwatch.

use std::collections::BTreeMap;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::Duration;

use serde_json::json;
use tests::SimHost;
use tests::engine::{self, READY};

const RESTARTS: usize = 10;

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Waits on `pid`'s pidfd in a thread; the wall-clock ms it exited.
#[allow(unsafe_code)]
fn exit_watch(pid: u32) -> anyhow::Result<std::thread::JoinHandle<u64>> {
    // SAFETY: pidfd_open takes a pid and flags; a negative return is an error.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
    anyhow::ensure!(fd >= 0, "pidfd_open({pid}) failed");
    // SAFETY: the descriptor was just returned to us and is owned here only.
    let fd = unsafe { OwnedFd::from_raw_fd(fd as i32) };
    Ok(std::thread::spawn(move || {
        let mut p = libc::pollfd {
            fd: fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd; blocks until the process exits.
        unsafe { libc::poll(&mut p, 1, -1) };
        now_ms()
    }))
}

/// llama.cpp's log clock: `M.SS.mmm.uuu` since the logger started, in ms.
fn log_ms(line: &str) -> Option<f64> {
    let stamp = line.split_whitespace().next()?;
    let p: Vec<f64> = stamp.split('.').filter_map(|x| x.parse().ok()).collect();
    (p.len() == 4).then(|| p[0] * 60_000.0 + p[1] * 1000.0 + p[2] + p[3] / 1000.0)
}

/// From an engine's launch log: start → listening, and the first request's
/// own total time (the readiness completion), in ms.
fn engine_start(log: &str) -> Option<(f64, f64)> {
    let listening = log
        .lines()
        .find(|l| l.contains("listening on"))
        .and_then(log_ms)?;
    let probe = log
        .lines()
        .find(|l| l.contains("print_timing") && l.contains("total time ="))?
        .split("total time =")
        .nth(1)?
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    Some((listening, probe))
}

fn median(mut v: Vec<f64>) -> (f64, f64, f64) {
    v.sort_by(f64::total_cmp);
    (v[v.len() / 2], v[0], v[v.len() - 1])
}

async fn restarts() -> anyhow::Result<()> {
    let host = SimHost::new(100);
    let app = engine::spawn(&host, 2, &[])?;
    app.start_engine().await?;
    let (mut over, mut totals, mut truths) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..RESTARTS {
        let s = app.server().await?;
        let old = s.root.expect("root").pid;
        let exited = exit_watch(old)?;
        // Alternate two values so that every restart changes a flag.
        let threads = if i % 2 == 0 { "1" } else { "2" };
        let id = app.restart_engine(json!({"--threads": threads})).await?;
        let d = app.finished_restart(id, READY).await?;
        anyhow::ensure!(d["summary"]["outcome"] == "succeeded", "{d}");
        let total = d["summary"]["durations"]["total_ms"].as_u64().unwrap_or(0) as f64;
        let sigterm = d["markers"]
            .as_array()
            .and_then(|m| m.iter().find(|m| m["kind"] == "sigterm"))
            .and_then(|m| m["at_ms"].as_u64())
            .ok_or_else(|| anyhow::anyhow!("no SIGTERM marker: {d}"))?;
        let exit = exited
            .join()
            .map_err(|_| anyhow::anyhow!("watcher panicked"))?;
        let log = std::fs::read_to_string(
            host.scratch()
                .join(format!("data/logs/launch-{}.log", s.generation + 1)),
        )?;
        let (listening, probe) = engine_start(&log)
            .ok_or_else(|| anyhow::anyhow!("no listening or timing line in:\n{log}"))?;
        let truth = (exit.saturating_sub(sigterm)) as f64 + listening + probe;
        over.push(total - truth);
        totals.push(total);
        truths.push(truth);
    }
    let (m, lo, hi) = median(over);
    println!(
        "engine-restart: {RESTARTS} restarts of llama-server (Gemma 3 270M, CPU): total median {:.0} ms, \
         the engine's own stop + start + readiness completion median {:.0} ms; drainwatch's overhead median {m:.0} ms (min {lo:.0}, max {hi:.0})",
        median(totals).0,
        median(truths).0
    );
    Ok(())
}

async fn metrics(port: u16) -> anyhow::Result<BTreeMap<String, f64>> {
    engine::metrics(port).await
}

async fn accuracy() -> anyhow::Result<()> {
    let host = SimHost::new(100);
    let app = engine::spawn(&host, 4, &[])?;
    let port = app.start_engine().await?.port;
    for c in [1u32, 4] {
        let (prompts, output) = (8u32, 64u32);
        let s = json!({"concurrency": [c], "num_prompts": prompts, "input_len": 128,
                       "output_len": output, "warmup": 0, "repeats": 3, "correctness": null});
        let before = metrics(port).await?;
        let run = app
            .finished_bench(app.begin_bench(s).await?, Duration::from_secs(600))
            .await?;
        let after = metrics(port).await?;
        anyhow::ensure!(run["status"] == "succeeded", "{run}");
        let d =
            |n: &str| after.get(n).copied().unwrap_or(0.0) - before.get(n).copied().unwrap_or(0.0);
        let reps = run["repeats"].as_array().cloned().unwrap_or_default();
        let counted: f64 = reps
            .iter()
            .filter_map(|r| r["output_tokens"].as_f64())
            .sum();
        let predicted = d("llamacpp:tokens_predicted_total");
        let requests = f64::from(prompts) * reps.len() as f64;
        let engine_itl =
            1e3 * d("llamacpp:tokens_predicted_seconds_total") / (predicted - requests);
        let itl: Vec<f64> = reps
            .iter()
            .filter_map(|r| r["itl"]["mean_ms"].as_f64())
            .collect();
        let itl = itl.iter().sum::<f64>() / itl.len() as f64;
        let prompt: Vec<f64> = reps
            .iter()
            .filter_map(|r| r["prompt_tokens_counted"].as_f64())
            .collect();
        let tok_s = run["levels"][0]["output_tok_s"]["median"]
            .as_f64()
            .unwrap_or(0.0);
        println!(
            "engine-accuracy: c={c}: output tokens {counted} counted / {predicted} by the engine's counter (×{:.4}); \
             ITL mean {itl:.2} ms / the engine's {engine_itl:.2} ms per token (×{:.4}); \
             prompt tokens by the engine's count {:.1} for 128 asked; output {tok_s:.1} tok/s (median of {} repeats)",
            counted / predicted,
            itl / engine_itl,
            prompt.iter().sum::<f64>() / prompt.len().max(1) as f64,
            reps.len()
        );
    }
    Ok(())
}

/// `n` prompts of exactly `tokens` tokens by the engine's own `/tokenize`
/// (its BOS included), one JSON object a line, as AIPerf's `single_turn`.
async fn exact_prompts(port: u16, n: usize, tokens: usize) -> anyhow::Result<String> {
    let client = reqwest::Client::new();
    let count = |text: String| {
        let client = client.clone();
        async move {
            let v: serde_json::Value = client
                .post(format!("http://127.0.0.1:{port}/tokenize"))
                .json(&json!({"content": text, "add_special": true}))
                .send()
                .await?
                .json()
                .await?;
            anyhow::Ok(v["tokens"].as_array().map_or(0, Vec::len))
        }
    };
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut out = String::new();
    for _ in 0..n {
        let mut words: Vec<String> = (0..tokens / 4)
            .map(|_| format!("w{}", next() % 50_000))
            .collect();
        while count(words.join(" ")).await? > tokens {
            words.pop();
        }
        while count(words.join(" ")).await? < tokens {
            words.push(format!("w{}", next() % 10));
        }
        out.push_str(&json!({"text": words.join(" ")}).to_string());
        out.push('\n');
    }
    Ok(out)
}

async fn peer() -> anyhow::Result<()> {
    let (Some(aiperf), Some(tokenizer)) = (
        std::env::var_os("DRAINWATCH_AIPERF"),
        std::env::var_os("DRAINWATCH_AIPERF_TOKENIZER"),
    ) else {
        println!(
            "engine-peer: no peer client here; `cargo xtask bench engine-peer` installs AIPerf and runs it"
        );
        return Ok(());
    };
    let (c, n, input, output) = (4u32, 48u32, 128u32, 64u32);
    let host = SimHost::new(100);
    let app = engine::spawn(&host, 4, &[])?;
    let port = app.start_engine().await?.port;
    let prompts = host.scratch().join("prompts.jsonl");
    std::fs::write(
        &prompts,
        exact_prompts(port, n as usize, input as usize).await?,
    )?;
    let ours = |_: ()| {
        json!({"concurrency": [c], "num_prompts": n / 3, "input_len": input,
        "output_len": output, "warmup": 4, "repeats": 3, "correctness": null})
    };
    let mut lines = Vec::new();
    for round in 0..3 {
        let before = metrics(port).await?;
        if round == 1 {
            let out = host.scratch().join("aiperf");
            let mut cmd = std::process::Command::new(&aiperf);
            cmd.args(["profile", "--model", "default", "--url"])
                .arg(format!("http://127.0.0.1:{port}"))
                .args(["--endpoint-type", "completions", "--streaming"])
                .args([
                    "--concurrency",
                    &c.to_string(),
                    "--request-count",
                    &n.to_string(),
                ])
                .args(["--warmup-request-count", "4"])
                .arg("--input-file")
                .arg(&prompts)
                .args(["--custom-dataset-type", "single_turn", "--tokenizer"])
                .arg(&tokenizer)
                .args([
                    "--use-server-token-count",
                    "--output-tokens-mean",
                    &output.to_string(),
                ])
                .args([
                    "--extra-inputs",
                    "ignore_eos:true",
                    "--ui-type",
                    "none",
                    "--artifact-dir",
                ])
                .arg(&out)
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null());
            let status = tokio::task::spawn_blocking(move || cmd.status()).await??;
            anyhow::ensure!(status.success(), "aiperf failed: {status}");
            let r: serde_json::Value =
                serde_json::from_slice(&std::fs::read(out.join("profile_export_aiperf.json"))?)?;
            let after = metrics(port).await?;
            let tokens = r["total_osl"]["avg"].as_f64().unwrap_or(f64::NAN);
            lines.push(format!(
                "AIPerf 0.13.0: {:.1} output tok/s, ITL mean {:.2} ms, TTFT mean {:.0} ms, prompt {:.1} tokens (server count), {} requests, {tokens} output tokens / the engine's counter rose {} (less 4 warm-up requests × {output})",
                r["output_token_throughput"]["avg"].as_f64().unwrap_or(f64::NAN),
                r["inter_token_latency"]["avg"].as_f64().unwrap_or(f64::NAN),
                r["time_to_first_token"]["avg"].as_f64().unwrap_or(f64::NAN),
                r["input_sequence_length"]["avg"].as_f64().unwrap_or(f64::NAN),
                r["request_count"]["avg"].as_f64().unwrap_or(f64::NAN),
                after.get("llamacpp:tokens_predicted_total").copied().unwrap_or(0.0)
                    - before.get("llamacpp:tokens_predicted_total").copied().unwrap_or(0.0),
            ));
            continue;
        }
        let run = app
            .finished_bench(app.begin_bench(ours(())).await?, Duration::from_secs(900))
            .await?;
        anyhow::ensure!(run["status"] == "succeeded", "{run}");
        let reps = run["repeats"].as_array().cloned().unwrap_or_default();
        let mean = |f: &dyn Fn(&serde_json::Value) -> Option<f64>| {
            let v: Vec<f64> = reps.iter().filter_map(f).collect();
            v.iter().sum::<f64>() / v.len().max(1) as f64
        };
        lines.push(format!(
            "drainwatch: {:.1} output tok/s (median of 3), ITL mean {:.2} ms, TTFT mean {:.0} ms, prompt {:.1} tokens (server count), {} requests",
            run["levels"][0]["output_tok_s"]["median"].as_f64().unwrap_or(f64::NAN),
            mean(&|r| r["itl"]["mean_ms"].as_f64()),
            mean(&|r| r["ttft"]["mean_ms"].as_f64()),
            mean(&|r| r["prompt_tokens_counted"].as_f64()),
            n,
        ));
    }
    for l in lines {
        println!("engine-peer: c={c}, {input} → {output} tokens: {l}");
    }
    Ok(())
}

fn main() -> anyhow::Result<()> {
    let rt = tokio::runtime::Runtime::new()?;
    rt.block_on(async {
        if tests::bench_wanted("engine-restart") {
            restarts().await?;
        }
        if tests::bench_wanted("engine-accuracy") {
            accuracy().await?;
        }
        if tests::bench_wanted("engine-peer") {
            peer().await?;
        }
        Ok(())
    })
}
