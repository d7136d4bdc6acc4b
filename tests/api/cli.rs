//! Start-up errors are one clear line and a non-zero exit.

use std::process::{Command, Stdio};

use tests::bin;

fn run(args: &[&str]) -> (i32, String) {
    let out = Command::new(bin("drainwatch"))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run drainwatch");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn busy_port_is_one_clear_line() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = taken.local_addr().expect("addr").to_string();
    let (code, err) = run(&["--bind", &addr, "--nvml-lib", "/nonexistent"]);
    assert_eq!(code, 1);
    let last = err.lines().last().unwrap_or_default();
    assert!(last.starts_with("error: cannot listen on"), "{err}");
    assert!(last.contains("already in use"), "{err}");
}

#[test]
fn invalid_options_are_refused() {
    for args in [
        &["--sample-interval-ms", "0"][..],
        &["--sample-interval-ms", "fast"],
        &["--bind", "not-an-address"],
        &["--history", "5 fortnights"],
        &["--no-such-flag"],
    ] {
        let (code, err) = run(args);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(err.starts_with("error:"), "{args:?}: {err}");
    }
}

#[test]
fn bad_log_filter_is_refused() {
    let (code, err) = run(&["--log-level", "drainwatch=loud"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--log-level"), "{err}");
}
