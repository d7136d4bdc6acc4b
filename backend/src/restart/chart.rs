//! A restart's drain chart as the page shows it (`GET /api/restarts/{id}/chart`,
//! a [`DrainChartView`]), pure so host tests pin it down: the fixed drawing
//! box, the time and memory scales, one polyline per GPU, the running-requests
//! step line, rows for marker labels that would collide, and the SVG markup
//! that draws it all (ticks, grid and colours are `shared::html::axis`'s). The
//! page sets the markup as its `<svg>`'s content and asks again as the
//! operation's timeline grows. Every piece of text in it is a number or a
//! fixed label, so nothing needs escaping.

use std::fmt::Write as _;

use shared::restart::{DrainChartView, Marker, MarkerKind, RestartDetail, TimelinePoint};

use shared::html::axis::{empty_note, gpu_colour, nice_step, tick_label, ticks, y_grid};

const GIB: f64 = 1024.0 * 1024.0 * 1024.0;

/// The whole SVG's width, in user units (drawn 1:1 in pixels); its height is
/// `DRAIN_CHART_BOX.1`, which the rows below divide.
const W: f64 = shared::restart::DRAIN_CHART_BOX.0;
/// The memory plot.
pub(crate) const PLOT_LEFT: f64 = 64.0;
pub(crate) const PLOT_RIGHT: f64 = W - 16.0;
pub(crate) const PLOT_TOP: f64 = 48.0;
pub(crate) const PLOT_BOTTOM: f64 = 220.0;
/// The running-requests track under it.
pub(crate) const TRACK_TOP: f64 = 236.0;
pub(crate) const TRACK_BOTTOM: f64 = 276.0;
/// Baseline of the time labels.
pub(crate) const X_LABEL_Y: f64 = 294.0;
/// Baselines of the marker label rows, above the plot.
/// Three: SIGTERM, "verified" and "launch" fall close together in a quick drain.
pub(crate) const MARKER_ROWS: [f64; 3] = [13.0, 27.0, 41.0];
/// Marker labels closer than this (user units) go to another row.
const LABEL_GAP: f64 = 64.0;

/// The chart's scales: time from `t0_ms` to `t1_ms` across the plot, memory
/// from 0 to `y_max_bytes` up it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Frame {
    pub(crate) t0_ms: u64,
    pub(crate) t1_ms: u64,
    pub(crate) y_max_bytes: u64,
}

impl Frame {
    /// From the first to the last timeline point, widened to take in every
    /// marker (SIGTERM comes before the first sample of a drain, ready after the
    /// last) and the operation's start, when given. At least one second wide.
    /// `None` when there is no point and no marker.
    pub(crate) fn new(
        start_ms: Option<u64>,
        timeline: &[TimelinePoint],
        markers: &[Marker],
        y_max_bytes: u64,
    ) -> Option<Self> {
        if timeline.is_empty() && markers.is_empty() {
            return None;
        }
        let times = timeline
            .iter()
            .map(|p| p.at_ms)
            .chain(markers.iter().map(|m| m.at_ms))
            .chain(start_ms);
        let (lo, hi) = times.fold(None, |acc: Option<(u64, u64)>, t| {
            Some(acc.map_or((t, t), |(lo, hi)| (lo.min(t), hi.max(t))))
        })?;
        Some(Self {
            t0_ms: lo,
            t1_ms: hi.max(lo + 1000),
            y_max_bytes: y_max_bytes.max(1),
        })
    }

    /// Seconds across.
    pub(crate) fn span_s(&self) -> f64 {
        (self.t1_ms - self.t0_ms) as f64 / 1000.0
    }

    pub(crate) fn x(&self, at_ms: u64) -> f64 {
        let share = (at_ms.saturating_sub(self.t0_ms) as f64 / (self.t1_ms - self.t0_ms) as f64)
            .clamp(0.0, 1.0);
        PLOT_LEFT + share * (PLOT_RIGHT - PLOT_LEFT)
    }

