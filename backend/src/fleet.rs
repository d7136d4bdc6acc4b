//! `drainwatch hub`: one view of many agents. The hub holds no GPU state of
//! its own: it keeps one `/ws` connection per agent (with that agent's token,
//! so a viewer token gives a read-only fleet), folds what each agent sends into
//! a compact [`AgentView`], and serves the [`Fleet`] at `/api/fleet` and on
//! `/ws` (each change at once, at most [`PUSH_HZ`] times a second, or fewer
//! where a browser asks). An
//! agent that cannot be reached is said to be so, with when it was last heard
//! from, and is reconnected to with a backoff. The UI's page, at `/fleet`,
//! shows it (`frontend/src/fleet.rs`).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use axum::Router;
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Query, State};
use axum::http::{HeaderMap, Uri};
use axum::response::{IntoResponse, Json, Redirect};
use axum::routing::get;
use serde::Deserialize;
use shared::fleet::{AgentView, Fleet, GpuBrief, ServerBrief};
use shared::protocol::ServerMsg;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::cli::Remote;
use crate::cli::client::Client;
use crate::clock::now_ms;

/// Fleet pushes per second to a browser at most, by default: each change is
/// sent at once unless the last push was sooner than this allows. A browser
/// may ask for fewer (`/ws?max_hz=1`): its bandwidth is then bounded by the
/// fleet's size and that rate, not by how fast the agents sample.
pub const PUSH_HZ: u32 = 20;
/// Agents one hub holds at most.
const MAX_AGENTS: usize = 500;
/// The longest wait before trying an unreachable agent again.
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// `drainwatch hub`'s arguments.
#[derive(Debug, Clone, clap::Args)]
pub struct HubArgs {
    /// The fleet's config: `[[agent]]` tables with `name`, `url` and, where
    /// the agent wants one, `token_file`.
    #[arg(long)]
    pub config: PathBuf,
    /// Address to serve the fleet view on.
    #[arg(long, env = "DRAINWATCH_HUB_BIND", default_value = "127.0.0.1:7880")]
    pub bind: SocketAddr,
}

/// One agent as configured.
#[derive(Debug, Clone)]
pub struct AgentConfig {
    pub name: String,
    pub url: String,
    /// Read from `token_file` at start; never shown or logged.
    token: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFleet {
    #[serde(default)]
    agent: Vec<RawAgent>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAgent {
    name: String,
    url: String,
    token_file: Option<PathBuf>,
}

/// Reads and checks the fleet config whole: a bad entry names itself and
/// nothing starts.
pub fn load(path: &Path) -> Result<Vec<AgentConfig>, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let raw: RawFleet =
        toml::from_str(&text).map_err(|e| format!("{}: {}", path.display(), e.message()))?;
    if raw.agent.is_empty() {
        return Err(format!("{}: no [[agent]]", path.display()));
    }
    if raw.agent.len() > MAX_AGENTS {
        return Err(format!(
            "{}: {} agents, at most {MAX_AGENTS}",
            path.display(),
            raw.agent.len()
        ));
    }
    let mut out: Vec<AgentConfig> = Vec::new();
    for a in raw.agent {
        let name = a.name.trim().to_owned();
        if name.is_empty()
            || name.len() > 64
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        {
            return Err(format!(
                "agent `{}`: a name is 1–64 letters, digits, `-`, `_` or `.`",
                a.name
            ));
        }
        if out.iter().any(|o| o.name == name) {
            return Err(format!("agent `{name}` is listed twice"));
        }
        let url = a.url.trim().to_owned();
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            return Err(format!(
                "agent `{name}`: url must start with http:// or https://"
            ));
        }
        // A relative token file is beside the config.
        let token_file = a
            .token_file
            .map(|f| path.parent().map_or(f.clone(), |dir| dir.join(&f)));
        let token = match token_file {
            None => None,
            Some(f) => Some(
                std::fs::read_to_string(&f)
                    .map_err(|e| format!("agent `{name}`: cannot read its token_file: {e}"))?
                    .trim()
                    .to_owned(),
            )
            .filter(|t| !t.is_empty()),
        };
        out.push(AgentConfig { name, url, token });
    }
    Ok(out)
}

/// `url` as the fleet page may show it: without a user or password.
fn shown_url(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(mut u) => {
            let _ = u.set_username("");
            let _ = u.set_password(None);
            u.to_string()
        }
        Err(_) => String::new(),
    }
}

