//! The next step of a campaign that searches, decided from what the steps so
//! far came to: a grid walks every point in order; a random search draws
//! points not tried; a screen runs its two-level design; a model-based
//! search proposes with TPE (one Tree-structured Parzen Estimator per flag,
//! the `tpe` crate), seeded by a screen's runs or a few random ones, until
//! its budget is spent or it stops improving. A failed step counts against
//! its values: it is told a loss below every score, a crash below a wrong
//! answer below an excluded set (TPE reads only their order). Pure, and a
//! function of the steps so far and the seed: a campaign resumed after a
//! restart of drainwatch proposes what it would have (with the same build:
//! the generator is rand's `StdRng`).

use std::time::Duration;

use rand010::SeedableRng as _;

use super::design::Design;
use super::space::{Outcome, Point, Space, Tried, incumbent};

/// How a campaign chooses its steps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strategy {
    /// Every point, in order.
    Grid,
    /// Points drawn at random (a baseline for the others).
    Random,
    /// The two-level design only: every flag's main effect.
    Screen,
    /// Model-based proposals; `screened`: seeded by a screen's runs first.
    Search { screened: bool },
}

/// When a search stops.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Budget {
    pub max_steps: Option<usize>,
    pub max_time: Option<Duration>,
    /// Stop when this many steps in a row bring no gain above `min_gain`.
    pub patience: Option<usize>,
    /// The relative gain that counts as one (the noise it must beat).
    pub min_gain: f64,
}

impl Default for Budget {
    fn default() -> Self {
        Self {
            max_steps: None,
            max_time: None,
            patience: None,
            min_gain: 0.02,
        }
    }
}

/// Why a campaign's search stopped.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Stopped {
    /// Every point of the space was tried.
    Exhausted,
    /// The screen's design is done (a screen alone).
    Screened,
    /// `max_steps` steps ran.
    Steps(usize),
    /// Its time ran out.
    Time,
    /// `patience` steps in a row brought no gain above `min_gain`.
    NoGain { steps: usize },
    /// A screen of more flags than its largest design takes.
    TooManyFlags,
}

/// Why a step was proposed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Why {
    /// The grid's next point.
    Grid,
    /// Drawn at random: a baseline, or to start the model (`n` of `of`).
    Random { n: usize, of: usize },
    /// The screen's run `run` of `of`.
    Screen { run: usize, of: usize },
    /// The model's most promising point, given every step so far.
    Model,
}

/// The next step, or why there is none.
#[derive(Debug, Clone, PartialEq)]
pub enum Next {
    Run { point: Point, why: Why },
    Stop(Stopped),
}

/// Random points a search alone starts its model with.
const STARTUP: usize = 4;

/// TPE's share of the steps that count as good (Optuna's default is 0.1;
/// with the few steps a campaign affords, that would be one step).
const GAMMA: f64 = 0.1;

/// Tries at drawing a point not tried before the space is walked instead.
const TRIES: usize = 1_000;

/// A space small enough to walk whole.
const WALKABLE: usize = 100_000;

/// Proposals the model draws per flag before it settles for a point not
/// tried yet.
const DRAWS: usize = 64;

/// The next step of `strategy` over `space`, after `tried`, `elapsed` into
/// the campaign.
pub fn next(
    space: &Space,
    strategy: Strategy,
    budget: &Budget,
    seed: u64,
    tried: &[Tried],
    elapsed: Duration,
) -> Next {
    let warmup = warmup(space, strategy);
    if let Some(stop) = stopped(space, budget, tried, elapsed, warmup) {
        return Next::Stop(stop);
    }
    let design = || Design::for_factors(screened(space).len());
    match strategy {
        Strategy::Grid => walk(space, tried),
        Strategy::Random => {
            let why = Why::Random {
                n: tried.len() + 1,
                of: space.size(),
            };
            random(space, seed, tried, why)
        }
        Strategy::Screen => match design() {
            // A space no larger than the design is walked whole instead.
            Some(d) if d.runs() >= space.size() => walk(space, tried),
            Some(d) if tried.len() < d.runs() => screen_run(space, &d, tried.len()),
            Some(_) => Next::Stop(Stopped::Screened),
            None => Next::Stop(Stopped::TooManyFlags),
        },
        Strategy::Search { screened } => {
            if tried.len() < warmup {
                return match (screened, design()) {
                    (true, Some(d)) => screen_run(space, &d, tried.len()),
                    _ => random(
                        space,
                        seed,
                        tried,
                        Why::Random {
                            n: tried.len() + 1,
                            of: warmup,
                        },
                    ),
                };
            }
            model(space, seed, tried)
        }
    }
}

