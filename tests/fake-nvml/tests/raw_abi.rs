//! The fake through its raw C ABI, as a client other than nvml-wrapper reads it:
//! the built cdylib opened with libloading, each entry point resolved by name and
//! called with `nvml.h`'s layouts, declared here independently of the library's
//! own. Checks that the exported set is the documented one and coherent for the
//! driver generation claimed (575.x: every generation of each function it
//! implements), and that all generations of an entry point report the same
//! numbers, take the same fault switches and follow the same two-call protocol.

use std::collections::BTreeSet;
use std::ffi::{CStr, CString, c_char, c_int, c_uint, c_ulonglong, c_void};
use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use libloading::Library;
use simhost::{Fault, GpuFaults, GpuUse, HOST_DIR_ENV, Inventory, Registration};

const MIB: u64 = 1 << 20;

/// Every entry point the library exports, by family. For each function it
/// implements, every generation a 575 driver's `libnvidia-ml.so.1` exports:
/// the real library keeps the older ones (`nvmlInit`, the unsuffixed process
/// lists, `nvmlDeviceGetPciInfo`, …) for binaries built against older headers.
const EXPORTS: &[(&str, &[&str])] = &[
    (
        "init and shutdown",
        &[
            "nvmlInit",
            "nvmlInit_v2",
            "nvmlInitWithFlags",
            "nvmlShutdown",
        ],
    ),
    ("errors", &["nvmlErrorString"]),
    (
        "system",
        &[
            "nvmlSystemGetDriverVersion",
            "nvmlSystemGetNVMLVersion",
            "nvmlSystemGetCudaDriverVersion",
            "nvmlSystemGetCudaDriverVersion_v2",
            "nvmlSystemGetProcessName",
        ],
    ),
    (
        "device count and handles",
        &[
            "nvmlDeviceGetCount",
            "nvmlDeviceGetCount_v2",
            "nvmlDeviceGetHandleByIndex",
            "nvmlDeviceGetHandleByIndex_v2",
            "nvmlDeviceGetHandleByUUID",
            "nvmlDeviceGetHandleBySerial",
            "nvmlDeviceGetHandleByPciBusId",
            "nvmlDeviceGetHandleByPciBusId_v2",
            "nvmlDeviceGetIndex",
        ],
    ),
    (
        "identity",
        &[
            "nvmlDeviceGetName",
            "nvmlDeviceGetUUID",
            "nvmlDeviceGetSerial",
            "nvmlDeviceGetMinorNumber",
            "nvmlDeviceGetBrand",
            "nvmlDeviceGetArchitecture",
            "nvmlDeviceGetCudaComputeCapability",
            "nvmlDeviceGetPciInfo",
            "nvmlDeviceGetPciInfo_v2",
            "nvmlDeviceGetPciInfo_v3",
        ],
    ),
    (
        "memory, load, power, clocks",
        &[
            "nvmlDeviceGetMemoryInfo",
            "nvmlDeviceGetMemoryInfo_v2",
            "nvmlDeviceGetUtilizationRates",
            "nvmlDeviceGetTemperature",
            "nvmlDeviceGetPowerUsage",
            "nvmlDeviceGetPowerManagementLimit",
            "nvmlDeviceGetPowerManagementDefaultLimit",
            "nvmlDeviceGetEnforcedPowerLimit",
            "nvmlDeviceGetClockInfo",
            "nvmlDeviceGetMaxClockInfo",
            "nvmlDeviceGetPerformanceState",
            "nvmlDeviceGetPersistenceMode",
            "nvmlDeviceGetComputeMode",
            "nvmlDeviceGetFanSpeed",
            "nvmlDeviceGetFanSpeed_v2",
            "nvmlDeviceGetNumFans",
            "nvmlDeviceGetTotalEnergyConsumption",
        ],
    ),
    (
        "process lists",
        &[
            "nvmlDeviceGetComputeRunningProcesses",
            "nvmlDeviceGetComputeRunningProcesses_v2",
            "nvmlDeviceGetComputeRunningProcesses_v3",
            "nvmlDeviceGetGraphicsRunningProcesses",
            "nvmlDeviceGetGraphicsRunningProcesses_v2",
            "nvmlDeviceGetGraphicsRunningProcesses_v3",
            "nvmlDeviceGetMPSComputeRunningProcesses",
            "nvmlDeviceGetMPSComputeRunningProcesses_v2",
            "nvmlDeviceGetMPSComputeRunningProcesses_v3",
        ],
    ),
    (
        "health",
        &[
            "nvmlDeviceGetCurrentClocksEventReasons",
            "nvmlDeviceGetCurrentClocksThrottleReasons",
            "nvmlDeviceGetSupportedClocksEventReasons",
            "nvmlDeviceGetSupportedClocksThrottleReasons",
            "nvmlDeviceGetEccMode",
            "nvmlDeviceGetTotalEccErrors",
            "nvmlDeviceGetRetiredPages",
            "nvmlDeviceGetRetiredPages_v2",
            "nvmlDeviceGetRetiredPagesPendingStatus",
            "nvmlDeviceGetRemappedRows",
            "nvmlDeviceGetCurrPcieLinkGeneration",
            "nvmlDeviceGetMaxPcieLinkGeneration",
            "nvmlDeviceGetGpuMaxPcieLinkGeneration",
            "nvmlDeviceGetCurrPcieLinkWidth",
            "nvmlDeviceGetMaxPcieLinkWidth",
            "nvmlDeviceGetPcieSpeed",
            "nvmlDeviceGetPcieThroughput",
            "nvmlDeviceGetEncoderUtilization",
            "nvmlDeviceGetDecoderUtilization",
            "nvmlDeviceGetProcessUtilization",
        ],
    ),
    (
        "asked by monitoring tools (nvitop, gpustat)",
        &[
            "nvmlDeviceGetTemperatureV",
            "nvmlDeviceGetDisplayMode",
            "nvmlDeviceGetDisplayActive",
            "nvmlDeviceGetDriverModel",
            "nvmlDeviceGetBAR1MemoryInfo",
        ],
    ),
    (
        "MIG",
        &[
            "nvmlDeviceGetMigMode",
            "nvmlDeviceGetMaxMigDeviceCount",
            "nvmlDeviceGetMigDeviceHandleByIndex",
            "nvmlDeviceGetDeviceHandleFromMigDeviceHandle",
            "nvmlDeviceIsMigDeviceHandle",
            "nvmlDeviceGetGpuInstanceId",
            "nvmlDeviceGetComputeInstanceId",
        ],
    ),
    (
        "events",
        &[
            "nvmlEventSetCreate",
            "nvmlEventSetFree",
            "nvmlDeviceGetSupportedEventTypes",
            "nvmlDeviceRegisterEvents",
            "nvmlEventSetWait",
            "nvmlEventSetWait_v2",
        ],
    ),
    (
        "not NVML: marks the simulation",
        &["drainwatch_simulated_host"],
    ),
];

