//! Steering a campaign: pause and resume, cancel, a person's restart and
//! benchmark refused while a step runs, a foreign holder of GPU memory that
//! pauses it and asks a person, webhooks; plans refused whole; a viewer who
//! cannot steer.

use std::time::Duration;

use serde_json::{Value, json};
use tests::managed::spawn_managed;
use tests::{SimHost, auth_file, bearer_client, spawn_foreign};

use crate::{BENCH, Listener, MEASURING, post_plan, start, states, wait_campaign, wait_over};

/// Three steps of the indexer and EP, quick.
fn three() -> String {
    format!(
        r#"name = "three"
reuse = false
{BENCH}
[[sets]]
label = "baseline"
[[sets]]
flags = {{ SGLANG_OPT_USE_TILELANG_INDEXER = "1" }}
[[sets]]
flags = {{ "--ep-size" = 2 }}
"#
    )
}

#[tokio::test]
async fn a_persons_restart_waits_its_turn_and_pause_holds_at_the_steps_end() -> anyhow::Result<()> {
    let _load = MEASURING.read().await;
    let (_host, app) = crate::ready("").await?;
    let id = start(&app, &three()).await?;
    let c = wait_campaign(&app, id, "step 1 running", Duration::from_secs(30), |c| {
        matches!(
            c["steps"][0]["state"].as_str(),
            Some("restarting" | "benchmarking")
        )
    })
    .await?;
    assert_eq!(c["info"]["state"], "running");

    // A person's restart and benchmark are refused, naming what runs.
    let s = app.server().await?;
    let (code, body) = app
        .post(
            "/api/restart",
            &json!({"generation": s.generation, "flags": {}, "confirm": "sim"}),
        )
        .await?;
    assert_eq!(code, 409, "{body}");
    let why = body["error"].as_str().unwrap_or_default();
    assert!(
        why.contains("campaign “three”") && why.contains(&format!("#{id}")),
        "{why}"
    );
    let (code, body) = app.post("/api/bench", &json!({})).await?;
    assert_eq!(code, 409, "{body}");
    let (code, body) = app.post("/api/bench/cancel", &json!({})).await?;
    assert_eq!(
        code, 409,
        "a person cannot cancel the campaign's benchmark: {body}"
    );
    // One campaign at a time.
    let (code, body) = post_plan(&app, "/api/campaigns", &three()).await?;
    assert_eq!(code, 409, "{body}");

    // Pause: the running step finishes, then nothing more runs.
    let (code, body) = app
        .post(&format!("/api/campaigns/{id}/pause"), &json!({}))
        .await?;
    assert_eq!(code, 202, "{body}");
    assert_eq!(body["state"], "pausing");
    let paused = wait_campaign(&app, id, "the pause", Duration::from_secs(60), |c| {
        c["info"]["state"] == "paused"
    })
    .await?;
    assert_eq!(
        states(&paused),
        ["done", "pending", "pending"],
        "{paused:#}"
    );
    tokio::time::sleep(Duration::from_millis(600)).await;
    let still = app.get_json(&format!("/api/campaigns/{id}")).await?;
    assert_eq!(states(&still), ["done", "pending", "pending"]);
    // Paused, the server is the team's again: a person's benchmark runs.
    let run = app.bench(crate::bench_json()).await?;
    assert_eq!(run["status"], "succeeded", "{run}");

    let (code, body) = app
        .post(&format!("/api/campaigns/{id}/resume"), &json!({}))
        .await?;
    assert_eq!(code, 202, "{body}");
    let c = wait_over(&app, id, Duration::from_secs(120)).await?;
    assert_eq!(states(&c), ["done", "done", "done"], "{c:#}");
    // Each was audited, with who asked.
    let audit = app.get_json("/api/audit?kind=action&limit=100").await?;
    let actions: Vec<&str> = audit
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|a| a["action"].as_str())
        .collect();
    for want in ["campaign start", "campaign pause", "campaign resume"] {
        assert!(actions.contains(&want), "{want} not audited: {actions:?}");
    }
    Ok(())
}

