//! Campaigns that search, through the real path: a search that screens,
//! proposes with its model and confirms its winner against the baseline,
//! re-tested interleaved; and a screen whose effects, with their intervals,
//! hold the simulated server's documented truth.

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::Value;

use crate::{BENCH, MEASURING, start, states, wait_over};

fn labels(c: &Value) -> Vec<String> {
    (c["steps"].as_array().into_iter().flatten())
        .map(|s| s["label"].as_str().unwrap_or("").to_owned())
        .collect()
}

fn steps_of(c: &Value) -> Vec<Value> {
    c["steps"].as_array().cloned().unwrap_or_default()
}

fn flagsets(c: &Value) -> Vec<String> {
    (c["steps"].as_array().into_iter().flatten())
        .map(|s| s["flagset"].as_str().unwrap_or("").to_owned())
        .collect()
}

#[tokio::test]
async fn a_search_screens_then_proposes_then_confirms_its_winner() -> anyhow::Result<()> {
    let _shared = MEASURING.read().await;
    let (_host, app) = crate::ready("").await?;
    let plan = format!(
        r#"name = "search"
strategy = "search"
{BENCH}
[grid]
SGLANG_OPT_USE_TILELANG_INDEXER = ["", "1"]
"--speculative-algorithm" = ["", "EAGLE"]
"--ep-size" = ["", 2, 4]
[budget]
max_steps = 7
[confirm]
top = 1
rounds = 2
"#
    );
    let id = start(&app, &plan).await?;
    let c = wait_over(&app, id, Duration::from_secs(300)).await?;
    assert_eq!(c["info"]["state"], "done", "{c:#}");
    let labels = labels(&c);
    assert_eq!(
        labels.len(),
        11,
        "7 steps and 4 re-tests: {labels:?}: {}",
        c["info"]["reason"]
    );
    for (i, l) in labels.iter().enumerate().take(4) {
        assert_eq!(*l, format!("screen run {} of 4", i + 1));
    }
    for l in &labels[4..7] {
        assert_eq!(l, "most promising given the steps so far (TPE)");
    }
    for (k, l) in labels[7..].iter().enumerate() {
        assert_eq!(*l, format!("re-test, round {} of 2", k / 2 + 1));
    }
    // Seven sets, each once; then the best and the baseline, interleaved and
    // rotated.
    let sets = flagsets(&c);
    let distinct: BTreeSet<&String> = sets[..7].iter().collect();
    assert_eq!(distinct.len(), 7, "{sets:?}");
    // Each re-test measures its set again: never reused, each its own run.
    let runs: BTreeSet<i64> = (steps_of(&c).iter())
        .filter_map(|s| s["result"]["run_id"].as_i64())
        .collect();
    let measured = states(&c).iter().filter(|s| *s == "done").count();
    assert_eq!(runs.len(), measured, "{c:#}");
    assert!(states(&c)[7..].iter().all(|s| s == "done"), "{c:#}");
    let (a, b) = (&sets[7], &sets[8]);
    assert_ne!(a, b);
    assert_eq!([&sets[9], &sets[10]], [b, a], "{sets:?}");
    // The baseline (the first screen run: the indexer with EAGLE) failed,
    // so the runner-up stands in for it.
    assert!(
        ![a, b].contains(&&sets[0]),
        "a failed baseline is not re-tested"
    );
    // The screen's run with the indexer and EAGLE answers wrongly (the
    // simulated server's quirk): failed, and never proposed again.
    let st = states(&c);
    let steps = c["steps"].as_array().expect("steps");
    for (i, s) in steps.iter().enumerate() {
        let flags = &s["flags"];
        let wrong = flags["SGLANG_OPT_USE_TILELANG_INDEXER"] == "1"
            && flags["--speculative-algorithm"] == "EAGLE";
        assert_eq!(st[i] == "failed", wrong, "step {i}: {s:#}");
    }
    let reason = c["info"]["reason"].as_str().unwrap_or("");
    assert!(
        reason.starts_with("search stopped: its budget of 7 steps is spent; "),
        "{reason}"
    );
    // EAGLE is 1.8 times the pace: whichever set is best, it leads the
    // baseline (no EAGLE) far beyond the noise.
    let best = &steps[7]["flags"];
    assert_eq!(best["--speculative-algorithm"], "EAGLE", "{c:#}");
    assert!(reason.contains("better beyond the noise"), "{reason}");
    Ok(())
}

