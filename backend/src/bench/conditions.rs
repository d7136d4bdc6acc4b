//! What the GPUs did while a benchmark ran: utilisation, power (and the cap),
//! temperature and memory per GPU, read from the samples the telemetry already
//! publishes, as min, median and max over the run, and the samples in which
//! its clocks were held down for power or heat. A "faster" result at a lower
//! power cap, while running hot or while throttled shows as such.

use std::collections::BTreeMap;
use std::sync::Arc;

use shared::GpuSample;
use shared::bench::{GpuConditions, Spread};
use shared::health::THROTTLE_MASK;
use tokio::sync::{broadcast, watch};

use crate::hub::Hub;

/// Readings kept per GPU at most; past it every other one is dropped and the
/// spacing doubles, so a long run stays bounded (8 GPUs × 4 series × 2,048).
const MAX_KEPT: usize = 2_048;

/// The readings of one GPU.
#[derive(Debug, Default)]
struct Series {
    util: Vec<f64>,
    power_w: Vec<f64>,
    temp_c: Vec<f64>,
    mem_gib: Vec<f64>,
    power_limit_w: Option<f64>,
    samples: u32,
    throttled: u32,
    reasons: u64,
}

impl Series {
    fn add(&mut self, g: &GpuSample, throttle: bool) {
        self.samples += 1;
        if let Some(r) = g.health.clocks_event_reasons
            && throttle
            && r & THROTTLE_MASK != 0
        {
            self.throttled += 1;
            self.reasons |= r & THROTTLE_MASK;
        }
        if let Some(u) = g.util_gpu_percent {
            self.util.push(f64::from(u));
        }
        if let Some(p) = g.power_mw {
            self.power_w.push(f64::from(p) / 1e3);
        }
        if let Some(t) = g.temp_c {
            self.temp_c.push(f64::from(t));
        }
        if let Some(m) = g.mem_used_bytes {
            self.mem_gib.push(m as f64 / f64::from(1u32 << 30));
        }
        if let Some(l) = g.power_limit_mw {
            let l = f64::from(l) / 1e3;
            self.power_limit_w = Some(self.power_limit_w.map_or(l, |old| old.min(l)));
        }
    }

    fn thin(&mut self) {
        for v in [
            &mut self.util,
            &mut self.power_w,
            &mut self.temp_c,
            &mut self.mem_gib,
        ] {
            let mut i = 0;
            v.retain(|_| {
                i += 1;
                i % 2 == 1
            });
        }
    }

    fn summary(&self, index: u32) -> GpuConditions {
        let spread = |v: &[f64]| (!v.is_empty()).then(|| Spread::of(v));
        GpuConditions {
            index,
            samples: self.samples,
            util_pct: spread(&self.util),
            power_w: spread(&self.power_w),
            power_limit_w: self.power_limit_w,
            temp_c: spread(&self.temp_c),
            mem_used_gib: spread(&self.mem_gib),
            throttled_samples: self.throttled,
            throttle_reasons: (self.reasons != 0).then_some(self.reasons),
        }
    }
}

/// Readings per GPU, one every `every` samples.
#[derive(Debug, Default)]
struct Readings {
    gpus: BTreeMap<u32, Series>,
    seen: u64,
    every: u64,
    /// Whether throttling is counted (`[health] throttle = "warn"`).
    throttle: bool,
}

impl Readings {
    fn add(&mut self, gpus: &[GpuSample]) {
        self.seen += 1;
        if !(self.seen - 1).is_multiple_of(self.every.max(1)) {
            return;
        }
        for g in gpus {
            self.gpus.entry(g.index).or_default().add(g, self.throttle);
        }
        if self
            .gpus
            .values()
            .any(|s| s.util.len().max(s.power_w.len()) > MAX_KEPT)
        {
            self.gpus.values_mut().for_each(Series::thin);
            self.every = self.every.max(1) * 2;
        }
    }

    fn summary(&self) -> Vec<GpuConditions> {
        self.gpus.iter().map(|(i, s)| s.summary(*i)).collect()
    }
}

/// Collects readings from the hub until [`Recorder::finish`].
#[derive(Debug)]
pub struct Recorder {
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<Readings>,
}

