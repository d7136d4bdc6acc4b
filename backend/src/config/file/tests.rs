//! The file parsed: defaults, secret names, the model, errors that name the
//! key, and the shipped examples.

use super::*;
use shared::bench::BenchApi;

const MINIMAL: &str = r#"
        [server]
        name = "demo"
        program = "/bin/true"
        port = 30000
        gpus = [0, 1]
    "#;

#[test]
fn minimal_file_gets_defaults() {
    let c = ServerConfig::parse(MINIMAL).expect("valid");
    assert_eq!(c.name, "demo");
    assert_eq!(c.health_url, "http://127.0.0.1:30000/health");
    let on = ServerConfig::parse(&MINIMAL.replace("port = 30000", "port = 30000\nhost = \"::1\""))
        .expect("valid");
    assert_eq!(on.base_url, "http://[::1]:30000");
    assert_eq!(on.readiness.url, "http://[::1]:30000/v1/completions");
    let err =
        ServerConfig::parse(&MINIMAL.replace("port = 30000", "port = 30000\nhost = \"gpu-07\""))
            .expect_err("a name")
            .to_string();
    assert!(err.contains("host"), "{err}");
    assert_eq!(c.readiness.url, "http://127.0.0.1:30000/v1/completions");
    assert_eq!(c.timeouts.drain, Duration::from_secs(60));
    assert_eq!(c.verify.tolerance_bytes, 64 << 20);
    assert_eq!(c.verify.samples, 3);
    assert!(!c.bench.after_restart);
    assert_eq!(c.bench.defaults.repeats, 3);
    assert!(c.redact.is_empty());
}

#[test]
fn extra_secret_names() {
    let c = ServerConfig::parse(&MINIMAL.replace(
        "gpus = [0, 1]",
        "gpus = [0, 1]\nredact = [\"MY_CREDENTIAL\", \" --license \"]",
    ))
    .expect("valid");
    assert_eq!(c.redact, ["MY_CREDENTIAL", "--license"]);
}

#[test]
fn the_model_comes_from_the_command_line() {
    let a = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert_eq!(
        model_of(&a(&[
            "-m",
            "sglang.launch_server",
            "--model-path",
            "x/y",
            "--tp",
            "8"
        ])),
        "x/y"
    );
    assert_eq!(model_of(&a(&["serve", "Qwen/Q", "--tp", "8"])), "Qwen/Q");
    assert_eq!(model_of(&a(&["--model=z"])), "z");
    assert_eq!(
        model_of(&a(&["-m", "models/gemma.gguf", "--port", "8080"])),
        "models/gemma.gguf"
    );
    assert_eq!(model_of(&a(&["-m", "gemma.gguf"])), "gemma.gguf");
    assert_eq!(model_of(&a(&["-m", "sglang.launch_server"])), "");
    assert_eq!(
        model_of(&a(&["--revision", "abc123", "--model-path", "m/x"])),
        "m/x@abc123"
    );
    assert_eq!(
        model_of(&a(&["serve", "Qwen/Q", "--revision=v2"])),
        "Qwen/Q@v2"
    );
    assert_eq!(model_of(&a(&["--tp", "8"])), "");
}

#[test]
fn errors_name_the_key() {
    let cases = [
        (MINIMAL.replace("port = 30000", "port = 0"), "server.port"),
        (MINIMAL.replace("gpus = [0, 1]", "gpus = []"), "server.gpus"),
        (
            format!("{MINIMAL}\n[timeouts]\ndrain = \"soon\""),
            "timeouts.drain",
        ),
        (
            format!("{MINIMAL}\n[timeouts]\nwarmup = \"0s\""),
            "timeouts.warmup",
        ),
        (
            format!("{MINIMAL}\n[verify]\nsamples = 0"),
            "verify.samples",
        ),
        (
            MINIMAL.replace("port = 30000", "port = 30000\nshell = \"bash -c\""),
            "shell",
        ),
        (
            format!("{MINIMAL}\n[[flags]]\nname = \"--tp\"\nkind = \"arg\"\ntype = \"integer\""),
            "unknown type",
        ),
        (
            format!("{MINIMAL}\n[[flags]]\nname = \"tp\"\nkind = \"arg\"\ntype = \"int\""),
            "--name",
        ),
        (
            format!("{MINIMAL}\n[[flags]]\nname = \"A-B\"\nkind = \"env\"\ntype = \"bool\""),
            "environment variable name",
        ),
        (
            format!("{MINIMAL}\n[[flags]]\nname = \"X\"\nkind = \"env\"\ntype = \"enum\""),
            "values",
        ),
        (
            MINIMAL.replace("gpus = [0, 1]", "gpus = [0, 1]\nredact = [\"A=B\"]"),
            "server.redact: `A=B` is not a name",
        ),
        (
            MINIMAL.replace("gpus = [0, 1]", "gpus = [0, 1]\nredact = [\"\"]"),
            "server.redact",
        ),
    ];
    for (text, needle) in cases {
        let err = ServerConfig::parse(&text).expect_err(needle).to_string();
        assert!(err.contains(needle), "{needle}: {err}");
    }
}

