//! What a GPU driver knows of a process that no `/proc` tells every reader:
//! whether it still lives, and its PID in the host's PID namespace. The NVIDIA
//! driver does not know PID namespaces: it always reports host PIDs, and it
//! charges a context's memory for as long as its process lives, wherever the
//! reader runs (NVIDIA/nvidia-docker#1483). A reader in a container, with a
//! `/proc` of its own, sees neither from there.
//!
//! - **Liveness.** A process that registers itself holds a lock on
//!   `alloc-….life` for as long as it lives (the kernel lets go of it at exit,
//!   SIGKILL included), and a reader asks the lock, not its own `/proc`.
//! - **Host PIDs.** A host whose directory has `driver.sock` (a test host's
//!   [`Driver`] serves it from the host's PID namespace) tells a registering
//!   process its PID as the host sees it: the kernel translates the peer's PID
//!   of a Unix socket into the namespace of whoever asks. Without it, a
//!   process's own PID is the host's.

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// The socket a test host's driver answers on, in the host directory.
pub const SOCKET: &str = "driver.sock";

/// The lock file beside an allocation file.
pub(crate) fn life_path(alloc: &Path) -> PathBuf {
    alloc.with_extension("life")
}

/// Takes the lock that says the calling process lives, for as long as the
/// file returned is open (a context lives as long as its process: see
/// [`crate::Registration::for_self`]).
pub fn hold_life(alloc: &Path) -> io::Result<File> {
    let f = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(life_path(alloc))?;
    f.lock()?;
    Ok(f)
}

/// Whether the process that took `alloc`'s life lock still lives; `None`
/// where it took none (a process registered by someone else).
pub(crate) fn lives(alloc: &Path) -> Option<bool> {
    let f = File::open(life_path(alloc)).ok()?;
    match f.try_lock_shared() {
        Ok(()) => {
            let _ = f.unlock();
            Some(false)
        }
        Err(std::fs::TryLockError::WouldBlock) => Some(true),
        Err(std::fs::TryLockError::Error(_)) => None,
    }
}

/// The calling process's PID as the host's driver sees it.
pub fn host_pid(dir: &Path) -> io::Result<u32> {
    let Ok(mut s) = UnixStream::connect(dir.join(SOCKET)) else {
        return Ok(std::process::id());
    };
    let mut text = String::new();
    s.read_to_string(&mut text)?;
    text.trim()
        .parse()
        .map_err(|_| io::Error::other(format!("the driver said `{text}`, not a PID")))
}

/// A test host's driver: tells each process that connects its host PID.
/// Serves until dropped.
#[derive(Debug)]
pub struct Driver {
    path: PathBuf,
    stop: Arc<AtomicBool>,
}

impl Driver {
    pub fn serve(dir: &Path) -> io::Result<Self> {
        let path = dir.join(SOCKET);
        let listener = UnixListener::bind(&path)?;
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                if flag.load(Ordering::Relaxed) {
                    break;
                }
                let Ok(mut conn) = conn else { continue };
                if let Ok(pid) = peer_pid(&conn) {
                    let _ = conn.write_all(pid.to_string().as_bytes());
                }
            }
        });
        Ok(Self { path, stop })
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // Wakes the accept loop so it sees the flag.
        let _ = UnixStream::connect(&self.path);
        let _ = std::fs::remove_file(&self.path);
    }
}

/// The connecting process's PID, in this process's PID namespace.
#[allow(unsafe_code)]
fn peer_pid(conn: &UnixStream) -> io::Result<u32> {
    use std::os::fd::AsRawFd;
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: getsockopt(SO_PEERCRED) fills a ucred of the size given.
    let rc = unsafe {
        libc::getsockopt(
            conn.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&raw mut cred).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    match u32::try_from(cred.pid) {
        Ok(pid) if pid > 0 => Ok(pid),
        _ => Err(io::Error::other("the peer is in no PID namespace of ours")),
    }
}
