//! `/metrics` as Prometheus reads it: dcgm-exporter's GPU series with their
//! labels and units, drainwatch's own series, and the scrape token.

use std::time::{Duration, Instant};

use prometheus_parse::{Sample, Scrape, Value as PValue};
use serde_json::json;
use tests::managed::{ServerSpec, spawn_managed};
use tests::ws::WsClient;
use tests::{SimHost, TestApp, auth_file, bearer_client};

fn parse(text: &str) -> Scrape {
    Scrape::parse(text.lines().map(|l| Ok(l.to_owned()))).expect("Prometheus text")
}

fn value(s: &Sample) -> f64 {
    match s.value {
        PValue::Gauge(v) | PValue::Counter(v) | PValue::Untyped(v) => v,
        _ => f64::NAN,
    }
}

fn samples<'a>(scrape: &'a Scrape, name: &str) -> Vec<&'a Sample> {
    scrape.samples.iter().filter(|s| s.metric == name).collect()
}

#[tokio::test]
async fn gpu_series_carry_dcgm_names_labels_and_units() -> anyhow::Result<()> {
    let host = SimHost::new(100);
    let app = tests::spawn_app(&host, &[])?;
    let state = app
        .wait_for_state("a sample", Duration::from_secs(10), |s| s.latest.is_some())
        .await?;
    let text = app
        .http
        .get(app.url("/metrics"))
        .send()
        .await?
        .text()
        .await?;
    let scrape = parse(&text);
    let gpus = &state.latest.expect("a sample").gpus;
    for name in [
        "DCGM_FI_DEV_FB_USED",
        "DCGM_FI_DEV_FB_FREE",
        "DCGM_FI_DEV_GPU_UTIL",
        "DCGM_FI_DEV_POWER_USAGE",
        "DCGM_FI_DEV_GPU_TEMP",
    ] {
        assert_eq!(
            samples(&scrape, name).len(),
            gpus.len(),
            "{name} per GPU:\n{text}"
        );
    }
    for g in gpus {
        let used = samples(&scrape, "DCGM_FI_DEV_FB_USED")
            .into_iter()
            .find(|s| s.labels.get("gpu") == Some(g.index.to_string().as_str()))
            .expect("GPU's series");
        assert_eq!(used.labels.get("UUID"), g.uuid.as_deref());
        // A simulated GPU never passes for a real one on a dashboard.
        assert_eq!(used.labels.get("simulated"), Some("true"));
        assert_eq!(used.labels.get("modelName"), g.name.as_deref());
        assert_eq!(
            used.labels.get("Hostname"),
            Some(state.host.hostname.as_str())
        );
        // Idle at its baseline: 4 MiB, in MiB as DCGM reports it.
        let mib = g.mem_used_bytes.expect("read") as f64 / 1_048_576.0;
        assert!((value(used) - mib).abs() <= 1.0, "{} vs {mib}", value(used));
        let total = g.mem_total_bytes.expect("read") as f64 / 1_048_576.0;
        let free = samples(&scrape, "DCGM_FI_DEV_FB_FREE")
            .into_iter()
            .find(|s| s.labels.get("gpu") == used.labels.get("gpu"))
            .expect("free");
        assert!((value(free) + value(used) - total).abs() <= 1.0);
    }
    let info = samples(&scrape, "drainwatch_host_info");
    assert_eq!(info.len(), 1);
    assert_eq!(info[0].labels.get("simulated"), Some("true"));
    assert!(text.contains("# TYPE DCGM_FI_DEV_FB_USED gauge"), "{text}");
    Ok(())
}

/// The value of the unlabelled gauge `name` in one scrape of `app`'s `/metrics`.
async fn gauge(app: &TestApp, name: &str) -> anyhow::Result<f64> {
    let text = app
        .http
        .get(app.url("/metrics"))
        .send()
        .await?
        .text()
        .await?;
    let scrape = parse(&text);
    let found = samples(&scrape, name);
    anyhow::ensure!(found.len() == 1, "one {name} sample:\n{text}");
    Ok(value(found[0]))
}