/// The steps a strategy takes before its model or its gains count: a
/// screen's runs, or a search's random start.
fn warmup(space: &Space, strategy: Strategy) -> usize {
    let runs = Design::for_factors(screened(space).len()).map(|d| d.runs());
    match strategy {
        Strategy::Grid | Strategy::Random => 0,
        Strategy::Screen => runs.unwrap_or(0).min(space.size()),
        Strategy::Search { screened: true } => match runs {
            Some(r) if r < space.size() => r,
            _ => STARTUP.min(space.size()),
        },
        Strategy::Search { screened: false } => STARTUP.min(space.size()),
    }
}

/// The flags a screen varies: those of two values or more, in order.
pub(super) fn screened(space: &Space) -> Vec<usize> {
    (0..space.axes.len())
        .filter(|&i| space.axes[i].values.len() >= 2)
        .collect()
}

/// The first point in the grid's order not tried yet.
fn walk(space: &Space, tried: &[Tried]) -> Next {
    (0..space.size())
        .map(|n| space.nth(n))
        .find(|p| !taken(space, tried, p))
        .map_or(Next::Stop(Stopped::Exhausted), |point| Next::Run {
            point,
            why: Why::Grid,
        })
}

/// A generator for the step after `tried`, from the campaign's seed.
fn rng(seed: u64, tried: &[Tried]) -> rand010::rngs::StdRng {
    let mix = |mut x: u64| {
        x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
        x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        x ^ (x >> 31)
    };
    rand010::rngs::StdRng::seed_from_u64(mix(mix(seed) ^ tried.len() as u64))
}

/// Whether `p` cannot be proposed: tried already, or excluded.
fn taken(space: &Space, tried: &[Tried], p: &[usize]) -> bool {
    !space.allows(p) || tried.iter().any(|t| t.point == p)
}

/// Why the search stops now, if it does. No gain is counted before the
/// strategy's `warmup` steps are done.
fn stopped(
    space: &Space,
    b: &Budget,
    tried: &[Tried],
    elapsed: Duration,
    warmup: usize,
) -> Option<Stopped> {
    if tried.len() >= space.open_size(WALKABLE) {
        return Some(Stopped::Exhausted);
    }
    if let Some(n) = b.max_steps
        && tried.len() >= n
    {
        return Some(Stopped::Steps(n));
    }
    if b.max_time.is_some_and(|t| elapsed >= t) {
        return Some(Stopped::Time);
    }
    let k = b.patience.filter(|k| *k > 0)?;
    // The last step that raised the best by more than the noise.
    let mut best: Option<f64> = None;
    let mut last_gain = 0;
    for (i, t) in tried.iter().enumerate() {
        if let Some(s) = t.score()
            && best.is_none_or(|b0| s - b0 > b.min_gain * b0.abs())
        {
            best = Some(s);
            last_gain = i + 1;
        }
    }
    (tried.len() >= warmup && tried.len() - last_gain.max(warmup) >= k)
        .then_some(Stopped::NoGain { steps: k })
}

/// The screen's run `run`: each flag at its first value (low) or its last
/// (high).
fn screen_run(space: &Space, d: &Design, run: usize) -> Next {
    let mut point = vec![0; space.axes.len()];
    for (c, &a) in screened(space).iter().enumerate() {
        if d.high(run, c) {
            point[a] = space.axes[a].values.len() - 1;
        }
    }
    let why = Why::Screen {
        run: run + 1,
        of: d.runs(),
    };
    Next::Run { point, why }
}

/// A point not tried, drawn with a generator seeded by `seed` and the steps
/// so far (the same after a resume): a value per flag, drawn again while
/// the point was tried; in a small space that is mostly tried, one of the
/// points left.
fn random(space: &Space, seed: u64, tried: &[Tried], why: Why) -> Next {
    use rand010::RngExt as _;
    let mut rng = rng(seed, tried);
    for _ in 0..TRIES {
        let point: Point = (space.axes.iter())
            .map(|a| rng.random_range(0..a.values.len().max(1)))
            .collect();
        if !taken(space, tried, &point) {
            return Next::Run { point, why };
        }
    }
    if space.size() > WALKABLE {
        return Next::Stop(Stopped::Exhausted);
    }
    let left: Vec<usize> = (0..space.size())
        .filter(|&n| !taken(space, tried, &space.nth(n)))
        .collect();
    match left.is_empty() {
        true => Next::Stop(Stopped::Exhausted),
        false => Next::Run {
            point: space.nth(left[rng.random_range(0..left.len())]),
            why,
        },
    }
}

