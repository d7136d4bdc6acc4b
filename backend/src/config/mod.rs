//! drainwatch's settings, as data: how it serves ([`Config`], read from the
//! command line and `DRAINWATCH_*` variables by the binary's clap parser), and
//! the managed server's TOML file ([`file`]) with its flag allow-list
//! ([`flags`]); all validated once at start. Nothing else reads argv, the
//! environment or the file for settings. The bottom of the backend: it
//! imports no module that acts (the redactor's name rules aside).

pub mod file;
pub mod flags;
mod problem;

pub use problem::{BadEnvName, Problem, check_env_name};

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;

use crate::clock::parse_duration;

/// How drainwatch serves.
#[derive(Debug, Clone, Parser)]
#[command(name = "drainwatch", version, about, long_about = None)]
pub struct Config {
    /// Address to serve the UI, API and WebSocket on.
    #[arg(long, env = "DRAINWATCH_BIND", default_value = "127.0.0.1:7878")]
    pub bind: SocketAddr,

    /// How often to read NVML and /proc, in milliseconds (10–60000).
    #[arg(long, env = "DRAINWATCH_SAMPLE_INTERVAL_MS", default_value_t = 100,
          value_parser = clap::value_parser!(u64).range(10..=60_000))]
    pub sample_interval_ms: u64,

    /// The NVML library to load: a path, or a name for the dynamic loader.
    /// Point it at a simulated host's `libnvidia-ml.so.1` to run without a GPU.
    #[arg(long, env = "DRAINWATCH_NVML_LIB", default_value = "libnvidia-ml.so.1")]
    pub nvml_lib: PathBuf,

    /// How much history to keep for late-joining clients (e.g. 90s, 10m; at most 1h),
    /// one point per second.
    #[arg(long, env = "DRAINWATCH_HISTORY", default_value = "10m", value_parser = parse_history)]
    pub history: Duration,

    /// TCP port the managed model server listens on; the process that holds that
    /// listener, and its descendants, are "the server". Others are foreign.
    #[arg(long, env = "DRAINWATCH_SERVER_PORT")]
    pub server_port: Option<u16>,

    /// Log filter, e.g. `info`, `debug`, `drainwatch=debug,tower_http=info`.
    #[arg(long, env = "DRAINWATCH_LOG", default_value = "info")]
    pub log_level: String,

    /// The managed server's configuration (TOML): how to launch it, which flags a
    /// restart may change, timeouts. Without it drainwatch only watches.
    #[arg(long, env = "DRAINWATCH_CONFIG")]
    pub config: Option<PathBuf>,

    /// Where the restart history (SQLite) and launch logs are kept.
    #[arg(long, env = "DRAINWATCH_DATA_DIR", default_value = "drainwatch-data")]
    pub data_dir: PathBuf,

    /// Tokens and roles (TOML, see docs/deploy.md). Without it drainwatch
    /// serves loopback only and every caller may do everything.
    #[arg(long, env = "DRAINWATCH_AUTH")]
    pub auth: Option<PathBuf>,

    /// Where the servers drainwatch launches are contained: `auto` (a subtree
    /// of drainwatch's own cgroup v2, found in /proc/self/cgroup), a path to a
    /// cgroup v2 directory delegated to it, or `off`. Where cgroups cannot be
    /// used, drainwatch falls back to process group and tracked processes, and
    /// says so.
    #[arg(long, env = "DRAINWATCH_CGROUP", default_value = "auto")]
    pub cgroup: CgroupSetting,

    /// Samples buffered per WebSocket client before it is resynced by a snapshot.
    #[arg(long, env = "DRAINWATCH_CLIENT_BUFFER", default_value_t = 64,
          value_parser = clap::value_parser!(u64).range(1..=10_000))]
    pub client_buffer: u64,
}

impl Config {
    pub fn sample_interval(&self) -> Duration {
        Duration::from_millis(self.sample_interval_ms)
    }
}

/// A history length: more than zero, at most an hour (every client gets the
/// whole history on connect, so it must stay a sensible size).
fn parse_history(s: &str) -> Result<Duration, ArgError> {
    let d = parse_duration(s)?;
    if d.is_zero() {
        return Err(ArgError::NoHistory);
    }
    if d > Duration::from_secs(3_600) {
        return Err(ArgError::TooMuchHistory(s.to_owned()));
    }
    Ok(d)
}

/// A command-line value of drainwatch's own settings that clap's types do
/// not check.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ArgError {
    #[error(transparent)]
    Duration(#[from] crate::clock::DurationError),
    #[error("history must be longer than zero")]
    NoHistory,
    #[error("`{0}` is more than 1h of history")]
    TooMuchHistory(String),
    #[error("`{0}` is not auto, off or an absolute path to a cgroup v2 directory")]
    Cgroup(String),
}

/// What `--cgroup` asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CgroupSetting {
    /// drainwatch's own cgroup, found in `/proc/self/cgroup`.
    Auto,
    /// No cgroup containment.
    Off,
    /// This directory of a cgroup v2 hierarchy (a delegated subtree).
    Path(PathBuf),
}

impl std::str::FromStr for CgroupSetting {
    type Err = ArgError;
    fn from_str(s: &str) -> Result<Self, ArgError> {
        match s {
            "auto" => Ok(Self::Auto),
            "off" => Ok(Self::Off),
            p if p.starts_with('/') => Ok(Self::Path(PathBuf::from(p))),
            other => Err(ArgError::Cgroup(other.to_owned())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("10m"), Ok(Duration::from_secs(600)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_duration("1500ms"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("30"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("2h"), Ok(Duration::from_secs(7200)));
        assert!(parse_duration("ten").is_err());
        assert!(parse_duration("5d").is_err());
        assert!(parse_history("0s").is_err());
        assert!(parse_history("2h").is_err());
        assert_eq!(parse_history("1h"), Ok(Duration::from_secs(3600)));
    }

    #[test]
    fn defaults_are_safe() {
        let c = Config::try_parse_from(["drainwatch"]).expect("defaults parse");
        assert!(c.bind.ip().is_loopback());
        assert_eq!(c.bind.port(), 7878);
        assert_eq!(c.sample_interval_ms, 100);
        assert_eq!(c.history, Duration::from_secs(600));
    }

    #[test]
    fn rejects_out_of_range_interval() {
        assert!(Config::try_parse_from(["drainwatch", "--sample-interval-ms", "0"]).is_err());
        assert!(Config::try_parse_from(["drainwatch", "--sample-interval-ms", "x"]).is_err());
    }
}
