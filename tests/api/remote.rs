//! The client commands (`drainwatch status | restart | bench | watch`) run as
//! processes against a running drainwatch with authentication: their `--json`
//! output parsed, their exit codes checked, and the server's state checked
//! behind them.

use std::process::Stdio;
use std::time::Duration;

use shared::bench::{BenchRun, RunStatus};
use shared::protocol::ServerMsg;
use shared::restart::{Failure, LaunchCause, Outcome, Phase, RestartSummary};
use shared::{NvmlStatus, Snapshot};
use tests::{TestApp, bin};
use tokio::io::{AsyncBufReadExt, BufReader};

use super::auth::managed_with_auth;

/// What a client command did.
#[derive(Debug)]
struct Ran {
    code: i32,
    out: String,
    err: String,
}

/// Runs `drainwatch <args> --url <app>` with `token` in `DRAINWATCH_TOKEN`.
async fn cli(app: &TestApp, token: Option<&str>, args: &[&str]) -> anyhow::Result<Ran> {
    let mut cmd = tokio::process::Command::new(bin("drainwatch"));
    cmd.args(args)
        .arg("--url")
        .arg(app.url(""))
        .env_remove("DRAINWATCH_TOKEN")
        .env_remove("DRAINWATCH_URL")
        .stdin(Stdio::null())
        .kill_on_drop(true);
    if let Some(t) = token {
        cmd.env("DRAINWATCH_TOKEN", t);
    }
    let out = tokio::time::timeout(Duration::from_secs(90), cmd.output()).await??;
    Ok(Ran {
        code: out.status.code().unwrap_or(-1),
        out: String::from_utf8_lossy(&out.stdout).into_owned(),
        err: String::from_utf8_lossy(&out.stderr).into_owned(),
    })
}

#[tokio::test]
async fn status_prints_the_state_as_text_and_as_json() -> anyhow::Result<()> {
    let (_host, app, _op, view) = managed_with_auth("").await?;
    let r = cli(&app, Some(&view), &["status", "--json"]).await?;
    assert_eq!(r.code, 0, "{r:?}");
    let snap: Snapshot = serde_json::from_str(r.out.trim())?;
    let latest = snap.latest.expect("a sample");
    assert_eq!(latest.gpus.len(), 8);
    assert!(snap.host.nvml.is_simulated());
    let server = snap.server.expect("a managed server");
    assert_eq!(server.phase, Phase::Ready);

    let r = cli(&app, Some(&view), &["status"]).await?;
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.out.contains("SIMULATED HOST"), "{}", r.out);
    assert!(r.out.contains("server sim: ready"), "{}", r.out);
    // One row per GPU, with units; the server's workers by pid.
    let gpu_rows = r
        .out
        .lines()
        .filter(|l| l.contains("NVIDIA") && l.contains("GiB") && l.contains(" W"))
        .count();
    assert_eq!(gpu_rows, 8, "{}", r.out);
    assert!(r.out.lines().any(|l| l.contains("HEALTH")), "{}", r.out);
    for p in latest.processes.iter().filter(|p| !p.gpu_mem.is_empty()) {
        assert!(
            r.out
                .lines()
                .any(|l| l.trim_start().starts_with(&format!("{} ", p.pid))),
            "pid {} missing:\n{}",
            p.pid,
            r.out
        );
    }
    if let NvmlStatus::Ok { library, .. } = &snap.host.nvml {
        assert!(!r.out.contains(library.as_str()), "no internals on screen");
    }
    Ok(())
}

#[tokio::test]
async fn who_may_ask_and_where_is_said_by_the_exit_code() -> anyhow::Result<()> {
    let (_host, app, _op, _view) = managed_with_auth("").await?;
    // No token, a wrong token: 4, and the message says how to give one.
    let r = cli(&app, None, &["status"]).await?;
    assert_eq!(r.code, 4, "{r:?}");
    assert!(
        r.err.contains("401") && r.err.contains("DRAINWATCH_TOKEN"),
        "{r:?}"
    );
    let r = cli(&app, Some("dw_wrong"), &["watch", "--json"]).await?;
    assert_eq!(r.code, 4, "{r:?}");
    // Nobody listening: 3.
    let closed = tests::managed::free_port();
    let mut cmd = tokio::process::Command::new(bin("drainwatch"));
    let out = cmd
        .args(["status", "--url", &format!("http://127.0.0.1:{closed}")])
        .stdin(Stdio::null())
        .output()
        .await?;
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    // Not a URL drainwatch can use: 2.
    let out = tokio::process::Command::new(bin("drainwatch"))
        .args(["status", "--url", "ftp://127.0.0.1"])
        .output()
        .await?;
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    Ok(())
}

