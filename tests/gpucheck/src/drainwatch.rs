//! drainwatch as the check runs it: a server config that manages gpuhog on the
//! chosen GPUs, the real binary on `127.0.0.1:0`, and a small client of its
//! public API (the same requests an operator's script would make).

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde_json::{Value, json};

/// What the operator types to confirm: the server's name.
pub(crate) const NAME: &str = "gpuhog";
/// The flag a restart changes to pick gpuhog's misbehaviour.
pub(crate) const MODE_FLAG: &str = "GPUHOG_MODE";
/// drainwatch's verify tolerance (its default), which the check also uses.
pub(crate) const TOLERANCE_BYTES: u64 = 64 << 20;
/// How long SIGTERM is given before SIGKILL (the ignore-SIGTERM restart waits it out).
pub(crate) const DRAIN_TIMEOUT_S: u64 = 3;

/// The managed server's config.
#[derive(Debug, Clone)]
pub(crate) struct ServerSpec {
    pub(crate) gpuhog: PathBuf,
    pub(crate) gpus: Vec<u32>,
    pub(crate) bytes_per_gpu: u64,
    pub(crate) port: u16,
    /// The simulated host gpuhog takes its memory from (the dry run).
    pub(crate) sim: Option<PathBuf>,
}

/// A TOML basic string (JSON's escapes are TOML's).
fn quoted(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"\"".to_owned())
}

impl ServerSpec {
    pub(crate) fn toml(&self) -> String {
        let gpus: Vec<String> = self.gpus.iter().map(u32::to_string).collect();
        let mut args = vec![
            "launch".to_owned(),
            "--gpus".to_owned(),
            gpus.join(","),
            "--bytes-per-gpu".to_owned(),
            self.bytes_per_gpu.to_string(),
            "--port".to_owned(),
            self.port.to_string(),
            "--warmup-ms".to_owned(),
            "500".to_owned(),
        ];
        if let Some(dir) = &self.sim {
            args.extend(["--sim".to_owned(), dir.display().to_string()]);
        }
        let args: Vec<String> = args.iter().map(|a| quoted(a)).collect();
        format!(
            r#"# Written by gpu-check: drainwatch managing gpuhog on every GPU.
[server]
name = "{NAME}"
program = {program}
args = [{args}]
port = {port}
gpus = [{gpus}]

[server.env]
{MODE_FLAG} = "normal"

[server.readiness]
timeout = "10s"

[timeouts]
drain = "{DRAIN_TIMEOUT_S}s"
kill_grace = "5s"
verify = "60s"
warmup = "120s"

[verify]
tolerance_mib = {tol}
samples = 3

# A real GPU's health is reported, not a reason for the check to stop.
[health]
xid = "warn"
row_remap = "warn"
ecc = "warn"
pcie = "warn"
throttle = "warn"

[[flags]]
name = "{MODE_FLAG}"
kind = "env"
type = "enum"
values = ["normal", "ignore-sigterm", "orphan", "escape"]
"#,
            program = quoted(&self.gpuhog.display().to_string()),
            args = args.join(", "),
            port = self.port,
            gpus = gpus.join(", "),
            tol = TOLERANCE_BYTES >> 20,
        )
    }
}

/// A free TCP port on loopback for gpuhog (released before use).
pub(crate) fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// How drainwatch is started.
#[derive(Debug)]
pub(crate) struct Launch<'a> {
    pub(crate) bin: &'a Path,
    pub(crate) nvml_lib: &'a Path,
    pub(crate) config: &'a Path,
    pub(crate) data_dir: &'a Path,
    pub(crate) log: &'a Path,
    pub(crate) sample_interval_ms: u64,
    /// The simulated host drainwatch's NVML (the fake) and gpuhog read; on a
    /// real run none, whatever the check's own environment says.
    pub(crate) sim_host: Option<&'a Path>,
}

/// Starts drainwatch in a process group of its own (the kernel kills it if the
/// check dies) and returns it with the address it printed.
#[allow(unsafe_code)]
pub(crate) fn spawn(l: &Launch<'_>) -> anyhow::Result<(Child, String)> {
    let log =
        std::fs::File::create(l.log).with_context(|| format!("creating {}", l.log.display()))?;
    let mut cmd = Command::new(l.bin);
    cmd.args(["--bind", "127.0.0.1:0", "--nvml-lib"])
        .arg(l.nvml_lib)
        .arg("--config")
        .arg(l.config)
        .arg("--data-dir")
        .arg(l.data_dir)
        .args(["--sample-interval-ms", &l.sample_interval_ms.to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(log)
        .process_group(0);
    match l.sim_host {
        Some(dir) => cmd.env(simhost::HOST_DIR_ENV, dir),
        None => cmd.env_remove(simhost::HOST_DIR_ENV),
    };
    // SAFETY: prctl is async-signal-safe and touches only the child being created.
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
    let mut child = cmd
        .spawn()
        .with_context(|| format!("cannot start {}", l.bin.display()))?;
    let out = child.stdout.take().context("drainwatch's stdout")?;
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut lines = BufReader::new(out).lines();
        for line in lines.by_ref().map_while(Result::ok) {
            if let Some(url) = line.strip_prefix("drainwatch listening on ") {
                let _ = tx.send(url.trim().trim_start_matches("http://").to_owned());
                break;
            }
        }
        // Keep reading, so drainwatch never blocks on a full pipe.
        lines.for_each(drop);
    });
    match rx.recv_timeout(Duration::from_secs(30)) {
        Ok(addr) => Ok((child, addr)),
        Err(_) => {
            let _ = child.kill();
            let _ = child.wait();
            bail!(
                "drainwatch did not start; its log ({}) ends: {}",
                l.log.display(),
                log_tail(l.log, 10).join(" | ")
            )
        }
    }
}

