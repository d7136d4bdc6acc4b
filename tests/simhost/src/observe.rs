//! Computes what a driver would report right now from the inventory and the
//! allocation files: memory per GPU and per process, and load-driven utilisation,
//! power and temperature.

use std::fs;
use std::io;
use std::path::Path;

use crate::fsutil::{create_atomic, remove_if_present};
use crate::{Allocation, GpuFaults, Inventory};

/// The host as a driver sees it at one instant.
#[derive(Debug, Clone, PartialEq)]
pub struct HostView {
    pub inventory: Inventory,
    /// One per inventory GPU, same order.
    pub gpus: Vec<GpuView>,
}

/// One GPU's live readings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuView {
    pub used_bytes: u64,
    pub util_gpu_percent: u32,
    pub util_mem_percent: u32,
    pub power_mw: u32,
    pub temp_c: u32,
    pub graphics_clock_mhz: u32,
    /// Processes with a context on this GPU, including ones that exited but whose
    /// memory is not yet released.
    pub processes: Vec<ProcessUse>,
    /// The queries that fail on this GPU now, as `host.json` says at this instant.
    pub faults: GpuFaults,
    /// Its health now, as `host.json` says at this instant.
    pub health: crate::GpuHealth,
}

/// Memory one process holds on one GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcessUse {
    pub pid: u32,
    pub used_bytes: u64,
    /// How busy it keeps the GPU's SMs (0–100; 0 once it has exited).
    pub util_percent: u32,
}

/// Liveness of one allocation's owner.
enum Owner {
    Alive,
    /// Exited; memory still held until the release time.
    TearingDown,
    Released,
    /// Exited, and its memory leaked (see [`crate::Allocation::leaks`]).
    Leaked,
}

/// Reads the host directory at `now_ms`. Exited owners get a tombstone on first
/// sight, and their files are removed once the release delay has passed.
pub fn observe(dir: &Path, now_ms: u64) -> io::Result<HostView> {
    observe_with(dir, Inventory::load(dir)?, now_ms)
}

/// As [`observe`], with an inventory already read (a driver reads it once, at init).
pub fn observe_with(dir: &Path, inventory: Inventory, now_ms: u64) -> io::Result<HostView> {
    let mut load: Vec<(u64, u32, Vec<ProcessUse>)> = vec![(0, 0, Vec::new()); inventory.gpus.len()];
    for (path, alloc) in crate::allocations(dir)? {
        let live = match owner_state(&path, &alloc, inventory.release_delay_ms, now_ms)? {
            Owner::Released => continue,
            Owner::Alive => true,
            Owner::TearingDown => false,
            // The driver holds it for no process: counted, never listed.
            Owner::Leaked => {
                for u in &alloc.gpus {
                    if let Some(slot) = load.get_mut(u.gpu as usize) {
                        slot.0 = slot.0.saturating_add(u.used_bytes);
                    }
                }
                continue;
            }
        };
        for u in &alloc.gpus {
            let Some(slot) = load.get_mut(u.gpu as usize) else {
                continue;
            };
            slot.0 = slot.0.saturating_add(u.used_bytes);
            if live {
                slot.1 = slot.1.saturating_add(u.util_percent);
            }
            slot.2.push(ProcessUse {
                pid: alloc.pid,
                used_bytes: u.used_bytes,
                util_percent: if live { u.util_percent.min(100) } else { 0 },
            });
        }
    }
    let gpus = inventory
        .gpus
        .iter()
        .zip(load)
        .enumerate()
        .map(|(i, (spec, (held, util, mut processes)))| {
            processes.sort_by_key(|p| p.pid);
            let used_bytes = spec
                .baseline_bytes
                .saturating_add(held)
                .min(spec.total_bytes.saturating_sub(spec.reserved_bytes));
            let util = util.min(100);
            let mem_frac = used_bytes as f64 / spec.total_bytes.max(1) as f64;
            readings(
                spec, i as u32, util, mem_frac, used_bytes, processes, now_ms,
            )
        })
        .collect();
    Ok(HostView { inventory, gpus })
}

fn owner_state(path: &Path, alloc: &Allocation, delay_ms: u64, now_ms: u64) -> io::Result<Owner> {
    if crate::owner_lives(path, alloc)? {
        return Ok(Owner::Alive);
    }
    if alloc.leaks {
        return Ok(Owner::Leaked);
    }
    let tomb = path.with_extension("gone");
    let gone_at = if create_atomic(&tomb, now_ms.to_string().as_bytes())? {
        if !path.exists() {
            // Another reader released it after we listed it: our tombstone is stray.
            remove_if_present(&tomb)?;
            return Ok(Owner::Released);
        }
        now_ms
    } else {
        match fs::read_to_string(&tomb) {
            Ok(s) => s.trim().parse().unwrap_or(now_ms),
            // Released by another reader between our two steps.
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Owner::Released),
            Err(e) => return Err(e),
        }
    };
    if now_ms < gone_at.saturating_add(delay_ms) {
        return Ok(Owner::TearingDown);
    }
    crate::release(path)?;
    Ok(Owner::Released)
}

