//! A small ledger the ledger's tests share: three sets, one measured at three
//! concurrencies, one at two, one not at all.

use shared::bench::{FlagSet, FlagSetResults, LevelSummary, Spread, TokenSource};

fn flags(pairs: &[(&str, &str)]) -> shared::flags::Flags {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

pub(crate) fn lvl(c: u32, med: f64) -> LevelSummary {
    LevelSummary {
        concurrency: c,
        output_tok_s: Spread {
            min: med - 10.0,
            median: med,
            max: med + 5.0,
        },
        ttft_p50_ms: Spread {
            median: 41.25,
            ..Spread::default()
        },
        ttft_p99_ms: Spread {
            median: 88.0,
            ..Spread::default()
        },
        itl_p50_ms: Spread {
            median: 8.5,
            ..Spread::default()
        },
        itl_p99_ms: Spread {
            median: 120.4,
            ..Spread::default()
        },
        token_source: TokenSource::ChunkUsage,
        ..LevelSummary::default()
    }
}

pub(crate) fn set(
    id: &str,
    label: Option<&str>,
    f: &[(&str, &str)],
    levels: &[(u32, f64)],
) -> FlagSetResults {
    FlagSetResults {
        set: FlagSet {
            id: id.to_owned(),
            model: "m".to_owned(),
            flags: flags(f),
            label: label.map(str::to_owned),
            notes: None,
            first_seen_ms: 0,
            last_seen_ms: 0,
        },
        levels: levels.iter().map(|&(c, v)| (c, lvl(c, v))).collect(),
        runs: 1,
        wrong_answers: false,
        rate_levels: Vec::new(),
        best_rate: None,
        conditions: None,
        campaign: None,
    }
}

pub(crate) fn ledger() -> Vec<FlagSetResults> {
    vec![
        set(
            "aaa",
            Some("base"),
            &[("--tp", "6"), ("X", "0")],
            &[(1, 100.0), (4, 380.0), (16, 600.0)],
        ),
        set(
            "bbb",
            None,
            &[("--tp", "6"), ("X", "1")],
            &[(16, 660.0), (64, 900.0)],
        ),
        set("ccc", Some("<b>new</b>"), &[("--tp", "4"), ("X", "0")], &[]),
    ]
}
