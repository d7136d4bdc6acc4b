//! `drainwatch watch`: the live state over `/ws`. On a terminal, the GPU table
//! and the server redrawn in place (at most four times a second); piped, one
//! line per event (phase changes, restarts and benchmarks that end, who
//! connects); with `--json`, every message as drainwatch sent it, one per line.

use std::io::{IsTerminal as _, Write as _};
use std::time::{Duration, Instant};

use shared::Snapshot;
use shared::bench::RunStatus;
use shared::protocol::ServerMsg;
use shared::restart::Outcome;
use shared::units::{fmt_secs, fmt_tok_s};

use super::client::Client;
use super::{CliError, Exit, Interrupt, WatchArgs, render};
use crate::clock::now_ms;

/// How the stream is shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Json,
    Screen,
    Lines,
}

pub async fn watch(args: WatchArgs) -> Result<Exit, CliError> {
    let mut interrupt = Interrupt::catch();
    let client = Client::new(&args.remote)?;
    let mut events = client.events().await?;
    let mode = if args.remote.json {
        Mode::Json
    } else if std::io::stdout().is_terminal() {
        Mode::Screen
    } else {
        Mode::Lines
    };
    // Ctrl-C is watched on its own task: this one may be stuck writing to a
    // reader that stopped reading, and must still end.
    let (stop, mut stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        interrupt.pressed().await;
        let _ = stop.send(());
        tokio::time::sleep(Duration::from_secs(1)).await;
        std::process::exit(Exit::Ok.code());
    });
    let started = Instant::now();
    let mut view: Option<Snapshot> = None;
    let mut dirty = false;
    let mut redraw = tokio::time::interval(Duration::from_millis(250));
    loop {
        tokio::select! {
            got = events.next() => {
                let Some((raw, msg)) = got? else {
                    return Err(CliError::new(
                        Exit::Unreachable,
                        "drainwatch closed the connection (it is shutting down)",
                    ));
                };
                match mode {
                    Mode::Json => println!("{raw}"),
                    Mode::Lines => {
                        for line in events_of(view.as_ref(), &msg) {
                            let at = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
                            println!("{:>9}  {line}", format!("+{}", fmt_secs(Some(at))));
                        }
                        if view.is_none()
                            && let ServerMsg::Snapshot(s) = &msg
                        {
                            print!("{}", render::snapshot(s, now_ms()));
                        }
                    }
                    Mode::Screen => dirty = true,
                }
                apply(&mut view, msg);
            }
            _ = redraw.tick(), if dirty => {
                dirty = false;
                if let Some(v) = &view {
                    let mut out = std::io::stdout().lock();
                    let _ = write!(
                        out,
                        "\x1b[H\x1b[2J{}\nwatching {} — Ctrl-C to quit\n",
                        render::snapshot(v, now_ms()),
                        args.remote.url
                    );
                    let _ = out.flush();
                }
            }
            _ = &mut stopped => {
                events.close().await;
                return Ok(Exit::Ok);
            }
        }
    }
}

/// Folds one message into the view.
fn apply(view: &mut Option<Snapshot>, msg: ServerMsg) {
    if let ServerMsg::Snapshot(s) = msg {
        *view = Some(s);
        return;
    }
    let Some(v) = view else {
        return;
    };
    match msg {
        ServerMsg::Sample(s) => v.latest = Some(s),
        ServerMsg::Server(s) => v.server = Some(s),
        ServerMsg::Restart(r) => shared::restart::upsert_summary(&mut v.restarts, r, 20),
        ServerMsg::Presence { clients } => v.presence = clients,
        ServerMsg::Campaign(c) => v.campaign = Some(c),
        ServerMsg::Bench(p) => {
            if let Some(s) = &mut v.server {
                s.bench = Some(p);
            }
        }
        _ => {}
    }
}

/// What a message changes that is worth a line of its own.
fn events_of(view: Option<&Snapshot>, msg: &ServerMsg) -> Vec<String> {
    let Some(v) = view else {
        return Vec::new();
    };
    match msg {
        ServerMsg::Server(s) => {
            let before = v.server.as_ref().map(|b| b.phase);
            if before == Some(s.phase) {
                return Vec::new();
            }
            let mut line = format!("{}: {}", s.name, s.phase.label());
            if let Some(op) = &s.operation {
                line.push_str(&format!(
                    " ({} #{} by {})",
                    op.kind.as_str(),
                    op.id,
                    op.requested_by
                ));
            }
            vec![line]
        }
        ServerMsg::Restart(r) if r.outcome != Outcome::Running => vec![render::restart_line(r)],
        ServerMsg::BenchRun(run) if run.status != RunStatus::Running => {
            let best = run
                .levels
                .iter()
                .map(|l| {
                    format!(
                        "{} at concurrency {}",
                        fmt_tok_s(Some(l.output_tok_s.median)),
                        l.concurrency
                    )
                })
                .collect::<Vec<_>>()
                .join(", ");
            vec![format!(
                "benchmark #{} on {}: {} {best}",
                run.id,
                run.flagset,
                run.status.as_str()
            )]
        }
        ServerMsg::Presence { clients } => {
            let names: Vec<String> = clients
                .iter()
                .map(|c| format!("{} ({})", c.who, c.role.as_str()))
                .collect();
            vec![format!("connected: {}", names.join(", "))]
        }
        ServerMsg::Campaign(c) => {
            let before = v
                .campaign
                .as_ref()
                .filter(|b| b.id == c.id)
                .map(|b| b.state);
            if before == Some(c.state) {
                return Vec::new();
            }
            vec![format!(
                "campaign #{} “{}”: {}{}",
                c.id,
                c.name,
                c.state.label(),
                c.reason
                    .as_deref()
                    .map(|r| format!(" ({r})"))
                    .unwrap_or_default()
            )]
        }
        ServerMsg::CampaignStep { campaign_id, step } if step.state.is_final() => {
            vec![format!(
                "campaign #{campaign_id} step {}: {}{}",
                step.index + 1,
                step.state.label(),
                match (&step.result, &step.failure) {
                    (Some(r), _) if step.measured() => format!(
                        " at {} {}",
                        shared::units::tok_num(r.metric().median),
                        r.metric_unit()
                    ),
                    (_, Some(f)) => format!(" ({})", f.message),
                    _ => String::new(),
                }
            )]
        }
        _ => Vec::new(),
    }
}