/// What TPE minimises for each step: the negated score, and for a failed
/// step a graded penalty below the worst score.
fn losses(tried: &[Tried]) -> Vec<f64> {
    let scores: Vec<f64> = tried.iter().filter_map(Tried::score).collect();
    let worst = scores.iter().copied().fold(f64::INFINITY, f64::min);
    let best = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let (worst, spread) = match scores.len() {
        0 => (0.0, 1.0),
        _ => (worst, (best - worst).max(worst.abs() * 0.1).max(1e-9)),
    };
    (tried.iter())
        .map(|t| match t.outcome {
            Outcome::Score(s) => -s,
            Outcome::Failed(f) => -(worst - f.grade() * spread),
        })
        .collect()
}

/// TPE's proposal. The steps so far split into the good (the best
/// [`GAMMA`] of them by loss) and the rest; each flag has a histogram
/// estimator of each (the `tpe` crate's, one count of prior per value), and
/// a point's promise is the sum over its flags of log good-density less log
/// rest-density: TPE's expected-improvement criterion. In a space small
/// enough to walk, the most promising point not tried is taken (ties drawn
/// at random); in a larger one, the crate's own per-flag proposals are
/// drawn until one is new.
fn model(space: &Space, seed: u64, tried: &[Tried]) -> Next {
    if space.size() > WALKABLE {
        return sampled(space, seed, tried);
    }
    use rand010::RngExt as _;
    use tpe::density_estimation::{BuildDensityEstimator as _, DensityEstimator as _};
    let loss = losses(tried);
    let mut order: Vec<usize> = (0..tried.len()).collect();
    order.sort_by(|&a, &b| loss[a].total_cmp(&loss[b]));
    let good = ((tried.len() as f64 * GAMMA).ceil() as usize).clamp(1, tried.len().max(1));
    let (best, rest) = order.split_at(good.min(order.len()));
    let builder = tpe::density_estimation::HistogramEstimatorBuilder::new();
    let promise: Vec<Vec<f64>> = (space.axes.iter().enumerate())
        .map(|(a, axis)| {
            let range =
                tpe::categorical_range(axis.values.len().max(1)).expect("a non-empty range");
            let values = |set: &[usize]| -> Vec<f64> {
                set.iter().map(|&i| tried[i].point[a] as f64).collect()
            };
            let (g, r) = (values(best), values(rest));
            let Ok(l) = builder.build_density_estimator(g.into_iter(), range);
            let Ok(m) = builder.build_density_estimator(r.into_iter(), range);
            (0..axis.values.len())
                .map(|v| l.log_pdf(v as f64) - m.log_pdf(v as f64))
                .collect()
        })
        .collect();
    let mut top: Vec<Point> = Vec::new();
    let mut top_score = f64::NEG_INFINITY;
    for n in 0..space.size() {
        let p = space.nth(n);
        if taken(space, tried, &p) {
            continue;
        }
        let score: f64 = p.iter().enumerate().map(|(a, &v)| promise[a][v]).sum();
        if score > top_score + 1e-12 {
            (top_score, top) = (score, vec![p]);
        } else if (score - top_score).abs() <= 1e-12 {
            top.push(p);
        }
    }
    if top.is_empty() {
        return Next::Stop(Stopped::Exhausted);
    }
    let mut rng = rng(seed, tried);
    let point = top.swap_remove(rng.random_range(0..top.len()));
    Next::Run {
        point,
        why: Why::Model,
    }
}

/// In a space too large to walk: the crate's per-flag proposals, drawn
/// until one is new, else the incumbent's nearest untried neighbour.
fn sampled(space: &Space, seed: u64, tried: &[Tried]) -> Next {
    let mut rng = rng(seed, tried);
    let loss = losses(tried);
    let mut builder = tpe::TpeOptimizerBuilder::new();
    builder.gamma(GAMMA);
    let mut optims: Vec<tpe::TpeOptimizer> = (space.axes.iter())
        .map(|a| {
            let range = tpe::categorical_range(a.values.len().max(1)).expect("a non-empty range");
            (builder.build(tpe::histogram_estimator(), range)).expect("gamma within 0 and 1")
        })
        .collect();
    for (t, l) in tried.iter().zip(&loss) {
        for (o, &v) in optims.iter_mut().zip(&t.point) {
            // A value of the space's own, and a finite loss: never refused.
            let _ = o.tell(v as f64, *l);
        }
    }
    for _ in 0..DRAWS {
        let point: Point = (optims.iter_mut().zip(&space.axes))
            .map(|(o, a)| {
                let v = o.ask(&mut rng).unwrap_or(0.0);
                (v.floor() as usize).min(a.values.len().saturating_sub(1))
            })
            .collect();
        if !taken(space, tried, &point) {
            return Next::Run {
                point,
                why: Why::Model,
            };
        }
    }
    neighbour(space, tried)
}