impl Recorder {
    pub fn start(hub: &Arc<Hub>, count_throttle: bool) -> Self {
        let mut samples = hub.subscribe();
        let (stop, mut stopped) = watch::channel(false);
        let task = tokio::spawn(async move {
            let mut r = Readings {
                every: 1,
                throttle: count_throttle,
                ..Readings::default()
            };
            loop {
                tokio::select! {
                    s = samples.recv() => match s {
                        Ok(p) => r.add(&p.sample.gpus),
                        Err(broadcast::error::RecvError::Lagged(_)) => {}
                        Err(broadcast::error::RecvError::Closed) => break,
                    },
                    _ = stopped.wait_for(|s| *s) => break,
                }
            }
            r
        });
        Self { stop, task }
    }

    pub async fn finish(self) -> Vec<GpuConditions> {
        let _ = self.stop.send(true);
        self.task.await.map(|r| r.summary()).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpu(index: u32, util: u32, power_w: u32, limit_w: u32, temp: u32) -> GpuSample {
        GpuSample {
            index,
            util_gpu_percent: Some(util),
            power_mw: Some(power_w * 1_000),
            power_limit_mw: Some(limit_w * 1_000),
            temp_c: Some(temp),
            mem_used_bytes: Some(88 << 30),
            ..GpuSample::default()
        }
    }

    #[test]
    fn per_gpu_spreads_the_lowest_cap_and_a_bounded_memory() {
        let mut r = Readings {
            every: 1,
            throttle: true,
            ..Readings::default()
        };
        r.add(&[gpu(0, 90, 500, 600, 70), gpu(1, 10, 100, 600, 40)]);
        r.add(&[gpu(0, 100, 550, 450, 82), gpu(1, 20, 120, 600, 41)]);
        r.add(&[gpu(0, 95, 520, 600, 75), gpu(1, 30, 110, 600, 42)]);
        let s = r.summary();
        assert_eq!(s.len(), 2);
        assert_eq!(s[0].samples, 3);
        assert_eq!(
            s[0].util_pct,
            Some(Spread {
                min: 90.0,
                median: 95.0,
                max: 100.0
            })
        );
        assert_eq!(s[0].power_w.map(|p| p.median), Some(520.0));
        // Capped at 450 W for a while: the run ran under 450 W.
        assert_eq!(s[0].power_limit_w, Some(450.0));
        assert_eq!(s[0].temp_c.map(|t| t.max), Some(82.0));
        assert_eq!(s[1].mem_used_gib.map(|m| m.median), Some(88.0));
        assert_eq!((s[0].throttled_samples, s[0].throttle_reasons), (0, None));
        // Thermally slowed in one sample of three (idle bits are not throttling).
        let mut hot = gpu(1, 100, 600, 600, 90);
        hot.health.clocks_event_reasons = Some(0x40 | 0x1);
        let mut idle = gpu(1, 0, 100, 600, 40);
        idle.health.clocks_event_reasons = Some(0x1);
        let mut t = Readings {
            every: 1,
            throttle: true,
            ..Readings::default()
        };
        t.add(&[hot.clone()]);
        t.add(&[idle]);
        t.add(&[gpu(1, 50, 300, 600, 60)]);
        let c = &t.summary()[0];
        assert_eq!((c.throttled_samples, c.throttle_reasons), (1, Some(0x40)));
        // `throttle = "ignore"`: not counted.
        let mut quiet = Readings {
            every: 1,
            ..Readings::default()
        };
        quiet.add(&[hot]);
        assert_eq!(quiet.summary()[0].throttled_samples, 0);
        assert_eq!(
            c.throttle_line().as_deref(),
            Some("GPU 1: hardware thermal slowdown in 1 of 3 samples")
        );
        // Hours of samples keep at most MAX_KEPT readings per series.
        for i in 0..50_000u32 {
            r.add(&[gpu(0, i % 100, 500, 600, 70)]);
        }
        let kept = r.gpus[&0].util.len();
        assert!(kept <= MAX_KEPT + 1, "{kept}");
        assert!(r.every > 1);
    }
}
