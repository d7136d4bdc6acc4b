//! Before a campaign names a winner: its best sets and the baseline re-tested
//! interleaved (A, B, C, A, B, C…), so that drift hits them all alike, and a
//! verdict that calls the winner better only where its lead is beyond the
//! spread the re-tests measured; else a tie within noise, with the tied sets.
//! The screen's effects with their intervals are here too.

use super::design::Design;
use super::noise::{Effect, Lead, lead, median};
use super::space::{Space, Tried};

/// Bootstrap draws per comparison.
const RESAMPLES: usize = 2000;

/// The order of `rounds` rounds over `sets` sets: each round every set once,
/// each round starting one further along so that no set is always first.
pub fn interleaved(sets: usize, rounds: usize) -> Vec<usize> {
    (0..rounds)
        .flat_map(|r| (0..sets).map(move |i| (i + r) % sets.max(1)))
        .collect()
}

/// What the confirmation found.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    /// The set with the best median.
    pub winner: usize,
    /// The winner's lead over each other set that scored.
    pub leads: Vec<(usize, Lead)>,
    /// The sets it does not lead beyond the spread.
    pub tied: Vec<usize>,
    /// The sets whose re-tests all failed: beaten, with no lead to show.
    pub unscored: Vec<usize>,
}

impl Verdict {
    /// The winner is better than every other set, noise allowing.
    pub fn better(&self) -> bool {
        self.tied.is_empty()
    }
}

/// The verdict on each set's re-tests (`samples[i]`: set i's scores).
pub fn verdict(samples: &[Vec<f64>], seed: u64) -> Option<Verdict> {
    let winner = (0..samples.len())
        .filter(|&i| !samples[i].is_empty())
        .max_by(|&a, &b| median(&samples[a]).total_cmp(&median(&samples[b])))?;
    let leads: Vec<(usize, Lead)> = (0..samples.len())
        .filter(|&i| i != winner && !samples[i].is_empty())
        .map(|i| {
            let s = seed.wrapping_add(i as u64);
            (i, lead(&samples[winner], &samples[i], RESAMPLES, s))
        })
        .collect();
    let tied = (leads.iter())
        .filter(|(_, l)| !l.better())
        .map(|(i, _)| *i)
        .collect();
    let unscored = (0..samples.len())
        .filter(|&i| samples[i].is_empty())
        .collect();
    Some(Verdict {
        winner,
        leads,
        tied,
        unscored,
    })
}

/// Why a screen's effects cannot be had.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScreenError {
    #[error("a screen needs 1 to 23 flags of two values or more")]
    Size,
    #[error("the screen's {0} runs are not all done")]
    Unfinished(usize),
    #[error(
        "only {scored} of the screen's runs scored; {flags} flags need {} to separate their effects",
        flags + 1
    )]
    TooFewScored { scored: usize, flags: usize },
}

/// Each screened flag's main effect (the space's flags of two values or
/// more, in order), with its 95 % interval, from a screen's runs (the first
/// steps of `tried`, in the design's order): a least-squares fit of the log
/// score on each flag's level, over the runs that scored. With every run
/// scored this is the design's own estimate, and the noise comes from its
/// spare columns (restart to restart); a failed run leaves its row out.
/// Where no degree of freedom is left, the noise comes from each run's
/// repeats (`repeats[i]`: run i's scores), which see less of it.
///
/// The design confounds interactions with main effects (in 8 runs, the
/// product of the first two columns is the sixth): an interaction shows as
/// part of another flag's effect, or as noise.
pub fn screen_effects(
    space: &Space,
    tried: &[Tried],
    repeats: &[Vec<f64>],
) -> Result<Vec<Effect>, ScreenError> {
    let axes = super::propose::screened(space);
    let d = Design::for_factors(axes.len()).ok_or(ScreenError::Size)?;
    if tried.len() < d.runs() {
        return Err(ScreenError::Unfinished(d.runs()));
    }
    let rows: Vec<(usize, f64)> = (tried[..d.runs()].iter().enumerate())
        .filter_map(|(i, t)| Some((i, t.score().filter(|s| *s > 0.0)?.ln())))
        .collect();
    let k = axes.len() + 1;
    if rows.len() < k {
        return Err(ScreenError::TooFewScored {
            scored: rows.len(),
            flags: axes.len(),
        });
    }
    // x: an intercept, then ±1 per flag (high +1).
    let x: Vec<Vec<f64>> = (rows.iter())
        .map(|&(r, _)| {
            std::iter::once(1.0)
                .chain((0..axes.len()).map(|c| if d.high(r, c) { 1.0 } else { -1.0 }))
                .collect()
        })
        .collect();
    let y: Vec<f64> = rows.iter().map(|r| r.1).collect();
    let Some(inv) = invert(&gram(&x)) else {
        return Err(ScreenError::TooFewScored {
            scored: rows.len(),
            flags: axes.len(),
        });
    };
    let xty: Vec<f64> = (0..k)
        .map(|j| x.iter().zip(&y).map(|(row, v)| row[j] * v).sum())
        .collect();
    let beta: Vec<f64> = (0..k)
        .map(|i| (0..k).map(|j| inv[i][j] * xty[j]).sum())
        .collect();
    let rss: f64 = (x.iter().zip(&y))
        .map(|(row, v)| v - row.iter().zip(&beta).map(|(a, b)| a * b).sum::<f64>())
        .map(|e| e * e)
        .sum();
    let dof = rows.len() - k;
    let runs_of = |i: usize| repeats.get(rows[i].0);
    let (sigma2, dof) = match dof {
        0 => repeat_variance((0..rows.len()).filter_map(runs_of)),
        n => (rss / n as f64, n),
    };
    // The effect (high − low) is twice the coefficient.
    Ok((1..k)
        .map(|j| {
            let se = 2.0 * (sigma2 * inv[j][j]).sqrt();
            Effect::from_log(2.0 * beta[j], se, dof, rows.len() / 2)
        })
        .collect())
}

