//! A server that wants an API key (`SIMSERVER_API_KEY`, as vLLM's `--api-key`):
//! with the key from a file or from an environment variable, drainwatch's
//! readiness probe, benchmark (correctness check included) and passive scrape
//! all pass its auth, and the key is shown nowhere — not in `/api/state`, the
//! restart records and their log tails, the audit log, `/metrics`, nor
//! drainwatch's own log (at debug). Without the key, the start fails at once
//! saying why, instead of waiting out the warm-up.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde_json::{Value, json};
use shared::restart::Phase;
use tests::managed::ServerSpec;
use tests::{SimHost, TestApp, spawn_app_with};

const T: Duration = Duration::from_secs(30);
const FILE_KEY: &str = "sk-dwtest-keyfile-5e7a21c0";
const ENV_KEY: &str = "sk-dwtest-keyenv-93b4f6d2";
/// What the server enforces (and drainwatch's environment passes on to it).
const SERVER_KEY_ENV: &str = "SIMSERVER_API_KEY";

/// `spec`'s config with `lines` added to `[server]`.
fn config(spec: &ServerSpec, lines: &str) -> String {
    let toml = spec.toml();
    let at = "gpus = [0, 1, 2, 3]\n";
    assert!(toml.contains(at), "the generated config changed: {toml}");
    toml.replace(at, &format!("{at}{lines}\n"))
}

/// drainwatch (logging at debug into `stderr.log` in the scratch folder)
/// managing a server that wants `server_key`; `lines` say where drainwatch's
/// key is.
fn spawn(host: &SimHost, server_key: &str, lines: &str) -> anyhow::Result<(TestApp, PathBuf)> {
    let spec = ServerSpec::default();
    let cfg = host.scratch().join("server.toml");
    std::fs::write(&cfg, config(&spec, lines))?;
    let data = host.scratch().join("data");
    let log = host.scratch().join("stderr.log");
    let err = std::fs::File::create(&log)?;
    let (cfg, data) = (cfg.display().to_string(), data.display().to_string());
    let args = [
        "--config",
        &cfg,
        "--data-dir",
        &data,
        "--sample-interval-ms",
        "50",
        "--log-level",
        "debug",
    ];
    let app = spawn_app_with(host, &args, |cmd| {
        cmd.env(SERVER_KEY_ENV, server_key).stderr(Stdio::from(err));
    })?;
    host.watch_signals_of(app.proc.pid());
    Ok((app, log))
}

async fn get_text(app: &TestApp, path: &str) -> anyhow::Result<String> {
    let r = app.http.get(app.url(path)).send().await?;
    anyhow::ensure!(r.status().is_success(), "GET {path}: {}", r.status());
    Ok(r.text().await?)
}

fn assert_hidden(key: &str, what: &str, text: &str) {
    if let Some(at) = text.find(key) {
        let from = text[..at]
            .char_indices()
            .rev()
            .nth(120)
            .map_or(0, |(i, _)| i);
        panic!(
            "{what} shows the key: …{}…",
            &text[from..(at + key.len()).min(text.len())]
        );
    }
}

