//! Helpers for drainwatch's cross-crate tests: a simulated GPU host in a temp dir,
//! the simulated model server, and `spawn_app` — the real `drainwatch` binary on
//! `127.0.0.1:0` reading that host through the fake `libnvidia-ml.so.1`.
//!
//! Everything runs as real processes with real sockets; every test gets its own
//! host directory, ports and processes, and dropping a handle kills its process
//! group. Binaries come from the workspace's `target/debug` (built by
//! `cargo xtask test`, or `cargo build --all-targets`).

pub mod browser;
pub mod cgroup;
pub mod engine;
pub mod kernels;
pub mod managed;
pub mod ports;
pub mod sigtrace;
pub mod ws;

use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use shared::Snapshot;
use simhost::{HOST_DIR_ENV, Inventory};

pub const MIB: u64 = 1 << 20;

/// Trailing arguments that make a simulated process's command line read like an
/// SGLang launch on port 30000 — the server's and the foreign decoy's alike.
const DECOY: &[&str] = &[
    "--",
    "python3",
    "-m",
    "sglang.launch_server",
    "--port",
    "30000",
];
pub const GIB: u64 = 1 << 30;

/// `target/debug`, found from the running test binary (`target/debug/deps/…`).
pub fn bin_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current exe");
    exe.parent()
        .and_then(Path::parent)
        .expect("test binaries live in target/<profile>/deps")
        .to_path_buf()
}

/// A workspace binary, or a clear failure saying how to build it.
pub fn bin(name: &str) -> PathBuf {
    let path = bin_dir().join(name);
    assert!(
        path.exists(),
        "{} is missing: run `cargo xtask test` (or `cargo build --all-targets`) first",
        path.display()
    );
    path
}

/// A simulated GPU host: a temp directory with an inventory, and the fake NVML
/// library linked as `libnvidia-ml.so.1` beside it. It also holds the test's
/// cgroup (every drainwatch for this host runs in it) and the signal trace:
/// when it is dropped at the end of a test that ran drainwatch with a server
/// config, it fails the test if any drainwatch signalled a process that was not
/// descended from one (see [`sigtrace`]), or one the test allowed.
#[derive(Debug)]
pub struct SimHost {
    dir: tempfile::TempDir,
    pub inventory: Inventory,
    cgroup: std::sync::OnceLock<Option<cgroup::TestCgroup>>,
    /// Whether drainwatch may create cgroups in the test's cgroup.
    cgroup_room: bool,
    /// The older kernel every drainwatch of this host runs as (`kernelsim`).
    kernel: Option<kernels::Kernel>,
    /// Every drainwatch of this host runs in a PID namespace of its own.
    pid_namespace: bool,
    /// Every drainwatch of this host runs as this service user (uid, gid),
    /// owning the host's cgroup as systemd's `Delegate=yes` gives it.
    user: Option<(u32, u32)>,
    /// Tells a process of the host its PID in the test's PID namespace (the
    /// host's), as a driver knows it (see `simhost::driver`).
    _driver: simhost::driver::Driver,
    trace: Result<sigtrace::SignalTrace, String>,
    /// drainwatch processes whose signals are checked.
    watched: std::sync::Mutex<std::collections::HashSet<u32>>,
    /// Processes (and what they fork) drainwatch may signal besides its own.
    allowed: std::sync::Mutex<std::collections::HashSet<u32>>,
}

impl SimHost {
    /// 8 GPUs; `release_delay_ms` is how long memory outlives its process.
    pub fn new(release_delay_ms: u64) -> Self {
        Self::with_inventory(Inventory {
            release_delay_ms,
            ..Inventory::default()
        })
    }

