//! The simulated server spanning two nodes, as a coordinated restart will meet
//! it: rank 0 is not ready until rank 1 joins (as NCCL's init waits); losing
//! rank 1 leaves rank 0 hung, and losing rank 0 leaves rank 1 hung holding its
//! memory — so no node can be restarted alone. Each node is its own simulated
//! host.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use tests::managed::free_port;
use tests::{GIB, Proc, SimHost, bin};

/// `simserver launch` as node `rank` of 2 on `host`, rank 0 at `init`.
fn node(host: &SimHost, rank: u32, init: &str) -> anyhow::Result<(Proc, u16)> {
    let mut proc = Proc::spawn(
        Command::new(bin("simserver"))
            .args(["launch", "--port", "0", "--tp", "2", "--warmup-ms", "300"])
            .args(["--nnodes", "2", "--node-rank", &rank.to_string()])
            .args(["--dist-init-addr", init])
            .env(simhost::HOST_DIR_ENV, host.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::null()),
    )?;
    let url = proc.read_line_with("simserver listening on ")?;
    let port = url.trim().rsplit(':').next().unwrap_or_default().parse()?;
    Ok((proc, port))
}

async fn health(port: u16) -> (u16, String) {
    match reqwest::get(format!("http://127.0.0.1:{port}/health")).await {
        Ok(r) => (r.status().as_u16(), r.text().await.unwrap_or_default()),
        Err(_) => (0, String::new()),
    }
}

/// Polls `/health` until `want` holds (within 15 s).
async fn until(port: u16, what: &str, want: impl Fn(u16, &str) -> bool) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let (code, body) = health(port).await;
        if want(code, &body) {
            return Ok(());
        }
        anyhow::ensure!(Instant::now() < deadline, "{what}: {code} {body}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// GPU memory the host's processes hold, in GiB.
fn held_gib(host: &SimHost) -> anyhow::Result<f64> {
    let view = simhost::observe(&host.path(), simhost::now_ms())?;
    Ok(view
        .gpus
        .iter()
        .flat_map(|g| g.processes.iter().map(|p| p.used_bytes))
        .sum::<u64>() as f64
        / GIB as f64)
}

#[tokio::test]
async fn rank_0_waits_for_rank_1_and_a_lost_node_hangs_the_other() -> anyhow::Result<()> {
    let (host0, host1) = (SimHost::new(100), SimHost::new(100));
    let init = format!("127.0.0.1:{}", free_port());

    // Rank 0 alone: its workers warm up, but it is not ready.
    let (rank0, port0) = node(&host0, 0, &init)?;
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert_eq!(health(port0).await.0, 503, "ready without rank 1");
    assert!(held_gib(&host0)? > 100.0);

    // Rank 1 joins: rank 0 is ready.
    let (rank1, port1) = node(&host1, 1, &init)?;
    until(port0, "rank 0 ready", |c, _| c == 200).await?;
    until(port1, "rank 1 ready", |c, _| c == 200).await?;

    // Rank 1 is lost: rank 0 does not recover, and says so.
    drop(rank1);
    until(port0, "rank 0 hung", |c, b| c == 503 && b.contains("lost")).await?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(health(port0).await.0, 503);
    assert!(tests::alive(rank0.pid()), "rank 0 hangs rather than exits");

    // A new rank 1 cannot heal it: only a restart of every node can.
    let (rank1, port1) = node(&host1, 1, &init)?;
    until(port1, "the new rank 1 joined", |c, _| c == 200).await?;
    assert_eq!(health(port0).await.0, 503, "rank 0 stays hung");

    // Rank 0 is lost: rank 1 hangs, holding its memory.
    drop(rank0);
    until(port1, "rank 1 hung", |c, b| c == 503 && b.contains("lost")).await?;
    assert!(tests::alive(rank1.pid()));
    assert!(held_gib(&host1)? > 100.0, "rank 1 still holds its GPUs");
    Ok(())
}
