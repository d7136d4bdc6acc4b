//! The throughput view and the benchmark controls, decided away from the DOM:
//! numbers with their units, which concurrency and baseline are shown, deltas,
//! sorting and filtering, the bars, the sweep chart and the comparison as HTML
//! text (set as an element's content, like [`crate::markup`]), the benchmark
//! form's request, and the restart dialog's values for a flag set.
//!
//! Everything that comes from outside (labels, notes, flag names and values,
//! models, errors) goes through [`escape`].

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};
use shared::bench::{
    BenchApi, BenchProgress, BenchSettings, Correctness, FlagSet, FlagSetResults, LevelSummary,
    Passive, RunStatus,
};
use shared::restart::{FlagSpec, Flags};

use crate::chart::{empty_note, gpu_colour, nice_step, tick_label, ticks, y_grid};
use crate::flags::{self, FlagChange};
use crate::markup::escape;
pub(crate) use shared::units::{MISSING, fmt_ms, fmt_ms_pair, fmt_tok_s, ms_num, tok_num};

/// The target line's default, in output tok/s.
pub(crate) const DEFAULT_TARGET: f64 = 1000.0;
/// The concurrency shown first when the data has it.
pub(crate) const PREFERRED_C: u32 = 16;

/// The relative change from `base` to `v`, in percent; `None` without a
/// usable base.
pub(crate) fn delta_pct(v: f64, base: f64) -> Option<f64> {
    (base.is_finite() && v.is_finite() && base > 0.0).then(|| (v - base) / base * 100.0)
}

/// "+12.3 %", "−4.0 %", "±0.0 %".
pub(crate) fn fmt_delta(pct: f64) -> String {
    let r = (pct * 10.0).round() / 10.0;
    if r == 0.0 {
        "±0.0 %".to_owned()
    } else if r > 0.0 {
        format!("+{r:.1} %")
    } else {
        format!("−{:.1} %", -r)
    }
}

/// The server panel's live line from the server's own metrics: "612 tok/s ·
/// 16 running · 0 queued · p50 TTFT 48.5 ms · ITL 21.2 ms".
pub(crate) fn live_text(has_metrics: bool, p: &Passive) -> String {
    if !has_metrics {
        return "this server exposes no metrics".to_owned();
    }
    let n = |v: Option<u32>| v.map_or_else(|| MISSING.to_owned(), |v| v.to_string());
    format!(
        "{} · {} running · {} queued · p50 TTFT {} · ITL {}",
        fmt_tok_s(p.output_tok_s),
        n(p.running),
        n(p.queued),
        fmt_ms(p.ttft_p50_ms),
        fmt_ms(p.itl_p50_ms)
    )
}

/// The running benchmark in a line: "benchmark #4 · c=16 · repeat 2/3 ·
/// 80/208 requests · 598 tok/s" (the progress counts repeats from 0; a
/// count of 0 is not known yet).
pub(crate) fn progress_text(p: &BenchProgress) -> String {
    // Who comes last: where the line is cut, the numbers stay.
    let by = match p.requested_by.as_str() {
        "" => String::new(),
        who => format!(" · by {who}"),
    };
    if p.total == 0 {
        return format!("benchmark #{} · starting…{by}", p.run_id);
    }
    let repeat = match p.repeats {
        0 => (p.repeat + 1).to_string(),
        n => format!("{}/{n}", p.repeat + 1),
    };
    format!(
        "benchmark #{} · c={} · repeat {repeat} · {}/{} requests · {}{by}",
        p.run_id,
        p.concurrency,
        p.done,
        p.total,
        fmt_tok_s(Some(p.output_tok_s))
    )
}

/// What the page shows of a finished benchmark run (a
/// [`shared::bench::BenchRun`] read without its settings and per-repeat
/// metrics: the ledger has the results).
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub(crate) struct RunBrief {
    pub(crate) id: i64,
    pub(crate) status: RunStatus,
    pub(crate) error: Option<String>,
    pub(crate) correctness: Option<CorrectnessBrief>,
}

/// Whether the correctness prompt was answered right.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
pub(crate) struct CorrectnessBrief {
    pub(crate) passed: bool,
}

/// A finished run in a line, for the panel while no benchmark runs.
pub(crate) fn run_text(r: &RunBrief) -> String {
    let how = match r.status {
        RunStatus::Running => "running",
        RunStatus::Succeeded => "succeeded",
        RunStatus::Failed => "failed",
        RunStatus::Cancelled => "cancelled",
        RunStatus::Interrupted => "interrupted",
    };
    let mut out = format!("last benchmark #{} {how}", r.id);
    if let Some(e) = &r.error {
        let _ = write!(out, ": {e}");
    }
    if r.correctness.as_ref().is_some_and(|c| !c.passed) {
        out.push_str(" · wrong answer to the correctness prompt");
    }
    out
}

/// A set's name: its label, else its id.
pub(crate) fn set_name(set: &FlagSet) -> &str {
    set.label
        .as_deref()
        .filter(|l| !l.trim().is_empty())
        .unwrap_or(&set.id)
}

/// The running set for the server panel: "baseline · 3f2a9c01b2de", or the id
/// alone while it has no label.
pub(crate) fn running_set_text(id: Option<&str>, ledger: &[FlagSetResults]) -> String {
    let Some(id) = id else {
        return format!("flag set {MISSING}");
    };
    match ledger
        .iter()
        .find(|r| r.set.id == id)
        .and_then(|r| r.set.label.as_deref())
    {
        Some(label) => format!("flag set {label} · {id}"),
        None => format!("flag set {id}"),
    }
}

/// Every concurrency some set has a result at, ascending.
pub(crate) fn concurrencies(ledger: &[FlagSetResults]) -> Vec<u32> {
    let mut out: Vec<u32> = ledger
        .iter()
        .flat_map(|r| r.levels.keys().copied())
        .collect();
    out.sort_unstable();
    out.dedup();
    out
}

