//! Workloads beyond random prompts: dataset files from the configured
//! directory (JSONL and ShareGPT), shared prefixes, and the provenance that
//! says which ran.

use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tests::TestApp;
use tests::managed::{ServerSpec, spawn_managed};

/// A benchmark of 12 requests (4 clients) with `extra` settings.
async fn bench(app: &TestApp, extra: Value) -> anyhow::Result<Value> {
    let mut s = json!({"concurrency": [4], "num_prompts": 12, "output_len": 32,
                       "input_len": 16, "warmup": 0, "repeats": 3});
    for (k, v) in extra.as_object().expect("an object") {
        s[k] = v.clone();
    }
    let run = app.bench(s).await?;
    anyhow::ensure!(run["status"] == "succeeded", "{run}");
    Ok(run)
}

#[tokio::test]
async fn datasets_and_shared_prefixes_drive_the_load_and_are_recorded() -> anyhow::Result<()> {
    let _load = crate::MEASURING.read().await;
    let host = tests::SimHost::new(100);
    let dir = host.scratch().join("datasets");
    std::fs::create_dir_all(&dir)?;
    // Five words a prompt, 24 tokens an answer: not the settings' 16 and 32.
    let even: String = (0..7)
        .map(|i| format!("{{\"prompt\": \"one two three four q{i}\", \"output_len\": 24}}\n"))
        .collect();
    std::fs::write(dir.join("even.jsonl"), &even)?;
    std::fs::write(
        dir.join("broken.jsonl"),
        "{\"prompt\": \"a\"}\n{\"prompt\": \"b\"}\n{\"prompt\": \"c\", \"output_len\": }\n",
    )?;
    // One 100 KB prompt: fine alone, too much at 1024 in flight.
    std::fs::write(
        dir.join("long.jsonl"),
        format!("{{\"prompt\": \"{}\"}}\n", "w ".repeat(50_000)),
    )?;
    let mini = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/data/datasets/sharegpt-mini.json"
    ))?;
    std::fs::write(dir.join("sharegpt-mini.json"), &mini)?;
    let spec = ServerSpec {
        tp: 1,
        warmup_ms: 200,
        itl_ms: 2.0,
        ttft_ms: 5.0,
        extra: format!("[bench]\ndatasets = \"{}\"\n", dir.display()),
        ..ServerSpec::default()
    };
    let app = spawn_managed(&host, &spec, &[])?;
    app.start_server().await?;

    // JSONL: its prompts and its output lengths, whatever the settings say.
    let run = bench(&app, json!({"dataset": "even.jsonl"})).await?;
    for r in run["repeats"].as_array().expect("repeats") {
        assert_eq!(r["output_tokens"], 12 * 24, "{r}");
        assert_eq!(r["input_tokens"], 12 * 5, "{r}");
    }
    let w = &run["provenance"]["workload"];
    assert_eq!(w["kind"], "dataset");
    assert_eq!(w["dataset"], "even.jsonl");
    assert_eq!(w["dataset_prompts"], 7);
    let sha: String = Sha256::digest(even.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(w["dataset_sha256"], sha);

    // ShareGPT: the answers' lengths, in words here (no tokenizer).
    let run = bench(&app, json!({"dataset": "sharegpt-mini.json"})).await?;
    assert_eq!(run["provenance"]["workload"]["dataset_prompts"], 12);
    let out = run["repeats"][0]["output_tokens"].as_u64().expect("tokens");
    assert!(out != 12 * 32 && out > 12, "{out}");

    // Shared prefixes: 2 groups of a 50-word system prompt before 16 words.
    let run = bench(&app, json!({"prefix_groups": 2, "prefix_len": 50})).await?;
    assert_eq!(run["repeats"][0]["input_tokens"], 12 * (50 + 16));
    let w = &run["provenance"]["workload"];
    assert_eq!(
        (w["kind"].as_str(), w["prefix_groups"].as_u64()),
        (Some("shared_prefix"), Some(2))
    );

    // Refused before anything runs, with a clear reason.
    let runs_before = app
        .get_json("/api/bench/runs")
        .await?
        .as_array()
        .map(Vec::len);
    for (dataset, why) in [
        ("broken.jsonl", "dataset `broken.jsonl`: line 3: expected"),
        (
            "../server.toml",
            "give a file name in the datasets directory",
        ),
        ("absent.jsonl", "dataset `absent.jsonl`: No such file"),
    ] {
        let (code, body) = app.post("/api/bench", &json!({"dataset": dataset})).await?;
        assert_eq!(code, 400, "{dataset}: {body}");
        assert!(
            body["error"].as_str().is_some_and(|e| e.contains(why)),
            "{dataset}: {body}"
        );
    }
    let (code, body) = app
        .post(
            "/api/bench",
            &json!({"dataset": "long.jsonl", "concurrency": [1024]}),
        )
        .await?;
    assert_eq!(code, 400, "{body}");
    assert!(
        body["error"]
            .as_str()
            .is_some_and(|e| e.contains("lower the concurrency")),
        "{body}"
    );
    let runs_after = app
        .get_json("/api/bench/runs")
        .await?
        .as_array()
        .map(Vec::len);
    assert_eq!(runs_before, runs_after);
    Ok(())
}

#[tokio::test]
async fn without_a_datasets_directory_a_dataset_is_refused() -> anyhow::Result<()> {
    let _load = crate::MEASURING.read().await;
    let host = tests::SimHost::new(100);
    let spec = ServerSpec {
        tp: 1,
        warmup_ms: 200,
        ..ServerSpec::default()
    };
    let app = spawn_managed(&host, &spec, &[])?;
    app.start_server().await?;
    let (code, body) = app
        .post("/api/bench", &json!({"dataset": "x.jsonl"}))
        .await?;
    assert_eq!(code, 400, "{body}");
    assert!(
        body["error"]
            .as_str()
            .is_some_and(|e| e.contains("no [bench] datasets directory")),
        "{body}"
    );
    Ok(())
}
