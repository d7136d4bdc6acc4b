//! Secrets in command lines, flags, environments and logs are never shown: a
//! managed server launched with `--api-key` in its args and `HF_TOKEN` in its
//! environment (both also allow-listed flags), a foreign GPU process with
//! `--api-key` and `--license` (a name from the config's `redact` list) in its
//! argv, and a flag-set label that quotes the key. Every view — `/api/state`,
//! the first `/ws` messages, `/metrics`, the exports, the restart history and
//! `drainwatch status` — shows their redacted forms and none of the raw values.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use futures_util::StreamExt;
use serde_json::{Value, json};
use shared::restart::Phase;
use simhost::HOST_DIR_ENV;
use tests::managed::ServerSpec;
use tests::ws::WsClient;
use tests::{Proc, SimHost, TestApp, bin, spawn_app};
use tokio_tungstenite::tungstenite::Message;

const T: Duration = Duration::from_secs(30);

/// In the server's base args, after `--` (the simulated server logs it).
const API_KEY: &str = "sk-dwtest-first-4f1c9e";
/// What a restart sets `--api-key` to.
const API_KEY2: &str = "sk-dwtest-second-8b27d0";
const HF_TOKEN: &str = "hf_dwtestTOKENa91b3c";
/// In the foreign process's argv: redacted by name only.
const FOREIGN_KEY: &str = "sk-dwtest-foreign-c3e8a1";
/// Behind `--license`, secret only because the config lists it.
const LICENSE: &str = "LIC-dwtest-77e1f0";
/// A key the allow-list does not have: refused, and never quoted back.
const WRONG_KEY: &str = "sk-dwtest-wrong-0d9e4b";
const RAW: [&str; 6] = [API_KEY, API_KEY2, HF_TOKEN, FOREIGN_KEY, LICENSE, WRONG_KEY];

/// The default spec with the secrets: `--api-key` in the args, `HF_TOKEN` in
/// the environment, both allow-listed, and `--license` on the `redact` list.
fn spec() -> ServerSpec {
    ServerSpec {
        env: vec![("HF_TOKEN", HF_TOKEN)],
        extra: format!(
            r#"
[[flags]]
name = "--api-key"
kind = "arg"
type = "enum"
values = ["{API_KEY}", "{API_KEY2}"]

[[flags]]
name = "HF_TOKEN"
kind = "env"
type = "enum"
values = ["{HF_TOKEN}"]
"#
        ),
        ..ServerSpec::default()
    }
}

