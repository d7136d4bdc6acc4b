//! Which processes are "the server". With a managed server, the [`ServerHint`]
//! (written by the restart manager's tracked members) names the root it launched
//! (or adopted) and every member it has tracked; without one, the root is
//! whoever holds the listener on the server's port. Either way the tree is the
//! root's descendants now, plus (for a server we launched) drainwatch's own
//! children — orphans re-parented to it as subreaper — plus tracked members that
//! left the tree but still live.

use std::sync::Arc;
use std::time::{Duration, Instant};

use shared::{ProcId, ServerIdentity};

use super::procfs::{ProcDetails, ProcReader};
use crate::identity::{self, ServerHint};

/// How often to look for the server's listener while none is known. The lookup
/// scans every process's descriptors, so it is rate-limited.
const LOOKUP_EVERY: Duration = Duration::from_secs(2);

/// Finds the server's processes, sample after sample.
#[derive(Debug)]
pub(super) struct Finder {
    port: Option<u16>,
    hint: Arc<ServerHint>,
    /// The root found by its listener, kept while it lives.
    found: Option<ProcId>,
    last_lookup: Option<Instant>,
}

impl Finder {
    pub(super) fn new(port: Option<u16>, hint: Arc<ServerHint>) -> Self {
        Self {
            port,
            hint,
            found: None,
            last_lookup: None,
        }
    }

    /// The server's identity (if a root is alive) and all its processes now.
    pub(super) fn find(
        &mut self,
        procs: &mut ProcReader,
    ) -> (Option<ServerIdentity>, Vec<ProcDetails>) {
        let hint = self.hint.get();
        let root = match hint.root {
            Some(id) => live(procs, id),
            None => self.by_port(procs),
        };
        let mut starts: Vec<ProcDetails> = root.iter().cloned().collect();
        // drainwatch itself is where the walk to its orphans starts; it is not
        // part of the server.
        let me = std::process::id();
        if hint.own_children
            && let Ok(d) = procs.read(me)
        {
            starts.push(d);
        }
        let mut tree = identity::walk(starts, |pid| procs.read(pid).ok());
        tree.retain(|d| d.id.pid != me);
        for id in hint.members.iter() {
            if !tree.iter().any(|d| d.id.pid == id.pid)
                && let Some(d) = live(procs, *id)
            {
                tree.push(d);
            }
        }
        let server = match (root, self.port) {
            (Some(r), Some(port)) => Some(ServerIdentity { root: r.id, port }),
            _ => None,
        };
        (server, tree)
    }

    /// The holder of the listener on the port, looked up at most every
    /// [`LOOKUP_EVERY`] and kept by PID + start time while it lives.
    fn by_port(&mut self, procs: &mut ProcReader) -> Option<ProcDetails> {
        let port = self.port?;
        if let Some(id) = self.found {
            match live(procs, id) {
                Some(d) => return Some(d),
                None => {
                    tracing::info!(pid = id.pid, "server root exited");
                    self.found = None;
                    self.last_lookup = None;
                }
            }
        }
        if self.last_lookup.is_some_and(|t| t.elapsed() < LOOKUP_EVERY) {
            return None;
        }
        self.last_lookup = Some(Instant::now());
        let holders: Vec<ProcDetails> = identity::listeners(port)
            .into_iter()
            .filter_map(|pid| procs.read(pid).ok())
            .collect();
        // Forked children may share the listener: the root is the one whose parent
        // does not hold it too.
        let root = holders
            .iter()
            .find(|d| !holders.iter().any(|o| o.id.pid == d.ppid))?
            .clone();
        tracing::info!(pid = root.id.pid, port, "server found by its listener");
        self.found = Some(root.id);
        Some(root)
    }
}

/// `id`'s details if it is alive as that identity (not a zombie, not a reused PID).
fn live(procs: &mut ProcReader, id: ProcId) -> Option<ProcDetails> {
    procs
        .read(id.pid)
        .ok()
        .filter(|d| d.id == id && !d.exited())
}
