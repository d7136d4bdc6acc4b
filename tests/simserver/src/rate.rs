//! How fast the simulated server serves, as a documented formula so tests know the
//! true rate. Per request, the first token comes after `ttft(b)` and each next one
//! `itl(b)` later, where `b` is the number of requests in flight (the batch):
//!
//! ```text
//! itl(b)  = itl₁ · (1 + (b − 1) / knee) / speed · (b > cuda_graph_max_bs ? 1.3 : 1)
//! ttft(b) = ttft₁ · (1 + (b − 1) / knee)
//! speed   = 1.06 if SGLANG_OPT_USE_TILELANG_INDEXER=1
//!         · 1.10 if --enable-torch-compile
//!         · (1 + 0.12 · log2(--ep-size))
//!         · 1.8  if --speculative-algorithm is set (tokens then come 3 per event)
//! ```
//!
//! A closed loop of `c` clients asking for `n` tokens each therefore gets
//! `rate(c, n) = c · n / (ttft(c) + (n − 1) · itl(c))` output tokens per second.
//! Token `i` of a request is due at `ttft + Σ itl` on an absolute clock, so timer
//! lateness never accumulates.

use std::time::Duration;

/// The launch's speed settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct RateModel {
    /// Inter-token latency with a batch of one, in ms.
    pub(crate) itl_ms: f64,
    /// Time to first token with a batch of one, in ms.
    pub(crate) ttft_ms: f64,
    /// Batch size at which per-request latency has doubled.
    pub(crate) knee: f64,
    /// Product of the flags' multipliers.
    pub(crate) speed: f64,
    /// Largest batch served with CUDA graphs.
    pub(crate) cuda_graph_max_bs: usize,
    /// Tokens per streamed event (speculative decoding accepts several at once).
    pub(crate) tokens_per_event: u64,
}

/// The flags that change the speed.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct SpeedFlags {
    pub(crate) tilelang_indexer: bool,
    pub(crate) torch_compile: bool,
    pub(crate) ep_size: u32,
    pub(crate) speculative: bool,
    pub(crate) cuda_graph_max_bs: Option<usize>,
}

impl RateModel {
    pub(crate) fn new(itl_ms: f64, ttft_ms: f64, knee: f64, f: &SpeedFlags) -> Self {
        let mut speed = 1.0;
        if f.tilelang_indexer {
            speed *= 1.06;
        }
        if f.torch_compile {
            speed *= 1.10;
        }
        if f.ep_size > 1 {
            speed *= 1.0 + 0.12 * f64::from(f.ep_size).log2();
        }
        if f.speculative {
            speed *= 1.8;
        }
        Self {
            itl_ms,
            ttft_ms,
            knee: knee.max(1.0),
            speed,
            cuda_graph_max_bs: f.cuda_graph_max_bs.unwrap_or(usize::MAX),
            tokens_per_event: if f.speculative { 3 } else { 1 },
        }
    }

    fn load(&self, batch: usize) -> f64 {
        1.0 + (batch.max(1) - 1) as f64 / self.knee
    }

    pub(crate) fn itl(&self, batch: usize) -> Duration {
        let graphs = if batch > self.cuda_graph_max_bs {
            1.3
        } else {
            1.0
        };
        Duration::from_secs_f64(self.itl_ms * self.load(batch) / self.speed * graphs / 1e3)
    }

    pub(crate) fn ttft(&self, batch: usize) -> Duration {
        Duration::from_secs_f64(self.ttft_ms * self.load(batch) / 1e3)
    }

    /// Output tokens per second of `c` closed-loop clients asking `n` tokens each.
    #[cfg(test)]
    pub(crate) fn rate(&self, c: usize, n: u64) -> f64 {
        let per =
            self.ttft(c).as_secs_f64() + (n.saturating_sub(1)) as f64 * self.itl(c).as_secs_f64();
        c as f64 * n as f64 / per
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_multiply_and_batches_slow_each_request() {
        let plain = RateModel::new(20.0, 40.0, 16.0, &SpeedFlags::default());
        assert_eq!(plain.itl(1), Duration::from_millis(20));
        assert_eq!(plain.itl(17), Duration::from_millis(40));
        let fast = RateModel::new(
            20.0,
            40.0,
            16.0,
            &SpeedFlags {
                tilelang_indexer: true,
                torch_compile: true,
                ep_size: 4,
                ..SpeedFlags::default()
            },
        );
        let want = 1.06 * 1.10 * 1.24;
        assert!((fast.speed - want).abs() < 1e-9);
        assert!(fast.rate(16, 128) > plain.rate(16, 128) * 1.3);
        // Batching raises throughput even as each request slows.
        assert!(plain.rate(16, 128) > 5.0 * plain.rate(1, 128));
        let spec = RateModel::new(
            20.0,
            40.0,
            16.0,
            &SpeedFlags {
                speculative: true,
                ..SpeedFlags::default()
            },
        );
        assert_eq!(spec.tokens_per_event, 3);
        let graphs = RateModel::new(
            20.0,
            40.0,
            16.0,
            &SpeedFlags {
                cuda_graph_max_bs: Some(8),
                ..SpeedFlags::default()
            },
        );
        assert!(graphs.itl(9) > plain.itl(9));
        assert_eq!(graphs.itl(8), plain.itl(8));
    }
}
