//! What the nvml-wrapper tests of the fake share: one simulated host per test
//! process (NVML state is process-wide; each test keeps to GPUs of its own),
//! NVML opened on the fake built beside the test, one writer of `host.json`
//! at a time, and waiting for what the fake shows live.

use std::ffi::OsStr;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use nvml_wrapper::Nvml;
use simhost::{HOST_DIR_ENV, Inventory};

/// The process's host, of `gpus` GPUs (the first call decides).
pub(crate) fn host(gpus: u32) -> &'static tempfile::TempDir {
    static HOST: OnceLock<tempfile::TempDir> = OnceLock::new();
    HOST.get_or_init(|| {
        let dir = tempfile::tempdir().expect("tempdir");
        Inventory::with_gpus(gpus).save(dir.path()).expect("save");
        // SAFETY: set once, before any thread of this process reads it via NVML.
        unsafe { std::env::set_var(HOST_DIR_ENV, dir.path()) };
        dir
    })
}

/// NVML on the fake, over [`host`]'s host.
pub(crate) fn nvml(gpus: u32) -> Nvml {
    host(gpus);
    let lib = std::env::current_exe()
        .expect("test exe")
        .with_file_name("libnvidia_ml.so");
    Nvml::builder()
        .lib_path(OsStr::new(&lib))
        .init()
        .expect("init the fake")
}

/// `host.json` is rewritten whole: one writer at a time.
pub(crate) static WRITE: Mutex<()> = Mutex::new(());

/// Waits (up to 5 s) until `cond` holds.
pub(crate) fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(2));
    }
}
