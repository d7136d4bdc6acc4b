//! Benchmarks, owned by the manager so that a benchmark and a restart exclude
//! each other: one starts only when the server is Ready and nothing else runs.

use shared::bench::{BenchProgress, BenchRun, BenchSettings, FlagSet, RunStatus};
use shared::restart::OpKind;
use tokio::sync::{mpsc, watch};

use std::path::Path;

use super::{Manager, Refusal};
use crate::bench::dataset::Dataset;
use crate::bench::load::{Halt, Target};
use crate::bench::tokens::Tokenizer;
use crate::bench::{self, RunContext, flagset};
use crate::clock::now_ms;
use crate::restart::machine::Machine;

/// The benchmark in flight.
#[derive(Debug)]
struct RunningBench {
    id: i64,
    repeats: u32,
    requested_by: String,
    cancel: watch::Sender<Halt>,
}

/// The manager's benchmarks: at most one at a time, and never beside an
/// operation. They own the config's tokenizer, which prompts and datasets
/// are measured in.
#[derive(Debug)]
pub(super) struct Benches {
    tokenizer: Option<Tokenizer>,
    /// The benchmark in flight.
    current: Option<RunningBench>,
    /// Where a finished (or cancelled) run comes back to the manager's loop.
    tx: mpsc::Sender<BenchRun>,
    pub(super) rx: mpsc::Receiver<BenchRun>,
    /// An operation just succeeded: benchmark it, if configured to, once the
    /// manager is back at an await point.
    pending: Option<(OpKind, i64)>,
}

impl Benches {
    pub(super) fn new(tokenizer: Option<Tokenizer>) -> Self {
        let (tx, rx) = mpsc::channel(2);
        Self {
            tokenizer,
            current: None,
            tx,
            rx,
            pending: None,
        }
    }

    /// The id of the benchmark in flight, if one is.
    pub(super) fn running(&self) -> Option<i64> {
        self.current.as_ref().map(|b| b.id)
    }

    /// The benchmark in flight, as the server's status shows it.
    pub(super) fn shown(&self) -> Option<BenchProgress> {
        self.current.as_ref().map(|b| BenchProgress {
            run_id: b.id,
            status: RunStatus::Running,
            concurrency: 0,
            request_rate: None,
            repeat: 0,
            repeats: b.repeats,
            done: 0,
            total: 0,
            output_tok_s: 0.0,
            requested_by: b.requested_by.clone(),
        })
    }

    /// Why a benchmark cannot start beside `machine` now, if it cannot.
    fn blocked(&self, machine: &Machine) -> Option<String> {
        if let Some(id) = self.running() {
            return Some(format!("benchmark #{id} is already running"));
        }
        if let Some(kind) = machine.busy() {
            return Some(format!(
                "a {} is running; benchmark when it is done",
                crate::restart::machine::op_name(kind)
            ));
        }
        if machine.phase() != shared::restart::Phase::Ready {
            return Some(format!(
                "the server is {}, not ready",
                machine.phase().label()
            ));
        }
        None
    }

    /// The dataset a benchmark names, read from `dir` (off the manager's
    /// thread: a file may be up to 64 MiB).
    async fn dataset(&self, dir: Option<&Path>, name: &str) -> Result<Dataset, Refusal> {
        let Some(dir) = dir.map(Path::to_owned) else {
            return Err(Refusal::BadRequest(
                "dataset: this server's config names no [bench] datasets directory".to_owned(),
            ));
        };
        let (name, tokenizer) = (name.to_owned(), self.tokenizer.clone());
        tokio::task::spawn_blocking(move || {
            crate::bench::dataset::load(&dir, &name, tokenizer.as_ref())
        })
        .await
        .map_err(|_| Refusal::BadRequest("dataset: reading it failed".to_owned()))?
        .map_err(|e| Refusal::BadRequest(e.to_string()))
    }

    /// Runs `run` (recorded) in `ctx` until it ends; `cancel` halts it (its
    /// receiver is `ctx`'s), and the run comes back on `rx`.
    fn launch(&mut self, run: BenchRun, ctx: RunContext, cancel: watch::Sender<Halt>) {
        self.current = Some(RunningBench {
            id: run.id,
            repeats: run.settings.repeats,
            requested_by: run.requested_by.clone(),
            cancel,
        });
        let done = self.tx.clone();
        tokio::spawn(async move {
            let finished = bench::run(run, ctx).await;
            let _ = done.send(finished).await;
        });
    }

