use std::collections::BTreeMap;

use shared::bench::BenchSettings;
use shared::campaign::{FailurePolicy, PlanOrder};
use shared::flags::{FlagKind, FlagSpec, FlagType};

use super::*;

fn spec(name: &str, kind: FlagKind, ty: FlagType) -> FlagSpec {
    FlagSpec {
        name: name.to_owned(),
        kind,
        ty,
        help: None,
    }
}

fn allow() -> AllowList {
    let specs = vec![
        spec("--tp", FlagKind::Arg, FlagType::Int { min: 1, max: 8 }),
        spec("--ep-size", FlagKind::Arg, FlagType::Int { min: 1, max: 8 }),
        spec(
            "SGLANG_OPT_USE_TILELANG_INDEXER",
            FlagKind::Env,
            FlagType::Enum {
                values: vec!["0".into(), "1".into()],
            },
        ),
        spec(
            "--speculative-algorithm",
            FlagKind::Arg,
            FlagType::Enum {
                values: vec!["EAGLE".into()],
            },
        ),
        spec("--enable-torch-compile", FlagKind::Arg, FlagType::Bool),
        spec(
            "--mem-fraction-static",
            FlagKind::Arg,
            FlagType::Float {
                min: 0.5,
                max: 0.95,
            },
        ),
    ];
    let args: Vec<String> = ["launch", "--tp", "8"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let env = BTreeMap::from([("SGLANG_OPT_USE_TILELANG_INDEXER".to_owned(), "0".to_owned())]);
    AllowList::new(specs, &args, &env, &Default::default()).expect("valid allow-list")
}

fn plan(toml: &str) -> Result<Resolved, PlanError> {
    resolve(parse(toml, false)?, &allow(), &BenchSettings::default())
}

const GRID: &str = r#"
name = "indexer × EP × spec"
target = 1000
[bench]
concurrency = [16]
[grid]
SGLANG_OPT_USE_TILELANG_INDEXER = ["0", "1"]
"--ep-size" = [1, 4]
"--speculative-algorithm" = ["", "EAGLE"]
[[exclude]]
"--ep-size" = 4
"--speculative-algorithm" = "EAGLE"
"#;

#[test]
fn a_grid_expands_in_order_the_first_flag_slowest_without_its_exclusions() {
    let r = plan(GRID).expect("valid plan");
    assert_eq!(
        r.steps.len(),
        6,
        "2 × 2 × 2 less the two with EP 4 and EAGLE"
    );
    let at = |i: usize| {
        let f = &r.steps[i].flags;
        (
            f["SGLANG_OPT_USE_TILELANG_INDEXER"].clone(),
            f["--ep-size"].clone(),
            f.get("--speculative-algorithm").cloned(),
        )
    };
    assert_eq!(at(0), ("0".into(), "1".into(), None));
    assert_eq!(at(1), ("0".into(), "1".into(), Some("EAGLE".into())));
    assert_eq!(at(2), ("0".into(), "4".into(), None));
    assert_eq!(at(3), ("1".into(), "1".into(), None));
    // Every step keeps the config's other values.
    assert!(r.steps.iter().all(|s| s.flags["--tp"] == "8"));
    assert_eq!(
        r.varied,
        [
            "SGLANG_OPT_USE_TILELANG_INDEXER",
            "--ep-size",
            "--speculative-algorithm"
        ]
    );
    assert_eq!(r.target, Some(1000.0));
    assert_eq!(r.on_failure, FailurePolicy::Continue);
    assert!(r.reuse, "reuse is the default");
    let plan_order: Vec<u32> = r.steps.iter().map(|s| s.plan_index).collect();
    assert_eq!(plan_order, [0, 1, 2, 3, 4, 5]);
}

#[test]
fn json_and_toml_read_alike() {
    let json = r#"{"name": "indexer × EP × spec", "target": 1000, "bench": {"concurrency": [16]},
        "grid": {"SGLANG_OPT_USE_TILELANG_INDEXER": ["0", "1"], "--ep-size": [1, 4],
                 "--speculative-algorithm": [null, "EAGLE"]},
        "exclude": [{"--ep-size": 4, "--speculative-algorithm": "EAGLE"}]}"#;
    let a = resolve(
        parse(json, true).expect("json"),
        &allow(),
        &BenchSettings::default(),
    )
    .expect("valid");
    assert_eq!(a, plan(GRID).expect("valid"));
}

