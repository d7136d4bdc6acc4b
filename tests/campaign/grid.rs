//! A grid campaign that meets every outcome: a set reused from an earlier
//! benchmark, sets measured, one that runs out of GPU memory at launch, one
//! that answers wrongly; the ledger afterwards, and each flag's effect against
//! the simulated server's formula.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{Value, json};

use crate::{BENCH, MEASURING, bench_json, spec, start, states, wait_over};

/// indexer × speculative × EP, less indexer 1 + EAGLE + EP 8: seven steps,
/// the first flag slowest.
fn plan() -> String {
    format!(
        r#"name = "indexer × spec × EP"
target = 300
{BENCH}
[grid]
SGLANG_OPT_USE_TILELANG_INDEXER = ["", "1"]
"--speculative-algorithm" = ["", "EAGLE"]
"--ep-size" = ["", 8]

[[exclude]]
SGLANG_OPT_USE_TILELANG_INDEXER = "1"
"--speculative-algorithm" = "EAGLE"
"--ep-size" = 8
"#
    )
}

/// Output tok/s of 4 clients asking 16 tokens each at `speed` (the simulated
/// server's formula, `rate.rs`).
pub(crate) fn truth(speed: f64) -> f64 {
    let (c, n) = (4.0, 16.0);
    let s = spec("");
    let load = 1.0 + (c - 1.0) / s.batch_knee;
    c * n / ((s.ttft_ms * load + (n - 1.0) * s.itl_ms * load / speed) / 1e3)
}

