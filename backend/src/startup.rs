//! Builds the application from a [`Config`]: binds the port (so a busy port fails
//! before anything starts), installs the redactor, opens NVML, starts the
//! sampler, and serves until the shutdown future resolves. Tests build it on
//! `127.0.0.1:0`.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use anyhow::Context;
use axum::serve::ListenerExt;
use shared::HostInfo;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};

use crate::api::{self, AppState};
use crate::auth::{Auth, AuthConfig};
use crate::bench::tokens::Tokenizer;
use crate::campaign::CampaignHandle;
use crate::campaign::runner::{self, Runner};
use crate::campaign::webhook::Webhooks;
use crate::config::Config;
use crate::config::file::{ConfigError, ServerConfig};
use crate::hub::Hub;
use crate::identity::ServerHint;
use crate::redact::{self, Redactor};
use crate::restart::manager::{Manager, ManagerHandle, Parts};
use crate::store::Store;
use crate::supervisor;
use crate::telemetry::{Telemetry, sampler};

/// Per-connection kernel send buffer (the kernel doubles it). Enough for the UI's
/// files over a slow link; small enough that a client which stops reading backs up
/// into its bounded queue within a second or two.
const SOCKET_SEND_BUFFER: usize = 64 * 1024;

/// How long shutdown waits for open WebSockets to finish their close handshake.
const SOCKETS_CLOSE_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

#[derive(Debug)]
pub struct Application {
    listener: TcpListener,
    hub: Arc<Hub>,
    sampler: sampler::SamplerHandle,
    /// The managed server's manager, its handle and the history, when configured.
    managed: Option<Managed>,
    auth: Arc<Auth>,
}

#[derive(Debug)]
struct Managed {
    manager: Manager,
    handle: ManagerHandle,
    requests: tokio::sync::mpsc::Receiver<crate::restart::manager::Command>,
    store: Store,
    runner: Runner,
    campaigns: CampaignHandle,
    cfg: Arc<ServerConfig>,
    webhooks: Webhooks,
}

impl Managed {
    /// The manager and the campaign runner of the configured server, over
    /// the opened history.
    async fn start(p: Parts) -> Self {
        let recovered = &p.recovered;
        if !recovered.interrupted.is_empty() {
            tracing::warn!(ids = ?recovered.interrupted, "marked restarts interrupted by the last shutdown");
        }
        let (cfg, hub, store) = (Arc::clone(&p.cfg), Arc::clone(&p.hub), p.store.clone());
        hub.set_restarts(store.restarts(20).await.unwrap_or_default());
        let (manager, handle, requests) = Manager::new(p).await;
        let webhooks = Webhooks::new(cfg.webhooks.clone());
        let (runner, campaigns) = Runner::new(runner::Parts {
            cfg: Arc::clone(&cfg),
            hub,
            store: store.clone(),
            manager: handle.clone(),
            webhooks: webhooks.clone(),
        });
        Self {
            manager,
            handle,
            requests,
            store,
            runner,
            campaigns,
            cfg,
            webhooks,
        }
    }
}

