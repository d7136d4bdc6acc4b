//! Launch logs: the server writes straight into a file (so drainwatch can restart
//! without breaking the server's stdout), and drainwatch follows the file for the
//! newest lines. A file over [`MAX_LOG_BYTES`] is copied aside and truncated (the
//! server appends, so it carries on at the new end); old launches' files are pruned.
//! Lines are redacted ([`crate::redact`]) whole, as they come in: the tail never
//! holds a secret, nor a piece of a line that could start inside one.

use std::collections::VecDeque;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

/// Lines kept in memory for the UI and for failure reports.
const TAIL_LINES: usize = 200;
/// A launch log larger than this is rotated once (to `*.1`).
const MAX_LOG_BYTES: u64 = 64 << 20;
/// Launch logs kept on disk.
const KEEP_LOGS: usize = 20;
/// Longest line kept (the rest is cut, after redaction).
const MAX_LINE: usize = 2_000;
/// Longest line redacted whole (SGLang's `server_args=ServerArgs(…)` is long);
/// a longer one is dropped rather than shown from its middle.
const MAX_PARTIAL: usize = 256 * 1024;

/// The newest lines of one launch's log file.
#[derive(Debug)]
pub struct LogTail {
    path: PathBuf,
    offset: u64,
    partial: String,
    /// What comes up to the next newline is the rest of a line whose start
    /// was skipped: it is dropped.
    mid_line: bool,
    lines: VecDeque<String>,
}

/// Whether the byte before `offset` in `path` is a newline.
fn ends_a_line(path: &Path, offset: u64) -> bool {
    use std::io::{Read, Seek, SeekFrom};
    let Ok(mut f) = std::fs::File::open(path) else {
        return true;
    };
    let mut b = [0u8; 1];
    f.seek(SeekFrom::Start(offset - 1)).is_ok() && f.read_exact(&mut b).is_ok() && b[0] == b'\n'
}

