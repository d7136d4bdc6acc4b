//! `drainwatch hub` over three agents, each with its own simulated host and
//! loopback address: every agent's GPUs and server in one fleet view (over HTTP and
//! `/ws`); an agent killed is shown unreachable with when it was last seen,
//! never as idle, and comes back when it does; viewer tokens suffice.

use std::time::{Duration, Instant};

use futures_util::StreamExt;
use shared::fleet::Fleet;
use shared::restart::Phase;
use tests::managed::{ServerSpec, spawn_managed};
use tests::{SimHost, TestApp, bin, spawn_hub};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

use super::auth::managed_with_auth;

/// One agent (with `--auth` and a token for the hub) behind a hub with its
/// own `--auth`.
pub(crate) struct HubWithAgent {
    pub(crate) _host: SimHost,
    pub(crate) agent: TestApp,
    /// The agent's own operator token.
    pub(crate) agent_op: String,
    pub(crate) hub_proc: tests::Proc,
    pub(crate) hub: String,
    /// The hub's operator (olga) and viewer (victor) tokens.
    pub(crate) op: String,
    pub(crate) view: String,
    pub(crate) _scratch: tempfile::TempDir,
}

/// Starts [`HubWithAgent`]: the agent, named `gpu-a` at the hub.
pub(crate) async fn hub_with_agent() -> anyhow::Result<HubWithAgent> {
    const HUB_TOKEN: &str = "dw_test_fleet_hub_token";
    let hub_token = format!(
        "[[token]]\nname = \"fleet-hub\"\nrole = \"operator\"\nsha256 = \"{}\"\nhub = true\n",
        tests::sha256_hex(HUB_TOKEN)
    );
    let (host, agent, agent_op, _view) = managed_with_auth(&hub_token).await?;
    let scratch = tempfile::tempdir()?;
    std::fs::write(scratch.path().join("a.token"), HUB_TOKEN)?;
    let config = scratch.path().join("fleet.toml");
    std::fs::write(
        &config,
        format!(
            "[[agent]]\nname = \"gpu-a\"\nurl = \"{}\"\ntoken_file = \"a.token\"\n",
            agent.url("")
        ),
    )?;
    let (hub_auth, op, view) = tests::auth_file(scratch.path(), "");
    let (hub_proc, hub) =
        tests::spawn_hub_with(&config, &["--auth", hub_auth.to_str().expect("utf-8")])?;
    Ok(HubWithAgent {
        _host: host,
        agent,
        agent_op,
        hub_proc,
        hub,
        op,
        view,
        _scratch: scratch,
    })
}

async fn fleet(hub: &str) -> anyhow::Result<Fleet> {
    Ok(reqwest::get(format!("{hub}/api/fleet"))
        .await?
        .json()
        .await?)
}

