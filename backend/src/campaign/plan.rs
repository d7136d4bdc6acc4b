//! A campaign's plan as written (TOML or JSON: [`PlanSpec`]) and as resolved
//! against the server's allow-list into the steps it runs ([`Resolved`]). The
//! whole plan is checked before anything runs: an off-list flag, a value its
//! flag does not take, bad benchmark settings or too many steps refuse it
//! whole, naming what. Pure: no I/O.

use std::collections::BTreeMap;
use std::fmt;

use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, Visitor};
use shared::bench::BenchSettings;
use shared::campaign::{FailurePolicy, MAX_STEPS, PlanOrder, Strategy};
use shared::flags::{FlagKind, Flags};

use super::search::SearchPlan;
use super::search::space::{Axis, Space};
use crate::bench::overrides::SettingsError;
use crate::config::flags::AllowList;

mod search;

/// The most combinations a searched grid may have (a search draws from
/// them; only a grid runs them all).
pub const MAX_SPACE: usize = 1_000_000;

/// A plan, as an operator writes it.
///
/// ```toml
/// name = "indexer × EP"
/// on_failure = "continue"        # retry | stop
/// target = 1000                  # tok/s at the first level
/// [bench]                        # changes to the config's [bench.defaults]
/// concurrency = [16]
/// [grid]                         # every combination, the first flag slowest…
/// SGLANG_OPT_USE_TILELANG_INDEXER = ["0", "1"]
/// "--ep-size" = [1, 4, 8]
/// [[exclude]]                    # …but these
/// "--ep-size" = 8
/// [[sets]]                       # and/or sets one by one
/// flags = { "--tp" = 4 }
/// ```
///
/// Or a search over the grid, after its listed sets:
///
/// ```toml
/// strategy = "search"            # grid | random | screen | search
/// screen = true                  # a search starts with a screen
/// [budget]
/// max_steps = 20
/// max_hours = 8
/// patience = 6                   # stop after 6 steps without a gain…
/// min_gain_pct = 2               # …of more than 2 %
/// [confirm]                      # re-test the best 2 and the baseline
/// top = 2
/// rounds = 3
/// ```
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlanSpec {
    pub name: String,
    #[serde(default)]
    pub order: PlanOrder,
    #[serde(default)]
    pub on_failure: FailurePolicy,
    /// Skip a set measured before with the same settings on the same server version.
    #[serde(default = "yes")]
    pub reuse: bool,
    /// The goal in the metric's unit (output tok/s; good req/s in open loop).
    #[serde(default)]
    pub target: Option<f64>,
    /// Changes to the config's `[bench.defaults]` for every step.
    #[serde(default)]
    pub bench: serde_json::Map<String, serde_json::Value>,
    /// How the steps are chosen over the `[grid]`.
    #[serde(default)]
    pub strategy: Strategy,
    /// A search starts with a screen (else with a few random sets).
    #[serde(default = "yes")]
    pub screen: bool,
    /// When a search or a random draw stops.
    #[serde(default)]
    pub budget: search::BudgetSpec,
    /// The re-tests before a winner is named.
    #[serde(default)]
    pub confirm: Option<search::ConfirmSpec>,
    #[serde(default)]
    pub grid: Ordered,
    #[serde(default)]
    pub exclude: Vec<Ordered>,
    #[serde(default)]
    pub sets: Vec<SetSpec>,
}

fn yes() -> bool {
    true
}

/// One flag set written out.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SetSpec {
    #[serde(default)]
    pub label: Option<String>,
    #[serde(default)]
    pub flags: Ordered,
    /// This set's own changes to the plan's `[bench]`.
    #[serde(default)]
    pub bench: Option<serde_json::Map<String, serde_json::Value>>,
}

/// A flag's value as written: a string, a number, a boolean; `""` (or JSON
/// `null`) is the config's own value, which may be unset.
#[derive(Debug, Clone, PartialEq)]
pub struct Scalar(pub Option<String>);

