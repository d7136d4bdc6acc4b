//! `deploy/prometheus/` with a real Prometheus server (Debian's, installed by
//! `cargo xtask test`): promtool accepts the config and the rules and passes
//! the alerts' own unit tests; Prometheus, started on loopback with the
//! shipped config, scrapes three agents on 127.0.0.2–4, answers PromQL with
//! every agent's series, and fires an alert whose condition a test makes true.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tests::managed::{ServerSpec, free_port, spawn_managed};
use tests::{Proc, SimHost, TestApp, spawn_foreign};

const PROMETHEUS: &str = "/usr/bin/prometheus";
const PROMTOOL: &str = "/usr/bin/promtool";

fn deploy() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/prometheus")
}

/// Runs promtool with `args` in `deploy/prometheus/`; its output on failure.
fn promtool(args: &[&str]) -> anyhow::Result<()> {
    let out = Command::new(PROMTOOL)
        .args(args)
        .current_dir(deploy())
        .output()?;
    anyhow::ensure!(
        out.status.success(),
        "promtool {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

/// A copy of `deploy/prometheus/` whose targets are `agents`, named.
fn config_for(dir: &Path, agents: &[(&str, &TestApp)]) -> anyhow::Result<PathBuf> {
    let copy = dir.join("prometheus");
    std::fs::create_dir_all(copy.join("rules"))?;
    std::fs::create_dir_all(copy.join("targets"))?;
    std::fs::copy(deploy().join("prometheus.yml"), copy.join("prometheus.yml"))?;
    for f in ["recording.yml", "alerts.yml"] {
        std::fs::copy(deploy().join("rules").join(f), copy.join("rules").join(f))?;
    }
    let targets: Vec<Value> = agents
        .iter()
        .map(|(name, app)| json!({"targets": [app.addr], "labels": {"agent": name}}))
        .collect();
    std::fs::write(
        copy.join("targets/agents.json"),
        serde_json::to_vec_pretty(&targets)?,
    )?;
    Ok(copy.join("prometheus.yml"))
}

/// `GET /api/v1/<path>` of Prometheus: its `data`.
async fn api(base: &str, path: &str) -> anyhow::Result<Value> {
    let v: Value = reqwest::get(format!("{base}/api/v1/{path}"))
        .await?
        .json()
        .await?;
    anyhow::ensure!(v["status"] == "success", "{path}: {v}");
    Ok(v["data"].clone())
}

/// Polls `check` every 500 ms until it gives a value, for at most `limit`.
async fn until<T>(
    what: &str,
    limit: Duration,
    mut check: impl AsyncFnMut() -> anyhow::Result<Option<T>>,
) -> anyhow::Result<T> {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(v) = check().await? {
            return Ok(v);
        }
        anyhow::ensure!(Instant::now() < deadline, "{what}: not within {limit:?}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The `agent` labels of a query's result, sorted.
fn agents_of(result: &Value) -> Vec<String> {
    let mut a: Vec<String> = result
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| r["metric"]["agent"].as_str().map(str::to_owned))
        .collect();
    a.sort();
    a.dedup();
    a
}

#[test]
fn promtool_accepts_the_config_and_the_rules_and_their_tests_pass() -> anyhow::Result<()> {
    promtool(&["check", "config", "prometheus.yml"])?;
    promtool(&["check", "rules", "rules/recording.yml", "rules/alerts.yml"])?;
    promtool(&["test", "rules", "rules/alerts_test.yml"])?;
    // The dashboard is JSON Grafana can import.
    let dash: Value =
        serde_json::from_slice(&std::fs::read(deploy().join("grafana/drainwatch.json"))?)?;
    assert!(dash["panels"].as_array().is_some_and(|p| !p.is_empty()));
    assert!(
        dash["annotations"]["list"]
            .as_array()
            .is_some_and(|a| a.len() >= 2)
    );
    Ok(())
}

#[tokio::test]
async fn prometheus_scrapes_three_agents_and_an_alert_fires() -> anyhow::Result<()> {
    // Three agents, each with its own simulated host and server, on its own
    // loopback address.
    let mut hosts = Vec::new();
    let mut agents = Vec::new();
    for ip in ["127.0.0.2", "127.0.0.3", "127.0.0.4"] {
        let host = SimHost::new(100);
        let bind = format!("{ip}:0");
        let app = spawn_managed(&host, &ServerSpec::default(), &["--bind", &bind])?;
        app.start_server().await?;
        hosts.push(host);
        agents.push(app);
    }
    let names = ["gpu-a", "gpu-b", "gpu-c"];
    let scratch = tempfile::tempdir()?;
    let named: Vec<(&str, &TestApp)> = names.iter().copied().zip(agents.iter()).collect();
    let config = config_for(scratch.path(), &named)?;
    let port = free_port();
    let base = format!("http://127.0.0.1:{port}");
    let _prometheus = Proc::spawn(
        Command::new(PROMETHEUS)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                scratch.path().join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null()),
    )?;

    // Every agent up, with its GPUs and its failure counters (0 so far).
    let limit = Duration::from_secs(60);
    until("three agents up", limit, async || {
        let up = api(&base, "query?query=up%7Bjob%3D%22drainwatch%22%7D%3D%3D1").await;
        Ok(up
            .ok()
            .filter(|d| agents_of(&d["result"]) == names)
            .map(|_| ()))
    })
    .await?;
    for (query, per_agent) in [
        ("DCGM_FI_DEV_FB_USED", 8),
        ("drainwatch_server_phase%7Bphase%3D%22ready%22%7D%3D%3D1", 1),
        (
            "drainwatch_restart_failures_total%7Bkind%3D%22restart%22%2Cfailure%3D%22foreign_holders%22%7D",
            1,
        ),
    ] {
        let d = api(&base, &format!("query?query={query}")).await?;
        let result = d["result"].as_array().cloned().unwrap_or_default();
        assert_eq!(agents_of(&d["result"]), names, "{query}: {d}");
        assert_eq!(result.len(), 3 * per_agent, "{query}: {d}");
    }
    let rules = api(&base, "rules").await?;
    assert!(
        rules
            .to_string()
            .contains("DrainwatchForeignHolderBlocking"),
        "{rules}"
    );

    // Agent b's restart is blocked by a foreign process on its server's GPU 1.
    let b = &agents[1];
    let squatter = spawn_foreign(&hosts[1], 1, 2.0)?;
    b.wait_for_state("the squatter", Duration::from_secs(10), |s| {
        s.latest
            .as_ref()
            .is_some_and(|l| l.processes.iter().any(|p| p.pid == squatter.pid()))
    })
    .await?;
    let id = b.restart(json!({})).await?;
    let d = b.finished_restart(id, Duration::from_secs(30)).await?;
    assert_eq!(d["summary"]["failure"]["kind"], "foreign_holders", "{d}");

    // The alert fires for agent b, and for no other.
    let firing = until("the alert firing", limit, async || {
        let alerts = api(&base, "alerts").await?;
        let list: Vec<Value> = alerts["alerts"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|a| a["labels"]["alertname"] == "DrainwatchForeignHolderBlocking")
            .cloned()
            .collect();
        Ok(list.iter().any(|a| a["state"] == "firing").then_some(list))
    })
    .await?;
    assert_eq!(firing.len(), 1, "{firing:?}");
    assert_eq!(firing[0]["labels"]["agent"], "gpu-b");
    assert_eq!(firing[0]["labels"]["kind"], "restart");
    assert_eq!(firing[0]["labels"]["severity"], "warning");

    // The server is down and GPU 1 still holds the squatter's 2 GiB: memory
    // over the baseline while stopped, pending its minute.
    let over = api(
        &base,
        "query?query=drainwatch_gpu_over_baseline_mib%7Bagent%3D%22gpu-b%22%2Cgpu%3D%221%22%7D",
    )
    .await?;
    let mib: f64 = over["result"][0]["value"][1]
        .as_str()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0);
    assert!(mib >= 2048.0, "{over}");
    let pending = until("over baseline while stopped", limit, async || {
        let alerts = api(&base, "alerts").await?;
        Ok(alerts["alerts"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|a| a["labels"]["alertname"] == "DrainwatchGpuOverBaselineWhileStopped")
            .cloned())
    })
    .await?;
    assert_eq!(pending["labels"]["agent"], "gpu-b", "{pending}");
    assert_eq!(pending["labels"]["gpu"], "1", "{pending}");
    Ok(())
}
