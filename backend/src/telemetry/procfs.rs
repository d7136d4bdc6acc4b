//! Reads `/proc` for the processes drainwatch shows: identity (PID + start time),
//! parentage, process group and session, owner, command line, RSS. Also finds who
//! listens on a TCP port, and a process's children. Names never identify anything.
//! Command lines are redacted as they are read ([`crate::redact`]): no secret
//! argument leaves this module for a view.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use std::os::unix::fs::MetadataExt;

use procfs::FromRead;
use procfs::process::{FDTarget, Process, Stat};
use shared::ProcId;

/// How long a command line and owner are trusted before they are read again.
const CMDLINE_TTL: Duration = Duration::from_secs(5);
/// How often /etc/passwd may be re-read for a uid it did not have.
const PASSWD_TTL: Duration = Duration::from_secs(30);

/// One process's `/proc` facts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcDetails {
    pub id: ProcId,
    pub state: char,
    pub ppid: u32,
    pub pgid: i32,
    pub sid: i32,
    pub uid: Option<u32>,
    pub user: Option<String>,
    /// argv with secret values redacted (`--api-key redacted:…`).
    pub cmdline: Vec<String>,
    pub rss_bytes: u64,
    pub started_at_ms: u64,
    pub threads: i64,
}

/// Reads `/proc`, caching what rarely changes.
#[derive(Debug)]
pub struct ProcReader {
    boot_ms: u64,
    ticks_per_second: u64,
    page_size: u64,
    users: HashMap<u32, String>,
    /// When /etc/passwd was last read: a uid it lacks (common in containers) is
    /// looked up again at most this often.
    users_read: Instant,
    cached: HashMap<ProcId, Cached>,
}

/// What rarely changes for one identity.
#[derive(Debug)]
struct Cached {
    uid: Option<u32>,
    user: Option<String>,
    cmdline: Vec<String>,
    read_at: Instant,
}

impl Default for ProcReader {
    fn default() -> Self {
        Self::new()
    }
}

impl ProcReader {
    pub fn new() -> Self {
        Self {
            boot_ms: procfs::boot_time_secs().unwrap_or(0) * 1000,
            ticks_per_second: procfs::ticks_per_second().max(1),
            page_size: procfs::page_size(),
            users: read_passwd(),
            users_read: Instant::now(),
            cached: HashMap::new(),
        }
    }

    /// One process; `Err` says why it could not be read (usually: it has exited).
    /// One read of `/proc/<pid>/stat` per call; owner and command line are read
    /// once per identity and refreshed every [`CMDLINE_TTL`].
    pub fn read(&mut self, pid: u32) -> Result<ProcDetails, String> {
        let stat = Stat::from_file(format!("/proc/{pid}/stat")).map_err(|e| reason(&e))?;
        let id = ProcId {
            pid,
            start_ticks: stat.starttime,
        };
        let fresh = self
            .cached
            .get(&id)
            .is_some_and(|c| c.read_at.elapsed() < CMDLINE_TTL);
        if !fresh {
            let uid = std::fs::metadata(format!("/proc/{pid}"))
                .ok()
                .map(|m| m.uid());
            let cmdline = Process::new(pid as i32)
                .and_then(|p| p.cmdline())
                .ok()
                .filter(|c| !c.is_empty())
                .map(|c| crate::redact::global().argv(&c))
                .unwrap_or_else(|| vec![format!("[{}]", stat.comm)]);
            let user = uid.and_then(|u| self.user(u));
            self.cached.insert(
                id,
                Cached {
                    uid,
                    user,
                    cmdline,
                    read_at: Instant::now(),
                },
            );
        }
        let c = self.cached.get(&id).ok_or("cache")?;
        Ok(ProcDetails {
            id,
            state: stat.state,
            ppid: stat.ppid.max(0) as u32,
            pgid: stat.pgrp,
            sid: stat.session,
            uid: c.uid,
            user: c.user.clone(),
            cmdline: c.cmdline.clone(),
            rss_bytes: stat.rss.saturating_mul(self.page_size),
            started_at_ms: self.boot_ms + stat.starttime * 1000 / self.ticks_per_second,
            threads: stat.num_threads,
        })
    }

    /// Forgets what was cached about processes not seen in the last sample.
    pub fn retain(&mut self, seen: &[ProcId]) {
        self.cached.retain(|id, _| seen.contains(id));
    }

    fn user(&mut self, uid: u32) -> Option<String> {
        if !self.users.contains_key(&uid) && self.users_read.elapsed() > PASSWD_TTL {
            // Perhaps a user added since the last read.
            self.users = read_passwd();
            self.users_read = Instant::now();
        }
        self.users.get(&uid).cloned()
    }
}

/// What signalling needs of one process: who it is now, whether it has exited,
/// and its process group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Identity {
    pub id: ProcId,
    /// `Z` (zombie) or `X` (dead) once it has exited, even before it is reaped.
    pub state: char,
    pub ppid: u32,
    pub pgid: i32,
}

impl Identity {
    pub fn exited(&self) -> bool {
        matches!(self.state, 'Z' | 'X' | 'x')
    }
}

/// One read of `/proc/<pid>/stat`: the process that has `pid` now, if any.
pub fn identity(pid: u32) -> Option<Identity> {
    let stat = Stat::from_file(format!("/proc/{pid}/stat")).ok()?;
    Some(Identity {
        id: ProcId {
            pid,
            start_ticks: stat.starttime,
        },
        state: stat.state,
        ppid: stat.ppid.max(0) as u32,
        pgid: stat.pgrp,
    })
}

