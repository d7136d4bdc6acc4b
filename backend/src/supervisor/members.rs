//! The server's processes as tracked by identity: each one taken with a pidfd
//! when first identified, signalled only through it, and published to
//! telemetry (the [`ServerHint`]) so samples mark them as the server's. The one
//! owner of the member set and of the hint it publishes.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use shared::ProcId;

use super::pidfd::{OpenError, Pidfd, Sent};
use crate::identity::{self, Hint, ServerHint};

/// At most this many pidfds are held: a server that forks without bound gets
/// no more descriptors out of drainwatch (its further processes are signalled
/// by PID re-checked against its start time, and its cgroup holds them all).
const MAX_PIDFDS: usize = 4096;

/// How a member is reached.
#[derive(Debug)]
enum Handle {
    Pidfd(Pidfd),
    /// No pidfd (none on this kernel, or too many held): the PID is re-checked
    /// against the start time just before each signal.
    Pid,
    /// Exited (its pidfd was let go, or it was gone when first seen): never
    /// signalled again.
    Gone,
}

/// Every process of the server seen since its root was set (alive or not: a
/// PID NVML still lists after its process exited is ours if it was one of them).
#[derive(Debug)]
pub struct Members {
    hint: Arc<ServerHint>,
    /// What the hint says now: the root, every member's identity (the keys of
    /// `handles`) and whether drainwatch's own children count.
    published: Hint,
    handles: HashMap<ProcId, Handle>,
    /// Whether this kernel gives pidfds.
    pidfd: bool,
    /// Pidfds held now.
    held: usize,
}

impl Members {
    pub fn new(hint: Arc<ServerHint>, pidfd: bool) -> Self {
        Self {
            hint,
            published: Hint::default(),
            handles: HashMap::new(),
            pidfd,
            held: 0,
        }
    }

    /// Starts over for a new server `root`: it and `ids` are its members.
    /// `own_children`: drainwatch launched it, so orphans re-parented to
    /// drainwatch are the server's too.
    pub fn reset(&mut self, root: Option<ProcId>, own_children: bool, ids: Vec<ProcId>) {
        self.handles.clear();
        self.held = 0;
        self.published = Hint {
            root,
            members: Arc::default(),
            own_children,
        };
        for id in root.into_iter().chain(ids) {
            self.add(id, &|_| true);
        }
        self.publish();
    }

    /// The server is gone: no root, but what it left is still marked as ours.
    pub fn root_gone(&mut self) {
        self.release_exited();
        self.published.root = None;
        self.published.own_children = true;
        self.publish();
    }

    /// Tells telemetry what is tracked now (the set is shared, not copied).
    fn publish(&self) {
        self.hint.set(self.published.clone());
    }

    /// Takes `id` as a member if `verify` still holds once its pidfd is open
    /// (the pidfd pins the process, so what `verify` sees is that process).
    fn add(&mut self, id: ProcId, verify: &dyn Fn(ProcId) -> bool) -> bool {
        if self.handles.contains_key(&id) {
            return false;
        }
        let handle = if self.pidfd && self.held < MAX_PIDFDS {
            match Pidfd::open(id) {
                Ok(fd) => {
                    self.held += 1;
                    Handle::Pidfd(fd)
                }
                Err(OpenError::Gone) => Handle::Gone,
                Err(OpenError::NoFds) => Handle::Pid,
                Err(OpenError::Unsupported(why)) => {
                    tracing::warn!(%why, "pidfds failed; re-checking PIDs before signals");
                    self.pidfd = false;
                    Handle::Pid
                }
            }
        } else {
            Handle::Pid
        };
        if !matches!(handle, Handle::Gone) && !verify(id) {
            if matches!(handle, Handle::Pidfd(_)) {
                self.held -= 1;
            }
            return false;
        }
        self.handles.insert(id, handle);
        Arc::make_mut(&mut self.published.members).insert(id);
        true
    }

    /// Adds `ids`; publishes the set if it grew.
    pub fn extend(&mut self, ids: impl IntoIterator<Item = ProcId>) {
        self.extend_verified(ids, &|_| true);
    }

    /// Adds those of `ids` for which `verify` holds while their pidfd is open.
    pub fn extend_verified(
        &mut self,
        ids: impl IntoIterator<Item = ProcId>,
        verify: &dyn Fn(ProcId) -> bool,
    ) {
        let mut grew = false;
        for id in ids {
            grew |= self.add(id, verify);
        }
        if grew {
            self.publish();
        }
    }

