//! The tagged enums' flat readers (`shared/src/flat.rs`) read every variant as
//! serde's derived reader of the same shape reads it.

use serde::Serialize;
use serde::de::DeserializeOwned;

use shared::flags::{FlagChange, FlagKind, FlagSpec, FlagType};
use shared::restart::{Failure, Holder, LaunchCause};
use shared::sample::NvmlStatus;

/// serde's derived reader for the same shapes, to read against.
mod derived {
    use serde::Deserialize;

    use shared::flags::{FlagKind, FlagType};
    use shared::restart::{Holder, LaunchCause};

    #[derive(Debug, PartialEq, Deserialize)]
    #[serde(tag = "kind", rename_all = "snake_case")]
    pub(super) enum Failure {
        VerifyFailed {
            reason: String,
            holders: Vec<Holder>,
        },
        ForeignHolders {
            holders: Vec<Holder>,
        },
        LaunchFailed {
            #[serde(flatten)]
            cause: Cause,
            log_tail: Vec<String>,
        },
        Crashed {
            code: Option<i32>,
            signal: Option<i32>,
            log_tail: Vec<String>,
        },
        Interrupted,
        Unhealthy {
            issues: Vec<shared::health::HealthIssue>,
        },
    }

    #[derive(Debug, PartialEq, Deserialize)]
    #[serde(tag = "cause", rename_all = "snake_case")]
    pub(super) enum Cause {
        Oom,
        PortInUse {
            holder_pid: Option<u32>,
        },
        Exited {
            code: Option<i32>,
            signal: Option<i32>,
        },
        WarmupTimeout {
            after_ms: u64,
        },
        SpawnError {
            message: String,
        },
        Refused {
            status: u16,
        },
    }

    impl From<Cause> for LaunchCause {
        fn from(c: Cause) -> Self {
            match c {
                Cause::Oom => Self::Oom,
                Cause::PortInUse { holder_pid } => Self::PortInUse { holder_pid },
                Cause::Exited { code, signal } => Self::Exited { code, signal },
                Cause::WarmupTimeout { after_ms } => Self::WarmupTimeout { after_ms },
                Cause::SpawnError { message } => Self::SpawnError { message },
                Cause::Refused { status } => Self::Refused { status },
            }
        }
    }

    #[derive(Debug, PartialEq, Deserialize)]
    pub(super) struct Spec {
        pub(super) name: String,
        pub(super) kind: FlagKind,
        #[serde(flatten)]
        pub(super) ty: FlagType,
        #[serde(default)]
        pub(super) help: Option<String>,
    }
}

fn derived_failure(text: &str) -> Failure {
    match serde_json::from_str::<derived::Failure>(text).expect(text) {
        derived::Failure::VerifyFailed { reason, holders } => {
            Failure::VerifyFailed { reason, holders }
        }
        derived::Failure::ForeignHolders { holders } => Failure::ForeignHolders { holders },
        derived::Failure::LaunchFailed { cause, log_tail } => Failure::LaunchFailed {
            cause: cause.into(),
            log_tail,
        },
        derived::Failure::Crashed {
            code,
            signal,
            log_tail,
        } => Failure::Crashed {
            code,
            signal,
            log_tail,
        },
        derived::Failure::Interrupted => Failure::Interrupted,
        derived::Failure::Unhealthy { issues } => Failure::Unhealthy { issues },
    }
}

/// Written by serde, read back by the flat reader: the same value.
fn round_trip<T: Serialize + DeserializeOwned + PartialEq + std::fmt::Debug>(v: &T) -> String {
    let text = serde_json::to_string(v).expect("json");
    let back: T = serde_json::from_str(&text).expect(&text);
    assert_eq!(&back, v, "{text}");
    text
}

fn holder() -> Holder {
    Holder {
        pid: 7,
        user: Some("ml".into()),
        cmdline: vec!["python3".into(), "-m".into(), "sglang".into()],
        gpu_index: 3,
        used_bytes: Some(90 << 30),
        ours: false,
    }
}

