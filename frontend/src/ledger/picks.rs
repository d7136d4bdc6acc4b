//! What the page itself does with the ledger the agent drew: the target
//! line's place over the bars, what a click or tick inside the rows asks for
//! ([`RowAction`], read from the `data-act` the rows' markup puts on its
//! controls), and the two sets picked for comparison.

/// What a click or tick inside the rows asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum RowAction {
    /// Open or close the label and notes editor of this set.
    Edit(String),
    /// Tick or untick this set for the comparison.
    Compare(String),
}

impl RowAction {
    /// The action of a control from its `data-act` and `data-flagset`.
    pub(crate) fn of(act: &str, flagset: Option<String>) -> Option<Self> {
        let id = flagset?;
        match act {
            "edit" => Some(Self::Edit(id)),
            "compare" => Some(Self::Compare(id)),
            _ => None,
        }
    }
}

/// The left of the target line over the bars, in percent of the track.
pub(crate) fn target_left(target: f64, scale: f64) -> f64 {
    if scale > 0.0 && target.is_finite() {
        (target / scale * 100.0).clamp(0.0, 100.0)
    } else {
        0.0
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

    #[test]
    fn compare_picks() {
        let one = toggle_compare(&[], "a", true);
        let two = toggle_compare(&one, "b", true);
        assert_eq!(two, ["a", "b"]);
        assert_eq!(toggle_compare(&two, "c", true), ["b", "c"]);
        assert_eq!(toggle_compare(&two, "a", false), ["b"]);
    }

    #[test]
    fn the_target_line_and_the_rows_actions() {
        assert_eq!(target_left(600.0, 1200.0), 50.0);
        assert_eq!(target_left(5000.0, 1200.0), 100.0);
        assert_eq!(target_left(5.0, 0.0), 0.0);
        let id = || Some("aaa".to_owned());
        assert_eq!(
            RowAction::of("edit", id()),
            Some(RowAction::Edit("aaa".into()))
        );
        assert_eq!(
            RowAction::of("compare", id()),
            Some(RowAction::Compare("aaa".into()))
        );
        assert_eq!(RowAction::of("other", id()), None);
        assert_eq!(RowAction::of("edit", None), None);
    }
}