    /// Adds the processes with these PIDs (from a cgroup's `cgroup.procs`: a
    /// process found there is the server's, whatever its parentage) for which
    /// `verify` (still in the cgroup) holds once their pidfd is open.
    pub fn extend_pids(&mut self, pids: &[u32], verify: &dyn Fn(ProcId) -> bool) {
        let fresh: Vec<ProcId> = pids
            .iter()
            .filter_map(|p| identity::of(*p))
            .filter(|i| !i.exited() && !self.handles.contains_key(&i.id))
            .map(|i| i.id)
            .collect();
        self.extend_verified(fresh, verify);
    }

    /// Every member's identity.
    pub fn ids(&self) -> &HashSet<ProcId> {
        &self.published.members
    }

    /// How many are alive now.
    pub fn alive(&self) -> usize {
        self.handles
            .iter()
            .filter(|(id, h)| match h {
                Handle::Pidfd(fd) => !fd.exited(),
                Handle::Pid => identity::alive(**id),
                Handle::Gone => false,
            })
            .count()
    }

    /// Lets go of the pidfds of members that have exited (their identities stay).
    pub fn release_exited(&mut self) {
        for h in self.handles.values_mut() {
            if matches!(h, Handle::Pidfd(fd) if fd.exited()) {
                *h = Handle::Gone;
                self.held -= 1;
            }
        }
    }

    /// Sends `sig` to each member still alive: through its pidfd, or without
    /// pidfds to its PID re-checked against its start time just before. A
    /// member still in process group `signalled` (just signalled whole) is left
    /// out, so no process gets the signal twice (a second SIGTERM or SIGINT
    /// means "quit now" to some servers). Returns how many were signalled.
    #[allow(unsafe_code)]
    pub fn signal(&self, sig: i32, signalled: Option<i32>) -> usize {
        let mut n = 0;
        for (id, h) in &self.handles {
            let in_group = signalled.is_some_and(|pgid| {
                identity::of(id.pid).is_some_and(|now| now.id == *id && now.pgid == pgid)
            });
            if in_group {
                continue;
            }
            let sent = match h {
                Handle::Pidfd(fd) => fd.signal(sig) == Sent::Delivered,
                Handle::Gone => false,
                // No pidfd held: one just for this signal, where the kernel
                // can give one.
                Handle::Pid => match Pidfd::open(*id) {
                    Ok(fd) => fd.signal(sig) == Sent::Delivered,
                    Err(OpenError::Gone) => false,
                    Err(OpenError::NoFds | OpenError::Unsupported(_))
                        if id.pid > 1 && identity::alive(*id) =>
                    {
                        // SAFETY: kill(2) on a PID whose start time was just checked.
                        unsafe { libc::kill(id.pid as i32, sig) == 0 }
                    }
                    Err(_) => false,
                },
            };
            n += usize::from(sent);
        }
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn child() -> (std::process::Child, ProcId) {
        let c = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .expect("spawn");
        let id = identity::of(c.id()).expect("stat").id;
        (c, id)
    }

    #[test]
    fn members_are_signalled_by_identity_with_or_without_pidfds() {
        for pidfd in [true, false] {
            let hint = Arc::new(ServerHint::default());
            let mut m = Members::new(Arc::clone(&hint), pidfd);
            let (mut a, a_id) = child();
            let (mut b, b_id) = child();
            // Someone else now has b's PID, as far as the record says: a start
            // time that is not b's. It must never be signalled.
            let stale = ProcId {
                pid: b_id.pid,
                start_ticks: b_id.start_ticks + 1,
            };
            m.reset(Some(a_id), true, vec![stale]);
            assert_eq!(*hint.get().members, HashSet::from([a_id, stale]));
            assert_eq!(m.alive(), 1, "pidfd {pidfd}");
            assert_eq!(m.signal(libc::SIGKILL, None), 1, "pidfd {pidfd}");
            a.wait().expect("reap");
            assert!(identity::alive(b_id), "the stranger was signalled");
            assert_eq!(m.alive(), 0);
            // Members not accepted by the check are not taken.
            m.extend_verified([b_id], &|_| false);
            assert_eq!(m.signal(libc::SIGKILL, None), 0);
            b.kill().expect("kill");
            b.wait().expect("reap");
        }
    }
}