fn documented() -> Vec<&'static str> {
    EXPORTS
        .iter()
        .flat_map(|(_, names)| names.iter().copied())
        .collect()
}

// ---------------------------------------------------------------- nvml.h, as a client declares it

type Ret = c_uint;
type Device = *const c_void;

const SUCCESS: Ret = 0;
const INVALID_ARGUMENT: Ret = 2;
const NO_PERMISSION: Ret = 4;
const NOT_FOUND: Ret = 6;
const INSUFFICIENT_SIZE: Ret = 7;
const ARGUMENT_VERSION_MISMATCH: Ret = 25;
const UNKNOWN: Ret = 999;

/// `nvmlProcessInfo_v1_t`: the unsuffixed process lists fill it.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ProcessInfoV1 {
    pid: c_uint,
    used_gpu_memory: c_ulonglong,
}

/// `nvmlProcessInfo_v2_t` = `nvmlProcessInfo_t`: the `_v2` and `_v3` lists fill it.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ProcessInfo {
    pid: c_uint,
    used_gpu_memory: c_ulonglong,
    gpu_instance_id: c_uint,
    compute_instance_id: c_uint,
}

/// `nvmlMemory_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
struct MemoryV1 {
    total: c_ulonglong,
    free: c_ulonglong,
    used: c_ulonglong,
}

/// `nvmlMemory_v2_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
struct MemoryV2 {
    version: c_uint,
    total: c_ulonglong,
    reserved: c_ulonglong,
    free: c_ulonglong,
    used: c_ulonglong,
}

/// `nvmlMemory_v2`: `NVML_STRUCT_VERSION(Memory, 2)`.
const MEMORY_V2: c_uint = 40 | (2 << 24);

/// `nvmlPciInfo_t` (what `_v3` fills).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
struct PciInfo {
    bus_id_legacy: [c_char; 16],
    domain: c_uint,
    bus: c_uint,
    device: c_uint,
    pci_device_id: c_uint,
    pci_sub_system_id: c_uint,
    bus_id: [c_char; 32],
}

/// `nvmlPciInfo_t` before `_v3` (what `nvmlDeviceGetPciInfo` and `_v2` fill).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
struct PciInfoLegacy {
    bus_id: [c_char; 16],
    domain: c_uint,
    bus: c_uint,
    device: c_uint,
    pci_device_id: c_uint,
    pci_sub_system_id: c_uint,
    reserved: [c_uint; 4],
}

type InitFn = unsafe extern "C" fn() -> Ret;
type CountFn = unsafe extern "C" fn(*mut c_uint) -> Ret;
type ByIndexFn = unsafe extern "C" fn(c_uint, *mut Device) -> Ret;
type ByStringFn = unsafe extern "C" fn(*const c_char, *mut Device) -> Ret;
type DeviceStringFn = unsafe extern "C" fn(Device, *mut c_char, c_uint) -> Ret;
type SystemStringFn = unsafe extern "C" fn(*mut c_char, c_uint) -> Ret;
type ListFn<T> = unsafe extern "C" fn(Device, *mut c_uint, *mut T) -> Ret;

