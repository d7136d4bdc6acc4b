//! `drainwatch campaign`: a plan file checked (`--dry-run`), started and
//! followed to its end with the exit code that says how it went; `status`
//! as JSON; steering a campaign that is not running; bad plans.

use std::process::{Command, Stdio};

use tests::{TestApp, bin};

use crate::{BENCH, MEASURING};

/// Runs `drainwatch campaign <args> --url <app>`: exit code, stdout, stderr.
async fn campaign(app: &TestApp, args: &[&str]) -> anyhow::Result<(i32, String, String)> {
    let mut cmd = Command::new(bin("drainwatch"));
    cmd.arg("campaign")
        .args(args)
        .args(["--url", &app.url("")])
        .env_remove("DRAINWATCH_TOKEN")
        .env_remove("DRAINWATCH_URL")
        .stdin(Stdio::null());
    let out = tokio::task::spawn_blocking(move || cmd.output()).await??;
    Ok((
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    ))
}

#[tokio::test]
async fn the_cli_runs_a_plan_to_its_end_and_its_exit_code_says_how_it_went() -> anyhow::Result<()> {
    let _load = MEASURING.read().await;
    let (host, app) = crate::ready("").await?;
    let plan = host.scratch().join("plan.toml");
    std::fs::write(
        &plan,
        format!(
            "name = \"cli\"\nreuse = false\n{BENCH}\n[[sets]]\n[[sets]]\nflags = {{ \"--ep-size\" = 8, \"--speculative-algorithm\" = \"EAGLE\" }}\n"
        ),
    )?;
    let plan = plan.display().to_string();

    // Checked and laid out, nothing recorded.
    let (code, out, err) = campaign(&app, &["start", &plan, "--dry-run", "--json"]).await?;
    assert_eq!(code, 0, "{err}");
    let laid: serde_json::Value = serde_json::from_str(out.trim())?;
    assert_eq!(laid["steps"].as_array().map(Vec::len), Some(2));
    assert_eq!(app.get_json("/api/campaigns").await?, serde_json::json!([]));

    // Followed to its end: done, one step failed (23); the table says so.
    let (code, out, err) = campaign(&app, &["start", &plan]).await?;
    assert_eq!(code, 23, "{out}\n{err}");
    assert!(out.contains("campaign #1 “cli” — done"), "{out}");
    assert!(out.contains("out of memory at launch"), "{out}");
    assert!(out.contains("best: step 1"), "{out}");
    assert!(err.contains("step 2: failed"), "progress on stderr: {err}");

    let (code, out, _) = campaign(&app, &["status", "--json"]).await?;
    assert_eq!(code, 0);
    let c: serde_json::Value = serde_json::from_str(out.trim())?;
    assert_eq!(c["info"]["state"], "done");
    assert_eq!(c["info"]["failed"], 1);

    // Steering one that is not running: busy (5). A bad plan: refused (2),
    // naming what is wrong; a missing file too.
    let (code, _, err) = campaign(&app, &["pause"]).await?;
    assert_eq!(code, 5, "{err}");
    assert!(err.contains("not running"), "{err}");
    let bad = host.scratch().join("bad.toml");
    std::fs::write(&bad, "name = \"bad\"\n[grid]\n\"--nccl-magic\" = [1]\n")?;
    let (code, _, err) = campaign(&app, &["start", &bad.display().to_string()]).await?;
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("unknown flag `--nccl-magic`"), "{err}");
    let (code, _, err) = campaign(&app, &["start", "/nonexistent/plan.toml"]).await?;
    assert_eq!(code, 2, "{err}");
    Ok(())
}
