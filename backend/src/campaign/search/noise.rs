//! What noise allows one to say: the intervals of a screen's effects, a
//! robust score (median − k·MAD), and the confirmation's verdict from a
//! bootstrap of interleaved re-tests. Pure; a seeded generator makes every
//! interval the same on every run.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Student's t at 97.5 % for 1 to 30 degrees of freedom (two-sided 95 %).
const T975: [f64; 30] = [
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160,
    2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056,
    2.052, 2.048, 2.045, 2.042,
];

/// The two-sided 95 % quantile of Student's t with `dof` degrees of freedom.
pub fn t975(dof: usize) -> f64 {
    match dof {
        0 => f64::INFINITY,
        1..=30 => T975[dof - 1],
        31..=40 => 2.021,
        41..=60 => 2.000,
        61..=120 => 1.980,
        _ => 1.960,
    }
}

pub fn median(xs: &[f64]) -> f64 {
    let mut v: Vec<f64> = xs.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    match n % 2 {
        1 => v[n / 2],
        _ => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// The median absolute deviation from the median.
pub fn mad(xs: &[f64]) -> f64 {
    let m = median(xs);
    let dev: Vec<f64> = xs.iter().map(|x| (x - m).abs()).collect();
    median(&dev)
}

/// median − k·MAD: a score that a lucky run does not lift (vLLM's
/// `tune_speculative_k` ranks by it).
pub fn robust_score(xs: &[f64], k: f64) -> f64 {
    median(xs) - k * mad(xs)
}

/// A main effect with its 95 % interval, as a relative change of the metric
/// (+0.24: 24 % more with the flag at its high value).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Effect {
    pub relative: f64,
    pub low: f64,
    pub high: f64,
    /// The pairs of runs it was estimated from (high against low).
    pub pairs: usize,
}

impl Effect {
    /// From an effect on the logarithm of the metric, `log_effect`, with its
    /// standard error and degrees of freedom.
    pub fn from_log(log_effect: f64, se: f64, dof: usize, pairs: usize) -> Self {
        let h = t975(dof) * se;
        Self {
            relative: log_effect.exp_m1(),
            low: (log_effect - h).exp_m1(),
            high: (log_effect + h).exp_m1(),
            pairs,
        }
    }

    /// Whether the interval leaves out "no effect".
    pub fn clear(&self) -> bool {
        self.low > 0.0 || self.high < 0.0
    }

    /// Half the interval's width, as a relative change: the "±3 %".
    pub fn half_width(&self) -> f64 {
        (self.high - self.low) / 2.0
    }
}

/// How a confirmed candidate stands against another.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Lead {
    /// The candidate's median over the other's, less one.
    pub relative: f64,
    /// The 95 % bootstrap interval of `relative`.
    pub low: f64,
    pub high: f64,
}

impl Lead {
    /// Ahead beyond the measured spread: the interval is above zero.
    pub fn better(&self) -> bool {
        self.low > 0.0
    }
}

/// The lead of `a` over `b` (each a set's re-tests, interleaved so that
/// drift hits both): the ratio of medians less one, with a 95 % percentile
/// bootstrap interval (`resamples` draws, seeded by `seed`). Re-tests of
/// equal count are taken as paired by round and resampled together, so
/// that drift between rounds cancels.
pub fn lead(a: &[f64], b: &[f64], resamples: usize, seed: u64) -> Lead {
    let relative = median(a) / median(b) - 1.0;
    if a.is_empty() || b.is_empty() {
        return Lead {
            relative,
            low: f64::NEG_INFINITY,
            high: f64::INFINITY,
        };
    }
    let mut rng = StdRng::seed_from_u64(seed);
    let paired = a.len() == b.len();
    let mut ratios: Vec<f64> = (0..resamples.max(1))
        .map(|_| {
            let ia: Vec<usize> = (0..a.len()).map(|_| rng.random_range(0..a.len())).collect();
            let ib: Vec<usize> = match paired {
                true => ia.clone(),
                false => (0..b.len()).map(|_| rng.random_range(0..b.len())).collect(),
            };
            let pick =
                |xs: &[f64], at: &[usize]| median(&at.iter().map(|&i| xs[i]).collect::<Vec<_>>());
            pick(a, &ia) / pick(b, &ib) - 1.0
        })
        .collect();
    ratios.sort_by(f64::total_cmp);
    let at = |q: f64| ratios[((ratios.len() - 1) as f64 * q).round() as usize];
    Lead {
        relative,
        low: at(0.025),
        high: at(0.975),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_mad_and_the_robust_score() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert!(median(&[]).is_nan());
        assert_eq!(mad(&[1.0, 2.0, 3.0, 4.0, 100.0]), 1.0);
        assert_eq!(robust_score(&[1.0, 2.0, 3.0, 4.0, 100.0], 2.0), 1.0);
    }

    #[test]
    fn an_effect_s_interval_is_on_the_relative_scale() {
        let e = Effect::from_log(0.2_f64.ln_1p(), 0.01, 30, 4);
        assert!((e.relative - 0.2).abs() < 1e-12);
        assert!(e.low < 0.2 && e.high > 0.2 && e.clear());
        assert!((e.half_width() - 0.0245).abs() < 0.0005, "{e:?}");
        let unclear = Effect::from_log(0.01, 0.02, 3, 2);
        assert!(!unclear.clear());
        assert!(t975(0).is_infinite() && t975(100) == 1.98 && t975(1000) == 1.96);
    }

    #[test]
    fn a_lead_beyond_the_spread_is_better_and_one_within_it_is_not() {
        let base = [100.0, 101.0, 99.0, 100.5, 99.5, 100.2];
        let far: Vec<f64> = base.iter().map(|x| x * 1.10).collect();
        let l = lead(&far, &base, 2000, 7);
        assert!(l.better(), "{l:?}");
        assert!((l.relative - 0.10).abs() < 0.01);
        let near = [100.4, 99.1, 101.2, 99.8, 100.9, 99.6];
        let l = lead(&near, &base, 2000, 7);
        assert!(!l.better(), "{l:?}");
        assert!(l.low < 0.0 && l.high > 0.0);
        assert_eq!(
            lead(&near, &base, 2000, 7),
            l,
            "seeded: the same every time"
        );
    }
}
