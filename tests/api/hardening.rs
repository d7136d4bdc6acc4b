//! What a stranger or a viewer can make drainwatch store, allocate or send:
//! the audit log under a flood, request bodies kept out of it, benchmarks too
//! big to hold, framing and sniffing, host-wide limits on sockets and login
//! failures, sessions per token, `__Host-` cookies, and a `/healthz` that says
//! only liveness.

use std::net::IpAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use serde_json::{Value, json};
use shared::{ErrorCode, ServerMsg};
use tests::managed::{ServerSpec, spawn_managed};
use tests::ws::WsClient;
use tests::{SimHost, TestApp, auth_file, bearer_client, spawn_app};

use super::auth::managed_with_auth;

const T: Duration = Duration::from_secs(10);

/// The store's bytes on disk: the database and its write-ahead log.
fn store_bytes(data: &Path) -> u64 {
    ["drainwatch.sqlite3", "drainwatch.sqlite3-wal"]
        .iter()
        .filter_map(|f| std::fs::metadata(data.join(f)).ok())
        .map(|m| m.len())
        .sum()
}

/// drainwatch's resident memory, in bytes.
fn rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kib| kib * 1024)
}

/// A client whose connections come from `ip` (any of 127.0.0.0/8 is ours).
fn from(ip: &str) -> reqwest::Client {
    reqwest::Client::builder()
        .local_address(ip.parse::<IpAddr>().ok())
        .build()
        .expect("client")
}

/// The audit log, newest first, read as the operator.
async fn audit(app: &TestApp) -> anyhow::Result<Vec<Value>> {
    Ok(app
        .get_json("/api/audit?limit=1000")
        .await?
        .as_array()
        .cloned()
        .unwrap_or_default())
}