// ---------------------------------------------------------------- harness

/// One host for the whole test process (NVML state is process-wide): GPU 1
/// holds the process test's processes, GPU 3 is the fault test's alone, GPUs 0
/// and 2 stay idle.
fn host() -> &'static tempfile::TempDir {
    static HOST: OnceLock<tempfile::TempDir> = OnceLock::new();
    HOST.get_or_init(|| {
        let dir = tempfile::tempdir().expect("tempdir");
        Inventory::with_gpus(4).save(dir.path()).expect("save");
        // SAFETY: set once, before the library is loaded (see `lib`).
        unsafe { std::env::set_var(HOST_DIR_ENV, dir.path()) };
        dir
    })
}

/// The cdylib `cargo test` built beside this test, in `deps/`.
fn lib() -> &'static Library {
    static LIB: OnceLock<Library> = OnceLock::new();
    LIB.get_or_init(|| {
        // The environment is written before any thread can be inside the loader.
        host();
        let path: PathBuf = std::env::current_exe()
            .expect("test exe")
            .with_file_name("libnvidia_ml.so");
        // SAFETY: loading the fake runs no initialisers of its own.
        unsafe { Library::new(&path) }.unwrap_or_else(|e| panic!("load {}: {e}", path.display()))
    })
}

/// Resolves `name` as `T`, which each caller takes from `nvml.h`'s declaration.
fn sym<T: Copy>(name: &str) -> T {
    // SAFETY: T is the header's type for `name` (see each call site).
    let symbol = unsafe { lib().get::<T>(name.as_bytes()) };
    *symbol.unwrap_or_else(|e| panic!("{name} is not exported: {e}"))
}

/// `nvmlInit_v2` … `nvmlShutdown` around a test.
#[derive(Debug)]
struct Session;

impl Session {
    fn start() -> Self {
        let init: InitFn = sym("nvmlInit_v2");
        // SAFETY: no arguments.
        assert_eq!(unsafe { init() }, SUCCESS);
        Self
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        let shutdown: InitFn = sym("nvmlShutdown");
        // SAFETY: no arguments; balances `start`.
        let rc = unsafe { shutdown() };
        if !std::thread::panicking() {
            assert_eq!(rc, SUCCESS);
        }
    }
}

fn device(index: u32) -> Device {
    let by_index: ByIndexFn = sym("nvmlDeviceGetHandleByIndex_v2");
    let mut dev: Device = std::ptr::null();
    // SAFETY: `dev` is a writable handle.
    assert_eq!(unsafe { by_index(index, &mut dev) }, SUCCESS, "GPU {index}");
    dev
}

/// A NUL-terminated string from a fixed array.
fn text(buf: &[c_char]) -> String {
    let bytes: Vec<u8> = buf.iter().map(|&c| c as u8).collect();
    CStr::from_bytes_until_nul(&bytes)
        .expect("NUL-terminated")
        .to_str()
        .expect("UTF-8")
        .to_owned()
}

fn device_string(name: &str, dev: Device) -> String {
    let f: DeviceStringFn = sym(name);
    let mut buf: [c_char; 96] = [0; 96];
    // SAFETY: `buf` has the length passed.
    assert_eq!(
        unsafe { f(dev, buf.as_mut_ptr(), buf.len() as c_uint) },
        SUCCESS,
        "{name}"
    );
    text(&buf)
}

fn system_string(name: &str) -> String {
    let f: SystemStringFn = sym(name);
    let mut buf: [c_char; 80] = [0; 80];
    // SAFETY: `buf` has the length passed.
    assert_eq!(
        unsafe { f(buf.as_mut_ptr(), buf.len() as c_uint) },
        SUCCESS,
        "{name}"
    );
    text(&buf)
}

/// A handle looked up by a string (UUID, serial, PCI bus id).
fn by_string(name: &str, key: &str) -> Result<Device, Ret> {
    let f: ByStringFn = sym(name);
    let key = CString::new(key).expect("no NUL");
    let mut dev: Device = std::ptr::null();
    // SAFETY: a NUL-terminated key and a writable handle.
    match unsafe { f(key.as_ptr(), &mut dev) } {
        SUCCESS => Ok(dev),
        rc => Err(rc),
    }
}

