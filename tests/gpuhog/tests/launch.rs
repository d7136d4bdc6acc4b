//! gpuhog as drainwatch meets it: without a CUDA driver it fails at once,
//! saying so; on a simulated host it serves, holds memory per GPU, leaves its
//! orphan when asked, and stops on SIGTERM.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const GPUHOG: &str = env!("CARGO_BIN_EXE_gpuhog");
const MIB: u64 = 1 << 20;

#[test]
fn without_libcuda_it_says_so_and_exits() {
    let run = Command::new(GPUHOG)
        .args([
            "launch",
            "--gpus",
            "0,1",
            "--bytes-per-gpu",
            "1048576",
            "--port",
            "0",
        ])
        .env("GPUHOG_LIBCUDA", "/nonexistent/libcuda.so.1")
        .env_remove(simhost::HOST_DIR_ENV)
        .output()
        .expect("run gpuhog");
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.starts_with("gpuhog: error: cannot load /nonexistent/libcuda.so.1: "),
        "{stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(run.stdout.is_empty(), "it must not have started serving");
}

/// `GET path` on loopback: the status code.
fn get(port: u16, path: &str) -> u16 {
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else {
        return 0;
    };
    let _ = write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    );
    let mut answer = String::new();
    let _ = s.read_to_string(&mut answer);
    answer
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}

/// What each live process holds on the simulated host: `(gpu, pid, bytes)`.
fn held(dir: &std::path::Path) -> Vec<(usize, u32, u64)> {
    let view = simhost::observe(dir, simhost::now_ms()).expect("observe");
    view.gpus
        .iter()
        .enumerate()
        .flat_map(|(i, g)| g.processes.iter().map(move |p| (i, p.pid, p.used_bytes)))
        .collect()
}

#[allow(unsafe_code)]
fn signal(pid: u32, sig: i32) {
    // SAFETY: kill(2) on a process this test started (or its own leftover).
    unsafe { libc::kill(pid as i32, sig) };
}

/// Kills, when the test ends however it ends, every process the test's
/// gpuhog left: its descendants (the orphan is re-parented to this test, a
/// subreaper), each by PID and only while it still has the start time seen.
struct Leftovers;

impl Drop for Leftovers {
    #[allow(unsafe_code)]
    fn drop(&mut self) {
        for p in simhost::descendants(std::process::id()) {
            let same = simhost::read_proc_stat(p.pid)
                .ok()
                .flatten()
                .is_some_and(|now| now.start_ticks == p.start_ticks);
            if same {
                signal(p.pid, libc::SIGKILL);
            }
            // SAFETY: reaping this test's own exited children.
            unsafe { libc::waitpid(p.pid as i32, std::ptr::null_mut(), 0) };
        }
    }
}

#[test]
#[allow(unsafe_code)]
fn on_a_simulated_host_it_holds_serves_orphans_and_stops() {
    // The orphan outlives its worker: it is re-parented to this test.
    // SAFETY: prctl with integer arguments only.
    assert_eq!(
        unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) },
        0
    );
    let _leftovers = Leftovers;
    let host = tempfile::tempdir().expect("temp dir");
    simhost::Inventory {
        release_delay_ms: 0,
        ..simhost::Inventory::with_gpus(2)
    }
    .save(host.path())
    .expect("host.json");
    let mut hog = Command::new(GPUHOG)
        .args([
            "launch",
            "--gpus",
            "0,1",
            "--bytes-per-gpu",
            &(64 * MIB).to_string(),
        ])
        .args(["--port", "0", "--warmup-ms", "200", "--sim"])
        .arg(host.path())
        .env("GPUHOG_MODE", "orphan")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn gpuhog");
    let mut line = String::new();
    BufReader::new(hog.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("its address");
    let port: u16 = line
        .trim()
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .expect("a port");

    let deadline = Instant::now() + Duration::from_secs(20);
    while get(port, "/health") != 200 {
        assert!(Instant::now() < deadline, "never healthy");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(get(port, "/v1/models"), 200);
    assert_eq!(get(port, "/metrics"), 200);
    // Ready means every worker holds its memory, and rank 0's orphan half of it.
    let mut now = held(host.path());
    now.sort_unstable();
    let sizes: Vec<(usize, u64)> = now.iter().map(|h| (h.0, h.2)).collect();
    assert_eq!(sizes.len(), 3, "{now:?}");
    assert!(
        sizes.contains(&(0, 64 * MIB)) && sizes.contains(&(1, 64 * MIB)),
        "{now:?}"
    );
    assert!(sizes.contains(&(0, 32 * MIB)), "{now:?}");
    let roster = simhost::roster(host.path());
    let orphan = roster
        .iter()
        .find(|e| e.role == "orphan")
        .expect("an orphan");
    let launcher = roster
        .iter()
        .find(|e| e.role == "launcher")
        .expect("the launcher");
    assert_eq!(launcher.pid, hog.id());
    let sid = |pid: u32| -> String {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| {
                s.rsplit(')')
                    .next()?
                    .split_whitespace()
                    .nth(3)
                    .map(str::to_owned)
            })
            .unwrap_or_default()
    };
    assert_ne!(
        sid(orphan.pid),
        sid(hog.id()),
        "the orphan left the session"
    );

    signal(hog.id(), libc::SIGTERM);
    let status = hog.wait().expect("wait");
    assert_eq!(status.code(), Some(0));
    let alive = |pid: u32, start: u64| {
        simhost::read_proc_stat(pid)
            .ok()
            .flatten()
            .is_some_and(|s| s.start_ticks == start && !s.has_exited())
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while roster
        .iter()
        .any(|e| e.role == "worker" && alive(e.pid, e.start_ticks))
    {
        assert!(Instant::now() < deadline, "workers outlived the launcher");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        alive(orphan.pid, orphan.start_ticks),
        "the orphan must survive"
    );
    signal(orphan.pid, libc::SIGKILL);
    let deadline = Instant::now() + Duration::from_secs(10);
    while alive(orphan.pid, orphan.start_ticks) {
        assert!(Instant::now() < deadline, "the orphan survived SIGKILL");
        std::thread::sleep(Duration::from_millis(20));
    }
}
