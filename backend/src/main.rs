//! The `drainwatch` binary: parse the command line, then serve until Ctrl-C or
//! SIGTERM, or run one command.

mod args;

use args::{Cli, Command, RoleArg};
use clap::Parser;
use drainwatch::cli;
use drainwatch::config::Config;
use drainwatch::config::file::ConfigError;
use drainwatch::startup::Application;
use tracing_subscriber::EnvFilter;

#[tokio::main]
async fn main() {
    let cli = Cli::parse();
    let config = match cli.command {
        None => cli.serve,
        Some(Command::Serve(c)) => c,
        Some(Command::Token { name, role, hub }) => {
            if let Err(e) = token(&name, role, hub) {
                eprintln!("error: {e:#}");
                std::process::exit(1);
            }
            return;
        }
        Some(Command::Status(args)) => client(cli::status(args)).await,
        Some(Command::Restart(args)) => client(cli::restart(args)).await,
        Some(Command::Bench(args)) => client(cli::bench(args)).await,
        Some(Command::Watch(args)) => client(cli::watch(args)).await,
        Some(Command::Campaign(args)) => client(cli::campaign(args)).await,
        Some(Command::Group(args)) => client(cli::group(args)).await,
        Some(Command::VerifyDrained(args)) => client(cli::verify_drained(args)).await,
        Some(Command::WaitReady(args)) => client(cli::wait_ready(args)).await,
        Some(Command::Hub(args)) => {
            tracing_subscriber::fmt()
                .with_env_filter(EnvFilter::new("info"))
                .with_writer(std::io::stderr)
                .init();
            if let Err(e) = drainwatch::fleet::serve(args, shutdown_signal()).await {
                eprintln!("error: {e:#}");
                std::process::exit(2);
            }
            return;
        }
    };
    let filter = EnvFilter::try_new(&config.log_level).unwrap_or_else(|e| {
        eprintln!("error: invalid --log-level `{}`: {e}", config.log_level);
        std::process::exit(2);
    });
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
    if let Err(e) = run(config).await {
        eprintln!("error: {e:#}");
        // A config file that cannot be used is a bad setting, like a bad option.
        let bad_config = e.downcast_ref::<ConfigError>().is_some();
        std::process::exit(if bad_config { 2 } else { 1 });
    }
}

/// Runs a client command and exits with its code.
async fn client(command: impl std::future::Future<Output = Result<cli::Exit, cli::CliError>>) -> ! {
    let code = match command.await {
        Ok(exit) => exit.code(),
        Err(e) => {
            eprintln!("error: {e}");
            e.exit.code()
        }
    };
    std::process::exit(code)
}

/// `drainwatch token`: a new secret on stdout, the auth file's lines on stderr
/// (so `TOKEN=$(drainwatch token …)` keeps only the secret).
fn token(name: &str, role: RoleArg, hub: bool) -> anyhow::Result<()> {
    let name = name.trim();
    anyhow::ensure!(
        !name.is_empty()
            && name.len() <= 64
            && !name.contains(['"', '\\'])
            && !name.chars().any(char::is_control),
        "--name must be 1–64 printable characters, without quotes or backslashes"
    );
    let secret = drainwatch::auth::new_secret()?;
    let hash = drainwatch::auth::hex(&drainwatch::auth::sha256(&secret));
    let role = match role {
        RoleArg::Viewer => "viewer",
        RoleArg::Operator => "operator",
    };
    eprintln!(
        "# Add to the auth file (--auth); give the secret below to {name}. It is shown once.\n\n[[token]]\nname = \"{name}\"\nrole = \"{role}\"\nsha256 = \"{hash}\"\n{}",
        if hub { "hub = true\n" } else { "" }
    );
    println!("{secret}");
    Ok(())
}

async fn run(config: Config) -> anyhow::Result<()> {
    let app = Application::build(config).await?;
    // Tests and scripts read this line for the bound port.
    println!("drainwatch listening on http://{}", app.local_addr()?);
    app.run_until_stopped(shutdown_signal()).await
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(s) => s,
        Err(_) => {
            let _ = ctrl_c.await;
            return;
        }
    };
    tokio::select! {
        _ = ctrl_c => {}
        _ = term.recv() => {}
    }
    tracing::info!("shutting down");
}
