//! `/api/state` and `/healthz` against a simulated host with a model server and a
//! foreign process.

use std::time::Duration;

use shared::{NvmlStatus, ProcessRole, Snapshot};
use tests::{GIB, MIB, SimHost, SimServer, spawn_app, spawn_foreign};

fn gpu_used(s: &Snapshot, i: usize) -> u64 {
    s.latest
        .as_ref()
        .and_then(|l| l.gpus[i].mem_used_bytes)
        .unwrap_or(0)
}

#[tokio::test]
async fn shows_gpus_server_tree_and_foreign_process() -> anyhow::Result<()> {
    // Arrange
    let host = SimHost::new(300);
    let server = SimServer::launch(&host, 8, 1_500)?;
    let foreign = spawn_foreign(&host, 3, 1.5)?;
    let app = spawn_app(&host, &["--server-port", &server.port.to_string()])?;

    // Act: wait until the warm-up has finished on every GPU and the foreign
    // process holds its memory.
    let s = app
        .wait_for_state("warm server", Duration::from_secs(30), |s| {
            (0..8).all(|i| gpu_used(s, i) >= 88 * GIB) && gpu_used(s, 3) > 88 * GIB + GIB
        })
        .await?;

    // Assert
    assert!(matches!(
        s.host.nvml,
        NvmlStatus::Ok {
            simulated: true,
            ..
        }
    ));
    let latest = s.latest.expect("a sample");
    assert_eq!(latest.gpus.len(), 8);
    for g in &latest.gpus {
        assert_eq!(g.name.as_deref(), Some("NVIDIA RTX PRO 6000 Blackwell"));
        assert_eq!(g.mem_total_bytes, Some(96 * GIB));
        assert!(g.power_mw.is_some() && g.temp_c.is_some() && g.util_gpu_percent.is_some());
        assert!(g.errors.is_empty(), "{:?}", g.errors);
    }
    // GPU 3: the worker, the idle baseline and the foreign process's 1.5 GiB.
    assert_eq!(
        latest.gpus[3].mem_used_bytes,
        Some(88 * GIB + 4 * MIB + 3 * GIB / 2)
    );

    let srv = latest.server.expect("server found by its listener");
    assert_eq!(srv.root.pid, server.proc.pid());
    let workers = server.worker_pids();
    assert_eq!(workers.len(), 8);
    let by_pid = |pid: u32| latest.processes.iter().find(|p| p.pid == pid);
    let root = by_pid(server.proc.pid()).expect("root listed");
    assert_eq!(root.role, ProcessRole::Server);
    assert!(root.gpu_mem.is_empty());
    for (rank, w) in workers.iter().enumerate() {
        let p = by_pid(*w).expect("worker listed");
        assert_eq!(p.role, ProcessRole::Server);
        assert_eq!(p.ppid, Some(server.proc.pid()));
        assert_eq!(p.gpu_mem.len(), 1);
        assert_eq!(p.gpu_mem[0].gpu_index, rank as u32);
        assert!(p.start_ticks.is_some() && p.started_at_ms.is_some() && p.uid.is_some());
    }
    // Parents come before their children.
    let pos = |pid| {
        latest
            .processes
            .iter()
            .position(|p| p.pid == pid)
            .expect("listed")
    };
    assert!(workers.iter().all(|w| pos(*w) > pos(server.proc.pid())));

    // The decoy's command line says launch_server --port 30000, like the server's: it is foreign.
    let f = by_pid(foreign.pid()).expect("foreign listed");
    assert_eq!(f.role, ProcessRole::Foreign);
    assert!(f.cmdline.iter().any(|a| a == "sglang.launch_server"));
    assert_eq!(f.gpu_mem[0].gpu_index, 3);

    let health = app.http.get(app.url("/healthz")).send().await?;
    assert_eq!(health.status(), 200);
    Ok(())
}

#[tokio::test]
async fn killed_worker_memory_returns_to_baseline_only_after_release_delay() -> anyhow::Result<()> {
    // A release delay long enough that a loaded machine still sees the
    // "exited, memory held" state.
    let host = SimHost::new(5_000);
    let server = SimServer::launch(&host, 2, 300)?;
    let app = spawn_app(
        &host,
        &[
            "--server-port",
            &server.port.to_string(),
            "--sample-interval-ms",
            "20",
        ],
    )?;
    app.wait_for_state("warm", Duration::from_secs(15), |s| {
        gpu_used(s, 1) >= 88 * GIB
    })
    .await?;

    // SIGKILL the whole server group: no process can clean up after itself.
    let killed_at = std::time::Instant::now();
    server.proc.signal_group(libc::SIGKILL);
    let gone = app
        .wait_for_state("worker gone from /proc", Duration::from_secs(20), |s| {
            s.latest.as_ref().is_some_and(|l| {
                l.processes
                    .iter()
                    .any(|p| p.gpu_mem.iter().any(|g| g.gpu_index == 1) && p.proc_error.is_some())
            })
        })
        .await?;
    // Exited, yet the memory is still held: the driver has not torn the context down.
    assert!(gpu_used(&gone, 1) >= 88 * GIB);

    let idle = app
        .wait_for_state("baseline", Duration::from_secs(30), |s| {
            gpu_used(s, 1) == 4 * MIB
        })
        .await?;
    assert!(
        killed_at.elapsed() >= Duration::from_millis(4_900),
        "released too early: {:?}",
        killed_at.elapsed()
    );
    let l = idle.latest.expect("sample");
    assert!(l.processes.iter().all(|p| p.gpu_mem.is_empty()));
    assert_eq!(l.gpus[1].mem_baseline_bytes, Some(4 * MIB));
    assert!(l.server.is_none());
    Ok(())
}
