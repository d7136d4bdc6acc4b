//! The launcher parent: binds the HTTP port, spawns one worker per GPU (tensor
//! parallel), serves the API, and on SIGTERM stops — at once, after draining its
//! requests (`slow-drain`), or not at all (`ignore-sigterm`). If a worker dies,
//! it kills the rest and exits 1, as SGLang does.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use axum::serve::ListenerExt;
use simserver::workers;
use tokio::process::{Child, Command};

use crate::modes::Modes;
use crate::serve::{self, Server};
use simserver::rate::{RateModel, SpeedFlags};

#[derive(Debug, clap::Args)]
pub(crate) struct LaunchArgs {
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    /// 0 picks a free port; the chosen one is printed on stdout.
    #[arg(long, default_value_t = 30_000)]
    port: u16,
    /// Tensor-parallel size: one worker per GPU, GPUs 0..tp.
    #[arg(long, default_value_t = 8)]
    tp: u32,
    #[arg(long, default_value_t = 3_000)]
    warmup_ms: u64,
    /// GPU memory each worker takes, in GiB…
    #[arg(long, default_value_t = 88.0)]
    mem_gib: f64,
    /// …or as a fraction of each GPU's memory, like SGLang's flag (wins if given).
    #[arg(long)]
    mem_fraction_static: Option<f64>,
    /// Time between two generated tokens of one request alone, in milliseconds.
    #[arg(long, default_value_t = 20.0)]
    itl_ms: f64,
    /// Time to the first token of a request alone, in milliseconds.
    #[arg(long, default_value_t = 40.0)]
    ttft_ms: f64,
    /// Batch size at which each request's latency has doubled (see `rate`).
    #[arg(long, default_value_t = 16.0)]
    batch_knee: f64,
    /// SGLang's flags that change the speed (see `rate`).
    #[arg(long)]
    enable_torch_compile: bool,
    #[arg(long, default_value_t = 1)]
    ep_size: u32,
    #[arg(long)]
    cuda_graph_max_bs: Option<usize>,
    #[arg(long)]
    speculative_algorithm: Option<String>,
    #[arg(long)]
    attention_backend: Option<String>,
    /// Nodes the server spans (SGLang's `--nnodes`).
    #[arg(long, default_value_t = 1)]
    nnodes: u32,
    /// This node's rank among them (`--node-rank`).
    #[arg(long, default_value_t = 0)]
    node_rank: u32,
    /// Where rank 0 waits for the others (`--dist-init-addr host:port`).
    #[arg(long)]
    dist_init_addr: Option<String>,
    /// Ignored: only shapes this process's command line.
    #[arg(last = true)]
    _decoy: Vec<String>,
}

/// What SGLang logs as it starts: its command line and its `server_args`,
/// API key included (taken from the decoy's `--api-key`, else the key it
/// enforces, `SIMSERVER_API_KEY`), and how clients authenticate; drainwatch
/// must show none of the key.
fn print_arguments(args: &LaunchArgs) {
    let argv: Vec<String> = std::env::args().collect();
    eprintln!("simserver: argv: {}", argv.join(" "));
    let mut api_key = None;
    for (i, a) in args._decoy.iter().enumerate() {
        if let Some(v) = a.strip_prefix("--api-key=") {
            api_key = Some(v.to_owned());
        } else if a == "--api-key" {
            api_key = args._decoy.get(i + 1).cloned();
        }
    }
    let api_key = api_key.or_else(serve::api_key_from_env);
    eprintln!(
        "server_args=ServerArgs(model_path='sim', host='{}', port={}, tp_size={}, api_key={}, max_total_tokens=None)",
        args.host,
        args.port,
        args.tp,
        api_key
            .as_deref()
            .map_or("None".to_owned(), |k| format!("'{k}'"))
    );
    if let Some(k) = api_key {
        eprintln!("simserver: clients must send \"Authorization: Bearer {k}\"");
    }
}

pub(crate) fn run(args: LaunchArgs) -> anyhow::Result<()> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(serve_until_stopped(args))
}

/// This launch's pace factor: `exp(σ·z)` with σ from `SIMSERVER_NOISE_PCT`
/// (none when unset), `z` drawn from the clock and this process's id.
fn launch_noise() -> f64 {
    let pct: f64 = std::env::var(simserver::rate::NOISE_ENV)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .filter(|p: &f64| p.is_finite() && *p >= 0.0 && *p <= 50.0)
        .unwrap_or(0.0);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let n = simserver::rate::noise(pct / 100.0, now ^ u64::from(std::process::id()) << 40);
    if pct > 0.0 {
        eprintln!("simserver: launch noise σ {pct} % drew ×{n:.4}");
    }
    n
}

