//! drainwatch's tasks, run as `cargo xtask <task>` (alias in `.cargo/config.toml`).
//!
//! - `build`: the UI (wasm32 → wasm-bindgen → `frontend/dist`) and the host binaries;
//!   `--release`: the portable `target/dist/drainwatch` (glibc 2.28 and later).
//! - `demo`: build, start a simulated 8-GPU host, a simulated model server, a foreign
//!   process and drainwatch; print the URL; Ctrl-C stops all of it.
//! - `test`: install what tests need, build, run every test (browser tests included).
//! - `bench`: the performance measurements of docs/PERFORMANCE.md.
//! - `gpu-check`: build the real-GPU check's bundle (`target/gpu-check/`) and run
//!   it (`--dry-run`: against the fake NVML).
//!
//! Each task installs what it needs and is missing (the wasm32 target, the exact
//! wasm-bindgen-cli of Cargo.lock, Chromium, python3 and pip for tests); a second
//! run reinstalls nothing. Few dependencies on purpose: std, anyhow, libc.

mod bench;
mod build;
mod demo;
mod engine;
mod gpu_check;
mod portable;
mod procs;
mod test;
mod tools;

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, bail};

const HELP: &str = "\
usage: cargo xtask <task> [options]

tasks:
  build [--release]      build the UI and the binaries; --release: target/dist/drainwatch,
                         the UI embedded, for any host with glibc 2.28 or later
  demo [options]         run drainwatch on a simulated 8-GPU host; Ctrl-C stops it
      --bind ADDR          where drainwatch listens (default 127.0.0.1:7878)
      --warmup SECS        model server warm-up (default 30; a real one takes ~90)
      --server-port PORT   the simulated model server's port (default 30000)
      --campaign           also start the demo campaign (examples/demo-campaign.toml)
      --engine llamacpp    run a real engine (llama.cpp's llama-server with Gemma 3
                           270M, built once into ~/.cache/drainwatch) instead of
                           the simulated server, beside the simulated GPUs
  engine                 build or find the real engine and its model; print where
  test                   install test tools and the real engine, build, run every test
  bench                  run the benchmarks of docs/PERFORMANCE.md (release build)
  gpu-check [options]    build the GPU check's bundle (target/gpu-check, < 64 MiB)
                         and run it on this machine's GPUs; exit 2: no GPU here
      --dry-run            against the fake NVML and a simulated host instead
      --out DIR            where gpu-check.json and gpu-check.txt go
                           (default target/gpu-check-report)
";

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("build") => build::run(&args[1..]),
        Some("demo") => demo::run(&args[1..]),
        Some("test") => test::run(&args[1..]),
        Some("bench") => bench::run(&args[1..]),
        Some("gpu-check") => gpu_check::run(&args[1..]),
        Some("engine") => engine::ensure().map(|e| {
            println!("llama-server {}", e.server.display());
            println!("model {}", e.model.display());
        }),
        Some("help" | "--help" | "-h") | None => {
            print!("{HELP}");
            Ok(())
        }
        Some(other) => Err(anyhow::anyhow!("unknown task `{other}`\n\n{HELP}")),
    };
    if let Err(e) = result {
        eprintln!("xtask: error: {e:#}");
        std::process::exit(1);
    }
}

/// The workspace root (xtask lives one level below it).
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask is inside the workspace")
        .to_path_buf()
}

/// Runs a command to completion in the workspace root; fails on a non-zero exit.
fn run_cmd(cmd: &mut Command) -> anyhow::Result<()> {
    eprintln!("xtask: $ {}", show(cmd));
    let status = cmd
        .current_dir(root())
        .status()
        .with_context(|| format!("cannot run {}", show(cmd)))?;
    if !status.success() {
        bail!("{} failed ({status})", show(cmd));
    }
    Ok(())
}

/// Runs a command and returns its stdout, or `None` if it cannot run or fails.
fn output(cmd: &mut Command) -> Option<String> {
    let out = cmd.current_dir(root()).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

fn show(cmd: &Command) -> String {
    std::iter::once(cmd.get_program())
        .chain(cmd.get_args())
        .map(|a| a.to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join(" ")
}

fn cargo() -> Command {
    Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
}

/// Value of `--name VALUE` in `args`.
fn flag<'a>(args: &'a [String], name: &str) -> Option<&'a str> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map(String::as_str)
}
