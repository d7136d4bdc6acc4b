//! A plan's search: its strategy, budget and confirmation, checked and
//! resolved with the grid's space ([`SearchPlan`]).

use serde::Deserialize;
use shared::campaign::{MAX_STEPS, Strategy};

use super::{PlanError, PlanSpec, bad};
use crate::campaign::search::SearchPlan;
use crate::campaign::search::design::MAX_FACTORS;
use crate::campaign::search::space::Space;

/// `[budget]` as written.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BudgetSpec {
    pub max_steps: Option<u32>,
    pub max_hours: Option<f64>,
    pub patience: Option<u32>,
    pub min_gain_pct: Option<f64>,
}

/// `[confirm]` as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfirmSpec {
    #[serde(default = "two")]
    pub top: u32,
    #[serde(default = "three")]
    pub rounds: u32,
}

fn two() -> u32 {
    2
}

fn three() -> u32 {
    3
}

/// Steps a random draw or a search takes when its plan sets no budget.
const DEFAULT_STEPS: u32 = 20;

/// The plan's search, checked; none for a grid.
pub(super) fn resolve(spec: &PlanSpec, space: &Space) -> Result<Option<SearchPlan>, PlanError> {
    let b = &spec.budget;
    let given = b.max_steps.is_some()
        || b.max_hours.is_some()
        || b.patience.is_some()
        || b.min_gain_pct.is_some();
    if spec.strategy == Strategy::Grid {
        if given || spec.confirm.is_some() {
            return Err(bad(
                "a grid runs every combination: [budget] and [confirm] are for strategy = \
                 \"random\" or \"search\"",
            ));
        }
        return Ok(None);
    }
    let name = spec.strategy.as_str();
    let varied = space.axes.iter().filter(|a| a.values.len() > 1).count();
    if varied == 0 {
        return Err(bad(format!(
            "strategy = \"{name}\" draws from the [grid]: give it at least one flag of two values or more"
        )));
    }
    let screens =
        spec.strategy == Strategy::Screen || (spec.strategy == Strategy::Search && spec.screen);
    if screens && varied > MAX_FACTORS {
        return Err(bad(format!(
            "a screen takes at most {MAX_FACTORS} flags; the grid varies {varied}"
        )));
    }
    if let Some(n) = b.max_steps
        && !(1..=MAX_STEPS as u32).contains(&n)
    {
        return Err(bad(format!(
            "budget.max_steps must be from 1 to {MAX_STEPS}"
        )));
    }
    if let Some(h) = b.max_hours
        && !(h.is_finite() && h > 0.0 && h <= 720.0)
    {
        return Err(bad("budget.max_hours must be above 0 and at most 720"));
    }
    if b.patience == Some(0) {
        return Err(bad("budget.patience must be at least 1 step"));
    }
    let min_gain_pct = b.min_gain_pct.unwrap_or(2.0);
    if !(min_gain_pct.is_finite() && (0.0..=50.0).contains(&min_gain_pct)) {
        return Err(bad("budget.min_gain_pct must be from 0 to 50"));
    }
    let (confirm_top, confirm_rounds) = match (&spec.confirm, spec.strategy) {
        (Some(_), Strategy::Screen) => {
            return Err(bad(
                "a screen estimates effects and names no winner: [confirm] is for \"random\" \
                 or \"search\"",
            ));
        }
        (Some(c), _) if !(1..=5).contains(&c.top) || !(1..=10).contains(&c.rounds) => {
            return Err(bad(
                "confirm: top must be from 1 to 5 sets and rounds from 1 to 10",
            ));
        }
        (Some(c), _) => (c.top, c.rounds),
        (None, Strategy::Screen) => (0, 0),
        (None, _) => (2, 3),
    };
    // A draw with no end of its own stops after DEFAULT_STEPS.
    let max_steps = match (b.max_steps, b.max_hours, b.patience, spec.strategy) {
        (None, None, None, Strategy::Random | Strategy::Search) => Some(DEFAULT_STEPS),
        (n, ..) => n,
    };
    Ok(Some(SearchPlan {
        strategy: spec.strategy,
        screen: spec.screen,
        space: space.clone(),
        max_steps,
        max_time_ms: b.max_hours.map(|h| (h * 3_600_000.0) as u64),
        patience: b.patience,
        min_gain: min_gain_pct / 100.0,
        confirm_top,
        confirm_rounds,
        listed: spec.sets.len() as u32,
        seed: seed_of(&spec.name),
    }))
}

/// A plan's seed, from its name (FNV-1a): the same plan proposes the same
/// steps from the same results.
fn seed_of(name: &str) -> u64 {
    (name.bytes()).fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}
