//! drainwatch managing the simulated server: a generated server config, the real
//! binary with `--config` and its own data folder, and helpers that drive and
//! read the restart API.

use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde_json::{Value, json};
use shared::restart::{Phase, ServerStatus};

use crate::{SimHost, TestApp, bin, spawn_app};

/// A loopback port for a test server, reserved to this test process (see
/// [`crate::ports`]): no other test, client socket or `bind(0)` takes it
/// between the server's launches.
pub fn free_port() -> u16 {
    crate::ports::claim().expect("a port for a test server")
}

/// Options of the generated server config.
#[derive(Debug, Clone)]
pub struct ServerSpec {
    pub port: u16,
    pub tp: u32,
    pub warmup_ms: u64,
    pub drain: &'static str,
    pub kill_grace: &'static str,
    pub verify: &'static str,
    pub warmup_timeout: &'static str,
    /// Extra `[server.env]` entries.
    pub env: Vec<(&'static str, &'static str)>,
    /// The simulated server's pace (see its `rate` module).
    pub itl_ms: f64,
    pub ttft_ms: f64,
    pub batch_knee: f64,
    /// Extra TOML appended to the file (a `[bench]` section, say).
    pub extra: String,
    /// The server spans nodes: its argv names `{nnodes}`, `{node_rank}` and
    /// `{dist_init_addr}`, which the hub's coordinated restart fills in.
    pub nodes: bool,
}

impl Default for ServerSpec {
    fn default() -> Self {
        Self {
            port: free_port(),
            tp: 4,
            warmup_ms: 500,
            drain: "5s",
            kill_grace: "3s",
            verify: "10s",
            warmup_timeout: "20s",
            env: Vec::new(),
            itl_ms: 20.0,
            ttft_ms: 40.0,
            batch_knee: 16.0,
            extra: String::new(),
            nodes: false,
        }
    }
}

impl ServerSpec {
    /// The server's true output rate for `c` closed-loop clients asking `n`
    /// tokens each, by the simulated server's documented formula (no flags).
    pub fn true_rate(&self, c: u32, n: u32) -> f64 {
        let load = 1.0 + f64::from(c - 1) / self.batch_knee;
        let per = self.ttft_ms * load + f64::from(n - 1) * self.itl_ms * load;
        f64::from(c) * f64::from(n) / (per / 1e3)
    }

    pub fn itl_at(&self, c: u32) -> f64 {
        self.itl_ms * (1.0 + f64::from(c - 1) / self.batch_knee)
    }

    pub fn ttft_at(&self, c: u32) -> f64 {
        self.ttft_ms * (1.0 + f64::from(c - 1) / self.batch_knee)
    }
}

impl ServerSpec {
    /// The TOML drainwatch reads.
    pub fn toml(&self) -> String {
        let env: String = self
            .env
            .iter()
            .map(|(k, v)| format!("{k} = \"{v}\"\n"))
            .collect();
        format!(
            r#"
[server]
name = "sim"
program = "{program}"
args = ["launch", "--port", "{port}", "--tp", "{tp}", "--warmup-ms", "{warmup}", "--itl-ms", "{itl}", "--ttft-ms", "{ttft}", "--batch-knee", "{knee}",{nodes}
        "--", "python3", "-m", "sglang.launch_server", "--port", "{port}"]
port = {port}
gpus = [0, 1, 2, 3]

[server.env]
SIMSERVER_OWNER = "drainwatch"
{env}
[server.readiness]
timeout = "2s"

[timeouts]
drain = "{drain}"
kill_grace = "{kill}"
verify = "{verify}"
warmup = "{warmup_timeout}"

[verify]
samples = 3

[[flags]]
name = "--tp"
kind = "arg"
type = "int"
min = 1
max = 4

[[flags]]
name = "--warmup-ms"
kind = "arg"
type = "int"
min = 100
max = 60000

[[flags]]
name = "SIMSERVER_MODE"
kind = "env"
type = "enum"
values = ["normal", "ignore-sigterm", "orphan", "slow-drain", "slow-drain=15000", "oom", "crash=6000", "hang-completions", "drop-every=4", "slow-every=7", "final-usage", "mixed-events", "mixed-events,final-usage", "escape", "escape=1500", "fork-bomb-lite", "slow-teardown=2500", "leak", "stuck-in-driver"]

[[flags]]
name = "SGLANG_OPT_USE_TILELANG_INDEXER"
kind = "env"
type = "enum"
values = ["0", "1"]

[[flags]]
name = "--speculative-algorithm"
kind = "arg"
type = "enum"
values = ["EAGLE"]

[[flags]]
name = "--enable-torch-compile"
kind = "arg"
type = "bool"
"#,
            program = bin("simserver").display(),
            port = self.port,
            tp = self.tp,
            warmup = self.warmup_ms,
            drain = self.drain,
            kill = self.kill_grace,
            verify = self.verify,
            warmup_timeout = self.warmup_timeout,
            itl = self.itl_ms,
            ttft = self.ttft_ms,
            knee = self.batch_knee,
            nodes = if self.nodes {
                r#" "--nnodes", "{nnodes}", "--node-rank", "{node_rank}", "--dist-init-addr", "{dist_init_addr}","#
            } else {
                ""
            },
        ) + &self.extra
    }
}

