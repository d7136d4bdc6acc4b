//! One GPU worker: registers its memory with the simulated host and ramps it up
//! like a real rank loading weights, then capturing CUDA graphs. A GPU too full
//! for it is an out-of-memory exit, as with CUDA. Prints `ready` on stdout when
//! warm; then holds its memory until killed.

use std::io::Write;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context;
use simhost::{GpuUse, HOST_DIR_ENV, Registration};

use crate::modes::Modes;

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
    /// GPU memory held when warm, in GiB…
    #[arg(long, default_value_t = 88.0)]
    mem_gib: f64,
    /// …or as a fraction of the GPU's memory (wins if given).
    #[arg(long)]
    mem_fraction: Option<f64>,
}

#[derive(Debug, clap::Args)]
pub(crate) struct ForeignArgs {
    #[arg(long, default_value_t = 0)]
    gpu: u32,
    #[arg(long, default_value_t = 2.0)]
    mem_gib: f64,
    /// Ignore SIGTERM (a leftover that only SIGKILL removes).
    #[arg(long)]
    ignore_sigterm: bool,
    /// Ignored: only shapes this process's command line.
    #[arg(last = true)]
    _decoy: Vec<String>,
}

/// What the `escape` mode leaves: stage 1 is in a new session and only forks
/// stage 2 and exits, so stage 2 has no parent of the server's left.
#[derive(Debug, clap::Args)]
pub(crate) struct EscapeeArgs {
    #[arg(long, default_value_t = 0)]
    gpu: u32,
    #[arg(long, default_value_t = 4.0)]
    mem_gib: f64,
    /// The second fork: hold the memory until killed.
    #[arg(long)]
    stage2: bool,
}

/// A short-lived child of the `fork-bomb-lite` mode.
#[derive(Debug, clap::Args)]
pub(crate) struct SpawnlingArgs {
    /// How long it lives, in milliseconds.
    #[arg(long, default_value_t = 300)]
    ms: u64,
}

fn host_dir() -> anyhow::Result<PathBuf> {
    std::env::var_os(HOST_DIR_ENV)
        .map(PathBuf::from)
        .with_context(|| format!("{HOST_DIR_ENV} is not set: no simulated host to register with"))
}

/// Memory and load at a fraction `f` (0..=1) of the warm-up.
fn warmup_curve(f: f64, target: f64) -> (u64, u32) {
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
    ((mem * target) as u64, util)
}

#[allow(unsafe_code)]
fn ignore_sigterm() {
    // SAFETY: setting a signal's disposition to ignore.
    unsafe { libc::signal(libc::SIGTERM, libc::SIG_IGN) };
}

fn oom_exit(gpu: u32, want: u64, free: u64) -> ! {
    eprintln!(
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {:.2} GiB. GPU {gpu} has \
         {:.2} GiB free.",
        want as f64 / GIB,
        free as f64 / GIB
    );
    std::process::exit(1);
}

