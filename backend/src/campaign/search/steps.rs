//! A campaign's steps as its search reads them: which point each stands
//! for (a proposed step's `plan_index` is the plan's listed sets plus the
//! point's index in the grid; a re-test repeats the `plan_index` of the
//! step it re-tests), what each came to, and what comes next: a proposed
//! step, the confirmation's re-tests, or the end with its words.

use shared::campaign::{FailureKind, Step, StepState};

use super::SearchPlan;
use super::confirm::{Verdict, interleaved, verdict};
use super::propose::{Next, Stopped, Why, next};
use super::space::{Failure, Outcome, Point, Tried};

/// What a campaign that searches runs next.
#[derive(Debug, Clone, PartialEq)]
pub enum Extend {
    /// A proposed step: its `plan_index`, its point, and why (in words).
    Step {
        plan_index: u32,
        point: Point,
        why: String,
    },
    /// The confirmation's re-tests, in order: each a step's `plan_index`,
    /// with its label.
    Confirm(Vec<(u32, String)>),
    /// Nothing more: the words it ends with.
    Over(String),
}

/// What a step came to, for the search: none while it has not run, or when
/// it failed for a reason that is not its flags' (the GPUs, a person).
fn outcome(s: &Step) -> Option<Outcome> {
    match s.state {
        StepState::Done | StepState::Reused => {
            let m = s.result.as_ref()?.metric().median;
            m.is_finite().then_some(Outcome::Score(m))
        }
        StepState::Failed => match s.failure.as_ref()?.kind {
            FailureKind::Oom
            | FailureKind::WarmupTimeout
            | FailureKind::Crashed
            | FailureKind::LaunchFailed
            | FailureKind::BenchFailed => Some(Outcome::Failed(Failure::Crashed)),
            FailureKind::WrongAnswer => Some(Outcome::Failed(Failure::Wrong)),
            FailureKind::VerifyFailed
            | FailureKind::ForeignHolders
            | FailureKind::Unhealthy
            | FailureKind::NeedsPerson => None,
        },
        _ => None,
    }
}

/// Whether step `i` re-tests a set: an earlier step has its `plan_index`.
pub fn is_retest(steps: &[Step], i: usize) -> bool {
    steps[..i]
        .iter()
        .any(|e| e.plan_index == steps[i].plan_index)
}

/// The points tried (each proposed step's first run), and whether the
/// confirmation has begun (a step repeats an earlier one's `plan_index`).
pub fn tried(plan: &SearchPlan, steps: &[Step]) -> (Vec<Tried>, bool) {
    let mut seen: Vec<u32> = Vec::new();
    let mut out = Vec::new();
    let mut confirming = false;
    for s in steps {
        if seen.contains(&s.plan_index) {
            confirming = true;
            continue;
        }
        seen.push(s.plan_index);
        let Some(n) = s.plan_index.checked_sub(plan.listed) else {
            continue;
        };
        if let Some(outcome) = outcome(s) {
            out.push(Tried {
                point: plan.space.nth(n as usize),
                outcome,
            });
        }
    }
    (out, confirming)
}

/// Why a proposal was made, in words.
fn why_words(why: Why) -> String {
    match why {
        Why::Grid => "next in the grid".to_owned(),
        Why::Random { n, of } if of > 0 && n <= of => format!("random start {n} of {of}"),
        Why::Random { .. } => "drawn at random".to_owned(),
        Why::Screen { run, of } => format!("screen run {run} of {of}"),
        Why::Model => "most promising given the steps so far (TPE)".to_owned(),
    }
}

/// Why the search stopped, in words.
pub fn stop_words(stop: Stopped) -> String {
    match stop {
        Stopped::Exhausted => "every combination was tried".to_owned(),
        Stopped::Screened => "the screen's runs are done".to_owned(),
        Stopped::Steps(n) => format!("its budget of {n} steps is spent"),
        Stopped::Time => "its time budget is spent".to_owned(),
        Stopped::NoGain { steps } => format!("{steps} steps in a row brought no gain"),
        Stopped::TooManyFlags => "too many flags for a screen".to_owned(),
    }
}

/// What runs next, given the steps so far (all of them final), the
/// plan's seed and the time the campaign has run.
pub fn extend(plan: &SearchPlan, steps: &[Step], elapsed_ms: u64) -> Extend {
    let seed = plan.seed;
    let (tried, confirming) = tried(plan, steps);
    let elapsed = std::time::Duration::from_millis(elapsed_ms);
    let stop = match next(
        &plan.space,
        plan.strategy(),
        &plan.budget(),
        seed,
        &tried,
        elapsed,
    ) {
        Next::Run { .. } if confirming => Stopped::Steps(tried.len()),
        Next::Run { point, why } => {
            let index = plan.space.index_of(&point);
            return Extend::Step {
                plan_index: plan.listed.saturating_add(index as u32),
                point,
                why: why_words(why),
            };
        }
        Next::Stop(stop) => stop,
    };
    let mut stopped = format!("{} stopped: {}", plan.strategy.as_str(), stop_words(stop));
    if plan.strategy == shared::campaign::Strategy::Screen {
        stopped = format!("{stopped}; {}", effects_words(plan, &tried));
    }
    if confirming || plan.confirm_top == 0 {
        return Extend::Over(match (confirming, confirmed(plan, steps, seed)) {
            (true, Some(words)) => format!("{stopped}; {words}"),
            _ => stopped,
        });
    }
    let sets = candidates(plan, steps);
    if sets.len() < 2 {
        return Extend::Over(format!(
            "{stopped}; too few sets scored to confirm a winner"
        ));
    }
    let rounds = plan.confirm_rounds as usize;
    let order = interleaved(sets.len(), rounds);
    Extend::Confirm(
        (order.iter().enumerate())
            .map(|(k, &i)| {
                let round = k / sets.len() + 1;
                (sets[i], format!("re-test, round {round} of {rounds}"))
            })
            .collect(),
    )
}

