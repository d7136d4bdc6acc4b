//! Verification believes only what it can see: a GPU the server needs whose
//! memory NVML cannot read is not idle, and a foreign process on such a GPU
//! blocks the launch even when it holds less than the tolerance.

use std::time::Duration;

use serde_json::json;
use shared::restart::Phase;
use simhost::{Fault, GpuFaults};
use tests::managed::{ServerSpec, spawn_managed};
use tests::{SimHost, spawn_foreign};

const T: Duration = Duration::from_secs(40);

#[tokio::test]
async fn a_gpu_whose_memory_cannot_be_read_is_not_verified_and_nothing_launches()
-> anyhow::Result<()> {
    let mut host = SimHost::new(200);
    let spec = ServerSpec {
        verify: "3s",
        ..ServerSpec::default()
    };
    let app = spawn_managed(&host, &spec, &[])?;
    let first = app.start_server().await?;
    host.set_faults(
        1,
        GpuFaults {
            memory_info: Some(Fault::Unknown),
            ..GpuFaults::default()
        },
    )?;
    let id = app.restart(json!({"--tp": "2"})).await?;
    let d = app.finished_restart(id, T).await?;
    assert_eq!(d["summary"]["outcome"], "failed", "{d}");
    let f = &d["summary"]["failure"];
    assert_eq!(f["kind"], "verify_failed", "{f}");
    assert!(
        f["reason"]
            .as_str()
            .is_some_and(|r| r.contains("GPU 1's memory cannot be read")),
        "{f}"
    );
    let markers = d["markers"].to_string();
    assert!(
        !markers.contains("\"launch\""),
        "launched anyway: {markers}"
    );
    let now = app.server().await?;
    assert_eq!(now.phase, Phase::Failed);
    assert_eq!(now.generation, first.generation);
    assert!(!tests::alive(first.root.expect("root").pid));

    // Once the GPU reads again, a start goes through.
    host.clear_faults()?;
    let ready = app.start_server().await?;
    assert_eq!(ready.generation, first.generation + 1);
    Ok(())
}

#[tokio::test]
async fn a_foreign_holder_under_the_tolerance_still_blocks_the_launch() -> anyhow::Result<()> {
    let host = SimHost::new(200);
    let app = spawn_managed(&host, &ServerSpec::default(), &[])?;
    app.start_server().await?;
    // 16 MiB on GPU 2, well under the 64 MiB a GPU may be above its baseline.
    let squatter = spawn_foreign(&host, 2, 16.0 / 1024.0)?;
    app.wait_for_state("the squatter on GPU 2", T, |s| {
        s.latest.as_ref().is_some_and(|l| {
            l.processes
                .iter()
                .any(|p| p.pid == squatter.pid() && p.gpu_mem.iter().any(|g| g.gpu_index == 2))
        })
    })
    .await?;
    let id = app.restart(json!({"--tp": "3"})).await?;
    let d = app.finished_restart(id, T).await?;
    assert_eq!(d["summary"]["outcome"], "failed", "{d}");
    let f = &d["summary"]["failure"];
    assert_eq!(f["kind"], "foreign_holders", "{f}");
    assert_eq!(f["holders"][0]["pid"], squatter.pid());
    assert!(tests::alive(squatter.pid()));
    Ok(())
}

/// A server someone started by hand on the port is not drainwatch's until it is
/// adopted: a start onto its GPUs is refused naming it, and nothing of it is
/// signalled.
#[tokio::test]
async fn a_server_on_the_port_that_is_not_ours_is_foreign_to_a_start() -> anyhow::Result<()> {
    let host = SimHost::new(200);
    let spec = ServerSpec::default();
    let by_hand = tests::SimServer::launch_on(&host, spec.port, 2, 300)?;
    let workers = by_hand.worker_pids();
    let app = spawn_managed(&host, &spec, &[])?;
    app.wait_for_state("the hand-started server's memory", T, |s| {
        s.latest.as_ref().is_some_and(|l| {
            workers.iter().all(|w| {
                l.processes
                    .iter()
                    .any(|p| p.pid == *w && !p.gpu_mem.is_empty())
            })
        })
    })
    .await?;
    let id = app.begin_start().await?;
    let d = app.finished_restart(id, T).await?;
    assert_eq!(d["summary"]["outcome"], "failed", "{d}");
    let f = &d["summary"]["failure"];
    assert_eq!(f["kind"], "foreign_holders", "{f}");
    let named: Vec<u64> = f["holders"]
        .as_array()
        .expect("holders")
        .iter()
        .filter_map(|h| h["pid"].as_u64())
        .collect();
    assert!(
        workers.iter().all(|w| named.contains(&u64::from(*w))),
        "{named:?} vs {workers:?}"
    );
    assert!(tests::alive(by_hand.proc.pid()));
    assert!(workers.iter().all(|w| tests::alive(*w)));
    Ok(())
}