pub(crate) fn run(args: WorkerArgs) -> anyhow::Result<()> {
    let modes = Modes::from_env().map_err(anyhow::Error::msg)?;
    if modes.ignore_sigterm {
        ignore_sigterm();
    }
    let dir = host_dir()?;
    let inventory = simhost::Inventory::load(&dir)?;
    let total = inventory
        .gpus
        .get(args.gpu as usize)
        .map(|g| g.total_bytes)
        .with_context(|| format!("the simulated host has no GPU {}", args.gpu))?;
    let target = match args.mem_fraction {
        Some(f) => f.clamp(0.0, 1.0) * total as f64,
        None => args.mem_gib * GIB,
    };
    let mut reg = Registration::for_self(&dir).context("registering with the simulated host")?;
    if modes.leak && args.rank == 0 {
        reg = reg.leaking();
    }
    let stuck = modes.stuck_in_driver && args.rank == 0;
    if stuck {
        catch_sigterm();
    }
    simhost::enlist(&dir, "worker")?;
    if modes.fork_bomb_lite && args.rank == 0 || modes.slow_teardown.is_some() {
        catch_sigterm();
    }
    if modes.slow_teardown.is_some() {
        // Outlives the launcher, which leaves at once on SIGTERM.
        no_death_signal();
    }
    if modes.orphan && args.rank == 0 {
        leave_orphan(args.gpu)?;
    }
    let start = Instant::now();
    let warmup = Duration::from_millis(args.warmup_ms);
    let mut held = 0;
    loop {
        let f = start.elapsed().as_secs_f64() / warmup.as_secs_f64().max(1e-3);
        let (want, util) = warmup_curve(f, target);
        if modes.crash_warmup && f >= 0.5 {
            eprintln!(
                "simserver worker {}: torch._dynamo.exc.BackendCompilerFailed: backend='inductor' \
                 raised an error (simulated crash in warm-up)",
                args.rank
            );
            std::process::exit(1);
        }
        if modes.oom && f >= 0.5 {
            oom_exit(args.gpu, want.saturating_sub(held), 0);
        }
        // Like cudaMalloc: what others hold on this GPU limits what we get.
        let view = simhost::observe(&dir, simhost::now_ms())?;
        let others = view.gpus[args.gpu as usize].used_bytes.saturating_sub(held);
        let free = total.saturating_sub(others + held);
        if want > held && want - held > free {
            oom_exit(args.gpu, want - held, free);
        }
        reg.set(&[GpuUse {
            gpu: args.gpu,
            used_bytes: want,
            util_percent: if f >= 1.0 { 0 } else { util },
        }])?;
        held = want;
        if f >= 1.0 {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let mut out = std::io::stdout();
    writeln!(out, "ready rank={}", args.rank)?;
    out.flush()?;
    if let Some(after) = modes.crash_after {
        std::thread::sleep(after);
        eprintln!(
            "simserver worker {}: fatal: NCCL watchdog timeout (simulated crash)",
            args.rank
        );
        std::process::abort();
    }
    if let Some(after) = modes.escape_after.filter(|_| args.rank == 0) {
        std::thread::sleep(after);
        escape(args.gpu)?;
    }
    if let Some(teardown) = modes.slow_teardown {
        tear_down_slowly(teardown);
    }
    if stuck {
        while !TERM.load(std::sync::atomic::Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(10));
        }
        eprintln!("simserver worker 0: SIGTERM; stuck in the driver from now on");
        simhost::stuck::freeze_self(&dir).context("freezing in the kernel")?;
    }
    if modes.fork_bomb_lite && args.rank == 0 {
        while !TERM.load(std::sync::atomic::Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(10));
        }
        spawn_burst();
        std::process::exit(0);
    }
    loop {
        std::thread::park();
    }
}

