//! `drainwatch restart`: show what will be stopped and how the flags change, ask
//! for the server's name (unless `--yes`), send the guarded restart with the
//! generation this view saw, then follow it over `/ws` to its end. The exit code
//! says how it ended.

use std::collections::BTreeMap;
use std::io::IsTerminal as _;
use std::time::Instant;

use shared::flags::Flags;
use shared::flags::{FlagChange, diff};
use shared::protocol::ServerMsg;
use shared::restart::{
    Accepted, Failure, LaunchCause, Outcome, Phase, RestartDetail, RestartRequest, RestartSummary,
    ServerStatus,
};
use shared::units::{MISSING, fmt_secs};
use shared::{ProcessRole, Snapshot};

use super::client::{Client, Events};
use super::{CliError, Exit, Interrupt, RestartArgs, print_json, render, show, until_done};

pub async fn restart(args: RestartArgs) -> Result<Exit, CliError> {
    let client = Client::new(&args.remote)?;
    let state: Snapshot = client.get("api/state").await?;
    let Some(server) = state.server.clone() else {
        return Err(CliError::new(
            Exit::Usage,
            "this drainwatch manages no server (it was started without --config)",
        ));
    };
    let changes = changes(&server, &args)?;
    let to = planned(&server, &changes);
    eprint!("{}", plan(&state, &server, &to));
    if !args.yes {
        confirm(&server.name).await?;
    }
    // Listen before asking, so no step of the restart goes unseen.
    let events = if args.no_wait {
        None
    } else {
        Some((Interrupt::catch(), client.events().await?))
    };
    let req = RestartRequest {
        generation: server.generation,
        flags: changes,
        confirm: server.name.clone(),
        override_health: args.override_health.clone(),
        node: None,
        coordinated: None,
    };
    let accepted: Accepted = client.post("api/restart", &req).await?;
    let id = accepted.id;
    let Some((mut interrupt, events)) = events else {
        if args.remote.json {
            print_json(&accepted)?;
        } else {
            println!("restart #{id} accepted");
        }
        return Ok(Exit::Ok);
    };
    eprintln!("restart #{id} accepted; Ctrl-C stops waiting, not the restart");
    let what = format!("restart #{id}");
    let Some(summary) = until_done(&what, &mut interrupt, follow(&client, events, id)).await?
    else {
        return Ok(Exit::StoppedWaiting);
    };
    show(args.remote.json, &summary, render::restart_outcome)?;
    Ok(exit_of(&summary))
}

/// The request's flag changes, checked here as drainwatch will check them (a
/// name twice, one off the allow-list, a value its flag refuses) so that a wrong
/// request fails before the confirmation; drainwatch checks them again. A
/// secret flag's value is left to drainwatch: the status shows its allowed
/// values redacted, and drainwatch's refusal does not quote it.
fn changes(
    server: &ServerStatus,
    args: &RestartArgs,
) -> Result<BTreeMap<String, Option<String>>, CliError> {
    let sets = args.flags.iter().map(|(k, v)| (k.clone(), Some(v.clone())));
    let resets = args.reset.iter().map(|k| (k.clone(), None));
    // The values as typed: drainwatch turns them canonical itself.
    let as_typed = |spec: &shared::flags::FlagSpec, v: &str| {
        if is_secret(server, spec) {
            return Ok(v.to_owned());
        }
        shared::flags::check(spec, v)
            .map(|_| v.to_owned())
            .map_err(|r| r.message(spec, v))
    };
    shared::flags::check_changes(&server.allowed, sets.chain(resets), as_typed)
        .map_err(|e| CliError::new(Exit::Usage, e.to_string()))
}

/// Whether drainwatch treats `spec`'s values as secret, as far as its status
/// tells: by the flag's name, or because it shows a value of it redacted (its
/// current value, its default, or one its allow-list offers).
fn is_secret(server: &ServerStatus, spec: &shared::flags::FlagSpec) -> bool {
    let shown = [
        server.flags.get(&spec.name),
        server.default_flags.get(&spec.name),
    ];
    let offered = match &spec.ty {
        shared::flags::FlagType::Enum { values } => values.as_slice(),
        _ => &[],
    };
    crate::redact::secret_by_words(&spec.name)
        || shown
            .into_iter()
            .flatten()
            .any(|v| crate::redact::is_redacted(v))
        || offered.iter().any(|v| crate::redact::is_redacted(v))
}

/// A secret value typed for the restart is shown as this: the CLI has no way
/// to its redacted form, and the plan goes to a terminal that may be logged.
const SECRET_TYPED: &str = "(a secret value, not shown)";

/// The flags the plan shows the server running with after the change.
fn planned(server: &ServerStatus, changes: &BTreeMap<String, Option<String>>) -> Flags {
    let mut to = server.flags.clone();
    for (name, value) in changes {
        let secret = || {
            (server.allowed.iter().find(|s| s.name == *name))
                .is_none_or(|spec| is_secret(server, spec))
        };
        let typed = value
            .as_ref()
            .map(|v| match !crate::redact::is_redacted(v) && secret() {
                true => SECRET_TYPED.to_owned(),
                false => v.clone(),
            });
        match typed.or_else(|| server.default_flags.get(name).cloned()) {
            Some(v) => to.insert(name.clone(), v),
            None => to.remove(name),
        };
    }
    to
}

