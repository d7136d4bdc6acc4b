//! The page's state: every signal the socket writes and the components read,
//! bundled in the `Copy` [`AppState`] that `App` provides as context, and the
//! rules that turn it into what the connection badge says.

use std::collections::HashMap;

use leptos::prelude::*;
use shared::auth::{Presence, SessionInfo};
use shared::bench::{BenchProgress, FlagSetResults};
use shared::restart::{Flags, OpKind, Outcome, RestartSummary, ServerStatus, TimelinePoint};
use shared::{HostInfo, PROTOCOL_VERSION, Sample, ServerMsg, Snapshot};

use crate::series::{self, Series};
use crate::throughput::RunBrief;

/// A message from the server as the page reads it: a finished benchmark run
/// as a [`RunBrief`].
pub(crate) type Msg = ServerMsg<RunBrief>;

/// Assumed sampling period before the server has said what it is.
const DEFAULT_INTERVAL_MS: u64 = 1000;
/// The last sample is stale when older than this many sampling periods.
const STALE_AFTER_PERIODS: u64 = 3;
/// The history keeps at most this many restarts (the backend sends 20).
const MAX_RESTARTS: usize = 100;

/// Where the socket is.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Link {
    /// A socket is being opened: `attempt` 0 is the first connection, n the n-th
    /// retry, made after waiting `delay_ms`.
    Connecting { attempt: u32, delay_ms: u64 },
    /// The socket is open since `since_ms` (browser clock).
    Open { since_ms: f64 },
    /// The socket closed; retry number `attempt` starts at `retry_at_ms`, after
    /// `delay_ms`.
    Waiting {
        attempt: u32,
        delay_ms: u64,
        retry_at_ms: f64,
    },
}

/// What the connection badge says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ConnView {
    /// First connection, or an open socket the data has not yet come through.
    Connecting,
    /// Samples arrive.
    Live,
    /// The socket is open but the last data is `age_ms` old.
    Stale { age_ms: u64 },
    /// The socket closed; retry `attempt` after `delay_ms`, `retry_in_ms` from now
    /// (`None` while that retry is connecting).
    Reconnecting {
        attempt: u32,
        delay_ms: u64,
        retry_in_ms: Option<u64>,
    },
}

impl ConnView {
    /// The badge's `data-state`.
    pub(crate) fn state(self) -> &'static str {
        match self {
            Self::Connecting => "connecting",
            Self::Live => "live",
            Self::Stale { .. } => "stale",
            Self::Reconnecting { .. } => "reconnecting",
        }
    }

    /// Decides from the socket, the arrival time of the last data, the clock and
    /// the sampling period.
    pub(crate) fn of(link: Link, last_data_ms: Option<f64>, now_ms: f64, interval_ms: u64) -> Self {
        match link {
            Link::Connecting {
                attempt: 0,
                delay_ms: _,
            } => Self::Connecting,
            Link::Connecting { attempt, delay_ms } => Self::Reconnecting {
                attempt,
                delay_ms,
                retry_in_ms: None,
            },
            Link::Waiting {
                attempt,
                delay_ms,
                retry_at_ms,
            } => Self::Reconnecting {
                attempt,
                delay_ms,
                retry_in_ms: Some(ms_between(now_ms, retry_at_ms)),
            },
            Link::Open { since_ms } => {
                let limit = interval_ms.saturating_mul(STALE_AFTER_PERIODS);
                // Data from before this socket opened does not make it live, but
                // neither does the reconnect itself make it stale.
                let fresh_from = last_data_ms.map_or(since_ms, |t| t.max(since_ms));
                if ms_between(fresh_from, now_ms) > limit {
                    Self::Stale {
                        age_ms: ms_between(last_data_ms.unwrap_or(since_ms), now_ms),
                    }
                } else if last_data_ms.is_some_and(|t| t >= since_ms) {
                    Self::Live
                } else {
                    Self::Connecting
                }
            }
        }
    }
}

/// Milliseconds from `from` to `to`, 0 if `to` is earlier.
fn ms_between(from: f64, to: f64) -> u64 {
    (to - from).max(0.0) as u64
}

/// An open operation dialog: what it does, and the server as it was when the
/// operator opened it (its generation guards the request).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct DialogOpen {
    pub(crate) kind: OpKind,
    pub(crate) status: ServerStatus,
    /// The flag set whose values the editor starts at ("Restart with this
    /// set"), instead of the current flags.
    pub(crate) prefill: Option<Prefill>,
}

