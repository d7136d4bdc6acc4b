//! GPU health in the page: an XID raised while the page is open puts a badge
//! on its GPU's card (the details on hover); MIG devices under their GPU; a
//! field the GPU lacks reads "not supported"; a launch the health check
//! refused is overridden from the dialog by typing the GPU.

use fantoccini::Locator;
use tests::SimHost;
use tests::browser::Browser;
use tests::managed::{ServerSpec, spawn_managed};

use super::{ONE_AT_A_TIME, T};

fn card(gpu: u32, inner: &str) -> String {
    format!("[data-testid=gpu-card][data-gpu-index='{gpu}'] {inner}")
}

#[tokio::test]
async fn health_badges_mig_devices_and_an_override_in_the_page() -> anyhow::Result<()> {
    let _one = ONE_AT_A_TIME.lock().await;
    let mut host = SimHost::new(200);
    host.two_mig_instances(5)?;
    host.set_faults(
        6,
        simhost::GpuFaults {
            ecc: Some(simhost::Fault::NotSupported),
            ..simhost::GpuFaults::default()
        },
    )?;
    // GPU 7 runs hot: throttled, a warning only.
    simhost::set_health(&host.path(), 7, |h| h.clocks_event_reasons = 0x40)?;
    let spec = ServerSpec {
        warmup_ms: 800,
        ..ServerSpec::default()
    };
    let app = spawn_managed(&host, &spec, &[])?;
    app.start_server().await?;
    let b = Browser::start().await?;
    b.client.goto(&app.url("/")).await?;
    assert_eq!(b.wait_count("[data-testid=gpu-card]", 8, T).await?, 8);

    // Clocks and link in units on every card; not supported where it is not.
    let sm = b
        .client
        .find(Locator::Css(&card(0, "[data-testid=gpu-h-SM]")))
        .await?;
    b.wait_text(&sm, T, |t| t.starts_with("SM ") && t.ends_with(" MHz"))
        .await?;
    let ecc6 = b
        .client
        .find(Locator::Css(&card(6, "[data-testid=gpu-h-ECC]")))
        .await?;
    b.wait_text(&ecc6, T, |t| t == "ECC not supported").await?;
    assert_eq!(
        ecc6.attr("data-unsupported").await?.as_deref(),
        Some("true")
    );
    assert_eq!(b.text(&card(0, "[data-testid=gpu-h-ECC]")).await?, "ECC ok");

    // MIG: GPU 5's two devices, under it.
    assert_eq!(
        b.wait_count(&card(5, "[data-testid=gpu-mig-device]"), 2, T)
            .await?,
        2
    );
    let mig = b.text(&card(5, "[data-testid=gpu-mig]")).await?;
    assert!(
        mig.contains("1g.24gb") && mig.contains("3.0 GiB / 24.0 GiB"),
        "{mig}"
    );

    // A throttled GPU wears a warning; a healthy one nothing.
    b.wait_attr(
        &card(7, "[data-testid=gpu-health-badge]"),
        "data-level",
        T,
        |l| l == "warn",
    )
    .await?;
    // (Counted once the page shows GPU 7's badge: the same sample drew both.)
    let count = |css: String| {
        let b = &b;
        async move { anyhow::Ok(b.client.find_all(Locator::Css(&css)).await?.len()) }
    };
    assert_eq!(count(card(1, "[data-testid=gpu-health-badge]")).await?, 0);
    assert_eq!(count(card(0, "[data-testid=gpu-mig-device]")).await?, 0);

    // An XID while the page is open: a red badge on GPU 2, details on hover.
    simhost::raise_xid(&host.path(), 2, 79)?;
    let badge = card(2, "[data-testid=gpu-health-badge]");
    b.wait_attr(&badge, "data-reasons", T, |r| r == "xid")
        .await?;
    assert_eq!(b.attr(&badge, "data-level").await?.as_deref(), Some("bad"));
    assert_eq!(b.text(&badge).await?, "XID 79");
    let title = b.attr(&badge, "title").await?.unwrap_or_default();
    assert_eq!(title, "GPU 2: XID error (XID 79)");
    b.screenshot("gpu-health").await?;

    // The restart dialog says beforehand that the check may refuse GPU 2.
    b.click("[data-testid=open-restart]").await?;
    b.wait_attr("[data-testid=health-override]", "data-last", T, |l| {
        l == "false"
    })
    .await?;
    let ahead = b.text("[data-testid=health-override]").await?;
    assert!(
        ahead.contains("may refuse") && ahead.contains("GPU 2: XID error"),
        "{ahead}"
    );
    // Asked without the override, the restart is refused before anything
    // stops: the dialog says so, and the server serves on.
    let before = app.server().await?;
    b.fill("[data-testid=confirm-input]", "sim").await?;
    let confirm = b
        .client
        .find(Locator::Css("[data-testid=confirm-action]"))
        .await?;
    b.wait_enabled(&confirm, T).await?;
    confirm.click().await?;
    b.wait_count("[data-testid=dialog-error]", 1, T).await?;
    let said = b.text("[data-testid=dialog-error]").await?;
    assert!(
        said.contains("refuses GPU 2") && said.contains("nothing was stopped"),
        "{said}"
    );
    b.screenshot("health-refused-before-drain").await?;
    let now = app.server().await?;
    assert_eq!(
        (now.phase, now.root, now.generation),
        (
            shared::restart::Phase::Ready,
            before.root,
            before.generation
        )
    );

    // …and overridden in the same dialog, once, by typing the GPU.
    let refused = b.text("[data-testid=health-override]").await?;
    assert!(refused.contains("GPU 2: XID error"), "{refused}");
    b.fill("[data-testid=override-input]", "GPU 2").await?;
    b.screenshot("health-override").await?;
    let confirm = b
        .client
        .find(Locator::Css("[data-testid=confirm-action]"))
        .await?;
    b.wait_enabled(&confirm, T).await?;
    confirm.click().await?;
    // The overridden restart ends ready, a generation on (the page was
    // ready before it began, while the check ran).
    app.wait_for_state("the overridden restart", 2 * T, |st| {
        st.server.as_ref().is_some_and(|v| {
            v.generation > before.generation
                && v.phase == shared::restart::Phase::Ready
                && v.operation.is_none()
        })
    })
    .await?;
    b.wait_attr("[data-testid=server-phase]", "data-phase", 2 * T, |p| {
        p == "ready"
    })
    .await?;
    let audit = app.get_json("/api/audit?limit=20").await?;
    assert!(
        audit
            .to_string()
            .contains("health check overridden: GPU 2: XID error"),
        "{audit}"
    );
    assert!(host.foreign_signals().is_empty());
    b.client.close().await?;
    Ok(())
}
