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
                health: shared::health::GpuHealth {
                    sm_clock_mhz: Some(2_430),
                    sm_clock_max_mhz: Some(2_430),
                    mem_clock_mhz: Some(14_001),
                    mem_clock_max_mhz: Some(14_001),
                    clocks_event_reasons: Some(0x4),
                    encoder_percent: Some(0),
                    decoder_percent: Some(0),
                    pcie: Some(shared::health::PcieLink {
                        gen_current: 5,
                        gen_max: 5,
                        width_current: 16,
                        width_max: 16,
                    }),
                    pcie_tx_kib_s: Some(1_200),
                    pcie_rx_kib_s: Some(3_400),
                    ecc_enabled: Some(true),
                    ecc: Some(shared::health::EccErrors::default()),
                    retired_pages: None,
                    remapped_rows: Some(shared::health::RemappedRows::default()),
                    persistence_mode: Some(true),
                    compute_mode: Some(shared::health::ComputeMode::Default),
                    mig_enabled: Some(false),
                    mig: vec![],
                    xid: vec![shared::health::XidEvent {
                        code: 79,
                        at_ms: 1_764_679_999_000,
                    }],
                    slow_at_ms: Some(1_764_679_995_000),
                },
                errors: vec![FieldError {
                    field: "retired_pages".into(),
                    reason: "not supported by this GPU".into(),
                }],
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
                    sm_percent: Some(93),
                }],
                role: ProcessRole::Server,
                proc_error: None,
            },
            ProcessInfo::without_proc(
                5000,
                vec![GpuMemUse {
                    gpu_index: 1,
                    used_bytes: None,
                    sm_percent: None,
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
            own_pid_namespace: false,
        },
        latest: Some(sample()),
        history: vec![HistoryPoint {
            at_ms: 1_764_680_000_000,
            mem_used_bytes: vec![Some(94_493_769_728), None],
            util_gpu_percent: vec![Some(85), None],
        }],
        history_step_ms: 1000,
        server: Some(server_status()),
        restarts: vec![restart_summary()],
        presence: presence(),
        campaign: Some(campaign_info()),
    }
}

fn flags(tp: &str) -> flags::Flags {
    flags::Flags::from([
        ("--tp".to_owned(), tp.to_owned()),
        ("SGLANG_OPT_USE_TILELANG_INDEXER".to_owned(), "1".to_owned()),
    ])
}

fn server_status() -> restart::ServerStatus {
    use flags::{FlagKind, FlagSpec, FlagType};
    use restart::*;
    ServerStatus {
        name: "dsv3".into(),
        phase: Phase::Failed,
        phase_since_ms: 1_764_680_100_000,
        generation: 7,
        root: None,
        started_at_ms: None,
        flags: flags("8"),
        default_flags: flags("8"),
        allowed: vec![
            FlagSpec {
                name: "--tp".into(),
                kind: FlagKind::Arg,
                ty: FlagType::Int { min: 1, max: 8 },
                help: Some("tensor parallel size".into()),
            },
            FlagSpec {
                name: "SGLANG_OPT_USE_TILELANG_INDEXER".into(),
                kind: FlagKind::Env,
                ty: FlagType::Enum {
                    values: vec!["0".into(), "1".into()],
                },
                help: None,
            },
        ],
        port: 30000,
        gpus: vec![0, 1],
        operation: None,
        failure: Some(Failure::LaunchFailed {
            cause: LaunchCause::Oom,
            log_tail: vec!["torch.OutOfMemoryError: CUDA out of memory.".into()],
        }),
        adoptable: None,
        typical_ms: std::collections::BTreeMap::from([
            (Phase::Draining, 4_200),
            (Phase::WarmingUp, 91_000),
        ]),
        log_tail: vec!["[2026-12-02 16:00:00] server started".into()],
        flagset: Some("3f9a0c1d2e4b".into()),
        passive: bench::Passive {
            ttft_p50_ms: Some(48.5),
            itl_p50_ms: Some(21.25),
            output_tok_s: Some(612.5),
            running: Some(16),
            queued: Some(0),
        },
        has_metrics: true,
        bench: Some(bench_progress()),
        containment: Some(Containment {
            kind: ContainmentKind::Cgroup,
            reason: None,
            cgroup: Some("/system.slice/drainwatch.service".into()),
            pidfd: true,
            pidfd_reason: None,
            fallbacks: Vec::new(),
        }),
        origin: Some(Origin::Launched),
        server_cgroup: Some("/system.slice/drainwatch.service/server-7".into()),
        server_contained: true,
        held_by: Some(restart::HeldBy {
            campaign_id: 3,
            name: "indexer × EP".into(),
            step: 3,
            steps: 4,
        }),
        spans_nodes: false,
        engine: Some(restart::EngineIdentity {
            engine: "SGLang".into(),
            version: Some("0.5.4".into()),
            simulated: false,
        }),
    }
}

