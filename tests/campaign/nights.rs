//! Campaigns left running with nobody watching: a GPU already unhealthy
//! refuses the next step's restart before anything stops (paused, the server
//! still serving); an earlier result is reused only when the running server
//! says the same version it was measured on; a cancel during a step's drain
//! stops it before the launch, recorded as cancelled; a GPU that needs a
//! person stops the campaign whatever its policy. (drainwatch killed
//! mid-step: `resume.rs`.)

use std::time::Duration;

use serde_json::json;
use shared::restart::Phase;

use crate::{BENCH, MEASURING, bench_json, spec, start, states, wait_campaign, wait_over};

#[tokio::test]
async fn an_unhealthy_gpu_pauses_the_campaign_with_the_server_still_serving() -> anyhow::Result<()>
{
    let _load = MEASURING.read().await;
    let (host, app) = crate::ready("").await?;
    let before = app.server().await?;
    simhost::set_health(&host.path(), 2, |h| h.remapped_rows.pending = true)?;
    let plan = format!(
        "name = \"night\"\nreuse = false\n{BENCH}\n[[sets]]\nflags = {{ \"--ep-size\" = 2 }}\n[[sets]]\n"
    );
    let id = start(&app, &plan).await?;
    let c = wait_campaign(&app, id, "the pause", Duration::from_secs(30), |c| {
        c["info"]["state"] == "paused"
    })
    .await?;
    let reason = c["info"]["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("GPU 2") && reason.contains("row remap") && reason.contains("still serves"),
        "{reason}"
    );
    assert_eq!(states(&c), ["pending", "pending"], "{c:#}");
    assert_eq!(c["steps"][0]["attempts"], 0, "not the step's failure");
    // Nothing was stopped: the same server serves, untouched.
    let s = app.server().await?;
    assert_eq!(
        (s.phase, s.root, s.generation),
        (Phase::Ready, before.root, before.generation)
    );
    assert!(host.signals_sent().is_empty(), "{:?}", host.signals_sent());

    // The GPU is reset; a person resumes, and the night goes on.
    simhost::set_health(&host.path(), 2, |h| {
        h.remapped_rows.pending = false;
        h.remapped_rows.uncorrectable = 1;
    })?;
    let (code, body) = app
        .post(&format!("/api/campaigns/{id}/resume"), &json!({}))
        .await?;
    assert_eq!(code, 202, "{body}");
    let c = wait_over(&app, id, Duration::from_secs(120)).await?;
    assert_eq!(states(&c), ["done", "done"], "{c:#}");
    assert!(host.foreign_signals().is_empty());
    Ok(())
}

#[tokio::test]
async fn an_unknown_version_on_either_side_reuses_nothing() -> anyhow::Result<()> {
    let _load = MEASURING.read().await;
    // An empty file: the server does not say its version.
    let (host, app, version) = crate::versioned("").await?;
    let plan = format!("name = \"again\"\n{BENCH}\n[[sets]]\n");
    let run_of = |c: &serde_json::Value| c["steps"][0]["result"]["run_id"].as_i64();

    // Unknown now and when measured: measured again.
    let earlier = app.bench(bench_json()).await?;
    assert!(
        earlier["provenance"]["server_version"].is_null(),
        "{earlier}"
    );
    let c = wait_over(&app, start(&app, &plan).await?, Duration::from_secs(60)).await?;
    assert_eq!(states(&c), ["done"], "an unknown version matched: {c:#}");
    assert_ne!(run_of(&c), earlier["id"].as_i64());

    // Known now, unknown when measured: measured again.
    std::fs::write(&version, "0.7.0\n")?;
    let id = app.restart(json!({})).await?;
    app.finished_restart(id, Duration::from_secs(30)).await?;
    let c = wait_over(&app, start(&app, &plan).await?, Duration::from_secs(60)).await?;
    assert_eq!(
        states(&c),
        ["done"],
        "a run of unknown version was reused: {c:#}"
    );
    let measured = run_of(&c);

    // Known on both sides and equal: reused.
    let c = wait_over(&app, start(&app, &plan).await?, Duration::from_secs(60)).await?;
    assert_eq!(states(&c), ["reused"], "{c:#}");
    assert_eq!(run_of(&c), measured);

    // The same server, now unable to say (its version file emptied and
    // relaunched): history's 0.7.0 does not count.
    std::fs::write(&version, "")?;
    let id = app.restart(json!({})).await?;
    app.finished_restart(id, Duration::from_secs(30)).await?;
    let c = wait_over(&app, start(&app, &plan).await?, Duration::from_secs(60)).await?;
    assert_eq!(states(&c), ["done"], "history's version was used: {c:#}");
    assert!(host.foreign_signals().is_empty());
    Ok(())
}

