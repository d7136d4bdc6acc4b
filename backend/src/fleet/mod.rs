//! `drainwatch hub`: one view of many agents, and the restarts that span
//! them (`coordinate.rs`, recorded in `records.rs`; the config: `config.rs`). The hub holds no GPU state of
//! its own: it keeps one `/ws` connection per agent (with that agent's token,
//! so a viewer token gives a read-only fleet), folds what each agent sends into
//! a compact [`AgentView`], and serves the [`Fleet`] at `/api/fleet` and on
//! `/ws` (each change at once, at most [`PUSH_HZ`] times a second, or fewer
//! where a browser asks). An
//! agent that cannot be reached is said to be so, with when it was last heard
//! from, and is reconnected to with a backoff. The UI's page, at `/fleet`,
//! shows it (`frontend/src/fleet.rs`).

pub mod config;
pub mod coordinate;
mod metrics;
mod proxy;
mod recover;
mod view;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use axum::Extension;
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::{FromRef, Path, Query, State};
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Json, Redirect, Response};
use axum::routing::{any, get, post};
use serde::{Deserialize, Serialize};
use shared::fleet::{
    AgentView, CoordRecord, CoordRequest, CoordTarget, Fleet, GpuBrief, ServerBrief,
};
use shared::protocol::ServerMsg;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::auth::{Auth, AuthConfig, Caller};
use crate::cli::Remote;
use crate::cli::client::Client;
use crate::clock::now_ms;
use crate::http::extract::Body;
use crate::http::gate;
use crate::http::{ApiError, Route, Table};
use crate::store::hub::{MAX_LIST, Records};
use config::AgentConfig;
use coordinate::{Coordinator, Refused};

/// Fleet pushes per second to a browser at most, by default: each change is
/// sent at once unless the last push was sooner than this allows. A browser
/// may ask for fewer (`/ws?max_hz=1`): its bandwidth is then bounded by the
/// fleet's size and that rate, not by how fast the agents sample.
pub const PUSH_HZ: u32 = 20;
/// Browser sockets the hub holds at most (its own `/ws` and the agents'
/// passed through).
const MAX_SOCKETS: usize = 256;
/// How long a stopping hub waits for its coordinated restart in flight.
const SHUTDOWN_WAIT: Duration = Duration::from_secs(600);
/// An agent silent this long is taken for lost and reconnected to.
const AGENT_SILENCE: Duration = Duration::from_secs(30);
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
    /// Who may use the hub: the same token file as an agent's `--auth`
    /// (`drainwatch token`). Without it the hub answers loopback only, and
    /// every caller may operate.
    #[arg(long, env = "DRAINWATCH_HUB_AUTH")]
    pub auth: Option<PathBuf>,
    /// Where the hub keeps its coordinated restarts' records (`hub.db`).
    #[arg(
        long,
        env = "DRAINWATCH_HUB_DATA_DIR",
        default_value = "drainwatch-hub-data"
    )]
    pub data_dir: PathBuf,
}

/// What the hub's handlers share.
#[derive(Debug, Clone)]
struct HubState {
    shared: Shared,
    auth: Arc<Auth>,
    coord: Arc<Coordinator>,
    /// For the agents' API through the hub (`proxy.rs`).
    http: reqwest::Client,
    /// The browsers' sockets, the hub's own and those passed to agents.
    sockets: Arc<tokio::sync::Semaphore>,
}

impl FromRef<HubState> for Shared {
    fn from_ref(s: &HubState) -> Self {
        s.shared.clone()
    }
}

