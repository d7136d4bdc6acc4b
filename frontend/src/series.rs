//! The per-GPU memory series behind the sparklines: at most one point per second
//! (the second's maximum), five minutes deep, seeded from a snapshot's history and
//! extended by each sample; and the SVG path that draws one.

use std::collections::{HashMap, VecDeque};
use std::fmt::Write as _;

use shared::{Sample, Snapshot};

/// How far back a sparkline reaches.
pub(crate) const WINDOW_MS: u64 = 5 * 60 * 1000;
/// One point per this many milliseconds at most.
pub(crate) const STEP_MS: u64 = 1000;
/// A jump between two points longer than this is drawn as a gap, not a line.
const GAP_MS: u64 = 10_000;

/// The sparkline's drawing box, in SVG user units (one unit per second across).
pub(crate) const VIEW_W: f64 = (WINDOW_MS / STEP_MS) as f64;
pub(crate) const VIEW_H: f64 = 40.0;

/// Where `value` sits vertically in the drawing box whose top is `scale_max`
/// and whose bottom is 0, in SVG user units from the top. One unit of headroom
/// top and bottom keeps a full or an empty GPU's line visible.
pub(crate) fn y_of(value: u64, scale_max: u64) -> f64 {
    let share = (value as f64 / scale_max.max(1) as f64).clamp(0.0, 1.0);
    1.0 + (VIEW_H - 2.0) * (1.0 - share)
}

/// One GPU's memory used over time: `(start of the second in Unix ms, max bytes in
/// that second)`, oldest first.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Series {
    points: VecDeque<(u64, u64)>,
}

impl Series {
    /// Adds a reading, merging it into the newest point when it falls in the same
    /// second. A reading older than the newest point is dropped.
    pub(crate) fn push(&mut self, at_ms: u64, value: u64) {
        let slot = at_ms - at_ms % STEP_MS;
        match self.points.back_mut() {
            Some(last) if last.0 == slot => last.1 = last.1.max(value),
            Some(last) if last.0 > slot => {}
            _ => self.points.push_back((slot, value)),
        }
    }

    /// Drops the points that are out of the window ending at `now_ms`.
    pub(crate) fn trim(&mut self, now_ms: u64) {
        let oldest = now_ms.saturating_sub(WINDOW_MS);
        while self.points.front().is_some_and(|p| p.0 < oldest) {
            self.points.pop_front();
        }
    }

    /// The SVG paths of this series in a [`VIEW_W`] × [`VIEW_H`] box whose right
    /// edge is `end_ms` and whose top is `scale_max` bytes: the line, and the
    /// area under it. Both are empty when there is nothing to draw.
    pub(crate) fn paths(&self, end_ms: u64, scale_max: u64) -> (String, String) {
        let mut line = String::new();
        let mut area = String::new();
        let x_of = |t: u64| VIEW_W - (end_ms.saturating_sub(t) as f64 / STEP_MS as f64);
        let y_of = |v: u64| y_of(v, scale_max);

        let mut segment_start: Option<f64> = None;
        let mut prev: Option<(u64, f64)> = None;
        let close_area = |area: &mut String, start: f64, end: f64| {
            let _ = write!(area, "L{end:.1},{VIEW_H:.0}L{start:.1},{VIEW_H:.0}Z");
        };
        for &(t, v) in self.points.iter().filter(|p| p.0 <= end_ms) {
            let (x, y) = (x_of(t), y_of(v));
            let joins = prev.is_some_and(|(pt, _)| t - pt <= GAP_MS);
            if joins {
                let _ = write!(line, "L{x:.1},{y:.1}");
                let _ = write!(area, "L{x:.1},{y:.1}");
            } else {
                if let (Some(start), Some((_, px))) = (segment_start, prev) {
                    close_area(&mut area, start, px);
                }
                let _ = write!(line, "M{x:.1},{y:.1}");
                let _ = write!(area, "M{x:.1},{y:.1}");
                segment_start = Some(x);
            }
            prev = Some((t, x));
        }
        if let (Some(start), Some((_, px))) = (segment_start, prev) {
            close_area(&mut area, start, px);
        }
        (line, area)
    }
}

/// The series of every GPU drawn from a snapshot: its history, then its latest
/// sample. History points are in GPU index order; the i-th entry belongs to the
/// latest sample's i-th GPU.
pub(crate) fn from_snapshot(snapshot: &Snapshot) -> HashMap<u32, Series> {
    let mut all: HashMap<u32, Series> = HashMap::new();
    let index_of = |i: usize| -> u32 {
        snapshot
            .latest
            .as_ref()
            .and_then(|s| s.gpus.get(i))
            .map_or(i as u32, |g| g.index)
    };
    for point in &snapshot.history {
        for (i, used) in point.mem_used_bytes.iter().enumerate() {
            if let Some(used) = used {
                all.entry(index_of(i)).or_default().push(point.at_ms, *used);
            }
        }
    }
    if let Some(latest) = &snapshot.latest {
        extend(&mut all, latest);
    } else if let Some(last) = snapshot.history.last() {
        for series in all.values_mut() {
            series.trim(last.at_ms);
        }
    }
    all
}

/// Adds one sample to the series and drops what fell out of the window. A GPU
/// that is no longer listed loses its series.
pub(crate) fn extend(all: &mut HashMap<u32, Series>, sample: &Sample) {
    for gpu in &sample.gpus {
        if let Some(used) = gpu.mem_used_bytes {
            all.entry(gpu.index).or_default().push(sample.at_ms, used);
        }
    }
    all.retain(|index, _| sample.gpus.iter().any(|g| g.index == *index));
    for series in all.values_mut() {
        series.trim(sample.at_ms);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_point_per_second_keeping_the_max() {
        let mut s = Series::default();
        s.push(10_000, 5);
        s.push(10_400, 9);
        s.push(10_900, 7);
        s.push(11_000, 1);
        assert_eq!(s.points, [(10_000, 9), (11_000, 1)]);
        // Late reading: dropped.
        s.push(10_500, 100);
        assert_eq!(s.points, [(10_000, 9), (11_000, 1)]);
    }

    #[test]
    fn trim_keeps_five_minutes() {
        let mut s = Series::default();
        for sec in 0..400 {
            s.push(sec * 1000, sec);
        }
        s.trim(399_000);
        assert_eq!(s.points.len(), 301);
        assert_eq!(s.points.front(), Some(&(99_000, 99)));
    }

    #[test]
    fn y_runs_from_zero_at_the_bottom_to_the_scale_at_the_top() {
        assert_eq!(y_of(0, 96), VIEW_H - 1.0);
        assert_eq!(y_of(96, 96), 1.0);
        assert_eq!(y_of(48, 96), VIEW_H / 2.0);
        // Beyond the scale: pinned to the top, never off the box.
        assert_eq!(y_of(200, 96), 1.0);
        assert_eq!(y_of(5, 0), 1.0);
    }

    #[test]
    fn paths_break_at_gaps() {
        let mut s = Series::default();
        s.push(0, 0);
        s.push(1000, 100);
        s.push(60_000, 100);
        let (line, area) = s.paths(300_000, 100);
        assert_eq!(line, "M0.0,39.0L1.0,1.0M60.0,1.0");
        assert_eq!(area.matches('Z').count(), 2);
        assert_eq!(
            Series::default().paths(0, 0),
            (String::new(), String::new())
        );
    }
}
