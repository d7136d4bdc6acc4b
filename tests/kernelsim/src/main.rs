//! `kernelsim --kernel 5.10 [--no-cgroup2] -- PROGRAM [ARGS…]` runs PROGRAM in
//! place (the same PID) as if on an older Linux kernel, at the boundaries a
//! program really meets, never through a switch inside it:
//!
//! - **System calls** (a seccomp filter, inherited by everything PROGRAM
//!   starts): the calls that kernel lacks answer `ENOSYS`; flags it does not
//!   know answer `EINVAL` (`PIDFD_SIGNAL_PROCESS_GROUP` and `PIDFD_THREAD`,
//!   6.9).
//! - **cgroupfs files that kernel lacks** (`cgroup.kill`, 5.14;
//!   `cgroup.freeze`, 5.2): every call that opens, stats or checks a path
//!   naming one answers `ENOENT`. A helper process outside the filter decides
//!   this through seccomp user notification, reading the path from the
//!   caller's memory. Not emulated: a directory listing still names them.
//! - **`--no-cgroup2`**: PROGRAM runs in a mount namespace of its own without
//!   the cgroup v2 mount, as on a host booted with cgroup v1 alone.
//!   `/proc/self/cgroup` keeps its `0::` line, as such kernels show it.

use std::ffi::OsString;
use std::fs::File;
use std::io;
use std::os::fd::RawFd;
use std::os::unix::fs::FileExt;
use std::os::unix::process::CommandExt;

use anyhow::{Context, bail};
use clap::{Parser, ValueEnum};
use libseccomp::{
    ScmpAction, ScmpArgCompare, ScmpCompareOp, ScmpFilterContext, ScmpNotifReq, ScmpNotifResp,
    ScmpNotifRespFlags, ScmpSyscall, notify_id_valid,
};

#[derive(Debug, Parser)]
#[command(about = "Runs a program as an older Linux kernel would answer it")]
struct Args {
    /// The kernel to answer as.
    #[arg(long, value_enum)]
    kernel: Kernel,
    /// Run without the cgroup v2 mount (a cgroup v1 host).
    #[arg(long)]
    no_cgroup2: bool,
    /// The program and its arguments.
    #[arg(last = true, required = true)]
    command: Vec<OsString>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Kernel {
    /// This kernel, unchanged.
    Native,
    /// 5.14 to 6.8 (RHEL 9, Ubuntu 22.04 and 24.04): pidfds, cgroup v2 with
    /// `cgroup.kill`, no group signals through a pidfd.
    #[value(name = "5.14")]
    V5_14,
    /// 5.10 (Debian 11): as 5.14, without `cgroup.kill`.
    #[value(name = "5.10")]
    V5_10,
    /// 4.18 (RHEL 8): no pidfds at all, no `cgroup.kill`, no `cgroup.freeze`.
    #[value(name = "4.18")]
    V4_18,
}

impl Kernel {
    /// The first system call number this kernel lacks. From 424 on the
    /// numbers are the same on every architecture, and 4.19 to 5.0 added none.
    fn first_missing(self) -> Option<i32> {
        match self {
            Self::Native => None,
            // process_mrelease (5.15).
            Self::V5_14 => Some(448),
            // epoll_pwait2 (5.11).
            Self::V5_10 => Some(441),
            // pidfd_send_signal (5.1).
            Self::V4_18 => Some(424),
        }
    }

    /// cgroup v2 interface files this kernel does not have.
    fn missing_files(self) -> &'static [&'static str] {
        match self {
            Self::Native | Self::V5_14 => &[],
            Self::V5_10 => &["cgroup.kill"],
            Self::V4_18 => &["cgroup.kill", "cgroup.freeze"],
        }
    }
}

/// The highest system call number a filter rule is written for.
const LAST_NR: i32 = 511;
/// `PIDFD_SIGNAL_PROCESS_GROUP` (`<linux/pidfd.h>`, 6.9).
const PIDFD_SIGNAL_PROCESS_GROUP: u64 = 1 << 2;
/// `PIDFD_THREAD` (= `O_EXCL`, 6.9).
const PIDFD_THREAD: u64 = libc::O_EXCL as u64;

