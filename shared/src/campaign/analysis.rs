//! What the views compute from a campaign: each step's Δ against the
//! baseline, the best set so far, the Pareto frontier of throughput against
//! p99 TTFT, each flag value's effect over the pairs that differ only in it,
//! and the time left. Pure, so the UI, the CLI and the exports agree.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{Campaign, Step, StepState};

/// Δ % of `step`'s metric against `base`'s (medians); `None` unless both are
/// measured and the baseline's is above zero.
pub fn delta_pct(step: &Step, base: &Step) -> Option<f64> {
    let (a, b) = (base.result.as_ref()?, step.result.as_ref()?);
    if !(step.measured() && base.measured()) {
        return None;
    }
    let (a, b) = (a.metric().median, b.metric().median);
    (a > 0.0 && a.is_finite() && b.is_finite()).then(|| (b - a) / a * 100.0)
}

/// Each step's Δ % against the campaign's baseline, by step index.
pub fn deltas(c: &Campaign) -> Vec<Option<f64>> {
    let base = c.baseline();
    c.steps
        .iter()
        .map(|s| base.and_then(|b| delta_pct(s, b)))
        .collect()
}

/// The measured step with the highest metric (median) so far.
pub fn best(c: &Campaign) -> Option<&Step> {
    c.steps
        .iter()
        .filter(|s| s.measured())
        .filter_map(|s| s.result.as_ref().map(|r| (s, r.metric().median)))
        .filter(|(_, m)| m.is_finite())
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .map(|(s, _)| s)
}

/// One point of the comparison chart: a measured step.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Point {
    pub step: u32,
    /// p99 TTFT, median over repeats (ms): lower is better.
    pub x: f64,
    /// The metric's median: higher is better.
    pub y: f64,
    /// Its spread over repeats.
    pub y_min: f64,
    pub y_max: f64,
    pub on_frontier: bool,
}

/// Every measured step as a point, with the Pareto frontier marked: a point
/// is on it when no other is at least as good on both axes and better on one.
/// Sorted by `x`.
pub fn pareto(c: &Campaign) -> Vec<Point> {
    let mut pts: Vec<Point> = c
        .steps
        .iter()
        .filter(|s| s.measured())
        .filter_map(|s| {
            let r = s.result.as_ref()?;
            let m = r.metric();
            let x = r.ttft_p99_ms.median;
            (x.is_finite() && m.median.is_finite()).then_some(Point {
                step: s.index,
                x,
                y: m.median,
                y_min: m.min,
                y_max: m.max,
                on_frontier: false,
            })
        })
        .collect();
    let dominated = |p: &Point, all: &[Point]| {
        all.iter()
            .any(|q| q.x <= p.x && q.y >= p.y && (q.x < p.x || q.y > p.y))
    };
    let marks: Vec<bool> = pts.iter().map(|p| !dominated(p, &pts)).collect();
    for (p, m) in pts.iter_mut().zip(marks) {
        p.on_frontier = m;
    }
    insertion_sort(&mut pts, |a, b| {
        a.x.total_cmp(&b.x).then(a.step.cmp(&b.step))
    });
    pts
}

/// Fewer pairs than this, and an effect is marked as resting on too few.
pub const MIN_PAIRS: u32 = 2;

/// The effect of setting one flag to one value, against the baseline's value.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Effect {
    pub flag: String,
    /// The baseline's value ("" where it leaves the flag unset).
    pub from: String,
    pub to: String,
    /// Median Δ % over the pairs of measured steps that differ only in this flag.
    pub median_pct: Option<f64>,
    pub pairs: u32,
    /// Why the number is thin or missing, if it is.
    pub note: Option<String>,
}

