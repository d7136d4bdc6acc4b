//! A process stuck in the kernel where SIGKILL cannot reach it, as one stuck
//! inside a GPU driver is (state `D`, SIGKILL pending until the kernel lets
//! go). Simulated with the cgroup v1 freezer: a frozen task sleeps
//! uninterruptibly, and a SIGKILL waits until it is thawed. Each host has
//! its own freezer cgroup, which the test thaws and removes at its end.

use std::io;
use std::path::{Path, PathBuf};

/// The cgroup v1 freezer hierarchy's mount point, from `/proc/self/mountinfo`.
fn freezer_mount() -> io::Result<PathBuf> {
    let info = std::fs::read_to_string("/proc/self/mountinfo")?;
    info.lines()
        .find_map(|l| {
            let (left, right) = l.split_once(" - ")?;
            let mut r = right.split_whitespace();
            let (fstype, _source, opts) = (r.next()?, r.next()?, r.next()?);
            let mount = left.split_whitespace().nth(4)?;
            (fstype == "cgroup" && opts.split(',').any(|o| o == "freezer"))
                .then(|| PathBuf::from(mount))
        })
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::NotFound,
                "no cgroup v1 freezer is mounted: a process stuck in the kernel cannot be simulated here",
            )
        })
}

/// The freezer cgroup of the host at `host_dir`.
fn cgroup_of(host_dir: &Path) -> io::Result<PathBuf> {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in host_dir.as_os_str().as_encoded_bytes() {
        h = (h ^ u64::from(*b)).wrapping_mul(0x100_0000_01b3);
    }
    Ok(freezer_mount()?.join(format!("simhost-stuck-{h:016x}")))
}

/// Freezes the calling process: from the write on, it sleeps in the kernel
/// (`D`) and no signal ends it until [`thaw`].
pub fn freeze_self(host_dir: &Path) -> io::Result<()> {
    let cg = cgroup_of(host_dir)?;
    std::fs::create_dir_all(&cg)?;
    std::fs::write(cg.join("cgroup.procs"), std::process::id().to_string())?;
    std::fs::write(cg.join("freezer.state"), "FROZEN")
}

/// Thaws whatever the host froze (a pending SIGKILL then ends it) and
/// removes its freezer cgroup once empty. Nothing frozen: nothing to do.
pub fn thaw(host_dir: &Path) -> io::Result<()> {
    let Ok(cg) = cgroup_of(host_dir) else {
        return Ok(());
    };
    if !cg.exists() {
        return Ok(());
    }
    std::fs::write(cg.join("freezer.state"), "THAWED")?;
    for _ in 0..100 {
        if std::fs::remove_dir(&cg).is_ok() {
            return Ok(());
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    std::fs::remove_dir(&cg)
}
