//! Every path of the restart machine, driven by explicit times.

use std::time::Duration;

use shared::flags::Flags;
use shared::restart::{Failure, Holder, LaunchCause, MarkerKind, OpKind, Outcome, Phase};

use super::*;

const S: u64 = 1_000;

fn timeouts() -> Timeouts {
    Timeouts {
        drain: Duration::from_secs(30),
        kill_grace: Duration::from_secs(5),
        verify: Duration::from_secs(20),
        warmup: Duration::from_secs(90),
    }
}

fn flags(tp: &str) -> Flags {
    Flags::from([("--tp".to_owned(), tp.to_owned())])
}

fn alive(n: usize) -> Input {
    Input::Observe(Box::new(Observation {
        ours_alive: n,
        ..Observation::default()
    }))
}

fn clean() -> Input {
    alive(0)
}

fn holder(pid: u32, gpu: u32, ours: bool) -> Holder {
    Holder {
        pid,
        user: Some("ml".into()),
        cmdline: vec!["python3".into()],
        gpu_index: gpu,
        used_bytes: Some(90 << 30),
        ours,
    }
}

/// A machine that has just begun a restart to `--tp 8` (at time 0).
fn restarting() -> Machine {
    let mut m = ready();
    m.step(
        Input::Begin {
            kind: OpKind::Restart,
            to_flags: flags("8"),
        },
        0,
    );
    m
}

/// A machine whose start to `--tp 8` has just launched the server (at time 0,
/// one clean sample to verify).
fn launched() -> Machine {
    let mut m = Machine::new(timeouts(), 1, 0);
    m.step(
        Input::Begin {
            kind: OpKind::Start,
            to_flags: flags("8"),
        },
        0,
    );
    m.step(clean(), 0);
    m.step(Input::Spawned, 0);
    m
}

/// A machine whose server is up.
fn ready() -> Machine {
    let mut m = Machine::new(timeouts(), 3, 0);
    m.step(Input::Attached, 0);
    m.step(alive(9), 0);
    assert_eq!(m.phase(), Phase::Ready);
    m
}

fn has(fx: &[Effect], want: &Effect) -> bool {
    fx.iter().any(|e| e == want)
}

fn entered(fx: &[Effect]) -> Vec<Phase> {
    fx.iter()
        .filter_map(|e| match e {
            Effect::Entered { phase, .. } => Some(*phase),
            _ => None,
        })
        .collect()
}

fn finished(fx: &[Effect]) -> Option<(Outcome, Option<Failure>)> {
    fx.iter().find_map(|e| match e {
        Effect::Finished { outcome, failure } => Some((*outcome, failure.clone())),
        _ => None,
    })
}

#[test]
fn a_clean_restart_walks_every_phase() {
    let mut m = ready();
    let fx = m.step(
        Input::Begin {
            kind: OpKind::Restart,
            to_flags: flags("4"),
        },
        10 * S,
    );
    assert_eq!(m.phase(), Phase::Draining);
    assert!(has(&fx, &Effect::Sigterm) && has(&fx, &Effect::FastSampling(true)));
    assert_eq!(m.busy(), Some(OpKind::Restart));

    // Draining with requests in flight, within the timeout: nothing changes.
    assert!(m.step(alive(9), 20 * S).is_empty());
    m.step(clean(), 25 * S);
    assert_eq!(m.phase(), Phase::Verifying);

    // Two idle samples are not enough; the third launches with the new flags.
    assert!(!has(
        &m.step(clean(), 25 * S + 100),
        &Effect::Launch(flags("4"))
    ));
    m.step(clean(), 25 * S + 200);
    let fx = m.step(clean(), 25 * S + 300);
    assert_eq!(m.phase(), Phase::Launching);
    assert!(has(&fx, &Effect::Launch(flags("4"))));
    assert!(fx.iter().any(|e| matches!(
        e,
        Effect::Entered {
            marker: Some(MarkerKind::Verified),
            ..
        }
    )));

    let fx = m.step(Input::Spawned, 26 * S);
    assert_eq!(m.phase(), Phase::WarmingUp);
    assert!(has(&fx, &Effect::Probe));
    m.step(Input::Healthy, 100 * S);
    assert_eq!(m.phase(), Phase::WarmingUp);
    let fx = m.step(Input::Ready, 110 * S);
    assert_eq!(m.phase(), Phase::Ready);
    assert_eq!(finished(&fx), Some((Outcome::Succeeded, None)));
    assert!(has(&fx, &Effect::FastSampling(false)));
    assert_eq!(m.busy(), None);
}

