//! Parentage: a process's children, and the one walk from given processes to
//! all their descendants now, with one guard against reused PIDs.

use std::collections::HashSet;

use shared::ProcId;

use super::Identity;

/// A process the walk can reach: anything that knows its [`Identity`] (its
/// parent and thread count with it).
pub trait Node {
    fn identity(&self) -> Identity;
}

impl Node for Identity {
    fn identity(&self) -> Identity {
        *self
    }
}

/// `starts` (first, in their order) and every descendant they have now, each
/// PID once. `read` gives what has a PID now. A listed child is taken only if
/// it is still its parent's child and no older than it: one that exited and
/// whose PID was reused between the listing and the read is not.
pub fn walk<T: Node>(starts: Vec<T>, mut read: impl FnMut(u32) -> Option<T>) -> Vec<T> {
    let listed = |parent: Identity| {
        children(parent.id.pid, parent.threads)
            .into_iter()
            .map(move |c| (c, parent.id))
    };
    let mut seen: HashSet<u32> = starts.iter().map(|d| d.identity().id.pid).collect();
    let mut queue: Vec<(u32, ProcId)> = starts.iter().flat_map(|d| listed(d.identity())).collect();
    let mut out = starts;
    while let Some((pid, parent)) = queue.pop() {
        if !seen.insert(pid) {
            continue;
        }
        let Some(d) = read(pid) else { continue };
        let child = d.identity();
        if child.ppid == parent.pid && child.id.start_ticks >= parent.start_ticks {
            queue.extend(listed(child));
            out.push(d);
        }
    }
    out
}

/// `root` and every descendant it has now, by identity; nothing if `root` is
/// not alive as that identity.
pub fn descendants(root: ProcId) -> Vec<ProcId> {
    let starts: Vec<Identity> = super::live(root).into_iter().collect();
    walk(starts, super::of).into_iter().map(|i| i.id).collect()
}

/// A process's children across all its threads (`/proc/<pid>/task/*/children`);
/// `threads` (from its stat) spares listing the tasks of a single-threaded process.
pub fn children(pid: u32, threads: i64) -> Vec<u32> {
    let files: Vec<std::path::PathBuf> = if threads == 1 {
        vec![format!("/proc/{pid}/task/{pid}/children").into()]
    } else {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
            return Vec::new();
        };
        tasks.flatten().map(|t| t.path().join("children")).collect()
    };
    let mut out: Vec<u32> = files
        .iter()
        .filter_map(|f| std::fs::read_to_string(f).ok())
        .flat_map(|s| {
            s.split_ascii_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect::<Vec<u32>>()
        })
        .collect();
    out.sort_unstable();
    out.dedup();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn walks_a_tree_by_identity() {
        // `; :` keeps the shell from exec-ing sleep: sleep is its child.
        let mut sh = std::process::Command::new("sh")
            .args(["-c", "sleep 30; :"])
            .spawn()
            .expect("spawn");
        let sh_id = crate::identity::of(sh.id()).expect("sh").id;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        let tree = loop {
            let tree = descendants(sh_id);
            if tree.len() >= 2 || std::time::Instant::now() > deadline {
                break tree;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        };
        assert_eq!(tree[0], sh_id);
        assert_eq!(tree.len(), 2, "{tree:?}");
        let stale = ProcId {
            pid: sh_id.pid,
            start_ticks: sh_id.start_ticks + 1,
        };
        assert!(descendants(stale).is_empty());
        for id in tree.iter().rev() {
            let _ = std::process::Command::new("kill")
                .args(["-KILL", &id.pid.to_string()])
                .status();
        }
        sh.wait().expect("reap");
    }
}