fn config(spec: &ServerSpec) -> String {
    let tail = format!(r#""sglang.launch_server", "--port", "{}"]"#, spec.port);
    let toml = spec.toml();
    assert!(toml.contains(&tail), "the generated config changed: {toml}");
    toml.replace(
        &tail,
        &format!(
            r#""sglang.launch_server", "--port", "{}", "--api-key", "{API_KEY}"]"#,
            spec.port
        ),
    )
    .replace(
        "gpus = [0, 1, 2, 3]\n",
        "gpus = [0, 1, 2, 3]\nredact = [\"--license\"]\n",
    )
}

fn data_dir(host: &SimHost) -> PathBuf {
    host.scratch().join("data")
}

/// drainwatch managing `spec`'s server, its data in the host's scratch folder.
fn spawn(host: &SimHost, spec: &ServerSpec) -> anyhow::Result<TestApp> {
    let cfg = host.scratch().join("server.toml");
    std::fs::write(&cfg, config(spec))?;
    let (cfg, data) = (
        cfg.display().to_string(),
        data_dir(host).display().to_string(),
    );
    let app = spawn_app(
        host,
        &[
            "--config",
            &cfg,
            "--data-dir",
            &data,
            "--sample-interval-ms",
            "50",
        ],
    )?;
    host.watch_signals_of(app.proc.pid());
    Ok(app)
}

/// A foreign process on GPU 6 (not the server's) with secrets in its argv.
fn foreign(host: &SimHost) -> anyhow::Result<Proc> {
    Proc::spawn(
        Command::new(bin("simserver"))
            .args(["foreign", "--gpu", "6", "--mem-gib", "2", "--"])
            .args(["python3", "-m", "sglang.launch_server", "--api-key"])
            .args([FOREIGN_KEY, "--license", LICENSE])
            .env(HOST_DIR_ENV, host.path()),
    )
}

/// Fails naming `what` and the raw secret it shows, with some context.
fn assert_hidden(what: &str, text: &str) {
    for raw in RAW {
        if let Some(at) = text.find(raw) {
            let mut from = at.saturating_sub(120);
            while !text.is_char_boundary(from) {
                from -= 1;
            }
            let mut to = (at + raw.len() + 120).min(text.len());
            while !text.is_char_boundary(to) {
                to += 1;
            }
            panic!("{what} shows the secret {raw}: …{}…", &text[from..to]);
        }
    }
}

async fn get_text(app: &TestApp, path: &str) -> anyhow::Result<String> {
    let r = app.http.get(app.url(path)).send().await?;
    anyhow::ensure!(r.status().is_success(), "GET {path}: {}", r.status());
    Ok(r.text().await?)
}

/// The raw text of the `/ws` messages up to and including the first snapshot.
async fn ws_until_snapshot(app: &TestApp) -> anyhow::Result<String> {
    let mut ws = WsClient::connect(&app.addr).await?;
    let mut all = String::new();
    loop {
        let frame = tokio::time::timeout(T, ws.socket.next())
            .await?
            .ok_or_else(|| anyhow::anyhow!("socket closed"))??;
        if let Message::Text(t) = frame {
            all.push_str(t.as_str());
            if t.as_str().starts_with(r#"{"type":"snapshot""#) {
                return Ok(all);
            }
        }
    }
}

/// `drainwatch status` against `app` (text, then `--json`).
async fn cli_status(app: &TestApp) -> anyhow::Result<(String, String)> {
    let run = |json: bool| {
        let mut cmd = tokio::process::Command::new(bin("drainwatch"));
        cmd.arg("status").arg("--url").arg(app.url(""));
        if json {
            cmd.arg("--json");
        }
        cmd.env_remove("DRAINWATCH_TOKEN")
            .env_remove("DRAINWATCH_URL")
            .stdin(Stdio::null())
            .kill_on_drop(true);
        async move {
            let out = tokio::time::timeout(T, cmd.output()).await??;
            anyhow::ensure!(out.status.success(), "drainwatch status failed: {out:?}");
            anyhow::Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        }
    };
    Ok((run(false).await?, run(true).await?))
}

/// The command line of process `pid`, read from `/proc` by the test itself.
fn raw_cmdline(pid: u32) -> Vec<String> {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .unwrap_or_default()
        .split(|b| *b == 0)
        .filter(|a| !a.is_empty())
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect()
}

fn redacted(v: &str) -> bool {
    v.len() == 17 && v.starts_with("redacted:")
}

#[tokio::test]
async fn secrets_are_shown_nowhere_but_in_their_redacted_form() -> anyhow::Result<()> {
    // Arrange: the server started, a foreign process with secrets on GPU 6.
    let host = SimHost::new(100);
    let spec = spec();
    let stranger = foreign(&host)?;
    let app = spawn(&host, &spec)?;
    let first = app.start_server().await?;
    let r1 = first.flags["--api-key"].clone();
    assert!(redacted(&r1), "{:?}", first.flags);
    assert!(redacted(&first.flags["HF_TOKEN"]), "{:?}", first.flags);
    assert_eq!(first.default_flags["--api-key"], r1);

    // Act: restart onto the second key, label the new set with it, benchmark.
    let id = app.restart(json!({"--api-key": API_KEY2})).await?;
    let d = app.finished_restart(id, T).await?;
    assert_eq!(d["summary"]["outcome"], "succeeded", "{d}");
    let s = app.wait_phase(Phase::Ready, T).await?;
    let r2 = s.flags["--api-key"].clone();
    assert!(redacted(&r2) && r2 != r1, "two keys, two forms: {r1} {r2}");
    // The server was relaunched with the raw key: redaction is for views only.
    let root = s.root.expect("a root").pid;
    assert!(raw_cmdline(root).iter().any(|a| a == API_KEY2));
    let set = s.flagset.clone().expect("a flag set");
    let code = app
        .http
        .patch(app.url(&format!("/api/flagsets/{set}")))
        .json(&json!({"label": format!("key {API_KEY2}")}))
        .send()
        .await?
        .status();
    assert_eq!(code.as_u16(), 204);
    let run = app
        .bench(json!({"concurrency": [1], "num_prompts": 4, "input_len": 8, "output_len": 8, "warmup": 1, "repeats": 3}))
        .await?;
    assert_eq!(run["status"], "succeeded", "{run}");
    app.wait_for_state("the foreign process", T, |st| {
        st.latest
            .as_ref()
            .is_some_and(|l| l.processes.iter().any(|p| p.pid == stranger.pid()))
    })
    .await?;

    // Assert: the live view.
    let state = get_text(&app, "/api/state").await?;
    assert_hidden("/api/state", &state);
    assert!(
        state.contains(&r2),
        "/api/state lacks the flag's redacted form"
    );
    let snap: shared::Snapshot = serde_json::from_str(&state)?;
    let latest = snap.latest.expect("a sample");
    let p = latest
        .processes
        .iter()
        .find(|p| p.pid == stranger.pid())
        .expect("the foreign process is listed");
    let after = |flag: &str| {
        let i = p.cmdline.iter().position(|a| a == flag).expect("the flag");
        p.cmdline[i + 1].clone()
    };
    assert!(redacted(&after("--api-key")), "{:?}", p.cmdline);
    assert!(redacted(&after("--license")), "{:?}", p.cmdline);
    let server = snap.server.expect("a server");
    let tail = server.log_tail.join("\n");
    assert!(tail.contains(&format!("api_key='{r2}'")), "{tail}");
    assert!(tail.contains(&format!("--api-key {r2}")), "{tail}");
    assert!(tail.contains(&format!("Bearer {r2}")), "{tail}");
    assert!(server.allowed.iter().any(|f| f.name == "--api-key"
        && matches!(&f.ty, shared::flags::FlagType::Enum { values } if values.contains(&r1) && values.contains(&r2))));

    let ws = ws_until_snapshot(&app).await?;
    assert_hidden("the first /ws messages", &ws);
    assert!(ws.contains(&r2), "/ws lacks the flag's redacted form");

    let metrics = get_text(&app, "/metrics").await?;
    assert_hidden("/metrics", &metrics);
    assert!(metrics.contains(&format!("key {r2}")), "{metrics}");

    // The ledger and its exports.
    let sets = get_text(&app, "/api/flagsets").await?;
    assert_hidden("/api/flagsets", &sets);
    assert!(sets.contains(&r1) && sets.contains(&r2), "{sets}");
    let ids: Vec<String> = serde_json::from_str::<Vec<Value>>(&sets)?
        .iter()
        .filter_map(|r| r["set"]["id"].as_str().map(str::to_owned))
        .collect();
    let view = get_text(
        &app,
        &format!("/api/flagsets/view?compare={}", ids.join(",")),
    )
    .await?;
    assert_hidden("/api/flagsets/view", &view);
    assert!(view.contains("compared"), "{view}");
    let exported = get_text(&app, "/api/export/bench.json").await?;
    assert_hidden("/api/export/bench.json", &exported);
    assert!(
        exported.contains(&format!("\"flagset\":\"{set}\"")),
        "{exported}"
    );
    let csv = get_text(&app, "/api/export/bench.csv").await?;
    assert_hidden("/api/export/bench.csv", &csv);
    assert!(csv.contains(&format!("key {r2}")), "{csv}");

    // The history: the list and every record, log tails included.
    let list = get_text(&app, "/api/restarts").await?;
    assert_hidden("/api/restarts", &list);
    let records: Vec<Value> = serde_json::from_str(&list)?;
    assert_eq!(records.len(), 2, "{list}");
    for r in &records {
        let path = format!("/api/restarts/{}", r["id"]);
        let detail = get_text(&app, &path).await?;
        assert_hidden(&path, &detail);
        assert!(detail.contains("api_key='redacted:"), "{path}: {detail}");
    }
    let detail = app.get_json(&format!("/api/restarts/{id}")).await?;
    assert_eq!(detail["summary"]["from_flags"]["--api-key"], r1.as_str());
    assert_eq!(detail["summary"]["to_flags"]["--api-key"], r2.as_str());

    // A refused key is not quoted back, nor in the audit log.
    let g = app.server().await?.generation;
    let (code, body) = app
        .post(
            "/api/restart",
            &json!({"generation": g, "flags": {"--api-key": WRONG_KEY}, "confirm": "sim"}),
        )
        .await?;
    assert_eq!(code, 400, "{body}");
    assert_hidden("a refused restart", &body.to_string());
    let audit = get_text(&app, "/api/audit").await?;
    assert_hidden("/api/audit", &audit);
    assert!(audit.contains("redacted:"), "{audit}");

    // The CLI reads the API: it shows what the API shows.
    let (text, json) = cli_status(&app).await?;
    assert_hidden("drainwatch status", &text);
    assert_hidden("drainwatch status --json", &json);
    assert!(json.contains(&r2), "{json}");
    Ok(())
}

#[tokio::test]
async fn redacted_forms_outlive_a_restart_of_drainwatch_and_relaunches_get_the_raw_key()
-> anyhow::Result<()> {
    let host = SimHost::new(100);
    let spec = spec();
    let app = spawn(&host, &spec)?;
    let before = app.start_server().await?;
    let r1 = before.flags["--api-key"].clone();
    assert!(redacted(&r1), "{:?}", before.flags);
    // The key beside the database: private, 32 bytes.
    let key = data_dir(&host).join("redact.key");
    let meta = std::fs::metadata(&key)?;
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o777,
        0o600
    );
    assert_eq!(meta.len(), 32);
    app.proc.kill_alone();

    // A new drainwatch re-finds the server and shows the same forms.
    let app = spawn(&host, &spec)?;
    let s = app.wait_phase(Phase::Ready, T).await?;
    assert_eq!(s.root, before.root, "not the same server");
    assert_eq!(s.flags["--api-key"], r1, "the same key, the same form");
    assert_eq!(s.flagset, before.flagset, "the same flag set");
    // Its relaunch runs with the raw flags it recorded, not the redacted ones.
    let id = app.restart(json!({"--tp": "2"})).await?;
    let d = app.finished_restart(id, T).await?;
    assert_eq!(d["summary"]["outcome"], "succeeded", "{d}");
    let root = app.server().await?.root.expect("a root").pid;
    let argv = raw_cmdline(root);
    assert!(argv.iter().any(|a| a == API_KEY), "{argv:?}");
    assert_hidden("/api/restarts", &get_text(&app, "/api/restarts").await?);
    Ok(())
}