/// What will be stopped, and how the flags change.
fn plan(state: &Snapshot, server: &ServerStatus, to: &Flags) -> String {
    let gpus: Vec<String> = server.gpus.iter().map(u32::to_string).collect();
    let mut out = format!(
        "restart {} ({}, generation {}) on GPUs {}\n",
        server.name,
        server.phase.label(),
        server.generation,
        gpus.join(", ")
    );
    let ours: Vec<Vec<String>> = state
        .latest
        .iter()
        .flat_map(|s| &s.processes)
        .filter(|p| p.role == ProcessRole::Server)
        .map(|p| {
            vec![
                p.pid.to_string(),
                p.user.clone().unwrap_or_else(|| MISSING.to_owned()),
                render::gpu_mem_cell(p),
                render::command_cell(&p.cmdline),
            ]
        })
        .collect();
    if ours.is_empty() {
        out.push_str("no server process is running: it will be launched\n");
    } else {
        out.push_str(
            "will stop (SIGTERM to its process group, then SIGKILL after the grace period):\n",
        );
        out.push_str(&render::table(
            &["PID", "USER", "GPU MEM", "COMMAND"],
            &[true, false, true, false],
            &ours,
        ));
    }
    let diff = diff(&server.flags, to);
    if diff.is_empty() {
        out.push_str("flags: unchanged\n");
    } else {
        out.push_str("flags:\n");
        for c in diff {
            let line = match c {
                FlagChange::Added { name, value } => format!("  {name}: (unset) → {value}"),
                FlagChange::Removed { name, value } => format!("  {name}: {value} → (unset)"),
                FlagChange::Changed { name, from, to } => format!("  {name}: {from} → {to}"),
            };
            out.push_str(&line);
            out.push('\n');
        }
    }
    out
}

/// Asks for the server's name on the terminal.
pub(super) async fn confirm(name: &str) -> Result<(), CliError> {
    if !std::io::stdin().is_terminal() {
        return Err(CliError::new(
            Exit::Usage,
            "confirmation needed and stdin is not a terminal: pass --yes to restart without typing the server's name",
        ));
    }
    eprint!("type its name ({name}) to restart it: ");
    let typed = tokio::task::spawn_blocking(|| {
        let mut line = String::new();
        std::io::stdin().read_line(&mut line).map(|_| line)
    })
    .await
    .ok()
    .and_then(Result::ok)
    .unwrap_or_default();
    if typed.trim() == name {
        Ok(())
    } else {
        Err(CliError::new(
            Exit::Usage,
            "not confirmed: nothing was done",
        ))
    }
}

/// Prints each phase as the restart enters it, until its record says it ended.
async fn follow(client: &Client, mut events: Events, id: i64) -> Result<RestartSummary, CliError> {
    let started = Instant::now();
    let mut shown: Option<Phase> = None;
    let mut progress = |s: &ServerStatus| {
        let ours = s.operation.as_ref().is_some_and(|o| o.id == id);
        if ours && shown != Some(s.phase) {
            shown = Some(s.phase);
            let at = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
            eprintln!(
                "{:>8}  {}",
                format!("+{}", fmt_secs(Some(at))),
                s.phase.label()
            );
        }
    };
    while let Some((_, msg)) = events.next().await? {
        match msg {
            ServerMsg::Server(s) => progress(&s),
            ServerMsg::Snapshot(snap) => {
                if let Some(s) = &snap.server {
                    progress(s);
                }
                if let Some(r) = snap.restarts.into_iter().find(|r| r.id == id && ended(r)) {
                    events.close().await;
                    return Ok(r);
                }
            }
            ServerMsg::Restart(r) if r.id == id && ended(&r) => {
                events.close().await;
                return Ok(r);
            }
            _ => {}
        }
    }
    // The stream ended (drainwatch is shutting down): the record says how far it got.
    let detail: RestartDetail = client.get(&format!("api/restarts/{id}")).await?;
    if ended(&detail.summary) {
        return Ok(detail.summary);
    }
    Err(CliError::new(
        Exit::Unreachable,
        format!("drainwatch closed the connection before restart #{id} ended"),
    ))
}

fn ended(r: &RestartSummary) -> bool {
    r.outcome != Outcome::Running
}

/// A finished restart's exit code, by the failure's class.
fn exit_of(r: &RestartSummary) -> Exit {
    match (&r.outcome, &r.failure) {
        (Outcome::Succeeded, _) => Exit::Ok,
        (_, Some(Failure::VerifyFailed { .. })) => Exit::VerifyFailed,
        (_, Some(Failure::ForeignHolders { .. })) => Exit::ForeignHolders,
        (_, Some(Failure::Unhealthy { .. })) => Exit::Unhealthy,
        (_, Some(Failure::MemoryLeaked { .. } | Failure::Unkillable { .. })) => Exit::NeedsPerson,
        (_, Some(Failure::LaunchFailed { cause, .. })) => match cause {
            LaunchCause::Oom => Exit::Oom,
            LaunchCause::PortInUse { .. } => Exit::PortInUse,
            LaunchCause::Exited { .. }
            | LaunchCause::SpawnError { .. }
            | LaunchCause::Refused { .. } => Exit::Exited,
            LaunchCause::WarmupTimeout { .. } => Exit::WarmupTimeout,
        },
        (_, Some(Failure::Crashed { .. } | Failure::Interrupted))
        | (Outcome::Interrupted | Outcome::Cancelled, None) => Exit::Interrupted,
        (Outcome::Failed | Outcome::Running, None) => Exit::Error,
    }
}
