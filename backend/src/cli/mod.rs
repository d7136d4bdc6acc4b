//! The client commands of the `drainwatch` binary: `status`, `restart`, `bench`
//! and `watch` talk to a running drainwatch through its HTTP API and `/ws`, the
//! way any script could, under the same tokens and roles as the browser.
//!
//! - [`client`]: the HTTP and WebSocket client, and how a refusal maps to an exit code.
//! - [`render`]: plain-text tables for the terminal.
//! - [`status`], [`restart`], [`bench`], [`watch`], [`campaign`]: one command each.
//!
//! Results go to stdout (text, or one line of JSON with `--json`); progress and
//! errors go to stderr, so `drainwatch restart --yes --json | jq` sees only JSON.

mod bench;
mod campaign;
pub(crate) mod client;
mod group;
pub(crate) mod hooks;
mod render;
mod restart;
mod status;
mod watch;

pub use bench::bench;
pub use campaign::campaign;
pub use group::group;
pub use hooks::{not_drained, verify_drained, wait_ready};
pub use restart::restart;
pub use status::status;
pub use watch::watch;

use clap::{Args, ValueEnum};

/// What the client commands' exit codes mean (also in `--help`).
pub const EXIT_CODES: &str = "\
Exit codes:
  0   done (for restart: the server is ready; for bench: the run succeeded)
  1   unexpected error
  2   bad command line, or drainwatch refused the request as invalid (400, 404, 413)
  3   drainwatch cannot be reached, or the connection was lost
  4   not allowed: no or wrong token (401), or the role may not do this (403)
  5   busy or stale: another operation runs, the server changed (409), or too many requests (429)
  10  restart failed: GPU memory did not come back (nothing was launched)
  11  restart refused: a foreign process holds GPU memory the server needs
  12  launch failed: out of GPU memory
  13  launch failed: the port is in use
  14  launch failed: the server exited during warm-up, or could not be started
  15  launch failed: not ready within the warm-up timeout
  16  the operation was interrupted or cancelled, or the server crashed
  17  launch refused: the health check found a GPU unhealthy (XID, row remap, ECC, PCIe)
  18  a GPU needs a person: memory the driver leaked, or a process SIGKILL cannot end (reset the GPU or reboot)
  20  benchmark failed or was interrupted
  21  benchmark cancelled
  22  benchmark ran, but the correctness check failed
  23  campaign done, but some steps failed
  24  campaign stopped by its failure policy
  25  campaign cancelled
  26  campaign paused (by an operator, or a foreign process holds GPU memory)
  27  verify-drained: the server's processes or GPU memory still there at the timeout
  28  group restart failed on a node (named with its reason; the record says what each node did)
  130 stopped waiting (Ctrl-C); the operation goes on in drainwatch";

/// How a client command ended: its process exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    Ok,
    Error,
    Usage,
    Unreachable,
    NotAllowed,
    Busy,
    VerifyFailed,
    ForeignHolders,
    Oom,
    PortInUse,
    Exited,
    WarmupTimeout,
    Interrupted,
    Unhealthy,
    NeedsPerson,
    BenchFailed,
    BenchCancelled,
    WrongAnswer,
    CampaignFailures,
    CampaignStopped,
    CampaignCancelled,
    CampaignPaused,
    NotDrained,
    GroupFailed,
    StoppedWaiting,
}

impl Exit {
    pub fn code(self) -> i32 {
        match self {
            Self::Ok => 0,
            Self::Error => 1,
            Self::Usage => 2,
            Self::Unreachable => 3,
            Self::NotAllowed => 4,
            Self::Busy => 5,
            Self::VerifyFailed => 10,
            Self::ForeignHolders => 11,
            Self::Oom => 12,
            Self::PortInUse => 13,
            Self::Exited => 14,
            Self::WarmupTimeout => 15,
            Self::Interrupted => 16,
            Self::Unhealthy => 17,
            Self::NeedsPerson => 18,
            Self::BenchFailed => 20,
            Self::BenchCancelled => 21,
            Self::WrongAnswer => 22,
            Self::CampaignFailures => 23,
            Self::CampaignStopped => 24,
            Self::CampaignCancelled => 25,
            Self::CampaignPaused => 26,
            Self::NotDrained => 27,
            Self::GroupFailed => 28,
            Self::StoppedWaiting => 130,
        }
    }
}

/// A client command that could not do its work: printed as `error: …`.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct CliError {
    pub exit: Exit,
    pub message: String,
}