/// Polls the hub until `want` holds; the fleet that satisfied it.
async fn wait_fleet(hub: &str, what: &str, want: impl Fn(&Fleet) -> bool) -> anyhow::Result<Fleet> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let f = fleet(hub).await?;
        if want(&f) {
            return Ok(f);
        }
        anyhow::ensure!(Instant::now() < deadline, "{what}: {f:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn the_hub_shows_every_agent_and_one_that_is_gone_as_unreachable() -> anyhow::Result<()> {
    // Agent a needs a viewer token (it runs with --auth); b and c do not.
    let (_host_a, a, _op, view) = managed_with_auth("").await?;
    let host_b = SimHost::new(100);
    let b = spawn_managed(&host_b, &ServerSpec::default(), &["--bind", "127.0.0.3:0"])?;
    b.start_server().await?;
    let host_c = SimHost::new(100);
    let c = spawn_managed(&host_c, &ServerSpec::default(), &["--bind", "127.0.0.4:0"])?;
    let scratch = tempfile::tempdir()?;
    std::fs::write(scratch.path().join("a.token"), format!("{view}\n"))?;
    let config = scratch.path().join("fleet.toml");
    let agent = |name: &str, app: &TestApp, token: &str| {
        format!(
            "[[agent]]\nname = \"{name}\"\nurl = \"{}\"\n{token}",
            app.url("")
        )
    };
    std::fs::write(
        &config,
        [
            agent("gpu-a", &a, "token_file = \"a.token\"\n"),
            agent("gpu-b", &b, ""),
            agent("gpu-c", &c, ""),
        ]
        .join("\n"),
    )?;
    let (_hub, hub) = spawn_hub(&config)?;

    // Every agent, in the config's order, with its 8 GPUs and its server.
    let f = wait_fleet(&hub, "all reachable", |f| {
        f.agents
            .iter()
            .all(|a| a.reachable && a.gpus.len() == 8 && a.server.is_some())
    })
    .await?;
    let names: Vec<&str> = f.agents.iter().map(|a| a.name.as_str()).collect();
    assert_eq!(names, ["gpu-a", "gpu-b", "gpu-c"]);
    for agent in &f.agents {
        assert_eq!(agent.simulated, Some(true), "{agent:?}");
        assert!(agent.hostname.is_some() && agent.error.is_none());
    }
    let phase = |f: &Fleet, i: usize| f.agents[i].server.as_ref().map(|s| s.phase);
    assert_eq!(phase(&f, 1), Some(Phase::Ready));
    assert_eq!(phase(&f, 2), Some(Phase::Stopped));
    // b's server holds its GPUs; c's hold nothing.
    assert!(f.agents[1].gpus[0].mem_used_bytes > Some(1 << 30));
    assert!(f.agents[2].gpus[0].mem_used_bytes < Some(64 << 20));

    // The fleet on /ws: a whole fleet at once, then as it changes.
    let ws = hub.replacen("http://", "ws://", 1) + "/ws";
    let (mut socket, _) = tokio_tungstenite::connect_async(ws.as_str()).await?;
    let first = match socket.next().await {
        Some(Ok(Message::Text(t))) => serde_json::from_str::<Fleet>(t.as_str())?,
        other => anyhow::bail!("no fleet on /ws: {other:?}"),
    };
    assert_eq!(first.agents.len(), 3);
    // Not from another site's page; and the page carries the UI's headers.
    let mut foreign = ws.as_str().into_client_request()?;
    foreign
        .headers_mut()
        .insert("origin", "http://evil.example".parse()?);
    assert!(tokio_tungstenite::connect_async(foreign).await.is_err());
    let page = reqwest::get(format!("{hub}/fleet")).await?;
    assert_eq!(page.status(), 200);
    assert!(
        page.headers()
            .get("content-security-policy")
            .is_some_and(|v| v
                .to_str()
                .unwrap_or_default()
                .contains("frame-ancestors 'none'"))
    );

    // b is killed: unreachable, with when it was last seen; a and c unaffected.
    let b_addr = b.addr.clone();
    let seen_before = f.agents[1].last_seen_ms.expect("seen");
    drop(b);
    let f = wait_fleet(&hub, "b unreachable", |f| !f.agents[1].reachable).await?;
    let gone = &f.agents[1];
    assert!(gone.error.is_some(), "{gone:?}");
    assert!(gone.last_seen_ms >= Some(seen_before), "{gone:?}");
    assert!(f.agents[0].reachable && f.agents[2].reachable);
    // The /ws stream says so too.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        anyhow::ensure!(Instant::now() < deadline, "no unreachable b on /ws");
        if let Some(Ok(Message::Text(t))) = socket.next().await {
            let f: Fleet = serde_json::from_str(t.as_str())?;
            if !f.agents[1].reachable {
                break;
            }
        }
    }

    // b comes back on the same address: reachable again.
    let b = spawn_managed(&host_b, &ServerSpec::default(), &["--bind", &b_addr])?;
    let f = wait_fleet(&hub, "b back", |f| {
        f.agents[1].reachable && f.agents[1].gpus.len() == 8
    })
    .await?;
    assert!(f.agents[1].error.is_none());
    drop(b);
    assert!(a.server().await?.phase == Phase::Ready);
    Ok(())
}

#[tokio::test]
async fn a_bad_fleet_config_is_refused_naming_what() -> anyhow::Result<()> {
    let scratch = tempfile::tempdir()?;
    let config = scratch.path().join("fleet.toml");
    std::fs::write(
        &config,
        "[[agent]]\nname = \"a\"\nurl = \"http://127.0.0.2:1\"\n[[agent]]\nname = \"a\"\nurl = \"http://127.0.0.3:1\"\n",
    )?;
    let out = tokio::process::Command::new(bin("drainwatch"))
        .args(["hub", "--bind", "127.0.0.1:0", "--config"])
        .arg(&config)
        .output()
        .await?;
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("agent `a` is listed twice"),
        "{out:?}"
    );
    // A hub that can restart servers does not listen beyond loopback
    // without a login of its own.
    std::fs::write(
        &config,
        "[[agent]]\nname = \"a\"\nurl = \"http://127.0.0.2:1\"\n",
    )?;
    let out = tokio::process::Command::new(bin("drainwatch"))
        .args(["hub", "--bind", "0.0.0.0:0", "--config"])
        .arg(&config)
        .arg("--data-dir")
        .arg(scratch.path().join("data"))
        .output()
        .await?;
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("without authentication"),
        "{out:?}"
    );
    Ok(())
}

