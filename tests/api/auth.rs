//! Authentication, roles, CSRF, origins and limits, over real HTTP and
//! WebSockets against the real binary.

use std::time::Duration;

use serde_json::{Value, json};
use tests::managed::{ServerSpec, spawn_managed};
use tests::ws::WsClient;
use tests::{SimHost, TestApp, auth_file, bearer_client};

const T: Duration = Duration::from_secs(10);

/// A managed server behind authentication, started by the operator; the app
/// speaks as the operator.
pub(super) async fn managed_with_auth(
    extra_auth: &str,
) -> anyhow::Result<(SimHost, TestApp, String, String)> {
    let host = SimHost::new(100);
    let (path, op, view) = auth_file(host.scratch(), extra_auth);
    let app = spawn_managed(
        &host,
        &ServerSpec::default(),
        &["--auth", path.to_str().expect("utf-8 path")],
    )?
    .with_token(&op);
    app.start_server().await?;
    Ok((host, app, op, view))
}

/// Every request that changes something, with a body it would accept.
fn mutating(generation: u64) -> Vec<(&'static str, &'static str, Value)> {
    vec![
        (
            "POST",
            "/api/restart",
            json!({"generation": generation, "flags": {"--tp": "2"}, "confirm": "sim"}),
        ),
        (
            "POST",
            "/api/stop",
            json!({"generation": generation, "confirm": "sim"}),
        ),
        (
            "POST",
            "/api/start",
            json!({"generation": generation, "flags": {}, "confirm": "sim"}),
        ),
        (
            "POST",
            "/api/adopt",
            json!({"generation": generation, "confirm": "sim"}),
        ),
        (
            "POST",
            "/api/bench",
            json!({"concurrency": [1], "num_prompts": 4, "repeats": 3}),
        ),
        ("POST", "/api/bench/cancel", json!({})),
        ("PATCH", "/api/flagsets/abc", json!({"label": "x"})),
    ]
}

async fn send(
    client: &reqwest::Client,
    app: &TestApp,
    method: &str,
    path: &str,
    body: &Value,
    headers: &[(&str, &str)],
) -> anyhow::Result<(u16, Value)> {
    let mut req = client.request(method.parse()?, app.url(path)).json(body);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = req.send().await?;
    let code = resp.status().as_u16();
    let text = resp.text().await?;
    Ok((
        code,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    ))
}