/// Polls `cond` until it holds; fails after 5 s. (The fake reuses one view of
/// the host for a few milliseconds, so a change shows up shortly after.)
fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    let timeout = Duration::from_secs(5);
    let deadline = Instant::now() + timeout;
    while !cond() {
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

// ---------------------------------------------------------------- process lists, two calls

/// A process record in either layout.
trait Record: Copy + PartialEq + std::fmt::Debug {
    /// What no call writes: marks slots that must stay untouched.
    const SENTINEL: Self;
    fn pid_and_used(&self) -> (u32, u64);
}

impl Record for ProcessInfoV1 {
    const SENTINEL: Self = Self {
        pid: 0xDEAD_BEEF,
        used_gpu_memory: 0x5A5A_5A5A_5A5A_5A5A,
    };
    fn pid_and_used(&self) -> (u32, u64) {
        (self.pid, self.used_gpu_memory)
    }
}

impl Record for ProcessInfo {
    const SENTINEL: Self = Self {
        pid: 0xDEAD_BEEF,
        used_gpu_memory: 0x5A5A_5A5A_5A5A_5A5A,
        gpu_instance_id: 0xA5A5_A5A5,
        compute_instance_id: 0xA5A5_A5A5,
    };
    fn pid_and_used(&self) -> (u32, u64) {
        (self.pid, self.used_gpu_memory)
    }
}

/// The size query alone: a count of 0 and no buffer.
fn size_query<T>(f: ListFn<T>, dev: Device) -> (Ret, c_uint) {
    let mut count: c_uint = 0;
    // SAFETY: with a count of 0 the library writes no record.
    let rc = unsafe { f(dev, &mut count, std::ptr::null_mut()) };
    (rc, count)
}

/// Reads one list by the header's two-call protocol, checking every step: the
/// size query, a call with one slot too few, then a call with room to spare
/// (records past the count stay untouched, so each record has the layout's size).
fn records<T: Record>(f: ListFn<T>, dev: Device) -> Vec<T> {
    let (rc, count) = size_query(f, dev);
    let n = count as usize;
    if n == 0 {
        assert_eq!(rc, SUCCESS, "an empty list is a success");
        return Vec::new();
    }
    assert_eq!(rc, INSUFFICIENT_SIZE, "size query of a list of {n}");

    let mut buf = vec![T::SENTINEL; n + 2];
    let mut count = (n - 1) as c_uint;
    // SAFETY: `buf` has room for more than `count` records.
    let rc = unsafe { f(dev, &mut count, buf.as_mut_ptr()) };
    assert_eq!(
        (rc, count as usize),
        (INSUFFICIENT_SIZE, n),
        "one slot short"
    );
    assert!(
        buf.iter().all(|r| *r == T::SENTINEL),
        "written with too little room: {buf:?}"
    );

    let mut count = buf.len() as c_uint;
    // SAFETY: `buf` has room for `count` records.
    let rc = unsafe { f(dev, &mut count, buf.as_mut_ptr()) };
    assert_eq!((rc, count as usize), (SUCCESS, n), "room to spare");
    assert!(
        buf[n..].iter().all(|r| *r == T::SENTINEL),
        "written past {n} records: {buf:?}"
    );
    assert!(buf[..n].iter().all(|r| *r != T::SENTINEL), "{buf:?}");
    buf.truncate(n);
    buf
}

/// A list whose fault switch is on: both calls fail with `code` and touch
/// neither the count nor the buffer.
fn fails_untouched<T: Record>(f: ListFn<T>, dev: Device, code: Ret, what: &str) {
    assert_eq!(size_query(f, dev), (code, 0), "{what}: size query");
    let mut buf = vec![T::SENTINEL; 4];
    let mut count = buf.len() as c_uint;
    // SAFETY: `buf` has room for `count` records.
    let rc = unsafe { f(dev, &mut count, buf.as_mut_ptr()) };
    assert_eq!((rc, count), (code, 4), "{what}: fill");
    assert!(buf.iter().all(|r| *r == T::SENTINEL), "{what}: {buf:?}");
}

fn pids_and_memory<T: Record>(list: &[T]) -> BTreeSet<(u32, u64)> {
    list.iter().map(T::pid_and_used).collect()
}

// ---------------------------------------------------------------- the exported set

#[test]
fn every_documented_entry_point_is_exported() {
    let names = documented();
    let unique: BTreeSet<&str> = names.iter().copied().collect();
    assert_eq!(unique.len(), names.len(), "a name is listed twice");
    let missing: Vec<&str> = names
        .iter()
        .copied()
        // SAFETY: only resolved, never called.
        .filter(|name| unsafe { lib().get::<unsafe extern "C" fn()>(name.as_bytes()) }.is_err())
        .collect();
    assert!(
        missing.is_empty(),
        "documented but not exported: {missing:?}"
    );
}

/// The list above is the source's: every `#[unsafe(no_mangle)]` function of
/// `src/` is in it, and nothing else.
#[test]
fn the_documented_list_is_what_the_source_exports() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/src");
    let mut src = String::new();
    for entry in std::fs::read_dir(dir).expect("read src/") {
        let path = entry.expect("entry").path();
        if path.extension().is_some_and(|e| e == "rs") {
            src += &std::fs::read_to_string(&path).expect("read a source file");
            src.push('\n');
        }
    }
    let lines: Vec<&str> = src.lines().collect();
    let mut in_source = BTreeSet::new();
    for (i, line) in lines.iter().enumerate() {
        if line.trim() != "#[unsafe(no_mangle)]" {
            continue;
        }
        let decl = lines[i + 1..]
            .iter()
            .find(|l| l.contains("fn "))
            .expect("a function after #[unsafe(no_mangle)]");
        let after = &decl[decl.find("fn ").expect("fn") + 3..];
        let name: String = after
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        in_source.insert(name);
    }
    let listed: BTreeSet<String> = documented().into_iter().map(str::to_owned).collect();
    let unlisted: Vec<&String> = in_source.difference(&listed).collect();
    let stale: Vec<&String> = listed.difference(&in_source).collect();
    assert!(unlisted.is_empty(), "exported but not listed: {unlisted:?}");
    assert!(stale.is_empty(), "listed but not exported: {stale:?}");
}

