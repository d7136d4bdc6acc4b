//! gpuhog as drainwatch meets it: without a CUDA driver it fails at once,
//! saying so; on a simulated host it serves, holds memory per GPU, leaves its
//! orphan when asked, and stops on SIGTERM.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const GPUHOG: &str = env!("CARGO_BIN_EXE_gpuhog");
const MIB: u64 = 1 << 20;

/// The simulated-host tests clean up every descendant of this process when
/// they end: one at a time.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

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

/// A simulated host of two GPUs that release memory at once.
fn sim_host() -> tempfile::TempDir {
    let host = tempfile::tempdir().expect("temp dir");
    simhost::Inventory {
        release_delay_ms: 0,
        ..simhost::Inventory::with_gpus(2)
    }
    .save(host.path())
    .expect("host.json");
    host
}

/// gpuhog on both GPUs of `host` (64 MiB each) in `mode`, once healthy: the
/// launcher and its port.
fn launch(host: &std::path::Path, mode: &str) -> (std::process::Child, u16) {
    let mut hog = Command::new(GPUHOG)
        .args([
            "launch",
            "--gpus",
            "0,1",
            "--bytes-per-gpu",
            &(64 * MIB).to_string(),
        ])
        .args(["--port", "0", "--warmup-ms", "200", "--sim"])
        .arg(host)
        .env("GPUHOG_MODE", mode)
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
    (hog, port)
}

/// Field `n` (0-based, after the command name) of `/proc/<pid>/stat`.
fn stat_field(pid: u32, n: usize) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit(')')
                .next()?
                .split_whitespace()
                .nth(n)
                .map(str::to_owned)
        })
        .unwrap_or_default()
}

fn alive(pid: u32, start: u64) -> bool {
    simhost::read_proc_stat(pid)
        .ok()
        .flatten()
        .is_some_and(|s| s.start_ticks == start && !s.has_exited())
}

#[test]
#[allow(unsafe_code)]
fn an_escapee_leaves_the_tree_and_outlives_the_server() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    // SAFETY: prctl with integer arguments only.
    assert_eq!(
        unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) },
        0
    );
    let _leftovers = Leftovers;
    let host = sim_host();
    let (mut hog, _port) = launch(host.path(), "escape=200");
    // 200 ms after rank 0 is ready, a process holding half its memory, in a
    // session of its own, whose parent is gone: nobody's descendant.
    let deadline = Instant::now() + Duration::from_secs(10);
    let escapee = loop {
        if let Some(e) = simhost::roster(host.path())
            .into_iter()
            .find(|e| e.role == "escapee" && alive(e.pid, e.start_ticks))
            && held(host.path()).contains(&(0, e.pid, 32 * MIB))
        {
            break e;
        }
        assert!(Instant::now() < deadline, "no escapee");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_ne!(
        stat_field(escapee.pid, 3),
        stat_field(hog.id(), 3),
        "its own session"
    );
    // Its parent (field 1) is this test, the subreaper it fell to: no gpuhog.
    assert_eq!(stat_field(escapee.pid, 1), std::process::id().to_string());

    signal(hog.id(), libc::SIGTERM);
    assert_eq!(hog.wait().expect("wait").code(), Some(0));
    assert!(
        alive(escapee.pid, escapee.start_ticks),
        "the escapee outlives it"
    );
    assert!(held(host.path()).iter().any(|h| h.1 == escapee.pid));
}

#[test]
#[allow(unsafe_code)]
fn on_a_simulated_host_it_holds_serves_orphans_and_stops() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    // The orphan outlives its worker: it is re-parented to this test.
    // SAFETY: prctl with integer arguments only.
    assert_eq!(
        unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) },
        0
    );
    let _leftovers = Leftovers;
    let host = sim_host();
    let (mut hog, port) = launch(host.path(), "orphan");
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
    let sid = |pid: u32| stat_field(pid, 3);
    assert_ne!(
        sid(orphan.pid),
        sid(hog.id()),
        "the orphan left the session"
    );

    signal(hog.id(), libc::SIGTERM);
    let status = hog.wait().expect("wait");
    assert_eq!(status.code(), Some(0));
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
