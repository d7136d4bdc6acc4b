//! The roster: every simulated-server process writes one line about itself
//! (`roster/<pid>-<start_ticks>.json` in the host directory) when it starts, so
//! a test can tell afterwards, by identity, which processes existed and whose
//! they were — also those that lived for a moment or escaped their tree.
//!
//! Whose: the [`OWNER_ENV`] variable a process inherited. drainwatch's server
//! config sets it for the server it launches; processes a test starts by hand
//! (decoys, a server to adopt) do not carry it, whatever their command line.

use std::io;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::{fsutil, read_proc_stat};

/// The variable that says who launched a simulated-server process.
pub const OWNER_ENV: &str = "SIMSERVER_OWNER";

/// One process on the roster.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Enlisted {
    pub pid: u32,
    pub start_ticks: u64,
    /// `launcher`, `worker`, `foreign`, `escapee`, `spawnling`, ….
    pub role: String,
    /// [`OWNER_ENV`] as the process inherited it.
    pub owner: Option<String>,
}

/// Puts the calling process on `dir`'s roster.
pub fn enlist(dir: &Path, role: &str) -> io::Result<()> {
    let stat = read_proc_stat(std::process::id())?
        .ok_or_else(|| io::Error::other("no /proc entry for this process"))?;
    let me = Enlisted {
        pid: stat.pid,
        start_ticks: stat.start_ticks,
        role: role.to_owned(),
        owner: std::env::var(OWNER_ENV).ok(),
    };
    let roster = dir.join("roster");
    match std::fs::create_dir(&roster) {
        // The host's processes may be several users' (a service-user
        // drainwatch's server beside a test's): all of them enlist here.
        Ok(()) => {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&roster, std::fs::Permissions::from_mode(0o777))?;
        }
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    let body = serde_json::to_vec(&me).map_err(io::Error::other)?;
    fsutil::write_atomic(
        &roster.join(format!("{}-{}.json", me.pid, me.start_ticks)),
        &body,
    )
}

/// Everyone on `dir`'s roster so far.
pub fn roster(dir: &Path) -> Vec<Enlisted> {
    let Ok(entries) = std::fs::read_dir(dir.join("roster")) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".json"))
        .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
        .filter_map(|e| std::fs::read(e.path()).ok())
        .filter_map(|b| serde_json::from_slice(&b).ok())
        .collect()
}