#[tokio::test]
async fn cancel_mid_benchmark_stops_it_at_once_and_skips_the_rest() -> anyhow::Result<()> {
    let _load = MEASURING.read().await;
    let (_host, app) = crate::ready("").await?;
    let id = start(&app, &three()).await?;
    wait_campaign(
        &app,
        id,
        "step 1's benchmark",
        Duration::from_secs(30),
        |c| c["steps"][0]["state"] == "benchmarking",
    )
    .await?;
    let (code, body) = app
        .post(&format!("/api/campaigns/{id}/cancel"), &json!({}))
        .await?;
    assert_eq!(code, 202, "{body}");
    let c = wait_over(&app, id, Duration::from_secs(20)).await?;
    assert_eq!(c["info"]["state"], "cancelled");
    assert_eq!(states(&c), ["skipped", "skipped", "skipped"], "{c:#}");
    let run = app
        .get_json(&format!(
            "/api/bench/runs/{}",
            c["steps"][0]["run_id"].as_i64().expect("a run")
        ))
        .await?;
    assert_eq!(run["status"], "cancelled");
    // Nothing was stopped: the server still serves, and people may restart it.
    let s = app.server().await?;
    assert_eq!(s.phase, shared::restart::Phase::Ready);
    assert!(s.held_by.is_none(), "{:?}", s.held_by);
    Ok(())
}

#[tokio::test]
async fn a_foreign_holder_pauses_the_campaign_and_the_webhooks_hear_of_it() -> anyhow::Result<()> {
    let _load = MEASURING.read().await;
    let hook = Listener::start().await?;
    let slack = Listener::start().await?;
    let hooks = format!(
        "\n[[webhooks]]\nname = \"team\"\nurl = \"{}\"\nformat = \"json\"\n\n[[webhooks]]\nname = \"slack\"\nurl = \"{}\"\nformat = \"slack\"\n",
        hook.url, slack.url
    );
    let (host, app) = crate::ready(&hooks).await?;

    // Testing the hooks from the API: both answer, and neither URL is shown.
    let (code, body) = app.post("/api/webhooks/test", &json!({})).await?;
    assert_eq!(code, 200, "{body}");
    assert_eq!(body.as_array().map(Vec::len), Some(2), "{body}");
    assert!(
        body.as_array()
            .into_iter()
            .flatten()
            .all(|d| d["ok"] == true),
        "{body}"
    );
    assert!(!body.to_string().contains("127.0.0.1"), "{body}");
    hook.wait_for("test", Duration::from_secs(5), |b| b["event"] == "test")
        .await?;
    slack
        .wait_for("test", Duration::from_secs(5), |b| b["text"].is_string())
        .await?;

    // A process that is not the server's holds memory on GPU 1.
    let foreign = spawn_foreign(&host, 1, 1.0)?;
    let id = start(&app, &three()).await?;
    let c = wait_campaign(&app, id, "the pause", Duration::from_secs(60), |c| {
        c["info"]["state"] == "paused"
    })
    .await?;
    let reason = c["info"]["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("foreign") && reason.contains(&foreign.pid().to_string()),
        "{reason}"
    );
    assert_eq!(states(&c)[0], "pending", "the step runs again on resume");
    assert_eq!(c["steps"][0]["attempts"], 0, "not the step's failure");
    let paused = hook
        .wait_for("paused", Duration::from_secs(10), |b| {
            b["event"] == "paused"
        })
        .await?;
    assert_eq!(paused["campaign"]["id"], id);

    // A person resolves it, sees the GPU free, and resumes.
    drop(foreign);
    app.wait_for_state("the foreign process gone", Duration::from_secs(10), |s| {
        s.latest.as_ref().is_some_and(|l| {
            l.processes
                .iter()
                .all(|p| p.role != shared::ProcessRole::Foreign)
        })
    })
    .await?;
    let (code, body) = app
        .post(&format!("/api/campaigns/{id}/resume"), &json!({}))
        .await?;
    assert_eq!(code, 202, "{body}");
    let c = wait_over(&app, id, Duration::from_secs(120)).await?;
    assert_eq!(states(&c), ["done", "done", "done"], "{c:#}");
    let done = hook
        .wait_for("finished", Duration::from_secs(10), |b| {
            b["event"] == "finished"
        })
        .await?;
    assert_eq!(done["campaign"]["state"], "done");
    assert_eq!(done["campaign"]["done"], 3);
    assert!(done["best"]["metric"].as_f64().is_some(), "{done:#}");
    let text = slack
        .wait_for("finished", Duration::from_secs(10), |b| {
            b["text"].as_str().is_some_and(|t| t.contains("done"))
        })
        .await?;
    let text = text["text"].as_str().unwrap_or_default();
    assert!(
        text.contains("“three”") && text.contains("simulated host") && text.contains("Best: step"),
        "{text}"
    );
    Ok(())
}