impl<'de> Deserialize<'de> for Scalar {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Scalar;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string, a number or a boolean")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Scalar, E> {
                Ok(Scalar((!v.is_empty()).then(|| v.to_owned())))
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<Scalar, E> {
                Ok(Scalar(Some(v.to_string())))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Scalar, E> {
                Ok(Scalar(Some(v.to_string())))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Scalar, E> {
                Ok(Scalar(Some(v.to_string())))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Scalar, E> {
                Ok(Scalar(Some(v.to_string())))
            }
            fn visit_unit<E: de::Error>(self) -> Result<Scalar, E> {
                Ok(Scalar(None))
            }
            fn visit_none<E: de::Error>(self) -> Result<Scalar, E> {
                Ok(Scalar(None))
            }
        }
        d.deserialize_any(V)
    }
}

/// One value or a list of them (a grid's entry).
#[derive(Debug, Clone, PartialEq)]
pub struct Values(pub Vec<Scalar>);

impl<'de> Deserialize<'de> for Values {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum OneOrMany {
            Many(Vec<Scalar>),
            One(Scalar),
        }
        Ok(match OneOrMany::deserialize(d)? {
            OneOrMany::Many(v) => Values(v),
            OneOrMany::One(v) => Values(vec![v]),
        })
    }
}

/// A table whose entries keep the order they were written in (flag name →
/// values): a grid's first flag varies slowest.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Ordered(pub Vec<(String, Values)>);

impl<'de> Deserialize<'de> for Ordered {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Ordered;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a table of flag names to values")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Ordered, A::Error> {
                let mut out: Vec<(String, Values)> = Vec::new();
                while let Some((k, v)) = map.next_entry::<String, Values>()? {
                    if out.iter().any(|(n, _)| *n == k) {
                        let twice = shared::flags::ChangeError::Twice { name: k };
                        return Err(de::Error::custom(twice));
                    }
                    out.push((k, v));
                }
                Ok(Ordered(out))
            }
        }
        d.deserialize_map(V)
    }
}

/// Why a plan was refused, worded for the operator.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct PlanError(pub String);

fn bad(m: impl Into<String>) -> PlanError {
    PlanError(m.into())
}

/// Reads a plan from TOML or JSON text (which one: `json`).
pub fn parse(text: &str, json: bool) -> Result<PlanSpec, PlanError> {
    if json {
        serde_json::from_str(text).map_err(|e| bad(format!("plan: {e}")))
    } else {
        toml::from_str(text).map_err(|e| bad(format!("plan: {}", e.message())))
    }
}

/// One step as resolved, before it has run.
#[derive(Debug, Clone, PartialEq)]
pub struct ResolvedStep {
    pub plan_index: u32,
    pub label: Option<String>,
    /// Every allow-listed flag's value, raw (secrets too): what it launches with.
    pub flags: Flags,
    /// Its own settings, where the set gave changes.
    pub settings: Option<BenchSettings>,
}

/// A plan checked whole, in the order it runs.
#[derive(Debug, Clone, PartialEq)]
pub struct Resolved {
    pub name: String,
    pub order: PlanOrder,
    pub on_failure: FailurePolicy,
    pub reuse: bool,
    pub target: Option<f64>,
    pub bench: BenchSettings,
    /// Steps in the order they run.
    pub steps: Vec<ResolvedStep>,
    /// The flags the plan varies, in its order.
    pub varied: Vec<String>,
    /// How a plan that does not walk its grid chooses its steps (after its
    /// listed sets, which run first).
    pub search: Option<SearchPlan>,
}

/// A set before it is resolved: its label, its changes from the config's
/// flags, its own benchmark settings.
type SetChanges = (
    Option<String>,
    BTreeMap<String, Option<String>>,
    Option<BenchSettings>,
);

/// A step's argument flags' values: what [`PlanOrder::EnvFirst`] groups by.
type ArgValues = Vec<(String, Option<String>)>;

/// `defaults` with `changes` on top, checked: a benchmark's settings.
fn bench_settings(
    defaults: &BenchSettings,
    changes: &serde_json::Map<String, serde_json::Value>,
) -> Result<BenchSettings, SettingsError> {
    crate::bench::overrides::with_changes(defaults, &serde_json::Value::Object(changes.clone()))
}

