//! The launcher parent: binds the HTTP port, spawns one worker per GPU, serves
//! the API, and on SIGTERM stops its workers and exits — or, with
//! `ignore-sigterm`, carries on. If a worker dies, it stops the rest and exits
//! 1, as SGLang does.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::Context;
use simserver::workers;
use tokio::process::{Child, Command};

use crate::memory::Backend;
use crate::modes::Modes;
use crate::serve::{self, Hog};

#[derive(Debug, clap::Args)]
pub(crate) struct LaunchArgs {
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    /// 0 picks a free port; the chosen one is printed on stdout.
    #[arg(long, default_value_t = 30_000)]
    port: u16,
    /// The GPUs to hold memory on (NVML's indices, e.g. `0,1,2,3`): one worker each.
    #[arg(long, value_delimiter = ',', required = true)]
    gpus: Vec<u32>,
    /// Device memory each worker allocates and touches.
    #[arg(long)]
    bytes_per_gpu: u64,
    /// Not ready before this long after the start, however soon the memory is held.
    #[arg(long, default_value_t = 0)]
    warmup_ms: u64,
    #[command(flatten)]
    sim: crate::SimArg,
    /// Ignored: only shapes this process's command line.
    #[arg(last = true)]
    _decoy: Vec<String>,
}

pub(crate) fn run(args: LaunchArgs) -> anyhow::Result<()> {
    let modes = Modes::from_env().map_err(anyhow::Error::msg)?;
    // Before anything starts: no CUDA driver (or no simulated host) is a clear
    // failure here, not a worker's death later.
    let backend = Backend::new(args.sim.dir.clone())?;
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(serve_until_stopped(args, modes, backend))
}

async fn serve_until_stopped(
    args: LaunchArgs,
    modes: Modes,
    backend: Backend,
) -> anyhow::Result<()> {
    let started = Instant::now();
    let listener = tokio::net::TcpListener::bind((args.host.as_str(), args.port))
        .await
        .with_context(|| {
            format!(
                "error while attempting to bind on address ('{}', {})",
                args.host, args.port
            )
        })?;
    if let Backend::Sim(dir) = &backend {
        simhost::enlist(dir, "launcher")?;
    }
    println!("gpuhog listening on http://{}", listener.local_addr()?);
    eprintln!(
        "gpuhog: started at {} ms; gpus={:?} bytes-per-gpu={} warmup={} ms modes={modes:?} backend={}",
        simhost::now_ms(),
        args.gpus,
        args.bytes_per_gpu,
        args.warmup_ms,
        match &backend {
            Backend::Cuda => "cuda".to_owned(),
            Backend::Sim(d) => format!("simulated host {}", d.display()),
        }
    );
    let hog = Arc::new(Hog::new(
        args.gpus.len(),
        started + Duration::from_millis(args.warmup_ms),
    ));
    let mut workers = spawn_workers(&args, &backend, &hog)?;
    let app = serve::router(Arc::clone(&hog));
    let http = tokio::spawn(async move { axum::serve(listener, app).await });

    let code = workers::supervise(
        &mut workers,
        "gpuhog",
        modes.ignore_sigterm,
        false,
        async || {
            hog.draining.store(true, Ordering::SeqCst);
        },
    )
    .await?;
    http.abort();
    eprintln!(
        "gpuhog: exiting with code {code} at {} ms",
        simhost::now_ms()
    );
    std::process::exit(code);
}

fn spawn_workers(
    args: &LaunchArgs,
    backend: &Backend,
    hog: &Arc<Hog>,
) -> anyhow::Result<Vec<Child>> {
    let exe = std::env::current_exe()?;
    let mut workers = Vec::new();
    for (rank, gpu) in args.gpus.iter().enumerate() {
        let mut cmd = Command::new(&exe);
        cmd.args(["worker", "--rank", &rank.to_string()])
            .args(["--gpu", &gpu.to_string()])
            .args(["--bytes", &args.bytes_per_gpu.to_string()])
            .args(backend.args())
            // CUDA's ordinals in NVML's order (by PCI bus), not fastest first.
            .env("CUDA_DEVICE_ORDER", "PCI_BUS_ID");
        workers.push(workers::spawn(cmd, &hog.ready, hog.workers, "gpuhog")?);
    }
    Ok(workers)
}
