//! What the manager reads from the managed server over HTTP, beside the
//! samples: the warm-up probe, whose findings are the machine's `Healthy` and
//! `Ready` inputs, and the metrics scrape, which the status and the timeline show.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{Notify, mpsc};
use tokio::task::JoinHandle;

use crate::config::file::{ApiKey, ServerConfig};
use crate::restart::probe::{self, ProbeEvent};
use crate::scrape::{self, Scraped};
use shared::restart::EngineIdentity;

/// The warm-up probe of the latest launch and where its findings come back,
/// each tagged with the generation it is about.
#[derive(Debug)]
pub(super) struct Probes {
    client: reqwest::Client,
    task: Option<JoinHandle<()>>,
    tx: mpsc::Sender<(u64, ProbeEvent)>,
    pub(super) rx: mpsc::Receiver<(u64, ProbeEvent)>,
}

impl Probes {
    pub(super) fn new(client: reqwest::Client) -> Self {
        let (tx, rx) = mpsc::channel(8);
        Self {
            client,
            task: None,
            tx,
            rx,
        }
    }

    /// Probes the server of `generation` until it is ready, in place of any
    /// probe still running.
    pub(super) fn start(&mut self, generation: u64, cfg: &ServerConfig) {
        self.stop();
        self.task = Some(tokio::spawn(probe::warmup(
            self.client.clone(),
            generation,
            cfg.health_url.clone(),
            cfg.readiness.clone(),
            self.tx.clone(),
        )));
    }

    /// Stops the running probe, if any.
    pub(super) fn stop(&mut self) {
        if let Some(p) = self.task.take() {
            p.abort();
        }
    }
}

/// The server's metrics as the background scrape last read them, and its pace.
#[derive(Debug)]
pub(super) struct Scrape {
    /// Set while an operation runs: the sampler then samples at ≥ 20 Hz, and the
    /// scrape reads often too.
    fast: Arc<AtomicBool>,
    scraped: Arc<Mutex<Scraped>>,
    /// What the server says it is, once it answered.
    identity: Arc<Mutex<Option<EngineIdentity>>>,
    /// Wakes the scrape when an operation starts.
    now: Arc<Notify>,
}

impl Scrape {
    /// Starts the background scrape of `cfg`'s metrics.
    pub(super) fn spawn(
        client: reqwest::Client,
        cfg: &ServerConfig,
        fast: Arc<AtomicBool>,
    ) -> Self {
        let scraped = Arc::new(Mutex::new(Scraped::default()));
        let identity = Arc::new(Mutex::new(None));
        let now = Arc::new(Notify::new());
        tokio::spawn(scrape::run(
            client,
            scrape::Urls {
                metrics: cfg.metrics_url.clone(),
                base: cfg.base_url.clone(),
                engine: cfg.engine,
            },
            Arc::clone(&fast),
            Arc::clone(&now),
            Arc::clone(&scraped),
            Arc::clone(&identity),
        ));
        Self {
            fast,
            scraped,
            identity,
            now,
        }
    }

    /// What the running server said it is, if it answered.
    pub(super) fn identity(&self) -> Option<EngineIdentity> {
        self.identity
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// What the scrape read last.
    pub(super) fn read(&self) -> Scraped {
        *self.scraped.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Samples and scrapes fast (while an operation runs) or not. Going fast
    /// drops the running-request count from before the operation and scrapes
    /// afresh.
    pub(super) fn fast(&self, on: bool) {
        self.fast.store(on, Ordering::Relaxed);
        if on {
            self.scraped
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .passive
                .running = None;
            self.now.notify_one();
        }
    }
}

/// The HTTP client the probes and the scrape share: every request carries the
/// server's API key, if it has one, as `Authorization: Bearer` (marked sensitive).
pub(crate) fn client(api_key: Option<&ApiKey>) -> reqwest::Client {
    let mut headers = reqwest::header::HeaderMap::new();
    if let Some(key) = api_key {
        headers.insert(reqwest::header::AUTHORIZATION, key.bearer());
    }
    reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(2))
        .default_headers(headers)
        .build()
        .unwrap_or_default()
}
