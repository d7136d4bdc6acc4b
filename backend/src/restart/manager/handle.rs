//! The API's side of the manager: what it may ask ([`Command`], [`Request`]),
//! what a refusal says ([`Refusal`]), and the [`ManagerHandle`] that sends a
//! command and waits for its answer.

use std::collections::BTreeMap;

use shared::restart::{Accepted, OpKind, Operation};
use tokio::sync::{mpsc, oneshot};

/// A request the manager refused, and why.
#[derive(Debug, Clone, PartialEq)]
pub enum Refusal {
    /// The request itself is wrong (unknown flag, bad value, wrong confirmation).
    BadRequest(String),
    /// Something is already running, or the server is not in a state for this.
    Conflict {
        message: String,
        operation: Option<Operation>,
    },
    /// The client's view is out of date.
    Stale(String),
}

impl Refusal {
    /// What the refused caller is told.
    pub fn message(&self) -> &str {
        match self {
            Refusal::BadRequest(m) | Refusal::Stale(m) => m,
            Refusal::Conflict { message, .. } => message,
        }
    }
}

/// An operator's request, validated by the manager against the current state.
#[derive(Debug)]
pub struct Request {
    pub kind: OpKind,
    pub generation: u64,
    pub confirm: String,
    pub flags: BTreeMap<String, Option<String>>,
    /// With an adoption: move the server into a cgroup leaf of drainwatch's.
    pub contain: bool,
    /// Who asked (the client's address).
    pub peer: String,
}

/// Everything the API asks of the manager, each with where its answer goes.
#[derive(Debug)]
pub enum Command {
    Op {
        request: Request,
        reply: oneshot::Sender<Result<Accepted, Refusal>>,
    },
    Bench {
        /// Settings to change from the config's defaults (a JSON object).
        overrides: serde_json::Value,
        peer: String,
        reply: oneshot::Sender<Result<i64, Refusal>>,
    },
    CancelBench {
        reply: oneshot::Sender<Result<i64, Refusal>>,
    },
}

/// The API's way to the manager.
#[derive(Debug, Clone)]
pub struct ManagerHandle {
    pub(super) tx: mpsc::Sender<Command>,
}

fn gone() -> Refusal {
    Refusal::Conflict {
        message: "drainwatch is shutting down".to_owned(),
        operation: None,
    }
}

impl ManagerHandle {
    /// Sends the command `make` builds around a reply channel; waits for the answer.
    async fn ask<T>(
        &self,
        make: impl FnOnce(oneshot::Sender<Result<T, Refusal>>) -> Command,
    ) -> Result<T, Refusal> {
        let (reply, rx) = oneshot::channel();
        self.tx.send(make(reply)).await.map_err(|_| gone())?;
        rx.await.map_err(|_| gone())?
    }

    /// Asks for an operation; returns how it was accepted.
    pub async fn submit(&self, request: Request) -> Result<Accepted, Refusal> {
        self.ask(|reply| Command::Op { request, reply }).await
    }

    /// Starts a benchmark; returns its run id.
    pub async fn bench(&self, overrides: serde_json::Value, peer: String) -> Result<i64, Refusal> {
        self.ask(|reply| Command::Bench {
            overrides,
            peer,
            reply,
        })
        .await
    }

    /// Cancels the running benchmark; returns its run id.
    pub async fn cancel_bench(&self) -> Result<i64, Refusal> {
        self.ask(|reply| Command::CancelBench { reply }).await
    }
}
