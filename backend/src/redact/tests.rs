//! What is secret, what stays visible, and every form a secret is found in.

use std::os::unix::fs::PermissionsExt;

use super::*;

fn r() -> Redactor {
    Redactor::new(
        [7; KEY_LEN],
        &["MY_CREDENTIAL".to_owned(), "--license".to_owned()],
    )
}

fn v(a: &[&str]) -> Vec<String> {
    a.iter().map(|s| s.to_string()).collect()
}

#[test]
fn secret_names_by_words() {
    let r = r();
    for name in [
        "--api-key",
        "OPENAI_API_KEY",
        "--hf-token",
        "HF_TOKEN",
        "--client-secret",
        "DB_PASSWORD",
        "db_passwd",
        "api_key",
        "--API-KEY",
        "my_credential",
        "--my-credential",
        "--license",
        "LICENSE",
        "GITHUB_TOKEN",
        "AWS_SECRET_ACCESS_KEY",
    ] {
        assert!(r.is_secret(name), "{name} is secret");
    }
}

#[test]
fn tuning_knobs_and_paths_stay_visible() {
    let r = r();
    for name in [
        "--max-total-tokens",
        "--max-prefill-tokens",
        "--tokenizer",
        "--tokenizer-path",
        "--ssl-keyfile",
        "--tp",
        "--model-path",
        "--keyword",
        "SGLANG_OPT_USE_TILELANG_INDEXER",
        "--",
        "",
    ] {
        assert!(!r.is_secret(name), "{name} is not secret");
    }
}

#[test]
fn the_redacted_form_hides_the_value_and_tells_secrets_apart() {
    let r = r();
    let a = r.value("sk-live-abcdef");
    assert!(a.starts_with("redacted:") && a.len() == 17, "{a}");
    assert!(!a.contains("abcdef"));
    assert_eq!(
        a,
        r.value("sk-live-abcdef"),
        "the same secret, the same form"
    );
    assert_ne!(a, r.value("sk-live-abcdeg"), "two secrets differ");
    assert_eq!(r.value(&a), a, "already redacted stays");
    let other = Redactor::new([8; KEY_LEN], &[]);
    assert_ne!(a, other.value("sk-live-abcdef"), "another key, another id");
}

#[test]
fn a_whole_command_in_one_element_and_learnt_booleans() {
    let r = r();
    let out = r.argv(&v(&[
        "sh",
        "-c",
        "python3 -m sglang --api-key sk-inline-9 --tp 8",
    ]));
    assert!(!out[2].contains("sk-inline-9"), "{out:?}");
    assert!(out[2].contains("--tp 8"), "{out:?}");
    // A secret flag's boolean or number is never looked for in text.
    for v in ["true", "false", "8192", "0.5"] {
        r.learn(v);
    }
    assert_eq!(
        r.known("--enable-x true --max 8192 0.5"),
        "--enable-x true --max 8192 0.5"
    );
}

#[test]
fn argv_forms() {
    let r = r();
    let s = r.value("S1");
    let argv = v(&[
        "env",
        "HF_TOKEN=hf_x",
        "python3",
        "--api-key",
        "S1",
        "--hf-token=S1",
        "--client-secret",
        "--tp",
        "8",
        "--max-total-tokens",
        "4096",
        "--tokenizer-path",
        "/m/tok",
        "--license",
        "L1",
    ]);
    let out = r.argv(&argv);
    assert_eq!(out[1], format!("HF_TOKEN={}", r.value("hf_x")));
    assert_eq!(out[3..5], ["--api-key".to_owned(), s.clone()]);
    assert_eq!(out[5], format!("--hf-token={s}"));
    // A secret flag followed by another flag has no value to redact.
    assert_eq!(out[6..9], v(&["--client-secret", "--tp", "8"]));
    assert_eq!(out[9..13], argv[9..13]);
    assert_eq!(out[14], r.value("L1"));
    assert_eq!(r.argv(&v(&["--api-key"])), v(&["--api-key"]));
}