impl DialogOpen {
    /// The dialog for `kind`, starting at the current flags.
    pub(crate) fn new(kind: OpKind, status: ServerStatus) -> Self {
        Self {
            kind,
            status,
            prefill: None,
        }
    }
}

/// A flag set the restart dialog starts at: its id, its name, its flags.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Prefill {
    pub(crate) id: String,
    pub(crate) name: String,
    pub(crate) flags: Flags,
}

/// The running benchmark's progress after `next` arrives: a progress of a run
/// at or before `finished` (the newest run known to be over) is late and
/// ignored; anything else replaces what was shown.
pub(crate) fn next_progress(
    shown: Option<BenchProgress>,
    next: BenchProgress,
    finished: i64,
) -> Option<BenchProgress> {
    if next.run_id <= finished {
        shown.filter(|s| s.run_id > finished)
    } else {
        Some(next)
    }
}

/// The progress to show once a status arrives: none when no benchmark runs;
/// the status's (a placeholder without numbers) when it names another run
/// than the one shown.
pub(crate) fn progress_for_status(
    shown: Option<BenchProgress>,
    status: Option<&BenchProgress>,
    finished: i64,
) -> Option<BenchProgress> {
    let status = status?;
    match shown {
        Some(s) if s.run_id == status.run_id => Some(s),
        _ => next_progress(None, status.clone(), finished),
    }
}

/// Puts `summary` into the history, newest (highest id) first: replaces the
/// record with its id, or inserts it in order. Keeps at most [`MAX_RESTARTS`].
pub(crate) fn upsert_restart(list: &mut Vec<RestartSummary>, summary: RestartSummary) {
    shared::restart::upsert_summary(list, summary, MAX_RESTARTS);
}

/// The history row of the operation `status` says is running: the backend
/// sends a `Restart` record only once an operation ends, so the row of a
/// running one is made from the status until then.
pub(crate) fn running_summary(status: &ServerStatus) -> Option<RestartSummary> {
    let op = status.operation.as_ref()?;
    Some(RestartSummary {
        id: op.id,
        kind: op.kind,
        requested_by: op.requested_by.clone(),
        started_at_ms: op.started_at_ms,
        finished_at_ms: None,
        from_flags: op.from_flags.clone(),
        to_flags: op.to_flags.clone(),
        outcome: Outcome::Running,
        failure: None,
        durations: Default::default(),
    })
}

/// Adds the running operation of `status` to the history unless its record
/// is there already (a record from the backend always wins). True when it
/// added one.
pub(crate) fn note_running(list: &mut Vec<RestartSummary>, status: &ServerStatus) -> bool {
    match running_summary(status) {
        Some(summary) if list.iter().all(|r| r.id != summary.id) => {
            upsert_restart(list, summary);
            true
        }
        _ => false,
    }
}

/// Every signal of the page. `Copy`: pass it around or take it from context.
#[derive(Debug, Clone, Copy)]
pub(crate) struct AppState {
    /// The host's static facts, from the last snapshot.
    pub(crate) host: RwSignal<Option<HostInfo>>,
    /// The newest sample.
    pub(crate) latest: RwSignal<Option<Sample>>,
    /// Memory used per GPU index, for the sparklines.
    pub(crate) series: RwSignal<HashMap<u32, Series>>,
    /// The socket.
    pub(crate) link: RwSignal<Link>,
    /// When (browser clock, Unix ms) the last snapshot or sample arrived.
    pub(crate) last_data_ms: RwSignal<Option<f64>>,
    /// The browser clock, ticked a few times a second for ages and countdowns.
    pub(crate) now_ms: RwSignal<f64>,
    /// Something the user should know that fits nowhere else (protocol
    /// mismatch, unreadable message, server complaint).
    pub(crate) notice: RwSignal<Option<String>>,
    /// The managed server; `None` when drainwatch only watches (no restart UI).
    pub(crate) server: RwSignal<Option<ServerStatus>>,
    /// Recent restarts, newest first.
    pub(crate) restarts: RwSignal<Vec<RestartSummary>>,
    /// The operation dialog, when open.
    pub(crate) dialog: RwSignal<Option<DialogOpen>>,
    /// The restart whose detail is open.
    pub(crate) detail: RwSignal<Option<i64>>,
    /// The newest points of the running operation's timeline, as they came.
    pub(crate) timeline: RwSignal<Option<(i64, Vec<TimelinePoint>)>>,
    /// The running benchmark, from `bench` messages and the server's status.
    pub(crate) bench: RwSignal<Option<BenchProgress>>,
    /// The newest run that finished (from `bench_run` messages).
    pub(crate) last_run: RwSignal<Option<RunBrief>>,
    /// The throughput ledger (`GET /api/flagsets`), first seen first.
    pub(crate) ledger: RwSignal<Vec<FlagSetResults>>,
    /// Bumped whenever the ledger should be fetched again.
    pub(crate) ledger_gen: RwSignal<u64>,
    /// Who this page is logged in as (`GET /api/session`).
    pub(crate) session: RwSignal<Option<SessionInfo>>,
    /// Who is connected now.
    pub(crate) presence: RwSignal<Vec<Presence>>,
}

