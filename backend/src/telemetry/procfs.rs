//! Reads `/proc` for the processes drainwatch shows: on top of identity and
//! parentage ([`crate::identity`], whose stat read it uses), process group and
//! session, owner, command line, RSS. Names never identify anything.
//! Command lines are redacted as they are read ([`crate::redact`]): no secret
//! argument leaves this module for a view.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use std::os::unix::fs::MetadataExt;

use procfs::process::Process;
use shared::ProcId;

use crate::identity::{self, Identity};

/// How long a command line and owner are trusted before they are read again.
const CMDLINE_TTL: Duration = Duration::from_secs(5);
/// How often /etc/passwd may be re-read for a uid it did not have.
const PASSWD_TTL: Duration = Duration::from_secs(30);

/// One process's `/proc` facts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcDetails {
    pub id: ProcId,
    pub state: char,
    pub ppid: u32,
    pub pgid: i32,
    pub sid: i32,
    pub uid: Option<u32>,
    pub user: Option<String>,
    /// argv with secret values redacted (`--api-key redacted:…`).
    pub cmdline: Vec<String>,
    pub rss_bytes: u64,
    pub started_at_ms: u64,
    pub threads: i64,
}

impl ProcDetails {
    /// Exited (a zombie, or dead) even if not reaped yet.
    pub fn exited(&self) -> bool {
        identity::exited(self.state)
    }
}

impl identity::Node for ProcDetails {
    fn identity(&self) -> Identity {
        Identity {
            id: self.id,
            state: self.state,
            ppid: self.ppid,
            pgid: self.pgid,
            threads: self.threads,
        }
    }
}

/// Reads `/proc`, caching what rarely changes.
#[derive(Debug)]
pub struct ProcReader {
    boot_ms: u64,
    ticks_per_second: u64,
    page_size: u64,
    users: HashMap<u32, String>,
    /// When /etc/passwd was last read: a uid it lacks (common in containers) is
    /// looked up again at most this often.
    users_read: Instant,
    cached: HashMap<ProcId, Cached>,
}

/// What rarely changes for one identity.
#[derive(Debug)]
struct Cached {
    uid: Option<u32>,
    user: Option<String>,
    cmdline: Vec<String>,
    read_at: Instant,
}

impl Default for ProcReader {
    fn default() -> Self {
        Self::new()
    }
}

impl ProcReader {
    pub fn new() -> Self {
        Self {
            boot_ms: procfs::boot_time_secs().unwrap_or(0) * 1000,
            ticks_per_second: procfs::ticks_per_second().max(1),
            page_size: procfs::page_size(),
            users: read_passwd(),
            users_read: Instant::now(),
            cached: HashMap::new(),
        }
    }

    /// One process; `Err` says why it could not be read (usually: it has exited).
    /// One stat read ([`identity::stat`]) per call; owner and command line are read
    /// once per identity and refreshed every [`CMDLINE_TTL`].
    pub fn read(&mut self, pid: u32) -> Result<ProcDetails, Unreadable> {
        let stat = identity::stat(pid).map_err(|e| reason(&e))?;
        let ident = Identity::from_stat(pid, &stat);
        let id = ident.id;
        let fresh = self
            .cached
            .get(&id)
            .is_some_and(|c| c.read_at.elapsed() < CMDLINE_TTL);
        if !fresh {
            let uid = std::fs::metadata(format!("/proc/{pid}"))
                .ok()
                .map(|m| m.uid());
            let cmdline = Process::new(pid as i32)
                .and_then(|p| p.cmdline())
                .ok()
                .filter(|c| !c.is_empty())
                .map(|c| crate::redact::global().argv(&c))
                .unwrap_or_else(|| vec![format!("[{}]", stat.comm)]);
            let user = uid.and_then(|u| self.user(u));
            self.cached.insert(
                id,
                Cached {
                    uid,
                    user,
                    cmdline,
                    read_at: Instant::now(),
                },
            );
        }
        let c = (self.cached.get(&id)).ok_or_else(|| Unreadable::Other("cache".to_owned()))?;
        Ok(ProcDetails {
            id,
            state: ident.state,
            ppid: ident.ppid,
            pgid: ident.pgid,
            sid: stat.session,
            uid: c.uid,
            user: c.user.clone(),
            cmdline: c.cmdline.clone(),
            rss_bytes: stat.rss.saturating_mul(self.page_size),
            started_at_ms: self.boot_ms + stat.starttime * 1000 / self.ticks_per_second,
            threads: ident.threads,
        })
    }

