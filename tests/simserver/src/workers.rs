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