#[test]
fn shipped_examples_are_valid() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples");
    for name in ["sglang.toml", "vllm.toml", "demo.toml", "sglang-2node.toml"] {
        ServerConfig::load(&dir.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
    }
    let two = ServerConfig::load(&dir.join("sglang-2node.toml")).expect("valid");
    assert!(two.spans_nodes);
}

/// `MINIMAL` with `lines` added to `[server]`.
fn with_server(lines: &str) -> String {
    MINIMAL.replace("gpus = [0, 1]", &format!("gpus = [0, 1]\n{lines}"))
}

#[test]
fn the_api_key_comes_from_a_file_with_its_newline_trimmed() {
    let dir = tempfile::tempdir().expect("a temp dir");
    std::fs::write(dir.path().join("key"), "sk-file-0123\n").expect("written");
    let c =
        ServerConfig::parse_in(&with_server("api_key_file = \"key\""), dir.path()).expect("valid");
    let key = c.api_key.expect("a key");
    assert_eq!(key.expose(), "sk-file-0123");
    assert_eq!(key.bearer().to_str().ok(), Some("Bearer sk-file-0123"));
    assert!(key.bearer().is_sensitive());
    // Never printed, neither alone nor with the config.
    assert_eq!(format!("{key:?}"), "ApiKey(redacted)");
    assert!(
        ServerConfig::parse(MINIMAL)
            .expect("valid")
            .api_key
            .is_none()
    );
}

#[test]
fn the_api_key_comes_from_an_environment_variable() {
    // A variable the test process already has (setting one is unsafe).
    let (name, value) = std::env::vars()
        .find(|(k, v)| {
            check_env_name(k).is_ok() && v.len() >= 4 && v.bytes().all(|b| b.is_ascii_graphic())
        })
        .expect("some variable");
    let c = ServerConfig::parse(&with_server(&format!("api_key_env = \"{name}\""))).expect("valid");
    let key = c.api_key.clone().expect("a key");
    assert_eq!(key.expose(), value);
    assert!(!format!("{c:?}").contains(&format!("{value:?}")), "{c:?}");
}

#[test]
fn api_key_errors_name_the_key_and_never_the_value() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let missing = dir.path().join("absent");
    std::fs::write(dir.path().join("empty"), "\n").expect("written");
    std::fs::write(dir.path().join("two"), "sk-a b\n").expect("written");
    let cases = [
        (
            with_server("api_key = \"sk-inline-9999\""),
            "server.api_key: the key is not taken from the config",
        ),
        (with_server("api_key = \"sk-inline-9999\""), "api_key_file"),
        (
            with_server("api_key_file = \"empty\"\napi_key_env = \"HOME\""),
            "both set",
        ),
        (
            with_server(&format!("api_key_file = \"{}\"", missing.display())),
            &format!(
                "server.api_key_file ({}): cannot read it",
                missing.display()
            ),
        ),
        (
            with_server("api_key_file = \"empty\""),
            "server.api_key_file",
        ),
        (with_server("api_key_file = \"empty\""), "is empty"),
        (
            with_server("api_key_file = \"two\""),
            "characters an HTTP header cannot carry",
        ),
        (
            with_server("api_key_env = \"DRAINWATCH_TEST_UNSET_KEY_1B2C\""),
            "server.api_key_env (DRAINWATCH_TEST_UNSET_KEY_1B2C): the variable is not set",
        ),
        (
            with_server("api_key_env = \"A-B\""),
            "server.api_key_env: `A-B` is not a valid environment variable name",
        ),
    ];
    for (text, needle) in cases {
        let err = ServerConfig::parse_in(&text, dir.path())
            .expect_err(needle)
            .to_string();
        assert!(err.contains(needle), "{needle}: {err}");
        assert!(!err.contains("sk-"), "{err}");
    }
    // Through `load`, a relative key file is found beside the config.
    let cfg = dir.path().join("server.toml");
    std::fs::write(&cfg, with_server("api_key_file = \"absent\"")).expect("written");
    let err = ServerConfig::load(&cfg)
        .expect_err("no key file")
        .to_string();
    assert!(err.contains(&missing.display().to_string()), "{err}");
}

