//! How the tagged enums are read: each from one flat struct.
//!
//! [`Failure`], [`NvmlStatus`], [`FlagChange`] and [`FlagSpec`] are written as
//! one JSON object with a tag field (`"kind"`, `"state"`, `"change"`, `"type"`)
//! beside the variant's own fields. serde's derived reader for such an object
//! cannot read the fields before it knows the tag, so it buffers the whole object
//! into a generic tree and reads every variant again from that tree, a second
//! reader for each type inside, the browser's bundle's largest single part. Here
//! each is read as one struct that holds every variant's fields, then checked
//! against its tag: one reader, any field order, the same values. A field the
//! variant needs and the object lacks is refused by name, as serde's reader
//! refuses it; fields of other variants are ignored, as unknown fields are.
//! The writing side is serde's own, so the golden fixtures hold the wire format,
//! and `tests` below read every variant both ways.

use std::fmt;

use serde::Deserialize;
use serde::de::{self, Deserializer, Visitor};

use crate::flags::{FlagChange, FlagKind, FlagSpec, FlagType};
use crate::restart::{Failure, Holder, LaunchCause};
use crate::sample::NvmlStatus;

/// A field the variant needs and the object lacks.
#[derive(Debug)]
pub struct Missing(&'static str);

impl fmt::Display for Missing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "missing field `{}`", self.0)
    }
}

fn need<T>(value: Option<T>, field: &'static str) -> Result<T, Missing> {
    value.ok_or(Missing(field))
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "snake_case")]
enum FailureKind {
    VerifyFailed,
    ForeignHolders,
    LaunchFailed,
    Crashed,
    Interrupted,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "snake_case")]
enum CauseKind {
    Oom,
    PortInUse,
    Exited,
    WarmupTimeout,
    SpawnError,
    Refused,
}

/// Every field of every [`Failure`] (and, for a failed launch, [`LaunchCause`]).
#[derive(Debug, Deserialize)]
pub struct FailureFields {
    kind: FailureKind,
    reason: Option<String>,
    holders: Option<Vec<Holder>>,
    cause: Option<CauseKind>,
    holder_pid: Option<u32>,
    code: Option<i32>,
    signal: Option<i32>,
    after_ms: Option<u64>,
    message: Option<String>,
    status: Option<u16>,
    log_tail: Option<Vec<String>>,
}

impl TryFrom<FailureFields> for Failure {
    type Error = Missing;

    fn try_from(f: FailureFields) -> Result<Self, Missing> {
        Ok(match f.kind {
            FailureKind::VerifyFailed => Self::VerifyFailed {
                reason: need(f.reason, "reason")?,
                holders: need(f.holders, "holders")?,
            },
            FailureKind::ForeignHolders => Self::ForeignHolders {
                holders: need(f.holders, "holders")?,
            },
            FailureKind::LaunchFailed => {
                let cause = match need(f.cause, "cause")? {
                    CauseKind::Oom => LaunchCause::Oom,
                    CauseKind::PortInUse => LaunchCause::PortInUse {
                        holder_pid: f.holder_pid,
                    },
                    CauseKind::Exited => LaunchCause::Exited {
                        code: f.code,
                        signal: f.signal,
                    },
                    CauseKind::WarmupTimeout => LaunchCause::WarmupTimeout {
                        after_ms: need(f.after_ms, "after_ms")?,
                    },
                    CauseKind::SpawnError => LaunchCause::SpawnError {
                        message: need(f.message, "message")?,
                    },
                    CauseKind::Refused => LaunchCause::Refused {
                        status: need(f.status, "status")?,
                    },
                };
                Self::LaunchFailed {
                    cause,
                    log_tail: need(f.log_tail, "log_tail")?,
                }
            }
            FailureKind::Crashed => Self::Crashed {
                code: f.code,
                signal: f.signal,
                log_tail: need(f.log_tail, "log_tail")?,
            },
            FailureKind::Interrupted => Self::Interrupted,
        })
    }
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "snake_case")]
enum NvmlState {
    Ok,
    Unavailable,
}

/// Every field of both [`NvmlStatus`] states.
#[derive(Debug, Deserialize)]
pub struct NvmlFields {
    state: NvmlState,
    library: String,
    driver_version: Option<String>,
    nvml_version: Option<String>,
    cuda_driver_version: Option<i32>,
    simulated: Option<bool>,
    reason: Option<String>,
}

impl TryFrom<NvmlFields> for NvmlStatus {
    type Error = Missing;

