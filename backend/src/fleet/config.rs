//! The hub's config (`fleet.toml`), read and checked whole at start: a bad
//! entry names itself and nothing starts. Tokens are read from their files
//! and never shown.
//!
//! ```toml
//! [[agent]]
//! name = "gpu-01"
//! url = "http://10.0.0.1:7878"
//! token_file = "gpu-01.token"      # beside this file
//!
//! [[group]]                        # one server that spans nodes
//! name = "dsv3"
//! nodes = ["gpu-01", "gpu-02"]     # agents, in rank order
//! dist_init_addr = "10.0.0.1:5000" # filled into each node's {dist_init_addr}
//!
//! [[deployment]]                   # servers restarted in a declared order
//! name = "pd"
//! order = ["prefill", "decode", "router"]   # agents or groups
//! ```

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use shared::fleet::{CoordKind, CoordTarget};
use shared::restart::{MAX_NODES, NodeRole};

use crate::config::Problem;
use crate::config::file::ConfigError;

/// Agents one hub holds at most.
pub const MAX_AGENTS: usize = 500;
/// Groups and deployments one hub declares at most.
const MAX_TARGETS: usize = 100;

/// The fleet as configured.
#[derive(Debug, Clone, Default)]
pub struct FleetConfig {
    pub agents: Vec<AgentConfig>,
    pub groups: Vec<GroupConfig>,
    pub deployments: Vec<DeploymentConfig>,
}

/// One agent as configured.
#[derive(Debug, Clone)]
pub struct AgentConfig {
    pub name: String,
    pub url: String,
    /// Read from `token_file` at start; never shown or logged.
    pub(crate) token: Option<String>,
}

impl AgentConfig {
    /// How the hub reaches it as a client: its URL and token.
    pub(crate) fn remote(&self) -> crate::cli::Remote {
        crate::cli::Remote {
            url: self.url.clone(),
            token: self.token.clone(),
            json: false,
        }
    }
}

/// A server that spans nodes: its agents in rank order.
#[derive(Debug, Clone)]
pub struct GroupConfig {
    pub name: String,
    pub nodes: Vec<String>,
    pub dist_init_addr: String,
    /// How long every node may take to be verified after its drain.
    pub verify_timeout: Duration,
    /// How long rank 0 may take to launch, once every node is launched.
    pub launch_timeout: Duration,
    /// What a GPU may hold above its idle baseline and still count as idle.
    pub tolerance_bytes: u64,
}

impl GroupConfig {
    /// Node `rank`'s place, as its agent is told.
    pub fn role(&self, rank: usize) -> NodeRole {
        NodeRole {
            rank: rank as u32,
            nnodes: self.nodes.len() as u32,
            dist_init_addr: self.dist_init_addr.clone(),
        }
    }
}

/// Servers restarted one after another in a declared order.
#[derive(Debug, Clone)]
pub struct DeploymentConfig {
    pub name: String,
    /// Agents or groups.
    pub order: Vec<String>,
}

impl FleetConfig {
    pub fn agent(&self, name: &str) -> Option<&AgentConfig> {
        self.agents.iter().find(|a| a.name == name)
    }

    pub fn group(&self, name: &str) -> Option<&GroupConfig> {
        self.groups.iter().find(|g| g.name == name)
    }

    pub fn deployment(&self, name: &str) -> Option<&DeploymentConfig> {
        self.deployments.iter().find(|d| d.name == name)
    }

