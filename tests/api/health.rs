//! GPU health as clients see it: an XID raised while drainwatch runs reaches
//! `/ws` in the first sample after drainwatch hears of it; MIG devices are
//! their GPU's children; a field the GPU lacks is "not supported", neither an
//! error nor zero.

use std::time::Duration;

use shared::gpu::NOT_SUPPORTED;
use shared::protocol::ServerMsg;
use tests::ws::WsClient;
use tests::{GIB, SimHost, spawn_app};

const T: Duration = Duration::from_secs(10);

#[tokio::test]
async fn an_xid_reaches_the_socket_in_the_first_sample_after_it_is_heard() -> anyhow::Result<()> {
    let host = SimHost::new(100);
    let app = spawn_app(&host, &["--sample-interval-ms", "100"])?;
    let mut ws = WsClient::connect(&app.addr).await?;
    assert!(matches!(ws.next_msg(T).await?, ServerMsg::Hello { .. }));
    assert!(matches!(ws.next_msg(T).await?, ServerMsg::Snapshot(_)));

    simhost::raise_xid(&host.path(), 5, 79)?;
    let raised = simhost::now_ms();

    // Every sample until the XID shows, then the first that shows it.
    let mut before = Vec::new();
    let (sample, xid) = loop {
        let ServerMsg::Sample(s) = ws.next_msg(T).await? else {
            continue;
        };
        if let Some(x) = s.gpus[5].health.xid.last().copied() {
            break (s, x);
        }
        anyhow::ensure!(before.len() < 100, "no XID after 100 samples");
        before.push(s.at_ms);
    };
    assert_eq!(xid.code, 79);
    // It is in the first sample that began after drainwatch heard of it:
    // none that began later went without it.
    for at in &before {
        assert!(
            *at < xid.at_ms,
            "a sample at {at} began after the XID was heard at {} and lacked it",
            xid.at_ms
        );
    }
    // Only GPU 5 has it.
    for g in &sample.gpus {
        assert_eq!(g.health.xid.is_empty(), g.index != 5, "GPU {}", g.index);
    }
    eprintln!(
        "XID raised at {raised}, heard at {} (+{} ms), first sample with it began at {}",
        xid.at_ms,
        xid.at_ms.saturating_sub(raised),
        sample.at_ms
    );
    Ok(())
}

#[tokio::test]
async fn mig_devices_are_children_and_missing_features_are_not_supported() -> anyhow::Result<()> {
    let mut host = SimHost::new(100);
    host.two_mig_instances(4)?;
    // GPU 2 lacks ECC, the video engines and PCIe counters, as a consumer
    // board does; GPU 3 refuses the clock-event reasons with another error.
    host.set_faults(
        2,
        simhost::GpuFaults {
            ecc: Some(simhost::Fault::NotSupported),
            video: Some(simhost::Fault::NotSupported),
            remapped_rows: Some(simhost::Fault::NotSupported),
            ..simhost::GpuFaults::default()
        },
    )?;
    host.set_faults(
        3,
        simhost::GpuFaults {
            clocks_event_reasons: Some(simhost::Fault::NoPermission),
            ..simhost::GpuFaults::default()
        },
    )?;
    let app = spawn_app(&host, &[])?;
    let state = app
        .wait_for_state("the slow fields read", T, |s| {
            s.latest
                .as_ref()
                .is_some_and(|l| l.gpus.iter().all(|g| g.health.slow_at_ms.is_some()))
        })
        .await?;
    let gpus = state.latest.expect("a sample").gpus;

    // MIG: GPU 4's two instances, each with its own identity and memory.
    let g4 = &gpus[4].health;
    assert_eq!(g4.mig_enabled, Some(true));
    let mig: Vec<_> = g4
        .mig
        .iter()
        .map(|m| (m.index, m.profile(), m.mem_total_bytes, m.mem_used_bytes))
        .collect();
    assert_eq!(
        mig,
        [
            (0, Some("1g.24gb"), Some(24 * GIB), Some(3 * GIB)),
            (1, Some("3g.72gb"), Some(72 * GIB), Some(0)),
        ]
    );
    for m in &g4.mig {
        assert!(m.uuid.as_deref().is_some_and(|u| u.starts_with("MIG-")));
        assert_ne!(m.uuid, gpus[4].uuid);
    }
    assert_eq!(gpus[0].health.mig_enabled, Some(false));
    assert!(gpus[0].health.mig.is_empty());

    // Not supported: `None` with that reason, never zero, never an error.
    let g2 = &gpus[2];
    assert_eq!(g2.health.ecc, None);
    assert_eq!(g2.health.ecc_enabled, None);
    assert_eq!(g2.health.encoder_percent, None);
    assert_eq!(g2.health.decoder_percent, None);
    assert_eq!(g2.health.remapped_rows, None);
    for field in ["ecc", "encoder_percent", "decoder_percent", "remapped_rows"] {
        assert_eq!(g2.error(field), Some(NOT_SUPPORTED), "{field}: {g2:?}");
    }
    // What the board has is still read.
    assert!(g2.health.sm_clock_mhz.is_some());
    assert!(g2.health.pcie.is_some());
    assert_eq!(g2.health.persistence_mode, Some(true));
    // Another error is an error, with its own reason.
    let g3 = &gpus[3];
    assert_eq!(g3.health.clocks_event_reasons, None);
    let reason = g3.error("clocks_event_reasons").expect("a reason");
    assert_ne!(reason, NOT_SUPPORTED);
    // A healthy GPU answers everything.
    let g0 = &gpus[0];
    assert!(g0.errors.is_empty(), "{:?}", g0.errors);
    assert_eq!(g0.health.ecc.map(|e| e.volatile_uncorrected), Some(0));
    assert!(g0.health.encoder_percent.is_some());
    Ok(())
}
