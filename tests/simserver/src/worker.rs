//! One GPU worker: registers its memory with the simulated host and ramps it up
//! like a real rank loading weights, then capturing CUDA graphs. Prints `ready`
//! on stdout when warm; then holds its memory until killed.

use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context;
use simhost::{GpuUse, HOST_DIR_ENV, Registration};

const GIB: f64 = (1u64 << 30) as f64;

#[derive(Debug, clap::Args)]
pub(crate) struct WorkerArgs {
    #[arg(long)]
    rank: u32,
    #[arg(long)]
    gpu: u32,
    /// Length of the warm-up in milliseconds.
    #[arg(long, default_value_t = 3_000)]
    warmup_ms: u64,
    /// GPU memory held when warm, in GiB.
    #[arg(long, default_value_t = 88.0)]
    mem_gib: f64,
}

#[derive(Debug, clap::Args)]
pub(crate) struct ForeignArgs {
    #[arg(long, default_value_t = 0)]
    gpu: u32,
    #[arg(long, default_value_t = 2.0)]
    mem_gib: f64,
    /// Ignored: only shapes this process's command line.
    #[arg(last = true)]
    _decoy: Vec<String>,
}

fn host_dir() -> anyhow::Result<PathBuf> {
    std::env::var_os(HOST_DIR_ENV)
        .map(PathBuf::from)
        .with_context(|| format!("{HOST_DIR_ENV} is not set: no simulated host to register with"))
}

/// Memory and load at a fraction `f` (0..=1) of the warm-up.
fn warmup_curve(f: f64, mem_gib: f64) -> (u64, u32) {
    let f = f.clamp(0.0, 1.0);
    // 0–45 %: weights stream in (most of the memory); 45–60 %: KV cache pool is
    // reserved in one step; 60–100 %: CUDA graphs captured, memory creeps up.
    let mem = if f < 0.45 {
        0.55 * (f / 0.45)
    } else if f < 0.60 {
        0.55 + 0.38 * ((f - 0.45) / 0.15)
    } else {
        0.93 + 0.07 * ((f - 0.60) / 0.40)
    };
    let util = if f < 0.45 {
        8
    } else if f < 0.60 {
        25
    } else {
        85
    };
    ((mem * mem_gib * GIB) as u64, util)
}

pub(crate) fn run(args: WorkerArgs) -> anyhow::Result<()> {
    let reg =
        Registration::for_self(&host_dir()?).context("registering with the simulated host")?;
    let start = Instant::now();
    let warmup = Duration::from_millis(args.warmup_ms);
    loop {
        let f = start.elapsed().as_secs_f64() / warmup.as_secs_f64().max(1e-3);
        let (used_bytes, util_percent) = warmup_curve(f, args.mem_gib);
        reg.set(&[GpuUse {
            gpu: args.gpu,
            used_bytes,
            util_percent: if f >= 1.0 { 0 } else { util_percent },
        }])?;
        if f >= 1.0 {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let mut out = std::io::stdout();
    writeln!(out, "ready rank={}", args.rank)?;
    out.flush()?;
    loop {
        std::thread::park();
    }
}

pub(crate) fn foreign(args: ForeignArgs) -> anyhow::Result<()> {
    let reg = Registration::for_self(&host_dir()?)?;
    reg.set(&[GpuUse {
        gpu: args.gpu,
        used_bytes: (args.mem_gib * GIB) as u64,
        util_percent: 3,
    }])?;
    loop {
        std::thread::park();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ramp_is_monotonic_and_ends_at_target() {
        let mut last = 0;
        for i in 0..=100 {
            let (m, _) = warmup_curve(f64::from(i) / 100.0, 88.0);
            assert!(m >= last, "step {i}");
            last = m;
        }
        assert_eq!(last, (88.0 * GIB) as u64);
        assert_eq!(warmup_curve(0.0, 88.0).0, 0);
    }
}
