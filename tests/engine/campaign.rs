//! A campaign over the engine's `--threads` × `--parallel`, started and
//! followed by `drainwatch campaign start` as a team would: it runs to its
//! end (exit 0, never a pause with nothing holding a GPU), every step
//! measured once, and the effects it attributes are the engine's own.

use std::process::{Command, Stdio};

use shared::campaign::{Campaign, analysis};
use tests::engine::{self, ONE_AT_A_TIME};
use tests::{SimHost, bin};

const PLAN: &str = r#"name = "threads × parallel"
reuse = false
on_failure = "continue"

[bench]
concurrency = [4]
num_prompts = 6
input_len = 32
output_len = 24
warmup = 2
repeats = 3
correctness = { prompt = "Question: What is the capital of France?\nAnswer:", expect = "Paris" }

[grid]
"--threads" = [1, 2]
"--parallel" = [1, 4]
"#;

#[tokio::test]
async fn a_campaign_over_threads_and_parallel_runs_to_its_end_with_real_effects()
-> anyhow::Result<()> {
    let _one = ONE_AT_A_TIME.lock().await;
    let host = SimHost::new(100);
    let app = engine::spawn(&host, 4, &[])?;
    app.start_engine().await?;
    let plan = host.scratch().join("plan.toml");
    std::fs::write(&plan, PLAN)?;

    let mut cmd = Command::new(bin("drainwatch"));
    cmd.args(["campaign", "start"])
        .arg(&plan)
        .args(["--url", &app.url("")])
        .env_remove("DRAINWATCH_TOKEN")
        .env_remove("DRAINWATCH_URL")
        .stdin(Stdio::null());
    let out = tokio::task::spawn_blocking(move || cmd.output()).await??;
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(stdout.contains("— done"), "{stdout}");

    let list = app.get_json("/api/campaigns").await?;
    let id = list[0]["id"].as_i64().expect("id");
    let c: Campaign = serde_json::from_value(app.get_json(&format!("/api/campaigns/{id}")).await?)?;
    assert_eq!(c.steps.len(), 4);
    for s in &c.steps {
        assert_eq!(s.state.label(), "done", "{s:#?}");
        assert_eq!(s.attempts, 1, "measured once: {s:#?}");
        assert!(
            s.result
                .as_ref()
                .is_some_and(|r| r.output_tok_s.median > 0.0)
        );
    }
    // Each flag's effect, over the pairs that differ only in it.
    let effects = analysis::attribution(&c);
    for e in &effects {
        eprintln!("effect {}", e.line());
    }
    let effect = |flag: &str| {
        effects
            .iter()
            .find(|e| e.flag == flag)
            .unwrap_or_else(|| panic!("no effect for {flag}: {effects:#?}"))
    };
    for flag in ["--threads", "--parallel"] {
        let e = effect(flag);
        assert_eq!(e.pairs, 2, "{e:#?}");
        assert!(e.median_pct.is_some(), "{e:#?}");
    }
    // Four clients on one slot wait their turn; on four they are decoded
    // together: the engine's batching, measured, not assumed.
    let parallel = effect("--parallel").median_pct.unwrap_or_default();
    assert!(
        parallel > 10.0,
        "--parallel 1 → 4 at concurrency 4: {parallel:+.1} %"
    );
    // The chart: every measured step a point, the frontier marked.
    let points = analysis::pareto(&c);
    assert_eq!(points.len(), 4, "{points:#?}");
    assert!(points.iter().any(|p| p.on_frontier), "{points:#?}");
    Ok(())
}