impl Application {
    pub async fn build(config: Config) -> anyhow::Result<Self> {
        let auth = auth_for(&config)?;
        let server_cfg = match &config.config {
            Some(path) => Some(Arc::new(ServerConfig::load(path)?)),
            None => None,
        };
        let tokenizer = tokenizer_for(&config, server_cfg.as_deref())?;
        let listener = TcpListener::bind(config.bind)
            .await
            .map_err(|e| bind_error(config.bind, &e))?;
        let now = crate::clock::now_ms();
        let opened = match &server_cfg {
            Some(_) => {
                std::fs::create_dir_all(&config.data_dir).with_context(|| {
                    format!(
                        "cannot create the data folder {}",
                        config.data_dir.display()
                    )
                })?;
                supervisor::become_subreaper()
                    .context("cannot become the child subreaper of the server's processes")?;
                Some(Store::open(&config.data_dir, now)?)
            }
            None => None,
        };
        // Before anything reads a command line or a log: secrets are redacted
        // from the first sample on.
        if !redact::install(redactor(server_cfg.as_deref(), &config.data_dir)?) {
            tracing::warn!("a redactor was already in use; keeping it");
        }
        let server_port = config.server_port.or(server_cfg.as_ref().map(|c| c.port));
        let hint = Arc::new(ServerHint::default());
        let (lib, hint2) = (config.nvml_lib.clone(), Arc::clone(&hint));
        // XID errors are kept where the history is, for the health gate.
        let xid_sink = opened.as_ref().map(|(store, _)| xid_sink(store.clone()));
        // Loading a driver library blocks: keep it off the async threads.
        let telemetry =
            tokio::task::spawn_blocking(move || Telemetry::new(&lib, server_port, hint2, xid_sink))
                .await
                .context("failed to open NVML")?;
        let health_refresh = telemetry.health_refresh();
        let host = HostInfo {
            hostname: hostname(),
            version: env!("CARGO_PKG_VERSION").to_owned(),
            nvml: telemetry.nvml_status().clone(),
            sample_interval_ms: config.sample_interval_ms,
            history_ms: config.history.as_millis() as u64,
            server_port,
            own_pid_namespace: crate::identity::in_own_pid_namespace(),
        };
        let hub = Arc::new(Hub::new(host, config.client_buffer as usize));
        let fast = Arc::new(AtomicBool::new(false));
        let sampler = sampler::spawn(
            telemetry,
            Arc::clone(&hub),
            config.sample_interval(),
            Arc::clone(&fast),
        )
        .context("failed to start the sampler thread")?;
        let managed = match (server_cfg, opened) {
            (Some(cfg), Some((store, recovered))) => {
                let parts = Parts {
                    cfg,
                    hub: Arc::clone(&hub),
                    store,
                    hint,
                    fast,
                    health_refresh,
                    log_dir: config.data_dir.join("logs"),
                    recovered,
                    cgroup: config.cgroup.clone(),
                    tokenizer,
                };
                Some(Managed::start(parts).await)
            }
            _ => None,
        };
        Ok(Self {
            listener,
            hub,
            sampler,
            managed,
            auth: Arc::new(auth),
        })
    }

    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    pub fn hub(&self) -> &Arc<Hub> {
        &self.hub
    }

