//! States no restart can fix, each named with what a person does next: GPU
//! memory the driver leaked (charged with no process alive) and a server
//! process stuck inside the driver that SIGKILL cannot end. The first is
//! simulated by the fake NVML as a driver shows it; the second by the cgroup
//! v1 freezer, which holds a process in `D` with its SIGKILL pending.

use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::json;
use shared::restart::Phase;
use tests::SimHost;
use tests::managed::{ServerSpec, spawn_managed};

/// `drainwatch restart --yes` against `url`: its exit code and its output.
fn cli_restart(url: &str) -> anyhow::Result<(i32, String)> {
    let out = Command::new(tests::bin("drainwatch"))
        .args(["restart", "--url", url, "--yes"])
        .stdin(Stdio::null())
        .output()?;
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    Ok((out.status.code().unwrap_or(-1), text))
}

#[tokio::test]
async fn memory_the_driver_leaked_is_named_and_sends_for_a_person() -> anyhow::Result<()> {
    let host = SimHost::new(200);
    let spec = ServerSpec {
        verify: "3s",
        ..ServerSpec::default()
    };
    let app = spawn_managed(&host, &spec, &[])?;
    app.start_server().await?;
    // A server whose rank 0 leaks its memory when it exits.
    let id = app.restart(json!({"SIMSERVER_MODE": "leak"})).await?;
    let d = app.finished_restart(id, Duration::from_secs(30)).await?;
    assert_eq!(d["summary"]["outcome"], "succeeded", "{d}");

    let (code, out) = cli_restart(&app.url(""))?;
    assert_eq!(code, 18, "{out}");
    assert!(
        out.contains("NEEDS A PERSON") && out.contains("nvidia-smi --gpu-reset -i 0"),
        "{out}"
    );
    let s = app
        .wait_phase(Phase::Failed, Duration::from_secs(5))
        .await?;
    let f = s.failure.clone().expect("the failure");
    let shared::restart::Failure::MemoryLeaked { gpus } = &f else {
        anyhow::bail!("not a leak: {f:?}");
    };
    assert_eq!(
        gpus.iter().map(|g| g.gpu_index).collect::<Vec<_>>(),
        vec![0]
    );
    assert!(
        gpus[0].used_bytes > gpus[0].baseline_bytes + (1 << 30),
        "{gpus:?}"
    );
    assert!(s.root.is_none(), "nothing launched: {s:?}");

    // A reset frees it; the next start goes through.
    assert_eq!(simhost::reset_gpu(&host.path(), 0)?, 1);
    app.start_server().await?;
    assert!(host.foreign_signals().is_empty());
    Ok(())
}

#[tokio::test]
async fn a_process_sigkill_cannot_end_is_named_with_its_state_and_wchan() -> anyhow::Result<()> {
    let host = SimHost::new(200);
    let spec = ServerSpec {
        drain: "2s",
        kill_grace: "2s",
        ..ServerSpec::default()
    };
    let app = spawn_managed(&host, &spec, &[])?;
    app.start_server().await?;
    let id = app
        .restart(json!({"SIMSERVER_MODE": "stuck-in-driver"}))
        .await?;
    app.finished_restart(id, Duration::from_secs(30)).await?;

    let (code, out) = cli_restart(&app.url(""))?;
    assert_eq!(code, 18, "{out}");
    assert!(
        out.contains("NEEDS A PERSON") && out.contains("reboot"),
        "{out}"
    );
    let s = app
        .wait_phase(Phase::Failed, Duration::from_secs(5))
        .await?;
    let f = s.failure.clone().expect("the failure");
    let shared::restart::Failure::Unkillable { processes } = &f else {
        anyhow::bail!("not a stuck process: {f:?}");
    };
    assert_eq!(processes.len(), 1, "{processes:?}");
    let p = &processes[0];
    assert_eq!(p.state, "D", "{p:?}");
    assert!(p.wchan.as_deref().is_some_and(|w| !w.is_empty()), "{p:?}");
    assert_eq!(p.gpus, vec![0], "{p:?}");
    assert!(
        f.summary()
            .contains(&format!("pid {} (state D, in ", p.pid)),
        "{}",
        f.summary()
    );
    // SIGKILL reached it and is still pending: it lives, frozen in the kernel.
    let stat = std::fs::read_to_string(format!("/proc/{}/status", p.pid))?;
    assert!(stat.lines().any(|l| l.starts_with("State:\tD")), "{stat}");
    assert!(host.foreign_signals().is_empty());
    Ok(())
}
