//! The throughput ledger as the page shows it, drawn here and served by
//! `GET /api/flagsets/view` ([`LedgerView`]): one concern per module, each a
//! pure function of the ledger and what the viewer picked — the concurrency,
//! the baseline, the order and the filter ([`selection`]), the rows
//! ([`rows`]), the list's head and the choosers' options ([`controls`]), the
//! sweep chart ([`sweep`]) and two sets compared ([`compare`]). What every
//! part shares lives here: a set's name, its summary at a concurrency, and
//! deltas. The page pays for none of it: it sets the blocks' HTML and keeps
//! its picks in its query.
//!
//! Everything that comes from outside (labels, notes, flag names and values,
//! models) goes through [`escape`].

mod compare;
mod controls;
mod rows;
mod selection;
mod sweep;
#[cfg(test)]
mod test_data;

use shared::bench::{
    Compared, FlagSet, FlagSetResults, LedgerRow, LedgerSort, LedgerView, LevelSummary,
};
use shared::campaign::ChosenSet;
use shared::flags::FlagChange;
use shared::html::{diff_lines, escape, scale_max};
use shared::units::MISSING;

/// The longest filter the view takes (characters).
pub const MAX_FILTER: usize = 200;

/// What the viewer picked.
#[derive(Debug, Clone, Default)]
pub struct LedgerAsk {
    /// The concurrency to show (else 16 when measured, else the largest).
    pub c: Option<u32>,
    /// The baseline (else the first set measured at the concurrency shown).
    pub baseline: Option<String>,
    pub sort: LedgerSort,
    /// Words every shown set has in its label, id, model or flags.
    pub filter: String,
    /// The target, in tok/s.
    pub target: f64,
    /// The sets ticked for comparison (two compare).
    pub compare: Vec<String>,
    /// The caller may edit labels.
    pub may: bool,
    /// The set the server runs now.
    pub running: Option<String>,
}

/// The ledger drawn for `ask`.
pub fn view(ledger: &[FlagSetResults], ask: &LedgerAsk) -> LedgerView {
    let cs = selection::concurrencies(ledger);
    let c = selection::pick_c(&cs, ask.c);
    let baseline = selection::pick_baseline(ledger, c, ask.baseline.as_deref());
    let shown = selection::order(ledger, c, ask.sort, &ask.filter);
    let scale = scale_max(selection::data_max(ledger, &shown, c), ask.target);
    let find = |id: &str| ledger.iter().find(|r| r.set.id == id);
    let ctx = rows::RowCtx {
        c,
        baseline: baseline.as_deref().and_then(find),
        running: ask.running.as_deref(),
        compare: &ask.compare,
        scale,
        operate: ask.may,
    };
    let compared = match ask.compare.as_slice() {
        [a, b] => find(a).zip(find(b)).map(|(a, b)| Compared {
            a: chosen(&a.set),
            b: chosen(&b.set),
            diff: diff_lines(&set_changes(&a.set, &b.set), "no difference"),
            table: compare::compare_table(a, b),
        }),
        _ => None,
    };
    LedgerView {
        total: ledger.len() as u32,
        count: selection::count_text(shown.len(), ledger.len()),
        c,
        scale,
        c_options: controls::concurrency_options(&cs, c),
        baseline_options: controls::baseline_options(ledger, baseline.as_deref()),
        head: controls::head_markup(scale),
        rows: shown
            .iter()
            .map(|&i| LedgerRow {
                id: ledger[i].set.id.clone(),
                html: rows::row_markup(&ledger[i], &ctx),
                label: ledger[i].set.label.clone(),
                notes: ledger[i].set.notes.clone(),
            })
            .collect(),
        sweep: sweep::sweep_markup(ledger, &shown, ask.target),
        legend: sweep::sweep_legend(ledger, &shown),
        compared,
        running_set: running_set_markup(ask.running.as_deref(), ledger),
        baseline,
    }
}

/// A set as "restart with" fills the restart dialog.
fn chosen(set: &FlagSet) -> ChosenSet {
    ChosenSet {
        flagset: set.id.clone(),
        name: set_name(set).to_owned(),
        flags: set.flags.clone(),
    }
}

/// What changes from set `a` to set `b`: the model first when it differs,
/// then the flags.
pub fn set_changes(a: &FlagSet, b: &FlagSet) -> Vec<FlagChange> {
    let mut changes = shared::flags::diff(&a.flags, &b.flags);
    if a.model != b.model {
        changes.insert(
            0,
            FlagChange::Changed {
                name: "model".to_owned(),
                from: a.model.clone(),
                to: b.model.clone(),
            },
        );
    }
    changes
}

