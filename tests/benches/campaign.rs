//! Campaigns (method and results in docs/PERFORMANCE.md).
//!
//! `campaign-overhead`: what a campaign adds to each step beyond the restart
//! and the benchmark themselves. A 20-step campaign of the simulated server
//! through the real API; for each step, the time from its restart's end to
//! its benchmark's start, plus from its benchmark's end to the next step's
//! restart start: the runner's own work (the manager's events, recording the
//! step, the reuse check, asking for the next restart).
//!
//! `campaign-ui`: the campaign view with a 500-step plan in headless
//! Chromium while the campaign runs: the longest animation frames (the
//! Long Animation Frames API records every frame over 50 ms, page load
//! included, so the first render of 500 rows too), the frame-to-frame
//! interval while rows update, and the cumulative layout shift.

use std::time::{Duration, Instant};

use serde_json::Value;
use tests::SimHost;
use tests::browser::Browser;
use tests::managed::{ServerSpec, spawn_managed};

fn spec() -> ServerSpec {
    ServerSpec {
        tp: 1,
        warmup_ms: 200,
        itl_ms: 2.0,
        ttft_ms: 4.0,
        ..ServerSpec::default()
    }
}

/// A tiny benchmark: the campaign's machinery, not the load, is measured.
const BENCH: &str = "[bench]
concurrency = [1]
num_prompts = 1
input_len = 8
output_len = 4
warmup = 0
repeats = 3
";

/// `n` steps: `--warmup-ms` from 200 (and `--tp` 1–4 when `tp`).
fn plan(name: &str, n: usize, tp: bool) -> String {
    let per = if tp { n / 4 } else { n };
    let values: Vec<String> = (0..per).map(|i| (200 + i).to_string()).collect();
    format!(
        "name = \"{name}\"\nreuse = false\n{BENCH}\n[grid]\n\"--warmup-ms\" = [{}]\n{}",
        values.join(", "),
        if tp { "\"--tp\" = [1, 2, 3, 4]\n" } else { "" }
    )
}

async fn start(app: &tests::TestApp, toml: &str) -> anyhow::Result<i64> {
    let r = app
        .http
        .post(app.url("/api/campaigns"))
        .header("content-type", "application/toml")
        .body(toml.to_owned())
        .send()
        .await?;
    let body: Value = r.json().await?;
    body["id"]
        .as_i64()
        .ok_or_else(|| anyhow::anyhow!("refused: {body}"))
}

fn ms(v: &Value) -> i64 {
    v.as_u64().unwrap_or(0) as i64
}

fn median(mut v: Vec<i64>) -> (i64, i64, i64) {
    v.sort_unstable();
    (v[v.len() / 2], v[0], v[v.len() - 1])
}

