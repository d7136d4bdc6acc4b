//! The throughput list: one row per flag set (compare box, name, badges and
//! flags, the bar with its min–max whisker, the median with Δ against the
//! baseline, the latency columns, the edit button), the tick labels over the
//! bar column. The controls carry what a click asks for in `data-act`
//! (`compare`, `edit`) and the set in `data-flagset`.

use std::fmt::Write as _;

use shared::bench::{FlagSet, FlagSetResults, LevelSummary};
use shared::flags::Flags;
use shared::html::axis::{nice_step, tick_label, ticks};
use shared::html::{SCALE_TICKS, escape, fmt_delta};
use shared::units::{MISSING, fmt_ms_pair, fmt_tok_s, rate_num, tok_num};

use super::{delta_pct, level, pct, set_name};

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
            let changes = shared::flags::diff_by_name(&b.flags, &set.flags);
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

/// The tick labels over the bar column.
pub(crate) fn axis_markup(scale: f64) -> String {
    let step = nice_step(scale, SCALE_TICKS);
    let mut out = String::new();
    for t in ticks(scale, SCALE_TICKS) {
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

/// One flag set's row. Its `data-testid` is `flagset-bar` when the set has a
/// result at the shown concurrency, `flagset-nodata` otherwise.
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
        r#"<label class="fs-check" title="compare (pick two)"><input type="checkbox" data-act="compare" data-testid="compare-check" data-flagset="{id}"{checked}></label>"#
    );
    name_cell(&mut out, r, x, running);
    bar_cell(&mut out, r, lv, x);
    value_cell(&mut out, r, lv, x);
    latency_cells(&mut out, lv);
    if x.operate {
        let _ = write!(
            out,
            r#"<div class="fs-act"><button type="button" class="btn btn-small" data-act="edit" data-testid="label-edit" data-flagset="{id}" title="edit label and notes">edit</button></div></div>"#
        );
    } else {
        out.push_str(r#"<div class="fs-act"></div></div>"#);
    }
    out
}

/// Name, badges, flags.
fn name_cell(out: &mut String, r: &FlagSetResults, x: &RowCtx<'_>, running: bool) {
    let set = &r.set;
    let name = escape(set_name(set));
    let mut tip = format!("{} · {}", set.id, set.model);
    if let Some(n) = set.notes.as_deref().filter(|n| !n.is_empty()) {
        let _ = write!(tip, "\n\n{n}");
    }
    let summary = flag_summary(set, x.baseline.map(|b| &b.set));
    let _ = write!(
        out,
        r#"<div class="fs-name"><div class="fs-title"><span class="fs-label" data-testid="flagset-label" title="{tip}">{name}</span>"#,
        tip = escape(&tip),
    );
    if set.label.is_some() {
        let _ = write!(out, r#"<span class="fs-id">{}</span>"#, escape(&set.id));
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
    // A result the load generator could not keep up with measures drainwatch.
    if let Some(why) = level(r, x.c).and_then(|l| l.client_saturated.as_deref()) {
        let _ = write!(
            out,
            r#"<span class="fs-badge fs-wrong" data-testid="saturated-badge" title="{}; these numbers measure drainwatch, not the server">client saturated</span>"#,
            escape(why)
        );
    }
    // The server counted prompts of another length than asked: another workload.
    if let Some(why) = level(r, x.c).and_then(|l| l.prompt_len_off.as_deref()) {
        let _ = write!(
            out,
            r#"<span class="fs-badge fs-wrong" data-testid="prompt-len-badge" title="{}; this result measured another workload than asked">prompt length off</span>"#,
            escape(why)
        );
    }
    condition_badges(out, r, x);
    rate_badge(out, r);
    let _ = write!(
        out,
        r#"</div><div class="fs-flags" data-testid="flagset-flags" title="{}">{}</div></div>"#,
        escape(&all_flags(&set.flags)),
        escape(&summary)
    );
}

/// Measured under other conditions than the baseline: a lower power cap,
/// or hot enough to slow itself down, or clocks held down while it ran.
fn condition_badges(out: &mut String, r: &FlagSetResults, x: &RowCtx<'_>) {
    let cond = r.conditions.as_ref();
    let base_cap = x
        .baseline
        .and_then(|b| b.conditions.as_ref())
        .and_then(|c| c.power_limit_w);
    if let (Some(cap), Some(base)) = (cond.and_then(|c| c.power_limit_w), base_cap)
        && cap < base - 0.5
    {
        let _ = write!(
            out,
            r#"<span class="fs-badge fs-wrong" data-testid="power-cap-badge" title="its newest run ran with a GPU capped at {cap:.0} W; the baseline's at {base:.0} W">cap {cap:.0} W</span>"#
        );
    }
    if let Some(t) = cond
        .and_then(|c| c.temp_max_c)
        .filter(|t| *t >= shared::bench::RunConditions::HOT_C)
    {
        let _ = write!(
            out,
            r#"<span class="fs-badge fs-wrong" data-testid="hot-badge" title="a GPU reached {t:.0} °C in its newest run: it may have slowed itself down">hot {t:.0} °C</span>"#
        );
    }
    // Clocks held down for power or heat while it ran.
    if let Some(c) = cond.filter(|c| !c.throttled.is_empty()) {
        let _ = write!(
            out,
            r#"<span class="fs-badge fs-wrong" data-testid="throttled-badge" title="its newest run was throttled: {}">throttled</span>"#,
            escape(&c.throttled.join("; "))
        );
    }
}

/// What a rate sweep found: the highest rate whose requests met the SLOs.
fn rate_badge(out: &mut String, r: &FlagSetResults) {
    if r.rate_levels.is_empty() {
        return;
    }
    let swept: Vec<String> = r
        .rate_levels
        .iter()
        .filter_map(|l| l.request_rate)
        .map(rate_num)
        .collect();
    let tip = format!(
        "the newest request-rate sweep ({} req/s): the highest rate at which enough requests met every SLO",
        swept.join(", ")
    );
    match r.best_rate {
        Some(best) => {
            let _ = write!(
                out,
                r#"<span class="fs-badge fs-slo" data-testid="best-rate" data-rate="{best}" title="{tip}">SLOs met to {} req/s</span>"#,
                rate_num(best)
            );
        }
        None => {
            let _ = write!(
                out,
                r#"<span class="fs-badge fs-wrong" data-testid="best-rate" data-rate="" title="{tip}">SLOs missed at every rate</span>"#
            );
        }
    }
}

/// The bar with its whisker, or why there is none.
fn bar_cell(out: &mut String, r: &FlagSetResults, lv: Option<&LevelSummary>, x: &RowCtx<'_>) {
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
            _ if !r.rate_levels.is_empty() => "measured by request rate only".to_owned(),
            // A campaign tried it: say how that ended.
            _ => match &r.campaign {
                Some(l) if l.outcome.starts_with("failed") => format!(
                    "{} (campaign #{} step {})",
                    escape(&l.outcome),
                    l.campaign_id,
                    l.step + 1
                ),
                _ => "not measured yet".to_owned(),
            },
        };
        let _ = write!(out, r#"<span class="fs-none">{what}</span>"#);
    }
    out.push_str("</div>");
}

/// The delta against the baseline as text and as `data-pct` ("" when there
/// is none).
fn delta(r: &FlagSetResults, median: f64, x: &RowCtx<'_>) -> (String, String) {
    match x.baseline {
        Some(b) if b.set.id == r.set.id => ("baseline".to_owned(), "0.0".to_owned()),
        Some(b) => match level(b, x.c).and_then(|bl| delta_pct(median, bl.output_tok_s.median)) {
            Some(p) => (fmt_delta(p), format!("{p:.1}")),
            None => (format!("Δ {MISSING} %"), String::new()),
        },
        None => (format!("Δ {MISSING} %"), String::new()),
    }
}

/// Median and delta.
fn value_cell(out: &mut String, r: &FlagSetResults, lv: Option<&LevelSummary>, x: &RowCtx<'_>) {
    out.push_str(r#"<div class="fs-value">"#);
    if let Some(l) = lv {
        let s = l.output_tok_s;
        let (delta, pct_attr) = delta(r, s.median, x);
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
        // Goodput beside throughput, where the run had SLOs.
        if let Some(g) = l.goodput_req_s {
            let _ = write!(
                out,
                r#"<span class="fs-good" data-testid="goodput" title="requests per second that met every SLO (median across repeats){}">{:.2} good req/s</span>"#,
                match l.meets_slo {
                    Some(false) => "; too few met them",
                    _ => "",
                },
                g.median
            );
        }
    }
    out.push_str("</div>");
}

/// TTFT and ITL, p50 / p99.
fn latency_cells(out: &mut String, lv: Option<&LevelSummary>) {
    match lv {
        Some(l) => {
            let _ = write!(
                out,
                r#"<div class="fs-lat" data-testid="ttft" title="time to first token, p50 / p99 (medians across repeats)">{}</div>"#,
                fmt_ms_pair(l.ttft_p50_ms.median, l.ttft_p99_ms.median),
            );
            // Between events is not between tokens: say so where it is shown.
            let (per, mark) = if l.token_source.per_token() {
                ("token", "")
            } else {
                ("event", r#"<span class="fs-per">per event</span>"#)
            };
            let _ = write!(
                out,
                r#"<div class="fs-lat" data-testid="itl" data-per="{per}" title="inter-token latency, p50 / p99 (medians across repeats); token counts: {}">{}{mark}</div>"#,
                l.token_source.label(),
                fmt_ms_pair(l.itl_p50_ms.median, l.itl_p99_ms.median),
            );
        }
        None => out.push_str(r#"<div class="fs-lat"></div><div class="fs-lat"></div>"#),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::view::test_data::ledger;
    use shared::bench::Spread;
    use shared::html::scale_max;

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
    fn goodput_and_the_best_rate_show_beside_throughput() {
        let mut l = ledger();
        let x = RowCtx {
            c: Some(16),
            baseline: None,
            running: None,
            compare: &[],
            scale: 1200.0,
            operate: false,
        };
        assert!(!row_markup(&l[0], &x).contains("goodput"));
        let lv = l[0].levels.get_mut(&16).expect("c=16");
        lv.goodput_req_s = Some(Spread {
            min: 3.0,
            median: 3.25,
            max: 3.5,
        });
        lv.meets_slo = Some(false);
        let sweep = |rate: f64| LevelSummary {
            request_rate: Some(rate),
            ..LevelSummary::default()
        };
        l[0].rate_levels = vec![sweep(2.0), sweep(4.5), sweep(8.0)];
        l[0].best_rate = Some(4.5);
        let row = row_markup(&l[0], &x);
        assert!(row.contains(r#"data-testid="goodput""#), "{row}");
        assert!(row.contains(">3.25 good req/s<") && row.contains("too few met them"));
        assert!(row.contains(r#"data-testid="best-rate" data-rate="4.5""#));
        assert!(row.contains(">SLOs met to 4.5 req/s<") && row.contains("(2, 4.5, 8 req/s)"));
        l[0].best_rate = None;
        assert!(row_markup(&l[0], &x).contains(">SLOs missed at every rate<"));
        assert!(!row_markup(&l[0], &x).contains("saturated-badge"));
        if let Some(lv) = l[0].levels.get_mut(&16) {
            lv.client_saturated = Some("the load generator was saturated: its <loop>".into());
        }
        let row = row_markup(&l[0], &x);
        assert!(row.contains(r#"data-testid="saturated-badge" title="the load generator was saturated: its &lt;loop&gt;; these"#), "{row}");
        assert!(!row.contains("prompt-len-badge"), "{row}");
        if let Some(lv) = l[0].levels.get_mut(&16) {
            lv.prompt_len_off = shared::bench::prompt_len_warning(64, 330.0);
        }
        let row = row_markup(&l[0], &x);
        assert!(row.contains(r#"data-testid="prompt-len-badge" title="prompts were 330 tokens by the server&#39;s count, not the 64 asked (+416 %); this result"#), "{row}");
        // A set measured only by a sweep says so where the bar would be.
        l[0].levels.clear();
        assert!(row_markup(&l[0], &x).contains("measured by request rate only"));
    }

    #[test]
    fn a_lower_power_cap_or_a_hot_gpu_is_marked() {
        use shared::bench::RunConditions;
        let mut l = ledger();
        let cond = |cap: f64, temp: f64| {
            Some(RunConditions {
                power_limit_w: Some(cap),
                temp_max_c: Some(temp),
                throttled: Vec::new(),
                server_version: None,
                workload: Default::default(),
            })
        };
        l[0].conditions = cond(600.0, 70.0);
        l[1].conditions = cond(450.0, 88.0);
        let base = l[0].clone();
        let x = RowCtx {
            c: Some(16),
            baseline: Some(&base),
            running: None,
            compare: &[],
            scale: 1200.0,
            operate: false,
        };
        let calm = row_markup(&l[0], &x);
        assert!(!calm.contains("power-cap-badge") && !calm.contains("hot-badge"));
        let capped = row_markup(&l[1], &x);
        assert!(capped.contains(">cap 450 W<"), "{capped}");
        assert!(capped.contains("the baseline's at 600 W"), "{capped}");
        assert!(capped.contains(">hot 88 °C<"), "{capped}");
        assert!(!capped.contains("throttled-badge"), "{capped}");
        // Throttled while it ran: a warning naming the GPU and the reason.
        let mut t = l[1].clone();
        if let Some(c) = t.conditions.as_mut() {
            c.throttled = vec!["GPU 7: hardware thermal slowdown in 12 of 40 samples".into()];
        }
        let throttled = row_markup(&t, &x);
        assert!(
            throttled.contains(r#"title="its newest run was throttled: GPU 7: hardware thermal slowdown in 12 of 40 samples">throttled</span>"#),
            "{throttled}"
        );
    }

    #[test]
    fn itl_between_events_is_marked_as_such() {
        let mut l = ledger();
        let x = RowCtx {
            c: Some(16),
            baseline: None,
            running: None,
            compare: &[],
            scale: 1200.0,
            operate: false,
        };
        let per_token = row_markup(&l[0], &x);
        assert!(per_token.contains(r#"data-testid="itl" data-per="token""#));
        assert!(per_token.contains("token counts: server's per-chunk count"));
        assert!(!per_token.contains("per event"));
        for lv in l[0].levels.values_mut() {
            lv.token_source = shared::bench::TokenSource::Event;
        }
        let per_event = row_markup(&l[0], &x);
        assert!(per_event.contains(r#"data-testid="itl" data-per="event""#));
        assert!(per_event.contains(r#">8.50 / 120 ms<span class="fs-per">per event</span>"#));
    }

    #[test]
    fn controls_say_what_they_do() {
        let l = ledger();
        let x = RowCtx {
            c: Some(16),
            baseline: None,
            running: None,
            compare: &[],
            scale: 1200.0,
            operate: true,
        };
        let row = row_markup(&l[0], &x);
        assert!(
            row.contains(r#"data-act="compare" data-testid="compare-check" data-flagset="aaa""#)
        );
        assert!(row.contains(r#"data-act="edit" data-testid="label-edit" data-flagset="aaa""#));
        assert!(
            !row_markup(
                &l[0],
                &RowCtx {
                    operate: false,
                    ..x
                }
            )
            .contains("data-act=\"edit\"")
        );
    }
}