    /// Asks the benchmark in flight to stop; returns its id.
    pub(super) fn cancel(&self) -> Result<i64, Refusal> {
        match &self.current {
            Some(b) => {
                let _ = b.cancel.send(Halt::Cancel);
                Ok(b.id)
            }
            None => Err(Refusal::Conflict {
                message: "no benchmark is running".to_owned(),
                operation: None,
            }),
        }
    }

    /// A restart or a stop begins: the benchmark in flight sends nothing
    /// more; what it has in flight stays open, to be drained with the server,
    /// and the run is recorded interrupted. Returns its id.
    pub(super) fn interrupt(&self) -> Option<i64> {
        let b = self.current.as_ref()?;
        let _ = b.cancel.send(Halt::Drain);
        Some(b.id)
    }

    /// The benchmark in flight came back.
    fn finished(&mut self) {
        self.current = None;
    }

    /// An operation of `kind` just succeeded: benchmark it at the next
    /// await point, if configured to.
    pub(super) fn after(&mut self, kind: OpKind, restart_id: i64) {
        self.pending = Some((kind, restart_id));
    }

    /// The operation waiting for its benchmark, if one is.
    pub(super) fn take_pending(&mut self) -> Option<(OpKind, i64)> {
        self.pending.take()
    }
}

impl Manager {
    /// The flag set the server runs now, as stored and shown: secrets redacted.
    pub(super) fn current_flagset(&self) -> FlagSet {
        let now = now_ms();
        let redactor = crate::redact::global();
        FlagSet {
            id: flagset::id(redactor, &self.cfg.model, &self.flags),
            model: self.cfg.model.clone(),
            flags: redactor.flags(&self.flags),
            label: None,
            notes: None,
            first_seen_ms: now,
            last_seen_ms: now,
        }
    }

    /// The config's defaults with a request's changes on top.
    pub(super) fn bench_settings(
        &self,
        overrides: serde_json::Value,
    ) -> Result<BenchSettings, Refusal> {
        crate::bench::overrides::with_changes(&self.cfg.bench.defaults, &overrides)
            .map_err(|e| Refusal::BadRequest(e.to_string()))
    }

    /// What a run's provenance takes from the host and the config.
    fn provenance(&self) -> shared::bench::Provenance {
        let host = self.hub.host();
        let (driver_version, cuda_version) = match &host.nvml {
            shared::sample::NvmlStatus::Ok {
                driver_version,
                cuda_driver_version,
                ..
            } => (
                driver_version.clone(),
                cuda_driver_version.map(|v| format!("{}.{}", v / 1000, (v % 1000) / 10)),
            ),
            shared::sample::NvmlStatus::Unavailable { .. } => (None, None),
        };
        let (model, revision) = match self.cfg.model.rsplit_once('@') {
            Some((m, r)) if !r.is_empty() => (m.to_owned(), Some(r.to_owned())),
            _ => (self.cfg.model.clone(), None),
        };
        shared::bench::Provenance {
            drainwatch_version: host.version.clone(),
            hostname: host.hostname.clone(),
            simulated: host.nvml.is_simulated(),
            driver_version,
            cuda_version,
            model,
            revision,
            ..shared::bench::Provenance::default()
        }
    }