/// XᵀX.
fn gram(x: &[Vec<f64>]) -> Vec<Vec<f64>> {
    let k = x.first().map_or(0, Vec::len);
    (0..k)
        .map(|i| {
            (0..k)
                .map(|j| x.iter().map(|r| r[i] * r[j]).sum())
                .collect()
        })
        .collect()
}

/// The inverse of a small symmetric matrix (Gauss–Jordan with pivoting);
/// none when it is singular.
fn invert(m: &[Vec<f64>]) -> Option<Vec<Vec<f64>>> {
    let n = m.len();
    let mut a: Vec<Vec<f64>> = (m.iter().enumerate())
        .map(|(i, r)| {
            let mut row = r.clone();
            row.extend((0..n).map(|j| if i == j { 1.0 } else { 0.0 }));
            row
        })
        .collect();
    for c in 0..n {
        let p = (c..n).max_by(|&i, &j| a[i][c].abs().total_cmp(&a[j][c].abs()))?;
        if a[p][c].abs() < 1e-9 {
            return None;
        }
        a.swap(c, p);
        let pivot = a[c][c];
        a[c].iter_mut().for_each(|v| *v /= pivot);
        for r in 0..n {
            if r != c {
                let f = a[r][c];
                let pivot_row = a[c].clone();
                a[r].iter_mut()
                    .zip(&pivot_row)
                    .for_each(|(v, p)| *v -= f * p);
            }
        }
    }
    Some(a.into_iter().map(|r| r[n..].to_vec()).collect())
}

