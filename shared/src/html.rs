//! Text made safe for HTML, and the pieces of markup that both the UI and
//! the server's rendered views (the hub's fleet panel, the campaign view)
//! draw with: a phase pill, a flag diff's lines, a change in percent, a
//! duration, and the charts' axes ([`axis`]).

use std::fmt::Write as _;

use crate::flags::FlagChange;
use crate::restart::Phase;

pub mod axis;

/// How many ticks a throughput scale is cut into, at most.
pub const SCALE_TICKS: usize = 6;

/// `text` safe inside HTML text and double-quoted attribute values.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// A phase pill, as the `PhaseBadge` component draws it.
pub fn phase_pill(out: &mut String, phase: Phase) {
    let _ = write!(
        out,
        r#"<span class="phase" data-phase="{}">{}</span>"#,
        phase.as_str(),
        phase.label()
    );
}

/// A flag diff, one line each, or `none` when there is no change.
pub fn diff_lines(changes: &[FlagChange], none: &str) -> String {
    if changes.is_empty() {
        return format!(r#"<span class="dlg-muted">{}</span>"#, escape(none));
    }
    let mut out = String::new();
    for c in changes {
        let _ = write!(
            out,
            r#"<span class="diff-line diff-{}" data-testid="flag-change" data-flag="{}">{}</span>"#,
            c.class(),
            escape(c.name()),
            escape(&c.to_string())
        );
    }
    out
}

/// "+12.3 %", "−4.0 %", "±0.0 %".
pub fn fmt_delta(pct: f64) -> String {
    let r = (pct * 10.0).round() / 10.0;
    if r == 0.0 {
        "±0.0 %".to_owned()
    } else if r > 0.0 {
        format!("+{r:.1} %")
    } else {
        format!("−{:.1} %", -r)
    }
}

/// The full scale of a throughput axis: the larger of the data and the
/// target, with some room, rounded up to a tick.
pub fn scale_max(data_max: f64, target: f64) -> f64 {
    let m = data_max.max(target).max(1.0) * 1.04;
    let step = axis::nice_step(m, SCALE_TICKS);
    (m / step).ceil() * step
}

/// "1 h 05 min", "4 min 10 s", "12 s".
pub fn duration(ms: u64) -> String {
    let s = ms / 1000;
    if s >= 3600 {
        format!("{} h {:02} min", s / 3600, (s % 3600) / 60)
    } else if s >= 60 {
        format!("{} min {:02} s", s / 60, s % 60)
    } else {
        format!("{s} s")
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn markup_characters_are_escaped() {
        assert_eq!(
            super::escape(r#"<a href="x">'&'</a>"#),
            "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;"
        );
    }

    #[test]
    fn deltas_durations_and_scales_read_as_the_ui_writes_them() {
        use super::*;
        assert_eq!(fmt_delta(12.34), "+12.3 %");
        assert_eq!(fmt_delta(-4.0), "−4.0 %");
        assert_eq!(fmt_delta(0.01), "±0.0 %");
        assert_eq!(duration(3_725_000), "1 h 02 min");
        assert_eq!(duration(250_000), "4 min 10 s");
        assert_eq!(duration(12_400), "12 s");
        assert_eq!(scale_max(600.0, 1000.0), 1200.0);
        assert_eq!(scale_max(1900.0, 1000.0), 2000.0);
        assert!(scale_max(0.0, 0.0) >= 1.0);
    }

    #[test]
    fn diff_lines_or_none() {
        use super::*;
        let changes = [FlagChange::Changed {
            name: "--tp".into(),
            from: "8".into(),
            to: "<4>".into(),
        }];
        let html = diff_lines(&changes, "none");
        assert!(html.contains(r#"class="diff-line diff-changed""#), "{html}");
        assert!(html.contains("&lt;4&gt;"), "{html}");
        assert!(diff_lines(&[], "no <change>").contains("no &lt;change&gt;"));
    }
}