impl AppState {
    /// Fresh state, provided as context for every component below the caller.
    pub(crate) fn provide(now_ms: f64) -> Self {
        let state = Self {
            host: RwSignal::new(None),
            latest: RwSignal::new(None),
            series: RwSignal::new(HashMap::new()),
            link: RwSignal::new(Link::Connecting {
                attempt: 0,
                delay_ms: 0,
            }),
            last_data_ms: RwSignal::new(None),
            now_ms: RwSignal::new(now_ms),
            notice: RwSignal::new(None),
            server: RwSignal::new(None),
            restarts: RwSignal::new(Vec::new()),
            dialog: RwSignal::new(None),
            detail: RwSignal::new(None),
            timeline: RwSignal::new(None),
            bench: RwSignal::new(None),
            last_run: RwSignal::new(None),
            ledger: RwSignal::new(Vec::new()),
            ledger_gen: RwSignal::new(0),
            session: RwSignal::new(None),
            presence: RwSignal::new(Vec::new()),
        };
        provide_context(state);
        state
    }

    /// The state provided by `App`.
    pub(crate) fn get() -> Self {
        expect_context::<Self>()
    }

    /// Whether this page may change anything (tracked): an operator's, once
    /// the session is known.
    pub(crate) fn may_operate(&self) -> bool {
        self.session
            .with(|s| s.as_ref().is_some_and(|s| s.role.may_operate()))
    }

    /// The server's sampling period (tracked), or a default before it is known.
    pub(crate) fn interval_ms(&self) -> u64 {
        self.host.with(|h| {
            h.as_ref()
                .map_or(DEFAULT_INTERVAL_MS, |h| h.sample_interval_ms.max(1))
        })
    }

    /// What the connection badge shows now (tracked).
    pub(crate) fn conn_view(&self) -> ConnView {
        ConnView::of(
            self.link.get(),
            self.last_data_ms.get(),
            self.now_ms.get(),
            self.interval_ms(),
        )
    }

    /// Takes one message from the server, received at `now_ms`.
    pub(crate) fn apply(&self, msg: Msg, now_ms: f64) {
        match msg {
            ServerMsg::Hello {
                protocol_version,
                server_version,
            } => {
                if protocol_version == PROTOCOL_VERSION {
                    self.notice.set(None);
                } else {
                    self.notice.set(Some(format!(
                        "protocol mismatch: the server (drainwatch {server_version}) speaks \
                         version {protocol_version}, this page version {PROTOCOL_VERSION}; \
                         reload the page"
                    )));
                }
            }
            ServerMsg::Snapshot(snapshot) => self.apply_snapshot(snapshot, now_ms),
            ServerMsg::Sample(sample) => self.apply_sample(sample, now_ms),
            ServerMsg::Pong { .. } => {}
            ServerMsg::Presence { clients } => self.presence.set(clients),
            ServerMsg::Server(status) => {
                self.restarts.maybe_update(|r| note_running(r, &status));
                self.take_bench_status(&status);
                self.server.set(Some(status));
            }
            ServerMsg::Restart(summary) => self.restarts.update(|r| upsert_restart(r, summary)),
            ServerMsg::Timeline { restart_id, points } => {
                self.timeline.set(Some((restart_id, points)))
            }
            ServerMsg::Bench(progress) => {
                let finished = self.finished_run();
                let next = next_progress(self.bench.get_untracked(), progress, finished);
                if self.bench.with_untracked(|b| *b != next) {
                    self.bench.set(next);
                }
            }
            ServerMsg::BenchRun(run) => {
                if self
                    .bench
                    .with_untracked(|b| b.as_ref().is_some_and(|b| b.run_id <= run.id))
                {
                    self.bench.set(None);
                }
                if self.finished_run() < run.id {
                    self.last_run.set(Some(run));
                }
                self.ledger_gen.update(|g| *g += 1);
            }
            ServerMsg::Error { code, message } => {
                leptos::logging::warn!("server error {code:?}: {message}");
                self.notice
                    .set(Some(format!("the server rejected a message: {message}")));
            }
        }
    }

