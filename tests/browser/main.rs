//! Browser tests: the built UI in headless Chromium against the real backend on a
//! simulated host. They run one at a time (one Chromium is plenty for two cores).

use std::time::Duration;

use fantoccini::Locator;
use tests::browser::Browser;
use tests::{SimHost, SimServer, spawn_app, spawn_foreign};
use tokio::sync::Mutex;

mod campaign;
mod engine;
mod fleet;
mod health;
mod login;
mod throughput;

static ONE_AT_A_TIME: Mutex<()> = Mutex::const_new(());

/// A small benchmark of the real engine.
pub(crate) fn engine_settings() -> serde_json::Value {
    serde_json::json!({"concurrency": [2], "num_prompts": 4, "input_len": 32,
                       "output_len": 16, "warmup": 0, "repeats": 3})
}
const T: Duration = Duration::from_secs(20);

#[tokio::test]
async fn dashboard_shows_gpus_processes_and_live_numbers() -> anyhow::Result<()> {
    let _one = ONE_AT_A_TIME.lock().await;
    let host = SimHost::new(500);
    let foreign = spawn_foreign(&host, 3, 1.5)?;
    let port = tests::managed::free_port();
    let app = spawn_app(&host, &["--server-port", &port.to_string()])?;
    let b = Browser::start().await?;
    b.client.goto(&app.url("/")).await?;

    assert_eq!(b.wait_count("[data-testid=gpu-card]", 8, T).await?, 8);
    b.wait_attr("[data-testid=conn-badge]", "data-state", T, |s| s == "live")
        .await?;
    // The server starts once the page is live, so the page sees its warm-up.
    let server = SimServer::launch_on(&host, port, 8, 12_000)?;
    let banner = b
        .client
        .find(Locator::Css("[data-testid=simulated-banner]"))
        .await?;
    assert!(banner.text().await?.to_lowercase().contains("simulated"));

    // The numbers follow the host: GPU 0's memory climbs during the warm-up.
    let used = "[data-testid=gpu-card][data-gpu-index='0'] [data-testid=gpu-mem-used]";
    let first: u64 = b
        .wait_attr(used, "data-bytes", T, |_| true)
        .await?
        .parse()?;
    let later: u64 = b
        .wait_attr(used, "data-bytes", T, |v| {
            v.parse::<u64>().is_ok_and(|n| n > first + (1 << 30))
        })
        .await?
        .parse()?;
    assert!(later > first);

    // The process tree: the server's root and 8 workers, and the foreign decoy.
    b.wait_count("[data-testid=process-row][data-role=server]", 9, T)
        .await?;
    let root = format!(
        "[data-testid=process-row][data-pid='{}']",
        server.proc.pid()
    );
    assert_eq!(b.attr(&root, "data-role").await?.as_deref(), Some("server"));
    let decoy = format!("[data-testid=process-row][data-pid='{}']", foreign.pid());
    b.wait_count(&decoy, 1, T).await?;
    assert_eq!(
        b.attr(&decoy, "data-role").await?.as_deref(),
        Some("foreign")
    );

    // Let the warm-up finish for a representative picture.
    b.wait_attr(used, "data-bytes", T, |v| {
        v.parse::<u64>().is_ok_and(|n| n >= 88 << 30)
    })
    .await?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let shot = b.screenshot("dashboard").await?;
    eprintln!("screenshot: {}", shot.display());
    b.client.close().await?;
    Ok(())
}

#[tokio::test]
async fn badge_shows_reconnecting_when_backend_stops_and_live_when_it_returns() -> anyhow::Result<()>
{
    let _one = ONE_AT_A_TIME.lock().await;
    let host = SimHost::new(100);
    let app = spawn_app(&host, &[])?;
    let addr = app.addr.clone();
    let b = Browser::start().await?;
    b.client.goto(&app.url("/")).await?;
    b.wait_attr("[data-testid=conn-badge]", "data-state", T, |s| s == "live")
        .await?;

    drop(app); // SIGKILL: the socket dies without a close frame.
    b.wait_attr("[data-testid=conn-badge]", "data-state", T, |s| {
        s == "reconnecting"
    })
    .await?;
    b.screenshot("reconnecting").await?;

    let _back = spawn_app(&host, &["--bind", &addr])?;
    b.wait_attr("[data-testid=conn-badge]", "data-state", T, |s| s == "live")
        .await?;
    assert_eq!(b.wait_count("[data-testid=gpu-card]", 8, T).await?, 8);
    b.client.close().await?;
    Ok(())
}

