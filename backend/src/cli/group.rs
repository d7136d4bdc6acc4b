//! `drainwatch group` at a hub: list its groups and deployments with their
//! newest coordinated restarts, or restart one and follow it node by node
//! to its end (`--url` is the hub's).

use std::collections::BTreeSet;
use std::time::Duration;

use serde::Deserialize;
use shared::fleet::{CoordKind, CoordRecord, CoordRequest, CoordStep, CoordTarget};
use shared::restart::Outcome;

use super::client::Client;
use super::{CliError, Exit, GroupArgs, GroupVerb, Interrupt, print_json, until_done};

/// How often the record is read while following it.
const POLL: Duration = Duration::from_millis(300);
/// How long the hub may stay unreachable while a restart is followed.
const LOST_LIMIT: Duration = Duration::from_secs(60);

#[derive(Deserialize)]
struct Begun {
    id: i64,
}

pub async fn group(args: GroupArgs) -> Result<Exit, CliError> {
    let client = Client::new(&args.remote)?;
    match args.verb {
        GroupVerb::List => list(&client, args.remote.json).await,
        GroupVerb::Restart {
            name,
            flags,
            reset,
            yes,
            no_wait,
        } => {
            let sets = flags.into_iter().map(|(k, v)| (k, Some(v)));
            let resets = reset.into_iter().map(|k| (k, None));
            // Each node checks the names and values against its own allow-list.
            let changes = shared::flags::gather(sets.chain(resets))
                .map_err(|e| CliError::new(Exit::Usage, e.to_string()))?;
            if !yes {
                super::restart::confirm(&name).await?;
            }
            let req = CoordRequest {
                confirm: name.clone(),
                flags: changes,
                flags_text: None,
            };
            let mut interrupt = Interrupt::catch();
            let begun: Begun = client
                .post(&format!("api/groups/{name}/restart"), &req)
                .await?;
            let id = begun.id;
            if no_wait {
                if args.remote.json {
                    print_json(&serde_json::json!({ "id": id, "target": name }))?;
                } else {
                    println!("coordinated restart #{id} of {name} begun");
                }
                return Ok(Exit::Ok);
            }
            eprintln!(
                "coordinated restart #{id} of {name} begun; Ctrl-C stops waiting, not the restart"
            );
            let what = format!("coordinated restart #{id}");
            let Some(rec) = until_done(&what, &mut interrupt, follow(&client, id)).await? else {
                return Ok(Exit::StoppedWaiting);
            };
            if args.remote.json {
                print_json(&rec)?;
            } else {
                println!("{}", outcome_line(&rec));
            }
            Ok(exit_of(&rec))
        }
    }
}

async fn list(client: &Client, json: bool) -> Result<Exit, CliError> {
    let targets: Vec<CoordTarget> = client.get("api/groups").await?;
    let records: Vec<CoordRecord> = client.get("api/coordinated?limit=5").await?;
    if json {
        print_json(&(targets, records))?;
        return Ok(Exit::Ok);
    }
    if targets.is_empty() {
        println!("no group or deployment in the hub's config");
    }
    for t in &targets {
        let (kind, sep) = match t.kind {
            CoordKind::Group => ("group", ", "),
            CoordKind::Deployment => ("deployment", " → "),
        };
        println!("{:<24} {:<10} {}", t.name, kind, t.members.join(sep));
    }
    if !records.is_empty() {
        println!();
    }
    for r in &records {
        println!("{}", outcome_line(r));
    }
    Ok(Exit::Ok)
}

/// Prints each node's events as they come, until the record ends. The hub
/// unreachable for a while (restarted, say) is waited for, up to a minute.
async fn follow(client: &Client, id: i64) -> Result<CoordRecord, CliError> {
    let mut seen: BTreeSet<(usize, usize)> = BTreeSet::new();
    let mut lost_since: Option<std::time::Instant> = None;
    loop {
        let rec: CoordRecord = match client.get(&format!("api/coordinated/{id}")).await {
            Ok(r) => {
                lost_since = None;
                r
            }
            Err(e) if e.exit == Exit::Unreachable => {
                let since = *lost_since.get_or_insert_with(std::time::Instant::now);
                if since.elapsed() > LOST_LIMIT {
                    return Err(e);
                }
                tokio::time::sleep(POLL).await;
                continue;
            }
            Err(e) => return Err(e),
        };
        for line in new_lines(&rec, &mut seen) {
            println!("{line}");
        }
        if rec.outcome != Outcome::Running {
            return Ok(rec);
        }
        tokio::time::sleep(POLL).await;
    }
}