    /// The newest run known to be over (0 when none is).
    fn finished_run(&self) -> i64 {
        self.last_run
            .with_untracked(|r| r.as_ref().map_or(0, |r| r.id))
    }

    /// Follows the status's benchmark: none running clears the progress.
    fn take_bench_status(&self, status: &ServerStatus) {
        let next = progress_for_status(
            self.bench.get_untracked(),
            status.bench.as_ref(),
            self.finished_run(),
        );
        if self.bench.with_untracked(|b| *b != next) {
            self.bench.set(next);
        }
    }

    /// Replaces everything with the snapshot.
    fn apply_snapshot(&self, snapshot: Snapshot, now_ms: f64) {
        self.series.set(series::from_snapshot(&snapshot));
        self.host.set(Some(snapshot.host));
        self.latest.set(snapshot.latest);
        let mut restarts = snapshot.restarts;
        restarts.sort_by_key(|r| std::cmp::Reverse(r.id));
        restarts.truncate(MAX_RESTARTS);
        if let Some(status) = &snapshot.server {
            note_running(&mut restarts, status);
            self.take_bench_status(status);
        }
        self.restarts.set(restarts);
        self.server.set(snapshot.server);
        self.presence.set(snapshot.presence);
        self.last_data_ms.set(Some(now_ms));
    }

