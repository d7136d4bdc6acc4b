//! The guards: one operation at a time, stale views, typed confirmation, hostile
//! input. Every refusal is a clear 4xx, changes nothing, and is audited.

use std::time::Duration;

use serde_json::{Value, json};
use shared::restart::Phase;
use tests::managed::{ServerSpec, spawn_managed};
use tests::{SimHost, TestApp};

async fn ready() -> anyhow::Result<(SimHost, TestApp)> {
    let host = SimHost::new(200);
    let spec = ServerSpec {
        warmup_ms: 1_500,
        ..ServerSpec::default()
    };
    let app = spawn_managed(&host, &spec, &[])?;
    app.start_server().await?;
    Ok((host, app))
}

#[tokio::test]
async fn ten_simultaneous_restarts_run_exactly_one() -> anyhow::Result<()> {
    let (_host, app) = ready().await?;
    let g = app.server().await?.generation;
    let body = json!({"generation": g, "flags": {"--tp": "3"}, "confirm": "sim"});
    let results =
        futures_util::future::join_all((0..10).map(|_| app.post("/api/restart", &body))).await;
    let mut accepted = 0;
    for r in results {
        let (code, body) = r?;
        match code {
            202 => accepted += 1,
            409 => {
                let err = body["error"].as_str().unwrap_or_default();
                // Refused while the first waits for the health check, or
                // once it runs.
                assert!(
                    err.contains("already running")
                        || err.contains("changed")
                        || err.contains("waits for the GPUs' health check"),
                    "{body}"
                );
                if err.contains("already running") {
                    assert_eq!(body["running"]["kind"], "restart", "{body}");
                }
            }
            other => anyhow::bail!("unexpected {other}: {body}"),
        }
    }
    assert_eq!(accepted, 1);
    let ready = app
        .wait_phase(Phase::Ready, Duration::from_secs(30))
        .await?;
    assert_eq!(ready.generation, g + 1);
    let restarts = app.get_json("/api/restarts").await?;
    assert_eq!(
        restarts.as_array().map(Vec::len),
        Some(2),
        "start + one restart: {restarts}"
    );
    let audit = app.get_json("/api/audit?limit=100").await?;
    let refused = audit
        .as_array()
        .expect("audit")
        .iter()
        .filter(|a| a["outcome"] == "refused")
        .count();
    assert_eq!(refused, 9);
    Ok(())
}

#[tokio::test]
async fn hostile_and_confused_requests_are_refused_and_change_nothing() -> anyhow::Result<()> {
    let (_host, app) = ready().await?;
    let before = app.server().await?;
    let g = before.generation;
    let cases: Vec<(Value, u16, &str)> = vec![
        (
            json!({"generation": g, "flags": {"--rm-rf": "/"}, "confirm": "sim"}),
            400,
            "unknown flag `--rm-rf`",
        ),
        (
            json!({"generation": g, "flags": {"--tp": "eight"}, "confirm": "sim"}),
            400,
            "`--tp` must be an integer from 1 to 4",
        ),
        (
            json!({"generation": g, "flags": {"--tp": "4; reboot"}, "confirm": "sim"}),
            400,
            "`--tp`",
        ),
        (
            json!({"generation": g, "flags": {"SIMSERVER_MODE": "$(reboot)"}, "confirm": "sim"}),
            400,
            "must be one of",
        ),
        (
            json!({"generation": g, "flags": {}, "confirm": "prod"}),
            400,
            "to confirm",
        ),
        (
            json!({"generation": g + 7, "flags": {}, "confirm": "sim"}),
            409,
            "changed since you looked",
        ),
        (json!({"generation": g, "flags": {}}), 400, "confirm"),
        (
            json!({"generation": "one", "confirm": "sim"}),
            400,
            "generation",
        ),
        (
            json!({"generation": g, "confirm": "sim", "shell": "rm -rf /"}),
            400,
            "unknown field",
        ),
    ];
    for (body, want, needle) in cases {
        let (code, resp) = app.post("/api/restart", &body).await?;
        assert_eq!(code, want, "{body} → {resp}");
        assert!(
            resp["error"].as_str().unwrap_or_default().contains(needle),
            "{body} → {resp}"
        );
    }
    // Not JSON, and too big.
    let r = app
        .http
        .post(app.url("/api/restart"))
        .body("restart please")
        .header("content-type", "application/json")
        .send()
        .await?;
    assert_eq!(r.status(), 400);
    let r = app
        .http
        .post(app.url("/api/restart"))
        .body("{}")
        .send()
        .await?;
    assert_eq!(r.status(), 415);
    let huge = json!({"generation": g, "confirm": "sim", "flags": {"--tp": "x".repeat(100_000)}});
    let (code, resp) = app.post("/api/restart", &huge).await?;
    assert_eq!(code, 413, "{resp}");
    // Stop takes no flags.
    let (code, _) = app
        .post(
            "/api/stop",
            &json!({"generation": g, "confirm": "sim", "flags": {}}),
        )
        .await?;
    assert_eq!(code, 400);
    // Bad ids and limits.
    assert_eq!(
        app.http
            .get(app.url("/api/restarts/abc"))
            .send()
            .await?
            .status(),
        400
    );
    assert_eq!(
        app.http
            .get(app.url("/api/restarts/99999"))
            .send()
            .await?
            .status(),
        404
    );
    assert_eq!(
        app.http
            .get(app.url("/api/restarts?limit=0"))
            .send()
            .await?
            .status(),
        400
    );

    // Nothing changed: same generation, same root, only the start in the history.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let after = app.server().await?;
    assert_eq!(
        (after.generation, after.root, after.phase),
        (before.generation, before.root, Phase::Ready)
    );
    assert_eq!(
        app.get_json("/api/restarts")
            .await?
            .as_array()
            .map(Vec::len),
        Some(1)
    );
    let audit = app.get_json("/api/audit?limit=100").await?;
    let details: Vec<&str> = audit
        .as_array()
        .expect("audit")
        .iter()
        .map(|a| a["detail"].as_str().unwrap_or_default())
        .collect();
    assert!(details.iter().any(|d| d.contains("--rm-rf")), "{audit}");
    // Refused before the manager saw them, and counted all the same (a row a
    // minute for this caller), by their class: the body itself is not kept.
    let refusals: Vec<&Value> = audit
        .as_array()
        .expect("audit")
        .iter()
        .filter(|a| a["kind"] == "refusals")
        .collect();
    let counted: u64 = refusals.iter().filter_map(|a| a["count"].as_u64()).sum();
    assert_eq!(counted, 7, "{audit}");
    for r in &refusals {
        let d = r["detail"].as_str().unwrap_or_default();
        assert!(
            ["400: body is not", "415: send the body as JSON", "413: "]
                .iter()
                .any(|w| d.starts_with(w)),
            "{r}"
        );
    }
    assert!(!audit.to_string().contains("rm -rf /"), "{audit}");
    Ok(())
}

