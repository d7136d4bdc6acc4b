//! The serving benchmark: drainwatch's own load generator ([`load`]), the
//! metrics it reports ([`stats`]), flag-set identity ([`flagset`]), and the run
//! that ties them together — a correctness check, then per concurrency a warm-up
//! and the repeats — recording every repeat as it finishes and pushing progress.

pub mod conditions;
pub mod dataset;
mod events;
pub mod flagset;
pub mod load;
pub mod overrides;
pub mod prompts;
pub mod saturation;
pub mod sizing;
pub mod stats;
pub mod tokens;
pub mod view;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use shared::bench::{
    BenchProgress, BenchRun, BenchSettings, CorrectnessResult, LevelSummary, PromptSizing,
    Provenance, RunStatus, Workload,
};
use tokio::sync::watch;

use crate::clock::now_ms;
use crate::hub::Hub;
use crate::store::Store;

use load::{Counters, Target};

/// A run stopped by its wrong answer says so.
pub const WRONG_ANSWER: &str = "the correctness check's answer was wrong; nothing was measured";

/// What a run needs besides its record.
#[derive(Debug, Clone)]
pub struct RunContext {
    pub target: Target,
    pub store: Store,
    pub hub: Arc<Hub>,
    /// Cancelled, or cut short by a restart ([`load::Halt`]).
    pub cancel: watch::Receiver<load::Halt>,
    /// What the manager knows of the run's context; the run adds the seed,
    /// the server's version and what the GPUs did.
    pub provenance: Provenance,
    /// The dataset the settings name, loaded (and checked) before the run.
    pub dataset: Option<Arc<dataset::Dataset>>,
    /// Count the samples in which a GPU was throttled (`[health] throttle`
    /// is `warn`, the default), so the run carries the warning.
    pub count_throttle: bool,
}

/// The prompts of `n` requests under `s`: from the dataset, behind shared
/// prefixes, or random, sized in the model's tokens by `sizing`.
fn prompts(
    s: &BenchSettings,
    n: u32,
    seed: u64,
    data: Option<&Arc<dataset::Dataset>>,
    sizing: &PromptSizing,
) -> prompts::Prompts {
    let input = sizing::words(sizing, s.input_len, true);
    match (data, s.prefix_groups) {
        (Some(d), _) => prompts::Prompts::from_dataset(n, Arc::clone(d), seed),
        (None, Some(groups)) => prompts::Prompts::shared_prefix(
            n,
            input,
            groups,
            sizing::words(sizing, s.prefix_len, false),
            seed,
        ),
        (None, None) => prompts::Prompts::new(n, input, seed),
    }
}

/// The prompt length asked for, in tokens: none for a dataset's own prompts.
fn asked_prompt_tokens(s: &BenchSettings, data: Option<&dataset::Dataset>) -> Option<u32> {
    match (data, s.prefix_groups) {
        (Some(_), _) => None,
        (None, Some(_)) => Some(s.input_len + s.prefix_len),
        (None, None) => Some(s.input_len),
    }
}

/// What a run's prompts are, for its provenance.
fn workload(s: &BenchSettings, data: Option<&dataset::Dataset>) -> Workload {
    let kind = match (data, s.prefix_groups) {
        (Some(_), _) => "dataset",
        (None, Some(_)) => "shared_prefix",
        (None, None) => "random",
    };
    Workload {
        kind: kind.to_owned(),
        input_len: s.input_len,
        output_len: s.output_len,
        dataset: data.map(|d| d.name.clone()),
        dataset_sha256: data.map(|d| d.sha256.clone()),
        dataset_prompts: data.map(|d| d.entries.len() as u32),
        prefix_groups: s.prefix_groups,
        prefix_len: s.prefix_groups.map(|_| s.prefix_len),
    }
}