/// Each screened flag's effect with its interval, in words ("`--x` +6.1 %
/// (95 %: +2.0 to +10.3 %, 4 pairs)"), or why there are none.
pub fn effects_words(plan: &SearchPlan, tried: &[Tried]) -> String {
    let axes = super::propose::screened(&plan.space);
    match super::confirm::screen_effects(&plan.space, tried, &[]) {
        Ok(effects) => {
            let each: Vec<String> = (axes.iter().zip(&effects))
                .map(|(&a, e)| {
                    let ax = &plan.space.axes[a];
                    let high = ax.values.last().cloned().flatten();
                    format!(
                        "`{}` {} {:+.1} % (95 %: {:+.1} to {:+.1} %, {} pairs)",
                        ax.flag,
                        high.as_deref().unwrap_or("(the config's)"),
                        e.relative * 100.0,
                        e.low * 100.0,
                        e.high * 100.0,
                        e.pairs
                    )
                })
                .collect();
            format!("effects: {}", each.join("; "))
        }
        Err(e) => format!("no effects: {e}"),
    }
}

/// The sets a confirmation re-tests: the best `confirm_top` scored, then
/// the baseline (the first step), each once; where the baseline has no
/// score (it failed), the next best instead, so that the winner always has
/// a set to be measured against.
fn candidates(plan: &SearchPlan, steps: &[Step]) -> Vec<u32> {
    let mut scored: Vec<(u32, f64)> = Vec::new();
    for s in steps {
        if let Some(Outcome::Score(x)) = outcome(s)
            && !scored.iter().any(|(p, _)| *p == s.plan_index)
        {
            scored.push((s.plan_index, x));
        }
    }
    scored.sort_by(|a, b| b.1.total_cmp(&a.1));
    let top = plan.confirm_top as usize;
    let mut out: Vec<u32> = scored.iter().take(top).map(|(p, _)| *p).collect();
    let baseline = steps.first().map(|s| s.plan_index);
    match baseline.filter(|b| scored.iter().any(|(p, _)| p == b)) {
        Some(b) if !out.contains(&b) => out.push(b),
        Some(_) => {}
        None => out.extend(scored.get(top).map(|(p, _)| *p)),
    }
    out
}

/// Each re-tested set's scores, its first run's included: (plan_index,
/// scores), in the order the sets were first run.
pub fn samples(steps: &[Step]) -> Vec<(u32, Vec<f64>)> {
    let repeated: Vec<u32> = (0..steps.len())
        .filter(|&i| is_retest(steps, i))
        .map(|i| steps[i].plan_index)
        .collect();
    let mut out: Vec<(u32, Vec<f64>)> = Vec::new();
    for s in steps.iter().filter(|s| repeated.contains(&s.plan_index)) {
        let score = match outcome(s) {
            Some(Outcome::Score(x)) => Some(x),
            _ => None,
        };
        match out.iter_mut().find(|(p, _)| *p == s.plan_index) {
            Some((_, v)) => v.extend(score),
            None => out.push((s.plan_index, score.into_iter().collect())),
        }
    }
    out
}

/// The confirmation's verdict in words, once its re-tests are done.
fn confirmed(plan: &SearchPlan, steps: &[Step], seed: u64) -> Option<String> {
    let sets = samples(steps);
    let scores: Vec<Vec<f64>> = sets.iter().map(|(_, v)| v.clone()).collect();
    let v: Verdict = verdict(&scores, seed)?;
    let name = |i: usize| set_name(plan, steps, sets[i].0);
    let winner = name(v.winner);
    let lead_words = (v.leads.iter())
        .map(|(i, l)| {
            format!(
                "{:+.1} % over {} (95 %: {:+.1} to {:+.1} %)",
                l.relative * 100.0,
                name(*i),
                l.low * 100.0,
                l.high * 100.0
            )
        })
        .collect::<Vec<_>>()
        .join(", ");
    let n = scores[v.winner].len();
    Some(if v.better() {
        format!("winner {winner}, better beyond the noise of {n} runs: {lead_words}")
    } else {
        let tied: Vec<String> = v.tied.iter().map(|&i| name(i)).collect();
        format!(
            "tie within noise: {winner} and {} ({lead_words})",
            tied.join(", ")
        )
    })
}

/// A step's set as the words name it: its label where it has one of its
/// own (a listed set's), else "set #n" by its first step's place.
fn set_name(plan: &SearchPlan, steps: &[Step], plan_index: u32) -> String {
    let first = steps.iter().find(|s| s.plan_index == plan_index);
    match first {
        Some(s) if plan_index < plan.listed && s.label.is_some() => {
            format!("“{}”", s.label.clone().unwrap_or_default())
        }
        Some(s) => format!("step {}", s.index + 1),
        None => format!("set {plan_index}"),
    }
}