#[test]
fn a_server_that_ignores_sigterm_is_killed_after_the_drain_timeout() {
    let mut m = restarting();
    assert!(m.step(alive(9), 29 * S).is_empty());
    let fx = m.step(alive(9), 30 * S);
    assert_eq!(m.phase(), Phase::Killing);
    assert!(has(&fx, &Effect::KillAll));
    // Still alive a moment later (a new descendant, say): killed again.
    assert!(has(&m.step(alive(1), 31 * S), &Effect::KillAll));
    m.step(clean(), 32 * S);
    assert_eq!(m.phase(), Phase::Verifying);
}

#[test]
fn survivors_of_sigkill_fail_the_restart_without_launching() {
    let mut m = restarting();
    m.step(alive(2), 30 * S);
    let obs = Observation {
        ours_alive: 1,
        ours_on_gpu: vec![holder(77, 0, true)],
        ..Observation::default()
    };
    let fx = m.step(Input::Observe(Box::new(obs)), 35 * S);
    assert_eq!(m.phase(), Phase::Failed);
    let (outcome, failure) = finished(&fx).expect("finished");
    assert_eq!(outcome, Outcome::Failed);
    match failure {
        Some(Failure::VerifyFailed { reason, holders }) => {
            assert!(reason.contains("survived SIGKILL"), "{reason}");
            assert_eq!(holders[0].pid, 77);
        }
        other => panic!("{other:?}"),
    }
    assert!(!fx.iter().any(|e| matches!(e, Effect::Launch(_))));
}

#[test]
fn memory_still_held_after_exit_delays_the_launch() {
    let mut m = restarting();
    m.step(clean(), S);
    let tearing_down = Observation {
        ours_on_gpu: vec![holder(42, 3, true)],
        over_baseline: vec![(3, 90 << 30, 4 << 20)],
        ..Observation::default()
    };
    for t in 2..10 {
        m.step(Input::Observe(Box::new(tearing_down.clone())), t * S);
        assert_eq!(m.phase(), Phase::Verifying);
    }
    // A clean sample between dirty ones does not count towards the streak.
    m.step(clean(), 10 * S);
    m.step(Input::Observe(Box::new(tearing_down.clone())), 10 * S + 100);
    m.step(clean(), 11 * S);
    m.step(clean(), 11 * S + 100);
    assert_eq!(m.phase(), Phase::Verifying);
    m.step(clean(), 11 * S + 200);
    assert_eq!(m.phase(), Phase::Launching);
}

#[test]
fn memory_that_never_returns_fails_verification_naming_the_gpu() {
    // Held by a process of ours that is gone but still listed: not verified.
    let mut m = restarting();
    m.step(clean(), S);
    let listed = Observation {
        ours_on_gpu: vec![holder(77, 5, true)],
        over_baseline: vec![(5, 2 << 30, 4 << 20)],
        ..Observation::default()
    };
    m.step(Input::Observe(Box::new(listed.clone())), 20 * S);
    assert_eq!(m.phase(), Phase::Verifying);
    let fx = m.step(Input::Observe(Box::new(listed)), 21 * S);
    match finished(&fx) {
        Some((Outcome::Failed, Some(Failure::VerifyFailed { reason, .. }))) => {
            assert!(reason.contains("pid 77 of ours"), "{reason}");
        }
        other => panic!("{other:?}"),
    }

    // Held with no process at all, ours or anyone's: the driver leaked it.
    let mut m = restarting();
    m.step(clean(), S);
    let leaked = Observation {
        over_baseline: vec![(5, 2 << 30, 4 << 20)],
        ..Observation::default()
    };
    m.step(Input::Observe(Box::new(leaked.clone())), 20 * S);
    let fx = m.step(Input::Observe(Box::new(leaked)), 21 * S);
    match finished(&fx) {
        Some((Outcome::Failed, Some(ref f @ Failure::MemoryLeaked { ref gpus }))) => {
            assert_eq!(gpus.len(), 1);
            assert_eq!((gpus[0].gpu_index, gpus[0].used_bytes), (5, 2 << 30));
            assert!(f.summary().contains("GPU 5 at 2.0 GiB"), "{}", f.summary());
            let next = f.needs_person().unwrap_or_default();
            assert!(next.contains("nvidia-smi --gpu-reset -i 5"), "{next}");
        }
        other => panic!("{other:?}"),
    }
    assert!(!fx.iter().any(|f| matches!(f, Effect::Launch(_))));
}