/// The last `n` lines of a log file.
pub(crate) fn log_tail(path: &Path, n: usize) -> Vec<String> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..]
        .iter()
        .map(|l| (*l).to_owned())
        .collect()
}

/// A client of drainwatch's API that also notes every server process it is
/// shown (PID + start time), so that the end can prove each one gone.
#[derive(Debug)]
pub(crate) struct Api {
    http: reqwest::Client,
    base: String,
    pub(crate) seen: Mutex<BTreeSet<(u32, u64)>>,
}

impl Api {
    pub(crate) fn new(addr: &str) -> Self {
        Self {
            http: reqwest::Client::new(),
            base: format!("http://{addr}"),
            seen: Mutex::new(BTreeSet::new()),
        }
    }

    pub(crate) async fn get(&self, path: &str) -> anyhow::Result<Value> {
        let r = self
            .http
            .get(format!("{}{path}", self.base))
            .timeout(Duration::from_secs(10))
            .send()
            .await
            .with_context(|| format!("GET {path}"))?;
        let status = r.status();
        let body: Value = r.json().await.with_context(|| format!("GET {path}"))?;
        if !status.is_success() {
            bail!("GET {path}: {status} {body}");
        }
        Ok(body)
    }

    async fn post(&self, path: &str, body: &Value) -> anyhow::Result<(u16, Value)> {
        let r = self
            .http
            .post(format!("{}{path}", self.base))
            .json(body)
            .timeout(Duration::from_secs(10))
            .send()
            .await
            .with_context(|| format!("POST {path}"))?;
        let code = r.status().as_u16();
        let text = r.text().await?;
        Ok((
            code,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        ))
    }

    /// `/api/state`, noting the server's processes it lists.
    pub(crate) async fn state(&self) -> anyhow::Result<Value> {
        let s = self.get("/api/state").await?;
        if let Some(procs) = s["latest"]["processes"].as_array()
            && let Ok(mut seen) = self.seen.lock()
        {
            for p in procs.iter().filter(|p| p["role"] == "server") {
                if let (Some(pid), Some(start)) = (p["pid"].as_u64(), p["start_ticks"].as_u64()) {
                    seen.insert((pid as u32, start));
                }
            }
        }
        Ok(s)
    }

    /// Polls `/api/state` until `pred` holds (or `until` passes).
    pub(crate) async fn wait_state(
        &self,
        what: &str,
        until: Instant,
        pred: impl Fn(&Value) -> bool,
    ) -> anyhow::Result<Value> {
        loop {
            let s = self.state().await?;
            if pred(&s) {
                return Ok(s);
            }
            if Instant::now() > until {
                bail!(
                    "timed out waiting for {what}; the server: phase {}, failure {}",
                    s["server"]["phase"],
                    s["server"]["failure"]
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits until the server is in `phase` with no operation running.
    pub(crate) async fn wait_phase(&self, phase: &str, until: Instant) -> anyhow::Result<Value> {
        self.wait_state(&format!("the server to be {phase}"), until, |s| {
            s["server"]["phase"] == phase && s["server"]["operation"].is_null()
        })
        .await
    }

    /// `POST /api/<op>` (start, restart, stop) with the generation now, the
    /// typed name and, but for a stop, the flags; returns the operation's id.
    pub(crate) async fn operate(&self, op: &str, flags: Option<Value>) -> anyhow::Result<i64> {
        let s = self.state().await?;
        let generation = s["server"]["generation"]
            .as_u64()
            .context("no managed server in /api/state")?;
        let mut body = json!({"generation": generation, "confirm": NAME});
        if let Some(flags) = flags {
            body["flags"] = flags;
        }
        let (code, answer) = self.post(&format!("/api/{op}"), &body).await?;
        if code != 202 {
            bail!("{op} refused: {code} {answer}");
        }
        answer["id"]
            .as_i64()
            .with_context(|| format!("{op}: no id in {answer}"))
    }

    /// The record of operation `id` once it is no longer running.
    pub(crate) async fn finished(&self, id: i64, until: Instant) -> anyhow::Result<Value> {
        loop {
            let d = self.get(&format!("/api/restarts/{id}")).await?;
            if d["summary"]["outcome"] != "running" {
                return Ok(d);
            }
            if Instant::now() > until {
                bail!("operation {id} still running: {}", d["summary"]);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_config_names_gpuhog_its_gpus_and_the_mode_flag() {
        let spec = ServerSpec {
            gpuhog: PathBuf::from("/opt/check/gpuhog"),
            gpus: vec![0, 1],
            bytes_per_gpu: 2 << 30,
            port: 31000,
            sim: Some(PathBuf::from("/tmp/host \"x\"")),
        };
        let text = spec.toml();
        assert!(text.contains(r#"program = "/opt/check/gpuhog""#), "{text}");
        assert!(text.contains(r#""--gpus", "0,1""#), "{text}");
        assert!(text.contains(r#""--sim", "/tmp/host \"x\"""#), "{text}");
        assert!(text.contains("gpus = [0, 1]"), "{text}");
        assert!(text.contains("port = 31000"), "{text}");
    }
}
