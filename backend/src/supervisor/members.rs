//! The server's processes as tracked by identity: each one taken with a pidfd
//! when first identified, signalled only through it, and published to
//! telemetry (the [`ServerHint`]) so samples mark them as the server's.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use shared::ProcId;

use super::pidfd::{OpenError, Pidfd, Sent};
use crate::telemetry::procfs;
use crate::telemetry::{Hint, ServerHint};

/// Every process of the server seen since its root was set (alive or not: a
/// PID NVML still lists after its process exited is ours if it was one of them).
#[derive(Debug)]
pub struct Members {
    hint: Arc<ServerHint>,
    /// `None`: exited (its pidfd was let go) or, without pidfds, never had one.
    ids: HashMap<ProcId, Option<Pidfd>>,
    /// Whether this kernel gives pidfds.
    pidfd: bool,
}

impl Members {
    pub fn new(hint: Arc<ServerHint>, pidfd: bool) -> Self {
        Self {
            hint,
            ids: HashMap::new(),
            pidfd,
        }
    }

    /// Starts over for a new server `root`: it and `ids` are its members.
    /// `own_children`: drainwatch launched it, so orphans re-parented to
    /// drainwatch are the server's too.
    pub fn reset(&mut self, root: Option<ProcId>, own_children: bool, ids: Vec<ProcId>) {
        self.ids.clear();
        for id in root.into_iter().chain(ids) {
            self.add(id);
        }
        self.hint.set(Hint {
            root,
            members: self.ids(),
            own_children,
        });
    }

    /// The server is gone: no root, but what it left is still marked as ours.
    pub fn root_gone(&mut self) {
        self.release_exited();
        self.hint.set(Hint {
            root: None,
            members: self.ids(),
            own_children: true,
        });
    }

    fn add(&mut self, id: ProcId) -> bool {
        if self.ids.contains_key(&id) {
            return false;
        }
        let fd = if self.pidfd {
            match Pidfd::open(id) {
                Ok(fd) => Some(fd),
                Err(OpenError::Gone) => None,
                Err(OpenError::Unsupported(why)) => {
                    tracing::warn!(%why, "pidfds failed; re-checking PIDs before signals");
                    self.pidfd = false;
                    None
                }
            }
        } else {
            None
        };
        self.ids.insert(id, fd);
        true
    }

    /// Adds `ids`; publishes the set if it grew.
    pub fn extend(&mut self, ids: impl IntoIterator<Item = ProcId>) {
        let mut grew = false;
        for id in ids {
            grew |= self.add(id);
        }
        if grew {
            let mut h = self.hint.get();
            h.members = self.ids();
            self.hint.set(h);
        }
    }

    /// Adds the processes with these PIDs (from a cgroup's `cgroup.procs`: a
    /// process found there is the server's, whatever its parentage).
    pub fn extend_pids(&mut self, pids: &[u32]) {
        let known: HashSet<u32> = self.ids.keys().map(|m| m.pid).collect();
        let fresh: Vec<ProcId> = pids
            .iter()
            .filter(|p| !known.contains(p))
            .filter_map(|p| procfs::identity(*p))
            .filter(|i| !i.exited())
            .map(|i| i.id)
            .collect();
        self.extend(fresh);
    }

    pub fn ids(&self) -> HashSet<ProcId> {
        self.ids.keys().copied().collect()
    }

    pub fn len(&self) -> usize {
        self.ids.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    pub fn pidfd(&self) -> bool {
        self.pidfd
    }

    fn is_alive(&self, id: &ProcId, fd: Option<&Pidfd>) -> bool {
        match fd {
            Some(fd) => !fd.exited(),
            None if self.pidfd => false,
            None => procfs::alive(*id),
        }
    }

    /// How many are alive now.
    pub fn alive(&self) -> usize {
        self.ids
            .iter()
            .filter(|(id, fd)| self.is_alive(id, fd.as_ref()))
            .count()
    }

    /// Lets go of the pidfds of members that have exited (their identities stay).
    pub fn release_exited(&mut self) {
        for fd in self.ids.values_mut() {
            if fd.as_ref().is_some_and(Pidfd::exited) {
                *fd = None;
            }
        }
    }

    /// Sends `sig` to each member still alive: through its pidfd, or without
    /// pidfds to its PID re-checked against its start time just before. Returns
    /// how many were signalled.
    #[allow(unsafe_code)]
    pub fn signal(&self, sig: i32) -> usize {
        let mut n = 0;
        for (id, fd) in &self.ids {
            let sent = match fd {
                Some(fd) => fd.signal(sig) == Sent::Delivered,
                None if self.pidfd => false,
                None if id.pid > 1 && procfs::alive(*id) => {
                    // SAFETY: kill(2) on a PID whose start time was just checked.
                    unsafe { libc::kill(id.pid as i32, sig) == 0 }
                }
                None => false,
            };
            n += usize::from(sent);
        }
        n
    }
}
