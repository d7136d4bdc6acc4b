//! Telling the team: when a campaign ends (or pauses for a person), each
//! webhook of the server's config gets its summary — generic JSON, or the
//! Slack-compatible `{"text": …}` — POSTed in the background, three tries at
//! most, never following a redirect. A hook's URL is a secret (Slack's hold
//! their token): it is never shown or logged; hooks are named.

use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use shared::HostInfo;
use shared::campaign::{Campaign, analysis};

pub use crate::config::file::{Hook, HookFormat as Format};

/// What happened, as hooks are told.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Event {
    /// The campaign ended: done, cancelled or stopped.
    Finished,
    /// It paused and waits for a person (a foreign process holds GPU memory).
    Paused,
    /// An operator tested the hooks.
    Test,
}

/// One hook's answer to a test.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Delivery {
    pub name: String,
    pub ok: bool,
    /// The HTTP status it answered, if it answered.
    pub status: Option<u16>,
    /// Why not, without the URL.
    pub error: Option<String>,
}

/// The configured hooks and the client that calls them.
#[derive(Debug, Clone)]
pub struct Webhooks {
    hooks: Arc<Vec<Hook>>,
    client: reqwest::Client,
}

/// How long one delivery may take.
const TIMEOUT: Duration = Duration::from_secs(10);
/// Tries per delivery, and the pause before each retry.
const BACKOFF: [Duration; 2] = [Duration::from_secs(1), Duration::from_secs(4)];

impl Webhooks {
    pub fn new(hooks: Vec<Hook>) -> Self {
        let client = reqwest::Client::builder()
            .timeout(TIMEOUT)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap_or_default();
        Self {
            hooks: Arc::new(hooks),
            client,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.hooks.is_empty()
    }

    /// Sends `event` about `campaign` (as shown: redacted) to every hook, in
    /// the background.
    pub fn send(&self, event: Event, campaign: Campaign, host: HostInfo) {
        for hook in self.hooks.iter().cloned() {
            let body = body(hook.format, event, Some(&campaign), &host);
            let client = self.client.clone();
            tokio::spawn(async move {
                let mut last = deliver(&client, &hook, &body).await;
                for pause in BACKOFF {
                    if last.ok {
                        break;
                    }
                    tokio::time::sleep(pause).await;
                    last = deliver(&client, &hook, &body).await;
                }
                match (last.ok, last.error) {
                    (true, _) => tracing::info!(hook = %hook.name, ?event, "webhook delivered"),
                    (false, e) => {
                        tracing::warn!(hook = %hook.name, ?event, status = ?last.status, error = ?e, "webhook not delivered")
                    }
                }
            });
        }
    }

    /// Sends a test message to every hook, once each; says how each answered.
    pub async fn test(&self, host: &HostInfo) -> Vec<Delivery> {
        let mut out = Vec::new();
        for hook in self.hooks.iter() {
            let body = body(hook.format, Event::Test, None, host);
            out.push(deliver(&self.client, hook, &body).await);
        }
        out
    }
}

async fn deliver(client: &reqwest::Client, hook: &Hook, body: &serde_json::Value) -> Delivery {
    let sent = client.post(hook.url.clone()).json(body).send().await;
    match sent {
        Ok(resp) => {
            let status = resp.status();
            Delivery {
                name: hook.name.clone(),
                ok: status.is_success(),
                status: Some(status.as_u16()),
                error: (!status.is_success()).then(|| format!("it answered {status}")),
            }
        }
        Err(e) => Delivery {
            name: hook.name.clone(),
            ok: false,
            status: None,
            error: Some(e.without_url().to_string()),
        },
    }
}

/// The message for a hook of `format`.
fn body(format: Format, event: Event, c: Option<&Campaign>, host: &HostInfo) -> serde_json::Value {
    match format {
        Format::Json => payload(event, c, host),
        Format::Slack => serde_json::json!({ "text": text(event, c, host) }),
    }
}

/// One paragraph for people: what ended, how it went, the best set and the
/// flags that mattered.
pub fn text(event: Event, c: Option<&Campaign>, host: &HostInfo) -> String {
    let sim = if host.nvml.is_simulated() {
        " (simulated host)"
    } else {
        ""
    };
    let Some(c) = c else {
        return format!(
            "drainwatch on {}{sim}: webhook test — campaign summaries will arrive here",
            host.hostname
        );
    };
    let i = &c.info;
    let mut out = format!(
        "drainwatch on {}{sim}: campaign “{}” (#{}) {}",
        host.hostname,
        i.name,
        i.id,
        match event {
            Event::Paused => "paused and needs a person".to_owned(),
            _ => i.state.label().to_owned(),
        }
    );
    if let Some(r) = &i.reason {
        out.push_str(&format!(" — {r}"));
    }
    out.push_str(&format!(
        ". {} steps: {} measured, {} reused, {} failed, {} skipped.",
        i.steps, i.done, i.reused, i.failed, i.skipped
    ));
    if let Some(best) = analysis::best(c)
        && let Some(r) = &best.result
    {
        let delta = c
            .baseline()
            .and_then(|b| analysis::delta_pct(best, b))
            .map(|d| format!(", {d:+.1} % vs baseline"))
            .unwrap_or_default();
        out.push_str(&format!(
            " Best: step {}{} at {:.1} {}{delta}.",
            best.index + 1,
            best.label
                .as_deref()
                .map(|l| format!(" “{l}”"))
                .unwrap_or_default(),
            r.metric().median,
            r.metric_unit()
        ));
        if let Some(t) = i.target {
            out.push_str(&format!(
                " Target {t} {}: {}.",
                r.metric_unit(),
                if r.metric().median >= t {
                    "reached"
                } else {
                    "not reached"
                }
            ));
        }
    }
    let effects: Vec<String> = analysis::attribution(c)
        .iter()
        .filter(|e| e.median_pct.is_some())
        .map(analysis::Effect::line)
        .collect();
    if !effects.is_empty() {
        out.push_str(&format!(" Effects: {}.", effects.join("; ")));
    }
    out
}

/// drainwatch's own JSON: the event, the host, the campaign's header, the
/// baseline and the best step with their metric, each flag's effect, and the
/// same text Slack gets.
pub fn payload(event: Event, c: Option<&Campaign>, host: &HostInfo) -> serde_json::Value {
    let step = |s: &shared::campaign::Step| {
        serde_json::json!({
            "index": s.index,
            "label": s.label,
            "flagset": s.flagset,
            "flags": s.flags,
            "metric": s.result.as_ref().map(|r| r.metric().median),
            "unit": s.result.as_ref().map(|r| r.metric_unit()),
            "run_id": s.result.as_ref().map(|r| r.run_id),
        })
    };
    serde_json::json!({
        "event": event,
        "host": host.hostname,
        "simulated": host.nvml.is_simulated(),
        "campaign": c.map(|c| &c.info),
        "baseline": c.and_then(|c| c.baseline()).map(step),
        "best": c.and_then(analysis::best).map(step),
        "best_delta_pct": c.and_then(|c| {
            let best = analysis::best(c)?;
            analysis::delta_pct(best, c.baseline()?)
        }),
        "effects": c.map(analysis::attribution).unwrap_or_default(),
        "text": text(event, c, host),
    })
}
