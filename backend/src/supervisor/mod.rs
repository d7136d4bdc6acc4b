//! Process control for the managed server: launch it in a new session and
//! process group (and, where cgroup v2 can be had, a leaf cgroup of its own)
//! with its output in a log file; signal it, and reap what exits. drainwatch is
//! a child subreaper, so a descendant that escapes its group and loses its
//! parent is re-parented to drainwatch, not to init, and stays visible.
//!
//! Every signal has proof behind it: a single process is signalled through the
//! pidfd taken when it was identified by PID + start time ([`Members`]); a
//! process group only through its leader's pidfd, or without that only while
//! the leader is drainwatch's own unreaped child ([`Group`]); a cgroup only if
//! it is one of drainwatch's own leaves ([`cgroup`]).
//!
//! The only module that starts or signals processes.

pub mod cgroup;
mod logs;
mod members;
pub mod pidfd;

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use shared::ProcId;
use shared::restart::{Containment, ContainmentKind, LaunchCause};

use crate::config::file::ServerConfig;
use crate::config::flags::Invocation;

pub use logs::{LogTail, looks_like_oom, looks_like_port_in_use, prune};
pub use members::Members;
pub use pidfd::Pidfd;

/// A server process drainwatch started.
#[derive(Debug)]
pub struct Launched {
    pub root: ProcId,
    /// The process group (= session) the server leads.
    pub group: Group,
    pub log_path: PathBuf,
}

/// The process group a launched server leads, and the proof that it is still
/// that group and not a number someone else now holds.
#[derive(Debug)]
pub struct Group {
    pub pgid: i32,
    /// The leader's pidfd, taken while it was still our unreaped child: it reaches
    /// exactly this group for as long as any member lives, and no one after.
    leader: Option<Pidfd>,
    /// The leader is drainwatch's child and not reaped yet, so its PID — the
    /// group's number — cannot have been reused.
    pub leader_unreaped: bool,
}

impl Group {
    /// A group found again after drainwatch itself restarted: its leader is no
    /// longer our child, so only its pidfd can prove the group is the same.
    pub fn refound(pgid: i32, root: ProcId) -> Self {
        Self {
            pgid,
            leader: Pidfd::open(root).ok(),
            leader_unreaped: false,
        }
    }

    /// Signals the group if there is proof it is still the server's; says how.
    #[allow(unsafe_code)]
    pub fn signal(&self, sig: i32) -> GroupSignal {
        if let Some(fd) = &self.leader {
            match fd.signal_group(sig) {
                pidfd::Sent::Delivered => return GroupSignal::ByPidfd,
                pidfd::Sent::Gone => return GroupSignal::Empty,
                pidfd::Sent::Unsupported => {}
            }
        }
        if self.leader_unreaped && self.pgid > 1 {
            // SAFETY: killpg on the group our unreaped child leads: its number
            // is pinned by that child and cannot belong to anyone else.
            let rc = unsafe { libc::killpg(self.pgid, sig) };
            return if rc == 0 {
                GroupSignal::ByNumber
            } else {
                GroupSignal::Empty
            };
        }
        GroupSignal::NoProof
    }
}

/// How [`Group::signal`] went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupSignal {
    /// Through the leader's pidfd.
    ByPidfd,
    /// By number, while the leader was our unreaped child.
    ByNumber,
    /// The group has no members left.
    Empty,
    /// No proof the number is still the server's group: not signalled.
    NoProof,
}

/// How a reaped child ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Exit {
    pub pid: u32,
    pub code: Option<i32>,
    pub signal: Option<i32>,
}