    /// The x of `s` seconds after the start.
    pub(crate) fn x_of_s(&self, s: f64) -> f64 {
        self.x(self.t0_ms + (s * 1000.0).round() as u64)
    }

    pub(crate) fn y(&self, bytes: u64) -> f64 {
        let share = (bytes as f64 / self.y_max_bytes as f64).clamp(0.0, 1.0);
        PLOT_BOTTOM - share * (PLOT_BOTTOM - PLOT_TOP)
    }

    /// The y of `gib` GiB.
    pub(crate) fn y_of_gib(&self, gib: f64) -> f64 {
        self.y((gib * GIB).round() as u64)
    }

    /// GiB at the top.
    pub(crate) fn y_max_gib(&self) -> f64 {
        self.y_max_bytes as f64 / GIB
    }
}

/// The top of the memory scale: the largest total memory among `totals` (the
/// latest sample's GPUs), else the most memory the timeline shows used.
pub(crate) fn y_max(totals: &[Option<u64>], timeline: &[TimelinePoint]) -> u64 {
    totals
        .iter()
        .flatten()
        .copied()
        .max()
        .filter(|t| *t > 0)
        .unwrap_or_else(|| {
            timeline
                .iter()
                .flat_map(|p| p.mem_used_bytes.iter().flatten().copied())
                .max()
                .unwrap_or(0)
        })
        .max(1)
}

/// Each GPU's memory over time: `(position in the point's list, "x,y x,y …")`,
/// for a `<polyline>`. A missing reading is skipped; a GPU without any reading
/// gets an empty list.
pub(crate) fn gpu_lines(timeline: &[TimelinePoint], frame: &Frame) -> Vec<(usize, String)> {
    let gpus = timeline
        .iter()
        .map(|p| p.mem_used_bytes.len())
        .max()
        .unwrap_or(0);
    (0..gpus)
        .map(|g| {
            let mut pts = String::new();
            for p in timeline {
                if let Some(Some(b)) = p.mem_used_bytes.get(g) {
                    if !pts.is_empty() {
                        pts.push(' ');
                    }
                    let _ = write!(pts, "{:.1},{:.1}", frame.x(p.at_ms), frame.y(*b));
                }
            }
            (g, pts)
        })
        .collect()
}

/// The running requests as a step line in the track under the plot, and the
/// most seen (the track's top). `None` when the timeline never reports them.
/// A point without a count breaks the line.
pub(crate) fn requests_path(timeline: &[TimelinePoint], frame: &Frame) -> Option<(String, u32)> {
    let max = timeline.iter().filter_map(|p| p.running_requests).max()?;
    let y = |n: u32| track_y(n, max);
    let mut d = String::new();
    let mut drawing = false;
    for p in timeline {
        let x = frame.x(p.at_ms);
        match p.running_requests {
            Some(n) if drawing => {
                let _ = write!(d, "H{x:.1}V{:.1}", y(n));
            }
            Some(n) => {
                let _ = write!(d, "M{x:.1},{:.1}", y(n));
                drawing = true;
            }
            None => drawing = false,
        }
    }
    Some((d, max))
}

/// The y of `n` running requests in the track whose top is `max`.
pub(crate) fn track_y(n: u32, max: u32) -> f64 {
    TRACK_BOTTOM - f64::from(n) / f64::from(max.max(1)) * (TRACK_BOTTOM - TRACK_TOP)
}

/// The row (index into [`MARKER_ROWS`]) for each marker label at `xs` (in
/// order of x): the first row whose last label is far enough to the left, else
/// the row whose last label is furthest left.
pub(crate) fn label_rows(xs: &[f64]) -> Vec<usize> {
    let mut last: Vec<Option<f64>> = vec![None; MARKER_ROWS.len()];
    xs.iter()
        .map(|&x| {
            let row = last
                .iter()
                .position(|l| l.is_none_or(|l| x - l >= LABEL_GAP))
                .unwrap_or_else(|| {
                    last.iter()
                        .enumerate()
                        .min_by(|a, b| a.1.partial_cmp(b.1).unwrap_or(std::cmp::Ordering::Equal))
                        .map_or(0, |(i, _)| i)
                });
            last[row] = Some(x);
            row
        })
        .collect()
}