impl Effect {
    /// "SGLANG_OPT_USE_TILELANG_INDEXER=1: +24 % (4 pairs)".
    pub fn line(&self) -> String {
        let what = format!(
            "{}={}",
            self.flag,
            if self.to.is_empty() {
                "(unset)"
            } else {
                &self.to
            }
        );
        match self.median_pct {
            Some(p) => format!(
                "{what}: {}{:.1} % ({} pair{}){}",
                if p >= 0.0 { "+" } else { "−" },
                p.abs(),
                self.pairs,
                if self.pairs == 1 { "" } else { "s" },
                self.note
                    .as_deref()
                    .map(|n| format!(" — {n}"))
                    .unwrap_or_default()
            ),
            None => format!("{what}: {}", self.note.as_deref().unwrap_or("no pairs")),
        }
    }
}

/// For each flag the plan varies and each of its values other than the
/// baseline's: the median Δ % across the measured pairs that differ only in
/// that flag (baseline's value → this value). In the order of `c.info.varied`,
/// then of first appearance of the value.
pub fn attribution(c: &Campaign) -> Vec<Effect> {
    let Some(base) = c.baseline() else {
        return Vec::new();
    };
    let measured: Vec<&Step> = c.steps.iter().filter(|s| s.measured()).collect();
    let plan = by_plan(c);
    let mut out = Vec::new();
    // One pass over the steps per flag: a plan that varies a flag over many
    // values costs no more than one that varies it over two.
    for flag in &c.info.varied {
        let value = |s: &Step| s.flags.get(flag).cloned().unwrap_or_default();
        let from = value(base);
        // Values in the order they first appear in the plan, each with the
        // Δ of its pairs.
        let mut values: Vec<(String, Vec<f64>)> = Vec::new();
        for s in &plan {
            let v = value(s);
            if v != from && !values.iter().any(|(x, _)| *x == v) {
                values.push((v, Vec::new()));
            }
        }
        // The steps measured with the baseline's value, by everything else.
        let mut at_from: BTreeMap<Vec<(&String, &String)>, &Step> = BTreeMap::new();
        for s in &measured {
            if value(s) == from {
                at_from.insert(rest(s, flag), s);
            }
        }
        for s in &measured {
            let v = value(s);
            if v == from {
                continue;
            }
            let Some(d) = at_from.get(&rest(s, flag)).and_then(|a| delta_pct(s, a)) else {
                continue;
            };
            if let Some((_, pcts)) = values.iter_mut().find(|(x, _)| *x == v) {
                pcts.push(d);
            }
        }
        for (to, mut pcts) in values {
            let pairs = pcts.len() as u32;
            let median = median(&mut pcts);
            let note = match pairs {
                0 => Some("no measured pair differs only in this flag".to_owned()),
                p if p < MIN_PAIRS => Some("too few pairs to say".to_owned()),
                _ => None,
            };
            out.push(Effect {
                flag: flag.clone(),
                from: from.clone(),
                to,
                median_pct: median,
                pairs,
                note,
            });
        }
    }
    out
}

/// The steps in the plan's order (as written), whatever order they ran in.
fn by_plan(c: &Campaign) -> Vec<&Step> {
    let mut slots: Vec<Option<&Step>> = vec![None; c.steps.len()];
    for s in &c.steps {
        if let Some(slot) = slots.get_mut(s.plan_index as usize) {
            *slot = Some(s);
        }
    }
    slots.into_iter().flatten().collect()
}

/// The median of `v` (sorted in place); `None` when empty.
fn median(v: &mut [f64]) -> Option<f64> {
    insertion_sort(v, f64::total_cmp);
    let n = v.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(v[n / 2]),
        _ => Some((v[n / 2 - 1] + v[n / 2]) / 2.0),
    }
}

/// A stable sort of a few hundred items at most: one small function for every
/// element type, where the standard library's sorts would each compile a large
/// one into the browser's bundle.
fn insertion_sort<T: Copy>(v: &mut [T], cmp: impl Fn(&T, &T) -> std::cmp::Ordering) {
    for i in 1..v.len() {
        let mut j = i;
        while j > 0 && cmp(&v[j - 1], &v[j]) == std::cmp::Ordering::Greater {
            v.swap(j - 1, j);
            j -= 1;
        }
    }
}

