//! The library's state between `nvmlInit` and `nvmlShutdown`: the host directory,
//! its inventory, the device-handle table and a short-lived cache of the host view.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use simhost::{HOST_DIR_ENV, HostView, Inventory};

use crate::types::*;

/// Most GPUs a host may have (NVML's own limit is lower in practice).
pub(crate) const MAX_DEVICES: usize = 64;

/// How long one view of the host is reused. A client's sample is a burst of calls
/// (name, memory, processes… per GPU); within it every call sees one instant.
const VIEW_TTL: Duration = Duration::from_millis(5);

/// Handles are addresses of these slots: stable for the life of the process.
static SLOTS: [DeviceSlot; MAX_DEVICES] = {
    let mut slots = [const { DeviceSlot { index: 0 } }; MAX_DEVICES];
    let mut i = 0;
    while i < MAX_DEVICES {
        slots[i].index = i as u32;
        i += 1;
    }
    slots
};

#[derive(Debug)]
pub(crate) struct Driver {
    dir: PathBuf,
    pub(crate) inventory: Inventory,
    cache: Mutex<Option<(Instant, Arc<HostView>)>>,
}

/// Init count and the driver it guards: NVML's init is reference-counted.
static STATE: Mutex<(u32, Option<Arc<Driver>>)> = Mutex::new((0, None));

fn state() -> MutexGuard<'static, (u32, Option<Arc<Driver>>)> {
    STATE.lock().unwrap_or_else(|p| p.into_inner())
}

/// `nvmlInit*`: the first call finds the host; later calls only count.
pub(crate) fn init() -> NvmlReturn {
    let mut st = state();
    if st.0 > 0 {
        st.0 += 1;
        return SUCCESS;
    }
    let Some(dir) = std::env::var_os(HOST_DIR_ENV).map(PathBuf::from) else {
        return ERROR_DRIVER_NOT_LOADED;
    };
    if !dir.is_dir() {
        return ERROR_DRIVER_NOT_LOADED;
    }
    let inventory = match Inventory::load(&dir) {
        Ok(inv) if inv.gpus.len() <= MAX_DEVICES => inv,
        _ => return ERROR_UNKNOWN,
    };
    *st = (
        1,
        Some(Arc::new(Driver {
            dir,
            inventory,
            cache: Mutex::new(None),
        })),
    );
    SUCCESS
}

/// `nvmlShutdown`: the last call forgets the host.
pub(crate) fn shutdown() -> NvmlReturn {
    let mut st = state();
    match st.0 {
        0 => ERROR_UNINITIALIZED,
        1 => {
            *st = (0, None);
            SUCCESS
        }
        _ => {
            st.0 -= 1;
            SUCCESS
        }
    }
}

/// The driver, or UNINITIALIZED.
pub(crate) fn driver() -> Result<Arc<Driver>, NvmlReturn> {
    state().1.clone().ok_or(ERROR_UNINITIALIZED)
}

impl Driver {
    /// The host's directory.
    pub(crate) fn dir(&self) -> &std::path::Path {
        &self.dir
    }

    pub(crate) fn count(&self) -> u32 {
        self.inventory.gpus.len() as u32
    }

    pub(crate) fn handle(&self, index: u32) -> Result<NvmlDevice, NvmlReturn> {
        if index < self.count() {
            Ok(&SLOTS[index as usize] as NvmlDevice)
        } else {
            Err(ERROR_INVALID_ARGUMENT)
        }
    }

    /// The index behind a handle; INVALID_ARGUMENT for anything we did not hand out.
    pub(crate) fn index_of(&self, device: NvmlDevice) -> Result<u32, NvmlReturn> {
        let base = SLOTS.as_ptr() as usize;
        let addr = device as usize;
        let size = std::mem::size_of::<DeviceSlot>();
        if addr < base || !(addr - base).is_multiple_of(size) {
            return Err(ERROR_INVALID_ARGUMENT);
        }
        let index = (addr - base) / size;
        if index < self.count() as usize {
            Ok(index as u32)
        } else {
            Err(ERROR_INVALID_ARGUMENT)
        }
    }

    /// The fault switches on for GPU `index` now (as of the current view); none
    /// when the host's live state cannot be read.
    pub(crate) fn faults(&self, index: u32) -> simhost::GpuFaults {
        self.view()
            .ok()
            .and_then(|v| v.gpus.get(index as usize).map(|g| g.faults))
            .unwrap_or_default()
    }

    /// The host as it is now (at most [`VIEW_TTL`] old).
    pub(crate) fn view(&self) -> Result<Arc<HostView>, NvmlReturn> {
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((at, view)) = cache.as_ref()
            && at.elapsed() < VIEW_TTL
        {
            return Ok(Arc::clone(view));
        }
        // Aged from when the reading began: a change made while it was being
        // read must not hide behind a view stamped as fresh.
        let began = Instant::now();
        let mut view = simhost::observe(&self.dir, simhost::now_ms()).map_err(|_| ERROR_UNKNOWN)?;
        // GPUs are fixed at init, as with a real driver.
        view.inventory = self.inventory.clone();
        view.gpus
            .resize_with(self.inventory.gpus.len(), || simhost::GpuView {
                used_bytes: 0,
                util_gpu_percent: 0,
                util_mem_percent: 0,
                power_mw: 0,
                temp_c: 0,
                graphics_clock_mhz: 0,
                processes: Vec::new(),
                faults: simhost::GpuFaults::default(),
                health: simhost::GpuHealth::default(),
            });
        let view = Arc::new(view);
        *cache = Some((began, Arc::clone(&view)));
        Ok(view)
    }
}