async fn serve_until_stopped(args: LaunchArgs) -> anyhow::Result<()> {
    let speed = SpeedFlags {
        tilelang_indexer: std::env::var("SGLANG_OPT_USE_TILELANG_INDEXER").is_ok_and(|v| v == "1"),
        torch_compile: args.enable_torch_compile,
        ep_size: args.ep_size,
        speculative: args.speculative_algorithm.is_some(),
        cuda_graph_max_bs: args.cuda_graph_max_bs,
        attention_backend: args.attention_backend.clone(),
    };
    // The flags' own failures join the modes asked for; workers get them all.
    let mode_text: String = std::env::var(crate::modes::ENV)
        .unwrap_or_default()
        .split(',')
        .map(str::trim)
        .filter(|m| !m.is_empty())
        .chain(simserver::quirks::modes(&speed))
        .collect::<Vec<_>>()
        .join(",");
    let modes = Modes::parse(&mode_text).map_err(anyhow::Error::msg)?;
    let listener = tokio::net::TcpListener::bind((args.host.as_str(), args.port))
        .await
        .with_context(|| {
            // As uvicorn (SGLang's and vLLM's HTTP server) says it.
            format!(
                "error while attempting to bind on address ('{}', {})",
                args.host, args.port
            )
        })?;
    if let Some(dir) = std::env::var_os(simhost::HOST_DIR_ENV) {
        simhost::enlist(std::path::Path::new(&dir), "launcher")?;
    }
    println!("simserver listening on http://{}", listener.local_addr()?);
    eprintln!(
        "simserver: started at {} ms; tp={} warmup={} ms modes={modes:?}",
        simhost::now_ms(),
        args.tp,
        args.warmup_ms
    );
    print_arguments(&args);
    let group = match (args.nnodes, &args.dist_init_addr) {
        (0 | 1, _) => None,
        (n, Some(addr)) => {
            anyhow::ensure!(args.node_rank < n, "--node-rank must be below --nnodes");
            Some(crate::nodes::start(n as usize, args.node_rank as usize, addr.clone()).await?)
        }
        (_, None) => anyhow::bail!("--nnodes above 1 needs --dist-init-addr"),
    };
    let server = Arc::new(Server {
        group,
        tp: args.tp as usize,
        ready: Arc::new(AtomicUsize::new(0)),
        draining: AtomicBool::new(false),
        in_flight: AtomicUsize::new(0),
        generation_tokens: AtomicU64::new(0),
        prompt_tokens: AtomicU64::new(0),
        requests: AtomicU64::new(0),
        slow_requests: AtomicU64::new(0),
        modes,
        lateness_us: AtomicU64::new(1_000),
        ttft: Default::default(),
        itl: Default::default(),
        api_key: serve::api_key_from_env(),
        version: serve::version(),
        rate: RateModel::noisy(
            args.itl_ms,
            args.ttft_ms,
            args.batch_knee,
            &speed,
            launch_noise(),
        ),
    });
    let mut workers = spawn_workers(&args, &server, &mode_text)?;
    let app = serve::router(Arc::clone(&server));
    let http = tokio::spawn(async move {
        axum::serve(
            listener.tap_io(|tcp| {
                // Tokens are small writes: send each at once, as real servers do.
                let _ = tcp.set_nodelay(true);
            }),
            app,
        )
        .await
    });

    let code = workers::supervise(
        &mut workers,
        "simserver",
        modes.ignore_sigterm,
        modes.slow_teardown.is_some(),
        async || {
            drain(&server, modes.slow_drain).await;
        },
    )
    .await?;
    http.abort();
    eprintln!(
        "simserver: exiting with code {code} at {} ms",
        simhost::now_ms()
    );
    std::process::exit(code);
}

/// Stops taking requests and waits (up to `limit`) for those in flight.
async fn drain(server: &Server, limit: Option<Duration>) {
    server.draining.store(true, Ordering::SeqCst);
    let Some(limit) = limit else { return };
    eprintln!(
        "simserver: draining {} request(s)",
        server.in_flight.load(Ordering::SeqCst)
    );
    let start = Instant::now();
    while server.in_flight.load(Ordering::SeqCst) > 0 && start.elapsed() < limit {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn spawn_workers(
    args: &LaunchArgs,
    server: &Arc<Server>,
    modes: &str,
) -> anyhow::Result<Vec<Child>> {
    let exe = std::env::current_exe()?;
    let mut workers = Vec::new();
    for rank in 0..args.tp {
        let mut cmd = Command::new(&exe);
        cmd.args([
            "worker",
            "--rank",
            &rank.to_string(),
            "--gpu",
            &rank.to_string(),
        ])
        .args(["--warmup-ms", &args.warmup_ms.to_string()])
        .args(["--mem-gib", &args.mem_gib.to_string()])
        .env(crate::modes::ENV, modes);
        if let Some(f) = args.mem_fraction_static {
            cmd.args(["--mem-fraction", &f.to_string()]);
        }
        workers.push(workers::spawn(cmd, &server.ready, server.tp, "simserver")?);
    }
    Ok(workers)
}
