//! A campaign that searches: when its pending steps are done, the search
//! says what runs next ([`crate::campaign::search::steps::extend`]): a
//! proposed step, the confirmation's re-tests, or the end, with the words
//! the campaign ends with (why it stopped, and the verdict).

use std::collections::BTreeMap;

use shared::campaign::{Campaign, Step, StepState};

use super::Runner;
use crate::bench::flagset;
use crate::campaign::search::SearchPlan;
use crate::campaign::search::steps::{Extend, extend};
use crate::clock::now_ms;
use crate::config::file::ServerConfig;

impl Runner {
    /// Appends what the active campaign's search runs next, or says it
    /// runs nothing more.
    pub(super) fn extend_search(&mut self) -> Extended {
        let Some(a) = self.active.as_ref() else {
            return Extended::Over(None);
        };
        let Some(plan) = a.search.as_ref() else {
            return Extended::Over(None);
        };
        let added = match extension(&self.cfg, plan, &a.c) {
            Extended::Added(added) => added,
            over => return over,
        };
        let Some(a) = self.active.as_mut() else {
            return Extended::Over(None);
        };
        let from = a.c.steps.len();
        a.c.steps.extend(added);
        for i in from..a.c.steps.len() {
            self.set_step(i, |_| {});
        }
        Extended::Added(Vec::new())
    }
}

/// A search's first step, laid out with its campaign: the baseline, where
/// the plan lists no set.
pub(super) fn first_step(cfg: &ServerConfig, plan: &SearchPlan, c: &mut Campaign) {
    if !c.steps.is_empty() {
        return;
    }
    if let Extended::Added(first) = extension(cfg, plan, c) {
        if let Some(s) = first.first() {
            c.info.baseline = s.plan_index;
        }
        c.steps.extend(first);
        c.recount();
    }
}

/// What a search did when its pending steps were done.
#[derive(Debug)]
pub(super) enum Extended {
    /// These steps are to run.
    Added(Vec<Step>),
    /// Nothing more runs: the words the campaign ends with (none for a plan
    /// that does not search).
    Over(Option<String>),
}

/// The steps the search adds to `c`, or the words it ends with.
fn extension(cfg: &ServerConfig, plan: &SearchPlan, c: &Campaign) -> Extended {
    let elapsed = now_ms().saturating_sub(c.info.created_at_ms);
    let added: Vec<Step> = match extend(plan, &c.steps, elapsed) {
        Extend::Over(words) => return Extended::Over(Some(words)),
        Extend::Step {
            plan_index,
            point,
            why,
        } => {
            let changes: BTreeMap<String, Option<String>> =
                plan.space.changes(&point).into_iter().collect();
            let redactor = crate::redact::global();
            let flags = match cfg.allow.resolve(redactor, cfg.allow.defaults(), &changes) {
                Ok(f) => f,
                // Each value was checked with the plan; a refusal here is a
                // config changed under a campaign: it ends, saying so.
                Err(e) => {
                    let words = format!("the search's next set is refused: {e}");
                    return Extended::Over(Some(words));
                }
            };
            vec![Step {
                flagset: flagset::id(redactor, &cfg.model, &flags),
                flags,
                ..pending(c.steps.len() as u32, plan_index, Some(why))
            }]
        }
        Extend::Confirm(order) => (order.into_iter().enumerate())
            .filter_map(|(k, (plan_index, label))| {
                let of = c.steps.iter().find(|s| s.plan_index == plan_index)?;
                Some(Step {
                    flags: of.flags.clone(),
                    flagset: of.flagset.clone(),
                    settings: of.settings.clone(),
                    ..pending((c.steps.len() + k) as u32, plan_index, Some(label))
                })
            })
            .collect(),
    };
    match added.is_empty() {
        true => Extended::Over(None),
        false => Extended::Added(added),
    }
}

/// A step not run yet.
pub(super) fn pending(index: u32, plan_index: u32, label: Option<String>) -> Step {
    Step {
        index,
        plan_index,
        label,
        flags: Default::default(),
        flagset: String::new(),
        settings: None,
        state: StepState::Pending,
        attempts: 0,
        restart_id: None,
        run_id: None,
        failure: None,
        result: None,
        started_at_ms: None,
        finished_at_ms: None,
    }
}