/// The plan checked against the allow-list (`allow`, whose defaults are the
/// config's values) and the config's benchmark defaults.
pub fn resolve(
    spec: PlanSpec,
    allow: &AllowList,
    bench_defaults: &BenchSettings,
) -> Result<Resolved, PlanError> {
    let name = spec.name.trim().to_owned();
    if name.is_empty() || name.chars().count() > 100 || name.chars().any(char::is_control) {
        return Err(bad("name: give the campaign a name of 1 to 100 characters"));
    }
    if let Some(t) = spec.target
        && !(t.is_finite() && t > 0.0 && t <= 1e9)
    {
        return Err(bad(format!("target must be a number above 0, got {t}")));
    }
    let bench =
        bench_settings(bench_defaults, &spec.bench).map_err(|e| bad(format!("bench: {e}")))?;
    // One flag's value, canonical, or the refusal naming where it was written.
    let canon = |flag: &str, v: &Scalar, at: &str| -> Result<Option<String>, PlanError> {
        let change = BTreeMap::from([(flag.to_owned(), v.0.clone())]);
        let flags = allow
            .resolve(crate::redact::global(), allow.defaults(), &change)
            .map_err(|e| bad(format!("{at}: {e}")))?;
        Ok(flags.get(flag).cloned())
    };
    let searching = spec.strategy != Strategy::Grid;
    let cap = if searching { MAX_SPACE } else { MAX_STEPS };
    let (space, mut varied) = grid_space(&spec, &canon, cap)?;
    let search = search::resolve(&spec, &space)?;
    let mut sets = if searching {
        Vec::new()
    } else {
        grid_sets(&space)
    };
    sets.extend(listed_sets(&spec, &bench, &canon)?);
    if sets.is_empty() && search.is_none() {
        return Err(bad(
            "the plan has no flag sets: give a [grid] or [[sets]] (all combinations excluded?)",
        ));
    }
    if sets.len() > MAX_STEPS {
        return Err(bad(format!(
            "the plan has {} flag sets; at most {MAX_STEPS}",
            sets.len()
        )));
    }
    let mut steps: Vec<ResolvedStep> = Vec::with_capacity(sets.len());
    for (i, (label, changes, settings)) in sets.into_iter().enumerate() {
        let flags = allow
            .resolve(crate::redact::global(), allow.defaults(), &changes)
            .map_err(|e| bad(format!("set #{}: {e}", i + 1)))?;
        if let Some(same) = steps
            .iter()
            .position(|s| s.flags == flags && s.settings == settings)
        {
            return Err(bad(format!(
                "flag set #{} is the same as #{} (same flags, same benchmark)",
                i + 1,
                same + 1
            )));
        }
        steps.push(ResolvedStep {
            plan_index: i as u32,
            label,
            flags,
            settings,
        });
    }
    // Every flag whose value differs between steps is varied, grid's first.
    for spec in allow.specs().iter().filter(|_| !steps.is_empty()) {
        let first = steps[0].flags.get(&spec.name);
        if !varied.contains(&spec.name) && steps.iter().any(|s| s.flags.get(&spec.name) != first) {
            varied.push(spec.name.clone());
        }
    }
    if spec.order == PlanOrder::EnvFirst {
        steps = env_first(steps, allow);
    }
    Ok(Resolved {
        name,
        order: spec.order,
        on_failure: spec.on_failure,
        reuse: spec.reuse,
        target: spec.target,
        bench,
        steps,
        varied,
        search,
    })
}

/// One flag's value as written, canonical, or the refusal naming where it was
/// written (`at`).
type Canon<'a> = dyn Fn(&str, &Scalar, &str) -> Result<Option<String>, PlanError> + 'a;

