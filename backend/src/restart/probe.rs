//! The warm-up probes towards the managed server: `/health` until 200, then a
//! real completion until it comes back. (What its metrics say is read by
//! [`crate::scrape`].)

use std::time::Duration;

use tokio::sync::mpsc;

use crate::config::file::Readiness;

/// A probe's finding about the server of one generation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ProbeEvent {
    Healthy,
    Ready,
}

/// Probes until the server is ready; reports each step once, tagged with its
/// generation so a late answer about an old server is ignored.
pub(crate) async fn warmup(
    client: reqwest::Client,
    generation: u64,
    health_url: String,
    readiness: Readiness,
    tx: mpsc::Sender<(u64, ProbeEvent)>,
) {
    loop {
        let ok = client
            .get(&health_url)
            .timeout(Duration::from_secs(2))
            .send()
            .await
            .is_ok_and(|r| r.status().is_success());
        if ok {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    if tx.send((generation, ProbeEvent::Healthy)).await.is_err() {
        return;
    }
    loop {
        if completion(&client, &readiness).await {
            let _ = tx.send((generation, ProbeEvent::Ready)).await;
            return;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// One real request: it must answer 2xx and deliver its whole body in time
/// (a streamed answer that stalls fails the timeout).
async fn completion(client: &reqwest::Client, r: &Readiness) -> bool {
    let sent = client
        .post(&r.url)
        .json(&r.body)
        .timeout(r.timeout)
        .send()
        .await;
    match sent {
        Ok(resp) if resp.status().is_success() => resp.bytes().await.is_ok(),
        Ok(resp) => {
            tracing::debug!(status = %resp.status(), "readiness probe refused");
            false
        }
        Err(e) => {
            tracing::debug!(error = %e, "readiness probe failed");
            false
        }
    }
}
