//! The hooks for an engine that owns placement: `drainwatch verify-drained`
//! waits until the server's processes are gone and its GPUs are back at their
//! idle baseline (the engine stops the server, not drainwatch), and
//! `drainwatch wait-ready` waits for a real completion by the server config's
//! probe. Real processes, real signals, the real binary.

use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use tests::managed::{ServerSpec, free_port};
use tests::{SimHost, SimServer, bin, spawn_app, spawn_foreign};

/// Runs `drainwatch <args>`; its output.
async fn drainwatch(args: &[&str]) -> anyhow::Result<Output> {
    let out = tokio::process::Command::new(bin("drainwatch"))
        .args(args)
        .env_remove("DRAINWATCH_URL")
        .env_remove("DRAINWATCH_TOKEN")
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output();
    Ok(tokio::time::timeout(Duration::from_secs(90), out).await??)
}

fn json_line(out: &Output) -> anyhow::Result<Value> {
    Ok(serde_json::from_str(
        String::from_utf8_lossy(&out.stdout).trim(),
    )?)
}

#[tokio::test]
async fn verify_drained_waits_for_the_server_and_its_memory_to_go() -> anyhow::Result<()> {
    // A server the engine started (not drainwatch), watched by its port; the
    // host gives memory back a second after its holder dies.
    let host = SimHost::new(1_000);
    let server = SimServer::launch(&host, 4, 300)?;
    let app = spawn_app(&host, &["--server-port", &server.port.to_string()])?;
    app.wait_for_state("the server warm", Duration::from_secs(15), |s| {
        s.latest.as_ref().is_some_and(|l| {
            l.gpus[..4]
                .iter()
                .all(|g| g.mem_used_bytes >= Some(80 << 30))
        })
    })
    .await?;
    let url = app.url("");

    // While it runs: not drained, saying why, after the timeout.
    let out = drainwatch(&["verify-drained", "--url", &url, "--timeout", "1s", "--json"]).await?;
    assert_eq!(out.status.code(), Some(27), "{out:?}");
    let v = json_line(&out)?;
    assert_eq!(v["drained"], false);
    let reasons = v["reasons"].to_string();
    assert!(reasons.contains("of the server is alive"), "{reasons}");
    assert!(reasons.contains("GPU 0: pid"), "{reasons}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("not drained after"), "{err}");

    // The engine stops the server; the hook returns once the memory is back.
    let hook = tokio::spawn({
        let url = url.clone();
        async move {
            drainwatch(&[
                "verify-drained",
                "--url",
                &url,
                "--timeout",
                "30s",
                "--json",
            ])
            .await
        }
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    let stopped = Instant::now();
    tests::signal(server.proc.pid(), libc::SIGTERM);
    let out = hook.await??;
    let waited = stopped.elapsed();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let v = json_line(&out)?;
    assert_eq!(v["drained"], true, "{v}");
    // Not before the host released the memory (a second after the exit).
    assert!(waited >= Duration::from_millis(1_000), "{waited:?}");
    let view = simhost::observe(&host.path(), simhost::now_ms())?;
    for (i, g) in view.gpus.iter().enumerate() {
        assert!(g.processes.is_empty(), "GPU {i} still held: {g:?}");
    }

    // A foreign holder on GPU 2 is not drained for GPU 2, and is named; GPU 1
    // alone is.
    let squatter = spawn_foreign(&host, 2, 1.0)?;
    let out = drainwatch(&[
        "verify-drained",
        "--url",
        &url,
        "--gpus",
        "2",
        "--timeout",
        "2s",
    ])
    .await?;
    assert_eq!(out.status.code(), Some(27), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("GPU 2: pid {} holds 1.0 GiB", squatter.pid())),
        "{err}"
    );
    let out = drainwatch(&[
        "verify-drained",
        "--url",
        &url,
        "--gpus",
        "1",
        "--timeout",
        "5s",
    ])
    .await?;
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(host.foreign_signals().is_empty());
    Ok(())
}

#[tokio::test]
async fn wait_ready_waits_for_a_real_completion() -> anyhow::Result<()> {
    let host = SimHost::new(100);
    let spec = ServerSpec {
        port: free_port(),
        ..ServerSpec::default()
    };
    let cfg = host.scratch().join("server.toml");
    std::fs::write(&cfg, spec.toml())?;
    let cfg = cfg.display().to_string();

    // Nothing listens: not ready by the timeout.
    let out = drainwatch(&["wait-ready", "--config", &cfg, "--timeout", "1s"]).await?;
    assert_eq!(out.status.code(), Some(15), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("not ready after"),
        "{out:?}"
    );

    // The engine starts the server; the probe returns once a completion does,
    // not at the first 200 from /health.
    let started = Instant::now();
    let _server = SimServer::launch_on(&host, spec.port, 2, 2_000)?;
    let out = drainwatch(&["wait-ready", "--config", &cfg, "--timeout", "30s"]).await?;
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(started.elapsed() >= Duration::from_millis(2_000));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("a completion came back"),
        "{out:?}"
    );
    Ok(())
}
