//! `drainwatch campaign start | status | pause | resume | cancel`: start a
//! plan file (TOML, or JSON by its `.json` name) and follow it to its end over
//! `/ws`, show a campaign's steps, or steer the running one.

use serde_json::json;
use shared::campaign::{
    Campaign, CampaignAccepted, CampaignInfo, CampaignState, StepState, analysis,
};
use shared::protocol::ServerMsg;
use shared::units::tok_num;

use super::client::Client;
use super::{CampaignArgs, CampaignVerb, CliError, Exit, Interrupt, print_json, until_done};

pub async fn campaign(args: CampaignArgs) -> Result<Exit, CliError> {
    let client = Client::new(&args.remote)?;
    let json_out = args.remote.json;
    match args.verb {
        CampaignVerb::Start {
            plan,
            dry_run,
            no_wait,
        } => start(&client, &plan, dry_run, no_wait, json_out).await,
        CampaignVerb::Status { id } => {
            let id = match id {
                Some(id) => id,
                None => newest(&client).await?.id,
            };
            let c: Campaign = client.get(&format!("api/campaigns/{id}")).await?;
            show(&c, json_out)?;
            Ok(Exit::Ok)
        }
        CampaignVerb::Pause { id } | CampaignVerb::Resume { id } | CampaignVerb::Cancel { id } => {
            let verb = match args.verb {
                CampaignVerb::Pause { .. } => "pause",
                CampaignVerb::Resume { .. } => "resume",
                _ => "cancel",
            };
            let id = match id {
                Some(id) => id,
                None => newest(&client).await?.id,
            };
            let a: CampaignAccepted = client
                .post(&format!("api/campaigns/{id}/{verb}"), &json!({}))
                .await?;
            if json_out {
                print_json(&a)?;
            } else {
                println!("campaign #{} {}", a.id, a.state.label());
            }
            Ok(Exit::Ok)
        }
    }
}

/// A campaign as JSON or as its table.
fn show(c: &Campaign, json_out: bool) -> Result<(), CliError> {
    if json_out {
        print_json(c)?;
    } else {
        print!("{}", table(c, crate::clock::now_ms()));
    }
    Ok(())
}

/// `campaign start`: the plan file sent (only laid out, with `dry_run`);
/// unless `no_wait`, its steps followed until it ends or pauses.
async fn start(
    client: &Client,
    plan: &std::path::Path,
    dry_run: bool,
    no_wait: bool,
    json_out: bool,
) -> Result<Exit, CliError> {
    let text = std::fs::read_to_string(plan)
        .map_err(|e| CliError::new(Exit::Usage, format!("cannot read {}: {e}", plan.display())))?;
    let is_json = plan.extension().is_some_and(|e| e == "json");
    let ct = if is_json {
        "application/json"
    } else {
        "application/toml"
    };
    if dry_run {
        let c: Campaign = client
            .post_text("api/campaigns?dry_run=true", ct, text)
            .await?;
        show(&c, json_out)?;
        return Ok(Exit::Ok);
    }
    let events = if no_wait {
        None
    } else {
        Some((Interrupt::catch(), client.events().await?))
    };
    let a: CampaignAccepted = client.post_text("api/campaigns", ct, text).await?;
    let Some((mut interrupt, mut events)) = events else {
        if json_out {
            print_json(&a)?;
        } else {
            println!("campaign #{} started", a.id);
        }
        return Ok(Exit::Ok);
    };
    eprintln!(
        "campaign #{} started; Ctrl-C stops waiting (`drainwatch campaign cancel` cancels it)",
        a.id
    );
    let id = a.id;
    let follow = async {
        while let Some((_, msg)) = events.next().await? {
            match msg {
                ServerMsg::CampaignStep { campaign_id, step }
                    if campaign_id == id && step.state != StepState::Pending =>
                {
                    eprintln!("{}", step_line(&step));
                }
                ServerMsg::Campaign(info)
                    if info.id == id
                        && (info.state.is_over() || info.state == CampaignState::Paused) =>
                {
                    return Ok(Some(info));
                }
                _ => {}
            }
        }
        Ok::<_, CliError>(None)
    };
    let what = format!("campaign #{id}");
    let Some(info) = until_done(&what, &mut interrupt, follow).await? else {
        return Ok(Exit::StoppedWaiting);
    };
    let Some(info) = info else {
        return Err(CliError::new(
            Exit::Unreachable,
            "drainwatch closed the stream before the campaign ended",
        ));
    };
    let c: Campaign = client.get(&format!("api/campaigns/{}", info.id)).await?;
    show(&c, json_out)?;
    Ok(exit_of(&c.info))
}

