//! Event sets: `nvmlEventSetCreate`, `nvmlDeviceRegisterEvents`,
//! `nvmlEventSetWait(_v2)`, `nvmlEventSetFree`. The only event type is the one
//! this host raises, `nvmlEventTypeXidCriticalError`: an XID the host records
//! in a GPU's `health.xid` ([`simhost::raise_xid`]) is delivered to every set
//! registered for that GPU before it was raised, once, oldest first.
//!
//! A set remembers, per registered GPU, how many XIDs it has delivered. A wait
//! looks at `host.json`'s identity (inode, size, mtime) every few
//! milliseconds, which costs a `stat`, and reads the file only when it has
//! changed: an XID reaches a waiting client within [`POLL`] of being raised, as
//! an interrupt would on a real driver.

use std::collections::HashSet;
use std::ffi::{c_uint, c_ulonglong};
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::driver::driver;
use crate::types::*;
use crate::{code, fail_if, guard, put, with_gpu};

/// How often a wait looks for a new XID.
const POLL: Duration = Duration::from_millis(5);

/// Most events a set may be waited on for at once: NVML's sets are small too.
const MAX_REGISTRATIONS: usize = 1024;

/// `nvmlEventSet_t`: an opaque pointer; ours point to a boxed [`EventSet`].
pub type NvmlEventSet = *mut EventSet;

/// What one set watches: per GPU, the types asked for and the XIDs already
/// delivered (or present when the GPU was registered).
#[derive(Debug, Default)]
pub struct EventSet {
    watched: Mutex<Vec<Watch>>,
}

#[derive(Debug)]
struct Watch {
    gpu: u32,
    types: c_ulonglong,
    delivered: usize,
}

/// Sets handed out and not freed: a freed or made-up pointer is refused
/// instead of being read.
static LIVE: Mutex<Option<HashSet<usize>>> = Mutex::new(None);

fn live() -> std::sync::MutexGuard<'static, Option<HashSet<usize>>> {
    LIVE.lock().unwrap_or_else(|p| p.into_inner())
}

/// Runs `f` on a live set.
fn with_set<T>(set: NvmlEventSet, f: impl FnOnce(&EventSet) -> T) -> Result<T, NvmlReturn> {
    if set.is_null() || !live().get_or_insert_default().contains(&(set as usize)) {
        return Err(ERROR_INVALID_ARGUMENT);
    }
    // SAFETY: in LIVE, so a Box we leaked and have not freed. A concurrent
    // `nvmlEventSetFree` on the same set while it is in use is the caller's
    // error, as with the real library.
    Ok(f(unsafe { &*set }))
}

/// The XIDs GPU `gpu` has raised, read from `host.json` now.
fn xids(dir: &std::path::Path, gpu: u32) -> Result<Vec<simhost::Xid>, NvmlReturn> {
    let inventory = simhost::Inventory::load(dir).map_err(|_| ERROR_UNKNOWN)?;
    Ok(inventory
        .gpus
        .get(gpu as usize)
        .map(|g| g.health.xid.clone())
        .unwrap_or_default())
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlEventSetCreate(set: *mut NvmlEventSet) -> NvmlReturn {
    guard(|| {
        code((|| {
            driver()?;
            if set.is_null() {
                return Err(ERROR_INVALID_ARGUMENT);
            }
            let ptr = Box::into_raw(Box::<EventSet>::default());
            live().get_or_insert_default().insert(ptr as usize);
            put(set, ptr)
        })())
    })
}

/// # Safety
/// `set` is null, or a set from [`nvmlEventSetCreate`] no other thread is
/// using; a pointer that is neither is refused, not read.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlEventSetFree(set: NvmlEventSet) -> NvmlReturn {
    guard(|| {
        code((|| {
            driver()?;
            if set.is_null() || !live().get_or_insert_default().remove(&(set as usize)) {
                return Err(ERROR_INVALID_ARGUMENT);
            }
            // SAFETY: it was in LIVE, so it is a Box of ours, now forgotten there.
            drop(unsafe { Box::from_raw(set) });
            Ok(())
        })())
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetSupportedEventTypes(
    device: NvmlDevice,
    types: *mut c_ulonglong,
) -> NvmlReturn {
    with_gpu(device, |_, _, gpu| {
        fail_if(gpu.faults.events)?;
        put(types, EVENT_TYPE_XID_CRITICAL_ERROR)
    })
}

/// Types this host cannot raise are NOT_SUPPORTED, as the header says for a
/// type the device lacks.
#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceRegisterEvents(
    device: NvmlDevice,
    types: c_ulonglong,
    set: NvmlEventSet,
) -> NvmlReturn {
    with_gpu(device, |index, _, gpu| {
        fail_if(gpu.faults.events)?;
        if types & !EVENT_TYPE_XID_CRITICAL_ERROR != 0 {
            return Err(ERROR_NOT_SUPPORTED);
        }
        // Read now, not from the view (which may be a few ms old): an XID
        // raised before this call is history to this set.
        let present = xids(driver()?.dir(), index)?.len();
        with_set(set, |s| {
            let mut watched = s.watched.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(w) = watched.iter_mut().find(|w| w.gpu == index) {
                w.types |= types;
                return Ok(());
            }
            if watched.len() >= MAX_REGISTRATIONS {
                return Err(ERROR_MEMORY);
            }
            watched.push(Watch {
                gpu: index,
                types,
                delivered: present,
            });
            Ok(())
        })?
    })
}

/// `nvmlEventData_t` as `nvmlEventSetWait_v2` fills it.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct EventData {
    pub device: NvmlDevice,
    pub event_type: c_ulonglong,
    pub event_data: c_ulonglong,
    pub gpu_instance_id: c_uint,
    pub compute_instance_id: c_uint,
}

/// The older layout, without the instance ids.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct EventDataV1 {
    pub device: NvmlDevice,
    pub event_type: c_ulonglong,
    pub event_data: c_ulonglong,
}

