//! The health gate through the real restart path: a GPU made unhealthy in
//! the simulated host (an XID raised, a row remap pending, an uncorrected ECC
//! error, a narrow PCIe link) is read through the fake NVML, and the next
//! launch is refused, warned about or let through as `[health]` says; an
//! operator overrides a refusal once by typing the GPUs, and it is audited.
//! What is wrong before a restart refuses it before anything stops (409, the
//! server still serving); what goes wrong during the drain refuses the launch
//! after it.

use std::time::Duration;

use serde_json::json;
use shared::restart::Phase;
use tests::SimHost;
use tests::managed::{ServerSpec, notes, spawn_managed};

const POLICY: &str = r#"
[health]
xid = "refuse"
row_remap = "refuse"
ecc = "warn"
pcie = "ignore"
"#;

#[tokio::test]
async fn refused_warned_or_ignored_as_configured_and_overridden_once() -> anyhow::Result<()> {
    let host = SimHost::new(200);
    let spec = ServerSpec {
        warmup_ms: 800,
        extra: POLICY.to_owned(),
        ..ServerSpec::default()
    };
    let app = spawn_managed(&host, &spec, &[])?;
    app.start_server().await?;

    // GPU 2 raises an XID (refuse), GPU 3 an uncorrected ECC error (warn),
    // GPU 1's link drops to x4 (ignore); GPU 5 is not the server's.
    simhost::raise_xid(&host.path(), 2, 79)?;
    simhost::set_health(&host.path(), 3, |h| h.ecc_volatile.uncorrected = 1)?;
    simhost::set_health(&host.path(), 1, |h| h.pcie.width_current = 4)?;
    simhost::raise_xid(&host.path(), 5, 48)?;

    // Refused before anything stops: 409 naming GPU 2 alone, and the server
    // serves on, untouched.
    let before = app.server().await?;
    let (code, body) = app
        .post(
            "/api/restart",
            &json!({"generation": before.generation, "flags": {}, "confirm": "sim"}),
        )
        .await?;
    assert_eq!(code, 409, "{body}");
    assert_eq!(body["code"], "unhealthy", "{body}");
    let issues = body["unhealthy"].as_array().expect("issues");
    assert_eq!(issues.len(), 1, "only GPU 2's XID refuses: {body}");
    assert_eq!(issues[0]["gpu_index"], 2);
    assert_eq!(issues[0]["reason"], "xid");
    assert!(
        issues[0]["detail"]
            .as_str()
            .unwrap_or_default()
            .starts_with("XID 79 at ")
    );
    let error = body["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("GPU 2") && error.contains("nothing was stopped"),
        "{error}"
    );
    let s = app.server().await?;
    assert_eq!(s.phase, Phase::Ready, "{s:?}");
    assert_eq!((s.root, s.generation), (before.root, before.generation));
    assert!(
        host.signals_sent().is_empty(),
        "nothing was signalled: {:?}",
        host.signals_sent()
    );
    let restarts = app.get_json("/api/restarts").await?;
    assert_eq!(
        restarts.as_array().map(Vec::len),
        Some(1),
        "only the start: {restarts}"
    );

    // An override must name exactly the refused GPUs.
    let g = s.generation;
    for typed in ["GPU 3", "GPU 2, 3", "yes"] {
        let (code, body) = app
            .post(
                "/api/restart",
                &json!({"generation": g, "confirm": "sim", "override_health": typed}),
            )
            .await?;
        assert_eq!(code, 400, "{typed}: {body}");
        assert!(
            body["error"]
                .as_str()
                .unwrap_or_default()
                .contains("`GPU 2`"),
            "{body}"
        );
    }
    let (code, body) = app
        .post(
            "/api/restart",
            &json!({"generation": g, "confirm": "sim", "override_health": "gpu 2"}),
        )
        .await?;
    assert_eq!(code, 202, "{body}");
    let id = body["id"].as_i64().expect("id");
    let d = app.finished_restart(id, Duration::from_secs(30)).await?;
    assert_eq!(d["summary"]["outcome"], "succeeded", "{d}");
    let n = notes(&d);
    assert!(n.contains("health warnings"), "{n}");
    assert!(
        n.contains("GPU 2: XID error") && n.contains("overridden by an operator"),
        "{n}"
    );
    assert!(n.contains("GPU 3: uncorrected ECC"), "{n}");
    assert!(
        !n.contains("GPU 1:") && !n.contains("GPU 5:"),
        "ignored and foreign GPUs: {n}"
    );
    let audit = app.get_json("/api/audit?limit=50").await?;
    let overridden = audit
        .as_array()
        .expect("audit")
        .iter()
        .find(|a| {
            a["outcome"]
                .as_str()
                .is_some_and(|o| o.starts_with("accepted"))
                && a["action"] == "restart"
        })
        .expect("the restart is audited");
    assert!(
        overridden["detail"]
            .as_str()
            .unwrap_or_default()
            .contains("health check overridden: GPU 2: XID error"),
        "{overridden}"
    );
    assert!(
        audit
            .as_array()
            .expect("audit")
            .iter()
            .any(|a| a["outcome"] == "refused"
                && a["detail"]
                    .as_str()
                    .is_some_and(|d| d.contains("refuses GPU 2"))),
        "the refusal is audited: {audit}"
    );

    // The launch marked every GPU: the old XID and ECC error are forgiven,
    // and the next restart needs no override.
    let id = app.restart(json!({})).await?;
    let d = app.finished_restart(id, Duration::from_secs(30)).await?;
    assert_eq!(d["summary"]["outcome"], "succeeded", "{d}");
    assert!(!notes(&d).contains("health warnings"), "{}", notes(&d));
    assert!(host.foreign_signals().is_empty());
    Ok(())
}