/// True while `id` is alive: same PID, same start time, not exited.
pub fn alive(id: ProcId) -> bool {
    identity(id.pid).is_some_and(|now| now.id == id && !now.exited())
}

/// `root` and every descendant it has now, by identity (children are listed per
/// thread in `/proc/<pid>/task/*/children`; a listed child whose PID was reused
/// before its stat was read is not taken: its parent must be the one listing it).
pub fn descendants(root: ProcId) -> Vec<ProcId> {
    let mut out = Vec::new();
    if !alive(root) {
        return out;
    }
    let mut queue = vec![root];
    while let Some(parent) = queue.pop() {
        out.push(parent);
        for pid in children(parent.pid, 0) {
            if let Some(child) = identity(pid).filter(|i| i.ppid == parent.pid).map(|i| i.id)
                && child.start_ticks >= parent.start_ticks
                && !out.contains(&child)
                && !queue.contains(&child)
            {
                queue.push(child);
            }
        }
    }
    out
}

/// A process's children across all its threads (`/proc/<pid>/task/*/children`);
/// `threads` (from its stat) spares listing the tasks of a single-threaded process.
pub fn children(pid: u32, threads: i64) -> Vec<u32> {
    let files: Vec<std::path::PathBuf> = if threads == 1 {
        vec![format!("/proc/{pid}/task/{pid}/children").into()]
    } else {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
            return Vec::new();
        };
        tasks.flatten().map(|t| t.path().join("children")).collect()
    };
    let mut out: Vec<u32> = files
        .iter()
        .filter_map(|f| std::fs::read_to_string(f).ok())
        .flat_map(|s| {
            s.split_ascii_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect::<Vec<u32>>()
        })
        .collect();
    out.sort_unstable();
    out.dedup();
    out
}

/// PIDs holding a listening TCP socket (v4 or v6) on `port`. Scans every
/// process's descriptors: call it rarely.
pub fn listeners(port: u16) -> Vec<u32> {
    let inodes: Vec<u64> = procfs::net::tcp()
        .into_iter()
        .chain(procfs::net::tcp6())
        .flatten()
        .filter(|e| e.local_address.port() == port && e.state == procfs::net::TcpState::Listen)
        .map(|e| e.inode)
        .collect();
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

fn reason(e: &procfs::ProcError) -> String {
    match e {
        procfs::ProcError::NotFound(_) => "exited (no /proc entry)".to_owned(),
        procfs::ProcError::PermissionDenied(_) => "no permission to read /proc".to_owned(),
        other => other.to_string().to_lowercase(),
    }
}

fn read_passwd() -> HashMap<u32, String> {
    std::fs::read_to_string("/etc/passwd")
        .map(|s| parse_passwd(&s))
        .unwrap_or_default()
}

fn parse_passwd(s: &str) -> HashMap<u32, String> {
    s.lines()
        .filter_map(|l| {
            let mut f = l.split(':');
            let name = f.next()?;
            let uid = f.nth(1)?.parse().ok()?;
            Some((uid, name.to_owned()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwd_lines() {
        let users = parse_passwd(
            "root:x:0:0:root:/root:/bin/bash\nsvc:x:1001:1001::/home/svc:/bin/sh\n#bad\n",
        );
        assert_eq!(users.get(&0).map(String::as_str), Some("root"));
        assert_eq!(users.get(&1001).map(String::as_str), Some("svc"));
        assert_eq!(users.len(), 2);
    }

    #[test]
    fn reads_itself() {
        let mut r = ProcReader::new();
        let me = r.read(std::process::id()).expect("self");
        assert_eq!(me.id.pid, std::process::id());
        assert!(me.id.start_ticks > 0);
        assert_eq!(me.ppid, std::os::unix::process::parent_id());
        assert!(me.rss_bytes > 0);
        assert!(!me.cmdline.is_empty());
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock")
            .as_millis() as u64;
        assert!(me.started_at_ms <= now && me.started_at_ms + 600_000 > now);
    }

    #[test]
    fn finds_children_and_listeners() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        assert!(listeners(port).contains(&std::process::id()));
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .expect("spawn");
        let threads = ProcReader::new()
            .read(std::process::id())
            .expect("self")
            .threads;
        assert!(children(std::process::id(), threads).contains(&child.id()));
        child.kill().expect("kill");
        child.wait().expect("reap");
    }

    #[test]
    fn command_lines_are_read_redacted() {
        // `; :` keeps the shell from exec-ing sleep: its argv stays the one read.
        let mut child = std::process::Command::new("sh")
            .args(["-c", "sleep 5; :", "sh", "--api-key", "sk-proc-secret"])
            .spawn()
            .expect("spawn");
        // Until the exec, the child is a copy of this test binary: wait for it.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        let d = loop {
            let d = ProcReader::new().read(child.id()).expect("child");
            if d.cmdline.len() >= 6 || std::time::Instant::now() > deadline {
                break d;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        };
        child.kill().expect("kill");
        child.wait().expect("reap");
        assert_eq!(
            d.cmdline[..5],
            ["sh", "-c", "sleep 5; :", "sh", "--api-key"]
        );
        assert!(d.cmdline[5].starts_with("redacted:"), "{:?}", d.cmdline);
    }

    #[test]
    fn exited_process_says_so() {
        let mut child = std::process::Command::new("true").spawn().expect("spawn");
        let pid = child.id();
        child.wait().expect("reap");
        let err = ProcReader::new().read(pid).expect_err("gone");
        assert!(err.contains("exited"), "{err}");
    }
}
