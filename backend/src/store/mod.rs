//! The history: restarts, their transitions, per-GPU drain timelines, launch logs,
//! the audit log, and the server instances drainwatch runs. SQLite in WAL mode; the
//! only module that writes SQL (also the hub's own database, [`hub`]).
//!
//! Writes go to one writer thread and are committed in batches at most
//! [`BATCH`] apart, so killing drainwatch with SIGKILL loses at most that much.
//! Reads use their own connection. On open, a restart left running by a previous
//! drainwatch is marked interrupted.

mod bench;
mod campaign;
mod codec;
mod health;
pub mod hub;
mod read;
mod recover;
mod schema;
mod writer;

use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub use health::{HealthMark, StoredXid};
use rusqlite::Connection;
use shared::ProcId;
use shared::bench::{BenchRun, FlagSet, FlagSetResults, RunMetrics};
use shared::flags::Flags;
use shared::restart::{
    Durations, Failure, MarkerKind, OpKind, Origin, Outcome, RestartDetail, RestartSummary,
    TimelinePoint, Transition,
};
use tokio::sync::oneshot;

pub(crate) use codec::name;

/// Longest time between a write and its commit.
pub const BATCH: Duration = Duration::from_millis(250);

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("database {path}: {source}")]
    Open {
        path: PathBuf,
        source: rusqlite::Error,
    },
    #[error("database: {0}")]
    Sql(#[from] rusqlite::Error),
    #[error("the database writer has stopped")]
    WriterGone,
    #[error("cannot create {path}: {source}")]
    Folder {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("a stored record does not read: {0}")]
    Record(#[from] serde_json::Error),
}

/// A server instance drainwatch launched or adopted, as recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Instance {
    pub generation: u64,
    pub root: ProcId,
    pub pgid: i32,
    pub flags: Flags,
    pub started_at_ms: u64,
    pub log_path: Option<PathBuf>,
    /// Launched by drainwatch, or adopted (also: recorded before origins were).
    pub origin: Origin,
    /// The cgroup holding it: drainwatch's leaf for it, or an adopted server's own.
    pub cgroup: Option<String>,
}

/// What a previous run left behind.
#[derive(Debug, Clone, Default)]
pub struct Recovered {
    /// Restarts that were running and are now marked interrupted.
    pub interrupted: Vec<i64>,
    /// The last instance not recorded as ended.
    pub instance: Option<Instance>,
    /// The highest generation ever recorded.
    pub generation: u64,
    /// The processes recorded as the last instance's server (at most
    /// [`MAX_MEMBERS`]): after a crash of drainwatch, what of them still lives
    /// is the server's.
    pub members: Vec<ProcId>,
}

/// How many processes of one instance are recorded: a server that forks more
/// (a runaway) is still known by its process group and cgroup.
pub const MAX_MEMBERS: usize = 4_096;

/// One audited attempt, or (kind `refusals`) every refusal of one caller in
/// one minute. Strings are stored cut to [`MAX_AUDIT_TEXT`] bytes
/// ([`MAX_AUDIT_REQUEST`] for the request).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct AuditEntry {
    pub at_ms: u64,
    pub peer: String,
    pub action: String,
    pub request: String,
    pub outcome: String,
    pub detail: String,
    pub kind: AuditKind,
    /// Attempts the entry stands for: 1 for an action.
    pub count: u64,
    /// When the last of them came (refusals only).
    pub last_at_ms: Option<u64>,
}

/// The two parts of the audit log, each with its own retention.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AuditKind {
    /// What a caller did or tried, as a handler saw it: kept the newest
    /// [`writer::MAX_AUDIT`] of.
    #[default]
    Action,
    /// Refused before any handler (no token, a viewer's change, a body that is
    /// not the expected JSON): one row per caller per minute, with the first
    /// attempt as the sample; the newest [`writer::MAX_REFUSAL_ROWS`] kept.
    Refusals,
}

impl AuditKind {
    fn as_str(self) -> &'static str {
        match self {
            Self::Action => "action",
            Self::Refusals => "refusals",
        }
    }

    fn parse(s: &str) -> Self {
        if s == "refusals" {
            Self::Refusals
        } else {
            Self::Action
        }
    }
}

/// Longest audited string but the request, in bytes.
pub const MAX_AUDIT_TEXT: usize = 256;
/// Longest audited request, in bytes (a restart's flags).
pub const MAX_AUDIT_REQUEST: usize = 512;

/// `s` cut to at most `max` bytes at a character boundary, marked with "…".
pub fn cut(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_owned();
    }
    let mut end = max.saturating_sub('…'.len_utf8());
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