    pub fn with_inventory(inventory: Inventory) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::create_dir(dir.path().join("host")).expect("host dir");
        inventory.save(&dir.path().join("host")).expect("host.json");
        std::fs::create_dir(dir.path().join("lib")).expect("lib dir");
        std::os::unix::fs::symlink(
            bin("libnvidia_ml.so"),
            dir.path().join("lib/libnvidia-ml.so.1"),
        )
        .expect("link libnvidia-ml.so.1");
        let driver = simhost::driver::Driver::serve(&dir.path().join("host")).expect("driver");
        Self {
            dir,
            inventory,
            cgroup: std::sync::OnceLock::new(),
            cgroup_room: true,
            kernel: None,
            pid_namespace: false,
            user: None,
            _driver: driver,
            trace: sigtrace::SignalTrace::start().map_err(|e| format!("{e:#}")),
            watched: Default::default(),
            allowed: Default::default(),
        }
    }

    /// The same host, whose cgroup has no room for cgroups of drainwatch's own
    /// (`cgroup.max.descendants` = 0): drainwatch must fall back.
    pub fn without_cgroup_room(mut self) -> Self {
        self.cgroup_room = false;
        self
    }

    /// The same host, where every drainwatch runs as `kernel` would answer
    /// it (see [`kernels`]).
    pub fn on_kernel(mut self, kernel: kernels::Kernel) -> Self {
        self.kernel = Some(kernel);
        self
    }

    /// The same host, where every drainwatch runs in a PID namespace of its
    /// own with its own `/proc` (`unshare --pid --fork --mount-proc`), as in a
    /// container without `hostPID`: NVML's PIDs are the test's, not its own.
    pub fn in_pid_namespace(mut self) -> Self {
        self.pid_namespace = true;
        self
    }

    /// The same host, where every drainwatch runs as the unprivileged user
    /// [`SERVICE_USER`] (made if missing), which owns the host's directory and
    /// its cgroup, delegated to it as systemd's `Delegate=yes` does.
    pub fn as_service_user(mut self) -> anyhow::Result<Self> {
        let (uid, gid) = service_user()?;
        chown_tree(self.dir.path(), uid, gid)?;
        self.user = Some((uid, gid));
        Ok(self)
    }

    /// The service user's uid, if drainwatch runs as one.
    pub fn user(&self) -> Option<u32> {
        self.user.map(|(uid, _)| uid)
    }

    /// The test's cgroup, made on first use; `None` without a writable cgroup v2.
    pub fn cgroup(&self) -> Option<&cgroup::TestCgroup> {
        self.cgroup
            .get_or_init(|| {
                let cg = cgroup::TestCgroup::new(self.cgroup_room).ok()?;
                if let Some((uid, gid)) = self.user {
                    cg.delegate(uid, gid).ok()?;
                }
                Some(cg)
            })
            .as_ref()
    }

    /// The test's cgroup, or a failure saying what the test needs.
    pub fn require_cgroup(&self) -> &cgroup::TestCgroup {
        self.cgroup()
            .expect("this test needs a writable cgroup v2 hierarchy (run as root)")
    }

    /// Checks the signals of drainwatch process `pid` when the host is dropped.
    pub fn watch_signals_of(&self, pid: u32) {
        if let Err(e) = &self.trace {
            panic!("the signal trace is needed to run drainwatch with a server: {e}");
        }
        self.watched.lock().expect("lock").insert(pid);
    }

    /// drainwatch may signal `pid` and what it forks (an adopted server).
    pub fn allow_signals_to(&self, pid: u32) {
        self.allowed.lock().expect("lock").insert(pid);
    }

    /// Every signal a watched drainwatch sent so far to a process that was not
    /// its own (descended from a watched drainwatch) nor allowed.
    pub fn foreign_signals(&self) -> Vec<sigtrace::Signal> {
        let Ok(trace) = &self.trace else {
            return Vec::new();
        };
        assert!(
            !trace.overrun(),
            "the signal trace overflowed: it proves nothing"
        );
        let events = trace.events().expect("reading the signal trace");
        let watched = self.watched.lock().expect("lock").clone();
        let allowed = self.allowed.lock().expect("lock").clone();
        sigtrace::foreign_signals(&events, &watched, &allowed)
    }

    /// Every signal a watched drainwatch sent so far (for tests that check
    /// what was sent, not only where).
    pub fn signals_sent(&self) -> Vec<sigtrace::Signal> {
        let Ok(trace) = &self.trace else {
            return Vec::new();
        };
        let watched = self.watched.lock().expect("lock").clone();
        trace
            .events()
            .expect("reading the signal trace")
            .into_iter()
            .filter_map(|e| match e {
                sigtrace::Event::Signal(s) if watched.contains(&s.sender_tgid) => Some(s),
                _ => None,
            })
            .collect()
    }

    /// The host directory (what `DRAINWATCH_SIM_HOST` names).
    pub fn path(&self) -> PathBuf {
        self.dir.path().join("host")
    }

    /// `…/libnvidia-ml.so.1`, to pass as `--nvml-lib`.
    pub fn nvml_lib(&self) -> PathBuf {
        self.dir.path().join("lib/libnvidia-ml.so.1")
    }

    /// What the host charges, as a driver sees it (not through drainwatch):
    /// `(gpu, pid, bytes)` for every process with memory on a GPU, alive or
    /// exited but not yet released.
    pub fn held(&self) -> anyhow::Result<Vec<(usize, u32, u64)>> {
        let view = simhost::observe(&self.path(), simhost::now_ms())?;
        Ok(view
            .gpus
            .iter()
            .enumerate()
            .flat_map(|(i, g)| g.processes.iter().map(move |p| (i, p.pid, p.used_bytes)))
            .collect())
    }

    /// A shell's process group as a person leaves it: the simulated server
    /// started by hand on `port` (two GPUs), and a `sleep` beside it that is
    /// none of its business.
    pub fn shell_with_server(&self, port: u16) -> anyhow::Result<Proc> {
        let script = format!(
            "{} launch --port {port} --tp 2 --warmup-ms 300 -- python3 -m sglang.launch_server & sleep 600 & wait",
            bin("simserver").display(),
        );
        Proc::spawn(
            Command::new("sh")
                .args(["-c", &script])
                .env(simhost::HOST_DIR_ENV, self.path()),
        )
    }

    /// A scratch directory that lives as long as the host.
    pub fn scratch(&self) -> &Path {
        self.dir.path()
    }

    /// drainwatch with server config `cfg` against this host, run until it
    /// exits: for configs it must refuse at start (its exit and its words).
    pub fn drainwatch_refusing(&self, cfg: &Path) -> std::io::Result<std::process::Output> {
        Command::new(bin("drainwatch"))
            .arg("--config")
            .arg(cfg)
            .arg("--data-dir")
            .arg(self.scratch().join("data"))
            .arg("--nvml-lib")
            .arg(self.nvml_lib())
            .args(["--bind", "127.0.0.1:0"])
            .stdin(std::process::Stdio::null())
            .output()
    }
}

