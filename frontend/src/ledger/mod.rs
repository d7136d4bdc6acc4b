//! The throughput ledger as the page shows it, decided away from the DOM and
//! pinned down by host tests: one concern per module, each a pure function of
//! the ledger (`GET /api/flagsets`) and the viewer's choices. What every part
//! shares lives here: a set's name, its summary at a concurrency, deltas, and
//! the tok/s scale the bars and the sweep chart are drawn against.
//!
//! The read-only views are HTML or SVG text (set as an element's content, like
//! [`crate::markup`]); everything that comes from outside (labels, notes, flag
//! names and values, models, errors) goes through [`crate::markup::escape`].
//! Nothing here touches signals, the DOM or the network.

pub(crate) mod compare;
pub(crate) mod controls;
pub(crate) mod form;
pub(crate) mod live;
pub(crate) mod query;
pub(crate) mod rows;
pub(crate) mod selection;
pub(crate) mod sweep;
#[cfg(test)]
mod test_data;

use shared::bench::{FlagSet, FlagSetResults, LevelSummary};

pub(crate) use shared::html::{SCALE_TICKS, fmt_delta, scale_max};

/// A set's name: its label, else its id.
pub(crate) fn set_name(set: &FlagSet) -> &str {
    set.label
        .as_deref()
        .filter(|l| !l.trim().is_empty())
        .unwrap_or(&set.id)
}

/// The summary at `c`.
pub(crate) fn level(r: &FlagSetResults, c: Option<u32>) -> Option<&LevelSummary> {
    c.and_then(|c| r.levels.get(&c))
}

/// The relative change from `base` to `v`, in percent; `None` without a
/// usable base.
pub(crate) fn delta_pct(v: f64, base: f64) -> Option<f64> {
    (base.is_finite() && v.is_finite() && base > 0.0).then(|| (v - base) / base * 100.0)
}

/// `v` as a percentage of `scale`, clamped, for `left`/`width`.
pub(crate) fn pct(v: f64, scale: f64) -> f64 {
    if scale > 0.0 && v.is_finite() {
        (v / scale * 100.0).clamp(0.0, 100.0)
    } else {
        0.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::test_data::ledger;

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
}