/// Coherence for one driver generation: a versioned entry point (`X_vN`) comes
/// with every older one (`X`, `X_v2` … `X_v(N-1)`), as the real library keeps
/// them. (A process list with only `_v3` is the incoherence this catches.)
#[test]
fn every_versioned_entry_point_comes_with_its_older_generations() {
    let all: BTreeSet<&str> = documented().into_iter().collect();
    for name in &all {
        let Some((base, version)) = name.rsplit_once("_v") else {
            continue;
        };
        let Ok(version) = version.parse::<u32>() else {
            continue;
        };
        assert!(all.contains(base), "{name} is exported without {base}");
        for older in 2..version {
            let older = format!("{base}_v{older}");
            assert!(
                all.contains(older.as_str()),
                "{name} is exported without {older}"
            );
        }
    }
    // The three process lists, each in all three generations.
    for list in ["Compute", "Graphics", "MPSCompute"] {
        for suffix in ["", "_v2", "_v3"] {
            let name = format!("nvmlDeviceGet{list}RunningProcesses{suffix}");
            assert!(all.contains(name.as_str()), "{name} is not exported");
        }
    }
}

// ---------------------------------------------------------------- generations agree

#[test]
fn the_header_layouts_are_the_ones_declared_here() {
    use std::mem::size_of;
    assert_eq!(size_of::<ProcessInfoV1>(), 16);
    assert_eq!(size_of::<ProcessInfo>(), 24);
    assert_eq!(size_of::<MemoryV1>(), 24);
    assert_eq!(size_of::<MemoryV2>(), 40);
    assert_eq!(MEMORY_V2, 0x0200_0028);
    assert_eq!(size_of::<PciInfo>(), 68);
    assert_eq!(size_of::<PciInfoLegacy>(), 52);
}

#[test]
fn process_lists_agree_across_generations() {
    let _nvml = Session::start();
    let dir = host().path();
    // This test process and a child each hold memory on GPU 1.
    let me = Registration::for_self(dir).expect("register self");
    me.set(&[GpuUse {
        gpu: 1,
        used_bytes: 1500 * MIB,
        util_percent: 10,
    }])
    .expect("set own use");
    let mut child = Command::new("sleep").arg("30").spawn().expect("spawn");
    let st = simhost::read_proc_stat(child.id())
        .expect("stat")
        .expect("alive");
    let theirs = Registration::new(dir, st.pid, st.start_ticks);
    theirs
        .set(&[GpuUse {
            gpu: 1,
            used_bytes: 700 * MIB,
            util_percent: 10,
        }])
        .expect("set child's use");
    let expected: BTreeSet<(u32, u64)> =
        [(std::process::id(), 1500 * MIB), (st.pid, 700 * MIB)].into();

    let compute_v1: ListFn<ProcessInfoV1> = sym("nvmlDeviceGetComputeRunningProcesses");
    let compute_v2: ListFn<ProcessInfo> = sym("nvmlDeviceGetComputeRunningProcesses_v2");
    let compute_v3: ListFn<ProcessInfo> = sym("nvmlDeviceGetComputeRunningProcesses_v3");
    let gpu = device(1);
    eventually("both processes on GPU 1", || {
        size_query(compute_v3, gpu) == (INSUFFICIENT_SIZE, 2)
    });

    let v1 = records(compute_v1, gpu);
    let v2 = records(compute_v2, gpu);
    let v3 = records(compute_v3, gpu);
    assert_eq!(pids_and_memory(&v1), expected, "v1: {v1:?}");
    assert_eq!(pids_and_memory(&v2), expected, "_v2: {v2:?}");
    assert_eq!(pids_and_memory(&v3), expected, "_v3: {v3:?}");
    // Not on a MIG instance.
    for r in v2.iter().chain(&v3) {
        assert_eq!(
            (r.gpu_instance_id, r.compute_instance_id),
            (!0, !0),
            "{r:?}"
        );
    }

    // Room enough but no buffer, or no count: refused, in every generation.
    let mut count: c_uint = 8;
    // SAFETY: a null buffer is what is being tested; nothing may be written.
    let rc = unsafe { compute_v1(gpu, &mut count, std::ptr::null_mut()) };
    assert_eq!(rc, INVALID_ARGUMENT);
    // SAFETY: a null count is what is being tested.
    let rc = unsafe { compute_v2(gpu, std::ptr::null_mut(), std::ptr::null_mut()) };
    assert_eq!(rc, INVALID_ARGUMENT);

    // No graphics contexts and no MPS daemon, whichever generation asks.
    let graphics_v1: ListFn<ProcessInfoV1> = sym("nvmlDeviceGetGraphicsRunningProcesses");
    let graphics_v2: ListFn<ProcessInfo> = sym("nvmlDeviceGetGraphicsRunningProcesses_v2");
    let graphics_v3: ListFn<ProcessInfo> = sym("nvmlDeviceGetGraphicsRunningProcesses_v3");
    let mps_v1: ListFn<ProcessInfoV1> = sym("nvmlDeviceGetMPSComputeRunningProcesses");
    let mps_v2: ListFn<ProcessInfo> = sym("nvmlDeviceGetMPSComputeRunningProcesses_v2");
    let mps_v3: ListFn<ProcessInfo> = sym("nvmlDeviceGetMPSComputeRunningProcesses_v3");
    assert!(records(graphics_v1, gpu).is_empty());
    assert!(records(graphics_v2, gpu).is_empty());
    assert!(records(graphics_v3, gpu).is_empty());
    assert!(records(mps_v1, gpu).is_empty());
    assert!(records(mps_v2, gpu).is_empty());
    assert!(records(mps_v3, gpu).is_empty());

    // An idle GPU: an empty list answers the size query with success.
    let idle = device(0);
    assert_eq!(size_query(compute_v1, idle), (SUCCESS, 0));
    assert_eq!(size_query(compute_v2, idle), (SUCCESS, 0));
    assert_eq!(size_query(compute_v3, idle), (SUCCESS, 0));

    // Unregistered while both live (the host tidies only exited owners' files).
    for path in [me.path(), theirs.path()] {
        std::fs::remove_file(path).expect("unregister");
    }
    child.kill().expect("kill");
    child.wait().expect("reap");
}

