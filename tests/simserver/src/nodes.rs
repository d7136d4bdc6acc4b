//! A server that spans nodes, as SGLang's `--nnodes N --node-rank i
//! --dist-init-addr host:port` launches are: rank 0 listens at the init
//! address and is not ready until every other rank has joined (as NCCL's
//! init waits); each other rank connects there (retrying until it can) and
//! stays joined. What a lost peer does is what makes restarting one node alone
//! useless: rank 0, having lost a rank, hangs (completions wait forever,
//! `/health` says it is broken) and rank > 0, having lost rank 0, hangs
//! holding its memory until it is killed.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

/// This node's view of its group.
#[derive(Debug)]
pub(crate) struct Group {
    pub(crate) nnodes: usize,
    pub(crate) rank: usize,
    /// Rank 0: the other ranks joined now. Rank > 0: 1 once joined to rank 0.
    pub(crate) joined: AtomicUsize,
    /// A peer was lost after the group formed: this node hangs.
    pub(crate) broken: AtomicBool,
}

impl Group {
    /// Ready as far as the group goes: every rank joined, none lost.
    pub(crate) fn complete(&self) -> bool {
        let want = if self.rank == 0 { self.nnodes - 1 } else { 1 };
        self.joined.load(Ordering::SeqCst) >= want && !self.broken.load(Ordering::SeqCst)
    }

    pub(crate) fn broken(&self) -> bool {
        self.broken.load(Ordering::SeqCst)
    }
}

/// Starts this node's part of the group in the background.
pub(crate) async fn start(
    nnodes: usize,
    rank: usize,
    init_addr: String,
) -> anyhow::Result<Arc<Group>> {
    let group = Arc::new(Group {
        nnodes,
        rank,
        joined: AtomicUsize::new(0),
        broken: AtomicBool::new(false),
    });
    if rank == 0 {
        let listener = TcpListener::bind(&init_addr).await?;
        eprintln!("simserver: rank 0 of {nnodes} waiting for the others at {init_addr}");
        let g = Arc::clone(&group);
        tokio::spawn(async move {
            while let Ok((peer, _)) = listener.accept().await {
                tokio::spawn(hold_peer(Arc::clone(&g), peer));
            }
        });
    } else {
        tokio::spawn(join(Arc::clone(&group), init_addr));
    }
    Ok(group)
}

/// Rank 0's side of one peer: its rank, then the connection held until it drops.
async fn hold_peer(g: Arc<Group>, peer: TcpStream) {
    let mut lines = BufReader::new(peer);
    let mut hello = String::new();
    if lines.read_line(&mut hello).await.is_err() || !hello.starts_with("rank ") {
        return;
    }
    let n = g.joined.fetch_add(1, Ordering::SeqCst) + 1;
    eprintln!(
        "simserver: {} joined ({n} of {})",
        hello.trim(),
        g.nnodes - 1
    );
    let mut rest = Vec::new();
    let _ = lines.read_to_end(&mut rest).await;
    g.joined.fetch_sub(1, Ordering::SeqCst);
    g.broken.store(true, Ordering::SeqCst);
    eprintln!("simserver: {} was lost; the group hangs", hello.trim());
}

/// A rank > 0: joins rank 0 (retrying until it listens), then holds on.
async fn join(g: Arc<Group>, addr: String) {
    let mut peer = loop {
        match TcpStream::connect(&addr).await {
            Ok(p) => break p,
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    };
    if peer
        .write_all(format!("rank {}\n", g.rank).as_bytes())
        .await
        .is_err()
    {
        g.broken.store(true, Ordering::SeqCst);
        return;
    }
    g.joined.store(1, Ordering::SeqCst);
    eprintln!("simserver: rank {} joined rank 0 at {addr}", g.rank);
    let mut rest = Vec::new();
    let _ = peer.read_to_end(&mut rest).await;
    g.joined.store(0, Ordering::SeqCst);
    g.broken.store(true, Ordering::SeqCst);
    eprintln!("simserver: rank {} lost rank 0; hanging", g.rank);
}
