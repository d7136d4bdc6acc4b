//! Open loop: requests sent at a requested rate whatever the server's pace,
//! goodput under SLOs, and a rate sweep that finds the highest rate that still
//! meets them.

use std::time::Duration;

use serde_json::{Value, json};
use tests::TestApp;
use tests::managed::{ServerSpec, spawn_managed};

async fn restart_into(app: &TestApp, mode: &str) -> anyhow::Result<()> {
    let id = app.restart(json!({"SIMSERVER_MODE": mode})).await?;
    let done = app.finished_restart(id, Duration::from_secs(30)).await?;
    anyhow::ensure!(done["summary"]["outcome"] == "succeeded", "{done}");
    Ok(())
}

/// A counter of the simulated server's `/metrics`.
async fn server_counter(spec: &ServerSpec, name: &str) -> anyhow::Result<f64> {
    let text = reqwest::get(format!("http://127.0.0.1:{}/metrics", spec.port))
        .await?
        .text()
        .await?;
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .find(|l| l.split([' ', '{']).next() == Some(name))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| anyhow::anyhow!("no {name} in /metrics"))
}

/// 40 requests/s for 10 s per repeat (30 s of load); every seventh request is
/// three times slower per token. The achieved rate is the requested one, and
/// the good requests are exactly those the server did not slow down.
#[tokio::test]
async fn the_requested_rate_is_achieved_and_goodput_counts_what_the_server_served_well()
-> anyhow::Result<()> {
    let _alone = crate::MEASURING.write().await;
    let host = tests::SimHost::new(100);
    // The simulated model's tokenizer sizes the prompts: with none, two
    // one-token completions would, and this test counts every request the
    // server serves.
    let spec = ServerSpec {
        tp: 1,
        warmup_ms: 200,
        itl_ms: 10.0,
        ttft_ms: 20.0,
        batch_knee: 1e9,
        extra: format!(
            "[bench]\ntokenizer = \"{}/data/sim-model\"\n",
            env!("CARGO_MANIFEST_DIR")
        ),
        ..ServerSpec::default()
    };
    let app = spawn_managed(&host, &spec, &[])?;
    app.start_server().await?;
    restart_into(&app, "slow-every=7").await?;
    let (slow0, all0) = (
        server_counter(&spec, "simserver_slow_requests_total").await?,
        server_counter(&spec, "sglang:num_requests_total").await?,
    );
    // Normal requests: TPOT 10 ms; slow ones 30 ms. The SLO sits between.
    let run = app
        .bench(
            json!({"request_rate": [40.0], "num_prompts": 400, "output_len": 8,
                      "input_len": 16, "warmup": 0, "repeats": 3, "max_concurrency": 64,
                      "slo": {"tpot_ms": 20.0, "ttft_ms": 1000.0}}),
        )
        .await?;
    anyhow::ensure!(run["status"] == "succeeded", "{run}");
    assert_eq!(
        run["provenance"]["prompt_sizing"]["by"], "the model's tokenizer.json",
        "{run}"
    );
    let mut good = 0;
    for r in run["repeats"].as_array().expect("repeats") {
        assert_eq!(r["request_rate"], 40.0, "{r}");
        let achieved = r["achieved_rate"].as_f64().expect("achieved");
        eprintln!("achieved {achieved:.3} requests/s of 40");
        assert!((achieved / 40.0 - 1.0).abs() < 0.02, "achieved {achieved}");
        assert_eq!(r["failed"], 0, "{r}");
        good += r["good"].as_u64().expect("good");
        let goodput = r["goodput_req_s"].as_f64().expect("goodput");
        let duration = r["duration_s"].as_f64().expect("duration");
        assert!((goodput - r["good"].as_f64().expect("good") / duration).abs() < 1e-9);
    }
    let slow = server_counter(&spec, "simserver_slow_requests_total").await? - slow0;
    let all = server_counter(&spec, "sglang:num_requests_total").await? - all0;
    assert_eq!(all, 1200.0);
    assert!(slow > 100.0, "{slow}");
    assert_eq!(
        good as f64,
        all - slow,
        "good requests vs what the server served well"
    );
    let level = &run["levels"][0];
    assert_eq!(level["request_rate"], 40.0);
    // Six in seven good: 86 %, under the default 90 % attainment.
    assert_eq!(level["meets_slo"], false, "{level}");
    Ok(())
}

/// A sweep of request rates on a server that slows down with its batch: the
/// ledger names the highest rate whose requests still met the SLOs.
#[tokio::test]
async fn a_rate_sweep_finds_the_highest_rate_that_meets_the_slos() -> anyhow::Result<()> {
    let _load = crate::MEASURING.read().await;
    let host = tests::SimHost::new(100);
    // ITL 10 ms alone, doubled at 5 in flight.
    let spec = ServerSpec {
        tp: 1,
        warmup_ms: 200,
        itl_ms: 10.0,
        ttft_ms: 20.0,
        batch_knee: 4.0,
        ..ServerSpec::default()
    };
    let app = spawn_managed(&host, &spec, &[])?;
    app.start_server().await?;
    let run = app
        .bench(
            json!({"request_rate": [2.0, 8.0, 60.0], "num_prompts": 10, "output_len": 16,
                      "input_len": 16, "warmup": 0, "repeats": 3,
                      "slo": {"tpot_ms": 16.0}}),
        )
        .await?;
    anyhow::ensure!(run["status"] == "succeeded", "{run}");
    let met: Vec<(f64, Value)> = run["levels"]
        .as_array()
        .expect("levels")
        .iter()
        .map(|l| {
            (
                l["request_rate"].as_f64().expect("rate"),
                l["meets_slo"].clone(),
            )
        })
        .collect();
    eprintln!("{met:?}");
    assert_eq!(met[0], (2.0, json!(true)));
    assert_eq!(met[2], (60.0, json!(false)));
    let ledger = app.get_json("/api/flagsets").await?;
    let row = &ledger.as_array().expect("rows")[0];
    let rates: Vec<f64> = row["rate_levels"]
        .as_array()
        .expect("rate levels")
        .iter()
        .map(|l| l["request_rate"].as_f64().expect("rate"))
        .collect();
    assert_eq!(rates, [2.0, 8.0, 60.0]);
    let best = if met[1].1 == json!(true) { 8.0 } else { 2.0 };
    assert_eq!(row["best_rate"], best, "{row}");
    // Closed-loop levels stay apart from the sweep's.
    assert!(
        row["levels"].as_object().is_some_and(|l| l.is_empty()),
        "{row}"
    );
    Ok(())
}
