//! The few fields of `/proc/<pid>/stat` the simulated host needs to tell a live
//! process from a dead one or a reused PID.

use std::io;

/// Identity and liveness of one process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcStat {
    pub pid: u32,
    /// Field 3: `R`, `S`, `D`, `Z` (zombie), `X` (dead), …
    pub state: char,
    pub ppid: u32,
    /// Field 5: the process group.
    pub pgid: i32,
    /// Field 22: start time in clock ticks since boot.
    pub start_ticks: u64,
}

impl ProcStat {
    /// A zombie has exited: its GPU contexts are gone even before it is reaped.
    pub fn has_exited(&self) -> bool {
        matches!(self.state, 'Z' | 'X' | 'x')
    }
}

/// Parses one `/proc/<pid>/stat` line. The command name (field 2) may hold spaces
/// and parentheses, so fields are counted from the last `)`.
pub fn parse_proc_stat(pid: u32, line: &str) -> Option<ProcStat> {
    let after = &line[line.rfind(')')? + 1..];
    let mut fields = after.split_ascii_whitespace();
    let state = fields.next()?.chars().next()?;
    let ppid = fields.next()?.parse().ok()?;
    let pgid = fields.next()?.parse().ok()?;
    // Fields 6..=21 lie between pgid and starttime.
    let start_ticks = fields.nth(16)?.parse().ok()?;
    Some(ProcStat {
        pid,
        state,
        ppid,
        pgid,
        start_ticks,
    })
}

/// Every descendant of `pid` now (children, their children, …), found by walking
/// parent links across `/proc`.
pub fn descendants(pid: u32) -> Vec<ProcStat> {
    let all: Vec<ProcStat> = std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|p| read_proc_stat(p).ok().flatten())
        .collect();
    let mut found: Vec<ProcStat> = Vec::new();
    let mut parents = vec![pid];
    while let Some(parent) = parents.pop() {
        for p in all.iter().filter(|p| p.ppid == parent) {
            if !found.iter().any(|f| f.pid == p.pid) {
                found.push(*p);
                parents.push(p.pid);
            }
        }
    }
    found
}

/// Reads `/proc/<pid>/stat`; `Ok(None)` when no such process exists.
pub fn read_proc_stat(pid: u32) -> io::Result<Option<ProcStat>> {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(line) => Ok(parse_proc_stat(pid, &line)),
        Err(e) if matches!(e.kind(), io::ErrorKind::NotFound) || e.raw_os_error() == Some(3) => {
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_name_with_spaces_and_parens() {
        let line = "4242 (python3 (x) y) S 1 4242 4242 0 -1 4194560 1 0 0 0 5 6 0 0 20 0 3 0 98765 1000 20 18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0";
        let st = parse_proc_stat(4242, line).expect("parses");
        assert_eq!(st.state, 'S');
        assert_eq!(st.ppid, 1);
        assert_eq!(st.pgid, 4242);
        assert_eq!(st.start_ticks, 98765);
        assert!(!st.has_exited());
    }

    #[test]
    fn own_process_is_alive() {
        let st = read_proc_stat(std::process::id())
            .expect("readable")
            .expect("present");
        assert_eq!(st.pid, std::process::id());
        assert!(st.start_ticks > 0);
    }

    #[test]
    fn absent_pid_is_none() {
        // PIDs above pid_max (4194304 at most) never exist.
        assert_eq!(read_proc_stat(4_194_305 + 17).expect("no error"), None);
    }
}
