//! cgroup v2 containment: each launch of the server runs in a leaf cgroup of its
//! own under drainwatch's subtree, placed there before it execs, so nothing it
//! forks can escape, whatever its parentage or session; stopping it ends with
//! `cgroup.kill` (before Linux 5.14, which lacks it: the leaf frozen and each
//! process in it killed, see [`Leaf::sweep`]), and "nothing of ours is left"
//! includes an empty `cgroup.procs`.
//!
//! The layout follows the delegation rules: in the subtree drainwatch was given
//! (its own cgroup, a `Delegate=yes` unit under systemd) it moves itself into the
//! leaf `supervisor`, and servers run in sibling leaves
//! `server-<port>-<generation>` (the port of the server it manages, so two
//! drainwatch processes sharing a subtree never take each other's leaves).
//! A drainwatch started in the hierarchy's root cgroup makes itself the subtree
//! `drainwatch-<server port>` rather than fill the root with leaves.
//!
//! Where none of this can be had, [`setup`] says why, and the supervisor falls
//! back to process group, subreaper and tracked identities.

use std::io::Write;
use std::os::fd::OwnedFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// What `--cgroup` asks for (a setting of [`crate::config::Config`]).
pub use crate::config::CgroupSetting as Setting;

/// The subtree servers are launched into.
#[derive(Debug, Clone)]
pub struct Cgroups {
    /// Where the cgroup v2 hierarchy is mounted.
    mount: PathBuf,
    /// drainwatch's subtree (absolute path under `mount`).
    subtree: PathBuf,
    /// `server-<port>-`: the names of this drainwatch's server leaves.
    prefix: String,
    /// The kernel has `cgroup.kill` (Linux ≥ 5.14) and `cgroup.freeze` (≥ 5.2).
    kill_file: bool,
    freeze_file: bool,
}

/// One leaf cgroup holding one server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leaf {
    dir: PathBuf,
    /// The path as the kernel names it (from the hierarchy's root), for people.
    pub name: String,
}

const SUPERVISOR: &str = "supervisor";

/// The cgroup v2 mount, from `/proc/self/mountinfo`'s text: the cgroup the
/// mount shows as its root (field 4: `/` unless the mount is of a subtree) and
/// where it is mounted (field 5); the filesystem type follows ` - `.
pub fn find_mount(mountinfo: &str) -> Option<(String, PathBuf)> {
    mounts(mountinfo).next()
}

/// Every cgroup v2 mount in `/proc/self/mountinfo`'s text, in its order: see
/// [`find_mount`].
pub fn mounts(mountinfo: &str) -> impl Iterator<Item = (String, PathBuf)> + '_ {
    mountinfo.lines().filter_map(|line| {
        let (left, right) = line.split_once(" - ")?;
        if right.split_whitespace().next()? != "cgroup2" {
            return None;
        }
        let mut f = left.split_whitespace();
        let root = unescape(f.nth(3)?);
        Some((root, PathBuf::from(unescape(f.next()?))))
    })
}

/// Where this process sees the cgroup v2 hierarchy mounted (`/sys/fs/cgroup`,
/// or `/sys/fs/cgroup/unified` on a hybrid host), from `/proc/self/mountinfo`.
pub fn mount() -> Option<PathBuf> {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    find_mount(&mountinfo).map(|(_, at)| at)
}

/// This process's cgroup v2 path, from `/proc/self/cgroup`'s `0::` line.
pub fn own_path(proc_cgroup: &str) -> Option<String> {
    proc_cgroup
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .map(|p| p.trim().to_owned())
}

