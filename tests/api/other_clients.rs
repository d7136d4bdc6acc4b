//! The fake NVML is faithful beyond nvml-wrapper: NVIDIA's own Python binding
//! (pynvml, what SGLang and vLLM use) and the monitors operators run beside
//! drainwatch (nvitop, gpustat) load it by name through the dynamic loader,
//! read it without a word on stderr, and show the same memory and processes
//! as drainwatch's `/api/state`.

mod nvitop;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use shared::{Sample, Snapshot};
use tests::{GIB, Proc, SimHost, SimServer, TestApp, bin_dir, spawn_app, spawn_foreign};

const MIB: u64 = 1 << 20;

/// A folder `cargo xtask test` fills with `pip install --target`: named by
/// `var`, else `target/<name>`.
fn python_dir(var: &str, name: &str, marker: &str) -> anyhow::Result<PathBuf> {
    let dir = std::env::var_os(var).map_or_else(|| bin_dir().join("..").join(name), Into::into);
    anyhow::ensure!(
        dir.join(marker).exists(),
        "{marker} missing in {}: `cargo xtask test` installs it there",
        dir.display()
    );
    Ok(dir)
}

/// pynvml's install folder (nvidia-ml-py).
fn pynvml_dir() -> anyhow::Result<PathBuf> {
    python_dir("DRAINWATCH_PYNVML", "pynvml", "pynvml.py")
}

/// nvitop's and gpustat's (with their pynvml, the same version as above).
fn pytools_dir() -> anyhow::Result<PathBuf> {
    python_dir("DRAINWATCH_PYTOOLS", "pytools", "nvitop/__main__.py")
}

/// A busy host at rest: a TP-8 server on every GPU and a foreign process on
/// GPU 5, with drainwatch watching it. Fields drop in order: drainwatch, the
/// processes, then the host.
struct Busy {
    app: TestApp,
    _foreign: Proc,
    _server: SimServer,
    host: SimHost,
}

impl Busy {
    fn start() -> anyhow::Result<Self> {
        let host = SimHost::new(1_000);
        let server = SimServer::launch(&host, 8, 300)?;
        let foreign = spawn_foreign(&host, 5, 2.0)?;
        let app = spawn_app(&host, &["--server-port", &server.port.to_string()])?;
        Ok(Self {
            app,
            _foreign: foreign,
            _server: server,
            host,
        })
    }

    /// Once warm, memory and processes hold still: every reader must agree.
    async fn warm(&self) -> anyhow::Result<Sample> {
        let state: Snapshot = self
            .app
            .wait_for_state("warm", Duration::from_secs(15), |s| {
                s.latest.as_ref().is_some_and(|l| {
                    l.gpus.iter().all(|g| g.mem_used_bytes >= Some(88 * GIB))
                        && l.processes.iter().filter(|p| !p.gpu_mem.is_empty()).count() == 9
                })
            })
            .await?;
        state.latest.ok_or_else(|| anyhow::anyhow!("no sample"))
    }

    /// Runs `python3 <args>` with `pythonpath`, the fake found by the dynamic
    /// loader as a real driver's library is, and a wide terminal.
    fn python(&self, pythonpath: &Path, args: &[&str]) -> anyhow::Result<Output> {
        let lib_dir = self
            .host
            .nvml_lib()
            .parent()
            .expect("lib dir")
            .to_path_buf();
        Ok(Command::new("python3")
            .args(args)
            .env("PYTHONPATH", pythonpath)
            .env("LD_LIBRARY_PATH", &lib_dir)
            .env(simhost::HOST_DIR_ENV, self.host.path())
            .env("PYTHONIOENCODING", "utf-8")
            .env("TERM", "xterm-256color")
            .env("COLUMNS", "200")
            .env("LINES", "100")
            .output()?)
    }
}

/// The tool's stdout, once it exited 0 with nothing on stderr: a function the
/// fake lacks, or an error it returns that the tool does not expect, shows
/// there (nvitop logs each `FunctionNotFound` with a traceback).
fn quiet_stdout(what: &str, out: &Output) -> anyhow::Result<String> {
    let stderr = String::from_utf8_lossy(&out.stderr);
    anyhow::ensure!(out.status.success(), "{what} failed: {stderr}");
    anyhow::ensure!(
        stderr.trim().is_empty(),
        "{what} wrote to stderr:\n{stderr}"
    );
    Ok(String::from_utf8(out.stdout.clone())?)
}

/// What drainwatch shows on GPU `index`: (PID, bytes), by PID.
fn ours(latest: &Sample, index: u32) -> Vec<(u32, u64)> {
    let mut procs: Vec<(u32, u64)> = latest
        .processes
        .iter()
        .flat_map(|p| {
            p.gpu_mem
                .iter()
                .filter(|g| g.gpu_index == index)
                .map(move |g| (p.pid, g.used_bytes.unwrap_or(0)))
        })
        .collect();
    procs.sort_unstable();
    procs
}

/// Whether `mib` is `bytes` in whole MiB (floored or rounded, as each tool does).
fn same_mib(mib: u64, bytes: u64) -> bool {
    (mib * MIB).abs_diff(bytes) < MIB
}

const PYNVML: &str = r#"
import json, pynvml as n
n.nvmlInit()
out = {"driver": n.nvmlSystemGetDriverVersion(), "gpus": []}
for i in range(n.nvmlDeviceGetCount()):
    h = n.nvmlDeviceGetHandleByIndex(i)
    m1 = n.nvmlDeviceGetMemoryInfo(h)
    m2 = n.nvmlDeviceGetMemoryInfo(h, version=n.nvmlMemory_v2)
    procs = n.nvmlDeviceGetComputeRunningProcesses(h)
    out["gpus"].append({
        "name": n.nvmlDeviceGetName(h), "uuid": n.nvmlDeviceGetUUID(h),
        "total": m1.total, "used": m1.used, "used_v2": m2.used,
        "limit": n.nvmlDeviceGetEnforcedPowerLimit(h),
        "procs": sorted([p.pid, p.usedGpuMemory] for p in procs),
    })
