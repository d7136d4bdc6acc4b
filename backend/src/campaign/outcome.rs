//! What a step's restart or benchmark came to, in the campaign's terms: a
//! restart's failure classified ([`of_restart`]), a finished run turned into
//! the step's result or failure ([`of_run`]). Pure.

use shared::bench::{BenchRun, RunStatus};
use shared::campaign::{FailureKind, StepFailure, StepResult};
use shared::restart::{Failure, LaunchCause, Outcome, RestartSummary};

/// How a step's restart ended.
#[derive(Debug, Clone, PartialEq)]
pub enum AfterRestart {
    /// Ready: benchmark it.
    Ready,
    /// A foreign process holds GPU memory, or a GPU failed the health check:
    /// pause and ask a person.
    Foreign(String),
    /// drainwatch stopped mid-restart: run the step again.
    Interrupted,
    Failed(StepFailure),
}

/// The step's view of its finished restart.
pub fn of_restart(r: &RestartSummary) -> AfterRestart {
    match (r.outcome, &r.failure) {
        (Outcome::Succeeded, _) => AfterRestart::Ready,
        (Outcome::Interrupted | Outcome::Cancelled, _) | (_, Some(Failure::Interrupted)) => {
            AfterRestart::Interrupted
        }
        (_, Some(f @ (Failure::ForeignHolders { .. } | Failure::Unhealthy { .. }))) => {
            AfterRestart::Foreign(f.summary())
        }
        (_, Some(f)) => AfterRestart::Failed(StepFailure {
            kind: classify(f),
            message: match f.needs_person() {
                Some(next) => format!("{}; {next}", f.summary()),
                None => f.summary(),
            },
        }),
        (_, None) => AfterRestart::Failed(StepFailure {
            kind: FailureKind::LaunchFailed,
            message: "the restart failed without a reason".to_owned(),
        }),
    }
}

/// A restart's failure as a step's.
pub fn classify(f: &Failure) -> FailureKind {
    match f {
        Failure::VerifyFailed { .. } => FailureKind::VerifyFailed,
        Failure::ForeignHolders { .. } => FailureKind::ForeignHolders,
        Failure::LaunchFailed { cause, .. } => match cause {
            LaunchCause::Oom => FailureKind::Oom,
            LaunchCause::WarmupTimeout { .. } => FailureKind::WarmupTimeout,
            LaunchCause::Exited { .. } => FailureKind::Crashed,
            LaunchCause::PortInUse { .. }
            | LaunchCause::SpawnError { .. }
            | LaunchCause::Refused { .. } => FailureKind::LaunchFailed,
        },
        Failure::Crashed { .. } => FailureKind::Crashed,
        Failure::Interrupted => FailureKind::LaunchFailed,
        Failure::Unhealthy { .. } => FailureKind::Unhealthy,
        Failure::MemoryLeaked { .. } | Failure::Unkillable { .. } => FailureKind::NeedsPerson,
    }
}

/// How a step's benchmark ended.
#[derive(Debug, Clone, PartialEq)]
pub enum AfterRun {
    Measured(StepResult),
    Failed(StepFailure),
    /// Cancelled (the campaign was) or interrupted: not a result.
    Stopped,
}

/// The step's view of its finished benchmark run.
pub fn of_run(run: &BenchRun) -> AfterRun {
    if run.correctness.as_ref().is_some_and(|c| !c.passed) {
        let answer: String = run
            .correctness
            .as_ref()
            .map(|c| c.answer.chars().take(80).collect())
            .unwrap_or_default();
        return AfterRun::Failed(StepFailure {
            kind: FailureKind::WrongAnswer,
            message: format!("wrong answer: “{}”", answer.trim()),
        });
    }
    match run.status {
        RunStatus::Succeeded => match result(run) {
            Some(r) => AfterRun::Measured(r),
            None => AfterRun::Failed(StepFailure {
                kind: FailureKind::BenchFailed,
                message: "the benchmark measured nothing".to_owned(),
            }),
        },
        RunStatus::Failed => AfterRun::Failed(StepFailure {
            kind: FailureKind::BenchFailed,
            message: run
                .error
                .clone()
                .unwrap_or_else(|| "the benchmark failed".to_owned()),
        }),
        RunStatus::Cancelled | RunStatus::Interrupted | RunStatus::Running => AfterRun::Stopped,
    }
}

