//! A simulated model server, shaped like an SGLang launch on one host: a parent
//! that serves HTTP and spawns one worker process per GPU (tensor parallel), each
//! worker registering GPU memory with the simulated host as it warms up.
//!
//! - `simserver launch`: the parent. `/health` answers 503 while any worker warms
//!   up and 200 once all are ready. If a worker dies, the parent kills the rest
//!   and exits 1 (as SGLang does). SIGTERM/SIGINT: stop workers, exit 0.
//! - `simserver worker`: one rank (started by `launch`, not by hand).
//! - `simserver foreign`: a process that holds GPU memory and is *not* part of any
//!   server, whatever its command line says (the `pkill -f` trap).
//! - `simserver escapee`, `simserver spawnling`: what the `escape` and
//!   `fork-bomb-lite` modes leave behind (started by a worker, not by hand).
//!
//! Every process puts itself on the simulated host's roster (`simhost::roster`).
//!
//! Misbehaviour for tests and the demo comes from `SIMSERVER_MODE` (see `modes`);
//! `SIMSERVER_API_KEY` makes the launcher want that key on all but `/health`.
//!
//! Arguments after `--` are ignored: they only make the command line look like the
//! real thing (`python3 -m sglang.launch_server --port 30000 …`). The launcher
//! logs its argv and, as SGLang does, its `server_args=ServerArgs(…)` with the
//! decoy's `--api-key`: a secret for drainwatch's redaction to hide.

mod hist;
mod launch;
mod modes;
mod nodes;
mod serve;
mod worker;

use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "simserver",
    about = "simulated model server for drainwatch's tests and demo"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    Launch(launch::LaunchArgs),
    Worker(worker::WorkerArgs),
    Foreign(worker::ForeignArgs),
    Escapee(worker::EscapeeArgs),
    Spawnling(worker::SpawnlingArgs),
}

fn main() {
    let cli = Cli::parse();
    let result = match cli.cmd {
        Cmd::Launch(a) => launch::run(a),
        Cmd::Worker(a) => worker::run(a),
        Cmd::Foreign(a) => worker::foreign(a),
        Cmd::Escapee(a) => worker::escapee(a),
        Cmd::Spawnling(a) => worker::spawnling(a),
    };
    if let Err(e) = result {
        eprintln!("simserver: error: {e:#}");
        std::process::exit(1);
    }
}
