//! What the viewer picks out of the ledger: the concurrency shown, the
//! baseline, the order and filter of the sets, and the two sets compared.

use std::fmt::Write as _;

use shared::bench::FlagSetResults;

use crate::ledger::level;

/// The concurrency shown first when the data has it.
pub(crate) const PREFERRED_C: u32 = 16;

/// Every concurrency some set has a result at, ascending.
pub(crate) fn concurrencies(ledger: &[FlagSetResults]) -> Vec<u32> {
    let mut out: Vec<u32> = ledger
        .iter()
        .flat_map(|r| r.levels.keys().copied())
        .collect();
    crate::sort::sort_dedup(&mut out);
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

/// `s` in lower case. In the page, the browser's own `toLowerCase`: Rust's
/// would bring its Unicode case tables (about 5 KB gzipped) into the bundle
/// for this one filter.
fn lowercase(s: &str) -> String {
    #[cfg(target_arch = "wasm32")]
    return js_sys::JsString::from(s).to_lower_case().into();
    #[cfg(not(target_arch = "wasm32"))]
    return s.to_lowercase();
}

/// Whether every word of `query` is in the set's label, id, model or flags
/// (case-insensitive).
pub(crate) fn matches_filter(r: &FlagSetResults, query: &str) -> bool {
    let q = lowercase(query.trim());
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
    let hay = lowercase(&hay);
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
        crate::sort::sort_by(&mut idx, |&a, &b| match (v(a), v(b)) {
            (Some(x), Some(y)) => y.total_cmp(&x),
            (Some(_), None) => std::cmp::Ordering::Less,
            (None, Some(_)) => std::cmp::Ordering::Greater,
            (None, None) => std::cmp::Ordering::Equal,
        });
    }
    idx
}

/// The highest tok/s (the top of a whisker) among the sets at `shown`, at `c`.
pub(crate) fn data_max(ledger: &[FlagSetResults], shown: &[usize], c: Option<u32>) -> f64 {
    shown
        .iter()
        .filter_map(|&i| level(&ledger[i], c))
        .map(|lv| lv.output_tok_s.max)
        .fold(0.0f64, f64::max)
}

/// "3 flag sets", or "1 of 3 flag sets" while a filter hides some.
pub(crate) fn count_text(shown: usize, all: usize) -> String {
    let sets = if all == 1 { "flag set" } else { "flag sets" };
    if shown == all {
        format!("{all} {sets}")
    } else {
        format!("{shown} of {all} {sets}")
    }
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
    use crate::ledger::test_data::ledger;

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
    fn the_scale_takes_the_shown_sets_and_the_count_says_how_many() {
        let l = ledger();
        assert_eq!(data_max(&l, &[0, 1, 2], Some(16)), 665.0);
        assert_eq!(data_max(&l, &[0], Some(64)), 0.0);
        assert_eq!(count_text(3, 3), "3 flag sets");
        assert_eq!(count_text(1, 3), "1 of 3 flag sets");
        assert_eq!(count_text(1, 1), "1 flag set");
    }

    #[test]
    fn compare_picks() {
        let one = toggle_compare(&[], "a", true);
        let two = toggle_compare(&one, "b", true);
        assert_eq!(two, ["a", "b"]);
        assert_eq!(toggle_compare(&two, "c", true), ["b", "c"]);
        assert_eq!(toggle_compare(&two, "a", false), ["b"]);
    }
}
