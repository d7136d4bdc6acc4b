//! The throughput view: bars per flag set against a baseline, the diff of two
//! sets, "restart with this set" through the guarded dialog, and a benchmark
//! started from the server panel.

use std::time::Duration;

use anyhow::Context;
use fantoccini::Locator;
use serde_json::json;
use tests::SimHost;
use tests::browser::Browser;
use tests::managed::{ServerSpec, spawn_managed};

use crate::{ONE_AT_A_TIME, T};

#[tokio::test]
async fn bars_per_flag_set_the_diff_of_two_and_restart_with_a_set() -> anyhow::Result<()> {
    let _one = ONE_AT_A_TIME.lock().await;
    let host = SimHost::new(100);
    let spec = ServerSpec {
        tp: 1,
        warmup_ms: 300,
        itl_ms: 5.0,
        ttft_ms: 10.0,
        ..ServerSpec::default()
    };
    let app = spawn_managed(&host, &spec, &[])?;
    app.start_server().await?;
    let quick = json!({"concurrency": [1, 16], "num_prompts": 16, "output_len": 16,
                       "input_len": 16, "warmup": 2, "repeats": 3});
    let base = app.server().await?.flagset.context("a flag set")?;
    let run = app.bench(quick.clone()).await?;
    assert_eq!(run["status"], "succeeded", "{run}");
    let id = app
        .restart(json!({"SGLANG_OPT_USE_TILELANG_INDEXER": "1", "--enable-torch-compile": "true"}))
        .await?;
    app.finished_restart(id, Duration::from_secs(30)).await?;
    let fast = app.server().await?.flagset.context("a flag set")?;
    assert_ne!(base, fast);
    let run = app.bench(quick).await?;
    assert_eq!(run["status"], "succeeded", "{run}");

    let b = Browser::start().await?;
    b.client.goto(&app.url("/")).await?;

    // One bar per set, the faster one longer, the running set named in the panel.
    b.wait_count("[data-testid=flagset-bar]", 2, T).await?;
    let bar = |id: &str| format!("[data-testid=flagset-bar][data-flagset='{id}']");
    let rate =
        |v: Option<String>| -> anyhow::Result<f64> { Ok(v.context("data-tok-s")?.parse::<f64>()?) };
    let slow_rate = rate(b.attr(&bar(&base), "data-tok-s").await?)?;
    let fast_rate = rate(b.attr(&bar(&fast), "data-tok-s").await?)?;
    // tilelang × torch.compile: 1.166 × the speed.
    assert!(fast_rate > slow_rate * 1.08, "{fast_rate} vs {slow_rate}");
    b.wait_attr("[data-testid=server-flagset]", "data-flagset", T, |v| {
        v == fast
    })
    .await?;
    b.wait_text(
        &b.client
            .find(Locator::Css("[data-testid=live-tok-s]"))
            .await?,
        T,
        |t| t.contains("tok/s"),
    )
    .await?;
    assert_eq!(b.wait_count("[data-testid=target-line]", 1, T).await?, 1);

    // Against the first set as baseline, the second shows its gain.
    b.client
        .find(Locator::Css("[data-testid=baseline-select]"))
        .await?
        .select_by_value(&base)
        .await?;
    let delta = format!("{} [data-testid=delta]", bar(&fast));
    let pct: f64 = b
        .wait_attr(&delta, "data-pct", T, |p| {
            p.parse::<f64>().is_ok_and(|p| p > 0.0)
        })
        .await?
        .parse()?;
    let expected = (fast_rate / slow_rate - 1.0) * 100.0;
    assert!((pct - expected).abs() < 0.2, "{pct} vs {expected}");
    assert_eq!(
        b.attr(&format!("{} [data-testid=delta]", bar(&base)), "data-pct")
            .await?
            .as_deref(),
        Some("0.0")
    );

    // Tick both: the flag diff and the result diff.
    for id in [&base, &fast] {
        b.click(&format!("[data-testid=compare-check][data-flagset='{id}']"))
            .await?;
    }
    b.wait_count("[data-testid=compare-panel]", 1, T).await?;
    let diff = b
        .client
        .find(Locator::Css("[data-testid=compare-diff]"))
        .await?;
    b.wait_text(&diff, T, |t| {
        t.contains("SGLANG_OPT_USE_TILELANG_INDEXER") && t.contains("--enable-torch-compile")
    })
    .await?;
    b.screenshot("throughput").await?;

    // "Restart with" the first set: the guarded dialog, at that set's flags,
    // and nothing happens until the name is typed.
    b.click(&format!(
        "[data-testid=restart-with][data-flagset='{base}']"
    ))
    .await?;
    b.wait_count("[data-testid=restart-dialog]", 1, T).await?;
    assert_eq!(
        b.attr("[data-testid=dialog-prefill]", "data-flagset")
            .await?
            .as_deref(),
        Some(base.as_str())
    );
    let dialog_diff = b
        .client
        .find(Locator::Css(
            "[data-testid=restart-dialog] [data-testid=flag-diff]",
        ))
        .await?;
    b.wait_text(&dialog_diff, T, |t| {
        t.contains("SGLANG_OPT_USE_TILELANG_INDEXER") && t.contains("--enable-torch-compile")
    })
    .await?;
    let confirm = b
        .client
        .find(Locator::Css("[data-testid=confirm-action]"))
        .await?;
    assert!(!confirm.is_enabled().await?);
    assert_eq!(app.server().await?.generation, 2, "nothing ran yet");
    b.fill("[data-testid=confirm-input]", "sim").await?;
    b.wait_enabled(&confirm, T).await?;
    confirm.click().await?;
    b.wait_attr("[data-testid=server-flagset]", "data-flagset", 2 * T, |v| {
        v == base
    })
    .await?;
    let status = app.wait_phase(shared::restart::Phase::Ready, 2 * T).await?;
    assert_eq!(status.flagset.as_deref(), Some(base.as_str()));
    assert_eq!(status.generation, 3);

    // A benchmark from the server panel, at a concurrency not measured yet.
    b.wait_enabled(
        &b.client
            .find(Locator::Css("[data-testid=open-bench]"))
            .await?,
        T,
    )
    .await?;
    b.click("[data-testid=open-bench]").await?;
    b.wait_count("[data-testid=bench-dialog]", 1, T).await?;
    b.screenshot("bench-dialog").await?;
    b.fill("[data-testid=bench-concurrency]", "0").await?;
    b.click("[data-testid=bench-start]").await?;
    // Refused by the form's own check, with the reason, and nothing sent.
    b.wait_count("[data-testid=bench-error]", 1, T).await?;
    for (field, value) in [
        ("bench-concurrency", "4"),
        ("bench-prompts", "8"),
        ("bench-output-len", "8"),
        ("bench-input-len", "8"),
        ("bench-repeats", "3"),
        ("bench-warmup", "1"),
        ("bench-slo-tpot", "1000"),
    ] {
        b.fill(&format!("[data-testid={field}]"), value).await?;
    }
    b.click("[data-testid=bench-start]").await?;
    b.wait_count(
        "[data-testid=concurrency-select] option[value='4']",
        1,
        3 * T,
    )
    .await?;
    let runs = app.get_json("/api/bench/runs").await?;
    let runs = runs.as_array().context("runs")?;
    assert_eq!(runs.len(), 3, "{runs:?}");
    // The SLO typed in the form came with it: goodput is measured.
    assert_eq!(
        runs[0]["settings"]["slo"]["tpot_ms"], 1000.0,
        "{:?}",
        runs[0]
    );
    assert!(
        runs[0]["repeats"][0]["goodput_req_s"].is_number(),
        "{:?}",
        runs[0]
    );
    b.client
        .execute("window.scrollTo(0, 0);", Vec::new())
        .await?;
    b.screenshot("server-panel").await?;
    b.client.close().await?;
    Ok(())
}