#[test]
fn process_list_faults_fail_every_generation_alike() {
    let _nvml = Session::start();
    let dir = host().path();
    let gpu = device(3);
    let compute_v1: ListFn<ProcessInfoV1> = sym("nvmlDeviceGetComputeRunningProcesses");
    let compute_v2: ListFn<ProcessInfo> = sym("nvmlDeviceGetComputeRunningProcesses_v2");
    let compute_v3: ListFn<ProcessInfo> = sym("nvmlDeviceGetComputeRunningProcesses_v3");
    let graphics_v1: ListFn<ProcessInfoV1> = sym("nvmlDeviceGetGraphicsRunningProcesses");
    let graphics_v2: ListFn<ProcessInfo> = sym("nvmlDeviceGetGraphicsRunningProcesses_v2");
    let graphics_v3: ListFn<ProcessInfo> = sym("nvmlDeviceGetGraphicsRunningProcesses_v3");
    let mps_v1: ListFn<ProcessInfoV1> = sym("nvmlDeviceGetMPSComputeRunningProcesses");
    let mps_v2: ListFn<ProcessInfo> = sym("nvmlDeviceGetMPSComputeRunningProcesses_v2");
    let mps_v3: ListFn<ProcessInfo> = sym("nvmlDeviceGetMPSComputeRunningProcesses_v3");

    simhost::set_faults(
        dir,
        3,
        GpuFaults {
            compute_processes: Some(Fault::Unknown),
            graphics_processes: Some(Fault::NoPermission),
            ..GpuFaults::default()
        },
    )
    .expect("switch faults on");
    eventually("the compute list to fail", || {
        size_query(compute_v3, gpu).0 == UNKNOWN
    });
    eventually("the graphics list to fail", || {
        size_query(graphics_v3, gpu).0 == NO_PERMISSION
    });
    fails_untouched(compute_v1, gpu, UNKNOWN, "compute v1");
    fails_untouched(compute_v2, gpu, UNKNOWN, "compute _v2");
    fails_untouched(compute_v3, gpu, UNKNOWN, "compute _v3");
    fails_untouched(graphics_v1, gpu, NO_PERMISSION, "graphics v1");
    fails_untouched(graphics_v2, gpu, NO_PERMISSION, "graphics _v2");
    fails_untouched(graphics_v3, gpu, NO_PERMISSION, "graphics _v3");
    // The MPS list has no switch: it still answers.
    assert!(records(mps_v1, gpu).is_empty());
    assert!(records(mps_v2, gpu).is_empty());
    assert!(records(mps_v3, gpu).is_empty());
    // The other GPUs' lists are not switched.
    assert_eq!(size_query(compute_v1, device(2)), (SUCCESS, 0));
    assert_eq!(size_query(graphics_v1, device(2)), (SUCCESS, 0));

    simhost::clear_faults(dir).expect("switch faults off");
    eventually("the lists to answer again", || {
        size_query(compute_v3, gpu).0 == SUCCESS && size_query(graphics_v3, gpu).0 == SUCCESS
    });
    assert!(records(compute_v1, gpu).is_empty());
    assert!(records(compute_v2, gpu).is_empty());
    assert!(records(graphics_v1, gpu).is_empty());
    assert!(records(graphics_v2, gpu).is_empty());
}

