//! The engine's life under drainwatch: started and ready by a real
//! completion; its answers checked; restarted with a changed flag; a flag it
//! cannot honour, failing in its own words; drainwatch SIGKILLed mid-restart.

use std::time::Duration;

use serde_json::json;
use shared::restart::Phase;
use tests::SimHost;
use tests::engine::{self, ONE_AT_A_TIME, READY};

use crate::{BENCH, settings};

/// `/proc/<pid>/cmdline`, its arguments.
fn cmdline(pid: u32) -> Vec<String> {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| {
            b.split(|c| *c == 0)
                .filter(|a| !a.is_empty())
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// The value after `flag` in `args`.
fn arg<'a>(args: &'a [String], flag: &str) -> Option<&'a str> {
    let i = args.iter().position(|a| a == flag)?;
    args.get(i + 1).map(String::as_str)
}

#[tokio::test]
async fn the_engine_starts_ready_by_a_real_completion_and_its_answers_are_checked()
-> anyhow::Result<()> {
    let _one = ONE_AT_A_TIME.lock().await;
    let host = SimHost::new(100);
    let app = engine::spawn(&host, 4, &[])?;
    app.start_engine().await?;

    // Ready by a real completion; the start's record says how long it took.
    let list = app.get_json("/api/restarts").await?;
    assert_eq!(list[0]["kind"], "start", "{list}");
    assert_eq!(list[0]["outcome"], "succeeded", "{list}");
    let ready_ms = list[0]["durations"]["warmup_ms"].as_u64().unwrap_or(0);
    assert!(ready_ms > 0, "no time to ready recorded: {list}");
    let d = app
        .get_json(&format!("/api/restarts/{}", list[0]["id"]))
        .await?;
    let phases: Vec<&str> = d["transitions"]
        .as_array()
        .map(|t| t.iter().filter_map(|x| x["phase"].as_str()).collect())
        .unwrap_or_default();
    assert!(phases.contains(&"warming_up"), "{phases:?}");
    assert_eq!(phases.last(), Some(&"ready"), "{phases:?}");

    // It says what it is (asked once it answers), and the page can say it is real.
    let s = app
        .wait_for_state("the engine's identity", Duration::from_secs(10), |st| {
            st.server.as_ref().is_some_and(|v| v.engine.is_some())
        })
        .await?
        .server
        .expect("server");
    let who = s.engine.clone().expect("the engine's identity");
    assert_eq!(who.engine, "llama.cpp");
    assert!(!who.simulated, "{who:?}");
    assert!(
        who.version
            .as_deref()
            .is_some_and(|v| v.starts_with("b11434")),
        "{who:?}"
    );
    // The log tail is llama.cpp's own.
    assert!(
        s.log_tail.iter().any(|l| l.contains("llama_model_loader")
            || l.contains("model loaded")
            || l.contains("server is listening")),
        "{:?}",
        s.log_tail
    );

    // The correctness check passes on a prompt the model answers right…
    let mut right = settings(2, 2, 32, 8);
    right["correctness"] = json!({
        "prompt": "Question: What is the capital of France?\nAnswer:",
        "expect": "Paris",
    });
    let run = app
        .finished_bench(app.begin_bench(right).await?, BENCH)
        .await?;
    assert_eq!(run["status"], "succeeded", "{run:#}");
    assert_eq!(run["correctness"]["passed"], true, "{run:#}");
    let p = &run["provenance"];
    assert_eq!(p["engine"]["engine"], "llama.cpp", "{p:#}");
    assert_eq!(p["engine"]["slots"], 4, "{p:#}");
    assert!(
        p["engine"]["ctx_size"].as_u64().unwrap_or(0) >= 1024,
        "{p:#}"
    );
    assert!(
        p["engine"]["model"]
            .as_str()
            .is_some_and(|m| m.ends_with(".gguf")),
        "{p:#}"
    );
    assert_eq!(p["server_version_from"], "/props", "{p:#}");

    // …and fails the step as a wrong answer on one it answers wrongly.
    let mut wrong = settings(2, 2, 32, 8);
    wrong["correctness"] = json!({"prompt": "The capital of France is", "expect": "Paris"});
    wrong["abort_on_wrong_answer"] = json!(true);
    let run = app
        .finished_bench(app.begin_bench(wrong).await?, BENCH)
        .await?;
    assert_eq!(run["status"], "failed", "{run:#}");
    assert_eq!(run["correctness"]["passed"], false, "{run:#}");
    let answer = run["correctness"]["answer"].as_str().unwrap_or_default();
    assert!(
        answer.contains("capital of the country of France"),
        "{answer}"
    );
    assert_eq!(run["error"], drainwatch::bench::WRONG_ANSWER, "{run:#}");
    Ok(())
}

