//! The server's processes as drainwatch tracks them: its members (each with
//! its pidfd), drainwatch's cgroup subtree, which members the store has
//! recorded, and what is left of a server whose root is gone. Its methods
//! change only this state; what the store must write comes back as a value.

use std::collections::HashSet;

use shared::ProcId;

use crate::supervisor::Members;
use crate::supervisor::cgroup::{self, Cgroups};

#[derive(Debug)]
pub(super) struct Tracked {
    /// The server's processes, each with its pidfd; publishes them to telemetry.
    pub(super) members: Members,
    /// drainwatch's cgroup subtree, where cgroup containment is in force.
    pub(super) cgroups: Option<Cgroups>,
    /// The members recorded in the store for the running instance (so that a
    /// drainwatch killed now knows them), and that instance's generation.
    recorded: (u64, HashSet<ProcId>),
    /// The generation whose root was gone when this drainwatch started but
    /// whose processes still lived: ours, drained by the next operation; its
    /// instance ends once they are gone.
    pub(super) leftover: Option<u64>,
}

impl Tracked {
    pub(super) fn new(members: Members, cgroups: Option<Cgroups>) -> Self {
        Self {
            members,
            cgroups,
            recorded: (0, HashSet::new()),
            leftover: None,
        }
    }

    /// The store already has `members` of `generation` (a server picked up again).
    pub(super) fn recorded_already(&mut self, generation: u64, members: &[ProcId]) {
        self.recorded = (generation, members.iter().copied().collect());
    }

    /// Whatever runs in drainwatch's server cgroups is the server's, whatever
    /// its parentage; returns how many processes they hold now.
    pub(super) fn contained(&mut self) -> usize {
        let Some(cg) = &self.cgroups else { return 0 };
        let pids = cg.procs();
        // Still in a leaf of ours once its pidfd pins it: not a stranger that
        // got the PID of one that left.
        let inside = |id: ProcId| cgroup::of_process(id.pid).is_some_and(|p| cg.owns(&p));
        self.members.extend_pids(&pids, &inside);
        pids.len()
    }

    /// The recorded cgroup `name`, if it is one of drainwatch's leaves.
    pub(super) fn leaf_of(&self, name: Option<&str>) -> Option<cgroup::Leaf> {
        self.cgroups.as_ref()?.leaf_named(name?)
    }

    /// The members the store has not recorded yet, for the running instance
    /// (`running`: its generation) or what is left of one; marked recorded.
    pub(super) fn unrecorded(&mut self, running: Option<u64>) -> Option<(u64, Vec<ProcId>)> {
        let generation = running.or(self.leftover)?;
        if self.recorded.0 != generation {
            self.recorded = (generation, HashSet::new());
        }
        if self.recorded.1.len() >= self.members.ids().len() {
            return None;
        }
        let new: Vec<ProcId> = (self.members.ids().iter())
            .filter(|id| !self.recorded.1.contains(id))
            .copied()
            .collect();
        self.recorded.1.extend(new.iter().copied());
        Some((generation, new))
    }

    /// The leftover instance's generation once nothing of it lives, or a
    /// launch since was verified past it (`running`): the store ends it.
    pub(super) fn settled_leftover(&mut self, running: bool) -> Option<u64> {
        let g = self.leftover?;
        if running || (self.members.alive() == 0 && self.contained() == 0) {
            tracing::info!(
                generation = g,
                "what was left of the recorded server is gone"
            );
            self.leftover = None;
            return Some(g);
        }
        None
    }
}