/// Sets up containment for the servers drainwatch launches — cgroup leaves where
/// they can be had, pidfds where the kernel has them — and says what is in
/// force, and why not more.
pub fn contain(
    setting: &cgroup::Setting,
    server_port: u16,
) -> (Option<cgroup::Cgroups>, Containment) {
    let pidfd = pidfd::probe();
    let cgroups = cgroup::setup(setting, server_port);
    match &cgroups {
        Ok(cg) => tracing::info!(cgroup = %cg.name(), "servers are contained by cgroup v2"),
        Err(why) => tracing::warn!(
            %why,
            "no cgroup containment: process group, subreaper and tracked processes only"
        ),
    }
    let mut fallbacks = cgroups.as_ref().map(cgroup::fallbacks).unwrap_or_default();
    if let Err(why) = pidfd::probe_group() {
        fallbacks.push(format!(
            "{why}: the server's process group is signalled by number, and only while its leader is drainwatch's unreaped child"
        ));
    }
    for f in &fallbacks {
        tracing::warn!(fallback = %f, "this kernel lacks part of what containment uses");
    }
    if let Some(why) = signal_limit() {
        tracing::warn!("{why}");
        fallbacks.push(why);
    }
    if crate::identity::in_own_pid_namespace() {
        tracing::warn!(
            "drainwatch runs in a PID namespace of its own: {}",
            shared::process::OUTSIDE_NOTE
        );
        fallbacks.push(shared::process::OUTSIDE_NOTE.to_owned());
    }
    let containment = Containment {
        kind: match cgroups {
            Ok(_) => ContainmentKind::Cgroup,
            Err(_) => ContainmentKind::ProcessGroup,
        },
        reason: cgroups.as_ref().err().map(ToString::to_string),
        cgroup: cgroups.as_ref().ok().map(cgroup::Cgroups::name),
        pidfd: pidfd.is_ok(),
        pidfd_reason: pidfd.err().map(|e| e.to_string()),
        fallbacks,
    };
    (cgroups.ok(), containment)
}

/// `CAP_KILL`'s bit in a capability set.
const CAP_KILL: u32 = 5;

/// What drainwatch may not signal, run as a user other than root without
/// `CAP_KILL`: any process of another user. `None` when it may signal all.
fn signal_limit() -> Option<String> {
    let me = effective_uid();
    (me != 0 && !has_effective_cap(CAP_KILL)).then(|| {
        format!(
            "runs as uid {me} without CAP_KILL: a server of another user is watched, never adopted (it could not be signalled)"
        )
    })
}

/// Whether drainwatch may signal a process owned by `uid` (it runs as that
/// user, as root, or with `CAP_KILL`); otherwise why not, in a sentence.
pub fn may_signal(uid: u32) -> Result<(), NotPermitted> {
    let me = effective_uid();
    if me == 0 || me == uid || has_effective_cap(CAP_KILL) {
        return Ok(());
    }
    Err(NotPermitted { uid, me })
}

/// A process drainwatch may not signal: another user's, without `CAP_KILL`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "it runs as uid {uid} and drainwatch as uid {me}, without CAP_KILL: drainwatch could not signal it (run drainwatch as that user, or give it CAP_KILL)"
)]
pub struct NotPermitted {
    pub uid: u32,
    pub me: u32,
}

#[allow(unsafe_code)]
fn effective_uid() -> u32 {
    // SAFETY: geteuid cannot fail and touches no memory.
    unsafe { libc::geteuid() }
}

/// Whether capability `cap` is in this process's effective set
/// (`CapEff` of `/proc/self/status`).
fn has_effective_cap(cap: u32) -> bool {
    let Ok(status) = std::fs::read_to_string("/proc/self/status") else {
        return false;
    };
    status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        .is_some_and(|set| set & (1 << cap) != 0)
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
    leaf: Option<&cgroup::Leaf>,
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
    let cgroup_procs = leaf
        .map(|l| {
            l.procs_writer()
                .map_err(|e| spawn_error(&format!("opening {}/cgroup.procs", l.name), e))
        })
        .transpose()?;
    let cgroup_fd = cgroup_procs.as_ref().map(std::os::fd::AsRawFd::as_raw_fd);
    // SAFETY: only async-signal-safe calls (write, setsid) on the new child, no
    // allocation: it joins its cgroup before it can fork or exec anything.
    unsafe {
        cmd.pre_exec(move || {
            if let Some(fd) = cgroup_fd
                && libc::write(fd, b"0".as_ptr().cast(), 1) != 1
            {
                return Err(std::io::Error::last_os_error());
            }
            if libc::setsid() < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let child = cmd
        .spawn()
        .map_err(|e| spawn_error(&format!("cannot start {}", cfg.program.display()), e))?;
    drop(cgroup_procs);
    let pid = child.id();
    // The child is reaped by `reap`, not through this handle.
    drop(child);
    // Not reaped yet (only `reap` does that), so this PID is our child's.
    let root = crate::identity::of(pid)
        .map(|i| i.id)
        .ok_or_else(|| LaunchCause::SpawnError {
            message: "the server exited before it could be identified".to_owned(),
        })?;
    Ok(Launched {
        root,
        group: Group {
            pgid: pid as i32,
            leader: Pidfd::open(root).ok(),
            leader_unreaped: true,
        },
        log_path: log_path.to_owned(),
    })
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
