//! Process identity, the one owner of `/proc/<pid>/stat`: who holds a PID now
//! (PID + start time, field 22), whether that identity is still alive, its
//! children and descendants ([`tree`]), who listens on a port, and the server's
//! identities as the manager publishes them to telemetry ([`hint`]).
//!
//! Reads only: nothing here signals a process (only `supervisor/` does).
//! Names and command lines never identify anything.

mod hint;
mod tree;

use procfs::FromRead;
use procfs::process::{FDTarget, Stat};
use shared::ProcId;

pub use hint::{Hint, ServerHint};
pub use tree::{Node, children, descendants, walk};

/// One read of `/proc/<pid>/stat`, whole, for a reader that needs more of it
/// than [`Identity`] (state, RSS, threads): the only place it is read.
pub fn stat(pid: u32) -> procfs::ProcResult<Stat> {
    Stat::from_file(format!("/proc/{pid}/stat"))
}

/// The inode of the host's (the initial) PID namespace, fixed by the kernel
/// (`PROC_PID_INIT_INO`, Linux ≥ 3.8).
const HOST_PID_NAMESPACE_INO: u64 = 0xEFFF_FFFC;

/// Whether this process runs in a PID namespace of its own (a container
/// without the host's PIDs): then a PID the GPU driver reports, always the
/// host's, names no process of this `/proc` (or another one). Unknown (no
/// `/proc/self/ns/pid`) counts as the host's.
pub fn in_own_pid_namespace() -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self/ns/pid").is_ok_and(|m| m.ino() != HOST_PID_NAMESPACE_INO)
}

/// Who owns process `pid` (the uid of its `/proc` entry); `None` once it is gone.
pub fn owner(pid: u32) -> Option<u32> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(format!("/proc/{pid}"))
        .ok()
        .map(|m| m.uid())
}

/// Whether a process in `state` (from its stat) has exited: `Z` (zombie) or
/// `X`/`x` (dead), even before it is reaped.
pub fn exited(state: char) -> bool {
    matches!(state, 'Z' | 'X' | 'x')
}

/// What signalling and tree walks need of one process: who it is now, whether
/// it has exited, its parent and its process group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Identity {
    pub id: ProcId,
    /// The state letter of its stat; see [`exited`].
    pub state: char,
    pub ppid: u32,
    pub pgid: i32,
    /// Its thread count: a single-threaded process lists its children in one file.
    pub threads: i64,
}

impl Identity {
    /// The identity a stat of `pid` shows.
    pub fn from_stat(pid: u32, stat: &Stat) -> Self {
        Self {
            id: ProcId {
                pid,
                start_ticks: stat.starttime,
            },
            state: stat.state,
            ppid: stat.ppid.max(0) as u32,
            pgid: stat.pgrp,
            threads: stat.num_threads,
        }
    }

    pub fn exited(&self) -> bool {
        exited(self.state)
    }
}

/// One read of `/proc/<pid>/stat`: the process that has `pid` now, if any.
pub fn of(pid: u32) -> Option<Identity> {
    stat(pid).ok().map(|s| Identity::from_stat(pid, &s))
}

/// `id`'s stat if it is alive as that identity: same PID, same start time, not
/// exited.
pub fn live(id: ProcId) -> Option<Identity> {
    of(id.pid).filter(|now| now.id == id && !now.exited())
}

/// True while `id` is alive: same PID, same start time, not exited.
pub fn alive(id: ProcId) -> bool {
    live(id).is_some()
}

/// Where in the kernel `pid` sleeps (`/proc/<pid>/wchan`): a symbol, or
/// `None` when it runs or the kernel does not say.
pub fn wchan(pid: u32) -> Option<String> {
    let w = std::fs::read_to_string(format!("/proc/{pid}/wchan")).ok()?;
    let w = w.trim();
    (!w.is_empty() && w != "0").then(|| w.chars().take(64).collect())
}

/// What is left alive of a server whose root is gone: each of `recorded`
/// still alive as that identity, and each process still in the server's
/// process group `pgid` that started no earlier than its root (a group keeps
/// its number while any member lives, and no one else can make a group of
/// it). Also the descendants of those, by identity.
pub fn leftovers(root: ProcId, pgid: i32, recorded: &[ProcId]) -> Vec<ProcId> {
    let mut starts: Vec<Identity> = recorded.iter().filter_map(|id| live(*id)).collect();
    if pgid > 0
        && let Ok(all) = procfs::process::all_processes()
    {
        starts.extend(
            all.flatten()
                .filter_map(|p| of(p.pid as u32))
                .filter(|i| i.pgid == pgid && i.id.start_ticks >= root.start_ticks)
                .filter(|i| !i.exited()),
        );
    }
    starts.sort_by_key(|i| i.id);
    starts.dedup_by_key(|i| i.id);
    let mut out: Vec<ProcId> = walk(starts, of).into_iter().map(|i| i.id).collect();
    out.sort();
    out.dedup();
    out
}

/// The socket inodes listening on TCP `port` (v4 or v6).
fn listening(port: u16) -> Vec<u64> {
    procfs::net::tcp()
        .into_iter()
        .chain(procfs::net::tcp6())
        .flatten()
        .filter(|e| e.local_address.port() == port && e.state == procfs::net::TcpState::Listen)
        .map(|e| e.inode)
        .collect()
}

/// PIDs holding one of the sockets `inodes`. Scans every process's descriptors.
fn holders(inodes: &[u64]) -> Vec<u32> {
    if inodes.is_empty() {
        return Vec::new();
    }
    let Ok(all) = procfs::process::all_processes() else {
        return Vec::new();
    };
    all.flatten()
        .filter(|p| {
            p.fd().is_ok_and(|fds| {
                fds.flatten()
                    .any(|fd| matches!(fd.target, FDTarget::Socket(i) if inodes.contains(&i)))
            })
        })
        .map(|p| p.pid as u32)
        .collect()
}

/// PIDs holding a listening TCP socket (v4 or v6) on `port`. Scans every
/// process's descriptors: call it rarely.
pub fn listeners(port: u16) -> Vec<u32> {
    holders(&listening(port))
}

/// Who listens on `port` (TCP, v4 or v6), if anyone: `Some(None)` when the socket
/// exists but its owner cannot be seen.
pub fn port_holder(port: u16) -> Option<Option<u32>> {
    let inodes = listening(port);
    (!inodes.is_empty()).then(|| holders(&inodes).first().copied())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn knows_itself_and_a_stranger_by_start_time() {
        let me = of(std::process::id()).expect("self");
        assert_eq!(me.id.pid, std::process::id());
        assert!(me.id.start_ticks > 0);
        assert_eq!(me.ppid, std::os::unix::process::parent_id());
        assert!(alive(me.id));
        let reused = ProcId {
            pid: me.id.pid,
            start_ticks: me.id.start_ticks + 1,
        };
        assert!(!alive(reused));
    }

    #[test]
    fn finds_children_and_listeners() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        assert!(listeners(port).contains(&std::process::id()));
        assert_eq!(port_holder(port), Some(Some(std::process::id())));
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .expect("spawn");
        let threads = of(std::process::id()).expect("self").threads;
        assert!(children(std::process::id(), threads).contains(&child.id()));
        child.kill().expect("kill");
        child.wait().expect("reap");
    }
}
