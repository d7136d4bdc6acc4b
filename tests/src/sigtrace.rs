//! The kernel's own record of who signalled whom: a tracefs instance with the
//! `signal:signal_generate` and `sched:sched_process_fork` events. Every
//! signal generated anywhere on the machine is in it with its sender's thread
//! group, so `kill`, `killpg` (one event per member reached), `pidfd_send_signal`
//! and `cgroup.kill` alike are seen as what they reached, not as what the
//! sender meant; the fork events give each process's lineage, in time order,
//! so a PID reused later is a different process.
//!
//! A [`SimHost`](crate::SimHost) starts one; the drainwatch processes spawned
//! for it are registered, and at the end of the test every signal any of them
//! sent must have reached a process descended from one of them (the server's
//! tree, whatever it escaped to later), or one the test allowed by name (an
//! adopted server's processes).

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

use anyhow::{Context, bail};

const TRACEFS: &str = "/sys/kernel/tracing";
static SEQ: AtomicU32 = AtomicU32::new(0);

/// One tracefs instance recording signals and forks.
#[derive(Debug)]
pub struct SignalTrace {
    dir: PathBuf,
}

/// A signal as the kernel generated it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Signal {
    /// The sending thread and its process.
    pub sender_tid: u32,
    pub sender_tgid: u32,
    pub sig: i32,
    /// The task it was generated for.
    pub target: u32,
    pub target_comm: String,
}

/// One line of the trace, in time order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    Signal(Signal),
    Fork { parent_tgid: u32, child: u32 },
}

fn write(path: &Path, text: &str) -> anyhow::Result<()> {
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}

impl SignalTrace {
    /// Starts recording (mounts tracefs if it is not mounted yet; needs root).
    pub fn start() -> anyhow::Result<Self> {
        let instances = Path::new(TRACEFS).join("instances");
        // Tests start at once: one mounts, the others wait for it.
        static MOUNTING: std::sync::Mutex<()> = std::sync::Mutex::new(());
        let _one = MOUNTING.lock().unwrap_or_else(|p| p.into_inner());
        if !instances.exists() {
            let ok = std::process::Command::new("mount")
                .args(["-t", "tracefs", "nodev", TRACEFS])
                .status()
                .is_ok_and(|s| s.success());
            if !ok || !instances.exists() {
                bail!(
                    "tracefs is not available at {TRACEFS} (the signal trace needs root and a kernel with tracepoints)"
                );
            }
        }
        remove_stale(&instances);
        let dir = instances.join(format!(
            "drainwatch-{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let me = Self { dir };
        write(&me.dir.join("buffer_size_kb"), "4096")?;
        write(&me.dir.join("options/record-tgid"), "1")?;
        // SIGCHLD is every exit on the machine: not what anyone sends.
        write(
            &me.dir.join("events/signal/signal_generate/filter"),
            "sig != 17",
        )?;
        write(&me.dir.join("events/signal/signal_generate/enable"), "1")?;
        write(&me.dir.join("events/sched/sched_process_fork/enable"), "1")?;
        Ok(me)
    }

    /// Everything recorded so far, oldest first.
    pub fn events(&self) -> anyhow::Result<Vec<Event>> {
        let text = std::fs::read_to_string(self.dir.join("trace"))?;
        Ok(text.lines().filter_map(parse).collect())
    }

    /// Whether the ring buffer dropped events (then the trace proves nothing).
    pub fn overrun(&self) -> bool {
        let cpus = std::fs::read_dir(self.dir.join("per_cpu"))
            .map(|d| d.flatten().map(|e| e.path()).collect::<Vec<_>>())
            .unwrap_or_default();
        cpus.iter().any(|c| {
            std::fs::read_to_string(c.join("stats"))
                .unwrap_or_default()
                .lines()
                .filter_map(|l| l.strip_prefix("overrun: "))
                .any(|n| n.trim() != "0")
        })
    }
}

impl Drop for SignalTrace {
    fn drop(&mut self) {
        let _ = std::fs::write(self.dir.join("events/signal/signal_generate/enable"), "0");
        let _ = std::fs::write(self.dir.join("events/sched/sched_process_fork/enable"), "0");
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// The test process whose leftover (`drainwatch-<pid>-<n>`) `name` is.
pub(crate) fn owner_of(name: &str) -> Option<u32> {
    name.strip_prefix("drainwatch-")
        .unwrap_or(name)
        .split('-')
        .next()?
        .parse()
        .ok()
}

/// Instances left by test runs that were killed before they could clean up.
fn remove_stale(instances: &Path) {
    let Ok(entries) = std::fs::read_dir(instances) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let dead = name.starts_with("drainwatch-")
            && owner_of(&name).is_some_and(|pid| !Path::new(&format!("/proc/{pid}")).exists());
        if dead {
            drop(SignalTrace { dir: e.path() });
        }
    }
}

/// `value` of `key=value` in an event's fields.
fn field<'a>(fields: &'a str, key: &str) -> Option<&'a str> {
    let at = fields.find(&format!(" {key}="))? + key.len() + 2;
    fields[at..].split_ascii_whitespace().next()
}

/// `           bash-6349    (   6349) [000] d..1.   278.78: signal_generate: sig=15 …`
fn parse(line: &str) -> Option<Event> {
    let (head, rest) = line.split_once(": signal_generate: ").map_or_else(
        || {
            line.split_once(": sched_process_fork: ")
                .map(|(h, r)| (h, (false, r)))
        },
        |(h, r)| Some((h, (true, r))),
    )?;
    // The header's task is `comm-tid`, then `(tgid)`, then `[cpu]`.
    let cpu = head.rfind(" [")?;
    let open = head[..cpu].rfind('(')?;
    let tgid = head[open + 1..cpu]
        .trim()
        .trim_end_matches(')')
        .trim()
        .parse()
        .ok()?;
    let task = head[..open].trim_end();
    let tid = task.rsplit('-').next()?.parse().ok()?;
    let (is_signal, fields) = rest;
    let fields = format!(" {fields}");
    if is_signal {
        // comm= may hold spaces: take it from between `comm=` and ` pid=`.
        let comm_at = fields.find(" comm=")? + 6;
        let pid_at = fields.rfind(" pid=")?;
        Some(Event::Signal(Signal {
            sender_tid: tid,
            sender_tgid: tgid,
            sig: field(&fields, "sig")?.parse().ok()?,
            target: fields[pid_at + 5..]
                .split_ascii_whitespace()
                .next()?
                .parse()
                .ok()?,
            target_comm: fields.get(comm_at..pid_at)?.to_owned(),
        }))
    } else {
        Some(Event::Fork {
            parent_tgid: tgid,
            child: field(&fields, "child_pid")?.parse().ok()?,
        })
    }
}

/// Whose a process is, as the trace saw it born.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Whose {
    /// drainwatch, or anything forked from it or from its descendants.
    Ours,
    /// Allowed by the test (an adopted server and what it forks).
    Allowed,
}