#[test]
fn a_process_sigkill_cannot_end_is_named_as_stuck() {
    let mut m = restarting();
    m.step(alive(2), 31 * S);
    assert_eq!(m.phase(), Phase::Killing);
    let stuck = Observation {
        ours_alive: 1,
        stuck: vec![shared::restart::StuckProcess {
            pid: 88,
            state: "D".into(),
            wchan: Some("uvm_va_space_destroy".into()),
            gpus: vec![3],
        }],
        ..Observation::default()
    };
    let fx = m.step(Input::Observe(Box::new(stuck)), 37 * S);
    match finished(&fx) {
        Some((Outcome::Failed, Some(f @ Failure::Unkillable { .. }))) => {
            assert!(
                f.summary()
                    .contains("pid 88 (state D, in uvm_va_space_destroy)"),
                "{}",
                f.summary()
            );
            assert!(f.needs_person().is_some_and(|n| n.contains("reboot")));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_foreign_holder_refuses_the_launch_and_is_named() {
    let mut m = restarting();
    m.step(clean(), S);
    let foreign = Observation {
        foreign_on_gpu: vec![holder(999, 3, false)],
        over_baseline: vec![(3, 1536 << 20, 4 << 20)],
        ..Observation::default()
    };
    m.step(Input::Observe(Box::new(foreign.clone())), 2 * S);
    m.step(Input::Observe(Box::new(foreign.clone())), 2 * S + 100);
    let fx = m.step(Input::Observe(Box::new(foreign)), 2 * S + 200);
    assert_eq!(m.phase(), Phase::Failed);
    match finished(&fx) {
        Some((Outcome::Failed, Some(Failure::ForeignHolders { holders }))) => {
            assert_eq!(holders[0].pid, 999);
            assert!(!holders[0].ours);
        }
        other => panic!("{other:?}"),
    }
}

/// drainwatch in a PID namespace of its own: a host PID on a GPU the server
/// needs may be the old server being torn down or someone else; it is never
/// refused as foreign, and only the GPUs going idle let the launch go.
#[test]
fn a_holder_outside_the_pid_namespace_is_waited_for_then_named_never_called_foreign() {
    let outside = Input::Observe(Box::new(Observation {
        outside_on_gpu: vec![holder(4242, 3, false)],
        over_baseline: vec![(3, 2 << 30, 4 << 20)],
        ..Observation::default()
    }));
    // It goes (the old server's memory, released): the launch goes on.
    let mut m = restarting();
    m.step(clean(), S);
    for t in 0..10 {
        m.step(outside.clone(), 2 * S + t * 100);
    }
    assert_eq!(m.phase(), Phase::Verifying);
    for t in 0..3 {
        m.step(clean(), 4 * S + t * 100);
    }
    assert_eq!(m.phase(), Phase::Launching);

    // It stays: at the verify timeout the failure names it and says why.
    let mut m = restarting();
    m.step(clean(), S);
    let mut fx = Vec::new();
    for t in 0..=20 {
        fx = m.step(outside.clone(), S + t * S);
    }
    assert_eq!(m.phase(), Phase::Failed);
    match finished(&fx) {
        Some((Outcome::Failed, Some(Failure::VerifyFailed { reason, holders }))) => {
            assert!(
                reason.contains("host pid 4242 holds 90.0 GiB on GPU 3"),
                "{reason}"
            );
            assert!(reason.contains("run with hostPID"), "{reason}");
            assert_eq!(holders[0].pid, 4242);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_foreign_holder_under_the_tolerance_still_refuses_the_launch() {
    let mut m = restarting();
    m.step(clean(), S);
    let mut small = holder(999, 3, false);
    small.used_bytes = Some(32 << 20);
    let foreign = Observation {
        foreign_on_gpu: vec![small],
        ..Observation::default()
    };
    for t in 0..3 {
        m.step(Input::Observe(Box::new(foreign.clone())), 2 * S + t * 100);
    }
    assert_eq!(m.phase(), Phase::Failed);
}

#[test]
fn a_streak_counts_one_verdict() {
    let foreign = Input::Observe(Box::new(Observation {
        foreign_on_gpu: vec![holder(999, 3, false)],
        ..Observation::default()
    }));
    // Two foreign samples, then clean ones: three clean ones are still needed.
    let mut m = restarting();
    m.step(clean(), S);
    m.step(foreign.clone(), 2 * S);
    m.step(foreign.clone(), 2 * S + 100);
    m.step(clean(), 2 * S + 200);
    m.step(clean(), 2 * S + 300);
    assert_eq!(m.phase(), Phase::Verifying);
    m.step(clean(), 2 * S + 400);
    assert_eq!(m.phase(), Phase::Launching);
    // Two clean samples, then a passing foreign holder: not a failure yet.
    let mut m = restarting();
    m.step(clean(), S);
    m.step(clean(), 2 * S);
    m.step(foreign, 2 * S + 100);
    assert_eq!(m.phase(), Phase::Verifying);
}

#[test]
fn what_cannot_be_read_is_not_verified() {
    for (unknown, want) in [
        (
            Observation {
                unreadable: vec![4],
                ..Observation::default()
            },
            "GPU 4's memory cannot be read",
        ),
        (
            Observation {
                processes_unknown: Some("GPU 1: process list unavailable".into()),
                ..Observation::default()
            },
            "processes cannot be read (GPU 1: process list unavailable)",
        ),
    ] {
        let mut m = restarting();
        m.step(clean(), S);
        for t in 2..20 {
            m.step(Input::Observe(Box::new(unknown.clone())), t * S);
            assert_eq!(m.phase(), Phase::Verifying);
        }
        let fx = m.step(Input::Observe(Box::new(unknown)), 21 * S);
        match finished(&fx) {
            Some((Outcome::Failed, Some(Failure::VerifyFailed { reason, .. }))) => {
                assert!(reason.contains(want), "{reason}");
            }
            other => panic!("{other:?}"),
        }
    }
}

#[test]
fn launch_failures_are_classified() {
    for (input, want) in [
        (
            Input::RootExited {
                code: Some(1),
                signal: None,
                oom: true,
                port_in_use: false,
            },
            LaunchCause::Oom,
        ),
        (
            Input::RootExited {
                code: Some(3),
                signal: None,
                oom: false,
                port_in_use: false,
            },
            LaunchCause::Exited {
                code: Some(3),
                signal: None,
            },
        ),
        (
            Input::RootExited {
                code: Some(1),
                signal: None,
                oom: false,
                port_in_use: true,
            },
            LaunchCause::PortInUse { holder_pid: None },
        ),
        (
            Input::SpawnFailed(LaunchCause::PortInUse {
                holder_pid: Some(5),
            }),
            LaunchCause::PortInUse {
                holder_pid: Some(5),
            },
        ),
    ] {
        let mut m = Machine::new(timeouts(), 1, 0);
        m.step(
            Input::Begin {
                kind: OpKind::Start,
                to_flags: flags("8"),
            },
            0,
        );
        m.step(clean(), 100);
        assert_eq!(m.phase(), Phase::Launching);
        if !matches!(input, Input::SpawnFailed(_)) {
            m.step(Input::Spawned, 200);
        }
        let fx = m.step(input, 300);
        assert_eq!(m.phase(), Phase::Failed);
        match finished(&fx) {
            Some((Outcome::Failed, Some(Failure::LaunchFailed { cause, .. }))) => {
                assert_eq!(cause, want)
            }
            other => panic!("{other:?}"),
        }
    }
}

#[test]
fn a_warm_up_that_never_ends_times_out_and_kills_the_half_started_server() {
    let mut m = launched();
    m.step(Input::Healthy, 5 * S);
    assert!(m.step(alive(9), 89 * S).is_empty());
    let fx = m.step(alive(9), 90 * S);
    assert!(has(&fx, &Effect::KillAll));
    match finished(&fx) {
        Some((
            Outcome::Failed,
            Some(Failure::LaunchFailed {
                cause: LaunchCause::WarmupTimeout { after_ms },
                ..
            }),
        )) => {
            assert_eq!(after_ms, 90 * S)
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_server_that_refuses_the_probe_fails_the_warm_up_at_once() {
    let mut m = launched();
    m.step(Input::Healthy, 5 * S);
    let fx = m.step(Input::Refused { status: 401 }, 6 * S);
    assert!(has(&fx, &Effect::KillAll));
    let failure = match finished(&fx) {
        Some((Outcome::Failed, Some(f))) => f,
        other => panic!("{other:?}"),
    };
    assert_eq!(
        failure,
        Failure::LaunchFailed {
            cause: LaunchCause::Refused { status: 401 },
            log_tail: Vec::new(),
        }
    );
    let said = failure.summary();
    assert!(
        said.contains("refused") && said.contains("401") && said.contains("api_key_file"),
        "{said}"
    );
    // A late refusal about a server that is up changes nothing.
    let mut up = ready();
    assert!(up.step(Input::Refused { status: 401 }, 7 * S).is_empty());
    assert_eq!(up.phase(), Phase::Ready);
}

#[test]
fn a_server_that_dies_on_its_own_is_crashed() {
    let mut m = ready();
    let fx = m.step(
        Input::RootExited {
            code: None,
            signal: Some(9),
            oom: false,
            port_in_use: false,
        },
        5 * S,
    );
    assert_eq!(m.phase(), Phase::Crashed);
    assert!(has(&fx, &Effect::KillAll));
    assert!(fx.iter().any(|e| matches!(
        e,
        Effect::Crashed(Failure::Crashed {
            signal: Some(9),
            ..
        })
    )));

    // An adopted server is not our child: its death shows as nothing alive.
    let mut m = ready();
    m.step(alive(0), 6 * S);
    assert_eq!(m.phase(), Phase::Crashed);
}

#[test]
fn stop_verifies_and_ends_stopped() {
    let mut m = ready();
    m.step(
        Input::Begin {
            kind: OpKind::Stop,
            to_flags: Flags::new(),
        },
        0,
    );
    m.step(clean(), S);
    m.step(clean(), S + 100);
    m.step(clean(), S + 200);
    let fx = m.step(clean(), S + 300);
    assert_eq!(m.phase(), Phase::Stopped);
    assert_eq!(finished(&fx), Some((Outcome::Succeeded, None)));
    assert!(!fx.iter().any(|e| matches!(e, Effect::Launch(_))));
    assert_eq!(entered(&fx), vec![Phase::Verifying, Phase::Stopped]);
}

#[test]
fn one_operation_at_a_time() {
    let mut m = ready();
    m.step(
        Input::Begin {
            kind: OpKind::Restart,
            to_flags: flags("4"),
        },
        0,
    );
    let err = m.can_begin(OpKind::Restart).expect_err("busy");
    assert!(
        matches!(
            err,
            NotNow::Running {
                kind: OpKind::Restart,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(
        err.to_string()
            .starts_with("a restart is already running ("),
        "{err}"
    );
    assert!(m.can_begin(OpKind::Stop).is_err());
    // A second Begin that slipped through changes nothing.
    assert!(
        m.step(
            Input::Begin {
                kind: OpKind::Stop,
                to_flags: Flags::new()
            },
            1
        )
        .is_empty()
    );

    let stopped = Machine::new(timeouts(), 3, 0);
    assert_eq!(stopped.can_begin(OpKind::Stop), Err(NotNow::AlreadyStopped));
    assert!(stopped.can_begin(OpKind::Start).is_ok());
    assert_eq!(
        ready().can_begin(OpKind::Start),
        Err(NotNow::AlreadyRunning)
    );
}

#[test]
fn late_probe_results_after_a_failure_change_nothing() {
    let mut m = launched();
    m.step(
        Input::RootExited {
            code: Some(1),
            signal: None,
            oom: false,
            port_in_use: false,
        },
        S,
    );
    assert!(m.step(Input::Ready, 2 * S).is_empty());
    assert_eq!(m.phase(), Phase::Failed);
}

#[test]
fn a_stop_cuts_short_a_launch_that_is_warming_up_and_nothing_else() {
    let mut m = launched();
    assert_eq!(m.phase(), Phase::WarmingUp);
    m.step(alive(3), S);
    // Neither another launch nor an adoption may cut in; a stop may.
    assert!(m.can_begin(OpKind::Restart).is_err());
    assert!(m.can_begin(OpKind::Start).is_err());
    assert!(m.can_begin(OpKind::Stop).is_ok());
    let fx = m.step(Input::Abandon, 2 * S);
    assert!(fx.contains(&Effect::Finished {
        outcome: Outcome::Interrupted,
        failure: None,
    }));
    assert_eq!(m.busy(), None);
    let fx = m.step(
        Input::Begin {
            kind: OpKind::Stop,
            to_flags: flags("8"),
        },
        2 * S,
    );
    assert!(fx.contains(&Effect::Sigterm));
    assert_eq!(m.phase(), Phase::Draining);
    // A late probe result changes nothing.
    assert!(m.step(Input::Ready, 3 * S).is_empty());
    assert_eq!(m.phase(), Phase::Draining);
    // A stop does not cut short a restart that is still draining.
    let mut r = restarting();
    assert!(!r.stop_preempts(OpKind::Stop));
    assert!(r.step(Input::Abandon, S).is_empty());
    assert_eq!(r.busy(), Some(OpKind::Restart));
}

#[test]
fn a_cancel_stops_the_restart_before_its_launch_and_not_after() {
    let mut m = restarting();
    assert_eq!(m.phase(), Phase::Draining);
    assert!(m.can_cancel().is_ok());
    let fx = m.step(Input::Cancel, S);
    assert!(!fx.iter().any(|f| matches!(f, Effect::Launch(_))));
    m.step(clean(), 2 * S);
    let mut fx = Vec::new();
    for t in 3..6 {
        fx.extend(m.step(clean(), t * S));
    }
    assert!(
        !fx.iter().any(|f| matches!(f, Effect::Launch(_))),
        "nothing launches: {fx:?}"
    );
    assert_eq!(finished(&fx), Some((Outcome::Cancelled, None)));
    assert_eq!(m.phase(), Phase::Stopped);
    assert!(m.busy().is_none());

    // Once launching, it is too late: the launch goes on.
    let mut m = launched();
    assert_eq!(m.can_cancel(), Err(NotNow::Launching));
    assert!(m.step(Input::Cancel, S).is_empty());
    let fx = m.step(Input::Ready, 2 * S);
    assert_eq!(finished(&fx), Some((Outcome::Succeeded, None)));
    // Nothing to cancel, or a stop: refused.
    assert_eq!(m.can_cancel(), Err(NotNow::NothingRunning));
    m.step(
        Input::Begin {
            kind: OpKind::Stop,
            to_flags: Flags::new(),
        },
        3 * S,
    );
    assert_eq!(m.can_cancel(), Err(NotNow::LaunchesNothing(OpKind::Stop)));
    assert_eq!(
        NotNow::LaunchesNothing(OpKind::Stop).to_string(),
        "the stop launches nothing: it ends with the server stopped"
    );
}
