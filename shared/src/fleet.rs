//! The fleet as a hub sees it: one entry per agent (a drainwatch on a GPU
//! host), built from that agent's own `/ws`. An agent the hub cannot reach is
//! said to be so, with when it was last heard from; its last known state is
//! kept but is never shown as current.

use serde::{Deserialize, Serialize};

use crate::flags::Flags;
use crate::restart::Phase;

/// Every agent, in the hub config's order.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Fleet {
    /// When the hub wrote this (Unix ms).
    pub at_ms: u64,
    pub agents: Vec<AgentView>,
}

/// One agent.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AgentView {
    /// Its name in the hub's config.
    pub name: String,
    /// Its dashboard, as the hub's config gives it (without any user or
    /// password the URL carried).
    #[serde(default)]
    pub url: String,
    /// Connected to its `/ws` now.
    pub reachable: bool,
    /// When a message last came from it (Unix ms); `None`: never.
    pub last_seen_ms: Option<u64>,
    /// When its newest sample was taken, on the agent's clock (Unix ms).
    #[serde(default)]
    pub sample_at_ms: Option<u64>,
    /// Why it cannot be reached, while it cannot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    pub hostname: Option<String>,
    /// Its GPUs are a simulated host.
    pub simulated: Option<bool>,
    pub version: Option<String>,
    /// Its GPUs as last seen.
    pub gpus: Vec<GpuBrief>,
    /// The server it manages or watches, as last seen.
    pub server: Option<ServerBrief>,
}

/// One GPU, compact.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GpuBrief {
    pub index: u32,
    pub mem_used_bytes: Option<u64>,
    pub mem_total_bytes: Option<u64>,
    pub util_gpu_percent: Option<u32>,
    /// What the GPU shows wrong by itself ([`crate::health::issues_now`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub issues: Vec<String>,
}

/// The agent's server, compact.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ServerBrief {
    pub name: String,
    pub phase: Phase,
    pub generation: u64,
    pub flags: Flags,
    pub flagset: Option<String>,
    /// Live output tokens per second, from the server's own metrics.
    pub output_tok_s: Option<f64>,
}

impl GpuBrief {
    pub fn of(g: &crate::GpuSample) -> Self {
        Self {
            index: g.index,
            mem_used_bytes: g.mem_used_bytes,
            mem_total_bytes: g.mem_total_bytes,
            util_gpu_percent: g.util_gpu_percent,
            issues: crate::health::issues_now(g.index, &g.health)
                .iter()
                .map(crate::health::HealthIssue::line)
                .collect(),
        }
    }
}

impl ServerBrief {
    pub fn of(s: &crate::restart::ServerStatus) -> Self {
        Self {
            name: s.name.clone(),
            phase: s.phase,
            generation: s.generation,
            flags: s.flags.clone(),
            flagset: s.flagset.clone(),
            output_tok_s: s.passive.output_tok_s,
        }
    }
}

/// What the hub restarts as one operation: a server that spans nodes (a
/// group: drain all, verify each, rank 0, the others, a completion through
/// rank 0), or a deployment of several servers restarted in a declared order
/// (prefill, decode, router), each with its own guarded restart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CoordKind {
    Group,
    Deployment,
}

/// A group or deployment as the hub's config declares it (`GET /api/groups`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CoordTarget {
    pub name: String,
    pub kind: CoordKind,
    /// A group's agents in rank order; a deployment's members (agents or
    /// groups) in restart order.
    pub members: Vec<String>,
    /// A group's rendezvous (`host:port`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dist_init_addr: Option<String>,
}

/// `POST /api/groups/{name}/restart`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CoordRequest {
    /// The group's or deployment's name, typed.
    pub confirm: String,
    /// A group's flag changes, sent to every node (each agent checks them
    /// against its own allow-list). A deployment takes none.
    #[serde(default)]
    pub flags: std::collections::BTreeMap<String, Option<String>>,
    /// The same changes as typed on the fleet page: `--tp=8 NAME=value`
    /// ([`parse_flags_text`]); not both.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flags_text: Option<String>,
}

/// Flag changes as typed: whitespace-separated `name=value` items, each a
/// value to set (the agents check them against their allow-lists).
pub fn parse_flags_text(
    text: &str,
) -> Result<std::collections::BTreeMap<String, Option<String>>, String> {
    let mut items = Vec::new();
    for item in text.split_whitespace() {
        match item.split_once('=') {
            Some((k, v)) if !k.is_empty() && !v.is_empty() => {
                items.push((k.to_owned(), Some(v.to_owned())));
            }
            _ => return Err(format!("`{item}` is not name=value")),
        }
    }
    crate::flags::gather(items).map_err(|e| e.to_string())
}

/// What a step of a coordinated operation did on one member.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CoordStep {
    /// Stopping the member's server (SIGTERM to its own server, by its agent).
    Drain,
    /// Checking the member's GPUs and processes from its agent's samples.
    Verify,
    /// Launching (a group node with its rank; a deployment member restarted).
    Launch,
    /// Ready: a real completion came back (through rank 0 for a group).
    Ready,
    /// Stopping it again because the operation failed.
    Unwind,
    /// What went wrong on this member.
    Failed,
    /// The hub stopped during the operation: what its agent says it did,
    /// and how the member was brought to a known state after.
    Recover,
    /// A person cancelled the operation: it stopped here, before a launch.
    Cancel,
}

impl CoordStep {
    /// Its name as the records' views show it: `drain`, `verify`, …
    pub fn word(self) -> &'static str {
        match self {
            Self::Drain => "drain",
            Self::Verify => "verify",
            Self::Launch => "launch",
            Self::Ready => "ready",
            Self::Unwind => "unwind",
            Self::Failed => "failed",
            Self::Recover => "recover",
            Self::Cancel => "cancel",
        }
    }
}

/// One event of one member's timeline.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CoordEvent {
    pub at_ms: u64,
    pub step: CoordStep,
    pub note: String,
}

/// One member's timeline (an agent of a group, or a deployment's member).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberTimeline {
    pub name: String,
    /// Its rank, in a group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rank: Option<u32>,
    /// The operations its agent recorded for this one (`/api/restarts/{id}`
    /// there: each with its per-GPU drain timeline).
    pub agent_ops: Vec<i64>,
    pub events: Vec<CoordEvent>,
}

/// Which member failed, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CoordFailure {
    pub member: String,
    pub reason: String,
}

/// One coordinated operation, as the hub records it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CoordRecord {
    pub id: i64,
    pub target: String,
    pub kind: CoordKind,
    /// Who asked, at the hub.
    pub requested_by: String,
    pub started_at_ms: u64,
    pub finished_at_ms: Option<u64>,
    pub outcome: crate::restart::Outcome,
    pub failure: Option<CoordFailure>,
    #[serde(default)]
    pub flags: std::collections::BTreeMap<String, Option<String>>,
    pub members: Vec<MemberTimeline>,
}

#[cfg(test)]
mod tests {
    use super::parse_flags_text;

    #[test]
    fn typed_flag_changes_are_name_value_pairs() {
        let f = parse_flags_text(" --tp=8  SGLANG_X=1 ").expect("valid");
        assert_eq!(f.len(), 2);
        assert_eq!(f["--tp"].as_deref(), Some("8"));
        assert!(parse_flags_text("").expect("none").is_empty());
        assert!(parse_flags_text("--tp").is_err());
        assert!(parse_flags_text("=1").is_err());
        let twice = parse_flags_text("--tp=8 --tp=4").expect_err("twice");
        assert!(twice.contains("given twice"), "{twice}");
    }
}