/// The `data-kind` of a marker.
pub(crate) fn marker_kind(kind: MarkerKind) -> &'static str {
    match kind {
        MarkerKind::Sigterm => "sigterm",
        MarkerKind::Sigkill => "sigkill",
        MarkerKind::Verified => "verified",
        MarkerKind::Launch => "launch",
        MarkerKind::Ready => "ready",
        MarkerKind::Failed => "failed",
    }
}

/// A marker's label on the chart.
pub(crate) fn marker_label(kind: MarkerKind) -> &'static str {
    match kind {
        MarkerKind::Sigterm => "SIGTERM",
        MarkerKind::Sigkill => "SIGKILL",
        MarkerKind::Verified => "verified",
        MarkerKind::Launch => "launch",
        MarkerKind::Ready => "ready",
        MarkerKind::Failed => "failed",
    }
}

/// Ticks on each axis, at most.
const X_TICKS: usize = 8;
const Y_TICKS: usize = 5;

/// The content of the drain chart's `<svg>` for `detail`: grid and axis labels
/// (seconds from the start, GiB), one `<polyline data-testid="gpu-line">` per
/// GPU, the running-requests track, and one `<g data-testid="chart-marker"
/// data-kind=…>` per marker with its line and label. `totals` are the GPUs'
/// total memory and `indices` their NVML indices, both in timeline order.
pub(crate) fn svg_markup(
    detail: &RestartDetail,
    totals: &[Option<u64>],
    indices: &[u32],
) -> String {
    let mut out = String::new();
    let _ = write!(
        out,
        r#"<rect class="plot-bg" x="{PLOT_LEFT}" y="{PLOT_TOP}" width="{}" height="{}"/><rect class="plot-bg" x="{PLOT_LEFT}" y="{TRACK_TOP}" width="{}" height="{}"/>"#,
        PLOT_RIGHT - PLOT_LEFT,
        PLOT_BOTTOM - PLOT_TOP,
        PLOT_RIGHT - PLOT_LEFT,
        TRACK_BOTTOM - TRACK_TOP,
    );
    let Some(frame) = Frame::new(
        Some(detail.summary.started_at_ms),
        &detail.timeline,
        &detail.markers,
        y_max(totals, &detail.timeline),
    ) else {
        empty_note(
            &mut out,
            (PLOT_LEFT + PLOT_RIGHT) / 2.0,
            (PLOT_TOP + PLOT_BOTTOM) / 2.0,
            "no samples recorded yet",
        );
        return out;
    };

    axes(&mut out, &frame);
    for (pos, points) in gpu_lines(&detail.timeline, &frame) {
        let index = indices.get(pos).copied().unwrap_or(pos as u32);
        let _ = write!(
            out,
            r#"<polyline class="gpu-line" data-testid="gpu-line" data-gpu="{index}" stroke="{}" points="{points}"/>"#,
            gpu_colour(pos)
        );
    }
    requests_track(&mut out, requests_path(&detail.timeline, &frame));
    markers(&mut out, &detail.markers, &frame);
    out
}

/// Grid and axis labels: GiB up the plot, seconds from the start across.
fn axes(out: &mut String, frame: &Frame) {
    y_grid(
        out,
        (PLOT_LEFT, PLOT_RIGHT),
        frame.y_max_gib(),
        Y_TICKS,
        "GiB",
        |g| frame.y_of_gib(g),
    );
    let x_step = nice_step(frame.span_s(), X_TICKS);
    for t in ticks(frame.span_s(), X_TICKS) {
        let x = frame.x_of_s(t);
        let _ = write!(
            out,
            r#"<line class="grid" x1="{x:.1}" x2="{x:.1}" y1="{PLOT_TOP}" y2="{TRACK_BOTTOM}"/><text class="axis" x="{x:.1}" y="{X_LABEL_Y}" text-anchor="middle">{}</text>"#,
            tick_label(t, x_step, "s")
        );
    }
}