impl FromRef<HubState> for Arc<Auth> {
    fn from_ref(s: &HubState) -> Self {
        Arc::clone(&s.auth)
    }
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
    let cfg = Arc::new(config::load(&args.config)?);
    let auth = match &args.auth {
        Some(path) => Auth::new(AuthConfig::load(path)?),
        None if !args.bind.ip().is_loopback() => anyhow::bail!(
            "refusing to listen on {} without authentication: anyone who can reach it could restart every server of the fleet. \
             Pass a token file with --auth (see docs/deploy.md), or bind 127.0.0.1",
            args.bind
        ),
        None => Auth::open(),
    };
    let records = Records::open(&args.data_dir)?;
    // What a hub that stopped left running is taken up before anything new.
    let unfinished = records.unfinished()?;
    let agents = cfg.agents.clone();
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
    let state = HubState {
        shared: shared.clone(),
        auth: Arc::new(auth),
        coord: Arc::new(Coordinator::new(Arc::clone(&cfg), records)),
        sockets: Arc::new(tokio::sync::Semaphore::new(MAX_SOCKETS)),
        http: reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(Duration::from_secs(10))
            .timeout(Duration::from_secs(120))
            .build()?,
    };
    if let Some(guard) = state.coord.begin_recovery(&unfinished) {
        let coord = Arc::clone(&state.coord);
        tokio::spawn(async move { coord.recover(unfinished, guard).await });
    }
    let app = table()
        .router()
        .fallback(crate::http::assets::serve)
        .layer(axum::middleware::from_fn_with_state(
            Arc::clone(&state.auth),
            gate::gate,
        ))
        .layer(axum::middleware::from_fn_with_state(
            Arc::clone(&state.auth),
            gate::forwarded,
        ))
        .layer(axum::middleware::from_fn(
            crate::http::refusals::json_errors,
        ))
        .layer(axum::extract::DefaultBodyLimit::max(64 * 1024))
        .layer(axum::middleware::from_fn(
            crate::http::refusals::close_after_refused_body,
        ));
    let coord = Arc::clone(&state.coord);
    let app = crate::http::browser_headers(app).with_state(state);
    println!(
        "drainwatch hub listening on http://{}",
        listener.local_addr()?
    );
    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .with_graceful_shutdown(stop)
    .await?;
    // A group left half launched hangs: the operation in flight ends first.
    coord.wait_idle(SHUTDOWN_WAIT).await;
    Ok(())
}

async fn fleet(State(s): State<Shared>) -> Json<Fleet> {
    Json(s.fleet())
}

/// `GET /api/fleet/panel`: the fleet page's rows, as HTML (`view.rs`), from
/// the same state as `/api/fleet`.
async fn fleet_panel(State(s): State<Shared>) -> Response {
    crate::http::html_fragment(view::fleet_markup(&s.fleet(), now_ms()))
}

async fn not_found() -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, "no such API on the hub")
}

/// The person behind a request at the hub, as the agents' audit will name
/// them: their token's name, or their address without authentication.
fn person(c: &Caller) -> String {
    let name = c.name.clone().unwrap_or_else(|| c.peer.ip().to_string());
    // As an agent takes it (`auth::for_whom`): a token name may hold more.
    let plain: String = name
        .chars()
        .map(|ch| {
            if crate::auth::for_whom_char(ch) {
                ch
            } else {
                '_'
            }
        })
        .take(64)
        .collect();
    match plain.trim() {
        "" => "someone".to_owned(),
        p => p.to_owned(),
    }
}

/// `GET /api/groups`: the groups and deployments the config declares.
async fn groups(State(s): State<HubState>) -> Json<Vec<CoordTarget>> {
    Json(s.coord.config().targets())
}

#[derive(Debug, Serialize)]
struct Begun {
    id: i64,
}

/// `POST /api/groups/{name}/restart`: a coordinated restart of a group or a
/// deployment, run in the background; 202 with its record's id.
async fn restart_group(
    State(s): State<HubState>,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
    Body(req): Body<CoordRequest>,
) -> Response {
    match s.coord.begin(&name, req, person(&caller)).await {
        Ok(id) => (StatusCode::ACCEPTED, Json(Begun { id })).into_response(),
        Err(Refused::NotFound(m)) => ApiError::new(StatusCode::NOT_FOUND, m).into_response(),
        Err(Refused::BadRequest(m)) => ApiError::new(StatusCode::BAD_REQUEST, m).into_response(),
        Err(Refused::Busy(m)) => ApiError::new(StatusCode::CONFLICT, m).into_response(),
        Err(Refused::Unreachable(m)) => ApiError::new(StatusCode::BAD_GATEWAY, m).into_response(),
        Err(Refused::Internal(m)) => {
            ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, m).into_response()
        }
    }
}

