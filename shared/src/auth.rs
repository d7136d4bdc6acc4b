//! Who may do what: roles, the caller's own session as `GET /api/session`
//! reports it, and who is connected.

use serde::{Deserialize, Serialize};

/// What a token may do. A viewer sees everything and changes nothing; an
/// operator may also restart, stop, start, adopt, benchmark and label.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    Viewer,
    Operator,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Viewer => "viewer",
            Self::Operator => "operator",
        }
    }

    /// Whether this role may change anything.
    pub fn may_operate(self) -> bool {
        self == Self::Operator
    }
}

/// `GET /api/session`: the caller as drainwatch sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionInfo {
    /// Whether drainwatch asks for tokens at all (`--auth`). Without it every
    /// caller on the (loopback) address is an operator.
    pub auth: bool,
    /// The token's name; `None` without authentication.
    pub name: Option<String>,
    pub role: Role,
    /// The value state-changing requests carry in `X-CSRF-Token`; `None`
    /// when none is needed (no authentication, or a bearer token).
    pub csrf: Option<String>,
}

/// One connected person (or script), for "who is watching".
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Presence {
    /// The token's name, or the address without authentication.
    pub who: String,
    pub role: Role,
    /// Open sockets (tabs) of this caller.
    pub sockets: u32,
    /// When the first of them opened.
    pub since_ms: u64,
}
