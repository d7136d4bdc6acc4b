//! Whether the load generator kept up: a tick on its runtime every 10 ms
//! measures how late the event loop wakes, `/proc/self/stat` the CPU the process
//! used, and (open loop) each request's outcome says how late it was sent. A
//! repeat whose client was the bottleneck is marked, rather than the server
//! reported as slow.

use std::time::Duration;

use shared::bench::ClientHealth;
use tokio::sync::watch;
use tokio::time::Instant;

use super::load::Outcome;

const TICK: Duration = Duration::from_millis(10);

/// Lateness in 0.1 ms buckets up to 1 s, and the worst: bounded memory
/// however long a repeat runs.
#[derive(Debug, Clone)]
struct Lags {
    buckets: Vec<u32>,
    count: u64,
    max_ms: f64,
}

impl Lags {
    const BUCKETS: usize = 10_000;

    fn new() -> Self {
        Self {
            buckets: vec![0; Self::BUCKETS + 1],
            count: 0,
            max_ms: 0.0,
        }
    }

    fn add(&mut self, ms: f64) {
        let i = ((ms * 10.0).max(0.0) as usize).min(Self::BUCKETS);
        self.buckets[i] += 1;
        self.count += 1;
        self.max_ms = self.max_ms.max(ms);
    }

    /// The upper edge of the bucket holding the p-th percentile (at most the
    /// worst seen).
    fn pct(&self, p: f64) -> f64 {
        if self.count == 0 {
            return 0.0;
        }
        let rank = ((p / 100.0) * self.count as f64).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (i, n) in self.buckets.iter().enumerate() {
            seen += u64::from(*n);
            if seen >= rank {
                return if i == Self::BUCKETS {
                    self.max_ms
                } else {
                    ((i + 1) as f64 / 10.0).min(self.max_ms)
                };
            }
        }
        self.max_ms
    }
}

/// The CPU time this process has used (user + system, all its threads), in
/// seconds, from `/proc/self/stat`.
fn cpu_seconds() -> f64 {
    crate::identity::stat(std::process::id()).map_or(0.0, |s| {
        (s.utime + s.stime) as f64 / procfs::ticks_per_second() as f64
    })
}

/// Watches the runtime it was started on until [`Monitor::finish`].
#[derive(Debug)]
pub struct Monitor {
    stop: watch::Sender<bool>,
    ticks: tokio::task::JoinHandle<Lags>,
    started: Instant,
    cpu0: f64,
}

impl Monitor {
    /// Starts ticking on the current runtime.
    pub fn start() -> Self {
        let (stop, mut stopped) = watch::channel(false);
        let ticks = tokio::spawn(async move {
            let mut lags = Lags::new();
            loop {
                let due = Instant::now() + TICK;
                tokio::select! {
                    _ = tokio::time::sleep_until(due) => {}
                    _ = stopped.wait_for(|s| *s) => break,
                }
                lags.add(Instant::now().saturating_duration_since(due).as_secs_f64() * 1e3);
            }
            lags
        });
        Self {
            stop,
            ticks,
            started: Instant::now(),
            cpu0: cpu_seconds(),
        }
    }

    /// Stops ticking; judges the repeat whose requests are `outcomes`
    /// (`open`: sent at arrival times, so their lateness counts).
    pub async fn finish(self, outcomes: &[Outcome], open: bool) -> ClientHealth {
        let wall = self.started.elapsed().as_secs_f64().max(1e-9);
        let cpu = cpu_seconds() - self.cpu0;
        let _ = self.stop.send(true);
        let lags = self.ticks.await.unwrap_or_else(|_| Lags::new());
        let (send_late_p99_ms, waited_for_slot) = if open {
            let mut late: Vec<f64> = outcomes.iter().map(|o| o.send_late * 1e3).collect();
            late.sort_by(f64::total_cmp);
            let p99 = super::stats::latency(late.iter().map(|ms| ms / 1e3).collect()).p99_ms;
            (
                Some(p99),
                Some(outcomes.iter().filter(|o| o.waited > 0.0).count() as u32),
            )
        } else {
            (None, None)
        };
        ClientHealth {
            lag_p99_ms: lags.pct(99.0),
            lag_max_ms: lags.max_ms,
            cpu_pct: cpu / wall * 100.0,
            cores: std::thread::available_parallelism().map_or(1, |n| n.get() as u32),
            send_late_p99_ms,
            waited_for_slot,
            saturated: None,
        }
        .judge()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lag_percentiles_are_bucketed_and_bounded() {
        let mut l = Lags::new();
        for _ in 0..98 {
            l.add(0.05);
        }
        l.add(30.0);
        l.add(2_500.0);
        assert_eq!(l.pct(50.0), 0.1);
        assert_eq!(l.pct(99.0), 30.1);
        assert_eq!(l.pct(100.0), 2_500.0);
        assert_eq!(l.max_ms, 2_500.0);
        assert_eq!(Lags::new().pct(99.0), 0.0);
    }

    #[test]
    fn a_client_is_saturated_by_lag_cpu_or_late_sends() {
        let calm = ClientHealth {
            lag_p99_ms: 1.2,
            cpu_pct: 40.0,
            cores: 2,
            send_late_p99_ms: Some(0.4),
            ..ClientHealth::default()
        };
        assert_eq!(calm.clone().judge().saturated, None);
        let lagging = ClientHealth {
            lag_p99_ms: 80.0,
            ..calm.clone()
        }
        .judge();
        assert!(
            lagging
                .saturated
                .as_deref()
                .is_some_and(|s| s.contains("event loop woke 80 ms late")),
            "{lagging:?}"
        );
        let busy = ClientHealth {
            cpu_pct: 195.0,
            ..calm.clone()
        }
        .judge();
        assert!(
            busy.saturated
                .is_some_and(|s| s.contains("98 % of its 2 cores"))
        );
        let late = ClientHealth {
            send_late_p99_ms: Some(40.0),
            ..calm
        }
        .judge();
        assert!(
            late.saturated
                .is_some_and(|s| s.contains("sent requests 40 ms after"))
        );
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_blocked_runtime_is_seen_late() {
        let m = Monitor::start();
        // The runtime's only thread busy for 60 ms at a time, as an
        // overloaded generator would be.
        for _ in 0..5 {
            tokio::time::sleep(Duration::from_millis(5)).await;
            std::thread::sleep(Duration::from_millis(60));
        }
        let h = m.finish(&[], false).await;
        assert!(h.lag_max_ms >= 40.0, "{h:?}");
        assert!(h.saturated.is_some(), "{h:?}");
    }
}