/// Runs the benchmark recorded as `run` (its id set); returns it finished.
pub async fn run(mut run: BenchRun, ctx: RunContext) -> BenchRun {
    let s = run.settings.clone();
    let client = load::client(s.max_in_flight());
    let levels = s.levels();
    let total = levels.len() as u32 * (s.warmup + s.repeats * s.num_prompts);
    let counters = Arc::new(Counters::default());
    let seed = s.seed.unwrap_or(run.id as u64);
    let (server_version, server_version_from, engine) = describe(&client, &ctx.target).await;
    let sizing = match ctx.dataset {
        Some(_) => None,
        None => Some(sizing::measure(&client, &ctx.target).await),
    };
    let asked = asked_prompt_tokens(&s, ctx.dataset.as_deref());
    run.provenance = Some(Provenance {
        seed,
        workload: workload(&s, ctx.dataset.as_deref()),
        server_version,
        server_version_from,
        engine,
        prompt_sizing: sizing.clone(),
        ..ctx.provenance.clone()
    });
    let sizing = sizing.unwrap_or_else(sizing::unmeasured);
    let recorder = conditions::Recorder::start(&ctx.hub, ctx.count_throttle);

    match check_first(&mut run, &ctx, &client).await {
        Ok(()) => {}
        Err(Unchecked::Halted) => return halted(run, &ctx, recorder).await,
        Err(why) => {
            let why = Some(why.to_string());
            return finish(run, &ctx, recorder, RunStatus::Failed, why).await;
        }
    }
    for (level, key) in levels.iter().enumerate() {
        let c = key.concurrency;
        let seed = seed.wrapping_mul(1_000).wrapping_add(level as u64);
        if s.warmup > 0 {
            let warm = prompts(&s, s.warmup, seed, ctx.dataset.as_ref(), &sizing);
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
            if ctx.cancel.borrow().stops_sending() {
                return halted(run, &ctx, recorder).await;
            }
            let prompts = prompts(
                &s,
                s.num_prompts,
                seed.wrapping_mul(31).wrapping_add(u64::from(repeat) + 1),
                ctx.dataset.as_ref(),
                &sizing,
            );
            let monitor = saturation::Monitor::start();
            let progress = BenchProgress {
                run_id: run.id,
                status: RunStatus::Running,
                concurrency: c,
                request_rate: key.request_rate,
                repeat,
                repeats: s.repeats,
                done: 0,
                total,
                output_tok_s: 0.0,
                requested_by: run.requested_by.clone(),
            };
            let repeat_seed = seed.wrapping_mul(31).wrapping_add(u64::from(repeat) + 1);
            let (outcomes, duration) =
                send_repeat(&client, &ctx, &s, prompts, repeat_seed, &counters, progress).await;
            if ctx.cancel.borrow().stops_sending() {
                return halted(run, &ctx, recorder).await;
            }
            let m = measured(
                run.id,
                &s,
                key,
                repeat,
                asked,
                (&outcomes, duration),
                monitor,
            )
            .await;
            ctx.store.bench_repeat(run.id, m.clone());
            run.repeats.push(m);
        }
    }
    finish(run, &ctx, recorder, RunStatus::Succeeded, None).await
}

