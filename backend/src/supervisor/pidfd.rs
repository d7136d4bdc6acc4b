//! Process file descriptors (Linux ≥ 5.3): a handle on one process that a PID
//! number is not. A pidfd is taken once, when a process is identified by PID +
//! start time, and every later signal goes through it, so the check and the
//! kill cannot race: a pidfd whose process has exited signals nothing, even if
//! its number now belongs to someone else.
//!
//! A pidfd of a group leader also reaches its process group
//! (`PIDFD_SIGNAL_PROCESS_GROUP`, Linux ≥ 6.9) as the kernel's own record of
//! that group, not as a number: once the last member is gone, it reaches no one.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use shared::ProcId;

use crate::identity;

/// `PIDFD_SIGNAL_PROCESS_GROUP` from `<linux/pidfd.h>`.
const PIDFD_SIGNAL_PROCESS_GROUP: libc::c_uint = 1 << 2;

/// An open handle on one process, known to be the identity it was opened for.
#[derive(Debug)]
pub struct Pidfd {
    fd: OwnedFd,
    pub id: ProcId,
}

/// Why a pidfd could not be had.
#[derive(Debug, PartialEq, Eq)]
pub enum OpenError {
    /// The process with that identity is not alive (gone, or its PID reused).
    Gone,
    /// This process has no descriptor to spare (EMFILE, ENFILE).
    NoFds,
    /// The kernel has no pidfds (older than 5.3, or a seccomp filter refused them).
    Unsupported(String),
}

/// The result of signalling through a pidfd.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sent {
    Delivered,
    /// The process (or every member of the group) has already exited.
    Gone,
    /// The kernel cannot signal this way (no group signals before Linux 6.9).
    Unsupported,
}

impl Pidfd {
    /// A pidfd for `id`, or why not. The identity is checked after the pidfd is
    /// open and once more against the pidfd itself, so a PID reused between
    /// the caller's look and this call is never taken for `id`.
    #[allow(unsafe_code)]
    pub fn open(id: ProcId) -> Result<Self, OpenError> {
        // SAFETY: pidfd_open(2) takes a pid and flags and returns a new fd or -1.
        let raw = unsafe { libc::syscall(libc::SYS_pidfd_open, id.pid as libc::pid_t, 0) };
        if raw < 0 {
            let e = std::io::Error::last_os_error();
            return match e.raw_os_error() {
                Some(libc::ESRCH) => Err(OpenError::Gone),
                Some(libc::EMFILE | libc::ENFILE) => Err(OpenError::NoFds),
                _ => Err(OpenError::Unsupported(format!("pidfd_open: {e}"))),
            };
        }
        // SAFETY: `raw` is a new descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw as i32) };
        let me = Self { fd, id };
        // The pidfd names whoever had the PID when it was opened. If that is `id`
        // and it is still running after the stat was read, the stat was its own.
        if identity::alive(id) && !me.exited() {
            Ok(me)
        } else {
            Err(OpenError::Gone)
        }
    }

    /// Whether the process has exited (a pidfd polls readable then). A poll
    /// that fails says nothing, and the process counts as alive: signalling an
    /// exited process through its pidfd reaches no one.
    #[allow(unsafe_code)]
    pub fn exited(&self) -> bool {
        for _ in 0..3 {
            let mut p = libc::pollfd {
                fd: self.fd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one pollfd on the stack, zero timeout.
            let n = unsafe { libc::poll(&mut p, 1, 0) };
            if n >= 0 {
                return n > 0 && p.revents & libc::POLLIN != 0;
            }
            if std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
                return false;
            }
        }
        false
    }

    /// Sends `sig` to the process.
    pub fn signal(&self, sig: i32) -> Sent {
        self.send(sig, 0)
    }

    /// Sends `sig` to the process group this process leads (or led: the group
    /// outlives its leader while members remain).
    pub fn signal_group(&self, sig: i32) -> Sent {
        self.send(sig, PIDFD_SIGNAL_PROCESS_GROUP)
    }

    #[allow(unsafe_code)]
    fn send(&self, sig: i32, flags: libc::c_uint) -> Sent {
        // SAFETY: pidfd_send_signal(2) on a descriptor we own; no siginfo.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_pidfd_send_signal,
                self.fd.as_raw_fd(),
                sig,
                std::ptr::null::<libc::siginfo_t>(),
                flags,
            )
        };
        if rc == 0 {
            return Sent::Delivered;
        }
        match std::io::Error::last_os_error().raw_os_error() {
            Some(libc::ESRCH) => Sent::Gone,
            _ => Sent::Unsupported,
        }
    }
}

/// Why this kernel's pidfds cannot be used here, or only in part.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Lacking {
    #[error("cannot read this process's own /proc entry")]
    NoSelf,
    /// The kernel's refusal, in words.
    #[error("{0}")]
    Unsupported(String),
    #[error("pidfd_open did not find this process")]
    Gone,
    #[error("no file descriptor to spare")]
    NoFds,
    #[error("no group signals through a pidfd (Linux < 6.9)")]
    NoGroupSignals,
}

/// Whether this kernel hands out pidfds, and why not if it does not.
pub fn probe() -> Result<(), Lacking> {
    let me = identity::of(std::process::id())
        .map(|i| i.id)
        .ok_or(Lacking::NoSelf)?;
    match Pidfd::open(me) {
        Ok(_) => Ok(()),
        Err(OpenError::Unsupported(why)) => Err(Lacking::Unsupported(why)),
        Err(OpenError::Gone) => Err(Lacking::Gone),
        Err(OpenError::NoFds) => Err(Lacking::NoFds),
    }
}

/// Whether this kernel signals process groups through a pidfd (Linux ≥ 6.9),
/// and why not if it does not: signal 0 (nothing is delivered, only the
/// permission is checked) through drainwatch's own pidfd to the group it leads.
pub fn probe_group() -> Result<(), Lacking> {
    let me = identity::of(std::process::id())
        .map(|i| i.id)
        .ok_or(Lacking::NoSelf)?;
    let fd = Pidfd::open(me).map_err(|_| Lacking::NoGroupSignals)?;
    // The group is the one this process leads: none (ESRCH) where it leads
    // none, which still says the kernel knows the flag.
    match fd.send(0, PIDFD_SIGNAL_PROCESS_GROUP) {
        Sent::Delivered | Sent::Gone => Ok(()),
        Sent::Unsupported => Err(Lacking::NoGroupSignals),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id_of(child: &std::process::Child) -> ProcId {
        identity::of(child.id()).expect("child's stat").id
    }

    #[test]
    fn signals_the_process_and_then_nothing() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .expect("spawn");
        let fd = Pidfd::open(id_of(&child)).expect("a pidfd");
        assert!(!fd.exited());
        assert_eq!(fd.signal(libc::SIGKILL), Sent::Delivered);
        child.wait().expect("reap");
        assert!(fd.exited());
        assert_eq!(fd.signal(libc::SIGKILL), Sent::Gone);
    }

    #[test]
    fn a_wrong_start_time_is_refused() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .expect("spawn");
        let mut id = id_of(&child);
        id.start_ticks += 1;
        assert_eq!(Pidfd::open(id).err(), Some(OpenError::Gone));
        child.kill().expect("kill");
        child.wait().expect("reap");
    }

    #[test]
    fn this_kernel_has_pidfds() {
        probe().expect("pidfds");
    }
}
