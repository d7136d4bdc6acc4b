//! What every handler shares ([`AppState`]), and the parts of it that only
//! exist when drainwatch manages a server (`--config`).

use std::sync::Arc;

use axum::http::StatusCode;
use tokio::sync::{mpsc, watch};

use super::error::ApiError;
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