#[test]
fn text_forms() {
    let r = r();
    let s = r.value("SECRET1");
    for (line, want) in [
        (
            "server_args=ServerArgs(model_path='m', api_key='SECRET1', tp_size=8)",
            format!("server_args=ServerArgs(model_path='m', api_key='{s}', tp_size=8)"),
        ),
        (
            r#"{"api_key": "SECRET1", "max_total_tokens": 4096}"#,
            format!(r#"{{"api_key": "{s}", "max_total_tokens": 4096}}"#),
        ),
        (
            "launch --api-key SECRET1 --tp 8",
            format!("launch --api-key {s} --tp 8"),
        ),
        (
            "HF_TOKEN=SECRET1 python3 x",
            format!("HF_TOKEN={s} python3 x"),
        ),
        (
            "api_key=\"SECRET1\" hf_token=None",
            format!("api_key=\"{s}\" hf_token=None"),
        ),
        ("url?api_key=SECRET1&x=1", format!("url?api_key={s}&x=1")),
        (
            "--max-total-tokens 4096 --tokenizer /t tokenizer='x'",
            "--max-total-tokens 4096 --tokenizer /t tokenizer='x'".to_owned(),
        ),
    ] {
        assert_eq!(r.text(line), want, "{line}");
    }
    // Idempotent: a redacted line reads the same again.
    let once = r.text("api_key='SECRET1' --hf-token SECRET1");
    assert_eq!(r.text(&once), once);
}

#[test]
fn known_values_are_replaced_anywhere() {
    let r = r();
    r.learn_argv(&v(&["--api-key", "S3cr3tValue", "--tp", "8"]));
    r.learn_pairs(&BTreeMap::from([
        ("HF_TOKEN".to_owned(), "hf_abcdef".to_owned()),
        ("NCCL_DEBUG".to_owned(), "WARN".to_owned()),
    ]));
    r.learn("abc");
    let line = "Authorization: Bearer S3cr3tValue; hub=hf_abcdef/x; WARN abc";
    let out = r.text(line);
    assert!(
        !out.contains("S3cr3tValue") && !out.contains("hf_abcdef"),
        "{out}"
    );
    assert!(out.contains(&r.value("S3cr3tValue")), "{out}");
    assert!(out.contains("WARN abc"), "not secret, or too short: {out}");
    assert_eq!(
        r.argv(&v(&["serve", "S3cr3tValue"])),
        v(&["serve", &r.value("S3cr3tValue")])
    );
    assert!(
        r.known("label S3cr3tValue")
            .contains(&r.value("S3cr3tValue"))
    );
}

#[test]
fn the_configs_api_key_is_learnt_even_when_it_is_all_digits() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let key = dir.path().join("key");
    std::fs::write(&key, "8675309012\n").expect("written");
    let text = format!(
        "[server]\nname = \"x\"\nprogram = \"/bin/true\"\nport = 1\ngpus = [0]\napi_key_file = \"{}\"\n",
        key.display()
    );
    let cfg = crate::config::file::ServerConfig::parse(&text).expect("valid");
    let r = r();
    cfg.teach(&r);
    let out = r.text("GET /v1/models Authorization: Bearer 8675309012 -> 401");
    assert!(!out.contains("8675309012"), "{out}");
    assert!(out.contains(&r.value("8675309012")), "{out}");
    // Learning a number by itself still does nothing.
    let plain = Redactor::new([7; KEY_LEN], &[]);
    plain.learn("8675309012");
    assert!(plain.text("8675309012").contains("8675309012"));
}

#[test]
fn flags_and_specs() {
    let r = r();
    let flags = Flags::from([
        ("--api-key".to_owned(), "K1".to_owned()),
        ("--enable-token-auth".to_owned(), "true".to_owned()),
        ("--tp".to_owned(), "8".to_owned()),
    ]);
    let out = r.flags(&flags);
    assert_eq!(out["--api-key"], r.value("K1"));
    assert_eq!(out["--enable-token-auth"], "true");
    assert_eq!(out["--tp"], "8");
    let spec = FlagSpec {
        name: "--api-key".to_owned(),
        kind: shared::flags::FlagKind::Arg,
        ty: FlagType::Enum {
            values: v(&["K1", "K2"]),
        },
        help: None,
    };
    let shown = r.specs(&[spec]);
    assert_eq!(
        shown[0].ty,
        FlagType::Enum {
            values: vec![r.value("K1"), r.value("K2")]
        }
    );
}

#[test]
fn the_key_file_is_made_once_private_and_kept() {
    let dir = tempfile::tempdir().expect("tmp");
    let a = load_key(dir.path()).expect("made");
    let path = dir.path().join(KEY_FILE);
    let mode = std::fs::metadata(&path).expect("file").permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    assert_eq!(load_key(dir.path()).expect("read"), a, "stable across runs");
    std::fs::write(&path, b"short").expect("damage");
    let err = load_key(dir.path()).expect_err("damaged");
    assert!(err.to_string().contains("not 32"), "{err}");
}