/// The untried point nearest the incumbent: one flag changed, then two
/// (the first in the grid's order among equals); in a small space, any.
fn neighbour(space: &Space, tried: &[Tried]) -> Next {
    let Some(from) = incumbent(tried).map(|(i, _)| tried[i].point.clone()) else {
        return walk_if_small(space, tried);
    };
    let n = space.axes.len();
    for a in 0..n {
        for v in 0..space.axes[a].values.len() {
            let mut p = from.clone();
            p[a] = v;
            if !taken(space, tried, &p) {
                return Next::Run {
                    point: p,
                    why: Why::Model,
                };
            }
        }
    }
    for a in 0..n {
        for b in a + 1..n {
            for va in 0..space.axes[a].values.len() {
                for vb in 0..space.axes[b].values.len() {
                    let mut p = from.clone();
                    (p[a], p[b]) = (va, vb);
                    if !taken(space, tried, &p) {
                        return Next::Run {
                            point: p,
                            why: Why::Model,
                        };
                    }
                }
            }
        }
    }
    walk_if_small(space, tried)
}

fn walk_if_small(space: &Space, tried: &[Tried]) -> Next {
    match space.size() > WALKABLE {
        true => Next::Stop(Stopped::Exhausted),
        false => match walk(space, tried) {
            Next::Run { point, .. } => Next::Run {
                point,
                why: Why::Model,
            },
            stop => stop,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::campaign::search::space::{Axis, Failure};

    fn space(sizes: &[usize]) -> Space {
        Space {
            axes: (sizes.iter().enumerate())
                .map(|(i, &k)| Axis {
                    flag: format!("--f{i}"),
                    values: (0..k).map(|v| Some(v.to_string())).collect(),
                })
                .collect(),
            excluded: Vec::new(),
        }
    }

    fn run(s: &Space, strategy: Strategy, b: &Budget, seed: u64, tried: &[Tried]) -> Next {
        next(s, strategy, b, seed, tried, Duration::ZERO)
    }

    fn scored(point: Point, score: f64) -> Tried {
        Tried {
            point,
            outcome: Outcome::Score(score),
        }
    }

    #[test]
    fn the_grid_walks_every_point_in_order_then_stops() {
        let s = space(&[2, 3]);
        let mut tried = Vec::new();
        for n in 0..6 {
            let Next::Run { point, why } = run(&s, Strategy::Grid, &Budget::default(), 0, &tried)
            else {
                panic!("step {n}");
            };
            assert_eq!((point.clone(), why), (s.nth(n), Why::Grid));
            tried.push(scored(point, 1.0));
        }
        let end = run(&s, Strategy::Grid, &Budget::default(), 0, &tried);
        assert_eq!(end, Next::Stop(Stopped::Exhausted));
    }

    #[test]
    fn the_screen_runs_its_design_at_each_flag_s_ends_then_stops() {
        let s = space(&[2, 4, 3, 2, 2, 2]);
        let d = Design::for_factors(6).expect("a design");
        let mut tried = Vec::new();
        for r in 0..d.runs() {
            let Next::Run { point, why } = run(&s, Strategy::Screen, &Budget::default(), 0, &tried)
            else {
                panic!("run {r}");
            };
            assert_eq!(why, Why::Screen { run: r + 1, of: 8 });
            for (c, a) in s.axes.iter().enumerate() {
                let want = if d.high(r, c) { a.values.len() - 1 } else { 0 };
                assert_eq!(point[c], want, "run {r} flag {c}");
            }
            tried.push(scored(point, 1.0));
        }
        let end = run(&s, Strategy::Screen, &Budget::default(), 0, &tried);
        assert_eq!(end, Next::Stop(Stopped::Screened));
    }

    #[test]
    fn a_search_starts_at_random_never_repeats_and_keeps_its_budget() {
        let s = space(&[3, 3, 2]);
        let search = Strategy::Search { screened: false };
        let b = Budget {
            max_steps: Some(12),
            ..Budget::default()
        };
        let mut tried: Vec<Tried> = Vec::new();
        loop {
            match run(&s, search, &b, 9, &tried) {
                Next::Run { point, why } => {
                    let n = tried.len();
                    if n < STARTUP {
                        assert_eq!(why, Why::Random { n: n + 1, of: 4 });
                    } else {
                        assert_eq!(why, Why::Model);
                    }
                    assert!(!taken(&s, &tried, &point), "{point:?} twice");
                    let score = 10.0 + point.iter().sum::<usize>() as f64;
                    tried.push(scored(point, score));
                }
                Next::Stop(stop) => {
                    assert_eq!(stop, Stopped::Steps(12));
                    break;
                }
            }
        }
        assert_eq!(tried.len(), 12);
        // The same steps give the same proposal: a resumed campaign goes on
        // as it would have.
        let again = run(&s, search, &Budget::default(), 9, &tried[..7]);
        let Next::Run { point, .. } = again else {
            panic!("a proposal")
        };
        assert_eq!(point, tried[7].point);
    }

    #[test]
    fn time_and_a_run_without_gain_stop_a_search() {
        let s = space(&[4, 4]);
        let search = Strategy::Search { screened: false };
        let b = Budget {
            max_time: Some(Duration::from_secs(3600)),
            patience: Some(3),
            ..Budget::default()
        };
        let late = next(&s, search, &b, 0, &[], Duration::from_secs(3600));
        assert_eq!(late, Next::Stop(Stopped::Time));
        // 100, then 101 (under the 2 % that counts), 90, a crash (the random
        // start's four), then 95, 99 and 100.5: no gain in the 3 after it.
        let mut tried = vec![
            scored(vec![0, 0], 100.0),
            scored(vec![0, 1], 101.0),
            scored(vec![0, 2], 90.0),
            Tried {
                point: vec![0, 3],
                outcome: Outcome::Failed(Failure::Crashed),
            },
            scored(vec![1, 0], 95.0),
            scored(vec![1, 1], 99.0),
            scored(vec![1, 2], 100.5),
        ];
        let stop = next(&s, search, &b, 0, &tried, Duration::ZERO);
        assert_eq!(stop, Next::Stop(Stopped::NoGain { steps: 3 }));
        assert!(matches!(
            next(&s, search, &b, 0, &tried[..6], Duration::ZERO),
            Next::Run { .. }
        ));
        // The random start never counts as no gain.
        let early = next(&s, search, &b, 0, &tried[..4], Duration::ZERO);
        assert!(matches!(early, Next::Run { .. }), "{early:?}");
        // A gain above 2 % starts the count again.
        tried[6] = scored(vec![1, 2], 104.0);
        assert!(matches!(
            next(&s, search, &b, 0, &tried, Duration::ZERO),
            Next::Run { .. }
        ));
    }

    #[test]
    fn a_failure_makes_its_values_less_likely() {
        let s = space(&[2, 5]);
        let search = Strategy::Search { screened: false };
        let history = |second: Outcome| -> Vec<Tried> {
            let mut t: Vec<Tried> = (0..3)
                .map(|b| scored(vec![0, b], 10.0 + b as f64))
                .collect();
            t.extend((0..3).map(|b| Tried {
                point: vec![1, b],
                outcome: second,
            }));
            t
        };
        let share_of_second = |tried: &[Tried]| {
            let seeds = 40;
            let picked = (0..seeds)
                .filter(|&seed| {
                    matches!(run(&s, search, &Budget::default(), seed, tried),
                        Next::Run { point, .. } if point[0] == 1)
                })
                .count();
            picked as f64 / seeds as f64
        };
        let failed = share_of_second(&history(Outcome::Failed(Failure::Crashed)));
        let better = share_of_second(&history(Outcome::Score(20.0)));
        assert!(failed < 0.25, "failed values still proposed: {failed}");
        assert!(better > 0.75, "better values not proposed: {better}");
        // Graded: below every score, a crash below a wrong answer below an
        // excluded one.
        let mut t = history(Outcome::Score(10.0));
        t[3].outcome = Outcome::Failed(Failure::Crashed);
        t[4].outcome = Outcome::Failed(Failure::Wrong);
        t[5].outcome = Outcome::Failed(Failure::Excluded);
        let l = losses(&t);
        assert!(l[3] > l[4] && l[4] > l[5] && l[5] > l[0], "{l:?}");
        assert!(l.iter().all(|x| x.is_finite()));
    }
}
