//! Why an operation stopped short or the server died ([`Failure`]), why a
//! launch failed ([`LaunchCause`]), and the processes a failure names
//! ([`Holder`]). Re-exported from [`crate::restart`].

use serde::{Deserialize, Serialize};

use crate::flat::{BadField, need};
use crate::health::HealthIssue;

/// A process that holds GPU memory, named in a failure.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Holder {
    pub pid: u32,
    pub user: Option<String>,
    pub cmdline: Vec<String>,
    pub gpu_index: u32,
    pub used_bytes: Option<u64>,
    /// True for a process of the managed server (it survived the kill), false for a
    /// foreign one.
    pub ours: bool,
}

/// Memory a GPU holds with no process alive on it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeakedGpu {
    pub gpu_index: u32,
    pub used_bytes: u64,
    /// Its idle baseline, as drainwatch measured it.
    pub baseline_bytes: u64,
}

/// A process of ours that SIGKILL did not end, as `/proc` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StuckProcess {
    pub pid: u32,
    /// Its state letter (`D`: uninterruptible sleep).
    pub state: String,
    /// Where in the kernel it sleeps (`/proc/<pid>/wchan`), when the kernel says.
    pub wchan: Option<String>,
    /// The GPUs it still holds memory on.
    pub gpus: Vec<u32>,
}

/// Why a launch failed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "cause", rename_all = "snake_case")]
pub enum LaunchCause {
    /// The server ran out of GPU memory while warming up.
    Oom,
    /// Something already listens on the server's port.
    PortInUse { holder_pid: Option<u32> },
    /// The server exited on its own during warm-up.
    Exited {
        code: Option<i32>,
        signal: Option<i32>,
    },
    /// Not ready within the warm-up timeout.
    WarmupTimeout { after_ms: u64 },
    /// The program could not be started at all.
    SpawnError { message: String },
    /// The server refused the readiness probe's request with this HTTP status
    /// (401 or 403): it wants an API key drainwatch was not given, or another.
    Refused { status: u16 },
}

/// Why an operation stopped short, or the server died.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", try_from = "FailureFields")]
pub enum Failure {
    /// GPU memory did not return to baseline in time (or a process of ours survived
    /// SIGKILL); nothing was launched.
    VerifyFailed {
        reason: String,
        holders: Vec<Holder>,
    },
    /// A foreign process holds memory on a GPU the server needs; nothing was launched.
    ForeignHolders { holders: Vec<Holder> },
    LaunchFailed {
        #[serde(flatten)]
        cause: LaunchCause,
        log_tail: Vec<String>,
    },
    /// The server exited outside an operation.
    Crashed {
        code: Option<i32>,
        signal: Option<i32>,
        log_tail: Vec<String>,
    },
    /// drainwatch itself stopped in the middle of the operation.
    Interrupted,
    /// The server's GPUs failed the health check before launch; nothing was
    /// launched. An operator may override it once, typing the GPUs named.
    Unhealthy { issues: Vec<HealthIssue> },
    /// Every process is gone, yet GPUs hold memory: the driver did not
    /// release it (a driver-side leak). No restart frees it; a GPU reset does.
    MemoryLeaked { gpus: Vec<LeakedGpu> },
    /// Processes of ours survived SIGKILL in uninterruptible sleep, stuck
    /// inside the driver. No signal ends them; a reboot does.
    Unkillable { processes: Vec<StuckProcess> },
}