#[tokio::test]
async fn restart_follows_to_ready_or_exits_with_the_failure_class() -> anyhow::Result<()> {
    let (host, app, op, view) = managed_with_auth("").await?;
    let before = app.server().await?;

    // Refusals change nothing.
    let r = cli(&app, Some(&view), &["restart", "--flag", "--tp=2", "--yes"]).await?;
    assert_eq!(r.code, 4, "a viewer may not restart: {r:?}");
    assert!(r.err.contains("403"), "{r:?}");
    let r = cli(&app, Some(&op), &["restart", "--flag", "--tp=2"]).await?;
    assert_eq!(r.code, 2, "no terminal, no --yes: {r:?}");
    assert!(r.err.contains("--yes"), "{r:?}");
    let r = cli(
        &app,
        Some(&op),
        &["restart", "--flag", "--bogus=1", "--yes"],
    )
    .await?;
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.err.contains("--bogus") && r.err.contains("--tp"), "{r:?}");
    let r = cli(&app, Some(&op), &["restart", "--flag", "--tp=99", "--yes"]).await?;
    assert_eq!(r.code, 2, "drainwatch checks the value: {r:?}");
    assert!(r.err.contains("--tp"), "{r:?}");
    let r = cli(
        &app,
        Some(&op),
        &["restart", "--flag", "--tp=2", "--reset", "--tp", "--yes"],
    )
    .await?;
    assert_eq!(r.code, 2, "{r:?}");
    let now = app.server().await?;
    assert_eq!(now.generation, before.generation);
    assert_eq!(now.flags, before.flags);
    assert!(
        app.get_json("/api/restarts")
            .await?
            .as_array()
            .is_some_and(|a| a.iter().all(|r| r["kind"] != "restart"))
    );

    // The real thing: the plan and each phase on stderr, the record on stdout.
    let r = cli(
        &app,
        Some(&op),
        &["restart", "--flag", "--tp=2", "--yes", "--json"],
    )
    .await?;
    assert_eq!(r.code, 0, "{r:?}");
    let summary: RestartSummary = serde_json::from_str(r.out.trim())?;
    assert_eq!(summary.outcome, Outcome::Succeeded);
    assert_eq!(summary.to_flags.get("--tp").map(String::as_str), Some("2"));
    assert!(summary.requested_by.starts_with("olga"), "{summary:?}");
    assert!(
        r.err.contains("--tp: 4 → 2"),
        "the plan shows the change: {}",
        r.err
    );
    for phase in ["draining", "verifying", "warming up"] {
        assert!(r.err.contains(phase), "{phase} not shown: {}", r.err);
    }
    let now = app.server().await?;
    assert_eq!(now.phase, Phase::Ready);
    assert_eq!(now.flags.get("--tp").map(String::as_str), Some("2"));
    assert!(now.generation > before.generation);

    // A launch that runs out of GPU memory: exit 12, the classified failure in
    // the JSON, the log's tail in the text.
    let r = cli(
        &app,
        Some(&op),
        &["restart", "--flag", "SIMSERVER_MODE=oom", "--yes", "--json"],
    )
    .await?;
    assert_eq!(r.code, 12, "{r:?}");
    let summary: RestartSummary = serde_json::from_str(r.out.trim())?;
    assert!(
        matches!(
            summary.failure,
            Some(Failure::LaunchFailed {
                cause: LaunchCause::Oom,
                ..
            })
        ),
        "{summary:?}"
    );
    // Back to normal, in text: the outcome line on stdout.
    let r = cli(
        &app,
        Some(&op),
        &["restart", "--reset", "SIMSERVER_MODE", "--yes"],
    )
    .await?;
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.out.contains("succeeded in"), "{}", r.out);

    // GPU 1 raises an XID: the health check refuses the restart before its
    // drain, exit 17, naming the GPU; the override names it and goes through.
    simhost::raise_xid(&host.path(), 1, 79)?;
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let r = cli(&app, Some(&op), &["status"]).await?;
        if r.out.contains("health: GPU 1: XID error (XID 79)") {
            let row = r.out.lines().find(|l| l.trim_start().starts_with("1 "));
            assert!(
                row.is_some_and(|l| l.trim_end().ends_with("XID 79")),
                "{}",
                r.out
            );
            break;
        }
        anyhow::ensure!(
            std::time::Instant::now() < deadline,
            "no XID in status:\n{}",
            r.out
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Refused before anything stopped: exit 17, the GPU named, the server
    // serving on as it was.
    let serving = app.server().await?;
    let r = cli(&app, Some(&op), &["restart", "--yes", "--json"]).await?;
    assert_eq!(r.code, 17, "{r:?}");
    assert!(
        r.err.contains("refuses GPU 1")
            && r.err.contains("XID 79")
            && r.err.contains("nothing was stopped"),
        "{r:?}"
    );
    let now = app.server().await?;
    assert_eq!(
        (now.phase, now.root, now.generation),
        (Phase::Ready, serving.root, serving.generation)
    );
    let r = cli(
        &app,
        Some(&op),
        &["restart", "--yes", "--override-health", "GPU 7"],
    )
    .await?;
    assert_eq!(r.code, 2, "the wrong GPUs are refused: {r:?}");
    assert!(r.err.contains("`GPU 1`"), "{r:?}");
    let r = cli(
        &app,
        Some(&op),
        &["restart", "--yes", "--override-health", "GPU 1"],
    )
    .await?;
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(app.server().await?.phase, Phase::Ready);
    Ok(())
}

