//! One worker per GPU: takes its memory, says `ready` on stdout, and holds the
//! memory until it is killed (SIGTERM's default action ends it, unless
//! `ignore-sigterm`). Rank 0 also leaves the `orphan` and `escape` modes'
//! leftovers, each a `gpuhog leftover` holding memory of its own.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use anyhow::{Context, bail};

use crate::memory::Backend;
use crate::modes::Modes;

/// How long rank 0 waits for its orphan to hold its memory (a cold CUDA
/// context on a large GPU takes seconds).
const LEFTOVER_READY: Duration = Duration::from_secs(120);

#[derive(Debug, clap::Args)]
pub(crate) struct WorkerArgs {
    #[arg(long)]
    rank: u32,
    #[arg(long)]
    gpu: u32,
    /// Device memory to allocate and touch.
    #[arg(long)]
    bytes: u64,
    #[command(flatten)]
    sim: crate::SimArg,
}

/// A process that holds GPU memory outside the server's process group.
#[derive(Debug, clap::Args)]
pub(crate) struct LeftoverArgs {
    #[arg(long)]
    gpu: u32,
    #[arg(long)]
    bytes: u64,
    /// Ignore SIGTERM (a leftover that only SIGKILL removes).
    #[arg(long)]
    ignore_sigterm: bool,
    /// Fork the holder and exit at once, so the holder has no parent of the
    /// server's left (the escape's first stage).
    #[arg(long)]
    detach: bool,
    #[command(flatten)]
    sim: crate::SimArg,
}

#[allow(unsafe_code)]
fn ignore_sigterm() {
    // SAFETY: setting a signal's disposition to ignore.
    unsafe { libc::signal(libc::SIGTERM, libc::SIG_IGN) };
}

pub(crate) fn run(args: WorkerArgs) -> anyhow::Result<()> {
    let modes = Modes::from_env().map_err(anyhow::Error::msg)?;
    if modes.ignore_sigterm {
        ignore_sigterm();
    }
    let backend = Backend::new(args.sim.dir)?;
    let on = backend.hold(args.gpu, args.bytes, "worker")?;
    eprintln!(
        "gpuhog worker {}: holding {} bytes on {on} at {} ms",
        args.rank,
        args.bytes,
        simhost::now_ms()
    );
    if modes.orphan && args.rank == 0 {
        leave_orphan(&backend, args.gpu, args.bytes / 2)?;
    }
    let mut out = std::io::stdout();
    writeln!(out, "ready rank={}", args.rank)?;
    out.flush()?;
    if let Some(after) = modes.escape_after.filter(|_| args.rank == 0) {
        std::thread::sleep(after);
        escape(&backend, args.gpu, args.bytes / 2)?;
    }
    loop {
        std::thread::park();
    }
}

#[allow(unsafe_code)]
fn in_new_session(cmd: &mut Command) {
    // SAFETY: setsid is async-signal-safe and only affects the new child.
    unsafe {
        cmd.pre_exec(|| {
            libc::setsid();
            Ok(())
        });
    }
}

fn leftover_cmd(backend: &Backend, gpu: u32, bytes: u64) -> anyhow::Result<Command> {
    let mut cmd = Command::new(std::env::current_exe()?);
    cmd.args(["leftover", "--gpu", &gpu.to_string()])
        .args(["--bytes", &bytes.to_string()])
        .args(backend.args());
    in_new_session(&mut cmd);
    Ok(cmd)
}

/// A child in a session of its own that ignores SIGTERM and outlives this
/// worker, holding `bytes`; returns once it holds them.
fn leave_orphan(backend: &Backend, gpu: u32, bytes: u64) -> anyhow::Result<()> {
    let mut cmd = leftover_cmd(backend, gpu, bytes)?;
    cmd.arg("--ignore-sigterm").stdout(Stdio::piped());
    let mut child = cmd.spawn().context("spawning the orphan")?;
    let out = child.stdout.take().context("the orphan's stdout")?;
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = BufReader::new(out).read_line(&mut line);
        let _ = tx.send(line);
    });
    match rx.recv_timeout(LEFTOVER_READY) {
        Ok(line) if line.starts_with("held") => {
            eprintln!(
                "gpuhog worker 0: left an orphan (pid {}) holding {bytes} bytes",
                child.id()
            );
            Ok(())
        }
        Ok(_) => bail!("the orphan exited before it held its memory"),
        Err(_) => bail!("the orphan did not hold its memory in {LEFTOVER_READY:?}"),
    }
}

/// Leaves a holder that is nobody's descendant: stage 1 (in a new session)
/// forks it and exits.
fn escape(backend: &Backend, gpu: u32, bytes: u64) -> anyhow::Result<()> {
    let mut cmd = leftover_cmd(backend, gpu, bytes)?;
    cmd.arg("--detach");
    cmd.spawn().context("spawning the escapee")?.wait()?;
    eprintln!("gpuhog worker 0: a process escaped with {bytes} bytes of GPU memory");
    Ok(())
}

pub(crate) fn leftover(args: LeftoverArgs) -> anyhow::Result<()> {
    if args.detach {
        Command::new(std::env::current_exe()?)
            .args(["leftover", "--gpu", &args.gpu.to_string()])
            .args(["--bytes", &args.bytes.to_string()])
            .args(
                args.sim
                    .dir
                    .iter()
                    .flat_map(|d| ["--sim".as_ref(), d.as_os_str()]),
            )
            .stdout(Stdio::null())
            .spawn()
            .context("the second fork")?;
        return Ok(());
    }
    if args.ignore_sigterm {
        ignore_sigterm();
    }
    let backend = Backend::new(args.sim.dir)?;
    let role = if args.ignore_sigterm {
        "orphan"
    } else {
        "escapee"
    };
    let on = backend.hold(args.gpu, args.bytes, role)?;
    let mut out = std::io::stdout();
    // The reader may be gone (an escapee's stage 1): nothing more is written.
    let _ = writeln!(out, "held {} bytes on {on}", args.bytes).and_then(|()| out.flush());
    loop {
        std::thread::park();
    }
}
