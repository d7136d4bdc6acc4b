//! The kernels GPU hosts run, emulated for drainwatch at the boundaries it
//! really meets (system calls, cgroupfs files, mounts) by the `kernelsim`
//! wrapper: see `tests/kernelsim`.

/// A kernel feature set, older than this host's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kernel {
    /// 5.14 to 6.8 (RHEL 9, Ubuntu 22.04 and 24.04): no group signals
    /// through a pidfd.
    V5_14,
    /// 5.10 (Debian 11): also no `cgroup.kill`.
    V5_10,
    /// 4.18 with cgroup v2 mounted (RHEL 8 booted with the unified
    /// hierarchy): no pidfds, no `cgroup.kill`, no `cgroup.freeze`.
    V4_18,
    /// 4.18 with cgroup v1 alone (RHEL 8 as it boots by default).
    V4_18CgroupV1,
}

impl Kernel {
    /// `kernelsim`'s arguments for this set (before `--`).
    pub fn args(self) -> &'static [&'static str] {
        match self {
            Self::V5_14 => &["--kernel", "5.14"],
            Self::V5_10 => &["--kernel", "5.10"],
            Self::V4_18 => &["--kernel", "4.18"],
            Self::V4_18CgroupV1 => &["--kernel", "4.18", "--no-cgroup2"],
        }
    }

    /// Whether drainwatch can contain servers in cgroup v2 leaves here.
    pub fn cgroup2(self) -> bool {
        self != Self::V4_18CgroupV1
    }

    /// Whether the kernel gives pidfds (5.3).
    pub fn pidfds(self) -> bool {
        matches!(self, Self::V5_14 | Self::V5_10)
    }

    /// Whether the kernel has `cgroup.kill` (5.14).
    pub fn cgroup_kill(self) -> bool {
        self == Self::V5_14
    }
}
