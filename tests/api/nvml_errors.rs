//! A missing or broken NVML library: drainwatch keeps running and says why. And
//! NVML calls that fail for one GPU or one field (switched on in the simulated
//! host): the field is null with NVML's reason, the rest of the sample stands.

use std::time::Duration;

use shared::{GpuSample, NvmlStatus, Sample, Snapshot};
use simhost::{Fault, GpuFaults};
use tests::{GIB, MIB, SimHost, spawn_app, spawn_app_with, spawn_foreign};

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

const NAME: &str = "NVIDIA RTX PRO 6000 Blackwell";

fn latest(s: &Snapshot) -> &Sample {
    s.latest.as_ref().expect("a sample")
}

fn gpu(s: &Snapshot, i: usize) -> Option<&GpuSample> {
    s.latest.as_ref()?.gpus.get(i)
}

/// The fields a GPU reports errors for, sorted.
fn error_fields(g: &GpuSample) -> Vec<&str> {
    let mut fields: Vec<&str> = g.errors.iter().map(|e| e.field.as_str()).collect();
    fields.sort_unstable();
    fields
}

fn reason<'a>(g: &'a GpuSample, field: &str) -> &'a str {
    g.errors
        .iter()
        .find(|e| e.field == field)
        .map(|e| e.reason.as_str())
        .unwrap_or_else(|| panic!("GPU {} has no error for {field}: {:?}", g.index, g.errors))
}

/// Every reading of an idle simulated GPU present, with its value.
fn assert_idle_and_whole(g: &GpuSample) {
    assert!(g.errors.is_empty(), "GPU {}: {:?}", g.index, g.errors);
    assert_eq!(g.name.as_deref(), Some(NAME), "GPU {}", g.index);
    assert!(g.uuid.as_deref().is_some_and(|u| u.starts_with("GPU-")));
    assert_eq!(g.mem_total_bytes, Some(96 * GIB), "GPU {}", g.index);
    assert_eq!(g.mem_used_bytes, Some(4 * MIB), "GPU {}", g.index);
    assert_eq!(g.util_gpu_percent, Some(0), "GPU {}", g.index);
    assert_eq!(g.util_mem_percent, Some(0), "GPU {}", g.index);
    assert_eq!(g.power_limit_mw, Some(600_000), "GPU {}", g.index);
    assert_idle_power_and_temp(g);
}

/// Idle: 24 W and 31 °C, give or take the simulated wobble.
fn assert_idle_power_and_temp(g: &GpuSample) {
    assert!(
        g.power_mw.is_some_and(|p| (20_000..=30_000).contains(&p)),
        "GPU {} power {:?}",
        g.index,
        g.power_mw
    );
    assert!(
        g.temp_c.is_some_and(|t| (25..=40).contains(&t)),
        "GPU {} temperature {:?}",
        g.index,
        g.temp_c
    );
}

