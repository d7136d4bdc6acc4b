//! Throughput per flag set: what a flag set is and how a serving benchmark is
//! asked for ([`settings`]), what it measured ([`results`]), and what it was
//! measured with and under ([`provenance`]), and the ledger as the agent
//! draws it for the page ([`view`]). Everything is re-exported here.

mod provenance;
mod results;
mod settings;
mod spread;
mod view;

pub use provenance::*;
pub use results::*;
pub use settings::*;
pub use spread::Spread;
pub use view::*;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_sources_name_themselves_as_on_the_wire_and_read_old_names() {
        for s in [
            TokenSource::ChunkUsage,
            TokenSource::Tokenizer,
            TokenSource::Event,
            TokenSource::Usage,
        ] {
            let wire = serde_json::to_value(s).expect("serializes");
            assert_eq!(wire, s.as_str());
            assert_eq!(serde_json::from_value::<TokenSource>(wire).ok(), Some(s));
        }
        // Before per-event counts, a run without the server's count said `stream`.
        let old: TokenSource = serde_json::from_str("\"stream\"").expect("old name");
        assert_eq!(old, TokenSource::Event);
        assert!(!old.per_token() && TokenSource::Tokenizer.per_token());
    }

    #[test]
    fn open_loop_settings_and_slos_are_checked() {
        let open = BenchSettings {
            request_rate: vec![2.0, 8.0],
            max_concurrency: Some(32),
            slo: Some(Slo {
                ttft_ms: Some(500.0),
                tpot_ms: None,
                e2e_ms: None,
                attainment_pct: 90.0,
            }),
            ..BenchSettings::default()
        };
        assert!(open.validate().is_ok(), "{:?}", open.validate());
        let keys = open.levels();
        assert_eq!(keys.len(), 2);
        assert_eq!((keys[1].concurrency, keys[1].request_rate), (32, Some(8.0)));
        assert_eq!(open.max_in_flight(), 32);
        // Without a cap, at most the requests of a repeat (and never over 1024).
        let uncapped = BenchSettings {
            max_concurrency: None,
            num_prompts: 5_000,
            ..open.clone()
        };
        assert_eq!(uncapped.open_loop_cap(), 1024);
        let bad = |f: fn(&mut BenchSettings)| {
            let mut s = open.clone();
            f(&mut s);
            s.validate().expect_err("refused")
        };
        assert!(bad(|s| s.request_rate = vec![0.0]).contains("request_rate 0"));
        assert!(bad(|s| s.request_rate = vec![f64::NAN]).contains("request_rate"));
        assert!(bad(|s| s.request_rate = vec![1.0; 13]).contains("at most 12"));
        assert!(bad(|s| s.burstiness = 0.0).contains("burstiness"));
        assert!(bad(|s| s.max_concurrency = Some(0)).contains("max_concurrency"));
        assert!(
            bad(|s| s.slo = Some(Slo {
                ttft_ms: None,
                ..s.slo.expect("slo")
            }))
            .contains("at least one")
        );
        assert!(
            bad(|s| s.slo = Some(Slo {
                ttft_ms: Some(-1.0),
                ..s.slo.expect("slo")
            }))
            .contains("slo.ttft_ms")
        );
        assert!(
            bad(|s| s.slo = Some(Slo {
                attainment_pct: 0.0,
                ..s.slo.expect("slo")
            }))
            .contains("attainment_pct")
        );
        // A level meets the SLOs when its median repeat's share of good
        // requests reaches the attainment.
        let repeat = |good: u32| RunMetrics {
            concurrency: 32,
            completed: 10,
            request_rate: Some(8.0),
            good: Some(good),
            goodput_req_s: Some(f64::from(good)),
            ..RunMetrics::default()
        };
        let levels = LevelSummary::group(
            &keys,
            &[repeat(9), repeat(10), repeat(8)],
            open.slo.as_ref(),
        );
        assert_eq!(levels.len(), 1, "the 2 req/s level has no repeats");
        assert_eq!(levels[0].request_rate, Some(8.0));
        assert_eq!(levels[0].meets_slo, Some(true));
        assert_eq!(levels[0].goodput_req_s.map(|g| g.median), Some(9.0));
        let levels =
            LevelSummary::group(&keys, &[repeat(9), repeat(7), repeat(8)], open.slo.as_ref());
        assert_eq!(levels[0].meets_slo, Some(false));
    }

    #[test]
    fn a_level_says_when_the_server_counted_prompts_of_another_length() {
        let repeat = |counted: Option<f64>| RunMetrics {
            concurrency: 4,
            prompt_tokens_asked: Some(64),
            prompt_tokens_counted: counted,
            ..RunMetrics::default()
        };
        // Within 10 %: no word of it, but the count is kept.
        let l = LevelSummary::of(4, &[repeat(Some(66.0)), repeat(Some(68.0))]);
        assert_eq!(
            (l.prompt_tokens, l.prompt_len_off.as_deref()),
            (Some(67.0), None)
        );
        // Five times as long: said plainly, with the numbers.
        let l = LevelSummary::of(4, &[repeat(Some(330.0)), repeat(Some(330.0))]);
        assert_eq!(
            l.prompt_len_off.as_deref(),
            Some("prompts were 330 tokens by the server's count, not the 64 asked (+416 %)")
        );
        // Too short is as wrong as too long; 10 % exactly is within.
        assert!(prompt_len_warning(1024, 900.0).is_some_and(|w| w.contains("(-12 %)")));
        assert_eq!(prompt_len_warning(100, 110.0), None);
        assert_eq!(prompt_len_warning(100, 90.0), None);
        // A repeat the server did not count leaves the level uncounted.
        let l = LevelSummary::of(4, &[repeat(Some(330.0)), repeat(None)]);
        assert_eq!((l.prompt_tokens, l.prompt_len_off), (None, None));
    }

    #[test]
    fn workloads_compare_by_what_was_asked_not_the_seed() {
        let random = Workload {
            kind: "random".into(),
            input_len: 256,
            output_len: 128,
            ..Workload::default()
        };
        assert_eq!(random.differs(&random.clone()), None);
        let longer = Workload {
            output_len: 512,
            ..random.clone()
        };
        assert_eq!(
            random.differs(&longer).as_deref(),
            Some("one ran 256 → 128 tokens, the other 256 → 512")
        );
        let data = |sha: &str| Workload {
            kind: "dataset".into(),
            dataset_sha256: Some(sha.into()),
            ..random.clone()
        };
        // A dataset's own lengths win: the settings' do not matter.
        assert_eq!(
            data("a").differs(&Workload {
                output_len: 9,
                ..data("a")
            }),
            None
        );
        assert!(
            data("a")
                .differs(&data("b"))
                .is_some_and(|w| w.contains("different dataset"))
        );
        let prefix = Workload {
            kind: "shared_prefix".into(),
            ..random.clone()
        };
        assert!(
            random
                .differs(&prefix)
                .is_some_and(|w| w.contains("shared-prefix prompts"))
        );
    }

    #[test]
    fn spread_and_settings() {
        assert_eq!(
            Spread::of(&[3.0, 1.0, 2.0]),
            Spread {
                min: 1.0,
                median: 2.0,
                max: 3.0
            }
        );
        assert_eq!(Spread::of(&[]), Spread::default());
        assert!(BenchSettings::default().validate().is_ok());
        let bad = BenchSettings {
            repeats: 2,
            ..BenchSettings::default()
        };
        assert!(bad.validate().expect_err("2 repeats").contains("repeats"));
        let bad = BenchSettings {
            concurrency: vec![0],
            ..BenchSettings::default()
        };
        assert!(bad.validate().is_err());
    }

    #[test]
    fn a_benchmark_too_big_to_hold_is_refused_by_its_bound() {
        // 300 prompts of the longest input, one at a time: well within.
        let long = BenchSettings {
            concurrency: vec![1],
            num_prompts: 300,
            input_len: 131_072,
            ..BenchSettings::default()
        };
        assert!(long.validate().is_ok(), "{:?}", long.validate());
        // Every limit at its top: refused, naming the bound.
        let top = BenchSettings {
            concurrency: vec![1024],
            num_prompts: 100_000,
            input_len: 131_072,
            output_len: 32_768,
            ..BenchSettings::default()
        };
        let e = top.validate().expect_err("too big");
        assert!(e.contains("the bound is 64 MiB"), "{e}");
        let many_long_outputs = BenchSettings {
            num_prompts: 100_000,
            output_len: 1_024,
            ..BenchSettings::default()
        };
        assert!(many_long_outputs.validate().is_err());
        let wide = BenchSettings {
            concurrency: vec![1024],
            input_len: 16_384,
            ..BenchSettings::default()
        };
        assert!(wide.validate().is_err());
    }
}