enum Write {
    Begin {
        kind: OpKind,
        requested_by: String,
        from: Flags,
        to: Flags,
        at_ms: u64,
        reply: oneshot::Sender<Result<i64, StoreError>>,
    },
    Transition(i64, Transition, Option<MarkerKind>),
    Point(i64, TimelinePoint),
    Finish {
        id: i64,
        at_ms: u64,
        outcome: Outcome,
        failure: Option<Failure>,
        durations: Durations,
    },
    Log(i64, Vec<String>),
    Audit(AuditEntry),
    Refused(AuditEntry),
    Instance(Instance),
    InstanceEnded(u64, u64),
    /// Processes of instance `generation`'s server, as they are tracked.
    Members(u64, Vec<ProcId>),
    Containment(i64, String),
    FlagSeen(FlagSet),
    RestartFlagset(i64, String),
    FlagEdit {
        id: String,
        label: Option<String>,
        notes: Option<String>,
        reply: oneshot::Sender<bool>,
    },
    BenchBegin {
        run: Box<BenchRun>,
        reply: oneshot::Sender<Result<i64, StoreError>>,
    },
    BenchRepeat(i64, Box<RunMetrics>),
    BenchFinish(Box<BenchRun>),
    Campaign(campaign::CampaignWrite),
    Health(health::HealthWrite),
    Flush(oneshot::Sender<()>),
}

/// A handle on the store; cheap to clone.
#[derive(Debug, Clone)]
pub struct Store {
    writer: mpsc::Sender<Write>,
    reader: Arc<Mutex<Connection>>,
}

impl std::fmt::Debug for Write {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Write")
    }
}

/// One finished (or running) operation for `/metrics`: kind, outcome,
/// durations, and the failure's class where it failed.
pub type OutcomeRow = (
    shared::restart::OpKind,
    shared::restart::Outcome,
    shared::restart::Durations,
    Option<String>,
);

impl Store {
    /// Opens (creating if needed) `dir/drainwatch.sqlite3`, migrates it, recovers
    /// what a previous run left, and starts the writer thread.
    pub fn open(dir: &Path, now_ms: u64) -> Result<(Self, Recovered), StoreError> {
        let path = dir.join("drainwatch.sqlite3");
        let open = |p: &Path| -> Result<Connection, StoreError> {
            let c = Connection::open(p).map_err(|source| StoreError::Open {
                path: p.to_owned(),
                source,
            })?;
            schema::configure(&c)?;
            Ok(c)
        };
        let mut conn = open(&path)?;
        schema::migrate(&mut conn)?;
        let recovered = recover::run(&mut conn, now_ms)?;
        let reader = open(&path)?;
        let (tx, rx) = mpsc::channel();
        std::thread::Builder::new()
            .name("store-writer".to_owned())
            .spawn(move || writer::run(conn, rx))
            .map_err(|e| StoreError::Open {
                path: path.clone(),
                source: rusqlite::Error::ToSqlConversionFailure(Box::new(e)),
            })?;
        Ok((
            Self {
                writer: tx,
                reader: Arc::new(Mutex::new(reader)),
            },
            recovered,
        ))
    }

    fn send(&self, w: Write) {
        if self.writer.send(w).is_err() {
            tracing::error!("the database writer has stopped; a history entry is lost");
        }
    }

    /// Records a new operation; returns its id once committed.
    pub async fn begin(
        &self,
        kind: OpKind,
        requested_by: &str,
        from: &Flags,
        to: &Flags,
        at_ms: u64,
    ) -> Result<i64, StoreError> {
        let (reply, rx) = oneshot::channel();
        self.send(Write::Begin {
            kind,
            requested_by: requested_by.to_owned(),
            from: from.clone(),
            to: to.clone(),
            at_ms,
            reply,
        });
        rx.await.map_err(|_| StoreError::WriterGone)?
    }

    pub fn transition(&self, id: i64, t: Transition, marker: Option<MarkerKind>) {
        self.send(Write::Transition(id, t, marker));
    }

    pub fn point(&self, id: i64, p: TimelinePoint) {
        self.send(Write::Point(id, p));
    }

    pub fn finish(
        &self,
        id: i64,
        at_ms: u64,
        outcome: Outcome,
        failure: Option<Failure>,
        durations: Durations,
    ) {
        self.send(Write::Finish {
            id,
            at_ms,
            outcome,
            failure,
            durations,
        });
    }

    pub fn log_tail(&self, id: i64, lines: Vec<String>) {
        self.send(Write::Log(id, lines));
    }

    /// Records an action (see [`AuditKind::Action`]).
    pub fn audit(&self, entry: AuditEntry) {
        self.send(Write::Audit(entry));
    }

    /// Counts a refusal into its caller's row for the minute (see
    /// [`AuditKind::Refusals`]); `entry.peer` must not carry a port.
    pub fn refused(&self, entry: AuditEntry) {
        self.send(Write::Refused(entry));
    }