/// `--attention-backend` beside the campaigns' flags.
const BACKEND_FLAG: &str = "
[[flags]]
name = \"--attention-backend\"
kind = \"arg\"
type = \"enum\"
values = [\"flashinfer\", \"fa3\", \"triton\"]
";

/// The interval the words give `flag`'s effect: (effect, low, high), as
/// fractions.
fn interval(words: &str, flag: &str) -> Option<(f64, f64, f64)> {
    let rest = &words[words.find(&format!("`{flag}`"))?..];
    let nums: Vec<f64> = (rest.split([' ', '(', ',']))
        .filter(|w| w.starts_with(['+', '-']))
        .filter_map(|w| w.parse().ok())
        .take(3)
        .collect();
    match nums.as_slice() {
        [e, lo, hi] => Some((e / 100.0, lo / 100.0, hi / 100.0)),
        _ => None,
    }
}

#[tokio::test]
async fn a_screen_s_intervals_hold_each_flag_s_true_effect() -> anyhow::Result<()> {
    let _shared = MEASURING.read().await;
    let (_host, app) = crate::ready(BACKEND_FLAG).await?;
    let plan = format!(
        r#"name = "screen"
strategy = "screen"
{BENCH}
[grid]
"--ep-size" = ["", 2]
"--speculative-algorithm" = ["", "EAGLE"]
"--enable-torch-compile" = ["", true]
"--attention-backend" = ["flashinfer", "fa3"]
"#
    );
    let id = start(&app, &plan).await?;
    let c = wait_over(&app, id, Duration::from_secs(300)).await?;
    assert_eq!(c["info"]["state"], "done", "{c:#}");
    assert_eq!(states(&c), ["done"; 8], "{c:#}");
    assert!(
        labels(&c)
            .iter()
            .enumerate()
            .all(|(i, l)| *l == format!("screen run {} of 8", i + 1))
    );
    let reason = c["info"]["reason"].as_str().unwrap_or("");
    assert!(
        reason.starts_with("screen stopped: the screen's runs are done; effects: "),
        "{reason}"
    );
    // Each flag's true main effect: the mean, over all 16 combinations, of
    // the log pace with it high less with it low (the formula of rate.rs).
    let speeds = [1.12, 1.8, 1.10, 1.05];
    let log_rate = |combo: usize| {
        let speed: f64 = (0..4)
            .map(|j| if combo >> j & 1 == 1 { speeds[j] } else { 1.0 })
            .product();
        crate::grid::truth(speed).ln()
    };
    for (j, flag) in [
        "--ep-size",
        "--speculative-algorithm",
        "--enable-torch-compile",
        "--attention-backend",
    ]
    .into_iter()
    .enumerate()
    {
        let side = |high: bool| {
            let v: Vec<f64> = (0..16)
                .filter(|c| (c >> j & 1 == 1) == high)
                .map(log_rate)
                .collect();
            v.iter().sum::<f64>() / v.len() as f64
        };
        let truth = (side(true) - side(false)).exp_m1();
        let (e, lo, hi) = interval(reason, flag).unwrap_or_else(|| panic!("{flag}: {reason}"));
        assert!(lo <= e && e <= hi, "{flag}: {reason}");
        assert!(
            lo <= truth && truth <= hi,
            "{flag}: the true effect {truth:.4} is outside {lo:.4}…{hi:.4}: {reason}"
        );
    }
    // EAGLE's lead is far beyond the noise.
    let (_, lo, _) = interval(reason, "--speculative-algorithm").expect("EAGLE");
    assert!(lo > 0.3, "{reason}");
    Ok(())
}

/// drainwatch SIGKILLed while a proposed step benchmarks, and started again
/// on the same data: the search goes on from its recorded steps, the
/// interrupted one runs again, and no set is proposed twice.
#[tokio::test]
async fn sigkilled_mid_search_the_search_goes_on_where_it_was() -> anyhow::Result<()> {
    let _shared = MEASURING.read().await;
    let host = tests::SimHost::new(100);
    let spec = crate::spec("");
    let app = tests::managed::spawn_managed(&host, &spec, &[])?;
    app.start_server().await?;
    let plan = format!(
        r#"name = "search, killed"
strategy = "search"
screen = false
reuse = false
{BENCH}
[grid]
SGLANG_OPT_USE_TILELANG_INDEXER = ["0", "1"]
"--ep-size" = ["", 2, 4]
[budget]
max_steps = 5
[confirm]
top = 1
rounds = 1
"#
    );
    let id = start(&app, &plan).await?;
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    loop {
        let c = app.get_json(&format!("/api/campaigns/{id}")).await?;
        if c["steps"][2]["state"] == "benchmarking" && app.server().await?.bench.is_some() {
            tokio::time::sleep(Duration::from_millis(300)).await;
            break;
        }
        anyhow::ensure!(
            std::time::Instant::now() < deadline,
            "step 3 never benchmarked: {c:#}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    app.proc.kill_alone();

    let app = tests::managed::spawn_managed(&host, &spec, &[])?;
    let c = wait_over(&app, id, Duration::from_secs(240)).await?;
    assert_eq!(c["info"]["state"], "done", "{c:#}");
    let labels = labels(&c);
    assert_eq!(labels.len(), 7, "5 steps and 2 re-tests: {labels:?}");
    for (i, l) in labels[..4].iter().enumerate() {
        assert_eq!(*l, format!("random start {} of 4", i + 1));
    }
    assert_eq!(labels[4], "most promising given the steps so far (TPE)");
    let sets = flagsets(&c);
    let distinct: BTreeSet<&String> = sets[..5].iter().collect();
    assert_eq!(distinct.len(), 5, "{sets:?}");
    assert_eq!(states(&c), ["done"; 7], "{c:#}");
    assert_eq!(
        c["steps"][2]["attempts"], 1,
        "an interruption is not an attempt"
    );
    let reason = c["info"]["reason"].as_str().unwrap_or("");
    assert!(
        reason.starts_with("search stopped: its budget of 5 steps is spent; "),
        "{reason}"
    );
    Ok(())
}
