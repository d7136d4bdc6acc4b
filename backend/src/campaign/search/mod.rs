//! Campaigns that search instead of walking the grid: the space of flag
//! values ([`space`]), the screen's two-level design ([`design`]), the next
//! step of each strategy ([`propose`]), and what the noise lets one say
//! ([`noise`], [`confirm`]): effects with intervals, a robust score, and a
//! winner named better only beyond the spread its re-tests measured. Pure:
//! no I/O, and seeded, so a resumed campaign proposes what it would have.

pub mod confirm;
pub mod design;
pub mod noise;
pub mod propose;
pub mod space;
pub mod steps;

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// A plan's search, as resolved and kept with its campaign: what the runner
/// needs to propose each next step, and to confirm the winner.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SearchPlan {
    pub strategy: shared::campaign::Strategy,
    /// A search starts with a screen (else with a few random sets).
    pub screen: bool,
    pub space: space::Space,
    pub max_steps: Option<u32>,
    pub max_time_ms: Option<u64>,
    pub patience: Option<u32>,
    /// The relative gain that counts (0.02: 2 %).
    pub min_gain: f64,
    /// The best sets re-tested with the baseline before a winner is named
    /// (0: none).
    pub confirm_top: u32,
    /// Rounds of re-tests, each set once per round.
    pub confirm_rounds: u32,
    /// The plan's listed sets, which run first: a proposed step's
    /// `plan_index` is this plus its point's index in the grid.
    #[serde(default)]
    pub listed: u32,
    /// The proposals' seed: the same steps so far, the same proposal.
    #[serde(default)]
    pub seed: u64,
}

impl SearchPlan {
    pub fn strategy(&self) -> propose::Strategy {
        use shared::campaign::Strategy as S;
        match self.strategy {
            S::Grid => propose::Strategy::Grid,
            S::Random => propose::Strategy::Random,
            S::Screen => propose::Strategy::Screen,
            S::Search => propose::Strategy::Search {
                screened: self.screen,
            },
        }
    }

    pub fn budget(&self) -> propose::Budget {
        propose::Budget {
            max_steps: self.max_steps.map(|n| n as usize),
            max_time: self.max_time_ms.map(Duration::from_millis),
            patience: self.patience.map(|n| n as usize),
            min_gain: self.min_gain,
        }
    }
}