fn bench_progress() -> bench::BenchProgress {
    bench::BenchProgress {
        run_id: 4,
        status: bench::RunStatus::Running,
        concurrency: 16,
        request_rate: None,
        repeat: 1,
        repeats: 3,
        done: 80,
        total: 208,
        output_tok_s: 598.25,
        requested_by: "olga (10.0.0.7:51234)".to_owned(),
    }
}

fn bench_run() -> bench::BenchRun {
    use bench::*;
    let m = RunMetrics {
        concurrency: 16,
        repeat: 0,
        duration_s: 14.0,
        completed: 64,
        failed: 1,
        input_tokens: 16_384,
        output_tokens: 8_192,
        output_tok_s: 585.0,
        total_tok_s: 1755.5,
        request_s: 4.5,
        ttft: Latency {
            mean_ms: 70.0,
            p50_ms: 68.5,
            p99_ms: 91.0,
        },
        tpot: Latency {
            mean_ms: 26.0,
            p50_ms: 26.0,
            p99_ms: 27.5,
        },
        itl: Latency {
            mean_ms: 26.0,
            p50_ms: 25.75,
            p99_ms: 30.0,
        },
        e2e: Latency {
            mean_ms: 3_372.0,
            p50_ms: 3_370.0,
            p99_ms: 3_400.0,
        },
        token_source: TokenSource::ChunkUsage,
        request_rate: Some(4.5),
        achieved_rate: Some(4.48),
        good: Some(60),
        goodput_req_s: Some(4.25),
        client: Some(ClientHealth {
            lag_p99_ms: 1.5,
            lag_max_ms: 3.25,
            cpu_pct: 41.0,
            cores: 16,
            send_late_p99_ms: Some(0.5),
            waited_for_slot: Some(0),
            saturated: None,
        }),
        prompt_tokens_asked: Some(256),
        prompt_tokens_counted: Some(257.5),
    };
    BenchRun {
        id: 4,
        flagset: "3f9a0c1d2e4b".into(),
        restart_id: Some(12),
        requested_by: "127.0.0.1:51234".into(),
        settings: BenchSettings {
            request_rate: vec![4.5],
            max_concurrency: Some(16),
            slo: Some(Slo {
                ttft_ms: Some(200.0),
                tpot_ms: Some(30.0),
                e2e_ms: None,
                attainment_pct: 90.0,
            }),
            ..BenchSettings::default()
        },
        status: RunStatus::Succeeded,
        started_at_ms: 1_764_680_200_000,
        finished_at_ms: Some(1_764_680_260_000),
        error: None,
        correctness: Some(CorrectnessResult {
            passed: true,
            answer: "Paris".into(),
        }),
        levels: LevelSummary::group_all(std::slice::from_ref(&m), None),
        provenance: Some(Provenance {
            drainwatch_version: "0.1.0".into(),
            hostname: "gpu-07".into(),
            simulated: false,
            driver_version: Some("575.57.08".into()),
            cuda_version: Some("12.9".into()),
            server_version: Some("0.5.4".into()),
            server_version_from: Some("/get_server_info".into()),
            model: "deepseek-ai/DeepSeek-V3.2-Exp".into(),
            revision: Some("main".into()),
            seed: 4,
            workload: Workload {
                kind: "dataset".into(),
                input_len: 256,
                output_len: 128,
                dataset: Some("sharegpt-mini.json".into()),
                dataset_sha256: Some("9f2c".into()),
                dataset_prompts: Some(12),
                prefix_groups: None,
                prefix_len: None,
            },
            gpus: vec![GpuConditions {
                index: 0,
                samples: 140,
                util_pct: Some(Spread {
                    min: 80.0,
                    median: 97.0,
                    max: 100.0,
                }),
                power_w: Some(Spread {
                    min: 300.0,
                    median: 540.5,
                    max: 598.0,
                }),
                power_limit_w: Some(600.0),
                temp_c: Some(Spread {
                    min: 51.0,
                    median: 66.0,
                    max: 71.0,
                }),
                mem_used_gib: Some(Spread {
                    min: 88.0,
                    median: 88.0,
                    max: 88.25,
                }),
                throttled_samples: 12,
                throttle_reasons: Some(0x4),
            }],
            engine: Some(EngineProps {
                engine: "llama.cpp".into(),
                model: Some("gemma-3-270m-it-Q4_K_M.gguf".into()),
                build: Some("b11434-unknown".into()),
                ctx_size: Some(4096),
                slots: Some(4),
            }),
            prompt_sizing: Some(PromptSizing {
                by: "the server's /tokenize".into(),
                tokens_per_word: 5.875,
                overhead_tokens: 1.0,
            }),
        }),
        repeats: vec![m],
        campaign_id: Some(3),
        campaign_step: Some(1),
    }
}