n.nvmlShutdown()
print(json.dumps(out))
"#;

#[tokio::test]
async fn pynvml_reads_the_same_numbers_as_drainwatch() -> anyhow::Result<()> {
    let pylib = pynvml_dir()?;
    let busy = Busy::start()?;
    let latest = busy.warm().await?;

    let out = busy.python(&pylib, &["-c", PYNVML])?;
    let py: serde_json::Value = serde_json::from_str(&quiet_stdout("pynvml", &out)?)?;

    assert_eq!(py["driver"], "575.57.08");
    let gpus = py["gpus"].as_array().expect("gpus");
    assert_eq!(gpus.len(), latest.gpus.len());
    for (p, d) in gpus.iter().zip(&latest.gpus) {
        assert_eq!(p["name"].as_str(), d.name.as_deref());
        assert_eq!(p["uuid"].as_str(), d.uuid.as_deref());
        assert_eq!(p["total"].as_u64(), d.mem_total_bytes);
        let (i, used) = (d.index, d.mem_used_bytes);
        assert_eq!(p["used"].as_u64(), used, "GPU {i} (v1 struct)");
        assert_eq!(p["used_v2"].as_u64(), used, "GPU {i} (v2 struct)");
        assert_eq!(p["limit"].as_u64(), d.power_limit_mw.map(u64::from));
        let theirs: Vec<(u32, u64)> = p["procs"]
            .as_array()
            .expect("procs")
            .iter()
            .map(|e| (pid(&e[0]), e[1].as_u64().unwrap_or(0)))
            .collect();
        assert_eq!(theirs, ours(&latest, i), "GPU {i} processes");
    }
    Ok(())
}

fn pid(v: &serde_json::Value) -> u32 {
    v.as_u64().and_then(|p| u32::try_from(p).ok()).unwrap_or(0)
}

// ---------------------------------------------------------------- gpustat

#[tokio::test]
async fn gpustat_reads_the_fake_quietly_and_agrees_with_drainwatch() -> anyhow::Result<()> {
    let pytools = pytools_dir()?;
    let busy = Busy::start()?;
    let latest = busy.warm().await?;

    let out = busy.python(&pytools, &["-m", "gpustat", "--json"])?;
    let json: serde_json::Value = serde_json::from_str(&quiet_stdout("gpustat --json", &out)?)?;
    assert_eq!(json["driver_version"], "575.57.08");
    let gpus = json["gpus"].as_array().expect("gpus");
    assert_eq!(gpus.len(), latest.gpus.len());
    for (g, d) in gpus.iter().zip(&latest.gpus) {
        let i = d.index;
        assert_eq!(g["index"].as_u64(), Some(u64::from(i)));
        assert_eq!(g["uuid"].as_str(), d.uuid.as_deref(), "GPU {i}");
        // Every field but the fan, which a passively cooled board lacks.
        for (field, value) in g.as_object().expect("a GPU") {
            assert!(
                !value.is_null() || field == "fan.speed",
                "GPU {i}: gpustat has no {field}"
            );
        }
        let mib = |field: &str| g[field].as_u64().expect(field);
        let (used, total) = (
            d.mem_used_bytes.expect("used"),
            d.mem_total_bytes.expect("total"),
        );
        assert!(
            same_mib(mib("memory.used"), used),
            "GPU {i}: {g} vs {used} B used"
        );
        assert!(
            same_mib(mib("memory.total"), total),
            "GPU {i}: {g} vs {total} B"
        );
        let theirs: Vec<(u32, u64)> = g["processes"]
            .as_array()
            .expect("processes")
            .iter()
            .map(|p| (pid(&p["pid"]), p["gpu_memory_usage"].as_u64().expect("MiB")))
            .collect();
        let ours = ours(&latest, i);
        let pids = |v: &[(u32, u64)]| v.iter().map(|p| p.0).collect::<Vec<_>>();
        let mut sorted = theirs.clone();
        sorted.sort_unstable();
        assert_eq!(pids(&sorted), pids(&ours), "GPU {i} processes");
        for ((pid, mib), (_, bytes)) in sorted.iter().zip(&ours) {
            assert!(
                same_mib(*mib, *bytes),
                "GPU {i} PID {pid}: {mib} MiB vs {bytes} B"
            );
        }
    }

    // The plain table: "[i] name | temp, util | used / total MB | user(MiB)…".
    let out = busy.python(&pytools, &["-m", "gpustat", "--no-color"])?;
    let table = quiet_stdout("gpustat", &out)?;
    let rows: Vec<&str> = table.lines().filter(|l| l.starts_with('[')).collect();
    assert_eq!(rows.len(), latest.gpus.len(), "{table}");
    for (row, d) in rows.iter().zip(&latest.gpus) {
        assert!(!row.contains("??"), "a value gpustat could not read: {row}");
        let memory = row.split('|').nth(2).expect("a memory column");
        let (used, total) = memory
            .trim()
            .trim_end_matches("MB")
            .split_once('/')
            .expect("used / total");
        let used: u64 = used.trim().parse()?;
        let total: u64 = total.trim().parse()?;
        assert!(same_mib(used, d.mem_used_bytes.expect("used")), "{row}");
        assert!(same_mib(total, d.mem_total_bytes.expect("total")), "{row}");
    }
    Ok(())
}
