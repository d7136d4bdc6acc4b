//! The screen's two-level design (Plackett–Burman): every flag's main effect
//! from a number of runs that is the first multiple of 4 above the flags'
//! count, instead of 2^N. Each column is a flag (its low and high value);
//! the columns no flag takes estimate the noise.

/// The first rows of the cyclic Plackett–Burman designs of 4 to 24 runs
/// (Plackett & Burman, 1946): each next row is the one before shifted right
/// by one, and a last row is all low.
const GENERATORS: &[&str] = &[
    "++-",
    "+++-+--",
    "++-+++---+-",
    "++++-+-++--+---",
    "++--++++-+-+----++-",
    "+++++-+-++--++--+-+----",
];

/// The most flags a screen takes (the largest design's columns).
pub const MAX_FACTORS: usize = 23;

/// A two-level design: `runs` rows of a sign (high `true`) per column.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Design {
    rows: Vec<Vec<bool>>,
}

impl Design {
    /// The smallest design for `factors` flags (1 to [`MAX_FACTORS`]).
    pub fn for_factors(factors: usize) -> Option<Self> {
        if factors == 0 {
            return None;
        }
        let g = GENERATORS.iter().find(|g| g.len() >= factors)?.as_bytes();
        let k = g.len();
        let mut rows: Vec<Vec<bool>> = (0..k)
            .map(|i| (0..k).map(|j| g[(j + k - i) % k] == b'+').collect())
            .collect();
        rows.push(vec![false; k]);
        Some(Self { rows })
    }

    pub fn runs(&self) -> usize {
        self.rows.len()
    }

    pub fn columns(&self) -> usize {
        self.rows[0].len()
    }

    /// Run `run`'s level of column `col` (high: `true`).
    pub fn high(&self, run: usize, col: usize) -> bool {
        self.rows[run][col]
    }

    /// Each column's effect on `y` (one value per run): the mean where it is
    /// high less the mean where it is low.
    pub fn effects(&self, y: &[f64]) -> Vec<f64> {
        let half = self.runs() as f64 / 2.0;
        (0..self.columns())
            .map(|c| {
                let signed: f64 = (self.rows.iter().zip(y))
                    .map(|(r, v)| if r[c] { *v } else { -*v })
                    .sum();
                signed / half
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_design_is_balanced_and_its_columns_orthogonal() {
        for factors in 1..=MAX_FACTORS {
            let d = Design::for_factors(factors).expect("a design");
            assert_eq!(d.runs() % 4, 0);
            assert!(d.runs() > factors, "{factors} flags in {} runs", d.runs());
            assert!(d.runs() <= factors + 4, "the smallest design");
            let sign = |r: usize, c: usize| if d.high(r, c) { 1 } else { -1 };
            for a in 0..d.columns() {
                let highs = (0..d.runs()).filter(|&r| d.high(r, a)).count();
                assert_eq!(highs * 2, d.runs(), "column {a} of {} runs", d.runs());
                for b in 0..a {
                    let dot: i32 = (0..d.runs()).map(|r| sign(r, a) * sign(r, b)).sum();
                    assert_eq!(dot, 0, "columns {a} and {b} of {} runs", d.runs());
                }
            }
        }
        assert_eq!(Design::for_factors(0), None);
        assert_eq!(Design::for_factors(MAX_FACTORS + 1), None);
    }

    #[test]
    fn effects_of_an_additive_response_are_found_exactly() {
        let d = Design::for_factors(6).expect("8 runs");
        assert_eq!(d.runs(), 8);
        let truth = [0.2, -0.1, 0.0, 0.05, 0.3, -0.25];
        let y: Vec<f64> = (0..d.runs())
            .map(|r| {
                (truth.iter().enumerate())
                    .map(|(c, t)| if d.high(r, c) { t / 2.0 } else { -t / 2.0 })
                    .sum::<f64>()
                    + 5.0
            })
            .collect();
        let e = d.effects(&y);
        for (c, t) in truth.iter().enumerate() {
            assert!((e[c] - t).abs() < 1e-12, "flag {c}: {} vs {t}", e[c]);
        }
        // The spare column sees no effect.
        assert!(e[6].abs() < 1e-12);
    }
}