/// Every error is JSON with a message, also axum's own rejections.
#[tokio::test]
async fn every_error_answers_in_json() -> anyhow::Result<()> {
    let (_host, app) = ready().await?;
    let cases = [
        ("GET", "/api/restarts?limit=many", 400, "limit"),
        ("GET", "/api/flagsets/diff?a=x", 400, "b"),
        ("DELETE", "/api/restart", 405, "method"),
        ("GET", "/api/restart", 405, "method"),
        ("GET", "/ws", 400, "upgrade"),
        ("GET", "/api/nothing-here", 404, "no such endpoint"),
    ];
    for (method, path, want, needle) in cases {
        let r = app
            .http
            .request(method.parse()?, app.url(path))
            .send()
            .await?;
        assert_eq!(r.status().as_u16(), want, "{method} {path}");
        let ct = r.headers()["content-type"].to_str()?.to_owned();
        assert!(ct.starts_with("application/json"), "{method} {path}: {ct}");
        let body: Value = r.json().await?;
        let err = body["error"].as_str().unwrap_or_default().to_lowercase();
        assert!(err.contains(needle), "{method} {path}: {body}");
    }
    // The wrong method on a route that changes things is an attempt, and audited.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let audit = app.get_json("/api/audit?limit=100").await?;
        if audit.as_array().is_some_and(|a| {
            a.iter().any(|e| {
                e["action"] == "restart"
                    && e["detail"].as_str().is_some_and(|d| d.starts_with("405: "))
            })
        }) {
            break;
        }
        anyhow::ensure!(std::time::Instant::now() < deadline, "not audited: {audit}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}

#[tokio::test]
async fn stop_then_start_and_operations_that_make_no_sense_now() -> anyhow::Result<()> {
    let (_host, app) = ready().await?;
    let g = app.server().await?.generation;
    let (code, body) = app
        .post("/api/start", &json!({"generation": g, "confirm": "sim"}))
        .await?;
    assert_eq!(code, 409, "start while running: {body}");
    let (code, _) = app
        .post("/api/stop", &json!({"generation": g, "confirm": "sim"}))
        .await?;
    assert_eq!(code, 202);
    app.wait_phase(Phase::Stopped, Duration::from_secs(30))
        .await?;
    let (code, body) = app
        .post("/api/stop", &json!({"generation": g, "confirm": "sim"}))
        .await?;
    assert_eq!(code, 409, "stop while stopped: {body}");
    let (code, body) = app
        .post("/api/adopt", &json!({"generation": g, "confirm": "sim"}))
        .await?;
    assert_eq!(code, 409, "nothing to adopt: {body}");
    app.start_server().await?;
    Ok(())
}

#[tokio::test]
async fn without_a_config_there_is_nothing_to_restart() -> anyhow::Result<()> {
    let host = SimHost::new(100);
    let app = tests::spawn_app(&host, &[])?;
    let (code, body) = app
        .post("/api/restart", &json!({"generation": 0, "confirm": "x"}))
        .await?;
    assert_eq!(code, 404, "{body}");
    assert!(app.state().await?.server.is_none());
    Ok(())
}