    /// Forgets what was cached about processes not seen in the last sample.
    pub fn retain(&mut self, seen: &[ProcId]) {
        self.cached.retain(|id, _| seen.contains(id));
    }

    fn user(&mut self, uid: u32) -> Option<String> {
        if !self.users.contains_key(&uid) && self.users_read.elapsed() > PASSWD_TTL {
            // Perhaps a user added since the last read.
            self.users = read_passwd();
            self.users_read = Instant::now();
        }
        self.users.get(&uid).cloned()
    }
}

/// Why a process could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unreadable {
    #[error("exited (no /proc entry)")]
    Exited,
    #[error("no permission to read /proc")]
    NotPermitted,
    /// The procfs library's words.
    #[error("{0}")]
    Other(String),
}

fn reason(e: &procfs::ProcError) -> Unreadable {
    match e {
        procfs::ProcError::NotFound(_) => Unreadable::Exited,
        procfs::ProcError::PermissionDenied(_) => Unreadable::NotPermitted,
        other => Unreadable::Other(other.to_string().to_lowercase()),
    }
}

fn read_passwd() -> HashMap<u32, String> {
    std::fs::read_to_string("/etc/passwd")
        .map(|s| parse_passwd(&s))
        .unwrap_or_default()
}

fn parse_passwd(s: &str) -> HashMap<u32, String> {
    s.lines()
        .filter_map(|l| {
            let mut f = l.split(':');
            let name = f.next()?;
            let uid = f.nth(1)?.parse().ok()?;
            Some((uid, name.to_owned()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwd_lines() {
        let users = parse_passwd(
            "root:x:0:0:root:/root:/bin/bash\nsvc:x:1001:1001::/home/svc:/bin/sh\n#bad\n",
        );
        assert_eq!(users.get(&0).map(String::as_str), Some("root"));
        assert_eq!(users.get(&1001).map(String::as_str), Some("svc"));
        assert_eq!(users.len(), 2);
    }

    #[test]
    fn reads_itself() {
        let mut r = ProcReader::new();
        let me = r.read(std::process::id()).expect("self");
        assert_eq!(me.id.pid, std::process::id());
        assert!(me.id.start_ticks > 0);
        assert_eq!(me.ppid, std::os::unix::process::parent_id());
        assert!(me.rss_bytes > 0);
        assert!(!me.cmdline.is_empty());
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock")
            .as_millis() as u64;
        assert!(me.started_at_ms <= now && me.started_at_ms + 600_000 > now);
    }

    #[test]
    fn command_lines_are_read_redacted() {
        // `; :` keeps the shell from exec-ing sleep: its argv stays the one read.
        let mut child = std::process::Command::new("sh")
            .args(["-c", "sleep 5; :", "sh", "--api-key", "sk-proc-secret"])
            .spawn()
            .expect("spawn");
        // Until the exec, the child is a copy of this test binary: wait for it.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        let d = loop {
            let d = ProcReader::new().read(child.id()).expect("child");
            if d.cmdline.len() >= 6 || std::time::Instant::now() > deadline {
                break d;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        };
        child.kill().expect("kill");
        child.wait().expect("reap");
        assert_eq!(
            d.cmdline[..5],
            ["sh", "-c", "sleep 5; :", "sh", "--api-key"]
        );
        assert!(d.cmdline[5].starts_with("redacted:"), "{:?}", d.cmdline);
    }

    #[test]
    fn exited_process_says_so() {
        let mut child = std::process::Command::new("true").spawn().expect("spawn");
        let pid = child.id();
        child.wait().expect("reap");
        let err = ProcReader::new().read(pid).expect_err("gone");
        assert_eq!(err, Unreadable::Exited);
        assert!(err.to_string().contains("exited"), "{err}");
    }
}
