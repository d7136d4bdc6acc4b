//! The launcher parent: binds the HTTP port, spawns one worker per GPU, serves
//! `/health`, and tears the workers down on SIGTERM or when one of them dies.

use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::Context;
use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

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
    #[arg(long, default_value_t = 88.0)]
    mem_gib: f64,
    /// Ignored: only shapes this process's command line.
    #[arg(last = true)]
    _decoy: Vec<String>,
}

#[derive(Debug)]
struct Health {
    ready: AtomicUsize,
    tp: usize,
}

pub(crate) fn run(args: LaunchArgs) -> anyhow::Result<()> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(serve(args))
}

async fn serve(args: LaunchArgs) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind((args.host.as_str(), args.port))
        .await
        .with_context(|| format!("cannot bind {}:{}", args.host, args.port))?;
    println!("simserver listening on http://{}", listener.local_addr()?);
    let exe = std::env::current_exe()?;
    let health = Arc::new(Health {
        ready: AtomicUsize::new(0),
        tp: args.tp as usize,
    });
    let mut workers: Vec<Child> = Vec::new();
    for rank in 0..args.tp {
        let mut child = Command::new(&exe)
            .args([
                "worker",
                "--rank",
                &rank.to_string(),
                "--gpu",
                &rank.to_string(),
            ])
            .args(["--warmup-ms", &args.warmup_ms.to_string()])
            .args(["--mem-gib", &args.mem_gib.to_string()])
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .context("spawning a worker")?;
        if let Some(out) = child.stdout.take() {
            let health = Arc::clone(&health);
            tokio::spawn(async move {
                let mut lines = BufReader::new(out).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    if line.starts_with("ready") {
                        health.ready.fetch_add(1, Ordering::SeqCst);
                    }
                }
            });
        }
        workers.push(child);
    }

    let app = Router::new()
        .route("/health", get(health_handler))
        .with_state(Arc::clone(&health));
    let server = tokio::spawn(async move { axum::serve(listener, app).await });

    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let mut int = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())?;
    let code = tokio::select! {
        _ = term.recv() => 0,
        _ = int.recv() => 0,
        rank = first_exit(&mut workers) => {
            eprintln!("simserver: worker rank {rank} died; shutting down the server");
            1
        }
    };
    server.abort();
    stop(&mut workers).await;
    std::process::exit(code);
}

async fn health_handler(State(h): State<Arc<Health>>) -> (StatusCode, &'static str) {
    if h.ready.load(Ordering::SeqCst) >= h.tp {
        (StatusCode::OK, "ok")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "warming up")
    }
}

/// Resolves with the rank of the first worker to exit.
async fn first_exit(workers: &mut [Child]) -> usize {
    loop {
        for (rank, w) in workers.iter_mut().enumerate() {
            if let Ok(Some(_)) = w.try_wait() {
                return rank;
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// SIGTERM to every worker, then SIGKILL to those still alive after 3 s.
async fn stop(workers: &mut [Child]) {
    for w in workers.iter() {
        if let Some(pid) = w.id() {
            // SAFETY: plain kill(2) on a child we spawned and have not reaped.
            unsafe { libc::kill(pid as i32, libc::SIGTERM) };
        }
    }
    for w in workers.iter_mut() {
        if tokio::time::timeout(Duration::from_secs(3), w.wait())
            .await
            .is_err()
        {
            let _ = w.kill().await;
        }
    }
}
