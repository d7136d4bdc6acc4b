//! The ledger: flag-set identity, labels, diffs, exclusion with restarts,
//! failures, correctness, cancellation and export.

use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::{Value, json};
use shared::restart::Phase;
use tests::managed::{ServerSpec, spawn_managed};
use tests::{SimHost, TestApp};

use crate::accuracy::spec;

async fn ready(spec: &ServerSpec) -> anyhow::Result<(SimHost, TestApp)> {
    let host = SimHost::new(100);
    let app = spawn_managed(&host, spec, &[])?;
    app.start_server().await?;
    Ok((host, app))
}

/// A short benchmark: 16 clients, 32 requests of 32 tokens, 3 repeats.
fn quick() -> Value {
    json!({"concurrency": [16], "num_prompts": 32, "output_len": 32, "input_len": 16, "warmup": 4, "repeats": 3})
}

#[tokio::test]
async fn speculative_decoding_sends_several_tokens_per_event_and_itl_stays_per_token()
-> anyhow::Result<()> {
    let _alone = crate::MEASURING.write().await;
    let spec = spec();
    let (_host, app) = ready(&spec).await?;
    let id = app
        .restart(json!({"--speculative-algorithm": "EAGLE"}))
        .await?;
    assert_eq!(
        app.finished_restart(id, Duration::from_secs(30)).await?["summary"]["outcome"],
        "succeeded"
    );
    let (c, n) = (16, 64);
    let run = app.bench(json!({"concurrency": [c], "num_prompts": 64, "output_len": n, "input_len": 16, "warmup": 16, "repeats": 3})).await?;
    let level = &run["levels"][0];
    // 1.8 × the speed, tokens three to an event.
    let itl = spec.itl_at(c) / 1.8;
    let truth = f64::from(c) * f64::from(n) / ((spec.ttft_at(c) + f64::from(n - 1) * itl) / 1e3);
    let measured = level["output_tok_s"]["median"].as_f64().expect("rate");
    assert!(
        (measured / truth - 1.0).abs() < 0.01,
        "measured {measured:.1}, true {truth:.1}"
    );
    let mean_itl = run["repeats"][0]["itl"]["mean_ms"].as_f64().expect("itl");
    assert!(
        (mean_itl / itl - 1.0).abs() < 0.03,
        "ITL {mean_itl} vs {itl} per token"
    );
    Ok(())
}

#[tokio::test]
async fn dropped_connections_are_counted_failures_not_a_wrong_rate() -> anyhow::Result<()> {
    let _load = crate::MEASURING.read().await;
    let (_host, app) = ready(&spec()).await?;
    let id = app
        .restart(json!({"SIMSERVER_MODE": "drop-every=4"}))
        .await?;
    app.finished_restart(id, Duration::from_secs(30)).await?;
    let run = app.bench(quick()).await?;
    assert_eq!(run["status"], "succeeded", "{run}");
    for r in run["repeats"].as_array().expect("repeats") {
        let (ok, failed) = (
            r["completed"].as_u64().expect("c"),
            r["failed"].as_u64().expect("f"),
        );
        assert_eq!(ok + failed, 32);
        assert_eq!(failed, 8, "{r}");
        // Only whole answers count, and the rate is theirs over the duration.
        assert_eq!(r["output_tokens"].as_u64(), Some(ok * 32));
        let rate = ok as f64 * 32.0 / r["duration_s"].as_f64().expect("d");
        assert!((r["output_tok_s"].as_f64().expect("r") - rate).abs() < 1e-6);
    }
    assert_eq!(run["levels"][0]["failed"], 24);
    Ok(())
}

