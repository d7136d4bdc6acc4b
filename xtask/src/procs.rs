//! Children the demo starts: each in its own process group (so a group kill reaches
//! every descendant, workers included), each told by the kernel to die if xtask
//! dies. Ctrl-C, SIGTERM and SIGHUP only set a flag; the task's loop does the stopping.
//! xtask is a child subreaper, so what a child leaves behind when it dies (the
//! server drainwatch launched in a session of its own) is re-parented to xtask, not
//! to init, and [`stop_leftovers`] finds it by parent links.

use std::os::unix::process::CommandExt;
use std::process::{Child, Command};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

/// Routes SIGINT, SIGTERM and SIGHUP (the terminal closed) to [`stop_requested`].
pub(crate) fn catch_stop_signals() {
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
        unsafe { libc::signal(sig, on_signal as *const () as libc::sighandler_t) };
    }
}

pub(crate) fn stop_requested() -> bool {
    STOP.load(Ordering::SeqCst)
}

/// Makes orphaned descendants re-parent to xtask rather than to init (Linux ≥ 3.4).
pub(crate) fn become_subreaper() -> anyhow::Result<()> {
    // SAFETY: prctl with integer arguments only.
    let rc = unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error()).context("becoming a child subreaper");
    }
    Ok(())
}

/// A started child and the name to report it by.
#[derive(Debug)]
pub(crate) struct Group {
    pub(crate) name: &'static str,
    pub(crate) child: Child,
}

/// Starts `cmd` as the leader of a new process group.
pub(crate) fn spawn_group(name: &'static str, cmd: &mut Command) -> anyhow::Result<Group> {
    cmd.process_group(0);
    // SAFETY: prctl is async-signal-safe and touches only the child being created.
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
    let child = cmd
        .spawn()
        .with_context(|| format!("cannot start {name}"))?;
    Ok(Group { name, child })
}

/// SIGTERM to every group, then SIGKILL to what is left after `grace`; reaps all.
pub(crate) fn stop_all(groups: &mut [Group], grace: Duration) {
    signal_all(groups, libc::SIGTERM);
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline && groups.iter().any(group_alive) {
        reap(groups);
        std::thread::sleep(Duration::from_millis(50));
    }
    signal_all(groups, libc::SIGKILL);
    for g in groups.iter_mut() {
        let _ = g.child.wait();
    }
}

fn signal_all(groups: &[Group], sig: libc::c_int) {
    for g in groups {
        // SAFETY: killpg on a group we created; a vanished group is harmless (ESRCH).
        unsafe { libc::killpg(g.child.id() as libc::pid_t, sig) };
    }
}

fn reap(groups: &mut [Group]) {
    for g in groups.iter_mut() {
        let _ = g.child.try_wait();
    }
}

/// True while any process of the group exists (its leader may already be gone).
fn group_alive(g: &Group) -> bool {
    // SAFETY: signal 0 only checks existence.
    unsafe { libc::killpg(g.child.id() as libc::pid_t, 0) == 0 }
}

/// SIGKILLs the process group of every descendant of `pid`: what a supervisor
/// started in sessions of their own.
pub(crate) fn kill_descendant_groups(pid: u32) {
    for d in simhost::descendants(pid) {
        if d.pgid > 1 {
            // SAFETY: killpg on a group led by a descendant of our own child.
            unsafe { libc::killpg(d.pgid, libc::SIGKILL) };
        }
    }
}

/// The first child that has exited, with its status.
pub(crate) fn first_exited(
    groups: &mut [Group],
) -> Option<(&'static str, std::process::ExitStatus)> {
    groups
        .iter_mut()
        .find_map(|g| g.child.try_wait().ok().flatten().map(|s| (g.name, s)))
}

/// Stops every process still below xtask (children, re-parented orphans and their
/// descendants, found by parent links in `/proc`, never by name): SIGTERM to each
/// once, SIGKILL to all after `grace`, reaping as they exit, until none is left or
/// `limit` has passed. Call it after every [`Group`]'s child has been waited for:
/// it reaps any child, so a `Child` it reaped would lose its exit status.
pub(crate) fn stop_leftovers(grace: Duration, limit: Duration) {
    let me = std::process::id();
    let start = Instant::now();
    let mut termed: Vec<u32> = Vec::new();
    loop {
        reap_any();
        let left = simhost::descendants(me);
        if left.is_empty() {
            return;
        }
        if start.elapsed() >= limit {
            let pids: Vec<String> = left.iter().map(|p| p.pid.to_string()).collect();
            eprintln!("xtask: could not stop process(es) {}", pids.join(", "));
            return;
        }
        let kill = start.elapsed() >= grace;
        for p in &left {
            let sig = if kill {
                libc::SIGKILL
            } else if termed.contains(&p.pid) {
                continue;
            } else {
                termed.push(p.pid);
                libc::SIGTERM
            };
            // SAFETY: kill on a process below xtask, found by its parent links.
            unsafe { libc::kill(p.pid as libc::pid_t, sig) };
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Reaps every child of xtask that has exited, without waiting.
fn reap_any() {
    let mut status: libc::c_int = 0;
    // SAFETY: waitpid with a valid out-pointer; WNOHANG never blocks.
    while unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) } > 0 {}
}
