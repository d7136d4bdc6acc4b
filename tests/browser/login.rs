//! Logging in through the page: a viewer sees everything but no button that
//! changes anything; an operator gets them, and other tabs see who is here.

use fantoccini::Locator;
use tests::managed::{ServerSpec, spawn_managed};
use tests::{SimHost, auth_file};

use crate::{ONE_AT_A_TIME, T};

#[tokio::test]
async fn a_viewer_sees_no_restart_button_and_an_operator_does() -> anyhow::Result<()> {
    let _one = ONE_AT_A_TIME.lock().await;
    let host = SimHost::new(100);
    let (path, op, view) = auth_file(host.scratch(), "");
    // A warm-up long enough that the page is seen mid-restart on a loaded machine.
    let spec = ServerSpec {
        warmup_ms: 5_000,
        ..ServerSpec::default()
    };
    let app =
        spawn_managed(&host, &spec, &["--auth", path.to_str().expect("utf-8")])?.with_token(&op);
    app.start_server().await?;

    let b = tests::browser::Browser::start().await?;
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
    let deadline = std::time::Instant::now() + 3 * T;
    loop {
        let who = match b.client.find(Locator::Css("[data-testid=stage-who]")).await {
            Ok(el) => el.text().await.unwrap_or_default(),
            Err(_) => String::new(),
        };
        if who.contains("olga") {
            break;
        }
        anyhow::ensure!(
            std::time::Instant::now() < deadline,
            "the running restart never said who started it"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    b.wait_attr("[data-testid=history-row]", "data-outcome", 3 * T, |o| {
        o == "succeeded"
    })
    .await?;
    let audit = app.get_json("/api/audit").await?;
    assert!(audit.to_string().contains("olga ("), "{audit}");
    assert_eq!(app.server().await?.generation, 2);
    b.client.close().await?;
    Ok(())
}
