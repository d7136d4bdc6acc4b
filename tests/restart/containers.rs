//! drainwatch in a container without the host's PIDs (`unshare --pid --fork
//! --mount-proc`, as a pod without `hostPID`): NVML reports the host's PIDs,
//! which name no process of drainwatch's `/proc`. drainwatch says so, never
//! matches them to its own processes nor calls them foreign, and verification
//! by GPU memory still decides whether a drain is done.

use std::time::Duration;

use anyhow::Context;
use serde_json::json;
use shared::ProcessRole;
use shared::process::OUTSIDE_NOTE;
use shared::restart::Phase;
use tests::managed::{ServerSpec, spawn_managed};
use tests::{SimHost, spawn_foreign};

const T: Duration = Duration::from_secs(40);
const GIB: u64 = 1 << 30;

/// The PID `host_pid` has in its innermost PID namespace (the last of its
/// `NSpid`, read from the test's `/proc`, which is the host's).
fn innermost_pid(host_pid: u32) -> Option<u32> {
    let status = std::fs::read_to_string(format!("/proc/{host_pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("NSpid:"))?;
    line.split_whitespace().last()?.parse().ok()
}

#[tokio::test]
async fn without_the_hosts_pids_drainwatch_says_so_and_gpu_memory_decides() -> anyhow::Result<()> {
    let host = SimHost::new(200).in_pid_namespace();
    // Outside drainwatch's namespace: 2 GiB on GPU 3, which the server needs.
    let outsider = spawn_foreign(&host, 3, 2.0)?;
    let spec = ServerSpec {
        verify: "3s",
        ..ServerSpec::default()
    };
    let app = spawn_managed(&host, &spec, &[])?;
    assert_ne!(app.drainwatch_pid(), app.proc.pid(), "not in a namespace");
    assert_eq!(innermost_pid(app.drainwatch_pid()), Some(1));

    // The GPU is not called idle; its holder is named by its host PID, never
    // looked up in drainwatch's /proc, and not called foreign.
    let s = app
        .wait_for_state("the outsider on GPU 3", T, |s| {
            s.latest.as_ref().is_some_and(|l| {
                (l.processes.iter()).any(|p| p.pid == outsider.pid() && !p.gpu_mem.is_empty())
            })
        })
        .await?;
    assert!(s.host.own_pid_namespace);
    let latest = s.latest.as_ref().context("sample")?;
    let gpu3 = latest.gpus.iter().find(|g| g.index == 3).context("GPU 3")?;
    assert!(
        gpu3.mem_used_bytes.is_some_and(|u| u >= 2 * GIB),
        "{gpu3:?}"
    );
    let p = (latest.processes.iter())
        .find(|p| p.pid == outsider.pid())
        .context("outsider")?;
    assert_eq!(p.role, ProcessRole::Outside, "{p:?}");
    assert!(p.start_ticks.is_none() && p.cmdline.is_empty(), "{p:?}");
    assert!(
        !latest
            .processes
            .iter()
            .any(|p| p.role == ProcessRole::Foreign),
        "{:?}",
        latest.processes
    );
    let containment = (s.server.as_ref())
        .and_then(|sv| sv.containment.clone())
        .context("containment")?;
    assert!(
        containment.fallbacks.iter().any(|f| f == OUTSIDE_NOTE),
        "{containment:?}"
    );

    // A start waits for GPU 3, then fails naming the holder: not foreign (it
    // may be ours), not launched onto its memory.
    let d = app.finished_restart(app.begin_start().await?, T).await?;
    assert_eq!(d["summary"]["outcome"], "failed", "{d}");
    let f = &d["summary"]["failure"];
    assert_eq!(f["kind"], "verify_failed", "{f}");
    let reason = f["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains(&format!(
            "host pid {} holds 2.0 GiB on GPU 3",
            outsider.pid()
        )) && reason.contains("run with hostPID"),
        "{f}"
    );
    assert_eq!(f["holders"][0]["pid"], outsider.pid());
    assert!(
        d["containment"]
            .as_str()
            .is_some_and(|c| c.contains(OUTSIDE_NOTE)),
        "{d}"
    );
    assert!(!d["markers"].to_string().contains("\"launch\""), "{d}");
    assert!(tests::alive(outsider.pid()), "the outsider was touched");

    // Once it is gone, the GPUs verify idle and the server starts. Its GPU
    // memory is listed under its host PIDs: outside, never the server's rows.
    drop(outsider);
    let ready = app.start_server().await?;
    assert_eq!(ready.phase, Phase::Ready);
    let s = app
        .wait_for_state("the server's memory on its GPUs", T, |s| {
            s.latest.as_ref().is_some_and(|l| {
                (0..4).all(|i| {
                    (l.processes.iter()).any(|p| {
                        p.role == ProcessRole::Outside && p.gpu_mem.iter().any(|m| m.gpu_index == i)
                    })
                })
            })
        })
        .await?;
    let latest = s.latest.as_ref().context("sample")?;
    let servers: Vec<u32> = (latest.processes.iter())
        .filter(|p| p.role == ProcessRole::Server)
        .inspect(|p| assert!(p.gpu_mem.is_empty(), "{p:?}"))
        .map(|p| p.pid)
        .collect();
    for p in latest
        .processes
        .iter()
        .filter(|p| p.role == ProcessRole::Outside)
    {
        let inner = innermost_pid(p.pid).context("an outside PID is a live host PID")?;
        assert!(servers.contains(&inner), "{} is {inner} in there", p.pid);
    }

    // A restart drains the server (signalling only its own processes, as the
    // trace checks when the host is dropped), waits for the driver to let
    // its memory go, and launches.
    let id = app.restart(json!({"--tp": "2"})).await?;
    let d = app.finished_restart(id, T).await?;
    assert_eq!(d["summary"]["outcome"], "succeeded", "{d}");

    // Said where people look: `drainwatch status`.
    let text = app.status_text().await?;
    assert!(text.contains("run with hostPID"), "{text}");
    Ok(())
}
