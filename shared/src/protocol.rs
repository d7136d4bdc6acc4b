//! The `/ws` protocol. The server speaks first: `hello`, then `snapshot`, then one
//! `sample` per sampling period. A client that fell behind gets a fresh `snapshot`
//! instead of a silent gap.
//!
//! Messages are JSON text frames tagged by `type`. Adding an optional field is
//! compatible; renaming or removing one needs a new [`PROTOCOL_VERSION`].

use serde::{Deserialize, Serialize};

use crate::bench::{BenchProgress, BenchRun};
use crate::campaign::Step;
use crate::restart::{RestartSummary, ServerStatus, TimelinePoint};
use crate::{Sample, Snapshot};

/// Bumped on every incompatible change to any type in this crate.
pub const PROTOCOL_VERSION: u32 = 4;

/// Server → client.
///
/// `R` is what a finished benchmark run is read as: the whole [`BenchRun`] by
/// default; a client that shows only a run's outcome may read a smaller type
/// (serde skips the fields it does not name), which keeps the browser's
/// bundle free of the per-repeat metrics' readers. `S` is what a changed
/// campaign step is read as, the whole [`Step`] by default (the browser,
/// which asks the agent for its campaign view again, reads the step as
/// nothing).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[expect(
    clippy::large_enum_variant,
    reason = "a message lives only while it is serialised or matched once"
)]
pub enum ServerMsg<R = BenchRun, S = Step> {
    /// First message on every connection.
    Hello {
        protocol_version: u32,
        server_version: String,
    },
    /// The whole state: after `hello`, after a `resync` request, and whenever this
    /// client fell so far behind that samples were dropped for it.
    Snapshot(Snapshot),
    /// One new sample.
    Sample(Sample),
    /// The managed server changed (phase, generation, operation, failure, log).
    Server(ServerStatus),
    /// A restart record was added or changed (for the history table).
    Restart(RestartSummary),
    /// New points of the running operation's drain timeline, in time order: a
    /// few to a message, about five messages a second while it runs.
    Timeline {
        restart_id: i64,
        points: Vec<TimelinePoint>,
    },
    /// The running benchmark advanced.
    Bench(BenchProgress),
    /// A benchmark run finished (its results are in the ledger).
    BenchRun(R),
    /// Who is connected changed.
    Presence { clients: Vec<crate::auth::Presence> },
    /// A campaign started or changed state (its header; steps come one by one).
    Campaign(crate::campaign::CampaignInfo),
    /// One of a campaign's steps changed.
    CampaignStep { campaign_id: i64, step: S },
    /// Answer to [`ClientMsg::Ping`].
    Pong { nonce: u64 },
    /// The client sent something the server could not use. The connection stays up.
    Error { code: ErrorCode, message: String },
}

/// Client → server.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ClientMsg {
    /// Application-level heartbeat (browsers cannot see WebSocket ping frames).
    Ping { nonce: u64 },
    /// Ask for a fresh `snapshot`.
    Resync,
}

/// Machine-readable kind of a [`ServerMsg::Error`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// Not JSON, or not a known message.
    BadMessage,
    /// A binary frame: this protocol is text only.
    Unsupported,
    /// Asked again too soon (a `resync` within a second of the last snapshot).
    TooSoon,
}
