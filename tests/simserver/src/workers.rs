//! A launcher's worker processes, as SGLang keeps its ranks: each dies with
//! the launcher however the launcher dies, reports "ready" on its stdout, and
//! is stopped with SIGTERM, then SIGKILL.

use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::Context;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// Spawns `cmd` as a worker of this process. Every line it prints that starts
/// with `ready` counts in `ready`; when the count reaches `of`, `who` says
/// all workers are ready (on stderr, with the time).
#[allow(unsafe_code)]
pub fn spawn(
    mut cmd: Command,
    ready: &Arc<AtomicUsize>,
    of: usize,
    who: &'static str,
) -> anyhow::Result<Child> {
    let parent = std::process::id() as i32;
    cmd.stdout(Stdio::piped()).kill_on_drop(true);
    // Workers die with the launcher, however it dies (as SGLang's do).
    // SAFETY: prctl and getppid are async-signal-safe.
    unsafe {
        cmd.pre_exec(move || {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            if libc::getppid() != parent {
                libc::_exit(1);
            }
            Ok(())
        });
    }
    let mut child = cmd.spawn().context("spawning a worker")?;
    if let Some(out) = child.stdout.take() {
        let ready = Arc::clone(ready);
        tokio::spawn(async move {
            let mut lines = BufReader::new(out).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                if line.starts_with("ready") && ready.fetch_add(1, Ordering::SeqCst) + 1 == of {
                    eprintln!("{who}: all workers ready at {} ms", simhost::now_ms());
                }
            }
        });
    }
    Ok(child)
}

/// Resolves with the rank of the first worker to exit.
pub async fn first_exit(workers: &mut [Child]) -> usize {
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
#[allow(unsafe_code)]
pub async fn stop(workers: &mut [Child]) {
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

/// How long after a worker exits a SIGTERM still counts as the stop (a
/// SIGTERM to the whole process group reaches the workers as well, and one
/// may be seen gone before the launcher's own SIGTERM is).
const SIGTERM_WITH_WORKERS: Duration = Duration::from_millis(200);

/// The launcher's life once its workers run, as SGLang's: SIGTERM (unless
/// `ignore_sigterm`) or SIGINT stops it, after `on_sigterm` (a drain); a
/// worker that dies takes the server down. Then every worker is stopped,
/// unless `leave_workers`: then the launcher leaves at once and the workers,
/// which had the SIGTERM too, end in their own time.
/// Returns the exit code: 0 when stopped, 1 when a worker died.
pub async fn supervise(
    workers: &mut [Child],
    who: &'static str,
    ignore_sigterm: bool,
    leave_workers: bool,
    mut on_sigterm: impl AsyncFnMut(),
) -> anyhow::Result<i32> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    let code = loop {
        tokio::select! {
            biased;
            _ = term.recv() => {
                eprintln!("{who}: SIGTERM at {} ms", simhost::now_ms());
                if ignore_sigterm {
                    eprintln!("{who}: SIGTERM ignored");
                    continue;
                }
                on_sigterm().await;
                break 0;
            }
            _ = int.recv() => break 0,
            rank = first_exit(workers) => {
                if tokio::time::timeout(SIGTERM_WITH_WORKERS, term.recv()).await.is_ok() {
                    eprintln!("{who}: SIGTERM at {} ms", simhost::now_ms());
                    if !ignore_sigterm {
                        on_sigterm().await;
                        break 0;
                    }
                    eprintln!("{who}: SIGTERM ignored");
                }
                eprintln!("{who}: worker rank {rank} died; shutting down the server");
                break 1;
            }
        }
    };
    if !(leave_workers && code == 0) {
        stop(workers).await;
    }
    Ok(code)
}
