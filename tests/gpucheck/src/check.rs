//! The check's flow: drainwatch managing gpuhog on every idle GPU, compared
//! with the reference idle, running and stopped; the sample cost; the health
//! fields; three restarts (draining a normal, an ignore-SIGTERM and an orphan
//! generation); the stop. `cleanup` then runs whatever happened.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::Child;
use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::{Value, json};

use crate::compare;
use crate::drainwatch::{self, Api, Launch, MODE_FLAG, ServerSpec, TOLERANCE_BYTES};
use crate::gpus::{Gpus, Reading, Reference};
use crate::report::Report;
use crate::restarts::{self, Baselines, Poller};
use crate::sim::SimHost;

const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;

/// Each restart: the mode of the generation it drains, and the one it launches.
const PLAN: [(&str, &str); 3] = [
    ("normal", "ignore-sigterm"),
    ("ignore-sigterm", "orphan"),
    ("orphan", "normal"),
];

/// Samples whose cost is measured.
const COST_SAMPLES: usize = 50;

/// What the check runs with.
#[derive(Debug)]
pub(crate) struct Setup {
    pub(crate) dry_run: bool,
    pub(crate) bin_dir: PathBuf,
    pub(crate) nvml_lib: PathBuf,
    pub(crate) gpus: Gpus,
    pub(crate) reference: Reference,
    pub(crate) sim: Option<SimHost>,
    pub(crate) scratch: PathBuf,
    pub(crate) bytes_per_gpu: Option<u64>,
    pub(crate) sample_interval_ms: u64,
    /// When the check must be done (cleanup excepted).
    pub(crate) deadline: Instant,
}

impl Setup {
    /// `secs` from now, or the deadline if that comes first.
    fn until(&self, secs: u64) -> Instant {
        (Instant::now() + Duration::from_secs(secs)).min(self.deadline)
    }
}

/// What [`cleanup`] must undo.
#[derive(Debug, Default)]
pub(crate) struct Session {
    pub(crate) drainwatch: Option<Child>,
    pub(crate) api: Option<Api>,
    /// The cgroup drainwatch made for itself in the hierarchy's root
    /// (`/drainwatch-<server port>`), which it leaves behind, empty.
    pub(crate) own_cgroup: Option<String>,
}

/// The GPUs' idle memory: the least of three readings 100 ms apart, and the
/// processes the last one saw.
fn idle_reading(reference: &Reference) -> anyhow::Result<Reading> {
    let mut low = reference.read(true)?;
    for _ in 0..2 {
        std::thread::sleep(Duration::from_millis(100));
        let next = reference.read(true)?;
        for g in &mut low.gpus {
            if let Some(n) = next.gpus.iter().find(|n| n.index == g.index) {
                g.used_bytes = g.used_bytes.min(n.used_bytes);
            }
        }
        low.apps = next.apps;
    }
    Ok(low)
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_default()
}

/// Whether every one of `gpus` shows memory of a server process in `st`.
fn server_on_all(st: &Value, gpus: &[u32]) -> bool {
    let empty = Vec::new();
    let procs = st["latest"]["processes"].as_array().unwrap_or(&empty);
    gpus.iter().all(|&g| {
        procs.iter().filter(|p| p["role"] == "server").any(|p| {
            p["gpu_mem"]
                .as_array()
                .is_some_and(|m| m.iter().any(|m| m["gpu_index"] == g))
        })
    })
}

/// Compares and records; a disagreement is a failure naming the GPUs.
fn record_comparison(r: &mut Report, when: &str, st: &Value, reading: &Reading, source: &str) {
    let c = compare::compare(when, st, reading, TOLERANCE_BYTES);
    if c["agree"] != true {
        let bad: Vec<String> = c["gpus"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|g| g["agree"] != true)
            .map(|g| g["index"].to_string())
            .collect();
        r.fail(format!(
            "{when}: /api/state and {source} disagree on GPU {}",
            bad.join(", ")
        ));
    }
    r.push("comparisons", c);
}

/// Which GPUs the server runs on and how much it holds on each.
#[derive(Debug)]
struct Plan {
    gpus: Vec<u32>,
    /// Each GPU's idle memory as the reference read it before anything started.
    ref_idle: BTreeMap<u32, u64>,
    bytes_per_gpu: u64,
}