fn restart_summary() -> restart::RestartSummary {
    use restart::*;
    RestartSummary {
        id: 12,
        kind: OpKind::Restart,
        requested_by: "127.0.0.1:51234".into(),
        started_at_ms: 1_764_680_000_000,
        finished_at_ms: Some(1_764_680_100_000),
        from_flags: flags("8"),
        to_flags: flags("4"),
        outcome: Outcome::Failed,
        failure: Some(Failure::VerifyFailed {
            reason: "GPU 3 at 1.5 GiB (idle baseline 4 MiB)".into(),
            holders: vec![Holder {
                pid: 999,
                user: Some("bob".into()),
                cmdline: vec!["python3".into(), "notebook.py".into()],
                gpu_index: 3,
                used_bytes: Some(1_610_612_736),
                ours: false,
            }],
        }),
        durations: Durations {
            drain_ms: Some(4_100),
            kill_ms: None,
            verify_ms: Some(60_000),
            warmup_ms: None,
            total_ms: Some(64_100),
        },
    }
}

fn presence() -> Vec<auth::Presence> {
    vec![auth::Presence {
        who: "alice".into(),
        role: auth::Role::Operator,
        sockets: 2,
        since_ms: 1_764_680_000_000,
    }]
}

fn campaign_info() -> campaign::CampaignInfo {
    campaign::CampaignInfo {
        id: 3,
        name: "indexer × EP".into(),
        state: campaign::CampaignState::Running,
        reason: None,
        requested_by: "olga".into(),
        created_at_ms: 1_764_680_000_000,
        finished_at_ms: None,
        order: campaign::PlanOrder::Given,
        on_failure: campaign::FailurePolicy::Retry,
        reuse: true,
        target: Some(1000.0),
        baseline: 0,
        current: Some(2),
        steps: 4,
        done: 1,
        reused: 1,
        failed: 0,
        skipped: 0,
        varied: vec!["SGLANG_OPT_USE_TILELANG_INDEXER".into(), "--ep-size".into()],
        step_estimate_ms: Some(140_000),
    }
}

fn campaign_step() -> campaign::Step {
    campaign::Step {
        index: 1,
        plan_index: 1,
        label: Some("+tilelang".into()),
        flags: flags("8"),
        flagset: "9f2c1e0a7b3d".into(),
        settings: None,
        state: campaign::StepState::Done,
        attempts: 1,
        restart_id: Some(12),
        run_id: Some(7),
        failure: None,
        result: Some(campaign::StepResult {
            run_id: 7,
            concurrency: 16,
            request_rate: None,
            output_tok_s: bench::Spread {
                min: 611.0,
                median: 612.4,
                max: 615.9,
            },
            ttft_p99_ms: bench::Spread {
                min: 88.0,
                median: 91.5,
                max: 97.25,
            },
            goodput_req_s: None,
            achieved_rate: None,
            client_saturated: false,
        }),
        started_at_ms: Some(1_764_680_001_000),
        finished_at_ms: Some(1_764_680_142_000),
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
        ("server", ServerMsg::Server(server_status())),
        ("restart", ServerMsg::Restart(restart_summary())),
        (
            "timeline",
            ServerMsg::Timeline {
                restart_id: 12,
                points: vec![
                    restart::TimelinePoint {
                        at_ms: 1_764_680_001_000,
                        phase: restart::Phase::Draining,
                        mem_used_bytes: vec![Some(94_489_280_512), None],
                        running_requests: Some(3),
                    },
                    restart::TimelinePoint {
                        at_ms: 1_764_680_001_020,
                        phase: restart::Phase::Killing,
                        mem_used_bytes: vec![Some(4_194_304), Some(4_194_304)],
                        running_requests: None,
                    },
                ],
            },
        ),
        ("bench", ServerMsg::Bench(bench_progress())),
        ("bench_run", ServerMsg::BenchRun(bench_run())),
        (
            "presence",
            ServerMsg::Presence {
                clients: presence(),
            },
        ),
        ("campaign", ServerMsg::Campaign(campaign_info())),
        (
            "campaign_step",
            ServerMsg::CampaignStep {
                campaign_id: 3,
                step: campaign_step(),
            },
        ),
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
    let v = serde_json::to_value(ServerMsg::<bench::BenchRun>::Pong { nonce: 1 }).expect("json");
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
