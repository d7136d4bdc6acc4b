//! `[[webhooks]]`: where campaign summaries go. Each is named (the name is
//! what views and logs show: a URL may carry a token), has an http(s) URL,
//! and a format (`json`, drainwatch's own; `slack`, `{"text": …}`). The
//! campaign runner's `campaign::webhook` sends to them.

use serde::Deserialize;

use crate::config::Problem;

/// How a hook wants its message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HookFormat {
    /// drainwatch's own JSON (`campaign::webhook::payload`).
    Json,
    /// `{"text": "…"}`, which Slack's incoming webhooks (and Mattermost's,
    /// and Discord's `/slack` endpoint) take.
    Slack,
}

/// One `[[webhooks]]` entry of the server's config.
#[derive(Clone)]
pub struct Hook {
    pub name: String,
    pub url: reqwest::Url,
    pub format: HookFormat,
}

impl std::fmt::Debug for Hook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The URL may carry a token: never printed.
        f.debug_struct("Hook")
            .field("name", &self.name)
            .field("format", &self.format)
            .finish_non_exhaustive()
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawWebhook {
    name: Option<String>,
    url: String,
    #[serde(default = "json")]
    format: HookFormat,
}

fn json() -> HookFormat {
    HookFormat::Json
}

/// The checked hooks; an error names the entry (never its URL).
pub(super) fn check(raw: Vec<RawWebhook>) -> Result<Vec<Hook>, Problem> {
    if raw.len() > 16 {
        return Err(Problem::refused("webhooks", "at most 16"));
    }
    let mut out: Vec<Hook> = Vec::new();
    for (i, w) in raw.into_iter().enumerate() {
        let at = format!("webhooks #{}", i + 1);
        let url = reqwest::Url::parse(w.url.trim())
            .map_err(|_| Problem::refused(&at, "url is not a URL"))?;
        if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
            return Err(Problem::refused(
                at,
                "url must be an http:// or https:// URL with a host",
            ));
        }
        let name = match w.name.map(|n| n.trim().to_owned()) {
            Some(n) if !n.is_empty() && n.len() <= 64 && !n.chars().any(char::is_control) => n,
            Some(_) => {
                return Err(Problem::refused(
                    at,
                    "name must be 1–64 printable characters",
                ));
            }
            // The host only: the path and query may hold a token.
            None => url.host_str().unwrap_or("webhook").to_owned(),
        };
        if out.iter().any(|h| h.name == name) {
            return Err(Problem::refused(
                at,
                format!("another webhook is already named `{name}`"),
            ));
        }
        out.push(Hook {
            name,
            url,
            format: w.format,
        });
    }
    Ok(out)
}