    /// Moves on to a newer sample; a replayed or older one is ignored.
    fn apply_sample(&self, sample: Sample, now_ms: f64) {
        let newer = self
            .latest
            .with_untracked(|l| l.as_ref().is_none_or(|l| sample.seq > l.seq));
        if !newer {
            return;
        }
        self.series.update(|all| series::extend(all, &sample));
        self.latest.set(Some(sample));
        self.last_data_ms.set(Some(now_ms));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OPEN: Link = Link::Open { since_ms: 1000.0 };

    #[test]
    fn first_connection_is_connecting() {
        let link = Link::Connecting {
            attempt: 0,
            delay_ms: 0,
        };
        assert_eq!(ConnView::of(link, None, 0.0, 100), ConnView::Connecting);
        assert_eq!(ConnView::of(OPEN, None, 1100.0, 100), ConnView::Connecting);
    }

    #[test]
    fn live_then_stale_after_three_periods() {
        assert_eq!(
            ConnView::of(OPEN, Some(1200.0), 1500.0, 100),
            ConnView::Live
        );
        assert_eq!(
            ConnView::of(OPEN, Some(1200.0), 5400.0, 100),
            ConnView::Stale { age_ms: 4200 }
        );
        // Open, nothing ever came.
        assert_eq!(
            ConnView::of(OPEN, None, 2000.0, 100),
            ConnView::Stale { age_ms: 1000 }
        );
    }

    #[test]
    fn old_data_after_a_reconnect_is_neither_live_nor_stale_at_once() {
        assert_eq!(
            ConnView::of(OPEN, Some(10.0), 1100.0, 100),
            ConnView::Connecting
        );
        assert_eq!(
            ConnView::of(OPEN, Some(10.0), 1400.0, 100),
            ConnView::Stale { age_ms: 1390 }
        );
    }

    fn summary(id: i64, outcome: Outcome) -> RestartSummary {
        RestartSummary {
            id,
            kind: OpKind::Restart,
            requested_by: String::new(),
            started_at_ms: id as u64,
            finished_at_ms: None,
            from_flags: Default::default(),
            to_flags: Default::default(),
            outcome,
            failure: None,
            durations: Default::default(),
        }
    }

    #[test]
    fn a_finished_run_reads_as_its_brief() {
        let msg: Msg =
            serde_json::from_str(include_str!("../../shared/tests/fixtures/bench_run.json"))
                .expect("fixture");
        let ServerMsg::BenchRun(run) = msg else {
            panic!("the fixture is a finished run");
        };
        let full: ServerMsg =
            serde_json::from_str(include_str!("../../shared/tests/fixtures/bench_run.json"))
                .expect("fixture");
        let ServerMsg::BenchRun(full) = full else {
            unreachable!()
        };
        assert_eq!(run.id, full.id);
        assert_eq!(run.status, full.status);
        assert_eq!(run.error, full.error);
        assert_eq!(
            run.correctness.map(|c| c.passed),
            full.correctness.map(|c| c.passed)
        );
    }

    #[test]
    fn a_running_operation_gets_a_row_until_its_record_arrives() {
        let mut status: ServerStatus =
            serde_json::from_str(include_str!("../../shared/tests/fixtures/server.json"))
                .map(|m: ServerMsg| match m {
                    ServerMsg::Server(s) => s,
                    _ => unreachable!("the fixture is a server message"),
                })
                .expect("fixture");
        let mut list = vec![summary(6, Outcome::Succeeded)];
        note_running(&mut list, &status);
        assert_eq!(list.len(), 1, "no operation, no row");
        status.operation = Some(shared::restart::Operation {
            id: 7,
            kind: OpKind::Restart,
            started_at_ms: 5,
            requested_by: "me".to_owned(),
            from_flags: Default::default(),
            to_flags: Default::default(),
        });
        note_running(&mut list, &status);
        assert_eq!((list[0].id, list[0].outcome), (7, Outcome::Running));
        // The backend's record replaces it, and a late status does not undo that.
        upsert_restart(&mut list, summary(7, Outcome::Failed));
        note_running(&mut list, &status);
        assert_eq!((list.len(), list[0].outcome), (2, Outcome::Failed));
    }

    #[test]
    fn restarts_are_replaced_by_id_and_kept_newest_first() {
        let mut list = vec![summary(5, Outcome::Running), summary(3, Outcome::Failed)];
        upsert_restart(&mut list, summary(5, Outcome::Succeeded));
        assert_eq!(list.len(), 2);
        assert_eq!(list[0].outcome, Outcome::Succeeded);
        upsert_restart(&mut list, summary(6, Outcome::Running));
        upsert_restart(&mut list, summary(4, Outcome::Running));
        upsert_restart(&mut list, summary(1, Outcome::Running));
        let ids: Vec<i64> = list.iter().map(|r| r.id).collect();
        assert_eq!(ids, [6, 5, 4, 3, 1]);
        for id in 10..200 {
            upsert_restart(&mut list, summary(id, Outcome::Running));
        }
        assert_eq!(list.len(), MAX_RESTARTS);
        assert_eq!(list[0].id, 199);
    }

    fn progress(run_id: i64, done: u32) -> BenchProgress {
        BenchProgress {
            run_id,
            status: shared::bench::RunStatus::Running,
            concurrency: 16,
            repeat: 0,
            repeats: 3,
            done,
            total: 100,
            output_tok_s: 1.0,
            requested_by: "olga".to_owned(),
        }
    }

    #[test]
    fn bench_progress_follows_messages_and_status() {
        // A newer progress replaces; a late one for a finished run does not.
        let p = next_progress(None, progress(4, 10), 3);
        assert_eq!(p, Some(progress(4, 10)));
        let p = next_progress(p, progress(4, 20), 3);
        assert_eq!(p.as_ref().map(|p| p.done), Some(20));
        assert_eq!(next_progress(None, progress(4, 30), 4), None);
        assert_eq!(
            next_progress(Some(progress(5, 1)), progress(4, 30), 4),
            Some(progress(5, 1))
        );
        // The status's placeholder does not undo real progress of its run.
        let placeholder = progress(4, 0);
        assert_eq!(
            progress_for_status(Some(progress(4, 20)), Some(&placeholder), 3),
            Some(progress(4, 20))
        );
        assert_eq!(
            progress_for_status(None, Some(&placeholder), 3),
            Some(placeholder.clone())
        );
        assert_eq!(progress_for_status(Some(progress(4, 20)), None, 3), None);
        assert_eq!(progress_for_status(None, Some(&placeholder), 4), None);
    }

    #[test]
    fn reconnecting_counts_down() {
        let link = Link::Waiting {
            attempt: 3,
            delay_ms: 2000,
            retry_at_ms: 5000.0,
        };
        assert_eq!(
            ConnView::of(link, Some(0.0), 4300.0, 100),
            ConnView::Reconnecting {
                attempt: 3,
                delay_ms: 2000,
                retry_in_ms: Some(700)
            }
        );
        assert_eq!(
            ConnView::of(link, None, 6000.0, 100).state(),
            "reconnecting"
        );
    }
}