#[test]
fn every_failure_reads_as_serde_reads_it() {
    let tail = vec!["CUDA out of memory".to_owned()];
    let causes = [
        LaunchCause::Oom,
        LaunchCause::PortInUse { holder_pid: None },
        LaunchCause::PortInUse {
            holder_pid: Some(9),
        },
        LaunchCause::Exited {
            code: Some(1),
            signal: None,
        },
        LaunchCause::WarmupTimeout { after_ms: 90_000 },
        LaunchCause::SpawnError {
            message: "no such file".into(),
        },
        LaunchCause::Refused { status: 401 },
    ];
    let mut all = vec![
        Failure::VerifyFailed {
            reason: "GPU 0 at 812 MiB".into(),
            holders: vec![holder()],
        },
        Failure::ForeignHolders {
            holders: vec![holder(), holder()],
        },
        Failure::Crashed {
            code: None,
            signal: Some(9),
            log_tail: tail.clone(),
        },
        Failure::Interrupted,
        Failure::Unhealthy {
            issues: vec![shared::health::HealthIssue {
                gpu_index: 3,
                reason: shared::health::HealthReason::Xid,
                detail: "XID 79 at 12:03:04 UTC".into(),
            }],
        },
    ];
    all.extend(causes.into_iter().map(|cause| Failure::LaunchFailed {
        cause,
        log_tail: tail.clone(),
    }));
    for f in &all {
        let text = round_trip(f);
        assert_eq!(derived_failure(&text), *f, "{text}");
    }
}

#[test]
fn fields_in_any_order_and_a_missing_one_named() {
    let f: Failure = serde_json::from_str(
        r#"{"log_tail":[],"after_ms":5,"cause":"warmup_timeout","kind":"launch_failed"}"#,
    )
    .expect("any order");
    assert_eq!(
        f,
        Failure::LaunchFailed {
            cause: LaunchCause::WarmupTimeout { after_ms: 5 },
            log_tail: vec![]
        }
    );
    for (text, field) in [
        (
            r#"{"kind":"launch_failed","cause":"refused","log_tail":[]}"#,
            "status",
        ),
        (r#"{"kind":"launch_failed","log_tail":[]}"#, "cause"),
        (r#"{"kind":"verify_failed","holders":[]}"#, "reason"),
        (r#"{"state":"ok","library":"x"}"#, "simulated"),
    ] {
        let err = if text.contains("state") {
            serde_json::from_str::<NvmlStatus>(text)
                .map(|_| ())
                .expect_err(text)
        } else {
            serde_json::from_str::<Failure>(text)
                .map(|_| ())
                .expect_err(text)
        };
        assert!(
            err.to_string()
                .contains(&format!("missing field `{field}`")),
            "{err}"
        );
    }
    let err = serde_json::from_str::<Failure>(r#"{"kind":"melted"}"#).expect_err("tag");
    assert!(
        err.to_string().contains("unknown variant `melted`"),
        "{err}"
    );
}

#[test]
fn nvml_status_and_flag_changes_round_trip() {
    for s in [
        NvmlStatus::Ok {
            library: "libnvidia-ml.so.1".into(),
            driver_version: Some("550.54".into()),
            nvml_version: None,
            cuda_driver_version: Some(12040),
            simulated: true,
        },
        NvmlStatus::Unavailable {
            library: "libnvidia-ml.so.1".into(),
            reason: "not found".into(),
        },
    ] {
        round_trip(&s);
    }
    for c in [
        FlagChange::Added {
            name: "--ep-size".into(),
            value: "8".into(),
        },
        FlagChange::Removed {
            name: "X".into(),
            value: "1".into(),
        },
        FlagChange::Changed {
            name: "--tp".into(),
            from: "4".into(),
            to: "8".into(),
        },
    ] {
        round_trip(&c);
    }
}

#[test]
fn flag_specs_read_as_serde_reads_them() {
    let specs = [
        FlagType::Bool,
        FlagType::Int {
            min: -3,
            max: i64::MAX,
        },
        FlagType::Float {
            min: 0.0,
            max: 0.95,
        },
        FlagType::Enum {
            values: vec!["fp8".into(), "bf16".into()],
        },
    ]
    .into_iter()
    .enumerate()
    .map(|(i, ty)| FlagSpec {
        name: format!("--f{i}"),
        kind: FlagKind::Arg,
        ty,
        help: (i % 2 == 0).then(|| "what it does".to_owned()),
    });
    for spec in specs {
        let text = round_trip(&spec);
        let d: derived::Spec = serde_json::from_str(&text).expect(&text);
        assert_eq!(
            (d.name, d.kind, d.ty, d.help),
            (spec.name, spec.kind, spec.ty, spec.help)
        );
    }
    // A float flag's integral bounds read as floats, as `f64` reads them.
    let s: FlagSpec =
        serde_json::from_str(r#"{"name":"x","kind":"env","type":"float","min":0,"max":1}"#)
            .expect("float");
    assert_eq!(s.ty, FlagType::Float { min: 0.0, max: 1.0 });
    let err = serde_json::from_str::<FlagSpec>(
        r#"{"name":"x","kind":"env","type":"int","min":0.5,"max":1}"#,
    )
    .expect_err("fraction");
    assert!(err.to_string().contains("not an integer"), "{err}");
}