    pub fn instance(&self, i: Instance) {
        self.send(Write::Instance(i));
    }

    /// How restart `id`'s servers are contained (see `RestartDetail::containment`).
    pub fn containment(&self, id: i64, text: String) {
        self.send(Write::Containment(id, text));
    }

    /// Records processes of instance `generation`'s server (those already
    /// recorded are kept; beyond [`MAX_MEMBERS`] nothing more is).
    pub fn members(&self, generation: u64, ids: Vec<ProcId>) {
        if !ids.is_empty() {
            self.send(Write::Members(generation, ids));
        }
    }

    pub fn instance_ended(&self, generation: u64, at_ms: u64) {
        self.send(Write::InstanceEnded(generation, at_ms));
    }

    /// Waits until everything sent so far is committed.
    pub async fn flush(&self) {
        let (tx, rx) = oneshot::channel();
        self.send(Write::Flush(tx));
        let _ = rx.await;
    }

    async fn read<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Connection) -> rusqlite::Result<T> + Send + 'static,
    ) -> Result<T, StoreError> {
        let reader = Arc::clone(&self.reader);
        tokio::task::spawn_blocking(move || {
            let conn = reader.lock().unwrap_or_else(|p| p.into_inner());
            f(&conn).map_err(StoreError::from)
        })
        .await
        .map_err(|_| StoreError::WriterGone)?
    }

    /// The newest restarts, newest first.
    pub async fn restarts(&self, limit: u32) -> Result<Vec<RestartSummary>, StoreError> {
        self.read(move |c| read::restarts(c, limit)).await
    }

    /// Every restart's kind, outcome and phase durations.
    pub async fn outcomes(&self) -> Result<Vec<OutcomeRow>, StoreError> {
        self.read(read::outcomes).await
    }

    pub async fn detail(&self, id: i64) -> Result<Option<RestartDetail>, StoreError> {
        self.read(move |c| read::detail(c, id)).await
    }

    /// The newest `limit` audit entries, of one kind if given.
    pub async fn audit_log(
        &self,
        limit: u32,
        kind: Option<AuditKind>,
    ) -> Result<Vec<AuditEntry>, StoreError> {
        self.read(move |c| read::audit(c, limit, kind)).await
    }

    /// Records that the server runs (or a benchmark measured) `set` now.
    pub fn flagset_seen(&self, set: FlagSet) {
        self.send(Write::FlagSeen(set));
    }

    /// Links a restart to the flag set it launched.
    pub fn restart_flagset(&self, id: i64, set: String) {
        self.send(Write::RestartFlagset(id, set));
    }

    /// Sets a flag set's label and notes; false if there is no such set.
    pub async fn edit_flagset(
        &self,
        id: &str,
        label: Option<String>,
        notes: Option<String>,
    ) -> bool {
        let (reply, rx) = oneshot::channel();
        self.send(Write::FlagEdit {
            id: id.to_owned(),
            label,
            notes,
            reply,
        });
        rx.await.unwrap_or(false)
    }

    /// Records a new benchmark run; returns its id once committed.
    pub async fn bench_begin(&self, run: BenchRun) -> Result<i64, StoreError> {
        let (reply, rx) = oneshot::channel();
        self.send(Write::BenchBegin {
            run: Box::new(run),
            reply,
        });
        rx.await.map_err(|_| StoreError::WriterGone)?
    }

    pub fn bench_repeat(&self, run_id: i64, m: RunMetrics) {
        self.send(Write::BenchRepeat(run_id, Box::new(m)));
    }

    pub fn bench_finish(&self, run: BenchRun) {
        self.send(Write::BenchFinish(Box::new(run)));
    }

    /// The ledger: every flag set with its newest result per concurrency.
    pub async fn ledger(&self) -> Result<Vec<FlagSetResults>, StoreError> {
        self.read(bench::ledger).await
    }

    pub async fn flagset(&self, id: String) -> Result<Option<FlagSet>, StoreError> {
        self.read(move |c| bench::flagset_by_id(c, &id)).await
    }

    /// Benchmark runs, newest first (only one flag set's, if given).
    pub async fn bench_runs(
        &self,
        flagset: Option<String>,
        limit: u32,
    ) -> Result<Vec<BenchRun>, StoreError> {
        self.read(move |c| bench::runs(c, flagset.as_deref(), limit))
            .await
    }

    pub async fn bench_run(&self, id: i64) -> Result<Option<BenchRun>, StoreError> {
        self.read(move |c| bench::run(c, id)).await
    }

    /// Typical (median) duration of each phase over recent successful restarts.
    pub async fn typical(
        &self,
    ) -> Result<std::collections::BTreeMap<shared::restart::Phase, u64>, StoreError> {
        self.read(read::typical).await
    }
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
