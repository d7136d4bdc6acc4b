//! The hub at fleet scale (method and results in docs/PERFORMANCE.md): 50
//! release `drainwatch` agents sampling a simulated 8-GPU host at 10 Hz, one
//! release hub following all of them, and two browsers' worth of `/ws`:
//!
//! - live (the default rate): for every agent sample a client sees, the time
//!   from the sample's start on its agent (`sample_at_ms`) to its arrival —
//!   p50, p99, max — and how many of the agents' samples it saw;
//! - at `?max_hz=1`: the bytes per second one browser costs at the lower rate;
//! - the hub's CPU and RSS over the window.
//!
//! Run through `cargo xtask bench fleet`.

use std::time::{Duration, Instant};

use futures_util::StreamExt;
use shared::fleet::Fleet;
use tests::{SimHost, spawn_app};
use tokio_tungstenite::tungstenite::Message;

const AGENTS: usize = 50;
const WINDOW: Duration = Duration::from_secs(30);

fn pct(sorted: &[f64], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn now_ms() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64() * 1e3)
        .unwrap_or(0.0)
}

fn cpu_ticks(pid: u32) -> anyhow::Result<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let after = &stat[stat.rfind(')').unwrap_or(0) + 1..];
    let f: Vec<&str> = after.split_whitespace().collect();
    Ok(f[11].parse::<u64>()? + f[12].parse::<u64>()?)
}

fn rss_mib(pid: u32) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse::<f64>().ok())
        })
        .unwrap_or(0.0)
        / 1024.0
}

fn main() -> anyhow::Result<()> {
    if !tests::bench_wanted("fleet") {
        return Ok(());
    }
    let rt = tokio::runtime::Runtime::new()?;
    rt.block_on(run())
}

async fn run() -> anyhow::Result<()> {
    // One simulated host read by every agent: what is measured is the hub.
    let host = SimHost::new(100);
    let mut agents = Vec::new();
    for i in 0..AGENTS {
        let bind = format!("127.0.1.{}:0", i + 1);
        agents.push(spawn_app(&host, &["--bind", &bind])?);
    }
    let config = host.scratch().join("fleet.toml");
    let text: String = agents
        .iter()
        .enumerate()
        .map(|(i, a)| {
            format!(
                "[[agent]]\nname = \"gpu-{i:02}\"\nurl = \"{}\"\n",
                a.url("")
            )
        })
        .collect();
    std::fs::write(&config, text)?;
    let (hub, url) = tests::spawn_hub(&config)?;
    let ws = url.as_str().replacen("http://", "ws://", 1) + "/ws";
    // Every agent followed before the window opens.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let f: Fleet = reqwest::get(format!("{}/api/fleet", url.as_str()))
            .await?
            .json()
            .await?;
        if f.agents
            .iter()
            .all(|a| a.reachable && a.sample_at_ms.is_some())
        {
            break;
        }
        anyhow::ensure!(Instant::now() < deadline, "agents not all followed");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    let live = tokio::spawn(read(ws.clone()));
    let slow = tokio::spawn(read(format!("{ws}?max_hz=1")));
    let (t0, c0) = (Instant::now(), cpu_ticks(hub.pid())?);
    let (lat, seen, live_bytes, pushes) = live.await??;
    let (_, _, slow_bytes, slow_pushes) = slow.await??;
    let cpu = (cpu_ticks(hub.pid())? - c0) as f64 / 100.0 / t0.elapsed().as_secs_f64();
    let mut lat = lat;
    lat.sort_by(f64::total_cmp);
    anyhow::ensure!(!lat.is_empty(), "no samples seen");
    let expected = AGENTS as f64 * 10.0 * WINDOW.as_secs_f64();
    println!(
        "fleet: {AGENTS} agents at 10 Hz, {} s: agent sample → hub client p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms ({} samples seen of ~{:.0} taken, {:.0} %); {} pushes, {:.0} KiB/s",
        WINDOW.as_secs(),
        pct(&lat, 0.5),
        pct(&lat, 0.99),
        lat[lat.len() - 1],
        seen,
        expected,
        seen as f64 / expected * 100.0,
        pushes,
        live_bytes as f64 / 1024.0 / WINDOW.as_secs_f64()
    );
    println!(
        "fleet: at max_hz=1: {slow_pushes} pushes, {:.0} KiB/s; hub CPU {:.0} % of a core, RSS {:.0} MiB",
        slow_bytes as f64 / 1024.0 / WINDOW.as_secs_f64(),
        cpu * 100.0,
        rss_mib(hub.pid())
    );
    drop(agents);
    Ok(())
}

/// Reads `ws` for [`WINDOW`]: per agent sample seen, its latency; samples
/// seen, bytes, pushes.
async fn read(ws: String) -> anyhow::Result<(Vec<f64>, usize, usize, usize)> {
    let (mut socket, _) = tokio_tungstenite::connect_async(ws.as_str()).await?;
    let mut last: Vec<Option<u64>> = vec![None; AGENTS];
    let mut lat = Vec::new();
    let (mut seen, mut bytes, mut pushes) = (0, 0, 0);
    let end = Instant::now() + WINDOW;
    while let Ok(Some(Ok(frame))) = tokio::time::timeout_at(end.into(), socket.next()).await {
        let arrived = now_ms();
        let Message::Text(t) = frame else { continue };
        bytes += t.len();
        pushes += 1;
        let f: Fleet = serde_json::from_str(t.as_str())?;
        for (i, a) in f.agents.iter().enumerate() {
            let Some(at) = a.sample_at_ms else { continue };
            if last.get(i).copied().flatten() != Some(at) {
                if last[i].is_some() {
                    lat.push(arrived - at as f64);
                    seen += 1;
                }
                last[i] = Some(at);
            }
        }
    }
    Ok((lat, seen, bytes, pushes))
}
