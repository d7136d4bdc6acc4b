//! The page's state: every signal the socket writes and the components read,
//! bundled in the `Copy` [`AppState`] that `App` provides as context, and how
//! each message from the server changes it. The rules behind the connection
//! badge, the restart history and the benchmark progress are in the modules
//! below.

mod link;
mod progress;
mod restarts;

use std::collections::HashMap;

use leptos::prelude::*;
use shared::auth::{Presence, SessionInfo};
use shared::bench::{BenchProgress, LedgerView};
use shared::campaign::CampaignInfo;
use shared::flags::Flags;
use shared::restart::{OpKind, RestartSummary, ServerStatus};
use shared::{HostInfo, PROTOCOL_VERSION, Sample, ServerMsg, Snapshot};

pub(crate) use self::link::{ConnView, Link};
use self::progress::{next_progress, progress_for_status};
use self::restarts::{MAX_RESTARTS, note_running, upsert_restart};
use crate::ledger::live::RunBrief;
use crate::series::{self, Series};

/// A message from the server as the page reads it: a finished benchmark run
/// as a [`RunBrief`], a changed campaign step as [`StepChanged`].
pub(crate) type Msg = ServerMsg<RunBrief, StepChanged>;

/// That one of a campaign's steps changed: the page asks for the campaign's
/// view again and reads nothing of the step itself.
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
pub(crate) struct StepChanged {}

/// Assumed sampling period before the server has said what it is.
const DEFAULT_INTERVAL_MS: u64 = 1000;

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
    /// The restart whose timeline grew last, and how many `timeline`
    /// messages came so far: its drain chart is asked for again.
    pub(crate) timeline: RwSignal<(i64, u64)>,
    /// The running benchmark, from `bench` messages and the server's status.
    pub(crate) bench: RwSignal<Option<BenchProgress>>,
    /// The newest run that finished (from `bench_run` messages).
    pub(crate) last_run: RwSignal<Option<RunBrief>>,
    /// The throughput ledger as the agent drew it for the viewer's picks
    /// (`GET /api/flagsets/view`).
    pub(crate) ledger: RwSignal<Option<LedgerView>>,
    /// Bumped whenever the ledger should be fetched again.
    pub(crate) ledger_gen: RwSignal<u64>,
    /// Who this page is logged in as (`GET /api/session`).
    pub(crate) session: RwSignal<Option<SessionInfo>>,
    /// Who is connected now.
    pub(crate) presence: RwSignal<Vec<Presence>>,
    /// The newest campaign's header (snapshot and `campaign` messages).
    pub(crate) campaign_head: RwSignal<Option<CampaignInfo>>,
    /// Bumped when that campaign's view should be fetched again: a snapshot
    /// (steps may have changed while the socket was down), a `campaign` or a
    /// `campaign_step` message.
    pub(crate) campaign_gen: RwSignal<u64>,
    /// The plan builder is open.
    pub(crate) plan_open: RwSignal<bool>,
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
            timeline: RwSignal::new((0, 0)),
            bench: RwSignal::new(None),
            last_run: RwSignal::new(None),
            ledger: RwSignal::new(None),
            ledger_gen: RwSignal::new(0),
            session: RwSignal::new(None),
            presence: RwSignal::new(Vec::new()),
            campaign_head: RwSignal::new(None),
            campaign_gen: RwSignal::new(0),
            plan_open: RwSignal::new(false),
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
            ServerMsg::Timeline { restart_id, .. } => {
                self.timeline.update(|t| *t = (restart_id, t.1 + 1));
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
            ServerMsg::Campaign(info) => self.apply_campaign(info),
            ServerMsg::CampaignStep { campaign_id, .. } => {
                if self
                    .campaign_head
                    .with_untracked(|h| h.as_ref().is_some_and(|h| h.id == campaign_id))
                {
                    self.campaign_gen.update(|g| *g += 1);
                }
            }
            ServerMsg::Error { code, message } => {
                leptos::logging::warn!("server error {code:?}: {message}");
                self.notice
                    .set(Some(format!("the server rejected a message: {message}")));
            }
        }
    }

    /// A campaign's new header: the one the page shows, drawn again.
    fn apply_campaign(&self, info: CampaignInfo) {
        if self
            .campaign_head
            .with_untracked(|h| h.as_ref() != Some(&info))
        {
            self.campaign_head.set(Some(info));
        }
        self.campaign_gen.update(|g| *g += 1);
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
        crate::sort::sort_by_key(&mut restarts, |r| std::cmp::Reverse(r.id));
        restarts.truncate(MAX_RESTARTS);
        if let Some(status) = &snapshot.server {
            note_running(&mut restarts, status);
            self.take_bench_status(status);
        }
        self.restarts.set(restarts);
        self.server.set(snapshot.server);
        self.presence.set(snapshot.presence);
        if let Some(info) = snapshot.campaign {
            self.apply_campaign(info);
        }
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
