//! Atomic writes: readers of the host directory never see half a file.

use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

static TMP_SEQ: AtomicU64 = AtomicU64::new(0);

fn tmp_path(target: &Path) -> PathBuf {
    let seq = TMP_SEQ.fetch_add(1, Ordering::Relaxed);
    let name = format!(
        ".tmp-{}-{}-{}",
        std::process::id(),
        seq,
        target.file_name().and_then(|n| n.to_str()).unwrap_or("x")
    );
    target.with_file_name(name)
}

fn write_tmp(target: &Path, body: &[u8]) -> io::Result<PathBuf> {
    let tmp = tmp_path(target);
    let mut f = fs::File::create(&tmp)?;
    f.write_all(body)?;
    Ok(tmp)
}

/// Writes `body` to `target`, replacing it in one step.
pub(crate) fn write_atomic(target: &Path, body: &[u8]) -> io::Result<()> {
    let tmp = write_tmp(target, body)?;
    fs::rename(&tmp, target).inspect_err(|_| {
        let _ = fs::remove_file(&tmp);
    })
}

/// Writes `body` to `target` only if `target` does not exist yet, in one step.
/// Returns false when another writer got there first.
pub(crate) fn create_atomic(target: &Path, body: &[u8]) -> io::Result<bool> {
    let tmp = write_tmp(target, body)?;
    let linked = fs::hard_link(&tmp, target);
    let _ = fs::remove_file(&tmp);
    match linked {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(false),
        Err(e) => Err(e),
    }
}

/// Removes a file that another reader may have removed already.
pub(crate) fn remove_if_present(path: &Path) -> io::Result<()> {
    match fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}
