//! `GET /metrics`: OpenMetrics text (Prometheus scrapes it natively). GPU series carry DCGM-exporter's names,
//! units and labels, so dashboards built for dcgm-exporter read drainwatch
//! unchanged; drainwatch's own series are `drainwatch_*`. Built per scrape
//! from the latest sample, the hub and the store (a few hundred series at
//! most).

use std::sync::atomic::AtomicU64;

use axum::extract::State;
use axum::response::Response;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use shared::health::GpuHealth;
use shared::restart::{OpKind, Phase};

use super::state::AppState;
use crate::store::name;

type Labels = Vec<(String, String)>;
type FGauge = Family<Labels, Gauge<f64, AtomicU64>>;

/// Seconds: from a quick drain to a slow warm-up of a large model.
const PHASE_BUCKETS: [f64; 12] = [
    0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0,
];

/// prometheus-client ends every HELP text with a period of its own.
fn help(s: &str) -> &str {
    s.trim_end_matches('.')
}

fn gauge(reg: &mut Registry, name: &str, text: &str) -> FGauge {
    let f = FGauge::default();
    reg.register(name, help(text), f.clone());
    f
}

/// A gauge without labels, written `name value` (not `name{} value`).
fn single(reg: &mut Registry, name: &str, text: &str, v: f64) {
    let g = Gauge::<f64, AtomicU64>::default();
    g.set(v);
    reg.register(name, help(text), g);
}

fn set(f: &FGauge, labels: Labels, v: f64) {
    f.get_or_create(&labels).set(v);
}

fn l(pairs: &[(&str, String)]) -> Labels {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), v.clone()))
        .collect()
}

pub(super) async fn serve(State(state): State<AppState>) -> Response {
    let mut reg = Registry::default();
    gpus(&mut reg, &state);
    own(&mut reg, &state).await;
    crate::http::openmetrics(&reg)
}

/// dcgm-exporter's names, labels and units: memory in MiB, power in W,
/// temperature in °C, utilisation in %. A field NVML could not read is left
/// out. On a simulated host every series also carries `simulated="true"`, so a
/// dashboard never shows a simulated GPU as a real one.
fn gpus(reg: &mut Registry, state: &AppState) {
    let used = gauge(
        reg,
        "DCGM_FI_DEV_FB_USED",
        "Framebuffer memory used (in MiB).",
    );
    let free = gauge(
        reg,
        "DCGM_FI_DEV_FB_FREE",
        "Framebuffer memory free (in MiB).",
    );
    let util = gauge(reg, "DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).");
    let power = gauge(reg, "DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).");
    let temp = gauge(reg, "DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).");
    let over = gauge(
        reg,
        "drainwatch_gpu_over_baseline_mib",
        "GPU memory used above the GPU's idle baseline (in MiB): what a drained GPU must give back.",
    );
    let health: Vec<(&str, FGauge)> = HEALTH
        .iter()
        .map(|(name, text)| (*name, gauge(reg, name, text)))
        .collect();
    let host = state.hub.host();
    let Some(latest) = state.hub.latest() else {
        return;
    };
    const MIB: f64 = 1_048_576.0;
    let simulated = host.nvml.is_simulated();
    for g in &latest.sample.gpus {
        let mut labels = l(&[
            ("gpu", g.index.to_string()),
            ("UUID", g.uuid.clone().unwrap_or_default()),
            ("device", format!("nvidia{}", g.index)),
            ("modelName", g.name.clone().unwrap_or_default()),
            ("Hostname", host.hostname.clone()),
        ]);
        if simulated {
            labels.push(("simulated".to_owned(), "true".to_owned()));
        }
        if let (Some(u), Some(b)) = (g.mem_used_bytes, g.mem_baseline_bytes) {
            set(
                &over,
                labels.clone(),
                (u.saturating_sub(b) as f64 / MIB).round(),
            );
        }
        if let Some(u) = g.mem_used_bytes {
            set(&used, labels.clone(), (u as f64 / MIB).round());
            if let Some(t) = g.mem_total_bytes {
                set(
                    &free,
                    labels.clone(),
                    (t.saturating_sub(u) as f64 / MIB).round(),
                );
            }
        }
        if let Some(u) = g.util_gpu_percent {
            set(&util, labels.clone(), f64::from(u));
        }
        if let Some(p) = g.power_mw {
            set(&power, labels.clone(), f64::from(p) / 1_000.0);
        }
        if let Some(t) = g.temp_c {
            set(&temp, labels.clone(), f64::from(t));
        }
        for (f, value) in health
            .iter()
            .zip(health_values(&g.health, g.error("xid").is_none()))
        {
            if let Some(v) = value {
                set(&f.1, labels.clone(), v);
            }
        }
    }
}