/// System calls that take a path, and which argument holds it.
const PATH_CALLS: &[(&str, usize)] = &[
    ("open", 0),
    ("creat", 0),
    ("stat", 0),
    ("lstat", 0),
    ("access", 0),
    ("truncate", 0),
    ("openat", 1),
    ("openat2", 1),
    ("newfstatat", 1),
    ("statx", 1),
    ("faccessat", 1),
    ("faccessat2", 1),
];

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if args.no_cgroup2 {
        drop_cgroup2().context("taking the cgroup v2 mount away")?;
    }
    let first_missing = args.kernel.first_missing();
    let exists = |s: ScmpSyscall| first_missing.is_none_or(|m| i32::from(s) < m);
    let paths: Vec<(ScmpSyscall, usize)> = if args.kernel.missing_files().is_empty() {
        Vec::new()
    } else {
        PATH_CALLS
            .iter()
            // Not every architecture has every one (aarch64 has no `open`).
            .filter_map(|(name, arg)| Some((ScmpSyscall::from_name(name).ok()?, *arg)))
            .filter(|(s, _)| exists(*s))
            .collect()
    };
    let helper = if paths.is_empty() {
        None
    } else {
        Some(start_helper(args.kernel.missing_files(), paths.clone())?)
    };

    let mut filter = ScmpFilterContext::new(ScmpAction::Allow)?;
    if let Some(first) = first_missing {
        for nr in first..=LAST_NR {
            filter.add_rule(ScmpAction::Errno(libc::ENOSYS), ScmpSyscall::from(nr))?;
        }
    }
    if args.kernel != Kernel::Native {
        for (name, arg, flag) in [
            ("pidfd_send_signal", 3, PIDFD_SIGNAL_PROCESS_GROUP),
            ("pidfd_open", 1, PIDFD_THREAD),
        ] {
            let s = ScmpSyscall::from_name(name)?;
            if exists(s) {
                filter.add_rule_conditional(
                    ScmpAction::Errno(libc::EINVAL),
                    s,
                    &[ScmpArgCompare::new(
                        arg,
                        ScmpCompareOp::MaskedEqual(flag),
                        flag,
                    )],
                )?;
            }
        }
    }
    for (s, _) in &paths {
        filter.add_rule(ScmpAction::Notify, *s)?;
    }
    filter.load().context("loading the seccomp filter")?;
    if let Some(sock) = helper {
        let fd = filter.get_notify_fd()?;
        send_fd(sock, fd).context("handing the notifications to the helper")?;
        // SAFETY: both are ours; the program must hold neither.
        unsafe {
            libc::close(fd);
            libc::close(sock);
        }
    }
    let err = std::process::Command::new(&args.command[0])
        .args(&args.command[1..])
        .exec();
    bail!("cannot run {:?}: {err}", args.command[0])
}

/// Unshares the mount namespace and unmounts every cgroup2 mount in it.
#[allow(unsafe_code)]
fn drop_cgroup2() -> anyhow::Result<()> {
    // SAFETY: unshare and mount with constant arguments.
    unsafe {
        if libc::unshare(libc::CLONE_NEWNS) != 0 {
            bail!("unshare(CLONE_NEWNS): {}", io::Error::last_os_error());
        }
        // Nothing done here reaches the host's namespace.
        if libc::mount(
            std::ptr::null(),
            c"/".as_ptr(),
            std::ptr::null(),
            libc::MS_REC | libc::MS_PRIVATE,
            std::ptr::null(),
        ) != 0
        {
            bail!("making / private: {}", io::Error::last_os_error());
        }
    }
    // drainwatch's own reading of the mounts.
    let cgroup2 = |info: &str| -> Vec<String> {
        drainwatch::supervisor::cgroup::mounts(info)
            .map(|(_, at)| at.to_string_lossy().into_owned())
            .collect()
    };
    let mut points = cgroup2(&std::fs::read_to_string("/proc/self/mountinfo")?);
    // Deepest first.
    points.sort_by_key(|p| std::cmp::Reverse(p.len()));
    for p in &points {
        let c = std::ffi::CString::new(p.as_str())?;
        // SAFETY: a NUL-terminated path and a flag.
        if unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) } != 0 {
            bail!("unmounting {p}: {}", io::Error::last_os_error());
        }
    }
    let left = cgroup2(&std::fs::read_to_string("/proc/self/mountinfo")?);
    anyhow::ensure!(left.is_empty(), "cgroup2 still mounted at {left:?}");
    Ok(())
}

/// Starts the helper that answers the filter's notifications: a grandchild
/// (nobody's child once its parent leaves), started before the filter so that
/// the filter does not apply to it. Returns the socket to hand it the
/// notification descriptor through.
#[allow(unsafe_code)]
fn start_helper(
    hidden: &'static [&'static str],
    paths: Vec<(ScmpSyscall, usize)>,
) -> anyhow::Result<RawFd> {
    let mut pair = [0; 2];
    // SAFETY: socketpair fills two descriptors.
    if unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_STREAM | libc::SOCK_CLOEXEC,
            0,
            pair.as_mut_ptr(),
        )
    } != 0
    {
        bail!("socketpair: {}", io::Error::last_os_error());
    }
    let [ours, theirs] = pair;
    // SAFETY: this process has one thread; the child only forks again or exits.
    match unsafe { libc::fork() } {
        -1 => bail!("fork: {}", io::Error::last_os_error()),
        0 => {
            // SAFETY: as above; the grandchild runs the helper and never returns.
            unsafe {
                if libc::fork() == 0 {
                    // Out of the program's process group: whatever signals
                    // that group (a test killing drainwatch) leaves the helper
                    // serving the processes that outlive it.
                    libc::setsid();
                    libc::close(ours);
                    let code = match recv_fd(theirs) {
                        Ok(fd) => serve(fd, hidden, &paths),
                        Err(e) => {
                            eprintln!("kernelsim: no notification descriptor: {e}");
                            1
                        }
                    };
                    libc::_exit(code);
                }
                libc::_exit(0);
            }
        }
        child => {
            let mut status = 0;
            // SAFETY: waits for the child that only forked.
            unsafe {
                libc::waitpid(child, &mut status, 0);
                libc::close(theirs);
            }
            Ok(ours)
        }
    }
}