/// The events not printed yet, in time order: "+1.2 s  gpu-01  drain  …".
fn new_lines(rec: &CoordRecord, seen: &mut BTreeSet<(usize, usize)>) -> Vec<String> {
    let mut fresh = Vec::new();
    for (m, member) in rec.members.iter().enumerate() {
        for (e, ev) in member.events.iter().enumerate() {
            if seen.insert((m, e)) {
                fresh.push((ev.at_ms, member.name.as_str(), ev.step, ev.note.as_str()));
            }
        }
    }
    fresh.sort_by_key(|f| f.0);
    fresh
        .into_iter()
        .map(|(at, name, step, note)| {
            format!(
                "+{:>6.1} s  {name:<16} {:<7} {note}",
                at.saturating_sub(rec.started_at_ms) as f64 / 1e3,
                match step {
                    CoordStep::Failed => "FAILED",
                    s => s.word(),
                }
            )
        })
        .collect()
}

fn outcome_line(r: &CoordRecord) -> String {
    let took = r
        .finished_at_ms
        .map(|f| {
            format!(
                " in {:.1} s",
                f.saturating_sub(r.started_at_ms) as f64 / 1e3
            )
        })
        .unwrap_or_default();
    let what = match (r.outcome, &r.failure) {
        (Outcome::Succeeded, _) => "ready: a completion came back through rank 0".to_owned(),
        (Outcome::Running, _) => "running".to_owned(),
        (Outcome::Interrupted, _) => "interrupted: the hub stopped during it".to_owned(),
        (Outcome::Cancelled, _) => "cancelled before the launch".to_owned(),
        (Outcome::Failed, Some(f)) => format!("FAILED on {}: {}", f.member, f.reason),
        (Outcome::Failed, None) => "FAILED".to_owned(),
    };
    format!("#{} {} by {}{took}: {what}", r.id, r.target, r.requested_by)
}

fn exit_of(r: &CoordRecord) -> Exit {
    match r.outcome {
        Outcome::Succeeded => Exit::Ok,
        Outcome::Interrupted | Outcome::Cancelled => Exit::Interrupted,
        Outcome::Running => Exit::Error,
        Outcome::Failed => Exit::GroupFailed,
    }
}

#[cfg(test)]
mod tests {
    use shared::fleet::{CoordEvent, CoordFailure, MemberTimeline};

    use super::*;

    #[test]
    fn events_print_once_in_time_order_and_a_failure_names_its_node() {
        let ev = |at_ms, step, note: &str| CoordEvent {
            at_ms,
            step,
            note: note.into(),
        };
        let mut rec = CoordRecord {
            id: 2,
            target: "dsv3".into(),
            kind: CoordKind::Group,
            requested_by: "olga".into(),
            started_at_ms: 1_000,
            finished_at_ms: None,
            outcome: Outcome::Running,
            failure: None,
            flags: Default::default(),
            members: vec![
                MemberTimeline {
                    name: "a".into(),
                    rank: Some(0),
                    agent_ops: vec![],
                    events: vec![ev(1_300, CoordStep::Drain, "stop #1")],
                },
                MemberTimeline {
                    name: "b".into(),
                    rank: Some(1),
                    agent_ops: vec![],
                    events: vec![ev(1_100, CoordStep::Drain, "already stopped")],
                },
            ],
        };
        let mut seen = BTreeSet::new();
        let first = new_lines(&rec, &mut seen);
        assert_eq!(first.len(), 2);
        assert!(
            first[0].contains("b ") && first[0].contains("already stopped"),
            "{first:?}"
        );
        assert!(first[0].starts_with("+   0.1 s"), "{first:?}");
        assert!(new_lines(&rec, &mut seen).is_empty());
        rec.outcome = Outcome::Failed;
        rec.finished_at_ms = Some(3_500);
        rec.failure = Some(CoordFailure {
            member: "b".into(),
            reason: "verify: pid 9 (not ours) holds 2.0 GiB on GPU 0".into(),
        });
        let line = outcome_line(&rec);
        assert_eq!(
            line,
            "#2 dsv3 by olga in 2.5 s: FAILED on b: verify: pid 9 (not ours) holds 2.0 GiB on GPU 0"
        );
        assert_eq!(exit_of(&rec), Exit::GroupFailed);
    }
}
