//! The managed server's TOML file: how to launch it (a program and an argument
//! vector, never a shell string), how to tell it is ready, how long each stage may
//! take, which flags a restart may change, and which more names than the usual
//! ones (`--api-key`, `*_TOKEN`, … see [`crate::redact`]) hold secrets that
//! drainwatch must never show (`server.redact`), and where the server's API
//! key is ([`api_key`]). Parsed and validated once; every error names the key
//! and what is wrong with it.

mod api_key;
mod bench;
mod health;
mod specs;
#[cfg(test)]
mod tests;
mod webhooks;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use super::flags::AllowList;
use super::problem::{Problem, check_env_name};
use crate::clock::parse_duration;
use crate::redact::SecretNames;
use specs::{RawFlag, flag_spec};

pub use api_key::ApiKey;
pub use bench::{BenchConfig, Engine, TokenizerFile};
pub use health::{HealthPolicy, Policy};
pub use webhooks::{Hook, HookFormat};

/// Why the file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {problem}")]
    Invalid { path: PathBuf, problem: Problem },
}

/// The validated configuration of the managed server.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// What an operator types to confirm a restart.
    pub name: String,
    pub program: PathBuf,
    /// The base argument vector; allow-listed flags are applied on top.
    pub args: Vec<String>,
    pub cwd: Option<PathBuf>,
    /// Base environment added to drainwatch's own.
    pub env: BTreeMap<String, String>,
    pub port: u16,
    pub gpus: Vec<u32>,
    /// `http://HOST:PORT`: where the server's API is reached.
    pub base_url: String,
    pub health_url: String,
    pub readiness: Readiness,
    pub metrics_url: String,
    pub timeouts: Timeouts,
    pub verify: Verify,
    pub allow: AllowList,
    /// The model as the server is told (path and revision): part of a flag set.
    pub model: String,
    pub engine: Engine,
    pub bench: BenchConfig,
    /// More names whose values are secret (`server.redact`, case-insensitive),
    /// besides those [`crate::redact`] recognises by their words.
    pub redact: Vec<String>,
    /// The key the server wants as `Authorization: Bearer` (its `--api-key`),
    /// sent by the probes, the scrape and the benchmark.
    pub api_key: Option<ApiKey>,
    /// Where campaign summaries go (`[[webhooks]]`).
    pub webhooks: Vec<Hook>,
    /// What the pre-launch health gate does about each reason (`[health]`).
    pub health: HealthPolicy,
    /// The argv or environment names `{node_rank}`, `{nnodes}` or
    /// `{dist_init_addr}`: the server spans nodes, and each launch needs this
    /// node's place in it (from the hub's coordinated restart).
    pub spans_nodes: bool,
}

/// What a server that spans nodes names in its argv and environment:
/// SGLang's `--dist-init-addr` takes `host:port`, vLLM's `--master-addr` and
/// `--master-port` the two halves.
pub const NODE_PLACEHOLDERS: [&str; 5] = [
    "{node_rank}",
    "{nnodes}",
    "{dist_init_addr}",
    "{dist_init_host}",
    "{dist_init_port}",
];

/// `s` with the node's placeholders filled in.
pub fn fill_node(s: &str, node: &shared::restart::NodeRole) -> String {
    let (host, port) = node
        .dist_init_addr
        .rsplit_once(':')
        .unwrap_or((node.dist_init_addr.as_str(), ""));
    let host = host.trim_start_matches('[').trim_end_matches(']');
    s.replace("{node_rank}", &node.rank.to_string())
        .replace("{nnodes}", &node.nnodes.to_string())
        .replace("{dist_init_addr}", &node.dist_init_addr)
        .replace("{dist_init_host}", host)
        .replace("{dist_init_port}", port)
}

/// A real request that must succeed before the server counts as ready: some
/// servers answer `/health` and then hang on the first completion.
#[derive(Debug, Clone)]
pub struct Readiness {
    pub url: String,
    /// JSON body to POST.
    pub body: serde_json::Value,
    pub timeout: Duration,
}

