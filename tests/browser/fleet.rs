//! The hub's fleet page in Chromium: a row per agent, live; an agent killed
//! turns unreachable with when it was last seen (its last state greyed, never
//! idle), and live again when it is back. A click into a host opens its own
//! dashboard through the hub, from which a restart reaches the agent.

use tests::managed::{ServerSpec, spawn_managed};
use tests::{SimHost, TestApp};

use super::{ONE_AT_A_TIME, T};
use tests::browser::Browser;

#[tokio::test]
async fn the_fleet_page_shows_an_agent_going_and_coming_back() -> anyhow::Result<()> {
    let _one = ONE_AT_A_TIME.lock().await;
    let mut hosts = Vec::new();
    let mut agents: Vec<TestApp> = Vec::new();
    for ip in ["127.0.0.2", "127.0.0.3", "127.0.0.4"] {
        let host = SimHost::new(100);
        let app = spawn_managed(
            &host,
            &ServerSpec::default(),
            &["--bind", &format!("{ip}:0")],
        )?;
        app.start_server().await?;
        hosts.push(host);
        agents.push(app);
    }
    let scratch = tempfile::tempdir()?;
    let config = scratch.path().join("fleet.toml");
    let text: String = ["gpu-a", "gpu-b", "gpu-c"]
        .iter()
        .zip(&agents)
        .map(|(n, a)| format!("[[agent]]\nname = \"{n}\"\nurl = \"{}\"\n", a.url("")))
        .collect();
    std::fs::write(&config, text)?;
    let (_hub, url) = tests::spawn_hub(&config)?;

    let b = Browser::start().await?;
    b.client.goto(&url).await?;
    assert_eq!(b.wait_count("[data-testid=fleet-row]", 3, T).await?, 3);
    for name in ["gpu-a", "gpu-b", "gpu-c"] {
        let row = format!("[data-testid=fleet-row][data-agent='{name}']");
        b.wait_attr(&row, "data-reachable", T, |r| r == "true")
            .await?;
        assert_eq!(
            b.wait_count(&format!("{row} [data-testid=fleet-gpu]"), 8, T)
                .await?,
            8
        );
        b.wait_attr(
            &format!("{row} [data-testid=fleet-phase]"),
            "data-phase",
            T,
            |p| p == "ready",
        )
        .await?;
    }
    assert!(
        b.text("[data-testid=fleet]")
            .await?
            .contains("simulated host")
    );
    b.screenshot("fleet").await?;

    // b is killed: unreachable, with its last-seen age.
    let b_addr = agents[1].addr.clone();
    drop(agents.remove(1));
    let row = "[data-testid=fleet-row][data-agent='gpu-b']";
    b.wait_attr(row, "data-reachable", T, |r| r == "false")
        .await?;
    let state = b.text(&format!("{row} [data-testid=fleet-state]")).await?;
    assert!(state.starts_with("unreachable · last seen "), "{state}");
    assert_eq!(
        b.text("[data-testid=fleet-count]").await?,
        "2 of 3 agents reachable"
    );
    b.screenshot("fleet-unreachable").await?;

    // Back on the same address: live again.
    let back = spawn_managed(&hosts[1], &ServerSpec::default(), &["--bind", &b_addr])?;
    b.wait_attr(row, "data-reachable", T, |r| r == "true")
        .await?;
    drop(back);

    // Into a host: its own dashboard, live, through the hub; a restart from
    // there reaches the agent and is audited as the person's through the hub.
    b.click("[data-testid=fleet-row][data-agent='gpu-a'] [data-testid=fleet-link]")
        .await?;
    assert_eq!(b.wait_count("[data-testid=gpu-card]", 8, T).await?, 8);
    let via = b.text("[data-testid=via-hub]").await?;
    assert!(via.contains("gpu-a"), "{via}");
    assert!(
        b.client
            .current_url()
            .await?
            .path()
            .starts_with("/agents/gpu-a/")
    );
    b.wait_attr("[data-testid=server-phase]", "data-phase", T, |p| {
        p == "ready"
    })
    .await?;
    let generation = agents[0].server().await?.generation;
    b.click("[data-testid=open-restart]").await?;
    b.wait_count("[data-testid=restart-dialog]", 1, T).await?;
    b.fill("[data-testid=confirm-input]", "sim").await?;
    let confirm = b
        .client
        .find(fantoccini::Locator::Css("[data-testid=confirm-action]"))
        .await?;
    b.wait_enabled(&confirm, T).await?;
    confirm.click().await?;
    let deadline = std::time::Instant::now() + T;
    while agents[0].server().await?.generation == generation {
        anyhow::ensure!(
            std::time::Instant::now() < deadline,
            "no restart through the hub"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    b.wait_attr("[data-testid=server-phase]", "data-phase", T, |p| {
        p == "ready"
    })
    .await?;
    b.screenshot("fleet-host-through-hub").await?;
    let audit = agents[0].get_json("/api/audit?kind=action").await?;
    assert!(
        audit
            .as_array()
            .is_some_and(|a| a.iter().any(|e| e["action"] == "restart"
                && e["peer"].as_str().unwrap_or("").ends_with(" for 127.0.0.1"))),
        "{audit:#}"
    );
    b.client.close().await?;
    Ok(())
}

/// A group that spans two agents, restarted from the fleet page: typed name,
/// the record live, a timeline per node, and a second restart refused while
/// one runs.
#[tokio::test]
async fn the_fleet_page_restarts_a_group_and_shows_each_node_s_timeline() -> anyhow::Result<()> {
    let _one = ONE_AT_A_TIME.lock().await;
    let spec = || ServerSpec {
        tp: 2,
        warmup_ms: 600,
        nodes: true,
        ..ServerSpec::default()
    };
    let hosts = [SimHost::new(300), SimHost::new(300)];
    let agents = [
        spawn_managed(&hosts[0], &spec(), &["--bind", "127.0.0.2:0"])?,
        spawn_managed(&hosts[1], &spec(), &["--bind", "127.0.0.3:0"])?,
    ];
    let scratch = tempfile::tempdir()?;
    let config = scratch.path().join("fleet.toml");
    std::fs::write(
        &config,
        format!(
            "[[agent]]\nname = \"node-0\"\nurl = \"{}\"\n[[agent]]\nname = \"node-1\"\nurl = \"{}\"\n\
             [[group]]\nname = \"dsv3\"\nnodes = [\"node-0\", \"node-1\"]\ndist_init_addr = \"127.0.0.1:{}\"\n",
            agents[0].url(""),
            agents[1].url(""),
            tests::managed::free_port()
        ),
    )?;
    let (_hub, url) = tests::spawn_hub(&config)?;

    let b = Browser::start().await?;
    b.client.goto(&format!("{url}/fleet")).await?;
    b.wait_count("[data-testid=coord-target][data-target='dsv3']", 1, T)
        .await?;
    // A wrong name is refused, saying what to type.
    b.fill("[data-testid=coord-confirm]", "dsv").await?;
    b.click("[data-testid=coord-restart]").await?;
    let said = b
        .client
        .find(fantoccini::Locator::Css("[data-testid=coord-said]"))
        .await?;
    b.wait_text(&said, T, |t| t.contains("type the name, `dsv3`"))
        .await?;
    // The right one begins it, with a flag change for every node; the record
    // shows each node as it goes.
    b.fill("[data-testid=coord-flags]", "--warmup-ms=700")
        .await?;
    b.fill("[data-testid=coord-confirm]", "dsv3").await?;
    b.click("[data-testid=coord-restart]").await?;
    b.wait_attr("[data-testid=coord-record]", "data-outcome", T, |o| {
        o == "succeeded"
    })
    .await?;
    assert_eq!(b.wait_count("[data-testid=coord-node]", 2, T).await?, 2);
    let record = b.text("[data-testid=coord-record]").await?;
    for want in [
        "node-0 · rank 0",
        "node-1 · rank 1",
        "node rank 1 of 2",
        "completion came back through rank 0",
        "--warmup-ms=700",
    ] {
        assert!(record.contains(want), "{want}: {record}");
    }
    for a in &agents {
        let s = a.server().await?;
        assert_eq!(s.phase, shared::restart::Phase::Ready);
        assert_eq!(s.flags.get("--warmup-ms").map(String::as_str), Some("700"));
    }
    b.screenshot("fleet-coordinated").await?;
    b.client.close().await?;
    Ok(())
}

/// A hub with its own login: a stranger is sent to it, a viewer sees the
/// fleet and a host's dashboard through the hub as a viewer (nothing to
/// press, neither the hub's restarts nor the host's).
#[tokio::test]
async fn a_viewer_at_the_hub_sees_everything_and_can_press_nothing() -> anyhow::Result<()> {
    let _one = ONE_AT_A_TIME.lock().await;
    let host = SimHost::new(100);
    let agent = spawn_managed(&host, &ServerSpec::default(), &["--bind", "127.0.0.2:0"])?;
    agent.start_server().await?;
    let scratch = tempfile::tempdir()?;
    let config = scratch.path().join("fleet.toml");
    std::fs::write(
        &config,
        format!(
            "[[agent]]\nname = \"gpu-a\"\nurl = \"{}\"\n[[deployment]]\nname = \"all\"\norder = [\"gpu-a\"]\n",
            agent.url("")
        ),
    )?;
    let (auth, _op, view) = tests::auth_file(scratch.path(), "");
    let (_hub, url) =
        tests::spawn_hub_with(&config, &["--auth", auth.to_str().expect("utf-8 path")])?;

    let b = Browser::start().await?;
    b.client.goto(&format!("{url}/fleet")).await?;
    b.wait_count("[data-testid=login-form]", 1, T).await?;
    b.fill("[data-testid=login-token]", &view).await?;
    b.click("[data-testid=login-submit]").await?;
    b.wait_attr(
        "[data-testid=fleet-row][data-agent='gpu-a']",
        "data-reachable",
        T,
        |r| r == "true",
    )
    .await?;
    b.wait_count("[data-testid=coord-target][data-target='all']", 1, T)
        .await?;
    let buttons = b
        .client
        .find_all(fantoccini::Locator::Css("[data-testid=coord-restart]"))
        .await?;
    assert!(
        buttons.is_empty(),
        "a viewer has no restart button at the hub"
    );

    b.click("[data-testid=fleet-link]").await?;
    b.wait_attr("[data-testid=user]", "data-role", T, |r| r == "viewer")
        .await?;
    assert!(b.text("[data-testid=user]").await?.contains("victor"));
    b.wait_count("[data-testid=gpu-card]", 8, T).await?;
    for button in ["open-restart", "open-stop", "open-bench"] {
        let found = b
            .client
            .find_all(fantoccini::Locator::Css(&format!("[data-testid={button}]")))
            .await?;
        assert!(found.is_empty(), "a viewer has no {button} button");
    }
    b.client.close().await?;
    Ok(())
}
