//! Campaigns through the real path: plans posted over HTTP to the real
//! drainwatch managing the simulated server, every step a guarded restart and a
//! benchmark, the ledger read back; drainwatch SIGKILLed mid-step and started
//! again; pause, resume, cancel, a person's restart refused, a foreign holder,
//! webhooks received by a local listener; the nights nobody watches.

mod cli;
mod control;
mod grid;
mod nights;
mod resume;
mod search;

use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde_json::Value;
use tests::managed::ServerSpec;
use tests::{SimHost, TestApp};

/// The test that compares measured effects with the formula holds it alone
/// (`write`); the others share it (`read`).
pub(crate) static MEASURING: tokio::sync::RwLock<()> = tokio::sync::RwLock::const_new(());

/// `--ep-size` beside the test config's allow-list (the simulated server is
/// faster with more expert parallelism, and fails with some combinations).
pub(crate) const EP_FLAG: &str = "
[[flags]]
name = \"--ep-size\"
kind = \"arg\"
type = \"int\"
min = 1
max = 8
";

/// The benchmark of every test campaign: small, with the correctness check.
pub(crate) const BENCH: &str = "[bench]
concurrency = [4]
num_prompts = 8
input_len = 32
output_len = 16
warmup = 2
repeats = 3
correctness = { prompt = \"Count from zero.\", expect = \"tok3\" }
";

/// The same benchmark as `POST /api/bench` takes it.
pub(crate) fn bench_json() -> Value {
    serde_json::json!({"concurrency": [4], "num_prompts": 8, "input_len": 32, "output_len": 16,
        "warmup": 2, "repeats": 3, "correctness": {"prompt": "Count from zero.", "expect": "tok3"}})
}

/// The server campaigns run: the test config with `--ep-size`, and `extra`.
pub(crate) fn spec(extra: &str) -> ServerSpec {
    ServerSpec {
        warmup_ms: 500,
        extra: format!("{EP_FLAG}{extra}"),
        ..ServerSpec::default()
    }
}

/// drainwatch managing a server that reports the version the file it
/// returns holds when it launches (`first`; empty: it says none), started.
pub(crate) async fn versioned(
    first: &str,
) -> anyhow::Result<(SimHost, TestApp, std::path::PathBuf)> {
    let host = SimHost::new(100);
    let version = host.scratch().join("version");
    std::fs::write(&version, first)?;
    let path: &'static str = Box::leak(version.display().to_string().into_boxed_str());
    let spec = ServerSpec {
        env: vec![("SIMSERVER_VERSION_FILE", path)],
        ..spec("")
    };
    let app = tests::managed::spawn_managed(&host, &spec, &[])?;
    app.start_server().await?;
    Ok((host, app, version))
}

/// drainwatch managing the campaigns' server (`extra`: more TOML for its
/// config), the server started and ready.
pub(crate) async fn ready(extra: &str) -> anyhow::Result<(SimHost, TestApp)> {
    let host = SimHost::new(100);
    let app = tests::managed::spawn_managed(&host, &spec(extra), &[])?;
    app.start_server().await?;
    Ok((host, app))
}

/// POSTs a TOML plan; the status and the JSON answer.
pub(crate) async fn post_plan(
    app: &TestApp,
    path: &str,
    toml: &str,
) -> anyhow::Result<(u16, Value)> {
    let r = app
        .http
        .post(app.url(path))
        .header("content-type", "application/toml")
        .body(toml.to_owned())
        .send()
        .await?;
    let code = r.status().as_u16();
    let text = r.text().await?;
    Ok((
        code,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    ))
}

/// Starts `toml`; the campaign's id.
pub(crate) async fn start(app: &TestApp, toml: &str) -> anyhow::Result<i64> {
    let (code, body) = post_plan(app, "/api/campaigns", toml).await?;
    anyhow::ensure!(code == 202, "campaign refused: {code} {body}");
    body["id"].as_i64().context("an id")
}

/// Polls campaign `id` until `pred` holds; returns it then.
pub(crate) async fn wait_campaign(
    app: &TestApp,
    id: i64,
    what: &str,
    timeout: Duration,
    pred: impl Fn(&Value) -> bool,
) -> anyhow::Result<Value> {
    let deadline = Instant::now() + timeout;
    loop {
        let c = app.get_json(&format!("/api/campaigns/{id}")).await?;
        if pred(&c) {
            return Ok(c);
        }
        if Instant::now() > deadline {
            bail!("timed out waiting for {what}: {c:#}");
        }
        tokio::time::sleep(Duration::from_millis(40)).await;
    }
}

/// Waits until campaign `id` is over (done, cancelled or stopped).
pub(crate) async fn wait_over(app: &TestApp, id: i64, timeout: Duration) -> anyhow::Result<Value> {
    wait_campaign(app, id, "the campaign's end", timeout, |c| {
        matches!(
            c["info"]["state"].as_str(),
            Some("done" | "cancelled" | "stopped")
        ) && c["info"]["finished_at_ms"].is_u64()
    })
    .await
}

/// The states of a campaign's steps, in order.
pub(crate) fn states(c: &Value) -> Vec<String> {
    c["steps"]
        .as_array()
        .map(|s| {
            s.iter()
                .map(|s| s["state"].as_str().unwrap_or("?").to_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// A local webhook receiver: every request's body, as it came.
pub(crate) struct Listener {
    pub(crate) url: String,
    bodies: std::sync::Arc<std::sync::Mutex<Vec<Value>>>,
}

impl Listener {
    /// Listens on loopback; answers every request 200.
    pub(crate) async fn start() -> anyhow::Result<Self> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("http://{}/hook", l.local_addr()?);
        let bodies = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let keep = std::sync::Arc::clone(&bodies);
        tokio::spawn(async move {
            while let Ok((mut sock, _)) = l.accept().await {
                let keep = std::sync::Arc::clone(&keep);
                tokio::spawn(async move {
                    let mut buf = Vec::new();
                    let mut chunk = [0u8; 4096];
                    // Headers, then Content-Length bytes of body.
                    let body = loop {
                        let Ok(n) = sock.read(&mut chunk).await else {
                            return;
                        };
                        if n == 0 {
                            return;
                        }
                        buf.extend_from_slice(&chunk[..n]);
                        let text = String::from_utf8_lossy(&buf).to_string();
                        let Some(end) = text.find("\r\n\r\n") else {
                            continue;
                        };
                        let len = text[..end]
                            .lines()
                            .find_map(|l| {
                                let (k, v) = l.split_once(':')?;
                                k.eq_ignore_ascii_case("content-length")
                                    .then(|| v.trim().parse::<usize>().ok())?
                            })
                            .unwrap_or(0);
                        if buf.len() >= end + 4 + len {
                            break buf[end + 4..end + 4 + len].to_vec();
                        }
                    };
                    if let Ok(v) = serde_json::from_slice::<Value>(&body) {
                        keep.lock().expect("lock").push(v);
                    }
                    let _ = sock
                        .write_all(
                            b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
                        )
                        .await;
                });
            }
        });
        Ok(Self { url, bodies })
    }

    pub(crate) fn bodies(&self) -> Vec<Value> {
        self.bodies.lock().expect("lock").clone()
    }

    /// Waits until a body satisfies `pred`; returns it.
    pub(crate) async fn wait_for(
        &self,
        what: &str,
        timeout: Duration,
        pred: impl Fn(&Value) -> bool,
    ) -> anyhow::Result<Value> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(b) = self.bodies().into_iter().find(|b| pred(b)) {
                return Ok(b);
            }
            if Instant::now() > deadline {
                bail!("no webhook {what} arrived: {:#?}", self.bodies());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}