/// The running-requests track: the step line and its scale, or a note that
/// the server does not report them.
fn requests_track(out: &mut String, path: Option<(String, u32)>) {
    let label_x = PLOT_LEFT - 6.0;
    match path {
        Some((d, max)) => {
            let _ = write!(
                out,
                r#"<path class="req-line" data-testid="requests-line" d="{d}"/><text class="axis" x="{label_x}" y="{}" text-anchor="end">{} req</text><text class="axis" x="{label_x}" y="{TRACK_BOTTOM}" text-anchor="end">0 req</text><text class="track-title" x="{}" y="{}">running requests</text>"#,
                TRACK_TOP + 9.0,
                max.max(1),
                PLOT_LEFT + 6.0,
                TRACK_TOP + 12.0
            );
        }
        None => {
            let _ = write!(
                out,
                r#"<text class="track-title" x="{}" y="{}">running requests: not reported</text>"#,
                PLOT_LEFT + 6.0,
                TRACK_TOP + 24.0
            );
        }
    }
}

/// One group per marker, in time order, labelled above the plot; a label
/// near the right edge reads leftwards so it stays inside.
fn markers(out: &mut String, markers: &[Marker], frame: &Frame) {
    let mut markers = markers.to_vec();
    markers.sort_by_key(|m| m.at_ms);
    let xs: Vec<f64> = markers.iter().map(|m| frame.x(m.at_ms)).collect();
    for ((m, x), row) in markers.iter().zip(&xs).zip(label_rows(&xs)) {
        let label_y = MARKER_ROWS[row];
        let (anchor, tx) = if *x > PLOT_RIGHT - 70.0 {
            ("end", x - 3.0)
        } else {
            ("start", x + 3.0)
        };
        let _ = write!(
            out,
            r#"<g class="marker" data-testid="chart-marker" data-kind="{}" data-at-ms="{}"><line x1="{x:.1}" x2="{x:.1}" y1="{}" y2="{TRACK_BOTTOM}"/><text x="{tx:.1}" y="{label_y}" text-anchor="{anchor}">{}</text></g>"#,
            marker_kind(m.kind),
            m.at_ms,
            label_y + 3.0,
            marker_label(m.kind)
        );
    }
}

/// The legend under the chart, as HTML: a swatch and "GPU n" per line.
pub(crate) fn legend_markup(gpus: usize, indices: &[u32]) -> String {
    let mut out = String::new();
    for pos in 0..gpus {
        let index = indices.get(pos).copied().unwrap_or(pos as u32);
        let _ = write!(
            out,
            r#"<span class="legend-item"><span class="legend-swatch" style="background:{}"></span>GPU {index}</span>"#,
            gpu_colour(pos)
        );
    }
    out
}