#[test]
fn memory_generations_agree() {
    let _nvml = Session::start();
    let gpu = device(2);
    let v1: unsafe extern "C" fn(Device, *mut MemoryV1) -> Ret = sym("nvmlDeviceGetMemoryInfo");
    let v2: unsafe extern "C" fn(Device, *mut MemoryV2) -> Ret = sym("nvmlDeviceGetMemoryInfo_v2");
    let mut m1 = MemoryV1::default();
    // SAFETY: a writable nvmlMemory_t.
    assert_eq!(unsafe { v1(gpu, &mut m1) }, SUCCESS);
    let mut m2 = MemoryV2 {
        version: MEMORY_V2,
        ..MemoryV2::default()
    };
    // SAFETY: a writable nvmlMemory_v2_t with its version set.
    assert_eq!(unsafe { v2(gpu, &mut m2) }, SUCCESS);
    assert_eq!(m2.version, MEMORY_V2);
    assert_eq!((m1.total, m2.total), (96 << 30, 96 << 30));
    assert_eq!(m1.free, m2.free);
    // v1's `used` counts what the driver reserves; v2 reports it apart.
    assert_eq!(m1.used, m2.used + m2.reserved);
    assert_eq!(m2.used + m2.reserved + m2.free, m2.total);
    assert_eq!(m2.used, 4 * MIB, "an idle GPU holds its baseline");

    for version in [0, 40 | (1 << 24), 24 | (2 << 24)] {
        let mut m = MemoryV2 {
            version,
            ..MemoryV2::default()
        };
        // SAFETY: as above; the version is what is being tested.
        let rc = unsafe { v2(gpu, &mut m) };
        assert_eq!(rc, ARGUMENT_VERSION_MISMATCH, "version {version:#x}");
        assert_eq!(m.total, 0, "nothing written on a mismatch");
    }
}

#[test]
fn handle_lookups_agree_across_generations() {
    let _nvml = Session::start();
    let gpu = device(2);

    let count_v1: CountFn = sym("nvmlDeviceGetCount");
    let count_v2: CountFn = sym("nvmlDeviceGetCount_v2");
    let (mut n1, mut n2): (c_uint, c_uint) = (0, 0);
    // SAFETY: writable counts.
    unsafe {
        assert_eq!(count_v1(&mut n1), SUCCESS);
        assert_eq!(count_v2(&mut n2), SUCCESS);
    }
    assert_eq!((n1, n2), (4, 4));

    let by_index_v1: ByIndexFn = sym("nvmlDeviceGetHandleByIndex");
    let mut dev: Device = std::ptr::null();
    // SAFETY: a writable handle.
    assert_eq!(unsafe { by_index_v1(2, &mut dev) }, SUCCESS);
    assert_eq!(dev, gpu, "both generations hand out the same handle");
    // SAFETY: as above.
    assert_eq!(unsafe { by_index_v1(4, &mut dev) }, INVALID_ARGUMENT);

    let uuid = device_string("nvmlDeviceGetUUID", gpu);
    let serial = device_string("nvmlDeviceGetSerial", gpu);
    assert_eq!(by_string("nvmlDeviceGetHandleByUUID", &uuid), Ok(gpu));
    assert_eq!(by_string("nvmlDeviceGetHandleBySerial", &serial), Ok(gpu));
    assert_eq!(
        by_string("nvmlDeviceGetHandleBySerial", "0000000000000"),
        Err(NOT_FOUND)
    );

    let pci_v3: unsafe extern "C" fn(Device, *mut PciInfo) -> Ret = sym("nvmlDeviceGetPciInfo_v3");
    // SAFETY: a writable nvmlPciInfo_t (all-zero is a valid value of it).
    let mut pci: PciInfo = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    assert_eq!(unsafe { pci_v3(gpu, &mut pci) }, SUCCESS);
    let bus_id = text(&pci.bus_id);
    let legacy = text(&pci.bus_id_legacy);
    assert_eq!(bus_id, "00000000:38:00.0");
    for name in [
        "nvmlDeviceGetHandleByPciBusId",
        "nvmlDeviceGetHandleByPciBusId_v2",
    ] {
        // Every spelling the header accepts, and the legacy one `_v3` reports.
        for id in [
            bus_id.as_str(),
            legacy.as_str(),
            "00000000:38:00",
            "0:38:0.0",
            "38:00.0",
        ] {
            assert_eq!(by_string(name, id), Ok(gpu), "{name}({id})");
        }
        assert_eq!(by_string(name, "0000:99:00.0"), Err(NOT_FOUND), "{name}");
        assert_eq!(
            by_string(name, "not a bus id"),
            Err(INVALID_ARGUMENT),
            "{name}"
        );
    }
}