#[tokio::test]
async fn bench_waits_for_its_results_and_a_second_one_is_busy() -> anyhow::Result<()> {
    let (_host, app, op, view) = managed_with_auth("").await?;
    let small = [
        "--input-len",
        "16",
        "--output-len",
        "16",
        "--prompts",
        "8",
        "--warmup",
        "2",
        "--repeats",
        "3",
    ];
    let mut args = vec!["bench", "-c", "2,4", "--json"];
    args.extend(small);
    let r = cli(&app, Some(&op), &args).await?;
    assert_eq!(r.code, 0, "{r:?}");
    let run: BenchRun = serde_json::from_str(r.out.trim())?;
    assert_eq!(run.status, RunStatus::Succeeded);
    let levels: Vec<u32> = run.levels.iter().map(|l| l.concurrency).collect();
    assert_eq!(levels, [2, 4]);
    assert!(run.levels.iter().all(|l| l.output_tok_s.median > 0.0));
    assert_eq!(run.repeats.len(), 6);
    // The ledger has the same run.
    let stored = app.get_json(&format!("/api/bench/runs/{}", run.id)).await?;
    assert_eq!(stored["status"], "succeeded");

    // A long run started without waiting; a second one is refused as busy (5).
    let r = cli(
        &app,
        Some(&op),
        &[
            "bench",
            "-c",
            "1",
            "--prompts",
            "2000",
            "--output-len",
            "64",
            "--no-wait",
            "--json",
        ],
    )
    .await?;
    assert_eq!(r.code, 0, "{r:?}");
    let id = serde_json::from_str::<serde_json::Value>(r.out.trim())?["id"]
        .as_i64()
        .expect("an id");
    let mut args = vec!["bench"];
    args.extend(small);
    let r = cli(&app, Some(&op), &args).await?;
    assert_eq!(r.code, 5, "{r:?}");
    assert!(r.err.contains("409"), "{r:?}");
    // Cancelled by another client command; a viewer may not.
    let r = cli(&app, Some(&view), &["bench", "--cancel"]).await?;
    assert_eq!(r.code, 4, "{r:?}");
    let r = cli(&app, Some(&op), &["bench", "--cancel", "--json"]).await?;
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(r.out.trim())?["id"].as_i64(),
        Some(id)
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let run = app.get_json(&format!("/api/bench/runs/{id}")).await?;
        if run["status"] == "cancelled" {
            break;
        }
        anyhow::ensure!(std::time::Instant::now() < deadline, "not cancelled: {run}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Bad settings are drainwatch's to refuse: 2.
    let r = cli(&app, Some(&op), &["bench", "--repeats", "1"]).await?;
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.err.contains("repeats"), "{r:?}");
    Ok(())
}