impl CliError {
    pub fn new(exit: Exit, message: impl Into<String>) -> Self {
        Self {
            exit,
            message: message.into(),
        }
    }
}

/// Where drainwatch is and who is asking; shared by every client command.
#[derive(Debug, Clone, Args)]
pub struct Remote {
    /// The drainwatch to talk to (its address, or the public URL behind a proxy).
    #[arg(
        long,
        env = "DRAINWATCH_URL",
        default_value = "http://127.0.0.1:7878",
        global = true
    )]
    pub url: String,
    /// A bearer token (see `drainwatch token`). Prefer the environment
    /// variable: a command-line argument is visible to every user in `ps`.
    #[arg(long, env = "DRAINWATCH_TOKEN", hide_env_values = true, global = true)]
    pub token: Option<String>,
    /// Print the result as one line of JSON (for `watch`, one line per message).
    #[arg(long, global = true)]
    pub json: bool,
}

/// `drainwatch status`.
#[derive(Debug, Clone, Args)]
#[command(after_help = EXIT_CODES)]
pub struct StatusArgs {
    #[command(flatten)]
    pub remote: Remote,
}

/// `drainwatch restart`.
#[derive(Debug, Clone, Args)]
#[command(after_help = EXIT_CODES)]
pub struct RestartArgs {
    #[command(flatten)]
    pub remote: Remote,
    /// Set an allow-listed flag for the new launch, e.g. `--flag --tp=8` or
    /// `--flag SGLANG_OPT_USE_TILELANG_INDEXER=1`. Flags not named keep their value.
    #[arg(long = "flag", value_name = "NAME=VALUE", value_parser = parse_flag, allow_hyphen_values = true)]
    pub flags: Vec<(String, String)>,
    /// Put a flag back to the configuration's default.
    #[arg(long, value_name = "NAME", allow_hyphen_values = true)]
    pub reset: Vec<String>,
    /// Do not ask for the server's name to confirm (for scripts).
    #[arg(long, short = 'y')]
    pub yes: bool,
    /// Return once drainwatch accepted the restart, without waiting for the end.
    #[arg(long)]
    pub no_wait: bool,
    /// Launch although the health check refuses these GPUs (`--override-health
    /// "GPU 3"`): name exactly the GPUs it refuses. For this launch only; audited.
    #[arg(long, value_name = "GPUS")]
    pub override_health: Option<String>,
}

/// `drainwatch verify-drained`.
#[derive(Debug, Clone, Args)]
#[command(after_help = EXIT_CODES)]
pub struct VerifyDrainedArgs {
    #[command(flatten)]
    pub remote: Remote,
    /// The GPUs to check (`--gpus 0,1`); default: the managed server's, else all.
    #[arg(long, value_delimiter = ',')]
    pub gpus: Option<Vec<u32>>,
    /// How long to wait for the server to be gone (`90s`, `5m`).
    #[arg(long, default_value = "120s", value_parser = crate::clock::parse_duration)]
    pub timeout: std::time::Duration,
    /// How far above its idle baseline a GPU may be and count as drained (MiB).
    #[arg(long, default_value_t = 64)]
    pub tolerance_mib: u64,
}

/// `drainwatch wait-ready`.
#[derive(Debug, Clone, Args)]
#[command(after_help = EXIT_CODES)]
pub struct WaitReadyArgs {
    /// The server's config (the file `drainwatch --config` takes): its
    /// readiness probe, port and API key.
    #[arg(long)]
    pub config: std::path::PathBuf,
    /// How long to wait for a completion to come back (`90s`, `10m`).
    #[arg(long, default_value = "600s", value_parser = crate::clock::parse_duration)]
    pub timeout: std::time::Duration,
}