/// A restart record's transition notes, joined with ` | `.
pub fn notes(d: &Value) -> String {
    d["transitions"]
        .as_array()
        .map(|t| {
            t.iter()
                .filter_map(|x| x["note"].as_str())
                .collect::<Vec<_>>()
                .join(" | ")
        })
        .unwrap_or_default()
}

/// drainwatch with `--config` for `spec`, its data in `host`'s scratch folder.
pub fn spawn_managed(host: &SimHost, spec: &ServerSpec, extra: &[&str]) -> anyhow::Result<TestApp> {
    let cfg = host.scratch().join("server.toml");
    std::fs::write(&cfg, spec.toml())?;
    spawn_with_config(host, &cfg, 50, extra)
}

/// drainwatch with `--config cfg`, sampling every `sample_ms`, its data in
/// `host`'s scratch folder (kept across calls: a second one resumes it); its
/// signals traced.
pub fn spawn_with_config(
    host: &SimHost,
    cfg: &std::path::Path,
    sample_ms: u32,
    extra: &[&str],
) -> anyhow::Result<TestApp> {
    let data = host.scratch().join("data");
    let mut args: Vec<String> = vec![
        "--config".into(),
        cfg.display().to_string(),
        "--data-dir".into(),
        data.display().to_string(),
        "--sample-interval-ms".into(),
        sample_ms.to_string(),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let app = spawn_app(host, &refs)?;
    host.watch_signals_of(app.proc.pid());
    host.watch_signals_of(app.drainwatch_pid());
    Ok(app)
}

impl TestApp {
    /// The managed server's status from `/api/state`.
    pub async fn server(&self) -> anyhow::Result<ServerStatus> {
        self.state()
            .await?
            .server
            .context("no managed server in /api/state")
    }

    /// Polls until the server's phase is `phase` and no operation runs.
    pub async fn wait_phase(
        &self,
        phase: Phase,
        timeout: Duration,
    ) -> anyhow::Result<ServerStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            let s = self.server().await?;
            if s.phase == phase && s.operation.is_none() {
                return Ok(s);
            }
            if Instant::now() > deadline {
                bail!("timed out waiting for {phase:?}; status: {s:#?}");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// POSTs JSON to `path`; returns the status code and the JSON body.
    pub async fn post(&self, path: &str, body: &Value) -> anyhow::Result<(u16, Value)> {
        let r = self.http.post(self.url(path)).json(body).send().await?;
        let code = r.status().as_u16();
        let text = r.text().await?;
        Ok((
            code,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        ))
    }

    /// Asks for a start of the server `sim`; returns the operation's id.
    pub async fn begin_start(&self) -> anyhow::Result<i64> {
        let g = self.server().await?.generation;
        let (code, body) = self
            .post(
                "/api/start",
                &json!({"generation": g, "flags": {}, "confirm": "sim"}),
            )
            .await?;
        anyhow::ensure!(code == 202, "start refused: {code} {body}");
        body["id"].as_i64().context("an id")
    }

    /// What `drainwatch status --url <this app>` prints (it must succeed).
    pub async fn status_text(&self) -> anyhow::Result<String> {
        let out = tokio::process::Command::new(bin("drainwatch"))
            .args(["status", "--url", &self.url("")])
            .output()
            .await?;
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        anyhow::ensure!(out.status.success(), "drainwatch status: {out:?}");
        Ok(text)
    }

    pub async fn get_json(&self, path: &str) -> anyhow::Result<Value> {
        let r = self.http.get(self.url(path)).send().await?;
        anyhow::ensure!(r.status().is_success(), "GET {path}: {}", r.status());
        Ok(r.json().await?)
    }

    /// Waits until the managed server reports at least `n` running requests.
    pub async fn wait_running(&self, n: u64, timeout: Duration) -> anyhow::Result<()> {
        let port = self.server().await?.port;
        let deadline = Instant::now() + timeout;
        loop {
            let text = reqwest::get(format!("http://127.0.0.1:{port}/metrics"))
                .await?
                .text()
                .await?;
            let running = text
                .lines()
                .find(|l| l.starts_with("sglang:num_running_reqs"))
                .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
                .unwrap_or(0.0);
            if running >= n as f64 {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("the server never had {n} requests running");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Waits until a server drainwatch does not manage listens on the port;
    /// returns the status that offers it for adoption.
    pub async fn wait_adoptable(&self, timeout: Duration) -> anyhow::Result<ServerStatus> {
        self.wait_for_state("the server on the port", timeout, |s| {
            s.server.as_ref().is_some_and(|v| v.adoptable.is_some())
        })
        .await?
        .server
        .context("no managed server in /api/state")
    }

    /// Starts the server and waits until it is ready.
    pub async fn start_server(&self) -> anyhow::Result<ServerStatus> {
        self.start_as("sim", Duration::from_secs(30)).await
    }

    /// Starts the server named `name` (what confirms it) and waits up to
    /// `timeout` until it is ready.
    pub async fn start_as(&self, name: &str, timeout: Duration) -> anyhow::Result<ServerStatus> {
        let g = self.server().await?.generation;
        let (code, body) = self
            .post(
                "/api/start",
                &json!({"generation": g, "flags": {}, "confirm": name}),
            )
            .await?;
        anyhow::ensure!(code == 202, "start refused: {code} {body}");
        self.wait_phase(Phase::Ready, timeout).await
    }

    /// Requests a restart with `flags`; returns the new restart's id.
    pub async fn restart(&self, flags: Value) -> anyhow::Result<i64> {
        self.restart_as("sim", flags).await
    }

    /// Requests a restart of the server named `name` with `flags`; its id.
    pub async fn restart_as(&self, name: &str, flags: Value) -> anyhow::Result<i64> {
        let g = self.server().await?.generation;
        let (code, body) = self
            .post(
                "/api/restart",
                &json!({"generation": g, "flags": flags, "confirm": name}),
            )
            .await?;
        anyhow::ensure!(code == 202, "restart refused: {code} {body}");
        body["id"].as_i64().context("an id")
    }

    /// Runs a benchmark with `settings` and waits for its record.
    pub async fn bench(&self, settings: Value) -> anyhow::Result<Value> {
        let id = self.begin_bench(settings).await?;
        self.finished_bench(id, Duration::from_secs(120)).await
    }

    /// Starts a benchmark; its id.
    pub async fn begin_bench(&self, settings: Value) -> anyhow::Result<i64> {
        let (code, body) = self.post("/api/bench", &settings).await?;
        anyhow::ensure!(code == 202, "bench refused: {code} {body}");
        body["id"].as_i64().context("an id")
    }

    /// The benchmark `id` once it is no longer running.
    pub async fn finished_bench(&self, id: i64, timeout: Duration) -> anyhow::Result<Value> {
        let deadline = Instant::now() + timeout;
        loop {
            let run = self.get_json(&format!("/api/bench/runs/{id}")).await?;
            if run["status"] != "running" {
                return Ok(run);
            }
            if Instant::now() > deadline {
                bail!("benchmark {id} still running after {timeout:?}");
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// The finished restart `id` (waits until it is no longer running).
    pub async fn finished_restart(&self, id: i64, timeout: Duration) -> anyhow::Result<Value> {
        let deadline = Instant::now() + timeout;
        loop {
            let d = self.get_json(&format!("/api/restarts/{id}")).await?;
            if d["summary"]["outcome"] != "running" {
                return Ok(d);
            }
            if Instant::now() > deadline {
                bail!("restart {id} still running after {timeout:?}: {d}");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}