    fn try_from(f: NvmlFields) -> Result<Self, Missing> {
        Ok(match f.state {
            NvmlState::Ok => Self::Ok {
                library: f.library,
                driver_version: f.driver_version,
                nvml_version: f.nvml_version,
                cuda_driver_version: f.cuda_driver_version,
                simulated: need(f.simulated, "simulated")?,
            },
            NvmlState::Unavailable => Self::Unavailable {
                library: f.library,
                reason: need(f.reason, "reason")?,
            },
        })
    }
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "snake_case")]
enum ChangeKind {
    Added,
    Removed,
    Changed,
}

/// Every field of every [`FlagChange`].
#[derive(Debug, Deserialize)]
pub struct ChangeFields {
    change: ChangeKind,
    name: String,
    value: Option<String>,
    from: Option<String>,
    to: Option<String>,
}

impl TryFrom<ChangeFields> for FlagChange {
    type Error = Missing;

    fn try_from(f: ChangeFields) -> Result<Self, Missing> {
        let name = f.name;
        Ok(match f.change {
            ChangeKind::Added => Self::Added {
                name,
                value: need(f.value, "value")?,
            },
            ChangeKind::Removed => Self::Removed {
                name,
                value: need(f.value, "value")?,
            },
            ChangeKind::Changed => Self::Changed {
                name,
                from: need(f.from, "from")?,
                to: need(f.to, "to")?,
            },
        })
    }
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "snake_case")]
enum TypeKind {
    Bool,
    Int,
    Float,
    Enum,
}

/// A bound as JSON wrote it: an integer stays exact, as `i64` reads it.
#[derive(Debug, Clone, Copy)]
enum Num {
    Int(i64),
    Float(f64),
}

impl<'de> Deserialize<'de> for Num {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct NumVisitor;
        impl Visitor<'_> for NumVisitor {
            type Value = Num;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a number")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Num, E> {
                Ok(Num::Int(v))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Num, E> {
                Ok(i64::try_from(v).map_or(Num::Float(v as f64), Num::Int))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Num, E> {
                Ok(Num::Float(v))
            }
        }
        d.deserialize_any(NumVisitor)
    }
}

/// An integer flag's bound: a fraction or an integer past `i64` is refused.
fn int(bound: Option<Num>, field: &'static str) -> Result<i64, BoundError> {
    match need(bound, field)? {
        Num::Int(v) => Ok(v),
        Num::Float(_) => Err(BoundError::NotInteger(field)),
    }
}

fn float(bound: Option<Num>, field: &'static str) -> Result<f64, Missing> {
    Ok(match need(bound, field)? {
        Num::Int(v) => v as f64,
        Num::Float(v) => v,
    })
}

/// Why a [`FlagSpec`]'s object does not read.
#[derive(Debug)]
pub enum BoundError {
    Missing(Missing),
    NotInteger(&'static str),
}

impl From<Missing> for BoundError {
    fn from(m: Missing) -> Self {
        Self::Missing(m)
    }
}

impl fmt::Display for BoundError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Missing(m) => m.fmt(f),
            Self::NotInteger(field) => write!(f, "`{field}` of an int flag is not an integer"),
        }
    }
}

/// Every field of a [`FlagSpec`] with any [`FlagType`].
#[derive(Debug, Deserialize)]
pub struct SpecFields {
    name: String,
    kind: FlagKind,
    #[serde(rename = "type")]
    ty: TypeKind,
    min: Option<Num>,
    max: Option<Num>,
    values: Option<Vec<String>>,
    help: Option<String>,
}

impl TryFrom<SpecFields> for FlagSpec {
    type Error = BoundError;

    fn try_from(f: SpecFields) -> Result<Self, BoundError> {
        let ty = match f.ty {
            TypeKind::Bool => FlagType::Bool,
            TypeKind::Int => FlagType::Int {
                min: int(f.min, "min")?,
                max: int(f.max, "max")?,
            },
            TypeKind::Float => FlagType::Float {
                min: float(f.min, "min")?,
                max: float(f.max, "max")?,
            },
            TypeKind::Enum => FlagType::Enum {
                values: need(f.values, "values")?,
            },
        };
        Ok(Self {
            name: f.name,
            kind: f.kind,
            ty,
            help: f.help,
        })
    }
}

#[cfg(test)]
mod tests {
    use serde::Serialize;
    use serde::de::DeserializeOwned;

    use crate::flags::{FlagChange, FlagKind, FlagSpec, FlagType};
    use crate::restart::{Failure, Holder, LaunchCause};
    use crate::sample::NvmlStatus;

    /// serde's derived reader for the same shapes, to read against.
    mod derived {
        use serde::Deserialize;

        use crate::flags::{FlagKind, FlagType};
        use crate::restart::{Holder, LaunchCause};

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
}