async fn overhead() -> anyhow::Result<()> {
    const STEPS: usize = 20;
    let host = SimHost::new(50);
    let app = spawn_managed(&host, &spec(), &[])?;
    app.start_server().await?;
    let id = start(&app, &plan("overhead", STEPS, false)).await?;
    let deadline = Instant::now() + Duration::from_secs(300);
    let c = loop {
        let c = app.get_json(&format!("/api/campaigns/{id}")).await?;
        if c["info"]["finished_at_ms"].is_u64() {
            break c;
        }
        anyhow::ensure!(Instant::now() < deadline, "the campaign did not end");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    anyhow::ensure!(c["info"]["done"] == STEPS, "not every step done: {c}");
    let steps = c["steps"].as_array().cloned().unwrap_or_default();
    let (mut before_bench, mut after_bench, mut per_step, mut step_ms) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut restarts = Vec::new();
    for s in &steps {
        let r = app
            .get_json(&format!("/api/restarts/{}", s["restart_id"]))
            .await?;
        let run = app
            .get_json(&format!("/api/bench/runs/{}", s["result"]["run_id"]))
            .await?;
        restarts.push((r["summary"].clone(), run));
    }
    for (i, (r, run)) in restarts.iter().enumerate() {
        let a = ms(&run["started_at_ms"]) - ms(&r["finished_at_ms"]);
        before_bench.push(a);
        let b = match restarts.get(i + 1) {
            Some((next, _)) => ms(&next["started_at_ms"]) - ms(&run["finished_at_ms"]),
            None => 0,
        };
        if i + 1 < restarts.len() {
            after_bench.push(b);
            per_step.push(a + b);
        }
        step_ms.push(ms(&steps[i]["finished_at_ms"]) - ms(&steps[i]["started_at_ms"]));
    }
    let (m, lo, hi) = median(per_step);
    println!(
        "campaign-overhead: {STEPS} steps, each {} ms median (restart + benchmark); campaign's own time per step median {m} ms (min {lo}, max {hi}): restart end → benchmark start median {} ms, benchmark end → next restart median {} ms",
        median(step_ms).0,
        median(before_bench).0,
        median(after_bench).0
    );
    let _ = app
        .post(
            &format!("/api/campaigns/{id}/cancel"),
            &serde_json::json!({}),
        )
        .await;
    Ok(())
}

const OBSERVE: &str = r#"
const t0 = performance.now();
window.__frames = []; window.__loaf = []; window.__loaf_load = []; window.__cls = 0; window.__cls_load = 0; window.__shifts = [];
let last = t0;
const tick = (t) => { window.__frames.push(t - last); last = t; requestAnimationFrame(tick); };
requestAnimationFrame(tick);
const types = PerformanceObserver.supportedEntryTypes;
if (types.includes('long-animation-frame')) {
  window.__loaf_detail = [];
  new PerformanceObserver(l => { for (const e of l.getEntries()) { (e.startTime < t0 ? window.__loaf_load : window.__loaf).push(e.duration);
    if (e.startTime >= t0) window.__loaf_detail.push(Math.round(e.duration) + ' layout ' + Math.round(e.startTime + e.duration - e.styleAndLayoutStart) + ' scripts ' + e.scripts.map(s => s.invoker + ':' + Math.round(s.duration)).join(' ')); } })
    .observe({type: 'long-animation-frame', buffered: true});
}
new PerformanceObserver(l => { for (const e of l.getEntries()) if (!e.hadRecentInput) {
  if (e.startTime < t0) { window.__cls_load += e.value; return; }
  window.__cls += e.value;
  window.__shifts.push(e.value.toFixed(4) + ' ' + (e.sources || []).map(s => s.node ? (s.node.nodeName + '.' + (s.node.className || '') + '[' + ((s.node.getAttribute && s.node.getAttribute('data-testid')) || '') + ']') : '?').join(','));
} }).observe({type: 'layout-shift', buffered: true});
return types.includes('long-animation-frame');
"#;

/// What the page did while it was watched.
struct Watched {
    frames: Vec<f64>,
    loaf: Vec<f64>,
    loaf_load: Vec<f64>,
    cls: f64,
    cls_load: f64,
    loaf_supported: bool,
}

impl Watched {
    fn line(&self) -> String {
        let mut f = self.frames.clone();
        f.sort_by(f64::total_cmp);
        let pct = |p: f64| {
            f.get(((f.len() as f64 - 1.0) * p) as usize)
                .copied()
                .unwrap_or(0.0)
        };
        let max = |v: &[f64]| v.iter().copied().fold(0.0, f64::max);
        format!(
            "frames {} (interval median {:.1} ms, p99 {:.1} ms, max {:.1} ms); long animation frames (> 50 ms; API: {}) while it ran {} (longest {:.0} ms), while the page loaded {} (longest {:.0} ms); layout shift while it ran {:.4} (while the page loaded {:.4})",
            f.len(),
            pct(0.5),
            pct(0.99),
            max(&f),
            self.loaf_supported,
            self.loaf.len(),
            max(&self.loaf),
            self.loaf_load.len(),
            max(&self.loaf_load),
            self.cls,
            self.cls_load
        )
    }
}

fn floats(v: &Value) -> Vec<f64> {
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_f64)
        .collect()
}

