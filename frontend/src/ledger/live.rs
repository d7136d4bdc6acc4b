//! The server panel's throughput line: live tok/s from the server's own
//! metrics, the flag set it runs, the running benchmark's progress, and how
//! the last run ended (a finished run as the page reads it, [`RunBrief`]).

use std::fmt::Write as _;

use serde::Deserialize;
use shared::bench::{BenchProgress, Passive, RunStatus};
use shared::units::{MISSING, fmt_ms, fmt_tok_s};

/// The server panel's live line from the server's own metrics: "612 tok/s ·
/// 16 running · 0 queued · p50 TTFT 48.5 ms · ITL 21.2 ms".
pub(crate) fn live_text(has_metrics: bool, p: &Passive) -> String {
    if !has_metrics {
        return "this server exposes no metrics".to_owned();
    }
    let n = |v: Option<u32>| v.map_or_else(|| MISSING.to_owned(), |v| v.to_string());
    format!(
        "{} · {} running · {} queued · p50 TTFT {} · ITL {}",
        fmt_tok_s(p.output_tok_s),
        n(p.running),
        n(p.queued),
        fmt_ms(p.ttft_p50_ms),
        fmt_ms(p.itl_p50_ms)
    )
}

/// The running benchmark in a line: "benchmark #4 · c=16 · repeat 2/3 ·
/// 80/208 requests · 598 tok/s" (the progress counts repeats from 0; a
/// count of 0 is not known yet).
pub(crate) fn progress_text(p: &BenchProgress) -> String {
    // Who comes last: where the line is cut, the numbers stay.
    let by = match p.requested_by.as_str() {
        "" => String::new(),
        who => format!(" · by {who}"),
    };
    if p.total == 0 {
        return format!("benchmark #{} · starting…{by}", p.run_id);
    }
    let repeat = match p.repeats {
        0 => (p.repeat + 1).to_string(),
        n => format!("{}/{n}", p.repeat + 1),
    };
    let level = match p.request_rate {
        Some(r) => format!("{} req/s", shared::units::rate_num(r)),
        None => format!("c={}", p.concurrency),
    };
    format!(
        "benchmark #{} · {level} · repeat {repeat} · {}/{} requests · {}{by}",
        p.run_id,
        p.done,
        p.total,
        fmt_tok_s(Some(p.output_tok_s))
    )
}

/// What the page shows of a finished benchmark run (a
/// [`shared::bench::BenchRun`] read without its settings and per-repeat
/// metrics: the ledger has the results).
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub(crate) struct RunBrief {
    pub(crate) id: i64,
    pub(crate) status: RunStatus,
    pub(crate) error: Option<String>,
    pub(crate) correctness: Option<CorrectnessBrief>,
}

/// Whether the correctness prompt was answered right.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
pub(crate) struct CorrectnessBrief {
    pub(crate) passed: bool,
}

/// A finished run in a line, for the panel while no benchmark runs.
pub(crate) fn run_text(r: &RunBrief) -> String {
    let how = match r.status {
        RunStatus::Running => "running",
        RunStatus::Succeeded => "succeeded",
        RunStatus::Failed => "failed",
        RunStatus::Cancelled => "cancelled",
        RunStatus::Interrupted => "interrupted",
    };
    let mut out = format!("last benchmark #{} {how}", r.id);
    if let Some(e) = &r.error {
        let _ = write!(out, ": {e}");
    }
    if r.correctness.as_ref().is_some_and(|c| !c.passed) {
        out.push_str(" · wrong answer to the correctness prompt");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn live_and_progress_lines() {
        let p = Passive {
            output_tok_s: Some(612.0),
            running: Some(16),
            queued: Some(0),
            ttft_p50_ms: Some(48.46),
            itl_p50_ms: Some(21.25),
        };
        assert_eq!(
            live_text(true, &p),
            "612 tok/s · 16 running · 0 queued · p50 TTFT 48.5 ms · ITL 21.2 ms"
        );
        assert_eq!(live_text(false, &p), "this server exposes no metrics");
        assert_eq!(
            live_text(true, &Passive::default()),
            "— tok/s · — running · — queued · p50 TTFT — ms · ITL — ms"
        );
        let mut b = BenchProgress {
            request_rate: None,
            run_id: 4,
            status: RunStatus::Running,
            concurrency: 16,
            repeat: 1,
            repeats: 3,
            done: 80,
            total: 208,
            output_tok_s: 598.2,
            requested_by: String::new(),
        };
        assert_eq!(
            progress_text(&b),
            "benchmark #4 · c=16 · repeat 2/3 · 80/208 requests · 598 tok/s"
        );
        b.repeats = 0;
        assert!(progress_text(&b).contains("repeat 2 ·"));
        b.total = 0;
        assert_eq!(progress_text(&b), "benchmark #4 · starting…");
        b.requested_by = "olga (10.0.0.7:51234)".to_owned();
        assert_eq!(
            progress_text(&b),
            "benchmark #4 · starting… · by olga (10.0.0.7:51234)"
        );
    }

    #[test]
    fn a_finished_run_reads_as_its_brief() {
        let msg: shared::ServerMsg<RunBrief> = serde_json::from_str(include_str!(
            "../../../shared/tests/fixtures/bench_run.json"
        ))
        .expect("fixture");
        let shared::ServerMsg::BenchRun(run) = msg else {
            panic!("the fixture is a finished run");
        };
        let full: shared::ServerMsg = serde_json::from_str(include_str!(
            "../../../shared/tests/fixtures/bench_run.json"
        ))
        .expect("fixture");
        let shared::ServerMsg::BenchRun(full) = full else {
            unreachable!()
        };
        assert_eq!(run.id, full.id);
        assert_eq!(run.status, full.status);
        assert_eq!(run.error, full.error);
        assert_eq!(
            run.correctness.map(|c| c.passed),
            full.correctness.map(|c| c.passed)
        );
    }
}