#[test]
fn sglang_benchmarks_its_native_generate_unless_told_otherwise() {
    let c = ServerConfig::parse(&with_server("engine = \"sglang\"")).expect("valid");
    assert_eq!(c.engine, Engine::Sglang);
    assert_eq!(c.bench.defaults.api, BenchApi::Generate);
    let told = format!(
        "{}\n[bench.defaults]\napi = \"chat\"\n",
        with_server("engine = \"sglang\"")
    );
    let c = ServerConfig::parse(&told).expect("valid");
    assert_eq!(c.bench.defaults.api, BenchApi::Chat);
    for other in ["engine = \"vllm\"", ""] {
        let c = ServerConfig::parse(&with_server(other)).expect("valid");
        assert_eq!(c.bench.defaults.api, BenchApi::Completions, "{other}");
    }
    let err = ServerConfig::parse(&with_server("engine = \"tgi\""))
        .expect_err("unknown")
        .to_string();
    assert!(err.contains("engine"), "{err}");
}

#[test]
fn the_tokenizer_is_the_configured_one_or_the_model_directory_s() {
    use crate::bench::tokens::Tokenizer;
    let dir = tempfile::tempdir().expect("a temp dir");
    let model = dir.path().join("model");
    std::fs::create_dir(&model).expect("made");
    std::fs::write(
        model.join("tokenizer.json"),
        include_str!("../../../../tests/data/sim-model/tokenizer.json"),
    )
    .expect("written");
    // Named, relative to the config's directory: a file or a directory.
    for name in ["model", "model/tokenizer.json"] {
        let text = format!("{MINIMAL}\n[bench]\ntokenizer = \"{name}\"\n");
        let c = ServerConfig::parse_in(&text, dir.path()).expect("valid");
        let file = c.bench.tokenizer.expect("a tokenizer");
        let t = Tokenizer::configured(&file)
            .expect("reads")
            .expect("a tokenizer");
        assert_eq!(t.path(), model.join("tokenizer.json"));
        assert_eq!(t.count("tok1 tok2 "), 2);
    }
    // Found in the model's directory, with or without a revision.
    for m in ["model", "model@main"] {
        let c = ServerConfig::parse_in(&with_server(&format!("model = \"{m}\"")), dir.path())
            .expect("valid");
        assert!(c.bench.tokenizer.is_some(), "{m}");
    }
    // A model by hub name has none here: the benchmark counts per event.
    let c =
        ServerConfig::parse_in(&with_server("model = \"org/none\""), dir.path()).expect("valid");
    assert!(c.bench.tokenizer.is_none());
    // One that is named and does not read is an error that names the key.
    std::fs::write(dir.path().join("broken.json"), "{not json").expect("written");
    for name in ["absent", "broken.json"] {
        let text = format!("{MINIMAL}\n[bench]\ntokenizer = \"{name}\"\n");
        // Absent: the config says so; there but unreadable: loading does.
        let err = ServerConfig::parse_in(&text, dir.path())
            .and_then(|c| Tokenizer::configured(c.bench.tokenizer.as_ref().expect("named")))
            .expect_err(name)
            .to_string();
        assert!(err.contains("bench.tokenizer"), "{err}");
        assert!(err.contains(name), "{err}");
    }
}

#[test]
fn the_datasets_directory_is_relative_to_the_config_and_must_exist() {
    let dir = tempfile::tempdir().expect("a temp dir");
    std::fs::create_dir(dir.path().join("data")).expect("made");
    let text = format!("{MINIMAL}\n[bench]\ndatasets = \"data\"\n");
    let c = ServerConfig::parse_in(&text, dir.path()).expect("valid");
    assert_eq!(
        c.bench.datasets.as_deref(),
        Some(dir.path().join("data").as_path())
    );
    let text = format!("{MINIMAL}\n[bench]\ndatasets = \"absent\"\n");
    let err = ServerConfig::parse_in(&text, dir.path())
        .expect_err("absent")
        .to_string();
    assert!(
        err.contains("bench.datasets") && err.contains("not a directory"),
        "{err}"
    );
}

#[test]
fn slos_and_open_loop_defaults_are_configured_per_server() {
    let text = format!(
        "{MINIMAL}\n[bench.defaults]\nrequest_rate = [2.0, 8.0]\nmax_concurrency = 64\n\
         [bench.defaults.slo]\nttft_ms = 500\ntpot_ms = 40\n"
    );
    let c = ServerConfig::parse(&text).expect("valid");
    let slo = c.bench.defaults.slo.expect("an SLO");
    assert_eq!(
        (slo.ttft_ms, slo.tpot_ms, slo.e2e_ms),
        (Some(500.0), Some(40.0), None)
    );
    assert_eq!(slo.attainment_pct, 90.0);
    assert_eq!(c.bench.defaults.request_rate, [2.0, 8.0]);
    let bad = format!("{MINIMAL}\n[bench.defaults.slo]\nattainment_pct = 50\n");
    let err = ServerConfig::parse(&bad)
        .expect_err("no threshold")
        .to_string();
    assert!(
        err.contains("bench.defaults: slo: give at least one"),
        "{err}"
    );
}