#[tokio::test]
async fn failing_fields_are_null_with_a_reason_and_the_rest_still_shows() -> anyhow::Result<()> {
    // Arrange: GPU 2 has no temperature or power sensor; GPU 5 is lost to
    // utilisation queries.
    let mut host = SimHost::new(100);
    host.set_faults(
        2,
        GpuFaults {
            temperature: Some(Fault::NotSupported),
            power_usage: Some(Fault::NotSupported),
            ..GpuFaults::default()
        },
    )?;
    host.set_faults(
        5,
        GpuFaults {
            utilization: Some(Fault::GpuIsLost),
            ..GpuFaults::default()
        },
    )?;

    // Act
    let app = spawn_app(&host, &[])?;
    let s = app
        .wait_for_state("a sample", Duration::from_secs(15), |_| true)
        .await?;

    // Assert: NVML itself is fine and every GPU is listed, in order.
    assert!(matches!(
        s.host.nvml,
        NvmlStatus::Ok {
            simulated: true,
            ..
        }
    ));
    let l = latest(&s);
    assert_eq!(l.gpus.len(), 8);
    assert!(l.gpus.iter().enumerate().all(|(i, g)| g.index == i as u32));
    assert_eq!(l.processes_error, None);

    let g2 = &l.gpus[2];
    assert_eq!(g2.temp_c, None);
    assert_eq!(g2.power_mw, None);
    assert_eq!(error_fields(g2), ["power_mw", "temp_c"]);
    for field in ["power_mw", "temp_c"] {
        let why = reason(g2, field);
        assert!(why.contains("not supported"), "{field}: {why}");
    }
    // The rest of GPU 2 still reads.
    assert_eq!(g2.name.as_deref(), Some(NAME));
    assert_eq!(g2.mem_total_bytes, Some(96 * GIB));
    assert_eq!(g2.mem_used_bytes, Some(4 * MIB));
    assert_eq!(g2.util_gpu_percent, Some(0));
    assert_eq!(g2.power_limit_mw, Some(600_000));

    let g5 = &l.gpus[5];
    assert_eq!(g5.util_gpu_percent, None);
    assert_eq!(g5.util_mem_percent, None);
    assert_eq!(error_fields(g5), ["util_gpu_percent"]);
    let why = reason(g5, "util_gpu_percent");
    assert!(why.contains("fallen off the bus"), "{why}");
    assert_eq!(g5.mem_used_bytes, Some(4 * MIB));
    assert_eq!(g5.power_limit_mw, Some(600_000));
    assert_idle_power_and_temp(g5);

    for g in l.gpus.iter().filter(|g| g.index != 2 && g.index != 5) {
        assert_idle_and_whole(g);
    }
    Ok(())
}

#[tokio::test]
async fn a_failing_process_list_is_reported_and_memory_still_shows() -> anyhow::Result<()> {
    // Arrange: GPU 4's process list cannot be read; a process holds 2 GiB there,
    // and another 1 GiB on GPU 6, whose list works.
    let mut host = SimHost::new(100);
    host.set_faults(
        4,
        GpuFaults {
            compute_processes: Some(Fault::Unknown),
            ..GpuFaults::default()
        },
    )?;
    let hidden = spawn_foreign(&host, 4, 2.0)?;
    let listed = spawn_foreign(&host, 6, 1.0)?;

    // Act
    let app = spawn_app(&host, &[])?;
    let s = app
        .wait_for_state(
            "both holders' memory on GPUs 4 and 6",
            Duration::from_secs(20),
            |s| {
                gpu(s, 4).is_some_and(|g| g.mem_used_bytes == Some(4 * MIB + 2 * GIB))
                    && gpu(s, 6).is_some_and(|g| g.mem_used_bytes == Some(4 * MIB + GIB))
            },
        )
        .await?;

    // Assert: the snapshot says the process list is incomplete, and why.
    let l = latest(&s);
    assert_eq!(l.gpus.len(), 8);
    let incomplete = l
        .processes_error
        .as_deref()
        .expect("the sample says its process list is incomplete");
    assert!(incomplete.contains("GPU 4"), "{incomplete}");
    let g4 = &l.gpus[4];
    assert_eq!(error_fields(g4), ["processes"]);
    let why = reason(g4, "processes");
    assert!(why.contains("internal driver error"), "{why}");
    // GPU 4's memory, load and sensors still show.
    assert_eq!(g4.mem_total_bytes, Some(96 * GIB));
    assert_eq!(g4.util_gpu_percent, Some(3));
    assert!(g4.power_mw.is_some() && g4.temp_c.is_some());
    // A GPU whose list could not be read is never taken for an idle one.
    assert_eq!(g4.mem_baseline_bytes, None);
    // Nothing can be attributed to GPU 4; GPU 6's holder is listed as usual.
    assert!(
        l.processes
            .iter()
            .all(|p| p.gpu_mem.iter().all(|m| m.gpu_index != 4)),
        "{:?}",
        l.processes
    );
    assert!(!l.processes.iter().any(|p| p.pid == hidden.pid()));
    let p = l
        .processes
        .iter()
        .find(|p| p.pid == listed.pid())
        .expect("GPU 6's holder is listed");
    assert_eq!(p.gpu_mem.len(), 1);
    assert_eq!(p.gpu_mem[0].gpu_index, 6);
    assert_eq!(p.gpu_mem[0].used_bytes, Some(GIB));
    for g in l.gpus.iter().filter(|g| g.index != 4) {
        assert!(g.errors.is_empty(), "GPU {}: {:?}", g.index, g.errors);
    }
    Ok(())
}

