//! gpu-check: drainwatch on a machine with a real GPU, checked in one command
//! that finishes in under five minutes and leaves nothing running.
//!
//! It starts drainwatch managing gpuhog (a small server that holds memory on
//! every GPU through CUDA) and checks what drainwatch shows against
//! `nvidia-smi` (`compare`, `gpus`), measures the sample cost, lists the health
//! fields, restarts the server draining a normal, an ignore-SIGTERM and an
//! orphan generation and times each GPU's release (`restarts`), stops it
//! (`check`), and writes `gpu-check.json` and `gpu-check.txt` (`report`).
//! drainwatch and gpuhog are found beside this program (`--bin-dir` to say
//! elsewhere), so the bundle that `cargo xtask gpu-check` makes runs on a
//! machine without cargo.
//!
//! No GPU (NVML does not load, or lists none): "no NVIDIA GPU here", exit 2.
//! `--dry-run`: the same against the fake NVML over a simulated host
//! (`sim`), gpuhog taking its memory there; the report says `simulated`.
//! Exit 0 when every check held, 1 when one did not (the report says which).

mod check;
mod cleanup;
mod compare;
mod drainwatch;
mod gpus;
mod procs;
mod report;
mod restarts;
mod sim;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Parser;
use serde_json::json;

use crate::gpus::{Gpus, Reference};

/// Exit code when there is no GPU to check.
const NO_GPU: i32 = 2;
/// The whole check's budget (cleanup comes on top, bounded by its own waits).
const BUDGET: Duration = Duration::from_secs(270);

#[derive(Debug, Parser)]
#[command(
    name = "gpu-check",
    about = "check drainwatch against a real GPU driver: compare, restart, measure, report"
)]
struct Args {
    /// Run against the fake NVML and a simulated host instead of a GPU.
    #[arg(long)]
    dry_run: bool,
    /// Where gpu-check.json and gpu-check.txt are written.
    #[arg(long, default_value = "gpu-check-report")]
    out: PathBuf,
    /// Where drainwatch and gpuhog are (default: beside this program).
    #[arg(long)]
    bin_dir: Option<PathBuf>,
    /// The NVML library (default `libnvidia-ml.so.1`; for a dry run, the fake
    /// `libnvidia_ml.so` in the binaries' folder).
    #[arg(long, env = "GPU_CHECK_NVML_LIB")]
    nvml_lib: Option<PathBuf>,
    /// Memory gpuhog holds per GPU (default: 2 GiB or a tenth of the smallest
    /// GPU, whichever is less).
    #[arg(long)]
    bytes_per_gpu: Option<u64>,
    /// drainwatch's sample interval.
    #[arg(long, default_value_t = 50)]
    sample_interval_ms: u64,
    /// Keep the scratch folder (the server config, drainwatch's data and log).
    #[arg(long)]
    keep_scratch: bool,
}

fn main() {
    match run(Args::parse()) {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            eprintln!("gpu-check: error: {e:#}");
            std::process::exit(1);
        }
    }
}

fn run(args: Args) -> anyhow::Result<i32> {
    let started = Instant::now();
    let started_ms = simhost::now_ms();
    let bin_dir = match args.bin_dir.clone() {
        Some(d) => d,
        None => std::env::current_exe()?
            .parent()
            .context("this program's folder")?
            .to_path_buf(),
    };
    let scratch =
        std::env::temp_dir().join(format!("gpu-check-{}-{started_ms}", std::process::id()));
    std::fs::create_dir_all(&scratch).with_context(|| format!("creating {}", scratch.display()))?;
    let result = check_in(&args, bin_dir, &scratch, started, started_ms);
    if args.keep_scratch {
        eprintln!("gpu-check: scratch kept in {}", scratch.display());
    } else {
        let _ = std::fs::remove_dir_all(&scratch);
    }
    result
}

fn check_in(
    args: &Args,
    bin_dir: PathBuf,
    scratch: &std::path::Path,
    started: Instant,
    started_ms: u64,
) -> anyhow::Result<i32> {
    let (sim, nvml_lib) = if args.dry_run {
        let fake = args
            .nvml_lib
            .clone()
            .unwrap_or_else(|| bin_dir.join("libnvidia_ml.so"));
        let sim = sim::SimHost::create(scratch, &fake)?;
        // The fake library finds its host in this variable when NVML opens,
        // below. SAFETY: no other thread exists yet to read the environment.
        #[allow(unsafe_code)]
        unsafe {
            std::env::set_var(simhost::HOST_DIR_ENV, &sim.dir)
        };
        let lib = sim.nvml_lib.clone();
        (Some(sim), lib)
    } else {
        let lib = args
            .nvml_lib
            .clone()
            .unwrap_or_else(|| PathBuf::from("libnvidia-ml.so.1"));
        (None, lib)
    };
    let gpus = match Gpus::open(&nvml_lib) {
        Ok(g) => g,
        Err(why) if !args.dry_run => {
            eprintln!("gpu-check: no NVIDIA GPU here ({why})");
            return Ok(NO_GPU);
        }
        Err(why) => anyhow::bail!("the simulated host's NVML did not open: {why}"),
    };
    for b in ["drainwatch", "gpuhog"] {
        anyhow::ensure!(
            bin_dir.join(b).is_file(),
            "{} is missing (cargo xtask gpu-check builds the bundle)",
            bin_dir.join(b).display()
        );
    }
    procs::become_subreaper().context("becoming a child subreaper")?;
    let (reference, how) = if args.dry_run {
        (
            Reference::Nvml(gpus.clone()),
            "dry run: /api/state compared with the fake NVML read directly through nvml-wrapper \
             (nvidia-smi cannot see a simulated host)"
                .to_owned(),
        )
    } else {
        match gpus::smi(&["--query-gpu=index", "--format=csv,noheader"]) {
            Ok(_) => (Reference::NvidiaSmi, "nvidia-smi's CSV queries".to_owned()),
            Err(e) => (
                Reference::Nvml(gpus.clone()),
                format!(
                    "nvidia-smi is not usable here ({e:#}): /api/state compared with NVML read \
                     directly through nvml-wrapper (the library drainwatch reads too)"
                ),
            ),
        }
    };
    let setup = check::Setup {
        dry_run: args.dry_run,
        bin_dir,
        nvml_lib,
        gpus,
        reference,
        sim,
        scratch: scratch.to_path_buf(),
        bytes_per_gpu: args.bytes_per_gpu,
        sample_interval_ms: args.sample_interval_ms,
        deadline: started + BUDGET,
    };
    let mut report = report::Report::default();
    report.set("simulated", json!(args.dry_run));
    report.set("started_at_ms", json!(started_ms));
    report.set(
        "reference",
        json!({"source": setup.reference.name(), "how": how}),
    );
    report.note(how);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let mut session = check::Session::default();
        if let Err(e) = check::run(&setup, &mut report, &mut session).await {
            report.fail(format!("{e:#}"));
            report.set(
                "drainwatch_log_tail",
                json!(drainwatch::log_tail(&scratch.join("drainwatch.log"), 30)),
            );
        }
        cleanup::cleanup(&setup, &mut report, &mut session).await;
    });
    let elapsed = started.elapsed();
    report.set("elapsed_ms", json!(elapsed.as_millis() as u64));
    if elapsed > Duration::from_secs(300) {
        report.fail(format!(
            "the check took {:.0} s, over 5 minutes",
            elapsed.as_secs_f64()
        ));
    }
    let text = report.write(&args.out)?;
    print!("{text}");
    println!("report: {}", args.out.join("gpu-check.json").display());
    Ok(if report.passed() { 0 } else { 1 })
}