/// Answers notifications until no process uses the filter any more: a path
/// naming a hidden file is not there (`ENOENT`), anything else goes on.
#[allow(unsafe_code)]
fn serve(fd: RawFd, hidden: &[&str], paths: &[(ScmpSyscall, usize)]) -> i32 {
    loop {
        let mut p = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one pollfd on the stack.
        if unsafe { libc::poll(&mut p, 1, -1) } < 0 {
            if io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return 1;
        }
        if p.revents & libc::POLLIN == 0 {
            // POLLHUP: every process under the filter has exited.
            return 0;
        }
        // The caller may have died since (its notification is gone).
        let Ok(req) = ScmpNotifReq::receive(fd) else {
            continue;
        };
        let arg = paths
            .iter()
            .find(|(s, _)| *s == req.data.syscall)
            .map(|(_, a)| *a);
        let missing = arg
            .and_then(|a| read_path(req.pid, req.data.args[a]))
            .is_some_and(|path| {
                let name = path.rsplit(|b| *b == b'/').next().unwrap_or(&path);
                hidden.iter().any(|h| h.as_bytes() == name)
            });
        // The path read was the caller's only if its call is still waiting.
        let resp = if missing && notify_id_valid(fd, req.id).is_ok() {
            ScmpNotifResp::new_error(req.id, -libc::ENOENT, ScmpNotifRespFlags::empty())
        } else {
            ScmpNotifResp::new_continue(req.id, ScmpNotifRespFlags::empty())
        };
        let _ = resp.respond(fd);
    }
}

/// The NUL-terminated string at `addr` in process `pid`'s memory (at most
/// `PATH_MAX` bytes), read a page at a time so that a string ending just
/// before an unmapped page is still read whole.
fn read_path(pid: u32, addr: u64) -> Option<Vec<u8>> {
    const PAGE: u64 = 4096;
    let mem = File::open(format!("/proc/{pid}/mem")).ok()?;
    let mut out = Vec::new();
    let mut at = addr;
    while out.len() < libc::PATH_MAX as usize {
        let mut buf = vec![0u8; (PAGE - at % PAGE) as usize];
        let n = mem.read_at(&mut buf, at).ok()?;
        if n == 0 {
            return None;
        }
        if let Some(end) = buf[..n].iter().position(|b| *b == 0) {
            out.extend_from_slice(&buf[..end]);
            return Some(out);
        }
        out.extend_from_slice(&buf[..n]);
        at += n as u64;
    }
    None
}

/// Room for one descriptor's control message (aligned as `cmsghdr` wants).
type Control = [u64; 4];

#[allow(unsafe_code)]
fn send_fd(sock: RawFd, fd: RawFd) -> io::Result<()> {
    let mut byte = [0u8; 1];
    let mut iov = libc::iovec {
        iov_base: byte.as_mut_ptr().cast(),
        iov_len: 1,
    };
    let mut control: Control = [0; 4];
    // SAFETY: a msghdr pointing at the locals above; CMSG_* stay within `control`.
    unsafe {
        let space = libc::CMSG_SPACE(size_of::<RawFd>() as u32) as usize;
        assert!(space <= size_of::<Control>());
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = space;
        let c = libc::CMSG_FIRSTHDR(&msg);
        (*c).cmsg_level = libc::SOL_SOCKET;
        (*c).cmsg_type = libc::SCM_RIGHTS;
        (*c).cmsg_len = libc::CMSG_LEN(size_of::<RawFd>() as u32) as usize;
        std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<RawFd>(), fd);
        if libc::sendmsg(sock, &msg, 0) != 1 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

#[allow(unsafe_code)]
fn recv_fd(sock: RawFd) -> io::Result<RawFd> {
    let mut byte = [0u8; 1];
    let mut iov = libc::iovec {
        iov_base: byte.as_mut_ptr().cast(),
        iov_len: 1,
    };
    let mut control: Control = [0; 4];
    // SAFETY: as in `send_fd`, reading instead.
    unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = size_of::<Control>();
        if libc::recvmsg(sock, &mut msg, libc::MSG_CMSG_CLOEXEC) != 1 {
            return Err(io::Error::last_os_error());
        }
        let c = libc::CMSG_FIRSTHDR(&msg);
        if c.is_null() || (*c).cmsg_type != libc::SCM_RIGHTS {
            return Err(io::Error::other("no descriptor came"));
        }
        Ok(std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<RawFd>()))
    }
}
