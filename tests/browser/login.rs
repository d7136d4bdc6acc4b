//! Logging in through the page: a viewer sees everything but no button that
//! changes anything; an operator gets them, and other tabs see who is here.

use std::time::{Duration, Instant};

use anyhow::Context;
use fantoccini::Locator;
use serde_json::json;
use shared::restart::Phase;
use tests::browser::Browser;
use tests::managed::{ServerSpec, spawn_managed};
use tests::{SimHost, auth_file};

use crate::{ONE_AT_A_TIME, T};

/// How many elements match `css` now.
async fn count(b: &Browser, css: &str) -> anyhow::Result<usize> {
    Ok(b.client.find_all(Locator::Css(css)).await?.len())
}

#[tokio::test]
async fn a_viewer_sees_no_restart_button_and_an_operator_does() -> anyhow::Result<()> {
    let _one = ONE_AT_A_TIME.lock().await;
    let host = SimHost::new(100);
    let (path, op, view) = auth_file(host.scratch(), "");
    let spec = ServerSpec {
        warmup_ms: 500,
        ..ServerSpec::default()
    };
    let app =
        spawn_managed(&host, &spec, &["--auth", path.to_str().expect("utf-8")])?.with_token(&op);
    app.start_server().await?;
    let base = app.server().await?.flagset.context("a flag set")?;
    // A second flag set, so that the page can compare two (and offer to
    // restart with either); its warm-up is long enough that the page sees the
    // operator's restart below mid-way on a loaded machine.
    let id = app.restart(json!({"--warmup-ms": "5000"})).await?;
    let d = app.finished_restart(id, 3 * T).await?;
    assert_eq!(d["summary"]["outcome"], "succeeded", "{d}");
    let slow = app.server().await?.flagset.context("a flag set")?;
    assert_ne!(base, slow);
    let deadline = Instant::now() + T;
    loop {
        let ledger = app.get_json("/api/flagsets").await?;
        if ledger.as_array().map_or(0, Vec::len) == 2 {
            break;
        }
        anyhow::ensure!(Instant::now() < deadline, "not two sets: {ledger}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // A benchmark that would run for minutes (100 requests of 64 tokens, one at
    // a time, 1.3 s each): the page shows it in progress.
    let (code, body) = app
        .post(
            "/api/bench",
            &json!({"concurrency": [1], "num_prompts": 100, "output_len": 64, "input_len": 8,
                    "warmup": 0, "repeats": 3}),
        )
        .await?;
    assert_eq!(code, 202, "{body}");
    let run_id = body["id"].as_i64().context("the benchmark's id")?;

    let b = Browser::start().await?;
    // A stranger is sent to the login page; a wrong token is refused there.
    b.client.goto(&app.url("/")).await?;
    b.wait_count("[data-testid=login-form]", 1, T).await?;
    b.fill("[data-testid=login-token]", "dw_wrong").await?;
    b.click("[data-testid=login-submit]").await?;
    b.wait_count("[data-testid=login-error]:not([hidden])", 1, T)
        .await?;
    assert!(
        b.text("[data-testid=login-error]")
            .await?
            .contains("unknown token")
    );

    // The viewer: everything to see, nothing to press.
    b.fill("[data-testid=login-token]", &view).await?;
    b.click("[data-testid=login-submit]").await?;
    b.wait_attr("[data-testid=server-phase]", "data-phase", T, |p| {
        p == "ready"
    })
    .await?;
    b.wait_attr("[data-testid=user]", "data-role", T, |r| r == "viewer")
        .await?;
    assert!(b.text("[data-testid=user]").await?.contains("victor"));
    b.wait_count("[data-testid=gpu-card]", 8, T).await?;
    for button in ["open-restart", "open-stop", "open-start", "open-bench"] {
        let found = b
            .client
            .find_all(Locator::Css(&format!("[data-testid={button}]")))
            .await?;
        assert!(found.is_empty(), "a viewer has no {button} button");
    }
    // Nor the ledger's label editor (the rows are drawn without it)…
    b.wait_count(
        "[data-testid=flagset-bar], [data-testid=flagset-nodata]",
        2,
        T,
    )
    .await?;
    assert_eq!(
        count(&b, "[data-testid=label-edit]").await?,
        0,
        "a viewer can edit labels"
    );
    // …nor the running benchmark's Cancel (there, but hidden)…
    b.wait_count("[data-testid=bench-progress]", 1, T).await?;
    for cancel in b
        .client
        .find_all(Locator::Css("[data-testid=bench-cancel]"))
        .await?
    {
        assert!(
            !cancel.is_displayed().await?,
            "a viewer sees the benchmark's Cancel"
        );
    }
    assert_eq!(
        count(&b, "[data-testid=bench-cancel]:not([hidden])").await?,
        0,
        "a viewer's Cancel is not hidden"
    );
    // …nor the comparison's "restart with" buttons.
    for id in [&base, &slow] {
        b.click(&format!("[data-testid=compare-check][data-flagset='{id}']"))
            .await?;
    }
    b.wait_count("[data-testid=compare-panel]", 1, T).await?;
    assert_eq!(
        count(&b, "[data-testid=restart-with]").await?,
        0,
        "a viewer can restart with a set"
    );
    b.wait_text(
        &b.client
            .find(Locator::Css("[data-testid=presence]"))
            .await?,
        T,
        |t| t.contains("1 connected"),
    )
    .await?;
    b.screenshot("viewer").await?;

    // Logging out leads back to the login page; the operator gets the buttons.
    b.click("[data-testid=logout]").await?;
    b.wait_count("[data-testid=login-form]", 1, T).await?;
    b.fill("[data-testid=login-token]", &op).await?;
    b.click("[data-testid=login-submit]").await?;
    b.wait_attr("[data-testid=user]", "data-role", T, |r| r == "operator")
        .await?;
    // The same page state offers the operator what the viewer lacked: an edit
    // button per set, "restart with" either of the two compared (ticked again
    // where logging in cleared the comparison)…
    b.wait_count("[data-testid=label-edit]", 2, T).await?;
    for id in [&base, &slow] {
        let check = format!("[data-testid=compare-check][data-flagset='{id}']");
        if !b
            .client
            .find(Locator::Css(&check))
            .await?
            .is_selected()
            .await?
        {
            b.click(&check).await?;
        }
    }
    b.wait_count("[data-testid=compare-panel]", 1, T).await?;
    b.wait_count("[data-testid=restart-with]", 2, T).await?;
    // …and the benchmark's Cancel, shown, which cancels it.
    b.wait_count("[data-testid=bench-cancel]:not([hidden])", 1, T)
        .await?;
    let cancel = b
        .client
        .find(Locator::Css("[data-testid=bench-cancel]"))
        .await?;
    assert!(cancel.is_displayed().await?);
    b.click("[data-testid=bench-cancel]").await?;
    let deadline = Instant::now() + T;
    loop {
        let run = app.get_json(&format!("/api/bench/runs/{run_id}")).await?;
        if run["status"] == "cancelled" {
            break;
        }
        anyhow::ensure!(
            run["status"] == "running" && Instant::now() < deadline,
            "the benchmark was not cancelled: {run}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    b.wait_count("[data-testid=open-restart]", 1, T).await?;
    b.wait_enabled(
        &b.client
            .find(Locator::Css("[data-testid=open-restart]"))
            .await?,
        T,
    )
    .await?;
    // Its restart dialog goes through the session's CSRF token.
    b.click("[data-testid=open-restart]").await?;
    b.wait_count("[data-testid=restart-dialog]", 1, T).await?;
    b.fill("[data-testid=confirm-input]", "sim").await?;
    let confirm = b
        .client
        .find(Locator::Css("[data-testid=confirm-action]"))
        .await?;
    b.wait_enabled(&confirm, T).await?;
    confirm.click().await?;
    // While it runs, the server panel says who started it.
    let deadline = Instant::now() + 3 * T;
    loop {
        let who = match b.client.find(Locator::Css("[data-testid=stage-who]")).await {
            Ok(el) => el.text().await.unwrap_or_default(),
            Err(_) => String::new(),
        };
        if who.contains("olga") {
            break;
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "the running restart never said who started it"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Start, the API's restart, then this one.
    let ready = app.wait_phase(Phase::Ready, 3 * T).await?;
    assert_eq!(ready.generation, 3);
    b.wait_attr("[data-testid=history-row]", "data-outcome", 3 * T, |o| {
        o == "succeeded"
    })
    .await?;
    let audit = app.get_json("/api/audit").await?;
    assert!(audit.to_string().contains("olga ("), "{audit}");
    // The newest record is the page's restart, by the operator's name (the
    // earlier ones were made with the token over the API).
    let restarts = app.get_json("/api/restarts").await?;
    assert_eq!(restarts.as_array().map(Vec::len), Some(3), "{restarts}");
    assert_eq!(restarts[0]["kind"], "restart", "{restarts}");
    assert!(
        restarts[0]["requested_by"]
            .as_str()
            .is_some_and(|w| w.starts_with("olga (")),
        "{restarts}"
    );
    b.client.close().await?;
    Ok(())
}