#[tokio::test]
async fn a_restart_through_the_dialog_with_the_drain_chart() -> anyhow::Result<()> {
    use tests::managed::{ServerSpec, spawn_managed};
    let _one = ONE_AT_A_TIME.lock().await;
    let host = SimHost::new(300);
    // A warm-up long enough that the page is seen mid-restart on a loaded machine.
    let spec = ServerSpec {
        warmup_ms: 5_000,
        ..ServerSpec::default()
    };
    let app = spawn_managed(&host, &spec, &[])?;
    app.start_server().await?;
    let b = Browser::start().await?;
    b.client.goto(&app.url("/")).await?;
    b.wait_attr("[data-testid=server-phase]", "data-phase", T, |p| {
        p == "ready"
    })
    .await?;
    let generation: u64 = b
        .client
        .find(Locator::Css("[data-testid=server-generation]"))
        .await?
        .text()
        .await?
        .chars()
        .filter(char::is_ascii_digit)
        .collect::<String>()
        .parse()?;
    assert_eq!(generation, 1);
    // How the server is contained, plainly: its own cgroup leaf.
    let leaf = app
        .server()
        .await?
        .server_cgroup
        .expect("the server's cgroup");
    let contain = b
        .client
        .find(Locator::Css("[data-testid=server-containment]"))
        .await?;
    let shown = contain.text().await?;
    assert!(shown.contains(&format!("cgroup {leaf}")), "{shown}");
    assert_eq!(
        contain.attr("data-degraded").await?.as_deref(),
        Some("false")
    );

    // The dialog: change --tp, see the diff and what will be killed.
    b.client
        .find(Locator::Css("[data-testid=open-restart]"))
        .await?
        .click()
        .await?;
    b.wait_count("[data-testid=restart-dialog]", 1, T).await?;
    let tp = b.client.find(Locator::Css("[data-testid=flag-input][data-flag='--tp'] input, [data-testid=flag-input][data-flag='--tp'] select")).await?;
    tp.clear().await?;
    tp.send_keys("2").await?;
    let diff = b
        .client
        .find(Locator::Css("[data-testid=flag-diff]"))
        .await?;
    b.wait_text(&diff, T, |t| t.contains("--tp") && t.contains('2'))
        .await?;
    let kill = b
        .client
        .find(Locator::Css("[data-testid=kill-list]"))
        .await?
        .text()
        .await?;
    assert!(
        kill.contains(&app.server().await?.root.expect("root").pid.to_string()),
        "{kill}"
    );

    // Typed confirmation: the button stays disabled until the name is typed.
    let confirm = b
        .client
        .find(Locator::Css("[data-testid=confirm-action]"))
        .await?;
    assert!(!confirm.is_enabled().await?);
    let input = b
        .client
        .find(Locator::Css("[data-testid=confirm-input]"))
        .await?;
    input.send_keys("si").await?;
    assert!(!confirm.is_enabled().await?);
    input.send_keys("m").await?;
    b.wait_enabled(&confirm, T).await?;
    confirm.click().await?;

    // The whole team sees it happen. Its record, opened while it runs, grows
    // live: the drain chart gains points during the warm-up.
    b.wait_attr("[data-testid=server-phase]", "data-phase", T, |p| {
        p != "ready"
    })
    .await?;
    b.wait_attr("[data-testid=history-row]", "data-outcome", T, |o| {
        o == "running"
    })
    .await?;
    b.click("[data-testid=history-row]").await?;
    b.wait_attr("[data-testid=server-phase]", "data-phase", T, |p| {
        p == "warming_up"
    })
    .await?;
    let points = |v: &str| v.parse::<usize>().unwrap_or(0);
    let seen = points(
        &b.wait_attr("[data-testid=drain-chart]", "data-points", T, |v| {
            points(v) > 0
        })
        .await?,
    );
    b.wait_attr("[data-testid=drain-chart]", "data-points", T, |v| {
        points(v) >= seen + 20
    })
    .await?;
    b.wait_attr("[data-testid=server-phase]", "data-phase", 2 * T, |p| {
        p == "ready"
    })
    .await?;
    let status = app.server().await?;
    assert_eq!(status.flags["--tp"], "2");
    b.wait_attr("[data-testid=history-row]", "data-outcome", T, |o| {
        o == "succeeded"
    })
    .await?;

    // The restart's detail, still open: the drain chart with all its markers.
    b.wait_count(
        "[data-testid=restart-detail] [data-testid=drain-chart]",
        1,
        T,
    )
    .await?;
    b.wait_count(
        "[data-testid=drain-chart] polyline, [data-testid=drain-chart] path",
        4,
        T,
    )
    .await?;
    for kind in ["sigterm", "verified", "launch", "ready"] {
        b.wait_count(
            &format!("[data-testid=chart-marker][data-kind={kind}]"),
            1,
            T,
        )
        .await?;
    }
    b.screenshot("restart-detail").await?;
    b.client.close().await?;
    Ok(())
}

