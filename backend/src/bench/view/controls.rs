//! The throughput view's fixed parts as HTML text: the list's head row (with
//! the tick labels) and the choices' options.

use std::fmt::Write as _;

use shared::bench::FlagSetResults;
use shared::html::escape;

use super::rows::axis_markup;
use super::set_name;

/// The list's head row: the columns' names and the tick labels at `scale`.
pub(crate) fn head_markup(scale: f64) -> String {
    format!(
        concat!(
            r#"<span></span><span>flag set (flags vs the baseline)</span>"#,
            r#"<span class="fs-axis">{}</span>"#,
            r#"<span class="num">median · Δ vs baseline</span>"#,
            r#"<span class="num">TTFT p50 / p99</span><span class="num">ITL p50 / p99</span><span></span>"#,
        ),
        axis_markup(scale)
    )
}

/// One `<option>` per (value, label), `cur`'s selected.
fn options<'a>(
    out: &mut String,
    items: impl Iterator<Item = (&'a str, String)>,
    cur: Option<&str>,
) {
    for (value, label) in items {
        let sel = if cur == Some(value) { " selected" } else { "" };
        let _ = write!(
            out,
            r#"<option value="{}"{sel}>{}</option>"#,
            escape(value),
            escape(&label)
        );
    }
}

/// The concurrency choice's options: `c=<v>` for each measured concurrency.
pub(crate) fn concurrency_options(cs: &[u32], cur: Option<u32>) -> String {
    let values: Vec<String> = cs.iter().map(u32::to_string).collect();
    let cur = cur.map(|c| c.to_string());
    let mut out = String::new();
    options(
        &mut out,
        values.iter().map(|v| (v.as_str(), format!("c={v}"))),
        cur.as_deref(),
    );
    out
}

/// The baseline choice's options: every set by its name.
pub(crate) fn baseline_options(ledger: &[FlagSetResults], cur: Option<&str>) -> String {
    let mut out = String::new();
    options(
        &mut out,
        ledger
            .iter()
            .map(|r| (r.set.id.as_str(), set_name(&r.set).to_owned())),
        cur,
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::view::test_data::ledger;

    #[test]
    fn options_mark_the_current_choice() {
        assert_eq!(
            concurrency_options(&[1, 16], Some(16)),
            r#"<option value="1">c=1</option><option value="16" selected>c=16</option>"#
        );
        assert_eq!(concurrency_options(&[], None), "");
        let html = baseline_options(&ledger(), Some("bbb"));
        assert_eq!(
            html,
            concat!(
                r#"<option value="aaa">base</option><option value="bbb" selected>bbb</option>"#,
                r#"<option value="ccc">&lt;b&gt;new&lt;/b&gt;</option>"#
            )
        );
    }

    #[test]
    fn head_row_has_every_column_and_the_ticks() {
        let html = head_markup(1000.0);
        assert_eq!(
            html.matches("<span").count() - html.matches(r#"class="fs-tick"#).count(),
            7
        );
        assert!(html.contains(&axis_markup(1000.0)));
        assert!(html.starts_with("<span></span><span>flag set"));
    }
}