/// The variance of a run's score on the log scale, from its repeats: the
/// pooled variance of one repeat over the mean count of repeats, and its
/// degrees of freedom.
fn repeat_variance<'a>(runs: impl Iterator<Item = &'a Vec<f64>>) -> (f64, usize) {
    let (mut ss, mut dof, mut inv_r, mut n) = (0.0, 0usize, 0.0, 0usize);
    for r in runs {
        let logs: Vec<f64> = r.iter().filter(|x| **x > 0.0).map(|x| x.ln()).collect();
        if logs.is_empty() {
            continue;
        }
        let m = logs.iter().sum::<f64>() / logs.len() as f64;
        ss += logs.iter().map(|x| (x - m).powi(2)).sum::<f64>();
        dof += logs.len() - 1;
        inv_r += 1.0 / logs.len() as f64;
        n += 1;
    }
    if dof == 0 || n == 0 {
        return (f64::INFINITY, 0);
    }
    // A run's mean of r repeats has variance σ²/r; averaged over the runs.
    (ss / dof as f64 * inv_r / n as f64, dof)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounds_interleave_and_rotate() {
        assert_eq!(interleaved(3, 2), [0, 1, 2, 1, 2, 0]);
        assert_eq!(interleaved(2, 3), [0, 1, 1, 0, 0, 1]);
    }

    #[test]
    fn a_winner_within_noise_of_another_is_a_tie() {
        let base = vec![100.0, 103.0, 97.0, 101.0, 99.0];
        let close = vec![101.0, 104.0, 98.0, 99.0, 102.0];
        let far = vec![120.0, 121.0, 119.0, 122.0, 118.0];
        let v = verdict(&[base.clone(), far.clone(), close.clone()], 1).expect("a winner");
        assert_eq!(v.winner, 1);
        assert!(v.better(), "{v:?}");
        let v = verdict(&[base, close], 1).expect("a winner");
        assert_eq!((v.winner, v.tied.as_slice()), (1, &[0][..]));
        assert!(!v.better());
        assert_eq!(verdict(&[], 1), None);
        let v = verdict(&[vec![], vec![100.0, 101.0]], 1).expect("a winner");
        assert_eq!((v.winner, v.unscored.as_slice()), (1, &[0][..]));
        assert!(v.better(), "a set that never scored is beaten");
    }

    /// Runs of a known additive truth on the log scale, at the screen's
    /// levels, with noise that spares no run.
    fn screen_of(truth: &[f64], noise: &[f64]) -> (Space, Vec<Tried>) {
        let space = Space {
            axes: (0..truth.len())
                .map(|i| crate::campaign::search::space::Axis {
                    flag: format!("--f{i}"),
                    values: vec![Some("lo".into()), Some("hi".into())],
                })
                .collect(),
            excluded: Vec::new(),
        };
        let d = Design::for_factors(truth.len()).expect("a design");
        let tried = (0..d.runs())
            .map(|r| {
                let log: f64 = (truth.iter().enumerate())
                    .map(|(c, t)| if d.high(r, c) { t / 2.0 } else { -t / 2.0 })
                    .sum::<f64>()
                    + noise[r % noise.len()];
                Tried {
                    point: (0..truth.len())
                        .map(|c| usize::from(d.high(r, c)))
                        .collect(),
                    outcome: crate::campaign::search::space::Outcome::Score(1000.0 * log.exp()),
                }
            })
            .collect();
        (space, tried)
    }

    #[test]
    fn the_screen_s_intervals_hold_the_true_effects() {
        let truth = [0.20, -0.10, 0.0, 0.05, 0.30];
        let noise = [0.01, -0.02, 0.015, 0.0, -0.01, 0.02, -0.015, 0.005];
        let (space, tried) = screen_of(&truth, &noise);
        let e = screen_effects(&space, &tried, &[]).expect("effects");
        assert_eq!(e.len(), 5);
        for (t, got) in truth.iter().zip(&e) {
            let want = t.exp_m1();
            assert!(
                got.low <= want && want <= got.high,
                "{want} outside {got:?}"
            );
            assert_eq!(got.pairs, 4);
        }
        assert!(e[0].clear() && e[4].clear() && !e[2].clear(), "{e:?}");
        // A failed run leaves its row out; the rest still separate them.
        let mut some_failed = tried.clone();
        some_failed[3].outcome = crate::campaign::search::space::Outcome::Failed(
            crate::campaign::search::space::Failure::Crashed,
        );
        let e = screen_effects(&space, &some_failed, &[]).expect("7 of 8 runs");
        assert!(
            e.iter()
                .zip(&truth)
                .all(|(g, t)| g.low <= t.exp_m1() && t.exp_m1() <= g.high)
        );
        let few: Vec<Tried> = (tried.iter().cloned().enumerate())
            .map(|(i, mut t)| {
                if i % 2 == 0 {
                    t.outcome = crate::campaign::search::space::Outcome::Failed(
                        crate::campaign::search::space::Failure::Wrong,
                    );
                }
                t
            })
            .collect();
        assert_eq!(
            screen_effects(&space, &few, &[]),
            Err(ScreenError::TooFewScored {
                scored: 4,
                flags: 5
            })
        );
        assert_eq!(
            screen_effects(&space, &tried[..5], &[]),
            Err(ScreenError::Unfinished(8))
        );
    }

    #[test]
    fn with_no_spare_run_the_noise_comes_from_the_repeats() {
        // Seven flags in eight runs: nothing spare.
        let truth = [0.2, 0.0, 0.0, 0.0, 0.0, 0.0, 0.1];
        let (space, tried) = screen_of(&truth, &[0.0]);
        let repeats: Vec<Vec<f64>> = (tried.iter())
            .map(|t| {
                let s = t.score().expect("scored");
                vec![s * 0.99, s, s * 1.01]
            })
            .collect();
        let e = screen_effects(&space, &tried, &repeats).expect("effects");
        assert!(e[0].clear() && !e[1].clear(), "{e:?}");
        assert!(e[0].half_width() < 0.05, "{e:?}");
        let e = screen_effects(&space, &tried, &[]).expect("effects");
        assert!(
            e[0].low.is_infinite() || e[0].low < -0.9,
            "no noise known: {e:?}"
        );
    }
}
