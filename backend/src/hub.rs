//! The meeting point between the sampler (one writer) and every client (many
//! readers): the latest sample (`watch`), the live stream (`broadcast`, bounded:
//! a client that falls behind is resynced, never buffered without limit), and a
//! bounded history for late joiners. Each sample is serialized once, here, for all
//! clients.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};

use axum::extract::ws::Utf8Bytes;
use shared::auth::{Presence, Role};
use shared::restart::{RestartSummary, ServerStatus};
use shared::{HistoryPoint, HostInfo, Sample, ServerMsg, Snapshot};
use tokio::sync::{broadcast, watch};

/// One sample and its `/ws` message, ready to send.
#[derive(Debug)]
pub struct Published {
    pub sample: Sample,
    /// `ServerMsg::Sample` as JSON text.
    pub json: Utf8Bytes,
}

/// The smallest spacing of history points sent in a snapshot.
const HISTORY_STEP_MS: u64 = 1_000;
/// Restarts a snapshot carries (the table's first page).
const RECENT_RESTARTS: usize = 20;

#[derive(Debug)]
pub struct Hub {
    host: HostInfo,
    latest: watch::Sender<Option<Arc<Published>>>,
    stream: broadcast::Sender<Arc<Published>>,
    history: Mutex<VecDeque<HistoryPoint>>,
    history_len: usize,
    /// The managed server's status and restart records, pushed as they change.
    server: watch::Sender<Option<ServerStatus>>,
    restarts: Mutex<Vec<RestartSummary>>,
    events: broadcast::Sender<Utf8Bytes>,
    /// Who has sockets open, by name (or address).
    presence: Mutex<BTreeMap<String, Presence>>,
    /// The newest campaign's header, for snapshots.
    campaign: Mutex<Option<shared::campaign::CampaignInfo>>,
}

/// Why a socket may not join.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Full {
    /// This person (token, or address without authentication) has the most.
    Client,
    /// The host has the most sockets it serves, whoever holds them.
    Host,
}

/// One open socket's place in [`Hub`]'s presence; leaves when dropped.
#[derive(Debug)]
pub struct Present {
    hub: Arc<Hub>,
    who: String,
}

impl Drop for Present {
    fn drop(&mut self) {
        self.hub.leave(&self.who);
    }
}

impl Hub {
    /// Keeps `host.history_ms` of history; `client_buffer`: samples a client may
    /// fall behind before it is resynced.
    pub fn new(host: HostInfo, client_buffer: usize) -> Self {
        let (stream, _) = broadcast::channel(client_buffer.max(1));
        let step = HISTORY_STEP_MS.max(host.sample_interval_ms);
        let history_len = (host.history_ms / step).max(1) as usize;
        Self {
            host,
            latest: watch::Sender::new(None),
            stream,
            history: Mutex::new(VecDeque::with_capacity(history_len)),
            history_len,
            server: watch::Sender::new(None),
            restarts: Mutex::new(Vec::new()),
            events: broadcast::channel(256).0,
            presence: Mutex::new(BTreeMap::new()),
            campaign: Mutex::new(None),
        }
    }

    /// Counts a socket for `who`, unless `who` already has `max` open; every
    /// client is told who is connected now.
    pub fn join(
        self: &Arc<Self>,
        who: &str,
        role: Role,
        max: u32,
        max_all: u32,
    ) -> Result<Present, Full> {
        let list = {
            let mut p = self.presence.lock().unwrap_or_else(|p| p.into_inner());
            if p.get(who).is_some_and(|e| e.sockets >= max) {
                return Err(Full::Client);
            }
            if p.values().map(|e| e.sockets).sum::<u32>() >= max_all {
                return Err(Full::Host);
            }
            let entry = p.entry(who.to_owned()).or_insert_with(|| Presence {
                who: who.to_owned(),
                role,
                sockets: 0,
                since_ms: crate::clock::now_ms(),
            });
            entry.sockets += 1;
            entry.role = entry.role.max(role);
            p.values().cloned().collect()
        };
        self.push_event(&ServerMsg::Presence { clients: list });
        Ok(Present {
            hub: Arc::clone(self),
            who: who.to_owned(),
        })
    }

