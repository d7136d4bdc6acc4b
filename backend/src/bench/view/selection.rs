//! What the viewer picks out of the ledger: the concurrency shown, the
//! baseline, the order and filter of the sets, and the two sets compared.

use std::fmt::Write as _;

use shared::bench::{FlagSetResults, LedgerSort as Sort};

use super::level;

/// The concurrency shown first when the data has it.
pub(crate) const PREFERRED_C: u32 = 16;

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::view::test_data::ledger;

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
}