/// A set's name: its label, else its id.
fn set_name(set: &FlagSet) -> &str {
    set.label
        .as_deref()
        .filter(|l| !l.trim().is_empty())
        .unwrap_or(&set.id)
}

/// The summary at `c`.
fn level(r: &FlagSetResults, c: Option<u32>) -> Option<&LevelSummary> {
    c.and_then(|c| r.levels.get(&c))
}

/// The relative change from `base` to `v`, in percent; `None` without a
/// usable base.
fn delta_pct(v: f64, base: f64) -> Option<f64> {
    (base.is_finite() && v.is_finite() && base > 0.0).then(|| (v - base) / base * 100.0)
}

/// `v` as a percentage of `scale`, clamped, for `left`/`width`.
fn pct(v: f64, scale: f64) -> f64 {
    if scale > 0.0 && v.is_finite() {
        (v / scale * 100.0).clamp(0.0, 100.0)
    } else {
        0.0
    }
}

/// The running set for the server panel: "baseline · 3f2a9c01b2de", or the id
/// alone while it has no label.
fn running_set_text(id: Option<&str>, ledger: &[FlagSetResults]) -> String {
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

/// The running set's span for the server panel, as HTML text: its id in
/// `data-flagset`, [`running_set_text`] as its text and tooltip.
fn running_set_markup(id: Option<&str>, ledger: &[FlagSetResults]) -> String {
    let text = escape(&running_set_text(id, ledger));
    let data = id
        .map(|id| format!(r#" data-flagset="{}""#, escape(id)))
        .unwrap_or_default();
    format!(
        r#"<span class="srv-set" data-testid="server-flagset"{data} title="{text}">{text}</span>"#
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::view::test_data::ledger;

    #[test]
    fn numbers_carry_units() {
        assert_eq!(delta_pct(110.0, 100.0), Some(10.0));
        assert_eq!(delta_pct(1.0, 0.0), None);
    }

    #[test]
    fn names_fall_back_to_the_id() {
        let l = ledger();
        assert_eq!(set_name(&l[0].set), "base");
        assert_eq!(set_name(&l[1].set), "bbb");
    }

    #[test]
    fn the_running_set_by_name() {
        let l = ledger();
        assert_eq!(running_set_text(Some("zzz"), &l), "flag set zzz");
        assert_eq!(running_set_text(None, &l), "flag set —");
        assert_eq!(
            running_set_markup(Some("ccc"), &l),
            r#"<span class="srv-set" data-testid="server-flagset" data-flagset="ccc" title="flag set &lt;b&gt;new&lt;/b&gt; · ccc">flag set &lt;b&gt;new&lt;/b&gt; · ccc</span>"#
        );
        assert!(!running_set_markup(None, &l).contains("data-flagset"));
    }

    #[test]
    fn the_view_draws_what_was_picked() {
        let l = ledger();
        let ask = LedgerAsk {
            c: Some(16),
            target: 1000.0,
            compare: vec!["aaa".into(), "bbb".into()],
            may: true,
            running: Some("bbb".into()),
            ..LedgerAsk::default()
        };
        let v = view(&l, &ask);
        assert_eq!(
            (v.total, v.c, v.baseline.as_deref()),
            (3, Some(16), Some("aaa"))
        );
        assert_eq!(v.count, "3 flag sets");
        // By throughput: the faster set first; the one without results last.
        let ids: Vec<&str> = v.rows.iter().map(|r| r.id.as_str()).collect();
        assert_eq!(ids, ["bbb", "aaa", "ccc"]);
        assert!(v.rows[0].html.contains(r#"data-running="true""#));
        assert!(v.rows[0].html.contains(r#"data-act="edit""#));
        let cmp = v.compared.expect("two compared");
        assert_eq!(
            (cmp.a.flagset.as_str(), cmp.b.flagset.as_str()),
            ("aaa", "bbb")
        );
        assert!(
            cmp.diff.contains(r#"data-testid="flag-change""#),
            "{}",
            cmp.diff
        );
        assert!(cmp.table.contains(r#"data-testid="compare-row""#));
        assert!(v.running_set.contains(r#"data-flagset="bbb""#));
        // A filter, a viewer, one set ticked.
        let v = view(
            &l,
            &LedgerAsk {
                filter: "BASE".into(),
                compare: vec!["aaa".into()],
                ..ask
            },
        );
        assert_eq!(v.count, "1 of 3 flag sets");
        assert!(v.compared.is_none());
        let viewer = view(&l, &LedgerAsk::default());
        assert!(
            viewer
                .rows
                .iter()
                .all(|r| !r.html.contains("data-act=\"edit\""))
        );
    }
}