/// A host's own dashboard through the hub: its API and `/ws` pass through
/// with the hub's token for it and the person's name; the hub's gate says
/// first what the person may do, the agent's audit names both.
#[tokio::test]
async fn a_host_s_dashboard_and_operations_go_through_the_hub_under_the_person_s_name()
-> anyhow::Result<()> {
    let h = hub_with_agent().await?;
    let (agent, agent_op, hub) = (&h.agent, h.agent_op.clone(), h.hub.clone());
    let (op, view) = (h.op.clone(), h.view.clone());
    let (olga, victor) = (tests::bearer_client(&op), tests::bearer_client(&view));
    let stranger = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()?;

    // A stranger gets nothing of the agent's, and the page sends them to log in.
    let r = stranger
        .get(format!("{hub}/agents/gpu-a/api/state"))
        .send()
        .await?;
    assert_eq!(r.status(), 401);
    let r = stranger.get(format!("{hub}/agents/gpu-a/")).send().await?;
    assert_eq!(r.status(), 303);
    assert_eq!(r.headers()["location"], "/login");
    // A viewer sees the agent's state and history, and the hub's own session.
    let s: shared::Snapshot = victor
        .get(format!("{hub}/agents/gpu-a/api/state"))
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    assert_eq!(s.latest.map(|l| l.gpus.len()), Some(8));
    let generation = s.server.as_ref().map(|s| s.generation).unwrap_or_default();
    let me: serde_json::Value = victor
        .get(format!("{hub}/agents/gpu-a/api/session"))
        .send()
        .await?
        .json()
        .await?;
    assert_eq!(me["name"], "victor");
    assert_eq!(me["role"], "viewer");
    // …but changes nothing: the hub refuses before the agent hears of it.
    let body = serde_json::json!({"generation": generation, "confirm": "sim"});
    let r = victor
        .post(format!("{hub}/agents/gpu-a/api/stop"))
        .json(&body)
        .send()
        .await?;
    assert_eq!(r.status(), 403);
    // Nor may another site's page, whoever is logged in.
    let r = olga
        .post(format!("{hub}/agents/gpu-a/api/stop"))
        .header("origin", "http://evil.example")
        .json(&body)
        .send()
        .await?;
    assert_eq!(r.status(), 403);
    assert_eq!(agent.server().await?.phase, Phase::Ready);
    // An operator's stop goes through; the agent's audit names both.
    let r = olga
        .post(format!("{hub}/agents/gpu-a/api/stop"))
        .json(&body)
        .send()
        .await?;
    assert_eq!(r.status(), 202, "{}", r.text().await?);
    agent
        .wait_phase(Phase::Stopped, Duration::from_secs(20))
        .await?;
    let audit = agent.get_json("/api/audit?kind=action").await?;
    let entry = audit
        .as_array()
        .and_then(|a| a.iter().find(|e| e["action"] == "stop"))
        .cloned()
        .expect("the stop audited");
    let peer = entry["peer"].as_str().unwrap_or_default();
    assert!(
        peer.starts_with("fleet-hub (") && peer.ends_with(" for olga"),
        "{entry}"
    );
    // The agent's refusals come back as the agent said them.
    let r = olga
        .post(format!("{hub}/agents/gpu-a/api/stop"))
        .json(&body)
        .send()
        .await?;
    assert_eq!(r.status(), 409);
    let text = r.text().await?;
    assert!(text.contains("already stopped"), "{text}");
    // Only a hub's token may name someone else; the agent's own operator
    // speaks for herself.
    let r = tests::bearer_client(&agent_op)
        .post(agent.url("/api/start"))
        .header("x-drainwatch-for", "mallory")
        .json(&body)
        .send()
        .await?;
    assert_eq!(r.status(), 400);
    assert!(r.text().await?.contains("hub = true"));
    assert_eq!(agent.server().await?.phase, Phase::Stopped);
    // The agents' logins are not the hub's to pass on.
    let r = stranger
        .post(format!("{hub}/agents/gpu-a/api/login"))
        .json(&serde_json::json!({"token": "guess"}))
        .send()
        .await?;
    assert_eq!(r.status(), 401);
    let r = olga
        .post(format!("{hub}/agents/gpu-a/api/login"))
        .json(&serde_json::json!({"token": "guess"}))
        .send()
        .await?;
    assert_eq!(r.status(), 404);
    // Nor a path outside the agent's API.
    let r = victor
        .get(format!("{hub}/agents/gpu-a/api/..%2Fmetrics"))
        .send()
        .await?;
    assert_eq!(r.status(), 400);
    // An agent the hub does not know is not reached.
    let r = olga
        .get(format!("{hub}/agents/nope/api/state"))
        .send()
        .await?;
    assert_eq!(r.status(), 404);

    // The agent's stream, through the hub, for the person.
    let ws = hub.replacen("http://", "ws://", 1) + "/agents/gpu-a/ws";
    let mut req = ws.as_str().into_client_request()?;
    req.headers_mut()
        .insert("authorization", format!("Bearer {view}").parse()?);
    let (mut socket, _) = tokio_tungstenite::connect_async(req).await?;
    let mut kinds = Vec::new();
    while kinds.len() < 2 {
        match tokio::time::timeout(Duration::from_secs(10), socket.next()).await? {
            Some(Ok(Message::Text(t))) => {
                let v: serde_json::Value = serde_json::from_str(t.as_str())?;
                kinds.push(v["type"].as_str().unwrap_or_default().to_owned());
            }
            other => anyhow::bail!("no message through the hub: {other:?}"),
        }
    }
    assert_eq!(kinds, ["hello", "snapshot"]);
    // Without a login, no stream.
    assert!(tokio_tungstenite::connect_async(ws.as_str()).await.is_err());

    // The CLI reaches the host through the hub the same way, as its person.
    let out = tokio::process::Command::new(bin("drainwatch"))
        .args(["status", "--url", &format!("{hub}/agents/gpu-a")])
        .env("DRAINWATCH_TOKEN", &op)
        .output()
        .await?;
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("sim") && text.contains("stopped"), "{text}");
    Ok(())
}