/// `POST /api/coordinated/{id}/cancel`: the running coordinated restart
/// stops at its next safe point, before a launch, and ends cancelled (202).
async fn cancel_coordinated(
    State(s): State<HubState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Response {
    let Ok(id) = id.parse::<i64>() else {
        return ApiError::new(
            StatusCode::BAD_REQUEST,
            "a coordinated restart's id is a number",
        )
        .into_response();
    };
    match s.coord.cancel(id, &person(&caller)) {
        Ok(()) => (StatusCode::ACCEPTED, Json(Begun { id })).into_response(),
        Err(Refused::NotFound(m)) => ApiError::new(StatusCode::NOT_FOUND, m).into_response(),
        Err(Refused::Busy(m)) => ApiError::new(StatusCode::CONFLICT, m).into_response(),
        Err(Refused::BadRequest(m) | Refused::Unreachable(m) | Refused::Internal(m)) => {
            ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, m).into_response()
        }
    }
}

/// The hub's HTTP surface, route by route, with the query parameters each
/// reads (what goes to an agent is the agent's to check): the router is
/// built from it, and the hub's walk covers it.
fn table() -> Table<HubState> {
    use crate::http::routes::{NONE, Query as Q, Query::Forwarded, Query::Only};
    const GET: &[(&str, Q)] = &[("GET", NONE)];
    const POST: &[(&str, Q)] = &[("POST", NONE)];
    gate::session_routes(Table::default())
        .route("/api/fleet", get(fleet), GET)
        .route("/api/fleet/panel", get(fleet_panel), GET)
        .route("/api/groups", get(groups), GET)
        .route("/api/groups/{name}/restart", post(restart_group), POST)
        .route(
            "/api/coordinated",
            get(coordinated),
            &[("GET", Only(&["limit"]))],
        )
        .route("/api/coordinated/panel", get(coordinated_panel), GET)
        .route("/api/coordinated/{id}", get(coordinated_one), GET)
        .route(
            "/api/coordinated/{id}/cancel",
            post(cancel_coordinated),
            POST,
        )
        .route("/metrics", get(metrics::serve), GET)
        .route("/api/{*rest}", any(not_found), &[("*", NONE)])
        // Each host's own dashboard, through the hub.
        .route("/agents/{name}", get(proxy::bare), GET)
        // The agent's page: its deep links are the page's to read.
        .route("/agents/{name}/", get(proxy::index), &[("GET", Forwarded)])
        .route("/agents/{name}/api/session", get(gate::session), GET)
        .route("/agents/{name}/api/logout", post(gate::logout), POST)
        .route("/agents/{name}/api/login", any(not_found), &[("*", NONE)])
        .route(
            "/agents/{name}/api/{*rest}",
            any(proxy::api),
            &[("*", Forwarded)],
        )
        .route("/agents/{name}/ws", get(proxy::ws), &[("GET", Forwarded)])
        .route(
            "/agents/{name}/{*rest}",
            get(proxy::files),
            &[("GET", Forwarded)],
        )
        .route("/ws", get(ws), &[("GET", Only(&["max_hz"]))])
        .route("/healthz", get(|| async { "ok" }), GET)
        // The UI's own page, in its fleet mode.
        .route("/", get(|| async { Redirect::to("/fleet") }), GET)
        .route(
            "/fleet",
            get(|headers: HeaderMap| crate::http::assets::serve(Uri::from_static("/"), headers)),
            &[("GET", Forwarded)],
        )
}

/// Every route of the hub, as its router answers them.
pub fn routes() -> Vec<Route> {
    table().routes()
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Page {
    limit: Option<u32>,
}

/// `GET /api/coordinated`: the newest coordinated restarts, newest first.
async fn coordinated(
    State(s): State<HubState>,
    Query(p): Query<Page>,
) -> Result<Json<Vec<CoordRecord>>, ApiError> {
    // Out of range is refused, as on the agent, not quietly clamped.
    let n = match p.limit.unwrap_or(50) {
        n @ 1.. if n <= MAX_LIST => n,
        _ => {
            return Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                format!("limit must be from 1 to {}", MAX_LIST),
            ));
        }
    };
    s.coord.records().list(n).map(Json).map_err(unreadable)
}

