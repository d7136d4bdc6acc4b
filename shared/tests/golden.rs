//! Golden wire fixtures: every message kind, serialized, must equal the committed
//! JSON byte for byte, and the committed JSON must parse back to the same value.
//! A failure here is a wire change: bump `PROTOCOL_VERSION` or keep compatibility.
//! `UPDATE_GOLDEN=1 cargo test -p shared` rewrites the fixtures after a deliberate change.

use std::path::PathBuf;

use shared::*;

fn sample() -> Sample {
    Sample {
        seq: 42,
        at_ms: 1_764_680_000_123,
        took_us: 310,
        gpus: vec![
            GpuSample {
                index: 0,
                uuid: Some("GPU-9e3779b9-7f4a-7c15-4000-79b97f4a7c15".into()),
                name: Some("NVIDIA RTX PRO 6000 Blackwell".into()),
                mem_total_bytes: Some(103_079_215_104),
                mem_used_bytes: Some(94_493_769_728),
                mem_baseline_bytes: Some(4_194_304),
                util_gpu_percent: Some(85),
                util_mem_percent: Some(47),
                power_mw: Some(512_345),
                power_limit_mw: Some(600_000),
                temp_c: Some(71),
                errors: vec![],
            },
            GpuSample {
                power_mw: None,
                errors: vec![FieldError {
                    field: "power_mw".into(),
                    reason: "not supported by this GPU".into(),
                }],
                ..GpuSample::unreadable(1, "the GPU has fallen off the bus".into())
            },
        ],
        processes: vec![
            ProcessInfo {
                pid: 4242,
                start_ticks: Some(987_654),
                started_at_ms: Some(1_764_679_000_000),
                ppid: Some(4200),
                pgid: Some(4200),
                sid: Some(4200),
                uid: Some(1000),
                user: Some("ml".into()),
                cmdline: vec!["python3".into(), "-m".into(), "sglang.launch_server".into()],
                rss_bytes: Some(2_147_483_648),
                gpu_mem: vec![GpuMemUse {
                    gpu_index: 0,
                    used_bytes: Some(94_489_575_424),
                }],
                role: ProcessRole::Server,
                proc_error: None,
            },
            ProcessInfo::without_proc(
                5000,
                vec![GpuMemUse {
                    gpu_index: 1,
                    used_bytes: None,
                }],
                ProcessRole::Foreign,
                "exited (no /proc entry)".into(),
            ),
        ],
        server: Some(ServerIdentity {
            root: ProcId {
                pid: 4200,
                start_ticks: 987_000,
            },
            port: 30000,
        }),
        processes_error: None,
    }
}

fn snapshot() -> Snapshot {
    Snapshot {
        host: HostInfo {
            hostname: "gpu-node-7".into(),
            version: "0.1.0".into(),
            nvml: NvmlStatus::Ok {
                library: "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1".into(),
                driver_version: Some("575.57.08".into()),
                nvml_version: Some("12.575.57.08".into()),
                cuda_driver_version: Some(12_090),
                simulated: false,
            },
            sample_interval_ms: 100,
            history_ms: 600_000,
            server_port: Some(30000),
        },
        latest: Some(sample()),
        history: vec![HistoryPoint {
            at_ms: 1_764_680_000_000,
            mem_used_bytes: vec![Some(94_493_769_728), None],
            util_gpu_percent: vec![Some(85), None],
        }],
        history_step_ms: 1000,
    }
}

fn server_cases() -> Vec<(&'static str, ServerMsg)> {
    vec![
        (
            "hello",
            ServerMsg::Hello {
                protocol_version: PROTOCOL_VERSION,
                server_version: "0.1.0".into(),
            },
        ),
        ("snapshot", ServerMsg::Snapshot(snapshot())),
        ("sample", ServerMsg::Sample(sample())),
        ("pong", ServerMsg::Pong { nonce: 7 }),
        (
            "error",
            ServerMsg::Error {
                code: ErrorCode::BadMessage,
                message: "cannot parse message: expected value at line 1 column 1".into(),
            },
        ),
    ]
}

fn client_cases() -> Vec<(&'static str, ClientMsg)> {
    vec![
        ("client_ping", ClientMsg::Ping { nonce: 7 }),
        ("client_resync", ClientMsg::Resync),
    ]
}

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("tests/fixtures/{name}.json"))
}

fn check<T>(name: &str, value: &T)
where
    T: serde::Serialize + serde::de::DeserializeOwned + PartialEq + std::fmt::Debug,
{
    let json = serde_json::to_string_pretty(value).expect("serialize") + "\n";
    let path = fixture(name);
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, &json).expect("write fixture");
    }
    let golden = std::fs::read_to_string(&path)
        .unwrap_or_else(|_| panic!("missing fixture {}", path.display()));
    assert_eq!(json, golden, "wire format of `{name}` changed");
    let parsed: T = serde_json::from_str(&golden).expect("fixture parses");
    assert_eq!(&parsed, value, "fixture `{name}` parses to another value");
}

#[test]
fn server_messages_match_fixtures() {
    for (name, msg) in server_cases() {
        check(name, &msg);
    }
}

#[test]
fn client_messages_match_fixtures() {
    for (name, msg) in client_cases() {
        check(name, &msg);
    }
}

#[test]
fn tags_are_snake_case_type_fields() {
    let v = serde_json::to_value(ServerMsg::Pong { nonce: 1 }).expect("json");
    assert_eq!(v["type"], "pong");
    let v = serde_json::to_value(ClientMsg::Resync).expect("json");
    assert_eq!(v, serde_json::json!({"type": "resync"}));
}

#[test]
fn unknown_fields_from_newer_servers_are_ignored() {
    let json = r#"{"type":"pong","nonce":3,"added_in_a_later_version":true}"#;
    assert_eq!(
        serde_json::from_str::<ServerMsg>(json).expect("parses"),
        ServerMsg::Pong { nonce: 3 }
    );
}
