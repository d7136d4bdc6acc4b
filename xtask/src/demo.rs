//! `cargo xtask demo`: drainwatch on a simulated 8-GPU host with a model server
//! warming up and a foreign process whose command line looks just like it.

use std::io::{BufRead, BufReader};
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
    let port: u16 = flag(args, "--server-port")
        .unwrap_or("30000")
        .parse()
        .context("--server-port takes a port number")?;

    build::ui()?;
    build::binaries(false)?;
    let bin = build::profile_dir(false);
    let nvml = build::link_nvml(false)?;
    let host = root().join("target/demo-host");
    if host.exists() {
        std::fs::remove_dir_all(&host).context("clearing the previous demo host")?;
    }
    std::fs::create_dir_all(&host)?;

    procs::catch_stop_signals();
    let decoy = [
        "python3",
        "-m",
        "sglang.launch_server",
        "--model-path",
        "deepseek-ai/DeepSeek-V3.2-Exp",
        "--tp",
        "8",
        "--port",
    ];
    let sim = |sub: &str| {
        let mut c = Command::new(bin.join("simserver"));
        c.arg(sub).env("DRAINWATCH_SIM_HOST", &host);
        c
    };
    let mut groups: Vec<Group> = Vec::new();
    let started = (|| -> anyhow::Result<String> {
        groups.push(procs::spawn_group(
            "model server",
            sim("launch")
                .args(["--port", &port.to_string()])
                .args(["--warmup-ms", &((warmup_s * 1000.0) as u64).to_string()])
                .arg("--")
                .args(decoy)
                .arg(port.to_string())
                .stdout(Stdio::null()),
        )?);
        groups.push(procs::spawn_group(
            "foreign process",
            sim("foreign")
                .args(["--gpu", "3", "--mem-gib", "1.5", "--"])
                .args(decoy)
                .arg(port.to_string()),
        )?);
        let mut dw = Command::new(bin.join("drainwatch"));
        dw.args([
            "--bind",
            bind,
            "--server-port",
            &port.to_string(),
            "--nvml-lib",
        ])
        .arg(&nvml)
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
            procs::stop_all(&mut groups, Duration::from_secs(3));
            return Err(e);
        }
    };
    println!();
    println!("  drainwatch demo: open {url}");
    println!("  simulated host: 8 GPUs ({})", host.display());
    println!(
        "  model server on port {port}, warming up for {warmup_s} s; a foreign process holds 1.5 GiB on GPU 3"
    );
    println!("  Ctrl-C stops everything");
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
    procs::stop_all(&mut groups, Duration::from_secs(5));
    match exited {
        Some((name, status)) => bail!("{name} exited unexpectedly ({status})"),
        None => Ok(()),
    }
}
