//! How fast the simulated server serves, as a documented formula so tests know the
//! true rate. Per request, the first token comes after `ttft(b)` and each next one
//! `itl(b)` later, where `b` is the number of requests in flight (the batch):
//!
//! ```text
//! itl(b)  = itl₁ · (1 + (b − 1) / knee) / speed · (b > cuda_graph_max_bs ? 1.3 : 1)
//! ttft(b) = ttft₁ · (1 + (b − 1) / knee)
//! speed   = 1.06 if SGLANG_OPT_USE_TILELANG_INDEXER=1
//!         · 1.10 if --enable-torch-compile
//!         · 1.08 if both (they help each other: an interaction)
//!         · (1 + 0.12 · log2(--ep-size))
//!         · 1.8  if --speculative-algorithm is set (tokens then come 3 per event)
//!         · 1.05 for --attention-backend fa3, 0.90 for triton (flashinfer: 1)
//!         · noise
//! noise   = exp(σ · z), z drawn once per launch from N(0, 1), where σ is
//!           SIMSERVER_NOISE_PCT / 100 (0 when unset): restart-to-restart noise
//! ```
//!
//! A closed loop of `c` clients asking for `n` tokens each therefore gets
//! `rate(c, n) = c · n / (ttft(c) + (n − 1) · itl(c))` output tokens per second.
//! Token `i` of a request is due at `ttft + Σ itl` on an absolute clock, so timer
//! lateness never accumulates.

use std::time::Duration;

/// The launch's speed settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RateModel {
    /// Inter-token latency with a batch of one, in ms.
    pub itl_ms: f64,
    /// Time to first token with a batch of one, in ms.
    pub ttft_ms: f64,
    /// Batch size at which per-request latency has doubled.
    pub knee: f64,
    /// Product of the flags' multipliers.
    pub speed: f64,
    /// Largest batch served with CUDA graphs.
    pub cuda_graph_max_bs: usize,
    /// Tokens per streamed event (speculative decoding accepts several at once).
    pub tokens_per_event: u64,
}

/// The flags that change the speed.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SpeedFlags {
    pub tilelang_indexer: bool,
    pub torch_compile: bool,
    pub ep_size: u32,
    pub speculative: bool,
    pub cuda_graph_max_bs: Option<usize>,
    /// `--attention-backend`: `fa3`, `triton`, or another (flashinfer's pace).
    pub attention_backend: Option<String>,
}

/// The variable whose percentage sets the launch noise's σ.
pub const NOISE_ENV: &str = "SIMSERVER_NOISE_PCT";

impl SpeedFlags {
    /// The product of the flags' multipliers, without noise.
    pub fn speed(&self) -> f64 {
        let mut speed = 1.0;
        if self.tilelang_indexer {
            speed *= 1.06;
        }
        if self.torch_compile {
            speed *= 1.10;
        }
        if self.tilelang_indexer && self.torch_compile {
            speed *= 1.08;
        }
        if self.ep_size > 1 {
            speed *= 1.0 + 0.12 * f64::from(self.ep_size).log2();
        }
        if self.speculative {
            speed *= 1.8;
        }
        speed *= match self.attention_backend.as_deref() {
            Some("fa3") => 1.05,
            Some("triton") => 0.90,
            _ => 1.0,
        };
        speed
    }
}

/// One launch's noise factor, `exp(σ · z)` with `z` from N(0, 1) drawn from
/// `entropy` (Box–Muller over two halves of a mixed 64-bit word).
pub fn noise(sigma: f64, entropy: u64) -> f64 {
    if sigma <= 0.0 {
        return 1.0;
    }
    let mix = |mut x: u64| {
        x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        x ^ (x >> 31)
    };
    let a = mix(entropy.wrapping_add(0x9e37_79b9_7f4a_7c15));
    let b = mix(a);
    let u1 = ((a >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
    let u2 = (b >> 11) as f64 / (1u64 << 53) as f64;
    let z = (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos();
    (sigma * z).exp()
}

impl RateModel {
    pub fn new(itl_ms: f64, ttft_ms: f64, knee: f64, f: &SpeedFlags) -> Self {
        Self::noisy(itl_ms, ttft_ms, knee, f, 1.0)
    }

    /// The model of a launch whose pace `noise` multiplies.
    pub fn noisy(itl_ms: f64, ttft_ms: f64, knee: f64, f: &SpeedFlags, noise: f64) -> Self {
        let speed = f.speed() * noise;
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

    pub fn itl(&self, batch: usize) -> Duration {
        let graphs = if batch > self.cuda_graph_max_bs {
            1.3
        } else {
            1.0
        };
        Duration::from_secs_f64(self.itl_ms * self.load(batch) / self.speed * graphs / 1e3)
    }

    pub fn ttft(&self, batch: usize) -> Duration {
        Duration::from_secs_f64(self.ttft_ms * self.load(batch) / 1e3)
    }

    /// Output tokens per second of `c` closed-loop clients asking `n` tokens each.
    pub fn rate(&self, c: usize, n: u64) -> f64 {
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
        let want = 1.06 * 1.10 * 1.08 * 1.24;
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

    #[test]
    fn the_indexer_helps_more_with_torch_compile_and_backends_differ() {
        let with = |tilelang_indexer, torch_compile, backend: Option<&str>| {
            SpeedFlags {
                tilelang_indexer,
                torch_compile,
                ep_size: 1,
                attention_backend: backend.map(str::to_owned),
                ..SpeedFlags::default()
            }
            .speed()
        };
        let alone = with(true, false, None) / with(false, false, None);
        let together = with(true, true, None) / with(false, true, None);
        assert!((alone - 1.06).abs() < 1e-12);
        assert!((together - 1.06 * 1.08).abs() < 1e-12);
        assert!((with(false, false, Some("fa3")) - 1.05).abs() < 1e-12);
        assert!((with(false, false, Some("triton")) - 0.90).abs() < 1e-12);
    }

    #[test]
    fn launch_noise_has_the_asked_spread() {
        assert_eq!(noise(0.0, 7), 1.0);
        let logs: Vec<f64> = (0..20_000u64).map(|i| noise(0.03, i).ln()).collect();
        let mean = logs.iter().sum::<f64>() / logs.len() as f64;
        let sd = (logs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / logs.len() as f64).sqrt();
        assert!(mean.abs() < 0.002, "{mean}");
        assert!((sd - 0.03).abs() < 0.002, "{sd}");
    }
}