/// The newest campaign (what `status`, `pause`… mean without an id).
async fn newest(client: &Client) -> Result<CampaignInfo, CliError> {
    let list: Vec<CampaignInfo> = client.get("api/campaigns?limit=1").await?;
    list.into_iter()
        .next()
        .ok_or_else(|| CliError::new(Exit::Usage, "no campaign has run here yet"))
}

/// How a followed campaign ended, as an exit code.
pub(super) fn exit_of(i: &CampaignInfo) -> Exit {
    match i.state {
        CampaignState::Done if i.failed == 0 => Exit::Ok,
        CampaignState::Done => Exit::CampaignFailures,
        CampaignState::Stopped => Exit::CampaignStopped,
        CampaignState::Cancelled => Exit::CampaignCancelled,
        CampaignState::Paused | CampaignState::Pausing | CampaignState::Running => {
            Exit::CampaignPaused
        }
    }
}

/// "step 3/8 done: 1234.5 tok/s (+12.0 %)" for progress on stderr.
fn step_line(s: &shared::campaign::Step) -> String {
    let what = match (&s.result, &s.failure) {
        (Some(r), _) if s.measured() => {
            format!("{} {}", tok_num(r.metric().median), r.metric_unit())
        }
        (_, Some(f)) => f.message.clone(),
        _ => String::new(),
    };
    format!("step {}: {} {what}", s.index + 1, s.state.label())
}

/// The campaign as a table: a header, one row per step (state, flags against
/// the baseline, metric with its spread, Δ %, time), then the best set and
/// each flag's effect.
pub(super) fn table(c: &Campaign, now_ms: u64) -> String {
    let i = &c.info;
    let mut out = format!(
        "campaign #{} “{}” — {}{}\n{} steps: {} measured, {} reused, {} failed, {} skipped\n\n",
        i.id,
        i.name,
        i.state.label(),
        i.reason
            .as_deref()
            .map(|r| format!(" ({r})"))
            .unwrap_or_default(),
        i.steps,
        i.done,
        i.reused,
        i.failed,
        i.skipped
    );
    let base = c.baseline().map(|b| b.flags.clone()).unwrap_or_default();
    let deltas = analysis::deltas(c);
    out.push_str(&format!(
        "{:>4}  {:<12}  {:>16}  {:>8}  {:>7}  {}\n",
        "step", "state", "metric", "Δ", "took", "flags vs baseline"
    ));
    for (s, d) in c.steps.iter().zip(&deltas) {
        let metric = match &s.result {
            Some(r) => format!("{} {}", tok_num(r.metric().median), r.metric_unit()),
            None => s
                .failure
                .as_ref()
                .map(|f| f.kind.label().to_owned())
                .unwrap_or_default(),
        };
        let diff: Vec<String> = shared::flags::diff(&base, &s.flags)
            .iter()
            .map(ToString::to_string)
            .collect();
        out.push_str(&format!(
            "{:>4}  {:<12}  {:>16}  {:>8}  {:>7}  {}\n",
            s.index + 1,
            s.state.label(),
            metric,
            d.map(|d| format!("{d:+.1} %")).unwrap_or_default(),
            s.took_ms(now_ms)
                .map(|t| format!("{:.0} s", t as f64 / 1000.0))
                .unwrap_or_default(),
            if s.plan_index == i.baseline {
                "(baseline)".to_owned()
            } else {
                diff.join(", ")
            }
        ));
    }
    if let Some(b) = analysis::best(c)
        && let Some(r) = &b.result
    {
        out.push_str(&format!(
            "\nbest: step {} at {} {}",
            b.index + 1,
            tok_num(r.metric().median),
            r.metric_unit()
        ));
        if let Some(t) = i.target {
            out.push_str(&format!(" (target {})", tok_num(t)));
        }
        out.push('\n');
    }
    let effects = analysis::attribution(c);
    if !effects.is_empty() {
        out.push_str("\neffects (median Δ over pairs that differ only in that flag):\n");
        for e in effects {
            out.push_str(&format!("  {}\n", e.line()));
        }
    }
    out
}