impl Drop for SimHost {
    /// The end of the test: no drainwatch may have signalled a stranger.
    fn drop(&mut self) {
        // A process the test left stuck in the kernel is let go (and ends).
        if let Err(e) = simhost::stuck::thaw(&self.path()) {
            eprintln!("cannot thaw what the test froze: {e}");
        }
        if !std::thread::panicking() && !self.watched.lock().expect("lock").is_empty() {
            let bad = self.foreign_signals();
            assert!(
                bad.is_empty(),
                "drainwatch signalled processes that were not the server's: {bad:#?}"
            );
        }
    }
}

/// The unprivileged user a service-user drainwatch runs as.
pub const SERVICE_USER: &str = "drainwatch-test";

/// [`SERVICE_USER`]'s uid and gid, the user made first if missing (a system
/// user without a home or a shell, as a package would make it).
pub fn service_user() -> anyhow::Result<(u32, u32)> {
    let lookup = || -> Option<(u32, u32)> {
        let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
        passwd.lines().find_map(|l| {
            let f: Vec<&str> = l.split(':').collect();
            (f.first() == Some(&SERVICE_USER))
                .then(|| Some((f.get(2)?.parse().ok()?, f.get(3)?.parse().ok()?)))?
        })
    };
    if let Some(ids) = lookup() {
        return Ok(ids);
    }
    let out = Command::new("useradd")
        .args([
            "--system",
            "--no-create-home",
            "--shell",
            "/usr/sbin/nologin",
        ])
        .arg(SERVICE_USER)
        .output()
        .context("useradd")?;
    // Another test process may have made it meanwhile (exit 9: exists).
    anyhow::ensure!(
        out.status.success() || out.status.code() == Some(9),
        "useradd {SERVICE_USER}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    lookup().context("the service user is not in /etc/passwd")
}

/// `chown -R uid:gid dir` (symbolic links themselves, not what they name).
fn chown_tree(dir: &Path, uid: u32, gid: u32) -> anyhow::Result<()> {
    std::os::unix::fs::lchown(dir, Some(uid), Some(gid))?;
    if std::fs::symlink_metadata(dir)?.is_dir() {
        for e in std::fs::read_dir(dir)? {
            chown_tree(&e?.path(), uid, gid)?;
        }
    }
    Ok(())
}

/// A child process in its own process group; dropping it kills the whole group.
#[derive(Debug)]
pub struct Proc {
    pub child: Child,
    /// Leave descendants' groups alone on drop (see [`Proc::kill_alone`]).
    spare_descendants: bool,
}

impl Proc {
    /// Starts `cmd` as a group leader that the kernel kills if the test process dies
    /// (a Ctrl-C'd or timed-out test run leaves nothing behind).
    #[allow(unsafe_code)]
    pub fn spawn(cmd: &mut Command) -> anyhow::Result<Self> {
        cmd.process_group(0);
        // SAFETY: prctl is async-signal-safe and touches only the child being created.
        unsafe {
            cmd.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        let child = cmd
            .spawn()
            .with_context(|| format!("spawning {:?}", cmd.get_program()))?;
        Ok(Self {
            child,
            spare_descendants: false,
        })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends `sig` to the whole group.
    #[allow(unsafe_code)]
    pub fn signal_group(&self, sig: i32) {
        // SAFETY: killpg on a group this test created.
        unsafe { libc::killpg(self.child.id() as i32, sig) };
    }

    /// SIGKILLs this process's group and waits for it, leaving alone what it
    /// started in sessions of its own (a model server outliving drainwatch).
    pub fn kill_alone(mut self) {
        self.signal_group(libc::SIGKILL);
        let _ = self.child.wait();
        self.spare_descendants = true;
    }

    /// Reads stdout lines until one starts with `prefix`; returns the rest of it.
    pub fn read_line_with(&mut self, prefix: &str) -> anyhow::Result<String> {
        let out = self.child.stdout.take().context("stdout was not piped")?;
        let mut lines = BufReader::new(out).lines();
        for line in lines.by_ref() {
            let line = line?;
            if let Some(rest) = line.strip_prefix(prefix) {
                let rest = rest.trim().to_owned();
                // Keep draining so the child never blocks on a full pipe.
                std::thread::spawn(move || lines.for_each(drop));
                return Ok(rest);
            }
        }
        bail!("process exited before printing `{prefix}`")
    }
}

impl Drop for Proc {
    /// Kills the process's group and the group of every descendant — a model
    /// server drainwatch launched runs in a session of its own.
    #[allow(unsafe_code)]
    fn drop(&mut self) {
        let descendants = if self.spare_descendants {
            Vec::new()
        } else {
            simhost::descendants(self.child.id())
        };
        for d in descendants {
            if d.pgid > 1 {
                // SAFETY: killpg on groups led by descendants of this test's child.
                unsafe { libc::killpg(d.pgid, libc::SIGKILL) };
            }
        }
        self.signal_group(libc::SIGKILL);
        let _ = self.child.wait();
    }
}

/// The simulated model server (parent + one worker per GPU).
#[derive(Debug)]
pub struct SimServer {
    pub proc: Proc,
    pub port: u16,
}

impl SimServer {
    pub fn launch(host: &SimHost, tp: u32, warmup_ms: u64) -> anyhow::Result<Self> {
        Self::launch_on(host, 0, tp, warmup_ms)
    }

    /// As [`Self::launch`], on a given port (0: any free one).
    pub fn launch_on(host: &SimHost, port: u16, tp: u32, warmup_ms: u64) -> anyhow::Result<Self> {
        let mut proc = Proc::spawn(
            Command::new(bin("simserver"))
                .args([
                    "launch",
                    "--port",
                    &port.to_string(),
                    "--tp",
                    &tp.to_string(),
                ])
                .args(["--warmup-ms", &warmup_ms.to_string()])
                .args(DECOY)
                .env(HOST_DIR_ENV, host.path())
                .stdout(Stdio::piped()),
        )?;
        let url = proc.read_line_with("simserver listening on ")?;
        let port = url
            .rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .context("port")?;
        Ok(Self { proc, port })
    }

    /// PIDs of the workers (the parent's children), in rank order.
    pub fn worker_pids(&self) -> Vec<u32> {
        let s = std::fs::read_to_string(format!("/proc/{0}/task/{0}/children", self.proc.pid()))
            .unwrap_or_default();
        s.split_whitespace()
            .filter_map(|p| p.parse().ok())
            .collect()
    }
}

/// A process holding GPU memory that no server owns, with a server-like command line.
pub fn spawn_foreign(host: &SimHost, gpu: u32, gib: f64) -> anyhow::Result<Proc> {
    Proc::spawn(
        Command::new(bin("simserver"))
            .args([
                "foreign",
                "--gpu",
                &gpu.to_string(),
                "--mem-gib",
                &gib.to_string(),
            ])
            .args(DECOY)
            .env(HOST_DIR_ENV, host.path()),
    )
}

/// A running `drainwatch`.
/// An HTTP client whose every request carries `Authorization: Bearer <token>`.
pub fn bearer_client(token: &str) -> reqwest::Client {
    let mut headers = reqwest::header::HeaderMap::new();
    let mut v = reqwest::header::HeaderValue::from_str(&format!("Bearer {token}"))
        .expect("a token is a valid header value");
    v.set_sensitive(true);
    headers.insert(reqwest::header::AUTHORIZATION, v);
    reqwest::Client::builder()
        .default_headers(headers)
        .build()
        .expect("an HTTP client")
}

/// SHA-256 of `secret` in hex, as the auth file holds a token (computed
/// here, not by drainwatch, so the tests check its hashing).
pub fn sha256_hex(secret: &str) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(secret.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// An auth file with one operator and one viewer token; returns its path and
/// the two secrets.
pub fn auth_file(dir: &std::path::Path, extra: &str) -> (std::path::PathBuf, String, String) {
    let secret = |n: &str| format!("dw_test_{n}_{}", std::process::id());
    let (op, view) = (secret("operator"), secret("viewer"));
    let hash = sha256_hex;
    let text = format!(
        "{extra}\n[[token]]\nname = \"olga\"\nrole = \"operator\"\nsha256 = \"{}\"\n\n[[token]]\nname = \"victor\"\nrole = \"viewer\"\nsha256 = \"{}\"\n",
        hash(&op),
        hash(&view)
    );
    let path = dir.join("auth.toml");
    std::fs::write(&path, text).expect("write the auth file");
    (path, op, view)
}

#[derive(Debug)]
pub struct TestApp {
    pub proc: Proc,
    pub addr: String,
    pub http: reqwest::Client,
    /// drainwatch itself where `proc` is a wrapper that forked it (`unshare`).
    inner: Option<u32>,
}

/// Starts `drainwatch hub --config <config>` on `127.0.0.1:0`: the process
/// and its URL (`http://127.0.0.1:<port>`).
pub fn spawn_hub(config: &Path) -> anyhow::Result<(Proc, String)> {
    spawn_hub_with(config, &[])
}

/// As [`spawn_hub`], with more arguments (`--auth FILE`, say). Its records
/// go beside the config (`hub-data/`). `TEST_LOG=1` shows its log.
pub fn spawn_hub_with(config: &Path, extra: &[&str]) -> anyhow::Result<(Proc, String)> {
    let data = config
        .parent()
        .unwrap_or_else(|| Path::new("."))
        .join("hub-data");
    let mut proc = Proc::spawn(
        Command::new(bin("drainwatch"))
            .args(["hub", "--bind", "127.0.0.1:0", "--config"])
            .arg(config)
            .arg("--data-dir")
            .arg(data)
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(if std::env::var_os("TEST_LOG").is_some() {
                Stdio::inherit()
            } else {
                Stdio::null()
            }),
    )?;
    let url = proc.read_line_with("drainwatch hub listening on ")?;
    Ok((proc, url.trim().to_owned()))
}

/// Starts `drainwatch --bind 127.0.0.1:0 --nvml-lib <host's lib> <extra>` (an
/// explicit `--bind` or `--nvml-lib` in `extra` replaces the default) with the
/// host's directory in its environment. `TEST_LOG=1` shows its log.
pub fn spawn_app(host: &SimHost, extra: &[&str]) -> anyhow::Result<TestApp> {
    spawn_app_with(host, extra, |_| {})
}

/// As [`spawn_app`], with a hook to adjust the command (environment, say).
pub fn spawn_app_with(
    host: &SimHost,
    extra: &[&str],
    adjust: impl FnOnce(&mut Command),
) -> anyhow::Result<TestApp> {
    let mut cmd = match (host.kernel, host.pid_namespace) {
        (Some(k), false) => {
            let mut c = Command::new(bin("kernelsim"));
            c.args(k.args()).arg("--").arg(bin("drainwatch"));
            c
        }
        (None, true) => {
            let mut c = Command::new("unshare");
            c.args(["--pid", "--fork", "--mount-proc", "--kill-child", "--"])
                .arg(bin("drainwatch"));
            c
        }
        (None, false) => Command::new(bin("drainwatch")),
        (Some(_), true) => anyhow::bail!("an older kernel and a PID namespace, both: not emulated"),
    };
    if !extra.contains(&"--bind") {
        cmd.args(["--bind", "127.0.0.1:0"]);
    }
    if !extra.contains(&"--nvml-lib") {
        cmd.arg("--nvml-lib").arg(host.nvml_lib());
    }
    cmd.args(extra)
        .env(HOST_DIR_ENV, host.path())
        .stdout(Stdio::piped())
        .stderr(if std::env::var_os("TEST_LOG").is_some() {
            Stdio::inherit()
        } else {
            Stdio::null()
        });
    adjust(&mut cmd);
    if let Some(cg) = host.cgroup() {
        cg.place(&mut cmd)?;
    }
    if let Some((uid, gid)) = host.user {
        use std::os::unix::process::CommandExt;
        // As root, std drops the supplementary groups too.
        cmd.uid(uid).gid(gid);
    }
    let mut proc = Proc::spawn(&mut cmd)?;
    let url = proc.read_line_with("drainwatch listening on ")?;
    let addr = url.trim_start_matches("http://").to_owned();
    // unshare forks drainwatch: its only child, by the time drainwatch talks.
    let inner = if host.pid_namespace {
        let pid = proc.pid();
        let kids = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))?;
        let first = kids.split_whitespace().next().and_then(|p| p.parse().ok());
        Some(first.context("unshare has no child")?)
    } else {
        None
    };
    Ok(TestApp {
        proc,
        addr,
        http: reqwest::Client::new(),
        inner,
    })
}

impl TestApp {
    /// drainwatch's PID (in the test's PID namespace): `proc`'s, or that of
    /// the drainwatch a wrapper forked.
    pub fn drainwatch_pid(&self) -> u32 {
        self.inner.unwrap_or_else(|| self.proc.pid())
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// From now on, this app's requests carry `Authorization: Bearer <token>`.
    pub fn with_token(mut self, token: &str) -> Self {
        self.http = bearer_client(token);
        self
    }

    pub async fn state(&self) -> anyhow::Result<Snapshot> {
        let resp = self.http.get(self.url("/api/state")).send().await?;
        anyhow::ensure!(
            resp.status().is_success(),
            "GET /api/state: {}",
            resp.status()
        );
        Ok(resp.json().await?)
    }

    /// Polls `/api/state` until `pred` holds; returns the state that satisfied it.
    pub async fn wait_for_state(
        &self,
        what: &str,
        timeout: Duration,
        pred: impl Fn(&Snapshot) -> bool,
    ) -> anyhow::Result<Snapshot> {
        let deadline = Instant::now() + timeout;
        loop {
            let s = self.state().await?;
            if s.latest.is_some() && pred(&s) {
                return Ok(s);
            }
            if Instant::now() > deadline {
                bail!(
                    "timed out after {timeout:?} waiting for {what}; last state: {:#?}",
                    s.latest
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// Whether a benchmark binary should run its part `name`: with no filter on
/// the command line (`cargo bench -- team`), every part runs.
pub fn bench_wanted(name: &str) -> bool {
    let filter: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    filter.is_empty() || filter.iter().any(|f| name.contains(f.as_str()))
}

/// Sends `sig` to one process (a child the test started).
#[allow(unsafe_code)]
pub fn signal(pid: u32, sig: i32) {
    // SAFETY: kill(2) has no memory effects; the pid is the caller's child.
    unsafe { libc::kill(pid as i32, sig) };
}

/// True while `pid` is alive and not a zombie.
pub fn alive(pid: u32) -> bool {
    simhost::read_proc_stat(pid)
        .ok()
        .flatten()
        .is_some_and(|s| !s.has_exited())
}

impl SimHost {
    /// Switches NVML faults on for GPU `gpu`, replacing the ones it had: from the
    /// fake library's next read of the host on, the chosen queries for that GPU
    /// fail with the chosen errors. `host.json` is rewritten atomically, so a
    /// running drainwatch sees the change on its next sample.
    pub fn set_faults(&mut self, gpu: u32, faults: simhost::GpuFaults) -> anyhow::Result<()> {
        simhost::set_faults(&self.path(), gpu, faults)
            .with_context(|| format!("switching faults on GPU {gpu}"))?;
        if let Some(spec) = self.inventory.gpus.get_mut(gpu as usize) {
            spec.faults = faults;
        }
        Ok(())
    }

    /// Puts GPU `gpu` in MIG mode with two instances: `1g.24gb` with 3 GiB in
    /// use and an idle `3g.72gb`.
    pub fn two_mig_instances(&self, gpu: u32) -> anyhow::Result<()> {
        let mig = |profile: &str, gib: u64, used: u64| simhost::MigInstance {
            profile: profile.into(),
            memory_bytes: gib * GIB,
            used_bytes: used * GIB,
        };
        simhost::set_health(&self.path(), gpu, |h| {
            h.mig = Some(vec![mig("1g.24gb", 24, 3), mig("3g.72gb", 72, 0)]);
        })
        .with_context(|| format!("MIG on GPU {gpu}"))
    }

    /// Switches every fault off on every GPU (atomically, as [`Self::set_faults`]).
    pub fn clear_faults(&mut self) -> anyhow::Result<()> {
        simhost::clear_faults(&self.path()).context("switching faults off")?;
        for spec in &mut self.inventory.gpus {
            spec.faults = simhost::GpuFaults::default();
        }
        Ok(())
    }
}