#[tokio::test]
async fn strangers_and_viewers_change_nothing() -> anyhow::Result<()> {
    let (_host, app, _op, view) = managed_with_auth("").await?;
    let before = app.server().await?;
    let audit_before = app.get_json("/api/audit").await?;
    let nobody = reqwest::Client::new();
    let viewer = bearer_client(&view);
    let forged = bearer_client("dw_not_a_token");
    for (method, path, body) in mutating(before.generation) {
        let (code, err) = send(&nobody, &app, method, path, &body, &[]).await?;
        assert_eq!(code, 401, "{method} {path} without a token: {err}");
        assert!(
            err["error"].as_str().is_some_and(|e| e.contains("log in")),
            "{err}"
        );
        let (code, err) = send(&forged, &app, method, path, &body, &[]).await?;
        assert_eq!(code, 401, "{method} {path} with a forged token: {err}");
        let (code, err) = send(&viewer, &app, method, path, &body, &[]).await?;
        assert_eq!(code, 403, "{method} {path} as a viewer: {err}");
        assert!(
            err["error"].as_str().is_some_and(|e| e.contains("viewer")),
            "{err}"
        );
    }
    // Nothing changed, nothing ran; every attempt was counted as refused, a
    // row per caller (a stranger by address, a viewer by name) per minute.
    let after = app.server().await?;
    assert_eq!(after.generation, before.generation);
    assert_eq!(after.phase, before.phase);
    assert!(after.bench.is_none() && after.operation.is_none());
    assert!(
        audit_before
            .as_array()
            .is_some_and(|a| a.iter().all(|e| e["kind"] == "action")),
        "{audit_before}"
    );
    let counted = |rows: &[Value], by: &dyn Fn(&str) -> bool| -> u64 {
        rows.iter()
            .filter(|a| a["kind"] == "refusals" && a["peer"].as_str().is_some_and(by))
            .map(|a| a["count"].as_u64().unwrap_or(0))
            .sum()
    };
    let n = mutating(before.generation).len() as u64;
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let audit = loop {
        let audit = app.get_json("/api/audit?limit=1000").await?;
        let all = audit.as_array().cloned().unwrap_or_default();
        if counted(&all, &|_| true) >= 3 * n {
            break all;
        }
        anyhow::ensure!(
            std::time::Instant::now() < deadline,
            "refusals not audited: {audit}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(
        counted(&audit, &|p| p == "victor (127.0.0.1)"),
        n,
        "{audit:?}"
    );
    assert_eq!(counted(&audit, &|p| p == "127.0.0.1"), 2 * n, "{audit:?}");
    let rows: Vec<_> = audit.iter().filter(|a| a["kind"] == "refusals").collect();
    assert!(rows.iter().all(|a| a["outcome"] == "refused"), "{rows:?}");
    assert!(
        rows.iter()
            .any(|a| a["detail"].as_str().is_some_and(|d| d.starts_with("401: "))),
        "{rows:?}"
    );
    assert!(
        app.get_json("/api/bench/runs")
            .await?
            .as_array()
            .is_some_and(Vec::is_empty)
    );

    // Reading: a viewer sees everything, a stranger nothing.
    let code = viewer.get(app.url("/api/state")).send().await?.status();
    assert_eq!(code, 200);
    let code = nobody.get(app.url("/api/state")).send().await?.status();
    assert_eq!(code, 401);
    let who: Value = viewer
        .get(app.url("/api/session"))
        .send()
        .await?
        .json()
        .await?;
    assert_eq!(
        who,
        json!({"auth": true, "name": "victor", "role": "viewer", "csrf": null})
    );
    // The page sends a stranger to the login page; its files and the login are open.
    let page = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()?
        .get(app.url("/"))
        .send()
        .await?;
    assert_eq!(page.status(), 303);
    assert_eq!(page.headers()["location"], "/login");
    let login = nobody.get(app.url("/login")).send().await?;
    assert_eq!(login.status(), 200);
    assert!(login.text().await?.contains("login-token"));

    // The operator's restart goes through and is audited by name.
    let id = app.restart(json!({"--tp": "2"})).await?;
    app.finished_restart(id, Duration::from_secs(30)).await?;
    let audit = app.get_json("/api/audit").await?;
    assert!(audit.to_string().contains("olga ("), "{audit}");
    Ok(())
}

#[tokio::test]
async fn a_browser_session_needs_its_csrf_token_and_our_origin() -> anyhow::Result<()> {
    let (_host, app, op, view) = managed_with_auth("").await?;
    let browser = reqwest::Client::new();
    // A wrong token: 401, and nothing set.
    let (code, _) = send(
        &browser,
        &app,
        "POST",
        "/api/login",
        &json!({"token": "dw_wrong"}),
        &[],
    )
    .await?;
    assert_eq!(code, 401);
    let resp = browser
        .post(app.url("/api/login"))
        .json(&json!({"token": op}))
        .send()
        .await?;
    assert_eq!(resp.status(), 200);
    let set_cookie = resp.headers()["set-cookie"].to_str()?.to_owned();
    assert!(
        set_cookie.contains("HttpOnly") && set_cookie.contains("SameSite=Strict"),
        "{set_cookie}"
    );
    let session: Value = resp.json().await?;
    assert_eq!(session["name"], "olga");
    let csrf = session["csrf"].as_str().expect("a csrf token").to_owned();
    let cookie = set_cookie.split(';').next().expect("name=value").to_owned();

    let generation = app.server().await?.generation;
    let stop = json!({"generation": generation, "confirm": "sim"});
    let with = |extra: &[(&'static str, String)]| {
        let mut h = vec![("cookie", cookie.clone())];
        h.extend(extra.iter().cloned());
        h
    };
    for headers in [
        with(&[]),
        with(&[("x-csrf-token", "dw_forged".to_owned())]),
        with(&[
            ("x-csrf-token", csrf.clone()),
            ("origin", "https://evil.example".to_owned()),
        ]),
    ] {
        let h: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let (code, err) = send(&browser, &app, "POST", "/api/stop", &stop, &h).await?;
        assert_eq!(code, 403, "{h:?}: {err}");
    }
    assert_eq!(app.server().await?.generation, generation);
    assert_eq!(app.server().await?.phase, shared::restart::Phase::Ready);
    // With both, from our own page: accepted.
    let origin = format!("http://{}", app.addr);
    let h = with(&[("x-csrf-token", csrf.clone()), ("origin", origin)]);
    let h: Vec<(&str, &str)> = h.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let (code, body) = send(&browser, &app, "POST", "/api/stop", &stop, &h).await?;
    assert_eq!(code, 202, "{body}");
    app.wait_phase(shared::restart::Phase::Stopped, Duration::from_secs(30))
        .await?;

    // Logged out, the cookie is worth nothing.
    let (code, _) = send(
        &browser,
        &app,
        "POST",
        "/api/logout",
        &json!({}),
        &[("cookie", &cookie), ("x-csrf-token", &csrf)],
    )
    .await?;
    assert_eq!(code, 204);
    let code = browser
        .get(app.url("/api/state"))
        .header("cookie", &cookie)
        .send()
        .await?
        .status();
    assert_eq!(code, 401);

    // A viewer's session cannot change anything either.
    let resp = browser
        .post(app.url("/api/login"))
        .json(&json!({"token": view}))
        .send()
        .await?;
    let vcookie = resp.headers()["set-cookie"]
        .to_str()?
        .split(';')
        .next()
        .expect("cookie")
        .to_owned();
    let vcsrf = resp.json::<Value>().await?["csrf"]
        .as_str()
        .expect("csrf")
        .to_owned();
    let (code, _) = send(
        &browser,
        &app,
        "POST",
        "/api/start",
        &json!({"generation": generation, "flags": {}, "confirm": "sim"}),
        &[("cookie", &vcookie), ("x-csrf-token", &vcsrf)],
    )
    .await?;
    assert_eq!(code, 403);
    Ok(())
}

#[tokio::test]
async fn sockets_need_a_caller_and_our_origin_and_show_who_is_here() -> anyhow::Result<()> {
    let (_host, app, op, view) = managed_with_auth("").await?;
    assert_eq!(
        WsClient::connect_with(&app.addr, &[]).await.err(),
        Some(Some(401))
    );
    let bearer = format!("Bearer {view}");
    assert_eq!(
        WsClient::connect_with(
            &app.addr,
            &[
                ("authorization", &bearer),
                ("origin", "https://evil.example")
            ]
        )
        .await
        .err(),
        Some(Some(403))
    );
    let origin = format!("http://{}", app.addr);
    let mut ws = WsClient::connect_with(
        &app.addr,
        &[("authorization", &bearer), ("origin", &origin)],
    )
    .await
    .map_err(|e| anyhow::anyhow!("refused: {e:?}"))?;
    let _hello = ws.next_msg(T).await?;
    let shared::ServerMsg::Snapshot(snap) = ws.next_msg(T).await? else {
        anyhow::bail!("expected a snapshot");
    };
    let victor = snap
        .presence
        .iter()
        .find(|p| p.who == "victor")
        .expect("victor is here");
    assert_eq!(victor.role, shared::auth::Role::Viewer);
    // A second person arrives: everyone is told.
    let op_bearer = format!("Bearer {op}");
    let _ws2 = WsClient::connect_with(&app.addr, &[("authorization", &op_bearer)])
        .await
        .map_err(|e| anyhow::anyhow!("refused: {e:?}"))?;
    let deadline = std::time::Instant::now() + T;
    loop {
        if let shared::ServerMsg::Presence { clients } = ws.next_msg(T).await?
            && clients
                .iter()
                .any(|c| c.who == "olga" && c.role == shared::auth::Role::Operator)
        {
            break;
        }
        anyhow::ensure!(std::time::Instant::now() < deadline, "olga never showed up");
    }
    Ok(())
}

#[tokio::test]
async fn limits_answer_413_and_429() -> anyhow::Result<()> {
    let (_host, app, op, _view) = managed_with_auth("").await?;
    // A body over 64 KiB.
    let big = json!({"generation": 1, "confirm": "x".repeat(70 * 1024), "flags": {}});
    let (code, err) = send(&app.http, &app, "POST", "/api/restart", &big, &[]).await?;
    assert_eq!(code, 413, "{err}");
    // Failed logins from one address: the sixth waits, even with the right token.
    let nobody = reqwest::Client::new();
    for _ in 0..5 {
        let (code, _) = send(
            &nobody,
            &app,
            "POST",
            "/api/login",
            &json!({"token": "dw_guess"}),
            &[],
        )
        .await?;
        assert_eq!(code, 401);
    }
    let resp = nobody
        .post(app.url("/api/login"))
        .json(&json!({"token": op}))
        .send()
        .await?;
    assert_eq!(resp.status(), 429);
    assert!(resp.headers().contains_key("retry-after"));
    // Sockets per person.
    let bearer = format!("Bearer {op}");
    let mut open = Vec::new();
    for _ in 0..32 {
        open.push(
            WsClient::connect_with(&app.addr, &[("authorization", &bearer)])
                .await
                .map_err(|e| anyhow::anyhow!("refused early: {e:?}"))?,
        );
    }
    assert_eq!(
        WsClient::connect_with(&app.addr, &[("authorization", &bearer)])
            .await
            .err(),
        Some(Some(429))
    );
    drop(open);
    // A client that floods the socket is closed (policy violation).
    let mut ws = loop {
        match WsClient::connect_with(&app.addr, &[("authorization", &bearer)]).await {
            Ok(ws) => break ws,
            // The server notices the dropped sockets a moment later.
            Err(Some(429)) => tokio::time::sleep(Duration::from_millis(50)).await,
            Err(e) => anyhow::bail!("refused: {e:?}"),
        }
    };
    use futures_util::SinkExt;
    for n in 0..100u64 {
        let ping = format!("{{\"type\":\"ping\",\"nonce\":{n}}}");
        if ws
            .socket
            .send(tokio_tungstenite::tungstenite::Message::text(ping))
            .await
            .is_err()
        {
            break;
        }
    }
    let deadline = std::time::Instant::now() + T;
    let code = loop {
        match ws.next_msg(T).await {
            Ok(_) => {}
            Err(e) => break e.to_string(),
        }
        anyhow::ensure!(std::time::Instant::now() < deadline, "never closed");
    };
    assert!(
        code.contains("too many messages") || code.contains("1008") || code.contains("Policy"),
        "{code}"
    );
    Ok(())
}

#[tokio::test]
async fn a_non_loopback_bind_without_auth_refuses_to_start() -> anyhow::Result<()> {
    let out = std::process::Command::new(tests::bin("drainwatch"))
        .args(["--bind", "0.0.0.0:0", "--nvml-lib", "/nonexistent"])
        .stdin(std::process::Stdio::null())
        .output()?;
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("without authentication") && err.contains("--auth"),
        "{err}"
    );
    // With an auth file it starts.
    let host = SimHost::new(100);
    let (path, _op, view) = auth_file(host.scratch(), "");
    let app = tests::spawn_app(
        &host,
        &[
            "--bind",
            "0.0.0.0:0",
            "--auth",
            path.to_str().expect("utf-8"),
        ],
    )?;
    let port = app.addr.rsplit(':').next().expect("port").to_owned();
    let code = bearer_client(&view)
        .get(format!("http://127.0.0.1:{port}/api/state"))
        .send()
        .await?
        .status();
    assert_eq!(code, 200);
    Ok(())
}

#[tokio::test]
async fn tokens_never_reach_the_log() -> anyhow::Result<()> {
    let host = SimHost::new(100);
    let (path, op, view) = auth_file(host.scratch(), "");
    let log = host.scratch().join("drainwatch.log");
    let file = std::fs::File::create(&log)?;
    let app = tests::spawn_app_with(
        &host,
        &[
            "--auth",
            path.to_str().expect("utf-8"),
            "--log-level",
            "trace",
        ],
        |cmd| {
            cmd.stderr(file);
        },
    )?;
    let nobody = reqwest::Client::new();
    let wrong = "dw_wrong_secret_for_the_log_test";
    for token in [op.as_str(), view.as_str(), wrong] {
        let _ = nobody
            .post(app.url("/api/login"))
            .json(&json!({"token": token}))
            .send()
            .await?;
        let _ = bearer_client(token)
            .get(app.url("/api/state"))
            .send()
            .await?;
    }
    let _ = WsClient::connect_with(&app.addr, &[("authorization", &format!("Bearer {op}"))]).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    drop(app);
    let text = std::fs::read_to_string(&log)?;
    assert!(text.contains("logged in"), "the log was written: {text}");
    for secret in [&op, &view, &wrong.to_owned()] {
        assert!(!text.contains(secret.as_str()), "a token in the log");
    }
    Ok(())
}

#[tokio::test]
async fn without_auth_only_this_machine_and_our_pages_may_call() -> anyhow::Result<()> {
    let host = SimHost::new(100);
    let app = tests::spawn_app(&host, &[])?;
    let c = reqwest::Client::new();
    // DNS rebinding: a page on another name that points at 127.0.0.1.
    let code = c
        .get(app.url("/api/state"))
        .header("host", "evil.example")
        .send()
        .await?
        .status();
    assert_eq!(code, 403);
    let code = c.get(app.url("/api/state")).send().await?.status();
    assert_eq!(code, 200);
    let who: Value = c.get(app.url("/api/session")).send().await?.json().await?;
    assert_eq!(who["auth"], false);
    assert_eq!(who["role"], "operator");
    // Cross-site: another origin may not open a socket.
    assert_eq!(
        WsClient::connect_with(&app.addr, &[("origin", "https://evil.example")])
            .await
            .err(),
        Some(Some(403))
    );
    Ok(())
}

#[tokio::test]
async fn behind_a_trusted_proxy_each_client_is_itself() -> anyhow::Result<()> {
    let (_host, app, op, _view) = managed_with_auth("trusted_proxies = [\"127.0.0.1\"]").await?;
    let http = reqwest::Client::new();
    let login = |from: &'static str, token: String| {
        http.post(app.url("/api/login"))
            .header("x-forwarded-for", from)
            .json(&json!({ "token": token }))
            .send()
    };
    // One client guessing is held up; the rest of the team behind the same
    // proxy is not.
    for _ in 0..5 {
        assert_eq!(
            login("198.51.100.7", "dw_guess".into()).await?.status(),
            401
        );
    }
    assert_eq!(login("198.51.100.7", op.clone()).await?.status(), 429);
    assert_eq!(login("198.51.100.8", op.clone()).await?.status(), 200);
    // The audit log names the client, not the proxy.
    let g = app.server().await?.generation;
    let r = bearer_client(&op)
        .post(app.url("/api/stop"))
        .header("x-forwarded-for", "198.51.100.8")
        .json(&json!({"generation": g, "confirm": "not-the-name"}))
        .send()
        .await?;
    assert_eq!(r.status(), 400);
    let deadline = std::time::Instant::now() + T;
    loop {
        let audit = app.get_json("/api/audit").await?;
        if audit
            .as_array()
            .is_some_and(|a| a.iter().any(|e| e["peer"] == "olga (198.51.100.8)"))
        {
            break;
        }
        anyhow::ensure!(std::time::Instant::now() < deadline, "{audit}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}
