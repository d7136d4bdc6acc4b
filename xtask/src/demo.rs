//! `cargo xtask demo`: drainwatch managing a simulated SGLang-like server on a
//! simulated 8-GPU host (examples/demo.toml), next to a foreign process whose
//! command line looks just like the server's. With `--engine llamacpp` the
//! server is a real one instead: llama.cpp's llama-server with Gemma 3 270M
//! on the CPU (examples/llamacpp.toml), beside the same simulated GPUs. The
//! server is started through drainwatch's own API, so the demo shows the
//! managed path; Ctrl-C stops everything, the server drainwatch launched
//! included.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{Context, bail};

use crate::procs::{self, Group};
use crate::{build, flag, root};

pub(crate) fn run(args: &[String]) -> anyhow::Result<()> {
    let bind = flag(args, "--bind").unwrap_or("127.0.0.1:7878");
    let warmup_s: f64 = flag(args, "--warmup")
        .unwrap_or("30")
        .parse()
        .context("--warmup takes seconds")?;
    let campaign = args.iter().any(|a| a == "--campaign");
    let real = match flag(args, "--engine") {
        None => None,
        Some("llamacpp") => Some(crate::engine::ensure()?),
        Some(other) => bail!("--engine takes `llamacpp`, not `{other}`"),
    };
    let port: u16 = flag(args, "--server-port")
        .unwrap_or(if real.is_some() { "8080" } else { "30000" })
        .parse()
        .context("--server-port takes a port number")?;

    build::ui()?;
    build::demo_binaries()?;
    let bin = build::profile_dir(false);
    let nvml = build::link_nvml(false)?;
    let (host, data) = (
        root().join("target/demo-host"),
        root().join("target/demo-data"),
    );
    for dir in [&host, &data] {
        if dir.exists() {
            std::fs::remove_dir_all(dir).with_context(|| format!("clearing {}", dir.display()))?;
        }
        std::fs::create_dir_all(dir)?;
    }
    let config = data.join("demo.toml");
    let (text, name) = match &real {
        Some(e) => (engine_config(e, port)?, "gemma"),
        None => (demo_config(&bin.join("simserver"), port, warmup_s)?, "demo"),
    };
    std::fs::write(&config, text)?;

    procs::catch_stop_signals();
    procs::become_subreaper()?;
    let mut groups: Vec<Group> = Vec::new();
    // A decoy whose command line reads like the server's, holding memory on GPU 7.
    let decoy: Vec<String> = match &real {
        Some(e) => vec![
            e.server.display().to_string(),
            "-m".into(),
            e.model.display().to_string(),
            "--port".into(),
            port.to_string(),
        ],
        None => ["python3", "-m", "sglang.launch_server", "--model-path"]
            .iter()
            .map(|s| s.to_string())
            .chain([
                "deepseek-ai/DeepSeek-V3.2-Exp".into(),
                "--port".into(),
                port.to_string(),
            ])
            .collect(),
    };
    let started = (|| -> anyhow::Result<String> {
        groups.push(procs::spawn_group(
            "foreign process",
            Command::new(bin.join("simserver"))
                .args(["foreign", "--gpu", "7", "--mem-gib", "1.5", "--"])
                .args(&decoy)
                .env("DRAINWATCH_SIM_HOST", &host),
        )?);
        let mut dw = Command::new(bin.join("drainwatch"));
        dw.args(["--bind", bind, "--nvml-lib"])
            .arg(&nvml)
            .arg("--config")
            .arg(&config)
            .arg("--data-dir")
            .arg(&data)
            .env("DRAINWATCH_SIM_HOST", &host)
            .stdout(Stdio::piped());
        groups.push(procs::spawn_group("drainwatch", &mut dw)?);
        let out = groups
            .last_mut()
            .and_then(|g| g.child.stdout.take())
            .context("drainwatch's stdout")?;
        let mut out = BufReader::new(out);
        let mut line = String::new();
        out.read_line(&mut line)?;
        // Keep the pipe open for whatever drainwatch prints later.
        std::thread::spawn(move || {
            for l in out.lines().map_while(Result::ok) {
                println!("{l}");
            }
        });
        match line.trim().strip_prefix("drainwatch listening on ") {
            Some(url) => Ok(url.to_owned()),
            None => bail!("drainwatch did not start (see its error above)"),
        }
    })();
    let url = match started {
        Ok(url) => url,
        Err(e) => {
            stop(&mut groups);
            return Err(e);
        }
    };
    let addr = url.trim_start_matches("http://");
    let start = post(
        addr,
        "/api/start",
        "application/json",
        &format!(r#"{{"generation":0,"flags":{{}},"confirm":"{name}"}}"#),
    );
    if let Err(e) = &start {
        eprintln!("xtask: could not start the model server through drainwatch: {e:#}");
    }
    let plan = root().join(if real.is_some() {
        "examples/llamacpp-campaign.toml"
    } else {
        "examples/demo-campaign.toml"
    });
    if campaign {
        // The campaign's first restart waits for the start to finish.
        let posted = std::fs::read_to_string(&plan)
            .with_context(|| format!("reading {}", plan.display()))
            .and_then(|text| post(addr, "/api/campaigns", "application/toml", &text));
        if let Err(e) = posted {
            eprintln!("xtask: could not start the demo campaign: {e:#}");
        }
    }
    println!();
    println!("  drainwatch demo: open {url}");
    println!("  simulated host: 8 GPUs ({})", host.display());
    match &real {
        Some(e) => {
            println!(
                "  model server \"gemma\" on port {port}: a REAL llama.cpp ({}) serving Gemma 3 270M on the CPU,",
                e.server.display()
            );
            println!(
                "    started by drainwatch; its tok/s, latencies and log lines are real, the GPUs simulated"
            );
        }
        None => println!(
            "  model server \"demo\" on port {port}, started by drainwatch, warming up for {warmup_s} s"
        ),
    }
    println!("  a foreign process with the same command line holds 1.5 GiB on GPU 7");
    println!("  restart it from the UI (type \"{name}\" to confirm); Ctrl-C stops everything");
    let steps = if real.is_some() {
        "4 flag sets, a few minutes"
    } else {
        "8 flag sets, about three minutes"
    };
    if campaign {
        println!("  the demo campaign runs: {steps} (the campaign panel)");
    } else {
        println!(
            "  a demo campaign of {steps}: New campaign… in the UI, or\n    {} campaign --url {url} start {}",
            bin.join("drainwatch").display(),
            plan.display()
        );
    }
    println!();

    let exited = loop {
        if procs::stop_requested() {
            break None;
        }
        if let Some(e) = procs::first_exited(&mut groups) {
            break Some(e);
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    eprintln!("xtask: stopping the demo");
    stop(&mut groups);
    match exited {
        Some((name, status)) => bail!("{name} exited unexpectedly ({status})"),
        None => Ok(()),
    }
}

/// Stops the server drainwatch launched (it runs in its own session, so it
/// outlives drainwatch by design), then drainwatch and the rest, then whatever
/// was re-parented to xtask (the server, when drainwatch died first).
fn stop(groups: &mut [Group]) {
    for g in groups.iter_mut().filter(|g| g.name == "drainwatch") {
        // Only while drainwatch is unreaped: a reaped one's PID may be reused.
        if matches!(g.child.try_wait(), Ok(None)) {
            procs::kill_descendant_groups(g.child.id());
        }
    }
    procs::stop_all(groups, Duration::from_secs(5));
    procs::stop_leftovers(Duration::from_secs(3), Duration::from_secs(10));
}

/// examples/demo.toml with this run's program path, port and warm-up.
fn demo_config(program: &std::path::Path, port: u16, warmup_s: f64) -> anyhow::Result<String> {
    let text = std::fs::read_to_string(root().join("examples/demo.toml"))
        .context("reading examples/demo.toml")?;
    let warmup_ms = ((warmup_s * 1000.0) as u64).clamp(1_000, 180_000);
    let text = text
        .replace(
            "\"../target/debug/simserver\"",
            &format!("{:?}", program.display().to_string()),
        )
        .replace(
            "\"../tests/data/datasets\"",
            &format!(
                "{:?}",
                root().join("tests/data/datasets").display().to_string()
            ),
        )
        .replace(
            "\"../tests/data/sim-model\"",
            &format!(
                "{:?}",
                root().join("tests/data/sim-model").display().to_string()
            ),
        )
        .replace("\"--port\", \"30000\"", &format!("\"--port\", \"{port}\""))
        .replace("port = 30000", &format!("port = {port}"))
        .replace(
            "\"--warmup-ms\", \"30000\"",
            &format!("\"--warmup-ms\", \"{warmup_ms}\""),
        );
    Ok(text)
}

/// examples/llamacpp.toml with the engine and model built here, on `port`.
fn engine_config(e: &crate::engine::Engine, port: u16) -> anyhow::Result<String> {
    let text = std::fs::read_to_string(root().join("examples/llamacpp.toml"))
        .context("reading examples/llamacpp.toml")?;
    Ok(text
        .replace(
            "\"/usr/local/bin/llama-server\"",
            &format!("{:?}", e.server.display().to_string()),
        )
        .replace(
            "\"/models/gemma-3-270m-it-Q4_K_M.gguf\"",
            &format!("{:?}", e.model.display().to_string()),
        )
        .replace("\"--port\", \"8080\"", &format!("\"--port\", \"{port}\""))
        .replace("port = 8080", &format!("port = {port}")))
}

/// A minimal HTTP/1.1 POST of a body of `content_type`; fails on a non-2xx answer.
fn post(addr: &str, path: &str, content_type: &str, body: &str) -> anyhow::Result<()> {
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(
        s,
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    let mut answer = String::new();
    s.read_to_string(&mut answer)?;
    let status = answer.split_whitespace().nth(1).unwrap_or("");
    if !status.starts_with('2') {
        bail!(
            "{path} answered {}",
            answer.lines().last().unwrap_or(status)
        );
    }
    Ok(())
}
