//! Two flag sets side by side: their results per concurrency.

use std::fmt::Write as _;

use shared::bench::{FlagSetResults, LevelSummary};
use shared::html::{escape, fmt_delta};
use shared::units::{MISSING, fmt_tok_s, ms_num};

use super::{delta_pct, set_name};

/// The results of `a` and `b` side by side, one row per concurrency either
/// has: tok/s of each and B's Δ against A, TTFT and ITL p50 of each.
pub(crate) fn compare_table(a: &FlagSetResults, b: &FlagSetResults) -> String {
    let mut cs: Vec<u32> = a.levels.keys().chain(b.levels.keys()).copied().collect();
    cs.sort_unstable();
    cs.dedup();
    let (na, nb) = (escape(set_name(&a.set)), escape(set_name(&b.set)));
    // Results of different workloads do not compare: say so above them.
    let differs = a
        .conditions
        .as_ref()
        .zip(b.conditions.as_ref())
        .and_then(|(x, y)| x.workload.differs(&y.workload));
    let mut out = differs.map_or_else(String::new, |why| {
        format!(
            r#"<p class="cmp-note" data-testid="compare-workload">Not comparable: {}.</p>"#,
            escape(&why)
        )
    });
    out += &format!(
        r#"<table class="proc-table cmp-table" data-testid="compare-results"><thead><tr><th>concurrency</th><th class="num" title="{na}">A tok/s</th><th class="num" title="{nb}">B tok/s</th><th class="num">B vs A</th><th class="num">TTFT p50 A</th><th class="num">TTFT p50 B</th><th class="num">ITL p50 A</th><th class="num">ITL p50 B</th></tr></thead><tbody>"#
    );
    let ms = |l: Option<&LevelSummary>, f: fn(&LevelSummary) -> f64| {
        l.map_or_else(
            || format!("{MISSING} ms"),
            |l| format!("{} ms", ms_num(f(l))),
        )
    };
    // ITL between events, where tokens were not counted, says so.
    let itl = |l: Option<&LevelSummary>| match l {
        Some(l) if !l.token_source.per_token() => {
            format!("{} per event", ms(Some(l), |l| l.itl_p50_ms.median))
        }
        _ => ms(l, |l| l.itl_p50_ms.median),
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
            itl(la),
            itl(lb),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::view::test_data::ledger;

    #[test]
    fn comparison_rows_per_concurrency() {
        let l = ledger();
        let t = compare_table(&l[0], &l[1]);
        assert_eq!(t.matches(r#"data-testid="compare-row""#).count(), 4);
        assert!(t.contains(r#"data-c="16"><td>c=16</td><td class="num">600 tok/s</td><td class="num">660 tok/s</td><td class="num" data-testid="compare-delta">+10.0 %</td>"#));
        assert!(t.contains(r#"data-c="64"><td>c=64</td><td class="num">— tok/s</td>"#));
        assert!(compare_table(&l[2], &l[2]).contains("neither set has results yet"));
        assert!(!t.contains("per event"));
        let mut b = l[1].clone();
        for lv in b.levels.values_mut() {
            lv.token_source = shared::bench::TokenSource::Event;
        }
        let t = compare_table(&l[0], &b);
        assert!(
            t.contains(r#"<td class="num">8.50 ms</td><td class="num">8.50 ms per event</td>"#),
            "{t}"
        );
        assert!(!t.contains("compare-workload"));
        // Different workloads: said above the numbers.
        let cond = |kind: &str| {
            Some(shared::bench::RunConditions {
                workload: shared::bench::Workload {
                    kind: kind.into(),
                    ..Default::default()
                },
                ..Default::default()
            })
        };
        let (mut a, mut b) = (l[0].clone(), l[1].clone());
        a.conditions = cond("random");
        b.conditions = cond("dataset");
        let t = compare_table(&a, &b);
        assert!(t.starts_with(r#"<p class="cmp-note" data-testid="compare-workload">Not comparable: one ran random prompts, the other dataset prompts.</p>"#), "{t}");
        b.conditions = cond("random");
        assert!(!compare_table(&a, &b).contains("Not comparable"));
        let wire = [
            shared::flags::FlagChange::Changed {
                name: "--tp".into(),
                from: "8".into(),
                to: "4".into(),
            },
            shared::flags::FlagChange::Added {
                name: "SGLANG_X".into(),
                value: "1".into(),
            },
        ];
        let lines: Vec<String> = wire.iter().map(ToString::to_string).collect();
        assert_eq!(lines, ["--tp: 8 → 4", "+ SGLANG_X=1"]);
    }
}
