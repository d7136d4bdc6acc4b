//! The built-in benchmark measures what the simulated server really does.

use serde_json::{Value, json};
use tests::managed::{ServerSpec, spawn_managed};

/// A quick one-GPU simulated server (5 ms per token, 10 ms to the first).
pub(crate) fn spec() -> ServerSpec {
    ServerSpec {
        tp: 1,
        warmup_ms: 200,
        itl_ms: 5.0,
        ttft_ms: 10.0,
        ..ServerSpec::default()
    }
}

#[tokio::test]
async fn measured_output_rate_is_within_one_percent_of_the_true_rate() -> anyhow::Result<()> {
    let _alone = crate::MEASURING.write().await;
    let host = tests::SimHost::new(100);
    let spec = spec();
    let app = spawn_managed(&host, &spec, &[])?;
    app.start_server().await?;
    let n = 64;
    // Per concurrency, a few closed-loop waves per repeat.
    for (c, prompts) in [(1, 8), (16, 64), (64, 128)] {
        let run = app
            .bench(
                json!({"concurrency": [c], "num_prompts": prompts, "output_len": n, "input_len": 32,
                   "warmup": c, "repeats": 3}),
            )
            .await?;
        assert_eq!(run["status"], "succeeded", "{run}");
        check(&spec, &run, n, prompts)?;
    }
    Ok(())
}

fn check(spec: &ServerSpec, run: &Value, n: u32, prompts: u32) -> anyhow::Result<()> {
    for level in run["levels"].as_array().expect("levels") {
        let c = level["concurrency"].as_u64().expect("c") as u32;
        let measured = level["output_tok_s"]["median"].as_f64().expect("rate");
        let truth = spec.true_rate(c, n);
        let ratio = measured / truth;
        eprintln!("c={c}: measured {measured:.1} tok/s, true {truth:.1} tok/s, ratio {ratio:.4}");
        assert!(
            (ratio - 1.0).abs() < 0.01,
            "c={c}: measured {measured:.1}, true {truth:.1}"
        );
        // Latencies match the model too: mean ITL within 3 % (per token; the
        // server's 1 ms timer makes single gaps jitter, so the median within 10 %).
        let repeats = run["repeats"].as_array().expect("repeats");
        let itl = repeats
            .iter()
            .filter_map(|r| r["itl"]["mean_ms"].as_f64())
            .sum::<f64>()
            / repeats.len() as f64;
        assert!(
            (itl / spec.itl_at(c) - 1.0).abs() < 0.03,
            "c={c}: ITL {itl} vs {}",
            spec.itl_at(c)
        );
        let itl_p50 = level["itl_p50_ms"]["median"].as_f64().expect("itl");
        assert!(
            (itl_p50 / spec.itl_at(c) - 1.0).abs() < 0.10,
            "c={c}: ITL p50 {itl_p50}"
        );
        let ttft = level["ttft_p50_ms"]["median"].as_f64().expect("ttft");
        eprintln!(
            "c={c}: TTFT p50 {ttft:.1} ms (model {:.1}), ITL p50 {itl:.2} ms (model {:.2})",
            spec.ttft_at(c),
            spec.itl_at(c)
        );
        // Two-sided around the model's TTFT at this concurrency (see the
        // simulated server's `rate` module: `ttft(b) = ttft₁ · (1 + (b − 1) / knee)`,
        // `b` the requests in flight when one arrives). Below: the client's
        // clock includes the round trip, so only two small effects can make it
        // read low — the server wakes early by its mean timer lateness, and a
        // request can arrive while a client or two sit between an answer and
        // their next request (a batch one or two short). The early wake is at
        // most 5 ms (the server caps its lateness estimate there, and after a
        // load spike it can be that high), so 5 ms + 5 % covers both, a few
        // clients' worth of load at c=64. Above: a loaded machine only ever
        // adds time, so generously +max(15 ms, 30 %).
        let truth = spec.ttft_at(c);
        let (low, high) = (truth - 5.0 - 0.05 * truth, truth + (0.30 * truth).max(15.0));
        assert!(
            (low..=high).contains(&ttft),
            "c={c}: TTFT p50 {ttft:.2} ms outside [{low:.2}, {high:.2}] around the model's {truth:.2} ms"
        );
        assert_eq!(level["failed"], 0);
    }
    for r in run["repeats"].as_array().expect("repeats") {
        assert_eq!(r["token_source"], "chunk_usage");
        assert_eq!(r["output_tokens"], prompts * n);
    }
    Ok(())
}