/// A failed read of the hub's records: the log says why, the caller only that
/// it failed.
fn unreadable(e: crate::store::StoreError) -> ApiError {
    tracing::error!(error = %e, "reading the hub's records failed");
    ApiError::new(
        StatusCode::INTERNAL_SERVER_ERROR,
        "reading the hub's records failed; its log says why",
    )
}

/// `GET /api/coordinated/panel`: the fleet page's panel of coordinated
/// restarts, as HTML (`view.rs`); its controls only for an operator.
async fn coordinated_panel(
    State(s): State<HubState>,
    Extension(caller): Extension<Caller>,
) -> Result<Response, ApiError> {
    let records = s.coord.records().list(8).map_err(unreadable)?;
    let html = view::panel(
        &s.coord.config().targets(),
        &records,
        caller.role.may_operate(),
        now_ms(),
    );
    Ok(crate::http::html_fragment(html))
}

/// `GET /api/coordinated/{id}`.
async fn coordinated_one(
    State(s): State<HubState>,
    Path(id): Path<String>,
) -> Result<Json<CoordRecord>, ApiError> {
    let id: i64 = id
        .parse()
        .map_err(|_| ApiError::new(StatusCode::BAD_REQUEST, "a record's id is a number"))?;
    match s.coord.records().get(id) {
        Ok(Some(r)) => Ok(Json(r)),
        Ok(None) => Err(ApiError::new(
            StatusCode::NOT_FOUND,
            format!("no coordinated restart #{id}"),
        )),
        Err(e) => Err(unreadable(e)),
    }
}

#[derive(Debug, Deserialize)]
struct PushQuery {
    max_hz: Option<u32>,
}

async fn ws(
    State(hub): State<HubState>,
    Query(q): Query<PushQuery>,
    up: WebSocketUpgrade,
) -> axum::response::Response {
    let s = hub.shared.clone();
    let Ok(permit) = Arc::clone(&hub.sockets).try_acquire_owned() else {
        return ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("the hub serves {MAX_SOCKETS} sockets at most, and has them"),
        )
        .into_response();
    };
    // (A page of another site may not: the gate refuses its Origin on /ws.)
    let hz = q.max_hz.unwrap_or(PUSH_HZ).clamp(1, PUSH_HZ);
    up.max_message_size(1024)
        .on_upgrade(move |socket| async move {
            let _permit = permit;
            push(s, socket, hz).await;
        })
        .into_response()
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
    let remote = a.remote();
    const FIRST: Duration = Duration::from_millis(250);
    let mut backoff = FIRST;
    loop {
        let mut connected = false;
        let error = match connect(&s, i, &remote, &mut connected).await {
            Ok(()) => "the agent closed the connection".to_owned(),
            Err(e) => e.to_string(),
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

/// Why the link to an agent broke.
#[derive(Debug, thiserror::Error)]
enum Unlinked {
    /// It could not be reached, or refused: the client's words.
    #[error("{}", .0.message)]
    Call(#[from] crate::cli::CliError),
    #[error("no message for {} s", .0.as_secs())]
    Silent(Duration),
}

/// One connection to an agent, until it ends.
async fn connect(
    s: &Shared,
    i: usize,
    remote: &Remote,
    connected: &mut bool,
) -> Result<(), Unlinked> {
    let client = Client::new(remote)?;
    let mut events = client.events().await?;
    *connected = true;
    s.update(i, |v| {
        v.reachable = true;
        v.error = None;
        v.last_seen_ms = Some(now_ms());
    });
    loop {
        let next = tokio::time::timeout(AGENT_SILENCE, events.next())
            .await
            .map_err(|_| Unlinked::Silent(AGENT_SILENCE))?;
        let Some((_, msg)) = next? else {
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
    #[test]
    fn a_shown_url_carries_no_user_or_password() {
        assert_eq!(
            super::shown_url("https://hub:pw@gpu-08.example:7878/"),
            "https://gpu-08.example:7878/"
        );
    }
}