    fn leave(&self, who: &str) {
        let list = {
            let mut p = self.presence.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(e) = p.get_mut(who) {
                e.sockets = e.sockets.saturating_sub(1);
                if e.sockets == 0 {
                    p.remove(who);
                }
            }
            p.values().cloned().collect()
        };
        self.push_event(&ServerMsg::Presence { clients: list });
    }

    /// Who is connected now.
    pub fn presence(&self) -> Vec<Presence> {
        let p = self.presence.lock().unwrap_or_else(|p| p.into_inner());
        p.values().cloned().collect()
    }

    /// Sets the restart history a snapshot starts from (newest first).
    pub fn set_restarts(&self, mut recent: Vec<RestartSummary>) {
        recent.truncate(RECENT_RESTARTS);
        *self.restarts.lock().unwrap_or_else(|p| p.into_inner()) = recent;
    }

    /// The managed server changed: keep it for snapshots and push it.
    pub fn publish_server(&self, status: ServerStatus) {
        self.push_event(&ServerMsg::Server(status.clone()));
        self.server.send_replace(Some(status));
    }

    /// A restart record was created or changed.
    pub fn publish_restart(&self, summary: RestartSummary) {
        {
            let mut r = self.restarts.lock().unwrap_or_else(|p| p.into_inner());
            shared::restart::upsert_summary(&mut r, summary.clone(), RECENT_RESTARTS);
        }
        self.push_event(&ServerMsg::Restart(summary));
    }

    fn push_event(&self, msg: &ServerMsg) {
        match serde_json::to_string(msg) {
            Ok(j) => {
                let _ = self.events.send(Utf8Bytes::from(j));
            }
            Err(e) => tracing::error!(error = %e, "cannot serialize an event"),
        }
    }

    /// The running benchmark advanced.
    pub fn publish_bench(&self, progress: shared::bench::BenchProgress) {
        self.push_event(&ServerMsg::Bench(progress));
    }

    /// New points of the running operation's timeline.
    pub fn publish_timeline(&self, restart_id: i64, points: Vec<shared::restart::TimelinePoint>) {
        self.push_event(&ServerMsg::Timeline { restart_id, points });
    }

    /// A benchmark run finished.
    pub fn publish_bench_run(&self, run: shared::bench::BenchRun) {
        self.push_event(&ServerMsg::BenchRun(run));
    }

    /// A campaign started or changed: kept for snapshots and pushed.
    pub fn publish_campaign(&self, info: shared::campaign::CampaignInfo) {
        self.push_event(&ServerMsg::Campaign(info.clone()));
        *self.campaign.lock().unwrap_or_else(|p| p.into_inner()) = Some(info);
    }

    /// One of a campaign's steps changed (its flags already redacted).
    pub fn publish_campaign_step(&self, campaign_id: i64, step: shared::campaign::Step) {
        self.push_event(&ServerMsg::CampaignStep { campaign_id, step });
    }

    /// Server status and restart records as they change (already serialized).
    pub fn subscribe_events(&self) -> broadcast::Receiver<Utf8Bytes> {
        self.events.subscribe()
    }

    pub fn server_status(&self) -> Option<ServerStatus> {
        self.server.borrow().clone()
    }

    pub fn host(&self) -> &HostInfo {
        &self.host
    }

