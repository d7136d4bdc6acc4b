//! drainwatch's benchmark against what the engine itself counts: prompts of
//! the asked length in the model's own tokens, output tokens equal to the
//! engine's per-response counts and to its `llamacpp:tokens_predicted_total`,
//! ITL at concurrency 1 against the engine's own decode time per token; and a
//! restart that cuts a running benchmark short, its requests drained with
//! the engine, recorded as interrupted.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{Value, json};
use tests::SimHost;
use tests::engine::{self, ONE_AT_A_TIME, READY};

use crate::{BENCH, settings};

fn delta(before: &BTreeMap<String, f64>, after: &BTreeMap<String, f64>, name: &str) -> f64 {
    after.get(name).copied().unwrap_or(f64::NAN) - before.get(name).copied().unwrap_or(f64::NAN)
}

/// Every repeat's numbers of a run, summed or listed.
fn repeats(run: &Value) -> Vec<Value> {
    run["repeats"].as_array().cloned().unwrap_or_default()
}

#[tokio::test]
async fn prompts_are_the_asked_length_by_the_engines_own_count() -> anyhow::Result<()> {
    let _one = ONE_AT_A_TIME.lock().await;
    let host = SimHost::new(100);
    let app = engine::spawn(&host, 2, &[])?;
    app.start_engine().await?;
    for asked in [64u32, 1024] {
        let run = app
            .finished_bench(app.begin_bench(settings(2, 4, asked, 4)).await?, BENCH)
            .await?;
        assert_eq!(run["status"], "succeeded", "{run:#}");
        let sizing = &run["provenance"]["prompt_sizing"];
        assert_eq!(sizing["by"], "the server's /tokenize", "{sizing}");
        // `usage.prompt_tokens` of every request, as the engine counted it.
        for r in repeats(&run) {
            assert_eq!(r["prompt_tokens_asked"], asked, "{r:#}");
            let counted = r["prompt_tokens_counted"].as_f64().expect("counted");
            let off = (counted / f64::from(asked) - 1.0).abs();
            eprintln!("asked {asked}: the engine counted {counted:.1} a prompt");
            assert!(
                off <= 0.10,
                "asked {asked}, the engine counted {counted} ({:.1} % off)",
                off * 100.0
            );
        }
        let level = &run["levels"][0];
        assert!(level["prompt_tokens"].is_f64(), "{level:#}");
        assert!(level.get("prompt_len_off").is_none(), "{level:#}");
    }
    Ok(())
}

#[tokio::test]
async fn the_benchmark_counts_the_tokens_the_engine_counts_and_its_itl_is_the_engines()
-> anyhow::Result<()> {
    let _one = ONE_AT_A_TIME.lock().await;
    let host = SimHost::new(100);
    let app = engine::spawn(&host, 4, &[])?;
    let port = app.start_engine().await?.port;
    for (c, prompts, warmup) in [(1u32, 4u32, 0u32), (4, 8, 2)] {
        let output = 32u32;
        let mut s = settings(c, prompts, 32, output);
        s["warmup"] = json!(warmup);
        let before = engine::metrics(port).await?;
        let run = app.finished_bench(app.begin_bench(s).await?, BENCH).await?;
        let after = engine::metrics(port).await?;
        assert_eq!(run["status"], "succeeded", "{run:#}");
        let reps = repeats(&run);
        let counted: u64 = reps
            .iter()
            .map(|r| r["output_tokens"].as_u64().unwrap_or(0))
            .sum();
        let failed: u64 = reps.iter().map(|r| r["failed"].as_u64().unwrap_or(0)).sum();
        assert_eq!(failed, 0, "{run:#}");
        // The engine's per-response counts: every request asked for exactly
        // `output` tokens with ignore_eos, and its `usage` said how many it made.
        let asked = u64::from(prompts * output) * reps.len() as u64;
        assert_eq!(reps.len(), 3, "{run:#}");
        assert_eq!(counted, asked, "{run:#}");
        // Per token, from the engine's own count in every streamed chunk.
        for r in &reps {
            assert_eq!(r["token_source"], "chunk_usage", "{r:#}");
        }
        // The engine's counter, less the warm-up's requests (nothing else ran).
        let predicted = delta(&before, &after, "llamacpp:tokens_predicted_total");
        assert_eq!(
            predicted - f64::from(warmup * output),
            counted as f64,
            "the engine's counter rose by {predicted}"
        );
        if c == 1 {
            // ITL: drainwatch's mean between streamed tokens, against the
            // engine's own decode time per token (each request's first token
            // comes with its prompt, so n − 1 intervals per request).
            let requests = f64::from(prompts * 3 + warmup);
            let engine_ms = 1e3 * delta(&before, &after, "llamacpp:tokens_predicted_seconds_total")
                / (predicted - requests);
            let itl_ms = reps
                .iter()
                .map(|r| r["itl"]["mean_ms"].as_f64().unwrap_or(f64::NAN))
                .sum::<f64>()
                / reps.len() as f64;
            let ratio = itl_ms / engine_ms;
            eprintln!(
                "c=1: ITL mean {itl_ms:.3} ms, the engine's {engine_ms:.3} ms per token (×{ratio:.4}); \
                 {counted} tokens counted, the engine's counter rose {predicted}"
            );
            assert!(
                (ratio - 1.0).abs() <= 0.05,
                "ITL mean {itl_ms:.2} ms against the engine's {engine_ms:.2} ms per token (×{ratio:.3})"
            );
        }
    }
    Ok(())
}

#[tokio::test]
async fn a_restart_during_a_benchmark_drains_its_requests_and_the_run_is_interrupted()
-> anyhow::Result<()> {
    let _one = ONE_AT_A_TIME.lock().await;
    let host = SimHost::new(100);
    let app = engine::spawn(&host, 4, &[])?;
    let port = app.start_engine().await?.port;
    // Long answers: the benchmark is still running when the restart comes.
    let run_id = app.begin_bench(settings(4, 32, 32, 400)).await?;
    engine::wait_processing(port, 2.0, Duration::from_secs(60)).await?;

    let id = app.restart_engine(json!({"--parallel": "2"})).await?;
    let d = app.finished_restart(id, READY).await?;
    assert_eq!(d["summary"]["outcome"], "succeeded", "{d:#}");
    // The drain saw the benchmark's requests running at the engine.
    let most = d["timeline"]
        .as_array()
        .map(|t| {
            t.iter()
                .filter_map(|p| p["running_requests"].as_u64())
                .max()
                .unwrap_or(0)
        })
        .unwrap_or(0);
    assert!(
        most >= 1,
        "no running request in the drain's timeline: {d:#}"
    );

    let run = app.finished_bench(run_id, BENCH).await?;
    assert_eq!(run["status"], "interrupted", "{run:#}");
    assert_eq!(
        run["error"],
        drainwatch::bench::INTERRUPTED_BY_RESTART,
        "{run:#}"
    );
    assert!(
        run["levels"].as_array().is_none_or(Vec::is_empty),
        "{run:#}"
    );
    // Not a result: the ledger has nothing from it.
    let ledger = app.get_json("/api/flagsets").await?;
    for set in ledger.as_array().cloned().unwrap_or_default() {
        assert!(
            set["levels"].as_object().is_none_or(|l| l.is_empty()),
            "an interrupted run made a result: {set:#}"
        );
    }
    Ok(())
}
