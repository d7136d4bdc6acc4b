//! The real engine in the suite: llama.cpp's `llama-server` with Gemma 3 270M
//! (Q4_K_M), which `cargo xtask test` builds once into `~/.cache/drainwatch`
//! and names in `DRAINWATCH_LLAMA_SERVER` and `DRAINWATCH_LLAMA_MODEL`
//! (`cargo xtask engine` prints both). drainwatch manages it through
//! `examples/llamacpp.toml` itself, with this run's paths and port: what the
//! example says is what the tests run.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::bail;
use serde_json::Value;
use shared::restart::ServerStatus;

use crate::managed::free_port;
use crate::{SimHost, TestApp};

/// What an operator types to confirm an operation on the example's server.
pub const NAME: &str = "gemma";

/// Where the engine and its model are.
#[derive(Debug, Clone)]
pub struct Engine {
    pub server: PathBuf,
    pub model: PathBuf,
}

/// The engine `cargo xtask test` built. Without it the engine tests cannot
/// run, and they say how to get it rather than pass.
pub fn engine() -> Engine {
    let var = |name: &str| {
        std::env::var_os(name).map(PathBuf::from).unwrap_or_else(|| {
            panic!(
                "{name} is not set: the engine tests run llama.cpp's llama-server with Gemma 3 270M; \
                 `cargo xtask test` builds them (once) and sets it, `cargo xtask engine` prints where they are"
            )
        })
    };
    let e = Engine {
        server: var("DRAINWATCH_LLAMA_SERVER"),
        model: var("DRAINWATCH_LLAMA_MODEL"),
    };
    for p in [&e.server, &e.model] {
        assert!(p.is_file(), "{} is missing", p.display());
    }
    e
}

/// One engine at a time: each uses both cores, and the tests that compare
/// drainwatch's numbers with the engine's own want it alone.
pub static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The example config with this run's engine, model and port, and
/// `--parallel` set to `parallel`.
pub fn config(e: &Engine, port: u16, parallel: u32) -> String {
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/llamacpp.toml");
    let text = std::fs::read_to_string(&example).expect("examples/llamacpp.toml");
    let swap = |text: String, from: &str, to: &str| {
        assert!(text.contains(from), "the example has no `{from}`");
        text.replace(from, to)
    };
    let text = swap(
        text,
        "\"/usr/local/bin/llama-server\"",
        &format!("{:?}", e.server.display().to_string()),
    );
    let text = swap(
        text,
        "\"/models/gemma-3-270m-it-Q4_K_M.gguf\"",
        &format!("{:?}", e.model.display().to_string()),
    );
    let text = swap(
        text,
        "\"--port\", \"8080\"",
        &format!("\"--port\", \"{port}\""),
    );
    let text = swap(text, "port = 8080", &format!("port = {port}"));
    swap(
        text,
        "\"--parallel\", \"4\"",
        &format!("\"--parallel\", \"{parallel}\""),
    )
}

/// drainwatch managing the engine (not started yet), with its data in the
/// host's scratch folder; `extra` are more command-line arguments.
pub fn spawn(host: &SimHost, parallel: u32, extra: &[&str]) -> anyhow::Result<TestApp> {
    spawn_edited(host, parallel, extra, |c| c)
}

/// As [`spawn`], with the config changed by `edit` first.
pub fn spawn_edited(
    host: &SimHost,
    parallel: u32,
    extra: &[&str],
    edit: impl FnOnce(String) -> String,
) -> anyhow::Result<TestApp> {
    let e = engine();
    let port = free_port();
    let cfg = host.scratch().join("llamacpp.toml");
    std::fs::write(&cfg, edit(config(&e, port, parallel)))?;
    respawn(host, extra)
}

/// drainwatch again on the same config and data (after a SIGKILL, say).
pub fn respawn(host: &SimHost, extra: &[&str]) -> anyhow::Result<TestApp> {
    crate::managed::spawn_with_config(host, &host.scratch().join("llamacpp.toml"), 100, extra)
}

/// How long a real engine may take to load, warm up and answer here.
pub const READY: Duration = Duration::from_secs(120);

impl TestApp {
    /// Starts the engine through drainwatch; the status once it is ready.
    pub async fn start_engine(&self) -> anyhow::Result<ServerStatus> {
        self.start_as(NAME, READY).await
    }

    /// Asks for a restart of the engine with `flags`; the restart's id.
    pub async fn restart_engine(&self, flags: Value) -> anyhow::Result<i64> {
        self.restart_as(NAME, flags).await
    }
}

/// The engine's own Prometheus counters (`llamacpp:*`, from `--metrics`).
pub async fn metrics(port: u16) -> anyhow::Result<std::collections::BTreeMap<String, f64>> {
    let text = reqwest::get(format!("http://127.0.0.1:{port}/metrics"))
        .await?
        .text()
        .await?;
    Ok(text
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (name, value) = l.split_once(' ')?;
            Some((name.to_owned(), value.trim().parse().ok()?))
        })
        .collect())
}

/// Waits until the engine decodes at least `n` requests at once.
pub async fn wait_processing(port: u16, n: f64, timeout: Duration) -> anyhow::Result<()> {
    let deadline = Instant::now() + timeout;
    loop {
        let m = metrics(port).await?;
        if m.get("llamacpp:requests_processing")
            .copied()
            .unwrap_or(0.0)
            >= n
        {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("the engine never had {n} requests processing: {m:?}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// What the engine's `/props` says.
pub async fn props(port: u16) -> anyhow::Result<Value> {
    Ok(reqwest::get(format!("http://127.0.0.1:{port}/props"))
        .await?
        .json()
        .await?)
}
