//! The API's side of the manager: what it may ask ([`Command`], [`Request`]),
//! what a refusal says ([`Refusal`]), and the [`ManagerHandle`] that sends a
//! command and waits for its answer.

use std::collections::BTreeMap;

use shared::bench::{BenchRun, BenchSettings};
use shared::restart::{Accepted, HeldBy, OpKind, Operation, RestartSummary};
use tokio::sync::{broadcast, mpsc, oneshot};

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
    /// The health gate, read afresh before anything was stopped, refuses to
    /// launch on these GPUs: nothing was stopped.
    Unhealthy {
        message: String,
        issues: Vec<shared::health::HealthIssue>,
    },
}

impl Refusal {
    /// What the refused caller is told.
    pub fn message(&self) -> &str {
        match self {
            Refusal::BadRequest(m) | Refusal::Stale(m) => m,
            Refusal::Conflict { message, .. } | Refusal::Unhealthy { message, .. } => message,
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
    /// The campaign asking, which may while it holds the server.
    pub campaign: Option<i64>,
    /// The GPUs the operator typed to launch on although the health gate
    /// refuses them (`GPU 3, 5`), for this launch only.
    pub override_health: Option<String>,
    /// For a server that spans nodes: this node's place in it.
    pub node: Option<shared::restart::NodeRole>,
    /// The hub's coordinated restart this is a step of, if it is one.
    pub coordinated: Option<i64>,
}

/// What happened in the manager, for whoever follows it (the campaign runner).
#[derive(Debug, Clone)]
pub enum Event {
    /// An operation ended (its record is queued for the store).
    OpFinished(Box<RestartSummary>),
    /// A benchmark run ended (its record is queued for the store).
    BenchFinished(Box<BenchRun>),
}

/// A campaign holding the server: every other request is refused.
pub type Lease = HeldBy;

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
    /// A campaign's benchmark of step `tag.1`: its settings whole.
    BenchFor {
        settings: Box<BenchSettings>,
        by: String,
        tag: (i64, u32),
        reply: oneshot::Sender<Result<i64, Refusal>>,
    },
    CancelBench {
        /// The campaign asking, if one is.
        campaign: Option<i64>,
        reply: oneshot::Sender<Result<i64, Refusal>>,
    },
    /// Cancels the launch in flight before it launches; answers its id.
    CancelOp {
        /// The campaign asking, if one is.
        campaign: Option<i64>,
        reply: oneshot::Sender<Result<i64, Refusal>>,
    },
    /// The hub's coordinated restart `id` is done with this node.
    Release {
        id: i64,
        reply: oneshot::Sender<Result<(), Refusal>>,
    },
    /// A campaign takes the server (`Some`) or gives it back (`None`).
    Lease {
        lease: Option<Lease>,
        reply: oneshot::Sender<Result<(), Refusal>>,
    },
}

/// The API's way to the manager.
#[derive(Debug, Clone)]
pub struct ManagerHandle {
    inbox: Mailbox<Command>,
    pub(super) events: broadcast::Sender<Event>,
}

/// A task's inbox, for the tasks the API asks things of (the manager, the
/// campaign runner): a command carries its own reply channel, and a task that
/// has stopped answers "drainwatch is shutting down".
#[derive(Debug)]
pub struct Mailbox<C> {
    tx: mpsc::Sender<C>,
}

impl<C> Clone for Mailbox<C> {
    fn clone(&self) -> Self {
        Self {
            tx: self.tx.clone(),
        }
    }
}

impl<C> Mailbox<C> {
    pub fn new(tx: mpsc::Sender<C>) -> Self {
        Self { tx }
    }

    /// Sends the command `make` builds around a reply channel; waits for the answer.
    pub async fn ask<T>(
        &self,
        make: impl FnOnce(oneshot::Sender<Result<T, Refusal>>) -> C,
    ) -> Result<T, Refusal> {
        let gone = || Refusal::Conflict {
            message: "drainwatch is shutting down".to_owned(),
            operation: None,
        };
        let (reply, rx) = oneshot::channel();
        self.tx.send(make(reply)).await.map_err(|_| gone())?;
        rx.await.map_err(|_| gone())?
    }
}

impl ManagerHandle {
    pub(super) fn new(tx: mpsc::Sender<Command>, events: broadcast::Sender<Event>) -> Self {
        Self {
            inbox: Mailbox::new(tx),
            events,
        }
    }

    /// Asks for an operation; returns how it was accepted.
    pub async fn submit(&self, request: Request) -> Result<Accepted, Refusal> {
        self.inbox.ask(|reply| Command::Op { request, reply }).await
    }

    /// Starts a benchmark; returns its run id.
    pub async fn bench(&self, overrides: serde_json::Value, peer: String) -> Result<i64, Refusal> {
        self.inbox
            .ask(|reply| Command::Bench {
                overrides,
                peer,
                reply,
            })
            .await
    }

    /// A campaign's benchmark of step `tag.1` of campaign `tag.0`.
    pub async fn bench_for(
        &self,
        settings: BenchSettings,
        by: String,
        tag: (i64, u32),
    ) -> Result<i64, Refusal> {
        self.inbox
            .ask(|reply| Command::BenchFor {
                settings: Box::new(settings),
                by,
                tag,
                reply,
            })
            .await
    }

    /// Cancels the running benchmark (`campaign`: as that campaign); returns its run id.
    pub async fn cancel_bench(&self, campaign: Option<i64>) -> Result<i64, Refusal> {
        self.inbox
            .ask(|reply| Command::CancelBench { campaign, reply })
            .await
    }

    /// Cancels the restart or start in flight at its next safe point, before
    /// the launch (`campaign`: as that campaign); returns its id.
    pub async fn cancel_op(&self, campaign: Option<i64>) -> Result<i64, Refusal> {
        self.inbox
            .ask(|reply| Command::CancelOp { campaign, reply })
            .await
    }

    /// Ends the hold of the hub's coordinated restart `id` on this node.
    pub async fn release(&self, id: i64) -> Result<(), Refusal> {
        self.inbox.ask(|reply| Command::Release { id, reply }).await
    }

    /// Who holds the server from now on: a campaign, or nobody.
    pub async fn lease(&self, lease: Option<Lease>) {
        let _ = self
            .inbox
            .ask(|reply| Command::Lease { lease, reply })
            .await;
    }

    /// The manager's events from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<Event> {
        self.events.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The answer comes back; a task that has stopped, or one that drops the
    /// question unanswered, means "shutting down", never a hang.
    #[tokio::test]
    async fn a_mailbox_answers_or_says_the_task_is_gone() {
        type Ask = oneshot::Sender<Result<u32, Refusal>>;
        let (tx, mut rx) = mpsc::channel::<Ask>(1);
        let inbox = Mailbox::new(tx);
        let task = tokio::spawn(async move {
            let first = rx.recv().await.expect("asked");
            let _ = first.send(Ok(7));
            // The second question is dropped unanswered; then the task ends.
            drop(rx.recv().await);
        });
        assert_eq!(inbox.ask(|reply| reply).await, Ok(7));
        let dropped = inbox.ask(|reply| reply).await.expect_err("unanswered");
        assert_eq!(dropped.message(), "drainwatch is shutting down");
        task.await.expect("task");
        let stopped = inbox.ask(|reply| reply).await.expect_err("no task");
        assert_eq!(stopped.message(), "drainwatch is shutting down");
    }
}