/// A run's first level as a step's result.
pub fn result(run: &BenchRun) -> Option<StepResult> {
    let l = run.levels.first()?;
    Some(StepResult {
        run_id: run.id,
        concurrency: l.concurrency,
        request_rate: l.request_rate,
        output_tok_s: l.output_tok_s,
        ttft_p99_ms: l.ttft_p99_ms,
        goodput_req_s: l.goodput_req_s,
        achieved_rate: l.achieved_rate,
        client_saturated: l.client_saturated.is_some(),
    })
}

#[cfg(test)]
mod tests {
    use shared::bench::{BenchSettings, CorrectnessResult, LevelSummary, Spread};
    use shared::restart::{Durations, OpKind};

    use super::*;

    fn restart(outcome: Outcome, failure: Option<Failure>) -> RestartSummary {
        RestartSummary {
            id: 7,
            kind: OpKind::Restart,
            requested_by: "campaign".into(),
            started_at_ms: 0,
            finished_at_ms: Some(1),
            from_flags: Default::default(),
            to_flags: Default::default(),
            outcome,
            failure,
            durations: Durations::default(),
        }
    }

    fn launch(cause: LaunchCause) -> Option<Failure> {
        Some(Failure::LaunchFailed {
            cause,
            log_tail: vec![],
        })
    }

    #[test]
    fn restarts_are_classified_as_their_failures_are() {
        assert_eq!(
            of_restart(&restart(Outcome::Succeeded, None)),
            AfterRestart::Ready
        );
        assert_eq!(
            of_restart(&restart(Outcome::Interrupted, Some(Failure::Interrupted))),
            AfterRestart::Interrupted
        );
        let kind = |f| match of_restart(&restart(Outcome::Failed, f)) {
            AfterRestart::Failed(s) => s.kind,
            other => panic!("{other:?}"),
        };
        assert_eq!(kind(launch(LaunchCause::Oom)), FailureKind::Oom);
        assert_eq!(
            kind(launch(LaunchCause::WarmupTimeout { after_ms: 1 })),
            FailureKind::WarmupTimeout
        );
        assert_eq!(
            kind(launch(LaunchCause::Exited {
                code: Some(1),
                signal: None
            })),
            FailureKind::Crashed
        );
        assert_eq!(
            kind(launch(LaunchCause::PortInUse { holder_pid: None })),
            FailureKind::LaunchFailed
        );
        assert_eq!(
            kind(Some(Failure::VerifyFailed {
                reason: "r".into(),
                holders: vec![]
            })),
            FailureKind::VerifyFailed
        );
        match of_restart(&restart(
            Outcome::Failed,
            Some(Failure::ForeignHolders { holders: vec![] }),
        )) {
            AfterRestart::Foreign(why) => assert!(why.contains("foreign"), "{why}"),
            other => panic!("{other:?}"),
        }
    }

    fn run(status: RunStatus) -> BenchRun {
        BenchRun {
            id: 3,
            flagset: "abc".into(),
            restart_id: None,
            requested_by: "x".into(),
            settings: BenchSettings::default(),
            status,
            started_at_ms: 0,
            finished_at_ms: Some(1),
            error: None,
            correctness: None,
            repeats: vec![],
            levels: vec![],
            provenance: None,
            campaign_id: None,
            campaign_step: None,
        }
    }

    #[test]
    fn runs_become_results_or_failures() {
        let mut ok = run(RunStatus::Succeeded);
        ok.levels = vec![LevelSummary {
            concurrency: 16,
            output_tok_s: Spread {
                min: 90.0,
                median: 100.0,
                max: 110.0,
            },
            ..LevelSummary::default()
        }];
        match of_run(&ok) {
            AfterRun::Measured(r) => {
                assert_eq!((r.run_id, r.concurrency), (3, 16));
                assert_eq!(r.metric().median, 100.0);
            }
            other => panic!("{other:?}"),
        }
        let mut wrong = run(RunStatus::Failed);
        wrong.error = Some(crate::bench::WRONG_ANSWER.into());
        wrong.correctness = Some(CorrectnessResult {
            passed: false,
            answer: "tok0 tok1 tok9".into(),
        });
        match of_run(&wrong) {
            AfterRun::Failed(f) => {
                assert_eq!(f.kind, FailureKind::WrongAnswer);
                assert!(f.message.contains("tok9"), "{}", f.message);
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(of_run(&run(RunStatus::Cancelled)), AfterRun::Stopped);
        assert_eq!(of_run(&run(RunStatus::Interrupted)), AfterRun::Stopped);
        assert!(matches!(
            of_run(&run(RunStatus::Succeeded)),
            AfterRun::Failed(f) if f.kind == FailureKind::BenchFailed
        ));
    }
}