#[tokio::test]
async fn faults_switched_on_and_off_while_running_are_followed() -> anyhow::Result<()> {
    // Arrange: a healthy host, sampled often.
    let mut host = SimHost::new(100);
    let app = spawn_app(&host, &["--sample-interval-ms", "50"])?;
    app.wait_for_state("every GPU healthy", Duration::from_secs(15), |s| {
        s.latest.as_ref().is_some_and(|l| {
            l.gpus.len() == 8
                && l.gpus
                    .iter()
                    .all(|g| g.errors.is_empty() && g.mem_used_bytes.is_some())
        })
    })
    .await?;

    // Act: GPU 3 loses its memory, temperature and process queries.
    host.set_faults(
        3,
        GpuFaults {
            memory_info: Some(Fault::Unknown),
            temperature: Some(Fault::NotSupported),
            compute_processes: Some(Fault::Unknown),
            ..GpuFaults::default()
        },
    )?;
    let s = app
        .wait_for_state("GPU 3's faults", Duration::from_secs(15), |s| {
            gpu(s, 3).is_some_and(|g| error_fields(g) == ["mem_used_bytes", "processes", "temp_c"])
        })
        .await?;

    // Assert: exactly those fields are gone, with their reasons.
    let l = latest(&s);
    let g3 = &l.gpus[3];
    assert_eq!(g3.mem_total_bytes, None);
    assert_eq!(g3.mem_used_bytes, None);
    assert_eq!(g3.temp_c, None);
    assert!(reason(g3, "mem_used_bytes").contains("internal driver error"));
    assert!(reason(g3, "temp_c").contains("not supported"));
    assert!(
        l.processes_error
            .as_deref()
            .is_some_and(|e| e.contains("GPU 3")),
        "{:?}",
        l.processes_error
    );
    assert_eq!(g3.util_gpu_percent, Some(0));
    assert!(g3.power_mw.is_some());
    assert_eq!(g3.name.as_deref(), Some(NAME));
    for g in l.gpus.iter().filter(|g| g.index != 3) {
        assert_idle_and_whole(g);
    }

    // Act: every fault off again.
    host.clear_faults()?;
    let s = app
        .wait_for_state("GPU 3 whole again", Duration::from_secs(15), |s| {
            s.latest.as_ref().is_some_and(|l| {
                l.processes_error.is_none() && l.gpus.iter().all(|g| g.errors.is_empty())
            })
        })
        .await?;

    // Assert: the values come back, live.
    let l = latest(&s);
    assert_eq!(l.gpus.len(), 8);
    for g in &l.gpus {
        assert_idle_and_whole(g);
    }
    assert_eq!(l.gpus[3].mem_baseline_bytes, Some(4 * MIB));
    Ok(())
}

#[tokio::test]
async fn a_gpu_that_cannot_be_opened_keeps_its_place() -> anyhow::Result<()> {
    // Arrange: GPU 6 has fallen off the bus; NVML still counts it.
    let mut host = SimHost::new(100);
    host.set_faults(
        6,
        GpuFaults {
            handle: Some(Fault::GpuIsLost),
            ..GpuFaults::default()
        },
    )?;

    // Act
    let app = spawn_app(&host, &[])?;
    let s = app
        .wait_for_state("a sample", Duration::from_secs(15), |_| true)
        .await?;

    // Assert
    let l = latest(&s);
    assert_eq!(l.gpus.len(), 8);
    let g6 = &l.gpus[6];
    assert_eq!(g6.index, 6);
    assert_eq!(error_fields(g6), ["device"]);
    let why = reason(g6, "device");
    assert!(why.contains("fallen off the bus"), "{why}");
    assert_eq!(
        (
            g6.name.as_deref(),
            g6.mem_used_bytes,
            g6.temp_c,
            g6.power_mw
        ),
        (None, None, None, None)
    );
    assert!(l.processes_error.is_some(), "its processes are unknown too");
    for g in l.gpus.iter().filter(|g| g.index != 6) {
        assert_idle_and_whole(g);
    }
    Ok(())
}