/// Starts watching the page's frames and layout shifts, waits `during`,
/// and says what it saw.
async fn watch(
    b: &Browser,
    during: impl std::future::Future<Output = anyhow::Result<()>>,
) -> anyhow::Result<Watched> {
    let loaf_supported = b
        .client
        .execute(OBSERVE, vec![])
        .await?
        .as_bool()
        .unwrap_or(false);
    during.await?;
    if std::env::var_os("SHIFTS").is_some() {
        let t = b.client.execute("let out = []; for (let i = 0; i < 5; i++) { const t = performance.now(); document.body.style.paddingTop = (i % 2 + 1) + 'px'; document.body.offsetHeight; out.push(performance.now() - t); } document.body.style.paddingTop = ''; return out.join(' ') + ' nodes ' + document.getElementsByTagName('*').length;", vec![]).await?;
        println!("full layout ms: {t}");
    }
    let got = b
        .client
        .execute(
            "return {frames: window.__frames, loaf: window.__loaf, loaf_load: window.__loaf_load, cls: window.__cls, cls_load: window.__cls_load, shifts: window.__shifts.slice(0, 30), detail: (window.__loaf_detail || []).slice(0, 30)};",
            vec![],
        )
        .await?;
    if std::env::var_os("SHIFTS").is_some() {
        println!("{:#}\n{:#}", got["shifts"], got["detail"]);
    }
    Ok(Watched {
        frames: floats(&got["frames"]),
        loaf: floats(&got["loaf"]),
        loaf_load: floats(&got["loaf_load"]),
        cls: got["cls"].as_f64().unwrap_or(0.0),
        cls_load: got["cls_load"].as_f64().unwrap_or(0.0),
        loaf_supported,
    })
}

const WATCH: Duration = Duration::from_secs(30);

async fn ui() -> anyhow::Result<()> {
    const STEPS: usize = 500;
    // The same page and the same kind of work, twice: restarts and
    // benchmarks asked for one by one (no campaign), then a campaign of
    // 500 steps doing them.
    let host = SimHost::new(50);
    let app = spawn_managed(&host, &spec(), &[])?;
    app.start_server().await?;
    let b = Browser::start().await?;
    b.client.goto(&app.url("/")).await?;
    b.wait_count("[data-testid=campaign-empty]", 1, Duration::from_secs(30))
        .await?;
    let by_hand = watch(&b, async {
        let until = Instant::now() + WATCH;
        let mut i = 0;
        while Instant::now() < until {
            i += 1;
            let id = app
                .restart(serde_json::json!({"--warmup-ms": (200 + i % 50).to_string()}))
                .await?;
            app.finished_restart(id, Duration::from_secs(30)).await?;
            app.bench(serde_json::json!({"concurrency": [1], "num_prompts": 1, "input_len": 8, "output_len": 4, "warmup": 0, "repeats": 3})).await?;
        }
        Ok(())
    })
    .await?;
    println!(
        "campaign-ui: without a campaign, restarts and benchmarks by hand for {} s: {}",
        WATCH.as_secs(),
        by_hand.line()
    );

    let id = start(&app, &plan("ui", STEPS, true)).await?;
    b.client.goto(&app.url("/")).await?;
    b.wait_attr(
        "[data-testid=campaign-steps]",
        "data-steps",
        Duration::from_secs(30),
        |n| n == STEPS.to_string(),
    )
    .await?;
    b.wait_count("[data-testid=campaign-step]", 1, Duration::from_secs(30))
        .await?;
    if let Ok(hide) = std::env::var("HIDE") {
        b.client
            .execute(
                "const s = document.createElement('style'); s.textContent = arguments[0] + ' { display: none !important; }'; document.head.appendChild(s);",
                vec![Value::String(hide)],
            )
            .await?;
    }
    let before = app.get_json(&format!("/api/campaigns/{id}")).await?["info"]["done"]
        .as_u64()
        .unwrap_or(0);
    let during = watch(&b, async {
        tokio::time::sleep(WATCH).await;
        Ok(())
    })
    .await?;
    let after = app.get_json(&format!("/api/campaigns/{id}")).await?["info"]["done"]
        .as_u64()
        .unwrap_or(0);
    println!(
        "campaign-ui: a {STEPS}-step campaign in view, {} steps finished in {} s: {}",
        after.saturating_sub(before),
        WATCH.as_secs(),
        during.line()
    );
    b.client.close().await?;
    let _ = app
        .post(
            &format!("/api/campaigns/{id}/cancel"),
            &serde_json::json!({}),
        )
        .await;
    Ok(())
}

fn main() -> anyhow::Result<()> {
    let rt = tokio::runtime::Runtime::new()?;
    rt.block_on(async {
        if tests::bench_wanted("campaign-overhead") {
            overhead().await?;
        }
        if tests::bench_wanted("campaign-ui") {
            ui().await?;
        }
        Ok(())
    })
}