/// Waits for SIGTERM, then holds the memory for `teardown` before it exits.
/// Orphaned without a SIGTERM (the launcher was SIGKILLed), it leaves after
/// 30 s, so no test leaves it behind for long.
fn tear_down_slowly(teardown: Duration) -> ! {
    let parent = std::os::unix::process::parent_id();
    let mut orphaned: Option<Instant> = None;
    while !TERM.load(std::sync::atomic::Ordering::Relaxed) {
        if std::os::unix::process::parent_id() != parent {
            let since = *orphaned.get_or_insert_with(Instant::now);
            if since.elapsed() > Duration::from_secs(30) {
                std::process::exit(1);
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    eprintln!(
        "simserver worker: SIGTERM; tearing down for {} ms",
        teardown.as_millis()
    );
    std::thread::sleep(teardown);
    std::process::exit(0);
}

#[allow(unsafe_code)]
fn no_death_signal() {
    // SAFETY: prctl with PR_SET_PDEATHSIG 0 only clears this process's setting.
    unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, 0) };
}

static TERM: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

extern "C" fn on_sigterm(_: libc::c_int) {
    TERM.store(true, std::sync::atomic::Ordering::Relaxed);
}

#[allow(unsafe_code)]
fn catch_sigterm() {
    // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
    unsafe { libc::signal(libc::SIGTERM, on_sigterm as *const () as libc::sighandler_t) };
}

/// How many children the fork-bomb-lite burst spawns, one every 10 ms.
const BURST: u32 = 60;

/// Children in sessions of their own, one every 10 ms, each living 300 ms.
fn spawn_burst() {
    let Ok(exe) = std::env::current_exe() else {
        return;
    };
    eprintln!("simserver worker 0: SIGTERM; spawning {BURST} children first");
    for _ in 0..BURST {
        let mut cmd = std::process::Command::new(&exe);
        cmd.args(["spawnling", "--ms", "300"]);
        in_new_session(&mut cmd);
        // A spawn refused (the cgroup is being killed) ends the burst.
        if cmd.spawn().is_err() {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[allow(unsafe_code)]
fn in_new_session(cmd: &mut std::process::Command) {
    // SAFETY: setsid is async-signal-safe and only affects the new child.
    unsafe {
        cmd.pre_exec(|| {
            libc::setsid();
            Ok(())
        });
    }
}

/// Leaves the escapee (see [`EscapeeArgs`]).
fn escape(gpu: u32) -> anyhow::Result<()> {
    let exe = std::env::current_exe()?;
    let mut cmd = std::process::Command::new(exe);
    cmd.args(["escapee", "--gpu", &gpu.to_string()]);
    in_new_session(&mut cmd);
    let mut stage1 = cmd.spawn().context("spawning the escapee")?;
    stage1.wait()?;
    eprintln!("simserver worker 0: a process escaped with GPU memory");
    Ok(())
}

pub(crate) fn escapee(args: EscapeeArgs) -> anyhow::Result<()> {
    if !args.stage2 {
        let exe = std::env::current_exe()?;
        std::process::Command::new(exe)
            .args(["escapee", "--stage2", "--gpu", &args.gpu.to_string()])
            .args(["--mem-gib", &args.mem_gib.to_string()])
            .spawn()
            .context("the second fork")?;
        return Ok(());
    }
    let dir = host_dir()?;
    simhost::enlist(&dir, "escapee")?;
    let reg = Registration::for_self(&dir)?;
    reg.set(&[GpuUse {
        gpu: args.gpu,
        used_bytes: (args.mem_gib * GIB) as u64,
        util_percent: 0,
    }])?;
    loop {
        std::thread::park();
    }
}

pub(crate) fn spawnling(args: SpawnlingArgs) -> anyhow::Result<()> {
    simhost::enlist(&host_dir()?, "spawnling")?;
    std::thread::sleep(Duration::from_millis(args.ms));
    Ok(())
}

/// A child that leaves the process group and outlives this worker, holding 2 GiB —
/// the leftover that makes the next launch run out of memory.
fn leave_orphan(gpu: u32) -> anyhow::Result<()> {
    let exe = std::env::current_exe()?;
    let mut cmd = std::process::Command::new(exe);
    cmd.args([
        "foreign",
        "--gpu",
        &gpu.to_string(),
        "--mem-gib",
        "2",
        "--ignore-sigterm",
    ]);
    // SAFETY: setsid is async-signal-safe and only affects the new child.
    unsafe {
        cmd.pre_exec(|| {
            libc::setsid();
            Ok(())
        });
    }
    cmd.spawn().context("spawning the leftover")?;
    Ok(())
}

pub(crate) fn foreign(args: ForeignArgs) -> anyhow::Result<()> {
    if args.ignore_sigterm {
        ignore_sigterm();
    }
    simhost::enlist(&host_dir()?, "foreign")?;
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
            let (m, _) = warmup_curve(f64::from(i) / 100.0, 88.0 * GIB);
            assert!(m >= last, "step {i}");
            last = m;
        }
        assert_eq!(last, (88.0 * GIB) as u64);
        assert_eq!(warmup_curve(0.0, 88.0 * GIB).0, 0);
    }
}
