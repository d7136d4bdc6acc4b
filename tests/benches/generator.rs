//! drainwatch's load generator at high concurrency (method and results in
//! docs/PERFORMANCE.md): 256 closed-loop clients against the release simulated
//! server tuned to ~28k output tok/s, three repeats, one token per event and
//! then three (speculative decoding), each with the server's per-chunk counts
//! and then with usage only at the end and every event's text counted by a
//! byte-level BPE tokenizer; reports measured / true rate and the CPU both
//! processes used.

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Instant;

use drainwatch::bench::load::{self, Counters, Target};
use drainwatch::bench::stats;
use drainwatch::bench::tokens::Tokenizer;
use shared::bench::{BenchApi, TokenSource};
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

/// A byte-level BPE (GPT-2's pre-tokenizer regex, as DeepSeek's and Qwen's
/// tokenizers have) trained on the simulated server's words and some English,
/// saved as a `tokenizer.json` and read back as the benchmark reads one.
fn bpe_tokenizer(dir: &std::path::Path) -> anyhow::Result<Tokenizer> {
    use tokenizers::models::TrainerWrapper;
    use tokenizers::models::bpe::{BPE, BpeTrainerBuilder};
    use tokenizers::pre_tokenizers::byte_level::ByteLevel;
    let corpus = dir.join("corpus.txt");
    let english = "The quick brown fox jumps over the lazy dog while the server streams \
                   tokens to every client that asked for them, one event at a time. ";
    let text: String = (0..4096)
        .map(|i| format!("tok{} {}", i % 1024, if i % 16 == 0 { english } else { "" }))
        .collect();
    std::fs::write(&corpus, text)?;
    let mut tk = tokenizers::Tokenizer::new(BPE::default());
    tk.with_pre_tokenizer(Some(ByteLevel::default()));
    tk.with_decoder(Some(ByteLevel::default()));
    let mut trainer: TrainerWrapper = BpeTrainerBuilder::new()
        .vocab_size(4000)
        .min_frequency(1)
        .show_progress(false)
        .initial_alphabet(ByteLevel::alphabet().into_iter().collect())
        .build()
        .into();
    tk.train_from_files(&mut trainer, vec![corpus.display().to_string()])
        .map_err(|e| anyhow::anyhow!("training: {e}"))?;
    let file = dir.join("tokenizer.json");
    tk.save(&file, false)
        .map_err(|e| anyhow::anyhow!("saving: {e}"))?;
    Tokenizer::load(&file).map_err(anyhow::Error::msg)
}

fn main() -> anyhow::Result<()> {
    if !tests::bench_wanted("generator") {
        return Ok(());
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let scratch = tempfile::tempdir()?;
    let bpe = bpe_tokenizer(scratch.path())?;
    for (name, extra, speed, tokenizer) in [
        ("1 token/event", None, 1.0, None),
        ("3 tokens/event", Some("EAGLE"), 1.8, None),
        ("1 token/event, tokenizer counts", None, 1.0, Some(&bpe)),
        (
            "3 tokens/event, tokenizer counts",
            Some("EAGLE"),
            1.8,
            Some(&bpe),
        ),
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
        // Without per-chunk counts, as SGLang's OpenAI endpoints: the tokenizer counts.
        .env(
            "SIMSERVER_MODE",
            if tokenizer.is_some() {
                "final-usage"
            } else {
                "normal"
            },
        )
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
            tokenizer: tokenizer.cloned(),
            engine: drainwatch::config::file::Engine::Other,
        };
        let want = if tokenizer.is_some() {
            TokenSource::Tokenizer
        } else {
            TokenSource::ChunkUsage
        };
        rt.block_on(async {
            let client = load::client(C);
            let (_stop, cancel) = tokio::sync::watch::channel(load::Halt::Run);
            let counters = Arc::new(Counters::default());
            let warm = drainwatch::bench::prompts::Prompts::new(C, 16, 1);
            load::level(&client, &target, warm, C, N, Arc::clone(&counters), cancel.clone()).await;
            let (me, srv) = (std::process::id(), server.pid());
            let (c0, s0, t0) = (cpu_s(me), cpu_s(srv), Instant::now());
            let mut rates = Vec::new();
            for r in 0..3u64 {
                let prompts = drainwatch::bench::prompts::Prompts::new(PROMPTS, 16, 100 + r);
                let (outcomes, d) = load::level(&client, &target, prompts, C, N, Arc::clone(&counters), cancel.clone()).await;
                let m = stats::metrics(C, r as u32, &outcomes, d);
                anyhow::ensure!(m.failed == 0, "{} failed requests", m.failed);
                anyhow::ensure!(m.token_source == want, "counted by {:?}", m.token_source);
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
