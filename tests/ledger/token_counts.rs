//! Inter-token latency per token when streamed events carry a varying number
//! of tokens (speculative decoding): through each way the benchmark can count
//! an event's tokens, and labelled per event where it cannot.

use std::time::Duration;

use serde_json::{Value, json};
use tests::TestApp;
use tests::managed::{ServerSpec, spawn_managed};

/// 60 ms per token whatever the batch (so the truth per token is exactly that),
/// slow enough that the server's 1 ms timer is a few per cent of a gap.
fn spec(extra: &str) -> ServerSpec {
    ServerSpec {
        tp: 1,
        warmup_ms: 200,
        itl_ms: 60.0,
        ttft_ms: 30.0,
        batch_knee: 1e9,
        extra: extra.to_owned(),
        ..ServerSpec::default()
    }
}

/// The simulated model's tokenizer (one token per `tok<i>` word).
fn tokenizer_dir() -> String {
    concat!(env!("CARGO_MANIFEST_DIR"), "/data/sim-model").to_owned()
}

async fn restart_into(app: &TestApp, mode: &str) -> anyhow::Result<()> {
    let id = app.restart(json!({"SIMSERVER_MODE": mode})).await?;
    let done = app.finished_restart(id, Duration::from_secs(30)).await?;
    anyhow::ensure!(done["summary"]["outcome"] == "succeeded", "{done}");
    Ok(())
}

/// Four clients, two waves of 24-token answers, three repeats.
async fn bench(app: &TestApp, api: &str) -> anyhow::Result<Value> {
    let run = app
        .bench(
            json!({"api": api, "concurrency": [4], "num_prompts": 8, "output_len": 24,
                      "input_len": 16, "warmup": 4, "repeats": 3}),
        )
        .await?;
    anyhow::ensure!(run["status"] == "succeeded", "{run}");
    Ok(run)
}

/// ITL p50 and p99 (the median over repeats) within 5 % of the truth per token,
/// the counts from `source`, and every token counted.
fn per_token(spec: &ServerSpec, run: &Value, source: &str) {
    let level = &run["levels"][0];
    let truth = spec.itl_at(4);
    for p in ["itl_p50_ms", "itl_p99_ms"] {
        let got = level[p]["median"].as_f64().expect("a percentile");
        eprintln!("{source}: {p} {got:.2} ms, truth {truth:.2} ms per token");
        assert!(
            (got / truth - 1.0).abs() < 0.05,
            "{source}: {p} {got:.2} ms, truth {truth:.2} ms per token"
        );
    }
    assert_eq!(level["token_source"], source, "{level}");
    for r in run["repeats"].as_array().expect("repeats") {
        assert_eq!(r["token_source"], source, "{r}");
        assert_eq!(r["output_tokens"], 8 * 24, "{r}");
        // Four clients are nothing for the generator: the repeat is the server's.
        assert!(r["client"]["lag_p99_ms"].is_number(), "{r}");
        assert!(r["client"]["saturated"].is_null(), "{r}");
    }
}

#[tokio::test]
async fn mixed_event_sizes_give_per_token_itl_by_chunk_counts_and_by_the_tokenizer()
-> anyhow::Result<()> {
    let _alone = crate::MEASURING.write().await;
    let host = tests::SimHost::new(100);
    let spec = spec(&format!("[bench]\ntokenizer = \"{}\"\n", tokenizer_dir()));
    let app = spawn_managed(&host, &spec, &[])?;
    app.start_server().await?;
    // Every fifth event three tokens, the others one.
    restart_into(&app, "mixed-events").await?;
    // vLLM's per-chunk usage (`continuous_usage_stats`) on /v1/completions.
    per_token(&spec, &bench(&app, "completions").await?, "chunk_usage");
    // SGLang's /generate: `meta_info.completion_tokens` in every chunk.
    per_token(&spec, &bench(&app, "generate").await?, "chunk_usage");
    // Usage only at the end, as SGLang's OpenAI endpoints: the tokenizer counts.
    restart_into(&app, "mixed-events,final-usage").await?;
    per_token(&spec, &bench(&app, "chat").await?, "tokenizer");
    Ok(())
}

/// No per-chunk counts and no tokenizer: ITL is between events, and says so,
/// never an invented per-token spread. The rate is still right: the final
/// usage counts the tokens.
#[tokio::test]
async fn without_any_count_itl_is_per_event_and_labelled_so() -> anyhow::Result<()> {
    let _alone = crate::MEASURING.write().await;
    let host = tests::SimHost::new(100);
    let spec = spec("");
    let app = spawn_managed(&host, &spec, &[])?;
    app.start_server().await?;
    restart_into(&app, "mixed-events,final-usage").await?;
    let run = bench(&app, "completions").await?;
    let level = &run["levels"][0];
    assert_eq!(level["token_source"], "event", "{level}");
    let itl = spec.itl_at(4);
    // Four of five events one token apart, one in five three tokens apart.
    let p50 = level["itl_p50_ms"]["median"].as_f64().expect("p50");
    let p99 = level["itl_p99_ms"]["median"].as_f64().expect("p99");
    assert!((p50 / itl - 1.0).abs() < 0.05, "p50 {p50} vs {itl}");
    assert!(
        (p99 / (3.0 * itl) - 1.0).abs() < 0.05,
        "p99 {p99} vs {}",
        3.0 * itl
    );
    let measured = level["output_tok_s"]["median"].as_f64().expect("rate");
    let truth = spec.true_rate(4, 24);
    assert!(
        (measured / truth - 1.0).abs() < 0.01,
        "measured {measured:.1}, true {truth:.1}"
    );
    for r in run["repeats"].as_array().expect("repeats") {
        assert_eq!(r["token_source"], "event", "{r}");
        assert_eq!(r["output_tokens"], 8 * 24, "{r}");
    }
    Ok(())
}

/// A tokenizer the config names is loaded when drainwatch starts: one that is
/// absent or does not read stops it there, as any bad setting does (exit 2,
/// naming the key), before anything is served or launched.
#[test]
fn a_named_tokenizer_that_does_not_read_stops_drainwatch_at_start() -> anyhow::Result<()> {
    let host = tests::SimHost::new(100);
    let broken = host.scratch().join("broken.json");
    std::fs::write(&broken, "{not json")?;
    let absent = host.scratch().join("absent.json");
    for file in [&broken, &absent] {
        let cfg = host.scratch().join("server.toml");
        let extra = format!("[bench]\ntokenizer = \"{}\"\n", file.display());
        std::fs::write(&cfg, spec(&extra).toml())?;
        let out = host.drainwatch_refusing(&cfg)?;
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(
            err.contains("bench.tokenizer: cannot read the tokenizer"),
            "{err}"
        );
        assert!(err.contains(&*file.to_string_lossy()), "{err}");
        assert!(!err.contains("listening"), "{err}");
    }
    Ok(())
}