/// Waits until `done` holds for the audit log.
async fn wait_audit(app: &TestApp, done: impl Fn(&[Value]) -> bool) -> anyhow::Result<Vec<Value>> {
    let deadline = Instant::now() + T;
    loop {
        let log = audit(app).await?;
        if done(&log) {
            return Ok(log);
        }
        anyhow::ensure!(Instant::now() < deadline, "audit log: {log:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn refused_count(log: &[Value]) -> u64 {
    log.iter()
        .filter(|a| a["kind"] == "refusals")
        .map(|a| a["count"].as_u64().unwrap_or(0))
        .sum()
}

#[tokio::test]
async fn a_strangers_flood_is_counted_not_stored_and_pushes_out_no_action() -> anyhow::Result<()> {
    let (host, app, _op, _view) = managed_with_auth("").await?;
    let data = host.scratch().join("data");
    // The operator's start is the action the flood must not push out.
    let mine = wait_audit(&app, |l| l.iter().any(|a| a["action"] == "start")).await?;
    assert!(mine.iter().any(|a| a["kind"] == "action"), "{mine:?}");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = store_bytes(&data);

    // From four addresses at once: 1,000 paths of 60 KB and 19,000 short ones.
    let long = format!("/api/{}", "x".repeat(60_000));
    let addrs = ["127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5"];
    let mut tasks = Vec::new();
    for (n, ip) in addrs.iter().enumerate() {
        let (client, url, long_url) = (from(ip), app.url("/api/x"), app.url(&long));
        tasks.push(tokio::spawn(async move {
            let mut sent = 0u64;
            let mut stream = futures_util::stream::iter(0..5_000u32)
                .map(|i| {
                    let url = if i % 20 == n as u32 { &long_url } else { &url };
                    client.post(url).json(&json!({"token": "x"})).send()
                })
                .buffer_unordered(8);
            while let Some(r) = stream.next().await {
                let r = r?;
                anyhow::ensure!(r.status() == 401, "{}", r.status());
                sent += 1;
            }
            Ok::<u64, anyhow::Error>(sent)
        }));
    }
    let mut sent = 0;
    for t in tasks {
        sent += t.await??;
    }
    assert_eq!(sent, 20_000);

    // Every refusal counted, a row per address and minute, each cut short.
    let log = wait_audit(&app, |l| refused_count(l) >= sent).await?;
    assert_eq!(refused_count(&log), sent, "{log:?}");
    let rows: Vec<_> = log.iter().filter(|a| a["kind"] == "refusals").collect();
    assert!(rows.len() <= 2 * addrs.len(), "{rows:?}");
    for r in &rows {
        assert!(
            addrs.contains(&r["peer"].as_str().unwrap_or_default()),
            "{r}"
        );
        assert!(r["action"].as_str().unwrap_or_default().len() <= 256, "{r}");
        assert!(
            r["detail"]
                .as_str()
                .unwrap_or_default()
                .starts_with("401: "),
            "{r}"
        );
    }
    // The operator's entry is still there, and the store barely grew.
    assert!(
        log.iter()
            .any(|a| a["action"] == "start" && a["kind"] == "action"),
        "{log:?}"
    );
    // Asked for actions alone, the flood's rows are not in the way.
    let actions = app.get_json("/api/audit?kind=action&limit=5").await?;
    let actions = actions.as_array().cloned().unwrap_or_default();
    assert!(actions.iter().all(|a| a["kind"] == "action"), "{actions:?}");
    assert!(
        actions.iter().any(|a| a["action"] == "start"),
        "{actions:?}"
    );
    let r = app
        .http
        .get(app.url("/api/audit?kind=everything"))
        .send()
        .await?;
    assert_eq!(r.status(), 400);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let grew = store_bytes(&data).saturating_sub(before);
    assert!(grew < 1 << 20, "the store grew by {grew} bytes");
    assert!(rss(app.proc.pid()) < 150 << 20);
    Ok(())
}

#[tokio::test]
async fn a_body_that_does_not_parse_is_audited_by_its_class_never_its_text() -> anyhow::Result<()> {
    let (_host, app, op, _view) = managed_with_auth("").await?;
    let secret = format!("dw_{}", "5ec7e7".repeat(10));
    // A bare JSON string holding a token, to the login.
    let r = reqwest::Client::new()
        .post(app.url("/api/login"))
        .json(&json!(secret))
        .send()
        .await?;
    assert_eq!(r.status(), 400);
    let body: Value = r.json().await?;
    assert!(body["error"].is_string(), "{body}");
    // The operator's malformed restart and benchmark, and a body that is not JSON.
    let operator = bearer_client(&op);
    for (path, body) in [
        (
            "/api/restart",
            json!({"generation": secret, "confirm": "sim"}),
        ),
        (
            "/api/stop",
            json!({"generation": 1, "confirm": "sim", secret.clone(): 1}),
        ),
        ("/api/bench", json!({"num_prompts": secret})),
    ] {
        let r = operator.post(app.url(path)).json(&body).send().await?;
        assert_eq!(r.status(), 400, "{path}");
    }
    // Not JSON at all, from another address (its own row in the log).
    let r = from("127.0.0.7")
        .post(app.url("/api/login"))
        .header("content-type", "application/json")
        .body(format!("{{\"token\": \"{secret}"))
        .send()
        .await?;
    assert_eq!(r.status(), 400);

    let log = wait_audit(&app, |l| {
        refused_count(l) >= 4 && l.iter().any(|a| a["action"] == "benchmark")
    })
    .await?;
    let text = serde_json::to_string(&log)?;
    assert!(
        !text.contains("5ec7e7"),
        "a body reached the audit log: {text}"
    );
    assert!(text.contains("body is not the expected JSON"), "{text}");
    assert!(text.contains("body is not JSON"), "{text}");
    Ok(())
}

#[tokio::test]
async fn every_page_forbids_framing_sniffing_and_referrers() -> anyhow::Result<()> {
    let host = SimHost::new(100);
    let (auth, _op, view) = auth_file(host.scratch(), "");
    let app = spawn_app(&host, &["--auth", auth.to_str().expect("utf-8")])?;
    let viewer = bearer_client(&view);
    for path in [
        "/",
        "/login",
        "/login.js",
        "/style.css",
        "/healthz",
        "/api/state",
        "/api/nope",
    ] {
        let r = viewer.get(app.url(path)).send().await?;
        let h = r.headers();
        let csp = h
            .get("content-security-policy")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default();
        for part in [
            "default-src 'self'",
            "script-src 'self' 'wasm-unsafe-eval'",
            "frame-ancestors 'none'",
        ] {
            assert!(csp.contains(part), "{path}: CSP {csp:?} lacks {part}");
        }
        assert_eq!(h["x-frame-options"], "DENY", "{path}");
        assert_eq!(h["x-content-type-options"], "nosniff", "{path}");
        assert_eq!(h["referrer-policy"], "no-referrer", "{path}");
    }
    // The login page runs its script from a file: the policy allows no inline one.
    let page = viewer.get(app.url("/login")).send().await?.text().await?;
    assert!(page.contains(r#"<script src="/login.js">"#), "{page}");
    assert!(!page.contains("<script>"), "{page}");
    let js = viewer.get(app.url("/login.js")).send().await?;
    assert!(
        js.headers()["content-type"]
            .to_str()?
            .starts_with("text/javascript")
    );
    Ok(())
}

#[tokio::test]
async fn behind_https_the_session_cookie_is_host_prefixed_and_secure() -> anyhow::Result<()> {
    let host = SimHost::new(100);
    let (auth, op, _view) = auth_file(host.scratch(), "public_origin = \"https://gpu.example\"\n");
    let app = spawn_app(&host, &["--auth", auth.to_str().expect("utf-8")])?;
    let r = reqwest::Client::new()
        .post(app.url("/api/login"))
        .json(&json!({"token": op}))
        .send()
        .await?;
    assert_eq!(r.status(), 200);
    let set = r.headers()["set-cookie"].to_str()?.to_owned();
    let csrf = r.json::<Value>().await?["csrf"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(set.starts_with("__Host-drainwatch_session="), "{set}");
    assert!(
        set.contains("; Secure") && set.contains("; Path=/"),
        "{set}"
    );
    assert!(!set.to_ascii_lowercase().contains("domain="), "{set}");
    let id = set
        .split(';')
        .next()
        .and_then(|kv| kv.split_once('='))
        .map(|(_, v)| v.to_owned())
        .expect("a value");
    let session = |cookie: String| {
        reqwest::Client::new()
            .get(app.url("/api/session"))
            .header("cookie", cookie)
            .send()
    };
    let ok = session(format!("__Host-drainwatch_session={id}")).await?;
    assert_eq!(ok.status(), 200);
    // The unprefixed name (which any http page of the domain could set) is not ours.
    let plain = session(format!("drainwatch_session={id}")).await?;
    assert_eq!(plain.status(), 401);
    let out = reqwest::Client::new()
        .post(app.url("/api/logout"))
        .header("cookie", format!("__Host-drainwatch_session={id}"))
        .header("x-csrf-token", csrf)
        .send()
        .await?;
    let cleared = out.headers()["set-cookie"].to_str()?;
    assert!(
        cleared.starts_with("__Host-drainwatch_session=;") && cleared.contains("; Secure"),
        "{cleared}"
    );
    Ok(())
}

#[tokio::test]
async fn sockets_are_limited_per_address_and_for_the_whole_host() -> anyhow::Result<()> {
    let host = SimHost::new(100);
    let app = spawn_app(&host, &["--sample-interval-ms", "1000"])?;
    let mut open = Vec::new();
    // 8 addresses × 32 sockets: the host's 256.
    for a in 2..10 {
        let ip = format!("127.0.0.{a}");
        for _ in 0..32 {
            let ws = WsClient::connect_from(&app.addr, &ip).await;
            open.push(ws.map_err(|e| anyhow::anyhow!("socket {} from {ip}: {e:?}", open.len()))?);
        }
    }
    let refused = WsClient::connect_from(&app.addr, "127.0.0.2").await;
    assert_eq!(refused.err(), Some(Some(429)));
    let refused = WsClient::connect_from(&app.addr, "127.0.0.10").await;
    assert_eq!(refused.err(), Some(Some(503)));
    // One closes: another may come.
    drop(open.pop());
    let deadline = Instant::now() + T;
    loop {
        match WsClient::connect_from(&app.addr, "127.0.0.10").await {
            Ok(_) => break,
            Err(e) => anyhow::ensure!(Instant::now() < deadline, "still refused: {e:?}"),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}

#[tokio::test]
async fn failed_logins_are_limited_for_every_address_together() -> anyhow::Result<()> {
    let host = SimHost::new(100);
    let (auth, op, _view) = auth_file(host.scratch(), "");
    let app = spawn_app(&host, &["--auth", auth.to_str().expect("utf-8")])?;
    let login = |ip: String, token: String| {
        let url = app.url("/api/login");
        async move {
            from(&ip)
                .post(url)
                .json(&json!({"token": token}))
                .send()
                .await
                .map(|r| r.status().as_u16())
        }
    };
    // 20 addresses, each within its own 5: 100 failures in all.
    for a in 0..20 {
        for _ in 0..5 {
            assert_eq!(
                login(format!("127.0.1.{}", a + 1), "dw_wrong".into()).await?,
                401
            );
        }
    }
    // A fresh address's wrong token is refused without being looked at, and
    // no stranger's flood locks the team out: the right token logs in.
    let r = from("127.0.2.1")
        .post(app.url("/api/login"))
        .json(&json!({"token": "dw_wrong"}))
        .send()
        .await?;
    assert_eq!(r.status(), 429);
    assert!(r.headers().contains_key("retry-after"));
    let body: Value = r.json().await?;
    assert!(
        body["error"]
            .as_str()
            .is_some_and(|e| e.contains("everyone together")),
        "{body}"
    );
    let r = from("127.0.2.1")
        .post(app.url("/api/login"))
        .json(&json!({"token": op}))
        .send()
        .await?;
    assert_eq!(r.status(), 200);
    Ok(())
}

#[tokio::test]
async fn a_token_that_logs_in_again_and_again_ends_only_its_own_sessions() -> anyhow::Result<()> {
    let host = SimHost::new(100);
    let (auth, op, view) = auth_file(host.scratch(), "");
    let app = spawn_app(&host, &["--auth", auth.to_str().expect("utf-8")])?;
    let login = |token: &str| {
        let req = reqwest::Client::new()
            .post(app.url("/api/login"))
            .json(&json!({"token": token}))
            .send();
        async move {
            let r = req.await?;
            anyhow::ensure!(r.status() == 200, "{}", r.status());
            let set = r.headers()["set-cookie"].to_str()?.to_owned();
            Ok::<String, anyhow::Error>(set.split(';').next().unwrap_or_default().to_owned())
        }
    };
    let operator = login(&op).await?;
    let first = login(&view).await?;
    for _ in 0..100 {
        login(&view).await?;
    }
    let status = |cookie: String| {
        reqwest::Client::new()
            .get(app.url("/api/session"))
            .header("cookie", cookie)
            .send()
    };
    assert_eq!(
        status(operator).await?.status(),
        200,
        "the operator's session stays"
    );
    assert_eq!(
        status(first).await?.status(),
        401,
        "the viewer's oldest went"
    );
    Ok(())
}

#[tokio::test]
async fn healthz_says_only_whether_drainwatch_is_live() -> anyhow::Result<()> {
    let host = SimHost::new(100);
    let app = spawn_app(&host, &[])?;
    let _ws = WsClient::connect(&app.addr).await?;
    let r = reqwest::Client::new()
        .get(app.url("/healthz"))
        .send()
        .await?;
    let body: Value = r.json().await?;
    let mut keys: Vec<_> = body.as_object().expect("object").keys().cloned().collect();
    keys.sort();
    assert_eq!(keys, ["last_sample_age_ms", "nvml", "status"], "{body}");
    Ok(())
}

#[tokio::test]
async fn a_socket_gets_at_most_one_snapshot_a_second_on_request() -> anyhow::Result<()> {
    let host = SimHost::new(100);
    let app = spawn_app(&host, &["--sample-interval-ms", "50"])?;
    let mut ws = WsClient::connect(&app.addr).await?;
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    let (mut snapshots, mut too_soon) = (0, 0);
    for _ in 0..10 {
        ws.send_text(r#"{"type":"resync"}"#).await?;
    }
    let deadline = Instant::now() + Duration::from_secs(3);
    while snapshots + too_soon < 10 + 1 && Instant::now() < deadline {
        match ws.next_msg(T).await? {
            ServerMsg::Snapshot(_) => snapshots += 1,
            ServerMsg::Error {
                code: ErrorCode::TooSoon,
                ..
            } => too_soon += 1,
            _ => {}
        }
    }
    // The first snapshot (at connect) came before; of ten asked for now, one.
    assert_eq!((snapshots, too_soon), (2, 9));
    Ok(())
}

#[tokio::test]
async fn a_benchmark_too_big_to_hold_is_refused_and_a_cancelled_one_lets_go() -> anyhow::Result<()>
{
    let host = SimHost::new(100);
    let app = spawn_managed(&host, &ServerSpec::default(), &[])?;
    app.start_server().await?;
    let pid = app.proc.pid();
    // Every limit at its top: a 400 that names the bound, and no run.
    let (code, body) = app
        .post(
            "/api/bench",
            &json!({"concurrency": [1024], "num_prompts": 100000, "input_len": 131072}),
        )
        .await?;
    assert_eq!(code, 400, "{body}");
    assert!(
        body["error"].as_str().is_some_and(|e| e.contains("64 MiB")),
        "{body}"
    );
    let runs = app.get_json("/api/bench/runs").await?;
    assert_eq!(runs.as_array().map(Vec::len), Some(0), "{runs}");

    // 300 prompts of the longest input: made one at a time, never all at once.
    let base = rss(pid);
    let (code, body) = app
        .post(
            "/api/bench",
            &json!({"concurrency": [1], "num_prompts": 300, "input_len": 131072,
                    "output_len": 4, "warmup": 0, "repeats": 3}),
        )
        .await?;
    assert_eq!(code, 202, "{body}");
    let mut peak = 0;
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(3) {
        peak = peak.max(rss(pid));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        app.server().await?.bench.is_some(),
        "the run should still be going"
    );
    assert!(
        peak < base + (64 << 20) && peak < 150 << 20,
        "RSS went from {base} to {peak} bytes"
    );
    let (code, _) = app.post("/api/bench/cancel", &json!({})).await?;
    assert_eq!(code, 202);
    // Cancelled, a restart is taken at once.
    let deadline = Instant::now() + T;
    let g = app.server().await?.generation;
    loop {
        let (code, body) = app
            .post(
                "/api/restart",
                &json!({"generation": g, "flags": {}, "confirm": "sim"}),
            )
            .await?;
        if code == 202 {
            break;
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "restart still refused: {code} {body}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(rss(pid) < 150 << 20);
    Ok(())
}