/// Starts the server, benchmarks it while watching the passive scrape, then
/// looks for `key` in every view and in drainwatch's log.
async fn works_and_hides(app: &TestApp, key: &str, log: &Path) -> anyhow::Result<()> {
    // Ready means the real completion passed the server's auth.
    let ready = app.start_server().await?;
    assert_eq!(ready.phase, Phase::Ready);

    let settings = json!({"concurrency": [8], "num_prompts": 16, "input_len": 16, "output_len": 32,
        "warmup": 2, "repeats": 3, "correctness": {"prompt": "Say OK.", "expect": "tok"}});
    let (code, body) = app.post("/api/bench", &settings).await?;
    anyhow::ensure!(code == 202, "bench refused: {code} {body}");
    let id = body["id"].as_i64().context("an id")?;
    let (mut scraped, deadline) = (false, Instant::now() + Duration::from_secs(120));
    let run = loop {
        let s = app.server().await?;
        scraped |= s.has_metrics && s.passive.output_tok_s.is_some_and(|r| r > 0.0);
        let run = app.get_json(&format!("/api/bench/runs/{id}")).await?;
        if run["status"] != "running" {
            break run;
        }
        if Instant::now() > deadline {
            bail!("benchmark {id} still running");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(run["status"], "succeeded", "{run}");
    assert_eq!(run["correctness"]["passed"], true, "{run}");
    for r in run["repeats"].as_array().context("repeats")? {
        assert!(r["output_tokens"].as_u64() > Some(0), "{r}");
        assert_eq!(r["failed"], 0, "{r}");
    }
    assert!(scraped, "the passive scrape never read an output rate");
    assert!(app.server().await?.has_metrics);

    // The key was in the server's log ("Bearer <key>", its server_args):
    // shown, it is redacted.
    let state = get_text(app, "/api/state").await?;
    assert_hidden(key, "/api/state", &state);
    assert!(state.contains("Bearer redacted:"), "{state}");
    let list: Vec<Value> = app
        .get_json("/api/restarts")
        .await?
        .as_array()
        .cloned()
        .context("a list")?;
    assert!(!list.is_empty());
    for r in &list {
        let path = format!("/api/restarts/{}", r["id"]);
        let detail = get_text(app, &path).await?;
        assert_hidden(key, &path, &detail);
        assert!(detail.contains("Bearer redacted:"), "{path}: {detail}");
    }
    for path in [
        "/api/audit",
        "/metrics",
        "/api/bench/runs",
        "/api/export/bench.json",
    ] {
        assert_hidden(key, path, &get_text(app, path).await?);
    }
    let logged = std::fs::read_to_string(log)?;
    assert!(logged.contains("benchmark repeat"), "{logged}");
    assert_hidden(key, "drainwatch's log", &logged);
    Ok(())
}

#[tokio::test]
async fn the_key_from_a_file_passes_the_servers_auth_and_is_never_shown() -> anyhow::Result<()> {
    let _shared = crate::MEASURING.read().await;
    let host = SimHost::new(100);
    let file = host.scratch().join("api.key");
    std::fs::write(&file, format!("{FILE_KEY}\n"))?;
    let lines = format!("api_key_file = \"{}\"", file.display());
    let (app, log) = spawn(&host, FILE_KEY, &lines)?;
    works_and_hides(&app, FILE_KEY, &log).await
}

#[tokio::test]
async fn the_key_from_an_environment_variable_passes_the_servers_auth_and_is_never_shown()
-> anyhow::Result<()> {
    let _shared = crate::MEASURING.read().await;
    let host = SimHost::new(100);
    // As with vLLM's VLLM_API_KEY: the server and drainwatch read one variable.
    let lines = format!("api_key_env = \"{SERVER_KEY_ENV}\"");
    let (app, log) = spawn(&host, ENV_KEY, &lines)?;
    works_and_hides(&app, ENV_KEY, &log).await
}

#[tokio::test]
async fn without_the_key_the_start_fails_at_once_saying_the_server_refused() -> anyhow::Result<()> {
    let _shared = crate::MEASURING.read().await;
    let host = SimHost::new(100);
    let (app, _log) = spawn(&host, FILE_KEY, "")?;
    let g = app.server().await?.generation;
    let started = Instant::now();
    let (code, body) = app
        .post(
            "/api/start",
            &json!({"generation": g, "flags": {}, "confirm": "sim"}),
        )
        .await?;
    assert_eq!(code, 202, "{body}");
    let id = body["id"].as_i64().context("an id")?;
    let d = app.finished_restart(id, T).await?;
    // The warm-up timeout is 20 s: this is the refusal, not the timeout.
    assert!(started.elapsed() < Duration::from_secs(15), "{d}");
    let failure = &d["summary"]["failure"];
    assert_eq!(d["summary"]["outcome"], "failed", "{d}");
    assert_eq!(failure["kind"], "launch_failed", "{d}");
    assert_eq!(failure["cause"], "refused", "{d}");
    assert_eq!(failure["status"], 401, "{d}");
    let said = tests::managed::notes(&d);
    assert!(
        said.contains("refused") && said.contains("401") && said.contains("api_key_file"),
        "{said}"
    );
    app.wait_phase(Phase::Failed, T).await?;
    app.wait_for_state("the refused server stopped", T, |st| {
        st.server.as_ref().is_some_and(|s| s.root.is_none())
    })
    .await?;
    Ok(())
}

#[tokio::test]
async fn a_key_written_into_the_config_or_a_missing_key_file_stops_drainwatch_with_exit_2()
-> anyhow::Result<()> {
    let host = SimHost::new(100);
    let spec = ServerSpec::default();
    let missing = host.scratch().join("no-such.key");
    let cases = [
        (
            format!("api_key = \"{FILE_KEY}\""),
            "server.api_key".to_owned(),
        ),
        (
            format!("api_key_file = \"{}\"", missing.display()),
            format!("server.api_key_file ({})", missing.display()),
        ),
    ];
    for (lines, needle) in cases {
        let cfg = host.scratch().join("bad.toml");
        std::fs::write(&cfg, config(&spec, &lines))?;
        let out = host.drainwatch_refusing(&cfg)?;
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(err.contains(&needle), "{needle}: {err}");
        assert_hidden(FILE_KEY, "the error", &err);
    }
    Ok(())
}
