//! The file parsed: defaults, secret names, the model, errors that name the
//! key, and the shipped examples.

use super::*;

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
            .expect_err("a name");
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
        let err = ServerConfig::parse(&text).expect_err(needle);
        assert!(err.contains(needle), "{needle}: {err}");
    }
}

#[test]
fn shipped_examples_are_valid() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples");
    for name in ["sglang.toml", "vllm.toml", "demo.toml"] {
        ServerConfig::load(&dir.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
    }
}