/// DCGM's health fields: name and help as dcgm-exporter gives them.
const HEALTH: [(&str, &str); 22] = [
    ("DCGM_FI_DEV_SM_CLOCK", "SM clock frequency (in MHz)."),
    ("DCGM_FI_DEV_MEM_CLOCK", "Memory clock frequency (in MHz)."),
    (
        "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS",
        "Current clock throttle reasons (bitmask of nvmlClocksEventReason*).",
    ),
    (
        "DCGM_FI_DEV_XID_ERRORS",
        "Value of the last XID error encountered.",
    ),
    (
        "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
        "Total number of single-bit volatile ECC errors.",
    ),
    (
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
        "Total number of double-bit volatile ECC errors.",
    ),
    (
        "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL",
        "Total number of single-bit persistent ECC errors.",
    ),
    (
        "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL",
        "Total number of double-bit persistent ECC errors.",
    ),
    (
        "DCGM_FI_DEV_RETIRED_SBE",
        "Total number of retired pages due to single-bit errors.",
    ),
    (
        "DCGM_FI_DEV_RETIRED_DBE",
        "Total number of retired pages due to double-bit errors.",
    ),
    (
        "DCGM_FI_DEV_RETIRED_PENDING",
        "Pages pending retirement: 1 when any is (NVML gives no count), else 0.",
    ),
    (
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
        "Number of remapped rows for correctable errors.",
    ),
    (
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
        "Number of remapped rows for uncorrectable errors.",
    ),
    (
        "DCGM_FI_DEV_ROW_REMAP_PENDING",
        "Whether remapping of rows is pending (1) or not (0).",
    ),
    (
        "DCGM_FI_DEV_ROW_REMAP_FAILURE",
        "Whether remapping of rows has failed (1) or not (0).",
    ),
    ("DCGM_FI_DEV_PCIE_LINK_GEN", "PCIe current link generation."),
    ("DCGM_FI_DEV_PCIE_LINK_WIDTH", "PCIe current link width."),
    (
        "DCGM_FI_DEV_PCIE_TX_THROUGHPUT",
        "PCIe transmit throughput (in KB/s).",
    ),
    (
        "DCGM_FI_DEV_PCIE_RX_THROUGHPUT",
        "PCIe receive throughput (in KB/s).",
    ),
    ("DCGM_FI_DEV_ENC_UTIL", "Encoder utilization (in %)."),
    ("DCGM_FI_DEV_DEC_UTIL", "Decoder utilization (in %)."),
    (
        "DCGM_FI_DEV_PERSISTENCE_MODE",
        "Persistence mode for the device: enabled (1) or disabled (0).",
    ),
];

/// [`HEALTH`]'s values for one GPU, in its order; `None` where NVML did not
/// give the field (left out of the scrape, never written as zero).
fn health_values(h: &GpuHealth, xid_watched: bool) -> [Option<f64>; 22] {
    let n = |v: Option<u64>| v.map(|v| v as f64);
    let b = |v: Option<bool>| v.map(|v| if v { 1.0 } else { 0.0 });
    let u = |v: Option<u32>| v.map(f64::from);
    [
        u(h.sm_clock_mhz),
        u(h.mem_clock_mhz),
        n(h.clocks_event_reasons),
        // dcgm-exporter: 0 until the GPU raises one; left out where XIDs
        // are not watched (see the sample's `xid` error).
        xid_watched.then(|| h.xid.last().map_or(0.0, |x| x.code as f64)),
        n(h.ecc.map(|e| e.volatile_corrected)),
        n(h.ecc.map(|e| e.volatile_uncorrected)),
        n(h.ecc.map(|e| e.aggregate_corrected)),
        n(h.ecc.map(|e| e.aggregate_uncorrected)),
        u(h.retired_pages.map(|p| p.single_bit)),
        u(h.retired_pages.map(|p| p.double_bit)),
        b(h.retired_pages.map(|p| p.pending)),
        u(h.remapped_rows.map(|r| r.correctable)),
        u(h.remapped_rows.map(|r| r.uncorrectable)),
        b(h.remapped_rows.map(|r| r.pending)),
        b(h.remapped_rows.map(|r| r.failure)),
        u(h.pcie.map(|p| p.gen_current)),
        u(h.pcie.map(|p| p.width_current)),
        u(h.pcie_tx_kib_s),
        u(h.pcie_rx_kib_s),
        u(h.encoder_percent),
        u(h.decoder_percent),
        b(h.persistence_mode),
    ]
}

async fn own(reg: &mut Registry, state: &AppState) {
    agent(reg, state);
    let Some(store) = &state.store else { return };
    restarts(reg, store).await;
    bench(reg, store).await;
}

