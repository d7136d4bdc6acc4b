//! The passive scrape: what the managed server's own `/metrics` says it serves
//! now (running and queued requests, output tok/s, p50 TTFT and ITL), read
//! without sending it a request of its own. The restart manager runs the scrape
//! and publishes what it found ([`Scraped`]); the drain timeline and the
//! ledger's live line read it. Nothing here decides about restarts.

pub(crate) mod text;

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use shared::bench::Passive;
use tokio::sync::Notify;
use tokio::time::Instant;

use shared::restart::EngineIdentity;
use text::{Buckets, Metrics, quantile};

use crate::config::file::Engine;

/// The shortest interval output tok/s is measured over.
const RATE_WINDOW: Duration = Duration::from_millis(900);

/// How far back the latency medians look: long enough that a closed loop of
/// long answers, whose first tokens come in waves, always has some.
const LATENCY_WINDOW: Duration = Duration::from_secs(10);

/// How long after a server said nothing of itself it is asked again: doubling
/// from the first to the last.
const FIRST_ASK_GAP: Duration = Duration::from_secs(1);
const LAST_ASK_GAP: Duration = Duration::from_secs(10);

/// What the server's own metrics said last.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Scraped {
    pub(crate) passive: Passive,
    /// The last scrape got an answer with metrics in it.
    pub(crate) has_metrics: bool,
}

/// Where the scrape reads.
#[derive(Debug, Clone)]
pub(crate) struct Urls {
    /// The server's Prometheus text.
    pub(crate) metrics: String,
    /// `http://HOST:PORT`, where its identity is asked.
    pub(crate) base: String,
    pub(crate) engine: Engine,
}

/// Scrapes the server's metrics: every 50 ms while an operation runs
/// (`busy`), so that the drain timeline's running requests move at its 20 Hz and
/// more, every second otherwise; `wake` cuts an idle pause short. Each reading
/// replaces what `out` holds. The first time a server answers, it is asked
/// what it is (`identity`); once it no longer answers, that is forgotten.
pub(crate) async fn run(
    client: reqwest::Client,
    urls: Urls,
    busy: Arc<AtomicBool>,
    wake: Arc<Notify>,
    out: Arc<Mutex<Scraped>>,
    identity: Arc<Mutex<Option<EngineIdentity>>>,
) {
    let mut readings = Readings::default();
    // A server that says nothing of itself is asked again after 1 s, then 2,
    // 4, 8 and every 10 s, not at every scrape: one still loading its model
    // (llama.cpp answers 503 until then), or whose answer was lost to a
    // connection it closed, is known within a second or two of being ready.
    let mut next_ask = Instant::now();
    let mut ask_gap = FIRST_ASK_GAP;
    loop {
        let (answered, text) = match client
            .get(&urls.metrics)
            .timeout(Duration::from_secs(1))
            .send()
            .await
        {
            Ok(r) if r.status().is_success() => (true, r.text().await.ok()),
            Ok(_) => (true, None),
            Err(_) => (false, None),
        };
        let known = identity.lock().unwrap_or_else(|p| p.into_inner()).is_some();
        if answered && !known && Instant::now() >= next_ask {
            let found = ask_identity(&client, &urls).await;
            next_ask = Instant::now() + ask_gap;
            ask_gap = (ask_gap * 2).min(LAST_ASK_GAP);
            *identity.lock().unwrap_or_else(|p| p.into_inner()) = found;
        } else if !answered {
            if known {
                *identity.lock().unwrap_or_else(|p| p.into_inner()) = None;
            }
            next_ask = Instant::now();
            ask_gap = FIRST_ASK_GAP;
        }
        let now = Instant::now();
        {
            let mut s = out.lock().unwrap_or_else(|p| p.into_inner());
            *s = readings.read(now, text.as_deref(), &s.passive);
        }
        let pause = if busy.load(Ordering::Relaxed) {
            50
        } else {
            1_000
        };
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(pause)) => {}
            _ = wake.notified() => {}
        }
    }
}

/// What the server says it is: its version where it tells one, and whether
/// it is drainwatch's simulated server (which says `"simulated": true`).
/// `None` until it answers one of its engine's endpoints (a server that has
/// none is shown without one: nothing is claimed for it).
async fn ask_identity(client: &reqwest::Client, urls: &Urls) -> Option<EngineIdentity> {
    let engine = match urls.engine {
        Engine::Other => "server",
        e => e.label(),
    };
    for (path, field) in urls.engine.version_endpoints() {
        let req = client
            .get(format!("{}{path}", urls.base))
            .timeout(Duration::from_secs(2));
        let Some(v) = crate::bench::load::read_json(req).await else {
            continue;
        };
        return Some(EngineIdentity {
            engine: engine.to_owned(),
            version: v[*field].as_str().map(|s| s.chars().take(100).collect()),
            simulated: v["simulated"].as_bool() == Some(true),
        });
    }
    None
}

/// What the scrape remembers between readings.
#[derive(Debug, Default)]
struct Readings {
    /// The generated-tokens counter and when it was read, for the rate.
    last: Option<(Instant, f64)>,
    /// Readings of the latency histograms, about one a second, over the last
    /// [`LATENCY_WINDOW`]: the oldest is what the newest is compared with.
    hists: VecDeque<(Instant, Buckets, Buckets)>,
}