#[test]
fn pci_info_generations_agree() {
    let _nvml = Session::start();
    let gpu = device(2);
    let v3: unsafe extern "C" fn(Device, *mut PciInfo) -> Ret = sym("nvmlDeviceGetPciInfo_v3");
    // SAFETY: all-zero is a valid nvmlPciInfo_t.
    let mut pci: PciInfo = unsafe { std::mem::zeroed() };
    // SAFETY: a writable nvmlPciInfo_t.
    assert_eq!(unsafe { v3(gpu, &mut pci) }, SUCCESS);
    assert_eq!(text(&pci.bus_id), "00000000:38:00.0");
    assert_eq!(text(&pci.bus_id_legacy), "0000:38:00.0");
    assert_eq!((pci.domain, pci.bus, pci.device), (0, 0x38, 0));

    // The legacy struct with a guard after it: the older generations must not
    // write the 68 bytes of `_v3`'s layout into a caller's 52.
    #[repr(C)]
    struct Guarded {
        pci: PciInfoLegacy,
        guard: [u8; 16],
    }
    for name in ["nvmlDeviceGetPciInfo", "nvmlDeviceGetPciInfo_v2"] {
        let f: unsafe extern "C" fn(Device, *mut PciInfoLegacy) -> Ret = sym(name);
        let mut g = Guarded {
            pci: PciInfoLegacy {
                bus_id: [0x55; 16],
                domain: !0,
                bus: !0,
                device: !0,
                pci_device_id: !0,
                pci_sub_system_id: !0,
                reserved: [0xA5A5_A5A5; 4],
            },
            guard: [0xEE; 16],
        };
        // SAFETY: a writable legacy nvmlPciInfo_t.
        assert_eq!(unsafe { f(gpu, &mut g.pci) }, SUCCESS, "{name}");
        assert_eq!(text(&g.pci.bus_id), "0000:38:00.0", "{name}");
        assert_eq!(
            (g.pci.domain, g.pci.bus, g.pci.device),
            (pci.domain, pci.bus, pci.device),
            "{name}"
        );
        assert_eq!(g.pci.pci_device_id, pci.pci_device_id, "{name}");
        assert_eq!(g.pci.pci_sub_system_id, pci.pci_sub_system_id, "{name}");
        assert_eq!(g.pci.reserved, [0; 4], "{name}");
        assert_eq!(g.guard, [0xEE; 16], "{name} wrote past 52 bytes");
    }
}

#[test]
fn init_generations_and_system_versions_agree() {
    let init_v1: InitFn = sym("nvmlInit");
    let init_v2: InitFn = sym("nvmlInit_v2");
    let init_with_flags: unsafe extern "C" fn(c_uint) -> Ret = sym("nvmlInitWithFlags");
    let shutdown: InitFn = sym("nvmlShutdown");
    // SAFETY: no pointers; each init is counted and balanced below.
    unsafe {
        assert_eq!(init_v1(), SUCCESS);
        assert_eq!(init_with_flags(0), SUCCESS);
        assert_eq!(init_v2(), SUCCESS);
    }

    let cuda_v1: unsafe extern "C" fn(*mut c_int) -> Ret = sym("nvmlSystemGetCudaDriverVersion");
    let cuda_v2: unsafe extern "C" fn(*mut c_int) -> Ret = sym("nvmlSystemGetCudaDriverVersion_v2");
    let (mut c1, mut c2): (c_int, c_int) = (0, 0);
    // SAFETY: writable ints.
    unsafe {
        assert_eq!(cuda_v1(&mut c1), SUCCESS);
        assert_eq!(cuda_v2(&mut c2), SUCCESS);
    }
    assert_eq!((c1, c2), (12_090, 12_090));
    assert_eq!(system_string("nvmlSystemGetDriverVersion"), "575.57.08");
    assert_eq!(system_string("nvmlSystemGetNVMLVersion"), "12.575.57.08");

    let error_string: unsafe extern "C" fn(Ret) -> *const c_char = sym("nvmlErrorString");
    for (code, words) in [
        (SUCCESS, "Success"),
        (INSUFFICIENT_SIZE, "Insufficient Size"),
        (ARGUMENT_VERSION_MISMATCH, "Argument version mismatch"),
        (UNKNOWN, "Unknown Error"),
    ] {
        // SAFETY: the library returns a static NUL-terminated string.
        let s = unsafe { CStr::from_ptr(error_string(code)) };
        assert_eq!(s.to_str().expect("UTF-8"), words);
    }

    // SAFETY: no pointers; balances the three inits above.
    unsafe {
        for _ in 0..3 {
            assert_eq!(shutdown(), SUCCESS);
        }
    }
}
