//! A missing or broken NVML library: drainwatch keeps running and says why.

use std::time::Duration;

use shared::NvmlStatus;
use tests::{SimHost, spawn_app, spawn_app_with};

async fn unavailable_reason(app: &tests::TestApp) -> anyhow::Result<String> {
    let s = app
        .wait_for_state("a sample", Duration::from_secs(5), |_| true)
        .await?;
    assert!(s.latest.as_ref().is_some_and(|l| l.gpus.is_empty()));
    // The sampler runs regardless: health is ok, NVML is reported unavailable.
    let health: serde_json::Value = app
        .http
        .get(app.url("/healthz"))
        .send()
        .await?
        .json()
        .await?;
    assert_eq!(health["status"], "ok");
    assert_eq!(health["nvml"], "unavailable");
    match s.host.nvml {
        NvmlStatus::Unavailable { reason, .. } => Ok(reason),
        other => anyhow::bail!("expected unavailable, got {other:?}"),
    }
}

#[tokio::test]
async fn missing_library_is_reported_not_fatal() -> anyhow::Result<()> {
    let host = SimHost::new(100);
    let app = spawn_app(&host, &["--nvml-lib", "/nonexistent/libnvidia-ml.so.1"])?;
    let reason = unavailable_reason(&app).await?;
    assert!(reason.contains("cannot load the NVML library"), "{reason}");
    Ok(())
}

#[tokio::test]
async fn library_without_driver_is_reported() -> anyhow::Result<()> {
    let host = SimHost::new(100);
    // The fake behaves like NVML on a machine whose driver is not loaded.
    let app = spawn_app_with(&host, &[], |cmd| {
        cmd.env_remove(simhost::HOST_DIR_ENV);
    })?;
    let reason = unavailable_reason(&app).await?;
    assert!(reason.contains("driver is not loaded"), "{reason}");
    Ok(())
}

#[tokio::test]
async fn a_file_that_is_not_a_library_is_reported() -> anyhow::Result<()> {
    let host = SimHost::new(100);
    let bogus = host.scratch().join("libnvidia-ml.so.1");
    std::fs::write(&bogus, b"not an ELF file")?;
    let app = spawn_app(&host, &["--nvml-lib", bogus.to_str().expect("utf-8 path")])?;
    let reason = unavailable_reason(&app).await?;
    assert!(reason.contains("cannot load"), "{reason}");
    Ok(())
}