/// Every GPU that holds no other process's memory, and what to hold there.
fn plan(s: &Setup, r: &mut Report) -> anyhow::Result<Plan> {
    let idle = idle_reading(&s.reference)?;
    let busy: BTreeSet<u32> = idle.apps.iter().map(|a| a.gpu_index).collect();
    let gpus: Vec<u32> = idle
        .gpus
        .iter()
        .map(|g| g.index)
        .filter(|i| !busy.contains(i))
        .collect();
    if !busy.is_empty() {
        r.note(format!(
            "GPUs {busy:?} hold other processes' memory: the server was not put on them"
        ));
    }
    anyhow::ensure!(!gpus.is_empty(), "every GPU holds other processes' memory");
    let smallest = idle
        .gpus
        .iter()
        .filter(|g| gpus.contains(&g.index))
        .map(|g| g.total_bytes)
        .min()
        .unwrap_or(0);
    let bytes_per_gpu = s.bytes_per_gpu.unwrap_or((2 * GIB).min(smallest / 10)) / MIB * MIB;
    anyhow::ensure!(bytes_per_gpu > 0, "nothing to hold: 0 bytes per GPU");
    Ok(Plan {
        gpus,
        ref_idle: idle.gpus.iter().map(|g| (g.index, g.used_bytes)).collect(),
        bytes_per_gpu,
    })
}

/// Writes the server config and starts drainwatch with it.
fn start_drainwatch(s: &Setup, p: &Plan) -> anyhow::Result<(Child, Api, u16)> {
    let spec = ServerSpec {
        gpuhog: s.bin_dir.join("gpuhog"),
        gpus: p.gpus.clone(),
        bytes_per_gpu: p.bytes_per_gpu,
        port: drainwatch::free_port()?,
        sim: s.sim.as_ref().map(|h| h.dir.clone()),
    };
    let config = s.scratch.join("server.toml");
    std::fs::write(&config, spec.toml()).context("writing the server config")?;
    let (child, addr) = drainwatch::spawn(&Launch {
        bin: &s.bin_dir.join("drainwatch"),
        nvml_lib: &s.nvml_lib,
        config: &config,
        data_dir: &s.scratch.join("data"),
        log: &s.scratch.join("drainwatch.log"),
        sample_interval_ms: s.sample_interval_ms,
        sim_host: s.sim.as_ref().map(|h| h.dir.as_path()),
    })?;
    Ok((child, Api::new(&addr), spec.port))
}

/// The flow; a failed step returns its error (cleanup follows regardless).
pub(crate) async fn run(s: &Setup, r: &mut Report, sess: &mut Session) -> anyhow::Result<()> {
    let mut host = s.gpus.facts();
    host["hostname"] = json!(hostname());
    r.set("host", host);
    let p = plan(s, r)?;
    let mut setup = json!({
        "gpus": p.gpus,
        "bytes_per_gpu": p.bytes_per_gpu,
        "sample_interval_ms": s.sample_interval_ms,
        "tolerance_bytes": TOLERANCE_BYTES,
        "drain_timeout_ms": drainwatch::DRAIN_TIMEOUT_S * 1000,
        "containment": null,
        "simulated_release_delay_ms": s.sim.as_ref().map(|_| crate::sim::RELEASE_DELAY_MS),
    });
    r.set("setup", setup.clone());
    let (child, api, port) = start_drainwatch(s, &p)?;
    sess.drainwatch = Some(child);
    let api = sess.api.insert(api);

    idle_then_start(api, s, r, &p).await?;
    let c = &api.state().await?["server"]["containment"];
    let own = format!("/drainwatch-{port}");
    if c["cgroup"] == own.as_str() {
        sess.own_cgroup = Some(own);
    }
    setup["containment"] = json!(format!(
        "{}{}",
        c["kind"].as_str().unwrap_or("?"),
        c["reason"]
            .as_str()
            .map(|w| format!(" ({w})"))
            .unwrap_or_default()
    ));
    r.set("setup", setup);
    running(api, s, r, &p).await?;
    for (drained, to) in PLAN {
        let a = restart(api, s, r, &p, drained, to).await?;
        let ok = a["outcome"] == "succeeded";
        r.push("restarts", a);
        anyhow::ensure!(ok, "the restart draining {drained} did not succeed");
    }
    let id = api.operate("stop", None).await?;
    let d = api.finished(id, s.until(90)).await?;
    anyhow::ensure!(
        d["summary"]["outcome"] == "succeeded",
        "the stop failed: {}",
        d["summary"]
    );
    let st = api.wait_phase("stopped", s.until(30)).await?;
    record_comparison(
        r,
        "stopped",
        &st,
        &s.reference.read(true)?,
        s.reference.name(),
    );
    Ok(())
}

/// Idle (drainwatch has learned every GPU's baseline): what drainwatch is
/// and reads, compared; then the server started through the API.
async fn idle_then_start(api: &Api, s: &Setup, r: &mut Report, p: &Plan) -> anyhow::Result<()> {
    let st = api
        .wait_state("every GPU's idle baseline", s.until(30), |st| {
            p.gpus
                .iter()
                .all(|&g| st["latest"]["gpus"][g as usize]["mem_baseline_bytes"].is_u64())
                && !st["server"].is_null()
        })
        .await?;
    let nvml = &st["host"]["nvml"];
    r.set(
        "drainwatch",
        json!({"version": st["host"]["version"], "nvml": nvml}),
    );
    if (nvml["simulated"] == true) != s.dry_run {
        r.fail(format!(
            "drainwatch's NVML says simulated = {}, the check's run says {}",
            nvml["simulated"], s.dry_run
        ));
    }
    record_comparison(r, "idle", &st, &s.reference.read(true)?, s.reference.name());
    api.operate("start", Some(json!({}))).await?;
    api.wait_phase("ready", s.until(150)).await?;
    Ok(())
}