/// Scrapes until both gauges are what `want` accepts (within a deadline);
/// returns `(drainwatch_connected_clients, drainwatch_connected_sockets)`.
async fn wait_gauges(
    app: &TestApp,
    what: &str,
    want: impl Fn(f64, f64) -> bool,
) -> anyhow::Result<(f64, f64)> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let now = (
            gauge(app, "drainwatch_connected_clients").await?,
            gauge(app, "drainwatch_connected_sockets").await?,
        );
        if want(now.0, now.1) {
            return Ok(now);
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "{what}: (clients, sockets) = {now:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn connected_clients_follow_the_open_sockets_per_person() -> anyhow::Result<()> {
    let host = SimHost::new(100);
    let app = tests::spawn_app(&host, &[])?;
    // Nobody has a socket open yet.
    let (clients, sockets) = wait_gauges(&app, "the gauges", |_, _| true).await?;
    assert_eq!(clients, 0.0, "nobody is connected yet");

    // A real client: one person, one more socket.
    let mut first = WsClient::connect(&app.addr).await?;
    first.next_msg(Duration::from_secs(10)).await?;
    let (c, _) = wait_gauges(&app, "the client counted", |c, s| {
        c >= 1.0 && s == sockets + 1.0
    })
    .await?;
    assert_eq!(c, clients + 1.0, "one socket open, one person");

    // A second socket from the same address is the same person.
    let mut second = WsClient::connect(&app.addr).await?;
    second.next_msg(Duration::from_secs(10)).await?;
    let (c, _) = wait_gauges(&app, "the second socket counted", |_, s| s == sockets + 2.0).await?;
    assert_eq!(
        c,
        clients + 1.0,
        "two sockets from one address are two people"
    );

    // Closing them: the person stays while a socket of theirs is open…
    let _ = second.socket.close(None).await;
    drop(second);
    let (c, _) = wait_gauges(&app, "the second socket gone", |_, s| s == sockets + 1.0).await?;
    assert_eq!(c, clients + 1.0, "the person left with a socket still open");
    // …and leaves with the last: both gauges are back where they were.
    let _ = first.socket.close(None).await;
    drop(first);
    wait_gauges(&app, "everyone gone", |c, s| c == clients && s == sockets).await?;
    Ok(())
}

#[tokio::test]
async fn restarts_and_benchmarks_are_counted_and_scrapes_need_the_token() -> anyhow::Result<()> {
    let host = SimHost::new(100);
    let scrape_secret = "dw_scrape_secret_for_tests";
    let hash = tests::sha256_hex(scrape_secret);
    let (path, op, _view) = auth_file(
        host.scratch(),
        &format!("metrics_token_sha256 = \"{hash}\""),
    );
    let spec = ServerSpec {
        tp: 1,
        itl_ms: 5.0,
        ttft_ms: 10.0,
        ..ServerSpec::default()
    };
    let app =
        spawn_managed(&host, &spec, &["--auth", path.to_str().expect("utf-8")])?.with_token(&op);
    app.start_server().await?;
    let id = app
        .restart(json!({"--tp": "1", "--warmup-ms": "300"}))
        .await?;
    app.finished_restart(id, Duration::from_secs(30)).await?;
    let run = app
        .bench(json!({"concurrency": [4], "num_prompts": 8, "output_len": 8, "input_len": 8, "warmup": 1, "repeats": 3}))
        .await?;
    assert_eq!(run["status"], "succeeded", "{run}");

    let nobody = reqwest::Client::new();
    assert_eq!(nobody.get(app.url("/metrics")).send().await?.status(), 401);
    assert_eq!(
        bearer_client("dw_wrong")
            .get(app.url("/metrics"))
            .send()
            .await?
            .status(),
        401
    );
    let resp = bearer_client(scrape_secret)
        .get(app.url("/metrics"))
        .send()
        .await?;
    assert_eq!(resp.status(), 200);
    let text = resp.text().await?;
    // The scrape token is for scraping only.
    assert_eq!(
        bearer_client(scrape_secret)
            .get(app.url("/api/state"))
            .send()
            .await?
            .status(),
        401
    );
    let scrape = parse(&text);

    let restarts = samples(&scrape, "drainwatch_restarts_total");
    let count = |kind: &str| {
        restarts
            .iter()
            .filter(|s| {
                s.labels.get("kind") == Some(kind) && s.labels.get("outcome") == Some("succeeded")
            })
            .map(|s| value(s))
            .sum::<f64>()
    };
    assert_eq!((count("start"), count("restart")), (1.0, 1.0), "{text}");
    let total = scrape
        .samples
        .iter()
        .find(|s| {
            s.metric == "drainwatch_restart_phase_seconds" && s.labels.get("phase") == Some("total")
        })
        .or_else(|| {
            scrape.samples.iter().find(|s| {
                s.metric == "drainwatch_restart_phase_seconds_count"
                    && s.labels.get("phase") == Some("total")
            })
        });
    assert!(total.is_some(), "a phase histogram: {text}");
    let phase: Vec<_> = samples(&scrape, "drainwatch_server_phase")
        .into_iter()
        .filter(|s| value(s) == 1.0)
        .collect();
    assert_eq!(phase.len(), 1);
    assert_eq!(phase[0].labels.get("phase"), Some("ready"));
    let tok = samples(&scrape, "drainwatch_bench_output_tokens_per_second");
    assert_eq!(tok.len(), 1, "{text}");
    assert_eq!(tok[0].labels.get("concurrency"), Some("4"));
    let measured = run["levels"][0]["output_tok_s"]["median"]
        .as_f64()
        .expect("median");
    assert!((value(tok[0]) - measured).abs() < 1e-6 * measured.max(1.0));
    Ok(())
}

