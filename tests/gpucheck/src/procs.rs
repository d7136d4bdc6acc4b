//! The check's own processes, by PID and start time only: it is a child
//! subreaper, so whatever drainwatch or the server leaves behind is
//! re-parented to it, and [`leftovers`] finds it by parent links. A signal goes
//! through a pidfd taken after the process's start time was checked, so it
//! reaches that process and never one that reused its PID.

use std::io;

use simhost::ProcStat;

/// Makes orphaned descendants re-parent to this process, not to init.
#[allow(unsafe_code)]
pub(crate) fn become_subreaper() -> io::Result<()> {
    // SAFETY: prctl with integer arguments only.
    let rc = unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// True while the process `pid` that started at `start_ticks` lives.
pub(crate) fn alive(pid: u32, start_ticks: u64) -> bool {
    simhost::read_proc_stat(pid)
        .ok()
        .flatten()
        .is_some_and(|s| s.start_ticks == start_ticks && !s.has_exited())
}

/// The command line of `pid`, for the report.
pub(crate) fn cmdline(pid: u32) -> String {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| {
            b.split(|c| *c == 0)
                .filter(|a| !a.is_empty())
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_default()
}

/// Every live descendant of this process.
pub(crate) fn leftovers() -> Vec<ProcStat> {
    simhost::descendants(std::process::id())
        .into_iter()
        .filter(|p| !p.has_exited())
        .collect()
}

/// Sends `sig` to the process `pid` that started at `start_ticks`, if it is
/// still that process. Returns whether it was sent.
#[allow(unsafe_code)]
pub(crate) fn signal(pid: u32, start_ticks: u64, sig: i32) -> io::Result<bool> {
    // SAFETY: pidfd_open takes a PID and flags, and returns a new descriptor.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
    if fd < 0 {
        let e = io::Error::last_os_error();
        return if e.raw_os_error() == Some(libc::ESRCH) {
            Ok(false)
        } else {
            Err(e)
        };
    }
    let fd = fd as libc::c_int;
    // The descriptor names whatever held the PID when it was opened: if that
    // still started at `start_ticks`, it is the process meant.
    let sent = if alive(pid, start_ticks) {
        // SAFETY: a pidfd we own, a signal number, no siginfo, no flags.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_pidfd_send_signal,
                fd,
                sig,
                std::ptr::null::<libc::siginfo_t>(),
                0,
            )
        };
        rc == 0
    } else {
        false
    };
    // SAFETY: closing the descriptor opened above, once.
    unsafe { libc::close(fd) };
    Ok(sent)
}

/// Reaps `pid` if it is an exited child of ours (re-parented ones included).
#[allow(unsafe_code)]
pub(crate) fn reap(pid: u32) {
    let mut status = 0;
    // SAFETY: waitpid on one PID with WNOHANG; `status` is a valid out-pointer.
    unsafe { libc::waitpid(pid as libc::pid_t, &mut status, libc::WNOHANG) };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signals_only_the_process_with_that_start_time() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .expect("sleep");
        let pid = child.id();
        let stat = simhost::read_proc_stat(pid).expect("stat").expect("alive");
        assert!(!signal(pid, stat.start_ticks + 1, libc::SIGKILL).expect("pidfd"));
        assert!(alive(pid, stat.start_ticks));
        assert!(signal(pid, stat.start_ticks, libc::SIGKILL).expect("pidfd"));
        let _ = child.wait();
        assert!(!alive(pid, stat.start_ticks));
    }
}
