//! What every handler shares ([`AppState`]), and the parts of it that only
//! exist when drainwatch manages a server (`--config`).

use std::sync::Arc;

use axum::http::StatusCode;
use tokio::sync::{mpsc, watch};

use crate::http::ApiError;
use crate::hub::Hub;
use crate::restart::manager::ManagerHandle;
use crate::store::Store;

/// What every handler shares.
#[derive(Debug, Clone)]
pub struct AppState {
    pub hub: Arc<Hub>,
    /// Flips to true when the server is shutting down; sockets close on it.
    pub shutdown: watch::Receiver<bool>,
    /// Each open socket holds a clone; shutdown waits until all are dropped.
    pub sockets: mpsc::Sender<()>,
    /// The restart manager, when drainwatch manages a server (`--config`).
    pub manager: Option<ManagerHandle>,
    pub store: Option<Store>,
    /// Who may do what (open without `--auth`).
    pub auth: Arc<crate::auth::Auth>,
    /// The campaign runner, when drainwatch manages a server.
    pub campaigns: Option<crate::campaign::CampaignHandle>,
    /// The managed server's config (plans are checked against its allow-list).
    pub server_config: Option<Arc<crate::config::file::ServerConfig>>,
    /// Where campaign summaries go.
    pub webhooks: Option<crate::campaign::webhook::Webhooks>,
}

impl AppState {
    /// The restart manager, or a 404 that says there is no server to control.
    pub(super) fn manager(&self) -> Result<&ManagerHandle, ApiError> {
        self.manager.as_ref().ok_or_else(|| {
            ApiError::new(
                StatusCode::NOT_FOUND,
                "drainwatch runs without a server config (--config): there is no server to control",
            )
        })
    }

    /// The campaign runner, or a 404 that says there is no server to run one on.
    pub(super) fn campaigns(&self) -> Result<&crate::campaign::CampaignHandle, ApiError> {
        self.campaigns.as_ref().ok_or_else(|| {
            ApiError::new(
                StatusCode::NOT_FOUND,
                "drainwatch runs without a server config (--config): there is no server to run a campaign on",
            )
        })
    }

    /// The managed server's config, or the same 404.
    pub(super) fn server_config(&self) -> Result<&crate::config::file::ServerConfig, ApiError> {
        self.server_config.as_deref().ok_or_else(|| {
            ApiError::new(
                StatusCode::NOT_FOUND,
                "drainwatch runs without a server config (--config): there is no server to run a campaign on",
            )
        })
    }

    /// The store, or a 404 that says there is no history.
    pub(super) fn store(&self) -> Result<&Store, ApiError> {
        self.store.as_ref().ok_or_else(|| {
            ApiError::new(
                StatusCode::NOT_FOUND,
                "drainwatch runs without a server config: no history",
            )
        })
    }
}

impl axum::extract::FromRef<AppState> for Arc<crate::auth::Auth> {
    fn from_ref(s: &AppState) -> Self {
        Arc::clone(&s.auth)
    }
}
