//! Process control for the managed server: launch it in a new session and
//! process group with its output in a log file, signal its group and every
//! tracked descendant (by PID + start time, re-checked just before the signal),
//! and reap what exits. drainwatch is a child subreaper, so a descendant that
//! escapes its group and loses its parent is re-parented to drainwatch, not to
//! init, and stays visible.
//!
//! The only module that starts or signals processes.

mod logs;

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use shared::ProcId;
use shared::restart::LaunchCause;

use crate::config::file::ServerConfig;
use crate::config::flags::Invocation;

pub use logs::{LogTail, looks_like_oom, looks_like_port_in_use, prune};

/// A server process drainwatch started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Launched {
    pub root: ProcId,
    /// The process group (= session) the server leads.
    pub pgid: i32,
    pub log_path: PathBuf,
}

/// How a reaped child ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Exit {
    pub pid: u32,
    pub code: Option<i32>,
    pub signal: Option<i32>,
}

/// Makes orphaned descendants re-parent to this process (Linux ≥ 3.4).
#[allow(unsafe_code)]
pub fn become_subreaper() -> std::io::Result<()> {
    // SAFETY: prctl with integer arguments only.
    let rc = unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Starts the server: `program` with `inv`'s argv and environment, in its own
/// session, stdin closed, stdout and stderr appended to `log_path`.
#[allow(unsafe_code)]
pub fn launch(
    cfg: &ServerConfig,
    inv: &Invocation,
    log_path: &Path,
) -> Result<Launched, LaunchCause> {
    let spawn_error = |what: &str, e: std::io::Error| LaunchCause::SpawnError {
        message: format!("{what}: {e}"),
    };
    if let Some(dir) = log_path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| spawn_error("creating the log folder", e))?;
    }
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log_path)
        .map_err(|e| spawn_error("opening the log file", e))?;
    let err_log = log
        .try_clone()
        .map_err(|e| spawn_error("opening the log file", e))?;
    let mut cmd = Command::new(&cfg.program);
    cmd.args(&inv.args)
        .envs(&inv.env)
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(err_log);
    for k in &inv.env_remove {
        cmd.env_remove(k);
    }
    if let Some(cwd) = &cfg.cwd {
        cmd.current_dir(cwd);
    }
    // SAFETY: setsid is async-signal-safe and only affects the new child.
    unsafe {
        cmd.pre_exec(|| {
            if libc::setsid() < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let child = cmd
        .spawn()
        .map_err(|e| spawn_error(&format!("cannot start {}", cfg.program.display()), e))?;
    let pid = child.id();
    // The child is reaped by `reap`, not through this handle.
    drop(child);
    let start_ticks = start_ticks_of(pid).ok_or_else(|| LaunchCause::SpawnError {
        message: "the server exited before it could be identified".to_owned(),
    })?;
    Ok(Launched {
        root: ProcId { pid, start_ticks },
        pgid: pid as i32,
        log_path: log_path.to_owned(),
    })
}

/// Start ticks of a process (field 22 of its stat), if it exists.
fn start_ticks_of(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = &stat[stat.rfind(')')? + 1..];
    after.split_ascii_whitespace().nth(19)?.parse().ok()
}

/// True while `id` is alive: same PID, same start time, not a zombie.
pub fn alive(id: ProcId) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{}/stat", id.pid)) else {
        return false;
    };
    let Some(after) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
        return false;
    };
    let mut f = after.split_ascii_whitespace();
    let state = f.next().unwrap_or("X");
    let start = f.nth(18).and_then(|s| s.parse::<u64>().ok());
    start == Some(id.start_ticks) && !matches!(state, "Z" | "X" | "x")
}

/// `root` and every descendant it has now, by identity (children are listed per
/// thread in `/proc/<pid>/task/*/children`; a child younger than its parent whose
/// PID was reused in between is not taken).
pub fn descendants(root: ProcId) -> Vec<ProcId> {
    let mut out = Vec::new();
    if !alive(root) {
        return out;
    }
    let mut queue = vec![root];
    while let Some(parent) = queue.pop() {
        out.push(parent);
        for pid in crate::telemetry::procfs::children(parent.pid, 0) {
            if let Some(start_ticks) = start_ticks_of(pid) {
                let id = ProcId { pid, start_ticks };
                if start_ticks >= parent.start_ticks && !out.contains(&id) && !queue.contains(&id) {
                    queue.push(id);
                }
            }
        }
    }
    out
}

/// Signals a process group.
#[allow(unsafe_code)]
pub fn signal_group(pgid: i32, sig: i32) {
    if pgid > 1 {
        // SAFETY: killpg with a group we created; ESRCH (gone) is fine.
        unsafe { libc::killpg(pgid, sig) };
    }
}

/// Signals each process still alive as the identity recorded for it (a PID reused
/// by someone else is left alone). Returns how many were signalled.
#[allow(unsafe_code)]
pub fn signal_each(ids: &[ProcId], sig: i32) -> usize {
    let mut n = 0;
    for id in ids {
        if alive(*id) && id.pid > 1 {
            // SAFETY: kill(2) on a PID whose start time was just checked.
            unsafe { libc::kill(id.pid as i32, sig) };
            n += 1;
        }
    }
    n
}

/// Reaps every child that has exited (the server's root, and orphans re-parented
/// here). Never blocks.
#[allow(unsafe_code)]
pub fn reap() -> Vec<Exit> {
    let mut out = Vec::new();
    loop {
        let mut status = 0;
        // SAFETY: waitpid with WNOHANG on any child; status is a local.
        let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
        if pid <= 0 {
            return out;
        }
        let (code, signal) = if libc::WIFEXITED(status) {
            (Some(libc::WEXITSTATUS(status)), None)
        } else if libc::WIFSIGNALED(status) {
            (None, Some(libc::WTERMSIG(status)))
        } else {
            continue;
        };
        out.push(Exit {
            pid: pid as u32,
            code,
            signal,
        });
    }
}

/// Who listens on `port` (TCP, v4 or v6), if anyone: `Some(None)` when the socket
/// exists but its owner cannot be seen.
pub fn port_holder(port: u16) -> Option<Option<u32>> {
    let listening = procfs::net::tcp()
        .into_iter()
        .chain(procfs::net::tcp6())
        .flatten()
        .any(|e| e.local_address.port() == port && e.state == procfs::net::TcpState::Listen);
    listening.then(|| crate::telemetry::procfs::listeners(port).first().copied())
}