    /// Starts a benchmark of the running server; returns its id.
    pub(super) async fn start_bench(
        &mut self,
        settings: BenchSettings,
        peer: String,
        restart_id: Option<i64>,
        campaign: Option<(i64, u32)>,
    ) -> Result<i64, Refusal> {
        settings.validate().map_err(Refusal::BadRequest)?;
        if let Some(why) = self.bench.blocked(&self.machine) {
            return Err(Refusal::Conflict {
                message: why,
                operation: self.op.as_ref().map(|o| o.op.clone()),
            });
        }
        let dataset = match &settings.dataset {
            Some(name) => {
                let dir = self.cfg.bench.datasets.as_deref();
                Some(std::sync::Arc::new(self.bench.dataset(dir, name).await?))
            }
            None => None,
        };
        if let Some(d) = &dataset {
            fits_in_memory(d, &settings)?;
        }
        let set = self.current_flagset();
        self.store.flagset_seen(set.clone());
        let mut run = BenchRun {
            id: 0,
            flagset: set.id,
            restart_id,
            requested_by: peer,
            settings,
            status: RunStatus::Running,
            started_at_ms: now_ms(),
            finished_at_ms: None,
            error: None,
            correctness: None,
            repeats: Vec::new(),
            levels: Vec::new(),
            provenance: None,
            campaign_id: campaign.map(|c| c.0),
            campaign_step: campaign.map(|c| c.1),
        };
        run.id = self.store.bench_begin(run.clone()).await.map_err(|e| {
            tracing::error!(error = %e, "cannot record the benchmark");
            Refusal::Conflict {
                message: "cannot record the benchmark; drainwatch's log says why".to_owned(),
                operation: None,
            }
        })?;
        let (cancel, cancelled) = watch::channel(Halt::Run);
        let ctx = RunContext {
            target: Target {
                base_url: self.cfg.base_url.clone(),
                api: run.settings.api,
                model: self.cfg.bench.request_model.clone(),
                api_key: self.cfg.api_key.clone(),
                tokenizer: self.bench.tokenizer.clone(),
                engine: self.cfg.engine,
            },
            store: self.store.clone(),
            hub: std::sync::Arc::clone(&self.hub),
            cancel: cancelled,
            provenance: self.provenance(),
            dataset,
            count_throttle: self.cfg.health.throttle == crate::config::file::Policy::Warn,
        };
        let (id, repeats, requested_by) = (run.id, run.settings.repeats, run.requested_by.clone());
        let first = run.settings.levels().first().copied();
        self.hub.publish_bench(BenchProgress {
            run_id: id,
            status: RunStatus::Running,
            concurrency: first.map_or(0, |k| k.concurrency),
            request_rate: first.and_then(|k| k.request_rate),
            repeat: 0,
            repeats,
            done: 0,
            total: 0,
            output_tok_s: 0.0,
            requested_by,
        });
        self.bench.launch(run, ctx, cancel);
        self.publish_status(true);
        Ok(id)
    }

    /// A benchmark finished (or was cancelled).
    pub(super) fn bench_done(&mut self, run: BenchRun) {
        tracing::info!(run = run.id, status = ?run.status, "benchmark finished");
        self.bench.finished();
        let _ = self
            .events
            .send(super::Event::BenchFinished(Box::new(run.clone())));
        let (store, hub) = (self.store.clone(), std::sync::Arc::clone(&self.hub));
        tokio::spawn(async move {
            store.flush().await;
            hub.publish_bench_run(run);
        });
        self.publish_status(true);
    }

    /// After a successful restart or start: benchmark it, if configured to.
    pub(super) async fn bench_after(&mut self, kind: OpKind, restart_id: i64) {
        // A campaign benchmarks its own steps.
        if !self.cfg.bench.after_restart
            || !matches!(kind, OpKind::Restart | OpKind::Start)
            || self.holds.lease().is_some()
        {
            return;
        }
        let settings = self.cfg.bench.defaults.clone();
        if let Err(e) = self
            .start_bench(settings, "after restart".to_owned(), Some(restart_id), None)
            .await
        {
            tracing::warn!(?e, "no benchmark after the restart");
        }
    }
}

/// Each request in flight holds its prompt: `d`'s longest prompt times the
/// requests `settings` keeps in flight must fit in what a benchmark may hold.
fn fits_in_memory(d: &Dataset, settings: &BenchSettings) -> Result<(), Refusal> {
    let (longest, in_flight) = (d.max_prompt_bytes(), settings.max_in_flight());
    if longest * u64::from(in_flight) > shared::bench::MAX_BENCH_MEMORY {
        return Err(Refusal::BadRequest(format!(
            "dataset `{}`: its longest prompt ({} KiB) times the requests in flight ({}) is \
             over the {} MiB a benchmark may hold: lower the concurrency",
            d.name,
            longest / 1024,
            in_flight,
            shared::bench::MAX_BENCH_MEMORY >> 20
        )));
    }
    Ok(())
}