#[tokio::test]
async fn a_pending_row_remap_refuses_before_anything_stops() -> anyhow::Result<()> {
    let host = SimHost::new(200);
    let spec = ServerSpec {
        warmup_ms: 800,
        ..ServerSpec::default()
    };
    let app = spawn_managed(&host, &spec, &[])?;
    let before = app.start_server().await?;
    simhost::set_health(&host.path(), 0, |h| h.remapped_rows.pending = true)?;
    let (code, body) = app
        .post(
            "/api/restart",
            &json!({"generation": before.generation, "flags": {"--tp": "2"}, "confirm": "sim"}),
        )
        .await?;
    assert_eq!(code, 409, "{body}");
    assert_eq!(
        body["unhealthy"][0]["detail"],
        "a row remap is pending a reset"
    );
    // Nothing stopped: the same server, the same generation, no signal sent.
    let s = app.server().await?;
    assert_eq!(
        (s.phase, s.root, s.generation),
        (Phase::Ready, before.root, before.generation)
    );
    assert!(host.signals_sent().is_empty(), "{:?}", host.signals_sent());
    // The CLI says so with its own exit code.
    let out = std::process::Command::new(tests::bin("drainwatch"))
        .args([
            "restart",
            "--url",
            &app.url(""),
            "--yes",
            "--flag",
            "--tp=2",
        ])
        .stdin(std::process::Stdio::null())
        .output()?;
    assert_eq!(
        out.status.code(),
        Some(17),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("row remap"));
    // The GPU was reset: the remap is done, and the restart goes through.
    simhost::set_health(&host.path(), 0, |h| {
        h.remapped_rows.pending = false;
        h.remapped_rows.uncorrectable = 1;
    })?;
    let id = app.restart(json!({"--tp": "2"})).await?;
    let d = app.finished_restart(id, Duration::from_secs(30)).await?;
    assert_eq!(d["summary"]["outcome"], "succeeded", "{d}");
    assert!(host.foreign_signals().is_empty());
    Ok(())
}

#[tokio::test]
async fn an_xid_during_the_drain_refuses_the_launch_after_it() -> anyhow::Result<()> {
    let host = SimHost::new(200);
    let spec = ServerSpec {
        warmup_ms: 500,
        ..ServerSpec::default()
    };
    let app = spawn_managed(&host, &spec, &[])?;
    app.start_server().await?;
    // A server that takes seconds to drain.
    let id = app.restart(json!({"SIMSERVER_MODE": "slow-drain"})).await?;
    let d = app.finished_restart(id, Duration::from_secs(30)).await?;
    assert_eq!(d["summary"]["outcome"], "succeeded", "{d}");

    let id = app.restart(json!({"SIMSERVER_MODE": null})).await?;
    app.wait_for_state("the drain", Duration::from_secs(10), |s| {
        s.server
            .as_ref()
            .is_some_and(|v| v.phase == Phase::Draining)
    })
    .await?;
    simhost::raise_xid(&host.path(), 1, 79)?;
    let d = app.finished_restart(id, Duration::from_secs(30)).await?;
    assert_eq!(d["summary"]["failure"]["kind"], "unhealthy", "{d}");
    assert_eq!(d["summary"]["failure"]["issues"][0]["gpu_index"], 1, "{d}");
    // Drained and verified, then refused: nothing launched.
    assert!(notes(&d).contains("verified"), "{}", notes(&d));
    let s = app
        .wait_phase(Phase::Failed, Duration::from_secs(5))
        .await?;
    assert!(s.root.is_none(), "nothing runs: {s:?}");
    assert!(host.foreign_signals().is_empty());
    Ok(())
}
