//! The server's processes by identity, as the manager's tracked members
//! (`supervisor::Members`, the writer) publish them to the sampler (the
//! reader), so that samples mark them as the server's.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use shared::ProcId;

/// What telemetry is told about the server drainwatch manages.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Hint {
    /// The root drainwatch launched or adopted; `None`: find it by the port.
    pub root: Option<ProcId>,
    /// Every process of the server seen since the root was set. Shared, not
    /// copied: the writer changes its own copy only when the set grows.
    pub members: Arc<HashSet<ProcId>>,
    /// drainwatch launched the root, so its own children are server orphans.
    pub own_children: bool,
}

/// The latest [`Hint`], shared between its writer and the sampler.
#[derive(Debug, Default)]
pub struct ServerHint(Mutex<Hint>);

impl ServerHint {
    pub fn get(&self) -> Hint {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    pub fn set(&self, hint: Hint) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = hint;
    }
}
