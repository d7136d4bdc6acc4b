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

#[test]
fn token_prints_a_secret_and_the_stanza_that_admits_it() {
    let out = Command::new(bin("drainwatch"))
        .args(["token", "--name", "alice", "--role", "viewer"])
        .stdin(Stdio::null())
        .output()
        .expect("run drainwatch token");
    assert!(out.status.success());
    let secret = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    assert!(secret.starts_with("dw_") && secret.len() == 67, "{secret}");
    let stanza = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!stanza.contains(&secret), "the secret is only on stdout");
    let hash = tests::sha256_hex(&secret);
    assert!(stanza.contains(&format!("sha256 = \"{hash}\"")), "{stanza}");
    assert!(stanza.contains("name = \"alice\"") && stanza.contains("role = \"viewer\""));
    // The stanza is a valid auth file as it stands.
    let cfg = drainwatch::auth::AuthConfig::parse(&stanza).expect("the printed stanza parses");
    assert_eq!(cfg.tokens.len(), 1);
    // Two runs, two secrets.
    let again = Command::new(bin("drainwatch"))
        .args(["token", "--name", "alice", "--role", "viewer"])
        .output()
        .expect("run");
    assert_ne!(String::from_utf8_lossy(&again.stdout).trim(), secret);
    // A name that would break the file is refused.
    let (code, err) = run(&["token", "--name", "a\"b", "--role", "operator"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("--name"), "{err}");
    let (code, _) = run(&["token", "--name", "a", "--role", "admin"]);
    assert_eq!(code, 2);
}