/// Restart `detail`'s chart as the page shows it: the `<svg>`'s content, its
/// legend and how many points it draws. `totals` and `indices` are the GPUs'
/// total memory and NVML indices from the latest sample, in timeline order.
pub fn view(detail: &RestartDetail, totals: &[Option<u64>], indices: &[u32]) -> DrainChartView {
    let lines = detail
        .timeline
        .iter()
        .map(|p| p.mem_used_bytes.len())
        .max()
        .unwrap_or(0);
    DrainChartView {
        points: detail.timeline.len() as u32,
        svg: svg_markup(detail, totals, indices),
        legend: legend_markup(lines, indices),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shared::restart::Phase;

    const G: u64 = 1 << 30;

    fn point(at_ms: u64, mem: &[Option<u64>], running: Option<u32>) -> TimelinePoint {
        TimelinePoint {
            at_ms,
            phase: Phase::Draining,
            mem_used_bytes: mem.to_vec(),
            running_requests: running,
        }
    }

    fn marker(kind: MarkerKind, at_ms: u64) -> Marker {
        Marker { kind, at_ms }
    }

    #[test]
    fn frame_spans_points_and_markers() {
        let tl = [point(10_000, &[], None), point(14_000, &[], None)];
        let f = Frame::new(None, &tl, &[], G).expect("frame");
        assert_eq!((f.t0_ms, f.t1_ms), (10_000, 14_000));
        assert_eq!(f.x(10_000), PLOT_LEFT);
        assert_eq!(f.x(14_000), PLOT_RIGHT);
        assert_eq!(f.x(12_000), (PLOT_LEFT + PLOT_RIGHT) / 2.0);
        // Outside: pinned to the edges.
        assert_eq!(f.x(0), PLOT_LEFT);
        assert_eq!(f.x(99_000), PLOT_RIGHT);
        assert_eq!(f.span_s(), 4.0);

        let ms = [
            marker(MarkerKind::Sigterm, 9_000),
            marker(MarkerKind::Ready, 20_000),
        ];
        let f = Frame::new(None, &tl, &ms, G).expect("frame");
        assert_eq!((f.t0_ms, f.t1_ms), (9_000, 20_000));

        // One instant: a second wide.
        let f = Frame::new(None, &tl[..1], &[], G).expect("frame");
        assert_eq!(f.t1_ms, 11_000);
        assert_eq!(Frame::new(Some(5), &[], &[], G), None);
        // The operation's start widens it too.
        let f = Frame::new(Some(8_000), &tl, &ms, G).expect("frame");
        assert_eq!(f.t0_ms, 8_000);
    }

    #[test]
    fn y_runs_from_zero_at_the_bottom_to_the_top() {
        let f = Frame::new(None, &[point(0, &[], None)], &[], 96 * G).expect("frame");
        assert_eq!(f.y(0), PLOT_BOTTOM);
        assert_eq!(f.y(96 * G), PLOT_TOP);
        assert_eq!(f.y(200 * G), PLOT_TOP);
        assert_eq!(f.y(48 * G), (PLOT_TOP + PLOT_BOTTOM) / 2.0);
        assert_eq!(f.y_of_gib(48.0), f.y(48 * G));
        assert_eq!(f.y_max_gib(), 96.0);
    }

    #[test]
    fn y_max_prefers_the_total_then_the_data() {
        let tl = [point(0, &[Some(5 * G), None, Some(7 * G)], None)];
        assert_eq!(y_max(&[Some(80 * G), Some(96 * G), None], &tl), 96 * G);
        assert_eq!(y_max(&[None], &tl), 7 * G);
        assert_eq!(y_max(&[], &[]), 1);
    }

    #[test]
    fn one_polyline_per_gpu_skipping_missing_readings() {
        let tl = [
            point(0, &[Some(0), Some(G)], None),
            point(1000, &[None, Some(2 * G)], None),
            point(2000, &[Some(2 * G)], None),
        ];
        let f = Frame::new(None, &tl, &[], 2 * G).expect("frame");
        let lines = gpu_lines(&tl, &f);
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0], (0, format!("64.0,220.0 {PLOT_RIGHT:.1},48.0")));
        assert_eq!(lines[1], (1, "64.0,134.0 404.0,48.0".to_owned()));
        assert!(gpu_lines(&[], &f).is_empty());
    }

    #[test]
    fn requests_are_a_step_line_broken_by_gaps() {
        let tl = [
            point(0, &[], Some(4)),
            point(1000, &[], Some(2)),
            point(2000, &[], None),
            point(3000, &[], Some(0)),
        ];
        let f = Frame::new(None, &tl, &[], G).expect("frame");
        let (d, max) = requests_path(&tl, &f).expect("requests");
        assert_eq!(max, 4);
        assert_eq!(d.matches('M').count(), 2);
        assert!(d.starts_with(&format!("M64.0,{TRACK_TOP:.1}H")));
        assert!(d.ends_with(&format!(",{TRACK_BOTTOM:.1}")));
        assert_eq!(requests_path(&[point(0, &[], None)], &f), None);
        assert_eq!(track_y(0, 0), TRACK_BOTTOM);
        assert_eq!(track_y(3, 3), TRACK_TOP);
    }

    #[test]
    fn close_marker_labels_take_another_row() {
        assert_eq!(
            label_rows(&[100.0, 101.0, 102.0, 300.0, 302.0, 303.0, 304.0]),
            [0, 1, 2, 0, 1, 2, 0]
        );
        assert!(label_rows(&[]).is_empty());
    }

    fn detail(timeline: Vec<TimelinePoint>, markers: Vec<Marker>) -> RestartDetail {
        RestartDetail {
            summary: shared::restart::RestartSummary {
                id: 1,
                kind: shared::restart::OpKind::Restart,
                requested_by: String::new(),
                started_at_ms: 10_000,
                finished_at_ms: None,
                from_flags: Default::default(),
                to_flags: Default::default(),
                outcome: shared::restart::Outcome::Running,
                failure: None,
                durations: Default::default(),
            },
            transitions: Vec::new(),
            markers,
            timeline,
            log_tail: Vec::new(),
            containment: None,
        }
    }

    #[test]
    fn markup_has_a_line_per_gpu_and_a_group_per_marker() {
        let d = detail(
            vec![
                point(10_500, &[Some(90 * G), Some(90 * G)], Some(3)),
                point(14_000, &[Some(0), None], Some(0)),
            ],
            vec![
                marker(MarkerKind::Sigterm, 10_001),
                marker(MarkerKind::Verified, 13_000),
                marker(MarkerKind::Launch, 13_001),
            ],
        );
        let svg = svg_markup(&d, &[Some(96 * G), Some(96 * G)], &[4, 5]);
        assert_eq!(svg.matches(r#"data-testid="gpu-line""#).count(), 2);
        assert!(svg.contains(r#"data-gpu="5""#));
        assert_eq!(svg.matches(r#"data-testid="chart-marker""#).count(), 3);
        assert!(svg.contains(r#"data-kind="sigterm""#));
        assert!(svg.contains(">SIGTERM</text>"));
        assert!(svg.contains(">80 GiB</text>"));
        assert!(svg.contains(">0.0 s</text>") && svg.contains(">4.0 s</text>"));
        assert!(svg.contains("running requests</text>"));
        assert!(!svg.contains("NaN"));
        assert_eq!(legend_markup(2, &[4, 5]).matches("GPU ").count(), 2);
        assert!(legend_markup(1, &[]).contains("GPU 0"));
    }

    #[test]
    fn markup_without_samples_says_so() {
        let svg = svg_markup(&detail(Vec::new(), Vec::new()), &[], &[]);
        assert!(svg.contains("no samples recorded yet"));
        let d = detail(vec![point(10_000, &[Some(G)], None)], Vec::new());
        let svg = svg_markup(&d, &[None], &[]);
        assert!(svg.contains("running requests: not reported"));
        assert!(svg.contains(">1 GiB</text>") || svg.contains(">1.0 GiB</text>"));
    }

    #[test]
    fn marker_names() {
        assert_eq!(marker_kind(MarkerKind::Sigkill), "sigkill");
        assert_eq!(marker_label(MarkerKind::Sigterm), "SIGTERM");
    }

    #[test]
    fn the_view_counts_its_points_and_names_each_line() {
        let g = 1u64 << 30;
        let d = detail(
            vec![
                point(10_000, &[Some(80 * g), Some(80 * g)], Some(2)),
                point(11_000, &[Some(g / 256), Some(g / 256)], Some(0)),
            ],
            Vec::new(),
        );
        let v = view(&d, &[Some(96 * g), Some(96 * g)], &[0, 3]);
        assert_eq!(v.points, 2);
        assert_eq!(
            v.svg.matches(r#"data-testid="gpu-line""#).count(),
            2,
            "{}",
            v.svg
        );
        assert!(v.legend.contains("GPU 3"), "{}", v.legend);
    }
}