/// Why the run ends at its correctness check.
#[derive(Debug, thiserror::Error)]
enum Unchecked {
    /// Halted meanwhile (cancelled, or cut short by a restart).
    #[error("halted")]
    Halted,
    /// A wrong answer, where the settings abort on one.
    #[error("{WRONG_ANSWER}")]
    Wrong,
    #[error(transparent)]
    NoAnswer(#[from] CheckError),
}

/// The correctness check before any load, where the settings ask for one; its
/// result goes on the run. `Err` ends the run.
async fn check_first(
    run: &mut BenchRun,
    ctx: &RunContext,
    client: &reqwest::Client,
) -> Result<(), Unchecked> {
    let s = &run.settings;
    let Some(c) = &s.correctness else {
        return Ok(());
    };
    let abort = s.abort_on_wrong_answer;
    let mut cancel = ctx.cancel.clone();
    let checked = tokio::select! {
        r = check(client, &ctx.target, &c.prompt, &c.expect) => r,
        _ = cancel.wait_for(|c| c.stops_sending()) => return Err(Unchecked::Halted),
    };
    let result = checked?;
    let wrong = !result.passed && abort;
    run.correctness = Some(result);
    match wrong {
        true => Err(Unchecked::Wrong),
        false => Ok(()),
    }
}

/// One repeat's metrics from its outcomes: the open loop's and goodput's where
/// the settings ask, what the client itself could keep up with, logged.
async fn measured(
    run_id: i64,
    s: &BenchSettings,
    key: &shared::bench::LevelKey,
    repeat: u32,
    asked: Option<u32>,
    (outcomes, duration): (&[load::Outcome], f64),
    monitor: saturation::Monitor,
) -> shared::bench::RunMetrics {
    let c = key.concurrency;
    let mut m = stats::metrics(c, repeat, outcomes, duration);
    m.prompt_tokens_asked = asked;
    if let Some(rate) = key.request_rate {
        stats::open_loop(&mut m, rate, outcomes);
    }
    if let Some(slo) = &s.slo {
        stats::goodput(&mut m, outcomes, slo);
    }
    let client = monitor.finish(outcomes, key.request_rate.is_some()).await;
    if let Some(why) = &client.saturated {
        tracing::warn!(run = run_id, c, repeat, "{why}");
    }
    m.client = Some(client);
    tracing::info!(
        run = run_id,
        c,
        rate = key.request_rate,
        repeat,
        output_tok_s = m.output_tok_s,
        goodput_req_s = m.goodput_req_s,
        failed = m.failed,
        "benchmark repeat"
    );
    m
}

/// One repeat's requests at `progress`'s level, closed-loop or at its request
/// rate (arrivals drawn from `seed`), with the progress published every 500 ms.
async fn send_repeat(
    client: &reqwest::Client,
    ctx: &RunContext,
    s: &BenchSettings,
    prompts: prompts::Prompts,
    seed: u64,
    counters: &Arc<Counters>,
    mut progress: BenchProgress,
) -> (Vec<load::Outcome>, f64) {
    let c = progress.concurrency;
    let before = counters.output_tokens.load(Ordering::Relaxed);
    let started = tokio::time::Instant::now();
    let level_run = async {
        match progress.request_rate {
            None => {
                let counters = Arc::clone(counters);
                load::level(
                    client,
                    &ctx.target,
                    prompts,
                    c,
                    s.output_len,
                    counters,
                    ctx.cancel.clone(),
                )
                .await
            }
            Some(rate) => {
                let schedule = load::arrivals(s.num_prompts, rate, s.burstiness, seed);
                load::open_level(
                    client,
                    &ctx.target,
                    prompts,
                    &schedule,
                    c,
                    s.output_len,
                    Arc::clone(counters),
                    ctx.cancel.clone(),
                )
                .await
            }
        }
    };
    tokio::pin!(level_run);
    loop {
        tokio::select! {
            r = &mut level_run => break r,
            _ = tokio::time::sleep(Duration::from_millis(500)) => {
                let tokens = counters.output_tokens.load(Ordering::Relaxed) - before;
                progress.done = counters.done.load(Ordering::Relaxed);
                progress.output_tok_s = tokens as f64 / started.elapsed().as_secs_f64();
                ctx.hub.publish_bench(progress.clone());
            }
        }
    }
}

/// A run stopped from outside: cancelled, or cut short by a restart, whose
/// drain ended the requests it had in flight. Neither is a result: the repeat
/// it was in is not recorded.
async fn halted(run: BenchRun, ctx: &RunContext, recorder: conditions::Recorder) -> BenchRun {
    let halt = *ctx.cancel.borrow();
    match halt {
        load::Halt::Drain => {
            finish(
                run,
                ctx,
                recorder,
                RunStatus::Interrupted,
                Some(INTERRUPTED_BY_RESTART.to_owned()),
            )
            .await
        }
        _ => finish(run, ctx, recorder, RunStatus::Cancelled, None).await,
    }
}

/// What a run cut short by a restart says.
pub const INTERRUPTED_BY_RESTART: &str = "interrupted by a restart: it sent nothing more, and the server's drain ended the requests it had in flight; not a result";

async fn finish(
    mut run: BenchRun,
    ctx: &RunContext,
    recorder: conditions::Recorder,
    status: RunStatus,
    error: Option<String>,
) -> BenchRun {
    let gpus = recorder.finish().await;
    if let Some(p) = &mut run.provenance {
        p.gpus = gpus;
    }
    run.status = status;
    run.error = error;
    run.finished_at_ms = Some(now_ms());
    run.levels = LevelSummary::group(
        &run.settings.levels(),
        &run.repeats,
        run.settings.slo.as_ref(),
    );
    ctx.store.bench_finish(run.clone());
    run
}

/// GETs the server's `path` with the API key: its JSON, read up to 1 MiB.
async fn get_json(
    client: &reqwest::Client,
    target: &Target,
    path: &str,
) -> Option<serde_json::Value> {
    let url = format!("{}{path}", target.base_url);
    let mut req = client.get(&url).timeout(Duration::from_secs(5));
    if let Some(key) = &target.api_key {
        req = req.header(reqwest::header::AUTHORIZATION, key.bearer());
    }
    load::read_json(req).await
}

/// A string of the server's JSON, cut to 200 characters.
fn short(v: &serde_json::Value) -> Option<String> {
    v.as_str().map(|s| s.chars().take(200).collect())
}

/// What the server says of itself, asked once: its version and which
/// endpoint said it (SGLang's `/get_server_info`, vLLM's `/version`,
/// llama.cpp's `/props` with its `build_info`, each with the API key), and
/// from llama.cpp's `/props` what it runs: the model file, its build, the
/// context per slot and the slots.
async fn describe(
    client: &reqwest::Client,
    target: &Target,
) -> (
    Option<String>,
    Option<String>,
    Option<shared::bench::EngineProps>,
) {
    for (path, field) in target.engine.version_endpoints() {
        let Some(v) = get_json(client, target, path).await else {
            continue;
        };
        let Some(version) = v[*field].as_str().map(|s| s.chars().take(100).collect()) else {
            continue;
        };
        let props = (target.engine == crate::config::file::Engine::Llamacpp).then(|| {
            let settings = &v["default_generation_settings"];
            shared::bench::EngineProps {
                engine: "llama.cpp".to_owned(),
                model: short(&v["model_path"]),
                build: short(&v["build_info"]),
                ctx_size: settings["n_ctx"].as_u64(),
                slots: v["total_slots"]
                    .as_u64()
                    .map(|n| n.min(u64::from(u32::MAX)) as u32),
            }
        });
        return (Some(version), Some((*path).to_owned()), props);
    }
    (None, None, None)
}

/// The server's own version, and which endpoint said so (see [`describe`]).
pub(crate) async fn server_version(
    client: &reqwest::Client,
    target: &Target,
) -> (Option<String>, Option<String>) {
    let (version, from, _) = describe(client, target).await;
    (version, from)
}

/// Why the correctness check could not ask.
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    #[error("correctness check: {0}")]
    Request(#[from] reqwest::Error),
    #[error("correctness check: the server answered {0}")]
    Status(reqwest::StatusCode),
}

/// The correctness check: one non-streaming request, its answer searched for
/// `expect` (case-insensitive).
async fn check(
    client: &reqwest::Client,
    target: &Target,
    prompt: &str,
    expect: &str,
) -> Result<CorrectnessResult, CheckError> {
    let resp = target
        .post(client)
        .json(&target.body(prompt, 64, false))
        .timeout(Duration::from_secs(60))
        .send()
        .await?;
    if !resp.status().is_success() {
        return Err(CheckError::Status(resp.status()));
    }
    let v: serde_json::Value = resp.json().await?;
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
