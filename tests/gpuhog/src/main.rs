//! gpuhog: a small server that holds GPU memory, shaped like the simulated
//! model server (a launcher serving HTTP and one worker process per GPU), for
//! `cargo xtask gpu-check` on a machine with a real GPU.
//!
//! - `gpuhog launch --gpus 0,1 --bytes-per-gpu N --port P [--warmup-ms M]`:
//!   the launcher (`launch`), serving what drainwatch asks a model server
//!   (`serve`), one `gpuhog worker` per GPU (`worker`).
//! - Memory comes from the CUDA driver API through cudarc, with `libcuda.so.1`
//!   loaded at run time (`memory`): where it cannot load, gpuhog says
//!   `cannot load libcuda.so.1: …` and exits 1. With `--sim DIR` (or
//!   `DRAINWATCH_SIM_HOST`), it comes from that simulated host instead, as the
//!   simulated server's does, so the whole check runs against the fake NVML.
//! - Misbehaviour from `GPUHOG_MODE` (`modes`): `ignore-sigterm`, `orphan`,
//!   `escape[=ms]`, as the simulated server's `SIMSERVER_MODE`.
//!
//! Arguments after `--` are ignored: they only shape the command line.

mod launch;
mod memory;
mod modes;
mod serve;
mod worker;

use std::path::PathBuf;

use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "gpuhog",
    about = "holds GPU memory behind a model server's HTTP API, for drainwatch's gpu-check"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// The server: HTTP on `--port` and one worker per GPU.
    Launch(launch::LaunchArgs),
    /// One GPU's worker (started by `launch`, not by hand).
    Worker(worker::WorkerArgs),
    /// What the `orphan` and `escape` modes leave behind (started by a worker).
    Leftover(worker::LeftoverArgs),
}

/// `--sim`: take memory on a simulated host rather than through CUDA.
#[derive(Debug, Clone, clap::Args)]
struct SimArg {
    /// A simulated host directory to register memory with instead of CUDA.
    #[arg(long = "sim", env = simhost::HOST_DIR_ENV, value_name = "HOST_DIR")]
    dir: Option<PathBuf>,
}

fn main() {
    let cli = Cli::parse();
    let result = match cli.cmd {
        Cmd::Launch(a) => launch::run(a),
        Cmd::Worker(a) => worker::run(a),
        Cmd::Leftover(a) => worker::leftover(a),
    };
    if let Err(e) = result {
        eprintln!("gpuhog: error: {e:#}");
        std::process::exit(1);
    }
}
