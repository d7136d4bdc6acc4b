//! What each kernel's fallbacks cost a restart (method and results in
//! docs/PERFORMANCE.md, "Restarts on older kernels"). Run through
//! `cargo xtask bench kernels`, which builds the release binaries first.
//!
//! For this host's kernel and each emulated feature set (`kernelsim`, see
//! tests/src/kernels.rs): drainwatch managing the simulated server (4 GPUs,
//! 200 ms warm-up), 20 restarts one after another
//! with a flag changed each time, and the medians of each restart's phases
//! as its record has them: drain, verify (which begins with the leaf's
//! `cgroup.kill` or its sweep), launch to ready, and the whole. The server's
//! own part (its drain and warm-up) is the same in every set, so the
//! differences are drainwatch's.

use std::time::Duration;

use serde_json::{Value, json};
use tests::SimHost;
use tests::kernels::Kernel;
use tests::managed::{ServerSpec, spawn_managed};

const RESTARTS: usize = 20;

fn median(mut v: Vec<u64>) -> u64 {
    v.sort_unstable();
    v[v.len() / 2]
}

fn main() -> anyhow::Result<()> {
    if !tests::bench_wanted("kernels") {
        return Ok(());
    }
    let rt = tokio::runtime::Runtime::new()?;
    let sets: [(&str, Option<Kernel>); 5] = [
        ("native (this host)", None),
        ("5.14 to 6.8", Some(Kernel::V5_14)),
        ("5.10", Some(Kernel::V5_10)),
        ("4.18, cgroup v2", Some(Kernel::V4_18)),
        ("4.18, cgroup v1", Some(Kernel::V4_18CgroupV1)),
    ];
    let mut native_total = None;
    for (name, kernel) in sets {
        let phases = rt.block_on(restarts(kernel))?;
        let col = |k: &str| median(phases.iter().map(|p| p[k].as_u64().unwrap_or(0)).collect());
        let total = col("total_ms");
        let base = *native_total.get_or_insert(total);
        println!(
            "kernels: {name}: median over {RESTARTS} restarts: drain {} ms, verify {} ms, launch to ready {} ms, total {total} ms ({:.2}× native)",
            col("drain_ms"),
            col("verify_ms"),
            col("warmup_ms"),
            total as f64 / base as f64,
        );
    }
    Ok(())
}

/// The durations of [`RESTARTS`] restarts under `kernel`.
async fn restarts(kernel: Option<Kernel>) -> anyhow::Result<Vec<Value>> {
    let mut host = SimHost::new(100);
    if let Some(k) = kernel {
        host = host.on_kernel(k);
    }
    host.require_cgroup();
    let spec = ServerSpec {
        warmup_ms: 200,
        ..ServerSpec::default()
    };
    let app = spawn_managed(&host, &spec, &[])?;
    app.start_server().await?;
    let mut out = Vec::new();
    for i in 0..RESTARTS {
        let tp = if i % 2 == 0 { "3" } else { "4" };
        let id = app.restart(json!({"--tp": tp})).await?;
        let d = app.finished_restart(id, Duration::from_secs(60)).await?;
        anyhow::ensure!(d["summary"]["outcome"] == "succeeded", "{d}");
        out.push(d["summary"]["durations"].clone());
    }
    Ok(out)
}
