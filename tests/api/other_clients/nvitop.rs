//! nvitop: `nvitop --once` prints its table from the fake with nothing on
//! stderr and shows drainwatch's memory and processes, to the digits it
//! prints; its Python API reads the same bytes.

use super::{Busy, MIB, ours, pytools_dir, quiet_stdout};
use tests::GIB;

/// Each GPU through nvitop's own API (its own process-record layout, chosen
/// by the symbols the library exports: a wrong guess garbles the bytes).
const API: &str = r#"
import json
from nvitop import Device
out = []
for d in Device.all():
    procs = d.processes().values()
    out.append({"index": d.index, "used": d.memory_used(), "total": d.memory_total(),
                "procs": sorted([p.pid, p.gpu_memory()] for p in procs)})
print(json.dumps(out))
"#;

/// What `nvitop --once` shows: per GPU its index and "used / total" cell, and
/// the process table's (GPU, PID, GPU-MEM) rows.
#[derive(Debug, Default)]
struct Table {
    gpus: Vec<(u32, String)>,
    procs: Vec<(u32, u32, String)>,
}

fn cells(line: &str) -> Vec<&str> {
    line.split(['│', '|']).map(str::trim).collect()
}

/// The leading numbers of a cell ("0  ..RO 6000 Blackwell" → [0]).
fn numbers(cell: &str, n: usize) -> Option<Vec<u32>> {
    cell.split_whitespace()
        .take(n)
        .map(|t| t.parse().ok())
        .collect::<Option<Vec<u32>>>()
        .filter(|v| v.len() == n)
}

fn parse(stdout: &str) -> Table {
    let lines: Vec<&str> = stdout.lines().collect();
    let mut table = Table::default();
    let mut in_processes = false;
    for (i, line) in lines.iter().enumerate() {
        in_processes |= line.contains("Processes:");
        let c = cells(line);
        let Some(first) = c.get(1) else { continue };
        if in_processes {
            // GPU  PID  type  USER  GPU-MEM …
            let t: Vec<&str> = first.split_whitespace().collect();
            if let (Some(ids), Some(mem)) = (numbers(first, 2), t.get(4)) {
                table.procs.push((ids[0], ids[1], (*mem).to_owned()));
            }
        } else if let Some(ids) = numbers(first, 1)
            // A GPU's first line has its bus id; its second, memory "used / total".
            && c.get(2).is_some_and(|bus| bus.contains(':'))
            && let Some(memory) = lines.get(i + 1).and_then(|l| cells(l).get(2).copied())
        {
            table.gpus.push((ids[0], memory.to_owned()));
        }
    }
    table
}

/// Whether nvitop's rendering of a size ("96.00GiB", "10244MiB", "4.00MiB")
/// is `bytes`, to within half its last digit.
fn shows(text: &str, bytes: u64) -> bool {
    let Some(at) = text.find(|c: char| c.is_ascii_alphabetic()) else {
        return false;
    };
    let (number, unit) = text.split_at(at);
    let unit = match unit {
        "B" => 1.0,
        "KiB" => 1024.0,
        "MiB" => MIB as f64,
        "GiB" => GIB as f64,
        _ => return false,
    };
    let decimals = number.split_once('.').map_or(0, |(_, d)| d.len());
    let half_step = 0.5 * unit / 10f64.powi(decimals as i32);
    number
        .parse::<f64>()
        .is_ok_and(|v| (v * unit - bytes as f64).abs() <= half_step * 1.001)
}

#[test]
fn sizes_are_read_to_the_digits_shown() {
    assert!(shows("96.00GiB", 96 * GIB));
    assert!(shows("10244MiB", 10_244 * MIB));
    assert!(shows("4.00MiB", 4 * MIB));
    assert!(shows("88.00GiB", 88 * GIB + 5 * MIB));
    assert!(!shows("88.00GiB", 88 * GIB + 6 * MIB));
    assert!(!shows("N/A", 0));
}

#[tokio::test]
async fn nvitop_reads_the_fake_quietly_and_agrees_with_drainwatch() -> anyhow::Result<()> {
    let pytools = pytools_dir()?;
    let busy = Busy::start()?;
    let latest = busy.warm().await?;

    let out = busy.python(&pytools, &["-m", "nvitop", "--once"])?;
    let stdout = quiet_stdout("nvitop --once", &out)?;
    assert!(stdout.contains("Driver Version: 575.57.08"), "{stdout}");
    // The one N/A is each GPU's fan: a passively cooled board has none (the
    // fake says NOT_SUPPORTED, as the real one does).
    assert_eq!(
        stdout.matches("N/A").count(),
        latest.gpus.len(),
        "a field nvitop could not read:\n{stdout}"
    );
    let table = parse(&stdout);
    let indexes: Vec<u32> = table.gpus.iter().map(|g| g.0).collect();
    let expected: Vec<u32> = latest.gpus.iter().map(|g| g.index).collect();
    assert_eq!(indexes, expected, "{stdout}");
    for ((_, memory), d) in table.gpus.iter().zip(&latest.gpus) {
        let (used, total) = memory.split_once(" / ").expect("used / total");
        let i = d.index;
        assert!(
            shows(used, d.mem_used_bytes.expect("used")),
            "GPU {i}: {memory}"
        );
        assert!(
            shows(total, d.mem_total_bytes.expect("total")),
            "GPU {i}: {memory}"
        );
        let mut theirs: Vec<(u32, &str)> = table
            .procs
            .iter()
            .filter(|p| p.0 == i)
            .map(|p| (p.1, p.2.as_str()))
            .collect();
        theirs.sort_unstable();
        let ours = ours(&latest, i);
        let pids = |v: &[(u32, u64)]| v.iter().map(|p| p.0).collect::<Vec<_>>();
        let their_pids: Vec<u32> = theirs.iter().map(|p| p.0).collect();
        assert_eq!(their_pids, pids(&ours), "GPU {i} processes:\n{stdout}");
        for ((pid, mem), (_, bytes)) in theirs.iter().zip(&ours) {
            assert!(shows(mem, *bytes), "GPU {i} PID {pid}: {mem} vs {bytes} B");
        }
    }

    let out = busy.python(&pytools, &["-c", API])?;
    let api: serde_json::Value = serde_json::from_str(&quiet_stdout("nvitop's API", &out)?)?;
    let gpus = api.as_array().expect("gpus");
    assert_eq!(gpus.len(), latest.gpus.len());
    for (g, d) in gpus.iter().zip(&latest.gpus) {
        let i = d.index;
        assert_eq!(g["index"].as_u64(), Some(u64::from(i)));
        assert_eq!(g["used"].as_u64(), d.mem_used_bytes, "GPU {i}");
        assert_eq!(g["total"].as_u64(), d.mem_total_bytes, "GPU {i}");
        let theirs: Vec<(u32, u64)> = g["procs"]
            .as_array()
            .expect("procs")
            .iter()
            .map(|p| (super::pid(&p[0]), p[1].as_u64().unwrap_or(u64::MAX)))
            .collect();
        assert_eq!(theirs, ours(&latest, i), "GPU {i} processes (bytes)");
    }
    Ok(())
}
