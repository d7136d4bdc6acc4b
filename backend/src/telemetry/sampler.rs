//! The sampler: a dedicated thread (NVML and /proc calls block) that takes one
//! sample per period on a fixed schedule and publishes it to the [`Hub`]. It stops
//! when its [`SamplerHandle`] is stopped or dropped.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::hub::Hub;
use crate::telemetry::Telemetry;

#[derive(Debug)]
pub struct SamplerHandle {
    stop: Option<mpsc::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl SamplerHandle {
    /// Stops the thread and waits for it.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        self.stop.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for SamplerHandle {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// The interval while `fast` is set (an operation runs): drain timelines want at
/// least 20 points a second, and every phase change is noticed one sample late.
pub const FAST_INTERVAL: Duration = Duration::from_millis(20);

/// Starts sampling every `interval` (or [`FAST_INTERVAL`], if shorter, while
/// `fast` is set).
pub fn spawn(
    mut telemetry: Telemetry,
    hub: Arc<Hub>,
    interval: Duration,
    fast: Arc<AtomicBool>,
) -> std::io::Result<SamplerHandle> {
    let (stop, stopped) = mpsc::channel::<()>();
    let thread = std::thread::Builder::new()
        .name("sampler".to_owned())
        .spawn(move || {
            let mut next = Instant::now();
            loop {
                hub.publish(telemetry.sample());
                let period = if fast.load(Ordering::Relaxed) {
                    interval.min(FAST_INTERVAL)
                } else {
                    interval
                };
                next += period;
                let now = Instant::now();
                if next < now {
                    // Fell behind (a slow read): skip ahead, do not burst.
                    next = now + period;
                }
                match stopped.recv_timeout(next - now) {
                    Err(mpsc::RecvTimeoutError::Timeout) => {}
                    _ => break,
                }
            }
            tracing::debug!("sampler stopped");
        })?;
    Ok(SamplerHandle {
        stop: Some(stop),
        thread: Some(thread),
    })
}