/// The concurrency shown: `wanted` when the data has it, else
/// [`PREFERRED_C`] when present, else the largest.
pub(crate) fn pick_c(cs: &[u32], wanted: Option<u32>) -> Option<u32> {
    wanted
        .filter(|w| cs.contains(w))
        .or_else(|| cs.contains(&PREFERRED_C).then_some(PREFERRED_C))
        .or_else(|| cs.last().copied())
}

/// The baseline: `wanted` when it is a known set, else the first set (in
/// first-seen order) measured at `c`, else the first measured at all, else
/// the first.
pub(crate) fn pick_baseline(
    ledger: &[FlagSetResults],
    c: Option<u32>,
    wanted: Option<&str>,
) -> Option<String> {
    wanted
        .and_then(|w| ledger.iter().find(|r| r.set.id == w))
        .or_else(|| {
            ledger
                .iter()
                .find(|r| c.is_some_and(|c| r.levels.contains_key(&c)))
        })
        .or_else(|| ledger.iter().find(|r| !r.levels.is_empty()))
        .or_else(|| ledger.first())
        .map(|r| r.set.id.clone())
}

/// The summary at `c`.
pub(crate) fn level(r: &FlagSetResults, c: Option<u32>) -> Option<&LevelSummary> {
    c.and_then(|c| r.levels.get(&c))
}

/// How the bars are ordered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Sort {
    /// Fastest first at the shown concurrency; sets without a result last.
    Throughput,
    /// As the ledger lists them: first seen first.
    FirstSeen,
}

impl Sort {
    pub(crate) fn key(self) -> &'static str {
        match self {
            Self::Throughput => "throughput",
            Self::FirstSeen => "first",
        }
    }

    pub(crate) fn from_key(key: &str) -> Self {
        if key == "first" {
            Self::FirstSeen
        } else {
            Self::Throughput
        }
    }
}

/// Whether every word of `query` is in the set's label, id, model or flags
/// (case-insensitive).
pub(crate) fn matches_filter(r: &FlagSetResults, query: &str) -> bool {
    let q = query.trim().to_lowercase();
    if q.is_empty() {
        return true;
    }
    let mut hay = format!(
        "{} {} {}",
        r.set.label.as_deref().unwrap_or(""),
        r.set.id,
        r.set.model
    );
    for (k, v) in &r.set.flags {
        let _ = write!(hay, " {k}={v}");
    }
    let hay = hay.to_lowercase();
    q.split_whitespace().all(|w| hay.contains(w))
}

/// The positions in `ledger` of the sets to show, in order.
pub(crate) fn order(
    ledger: &[FlagSetResults],
    c: Option<u32>,
    sort: Sort,
    filter: &str,
) -> Vec<usize> {
    let mut idx: Vec<usize> = (0..ledger.len())
        .filter(|&i| matches_filter(&ledger[i], filter))
        .collect();
    if sort == Sort::Throughput {
        let v = |i: usize| level(&ledger[i], c).map(|l| l.output_tok_s.median);
        // Stable: equal or missing values keep first-seen order.
        idx.sort_by(|&a, &b| match (v(a), v(b)) {
            (Some(x), Some(y)) => y.total_cmp(&x),
            (Some(_), None) => std::cmp::Ordering::Less,
            (None, Some(_)) => std::cmp::Ordering::Greater,
            (None, None) => std::cmp::Ordering::Equal,
        });
    }
    idx
}

/// "k=v · k=v", or "no flags".
pub(crate) fn all_flags(flags: &Flags) -> String {
    if flags.is_empty() {
        return "no flags".to_owned();
    }
    flags
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(" · ")
}

/// A set's flags in a few words: all of them for the baseline (or without
/// one), else what differs from the baseline ("--tp: 6 → 4 · + X=1").
pub(crate) fn flag_summary(set: &FlagSet, baseline: Option<&FlagSet>) -> String {
    match baseline {
        Some(b) if b.id != set.id => {
            let changes = flags::diff(&b.flags, &set.flags);
            let mut parts: Vec<String> = changes.iter().map(ToString::to_string).collect();
            if b.model != set.model {
                parts.insert(0, format!("model {}", set.model));
            }
            if parts.is_empty() {
                "same flags as the baseline".to_owned()
            } else {
                parts.join(" · ")
            }
        }
        _ => all_flags(&set.flags),
    }
}

/// At most this many steps on the bar column's axis.
const BAR_TICKS: usize = 6;

/// The bars' full scale: the larger of the data and the target, with some
/// room, rounded up to a tick.
pub(crate) fn scale_max(data_max: f64, target: f64) -> f64 {
    let m = data_max.max(target).max(1.0) * 1.04;
    let step = nice_step(m, BAR_TICKS);
    (m / step).ceil() * step
}

/// `v` as a percentage of `scale`, clamped, for `left`/`width`.
fn pct(v: f64, scale: f64) -> f64 {
    if scale > 0.0 && v.is_finite() {
        (v / scale * 100.0).clamp(0.0, 100.0)
    } else {
        0.0
    }
}

/// The left of the target line over the bars, in percent of the track.
pub(crate) fn target_left(target: f64, scale: f64) -> f64 {
    pct(target, scale)
}

/// The tick labels over the bar column.
pub(crate) fn axis_markup(scale: f64) -> String {
    let step = nice_step(scale, BAR_TICKS);
    let mut out = String::new();
    for t in ticks(scale, BAR_TICKS) {
        let p = pct(t, scale);
        // The last label reads leftwards so it stays inside.
        let cls = if p > 90.0 {
            "fs-tick fs-tick-end"
        } else {
            "fs-tick"
        };
        let _ = write!(
            out,
            r#"<span class="{cls}" style="left:{p:.2}%">{}</span>"#,
            tick_label(t, step, "tok/s")
        );
    }
    out
}