#[tokio::test]
async fn a_restart_runs_the_changed_flag_and_the_old_engine_is_gone() -> anyhow::Result<()> {
    let _one = ONE_AT_A_TIME.lock().await;
    let host = SimHost::new(100);
    let app = engine::spawn(&host, 4, &[])?;
    let before = app.start_engine().await?;
    let old = before.root.expect("root").pid;
    assert_eq!(arg(&cmdline(old), "--parallel"), Some("4"));

    let id = app.restart_engine(json!({"--parallel": "2"})).await?;
    let d = app.finished_restart(id, READY).await?;
    assert_eq!(d["summary"]["outcome"], "succeeded", "{d:#}");
    // The drain is recorded: its phases and their durations.
    let durations = &d["summary"]["durations"];
    for part in ["drain_ms", "verify_ms", "warmup_ms"] {
        assert!(durations[part].is_u64(), "{part}: {d:#}");
    }
    let phases: Vec<&str> = d["transitions"]
        .as_array()
        .map(|t| t.iter().filter_map(|x| x["phase"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(phases.first(), Some(&"draining"), "{phases:?}");

    let after = app.server().await?;
    let new = after.root.expect("root").pid;
    assert_ne!(new, old);
    assert!(!tests::alive(old), "the old engine {old} still runs");
    assert_eq!(arg(&cmdline(new), "--parallel"), Some("2"));
    // The engine itself says so.
    let props = engine::props(after.port).await?;
    assert_eq!(props["total_slots"], 2, "{props}");
    assert_eq!(after.flags.get("--parallel").map(String::as_str), Some("2"));
    Ok(())
}

#[tokio::test]
async fn a_flag_the_engine_cannot_honour_fails_in_its_own_words_and_a_good_set_recovers()
-> anyhow::Result<()> {
    let _one = ONE_AT_A_TIME.lock().await;
    let host = SimHost::new(100);
    let app = engine::spawn(&host, 2, &[])?;
    app.start_engine().await?;

    // llama.cpp refuses a quantized V cache without flash attention.
    let id = app
        .restart_engine(json!({"--cache-type-v": "q4_0", "--flash-attn": "off"}))
        .await?;
    let d = app.finished_restart(id, READY).await?;
    assert_eq!(d["summary"]["outcome"], "failed", "{d:#}");
    let f = &d["summary"]["failure"];
    assert_eq!(f["kind"], "launch_failed", "{f:#}");
    assert_eq!(f["cause"], "exited", "{f:#}");
    assert_eq!(f["code"], 1, "{f:#}");
    let said = "quantized V cache requires flash_attn to be enabled";
    assert!(f["log_tail"].to_string().contains(said), "{f:#}");
    let failure: shared::restart::Failure = serde_json::from_value(f.clone())?;
    assert!(
        failure.server_said().is_some_and(|s| s.contains(said)),
        "{:?}",
        failure.server_said()
    );
    // The status the page shows carries it too.
    let s = app.server().await?;
    assert!(
        s.failure
            .as_ref()
            .and_then(|f| f.server_said())
            .is_some_and(|l| l.contains(said)),
        "{s:#?}"
    );

    // Back to a flag set it honours: it launches and answers.
    let g = s.generation;
    let (code, body) = app
        .post(
            "/api/start",
            &json!({"generation": g, "flags": {"--cache-type-v": null, "--flash-attn": null}, "confirm": engine::NAME}),
        )
        .await?;
    assert_eq!(code, 202, "{body}");
    let s = app.wait_phase(Phase::Ready, READY).await?;
    assert!(s.failure.is_none(), "{s:#?}");
    assert!(!s.flags.contains_key("--cache-type-v"), "{:?}", s.flags);
    Ok(())
}

#[tokio::test]
async fn sigkill_of_drainwatch_mid_restart_is_resumed_with_the_real_engine() -> anyhow::Result<()> {
    let _one = ONE_AT_A_TIME.lock().await;
    let host = SimHost::new(100);
    host.require_cgroup();
    // A readiness probe of 200 tokens: the warm-up lasts seconds, so the
    // kill comes while the new engine warms up.
    let app = engine::spawn_edited(&host, 4, &[], |c| {
        c.replace(
            "prompt = \"Say OK.\", max_tokens = 4,",
            "prompt = \"Say OK.\", max_tokens = 200, ignore_eos = true,",
        )
    })?;
    let before = app.start_engine().await?;
    let old = before.root.expect("root").pid;

    // Killed while the new engine warms up, once the record of its launch
    // is stored (what a drainwatch killed sooner cannot know is issue
    // enough for another test: here the record is there).
    let id = app.restart_engine(json!({"--parallel": "2"})).await?;
    let deadline = std::time::Instant::now() + READY;
    loop {
        let d = app.get_json(&format!("/api/restarts/{id}")).await?;
        let warming = d["transitions"]
            .as_array()
            .is_some_and(|t| t.iter().any(|x| x["phase"] == "warming_up"));
        if warming {
            assert_eq!(d["summary"]["outcome"], "running", "ready too soon: {d:#}");
            break;
        }
        anyhow::ensure!(
            std::time::Instant::now() < deadline,
            "never warming up: {d:#}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    app.proc.kill_alone();
    assert!(!tests::alive(old), "the old engine outlived its drain");

    // The next drainwatch marks the cut restart interrupted, re-finds the
    // engine it had launched by its recorded identity, and goes on from there.
    let app = engine::respawn(&host, &[])?;
    let d = app.finished_restart(id, READY).await?;
    assert_eq!(d["summary"]["outcome"], "interrupted", "{d:#}");
    let s = app.wait_phase(Phase::Ready, READY).await?;
    let found = s.root.expect("root").pid;
    assert_ne!(found, old);
    assert_eq!(arg(&cmdline(found), "--parallel"), Some("2"));
    // It is drainwatch's again: a restart replaces it cleanly.
    let id = app.restart_engine(json!({"--parallel": "3"})).await?;
    let d = app.finished_restart(id, READY).await?;
    assert_eq!(d["summary"]["outcome"], "succeeded", "{d:#}");
    assert!(
        !tests::alive(found),
        "the engine launched before the kill still runs"
    );
    let props = engine::props(s.port).await?;
    assert_eq!(props["total_slots"], 3, "{props}");
    Ok(())
}

/// How long the engine takes to stop once asked, for the restart overhead
/// measured in docs/PERFORMANCE.md: not a test of speed, a check that the
/// engine stops on SIGTERM by itself (no SIGKILL needed).
#[tokio::test]
async fn the_engine_stops_on_sigterm_without_a_kill() -> anyhow::Result<()> {
    let _one = ONE_AT_A_TIME.lock().await;
    let host = SimHost::new(100);
    let app = engine::spawn(&host, 2, &[])?;
    app.start_engine().await?;
    let g = app.server().await?.generation;
    let (code, body) = app
        .post(
            "/api/stop",
            &json!({"generation": g, "confirm": engine::NAME}),
        )
        .await?;
    assert_eq!(code, 202, "{body}");
    let id = body["id"].as_i64().expect("id");
    let d = app.finished_restart(id, Duration::from_secs(60)).await?;
    assert_eq!(d["summary"]["outcome"], "succeeded", "{d:#}");
    assert!(
        d["summary"]["durations"]["kill_ms"].is_null(),
        "SIGKILL was needed: {d:#}"
    );
    let sent = host.signals_sent();
    assert!(
        sent.iter().any(|s| s.sig == libc::SIGTERM),
        "no SIGTERM traced: {sent:?}"
    );
    assert!(
        !sent.iter().any(|s| s.sig == libc::SIGKILL),
        "a SIGKILL was sent: {sent:?}"
    );
    Ok(())
}
