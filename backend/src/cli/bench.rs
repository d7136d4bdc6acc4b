//! `drainwatch bench`: start a benchmark of the running flag set with the
//! settings given (the rest from the server's configuration), follow its progress
//! over `/ws`, then print the results per concurrency.

use std::io::IsTerminal as _;

use serde_json::{Map, Value, json};
use shared::bench::{BenchRun, RunStatus};
use shared::protocol::ServerMsg;
use shared::units::fmt_tok_s;

use shared::units::rate_num;

use super::client::{Client, Events};
use super::{ApiArg, BenchArgs, CliError, Exit, Interrupt, print_json, render, show, until_done};

pub async fn bench(args: BenchArgs) -> Result<Exit, CliError> {
    let client = Client::new(&args.remote)?;
    if args.cancel {
        let done: Value = client.post("api/bench/cancel", &json!({})).await?;
        if args.remote.json {
            print_json(&done)?;
        } else {
            let id = done.get("id").and_then(Value::as_i64).unwrap_or_default();
            println!("benchmark #{id} cancelled");
        }
        return Ok(Exit::Ok);
    }
    let events = if args.no_wait {
        None
    } else {
        Some((Interrupt::catch(), client.events().await?))
    };
    let started: Value = client.post("api/bench", &settings(&args)).await?;
    let Some(id) = started.get("id").and_then(Value::as_i64) else {
        return Err(CliError::new(
            Exit::Error,
            "drainwatch accepted the benchmark but gave no run id",
        ));
    };
    let Some((mut interrupt, events)) = events else {
        if args.remote.json {
            print_json(&json!({ "id": id }))?;
        } else {
            println!("benchmark #{id} started");
        }
        return Ok(Exit::Ok);
    };
    eprintln!(
        "benchmark #{id} started; Ctrl-C stops waiting (`drainwatch bench --cancel` cancels it)"
    );
    let what = format!("benchmark #{id}");
    let Some(run) = until_done(&what, &mut interrupt, follow(&client, events, id)).await? else {
        return Ok(Exit::StoppedWaiting);
    };
    show(args.remote.json, &run, render::bench_run)?;
    Ok(render::bench_exit(&run))
}

/// Only what was given: drainwatch fills in the rest from its configuration and
/// checks the whole.
fn settings(args: &BenchArgs) -> Value {
    let mut out = Map::new();
    if !args.concurrency.is_empty() {
        out.insert("concurrency".into(), json!(args.concurrency));
    }
    for (key, v) in [
        ("num_prompts", args.prompts),
        ("input_len", args.input_len),
        ("output_len", args.output_len),
        ("warmup", args.warmup),
        ("repeats", args.repeats),
    ] {
        if let Some(v) = v {
            out.insert(key.into(), json!(v));
        }
    }
    if let Some(api) = args.api {
        let name = match api {
            ApiArg::Completions => "completions",
            ApiArg::Generate => "generate",
            ApiArg::Chat => "chat",
        };
        out.insert("api".into(), json!(name));
    }
    if !args.request_rate.is_empty() {
        out.insert("request_rate".into(), json!(args.request_rate));
    }
    if let Some(b) = args.burstiness {
        out.insert("burstiness".into(), json!(b));
    }
    if let Some(m) = args.max_concurrency {
        out.insert("max_concurrency".into(), json!(m));
    }
    let slo = [
        ("ttft_ms", args.slo_ttft_ms),
        ("tpot_ms", args.slo_tpot_ms),
        ("e2e_ms", args.slo_e2e_ms),
    ];
    if slo.iter().any(|(_, v)| v.is_some()) {
        let given: Map<String, Value> = slo
            .iter()
            .filter_map(|(k, v)| v.map(|v| ((*k).to_owned(), json!(v))))
            .collect();
        out.insert("slo".into(), Value::Object(given));
    }
    if let (Some(prompt), Some(expect)) = (&args.check_prompt, &args.expect) {
        out.insert(
            "correctness".into(),
            json!({ "prompt": prompt, "expect": expect }),
        );
    }
    Value::Object(out)
}

/// Shows progress (one updating line on a terminal, one line per repeat
/// otherwise) until the run's record says it ended.
async fn follow(client: &Client, mut events: Events, id: i64) -> Result<BenchRun, CliError> {
    let tty = std::io::stderr().is_terminal();
    let mut shown = None;
    while let Some((_, msg)) = events.next().await? {
        match msg {
            ServerMsg::Bench(p) if p.run_id == id => {
                let level = match p.request_rate {
                    Some(r) => format!("{} requests/s", rate_num(r)),
                    None => format!("concurrency {}", p.concurrency),
                };
                let line = format!(
                    "{level}, repeat {}/{}: {}/{} requests, {}",
                    p.repeat + 1,
                    p.repeats,
                    p.done,
                    p.total,
                    fmt_tok_s(Some(p.output_tok_s))
                );
                if tty {
                    eprint!("\r\x1b[2K{line}");
                } else if shown != Some((p.concurrency, p.repeat)) {
                    shown = Some((p.concurrency, p.repeat));
                    eprintln!("{line}");
                }
            }
            ServerMsg::BenchRun(run) if run.id == id && run.status != RunStatus::Running => {
                if tty {
                    eprintln!();
                }
                events.close().await;
                return Ok(run);
            }
            ServerMsg::Snapshot(_) => {
                // Fell behind: the record may have ended in between.
                let run: BenchRun = client.get(&format!("api/bench/runs/{id}")).await?;
                if run.status != RunStatus::Running {
                    events.close().await;
                    return Ok(run);
                }
            }
            _ => {}
        }
    }
    let run: BenchRun = client.get(&format!("api/bench/runs/{id}")).await?;
    if run.status != RunStatus::Running {
        return Ok(run);
    }
    Err(CliError::new(
        Exit::Unreachable,
        format!("drainwatch closed the connection before benchmark #{id} ended"),
    ))
}
