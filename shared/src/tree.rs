//! The process tree as the UI indents it: how deep each listed process sits under
//! other listed processes.

use std::collections::HashMap;

use crate::ProcessInfo;

/// The depth of each process in `procs`, same order: 0 when its parent is not in
/// the list, else one more than its parent's. Only listed processes count, so a
/// child whose parent is not shown is a root. A parent may come after its child.
/// A `ppid` cycle (a process its own ancestor, possible only in bad data) stops
/// the walk where it would repeat, so every depth is finite and below the list's
/// length. When a PID is listed twice, its first entry is the parent.
pub fn tree_depths(procs: &[ProcessInfo]) -> Vec<u32> {
    let mut by_pid: HashMap<u32, usize> = HashMap::with_capacity(procs.len());
    for (i, p) in procs.iter().enumerate() {
        by_pid.entry(p.pid).or_insert(i);
    }
    let parent_of = |i: usize| -> Option<usize> {
        let p = &procs[i];
        let ppid = p.ppid?;
        if ppid == p.pid {
            return None;
        }
        by_pid.get(&ppid).copied().filter(|&j| j != i)
    };

    let mut depths = Vec::with_capacity(procs.len());
    // Per walk, the step at which each index was seen: a repeat is a cycle.
    let mut seen_in_walk: Vec<usize> = vec![usize::MAX; procs.len()];
    for start in 0..procs.len() {
        let mut depth: u32 = 0;
        let mut at = start;
        seen_in_walk[start] = start;
        while let Some(parent) = parent_of(at) {
            if seen_in_walk[parent] == start {
                break;
            }
            seen_in_walk[parent] = start;
            depth += 1;
            at = parent;
        }
        depths.push(depth);
    }
    depths
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ProcessRole;

    fn proc(pid: u32, ppid: Option<u32>) -> ProcessInfo {
        ProcessInfo {
            pid,
            start_ticks: Some(u64::from(pid)),
            started_at_ms: None,
            ppid,
            pgid: None,
            sid: None,
            uid: None,
            user: None,
            cmdline: vec![format!("p{pid}")],
            rss_bytes: None,
            gpu_mem: Vec::new(),
            role: ProcessRole::Foreign,
            proc_error: None,
        }
    }

    #[test]
    fn empty() {
        assert!(tree_depths(&[]).is_empty());
    }

    #[test]
    fn roots_are_zero_when_the_parent_is_not_listed() {
        let procs = [proc(10, Some(1)), proc(20, None), proc(30, Some(999))];
        assert_eq!(tree_depths(&procs), [0, 0, 0]);
    }

    #[test]
    fn children_are_one_deeper_than_their_parent() {
        let procs = [
            proc(100, Some(1)),
            proc(101, Some(100)),
            proc(102, Some(101)),
            proc(103, Some(100)),
            proc(200, Some(1)),
            proc(201, Some(200)),
        ];
        assert_eq!(tree_depths(&procs), [0, 1, 2, 1, 0, 1]);
    }

    #[test]
    fn a_parent_listed_after_its_child_still_counts() {
        let procs = [proc(102, Some(101)), proc(101, Some(100)), proc(100, None)];
        assert_eq!(tree_depths(&procs), [2, 1, 0]);
    }

    #[test]
    fn self_parent_is_a_root() {
        assert_eq!(tree_depths(&[proc(5, Some(5))]), [0]);
    }

    #[test]
    fn cycles_terminate() {
        let two = [proc(1, Some(2)), proc(2, Some(1))];
        assert_eq!(tree_depths(&two), [1, 1]);

        // A tail hanging off a three-cycle.
        let procs = [
            proc(1, Some(3)),
            proc(2, Some(1)),
            proc(3, Some(2)),
            proc(4, Some(3)),
        ];
        let depths = tree_depths(&procs);
        assert_eq!(depths, [2, 2, 2, 3]);
        assert!(depths.iter().all(|&d| (d as usize) < procs.len()));
    }

    #[test]
    fn duplicate_pids_use_the_first_entry_as_parent() {
        let procs = [proc(1, None), proc(1, Some(7)), proc(2, Some(1))];
        assert_eq!(tree_depths(&procs), [0, 0, 1]);
    }

    #[test]
    fn a_long_chain_is_linear_depths() {
        let procs: Vec<_> = (1..=500)
            .map(|pid| proc(pid, (pid > 1).then(|| pid - 1)))
            .collect();
        let depths = tree_depths(&procs);
        assert_eq!(depths.len(), 500);
        assert!(depths.iter().enumerate().all(|(i, &d)| d as usize == i));
    }
}