    /// Makes `sample` the latest, appends it to history and sends it to every client.
    pub fn publish(&self, sample: Sample) {
        let msg: ServerMsg = ServerMsg::Sample(sample);
        let json = match serde_json::to_string(&msg) {
            Ok(j) => Utf8Bytes::from(j),
            Err(e) => {
                tracing::error!(error = %e, "cannot serialize a sample");
                return;
            }
        };
        let ServerMsg::Sample(sample) = msg else {
            unreachable!("built as a sample above")
        };
        {
            // One point per step (the newest in it): memory stays bounded by the
            // history's duration, whatever the sampling rate.
            let step = self.history_step_ms();
            let point = HistoryPoint::of(&sample);
            let mut h = self.history.lock().unwrap_or_else(|p| p.into_inner());
            match h.back_mut() {
                Some(last) if last.at_ms / step == point.at_ms / step => *last = point,
                _ => {
                    if h.len() == self.history_len {
                        h.pop_front();
                    }
                    h.push_back(point);
                }
            }
        }
        let published = Arc::new(Published { sample, json });
        self.latest.send_replace(Some(Arc::clone(&published)));
        // No receivers is fine: nobody is connected.
        let _ = self.stream.send(published);
    }

    pub fn subscribe(&self) -> broadcast::Receiver<Arc<Published>> {
        self.stream.subscribe()
    }

    pub fn latest(&self) -> Option<Arc<Published>> {
        self.latest.borrow().clone()
    }

    /// Watch for new samples (for waiting on the first one, or staleness checks).
    pub fn watch_latest(&self) -> watch::Receiver<Option<Arc<Published>>> {
        self.latest.subscribe()
    }

    pub fn client_count(&self) -> usize {
        self.stream.receiver_count()
    }

    fn history_step_ms(&self) -> u64 {
        HISTORY_STEP_MS.max(self.host.sample_interval_ms)
    }

    /// The whole state for a client starting from nothing, history included (one
    /// point per second, the newest in each second).
    pub fn snapshot(&self) -> Snapshot {
        let history: Vec<HistoryPoint> = {
            let h = self.history.lock().unwrap_or_else(|p| p.into_inner());
            h.iter().cloned().collect()
        };
        Snapshot {
            host: self.host.clone(),
            latest: self.latest().map(|p| p.sample.clone()),
            history,
            history_step_ms: self.history_step_ms(),
            server: self.server_status(),
            restarts: self
                .restarts
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone(),
            presence: self.presence(),
            campaign: self
                .campaign
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone(),
        }
    }
}

/// A host and samples without GPUs, for the tests of the hub and its readers.
#[cfg(test)]
pub(crate) mod fixtures {
    use shared::{HostInfo, NvmlStatus, Sample};

    /// A host sampled every 100 ms that keeps `history_ms` of history.
    pub(crate) fn host(history_ms: u64) -> HostInfo {
        HostInfo {
            hostname: "h".into(),
            version: "0".into(),
            nvml: NvmlStatus::Unavailable {
                library: "x".into(),
                reason: "y".into(),
            },
            sample_interval_ms: 100,
            history_ms,
            server_port: None,
            own_pid_namespace: false,
        }
    }

    pub(crate) fn sample(seq: u64, at_ms: u64) -> Sample {
        Sample {
            seq,
            at_ms,
            took_us: 1,
            gpus: Vec::new(),
            processes: Vec::new(),
            server: None,
            processes_error: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::fixtures::{host, sample};
    use super::*;

    #[test]
    fn history_is_thinned_as_stored_and_bounded_by_duration() {
        // history_ms 3000 at 100 ms sampling: 3 points of one second each.
        let hub = Hub::new(host(3000), 4);
        for i in 0..40 {
            hub.publish(sample(i, 10_000 + i * 100));
        }
        let snap = hub.snapshot();
        assert_eq!(snap.latest.as_ref().map(|s| s.seq), Some(39));
        assert_eq!(snap.history_step_ms, 1000);
        // Newest point of each of the last three seconds.
        let at: Vec<u64> = snap.history.iter().map(|p| p.at_ms).collect();
        assert_eq!(at, vec![11_900, 12_900, 13_900]);
    }

    #[test]
    fn lagging_subscriber_is_told() {
        let hub = Hub::new(host(3000), 2);
        let mut rx = hub.subscribe();
        for i in 0..5 {
            hub.publish(sample(i, i));
        }
        assert!(matches!(
            rx.try_recv(),
            Err(broadcast::error::TryRecvError::Lagged(3))
        ));
    }
}