/// Serves a page at `127.0.0.2` (another origin) that frames `target` and, as
/// the control, a page of its own.
async fn framing_page(target: String) -> anyhow::Result<(String, tokio::task::JoinHandle<()>)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.2:0").await?;
    let url = format!("http://{}/", listener.local_addr()?);
    let task = tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            let target = target.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 4096];
                let n = sock.read(&mut buf).await.unwrap_or(0);
                let req = String::from_utf8_lossy(&buf[..n]);
                let body = if req.starts_with("GET /child") {
                    "<!doctype html><p id=child>the framing site's own page</p>".to_owned()
                } else {
                    format!(
                        "<!doctype html><title>elsewhere</title><h1 id=own>another site</h1>\
                         <iframe id=dw src=\"{target}\" width=900 height=600></iframe>\
                         <iframe id=control src=\"/child\"></iframe>"
                    )
                };
                let resp = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: text/html\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = sock.write_all(resp.as_bytes()).await;
            });
        }
    });
    Ok((url, task))
}

#[tokio::test]
async fn the_app_loads_under_its_policy_and_no_other_site_can_frame_it() -> anyhow::Result<()> {
    let _one = ONE_AT_A_TIME.lock().await;
    let host = SimHost::new(500);
    let app = spawn_app(&host, &[])?;
    let b = Browser::start().await?;
    // Under its own Content-Security-Policy the app runs (its script is a file,
    // its WebAssembly allowed) and its socket connects.
    b.client.goto(&app.url("/")).await?;
    assert_eq!(b.wait_count("[data-testid=gpu-card]", 8, T).await?, 8);
    b.wait_attr("[data-testid=conn-badge]", "data-state", T, |s| s == "live")
        .await?;

    let (elsewhere, server) = framing_page(app.url("/")).await?;
    b.client.goto(&elsewhere).await?;
    b.wait_count("#own", 1, T).await?;
    // The control: this browser shows a frame the policy does not forbid.
    b.client.enter_frame(1).await?;
    b.wait_count("#child", 1, T).await?;
    b.client.enter_parent_frame().await?;
    // drainwatch's frame stays empty: no app, no GPU, no button to click.
    tokio::time::sleep(Duration::from_secs(2)).await;
    b.client.enter_frame(0).await?;
    let inside = b
        .client
        .execute(
            "return [location.href, document.querySelectorAll('[data-testid]').length]",
            vec![],
        )
        .await;
    match inside {
        Ok(v) => {
            assert_ne!(v[0].as_str(), Some(app.url("/").as_str()), "{v}");
            assert_eq!(v[1].as_u64(), Some(0), "{v}");
        }
        // Chromium's error page may not even be scriptable: nothing of ours.
        Err(e) => eprintln!("the blocked frame is not scriptable: {e}"),
    }
    server.abort();
    b.client.close().await?;
    Ok(())
}