impl Failure {
    /// One line for tables and logs.
    pub fn summary(&self) -> String {
        match self {
            Self::VerifyFailed { reason, .. } => format!("verify failed: {reason}"),
            Self::ForeignHolders { holders } => {
                let pids: Vec<String> = holders.iter().map(|h| h.pid.to_string()).collect();
                format!("foreign process holds GPU memory (pid {})", pids.join(", "))
            }
            Self::LaunchFailed { cause, .. } => match cause {
                LaunchCause::Oom => "launch failed: out of GPU memory".to_owned(),
                LaunchCause::PortInUse { holder_pid } => match holder_pid {
                    Some(p) => format!("launch failed: port in use (pid {p})"),
                    None => "launch failed: port in use".to_owned(),
                },
                LaunchCause::Exited { code, signal } => {
                    format!("launch failed: {}", exit_text(*code, *signal))
                }
                LaunchCause::WarmupTimeout { after_ms } => {
                    format!("launch failed: not ready after {} s", after_ms / 1000)
                }
                LaunchCause::SpawnError { message } => format!("launch failed: {message}"),
                LaunchCause::Refused { status } => format!(
                    "launch failed: the server refused the readiness request ({}); it wants an API key: \
                     set server.api_key_file (or api_key_env) to the key it was started with",
                    match status {
                        401 => "401 Unauthorized".to_owned(),
                        403 => "403 Forbidden".to_owned(),
                        s => format!("HTTP {s}"),
                    }
                ),
            },
            Self::Crashed { code, signal, .. } => format!("crashed: {}", exit_text(*code, *signal)),
            Self::Interrupted => "interrupted: drainwatch stopped during the operation".to_owned(),
            Self::Unhealthy { issues } => {
                let lines: Vec<String> = issues.iter().map(HealthIssue::line).collect();
                format!("refused by the health check: {}", lines.join("; "))
            }
            Self::MemoryLeaked { gpus } => {
                let each: Vec<String> = gpus
                    .iter()
                    .map(|g| {
                        format!(
                            "GPU {} at {} (idle {})",
                            g.gpu_index,
                            crate::units::fmt_bytes(g.used_bytes),
                            crate::units::fmt_bytes(g.baseline_bytes)
                        )
                    })
                    .collect();
                format!("GPU memory held with no process alive: {}", each.join(", "))
            }
            Self::Unkillable { processes } => {
                let each: Vec<String> = processes
                    .iter()
                    .map(|p| match &p.wchan {
                        Some(w) => format!("pid {} (state {}, in {w})", p.pid, p.state),
                        None => format!("pid {} (state {})", p.pid, p.state),
                    })
                    .collect();
                format!("survived SIGKILL, stuck in the kernel: {}", each.join(", "))
            }
        }
    }

    /// What a person must do, for a state no restart can fix (and that no
    /// campaign retries); `None` for every other failure.
    pub fn needs_person(&self) -> Option<String> {
        match self {
            Self::MemoryLeaked { gpus } => {
                let list: Vec<String> = gpus.iter().map(|g| g.gpu_index.to_string()).collect();
                Some(format!(
                    "no restart frees memory the driver leaked: once nothing else runs on it, reset the GPU (`nvidia-smi --gpu-reset -i {}`), or reboot the host",
                    list.join(",")
                ))
            }
            Self::Unkillable { .. } => Some(
                "a process stuck inside the driver ends only with a reboot (a GPU reset is refused while it holds the GPU): drain the host's other work and reboot it"
                    .to_owned(),
            ),
            _ => None,
        }
    }
}

impl Failure {
    /// The failure's kind as its wire name (`verify_failed`), as serde writes
    /// its `kind` tag.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::VerifyFailed { .. } => "verify_failed",
            Self::ForeignHolders { .. } => "foreign_holders",
            Self::LaunchFailed { .. } => "launch_failed",
            Self::Crashed { .. } => "crashed",
            Self::Interrupted => "interrupted",
            Self::Unhealthy { .. } => "unhealthy",
            Self::MemoryLeaked { .. } => "memory_leaked",
            Self::Unkillable { .. } => "unkillable",
        }
    }

    /// The server's own words about why it stopped: the line of its log
    /// tail that says so (see [`error_line`]), for a launch that failed or a
    /// server that crashed.
    pub fn server_said(&self) -> Option<String> {
        match self {
            Self::LaunchFailed { log_tail, .. } | Self::Crashed { log_tail, .. } => {
                error_line(log_tail)
            }
            _ => None,
        }
    }
}

/// The line of a server's log that says why it failed: the first line
/// logged at error level by an engine that marks levels (llama.cpp's
/// `0.00.935.034 E llama_init_from_model: …`, the cause; the lines after it
/// are its consequences), else the last line that names an error (a Python
/// traceback ends with its exception). Cut to 300 characters.
pub fn error_line(tail: &[String]) -> Option<String> {
    let leveled = tail.iter().find_map(|l| {
        let mut words = l.trim_start().splitn(3, ' ');
        let (stamp, level, rest) = (words.next()?, words.next()?, words.next()?);
        let is_stamp = !stamp.is_empty() && stamp.bytes().all(|b| b.is_ascii_digit() || b == b'.');
        (is_stamp && level == "E").then(|| rest.trim().to_owned())
    });
    let named = || {
        tail.iter()
            .rev()
            .find(|l| {
                let l = l.to_ascii_lowercase();
                ["error", "exception", "fatal", "failed"]
                    .iter()
                    .any(|w| l.contains(w))
            })
            .map(|l| l.trim().to_owned())
    };
    leveled
        .or_else(named)
        .filter(|l| !l.is_empty())
        .map(|l| l.chars().take(300).collect())
}

