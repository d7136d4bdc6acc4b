//! The `drainwatch` binary: parse the command line, start, wait for Ctrl-C or SIGTERM.

use clap::Parser;
use drainwatch::config::Config;
use drainwatch::startup::Application;
use tracing_subscriber::EnvFilter;

#[tokio::main]
async fn main() {
    let config = Config::parse();
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
        std::process::exit(1);
    }
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