#[test]
fn env_first_groups_sets_by_their_arguments() {
    let r = plan(&GRID.replace("target = 1000", "target = 1000\norder = \"env_first\""))
        .expect("valid");
    assert_eq!(r.order, PlanOrder::EnvFirst);
    let order: Vec<u32> = r.steps.iter().map(|s| s.plan_index).collect();
    // (EP 1, no spec) for indexer 0 and 1, then (EP 1, EAGLE), then (EP 4).
    assert_eq!(order, [0, 3, 1, 4, 2, 5]);
    for pair in r.steps.chunks(2) {
        assert_eq!(pair[0].flags["--ep-size"], pair[1].flags["--ep-size"]);
        assert_ne!(
            pair[0].flags["SGLANG_OPT_USE_TILELANG_INDEXER"],
            pair[1].flags["SGLANG_OPT_USE_TILELANG_INDEXER"]
        );
    }
}

#[test]
fn an_off_list_flag_or_an_impossible_value_refuses_the_whole_plan_naming_it() {
    let e = plan("name = \"x\"\n[grid]\n\"--tp\" = [4, 8]\n\"--nccl-magic\" = [1]\n")
        .expect_err("off-list");
    assert!(e.0.contains("unknown flag `--nccl-magic`"), "{e}");
    let e = plan("name = \"x\"\n[grid]\n\"--ep-size\" = [1, 16]\n").expect_err("out of range");
    assert!(
        e.0.contains("`--ep-size` must be an integer from 1 to 8, got `16`"),
        "{e}"
    );
    let e = plan("name = \"x\"\n[[sets]]\nflags = { SGLANG_OPT_USE_TILELANG_INDEXER = \"2\" }\n")
        .expect_err("not one of");
    assert!(e.0.starts_with("set #1:"), "{e}");
    let e = plan("name = \"x\"\n[bench]\nrepeats = 1\n[grid]\n\"--tp\" = [4, 8]\n")
        .expect_err("bad bench");
    assert!(e.0.contains("bench: repeats must be from 3"), "{e}");
    let e = plan("name = \"x\"\n[grid]\n\"--tp\" = [4]\n[[exclude]]\n\"--ep-size\" = 2\n")
        .expect_err("exclude off-grid");
    assert!(e.0.contains("not one of the grid's flags"), "{e}");
    let e = plan("name = \"x\"\nsurprise = 1\n").expect_err("unknown field");
    assert!(e.0.contains("surprise"), "{e}");
    let e = plan("name = \"  \"\n[grid]\n\"--tp\" = [4]\n").expect_err("no name");
    assert!(e.0.contains("name"), "{e}");
    let e = plan("name = \"x\"\n").expect_err("empty");
    assert!(e.0.contains("no flag sets"), "{e}");
    let e = plan("name = \"x\"\n[grid]\n\"--tp\" = [4, \"4\"]\n").expect_err("twice");
    assert!(e.0.contains("twice"), "{e}");
}

