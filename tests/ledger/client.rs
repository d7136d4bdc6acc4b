//! A load generator that cannot keep up is caught: starved of its runtime, the
//! repeat is marked as measuring the client, not the server.

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use drainwatch::bench::load::{self, Counters, Target};
use drainwatch::bench::saturation::Monitor;
use shared::bench::BenchApi;
use tests::{Proc, SimHost, bin};

/// The simulated server on its own, fast (2 ms per token).
fn server(host: &SimHost) -> anyhow::Result<(Proc, Target)> {
    let port = tests::managed::free_port();
    let mut cmd = Command::new(bin("simserver"));
    cmd.args(["launch", "--port", &port.to_string(), "--tp", "1"])
        .args(["--warmup-ms", "100", "--itl-ms", "2", "--ttft-ms", "5"])
        .env(simhost::HOST_DIR_ENV, host.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let mut p = Proc::spawn(&mut cmd)?;
    p.read_line_with("simserver listening on ")?;
    let target = Target {
        base_url: format!("http://127.0.0.1:{port}"),
        api: BenchApi::Completions,
        model: "default".into(),
        api_key: None,
        tokenizer: None,
        engine: drainwatch::config::file::Engine::Other,
    };
    Ok((p, target))
}

/// One repeat of 32 requests from 8 clients on a one-thread runtime, with
/// something else blocking that thread for `hog` at a time when given.
fn repeat(target: &Target, hog: Option<Duration>) -> anyhow::Result<shared::bench::ClientHealth> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        // Until /health says ready.
        for _ in 0..100 {
            let ok = reqwest::get(format!("{}/health", target.base_url))
                .await
                .is_ok_and(|r| r.status().is_success());
            if ok {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let (_stop, cancel) = tokio::sync::watch::channel(load::Halt::Run);
        let hogging = hog.map(|h| {
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    std::thread::sleep(h);
                }
            })
        });
        let monitor = Monitor::start();
        let (outcomes, _) = load::level(
            &load::client(8),
            target,
            drainwatch::bench::prompts::Prompts::new(32, 16, 1),
            8,
            32,
            Arc::new(Counters::default()),
            cancel,
        )
        .await;
        let health = monitor.finish(&outcomes, false).await;
        if let Some(h) = hogging {
            h.abort();
        }
        anyhow::ensure!(outcomes.iter().all(|o| o.ok), "failed requests");
        Ok(health)
    })
}

#[test]
fn a_starved_generator_marks_its_repeat_and_a_calm_one_does_not() -> anyhow::Result<()> {
    let _alone = crate::MEASURING.blocking_write();
    let host = SimHost::new(100);
    let (_server, target) = server(&host)?;
    let calm = repeat(&target, None)?;
    eprintln!("calm: {calm:?}");
    assert_eq!(calm.saturated, None, "{calm:?}");
    assert!(calm.cores >= 1 && calm.cpu_pct >= 0.0);
    let starved = repeat(&target, Some(Duration::from_millis(60)))?;
    eprintln!("starved: {starved:?}");
    let why = starved.saturated.clone().expect("marked saturated");
    assert!(why.contains("event loop woke"), "{why}");
    assert!(starved.lag_p99_ms >= 40.0, "{starved:?}");
    Ok(())
}