/// Smooth, deterministic wobble in [-1, 1] so idle readings are not frozen.
fn wobble(now_ms: u64, gpu: u32, period_ms: f64) -> f64 {
    let t = now_ms as f64 / period_ms + f64::from(gpu) * 1.7;
    (t.sin() * 0.7 + (t * 2.3).sin() * 0.3).clamp(-1.0, 1.0)
}

fn readings(
    spec: &crate::GpuSpec,
    gpu: u32,
    util: u32,
    mem_frac: f64,
    used_bytes: u64,
    processes: Vec<ProcessUse>,
    now_ms: u64,
) -> GpuView {
    let load = f64::from(util) / 100.0;
    // Holding most of the memory costs some power and heat even when idle.
    let holding = mem_frac.min(1.0) * 0.08;
    let idle = f64::from(spec.idle_power_mw);
    let span = f64::from(spec.power_limit_mw) * 0.97 - idle;
    let power = idle + span * (load * 0.92 + holding) + 1_500.0 * wobble(now_ms, gpu, 1_900.0);
    let temp_span = f64::from(spec.load_temp_c.saturating_sub(spec.idle_temp_c));
    let temp = f64::from(spec.idle_temp_c)
        + temp_span * (load * 0.9 + holding)
        + 0.6 * wobble(now_ms, gpu, 7_300.0);
    let clock = if util > 0 {
        f64::from(spec.max_graphics_clock_mhz) * (0.85 + 0.15 * load)
    } else {
        180.0
    };
    GpuView {
        used_bytes,
        util_gpu_percent: util,
        util_mem_percent: (f64::from(util) * 0.55).round() as u32,
        power_mw: power.clamp(idle * 0.9, f64::from(spec.power_limit_mw)) as u32,
        temp_c: temp.round().max(0.0) as u32,
        graphics_clock_mhz: clock.round() as u32,
        processes,
        faults: spec.faults,
        health: spec.health.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{GpuUse, Registration, read_proc_stat};

    const MIB: u64 = 1 << 20;

    fn host(delay_ms: u64) -> tempfile::TempDir {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut inv = Inventory::with_gpus(2);
        inv.release_delay_ms = delay_ms;
        inv.save(dir.path()).expect("save");
        dir
    }

    fn use_(gpu: u32, mib: u64) -> GpuUse {
        GpuUse {
            gpu,
            used_bytes: mib * MIB,
            util_percent: 40,
        }
    }

    #[test]
    fn idle_host_sits_at_baseline() {
        let dir = host(1000);
        let view = observe(dir.path(), 1_000).expect("observe");
        assert_eq!(view.gpus.len(), 2);
        for g in &view.gpus {
            assert_eq!(g.used_bytes, 4 * MIB);
            assert_eq!(g.util_gpu_percent, 0);
            assert!(g.processes.is_empty());
        }
    }

    #[test]
    fn live_process_memory_counts_on_its_gpu() {
        let dir = host(1000);
        let reg = Registration::for_self(dir.path()).expect("register");
        reg.set(&[use_(1, 2048)]).expect("set");
        let view = observe(dir.path(), 1_000).expect("observe");
        assert_eq!(view.gpus[0].used_bytes, 4 * MIB);
        assert_eq!(view.gpus[1].used_bytes, (4 + 2048) * MIB);
        assert_eq!(view.gpus[1].util_gpu_percent, 40);
        assert_eq!(
            view.gpus[1].processes,
            vec![ProcessUse {
                pid: std::process::id(),
                used_bytes: 2048 * MIB,
                util_percent: 40,
            }]
        );
    }

    #[test]
    fn dead_process_memory_is_released_only_after_the_delay() {
        let dir = host(500);
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .expect("spawn sleep");
        let pid = child.id();
        let st = read_proc_stat(pid).expect("stat").expect("present");
        Registration::new(dir.path(), pid, st.start_ticks)
            .set(&[use_(0, 1024)])
            .expect("set");
        assert_eq!(
            observe(dir.path(), 10_000).expect("o").gpus[0].used_bytes,
            1028 * MIB
        );

        child.kill().expect("kill");
        child.wait().expect("reap");
        // First sight of the exit at t=20s: still held, no load.
        let v = observe(dir.path(), 20_000).expect("o");
        assert_eq!(v.gpus[0].used_bytes, 1028 * MIB);
        assert_eq!(v.gpus[0].util_gpu_percent, 0);
        assert_eq!(v.gpus[0].processes.len(), 1);
        // Still held just before the delay ends, whatever the reader.
        assert_eq!(
            observe(dir.path(), 20_499).expect("o").gpus[0].used_bytes,
            1028 * MIB
        );
        // Released at the delay, files gone.
        let v = observe(dir.path(), 20_500).expect("o");
        assert_eq!(v.gpus[0].used_bytes, 4 * MIB);
        assert!(v.gpus[0].processes.is_empty());
        let left: Vec<_> = fs::read_dir(dir.path())
            .expect("ls")
            .map(|e| e.expect("entry").file_name())
            .filter(|n| n != "host.json")
            .collect();
        assert!(left.is_empty(), "left behind: {left:?}");
    }

    /// A process of another PID namespace (a host PID this `/proc` lacks) is
    /// charged for as long as it lives, as the driver charges it, and no
    /// longer: its life lock says so, not the reader's `/proc`.
    #[test]
    fn a_process_this_proc_cannot_see_is_charged_while_it_lives() {
        let dir = host(300);
        // Above any pid_max (4,194,304): no /proc anywhere has it.
        let reg = Registration::new(dir.path(), 4_194_400, 1);
        // The lock is held by a process of its own, not this one: the other
        // tests here fork, and a fork keeps this process's open files (the
        // lock with them) until it execs, which under load can outlast the
        // drop below. util-linux's `flock --no-fork` takes it and becomes
        // `sleep` holding it.
        let mut life = std::process::Command::new("flock")
            .arg("--no-fork")
            .arg(crate::driver::life_path(reg.path()))
            .args(["sleep", "600"])
            .spawn()
            .expect("flock (util-linux)");
        let taken = std::time::Instant::now();
        while crate::driver::lives(reg.path()) != Some(true) {
            assert!(taken.elapsed().as_secs() < 10, "flock never took the lock");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        reg.set(&[use_(1, 2048)]).expect("set");
        for now in [1_000, 60_000] {
            let v = observe(dir.path(), now).expect("o");
            assert_eq!(v.gpus[1].used_bytes, 2052 * MIB, "at {now} ms");
            assert_eq!(v.gpus[1].processes[0].pid, 4_194_400);
        }
        life.kill().expect("kill the holder");
        life.wait().expect("reap the holder");
        let v = observe(dir.path(), 61_000).expect("o");
        assert_eq!(v.gpus[1].used_bytes, 2052 * MIB, "released at once");
        let v = observe(dir.path(), 61_400).expect("o");
        assert_eq!(v.gpus[1].used_bytes, 4 * MIB);
        assert!(v.gpus[1].processes.is_empty());
    }

    #[test]
    fn the_driver_tells_a_process_its_host_pid() {
        let dir = host(0);
        assert_eq!(
            crate::driver::host_pid(dir.path()).expect("no driver"),
            std::process::id()
        );
        let driver = crate::driver::Driver::serve(dir.path()).expect("serve");
        assert_eq!(
            crate::driver::host_pid(dir.path()).expect("asked"),
            std::process::id()
        );
        drop(driver);
        assert!(!dir.path().join(crate::driver::SOCKET).exists());
    }

    #[test]
    fn reused_pid_with_another_start_time_is_not_the_owner() {
        let dir = host(0);
        let me = read_proc_stat(std::process::id())
            .expect("stat")
            .expect("me");
        Registration::new(dir.path(), me.pid, me.start_ticks + 1)
            .set(&[use_(0, 512)])
            .expect("set");
        let v = observe(dir.path(), 5_000).expect("o");
        assert_eq!(v.gpus[0].used_bytes, 4 * MIB);
    }

    #[test]
    fn load_raises_power_and_temperature() {
        let dir = host(1000);
        let idle = observe(dir.path(), 1_000).expect("o").gpus[0].clone();
        let reg = Registration::for_self(dir.path()).expect("register");
        reg.set(&[GpuUse {
            gpu: 0,
            used_bytes: 80 << 30,
            util_percent: 95,
        }])
        .expect("set");
        let busy = observe(dir.path(), 1_000).expect("o").gpus[0].clone();
        assert!(
            busy.power_mw > idle.power_mw + 300_000,
            "{busy:?} vs {idle:?}"
        );
        assert!(busy.temp_c > idle.temp_c + 30);
        assert!(busy.power_mw <= 600_000);
    }

    #[test]
    fn memory_never_exceeds_the_card() {
        let dir = host(1000);
        let reg = Registration::for_self(dir.path()).expect("register");
        reg.set(&[use_(0, 200 * 1024)]).expect("set");
        let v = observe(dir.path(), 1_000).expect("o");
        assert_eq!(v.gpus[0].used_bytes, 96 << 30);
    }

    #[test]
    fn leaked_memory_stays_charged_with_no_process_until_a_reset() {
        let dir = host(500);
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .expect("spawn sleep");
        let pid = child.id();
        let st = read_proc_stat(pid).expect("stat").expect("present");
        Registration::new(dir.path(), pid, st.start_ticks)
            .leaking()
            .set(&[use_(1, 2048)])
            .expect("set");
        child.kill().expect("kill");
        child.wait().expect("reap");
        // Long past the release delay: still charged, and nobody listed.
        let v = observe(dir.path(), 60_000).expect("o");
        assert_eq!(v.gpus[1].used_bytes, 2052 * MIB);
        assert!(v.gpus[1].processes.is_empty(), "{:?}", v.gpus[1].processes);
        // A reset of another GPU frees nothing; of this one, the leak.
        assert_eq!(crate::reset_gpu(dir.path(), 0).expect("reset"), 0);
        assert_eq!(crate::reset_gpu(dir.path(), 1).expect("reset"), 1);
        assert_eq!(
            observe(dir.path(), 61_000).expect("o").gpus[1].used_bytes,
            4 * MIB
        );
    }
}