/// The fleet's state, one slot per agent, written by the agents' tasks.
#[derive(Debug, Clone)]
struct Shared {
    agents: Arc<Vec<RwLock<AgentView>>>,
    /// Bumped on every change, so pushes happen only when something changed.
    changed: watch::Sender<u64>,
}

impl Shared {
    fn fleet(&self) -> Fleet {
        Fleet {
            at_ms: now_ms(),
            agents: self
                .agents
                .iter()
                .map(|a| a.read().unwrap_or_else(|p| p.into_inner()).clone())
                .collect(),
        }
    }

    fn update(&self, i: usize, f: impl FnOnce(&mut AgentView)) {
        if let Some(slot) = self.agents.get(i) {
            f(&mut slot.write().unwrap_or_else(|p| p.into_inner()));
            self.changed.send_modify(|n| *n = n.wrapping_add(1));
        }
    }
}

/// Runs the hub until `stop` resolves (Ctrl-C or SIGTERM, from `main`).
pub async fn serve(
    args: HubArgs,
    stop: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let agents = load(&args.config).map_err(anyhow::Error::msg)?;
    let listener = TcpListener::bind(args.bind).await?;
    let shared = Shared {
        agents: Arc::new(
            agents
                .iter()
                .map(|a| {
                    RwLock::new(AgentView {
                        name: a.name.clone(),
                        url: shown_url(&a.url),
                        error: Some("not connected yet".to_owned()),
                        ..AgentView::default()
                    })
                })
                .collect(),
        ),
        changed: watch::channel(0).0,
    };
    for (i, a) in agents.into_iter().enumerate() {
        tokio::spawn(follow(shared.clone(), i, a));
    }
    let app = Router::new()
        .route("/api/fleet", get(fleet))
        .route("/ws", get(ws))
        .route("/healthz", get(|| async { "ok" }))
        // The UI's own page, in its fleet mode.
        .route("/", get(|| async { Redirect::to("/fleet") }))
        .route(
            "/fleet",
            get(|headers: HeaderMap| crate::api::assets::serve(Uri::from_static("/"), headers)),
        )
        .fallback(crate::api::assets::serve);
    let app = crate::api::browser_headers(app).with_state(shared);
    println!(
        "drainwatch hub listening on http://{}",
        listener.local_addr()?
    );
    axum::serve(listener, app)
        .with_graceful_shutdown(stop)
        .await?;
    Ok(())
}

async fn fleet(State(s): State<Shared>) -> Json<Fleet> {
    Json(s.fleet())
}

#[derive(Debug, Deserialize)]
struct PushQuery {
    max_hz: Option<u32>,
}

async fn ws(
    State(s): State<Shared>,
    Query(q): Query<PushQuery>,
    headers: HeaderMap,
    up: WebSocketUpgrade,
) -> axum::response::Response {
    // A page of another site may not read the fleet through a browser.
    if !same_origin(&headers) {
        return (
            axum::http::StatusCode::FORBIDDEN,
            "a WebSocket from another origin",
        )
            .into_response();
    }
    let hz = q.max_hz.unwrap_or(PUSH_HZ).clamp(1, PUSH_HZ);
    up.on_upgrade(move |socket| push(s, socket, hz))
        .into_response()
}

/// No `Origin` (not a browser), or one whose host is the one asked.
fn same_origin(headers: &HeaderMap) -> bool {
    let Some(origin) = headers.get(axum::http::header::ORIGIN) else {
        return true;
    };
    let host = headers
        .get(axum::http::header::HOST)
        .and_then(|h| h.to_str().ok());
    let origin_host = origin
        .to_str()
        .ok()
        .and_then(|o| o.split_once("://"))
        .map(|(_, h)| h);
    host.is_some() && origin_host == host
}