/// This drainwatch, who is connected, and the managed server's phase.
fn agent(reg: &mut Registry, state: &AppState) {
    let host = state.hub.host();
    let info = gauge(
        reg,
        "drainwatch_host_info",
        "This drainwatch: version, and whether its GPUs are a simulated host (1 always).",
    );
    set(
        &info,
        l(&[
            ("version", host.version.clone()),
            ("simulated", host.nvml.is_simulated().to_string()),
            ("Hostname", host.hostname.clone()),
        ]),
        1.0,
    );
    single(
        reg,
        "drainwatch_connected_sockets",
        "Open WebSocket connections.",
        state.hub.client_count() as f64,
    );
    single(
        reg,
        "drainwatch_connected_clients",
        "Distinct people (token names, or addresses without authentication) with a socket open.",
        state.hub.presence().len() as f64,
    );

    if let Some(s) = state.hub.server_status() {
        let phase = gauge(
            reg,
            "drainwatch_server_phase",
            "The managed server's phase (1 for the current one).",
        );
        for p in ALL_PHASES {
            let v = if p == s.phase { 1.0 } else { 0.0 };
            set(&phase, l(&[("phase", name(&p))]), v);
        }
        single(
            reg,
            "drainwatch_server_generation",
            "Launches of the managed server so far.",
            s.generation as f64,
        );
        if s.has_metrics
            && let Some(v) = s.passive.output_tok_s
        {
            single(
                reg,
                "drainwatch_server_output_tokens_per_second",
                "Output tokens per second from the server's own metrics.",
                v,
            );
        }
    }
}

/// The operations on the managed server, their failures and how long each
/// part took, from the history.
async fn restarts(reg: &mut Registry, store: &crate::store::Store) {
    let restarts = Family::<Labels, Counter>::default();
    reg.register(
        "drainwatch_restarts",
        help("Operations on the managed server by kind and outcome."),
        restarts.clone(),
    );
    let phases = Family::<Labels, Histogram>::new_with_constructor(|| {
        Histogram::new(PHASE_BUCKETS.iter().copied())
    });
    reg.register(
        "drainwatch_restart_phase_seconds",
        help("Time spent in each part of a finished operation."),
        phases.clone(),
    );
    let failures = Family::<Labels, Counter>::default();
    reg.register(
        "drainwatch_restart_failures",
        help(
            "Failed operations by kind and failure class (verify_failed, foreign_holders, \
             launch_failed, crashed, interrupted, unhealthy); every pair from 0, so that \
             the first failure shows as an increase.",
        ),
        failures.clone(),
    );
    for kind in ALL_KINDS {
        for failure in FAILURE_CLASSES {
            let _ = failures.get_or_create(&l(&[
                ("kind", name(&kind)),
                ("failure", failure.to_owned()),
            ]));
        }
    }
    if let Ok(all) = store.outcomes().await {
        for (kind, outcome, d, failure) in all {
            restarts
                .get_or_create(&l(&[("kind", name(&kind)), ("outcome", name(&outcome))]))
                .inc();
            if let Some(f) = failure {
                failures
                    .get_or_create(&l(&[("kind", name(&kind)), ("failure", f)]))
                    .inc();
            }
            for (part, ms) in [
                ("drain", d.drain_ms),
                ("kill", d.kill_ms),
                ("verify", d.verify_ms),
                ("warmup", d.warmup_ms),
                ("total", d.total_ms),
            ] {
                if let Some(ms) = ms {
                    phases
                        .get_or_create(&l(&[("phase", part.to_owned())]))
                        .observe(ms as f64 / 1_000.0);
                }
            }
        }
    }
}

/// The ledger's medians, per flag set and concurrency.
async fn bench(reg: &mut Registry, store: &crate::store::Store) {
    let tok = gauge(
        reg,
        "drainwatch_bench_output_tokens_per_second",
        "Median output tokens per second across repeats, per flag set and concurrency.",
    );
    if let Ok(ledger) = store.ledger().await {
        for r in ledger {
            for (c, lv) in &r.levels {
                set(
                    &tok,
                    l(&[
                        ("flagset", r.set.id.clone()),
                        (
                            "label",
                            r.set
                                .label
                                .as_deref()
                                .map(|l| crate::redact::global().known(l))
                                .unwrap_or_default(),
                        ),
                        ("concurrency", c.to_string()),
                    ]),
                    lv.output_tok_s.median,
                );
            }
        }
    }
}

const ALL_KINDS: [OpKind; 4] = [OpKind::Restart, OpKind::Stop, OpKind::Start, OpKind::Adopt];

/// `Failure`'s classes, as its `kind` tag names them.
const FAILURE_CLASSES: [&str; 6] = [
    "verify_failed",
    "foreign_holders",
    "launch_failed",
    "crashed",
    "interrupted",
    "unhealthy",
];

const ALL_PHASES: [Phase; 9] = [
    Phase::Stopped,
    Phase::Draining,
    Phase::Killing,
    Phase::Verifying,
    Phase::Launching,
    Phase::WarmingUp,
    Phase::Ready,
    Phase::Failed,
    Phase::Crashed,
];