/// What a row needs besides its set.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RowCtx<'a> {
    pub(crate) c: Option<u32>,
    pub(crate) baseline: Option<&'a FlagSetResults>,
    pub(crate) running: Option<&'a str>,
    pub(crate) compare: &'a [String],
    pub(crate) scale: f64,
    /// Whether the page may edit labels (an operator's).
    pub(crate) operate: bool,
}

/// One flag set's row: compare box, name, badges and flags, the bar with its
/// min–max whisker, the median with Δ against the baseline, the latency
/// columns, and the edit button. Its `data-testid` is `flagset-bar` when the
/// set has a result at the shown concurrency, `flagset-nodata` otherwise.
pub(crate) fn row_markup(r: &FlagSetResults, x: &RowCtx<'_>) -> String {
    let set = &r.set;
    let id = escape(&set.id);
    let lv = level(r, x.c);
    let running = x.running == Some(set.id.as_str());
    let mut out = String::new();
    match lv {
        Some(l) => {
            let _ = write!(
                out,
                r#"<div class="fs-row" data-testid="flagset-bar" data-flagset="{id}" data-tok-s="{:.1}" data-running="{running}">"#,
                l.output_tok_s.median
            );
        }
        None => {
            let _ = write!(
                out,
                r#"<div class="fs-row fs-nodata" data-testid="flagset-nodata" data-flagset="{id}" data-running="{running}">"#
            );
        }
    }
    let checked = if x.compare.contains(&set.id) {
        " checked"
    } else {
        ""
    };
    let _ = write!(
        out,
        r#"<label class="fs-check" title="compare (pick two)"><input type="checkbox" data-testid="compare-check" data-flagset="{id}"{checked}></label>"#
    );

    // Name, badges, flags.
    let name = escape(set_name(set));
    let mut tip = format!("{} · {}", set.id, set.model);
    if let Some(n) = set.notes.as_deref().filter(|n| !n.is_empty()) {
        let _ = write!(tip, "\n\n{n}");
    }
    let baseline_set = x.baseline.map(|b| &b.set);
    let summary = flag_summary(set, baseline_set);
    let _ = write!(
        out,
        r#"<div class="fs-name"><div class="fs-title"><span class="fs-label" data-testid="flagset-label" title="{tip}">{name}</span>"#,
        tip = escape(&tip),
    );
    if set.label.is_some() {
        let _ = write!(out, r#"<span class="fs-id">{id}</span>"#);
    }
    if set.notes.as_deref().is_some_and(|n| !n.is_empty()) {
        let _ = write!(
            out,
            r#"<span class="fs-badge fs-notes" title="{}">notes</span>"#,
            escape(set.notes.as_deref().unwrap_or(""))
        );
    }
    if running {
        out.push_str(r#"<span class="fs-badge fs-running" data-testid="running-badge" title="the server runs with this set">running</span>"#);
    }
    if r.wrong_answers {
        out.push_str(r#"<span class="fs-badge fs-wrong" data-testid="wrong-badge" title="a correctness check failed with this set">wrong answers</span>"#);
    }
    let _ = write!(
        out,
        r#"</div><div class="fs-flags" data-testid="flagset-flags" title="{}">{}</div></div>"#,
        escape(&all_flags(&set.flags)),
        escape(&summary)
    );

    // The bar.
    out.push_str(r#"<div class="fs-track">"#);
    if let Some(l) = lv {
        let s = l.output_tok_s;
        let (lo, hi) = (pct(s.min, x.scale), pct(s.max, x.scale));
        let _ = write!(
            out,
            r#"<div class="fs-bar" style="width:{:.2}%"></div><div class="fs-whisker" data-testid="whisker" title="min {} · max {} across repeats" style="left:{lo:.2}%;width:{:.2}%"></div>"#,
            pct(s.median, x.scale),
            fmt_tok_s(Some(s.min)),
            fmt_tok_s(Some(s.max)),
            (hi - lo).max(0.0),
        );
    } else {
        let what = match x.c {
            Some(c) if !r.levels.is_empty() => format!("not measured at c={c}"),
            _ => "not measured yet".to_owned(),
        };
        let _ = write!(out, r#"<span class="fs-none">{what}</span>"#);
    }
    out.push_str("</div>");

    // Median and delta.
    out.push_str(r#"<div class="fs-value">"#);
    if let Some(l) = lv {
        let s = l.output_tok_s;
        let (delta, pct_attr) = match x.baseline {
            Some(b) if b.set.id == set.id => ("baseline".to_owned(), "0.0".to_owned()),
            Some(b) => {
                match level(b, x.c).and_then(|bl| delta_pct(s.median, bl.output_tok_s.median)) {
                    Some(p) => (fmt_delta(p), format!("{p:.1}")),
                    None => (format!("Δ {MISSING} %"), String::new()),
                }
            }
            None => (format!("Δ {MISSING} %"), String::new()),
        };
        let sign = if pct_attr.starts_with('-') {
            "neg"
        } else if pct_attr.is_empty() || pct_attr == "0.0" {
            "zero"
        } else {
            "pos"
        };
        let _ = write!(
            out,
            r#"<span class="fs-tok">{}</span><span class="fs-delta fs-{sign}" data-testid="delta" data-pct="{pct_attr}">{delta}</span><span class="fs-range">{}–{} tok/s</span>"#,
            fmt_tok_s(Some(s.median)),
            tok_num(s.min),
            tok_num(s.max),
        );
    }
    out.push_str("</div>");

    // Latencies.
    match lv {
        Some(l) => {
            let _ = write!(
                out,
                r#"<div class="fs-lat" data-testid="ttft" title="time to first token, p50 / p99 (medians across repeats)">{}</div><div class="fs-lat" data-testid="itl" title="inter-token latency, p50 / p99 (medians across repeats)">{}</div>"#,
                fmt_ms_pair(l.ttft_p50_ms.median, l.ttft_p99_ms.median),
                fmt_ms_pair(l.itl_p50_ms.median, l.itl_p99_ms.median),
            );
        }
        None => out.push_str(r#"<div class="fs-lat"></div><div class="fs-lat"></div>"#),
    }
    if x.operate {
        let _ = write!(
            out,
            r#"<div class="fs-act"><button type="button" class="btn btn-small" data-testid="label-edit" data-flagset="{id}" title="edit label and notes">edit</button></div></div>"#
        );
    } else {
        out.push_str(r#"<div class="fs-act"></div></div>"#);
    }
    out
}

/// The sweep chart's drawing box, in user units.
pub(crate) const SW: f64 = 760.0;
pub(crate) const SH: f64 = 270.0;
const S_LEFT: f64 = 78.0;
const S_RIGHT: f64 = SW - 24.0;
const S_TOP: f64 = 14.0;
const S_BOTTOM: f64 = SH - 36.0;

/// The sweep chart's `<svg>` content: output tok/s (median across repeats)
/// against concurrency on a log₂ axis, one `<polyline data-testid="sweep-line"
/// data-flagset=…>` per set in `shown` (positions in `ledger`), the target as a
/// dashed line. Colours follow the set's position in the ledger.
pub(crate) fn sweep_markup(ledger: &[FlagSetResults], shown: &[usize], target: f64) -> String {
    let mut out = format!(
        r#"<rect class="plot-bg" x="{S_LEFT}" y="{S_TOP}" width="{}" height="{}"/>"#,
        S_RIGHT - S_LEFT,
        S_BOTTOM - S_TOP
    );
    let sets: Vec<usize> = shown
        .iter()
        .copied()
        .filter(|&i| ledger.get(i).is_some_and(|r| r.levels.len() >= 2))
        .collect();
    let cs: Vec<u32> = {
        let mut v: Vec<u32> = sets
            .iter()
            .flat_map(|&i| ledger[i].levels.keys().copied())
            .collect();
        v.sort_unstable();
        v.dedup();
        v
    };
    let (Some(&c_lo), Some(&c_hi)) = (cs.first(), cs.last()) else {
        empty_note(
            &mut out,
            (S_LEFT + S_RIGHT) / 2.0,
            (S_TOP + S_BOTTOM) / 2.0,
            "no sweep yet: benchmark a set at two concurrencies or more (e.g. 1,4,16,64)",
        );
        return out;
    };
    let (l0, l1) = (f64::from(c_lo.max(1)).log2(), f64::from(c_hi.max(1)).log2());
    let x = |c: u32| {
        if l1 > l0 {
            S_LEFT
                + 12.0
                + (f64::from(c.max(1)).log2() - l0) / (l1 - l0) * (S_RIGHT - S_LEFT - 24.0)
        } else {
            (S_LEFT + S_RIGHT) / 2.0
        }
    };
    let data_max = sets
        .iter()
        .flat_map(|&i| ledger[i].levels.values().map(|l| l.output_tok_s.median))
        .fold(0.0f64, f64::max);
    let y_max = scale_max(data_max, target);
    let y = |v: f64| S_BOTTOM - pct(v, y_max) / 100.0 * (S_BOTTOM - S_TOP);

    y_grid(&mut out, (S_LEFT, S_RIGHT), y_max, 5, "tok/s", y);
    for &c in &cs {
        let xx = x(c);
        let _ = write!(
            out,
            r#"<line class="grid" x1="{xx:.1}" x2="{xx:.1}" y1="{S_TOP}" y2="{S_BOTTOM}"/><text class="axis" x="{xx:.1}" y="{}" text-anchor="middle">c={c}</text>"#,
            S_BOTTOM + 16.0
        );
    }
    let _ = write!(
        out,
        r#"<text class="axis" x="{}" y="{}" text-anchor="middle">concurrency (requests in flight, log₂ scale)</text>"#,
        (S_LEFT + S_RIGHT) / 2.0,
        SH - 4.0
    );
    if target > 0.0 && target.is_finite() {
        let ty = y(target);
        let _ = write!(
            out,
            r#"<line class="sweep-target" data-testid="sweep-target" x1="{S_LEFT}" x2="{S_RIGHT}" y1="{ty:.1}" y2="{ty:.1}"/><text class="sweep-target-label" x="{}" y="{:.1}" text-anchor="end">target {}</text>"#,
            S_RIGHT - 4.0,
            ty - 4.0,
            fmt_tok_s(Some(target))
        );
    }
    for &i in &sets {
        let r = &ledger[i];
        let colour = gpu_colour(i);
        let name = escape(set_name(&r.set));
        let mut pts = String::new();
        let mut dots = String::new();
        for (c, l) in &r.levels {
            let (xx, yy) = (x(*c), y(l.output_tok_s.median));
            if !pts.is_empty() {
                pts.push(' ');
            }
            let _ = write!(pts, "{xx:.1},{yy:.1}");
            let _ = write!(
                dots,
                r#"<circle cx="{xx:.1}" cy="{yy:.1}" r="3" fill="{colour}"><title>{name} · c={c} · {}</title></circle>"#,
                fmt_tok_s(Some(l.output_tok_s.median))
            );
        }
        let _ = write!(
            out,
            r#"<g data-testid="sweep-line" data-flagset="{}"><polyline class="sweep-line" stroke="{colour}" points="{pts}"/>{dots}</g>"#,
            escape(&r.set.id)
        );
    }
    out
}

/// The sweep chart's legend: a swatch and the set's name per line.
pub(crate) fn sweep_legend(ledger: &[FlagSetResults], shown: &[usize]) -> String {
    let mut out = String::new();
    for &i in shown {
        let Some(r) = ledger.get(i).filter(|r| r.levels.len() >= 2) else {
            continue;
        };
        let _ = write!(
            out,
            r#"<span class="legend-item" data-flagset="{}"><span class="legend-swatch" style="background:{}"></span>{}</span>"#,
            escape(&r.set.id),
            gpu_colour(i),
            escape(set_name(&r.set))
        );
    }
    out
}

/// The shared diff's changes as the dialog's (a removed flag shows its name).
pub(crate) fn from_wire(changes: &[shared::bench::FlagChange]) -> Vec<FlagChange> {
    use shared::bench::FlagChange as W;
    changes
        .iter()
        .map(|c| match c {
            W::Added { name, value } => FlagChange::Added {
                name: name.clone(),
                value: value.clone(),
            },
            W::Removed { name, .. } => FlagChange::Removed { name: name.clone() },
            W::Changed { name, from, to } => FlagChange::Changed {
                name: name.clone(),
                from: from.clone(),
                to: to.clone(),
            },
        })
        .collect()
}

/// The results of `a` and `b` side by side, one row per concurrency either
/// has: tok/s of each and B's Δ against A, TTFT and ITL p50 of each.
pub(crate) fn compare_table(a: &FlagSetResults, b: &FlagSetResults) -> String {
    let mut cs: Vec<u32> = a.levels.keys().chain(b.levels.keys()).copied().collect();
    cs.sort_unstable();
    cs.dedup();
    let (na, nb) = (escape(set_name(&a.set)), escape(set_name(&b.set)));
    let mut out = format!(
        r#"<table class="proc-table cmp-table" data-testid="compare-results"><thead><tr><th>concurrency</th><th class="num" title="{na}">A tok/s</th><th class="num" title="{nb}">B tok/s</th><th class="num">B vs A</th><th class="num">TTFT p50 A</th><th class="num">TTFT p50 B</th><th class="num">ITL p50 A</th><th class="num">ITL p50 B</th></tr></thead><tbody>"#
    );
    let ms = |l: Option<&LevelSummary>, f: fn(&LevelSummary) -> f64| {
        l.map_or_else(
            || format!("{MISSING} ms"),
            |l| format!("{} ms", ms_num(f(l))),
        )
    };
    for c in &cs {
        let (la, lb) = (a.levels.get(c), b.levels.get(c));
        let ta = la.map(|l| l.output_tok_s.median);
        let tb = lb.map(|l| l.output_tok_s.median);
        let delta = match (ta, tb) {
            (Some(x), Some(y)) => delta_pct(y, x),
            _ => None,
        };
        let _ = write!(
            out,
            r#"<tr data-testid="compare-row" data-c="{c}"><td>c={c}</td><td class="num">{}</td><td class="num">{}</td><td class="num" data-testid="compare-delta">{}</td><td class="num">{}</td><td class="num">{}</td><td class="num">{}</td><td class="num">{}</td></tr>"#,
            fmt_tok_s(ta),
            fmt_tok_s(tb),
            delta.map_or_else(|| format!("{MISSING} %"), fmt_delta),
            ms(la, |l| l.ttft_p50_ms.median),
            ms(lb, |l| l.ttft_p50_ms.median),
            ms(la, |l| l.itl_p50_ms.median),
            ms(lb, |l| l.itl_p50_ms.median),
        );
    }
    if cs.is_empty() {
        out.push_str(
            r#"<tr class="proc-empty"><td colspan="8">neither set has results yet</td></tr>"#,
        );
    }
    out.push_str("</tbody></table>");
    out
}

/// The restart dialog's starting values for a flag set: each allowed flag at
/// the set's value, or at "(default)" when the set does not name it, so the
/// launch reproduces the set rather than keeping today's extras.
pub(crate) fn prefill(specs: &[FlagSpec], set: &Flags) -> BTreeMap<String, Option<String>> {
    specs
        .iter()
        .map(|s| (s.name.clone(), set.get(&s.name).cloned()))
        .collect()
}

/// The benchmark form as typed; an empty field keeps the server's default.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct BenchForm {
    pub(crate) concurrency: String,
    pub(crate) prompts: String,
    pub(crate) input_len: String,
    pub(crate) output_len: String,
    pub(crate) warmup: String,
    pub(crate) repeats: String,
    /// "", "completions" or "chat".
    pub(crate) api: String,
    pub(crate) prompt: String,
    pub(crate) expect: String,
}

/// `POST /api/bench`'s body: only the settings the form changes.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub(crate) struct BenchRequest {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) api: Option<BenchApi>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) concurrency: Option<Vec<u32>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) num_prompts: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) input_len: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) output_len: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) warmup: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) repeats: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) correctness: Option<Correctness>,
}

/// A whole number, or `None` for an empty field.
fn whole(what: &str, text: &str) -> Result<Option<u32>, String> {
    let t = text.trim();
    if t.is_empty() {
        return Ok(None);
    }
    t.parse::<u32>()
        .map(Some)
        .map_err(|_| format!("{what}: `{t}` is not a whole number"))
}

/// "1,4,16,64" (commas or spaces) as a list; `None` when empty.
pub(crate) fn parse_concurrency(text: &str) -> Result<Option<Vec<u32>>, String> {
    let mut out = Vec::new();
    for part in text.split([',', ' ', ';']).filter(|p| !p.trim().is_empty()) {
        if let Some(v) = whole("concurrency", part)? {
            out.push(v);
        }
    }
    Ok((!out.is_empty()).then_some(out))
}

/// The request the form asks for, or why it cannot be sent. Ranges are
/// checked with the shared rules, so the wording is the server's.
pub(crate) fn bench_request(f: &BenchForm) -> Result<BenchRequest, String> {
    let api = match f.api.as_str() {
        "completions" => Some(BenchApi::Completions),
        "chat" => Some(BenchApi::Chat),
        _ => None,
    };
    let (prompt, expect) = (f.prompt.trim(), f.expect.trim());
    let req = BenchRequest {
        api,
        concurrency: parse_concurrency(&f.concurrency)?,
        num_prompts: whole("prompts", &f.prompts)?,
        input_len: whole("input length", &f.input_len)?,
        output_len: whole("output length", &f.output_len)?,
        warmup: whole("warm-up", &f.warmup)?,
        repeats: whole("repeats", &f.repeats)?,
        correctness: (!prompt.is_empty() || !expect.is_empty()).then(|| Correctness {
            prompt: prompt.to_owned(),
            expect: expect.to_owned(),
        }),
    };
    let d = BenchSettings::default();
    let merged = BenchSettings {
        api: req.api.unwrap_or(d.api),
        concurrency: req.concurrency.clone().unwrap_or(d.concurrency),
        num_prompts: req.num_prompts.unwrap_or(d.num_prompts),
        input_len: req.input_len.unwrap_or(d.input_len),
        output_len: req.output_len.unwrap_or(d.output_len),
        warmup: req.warmup.unwrap_or(d.warmup),
        repeats: req.repeats.unwrap_or(d.repeats),
        correctness: req.correctness.clone(),
    };
    merged.validate()?;
    Ok(req)
}

/// "16" from a query value, if it is a concurrency.
pub(crate) fn parse_c(v: &str) -> Option<u32> {
    v.parse().ok().filter(|c| *c > 0)
}

/// The target from a query or storage value, if it is a positive number.
pub(crate) fn parse_target(v: &str) -> Option<f64> {
    v.trim()
        .parse::<f64>()
        .ok()
        .filter(|t| t.is_finite() && *t > 0.0)
}

/// "A,B" from a query value: at most two set ids.
pub(crate) fn parse_compare(v: &str) -> Vec<String> {
    v.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric()))
        .take(2)
        .map(str::to_owned)
        .collect()
}

/// The compare selection after `id`'s box is set to `on`: at most two, the
/// older pick dropped for a third.
pub(crate) fn toggle_compare(list: &[String], id: &str, on: bool) -> Vec<String> {
    let mut out: Vec<String> = list.iter().filter(|s| *s != id).cloned().collect();
    if on {
        out.push(id.to_owned());
        if out.len() > 2 {
            out.remove(0);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use shared::bench::Spread;

    use crate::flags::of_pairs as flags;

    fn lvl(c: u32, med: f64) -> LevelSummary {
        LevelSummary {
            concurrency: c,
            output_tok_s: Spread {
                min: med - 10.0,
                median: med,
                max: med + 5.0,
            },
            ttft_p50_ms: Spread {
                median: 41.25,
                ..Spread::default()
            },
            ttft_p99_ms: Spread {
                median: 88.0,
                ..Spread::default()
            },
            itl_p50_ms: Spread {
                median: 8.5,
                ..Spread::default()
            },
            itl_p99_ms: Spread {
                median: 120.4,
                ..Spread::default()
            },
            ..LevelSummary::default()
        }
    }

    fn set(
        id: &str,
        label: Option<&str>,
        f: &[(&str, &str)],
        levels: &[(u32, f64)],
    ) -> FlagSetResults {
        FlagSetResults {
            set: FlagSet {
                id: id.to_owned(),
                model: "m".to_owned(),
                flags: flags(f),
                label: label.map(str::to_owned),
                notes: None,
                first_seen_ms: 0,
                last_seen_ms: 0,
            },
            levels: levels.iter().map(|&(c, v)| (c, lvl(c, v))).collect(),
            runs: 1,
            wrong_answers: false,
        }
    }

    fn ledger() -> Vec<FlagSetResults> {
        vec![
            set(
                "aaa",
                Some("base"),
                &[("--tp", "6"), ("X", "0")],
                &[(1, 100.0), (4, 380.0), (16, 600.0)],
            ),
            set(
                "bbb",
                None,
                &[("--tp", "6"), ("X", "1")],
                &[(16, 660.0), (64, 900.0)],
            ),
            set("ccc", Some("<b>new</b>"), &[("--tp", "4"), ("X", "0")], &[]),
        ]
    }

    #[test]
    fn numbers_carry_units() {
        assert_eq!(fmt_delta(12.34), "+12.3 %");
        assert_eq!(fmt_delta(-4.0), "−4.0 %");
        assert_eq!(fmt_delta(0.01), "±0.0 %");
        assert_eq!(delta_pct(110.0, 100.0), Some(10.0));
        assert_eq!(delta_pct(1.0, 0.0), None);
    }

    #[test]
    fn live_and_progress_lines() {
        let p = Passive {
            output_tok_s: Some(612.0),
            running: Some(16),
            queued: Some(0),
            ttft_p50_ms: Some(48.46),
            itl_p50_ms: Some(21.25),
        };
        assert_eq!(
            live_text(true, &p),
            "612 tok/s · 16 running · 0 queued · p50 TTFT 48.5 ms · ITL 21.2 ms"
        );
        assert_eq!(live_text(false, &p), "this server exposes no metrics");
        assert_eq!(
            live_text(true, &Passive::default()),
            "— tok/s · — running · — queued · p50 TTFT — ms · ITL — ms"
        );
        let mut b = BenchProgress {
            run_id: 4,
            status: RunStatus::Running,
            concurrency: 16,
            repeat: 1,
            repeats: 3,
            done: 80,
            total: 208,
            output_tok_s: 598.2,
            requested_by: String::new(),
        };
        assert_eq!(
            progress_text(&b),
            "benchmark #4 · c=16 · repeat 2/3 · 80/208 requests · 598 tok/s"
        );
        b.repeats = 0;
        assert!(progress_text(&b).contains("repeat 2 ·"));
        b.total = 0;
        assert_eq!(progress_text(&b), "benchmark #4 · starting…");
        b.requested_by = "olga (10.0.0.7:51234)".to_owned();
        assert_eq!(
            progress_text(&b),
            "benchmark #4 · starting… · by olga (10.0.0.7:51234)"
        );
    }

    #[test]
    fn concurrency_and_baseline_defaults() {
        let l = ledger();
        let cs = concurrencies(&l);
        assert_eq!(cs, [1, 4, 16, 64]);
        assert_eq!(pick_c(&cs, None), Some(16));
        assert_eq!(pick_c(&cs, Some(4)), Some(4));
        assert_eq!(pick_c(&cs, Some(8)), Some(16));
        assert_eq!(pick_c(&[1, 4], None), Some(4));
        assert_eq!(pick_c(&[], None), None);
        assert_eq!(pick_baseline(&l, Some(16), None).as_deref(), Some("aaa"));
        assert_eq!(pick_baseline(&l, Some(64), None).as_deref(), Some("bbb"));
        assert_eq!(
            pick_baseline(&l, Some(16), Some("ccc")).as_deref(),
            Some("ccc")
        );
        assert_eq!(
            pick_baseline(&l, Some(16), Some("zzz")).as_deref(),
            Some("aaa")
        );
        assert_eq!(pick_baseline(&[], None, None), None);
    }

    #[test]
    fn sorting_and_filtering() {
        let l = ledger();
        assert_eq!(order(&l, Some(16), Sort::Throughput, ""), [1, 0, 2]);
        assert_eq!(order(&l, Some(16), Sort::FirstSeen, ""), [0, 1, 2]);
        assert_eq!(order(&l, Some(1), Sort::Throughput, ""), [0, 1, 2]);
        assert_eq!(order(&l, Some(16), Sort::FirstSeen, "x=1"), [1]);
        assert_eq!(order(&l, Some(16), Sort::FirstSeen, "BASE"), [0]);
        assert_eq!(order(&l, Some(16), Sort::FirstSeen, "--tp=6 x=0"), [0]);
        assert!(order(&l, Some(16), Sort::FirstSeen, "nothing").is_empty());
        assert_eq!(Sort::from_key(Sort::FirstSeen.key()), Sort::FirstSeen);
        assert_eq!(Sort::from_key("?"), Sort::Throughput);
    }

    #[test]
    fn flag_summaries_differ_from_the_baseline() {
        let l = ledger();
        assert_eq!(flag_summary(&l[0].set, Some(&l[0].set)), "--tp=6 · X=0");
        assert_eq!(flag_summary(&l[1].set, Some(&l[0].set)), "X: 0 → 1");
        assert_eq!(flag_summary(&l[2].set, None), "--tp=4 · X=0");
        let mut same = l[0].set.clone();
        same.id = "zzz".to_owned();
        assert_eq!(
            flag_summary(&same, Some(&l[0].set)),
            "same flags as the baseline"
        );
        same.model = "other".to_owned();
        assert_eq!(flag_summary(&same, Some(&l[0].set)), "model other");
        assert_eq!(all_flags(&Flags::new()), "no flags");
    }

    #[test]
    fn scale_takes_in_the_target() {
        assert_eq!(scale_max(600.0, 1000.0), 1200.0);
        assert_eq!(scale_max(1900.0, 1000.0), 2000.0);
        assert!(scale_max(0.0, 0.0) >= 1.0);
        assert_eq!(target_left(600.0, 1200.0), 50.0);
        assert_eq!(target_left(5000.0, 1200.0), 100.0);
        let axis = axis_markup(1200.0);
        assert!(axis.contains(">0 tok/s<") && axis.contains(">1200 tok/s<"));
    }

    #[test]
    fn rows_show_bar_delta_latency_and_badges() {
        let mut l = ledger();
        l[1].wrong_answers = true;
        l[1].set.notes = Some("n<1>".to_owned());
        let compare = vec!["bbb".to_owned()];
        let x = RowCtx {
            c: Some(16),
            baseline: Some(&l[0]),
            running: Some("bbb"),
            compare: &compare,
            scale: 1200.0,
            operate: true,
        };
        let base = row_markup(&l[0], &x);
        assert!(base.contains(r#"data-testid="flagset-bar" data-flagset="aaa" data-tok-s="600.0" data-running="false""#));
        assert!(base.contains(r#"data-pct="0.0">baseline<"#));
        assert!(base.contains("600 tok/s") && base.contains("590–605 tok/s"));
        assert!(base.contains("width:50.00%"));
        assert!(base.contains(">41.2 / 88.0 ms<") && base.contains(">8.50 / 120 ms<"));
        assert!(!base.contains("checked") && !base.contains("wrong-badge"));
        let other = row_markup(&l[1], &x);
        assert!(other.contains(r#"data-testid="delta" data-pct="10.0">+10.0 %<"#));
        assert!(other.contains(r#"data-testid="wrong-badge""#));
        assert!(other.contains(r#"data-testid="running-badge""#));
        assert!(other.contains(r#"data-flagset="bbb" checked"#));
        assert!(other.contains(">X: 0 → 1<"));
        assert!(other.contains("n&lt;1&gt;") && !other.contains("n<1>"));
        let none = row_markup(&l[2], &x);
        assert!(none.contains(r#"data-testid="flagset-nodata""#));
        assert!(none.contains("not measured yet"));
        assert!(none.contains("&lt;b&gt;new&lt;/b&gt;"));
        assert!(!none.contains("data-tok-s"));
        // A baseline without a result at this concurrency gives no delta.
        let x64 = RowCtx { c: Some(64), ..x };
        assert!(row_markup(&l[1], &x64).contains(r#"data-pct="">Δ — %<"#));
        assert!(row_markup(&l[0], &x64).contains("not measured at c=64"));
    }

    #[test]
    fn sweep_draws_sets_with_two_levels() {
        let l = ledger();
        let shown = [0, 1, 2];
        let svg = sweep_markup(&l, &shown, 1000.0);
        assert_eq!(svg.matches(r#"data-testid="sweep-line""#).count(), 2);
        assert!(svg.contains(">c=1<") && svg.contains(">c=64<"));
        assert!(svg.contains("target 1000 tok/s"));
        assert!(!svg.contains("NaN"));
        // The first concurrency sits at the left, the last at the right.
        assert!(svg.contains(&format!(r#"x1="{:.1}""#, S_LEFT + 12.0)));
        assert!(svg.contains(&format!(r#"x1="{:.1}""#, S_RIGHT - 12.0)));
        let legend = sweep_legend(&l, &shown);
        assert!(legend.contains(">base<") && legend.contains(">bbb<"));
        assert!(!legend.contains("new"), "a set without a sweep has no line");
        assert!(sweep_markup(&l, &[2], 1000.0).contains("no sweep yet"));
    }

    #[test]
    fn comparison_rows_per_concurrency() {
        let l = ledger();
        let t = compare_table(&l[0], &l[1]);
        assert_eq!(t.matches(r#"data-testid="compare-row""#).count(), 4);
        assert!(t.contains(r#"data-c="16"><td>c=16</td><td class="num">600 tok/s</td><td class="num">660 tok/s</td><td class="num" data-testid="compare-delta">+10.0 %</td>"#));
        assert!(t.contains(r#"data-c="64"><td>c=64</td><td class="num">— tok/s</td>"#));
        assert!(compare_table(&l[2], &l[2]).contains("neither set has results yet"));
        let wire = vec![
            shared::bench::FlagChange::Changed {
                name: "--tp".into(),
                from: "8".into(),
                to: "4".into(),
            },
            shared::bench::FlagChange::Added {
                name: "SGLANG_X".into(),
                value: "1".into(),
            },
        ];
        let lines: Vec<String> = from_wire(&wire).iter().map(ToString::to_string).collect();
        assert_eq!(lines, ["--tp: 8 → 4", "+ SGLANG_X=1"]);
    }

    #[test]
    fn prefill_takes_the_sets_values_for_allowed_flags_only() {
        use shared::restart::{FlagKind, FlagType};
        let spec = |n: &str| FlagSpec {
            name: n.to_owned(),
            kind: FlagKind::Arg,
            ty: FlagType::Bool,
            help: None,
        };
        let specs = [spec("--tp"), spec("X"), spec("Y")];
        let current = flags(&[("--tp", "6"), ("X", "0"), ("Y", "a"), ("--other", "1")]);
        let target = flags(&[("--tp", "4"), ("X", "0"), ("--other", "2")]);
        let p = prefill(&specs, &target);
        assert_eq!(p.len(), 3);
        assert_eq!(p["--tp"].as_deref(), Some("4"));
        assert_eq!(p["X"].as_deref(), Some("0"));
        assert_eq!(p["Y"], None);
        // Only the changes are sent: the new --tp, and Y back to its default.
        let req = flags::request_flags(&specs, &current, &Flags::new(), &p);
        assert_eq!(req.len(), 2);
        assert_eq!(req["--tp"].as_deref(), Some("4"));
        assert_eq!(req["Y"], None);
    }

    #[test]
    fn bench_form_to_request() {
        let empty = bench_request(&BenchForm::default()).expect("defaults");
        assert_eq!(serde_json::to_string(&empty).expect("json"), "{}");
        let f = BenchForm {
            concurrency: " 1, 4,16 64 ".to_owned(),
            prompts: "32".to_owned(),
            repeats: "3".to_owned(),
            api: "chat".to_owned(),
            prompt: "2+2?".to_owned(),
            expect: "4".to_owned(),
            ..BenchForm::default()
        };
        let r = bench_request(&f).expect("valid");
        assert_eq!(
            serde_json::to_string(&r).expect("json"),
            r#"{"api":"chat","concurrency":[1,4,16,64],"num_prompts":32,"repeats":3,"correctness":{"prompt":"2+2?","expect":"4"}}"#
        );
        let bad = |f: BenchForm| bench_request(&f).expect_err("invalid");
        assert_eq!(
            bad(BenchForm {
                repeats: "2".to_owned(),
                ..BenchForm::default()
            }),
            "repeats must be from 3 to 20, got 2"
        );
        assert!(
            bad(BenchForm {
                concurrency: "1,x".to_owned(),
                ..BenchForm::default()
            })
            .contains("`x` is not a whole number")
        );
        assert!(
            bad(BenchForm {
                concurrency: "0".to_owned(),
                ..BenchForm::default()
            })
            .contains("out of range")
        );
        assert!(
            bad(BenchForm {
                expect: "4".to_owned(),
                ..BenchForm::default()
            })
            .contains("correctness")
        );
    }

    #[test]
    fn query_values_and_compare_picks() {
        assert_eq!(parse_c("16"), Some(16));
        assert_eq!(parse_c("0"), None);
        assert_eq!(parse_target("1200"), Some(1200.0));
        assert_eq!(parse_target("-1"), None);
        assert_eq!(parse_compare("aaa,bbb,ccc"), ["aaa", "bbb"]);
        assert_eq!(parse_compare("a<b,c"), ["c"]);
        let one = toggle_compare(&[], "a", true);
        let two = toggle_compare(&one, "b", true);
        assert_eq!(two, ["a", "b"]);
        assert_eq!(toggle_compare(&two, "c", true), ["b", "c"]);
        assert_eq!(toggle_compare(&two, "a", false), ["b"]);
    }

    #[test]
    fn names_and_runs() {
        let l = ledger();
        assert_eq!(set_name(&l[0].set), "base");
        assert_eq!(set_name(&l[1].set), "bbb");
        assert_eq!(running_set_text(Some("aaa"), &l), "flag set base · aaa");
        assert_eq!(running_set_text(Some("zzz"), &l), "flag set zzz");
        assert_eq!(running_set_text(None, &l), "flag set —");
    }
}