/// The value of `name` for GPU `gpu` in `scrape`, if the series is there.
fn gpu_value(scrape: &Scrape, name: &str, gpu: u32) -> Option<f64> {
    samples(scrape, name)
        .into_iter()
        .find(|s| s.labels.get("gpu") == Some(gpu.to_string().as_str()))
        .map(value)
}

#[tokio::test]
async fn health_series_carry_dcgm_names_and_leave_out_what_a_gpu_lacks() -> anyhow::Result<()> {
    // Arrange: GPU 0 with a row remap pending, GPU 1 with two uncorrected ECC
    // errors, GPU 3's link down to x4 and thermally slowed; GPU 2 reads no
    // ECC (not supported), and later raises XID 79.
    let mut host = SimHost::new(100);
    simhost::set_health(&host.path(), 0, |h| h.remapped_rows.pending = true)?;
    simhost::set_health(&host.path(), 1, |h| {
        h.ecc_volatile.uncorrected = 2;
        h.ecc_aggregate.uncorrected = 5;
    })?;
    simhost::set_health(&host.path(), 3, |h| {
        h.pcie.width_current = 4;
        h.clocks_event_reasons = 0x40;
    })?;
    host.set_faults(
        2,
        simhost::GpuFaults {
            ecc: Some(simhost::Fault::NotSupported),
            ..simhost::GpuFaults::default()
        },
    )?;
    let app = tests::spawn_app(&host, &[])?;
    app.wait_for_state("a sample", Duration::from_secs(10), |s| s.latest.is_some())
        .await?;

    // Act: an XID while drainwatch runs.
    simhost::raise_xid(&host.path(), 2, 79)?;
    app.wait_for_state("GPU 2's XID", Duration::from_secs(10), |s| {
        s.latest
            .as_ref()
            .is_some_and(|l| l.gpus[2].health.xid.last().is_some_and(|x| x.code == 79))
    })
    .await?;
    let text = app
        .http
        .get(app.url("/metrics"))
        .send()
        .await?
        .text()
        .await?;
    let scrape = parse(&text);

    // Assert
    for name in [
        "DCGM_FI_DEV_SM_CLOCK",
        "DCGM_FI_DEV_MEM_CLOCK",
        "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS",
        "DCGM_FI_DEV_XID_ERRORS",
        "DCGM_FI_DEV_PCIE_LINK_GEN",
        "DCGM_FI_DEV_PCIE_LINK_WIDTH",
        "DCGM_FI_DEV_ROW_REMAP_PENDING",
        "DCGM_FI_DEV_PERSISTENCE_MODE",
    ] {
        assert!(
            text.contains(&format!("# TYPE {name} gauge")),
            "{name}:\n{text}"
        );
        assert!(gpu_value(&scrape, name, 0).is_some(), "{name} for GPU 0");
    }
    assert_eq!(gpu_value(&scrape, "DCGM_FI_DEV_XID_ERRORS", 2), Some(79.0));
    assert_eq!(gpu_value(&scrape, "DCGM_FI_DEV_XID_ERRORS", 0), Some(0.0));
    assert_eq!(
        gpu_value(&scrape, "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", 1),
        Some(2.0)
    );
    assert_eq!(
        gpu_value(&scrape, "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL", 1),
        Some(5.0)
    );
    // Not supported is left out, never written as zero.
    assert_eq!(gpu_value(&scrape, "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", 2), None);
    assert_eq!(gpu_value(&scrape, "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", 2), None);
    assert_eq!(
        gpu_value(&scrape, "DCGM_FI_DEV_ROW_REMAP_PENDING", 0),
        Some(1.0)
    );
    assert_eq!(
        gpu_value(&scrape, "DCGM_FI_DEV_ROW_REMAP_PENDING", 1),
        Some(0.0)
    );
    assert_eq!(
        gpu_value(&scrape, "DCGM_FI_DEV_PCIE_LINK_WIDTH", 3),
        Some(4.0)
    );
    // Hardware thermal slowdown (0x40), beside "GPU idle" (0x1) on an idle GPU.
    let reasons = gpu_value(&scrape, "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", 3).expect("reasons");
    assert_eq!(reasons as u64 & 0x40, 0x40, "{reasons}");
    let sm = gpu_value(&scrape, "DCGM_FI_DEV_SM_CLOCK", 0).expect("SM clock");
    assert!(sm > 0.0, "an SM clock in MHz: {sm}");
    Ok(())
}