/// A step's flags but `flag`: what must be equal for two steps to pair.
fn rest<'a>(s: &'a Step, flag: &str) -> Vec<(&'a String, &'a String)> {
    s.flags.iter().filter(|(k, _)| k.as_str() != flag).collect()
}

/// About how long until the campaign ends (ms), if it still runs: each step
/// not yet final takes the median of this campaign's own steps that ran
/// (done or failed, not reused), or `per_step_ms` (typical phase times and
/// benchmark) before any did; the running step counts what it has left.
pub fn eta_ms(c: &Campaign, per_step_ms: Option<u64>, now_ms: u64) -> Option<u64> {
    eta(c, per_step_ms, now_ms).map(|e| e.left_ms)
}

/// The time left ([`eta_ms`]) and the part of it the steps not started yet
/// make (`pending_ms`): as the clock runs, the time left falls by as much
/// until it reaches that part, while the running step is within its
/// expected time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Eta {
    pub left_ms: u64,
    pub pending_ms: u64,
}

/// [`Eta`] at `now_ms`.
pub fn eta(c: &Campaign, per_step_ms: Option<u64>, now_ms: u64) -> Option<Eta> {
    if c.info.state.is_over() {
        return Some(Eta {
            left_ms: 0,
            pending_ms: 0,
        });
    }
    let mut took: Vec<f64> = c
        .steps
        .iter()
        .filter(|s| matches!(s.state, StepState::Done | StepState::Failed))
        .filter_map(|s| s.took_ms(now_ms))
        .map(|t| t as f64)
        .collect();
    let per = match median(&mut took) {
        Some(m) => m,
        None => per_step_ms? as f64,
    };
    let (mut left, mut pending) = (0.0, 0.0);
    for s in c.steps.iter().filter(|s| !s.state.is_final()) {
        match s.state {
            StepState::Pending => pending += per,
            _ => left += (per - s.took_ms(now_ms).unwrap_or(0) as f64).max(0.0),
        }
    }
    Some(Eta {
        left_ms: (left + pending).round() as u64,
        pending_ms: pending.round() as u64,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::{BenchSettings, Spread};
    use crate::campaign::{CampaignInfo, CampaignState, FailurePolicy, PlanOrder, StepResult};

    fn step(
        i: u32,
        flags: &[(&str, &str)],
        state: StepState,
        tok_s: Option<f64>,
        ttft: f64,
    ) -> Step {
        Step {
            index: i,
            plan_index: i,
            label: None,
            flags: flags
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            flagset: format!("set{i}"),
            settings: None,
            state,
            attempts: 1,
            restart_id: None,
            run_id: None,
            failure: None,
            result: tok_s.map(|t| StepResult {
                run_id: i64::from(i),
                concurrency: 16,
                request_rate: None,
                output_tok_s: Spread {
                    min: t * 0.98,
                    median: t,
                    max: t * 1.01,
                },
                ttft_p99_ms: Spread {
                    min: ttft,
                    median: ttft,
                    max: ttft,
                },
                goodput_req_s: None,
                achieved_rate: None,
                client_saturated: false,
            }),
            started_at_ms: Some(1_000 * u64::from(i)),
            finished_at_ms: Some(1_000 * u64::from(i) + 600),
        }
    }

    /// indexer × ep, one step failed.
    fn campaign() -> Campaign {
        use StepState::*;
        let steps = vec![
            step(0, &[("IDX", "0"), ("--ep", "1")], Done, Some(100.0), 50.0),
            step(1, &[("IDX", "0"), ("--ep", "4")], Done, Some(120.0), 60.0),
            step(2, &[("IDX", "1"), ("--ep", "1")], Done, Some(110.0), 45.0),
            step(3, &[("IDX", "1"), ("--ep", "4")], Failed, None, 0.0),
            step(4, &[("IDX", "0"), ("--ep", "8")], Pending, None, 0.0),
        ];
        let mut c = Campaign {
            info: CampaignInfo {
                id: 1,
                name: "t".into(),
                state: CampaignState::Running,
                reason: None,
                requested_by: "me".into(),
                created_at_ms: 0,
                finished_at_ms: None,
                order: PlanOrder::Given,
                on_failure: FailurePolicy::Continue,
                reuse: true,
                target: Some(150.0),
                baseline: 0,
                current: Some(4),
                steps: 0,
                done: 0,
                reused: 0,
                failed: 0,
                skipped: 0,
                varied: vec!["IDX".into(), "--ep".into()],
                step_estimate_ms: None,
            },
            bench: BenchSettings::default(),
            steps,
        };
        c.recount();
        c
    }

    #[test]
    fn deltas_and_the_best_are_against_measured_steps_only() {
        let c = campaign();
        assert_eq!((c.info.done, c.info.failed), (3, 1));
        let d = deltas(&c);
        assert_eq!(d[0], Some(0.0));
        assert!((d[1].expect("measured") - 20.0).abs() < 1e-9);
        assert_eq!(d[3], None);
        assert_eq!(best(&c).map(|s| s.index), Some(1));
    }

    #[test]
    fn the_frontier_keeps_what_no_other_beats_on_both_axes() {
        let c = campaign();
        let pts = pareto(&c);
        let xs: Vec<(u32, bool)> = pts.iter().map(|p| (p.step, p.on_frontier)).collect();
        // Sorted by TTFT: step 2 (45 ms, 110), step 0 (50, 100: beaten by 2),
        // step 1 (60, 120).
        assert_eq!(xs, [(2, true), (0, false), (1, true)]);
        assert_eq!(pts[0].y_max, 110.0 * 1.01);
    }

    #[test]
    fn attribution_pairs_steps_that_differ_in_one_flag() {
        let c = campaign();
        let e = attribution(&c);
        let idx = e.iter().find(|e| e.flag == "IDX").expect("IDX");
        // Only (0,1)→(1,1) pairs: (0,4)→(1,4) failed.
        assert_eq!(
            (idx.from.as_str(), idx.to.as_str(), idx.pairs),
            ("0", "1", 1)
        );
        assert!((idx.median_pct.expect("one pair") - 10.0).abs() < 1e-9);
        assert_eq!(idx.note.as_deref(), Some("too few pairs to say"));
        let ep: Vec<&Effect> = e.iter().filter(|e| e.flag == "--ep").collect();
        assert_eq!(ep.len(), 2, "values 4 and 8");
        assert_eq!(ep[0].to, "4");
        assert_eq!(ep[0].pairs, 1);
        assert_eq!(ep[1].to, "8");
        assert_eq!((ep[1].pairs, ep[1].median_pct), (0, None));
        assert!(
            ep[1].line().contains("no measured pair"),
            "{}",
            ep[1].line()
        );
        assert_eq!(idx.line(), "IDX=1: +10.0 % (1 pair) — too few pairs to say");
    }

    #[test]
    fn the_time_left_is_the_measured_median_per_step_left() {
        let mut c = campaign();
        // Three steps ran (done or failed), 600 ms each; one pending.
        assert_eq!(eta_ms(&c, Some(99_999), 10_000), Some(600));
        c.steps[4].state = StepState::Restarting;
        c.steps[4].started_at_ms = Some(9_800);
        c.steps[4].finished_at_ms = None;
        assert_eq!(eta_ms(&c, None, 10_000), Some(400));
        c.info.state = CampaignState::Done;
        assert_eq!(eta_ms(&c, None, 10_000), Some(0));
        // Before any step ran: the estimate given, or none.
        let mut fresh = campaign();
        for s in &mut fresh.steps {
            s.state = StepState::Pending;
        }
        assert_eq!(eta_ms(&fresh, Some(1_000), 0), Some(5_000));
        assert_eq!(eta_ms(&fresh, None, 0), None);
    }
}