    /// Serves until `shutdown` resolves, then closes every socket, lets the
    /// manager commit its history, and stops sampling.
    pub async fn run_until_stopped(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> anyhow::Result<()> {
        let (stop_tx, stop_rx) = watch::channel(false);
        let (sockets, mut sockets_closed) = mpsc::channel::<()>(1);
        let (tasks, handle, store, campaigns, server_config, webhooks) = match self.managed {
            Some(m) => {
                let tasks = [
                    tokio::spawn(m.manager.run(m.requests, stop_rx.clone())),
                    tokio::spawn(m.runner.run(stop_rx.clone())),
                ];
                (
                    Some(tasks),
                    Some(m.handle),
                    Some(m.store),
                    Some(m.campaigns),
                    Some(m.cfg),
                    Some(m.webhooks),
                )
            }
            None => (None, None, None, None, None, None),
        };
        let app = api::router(AppState {
            hub: Arc::clone(&self.hub),
            shutdown: stop_rx,
            sockets,
            manager: handle,
            store,
            auth: self.auth,
            campaigns,
            server_config,
            webhooks,
        });
        let listener = self.listener.tap_io(|tcp| {
            let sock = socket2::SockRef::from(&*tcp);
            // Small kernel buffers keep a stalled client's backlog in our bounded
            // queue, where it turns into a resync, not minutes of stale data.
            if let Err(e) = sock.set_send_buffer_size(SOCKET_SEND_BUFFER) {
                tracing::debug!(error = %e, "cannot size a socket's send buffer");
            }
            let _ = tcp.set_nodelay(true);
        });
        let served = axum::serve(
            listener,
            app.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .with_graceful_shutdown(async move {
            shutdown.await;
            let _ = stop_tx.send(true);
        })
        .await
        .context("server error");
        // Upgraded sockets outlive axum's graceful wait: give each its close handshake.
        let _ = tokio::time::timeout(SOCKETS_CLOSE_WAIT, sockets_closed.recv()).await;
        for task in tasks.into_iter().flatten() {
            let _ = tokio::time::timeout(SOCKETS_CLOSE_WAIT, task).await;
        }
        self.sampler.stop();
        served
    }
}

/// The process-wide redactor: with a store, keyed by the store's `redact.key`
/// (stable ids across restarts) and told the config's secrets; without one,
/// a fresh key in memory.
fn redactor(cfg: Option<&ServerConfig>, data_dir: &std::path::Path) -> anyhow::Result<Redactor> {
    let Some(cfg) = cfg else {
        return Ok(Redactor::ephemeral(&[])?);
    };
    let r = Redactor::new(redact::load_key(data_dir)?, &cfg.redact);
    cfg.teach(&r);
    Ok(r)
}

fn bind_error(addr: SocketAddr, e: &std::io::Error) -> anyhow::Error {
    match e.kind() {
        std::io::ErrorKind::AddrInUse => anyhow::anyhow!(
            "cannot listen on {addr}: the port is already in use (another drainwatch?); choose another with --bind"
        ),
        std::io::ErrorKind::AddrNotAvailable => {
            anyhow::anyhow!("cannot listen on {addr}: no such address on this host; check --bind")
        }
        std::io::ErrorKind::PermissionDenied => anyhow::anyhow!(
            "cannot listen on {addr}: permission denied (ports below 1024 need privileges); check --bind"
        ),
        _ => anyhow::anyhow!("cannot listen on {addr}: {e}"),
    }
}

/// The gate's tokens (`--auth`), or none where drainwatch listens only on
/// this machine: off loopback, authentication is required.
fn auth_for(config: &Config) -> anyhow::Result<Auth> {
    Ok(match &config.auth {
        Some(path) => Auth::new(AuthConfig::load(path)?),
        None if !config.bind.ip().is_loopback() => anyhow::bail!(
            "refusing to listen on {} without authentication: anyone who can reach it could restart the server. \
             Make tokens with `drainwatch token --name NAME --role operator` and pass the auth file with --auth \
             (see docs/deploy.md), or bind 127.0.0.1 and reach it through `ssh -L`",
            config.bind
        ),
        None => Auth::open(),
    })
}

/// The benchmark's tokenizer: one the config names and that does not read is
/// a bad config, like any other of its errors.
fn tokenizer_for(
    config: &Config,
    server_cfg: Option<&ServerConfig>,
) -> Result<Option<Tokenizer>, ConfigError> {
    Ok(
        match (
            &config.config,
            server_cfg.and_then(|c| c.bench.tokenizer.as_ref()),
        ) {
            (Some(path), Some(file)) => {
                Tokenizer::configured(file).map_err(|problem| ConfigError::Invalid {
                    path: path.clone(),
                    problem,
                })?
            }
            _ => None,
        },
    )
}

/// Where the telemetry's XID errors go: into the store, for the health gate.
fn xid_sink(store: Store) -> mpsc::Sender<(u32, Option<String>, shared::health::XidEvent)> {
    let (tx, mut rx) = mpsc::channel::<(u32, Option<String>, shared::health::XidEvent)>(256);
    tokio::spawn(async move {
        while let Some((gpu_index, gpu_uuid, event)) = rx.recv().await {
            store.xid(crate::store::StoredXid {
                gpu_index,
                gpu_uuid,
                event,
            });
        }
    });
    tx
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_else(|_| "unknown".to_owned())
}
