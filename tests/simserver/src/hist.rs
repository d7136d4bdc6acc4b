//! Latency histograms for `/metrics`, as SGLang and vLLM export them:
//! cumulative `_bucket{le="…"}` counts, `_sum` and `_count`, in seconds.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Upper bounds (seconds) of the buckets, before `+Inf`.
const BOUNDS: [f64; 16] = [
    0.001, 0.005, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0,
];

/// One histogram, filled from many tasks at once.
#[derive(Debug, Default)]
pub(crate) struct Histogram {
    /// Per bucket (the last is `+Inf`), not cumulative.
    counts: [AtomicU64; BOUNDS.len() + 1],
    sum_us: AtomicU64,
}

impl Histogram {
    /// Counts `n` observations of `each`.
    pub(crate) fn observe(&self, each: Duration, n: u64) {
        let s = each.as_secs_f64();
        let i = BOUNDS.iter().position(|b| s <= *b).unwrap_or(BOUNDS.len());
        self.counts[i].fetch_add(n, Ordering::Relaxed);
        self.sum_us
            .fetch_add(each.as_micros() as u64 * n, Ordering::Relaxed);
    }

    /// The histogram in the text format, under `name` with `labels`.
    pub(crate) fn write(&self, out: &mut String, name: &str, help: &str, labels: &str) {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        let mut total = 0;
        for (i, c) in self.counts.iter().enumerate() {
            total += c.load(Ordering::Relaxed);
            let le = BOUNDS
                .get(i)
                .map_or_else(|| "+Inf".to_owned(), f64::to_string);
            let _ = writeln!(out, "{name}_bucket{{{labels},le=\"{le}\"}} {total}");
        }
        let sum = self.sum_us.load(Ordering::Relaxed) as f64 / 1e6;
        let _ = writeln!(
            out,
            "{name}_sum{{{labels}}} {sum}\n{name}_count{{{labels}}} {total}"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_cumulative_and_sum_in_seconds() {
        let h = Histogram::default();
        h.observe(Duration::from_millis(18), 3);
        h.observe(Duration::from_millis(45), 1);
        h.observe(Duration::from_secs(3), 1);
        let mut out = String::new();
        h.write(&mut out, "x", "help", "a=\"b\"");
        assert!(out.contains("x_bucket{a=\"b\",le=\"0.015\"} 0\n"), "{out}");
        assert!(out.contains("x_bucket{a=\"b\",le=\"0.02\"} 3\n"), "{out}");
        assert!(out.contains("x_bucket{a=\"b\",le=\"0.05\"} 4\n"), "{out}");
        assert!(out.contains("x_bucket{a=\"b\",le=\"+Inf\"} 5\n"), "{out}");
        assert!(out.contains("x_count{a=\"b\"} 5\n"), "{out}");
        assert!(out.contains("x_sum{a=\"b\"} 3.099\n"), "{out}");
    }
}
