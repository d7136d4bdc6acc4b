//! HTTP towards the managed server: the warm-up probes (`/health` until 200, then
//! a real completion until it comes back) and the metrics scrape that shows how
//! many requests are still running during a drain.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{Notify, mpsc};

use shared::bench::Passive;

use super::observe::{Buckets, metrics, quantile};
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

/// The shortest interval output tok/s is measured over.
const RATE_WINDOW: Duration = Duration::from_millis(900);

/// How far back the latency medians look: long enough that a closed loop of
/// long answers, whose first tokens come in waves, always has some.
const LATENCY_WINDOW: Duration = Duration::from_secs(10);

/// What the server's own metrics said last.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Scraped {
    pub(crate) passive: Passive,
    /// The last scrape got an answer with metrics in it.
    pub(crate) has_metrics: bool,
}

/// Scrapes the server's metrics: every 50 ms while an operation runs (`busy`), so
/// that the drain timeline's running requests move at its 20 Hz and more, every
/// second otherwise. Output tok/s is the generated-tokens counter's rise over at
/// least [`RATE_WINDOW`], so fast scrapes do not make it jumpy.
pub(crate) async fn scrape(
    client: reqwest::Client,
    url: String,
    busy: Arc<AtomicBool>,
    wake: Arc<Notify>,
    out: Arc<Mutex<Scraped>>,
) {
    // The generated-tokens counter and when it was read, for the rate.
    let mut last: Option<(tokio::time::Instant, f64)> = None;
    // Readings of the latency histograms, about one a second, over the last
    // LATENCY_WINDOW: the oldest is what the newest is compared with.
    let mut hists: std::collections::VecDeque<(tokio::time::Instant, Buckets, Buckets)> =
        Default::default();
    loop {
        let text = match client
            .get(&url)
            .timeout(Duration::from_secs(1))
            .send()
            .await
        {
            Ok(r) if r.status().is_success() => r.text().await.ok(),
            _ => None,
        };
        let now = tokio::time::Instant::now();
        {
            let mut s = out.lock().unwrap_or_else(|p| p.into_inner());
            let m = text.as_deref().map(metrics);
            let tokens = m.as_ref().and_then(|m| m.generated);
            let due = match (last, tokens) {
                (Some((at, _)), Some(_)) => now.duration_since(at) >= RATE_WINDOW,
                _ => true,
            };
            let output_tok_s = match (last, tokens) {
                _ if !due => s.passive.output_tok_s,
                (Some((at, before)), Some(t)) if t >= before => {
                    Some((t - before) / now.duration_since(at).as_secs_f64().max(1e-3))
                }
                _ => None,
            };
            // p50 latencies of what the server served over the last window.
            let (mut ttft_p50_ms, mut itl_p50_ms) = (s.passive.ttft_p50_ms, s.passive.itl_p50_ms);
            match &m {
                None => {
                    (ttft_p50_ms, itl_p50_ms) = (None, None);
                    hists.clear();
                }
                Some(m) => {
                    let due = hists
                        .back()
                        .is_none_or(|(at, _, _)| now.duration_since(*at) >= RATE_WINDOW);
                    if due {
                        hists.push_back((now, m.ttft.clone(), m.itl.clone()));
                        while hists.len() > 2
                            && hists
                                .get(1)
                                .is_some_and(|(at, _, _)| now.duration_since(*at) >= LATENCY_WINDOW)
                        {
                            hists.pop_front();
                        }
                        // The first reading holds everything since the server
                        // started: only what came after it says how it serves now.
                        let p50 = |before: &Buckets, now: &Buckets| {
                            quantile(before, now, 0.5).map(|s| s * 1e3)
                        };
                        (ttft_p50_ms, itl_p50_ms) = match hists.front() {
                            Some((at, t, i)) if *at < now => (p50(t, &m.ttft), p50(i, &m.itl)),
                            _ => (None, None),
                        };
                    }
                }
            }
            s.passive = Passive {
                output_tok_s: output_tok_s.or_else(|| m.as_ref().and_then(|m| m.gen_throughput)),
                running: m.as_ref().and_then(|m| m.running),
                queued: m.as_ref().and_then(|m| m.queued),
                ttft_p50_ms,
                itl_p50_ms,
            };
            s.has_metrics = m.as_ref().is_some_and(|m| {
                m.running.is_some() || m.generated.is_some() || m.gen_throughput.is_some()
            });
            if due {
                last = tokens.map(|t| (now, t));
            }
        }
        let pause = if busy.load(Ordering::Relaxed) {
            50
        } else {
            1_000
        };
        // An operation starting cuts the idle pause short.
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(pause)) => {}
            _ = wake.notified() => {}
        }
    }
}
