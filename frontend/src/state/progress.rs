//! The running benchmark's progress as `bench` messages and server statuses
//! arrive: late news of a finished run never brings it back.

use shared::bench::BenchProgress;

/// The running benchmark's progress after `next` arrives: a progress of a run
/// at or before `finished` (the newest run known to be over) is late and
/// ignored; anything else replaces what was shown.
pub(crate) fn next_progress(
    shown: Option<BenchProgress>,
    next: BenchProgress,
    finished: i64,
) -> Option<BenchProgress> {
    if next.run_id <= finished {
        shown.filter(|s| s.run_id > finished)
    } else {
        Some(next)
    }
}

/// The progress to show once a status arrives: none when no benchmark runs;
/// the status's (a placeholder without numbers) when it names another run
/// than the one shown.
pub(crate) fn progress_for_status(
    shown: Option<BenchProgress>,
    status: Option<&BenchProgress>,
    finished: i64,
) -> Option<BenchProgress> {
    let status = status?;
    match shown {
        Some(s) if s.run_id == status.run_id => Some(s),
        _ => next_progress(None, status.clone(), finished),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn progress(run_id: i64, done: u32) -> BenchProgress {
        BenchProgress {
            run_id,
            status: shared::bench::RunStatus::Running,
            concurrency: 16,
            request_rate: None,
            repeat: 0,
            repeats: 3,
            done,
            total: 100,
            output_tok_s: 1.0,
            requested_by: "olga".to_owned(),
        }
    }

    #[test]
    fn bench_progress_follows_messages_and_status() {
        // A newer progress replaces; a late one for a finished run does not.
        let p = next_progress(None, progress(4, 10), 3);
        assert_eq!(p, Some(progress(4, 10)));
        let p = next_progress(p, progress(4, 20), 3);
        assert_eq!(p.as_ref().map(|p| p.done), Some(20));
        assert_eq!(next_progress(None, progress(4, 30), 4), None);
        assert_eq!(
            next_progress(Some(progress(5, 1)), progress(4, 30), 4),
            Some(progress(5, 1))
        );
        // The status's placeholder does not undo real progress of its run.
        let placeholder = progress(4, 0);
        assert_eq!(
            progress_for_status(Some(progress(4, 20)), Some(&placeholder), 3),
            Some(progress(4, 20))
        );
        assert_eq!(
            progress_for_status(None, Some(&placeholder), 3),
            Some(placeholder.clone())
        );
        assert_eq!(progress_for_status(Some(progress(4, 20)), None, 3), None);
        assert_eq!(progress_for_status(None, Some(&placeholder), 4), None);
    }
}
