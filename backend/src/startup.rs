//! Builds the application from a [`Config`]: binds the port (so a busy port fails
//! before anything starts), opens NVML, starts the sampler, and serves until the
//! shutdown future resolves. Tests build it on `127.0.0.1:0`.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context;
use axum::serve::ListenerExt;
use shared::HostInfo;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};

use crate::api::{self, AppState};
use crate::config::Config;
use crate::hub::Hub;
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
}

impl Application {
    pub async fn build(config: Config) -> anyhow::Result<Self> {
        let listener = TcpListener::bind(config.bind)
            .await
            .map_err(|e| bind_error(config.bind, &e))?;
        let (lib, port) = (config.nvml_lib.clone(), config.server_port);
        // Loading a driver library blocks: keep it off the async threads.
        let telemetry = tokio::task::spawn_blocking(move || Telemetry::new(&lib, port))
            .await
            .context("failed to open NVML")?;
        let host = HostInfo {
            hostname: hostname(),
            version: env!("CARGO_PKG_VERSION").to_owned(),
            nvml: telemetry.nvml_status().clone(),
            sample_interval_ms: config.sample_interval_ms,
            history_ms: config.history.as_millis() as u64,
            server_port: config.server_port,
        };
        let hub = Arc::new(Hub::new(host, config.client_buffer as usize));
        let sampler = sampler::spawn(telemetry, Arc::clone(&hub), config.sample_interval())
            .context("failed to start the sampler thread")?;
        Ok(Self {
            listener,
            hub,
            sampler,
        })
    }

    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    pub fn hub(&self) -> &Arc<Hub> {
        &self.hub
    }

    /// Serves until `shutdown` resolves, then closes every socket and stops sampling.
    pub async fn run_until_stopped(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> anyhow::Result<()> {
        let (stop_tx, stop_rx) = watch::channel(false);
        let (sockets, mut sockets_closed) = mpsc::channel::<()>(1);
        let app = api::router(AppState {
            hub: Arc::clone(&self.hub),
            shutdown: stop_rx,
            sockets,
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
        let served = axum::serve(listener, app)
            .with_graceful_shutdown(async move {
                shutdown.await;
                let _ = stop_tx.send(true);
            })
            .await
            .context("server error");
        // Upgraded sockets outlive axum's graceful wait: give each its close handshake.
        let _ = tokio::time::timeout(SOCKETS_CLOSE_WAIT, sockets_closed.recv()).await;
        self.sampler.stop();
        served
    }
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

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_else(|_| "unknown".to_owned())
}
