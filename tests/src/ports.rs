//! Ports for the servers the tests launch, reserved for the whole test process.
//!
//! A port learnt by binding port 0 and letting go is free only at that
//! instant: the kernel hands it to the next `bind(0)` anywhere (another
//! test's drainwatch, hub or server; 5,000 such binds here drew only ~4,200
//! distinct ports). A test server's port is unbound before its first launch
//! and between a restart's drain and its relaunch, and a launch onto a port
//! taken meanwhile fails with "address in use". So a test's server port is
//! taken from *outside* the
//! kernel's ephemeral range, where nothing is handed out automatically, and is
//! claimed with a lock file that every test process honours; the lock is held
//! until the process ends.

use std::fs::{File, OpenOptions};
use std::net::TcpListener;
use std::path::PathBuf;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};

/// Claims held by this process (released when it exits).
static HELD: Mutex<Vec<File>> = Mutex::new(Vec::new());
/// Where the next search starts (spreads this process's claims).
static NEXT: AtomicU32 = AtomicU32::new(0);

/// The kernel's ephemeral port range (`net.ipv4.ip_local_port_range`).
fn ephemeral() -> (u16, u16) {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| {
            let mut it = s.split_whitespace().map(str::parse::<u16>);
            Some((it.next()?.ok()?, it.next()?.ok()?))
        })
        // The kernel's default.
        .unwrap_or((32768, 60999))
}

/// The ports below and above the ephemeral range, the larger of the two
/// spans (never the privileged ports).
fn span() -> (u16, u16) {
    let (lo, hi) = ephemeral();
    let below = (1024_u16, lo.saturating_sub(1));
    let above = (hi.saturating_add(1), u16::MAX);
    let len = |(a, b): (u16, u16)| u32::from(b).saturating_sub(u32::from(a));
    if len(below) >= len(above) {
        below
    } else {
        above
    }
}

fn lock_dir() -> PathBuf {
    std::env::temp_dir().join("drainwatch-test-ports")
}

/// A loopback port that no other test process, no other claim of this one,
/// and no automatic port assignment will hand out while this process lives.
/// Nothing listens on it when it is returned.
pub fn claim() -> anyhow::Result<u16> {
    let (a, b) = span();
    anyhow::ensure!(
        b > a,
        "no ports outside the ephemeral range {:?} to claim",
        ephemeral()
    );
    let dir = lock_dir();
    std::fs::create_dir_all(&dir)?;
    let n = u32::from(b - a) + 1;
    // Processes start their search at different places, so they rarely meet.
    let start = std::process::id().wrapping_mul(7919) + NEXT.fetch_add(1, Ordering::Relaxed) * 97;
    for i in 0..n {
        let port = a + ((start + i) % n) as u16;
        let path = dir.join(port.to_string());
        let file = match OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .or_else(|_| File::open(&path))
        {
            Ok(f) => f,
            Err(_) => continue,
        };
        // Held by another process, or by an earlier claim of this one (each
        // open file is its own lock holder).
        if file.try_lock().is_err() {
            continue;
        }
        // Something outside the tests uses it.
        if TcpListener::bind(("127.0.0.1", port)).is_err() {
            continue;
        }
        HELD.lock().unwrap_or_else(|e| e.into_inner()).push(file);
        return Ok(port);
    }
    anyhow::bail!("every port in {a}..={b} is claimed or in use")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claims_are_distinct_and_outside_the_ephemeral_range() {
        let (lo, hi) = ephemeral();
        let ports: Vec<u16> = (0..50).map(|_| claim().expect("a port")).collect();
        let mut unique = ports.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), ports.len(), "a port claimed twice: {ports:?}");
        assert!(
            ports.iter().all(|p| !(lo..=hi).contains(p) && *p >= 1024),
            "{ports:?} within the ephemeral range {lo}..={hi}"
        );
    }
}