impl Readings {
    /// What the answer `text` (`None`: no answer) read at `now` says, after
    /// `was`, what was published before.
    fn read(&mut self, now: Instant, text: Option<&str>, was: &Passive) -> Scraped {
        let m = text.map(text::parse);
        let tokens = m.as_ref().and_then(|m| m.generated);
        let output_tok_s = self.rate(now, tokens, was.output_tok_s);
        let (ttft_p50_ms, itl_p50_ms) = self.medians(now, m.as_ref(), was);
        Scraped {
            passive: Passive {
                output_tok_s: output_tok_s.or_else(|| m.as_ref().and_then(|m| m.gen_throughput)),
                running: m.as_ref().and_then(|m| m.running),
                queued: m.as_ref().and_then(|m| m.queued),
                ttft_p50_ms,
                itl_p50_ms,
            },
            has_metrics: m.as_ref().is_some_and(|m| {
                m.running.is_some() || m.generated.is_some() || m.gen_throughput.is_some()
            }),
        }
    }

    /// Output tok/s: the generated-tokens counter's rise over at least
    /// [`RATE_WINDOW`], so fast scrapes do not make it jumpy (`was` until then).
    fn rate(&mut self, now: Instant, tokens: Option<f64>, was: Option<f64>) -> Option<f64> {
        let due = match (self.last, tokens) {
            (Some((at, _)), Some(_)) => now.duration_since(at) >= RATE_WINDOW,
            _ => true,
        };
        let rate = match (self.last, tokens) {
            _ if !due => was,
            (Some((at, before)), Some(t)) if t >= before => {
                Some((t - before) / now.duration_since(at).as_secs_f64().max(1e-3))
            }
            _ => None,
        };
        if due {
            self.last = tokens.map(|t| (now, t));
        }
        rate
    }

    /// p50 TTFT and ITL (ms) of what the server served over the last
    /// [`LATENCY_WINDOW`]; `was`'s until a new reading is due, none without metrics.
    fn medians(
        &mut self,
        now: Instant,
        m: Option<&Metrics>,
        was: &Passive,
    ) -> (Option<f64>, Option<f64>) {
        let Some(m) = m else {
            self.hists.clear();
            return (None, None);
        };
        let due = self
            .hists
            .back()
            .is_none_or(|(at, _, _)| now.duration_since(*at) >= RATE_WINDOW);
        if !due {
            return (was.ttft_p50_ms, was.itl_p50_ms);
        }
        self.hists.push_back((now, m.ttft.clone(), m.itl.clone()));
        while self.hists.len() > 2
            && self
                .hists
                .get(1)
                .is_some_and(|(at, _, _)| now.duration_since(*at) >= LATENCY_WINDOW)
        {
            self.hists.pop_front();
        }
        // The first reading holds everything since the server started: only
        // what came after it says how it serves now.
        let p50 = |before: &Buckets, now: &Buckets| quantile(before, now, 0.5).map(|s| s * 1e3);
        match self.hists.front() {
            Some((at, t, i)) if *at < now => (p50(t, &m.ttft), p50(i, &m.itl)),
            _ => (None, None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reading: `tokens` generated so far, `ttft` first tokens all within 0.1 s.
    fn text(tokens: u32, ttft: u32) -> String {
        format!(
            "sglang:generation_tokens_total {tokens}\n\
             sglang:num_running_reqs 2\n\
             sglang:time_to_first_token_seconds_bucket{{le=\"0.1\"}} {ttft}\n\
             sglang:time_to_first_token_seconds_bucket{{le=\"+Inf\"}} {ttft}\n"
        )
    }

    #[test]
    fn rates_over_a_window_and_medians_of_what_came_after_the_first_reading() {
        let mut r = Readings::default();
        let t0 = Instant::now();
        let first = r.read(t0, Some(&text(100, 5)), &Passive::default());
        assert!(first.has_metrics);
        assert_eq!(first.passive.running, Some(2));
        // Nothing to compare with yet.
        assert_eq!(first.passive.output_tok_s, None);
        assert_eq!(first.passive.ttft_p50_ms, None);
        // Too soon for a rate or a median: what was stands.
        let soon = r.read(
            t0 + Duration::from_millis(100),
            Some(&text(150, 5)),
            &first.passive,
        );
        assert_eq!(soon.passive.output_tok_s, None);
        // A second after the first: 500 tokens; 10 first tokens within 0.1 s.
        let later = r.read(
            t0 + Duration::from_secs(1),
            Some(&text(600, 15)),
            &soon.passive,
        );
        assert_eq!(later.passive.output_tok_s, Some(500.0));
        let p50 = later.passive.ttft_p50_ms.expect("a median");
        assert!((p50 - 50.0).abs() < 1e-9, "{p50}");
        // No answer: nothing is known.
        let gone = r.read(t0 + Duration::from_secs(2), None, &later.passive);
        assert!(!gone.has_metrics);
        assert_eq!(gone.passive, Passive::default());
    }
}