    /// Every group and deployment, for `GET /api/groups`.
    pub fn targets(&self) -> Vec<CoordTarget> {
        let groups = self.groups.iter().map(|g| CoordTarget {
            name: g.name.clone(),
            kind: CoordKind::Group,
            members: g.nodes.clone(),
            dist_init_addr: Some(g.dist_init_addr.clone()),
        });
        let deployments = self.deployments.iter().map(|d| CoordTarget {
            name: d.name.clone(),
            kind: CoordKind::Deployment,
            members: d.order.clone(),
            dist_init_addr: None,
        });
        groups.chain(deployments).collect()
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFleet {
    #[serde(default)]
    agent: Vec<RawAgent>,
    #[serde(default)]
    group: Vec<RawGroup>,
    #[serde(default)]
    deployment: Vec<RawDeployment>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAgent {
    name: String,
    url: String,
    token_file: Option<PathBuf>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawGroup {
    name: String,
    nodes: Vec<String>,
    dist_init_addr: String,
    verify_timeout: Option<String>,
    launch_timeout: Option<String>,
    tolerance_mib: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDeployment {
    name: String,
    order: Vec<String>,
}

fn check_name(what: &str, name: &str) -> Result<String, Problem> {
    let n = name.trim();
    if n.is_empty()
        || n.chars().all(|c| c == '.')
        || n.len() > 64
        || !n
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
    {
        return Err(Problem::refused(
            format!("{what} `{name}`"),
            "a name is 1–64 letters, digits, `-`, `_` or `.`, not dots alone",
        ));
    }
    Ok(n.to_owned())
}

fn duration(raw: Option<String>, default: &str, what: &str) -> Result<Duration, Problem> {
    let text = raw.unwrap_or_else(|| default.to_owned());
    crate::clock::parse_duration(text.trim())
        .map_err(|e| Problem::refused(what, format!("`{text}` is not a duration ({e})")))
        .and_then(|d| match d {
            d if d.is_zero() || d > Duration::from_secs(24 * 3600) => Err(Problem::refused(
                what,
                format!("`{text}` must be above zero and at most 24h"),
            )),
            d => Ok(d),
        })
}

/// Reads and checks the fleet config whole: a bad entry names itself and
/// nothing starts.
pub fn load(path: &Path) -> Result<FleetConfig, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_owned(),
        source,
    })?;
    check(&text, path).map_err(|problem| ConfigError::Invalid {
        path: path.to_owned(),
        problem,
    })
}

/// The fleet config's text, checked (`path`: where relative files are).
fn check(text: &str, path: &Path) -> Result<FleetConfig, Problem> {
    let raw: RawFleet =
        toml::from_str(text).map_err(|e| Problem::Syntax(e.message().to_owned()))?;
    if raw.agent.is_empty() {
        return Err(Problem::Whole("no [[agent]]".to_owned()));
    }
    if raw.agent.len() > MAX_AGENTS {
        return Err(Problem::Whole(format!(
            "{} agents, at most {MAX_AGENTS}",
            raw.agent.len()
        )));
    }
    if raw.group.len() + raw.deployment.len() > MAX_TARGETS {
        return Err(Problem::Whole(format!(
            "at most {MAX_TARGETS} groups and deployments together"
        )));
    }
    let mut cfg = FleetConfig::default();
    for a in raw.agent {
        let agent = agent(a, path, &cfg)?;
        cfg.agents.push(agent);
    }
    for g in raw.group {
        let group = group(g, &cfg)?;
        cfg.groups.push(group);
    }
    for d in raw.deployment {
        let deployment = deployment(d, &cfg)?;
        cfg.deployments.push(deployment);
    }
    Ok(cfg)
}

/// Whether `n` already names an agent, a group or a deployment.
fn taken(cfg: &FleetConfig, n: &str) -> bool {
    cfg.agent(n).is_some() || cfg.group(n).is_some() || cfg.deployment(n).is_some()
}

/// One `[[agent]]`, checked against those before it; a relative token file
/// is beside the config (`path`).
fn agent(a: RawAgent, path: &Path, cfg: &FleetConfig) -> Result<AgentConfig, Problem> {
    let name = check_name("agent", &a.name)?;
    if cfg.agent(&name).is_some() {
        return Err(Problem::rule(format!("agent `{name}`"), "is listed twice"));
    }
    let url = a.url.trim().to_owned();
    if !(url.starts_with("http://") || url.starts_with("https://")) {
        return Err(Problem::refused(
            format!("agent `{name}`"),
            "url must start with http:// or https://",
        ));
    }
    match reqwest::Url::parse(&url) {
        Ok(u) if u.query().is_none() && u.fragment().is_none() && u.host().is_some() => {}
        _ => {
            return Err(Problem::refused(
                format!("agent `{name}`"),
                "url must be http(s)://host[:port][/path], without a query or fragment",
            ));
        }
    }
    // A relative token file is beside the config.
    let token_file = a
        .token_file
        .map(|f| path.parent().map_or(f.clone(), |dir| dir.join(&f)));
    let token = match token_file {
        None => None,
        Some(f) => Some(
            std::fs::read_to_string(&f)
                .map_err(|e| {
                    Problem::refused(
                        format!("agent `{name}`"),
                        format!("cannot read its token_file: {e}"),
                    )
                })?
                .trim()
                .to_owned(),
        )
        .filter(|t| !t.is_empty()),
    };
    Ok(AgentConfig { name, url, token })
}

/// One `[[group]]`: its nodes are agents, each in one group only.
fn group(g: RawGroup, cfg: &FleetConfig) -> Result<GroupConfig, Problem> {
    let name = check_name("group", &g.name)?;
    if taken(cfg, &name) {
        return Err(Problem::refused(
            format!("group `{name}`"),
            "the name is taken",
        ));
    }
    if g.nodes.is_empty() || g.nodes.len() > MAX_NODES as usize {
        return Err(Problem::refused(
            format!("group `{name}`"),
            format!("nodes lists 1 to {MAX_NODES} agents"),
        ));
    }
    for (i, n) in g.nodes.iter().enumerate() {
        if cfg.agent(n).is_none() {
            return Err(Problem::refused(
                format!("group `{name}`"),
                format!("node `{n}` is not an [[agent]]"),
            ));
        }
        if g.nodes[..i].contains(n) {
            return Err(Problem::refused(
                format!("group `{name}`"),
                format!("node `{n}` is listed twice"),
            ));
        }
        if let Some(other) = cfg.groups.iter().find(|o| o.nodes.contains(n)) {
            return Err(Problem::refused(
                format!("group `{name}`"),
                format!("node `{n}` is already in group `{}`", other.name),
            ));
        }
    }
    let group = GroupConfig {
        name: name.clone(),
        nodes: g.nodes,
        dist_init_addr: g.dist_init_addr.trim().to_owned(),
        verify_timeout: duration(
            g.verify_timeout,
            "2m",
            &format!("group `{name}`: verify_timeout"),
        )?,
        launch_timeout: duration(
            g.launch_timeout,
            "5m",
            &format!("group `{name}`: launch_timeout"),
        )?,
        tolerance_bytes: g.tolerance_mib.unwrap_or(64).min(1 << 20) << 20,
    };
    group
        .role(0)
        .check()
        .map_err(|e| Problem::refused(format!("group `{name}`"), e))?;
    Ok(group)
}

/// One `[[deployment]]`: its order names agents and groups, each once.
fn deployment(d: RawDeployment, cfg: &FleetConfig) -> Result<DeploymentConfig, Problem> {
    let name = check_name("deployment", &d.name)?;
    if taken(cfg, &name) {
        return Err(Problem::refused(
            format!("deployment `{name}`"),
            "the name is taken",
        ));
    }
    if d.order.is_empty() || d.order.len() > MAX_AGENTS {
        return Err(Problem::refused(
            format!("deployment `{name}`"),
            format!("order lists 1 to {MAX_AGENTS} agents or groups"),
        ));
    }
    for (i, m) in d.order.iter().enumerate() {
        if cfg.agent(m).is_none() && cfg.group(m).is_none() {
            return Err(Problem::refused(
                format!("deployment `{name}`"),
                format!("`{m}` is neither an [[agent]] nor a [[group]]"),
            ));
        }
        if d.order[..i].contains(m) {
            return Err(Problem::refused(
                format!("deployment `{name}`"),
                format!("`{m}` is listed twice"),
            ));
        }
    }
    Ok(DeploymentConfig {
        name,
        order: d.order,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(text: &str) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("fleet.toml");
        std::fs::write(&path, text).expect("write");
        (dir, path)
    }

    const TWO: &str = "[[agent]]\nname = \"a\"\nurl = \"http://x\"\n[[agent]]\nname = \"b\"\nurl = \"http://y\"\n";

    #[test]
    fn the_shipped_example_is_valid_once_its_tokens_exist() {
        let dir = tempfile::tempdir().expect("dir");
        let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/fleet.toml");
        std::fs::copy(&example, dir.path().join("fleet.toml")).expect("copy");
        std::fs::create_dir(dir.path().join("tokens")).expect("tokens");
        for n in ["gpu-01", "gpu-02", "gpu-03"] {
            std::fs::write(dir.path().join("tokens").join(n), "dw_x\n").expect("token");
        }
        let cfg = load(&dir.path().join("fleet.toml")).expect("valid");
        assert_eq!(cfg.agents.len(), 3);
        assert_eq!(cfg.targets().len(), 2);
    }

    #[test]
    fn a_fleet_config_is_checked_whole() {
        let (dir, path) = write(
            r#"
[[agent]]
name = "gpu-07"
url = "http://10.0.0.7:7878"
[[agent]]
name = "gpu-08"
url = "https://gpu-08.example:7878"
token_file = "t"
[[group]]
name = "dsv3"
nodes = ["gpu-07", "gpu-08"]
dist_init_addr = "10.0.0.7:5000"
verify_timeout = "90s"
[[deployment]]
name = "all"
order = ["dsv3"]
"#,
        );
        // A relative token file is beside the config.
        std::fs::write(dir.path().join("t"), "secret\n").expect("token");
        let cfg = load(&path).expect("valid");
        assert_eq!(cfg.agents.len(), 2);
        assert_eq!(cfg.agents[1].token.as_deref(), Some("secret"));
        let g = cfg.group("dsv3").expect("group");
        assert_eq!(g.verify_timeout, Duration::from_secs(90));
        assert_eq!(g.role(1).rank, 1);
        assert_eq!(g.role(1).nnodes, 2);
        assert_eq!(cfg.targets().len(), 2);
        for (bad, says) in [
            ("", "no [[agent]]"),
            (
                "[[agent]]\nname = \"a b\"\nurl = \"http://x\"\n",
                "a name is",
            ),
            ("[[agent]]\nname = \"a\"\nurl = \"ftp://x\"\n", "http://"),
            (
                "[[agent]]\nname = \"..\"\nurl = \"http://x\"\n",
                "a name is",
            ),
            (
                "[[agent]]\nname = \"a\"\nurl = \"http://x/?token=1\"\n",
                "without a query",
            ),
            (
                "[[agent]]\nname = \"a\"\nurl = \"http://x\"\n[[agent]]\nname = \"a\"\nurl = \"http://y\"\n",
                "listed twice",
            ),
            (
                "[[agent]]\nname = \"a\"\nurl = \"http://x\"\nport = 1\n",
                "unknown field",
            ),
            (
                "[[agent]]\nname = \"a\"\nurl = \"http://x\"\ntoken_file = \"/nonexistent\"\n",
                "cannot read its token_file",
            ),
        ] {
            let (_d, p) = write(bad);
            let e = load(&p).expect_err(bad).to_string();
            assert!(e.contains(says), "{bad}: {e}");
            assert!(!e.contains("secret"));
        }
        for (extra, says) in [
            (
                "[[group]]\nname = \"g\"\nnodes = [\"a\", \"c\"]\ndist_init_addr = \"x:1\"\n",
                "node `c` is not an [[agent]]",
            ),
            (
                "[[group]]\nname = \"g\"\nnodes = [\"a\", \"a\"]\ndist_init_addr = \"x:1\"\n",
                "listed twice",
            ),
            (
                "[[group]]\nname = \"g\"\nnodes = []\ndist_init_addr = \"x:1\"\n",
                "nodes lists",
            ),
            (
                "[[group]]\nname = \"g\"\nnodes = [\"a\", \"b\"]\ndist_init_addr = \"x; rm -rf /:1\"\n",
                "dist_init_addr",
            ),
            (
                "[[group]]\nname = \"a\"\nnodes = [\"a\", \"b\"]\ndist_init_addr = \"x:1\"\n",
                "taken",
            ),
            (
                "[[group]]\nname = \"g\"\nnodes = [\"a\"]\ndist_init_addr = \"x:1\"\n[[group]]\nname = \"h\"\nnodes = [\"a\"]\ndist_init_addr = \"x:1\"\n",
                "already in group `g`",
            ),
            (
                "[[group]]\nname = \"g\"\nnodes = [\"a\"]\ndist_init_addr = \"x:1\"\nverify_timeout = \"soon\"\n",
                "not a duration",
            ),
            (
                "[[deployment]]\nname = \"d\"\norder = [\"a\", \"z\"]\n",
                "`z` is neither",
            ),
            ("[[deployment]]\nname = \"d\"\norder = []\n", "order lists"),
        ] {
            let text = format!("{TWO}{extra}");
            let (_d, p) = write(&text);
            let e = load(&p).expect_err(&text).to_string();
            assert!(e.contains(says), "{text}: {e}");
        }
    }
}
