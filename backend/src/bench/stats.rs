//! From timed requests to what SGLang's bench_serving and `vllm bench serve`
//! report: throughput over the level's duration (first send → last completion),
//! and latency means and percentiles over successful requests.

use shared::bench::{Latency, RunMetrics, Slo, TokenSource};

use super::load::Outcome;

/// Nearest-rank percentile of sorted values.
fn pct(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = (p / 100.0 * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Mean, p50 and p99 of values in seconds, reported in milliseconds.
pub fn latency(mut secs: Vec<f64>) -> Latency {
    if secs.is_empty() {
        return Latency::default();
    }
    secs.sort_by(f64::total_cmp);
    let mean = secs.iter().sum::<f64>() / secs.len() as f64;
    Latency {
        mean_ms: mean * 1e3,
        p50_ms: pct(&secs, 50.0) * 1e3,
        p99_ms: pct(&secs, 99.0) * 1e3,
    }
}

/// One repeat's metrics.
pub fn metrics(concurrency: u32, repeat: u32, outcomes: &[Outcome], duration_s: f64) -> RunMetrics {
    let ok: Vec<&Outcome> = outcomes.iter().filter(|o| o.ok).collect();
    let input_tokens: u64 = ok.iter().map(|o| o.input_tokens).sum();
    let output_tokens: u64 = ok.iter().map(|o| o.output_tokens).sum();
    let d = duration_s.max(1e-9);
    RunMetrics {
        concurrency,
        repeat,
        duration_s,
        completed: ok.len() as u32,
        failed: (outcomes.len() - ok.len()) as u32,
        input_tokens,
        output_tokens,
        output_tok_s: output_tokens as f64 / d,
        total_tok_s: (input_tokens + output_tokens) as f64 / d,
        request_s: ok.len() as f64 / d,
        ttft: latency(ok.iter().map(|o| o.ttft).collect()),
        tpot: latency(
            ok.iter()
                .filter(|o| o.output_tokens > 1)
                .map(|o| (o.e2e - o.ttft) / (o.output_tokens - 1) as f64)
                .collect(),
        ),
        itl: latency(ok.iter().flat_map(|o| o.itls.iter().copied()).collect()),
        e2e: latency(ok.iter().map(|o| o.e2e).collect()),
        token_source: TokenSource::least_exact(ok.iter().map(|o| o.token_source)),
        request_rate: None,
        achieved_rate: None,
        good: None,
        goodput_req_s: None,
        client: None,
        prompt_tokens_asked: None,
        // The server's count, where it gave it for every completed request.
        prompt_tokens_counted: (!ok.is_empty() && ok.iter().all(|o| o.input_counted))
            .then(|| input_tokens as f64 / ok.len() as f64),
    }
}

/// An open-loop repeat: the rate asked for, and the rate the requests were
/// sent at (first send to last).
pub fn open_loop(m: &mut RunMetrics, requested: f64, outcomes: &[Outcome]) {
    m.request_rate = Some(requested);
    let (first, last) = outcomes
        .iter()
        .fold((f64::INFINITY, 0.0f64), |(lo, hi), o| {
            (lo.min(o.sent), hi.max(o.sent))
        });
    m.achieved_rate =
        (outcomes.len() > 1 && last > first).then(|| (outcomes.len() - 1) as f64 / (last - first));
}

/// The requests that met every objective (a failed one never does), and
/// goodput: those per second of the repeat's duration.
pub fn goodput(m: &mut RunMetrics, outcomes: &[Outcome], slo: &Slo) {
    let good = outcomes
        .iter()
        .filter(|o| {
            o.ok && slo.met(
                o.ttft * 1e3,
                (o.output_tokens > 1)
                    .then(|| (o.e2e - o.ttft) / (o.output_tokens - 1) as f64 * 1e3),
                o.e2e * 1e3,
            )
        })
        .count() as u32;
    m.good = Some(good);
    m.goodput_req_s = Some(f64::from(good) / m.duration_s.max(1e-9));
}

#[cfg(test)]
mod tests {
    use super::*;
    use shared::bench::TokenSource;

    #[test]
    fn percentiles_are_nearest_rank() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(pct(&v, 50.0), 50.0);
        assert_eq!(pct(&v, 99.0), 99.0);
        assert_eq!(pct(&[7.0], 99.0), 7.0);
        let l = latency(vec![0.010, 0.030, 0.020]);
        assert!((l.mean_ms - 20.0).abs() < 1e-9 && l.p50_ms == 20.0 && l.p99_ms == 30.0);
    }

    #[test]
    fn failures_count_but_do_not_skew_the_rate() {
        let good = Outcome {
            ok: true,
            input_tokens: 10,
            output_tokens: 100,
            ttft: 0.05,
            e2e: 2.0,
            itls: vec![0.0197; 99],
            token_source: TokenSource::ChunkUsage,
            end: 2.0,
            ..Outcome::default()
        };
        let bad = Outcome {
            end: 1.0,
            ..Outcome::default()
        };
        let m = metrics(4, 0, &[good.clone(), good, bad], 2.0);
        assert_eq!((m.completed, m.failed, m.output_tokens), (2, 1, 200));
        assert!((m.output_tok_s - 100.0).abs() < 1e-9);
        assert!((m.total_tok_s - 110.0).abs() < 1e-9);
        assert!((m.tpot.mean_ms - 1950.0 / 99.0).abs() < 1e-9);
        // The failed request's source (none) does not count.
        assert_eq!(m.token_source, TokenSource::ChunkUsage);
    }

    #[test]
    fn goodput_counts_requests_that_met_every_objective() {
        let req = |ttft: f64, e2e: f64, n: u64| Outcome {
            ok: true,
            output_tokens: n,
            ttft,
            e2e,
            end: e2e,
            ..Outcome::default()
        };
        let outcomes = [
            req(0.05, 1.05, 101), // TPOT 10 ms: good
            req(0.05, 3.05, 101), // TPOT 30 ms: too slow per token
            req(0.50, 1.50, 101), // TTFT 500 ms: too slow to start
            req(0.05, 0.05, 1),   // one token: no TPOT, good
            Outcome::default(),   // failed: never good
        ];
        let slo = Slo {
            ttft_ms: Some(200.0),
            tpot_ms: Some(20.0),
            e2e_ms: None,
            attainment_pct: 90.0,
        };
        let mut m = metrics(4, 0, &outcomes, 4.0);
        goodput(&mut m, &outcomes, &slo);
        assert_eq!(m.good, Some(2));
        assert_eq!(m.goodput_req_s, Some(0.5));
        let tight = Slo {
            e2e_ms: Some(1_000.0),
            ..slo
        };
        goodput(&mut m, &outcomes, &tight);
        assert_eq!(m.good, Some(1));
    }

    #[test]
    fn the_achieved_rate_is_over_the_sends() {
        let sent = |t: f64| Outcome {
            ok: true,
            sent: t,
            ..Outcome::default()
        };
        let outcomes: Vec<Outcome> = (0..11).map(|i| sent(f64::from(i) * 0.1)).collect();
        let mut m = metrics(8, 0, &outcomes, 1.2);
        open_loop(&mut m, 10.0, &outcomes);
        assert_eq!(m.request_rate, Some(10.0));
        let achieved = m.achieved_rate.expect("a rate");
        assert!((achieved - 10.0).abs() < 1e-9, "{achieved}");
        let mut one = metrics(8, 0, &outcomes[..1], 1.0);
        open_loop(&mut one, 10.0, &outcomes[..1]);
        assert_eq!(one.achieved_rate, None);
    }
}
