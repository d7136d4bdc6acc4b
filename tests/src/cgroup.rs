//! A cgroup v2 directory per simulated host, as systemd gives a service with
//! `Delegate=yes`: every drainwatch a test starts for that host runs in it, so it
//! finds its own subtree in `/proc/self/cgroup` exactly as in production, and
//! two tests never share one. Dropping it kills whatever is left inside.

use std::io::Write;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;

static SEQ: AtomicU32 = AtomicU32::new(0);

pub use drainwatch::supervisor::cgroup::mount;

/// One test's cgroup.
#[derive(Debug)]
pub struct TestCgroup {
    pub dir: PathBuf,
    mount: PathBuf,
}

impl TestCgroup {
    /// A fresh cgroup under `<mount>/drainwatch-tests/`. With `room == false` it
    /// may hold no cgroups of its own (`cgroup.max.descendants` = 0): a subtree
    /// drainwatch cannot create its leaves in.
    pub fn new(room: bool) -> anyhow::Result<Self> {
        let mount = mount().context("no cgroup v2 hierarchy is mounted")?;
        let parent = mount.join("drainwatch-tests");
        std::fs::create_dir_all(&parent)
            .with_context(|| format!("creating {}", parent.display()))?;
        // What test runs killed before they cleaned up left behind.
        for e in std::fs::read_dir(&parent)?.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if crate::sigtrace::owner_of(&name)
                .is_some_and(|pid| !Path::new(&format!("/proc/{pid}")).exists())
            {
                drop(Self {
                    dir: e.path(),
                    mount: mount.clone(),
                });
            }
        }
        let dir = parent.join(format!(
            "{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir(&dir).with_context(|| format!("creating {}", dir.display()))?;
        if !room {
            std::fs::write(dir.join("cgroup.max.descendants"), "0")?;
        }
        Ok(Self { dir, mount })
    }

    /// Hands this cgroup to `uid`, as systemd's `Delegate=yes` does: the
    /// directory and the files that let its owner make cgroups, move
    /// processes and enable controllers below it.
    pub fn delegate(&self, uid: u32, gid: u32) -> anyhow::Result<()> {
        std::os::unix::fs::chown(&self.dir, Some(uid), Some(gid))?;
        for f in ["cgroup.procs", "cgroup.threads", "cgroup.subtree_control"] {
            std::os::unix::fs::chown(self.dir.join(f), Some(uid), Some(gid))?;
        }
        Ok(())
    }

    /// The path as the kernel names it (`/drainwatch-tests/…`).
    pub fn name(&self) -> String {
        format!(
            "/{}",
            self.dir
                .strip_prefix(&self.mount)
                .unwrap_or(&self.dir)
                .display()
        )
    }

    /// The directory of `path` as `/proc/<pid>/cgroup` or drainwatch names it.
    pub fn dir_of(&self, name: &str) -> PathBuf {
        self.mount.join(name.trim_start_matches('/'))
    }

    /// Makes `cmd`'s process start inside this cgroup (it joins before it execs).
    #[allow(unsafe_code)]
    pub fn place(&self, cmd: &mut Command) -> anyhow::Result<()> {
        let fd: OwnedFd = std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_CLOEXEC)
            .open(self.dir.join("cgroup.procs"))?
            .into();
        let raw = fd.as_raw_fd();
        // The descriptor must stay open until the spawn: it is leaked into the
        // closure's lifetime by keeping `fd` alive in it.
        let keep = std::sync::Arc::new(fd);
        // SAFETY: write(2) is async-signal-safe; no allocation in the child.
        unsafe {
            cmd.pre_exec(move || {
                let _ = &keep;
                if libc::write(raw, b"0".as_ptr().cast(), 1) != 1 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        Ok(())
    }

    /// Every process in this cgroup and below.
    pub fn procs(&self) -> Vec<u32> {
        let mut out = Vec::new();
        for dir in subtree(&self.dir) {
            if let Ok(s) = std::fs::read_to_string(dir.join("cgroup.procs")) {
                out.extend(s.split_whitespace().filter_map(|p| p.parse::<u32>().ok()));
            }
        }
        out
    }
}

/// `dir` and every cgroup below it, deepest first.
fn subtree(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                out.extend(subtree(&e.path()));
            }
        }
    }
    out.push(dir.to_owned());
    out
}

impl Drop for TestCgroup {
    fn drop(&mut self) {
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .write(true)
            .open(self.dir.join("cgroup.kill"))
        {
            let _ = f.write_all(b"1");
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        for dir in subtree(&self.dir) {
            while std::fs::remove_dir(&dir).is_err() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }
}
