//! XID errors: an NVML event set for every GPU that supports them, waited
//! on by a thread of its own (`xid-watch`); the newest of each GPU are kept
//! for the health fields, and every new one goes to the store.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nvml_wrapper::Nvml;
use nvml_wrapper::bitmasks::event::EventTypes;
use nvml_wrapper::enums::event::XidError;
use nvml_wrapper::error::NvmlError;
use shared::health::{XID_SHOWN, XidEvent};

use super::nvml_error::describe;
use crate::clock::now_ms;

/// Where new XID errors go to be stored: (GPU index, UUID, event).
pub type XidSink = tokio::sync::mpsc::Sender<(u32, Option<String>, XidEvent)>;

/// How long one wait blocks: the watcher notices a stop this late at most.
const XID_WAIT_MS: u32 = 250;

/// The XID watcher's thread and what it has seen.
#[derive(Debug)]
pub(super) struct XidWatch {
    seen: Arc<Mutex<XidSeen>>,
    stop: Arc<AtomicBool>,
}

#[derive(Debug, Default)]
struct XidSeen {
    /// Per GPU, newest last, at most [`XID_SHOWN`].
    recent: Vec<VecDeque<XidEvent>>,
    /// Per GPU, why XID errors cannot be watched on it.
    errors: Vec<Option<String>>,
}

impl XidWatch {
    pub(super) fn start(nvml: Arc<Nvml>, sink: Option<XidSink>) -> Option<Self> {
        let count = nvml.device_count().ok()? as usize;
        let seen = Arc::new(Mutex::new(XidSeen {
            recent: vec![VecDeque::new(); count],
            errors: vec![None; count],
        }));
        let stop = Arc::new(AtomicBool::new(false));
        let (seen2, stop2) = (Arc::clone(&seen), Arc::clone(&stop));
        let spawned = std::thread::Builder::new()
            .name("xid-watch".to_owned())
            .spawn(move || watch(&nvml, count, &seen2, &stop2, sink.as_ref()));
        match spawned {
            Ok(_) => Some(Self { seen, stop }),
            Err(e) => {
                tracing::warn!(error = %e, "cannot start the XID watcher");
                None
            }
        }
    }

    /// Tells the thread to stop (it notices within [`XID_WAIT_MS`]).
    pub(super) fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
    }

    pub(super) fn recent(&self, gpu: u32) -> (Vec<XidEvent>, Option<String>) {
        let seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        let i = gpu as usize;
        (
            seen.recent
                .get(i)
                .map(|q| q.iter().copied().collect())
                .unwrap_or_default(),
            seen.errors.get(i).cloned().flatten(),
        )
    }
}

/// The watcher: one event set for every GPU that supports XID events, waited
/// on until told to stop.
fn watch(
    nvml: &Nvml,
    count: usize,
    seen: &Mutex<XidSeen>,
    stop: &AtomicBool,
    sink: Option<&XidSink>,
) {
    let set_error = |i: usize, reason: String| {
        tracing::warn!(gpu = i, %reason, "XID errors cannot be watched on this GPU");
        let mut s = seen.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(slot) = s.errors.get_mut(i) {
            *slot = Some(reason);
        }
    };
    let Some((set, uuids)) = register(nvml, count, &set_error) else {
        return;
    };
    tracing::debug!(gpus = count, "watching XID errors");
    while !stop.load(Ordering::Relaxed) {
        match set.wait(XID_WAIT_MS) {
            Ok(event) => {
                let code = match event.event_data {
                    Some(XidError::Value(code)) => code,
                    Some(XidError::Unknown) | None => 999,
                };
                let Ok(index) = event.device.index() else {
                    continue;
                };
                let uuid = uuids.get(index as usize).cloned().flatten();
                record(seen, sink, index, uuid, code);
            }
            Err(NvmlError::Timeout) => {}
            Err(e) => {
                // A GPU lost, or the driver gone: say so, and do not spin.
                tracing::warn!(error = %describe(&e), "waiting for XID errors failed");
                std::thread::sleep(Duration::from_secs(1));
            }
        }
    }
}

/// An event set with every GPU that supports XID events registered, and
/// each GPU's UUID; `None` when no GPU can be watched. Why a GPU cannot is
/// given to `set_error`. nvml-wrapper frees a set whose registration failed,
/// so a GPU that fails to register is dropped and the set made again with
/// the others.
fn register<'n>(
    nvml: &'n Nvml,
    count: usize,
    set_error: &dyn Fn(usize, String),
) -> Option<(nvml_wrapper::EventSet<'n>, Vec<Option<String>>)> {
    let mut uuids = vec![None; count];
    let mut watched: Vec<u32> = Vec::new();
    for (i, uuid) in uuids.iter_mut().enumerate() {
        let Ok(dev) = nvml.device_by_index(i as u32) else {
            set_error(i, "the GPU cannot be opened".to_owned());
            continue;
        };
        *uuid = dev.uuid().ok();
        match dev.supported_event_types() {
            Ok(t) if t.contains(EventTypes::CRITICAL_XID_ERROR) => watched.push(i as u32),
            Ok(_) => set_error(i, describe(&NvmlError::NotSupported)),
            Err(e) => set_error(i, describe(&e)),
        }
    }
    loop {
        if watched.is_empty() {
            return None;
        }
        let set = match nvml.create_event_set() {
            Ok(s) => s,
            Err(e) => {
                let reason = describe(&e);
                for i in 0..count {
                    set_error(i, reason.clone());
                }
                return None;
            }
        };
        let mut failed = None;
        let mut held = Some(set);
        for &i in &watched {
            let Some(s) = held.take() else { break };
            let registered = nvml
                .device_by_index(i)
                .map_err(Into::into)
                .and_then(|dev| dev.register_events(EventTypes::CRITICAL_XID_ERROR, s));
            match registered {
                Ok(s) => held = Some(s),
                Err(e) => {
                    failed = Some((i, describe(&e.error)));
                    break;
                }
            }
        }
        let Some((i, reason)) = failed else {
            return held.map(|s| (s, uuids));
        };
        set_error(i as usize, reason);
        watched.retain(|w| *w != i);
    }
}

/// XID `code` on GPU `index`: logged, kept among the GPU's recent ones, and
/// handed to the store's sink.
fn record(
    seen: &Mutex<XidSeen>,
    sink: Option<&XidSink>,
    index: u32,
    uuid: Option<String>,
    code: u64,
) {
    let xid = XidEvent {
        code,
        at_ms: now_ms(),
    };
    tracing::warn!(gpu = index, uuid = ?uuid, xid = code, "XID error");
    {
        let mut s = seen.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(q) = s.recent.get_mut(index as usize) {
            if q.len() == XID_SHOWN {
                q.pop_front();
            }
            q.push_back(xid);
        }
    }
    if let Some(sink) = sink
        && sink.try_send((index, uuid, xid)).is_err()
    {
        tracing::warn!(
            gpu = index,
            xid = code,
            "XID not stored: the store is behind"
        );
    }
}