/// `drainwatch restart` against `app` with `args`: exit code, stdout, stderr.
async fn cli_restart(app: &TestApp, args: &[&str]) -> anyhow::Result<(i32, String, String)> {
    let mut cmd = tokio::process::Command::new(bin("drainwatch"));
    cmd.arg("restart").arg("--url").arg(app.url("")).args(args);
    cmd.env_remove("DRAINWATCH_TOKEN")
        .env_remove("DRAINWATCH_URL")
        .stdin(Stdio::null())
        .kill_on_drop(true);
    let out = tokio::time::timeout(T, cmd.output()).await??;
    Ok((
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    ))
}

/// The status shows a secret flag's allowed values redacted, so the CLI leaves
/// a secret's value to drainwatch: a raw value the allow-list has restarts
/// with it, and a refused one is quoted by neither.
#[tokio::test]
async fn the_cli_hands_a_secret_value_to_drainwatch_and_never_quotes_it() -> anyhow::Result<()> {
    let host = SimHost::new(100);
    let spec = spec();
    let app = spawn(&host, &spec)?;
    app.start_server().await?;

    let (code, out, err) =
        cli_restart(&app, &["--flag", &format!("--api-key={API_KEY2}"), "--yes"]).await?;
    assert_eq!(code, 0, "{out}\n{err}");
    assert_hidden("drainwatch restart's output", &out);
    assert_hidden("drainwatch restart's messages", &err);
    let root = app.server().await?.root.expect("a root").pid;
    assert!(raw_cmdline(root).iter().any(|a| a == API_KEY2));

    let before = app.server().await?;
    let (code, out, err) = cli_restart(
        &app,
        &["--flag", &format!("--api-key={WRONG_KEY}"), "--yes"],
    )
    .await?;
    assert_eq!(code, 2, "{out}\n{err}");
    assert!(err.contains("--api-key"), "{err}");
    assert_hidden("a refused restart's messages", &err);
    assert_hidden("a refused restart's output", &out);
    let after = app.server().await?;
    assert_eq!(after.generation, before.generation);
    Ok(())
}