/// The identity of `host.json` now: what changes when it is rewritten.
fn identity(path: &std::path::Path) -> Option<(u64, u64, i64, i64)> {
    let m = std::fs::metadata(path).ok()?;
    Some((m.ino(), m.size(), m.mtime(), m.mtime_nsec()))
}

/// Waits up to `timeout_ms` for an XID on a registered GPU: the next one not
/// yet delivered, or TIMEOUT.
fn wait(set: NvmlEventSet, timeout_ms: c_uint) -> Result<EventData, NvmlReturn> {
    let drv = driver()?;
    with_set(set, |_| ())?;
    let dir: PathBuf = drv.dir().to_path_buf();
    let file = dir.join("host.json");
    let deadline = Instant::now() + Duration::from_millis(u64::from(timeout_ms));
    let mut seen = None;
    loop {
        let now = identity(&file);
        if seen.is_none() || now != seen {
            seen = now;
            let found = with_set(set, |s| -> Result<Option<EventData>, NvmlReturn> {
                let mut watched = s.watched.lock().unwrap_or_else(|p| p.into_inner());
                for w in watched.iter_mut() {
                    if w.types & EVENT_TYPE_XID_CRITICAL_ERROR == 0 {
                        continue;
                    }
                    let list = xids(&dir, w.gpu)?;
                    if let Some(x) = list.get(w.delivered) {
                        w.delivered += 1;
                        return Ok(Some(EventData {
                            device: drv.handle(w.gpu)?,
                            event_type: EVENT_TYPE_XID_CRITICAL_ERROR,
                            event_data: x.code,
                            gpu_instance_id: INVALID_INSTANCE_ID,
                            compute_instance_id: INVALID_INSTANCE_ID,
                        }));
                    }
                }
                Ok(None)
            })??;
            if let Some(event) = found {
                return Ok(event);
            }
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(ERROR_TIMEOUT);
        }
        std::thread::sleep(left.min(POLL));
    }
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlEventSetWait_v2(
    set: NvmlEventSet,
    data: *mut EventData,
    timeout_ms: c_uint,
) -> NvmlReturn {
    guard(|| {
        code((|| {
            if data.is_null() {
                return Err(ERROR_INVALID_ARGUMENT);
            }
            put(data, wait(set, timeout_ms)?)
        })())
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlEventSetWait(
    set: NvmlEventSet,
    data: *mut EventDataV1,
    timeout_ms: c_uint,
) -> NvmlReturn {
    guard(|| {
        code((|| {
            if data.is_null() {
                return Err(ERROR_INVALID_ARGUMENT);
            }
            let e = wait(set, timeout_ms)?;
            put(
                data,
                EventDataV1 {
                    device: e.device,
                    event_type: e.event_type,
                    event_data: e.event_data,
                },
            )
        })())
    })
}
