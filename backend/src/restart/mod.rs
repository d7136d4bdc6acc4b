//! Guarded restarts of the managed server: the pure [`machine`], the pure
//! health [`gate`] it consults before a launch, and the manager that feeds it
//! observations and carries out its effects.

pub mod chart;
pub mod gate;
pub mod machine;
pub mod manager;
mod observe;
mod probe;

pub(crate) use manager::probe_client;
pub(crate) use probe::ProbeEvent as Probed;

/// The warm-up probe on its own (for `drainwatch wait-ready`): its findings
/// on `tx`, tagged generation 0.
pub(crate) async fn warmup_probe(
    client: reqwest::Client,
    health_url: String,
    readiness: crate::config::file::Readiness,
    tx: tokio::sync::mpsc::Sender<(u64, Probed)>,
) {
    probe::warmup(client, 0, health_url, readiness, tx).await;
}
