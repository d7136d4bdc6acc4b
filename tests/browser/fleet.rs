//! The hub's fleet page in Chromium: a row per agent, live; an agent killed
//! turns unreachable with when it was last seen (its last state greyed, never
//! idle), and live again when it is back.

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
    b.client.close().await?;
    Ok(())
}