#[tokio::test]
async fn watch_streams_every_message_as_a_json_line() -> anyhow::Result<()> {
    let (_host, app, _op, view) = managed_with_auth("").await?;
    let mut child = tokio::process::Command::new(bin("drainwatch"))
        .args(["watch", "--json", "--url", &app.url("")])
        .env("DRAINWATCH_TOKEN", &view)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()?;
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let mut next = async || -> anyhow::Result<ServerMsg> {
        let line = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
            .await??
            .ok_or_else(|| anyhow::anyhow!("watch ended"))?;
        Ok(serde_json::from_str(&line)?)
    };
    let ServerMsg::Snapshot(first) = next().await? else {
        anyhow::bail!("the first line is not the snapshot");
    };
    assert!(
        first.presence.iter().any(|p| p.who == "victor"),
        "{:?}",
        first.presence
    );
    let mut samples = 0;
    while samples < 3 {
        if let ServerMsg::Sample(_) = next().await? {
            samples += 1;
        }
    }
    // `status` says who is watching.
    let r = cli(&app, Some(&view), &["status"]).await?;
    assert!(
        r.out.lines().any(|l| l == "connected: victor (viewer)"),
        "{}",
        r.out
    );
    // A restart by someone else shows up as it happens, to its end.
    let id = app.restart(serde_json::json!({"--tp": "2"})).await?;
    let mut phases = Vec::new();
    loop {
        match next().await? {
            ServerMsg::Server(s) if phases.last() != Some(&s.phase) => {
                phases.push(s.phase);
            }
            ServerMsg::Restart(r) if r.id == id && r.outcome != Outcome::Running => {
                assert_eq!(r.outcome, Outcome::Succeeded);
                break;
            }
            _ => {}
        }
    }
    assert!(
        phases.contains(&Phase::Draining) && phases.contains(&Phase::WarmingUp),
        "{phases:?}"
    );
    // Ctrl-C ends it, even while it is stuck writing to a reader that
    // stopped reading (this test has not read for a while: the pipe is full).
    tokio::time::sleep(Duration::from_secs(2)).await;
    let pid = child.id().expect("running");
    tests::signal(pid, libc::SIGINT);
    let status = tokio::time::timeout(Duration::from_secs(10), child.wait()).await??;
    assert_eq!(status.code(), Some(0));
    Ok(())
}

/// A TLS-terminating proxy (as nginx or Caddy would be) in front of
/// `upstream`, with a fresh self-signed certificate for `localhost`; returns
/// its port and the certificate (PEM) a client must trust.
async fn tls_proxy(upstream: String) -> anyhow::Result<(u16, String)> {
    use std::sync::Arc;
    let cert = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()])?;
    let key = rustls::pki_types::PrivateKeyDer::Pkcs8(cert.signing_key.serialize_der().into());
    let config = rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(vec![cert.cert.der().clone()], key)?;
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let port = listener.local_addr()?.port();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let (acceptor, upstream) = (acceptor.clone(), upstream.clone());
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let Ok(mut back) = tokio::net::TcpStream::connect(&upstream).await else {
                    return;
                };
                let _ = tokio::io::copy_bidirectional(&mut tls, &mut back).await;
            });
        }
    });
    Ok((port, cert.cert.pem()))
}

#[tokio::test]
async fn https_and_wss_through_a_tls_proxy() -> anyhow::Result<()> {
    let (host, app, _op, view) = managed_with_auth("").await?;
    let (port, pem) = tls_proxy(app.addr.clone()).await?;
    let ca = host.scratch().join("proxy-ca.pem");
    std::fs::write(&ca, pem)?;
    let url = format!("https://localhost:{port}");
    let client = |args: &[&str], trust: &std::path::Path| {
        let mut cmd = tokio::process::Command::new(bin("drainwatch"));
        cmd.args(args)
            .args(["--url", &url])
            .env("DRAINWATCH_TOKEN", &view)
            .env("SSL_CERT_FILE", trust)
            .env_remove("SSL_CERT_DIR")
            .stdin(Stdio::null())
            .kill_on_drop(true);
        cmd
    };
    // https: the state, as over plain http.
    let out = client(&["status", "--json"], &ca).output().await?;
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let snap: Snapshot = serde_json::from_slice(&out.stdout)?;
    assert_eq!(snap.latest.expect("a sample").gpus.len(), 8);
    // wss: the live stream.
    let mut watch = client(&["watch", "--json"], &ca)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    let mut lines = BufReader::new(watch.stdout.take().expect("stdout")).lines();
    let first = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
        .await??
        .ok_or_else(|| anyhow::anyhow!("watch over wss printed nothing"))?;
    assert!(matches!(
        serde_json::from_str::<ServerMsg>(&first)?,
        ServerMsg::Snapshot(_)
    ));
    tests::signal(watch.id().expect("running"), libc::SIGINT);
    assert_eq!(watch.wait().await?.code(), Some(0));
    // A certificate the client does not trust: refused, nothing sent.
    let elsewhere = host.scratch().join("other-ca.pem");
    std::fs::write(
        &elsewhere,
        rcgen::generate_simple_self_signed(vec!["localhost".to_owned()])?
            .cert
            .pem(),
    )?;
    let out = client(&["status"], &elsewhere).output().await?;
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("certificate"),
        "{out:?}"
    );
    Ok(())
}
