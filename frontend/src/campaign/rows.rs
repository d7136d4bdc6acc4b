//! The campaign's step rows as the page holds them: the window of rows its
//! box shows (and some more), each row's markup as the agent drew it, and
//! spacers of the rows' height for the steps above and below. One
//! fixed-height row per step, so rows that change in place never move the
//! others.

/// A row's height in CSS pixels (`.cpg-table td`): the window of rows drawn
/// is worked out from it.
pub(crate) const ROW_PX: f64 = 28.0;
/// Rows drawn beyond those in view, above and below.
const OVERSCAN: usize = 10;

/// The rows to draw for a box scrolled to `scroll_px` showing `view_px`, of
/// `n`: a window around what is in view, whatever the plan's length.
pub(crate) fn window(n: usize, scroll_px: f64, view_px: f64) -> std::ops::Range<usize> {
    let first = (scroll_px.max(0.0) / ROW_PX) as usize;
    let shown = (view_px.max(0.0) / ROW_PX).ceil() as usize;
    let start = first.saturating_sub(OVERSCAN).min(n);
    let end = (first + shown + OVERSCAN).min(n);
    start..end.max(start)
}

/// The window of rows drawn: the spacer heights above and below it (px),
/// and each row's markup, in the order the steps run.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Drawn {
    pub(crate) range: std::ops::Range<usize>,
    pub(crate) above_px: f64,
    pub(crate) below_px: f64,
    pub(crate) rows: Vec<String>,
}

impl Drawn {
    /// `rows` from step `first` of `n`.
    pub(crate) fn of(n: usize, first: usize, rows: Vec<String>) -> Self {
        let end = (first + rows.len()).min(n);
        let first = first.min(end);
        Self {
            above_px: first as f64 * ROW_PX,
            below_px: (n - end) as f64 * ROW_PX,
            range: first..end,
            rows,
        }
    }

    /// The whole tbody: a spacer row standing for the rows above, the rows,
    /// a spacer for those below.
    pub(crate) fn html(&self) -> String {
        let mut out = spacer(self.above_px);
        for r in &self.rows {
            out.push_str(r);
        }
        out.push_str(&spacer(self.below_px));
        out
    }
}

/// A row that holds the place of `px` of rows not drawn (nothing for 0).
fn spacer(px: f64) -> String {
    if px > 0.0 {
        format!(r#"<tr class="cpg-spacer" style="height:{px}px"></tr>"#)
    } else {
        String::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_window_covers_what_is_in_view_and_some_more() {
        assert_eq!(window(4, 0.0, 420.0), 0..4);
        assert_eq!(window(500, 0.0, 420.0), 0..25);
        // Scrolled to row 100: rows 90 to 125.
        assert_eq!(window(500, 2800.0, 420.0), 90..125);
        assert_eq!(window(500, 1e9, 420.0), 500..500);
        assert_eq!(window(0, 0.0, 420.0), 0..0);
    }

    #[test]
    fn the_rows_drawn_stand_between_spacers_of_the_rows_not_drawn() {
        let d = Drawn::of(4, 1, vec!["<tr>a</tr>".into(), "<tr>b</tr>".into()]);
        assert_eq!(d.range, 1..3);
        assert_eq!(
            d.html(),
            r#"<tr class="cpg-spacer" style="height:28px"></tr><tr>a</tr><tr>b</tr><tr class="cpg-spacer" style="height:28px"></tr>"#
        );
        let all = Drawn::of(2, 0, vec!["<tr>a</tr>".into(), "<tr>b</tr>".into()]);
        assert!(!all.html().contains("cpg-spacer"));
    }
}