/// The grid as a space: each flag's canonical values, and the exclusions
/// as (flag, value) indices; with the flags it varies. `cap`: the most
/// combinations it may have (a grid runs them all; a search draws from
/// them).
fn grid_space(
    spec: &PlanSpec,
    canon: &Canon<'_>,
    cap: usize,
) -> Result<(Space, Vec<String>), PlanError> {
    let mut axes: Vec<Axis> = Vec::new();
    let mut varied: Vec<String> = Vec::new();
    let mut count: usize = 1;
    for (flag, values) in &spec.grid.0 {
        if values.0.is_empty() {
            return Err(bad(format!("grid: `{flag}` has no values")));
        }
        let mut canon_values: Vec<Option<String>> = Vec::new();
        for v in &values.0 {
            let c = canon(flag, v, "grid")?;
            if canon_values.contains(&c) {
                return Err(bad(format!(
                    "grid: `{flag}` lists the value `{}` twice",
                    c.as_deref().unwrap_or("")
                )));
            }
            canon_values.push(c);
        }
        count = count
            .checked_mul(canon_values.len())
            .filter(|n| *n <= cap)
            .ok_or_else(|| {
                bad(format!(
                    "grid: more than {cap} combinations; split the campaign"
                ))
            })?;
        // One value is a setting of every step, not something varied.
        if canon_values.len() > 1 {
            varied.push(flag.clone());
        }
        axes.push(Axis {
            flag: flag.clone(),
            values: canon_values,
        });
    }
    let mut excluded: Vec<Vec<(usize, usize)>> = Vec::new();
    for (i, ex) in spec.exclude.iter().enumerate() {
        let mut one = Vec::new();
        for (flag, values) in &ex.0 {
            let Some(a) = axes.iter().position(|a| a.flag == *flag) else {
                return Err(bad(format!(
                    "exclude #{}: `{flag}` is not one of the grid's flags",
                    i + 1
                )));
            };
            let [v] = values.0.as_slice() else {
                return Err(bad(format!("exclude #{}: give `{flag}` one value", i + 1)));
            };
            let c = canon(flag, v, &format!("exclude #{}", i + 1))?;
            let Some(at) = axes[a].values.iter().position(|x| *x == c) else {
                return Err(bad(format!(
                    "exclude #{}: `{flag}` = `{}` is not among the grid's values",
                    i + 1,
                    c.as_deref().unwrap_or("")
                )));
            };
            one.push((a, at));
        }
        if one.is_empty() {
            return Err(bad(format!("exclude #{}: name at least one flag", i + 1)));
        }
        excluded.push(one);
    }
    Ok((Space { axes, excluded }, varied))
}

/// The grid's combinations in order (the first flag slowest), less the
/// excluded ones.
fn grid_sets(space: &Space) -> Vec<SetChanges> {
    if space.axes.is_empty() {
        return Vec::new();
    }
    (0..space.size())
        .map(|n| space.nth(n))
        .filter(|p| space.allows(p))
        .map(|p| (None, space.changes(&p).into_iter().collect(), None))
        .collect()
}

/// The plan's listed sets, each with its label and benchmark settings.
fn listed_sets(
    spec: &PlanSpec,
    bench: &BenchSettings,
    canon: &Canon<'_>,
) -> Result<Vec<SetChanges>, PlanError> {
    let mut sets = Vec::new();
    for (i, set) in spec.sets.iter().enumerate() {
        let at = format!("set #{}", i + 1);
        let mut changes = BTreeMap::new();
        for (flag, values) in &set.flags.0 {
            let [v] = values.0.as_slice() else {
                return Err(bad(format!("{at}: give `{flag}` one value")));
            };
            changes.insert(flag.clone(), canon(flag, v, &at)?);
        }
        let settings = match &set.bench {
            Some(changes) => {
                Some(bench_settings(bench, changes).map_err(|e| bad(format!("{at}: bench: {e}")))?)
            }
            None => None,
        };
        let label = set.label.as_ref().map(|l| l.trim().to_owned());
        if let Some(l) = &label
            && (l.chars().count() > 100 || l.chars().any(char::is_control))
        {
            return Err(bad(format!("{at}: a label is at most 100 characters")));
        }
        sets.push((label, changes, settings));
    }
    Ok(sets)
}

/// Steps grouped by their arguments (groups in order of first appearance,
/// the plan's order within each): consecutive steps differ only in
/// environment variables wherever they can.
fn env_first(steps: Vec<ResolvedStep>, allow: &AllowList) -> Vec<ResolvedStep> {
    let args = |s: &ResolvedStep| -> ArgValues {
        allow
            .specs()
            .iter()
            .filter(|f| f.kind == FlagKind::Arg)
            .map(|f| (f.name.clone(), s.flags.get(&f.name).cloned()))
            .collect()
    };
    let mut groups: Vec<(ArgValues, Vec<ResolvedStep>)> = Vec::new();
    for s in steps {
        let key = args(&s);
        match groups.iter_mut().find(|(k, _)| *k == key) {
            Some((_, g)) => g.push(s),
            None => groups.push((key, vec![s])),
        }
    }
    groups.into_iter().flat_map(|(_, g)| g).collect()
}

#[cfg(test)]
#[path = "plan_tests.rs"]
mod tests;
