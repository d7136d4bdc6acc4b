//! The serving benchmark: drainwatch's own load generator ([`load`]), the
//! metrics it reports ([`stats`]), flag-set identity ([`flagset`]), and the run
//! that ties them together — a correctness check, then per concurrency a warm-up
//! and the repeats — recording every repeat as it finishes and pushing progress.

pub mod flagset;
pub mod load;
pub mod stats;
pub mod tokens;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use shared::bench::{
    BenchProgress, BenchRun, CorrectnessResult, LevelSummary, RunMetrics, RunStatus,
};
use tokio::sync::watch;

use crate::clock::now_ms;
use crate::hub::Hub;
use crate::store::Store;

use load::{Counters, Target};

/// What a run needs besides its record.
#[derive(Debug, Clone)]
pub struct RunContext {
    pub target: Target,
    pub store: Store,
    pub hub: Arc<Hub>,
    pub cancel: watch::Receiver<bool>,
}

/// Runs the benchmark recorded as `run` (its id set); returns it finished.
pub async fn run(mut run: BenchRun, ctx: RunContext) -> BenchRun {
    let s = run.settings.clone();
    let max_c = s.concurrency.iter().copied().max().unwrap_or(1);
    let client = load::client(max_c);
    let total = s.concurrency.len() as u32 * (s.warmup + s.repeats * s.num_prompts);
    let counters = Arc::new(Counters::default());

    if let Some(c) = &s.correctness {
        let mut cancel = ctx.cancel.clone();
        let checked = tokio::select! {
            r = check(&client, &ctx.target, &c.prompt, &c.expect) => r,
            _ = cancel.wait_for(|c| *c) => return finish(run, &ctx, RunStatus::Cancelled, None),
        };
        match checked {
            Ok(result) => run.correctness = Some(result),
            Err(e) => return finish(run, &ctx, RunStatus::Failed, Some(e)),
        }
    }
    for (level, &c) in s.concurrency.iter().enumerate() {
        let seed = run.id as u64 * 1_000 + level as u64;
        if s.warmup > 0 {
            let warm = load::Prompts::new(s.warmup, s.input_len, seed);
            load::level(
                &client,
                &ctx.target,
                warm,
                c.min(s.warmup),
                s.output_len,
                Arc::clone(&counters),
                ctx.cancel.clone(),
            )
            .await;
        }
        for repeat in 0..s.repeats {
            if *ctx.cancel.borrow() {
                return finish(run, &ctx, RunStatus::Cancelled, None);
            }
            let prompts = load::Prompts::new(
                s.num_prompts,
                s.input_len,
                seed * 31 + u64::from(repeat) + 1,
            );
            let before = counters.output_tokens.load(Ordering::Relaxed);
            let started = tokio::time::Instant::now();
            let level_run = load::level(
                &client,
                &ctx.target,
                prompts,
                c,
                s.output_len,
                Arc::clone(&counters),
                ctx.cancel.clone(),
            );
            tokio::pin!(level_run);
            let (outcomes, duration) = loop {
                tokio::select! {
                    r = &mut level_run => break r,
                    _ = tokio::time::sleep(Duration::from_millis(500)) => {
                        let tokens = counters.output_tokens.load(Ordering::Relaxed) - before;
                        ctx.hub.publish_bench(BenchProgress {
                            run_id: run.id,
                            status: RunStatus::Running,
                            concurrency: c,
                            repeat,
                            repeats: s.repeats,
                            done: counters.done.load(Ordering::Relaxed),
                            total,
                            output_tok_s: tokens as f64 / started.elapsed().as_secs_f64(),
                            requested_by: run.requested_by.clone(),
                        });
                    }
                }
            };
            if *ctx.cancel.borrow() {
                return finish(run, &ctx, RunStatus::Cancelled, None);
            }
            let m = stats::metrics(c, repeat, &outcomes, duration);
            tracing::info!(
                run = run.id,
                c,
                repeat,
                output_tok_s = m.output_tok_s,
                failed = m.failed,
                "benchmark repeat"
            );
            ctx.store.bench_repeat(run.id, m.clone());
            run.repeats.push(m);
        }
    }
    finish(run, &ctx, RunStatus::Succeeded, None)
}

fn finish(
    mut run: BenchRun,
    ctx: &RunContext,
    status: RunStatus,
    error: Option<String>,
) -> BenchRun {
    run.status = status;
    run.error = error;
    run.finished_at_ms = Some(now_ms());
    let mut levels: Vec<LevelSummary> = Vec::new();
    for c in &run.settings.concurrency {
        let of: Vec<RunMetrics> = run
            .repeats
            .iter()
            .filter(|m| m.concurrency == *c)
            .cloned()
            .collect();
        if !of.is_empty() {
            levels.push(LevelSummary::of(*c, &of));
        }
    }
    run.levels = levels;
    ctx.store.bench_finish(run.clone());
    run
}

/// The correctness check: one non-streaming request, its answer searched for
/// `expect` (case-insensitive).
async fn check(
    client: &reqwest::Client,
    target: &Target,
    prompt: &str,
    expect: &str,
) -> Result<CorrectnessResult, String> {
    let resp = target
        .post(client)
        .json(&target.body(prompt, 64, false))
        .timeout(Duration::from_secs(60))
        .send()
        .await
        .map_err(|e| format!("correctness check: {e}"))?;
    if !resp.status().is_success() {
        return Err(format!(
            "correctness check: the server answered {}",
            resp.status()
        ));
    }
    let v: serde_json::Value = resp
        .json()
        .await
        .map_err(|e| format!("correctness check: {e}"))?;
    // OpenAI's completions, its chat, or SGLang's `/generate` (`text` at the top).
    let choice = &v["choices"][0];
    let answer = choice["text"]
        .as_str()
        .or_else(|| choice["message"]["content"].as_str())
        .or_else(|| v["text"].as_str())
        .unwrap_or_default();
    Ok(CorrectnessResult {
        passed: answer.to_lowercase().contains(&expect.to_lowercase()),
        answer: answer.chars().take(500).collect(),
    })
}
