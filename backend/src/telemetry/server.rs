//! Which processes are "the server". With a supervisor, the [`ServerHint`] names the
//! root it launched (or adopted) and every member it has tracked; without one, the
//! root is whoever holds the listener on the server's port. Either way the tree is
//! the root's descendants now, plus (for a server we launched) drainwatch's own
//! children — orphans re-parented to it as subreaper — plus tracked members that
//! left the tree but still live.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use shared::{ProcId, ServerIdentity};

use super::procfs::{self, ProcDetails, ProcReader};

/// How often to look for the server's listener while none is known. The lookup
/// scans every process's descriptors, so it is rate-limited.
const LOOKUP_EVERY: Duration = Duration::from_secs(2);

/// What the supervisor tells telemetry about the server it manages.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Hint {
    /// The root drainwatch launched or adopted; `None`: find it by the port.
    pub root: Option<ProcId>,
    /// Every process of the server seen since the root was set.
    pub members: HashSet<ProcId>,
    /// drainwatch launched the root, so its own children are server orphans.
    pub own_children: bool,
}

/// Shared between the supervisor (writer) and the sampler (reader).
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
        if hint.own_children {
            let me = std::process::id();
            let threads = procs.read(me).map_or(0, |d| d.threads);
            for pid in procfs::children(me, threads) {
                if let Ok(d) = procs.read(pid)
                    && d.ppid == me
                    && !starts.iter().any(|s| s.id == d.id)
                {
                    starts.push(d);
                }
            }
        }
        let mut tree = descendants(procs, starts);
        for id in &hint.members {
            if !tree.iter().any(|d| d.id.pid == id.pid)
                && let Some(d) = live(procs, *id)
            {
                tree.push(d);
            }
        }
        let identity = match (root, self.port) {
            (Some(r), Some(port)) => Some(ServerIdentity { root: r.id, port }),
            _ => None,
        };
        (identity, tree)
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
        let holders: Vec<ProcDetails> = procfs::listeners(port)
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
        .filter(|d| d.id == id && !matches!(d.state, 'Z' | 'X'))
}

/// The given processes and all their descendants, as they are now.
fn descendants(procs: &mut ProcReader, starts: Vec<ProcDetails>) -> Vec<ProcDetails> {
    let mut seen: HashSet<u32> = starts.iter().map(|d| d.id.pid).collect();
    let mut queue: Vec<(u32, ProcId)> = starts
        .iter()
        .flat_map(|d| {
            procfs::children(d.id.pid, d.threads)
                .into_iter()
                .map(move |c| (c, d.id))
        })
        .collect();
    let mut out = starts;
    while let Some((pid, parent)) = queue.pop() {
        if !seen.insert(pid) {
            continue;
        }
        // The child may have exited and its PID been reused between the two reads:
        // only a process that is still the parent's child, and younger than it,
        // belongs to the tree.
        match procs.read(pid) {
            Ok(d) if d.ppid == parent.pid && d.id.start_ticks >= parent.start_ticks => {
                queue.extend(
                    procfs::children(pid, d.threads)
                        .into_iter()
                        .map(|c| (c, d.id)),
                );
                out.push(d);
            }
            _ => {}
        }
    }
    out
}
