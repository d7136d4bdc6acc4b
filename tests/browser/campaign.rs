//! A campaign built in the UI: flags and values ticked in the plan builder,
//! drainwatch's check of it, started; the step rows and the Pareto chart fill
//! in as it runs; a point opens its step and its restart record.

use std::time::Duration;

use tests::SimHost;
use tests::browser::Browser;
use tests::managed::{ServerSpec, spawn_managed};

use crate::{ONE_AT_A_TIME, T};

const EP_FLAG: &str = "
[[flags]]
name = \"--ep-size\"
kind = \"arg\"
type = \"int\"
min = 1
max = 8
";

#[tokio::test]
async fn a_plan_built_in_the_ui_runs_and_its_rows_and_chart_fill_in() -> anyhow::Result<()> {
    let _one = ONE_AT_A_TIME.lock().await;
    let host = SimHost::new(100);
    let spec = ServerSpec {
        tp: 1,
        warmup_ms: 300,
        itl_ms: 5.0,
        ttft_ms: 10.0,
        extra: EP_FLAG.to_owned(),
        ..ServerSpec::default()
    };
    let app = spawn_managed(&host, &spec, &[])?;
    app.start_server().await?;
    let b = Browser::start().await?;
    b.client.goto(&app.url("/")).await?;
    b.wait_count("[data-testid=campaign-empty]", 1, T).await?;

    // The plan: the indexer (the config's value and 1) × EP 1 and 2.
    b.click("[data-testid=new-campaign]").await?;
    b.wait_count("[data-testid=plan-builder]", 1, T).await?;
    b.fill("[data-testid=plan-name]", "ui grid").await?;
    let value = |v: &str| {
        format!(
            "[data-testid=plan-value][data-flag='SGLANG_OPT_USE_TILELANG_INDEXER'][data-value='{v}']"
        )
    };
    b.click(&value("")).await?;
    b.click(&value("1")).await?;
    b.fill("[data-testid=plan-list][data-flag='--ep-size']", "1, 2")
        .await?;
    b.fill("[data-testid=plan-concurrency]", "4").await?;
    b.fill("[data-testid=plan-prompts]", "8").await?;
    b.fill("[data-testid=plan-target]", "900").await?;
    // drainwatch's own check: four steps.
    b.wait_attr("[data-testid=plan-check]", "data-steps", T, |v| v == "4")
        .await?;
    b.screenshot("plan-builder").await?;
    // A value the flag does not take is refused, naming it.
    b.fill("[data-testid=plan-list][data-flag='--ep-size']", "1, 16")
        .await?;
    b.wait_attr("[data-testid=plan-check]", "data-steps", T, |v| v == "0")
        .await?;
    let why = b.text("[data-testid=plan-check]").await?;
    assert!(
        why.contains("`--ep-size` must be an integer from 1 to 8"),
        "{why}"
    );
    b.fill("[data-testid=plan-list][data-flag='--ep-size']", "1, 2")
        .await?;
    b.wait_attr("[data-testid=plan-check]", "data-steps", T, |v| v == "4")
        .await?;
    b.click("[data-testid=plan-start]").await?;

    // The rows and the chart fill in as the steps run.
    b.wait_count("[data-testid=campaign-step]", 4, T).await?;
    b.wait_attr("[data-testid=campaign-state]", "data-state", T, |s| {
        s == "running"
    })
    .await?;
    b.wait_count("[data-testid=pareto-point]", 1, Duration::from_secs(60))
        .await?;
    b.screenshot("campaign-running").await?;
    b.wait_attr(
        "[data-testid=campaign-state]",
        "data-state",
        Duration::from_secs(180),
        |s| s == "done",
    )
    .await?;
    assert_eq!(
        b.wait_count("[data-testid=campaign-step][data-state=done]", 4, T)
            .await?,
        4
    );
    assert_eq!(b.wait_count("[data-testid=pareto-point]", 4, T).await?, 4);
    b.wait_count("[data-testid=campaign-effect]", 2, T).await?;
    let effects = b.text("[data-testid=campaign-effects]").await?;
    assert!(effects.contains("--ep-size=2: +"), "{effects}");
    let progress = b.text("[data-testid=campaign-progress]").await?;
    assert_eq!(progress, "4 of 4 steps");
    b.screenshot("campaign").await?;

    // A point opens its step: its flags, its restart record. Every point is
    // reachable: steps that measured alike are drawn side by side, not one
    // over the other, so the first one drawn takes a click too.
    let first = "[data-testid=pareto-point]";
    let step = b.attr(first, "data-step").await?.expect("a step");
    b.click(&format!("{first} .hit")).await?;
    b.wait_count(
        &format!("[data-testid=campaign-point][data-step='{step}']"),
        1,
        T,
    )
    .await?;
    // And from the keyboard: Enter on a focused point opens it as a click does.
    let last = "[data-testid=pareto-point]:last-of-type";
    let step = b.attr(last, "data-step").await?.expect("a step");
    b.press(last, '\u{E007}').await?;
    b.wait_count(
        &format!("[data-testid=campaign-point][data-step='{step}']"),
        1,
        T,
    )
    .await?;
    // The chart is drawn anew for the choice; the focus stays on the point.
    let deadline = std::time::Instant::now() + T;
    loop {
        let focused = b
            .client
            .execute(
                "const a = document.activeElement; return a && a.getAttribute('data-step');",
                vec![],
            )
            .await?;
        if focused.as_str() == Some(step.as_str()) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the focus left the point: it is on step {focused}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    b.click("[data-testid=campaign-point-record]").await?;
    b.wait_count("[data-testid=restart-detail]", 1, T).await?;
    b.wait_attr("[data-testid=detail-outcome]", "data-outcome", T, |o| {
        o == "succeeded"
    })
    .await?;
    b.client.close().await?;
    Ok(())
}