#[tokio::test]
async fn reordered_flags_are_one_flag_set_and_sets_can_be_labelled_and_diffed() -> anyhow::Result<()>
{
    let _alone = crate::MEASURING.write().await;
    let (_host, app) = ready(&spec()).await?;
    let first = app.server().await?.flagset.expect("a flag set");
    app.bench(quick()).await?;
    // The same values asked for in another order, twice: the same set.
    let id = app
        .restart(json!({"SGLANG_OPT_USE_TILELANG_INDEXER": "1", "--enable-torch-compile": "true"}))
        .await?;
    app.finished_restart(id, Duration::from_secs(30)).await?;
    let second = app.server().await?.flagset.expect("set");
    let id = app
        .restart(json!({"--enable-torch-compile": "true", "SGLANG_OPT_USE_TILELANG_INDEXER": "1"}))
        .await?;
    app.finished_restart(id, Duration::from_secs(30)).await?;
    assert_eq!(
        app.server().await?.flagset.as_deref(),
        Some(second.as_str())
    );
    assert_ne!(first, second);
    app.bench(quick()).await?;

    let ledger = app.get_json("/api/flagsets").await?;
    let sets: Vec<&Value> = ledger.as_array().expect("ledger").iter().collect();
    assert_eq!(sets.len(), 2, "{ledger}");
    let faster = sets
        .iter()
        .find(|s| s["set"]["id"] == second.as_str())
        .expect("second");
    let slower = sets
        .iter()
        .find(|s| s["set"]["id"] == first.as_str())
        .expect("first");
    let rate = |s: &Value| {
        s["levels"]["16"]["output_tok_s"]["median"]
            .as_f64()
            .expect("rate")
    };
    // tilelang × torch.compile = 1.166 × the speed.
    assert!(
        rate(faster) > rate(slower) * 1.08,
        "{} vs {}",
        rate(faster),
        rate(slower)
    );

    let r = app
        .http
        .patch(app.url(&format!("/api/flagsets/{second}")))
        .json(&json!({"label": "+tilelang +compile", "notes": "from the fused kernel"}))
        .send()
        .await?;
    assert_eq!(r.status(), 204);
    let r = app
        .http
        .patch(app.url("/api/flagsets/nope"))
        .json(&json!({"label": "x"}))
        .send()
        .await?;
    assert_eq!(r.status(), 404);
    let r = app
        .http
        .patch(app.url(&format!("/api/flagsets/{second}")))
        .json(&json!({"label": "x".repeat(200)}))
        .send()
        .await?;
    assert_eq!(r.status(), 400);
    let d = app
        .get_json(&format!("/api/flagsets/diff?a={first}&b={second}"))
        .await?;
    assert_eq!(d["b"]["label"], "+tilelang +compile");
    let changes = d["changes"].as_array().expect("changes");
    assert!(
        changes
            .iter()
            .any(|c| c["name"] == "SGLANG_OPT_USE_TILELANG_INDEXER" && c["change"] == "added"),
        "{d}"
    );
    assert!(
        changes
            .iter()
            .any(|c| c["name"] == "--enable-torch-compile" && c["to"] == "true"),
        "{d}"
    );

    // The ledger as the page shows it, drawn by the agent for the picks.
    let v = app
        .get_json(&format!(
            "/api/flagsets/view?c=16&sort=first&compare={first},{second}"
        ))
        .await?;
    let ids: Vec<&str> = v["rows"]
        .as_array()
        .expect("rows")
        .iter()
        .filter_map(|r| r["id"].as_str())
        .collect();
    assert_eq!(ids, [first.as_str(), second.as_str()], "{v:#}");
    assert_eq!(
        (&v["c"], &v["baseline"]),
        (&json!(16), &json!(first)),
        "{v:#}"
    );
    assert_eq!(v["rows"][1]["label"], "+tilelang +compile");
    assert!(
        v["running_set"]
            .as_str()
            .is_some_and(|s| s.contains(&format!(r#"data-flagset="{second}""#))),
        "{v:#}"
    );
    let diff = v["compared"]["diff"].as_str().unwrap_or_default();
    assert!(diff.contains("SGLANG_OPT_USE_TILELANG_INDEXER"), "{v:#}");
    assert_eq!(v["compared"]["b"]["flagset"], second.as_str());
    let fast = app.get_json("/api/flagsets/view?c=16").await?;
    assert_eq!(
        fast["rows"][0]["id"],
        second.as_str(),
        "by throughput: {fast:#}"
    );
    let found = app
        .get_json("/api/flagsets/view?filter=%2Btilelang")
        .await?;
    assert_eq!(found["count"], "1 of 2 flag sets", "{found:#}");
    for bad in [
        "sort=x",
        "target=-1",
        "target=abc",
        "c=x",
        "compare=a,b,c",
        "nope=1",
        &format!("filter={}", "x".repeat(201)),
    ] {
        let r = app
            .http
            .get(app.url(&format!("/api/flagsets/view?{bad}")))
            .send()
            .await?;
        assert_eq!(r.status().as_u16(), 400, "{bad}");
    }
    Ok(())
}

/// `spec`'s server config with its base `args` replaced by `args`: the same
/// program, port, GPUs, allow-list and timeouts, another command line.
fn config_with_args(spec: &ServerSpec, args: &[&str]) -> String {
    let toml = spec.toml();
    let start = toml.find("args = [").expect("the config's base args");
    let end = start + toml[start..].find(']').expect("the end of the args") + 1;
    // Plain ASCII arguments: a Rust string literal is a TOML basic string.
    let list: Vec<String> = args.iter().map(|a| format!("{a:?}")).collect();
    format!(
        "{}args = [{}]{}",
        &toml[..start],
        list.join(", "),
        &toml[end..]
    )
}

/// Polls the ledger until `done` holds; returns it.
async fn ledger_until(
    app: &TestApp,
    what: &str,
    done: impl Fn(&[Value]) -> bool,
) -> anyhow::Result<Vec<Value>> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let ledger = app.get_json("/api/flagsets").await?;
        let sets = ledger.as_array().context("the ledger is a list")?.clone();
        if done(&sets) {
            return Ok(sets);
        }
        anyhow::ensure!(Instant::now() < deadline, "{what}: {ledger}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn the_same_base_arguments_in_another_order_are_one_flag_set() -> anyhow::Result<()> {
    let _load = crate::MEASURING.read().await;
    let host = SimHost::new(100);
    let spec = spec();
    let (port, tp, warmup) = (
        spec.port.to_string(),
        spec.tp.to_string(),
        spec.warmup_ms.to_string(),
    );
    let (itl, ttft, knee) = (
        spec.itl_ms.to_string(),
        spec.ttft_ms.to_string(),
        spec.batch_knee.to_string(),
    );
    let (port, tp, warmup) = (port.as_str(), tp.as_str(), warmup.as_str());
    let (itl, ttft, knee) = (itl.as_str(), ttft.as_str(), knee.as_str());
    let decoy = [
        "--",
        "python3",
        "-m",
        "sglang.launch_server",
        "--port",
        port,
    ];
    // The same arguments, three of them allow-listed (--tp, --warmup-ms and the
    // bare boolean --enable-torch-compile), in two different orders.
    let one: Vec<&str> = [
        "launch",
        "--port",
        port,
        "--tp",
        tp,
        "--enable-torch-compile",
        "--warmup-ms",
        warmup,
        "--itl-ms",
        itl,
        "--ttft-ms",
        ttft,
        "--batch-knee",
        knee,
    ]
    .into_iter()
    .chain(decoy)
    .collect();
    let other: Vec<&str> = [
        "launch",
        "--warmup-ms",
        warmup,
        "--batch-knee",
        knee,
        "--enable-torch-compile",
        "--ttft-ms",
        ttft,
        "--tp",
        tp,
        "--itl-ms",
        itl,
        "--port",
        port,
    ]
    .into_iter()
    .chain(decoy)
    .collect();
    let mut sorted = (one.clone(), other.clone());
    sorted.0.sort_unstable();
    sorted.1.sort_unstable();
    assert_eq!(sorted.0, sorted.1, "not the same arguments");
    assert_ne!(one, other, "not another order");

    // Two drainwatch configs, one after the other on the same data folder.
    let data = host.scratch().join("data");
    let data = data.to_str().context("utf-8")?.to_owned();
    let launch = |name: &str, args: &[&str]| -> anyhow::Result<TestApp> {
        let cfg = host.scratch().join(name);
        std::fs::write(&cfg, config_with_args(&spec, args))?;
        let cfg = cfg.to_str().context("utf-8")?.to_owned();
        tests::spawn_app(
            &host,
            &[
                "--config",
                cfg.as_str(),
                "--data-dir",
                data.as_str(),
                "--sample-interval-ms",
                "50",
            ],
        )
    };

    // The first launches the server from one order, then stops it.
    let app = launch("one.toml", &one)?;
    let a = app.start_server().await?.flagset.context("a flag set")?;
    let g = app.server().await?.generation;
    let (code, body) = app
        .post("/api/stop", &json!({"generation": g, "confirm": "sim"}))
        .await?;
    assert_eq!(code, 202, "{body}");
    app.wait_phase(Phase::Stopped, Duration::from_secs(30))
        .await?;
    // The launch is in the ledger (on disk) before this drainwatch goes.
    let sets = ledger_until(&app, "the first launch's set", |sets| {
        sets.iter().any(|s| s["set"]["id"] == a.as_str())
    })
    .await?;
    assert_eq!(sets.len(), 1, "{sets:?}");
    let first_seen = sets[0]["set"]["last_seen_ms"].as_u64().context("seen")?;
    drop(app);

    // The second launches it from the other order: the same set, seen again.
    let app = launch("other.toml", &other)?;
    let b = app.start_server().await?.flagset.context("a flag set")?;
    assert_eq!(b, a, "the order of the base arguments changed the flag set");
    let sets = ledger_until(&app, "the second launch recorded", |sets| {
        sets.iter()
            .any(|s| s["set"]["last_seen_ms"].as_u64() > Some(first_seen))
    })
    .await?;
    assert_eq!(
        sets.len(),
        1,
        "the second launch made another set: {sets:?}"
    );
    let set = &sets[0]["set"];
    assert_eq!(set["id"], a.as_str(), "{set}");
    // Every allow-listed flag read from the arguments, wherever it stood.
    assert_eq!(set["flags"]["--tp"], tp, "{set}");
    assert_eq!(set["flags"]["--warmup-ms"], warmup, "{set}");
    assert_eq!(set["flags"]["--enable-torch-compile"], "true", "{set}");
    Ok(())
}

/// Starts a benchmark that runs far longer than a test: its settings and id.
async fn long_bench(app: &TestApp) -> anyhow::Result<(Value, i64)> {
    let long = json!({"concurrency": [4], "num_prompts": 400, "output_len": 64, "warmup": 0, "repeats": 3});
    let (code, body) = app.post("/api/bench", &long).await?;
    assert_eq!(code, 202, "{body}");
    Ok((long, body["id"].as_i64().context("the benchmark's id")?))
}

#[tokio::test]
async fn a_benchmark_and_a_restart_exclude_each_other_and_a_benchmark_can_be_cancelled()
-> anyhow::Result<()> {
    let _load = crate::MEASURING.read().await;
    let (_host, app) = ready(&spec()).await?;
    let (long, run_id) = long_bench(&app).await?;
    // Nothing but a restart or a stop begins beside it (those cut it short:
    // `a_restart_cuts_a_running_benchmark_short`).
    let g = app.server().await?.generation;
    let (code, body) = app
        .post("/api/adopt", &json!({"generation": g, "confirm": "sim"}))
        .await?;
    assert_eq!(code, 409, "{body}");
    let (code, _) = app.post("/api/bench", &long).await?;
    assert_eq!(code, 409, "a second benchmark");
    // While it runs, the server's own metrics show the load.
    let s = app
        .wait_for_state("passive tok/s", Duration::from_secs(10), |s| {
            s.server
                .as_ref()
                .is_some_and(|v| v.passive.output_tok_s.is_some_and(|r| r > 100.0))
        })
        .await?;
    assert!(s.server.expect("server").has_metrics);
    // And its latency histograms: the medians of what it served lately, near
    // the simulated server's TTFT and ITL at four requests in flight (loose:
    // the point is that they are read, in milliseconds, from the right series).
    let spec = spec();
    let (ttft, itl) = (spec.ttft_at(4), spec.itl_at(4));
    let s = app
        .wait_for_state("passive latencies", Duration::from_secs(10), |s| {
            s.server
                .as_ref()
                .is_some_and(|v| v.passive.ttft_p50_ms.is_some() && v.passive.itl_p50_ms.is_some())
        })
        .await?;
    let p = s.server.expect("server").passive;
    let (got_ttft, got_itl) = (p.ttft_p50_ms.expect("ttft"), p.itl_p50_ms.expect("itl"));
    assert!(
        got_ttft > 0.5 * ttft && got_ttft < 2.0 * ttft + 20.0,
        "TTFT p50 {got_ttft} ms, the server's {ttft} ms"
    );
    assert!(
        got_itl > 0.5 * itl && got_itl < 2.0 * itl + 10.0,
        "ITL p50 {got_itl} ms, the server's {itl} ms"
    );
    let flagset = app.server().await?.flagset.context("a flag set")?;
    let (code, _) = app.post("/api/bench/cancel", &json!({})).await?;
    assert_eq!(code, 202);
    let deadline = Instant::now() + Duration::from_secs(20);
    let run = loop {
        let run = app.get_json(&format!("/api/bench/runs/{run_id}")).await?;
        if run["status"] != "running" {
            break run;
        }
        anyhow::ensure!(Instant::now() < deadline, "not cancelled: {run}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    // The run that was started, cancelled, of the running set, with the
    // settings it was asked for, and finished without its repeats (one takes
    // 100 closed-loop waves of 64 tokens: far longer than it ran).
    assert_eq!(run["id"], run_id, "{run}");
    assert_eq!(run["status"], "cancelled", "{run}");
    assert_eq!(run["flagset"], flagset.as_str(), "{run}");
    assert_eq!(run["settings"]["concurrency"], json!([4]), "{run}");
    assert_eq!(run["settings"]["num_prompts"], 400, "{run}");
    assert_eq!(run["settings"]["repeats"], 3, "{run}");
    assert!(run["finished_at_ms"].as_u64().is_some(), "{run}");
    let repeats = run["repeats"].as_array().context("repeats")?.len();
    assert!(repeats < 3, "a cancelled run has all its repeats: {run}");
    assert_eq!(
        app.get_json("/api/bench/runs").await?[0]["id"],
        run_id,
        "the newest run is another one"
    );

    // A restart in progress refuses a benchmark.
    let id = app.restart(json!({"--warmup-ms": "3000"})).await?;
    let (code, body) = app.post("/api/bench", &quick()).await?;
    assert_eq!(code, 409, "{body}");
    app.finished_restart(id, Duration::from_secs(30)).await?;
    // Bad settings are refused and name the problem.
    let (code, body) = app.post("/api/bench", &json!({"repeats": 1})).await?;
    assert_eq!(code, 400, "{body}");
    assert!(
        body["error"]
            .as_str()
            .unwrap_or_default()
            .contains("repeats"),
        "{body}"
    );
    let (code, _) = app.post("/api/bench", &json!({"concurency": [4]})).await?;
    assert_eq!(code, 400);
    Ok(())
}

#[tokio::test]
async fn a_wrong_answer_marks_the_flag_set_and_export_round_trips() -> anyhow::Result<()> {
    let _load = crate::MEASURING.read().await;
    let (_host, app) = ready(&spec()).await?;
    let mut good = quick();
    good["correctness"] = json!({"prompt": "count", "expect": "TOK3"});
    let run = app.bench(good).await?;
    assert_eq!(run["correctness"]["passed"], true, "{run}");
    let mut wrong = quick();
    wrong["correctness"] = json!({"prompt": "The capital of France is", "expect": "Paris"});
    let run = app.bench(wrong).await?;
    assert_eq!(run["correctness"]["passed"], false);
    let ledger = app.get_json("/api/flagsets").await?;
    assert_eq!(ledger[0]["wrong_answers"], true);

    let runs = app.get_json("/api/bench/runs").await?;
    let exported = app.get_json("/api/export/bench.json").await?;
    assert_eq!(exported, runs);
    let csv = app
        .http
        .get(app.url("/api/export/bench.csv"))
        .send()
        .await?
        .text()
        .await?;
    let mut lines = csv.lines();
    let header: Vec<&str> = lines.next().expect("header").split(',').collect();
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    assert_eq!(rows.len(), 6);
    assert!(rows.iter().all(|r| r.len() == header.len()), "{csv}");
    let col = |name: &str| header.iter().position(|h| *h == name).expect(name);
    for run in runs.as_array().expect("runs") {
        for r in run["repeats"].as_array().expect("repeats") {
            let row = rows
                .iter()
                .find(|row| {
                    row[col("run_id")].parse::<i64>().ok() == run["id"].as_i64()
                        && row[col("repeat")].parse::<i64>().ok() == r["repeat"].as_i64()
                })
                .expect("a row per repeat");
            assert_eq!(
                row[col("output_tok_s")].parse::<f64>()?,
                r["output_tok_s"].as_f64().expect("v")
            );
            assert_eq!(
                row[col("itl_p99_ms")].parse::<f64>()?,
                r["itl"]["p99_ms"].as_f64().expect("v")
            );
            assert_eq!(row[col("failed")], r["failed"].to_string());
            // Closed loop without SLOs: no rate, no goodput; the client's health.
            assert_eq!(row[col("request_rate")], "");
            assert_eq!(row[col("goodput_req_s")], "");
            assert_eq!(
                row[col("client_lag_p99_ms")].parse::<f64>()?,
                r["client"]["lag_p99_ms"].as_f64().expect("v")
            );
        }
    }
    Ok(())
}

#[tokio::test]
async fn a_benchmark_follows_each_restart_when_configured_and_chat_is_measured_too()
-> anyhow::Result<()> {
    let _load = crate::MEASURING.read().await;
    let spec = ServerSpec {
        extra: "\n[bench]\nafter_restart = true\n\n[bench.defaults]\napi = \"chat\"\nconcurrency = [8]\nnum_prompts = 16\noutput_len = 16\ninput_len = 8\nwarmup = 0\nrepeats = 3\n".to_owned(),
        ..spec()
    };
    let (_host, app) = ready(&spec).await?;
    // The start was benchmarked too; let that finish first. It begins just
    // after the start is announced as ready, so wait for its recorded end, then
    // for the status to say so.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let first = app.get_json("/api/bench/runs").await?[0].clone();
        if first["restart_id"] == 1 && first["status"] != "running" {
            break;
        }
        anyhow::ensure!(
            std::time::Instant::now() < deadline,
            "no benchmark after the start"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    app.wait_for_state("the start's benchmark", Duration::from_secs(60), |s| {
        s.server.as_ref().is_some_and(|v| v.bench.is_none())
    })
    .await?;
    assert_eq!(app.get_json("/api/bench/runs").await?[0]["restart_id"], 1);
    let id = app
        .restart(json!({"--enable-torch-compile": "true"}))
        .await?;
    app.finished_restart(id, Duration::from_secs(30)).await?;
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let run = loop {
        let runs = app.get_json("/api/bench/runs").await?;
        if let Some(r) = runs
            .as_array()
            .and_then(|a| a.iter().find(|r| r["restart_id"] == id))
            && r["status"] != "running"
        {
            break r.clone();
        }
        anyhow::ensure!(
            std::time::Instant::now() < deadline,
            "no benchmark after restart {id}: {runs}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(run["status"], "succeeded", "{run}");
    assert_eq!(run["settings"]["api"], "chat");
    assert_eq!(run["requested_by"], "after restart");
    assert_eq!(
        run["flagset"],
        app.server().await?.flagset.expect("set").as_str()
    );
    assert_eq!(run["repeats"][0]["output_tokens"], 16 * 16);
    Ok(())
}

#[tokio::test]
async fn a_run_records_what_it_was_measured_with_and_under() -> anyhow::Result<()> {
    let _load = crate::MEASURING.read().await;
    let (host, app) = ready(&spec()).await?;
    // GPU 1 runs under its software power cap throughout: throttled.
    simhost::set_health(&host.path(), 1, |h| h.clocks_event_reasons = 0x4)?;
    let mut settings = quick();
    settings["seed"] = json!(42);
    let run = app.bench(settings).await?;
    assert_eq!(run["status"], "succeeded", "{run}");
    let p = &run["provenance"];
    assert_eq!(p["seed"], 42, "{p}");
    // The simulated server says who it is as SGLang does.
    assert_eq!(p["server_version_from"], "/get_server_info", "{p}");
    assert!(
        p["server_version"]
            .as_str()
            .is_some_and(|v| v.starts_with("simserver-")),
        "{p}"
    );
    assert_eq!(p["simulated"], true);
    assert!(
        p["driver_version"].is_string() && p["cuda_version"].is_string(),
        "{p}"
    );
    assert!(
        p["drainwatch_version"].is_string() && p["hostname"].is_string(),
        "{p}"
    );
    // What the GPUs did: the server's GPU holds its ~88 GiB throughout.
    let gpus = p["gpus"].as_array().expect("gpus");
    assert!(!gpus.is_empty(), "{p}");
    let g0 = gpus.iter().find(|g| g["index"] == 0).expect("GPU 0");
    assert!(g0["samples"].as_u64().is_some_and(|n| n >= 5), "{g0}");
    let mem = g0["mem_used_gib"]["median"].as_f64().expect("memory");
    assert!(mem > 80.0, "{g0}");
    assert!(
        g0["power_limit_w"].as_f64().is_some_and(|w| w > 0.0),
        "{g0}"
    );
    assert!(
        g0["temp_c"]["max"].is_number() && g0["util_pct"]["median"].is_number(),
        "{g0}"
    );
    // Throttling while it ran is a warning on the run, by GPU and reason.
    assert!(g0.get("throttled_samples").is_none(), "{g0}");
    let g1 = gpus.iter().find(|g| g["index"] == 1).expect("GPU 1");
    assert!(
        g1["throttled_samples"].as_u64().is_some_and(|n| n >= 5),
        "{g1}"
    );
    assert_eq!(g1["throttle_reasons"], 0x4, "{g1}");
    // And it is kept: the stored run reads back the same.
    let stored = app
        .get_json(&format!("/api/bench/runs/{}", run["id"]))
        .await?;
    assert_eq!(stored["provenance"], *p);
    // The ledger's row carries the run's conditions in brief.
    let ledger = app.get_json("/api/flagsets").await?;
    let c = &ledger[0]["conditions"];
    assert!(c["power_limit_w"].as_f64().is_some_and(|w| w > 0.0), "{c}");
    assert_eq!(c["server_version"], p["server_version"]);
    let throttled = c["throttled"].as_array().expect("throttled");
    assert_eq!(throttled.len(), 1, "{c}");
    assert!(
        throttled[0]
            .as_str()
            .is_some_and(|t| t.starts_with("GPU 1: software power cap in ")),
        "{c}"
    );
    Ok(())
}

/// A restart asked while a person's benchmark runs cuts it short: the run
/// sends nothing more, the requests it has in flight end with the drain, and
/// it is recorded interrupted, never as a result.
#[tokio::test]
async fn a_restart_cuts_a_running_benchmark_short() -> anyhow::Result<()> {
    let _load = crate::MEASURING.read().await;
    let (_host, app) = ready(&spec()).await?;
    let (_, run_id) = long_bench(&app).await?;
    app.wait_running(2, Duration::from_secs(10)).await?;
    let id = app.restart(json!({})).await?;
    let d = app.finished_restart(id, Duration::from_secs(30)).await?;
    assert_eq!(d["summary"]["outcome"], "succeeded", "{d}");
    let run = app.get_json(&format!("/api/bench/runs/{run_id}")).await?;
    assert_eq!(run["status"], "interrupted", "{run}");
    assert_eq!(
        run["error"],
        drainwatch::bench::INTERRUPTED_BY_RESTART,
        "{run}"
    );
    assert!(run["levels"].as_array().is_none_or(Vec::is_empty), "{run}");
    let audit = app.get_json("/api/audit").await?;
    assert!(audit.to_string().contains("restart"), "{audit}");
    // The ledger took nothing from it.
    for set in app
        .get_json("/api/flagsets")
        .await?
        .as_array()
        .cloned()
        .unwrap_or_default()
    {
        assert!(
            set["levels"].as_object().is_none_or(|l| l.is_empty()),
            "an interrupted run made a result: {set}"
        );
    }
    Ok(())
}