/// With the server running: compared, the sample cost, the health fields.
async fn running(api: &Api, s: &Setup, r: &mut Report, p: &Plan) -> anyhow::Result<()> {
    let st = api
        .wait_state("the server's memory in a sample", s.until(30), |st| {
            server_on_all(st, &p.gpus)
        })
        .await?;
    record_comparison(
        r,
        "running",
        &st,
        &s.reference.read(true)?,
        s.reference.name(),
    );
    r.set("sample_cost", sample_cost(api, s).await?);
    let health = compare::health(&api.state().await?["latest"]);
    for g in health
        .as_array()
        .into_iter()
        .flatten()
        .filter(|g| g["health_reported"] != true)
    {
        r.note(format!(
            "drainwatch reported no health fields for GPU {}",
            g["index"]
        ));
    }
    r.set("health", health);
    Ok(())
}

/// `took_us` of [`COST_SAMPLES`] distinct samples from `/api/state`.
async fn sample_cost(api: &Api, s: &Setup) -> anyhow::Result<Value> {
    let until = s.until(30);
    let mut seen = BTreeSet::new();
    let mut took = Vec::new();
    let mut gpus = 0;
    while took.len() < COST_SAMPLES && Instant::now() < until {
        let st = api.get("/api/state").await?;
        let l = &st["latest"];
        if let (Some(seq), Some(us)) = (l["seq"].as_u64(), l["took_us"].as_u64())
            && seen.insert(seq)
        {
            took.push(us);
            gpus = l["gpus"].as_array().map_or(0, Vec::len);
        }
        tokio::time::sleep(Duration::from_millis(s.sample_interval_ms / 2)).await;
    }
    Ok(compare::sample_cost(&took, s.sample_interval_ms, gpus))
}

/// One restart into `to`, draining a generation in mode `drained`, with the
/// reference polled throughout; its analysis, checked.
async fn restart(
    api: &Api,
    s: &Setup,
    r: &mut Report,
    p: &Plan,
    drained: &str,
    to: &str,
) -> anyhow::Result<Value> {
    let st = api.state().await?;
    let dw_base: BTreeMap<u32, u64> = p
        .gpus
        .iter()
        .filter_map(|&g| {
            Some((
                g,
                st["latest"]["gpus"][g as usize]["mem_baseline_bytes"].as_u64()?,
            ))
        })
        .collect();
    let poller = Poller::start(s.reference.clone(), s.reference.poll_every());
    let detail = async {
        let id = api
            .operate("restart", Some(json!({ MODE_FLAG: to })))
            .await?;
        let d = api.finished(id, s.until(90)).await?;
        if d["summary"]["outcome"] == "succeeded" {
            api.wait_phase("ready", s.until(60)).await?;
        }
        anyhow::Ok(d)
    }
    .await;
    let (polls, poll_error) = poller.finish();
    let detail = detail?;
    let b = Baselines {
        gpus: &p.gpus,
        drainwatch: &dw_base,
        reference: &p.ref_idle,
        tolerance: TOLERANCE_BYTES,
    };
    let mut a = restarts::analyse(&detail, &polls, &b);
    a["drained_mode"] = json!(drained);
    a["to_mode"] = json!(to);
    if let Some(e) = poll_error {
        r.note(format!(
            "restart draining {drained}: a reference poll failed: {e}"
        ));
    }
    judge(r, &a, drained, s.reference.name());
    Ok(a)
}

/// A restart's failures: it did not succeed, a GPU never came back to its
/// baseline, or verification is not shown to have waited for the memory.
fn judge(r: &mut Report, a: &Value, drained: &str, source: &str) {
    if a["outcome"] != "succeeded" {
        r.fail(format!(
            "restart draining {drained}: {} ({})",
            a["outcome"], a["failure"]
        ));
    }
    let gpus = a["gpus"].as_array().map_or(&[][..], Vec::as_slice);
    for g in gpus.iter().filter(|g| g["back_at_ms"].is_null()) {
        r.fail(format!(
            "restart draining {drained}: GPU {} never came back to its baseline in drainwatch's timeline",
            g["gpu"]
        ));
    }
    if a["verified_after_memory_back"] != true {
        let verdicts: Vec<String> = gpus
            .iter()
            .map(|g| format!("GPU {}: {}", g["gpu"], g["verified_after_memory_back"]))
            .collect();
        r.fail(format!(
            "restart draining {drained}: not shown that verification passed only once {source} \
             read the memory back ({})",
            verdicts.join(", ")
        ));
    }
}