#[test]
fn a_grid_past_the_step_bound_is_refused_before_it_is_expanded() {
    let mut toml = "name = \"huge\"\n[grid]\n".to_owned();
    for f in ["--tp", "--ep-size"] {
        toml.push_str(&format!("\"{f}\" = [1, 2, 3, 4, 5, 6, 7, 8]\n"));
    }
    assert_eq!(plan(&toml).expect("64 is fine").steps.len(), 64);
    toml.push_str("SGLANG_OPT_USE_TILELANG_INDEXER = [\"0\", \"1\"]\n");
    toml.push_str("\"--enable-torch-compile\" = [false, true]\n");
    toml.push_str("\"--speculative-algorithm\" = [\"\", \"EAGLE\"]\n");
    assert_eq!(plan(&toml).expect("512 is fine").steps.len(), 512);
    let e = plan(&format!(
        "{toml}\"--mem-fraction-static\" = [0.5, 0.7, 0.9]\n"
    ))
    .expect_err("1536 steps");
    assert!(e.0.contains("more than 1000 combinations"), "{e}");
    let e = plan(&format!("{toml}\"--tp\" = [1]\n")).expect_err("twice");
    assert!(e.0.contains("duplicate key"), "{e}");
    let e = parse(r#"{"name": "x", "grid": {"--tp": [1], "--tp": [2]}}"#, true).expect_err("twice");
    assert!(e.0.contains("`--tp` is given twice"), "{e}");
}

#[test]
fn sets_carry_labels_and_their_own_benchmark_and_duplicates_are_refused() {
    let r = plan(
        r#"
name = "two"
[bench]
concurrency = [8]
[[sets]]
label = "baseline"
[[sets]]
label = "tp4 at 32"
flags = { "--tp" = 4 }
bench = { concurrency = [32] }
"#,
    )
    .expect("valid");
    assert_eq!(r.steps.len(), 2);
    assert_eq!(r.steps[0].label.as_deref(), Some("baseline"));
    assert_eq!(r.steps[0].flags["--tp"], "8");
    assert_eq!(r.steps[0].settings, None);
    assert_eq!(r.bench.concurrency, [8]);
    assert_eq!(
        r.steps[1].settings.as_ref().map(|s| s.concurrency.clone()),
        Some(vec![32])
    );
    assert_eq!(r.varied, ["--tp"]);
    let e = plan("name = \"d\"\n[[sets]]\nflags = { \"--tp\" = 8 }\n[[sets]]\n")
        .expect_err("same set twice");
    assert!(e.0.contains("flag set #2 is the same as #1"), "{e}");
}

#[test]
fn a_search_plan_resolves_its_space_budget_and_confirmation() {
    let r = plan(
        r#"
name = "search"
strategy = "search"
[grid]
"--ep-size" = [1, 2, 4, 8]
"--speculative-algorithm" = ["", "EAGLE"]
"--tp" = 8
[[exclude]]
"--ep-size" = 8
"--speculative-algorithm" = "EAGLE"
[[sets]]
label = "today's"
flags = { "--tp" = 8 }
[budget]
patience = 5
"#,
    )
    .expect("valid");
    let s = r.search.expect("a search");
    assert_eq!(s.strategy, Strategy::Search);
    assert!(s.screen);
    assert_eq!(s.space.size(), 8);
    assert_eq!(s.space.open_size(100), 7, "one combination excluded");
    assert_eq!((s.max_steps, s.patience), (None, Some(5)));
    assert_eq!((s.confirm_top, s.confirm_rounds, s.listed), (2, 3, 1));
    assert!((s.min_gain - 0.02).abs() < 1e-12);
    // Only the listed set is laid out; the search adds the rest as it goes.
    assert_eq!(r.steps.len(), 1);
    assert_eq!(r.varied, ["--ep-size", "--speculative-algorithm"]);
    // A random draw with no budget of its own stops after 20 steps.
    let r = plan("name = \"r\"\nstrategy = \"random\"\n[grid]\n\"--ep-size\" = [1, 2, 4, 8]\n")
        .expect("valid");
    let s = r.search.expect("a draw");
    assert_eq!((s.max_steps, s.confirm_top), (Some(20), 2));
    assert!(r.steps.is_empty());
    // A grid is laid out whole and has no search.
    assert_eq!(plan(GRID).expect("valid").search, None);
}

#[test]
fn a_search_plan_that_cannot_run_is_refused_naming_why() {
    let grid = "[grid]\n\"--ep-size\" = [1, 2]\n";
    for (text, says) in [
        (
            "strategy = \"search\"\n[grid]\n\"--tp\" = 8\n".to_owned(),
            "at least one flag of two values",
        ),
        (
            format!("[budget]\nmax_steps = 4\n{grid}"),
            "a grid runs every combination",
        ),
        (
            format!("strategy = \"search\"\n[budget]\nmax_steps = 0\n{grid}"),
            "max_steps",
        ),
        (
            format!("strategy = \"search\"\n[budget]\nmax_hours = -1\n{grid}"),
            "max_hours",
        ),
        (
            format!("strategy = \"search\"\n[budget]\npatience = 0\n{grid}"),
            "patience",
        ),
        (
            format!("strategy = \"search\"\n[budget]\nmin_gain_pct = 80\n{grid}"),
            "min_gain_pct",
        ),
        (
            format!("strategy = \"search\"\n[budget]\nsteps = 3\n{grid}"),
            "unknown field",
        ),
        (
            format!("strategy = \"screen\"\n[confirm]\ntop = 2\n{grid}"),
            "names no winner",
        ),
        (
            format!("strategy = \"search\"\n[confirm]\ntop = 9\n{grid}"),
            "confirm: top",
        ),
        (format!("strategy = \"anneal\"\n{grid}"), "unknown variant"),
    ] {
        let e = plan(&format!("name = \"x\"\n{text}")).expect_err(&text);
        assert!(e.to_string().contains(says), "{text}: {e}");
    }
}