/// mountinfo escapes space, tab, newline and backslash as octal.
fn unescape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find('\\') {
        out.push_str(&rest[..i]);
        let code = rest.get(i + 1..i + 4);
        match code.and_then(|c| u8::from_str_radix(c, 8).ok()) {
            Some(b) => {
                out.push(b as char);
                rest = &rest[i + 4..];
            }
            None => {
                out.push('\\');
                rest = &rest[i + 1..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// Why cgroup containment cannot be had here, or a leaf cannot be made.
#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    #[error("turned off by --cgroup off")]
    Off,
    #[error("{} is not a cgroup v2 directory", .0.display())]
    NotCgroup2(PathBuf),
    #[error("cannot read {}: {source}", .path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("no cgroup v2 hierarchy is mounted (cgroup v1 only)")]
    NoMount,
    #[error("this process has no cgroup v2 entry in /proc/self/cgroup")]
    NoEntry,
    #[error("this process's cgroup {own} is not under the cgroup v2 mount of {mount_root}")]
    Outside { own: String, mount_root: String },
    #[error("{} is not a cgroup below the cgroup v2 hierarchy's root at {}", .subtree.display(), .mount.display())]
    NotBelow { subtree: PathBuf, mount: PathBuf },
    #[error("cannot create the cgroup {}: {source}", .path.display())]
    Create {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot move drainwatch into {leaf}: {source}")]
    MoveSelf {
        leaf: String,
        source: std::io::Error,
    },
    #[error("no free leaf for generation {generation} in {subtree}")]
    NoFreeLeaf { generation: u64, subtree: String },
}

fn read(path: &Path) -> Result<String, CgroupError> {
    std::fs::read_to_string(path).map_err(|source| CgroupError::Read {
        path: path.to_owned(),
        source,
    })
}

/// Whether `dir` is on a cgroup v2 filesystem.
#[allow(unsafe_code)]
fn is_cgroup2(dir: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Ok(c) = std::ffi::CString::new(dir.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: statfs(2) fills a zeroed struct on the stack from a valid C string.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::statfs(c.as_ptr(), &mut st) };
    rc == 0 && st.f_type == libc::CGROUP2_SUPER_MAGIC
}

fn mkdir(dir: &Path) -> Result<(), CgroupError> {
    match std::fs::create_dir(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(source) => Err(CgroupError::Create {
            path: dir.to_owned(),
            source,
        }),
    }
}

/// drainwatch's subtree for a process in cgroup `own` (as `/proc/self/cgroup`
/// names it), relative to a mount of the cgroup `mount_root`: its own cgroup, or
/// the one above if it already runs in a `supervisor` leaf (systemd's
/// `DelegateSubgroup=supervisor`, or a drainwatch started from its own leaf).
fn subtree_for(own: &str, mount_root: &str) -> Option<String> {
    let own = own.trim_end_matches('/');
    let own = match own.rsplit_once('/') {
        Some((parent, SUPERVISOR)) => parent,
        _ => own,
    };
    let root = mount_root.trim_end_matches('/');
    let rel = own.strip_prefix(root)?;
    (rel.is_empty() || rel.starts_with('/')).then(|| rel.trim_start_matches('/').to_owned())
}

/// Sets up cgroup containment, or says why it cannot be had here.
pub fn setup(setting: &Setting, server_port: u16) -> Result<Cgroups, CgroupError> {
    if let Setting::Off = setting {
        return Err(CgroupError::Off);
    }
    if let Setting::Path(p) = setting
        && !is_cgroup2(p)
    {
        return Err(CgroupError::NotCgroup2(p.clone()));
    }
    let mountinfo = read(Path::new("/proc/self/mountinfo"))?;
    let (mount_root, mount) = find_mount(&mountinfo).ok_or(CgroupError::NoMount)?;
    let subtree = match setting {
        Setting::Path(p) => p.clone(),
        Setting::Off | Setting::Auto => {
            let own =
                own_path(&read(Path::new("/proc/self/cgroup"))?).ok_or(CgroupError::NoEntry)?;
            let rel = subtree_for(&own, &mount_root).ok_or_else(|| CgroupError::Outside {
                own: own.clone(),
                mount_root: mount_root.clone(),
            })?;
            if rel.is_empty() {
                // The hierarchy's root: a subtree of its own rather than leaves there.
                mount.join(format!("drainwatch-{server_port}"))
            } else {
                mount.join(rel)
            }
        }
    };
    if !subtree.starts_with(&mount) || subtree == mount {
        return Err(CgroupError::NotBelow { subtree, mount });
    }
    mkdir(&subtree)?;
    let mut cg = Cgroups {
        mount,
        subtree,
        prefix: format!("server-{server_port}-"),
        kill_file: false,
        freeze_file: false,
    };
    let me = cg.leaf_at(SUPERVISOR)?;
    cg.kill_file = me.dir.join(KILL).exists();
    cg.freeze_file = me.dir.join(FREEZE).exists();
    me.add(std::process::id())
        .map_err(|source| CgroupError::MoveSelf {
            leaf: me.name.clone(),
            source,
        })?;
    cg.remove_empty_leaves();
    Ok(cg)
}

impl Cgroups {
    /// The subtree as the kernel names it.
    pub fn name(&self) -> String {
        self.display(&self.subtree)
    }

    /// Whether the kernel has `cgroup.kill` (Linux ≥ 5.14); without it a
    /// leaf is emptied by [`Leaf::sweep`].
    pub fn has_kill_file(&self) -> bool {
        self.kill_file
    }

    fn display(&self, dir: &Path) -> String {
        let rel = dir.strip_prefix(&self.mount).unwrap_or(dir);
        format!("/{}", rel.display())
    }

    fn leaf_at(&self, name: &str) -> Result<Leaf, CgroupError> {
        let dir = self.subtree.join(name);
        mkdir(&dir)?;
        Ok(Leaf {
            name: self.display(&dir),
            dir,
        })
    }

    /// A new, empty leaf for the server of `generation`.
    pub fn new_leaf(&self, generation: u64) -> Result<Leaf, CgroupError> {
        for n in 0..100u32 {
            let name = match n {
                0 => format!("{}{generation}", self.prefix),
                n => format!("{}{generation}.{n}", self.prefix),
            };
            let leaf = self.leaf_at(&name)?;
            if !leaf.populated() {
                return Ok(leaf);
            }
        }
        Err(CgroupError::NoFreeLeaf {
            generation,
            subtree: self.name(),
        })
    }

    fn is_leaf_name(&self, name: &std::ffi::OsStr) -> bool {
        name.to_string_lossy().starts_with(&self.prefix)
    }

    /// The recorded leaf `name` (as [`Leaf::name`] gave it), if it is one of
    /// this drainwatch's and still exists.
    pub fn leaf_named(&self, name: &str) -> Option<Leaf> {
        let dir = self.mount.join(name.trim_start_matches('/'));
        let ours = dir.parent() == Some(self.subtree.as_path())
            && dir.file_name().is_some_and(|f| self.is_leaf_name(f));
        (ours && dir.is_dir()).then(|| Leaf {
            name: self.display(&dir),
            dir,
        })
    }

    /// Every server leaf of this drainwatch's: this launch's and any an earlier
    /// run left. Whatever runs in them is the server's.
    pub fn leaves(&self) -> Vec<Leaf> {
        let Ok(entries) = std::fs::read_dir(&self.subtree) else {
            return Vec::new();
        };
        let mut out: Vec<Leaf> = entries
            .flatten()
            .filter(|e| self.is_leaf_name(&e.file_name()))
            .filter(|e| e.path().is_dir())
            .map(|e| Leaf {
                name: self.display(&e.path()),
                dir: e.path(),
            })
            .collect();
        out.sort_by(|a, b| a.name.cmp(&b.name));
        out
    }

    /// Every process in any server leaf.
    pub fn procs(&self) -> Vec<u32> {
        self.leaves().iter().flat_map(Leaf::procs).collect()
    }

    /// Whether cgroup `path` (as `/proc/<pid>/cgroup` names it) is one of this
    /// drainwatch's server leaves, or a cgroup the server made inside one.
    pub fn owns(&self, path: &str) -> bool {
        let leaves = format!("{}/{}", self.name().trim_end_matches('/'), self.prefix);
        path.starts_with(&leaves)
    }

    /// `cgroup.kill` on every server leaf (also on one that looks empty: the
    /// server may have made cgroups of its own inside it); returns how many.
    pub fn kill_all(&self) -> usize {
        let mut n = 0;
        for leaf in self.leaves() {
            match leaf.kill() {
                Ok(()) => n += 1,
                Err(e) => tracing::warn!(cgroup = %leaf.name, error = %e, "cgroup.kill failed"),
            }
        }
        n
    }

    /// Removes the server leaves that are empty, with what the server made
    /// inside them (a leaf with processes anywhere below stays).
    pub fn remove_empty_leaves(&self) {
        for leaf in self.leaves() {
            if !leaf.populated() {
                // EBUSY while the kernel still tears down its last task: the next
                // call gets it.
                for dir in below(&leaf.dir) {
                    let _ = std::fs::remove_dir(dir);
                }
            }
        }
    }
}

/// `dir` and every cgroup under it, deepest first.
fn below(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                out.extend(below(&e.path()));
            }
        }
    }
    out.push(dir.to_owned());
    out
}

impl Leaf {
    /// The cgroup v2 directory `dir` as a leaf, named `name` for people (a
    /// leaf drainwatch did not make itself: a test's).
    pub fn at(dir: PathBuf, name: String) -> Self {
        Self { dir, name }
    }

    /// `cgroup.procs` opened for writing, close-on-exec: a child writes `0` to it
    /// before it execs and so runs in this leaf from its first instruction.
    pub fn procs_writer(&self) -> std::io::Result<OwnedFd> {
        let f = std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_CLOEXEC)
            .open(self.dir.join("cgroup.procs"))?;
        Ok(f.into())
    }

    /// Moves process `pid` (all its threads) into this leaf.
    pub fn add(&self, pid: u32) -> std::io::Result<()> {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .open(self.dir.join("cgroup.procs"))?;
        f.write_all(pid.to_string().as_bytes())
    }

    /// The processes in this leaf now, and in any cgroup the server made in it.
    pub fn procs(&self) -> Vec<u32> {
        below(&self.dir)
            .iter()
            .filter_map(|d| std::fs::read_to_string(d.join("cgroup.procs")).ok())
            .flat_map(|s| {
                s.split_ascii_whitespace()
                    .filter_map(|p| p.parse().ok())
                    .collect::<Vec<u32>>()
            })
            .collect()
    }

    /// Whether any process lives in this leaf or below it (`cgroup.events`);
    /// one that cannot be read counts as populated.
    pub fn populated(&self) -> bool {
        std::fs::read_to_string(self.dir.join("cgroup.events"))
            .map_or(true, |s| s.lines().any(|l| l.trim() == "populated 1"))
    }

    /// SIGKILLs every process in the leaf, atomically with respect to forks.
    /// SIGKILL to every process in the leaf: `cgroup.kill`, where the kernel
    /// has it (Linux ≥ 5.14), else [`Leaf::sweep`].
    pub fn kill(&self) -> std::io::Result<()> {
        let file = self.dir.join(KILL);
        if file.exists() {
            write_existing(&file, b"1")
        } else {
            self.sweep()
        }
    }

    /// Empties the leaf without `cgroup.kill`, as systemd does on such
    /// kernels: the leaf frozen where `cgroup.freeze` can be had (Linux ≥ 5.2:
    /// no member forks or exits on its own meanwhile, and a frozen process
    /// still dies of SIGKILL), each process in it killed in turn, and the
    /// leaf read again until it is empty, [`SWEEPS`] times at most. Each one
    /// is signalled through a pidfd opened on it and found in this leaf still
    /// (the pidfd pins it: not a stranger that took the PID of one that
    /// left); without pidfds, to its PID once its start time and cgroup were
    /// read again just before (a small race with PID reuse remains).
    pub fn sweep(&self) -> std::io::Result<()> {
        let freeze = self.dir.join(FREEZE);
        let frozen = write_existing(&freeze, b"1").is_ok();
        for round in 0..SWEEPS {
            let pids = self.procs();
            if pids.is_empty() {
                break;
            }
            if round > 0 {
                // Time for the killed to leave `cgroup.procs`.
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
            for pid in pids {
                self.kill_member(pid);
            }
        }
        if frozen {
            let _ = write_existing(&freeze, b"0");
        }
        match self.procs().len() {
            0 => Ok(()),
            n => Err(std::io::Error::other(format!(
                "{n} process(es) still in {} after {SWEEPS} sweeps",
                self.name
            ))),
        }
    }

    /// Whether a process in cgroup `path` (as `/proc/<pid>/cgroup` names it)
    /// is in this leaf or below it.
    fn holds(&self, path: &str) -> bool {
        path.strip_prefix(self.name.as_str())
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
    }

    #[allow(unsafe_code)]
    fn kill_member(&self, pid: u32) {
        use super::pidfd::{OpenError, Pidfd};
        let Some(id) = crate::identity::of(pid)
            .filter(|i| !i.exited())
            .map(|i| i.id)
        else {
            return;
        };
        let here = || of_process(pid).is_some_and(|p| self.holds(&p));
        match Pidfd::open(id) {
            Ok(fd) => {
                if here() {
                    fd.signal(libc::SIGKILL);
                }
            }
            Err(OpenError::Gone) => {}
            Err(OpenError::NoFds | OpenError::Unsupported(_)) => {
                if pid > 1 && here() && crate::identity::alive(id) {
                    // SAFETY: kill(2) on a PID whose start time and cgroup
                    // were just read again.
                    unsafe { libc::kill(pid as i32, libc::SIGKILL) };
                }
            }
        }
    }
}

/// The cgroup v2 file that kills a cgroup whole (Linux ≥ 5.14).
const KILL: &str = "cgroup.kill";
/// The cgroup v2 freezer (Linux ≥ 5.2).
const FREEZE: &str = "cgroup.freeze";
/// Rounds of [`Leaf::sweep`] before it gives up (a member that forks faster
/// than it is killed, without a freezer).
const SWEEPS: usize = 20;

/// Writes an interface file that must exist (cgroupfs creates none: opening
/// one that a kernel lacks with `O_CREAT` would say "permission denied").
fn write_existing(path: &Path, value: &[u8]) -> std::io::Result<()> {
    std::fs::OpenOptions::new()
        .write(true)
        .open(path)?
        .write_all(value)
}

/// What this kernel's cgroup v2 lacks that drainwatch would use, and what it
/// does instead, in words (empty where nothing is missing).
pub fn fallbacks(cg: &Cgroups) -> Vec<String> {
    match (cg.kill_file, cg.freeze_file) {
        (true, _) => Vec::new(),
        (false, true) => vec![
            "no cgroup.kill (Linux < 5.14): a leaf is emptied by freezing it and killing each of its processes".to_owned(),
        ],
        (false, false) => vec![
            "no cgroup.kill nor cgroup.freeze (Linux < 5.2): a leaf is emptied by killing each of its processes until none is left".to_owned(),
        ],
    }
}

/// The cgroup v2 path of process `pid` (as `/proc/<pid>/cgroup` names it).
pub fn of_process(pid: u32) -> Option<String> {
    own_path(&std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_cgroup2_mount_in_a_hybrid_layout() {
        let info = "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n\
                    35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n\
                    41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n";
        let at = |root: &str, p: &str| Some((root.to_owned(), PathBuf::from(p)));
        assert_eq!(find_mount(info), at("/", "/sys/fs/cgroup/unified"));
        let unified =
            "30 23 0:26 / /sys/fs/cgroup rw,nosuid shared:4 - cgroup2 cgroup2 rw,nsdelegate\n";
        assert_eq!(find_mount(unified), at("/", "/sys/fs/cgroup"));
        let v1 = "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n";
        assert_eq!(find_mount(v1), None);
        let spaced = "41 31 0:38 / /mnt/cg\\040two rw - cgroup2 cgroup2 rw\n";
        assert_eq!(find_mount(spaced), at("/", "/mnt/cg two"));
        // A container without a cgroup namespace: the mount shows a subtree.
        let nested = "50 40 0:30 /docker/abc /sys/fs/cgroup ro - cgroup2 cgroup2 rw\n";
        assert_eq!(find_mount(nested), at("/docker/abc", "/sys/fs/cgroup"));
    }

    #[test]
    fn the_subtree_is_the_own_cgroup_or_the_one_above_a_supervisor_leaf() {
        let sub = |own: &str, root: &str| subtree_for(own, root);
        assert_eq!(
            sub("/system.slice/dw.service", "/").as_deref(),
            Some("system.slice/dw.service")
        );
        assert_eq!(
            sub("/system.slice/dw.service/supervisor", "/").as_deref(),
            Some("system.slice/dw.service")
        );
        // Only a whole `supervisor` component, never part of a name.
        assert_eq!(
            sub("/x/gpu-supervisor", "/").as_deref(),
            Some("x/gpu-supervisor")
        );
        assert_eq!(sub("/", "/").as_deref(), Some(""));
        assert_eq!(
            sub("/docker/abc/app", "/docker/abc").as_deref(),
            Some("app")
        );
        assert_eq!(sub("/docker/abcd", "/docker/abc"), None);
        assert_eq!(sub("/elsewhere", "/docker/abc"), None);
    }

    #[test]
    fn reads_the_unified_line() {
        let text = "9:name=systemd:/\n4:memory:/x\n0::/system.slice/drainwatch.service\n";
        assert_eq!(
            own_path(text).as_deref(),
            Some("/system.slice/drainwatch.service")
        );
        assert_eq!(own_path("4:memory:/x\n"), None);
    }

    #[test]
    fn settings_parse() {
        assert_eq!("auto".parse::<Setting>(), Ok(Setting::Auto));
        assert_eq!("off".parse::<Setting>(), Ok(Setting::Off));
        assert_eq!(
            "/sys/fs/cgroup/x".parse::<Setting>(),
            Ok(Setting::Path("/sys/fs/cgroup/x".into()))
        );
        assert!("relative".parse::<Setting>().is_err());
    }

    #[test]
    fn a_directory_that_is_not_a_cgroup_is_refused() {
        let dir = tempfile::tempdir().expect("temp dir");
        let err = setup(&Setting::Path(dir.path().to_owned()), 1).expect_err("not a cgroup");
        assert!(matches!(err, CgroupError::NotCgroup2(_)), "{err}");
        assert!(
            err.to_string().contains("not a cgroup v2 directory"),
            "{err}"
        );
    }
}