#[derive(Debug, Clone, Copy)]
pub struct Timeouts {
    /// SIGTERM → exit, before escalating to SIGKILL.
    pub drain: Duration,
    /// SIGKILL → every tracked process gone.
    pub kill_grace: Duration,
    /// Gone → every GPU back at its baseline.
    pub verify: Duration,
    /// Spawn → ready.
    pub warmup: Duration,
}

#[derive(Debug, Clone, Copy)]
pub struct Verify {
    /// How far above its idle baseline a GPU may be and still count as idle.
    pub tolerance_bytes: u64,
    /// The idle baseline of a GPU drainwatch has not yet seen idle.
    pub baseline_bytes: u64,
    /// Consecutive samples that must agree.
    pub samples: u32,
}

// ---------------------------------------------------------------- raw TOML

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    server: RawServer,
    #[serde(default)]
    timeouts: RawTimeouts,
    #[serde(default)]
    verify: RawVerify,
    #[serde(default)]
    flags: Vec<RawFlag>,
    #[serde(default)]
    bench: bench::RawBench,
    #[serde(default)]
    webhooks: Vec<webhooks::RawWebhook>,
    #[serde(default)]
    health: health::RawHealth,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawServer {
    name: String,
    program: PathBuf,
    #[serde(default)]
    args: Vec<String>,
    cwd: Option<PathBuf>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    port: u16,
    /// Where drainwatch reaches the server (an IP address; 127.0.0.1 unless
    /// the server listens only on another interface).
    host: Option<std::net::IpAddr>,
    gpus: Vec<u32>,
    model: Option<String>,
    #[serde(default)]
    engine: Engine,
    health_path: Option<String>,
    metrics_path: Option<String>,
    #[serde(default)]
    readiness: RawReadiness,
    /// Extra secret names: `["MY_CREDENTIAL", "--license"]`.
    #[serde(default)]
    redact: Vec<String>,
    /// A file holding the server's API key.
    api_key_file: Option<PathBuf>,
    /// An environment variable holding it.
    api_key_env: Option<String>,
    /// Refused: a key is never written into the config.
    api_key: Option<toml::Value>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawReadiness {
    path: Option<String>,
    body: Option<toml::Value>,
    timeout: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTimeouts {
    drain: Option<String>,
    kill_grace: Option<String>,
    verify: Option<String>,
    warmup: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawVerify {
    tolerance_mib: Option<u64>,
    baseline_mib: Option<u64>,
    samples: Option<u32>,
}

impl ServerConfig {
    /// Tells the redactor every secret value of this config: its API key,
    /// its args, its env, its flags' defaults and the values its allow-list
    /// offers for secret flags.
    pub fn teach(&self, r: &crate::redact::Redactor) {
        if let Some(key) = &self.api_key {
            r.learn_key(key.expose());
        }
        r.learn_argv(&self.args);
        r.learn_pairs(&self.env);
        r.learn_pairs(self.allow.defaults());
        for spec in self.allow.specs() {
            if let shared::flags::FlagType::Enum { values } = &spec.ty
                && r.is_secret(&spec.name)
            {
                values.iter().for_each(|v| r.learn(v));
            }
        }
    }

    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        // Relative paths with a directory part are relative to the file itself; a
        // bare program name is looked up in PATH when launched.
        let dir = path.parent().unwrap_or(Path::new("."));
        let mut cfg = Self::parse_in(&text, dir).map_err(|problem| ConfigError::Invalid {
            path: path.to_owned(),
            problem,
        })?;
        if cfg.program.is_relative() && cfg.program.components().count() > 1 {
            cfg.program = dir.join(&cfg.program);
        }
        if let Some(cwd) = cfg.cwd.as_mut().filter(|c| c.is_relative()) {
            *cwd = dir.join(&*cwd);
        }
        Ok(cfg)
    }

    /// Parses and validates the file's text (an API key file relative to the
    /// working directory).
    pub fn parse(text: &str) -> Result<Self, Problem> {
        Self::parse_in(text, Path::new(""))
    }

    /// Parses and validates the text of a file in `dir`; reads the API key.
    fn parse_in(text: &str, dir: &Path) -> Result<Self, Problem> {
        let raw: RawFile =
            toml::from_str(text).map_err(|e| Problem::Syntax(e.to_string().trim().to_owned()))?;
        let s = raw.server;
        let redact = check_server(&s)?;
        let api_key = api_key::KeySource {
            file: s.api_key_file.clone(),
            env: s.api_key_env.clone(),
            inline: s.api_key.is_some(),
        }
        .read(dir)?;
        let base = format!(
            "http://{}",
            std::net::SocketAddr::new(
                s.host
                    .unwrap_or(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST)),
                s.port
            )
        );
        let path_of = |p: Option<String>, default: &str, key: &str| url_of(&base, p, default, key);
        let readiness = Readiness {
            url: path_of(s.readiness.path, "/v1/completions", "readiness.path")?,
            body: readiness_body(s.readiness.body)?,
            timeout: duration(s.readiness.timeout, "30s", "server.readiness.timeout")?,
        };
        let timeouts = timeouts(raw.timeouts)?;
        let verify = verify(raw.verify)?;
        let specs = raw
            .flags
            .into_iter()
            .map(flag_spec)
            .collect::<Result<Vec<_>, _>>()?;
        let allow = AllowList::new(specs, &s.args, &s.env, &SecretNames::new(&redact))?;
        let model = s.model.clone().unwrap_or_else(|| model_of(&s.args));
        let bench = raw.bench.check(s.engine, &model, dir)?;
        let webhooks = webhooks::check(raw.webhooks)?;
        let health = health::check(raw.health)?;
        let spans_nodes = s
            .args
            .iter()
            .chain(s.env.values())
            .any(|a| NODE_PLACEHOLDERS.iter().any(|p| a.contains(p)));
        Ok(Self {
            name: s.name.trim().to_owned(),
            program: s.program,
            args: s.args,
            cwd: s.cwd,
            env: s.env,
            port: s.port,
            gpus: s.gpus,
            base_url: base.clone(),
            health_url: path_of(s.health_path, "/health", "health_path")?,
            metrics_url: path_of(s.metrics_path, "/metrics", "metrics_path")?,
            readiness,
            timeouts,
            verify,
            allow,
            model,
            engine: s.engine,
            bench,
            redact,
            api_key,
            webhooks,
            health,
            spans_nodes,
        })
    }
}

/// The `[server]` table's own rules; its `redact` names, checked.
fn check_server(s: &RawServer) -> Result<Vec<String>, Problem> {
    if s.name.trim().is_empty() {
        return Err(Problem::rule("server.name", "must not be empty"));
    }
    if s.program.as_os_str().is_empty() {
        return Err(Problem::rule("server.program", "must not be empty"));
    }
    if s.port == 0 {
        return Err(Problem::rule(
            "server.port",
            "must be a port number (1–65535)",
        ));
    }
    if s.gpus.is_empty() {
        return Err(Problem::rule(
            "server.gpus",
            "must list the GPUs the server uses, e.g. [0, 1, 2, 3]",
        ));
    }
    for (k, v) in &s.env {
        check_env_name(k).map_err(|e| Problem::refused("server.env", e))?;
        if v.contains('\0') {
            return Err(Problem::refused(
                format!("server.env.{k}"),
                "values cannot contain NUL",
            ));
        }
    }
    if s.args.iter().any(|a| a.contains('\0')) {
        return Err(Problem::refused(
            "server.args",
            "arguments cannot contain NUL",
        ));
    }
    s.redact
        .iter()
        .map(|n| check_secret_name(n).map_err(|e| Problem::refused("server.redact", e)))
        .collect()
}

/// The server's URL for path `p` (`default` when not given) under `base`.
fn url_of(base: &str, p: Option<String>, default: &str, key: &str) -> Result<String, Problem> {
    let p = p.unwrap_or_else(|| default.to_owned());
    if !p.starts_with('/') {
        return Err(Problem::rule(
            format!("server.{key}"),
            format!("must start with `/`, got `{p}`"),
        ));
    }
    Ok(format!("{base}{p}"))
}

/// The readiness probe's request body: the one given, else a short completion.
fn readiness_body(body: Option<toml::Value>) -> Result<serde_json::Value, Problem> {
    match body {
        Some(v) => {
            serde_json::to_value(v).map_err(|e| Problem::refused("server.readiness.body", e))
        }
        None => Ok(serde_json::json!({
            "model": "default",
            "prompt": "Say OK.",
            "max_tokens": 4,
            "temperature": 0,
        })),
    }
}

fn timeouts(t: RawTimeouts) -> Result<Timeouts, Problem> {
    Ok(Timeouts {
        drain: duration(t.drain, "60s", "timeouts.drain")?,
        kill_grace: duration(t.kill_grace, "10s", "timeouts.kill_grace")?,
        verify: duration(t.verify, "60s", "timeouts.verify")?,
        warmup: duration(t.warmup, "15m", "timeouts.warmup")?,
    })
}

fn verify(v: RawVerify) -> Result<Verify, Problem> {
    Ok(Verify {
        tolerance_bytes: v.tolerance_mib.unwrap_or(64) << 20,
        baseline_bytes: v.baseline_mib.unwrap_or(4) << 20,
        samples: match v.samples.unwrap_or(3) {
            0 => return Err(Problem::rule("verify.samples", "must be at least 1")),
            n => n,
        },
    })
}

/// The model named on the command line: `--model-path X`, `--model X`, or
/// vLLM's `serve X`, with `@REV` when `--revision REV` pins a revision; else
/// llama.cpp's `-m FILE` (a `.gguf` or a path: Python's `-m module` is not a
/// model).
fn model_of(args: &[String]) -> String {
    let (mut model, mut revision, mut short) = (None, None, None);
    let mut it = args.iter().peekable();
    while let Some(a) = it.next() {
        let (name, inline) = match a.split_once('=') {
            Some((n, v)) if n.starts_with("--") => (n, Some(v.to_owned())),
            _ => (a.as_str(), None),
        };
        let slot = match name {
            "--model-path" | "--model" | "serve" => &mut model,
            "--revision" => &mut revision,
            "-m" => &mut short,
            _ => continue,
        };
        let value = inline.or_else(|| {
            it.peek()
                .filter(|v| !v.starts_with('-'))
                .map(|v| (*v).clone())
        });
        if slot.is_none() {
            *slot = value;
        }
    }
    let file = short.filter(|m| m.ends_with(".gguf") || m.contains('/'));
    match (model.or(file), revision) {
        (Some(m), Some(r)) => format!("{m}@{r}"),
        (Some(m), None) => m,
        (None, _) => String::new(),
    }
}

fn duration(v: Option<String>, default: &str, key: &str) -> Result<Duration, Problem> {
    let d =
        parse_duration(v.as_deref().unwrap_or(default)).map_err(|e| Problem::refused(key, e))?;
    if d.is_zero() {
        return Err(Problem::rule(key, "must be longer than zero"));
    }
    Ok(d)
}

/// A `server.redact` entry that cannot be a name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is not a name (letters, digits, `-` and `_`, e.g. `MY_CREDENTIAL` or `--license`)")]
pub struct BadSecretName(String);

/// An extra secret name: an option (`--license`) or a variable (`MY_CREDENTIAL`).
fn check_secret_name(name: &str) -> Result<String, BadSecretName> {
    let n = name.trim();
    let ok = n.chars().any(|c| c.is_ascii_alphabetic())
        && n.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if ok {
        Ok(n.to_owned())
    } else {
        Err(BadSecretName(name.to_owned()))
    }
}

#[cfg(test)]
mod node_tests {
    use super::fill_node;
    use shared::restart::NodeRole;

    #[test]
    fn a_node_s_place_fills_sglang_s_and_vllm_s_arguments() {
        let n = NodeRole {
            rank: 1,
            nnodes: 2,
            dist_init_addr: "10.0.0.7:5000".into(),
        };
        assert_eq!(
            fill_node(
                "--node-rank {node_rank} --nnodes {nnodes} --dist-init-addr {dist_init_addr}",
                &n
            ),
            "--node-rank 1 --nnodes 2 --dist-init-addr 10.0.0.7:5000"
        );
        assert_eq!(
            fill_node(
                "--master-addr={dist_init_host} --master-port={dist_init_port}",
                &n
            ),
            "--master-addr=10.0.0.7 --master-port=5000"
        );
        let v6 = NodeRole {
            dist_init_addr: "[fd00::7]:5000".into(),
            ..n
        };
        assert_eq!(fill_node("{dist_init_host}", &v6), "fd00::7");
    }
}
