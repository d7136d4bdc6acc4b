//! The command line: clap's `Cli` and its subcommands, each carrying its
//! module's arguments (the client commands' from [`drainwatch::cli`], the
//! hub's from [`drainwatch::fleet`], serving's [`Config`]).

use clap::{Parser, Subcommand, ValueEnum};
use drainwatch::config::Config;

/// Live GPU and process view for the host that runs your model server.
#[derive(Debug, Clone, Parser)]
#[command(name = "drainwatch", version, about, long_about = None, args_conflicts_with_subcommands = true)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Option<Command>,
    /// Without a command, drainwatch serves (as `drainwatch serve`).
    #[command(flatten)]
    pub(crate) serve: Config,
}

#[derive(Debug, Clone, Subcommand)]
pub(crate) enum Command {
    /// Serve the UI, the API and the WebSocket (the default).
    Serve(Config),
    /// Make a new token: prints the secret once, and the lines for the auth
    /// file, which keeps only its SHA-256.
    Token {
        /// Who holds it (shown in the audit log and to other users).
        #[arg(long)]
        name: String,
        /// What it may do.
        #[arg(long, value_enum)]
        role: RoleArg,
        /// A hub's token: its requests may name the person they act for,
        /// whom the audit then names beside the token.
        #[arg(long)]
        hub: bool,
    },
    /// Print the GPUs, processes and the managed server once.
    Status(drainwatch::cli::StatusArgs),
    /// Restart the managed server through its guards (drain, verify by GPU
    /// memory, relaunch, wait for ready) and wait for the outcome.
    Restart(drainwatch::cli::RestartArgs),
    /// Benchmark the running flag set and print its throughput.
    Bench(drainwatch::cli::BenchArgs),
    /// Follow GPUs, processes, restarts and benchmarks live.
    Watch(drainwatch::cli::WatchArgs),
    /// Run a campaign (a plan of flag sets, each restarted and benchmarked
    /// unattended), show one, or pause, resume or cancel the running one.
    Campaign(drainwatch::cli::CampaignArgs),
    /// At a hub: list its groups and deployments, or restart one as a
    /// coordinated operation (drain all, verify each, rank 0, the others,
    /// ready through rank 0) and follow it node by node.
    Group(drainwatch::cli::GroupArgs),
    /// Wait until the server is gone: no process of it alive and every one
    /// of its GPUs back at its idle baseline (a preStop or post-stop hook, a
    /// Slurm epilog). Asks the drainwatch on this host.
    VerifyDrained(drainwatch::cli::VerifyDrainedArgs),
    /// Run a hub: one view of many agents (the drainwatch of each GPU host),
    /// from their own `/ws`.
    Hub(drainwatch::fleet::HubArgs),
    /// Wait until the server answers a real completion, by its config's
    /// readiness probe (a readiness or startup probe command).
    WaitReady(drainwatch::cli::WaitReadyArgs),
}

/// `--role`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum RoleArg {
    /// Sees everything, changes nothing.
    Viewer,
    /// Also restarts, stops, starts, benchmarks and labels.
    Operator,
}