/// `drainwatch bench`: settings not given take the server's configured defaults.
#[derive(Debug, Clone, Args)]
#[command(after_help = EXIT_CODES)]
pub struct BenchArgs {
    #[command(flatten)]
    pub remote: Remote,
    /// Concurrency: one level, or several for a sweep (`-c 1,4,16,64`).
    #[arg(long, short = 'c', value_delimiter = ',', num_args = 1..)]
    pub concurrency: Vec<u32>,
    /// Requests per repeat, after warm-up.
    #[arg(long)]
    pub prompts: Option<u32>,
    /// Prompt length in tokens.
    #[arg(long)]
    pub input_len: Option<u32>,
    /// Output length in tokens.
    #[arg(long)]
    pub output_len: Option<u32>,
    /// Requests sent first at each concurrency and not counted.
    #[arg(long)]
    pub warmup: Option<u32>,
    /// Repeats per concurrency (at least 3).
    #[arg(long)]
    pub repeats: Option<u32>,
    /// The endpoint to load.
    #[arg(long, value_enum)]
    pub api: Option<ApiArg>,
    /// Open loop: requests per second, whatever the server's pace; several
    /// for a sweep (`--request-rate 2,4,8`). Replaces `--concurrency`.
    #[arg(long, value_delimiter = ',', num_args = 1.., conflicts_with = "concurrency")]
    pub request_rate: Vec<f64>,
    /// Open loop: the gamma shape of the gaps between arrivals (1: Poisson;
    /// lower is burstier).
    #[arg(long, requires = "request_rate")]
    pub burstiness: Option<f64>,
    /// Open loop: at most this many requests in flight.
    #[arg(long, requires = "request_rate")]
    pub max_concurrency: Option<u32>,
    /// Goodput: a request is good with time to first token at most this (ms)…
    #[arg(long)]
    pub slo_ttft_ms: Option<f64>,
    /// …time per output token at most this (ms)…
    #[arg(long)]
    pub slo_tpot_ms: Option<f64>,
    /// …and the whole request at most this (ms). Any of the three replaces the
    /// server's configured SLOs.
    #[arg(long)]
    pub slo_e2e_ms: Option<f64>,
    /// A prompt asked before the load; its answer must contain `--expect`.
    #[arg(long, requires = "expect")]
    pub check_prompt: Option<String>,
    /// What the answer to `--check-prompt` must contain (case-insensitive).
    #[arg(long, requires = "check_prompt")]
    pub expect: Option<String>,
    /// Return once drainwatch accepted the run, without waiting for the results.
    #[arg(long)]
    pub no_wait: bool,
    /// Cancel the running benchmark instead of starting one.
    #[arg(long, conflicts_with_all = ["concurrency", "prompts", "input_len", "output_len", "warmup", "repeats", "api", "check_prompt", "no_wait", "request_rate", "slo_ttft_ms", "slo_tpot_ms", "slo_e2e_ms"])]
    pub cancel: bool,
}

/// `--api`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ApiArg {
    /// `/v1/completions`.
    Completions,
    /// `/v1/chat/completions`.
    Chat,
    /// SGLang's native `/generate`, which counts the tokens of every chunk.
    Generate,
}

/// `drainwatch campaign`.
#[derive(Debug, Clone, Args)]
#[command(after_help = EXIT_CODES)]
pub struct CampaignArgs {
    #[command(flatten)]
    pub remote: Remote,
    #[command(subcommand)]
    pub verb: CampaignVerb,
}

/// `drainwatch group` (at a hub: `--url` is the hub's).
#[derive(Debug, Clone, Args)]
#[command(after_help = EXIT_CODES)]
pub struct GroupArgs {
    #[command(flatten)]
    pub remote: Remote,
    #[command(subcommand)]
    pub verb: GroupVerb,
}

/// What `drainwatch group` does.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum GroupVerb {
    /// The hub's groups and deployments, and its newest coordinated restarts.
    List,
    /// Restart a group (a server that spans nodes) or a deployment as one
    /// coordinated operation and follow it node by node to its end.
    Restart {
        /// The group's or deployment's name.
        name: String,
        /// Set an allow-listed flag on every node, e.g. `--flag --tp=16`.
        #[arg(long = "flag", value_name = "NAME=VALUE", value_parser = parse_flag, allow_hyphen_values = true)]
        flags: Vec<(String, String)>,
        /// Put a flag back to each node's default.
        #[arg(long, value_name = "NAME", allow_hyphen_values = true)]
        reset: Vec<String>,
        /// Do not ask for the name to confirm (for scripts).
        #[arg(long, short = 'y')]
        yes: bool,
        /// Return once the hub began it, without following it.
        #[arg(long)]
        no_wait: bool,
    },
}

/// What `drainwatch campaign` does.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum CampaignVerb {
    /// Start the plan in FILE (TOML; JSON if it ends in `.json`) and follow it
    /// to its end.
    Start {
        /// The plan.
        plan: std::path::PathBuf,
        /// Only check the plan and show its steps, in the order they would run.
        #[arg(long)]
        dry_run: bool,
        /// Return once drainwatch accepted it, without following it.
        #[arg(long)]
        no_wait: bool,
    },
    /// Show a campaign's steps, results and effects (the newest without ID).
    Status { id: Option<i64> },
    /// Pause after the running step (the newest campaign without ID).
    Pause { id: Option<i64> },
    /// Go on from where it paused.
    Resume { id: Option<i64> },
    /// Stop now: a running benchmark is cancelled, the steps left are skipped.
    Cancel { id: Option<i64> },
}

