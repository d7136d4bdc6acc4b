//! The warm-up probes towards the managed server: `/health` until 200, then a
//! real completion until it comes back. A 401 or 403 is an answer, not a
//! stage of warming up: the server wants an API key drainwatch lacks (or has
//! wrong), so the probe reports it at once rather than retrying until the
//! warm-up times out. (What its metrics say is read by [`crate::scrape`].)

use std::time::Duration;

use tokio::sync::mpsc;

use crate::config::file::Readiness;

/// A probe's finding about the server of one generation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ProbeEvent {
    Healthy,
    Ready,
    /// The server refused the probe's request with this status (401 or 403).
    Refused(u16),
}

/// What one request found.
enum Answer {
    Ok,
    Refused(u16),
    NotYet,
}

/// 401 and 403 mean the request's credentials, not the server's warm-up.
fn answer(status: reqwest::StatusCode) -> Answer {
    match status.as_u16() {
        200..=299 => Answer::Ok,
        s @ (401 | 403) => Answer::Refused(s),
        _ => Answer::NotYet,
    }
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
        let sent = client
            .get(&health_url)
            .timeout(Duration::from_secs(2))
            .send()
            .await;
        match sent.map(|r| answer(r.status())) {
            Ok(Answer::Ok) => break,
            Ok(Answer::Refused(status)) => {
                let _ = tx.send((generation, ProbeEvent::Refused(status))).await;
                return;
            }
            Ok(Answer::NotYet) | Err(_) => {}
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    if tx.send((generation, ProbeEvent::Healthy)).await.is_err() {
        return;
    }
    loop {
        match completion(&client, &readiness).await {
            Answer::Ok => {
                let _ = tx.send((generation, ProbeEvent::Ready)).await;
                return;
            }
            Answer::Refused(status) => {
                let _ = tx.send((generation, ProbeEvent::Refused(status))).await;
                return;
            }
            Answer::NotYet => {}
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// One real request: it must answer 2xx and deliver its whole body in time
/// (a streamed answer that stalls fails the timeout).
async fn completion(client: &reqwest::Client, r: &Readiness) -> Answer {
    let sent = client
        .post(&r.url)
        .json(&r.body)
        .timeout(r.timeout)
        .send()
        .await;
    match sent {
        Ok(resp) => {
            let status = resp.status();
            match answer(status) {
                Answer::Ok if resp.bytes().await.is_ok() => Answer::Ok,
                Answer::Ok => Answer::NotYet,
                other => {
                    tracing::debug!(%status, "readiness probe refused");
                    other
                }
            }
        }
        Err(e) => {
            // reqwest's error names the URL (no credentials in it), never headers.
            tracing::debug!(error = %e, "readiness probe failed");
            Answer::NotYet
        }
    }
}