#[tokio::test]
async fn a_grid_campaign_meets_every_outcome_and_attributes_each_flag() -> anyhow::Result<()> {
    let _alone = MEASURING.write().await;
    let (_host, app) = crate::ready("").await?;
    // The baseline, measured before with the campaign's settings: reused.
    let before = app.bench(bench_json()).await?;
    assert_eq!(before["status"], "succeeded", "{before}");

    let id = start(&app, &plan()).await?;
    let c = wait_over(&app, id, Duration::from_secs(240)).await?;
    assert_eq!(c["info"]["state"], "done", "{c:#}");
    assert_eq!(
        states(&c),
        ["reused", "done", "done", "failed", "done", "done", "failed"],
        "{c:#}"
    );
    let steps = c["steps"].as_array().expect("steps");
    assert_eq!(steps[3]["failure"]["kind"], "oom", "{:#}", steps[3]);
    assert_eq!(
        steps[6]["failure"]["kind"], "wrong_answer",
        "{:#}",
        steps[6]
    );
    assert_eq!(
        steps[0]["result"]["run_id"], before["id"],
        "the reused step stands on the earlier run"
    );
    assert!(
        steps[0]["restart_id"].is_null(),
        "a reused step restarts nothing"
    );
    for s in steps.iter().filter(|s| s["state"] == "done") {
        assert!(
            s["result"]["output_tok_s"]["median"].as_f64().is_some(),
            "{s}"
        );
        assert_eq!(s["attempts"], 1, "{s}");
        let r = app
            .finished_restart(
                s["restart_id"].as_i64().expect("restart"),
                Duration::from_secs(5),
            )
            .await?;
        assert_eq!(r["summary"]["outcome"], "succeeded");
    }
    let info = &c["info"];
    assert_eq!(
        (
            &info["done"],
            &info["reused"],
            &info["failed"],
            &info["skipped"]
        ),
        (
            &Value::from(4),
            &Value::from(1),
            &Value::from(2),
            &Value::from(0)
        )
    );

    // The page's view of it, drawn by the agent: the rows asked for, the
    // chosen step's set, and a clear refusal of a bad ask.
    let v = app
        .get_json(&format!("/api/campaigns/{id}/view?selected=1&from=0&to=7"))
        .await?;
    assert_eq!(
        (&v["id"], &v["steps"], &v["first"]),
        (&json!(id), &json!(7), &json!(0))
    );
    assert_eq!(v["rows"].as_array().map(Vec::len), Some(7), "{v:#}");
    assert!(v["current"].is_null(), "{v:#}");
    assert_eq!(v["chosen"]["flagset"], steps[1]["flagset"], "{v:#}");
    assert_eq!(v["chosen"]["flags"], steps[1]["flags"], "{v:#}");
    let text = |k: &str| v[k].as_str().unwrap_or_default().to_owned();
    assert!(
        text("summary").contains("7 of 7 steps · 1 reused · 2 failed"),
        "{v:#}"
    );
    assert!(
        text("side").contains(r#"data-testid="campaign-point" data-step="1""#),
        "{v:#}"
    );
    assert_eq!(
        text("side")
            .matches(r#"data-testid="pareto-point""#)
            .count(),
        5
    );
    let part = app
        .get_json(&format!("/api/campaigns/{id}/view?from=2&to=4"))
        .await?;
    assert_eq!(part["first"], 2);
    assert_eq!(part["rows"].as_array().map(Vec::len), Some(2));
    assert!(
        part["rows"][0]
            .as_str()
            .unwrap_or_default()
            .contains(r#"data-step="2""#)
    );
    assert!(part["chosen"].is_null());
    for (ask, code) in [
        ("from=5&to=2", 400),
        ("from=0&to=999", 400),
        ("page=1", 400),
        ("selected=x", 400),
    ] {
        let r = app
            .http
            .get(app.url(&format!("/api/campaigns/{id}/view?{ask}")))
            .send()
            .await?;
        assert_eq!(r.status().as_u16(), code, "{ask}");
    }
    let none = app
        .http
        .get(app.url("/api/campaigns/999/view"))
        .send()
        .await?;
    assert_eq!(none.status().as_u16(), 404);

    // The ledger: exactly the seven sets, each linked to its step and outcome.
    let ledger = app.get_json("/api/flagsets").await?;
    let rows = ledger.as_array().expect("rows");
    let by_id: BTreeMap<&str, &Value> = rows
        .iter()
        .map(|r| (r["set"]["id"].as_str().expect("id"), r))
        .collect();
    assert_eq!(by_id.len(), 7, "{ledger:#}");
    for s in steps {
        let row = by_id[s["flagset"].as_str().expect("flagset")];
        assert_eq!(row["campaign"]["campaign_id"], id, "{row:#}");
        assert_eq!(row["campaign"]["step"], s["index"], "{row:#}");
        let measured = matches!(s["state"].as_str(), Some("done" | "reused"));
        assert_eq!(row["levels"]["4"].is_object(), measured, "{row:#}");
        assert_eq!(
            row["wrong_answers"],
            s["failure"]["kind"] == "wrong_answer",
            "{row:#}"
        );
        let outcome = row["campaign"]["outcome"].as_str().expect("outcome");
        assert!(
            outcome.starts_with(s["state"].as_str().expect("state")),
            "{outcome}"
        );
    }
    // The campaign's runs say which step they measured.
    let runs = app.get_json("/api/bench/runs?limit=50").await?;
    let tagged = runs
        .as_array()
        .expect("runs")
        .iter()
        .filter(|r| r["campaign_id"] == id)
        .count();
    assert_eq!(
        tagged,
        4 + 1,
        "four measured steps and the wrong answer's run"
    );

    // Each flag's effect: the median Δ over pairs that differ only in it.
    let export = app
        .get_json(&format!("/api/campaigns/{id}/export.json"))
        .await?;
    assert_eq!(export["simulated"], true, "a simulated host says so");
    let effects = export["effects"].as_array().expect("effects");
    let effect = |flag: &str, to: &str| {
        effects
            .iter()
            .find(|e| e["flag"] == flag && e["to"] == to)
            .unwrap_or_else(|| panic!("no effect of {flag}={to}: {effects:#?}"))
    };
    let ep = (1.0 + 0.12 * 8f64.log2()).max(1.0);
    let want = |pairs: &[(f64, f64)]| {
        let d: Vec<f64> = pairs
            .iter()
            .map(|(a, b)| (truth(*b) / truth(*a) - 1.0) * 100.0)
            .collect();
        d.iter().sum::<f64>() / d.len() as f64
    };
    for (flag, to, pairs, expect) in [
        (
            "SGLANG_OPT_USE_TILELANG_INDEXER",
            "1",
            2,
            want(&[(1.0, 1.06), (ep, ep * 1.06)]),
        ),
        ("--ep-size", "8", 2, want(&[(1.0, ep), (1.06, 1.06 * ep)])),
    ] {
        let e = effect(flag, to);
        assert_eq!(e["pairs"], pairs, "{e}");
        let got = e["median_pct"].as_f64().expect("a median");
        eprintln!("{flag}={to}: measured {got:+.2} %, the formula says {expect:+.2} %");
        assert!(
            (got - expect).abs() < 2.5,
            "{flag}={to}: measured {got:+.1} %, the formula says {expect:+.1} %"
        );
        assert!(e["note"].is_null(), "{e}");
    }
    // One measured pair only (the others failed): said to be too few.
    let spec_effect = effect("--speculative-algorithm", "EAGLE");
    assert_eq!(spec_effect["pairs"], 1);
    assert!(
        spec_effect["note"]
            .as_str()
            .is_some_and(|n| n.contains("too few")),
        "{spec_effect}"
    );
    // The CSV has a row per step.
    let csv = app
        .http
        .get(app.url(&format!("/api/campaigns/{id}/export.csv")))
        .send()
        .await?
        .text()
        .await?;
    assert_eq!(csv.lines().count(), 1 + 7, "{csv}");
    assert!(
        csv.lines()
            .nth(4)
            .is_some_and(|l| l.contains("out of memory at launch")),
        "{csv}"
    );
    Ok(())
}

#[tokio::test]
async fn a_set_measured_on_another_server_version_is_measured_again() -> anyhow::Result<()> {
    let _load = MEASURING.read().await;
    // The server reports the version this file says when it launches.
    let (_host, app, version) = crate::versioned("0.5.0\n").await?;
    let before = app.bench(bench_json()).await?;
    assert_eq!(before["provenance"]["server_version"], "0.5.0", "{before}");

    // The server upgraded (the same flags, a new launch).
    std::fs::write(&version, "0.6.0\n")?;
    let id = app.restart(serde_json::json!({})).await?;
    app.finished_restart(id, Duration::from_secs(30)).await?;
    let plan = format!("name = \"upgraded\"\n{BENCH}\n[[sets]]\n");
    let id = start(&app, &plan).await?;
    let c = wait_over(&app, id, Duration::from_secs(60)).await?;
    assert_eq!(states(&c), ["done"], "measured again, not reused: {c:#}");
    let run = c["steps"][0]["result"]["run_id"].as_i64().expect("a run");
    assert_ne!(Some(run), before["id"].as_i64());
    Ok(())
}