/// "exited with code 1", "killed by signal 9".
pub fn exit_text(code: Option<i32>, signal: Option<i32>) -> String {
    match (code, signal) {
        (_, Some(s)) => format!("killed by signal {s}"),
        (Some(c), None) => format!("exited with code {c}"),
        (None, None) => "exited".to_owned(),
    }
}

// Reading a `Failure`: one flat struct, checked against the tag (see
// [`crate::flat`]).

#[derive(Debug, Deserialize)]
#[serde(rename_all = "snake_case")]
enum FailureKind {
    VerifyFailed,
    ForeignHolders,
    LaunchFailed,
    Crashed,
    Interrupted,
    Unhealthy,
    MemoryLeaked,
    Unkillable,
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
struct FailureFields {
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
    issues: Option<Vec<HealthIssue>>,
    gpus: Option<Vec<LeakedGpu>>,
    processes: Option<Vec<StuckProcess>>,
}

impl TryFrom<FailureFields> for Failure {
    type Error = BadField;

    fn try_from(f: FailureFields) -> Result<Self, BadField> {
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
            FailureKind::Unhealthy => Self::Unhealthy {
                issues: need(f.issues, "issues")?,
            },
            FailureKind::MemoryLeaked => Self::MemoryLeaked {
                gpus: need(f.gpus, "gpus")?,
            },
            FailureKind::Unkillable => Self::Unkillable {
                processes: need(f.processes, "processes")?,
            },
        })
    }
}

#[cfg(test)]
mod engine_words {
    use super::*;

    #[test]
    fn the_server_s_own_error_line_is_found() {
        // llama.cpp: the first error-level line is the cause.
        let llama: Vec<String> = [
            "0.00.612.001 I llama_context: constructing llama_context",
            "0.00.935.034 E llama_init_from_model: quantized V cache requires flash_attn to be enabled",
            "0.00.992.243 E common_fit_params: encountered an error while trying to fit params",
            "0.01.960.487 E cmn  common_init_: failed to create context with model 'm.gguf'",
        ]
        .map(String::from)
        .to_vec();
        let f = Failure::LaunchFailed {
            cause: LaunchCause::Exited {
                code: Some(1),
                signal: None,
            },
            log_tail: llama,
        };
        assert_eq!(
            f.server_said().as_deref(),
            Some("llama_init_from_model: quantized V cache requires flash_attn to be enabled")
        );
        // A Python server: the traceback's last line.
        let py: Vec<String> = [
            "Traceback (most recent call last):",
            "  File \"x.py\", line 3, in <module>",
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
        ]
        .map(String::from)
        .to_vec();
        assert_eq!(
            error_line(&py).as_deref(),
            Some("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB")
        );
        // Nothing that says why: nothing claimed.
        assert_eq!(error_line(&["loading weights".to_owned()]), None);
        assert_eq!(Failure::Interrupted.server_said(), None);
    }
}

#[cfg(test)]
mod needs_person {
    use super::*;

    #[test]
    fn the_verdicts_that_send_for_a_person_read_back_and_say_what_to_do() {
        let leak = Failure::MemoryLeaked {
            gpus: vec![LeakedGpu {
                gpu_index: 3,
                used_bytes: 2 << 30,
                baseline_bytes: 4 << 20,
            }],
        };
        let stuck = Failure::Unkillable {
            processes: vec![StuckProcess {
                pid: 9,
                state: "D".into(),
                wchan: None,
                gpus: vec![0, 1],
            }],
        };
        for f in [&leak, &stuck] {
            let text = serde_json::to_string(f).expect("write");
            let back: Failure = serde_json::from_str(&text).expect("read");
            assert_eq!(&back, f, "{text}");
        }
        assert!(
            serde_json::to_string(&leak)
                .expect("w")
                .contains(r#""kind":"memory_leaked""#)
        );
        // A leak without its GPUs is not one.
        assert!(serde_json::from_str::<Failure>(r#"{"kind":"memory_leaked"}"#).is_err());
        assert!(leak.needs_person().is_some_and(|n| n.contains("-i 3")));
        assert_eq!(
            stuck.summary(),
            "survived SIGKILL, stuck in the kernel: pid 9 (state D)"
        );
        let other = Failure::Interrupted;
        assert!(other.needs_person().is_none());
    }
}
