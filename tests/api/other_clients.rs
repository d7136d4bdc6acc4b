//! The fake NVML is faithful beyond nvml-wrapper: NVIDIA's own Python binding
//! (pynvml, what SGLang and vLLM use) loads it by name through the dynamic loader
//! and reads the same numbers drainwatch shows.

use std::process::Command;
use std::time::Duration;

use tests::{GIB, SimHost, SimServer, bin_dir, spawn_app, spawn_foreign};

/// pynvml's install folder (`cargo xtask test` puts nvidia-ml-py there).
fn pynvml_dir() -> std::path::PathBuf {
    std::env::var_os("DRAINWATCH_PYNVML").map_or_else(|| bin_dir().join("../pynvml"), Into::into)
}

const SCRIPT: &str = r#"
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
    let pylib = pynvml_dir();
    anyhow::ensure!(
        pylib.join("pynvml.py").exists(),
        "pynvml missing at {}: `cargo xtask test` installs nvidia-ml-py there",
        pylib.display()
    );
    let host = SimHost::new(1_000);
    let server = SimServer::launch(&host, 8, 300)?;
    let _foreign = spawn_foreign(&host, 5, 2.0)?;
    let app = spawn_app(&host, &["--server-port", &server.port.to_string()])?;
    // Once warm, memory and processes hold still: both readers must agree exactly.
    let state = app
        .wait_for_state("warm", Duration::from_secs(15), |s| {
            s.latest.as_ref().is_some_and(|l| {
                l.gpus.iter().all(|g| g.mem_used_bytes >= Some(88 * GIB))
                    && l.processes.iter().filter(|p| !p.gpu_mem.is_empty()).count() == 9
            })
        })
        .await?;

    let lib_dir = host.nvml_lib().parent().expect("lib dir").to_path_buf();
    let out = Command::new("python3")
        .args(["-c", SCRIPT])
        .env("PYTHONPATH", &pylib)
        .env("LD_LIBRARY_PATH", &lib_dir)
        .env(simhost::HOST_DIR_ENV, host.path())
        .output()?;
    anyhow::ensure!(
        out.status.success(),
        "pynvml failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let py: serde_json::Value = serde_json::from_slice(&out.stdout)?;

    let latest = state.latest.expect("sample");
    assert_eq!(py["driver"], "575.57.08");
    let gpus = py["gpus"].as_array().expect("gpus");
    assert_eq!(gpus.len(), latest.gpus.len());
    for (p, d) in gpus.iter().zip(&latest.gpus) {
        assert_eq!(p["name"].as_str(), d.name.as_deref());
        assert_eq!(p["uuid"].as_str(), d.uuid.as_deref());
        assert_eq!(p["total"].as_u64(), d.mem_total_bytes);
        assert_eq!(
            p["used"].as_u64(),
            d.mem_used_bytes,
            "GPU {} (v1 struct)",
            d.index
        );
        assert_eq!(
            p["used_v2"].as_u64(),
            d.mem_used_bytes,
            "GPU {} (v2 struct)",
            d.index
        );
        assert_eq!(p["limit"].as_u64(), d.power_limit_mw.map(u64::from));
        let mut ours: Vec<(u64, u64)> = latest
            .processes
            .iter()
            .flat_map(|pr| {
                pr.gpu_mem
                    .iter()
                    .filter(|g| g.gpu_index == d.index)
                    .map(move |g| (u64::from(pr.pid), g.used_bytes.unwrap_or(0)))
            })
            .collect();
        ours.sort_unstable();
        let theirs: Vec<(u64, u64)> = p["procs"]
            .as_array()
            .expect("procs")
            .iter()
            .map(|e| (e[0].as_u64().unwrap_or(0), e[1].as_u64().unwrap_or(0)))
            .collect();
        assert_eq!(theirs, ours, "GPU {} processes", d.index);
    }
    Ok(())
}
