//! Each enum's `as_str` (and a failure's `kind`) is the name serde writes for
//! it: the UI's attributes and the CLI's words can never drift from the wire.

use serde::Serialize;
use shared::ProcessRole;
use shared::bench::RunStatus;
use shared::campaign::{CampaignState, StepState};
use shared::failure::{LaunchCause, LeakedGpu, StuckProcess};
use shared::restart::{Failure, OpKind, Outcome, Phase};

fn serde_name<T: Serialize>(v: &T) -> String {
    match serde_json::to_value(v).expect("serializes") {
        serde_json::Value::String(s) => s,
        other => panic!("not a name: {other}"),
    }
}

macro_rules! check_all {
    ($($v:expr),+ $(,)?) => {
        $(assert_eq!($v.as_str(), serde_name(&$v), "{:?}", $v);)+
    };
}

#[test]
fn unit_enums_are_named_as_serde_names_them() {
    use Phase::*;
    check_all!(
        Stopped, Draining, Killing, Verifying, Launching, WarmingUp, Ready, Failed, Crashed
    );
    check_all!(
        Outcome::Running,
        Outcome::Succeeded,
        Outcome::Failed,
        Outcome::Interrupted,
        Outcome::Cancelled
    );
    check_all!(OpKind::Restart, OpKind::Stop, OpKind::Start, OpKind::Adopt);
    check_all!(
        CampaignState::Running,
        CampaignState::Pausing,
        CampaignState::Paused,
        CampaignState::Done,
        CampaignState::Cancelled,
        CampaignState::Stopped
    );
    check_all!(
        StepState::Pending,
        StepState::Restarting,
        StepState::Benchmarking,
        StepState::Done,
        StepState::Reused,
        StepState::Failed,
        StepState::Skipped
    );
    check_all!(
        ProcessRole::Server,
        ProcessRole::Foreign,
        ProcessRole::Outside
    );
    check_all!(
        RunStatus::Running,
        RunStatus::Succeeded,
        RunStatus::Failed,
        RunStatus::Cancelled,
        RunStatus::Interrupted
    );
}

#[test]
fn a_failure_kind_is_its_tag() {
    let all = [
        Failure::VerifyFailed {
            reason: "GPU 0 at 812 MiB".into(),
            holders: Vec::new(),
        },
        Failure::ForeignHolders {
            holders: Vec::new(),
        },
        Failure::LaunchFailed {
            cause: LaunchCause::Oom,
            log_tail: Vec::new(),
        },
        Failure::Crashed {
            code: Some(1),
            signal: None,
            log_tail: Vec::new(),
        },
        Failure::Interrupted,
        Failure::Unhealthy { issues: Vec::new() },
        Failure::MemoryLeaked {
            gpus: vec![LeakedGpu {
                gpu_index: 0,
                used_bytes: 1 << 30,
                baseline_bytes: 4 << 20,
            }],
        },
        Failure::Unkillable {
            processes: vec![StuckProcess {
                pid: 7,
                state: "D".into(),
                wchan: None,
                gpus: vec![0],
            }],
        },
    ];
    for f in &all {
        let tag = serde_json::to_value(f).expect("serializes")["kind"].clone();
        assert_eq!(Some(f.kind()), tag.as_str(), "{f:?}");
    }
}