/// The fleet to one browser: at once, then on each change, at most `hz`
/// times a second.
async fn push(s: Shared, mut socket: WebSocket, hz: u32) {
    let mut changed = s.changed.subscribe();
    let mut tick = tokio::time::interval(Duration::from_millis(1_000 / u64::from(hz)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        // What changes from here on is the next push's.
        changed.mark_unchanged();
        let Ok(text) = serde_json::to_string(&s.fleet()) else {
            return;
        };
        if socket.send(Message::Text(text.into())).await.is_err() {
            return;
        }
        tick.tick().await;
        tokio::select! {
            c = changed.changed() => if c.is_err() { return },
            msg = socket.recv() => match msg {
                Some(Ok(Message::Close(_))) | None | Some(Err(_)) => return,
                _ => {}
            },
        }
    }
}

/// Follows one agent for as long as the hub runs: connects, folds each
/// message into its view, and after a failure says so and tries again.
async fn follow(s: Shared, i: usize, a: AgentConfig) {
    let remote = Remote {
        url: a.url.clone(),
        token: a.token.clone(),
        json: false,
    };
    const FIRST: Duration = Duration::from_millis(250);
    let mut backoff = FIRST;
    loop {
        let mut connected = false;
        let error = match connect(&s, i, &remote, &mut connected).await {
            Ok(()) => "the agent closed the connection".to_owned(),
            Err(e) => e,
        };
        // A connection that was up starts the backoff over.
        if connected {
            backoff = FIRST;
        }
        tracing::debug!(agent = %a.name, %error, "agent unreachable");
        s.update(i, |v| {
            v.reachable = false;
            v.error = Some(error);
        });
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

/// One connection to an agent, until it ends.
async fn connect(
    s: &Shared,
    i: usize,
    remote: &Remote,
    connected: &mut bool,
) -> Result<(), String> {
    let client = Client::new(remote).map_err(|e| e.message)?;
    let mut events = client.events().await.map_err(|e| e.message)?;
    *connected = true;
    s.update(i, |v| {
        v.reachable = true;
        v.error = None;
        v.last_seen_ms = Some(now_ms());
    });
    loop {
        let Some((_, msg)) = events.next().await.map_err(|e| e.message)? else {
            return Ok(());
        };
        s.update(i, |v| {
            v.last_seen_ms = Some(now_ms());
            fold(v, msg);
        });
    }
}

/// What one agent message changes in its view.
fn fold(v: &mut AgentView, msg: ServerMsg) {
    match msg {
        ServerMsg::Snapshot(snap) => {
            v.hostname = Some(snap.host.hostname.clone());
            v.simulated = Some(snap.host.nvml.is_simulated());
            v.version = Some(snap.host.version.clone());
            if let Some(l) = &snap.latest {
                v.gpus = l.gpus.iter().map(GpuBrief::of).collect();
                v.sample_at_ms = Some(l.at_ms);
            }
            v.server = snap.server.as_ref().map(ServerBrief::of);
        }
        ServerMsg::Sample(sample) => {
            v.gpus = sample.gpus.iter().map(GpuBrief::of).collect();
            v.sample_at_ms = Some(sample.at_ms);
        }
        ServerMsg::Server(status) => v.server = Some(ServerBrief::of(&status)),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(text: &str) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("fleet.toml");
        std::fs::write(&path, text).expect("write");
        (dir, path)
    }

    #[test]
    fn a_fleet_config_is_checked_whole() {
        let (dir, path) = write(
            r#"
[[agent]]
name = "gpu-07"
url = "http://10.0.0.7:7878"
[[agent]]
name = "gpu-08"
url = "https://gpu-08.example:7878"
token_file = "t"
"#,
        );
        // A relative token file is beside the config.
        std::fs::write(dir.path().join("t"), "secret\n").expect("token");
        let agents = load(&path).expect("valid");
        assert_eq!(agents.len(), 2);
        assert_eq!(agents[1].token.as_deref(), Some("secret"));
        assert_eq!(
            shown_url("https://hub:pw@gpu-08.example:7878/"),
            "https://gpu-08.example:7878/"
        );
        for (bad, says) in [
            ("", "no [[agent]]"),
            (
                "[[agent]]\nname = \"a b\"\nurl = \"http://x\"\n",
                "a name is",
            ),
            ("[[agent]]\nname = \"a\"\nurl = \"ftp://x\"\n", "http://"),
            (
                "[[agent]]\nname = \"a\"\nurl = \"http://x\"\n[[agent]]\nname = \"a\"\nurl = \"http://y\"\n",
                "listed twice",
            ),
            (
                "[[agent]]\nname = \"a\"\nurl = \"http://x\"\nport = 1\n",
                "unknown field",
            ),
            (
                "[[agent]]\nname = \"a\"\nurl = \"http://x\"\ntoken_file = \"/nonexistent\"\n",
                "cannot read its token_file",
            ),
        ] {
            let (_d, p) = write(bad);
            let e = load(&p).expect_err(bad);
            assert!(e.contains(says), "{bad}: {e}");
            assert!(!e.contains("secret"));
        }
    }
}
