//! The dashboard with a real engine: llama.cpp's llama-server managed by
//! drainwatch beside the simulated GPUs. The page says which part is real
//! (the engine and its numbers) and which is simulated (the GPUs), shows the
//! engine's phase and its own log lines, and a benchmark's result.

use fantoccini::Locator;
use tests::SimHost;
use tests::browser::Browser;
use tests::engine::{self, READY};

use crate::{ONE_AT_A_TIME, T};

#[tokio::test]
async fn the_dashboard_shows_the_real_engine_its_log_and_a_benchmark() -> anyhow::Result<()> {
    let _one = ONE_AT_A_TIME.lock().await;
    let _engine = engine::ONE_AT_A_TIME.lock().await;
    let host = SimHost::new(100);
    let app = engine::spawn(&host, 2, &[])?;
    let b = Browser::start().await?;
    b.client.goto(&app.url("/")).await?;
    b.wait_attr("[data-testid=conn-badge]", "data-state", T, |s| s == "live")
        .await?;

    app.start_engine().await?;
    b.wait_attr("[data-testid=server-phase]", "data-phase", READY, |p| {
        p == "ready"
    })
    .await?;
    // Real engine, simulated GPUs: said apart, plainly.
    b.wait_attr("[data-testid=engine-pill]", "data-real", T, |r| r == "true")
        .await?;
    assert_eq!(b.text("[data-testid=engine-pill]").await?, "real llama.cpp");
    assert_eq!(
        b.text("[data-testid=simulated-banner]").await?,
        "simulated GPUs"
    );

    // The engine's own log lines in the server's log tail.
    b.click("[data-testid=server-log] summary").await?;
    let tail = b
        .client
        .find(Locator::Css("[data-testid=server-log-tail]"))
        .await?;
    b.wait_text(&tail, T, |t| t.contains("llama")).await?;

    // A benchmark's result in the ledger, with its unit.
    let run = app
        .finished_bench(
            app.begin_bench(crate::engine_settings()).await?,
            std::time::Duration::from_secs(240),
        )
        .await?;
    assert_eq!(run["status"], "succeeded", "{run:#}");
    b.wait_count("[data-testid=flagset-bar]", 1, T).await?;
    let rate: f64 = b
        .wait_attr("[data-testid=flagset-bar]", "data-tok-s", T, |v| {
            v.parse::<f64>().is_ok_and(|r| r > 0.0)
        })
        .await?
        .parse()?;
    assert!(rate > 0.0);
    let shot = b.screenshot("engine-dashboard").await?;
    eprintln!("screenshot: {}", shot.display());
    Ok(())
}
