//! Benchmarks, owned by the manager so that a benchmark and a restart exclude
//! each other: one starts only when the server is Ready and nothing else runs.

use shared::bench::{BenchProgress, BenchRun, BenchSettings, FlagSet, RunStatus};
use shared::restart::OpKind;
use tokio::sync::{mpsc, watch};

use super::{Manager, Refusal};
use crate::bench::{self, RunContext, flagset, load::Target};
use crate::clock::now_ms;

/// The benchmark in flight.
#[derive(Debug)]
pub(super) struct RunningBench {
    pub(super) id: i64,
    pub(super) repeats: u32,
    pub(super) requested_by: String,
    pub(super) cancel: watch::Sender<crate::bench::load::Halt>,
}

/// The manager's benchmarks: at most one at a time, and never beside an
/// operation.
#[derive(Debug)]
pub(super) struct Benches {
    /// The benchmark in flight.
    pub(super) current: Option<RunningBench>,
    /// Where a finished (or cancelled) run comes back to the manager's loop.
    tx: mpsc::Sender<BenchRun>,
    pub(super) rx: mpsc::Receiver<BenchRun>,
    /// An operation just succeeded: benchmark it, if configured to, once the
    /// manager is back at an await point.
    pub(super) pending: Option<(OpKind, i64)>,
}

impl Benches {
    pub(super) fn new() -> Self {
        let (tx, rx) = mpsc::channel(2);
        Self {
            current: None,
            tx,
            rx,
            pending: None,
        }
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
        let serde_json::Value::Object(changes) = overrides else {
            return Err(Refusal::BadRequest(
                "send the settings to change as a JSON object".to_owned(),
            ));
        };
        let mut base = serde_json::to_value(&self.cfg.bench.defaults)
            .map_err(|e| Refusal::BadRequest(e.to_string()))?;
        if let serde_json::Value::Object(b) = &mut base {
            b.extend(changes);
        }
        // serde's message quotes the value; this one is audited, so it does not.
        serde_json::from_value(base).map_err(|_| {
            Refusal::BadRequest(
                "invalid settings: a field is unknown or of the wrong type (the fields: api, \
                 concurrency, num_prompts, input_len, output_len, warmup, repeats, correctness, \
                 request_rate, burstiness, max_concurrency, slo, seed, dataset, prefix_groups, \
                 prefix_len)"
                    .to_owned(),
            )
        })
    }

    /// The dataset a benchmark names, read from the configured directory
    /// (off the manager's thread: a file may be up to 64 MiB).
    async fn load_dataset(&self, name: &str) -> Result<crate::bench::dataset::Dataset, Refusal> {
        let Some(dir) = self.cfg.bench.datasets.clone() else {
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

    /// Why a benchmark cannot start now, if it cannot.
    pub(super) fn bench_blocked(&self) -> Option<String> {
        if let Some(b) = &self.bench.current {
            return Some(format!("benchmark #{} is already running", b.id));
        }
        if let Some(kind) = self.machine.busy() {
            return Some(format!(
                "a {} is running; benchmark when it is done",
                crate::restart::machine::op_name(kind)
            ));
        }
        if self.machine.phase() != shared::restart::Phase::Ready {
            return Some(format!(
                "the server is {}, not ready",
                self.machine.phase().label()
            ));
        }
        None
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
        if let Some(why) = self.bench_blocked() {
            return Err(Refusal::Conflict {
                message: why,
                operation: self.op.as_ref().map(|o| o.op.clone()),
            });
        }
        let dataset = match &settings.dataset {
            Some(name) => Some(std::sync::Arc::new(self.load_dataset(name).await?)),
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
        let (cancel, cancelled) = watch::channel(crate::bench::load::Halt::Run);
        let ctx = RunContext {
            target: Target {
                base_url: self.cfg.base_url.clone(),
                api: run.settings.api,
                model: self.cfg.bench.request_model.clone(),
                api_key: self.cfg.api_key.clone(),
                tokenizer: self.tokenizer.clone(),
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
        let done = self.bench.tx.clone();
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
            requested_by: requested_by.clone(),
        });
        tokio::spawn(async move {
            let finished = bench::run(run, ctx).await;
            let _ = done.send(finished).await;
        });
        self.bench.current = Some(RunningBench {
            id,
            repeats,
            requested_by,
            cancel,
        });
        self.publish_status(true);
        Ok(id)
    }

    /// Asks the running benchmark to stop; returns its id.
    pub(super) fn cancel_bench(&mut self) -> Result<i64, Refusal> {
        match &self.bench.current {
            Some(b) => {
                let _ = b.cancel.send(crate::bench::load::Halt::Cancel);
                Ok(b.id)
            }
            None => Err(Refusal::Conflict {
                message: "no benchmark is running".to_owned(),
                operation: None,
            }),
        }
    }

    /// A benchmark finished (or was cancelled).
    pub(super) fn bench_done(&mut self, run: BenchRun) {
        tracing::info!(run = run.id, status = ?run.status, "benchmark finished");
        self.bench.current = None;
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
            || self.lease.is_some()
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
fn fits_in_memory(
    d: &crate::bench::dataset::Dataset,
    settings: &BenchSettings,
) -> Result<(), Refusal> {
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