#[tokio::test]
async fn a_campaign_cancelled_mid_drain_launches_nothing_and_says_cancelled() -> anyhow::Result<()>
{
    let _load = MEASURING.read().await;
    // Servers that ignore SIGTERM: each drain lasts its whole timeout.
    let host = tests::SimHost::new(100);
    let spec = tests::managed::ServerSpec {
        env: vec![("SIMSERVER_MODE", "ignore-sigterm")],
        drain: "3s",
        ..spec("")
    };
    let app = tests::managed::spawn_managed(&host, &spec, &[])?;
    app.start_server().await?;
    let plan = format!(
        "name = \"cancelled\"\nreuse = false\n{BENCH}\n[[sets]]\nflags = {{ \"--ep-size\" = 2 }}\n[[sets]]\n"
    );
    let id = start(&app, &plan).await?;
    app.wait_for_state("step 1's drain", Duration::from_secs(30), |s| {
        s.server
            .as_ref()
            .is_some_and(|v| v.phase == Phase::Draining && v.operation.is_some())
    })
    .await?;
    let (code, body) = app
        .post(&format!("/api/campaigns/{id}/cancel"), &json!({}))
        .await?;
    assert_eq!(code, 202, "{body}");
    let c = wait_over(&app, id, Duration::from_secs(60)).await?;
    assert_eq!(c["info"]["state"], "cancelled", "{c:#}");
    assert_eq!(states(&c), ["skipped", "skipped"], "{c:#}");
    assert!(
        c["steps"][0]["failure"].is_null(),
        "not a failed step: {c:#}"
    );
    // Its restart stopped after the verification, before any launch.
    let op = c["steps"][0]["restart_id"].as_i64().expect("a restart");
    let d = app.get_json(&format!("/api/restarts/{op}")).await?;
    assert_eq!(d["summary"]["outcome"], "cancelled", "{d}");
    assert!(d["summary"]["failure"].is_null(), "{d}");
    let notes = tests::managed::notes(&d);
    assert!(
        notes.contains("verified") && !notes.contains("launching"),
        "{notes}"
    );
    let s = app
        .wait_phase(Phase::Stopped, Duration::from_secs(10))
        .await?;
    assert!(s.root.is_none(), "nothing was launched: {s:?}");
    assert!(host.foreign_signals().is_empty());
    Ok(())
}

#[tokio::test]
async fn a_gpu_that_needs_a_person_stops_the_campaign_whatever_its_policy() -> anyhow::Result<()> {
    let _load = MEASURING.read().await;
    let host = tests::SimHost::new(100);
    let spec = tests::managed::ServerSpec {
        verify: "3s",
        ..spec("")
    };
    let app = tests::managed::spawn_managed(&host, &spec, &[])?;
    app.start_server().await?;
    // Step 1's server leaks its memory when step 2 stops it; the policy
    // would retry a failed step.
    let plan = format!(
        "name = \"leak\"\nreuse = false\non_failure = \"retry\"\n{BENCH}\n[[sets]]\nflags = {{ SIMSERVER_MODE = \"leak\" }}\n[[sets]]\n[[sets]]\nflags = {{ \"--ep-size\" = 2 }}\n"
    );
    let id = start(&app, &plan).await?;
    let c = wait_over(&app, id, Duration::from_secs(120)).await?;
    assert_eq!(c["info"]["state"], "stopped", "{c:#}");
    assert_eq!(states(&c), ["done", "failed", "skipped"], "{c:#}");
    let step = &c["steps"][1];
    assert_eq!(step["attempts"], 1, "never retried: {step}");
    assert_eq!(step["failure"]["kind"], "needs_person", "{step}");
    let reason = c["info"]["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("nvidia-smi --gpu-reset -i 0")
            && reason.contains("whatever its failure policy"),
        "{reason}"
    );
    assert!(host.foreign_signals().is_empty());
    Ok(())
}