/// Every signal a process in `senders` sent to a process that was neither
/// descended from a sender nor allowed (`allowed`, and what they forked).
/// A PID is judged as the process that had it when the signal was sent.
pub fn foreign_signals(
    events: &[Event],
    senders: &HashSet<u32>,
    allowed: &HashSet<u32>,
) -> Vec<Signal> {
    let mut whose: HashMap<u32, Whose> = HashMap::new();
    for p in senders {
        whose.insert(*p, Whose::Ours);
    }
    for p in allowed {
        whose.insert(*p, Whose::Allowed);
    }
    let mut out = Vec::new();
    for e in events {
        match e {
            Event::Fork { parent_tgid, child } => {
                match whose.get(parent_tgid).copied() {
                    Some(w) => whose.insert(*child, w),
                    // Born of a stranger: a watched drainwatch, an allowed
                    // process, or else a stranger (a reused PID is a new process).
                    None if senders.contains(child) => whose.insert(*child, Whose::Ours),
                    None if allowed.contains(child) => whose.insert(*child, Whose::Allowed),
                    None => whose.remove(child),
                };
            }
            Event::Signal(s) if senders.contains(&s.sender_tgid) => {
                let to_self = s.target == s.sender_tgid || s.target == s.sender_tid;
                if !to_self && !whose.contains_key(&s.target) {
                    out.push(s.clone());
                }
            }
            Event::Signal(_) => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_signal_and_fork_lines() {
        let sig = "            bash-6349    (   6349) [000] d..1.   278.785157: signal_generate: sig=15 errno=0 code=0 comm=my proc pid=6350 grp=1 res=0";
        assert_eq!(
            parse(sig),
            Some(Event::Signal(Signal {
                sender_tid: 6349,
                sender_tgid: 6349,
                sig: 15,
                target: 6350,
                target_comm: "my proc".into(),
            }))
        );
        let fork = " tokio-rt-worker-812     (    800) [001] ..... 12.5: sched_process_fork: comm=tokio-rt-worker pid=812 child_comm=tokio-rt-worker child_pid=901";
        assert_eq!(
            parse(fork),
            Some(Event::Fork {
                parent_tgid: 800,
                child: 901
            })
        );
        assert_eq!(parse("# tracer: nop"), None);
    }

    #[test]
    fn a_reused_pid_is_a_stranger() {
        let senders = HashSet::from([100]);
        let sig = |target| {
            Event::Signal(Signal {
                sender_tid: 101,
                sender_tgid: 100,
                sig: 9,
                target,
                target_comm: "x".into(),
            })
        };
        let events = vec![
            Event::Fork {
                parent_tgid: 100,
                child: 200,
            },
            sig(200),
            // 200 exits; a stranger's child is given the number.
            Event::Fork {
                parent_tgid: 1,
                child: 200,
            },
            sig(200),
            sig(101),
        ];
        let bad = foreign_signals(&events, &senders, &HashSet::new());
        assert_eq!(bad.len(), 1, "{bad:?}");
    }
}