#[tokio::test]
async fn plans_are_refused_whole_and_viewers_cannot_steer() -> anyhow::Result<()> {
    let host = SimHost::new(100);
    let (auth, op, view) = auth_file(host.scratch(), "");
    let auth = auth.display().to_string();
    let app = spawn_managed(&host, &crate::spec(""), &["--auth", &auth])?;
    let app = app.with_token(&op);
    let bad = [
        (
            "name = \"x\"\n[grid]\n\"--tp\" = [2, 4]\n\"--nccl-magic\" = [1]\n",
            "unknown flag `--nccl-magic`",
        ),
        (
            "name = \"x\"\n[grid]\n\"--ep-size\" = [1, 16]\n",
            "`--ep-size` must be an integer from 1 to 8, got `16`",
        ),
        (
            "name = \"x\"\n[[sets]]\nflags = { SIMSERVER_MODE = \"explode\" }\n",
            "`SIMSERVER_MODE` must be one of",
        ),
        ("name = \"x\"\n[bench]\nrepeats = 1\n[[sets]]\n", "repeats"),
        ("this is not toml [", "plan:"),
    ];
    for (plan, says) in bad {
        let (code, body) = post_plan(&app, "/api/campaigns", plan).await?;
        assert_eq!(code, 400, "{plan}: {body}");
        let e = body["error"].as_str().unwrap_or_default();
        assert!(e.contains(says), "{plan}: {e}");
    }
    // JSON says the same.
    let r = app
        .http
        .post(app.url("/api/campaigns"))
        .json(&json!({"name": "x", "grid": {"--tp": [9]}}))
        .send()
        .await?;
    assert_eq!(r.status().as_u16(), 400);
    assert!(
        r.text()
            .await?
            .contains("`--tp` must be an integer from 1 to 4, got `9`")
    );
    assert_eq!(
        app.get_json("/api/campaigns").await?,
        json!([]),
        "nothing was recorded"
    );

    // A dry run lays the plan out and records nothing.
    let (code, body) = post_plan(&app, "/api/campaigns?dry_run=true", &three()).await?;
    assert_eq!(code, 200, "{body}");
    assert_eq!(body["steps"].as_array().map(Vec::len), Some(3));
    assert_eq!(app.get_json("/api/campaigns").await?, json!([]));

    // A campaign, cancelled at once: its view offers an operator "restart
    // with this set", a viewer not, and no button that changes anything.
    let (code, body) = post_plan(&app, "/api/campaigns", &three()).await?;
    assert_eq!(code, 202, "{body}");
    let id = body["id"].as_i64().expect("id");
    app.post(&format!("/api/campaigns/{id}/cancel"), &json!({}))
        .await?;
    let ask = format!("/api/campaigns/{id}/view?selected=0");
    let side = |v: Value| v["side"].as_str().unwrap_or_default().to_owned();
    assert!(side(app.get_json(&ask).await?).contains("campaign-point-restart"));
    let viewer = bearer_client(&view);
    let seen: Value = viewer.get(app.url(&ask)).send().await?.json().await?;
    assert!(
        side(seen.clone()).contains(r#"data-testid="campaign-point""#),
        "{seen:#}"
    );
    assert!(!side(seen.clone()).contains("restart-with"), "{seen:#}");

    // A viewer reads, and may not start, pause, resume or cancel.
    let r = viewer
        .post(app.url("/api/campaigns"))
        .header("content-type", "application/toml")
        .body(three())
        .send()
        .await?;
    assert_eq!(r.status().as_u16(), 403);
    for verb in ["pause", "resume", "cancel"] {
        let r = viewer
            .post(app.url(&format!("/api/campaigns/1/{verb}")))
            .json(&json!({}))
            .send()
            .await?;
        assert_eq!(r.status().as_u16(), 403, "{verb}");
    }
    let r = viewer.post(app.url("/api/webhooks/test")).send().await?;
    assert_eq!(r.status().as_u16(), 403);
    assert_eq!(
        viewer
            .get(app.url("/api/campaigns"))
            .send()
            .await?
            .status()
            .as_u16(),
        200
    );
    Ok(())
}

/// A baseline, a set that runs out of memory at launch (EP 8 with
/// speculative decoding), another set.
fn with_oom(policy: &str) -> String {
    format!(
        r#"name = "{policy}"
reuse = false
on_failure = "{policy}"
{BENCH}
[[sets]]
[[sets]]
flags = {{ "--ep-size" = 8, "--speculative-algorithm" = "EAGLE" }}
[[sets]]
flags = {{ "--ep-size" = 2 }}
"#
    )
}

#[tokio::test]
async fn retry_tries_a_failed_step_once_more_and_stop_ends_the_campaign() -> anyhow::Result<()> {
    let _load = MEASURING.read().await;
    let (_host, app) = crate::ready("").await?;

    let id = start(&app, &with_oom("retry")).await?;
    let c = wait_over(&app, id, Duration::from_secs(120)).await?;
    assert_eq!(c["info"]["state"], "done", "{c:#}");
    assert_eq!(states(&c), ["done", "failed", "done"], "{c:#}");
    assert_eq!(
        c["steps"][1]["attempts"], 2,
        "tried once more: {:#}",
        c["steps"][1]
    );
    assert_eq!(c["steps"][1]["failure"]["kind"], "oom");

    let id = start(&app, &with_oom("stop")).await?;
    let c = wait_over(&app, id, Duration::from_secs(120)).await?;
    assert_eq!(c["info"]["state"], "stopped", "{c:#}");
    assert_eq!(states(&c), ["done", "failed", "skipped"], "{c:#}");
    assert_eq!(c["steps"][1]["attempts"], 1);
    let reason = c["info"]["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("step 2 failed") && reason.contains("out of GPU memory"),
        "{reason}"
    );
    // The server is left as the failed step left it: a person may start it.
    let s = app.server().await?;
    assert!(s.held_by.is_none());
    Ok(())
}

/// What the socket says a campaign came to (paused, done) is what the API
/// answers the moment after: a client that follows a campaign to its end
/// and then reads it (as `drainwatch campaign start` does, choosing its exit
/// code from what it reads) never reads the state before.
#[tokio::test]
async fn a_pushed_pause_or_end_is_already_what_the_api_answers() -> anyhow::Result<()> {
    let _load = MEASURING.read().await;
    let (_host, app) = crate::ready("").await?;
    let mut ws = tests::ws::WsClient::connect(&app.addr).await?;
    let plan = format!(
        "name = \"settled\"\nreuse = false\n{BENCH}\n[[sets]]\n[[sets]]\nflags = {{ \"--ep-size\" = 2 }}\n"
    );
    let id = start(&app, &plan).await?;
    let (code, body) = app
        .post(&format!("/api/campaigns/{id}/pause"), &json!({}))
        .await?;
    assert_eq!(code, 202, "{body}");
    let mut seen = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    loop {
        anyhow::ensure!(
            std::time::Instant::now() < deadline,
            "no end seen: {seen:?}"
        );
        let shared::ServerMsg::Campaign(info) = ws.next_msg(Duration::from_secs(60)).await? else {
            continue;
        };
        if info.id != id || !matches!(info.state.label(), "paused" | "done") {
            continue;
        }
        // At once, as the CLI does: no wait for a batch to commit.
        let read = app.get_json(&format!("/api/campaigns/{id}")).await?;
        assert_eq!(
            read["info"]["state"],
            info.state.label(),
            "pushed {:?}, read {read:#}",
            info.state
        );
        seen.push(info.state.label());
        match info.state.label() {
            "paused" => {
                let (code, body) = app
                    .post(&format!("/api/campaigns/{id}/resume"), &json!({}))
                    .await?;
                assert_eq!(code, 202, "{body}");
            }
            _ => break,
        }
    }
    assert_eq!(seen, ["paused", "done"]);
    Ok(())
}