impl LogTail {
    /// Follows `path`, starting at its current end (`from_start`: at its beginning).
    pub fn follow(path: &Path, from_start: bool) -> Self {
        let offset = if from_start {
            0
        } else {
            std::fs::metadata(path).map(|m| m.len()).unwrap_or(0)
        };
        // Starting at the end of a line cut short (block-buffered output), the
        // rest of that line is not shown: its start may have named a secret.
        let mid_line = offset > 0 && !ends_a_line(path, offset);
        Self {
            path: path.to_owned(),
            offset,
            partial: String::new(),
            mid_line,
            lines: VecDeque::new(),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Reads what was appended since the last call; true if anything was.
    pub fn poll(&mut self) -> bool {
        let Ok(mut f) = File::open(&self.path) else {
            return false;
        };
        let len = f.metadata().map(|m| m.len()).unwrap_or(0);
        if len < self.offset {
            // Truncated (rotated): start over.
            self.offset = 0;
        }
        if len == self.offset {
            return false;
        }
        // Never read more than the tail can show.
        let start = self
            .offset
            .max(len.saturating_sub((TAIL_LINES * MAX_LINE) as u64));
        if f.seek(SeekFrom::Start(start)).is_err() {
            return false;
        }
        if start > self.offset {
            // Skipped ahead, most likely into the middle of a line.
            self.partial.clear();
            self.mid_line = true;
        }
        let mut buf = Vec::new();
        if f.take(len - start).read_to_end(&mut buf).is_err() {
            return false;
        }
        self.offset = len;
        self.partial.push_str(&String::from_utf8_lossy(&buf));
        let redactor = crate::redact::global();
        while let Some(i) = self.partial.find('\n') {
            if !std::mem::take(&mut self.mid_line) {
                let line: String = redactor
                    .text(self.partial[..i].trim_end_matches('\r'))
                    .chars()
                    .take(MAX_LINE)
                    .collect();
                if self.lines.len() == TAIL_LINES {
                    self.lines.pop_front();
                }
                self.lines.push_back(line);
            }
            self.partial.drain(..=i);
        }
        if self.partial.len() > MAX_PARTIAL {
            self.partial.clear();
            self.mid_line = true;
        }
        if len > MAX_LOG_BYTES {
            rotate(&self.path);
        }
        true
    }

    /// The newest `n` lines.
    pub fn last(&self, n: usize) -> Vec<String> {
        let skip = self.lines.len().saturating_sub(n);
        self.lines.iter().skip(skip).cloned().collect()
    }
}

/// Copies the file to `*.1` and truncates it.
fn rotate(path: &Path) {
    let aside = path.with_extension("log.1");
    if std::fs::copy(path, &aside).is_ok() {
        let _ = std::fs::OpenOptions::new()
            .write(true)
            .open(path)
            .and_then(|f| f.set_len(0));
    }
}

/// Deletes the logs of all but the newest [`KEEP_LOGS`] launches in `dir` (a
/// launch's log is `launch-N.log` and its rotated `launch-N.log.1`).
pub fn prune(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    // Per launch: its newest file's time, and its files.
    let mut launches: std::collections::HashMap<String, (std::time::SystemTime, Vec<PathBuf>)> =
        std::collections::HashMap::new();
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(stem) = name
            .strip_suffix(".log.1")
            .or_else(|| name.strip_suffix(".log"))
            .filter(|s| s.starts_with("launch-"))
        else {
            continue;
        };
        let Some(at) = e.metadata().and_then(|m| m.modified()).ok() else {
            continue;
        };
        let entry = launches
            .entry(stem.to_owned())
            .or_insert((std::time::UNIX_EPOCH, Vec::new()));
        entry.0 = entry.0.max(at);
        entry.1.push(e.path());
    }
    let mut launches: Vec<_> = launches.into_values().collect();
    launches.sort_by_key(|l| std::cmp::Reverse(l.0));
    for (_, files) in launches.into_iter().skip(KEEP_LOGS) {
        for p in files {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// Whether a log tail shows the server failing to bind `port` (a line that
/// says the address is in use and names the port: not NCCL's or another
/// library's clash on a port of its own).
pub fn looks_like_port_in_use(lines: &[String], port: u16) -> bool {
    let port = port.to_string();
    lines.iter().rev().take(100).any(|l| {
        let l = l.to_ascii_lowercase();
        (l.contains("address already in use") || l.contains("eaddrinuse"))
            && l.split(|c: char| !c.is_ascii_digit()).any(|n| n == port)
    })
}

/// Whether a log tail shows the process running out of (GPU) memory.
pub fn looks_like_oom(lines: &[String]) -> bool {
    lines.iter().rev().take(100).any(|l| {
        let l = l.to_ascii_lowercase();
        l.contains("out of memory") || l.contains("outofmemoryerror")
    })
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    #[test]
    fn follows_appends_and_partial_lines() {
        let dir = tempfile::tempdir().expect("tmp");
        let path = dir.path().join("launch-1.log");
        let mut f = File::create(&path).expect("create");
        writeln!(f, "before").expect("w");
        let mut tail = LogTail::follow(&path, false);
        assert!(!tail.poll());
        write!(f, "one\ntw").expect("w");
        assert!(tail.poll());
        assert_eq!(tail.last(10), vec!["one".to_owned()]);
        writeln!(f, "o").expect("w");
        tail.poll();
        assert_eq!(tail.last(10), vec!["one".to_owned(), "two".to_owned()]);
        // Truncation starts over.
        f.set_len(0).expect("truncate");
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .expect("reopen");
        writeln!(f, "three").expect("w");
        tail.poll();
        assert_eq!(tail.last(1), vec!["three".to_owned()]);
    }

    #[test]
    fn lines_are_redacted_whole() {
        let dir = tempfile::tempdir().expect("tmp");
        let path = dir.path().join("launch-1.log");
        let mut f = File::create(&path).expect("create");
        let mut tail = LogTail::follow(&path, true);
        // A long line arriving in pieces is redacted once it is whole.
        let pad = "x".repeat(3 * MAX_LINE);
        write!(f, "server_args=ServerArgs(pad='{pad}', api_key='sk-log").expect("w");
        tail.poll();
        writeln!(f, "-secret', port=1)").expect("w");
        writeln!(f, "launch --api-key sk-log-secret --tp 8").expect("w");
        tail.poll();
        let lines = tail.last(10);
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert!(lines.iter().all(|l| !l.contains("secret")), "{lines:?}");
        assert_eq!(lines[0].chars().count(), MAX_LINE);
        assert!(
            lines[1].starts_with("launch --api-key redacted:"),
            "{lines:?}"
        );
    }

    #[test]
    fn a_line_whose_start_was_skipped_is_dropped() {
        let dir = tempfile::tempdir().expect("tmp");
        let path = dir.path().join("launch-1.log");
        let mut f = File::create(&path).expect("create");
        let mut tail = LogTail::follow(&path, true);
        // More than the tail can show arrives at once: reading starts inside
        // the first line, whose rest is no line to show.
        let long = "y".repeat(TAIL_LINES * MAX_LINE);
        writeln!(f, "api_key='sk-skip-secret' {long}").expect("w");
        writeln!(f, "next").expect("w");
        tail.poll();
        assert_eq!(tail.last(10), vec!["next".to_owned()]);
    }

    #[test]
    fn oom_is_recognised() {
        let lines = vec![
            "loading weights".to_owned(),
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB".to_owned(),
        ];
        assert!(looks_like_oom(&lines));
        assert!(!looks_like_oom(&["ready".to_owned()]));
    }

    #[test]
    fn pruning_keeps_the_newest_launches_with_their_rotated_logs() {
        let dir = tempfile::tempdir().expect("tmp");
        let old = std::time::SystemTime::now() - std::time::Duration::from_secs(3_600);
        for n in 0..(KEEP_LOGS + 3) {
            let at = old + std::time::Duration::from_secs(n as u64);
            for name in [format!("launch-{n}.log"), format!("launch-{n}.log.1")] {
                let f = File::create(dir.path().join(name)).expect("create");
                f.set_modified(at).expect("mtime");
            }
        }
        File::create(dir.path().join("drainwatch.db")).expect("other");
        prune(dir.path());
        let mut left: Vec<String> = std::fs::read_dir(dir.path())
            .expect("dir")
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(left.len(), 2 * KEEP_LOGS + 1, "{left:?}");
        assert!(left.contains(&"drainwatch.db".to_owned()));
        assert!(left.contains(&format!("launch-{}.log.1", KEEP_LOGS + 2)));
        assert!(!left.contains(&"launch-2.log".to_owned()), "{left:?}");
        assert!(left.contains(&"launch-3.log".to_owned()), "{left:?}");
    }

    #[test]
    fn a_taken_port_is_recognised_in_the_log() {
        let l = |s: &str| vec![s.to_owned()];
        assert!(looks_like_port_in_use(
            &l(
                "OSError: [Errno 98] error while attempting to bind on address ('0.0.0.0', 30000): address already in use"
            ),
            30000
        ));
        assert!(looks_like_port_in_use(
            &l("listen EADDRINUSE :::30000"),
            30000
        ));
        assert!(!looks_like_port_in_use(
            &l("server listening on 30000"),
            30000
        ));
        // Another port's clash (NCCL's, say) is not the server's port in use.
        assert!(!looks_like_port_in_use(
            &l(
                "RuntimeError: The server socket has failed to bind to [::]:29500 (errno: 98 - Address already in use)"
            ),
            30000
        ));
        assert!(!looks_like_port_in_use(&l("EADDRINUSE :::300001"), 30000));
    }
}