/// `drainwatch watch`.
#[derive(Debug, Clone, Args)]
#[command(after_help = EXIT_CODES)]
pub struct WatchArgs {
    #[command(flatten)]
    pub remote: Remote,
}

/// `NAME=VALUE`, split at the first `=` after the name (a name never holds one).
fn parse_flag(s: &str) -> Result<(String, String), NotNameValue> {
    match s.split_once('=') {
        Some((name, value)) if !name.trim().is_empty() => {
            Ok((name.trim().to_owned(), value.to_owned()))
        }
        _ => Err(NotNameValue(s.to_owned())),
    }
}

/// A `--flag` that is not `NAME=VALUE`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is not NAME=VALUE (e.g. --flag --tp=8; --reset NAME for the default)")]
pub struct NotNameValue(String);

/// One line of JSON on stdout.
fn print_json<T: serde::Serialize>(value: &T) -> Result<(), CliError> {
    let line = serde_json::to_string(value)
        .map_err(|e| CliError::new(Exit::Error, format!("cannot write JSON: {e}")))?;
    println!("{line}");
    Ok(())
}

/// The result: one line of JSON, or `text`'s rendering.
fn show<T: serde::Serialize>(
    json: bool,
    value: &T,
    text: fn(&T) -> String,
) -> Result<(), CliError> {
    if json {
        print_json(value)
    } else {
        print!("{}", text(value));
        Ok(())
    }
}

/// Waits for `done`, unless Ctrl-C comes first: then `None`, and a word that
/// `what` goes on in drainwatch (only the waiting stops).
async fn until_done<T>(
    what: &str,
    interrupt: &mut Interrupt,
    done: impl std::future::Future<Output = Result<T, CliError>>,
) -> Result<Option<T>, CliError> {
    tokio::select! {
        r = done => r.map(Some),
        () = interrupt.pressed() => {
            eprintln!("stopped waiting: {what} goes on in drainwatch (`drainwatch watch` follows it)");
            Ok(None)
        }
    }
}

/// Ctrl-C, caught from the moment this is made: one pressed before anything
/// waits for it is kept, not lost, and does not kill the process mid-write.
#[derive(Debug)]
struct Interrupt(Option<tokio::signal::unix::Signal>);

impl Interrupt {
    fn catch() -> Self {
        Self(tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt()).ok())
    }

    /// Waits for Ctrl-C (forever if the handler could not be installed).
    async fn pressed(&mut self) {
        if let Some(s) = &mut self.0
            && s.recv().await.is_some()
        {
            return;
        }
        std::future::pending::<()>().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_split_at_the_first_equals() {
        assert_eq!(
            parse_flag("--tp=8"),
            Ok(("--tp".to_owned(), "8".to_owned()))
        );
        assert_eq!(parse_flag("X=a=b"), Ok(("X".to_owned(), "a=b".to_owned())));
        assert_eq!(parse_flag("X="), Ok(("X".to_owned(), String::new())));
        assert!(parse_flag("--tp").is_err());
        assert!(parse_flag("=1").is_err());
    }

    #[test]
    fn exit_codes_are_distinct_and_documented() {
        let all = [
            Exit::Ok,
            Exit::Error,
            Exit::Usage,
            Exit::Unreachable,
            Exit::NotAllowed,
            Exit::Busy,
            Exit::VerifyFailed,
            Exit::ForeignHolders,
            Exit::Oom,
            Exit::PortInUse,
            Exit::Exited,
            Exit::WarmupTimeout,
            Exit::Interrupted,
            Exit::Unhealthy,
            Exit::NeedsPerson,
            Exit::BenchFailed,
            Exit::BenchCancelled,
            Exit::WrongAnswer,
            Exit::CampaignFailures,
            Exit::CampaignStopped,
            Exit::CampaignCancelled,
            Exit::CampaignPaused,
            Exit::NotDrained,
            Exit::GroupFailed,
            Exit::StoppedWaiting,
        ];
        let codes: std::collections::BTreeSet<i32> = all.iter().map(|e| e.code()).collect();
        assert_eq!(codes.len(), all.len());
        for c in codes {
            assert!(
                EXIT_CODES.contains(&format!("\n  {c} ")),
                "{c} is not in EXIT_CODES"
            );
        }
    }
}
