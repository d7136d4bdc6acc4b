//! Reading a server's Prometheus text (SGLang's, vLLM's or llama.cpp's names): its load
//! (running and queued requests), its generated-tokens counter and tok/s gauge,
//! and its latency histograms, with the quantile of what a histogram observed
//! between two readings. Pure: text in, numbers out.

/// What a server's Prometheus text says about its load: SGLang's names or vLLM's,
/// summed over label sets.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Metrics {
    pub(crate) running: Option<u32>,
    pub(crate) queued: Option<u32>,
    /// The generated-tokens counter.
    pub(crate) generated: Option<f64>,
    /// SGLang's own tok/s gauge (`sglang:gen_throughput`), for a server that
    /// has no generated-tokens counter.
    pub(crate) gen_throughput: Option<f64>,
    /// Time to first token: cumulative bucket counts by upper bound (seconds).
    pub(crate) ttft: Buckets,
    /// Time between tokens, likewise.
    pub(crate) itl: Buckets,
}

/// A histogram's cumulative counts by upper bound, ascending (`+Inf` last).
pub(crate) type Buckets = Vec<(f64, f64)>;

/// What `text` says; a name it does not know, or a value that is not a
/// finite, non-negative number, is passed over.
pub(crate) fn parse(text: &str) -> Metrics {
    let mut sums: [Option<f64>; 4] = [None; 4];
    // TTFT; ITL; vLLM's older per-output-token time, used when ITL is absent.
    let mut hists: [Buckets; 3] = Default::default();
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('#') {
            continue;
        }
        let name_end = line.find(['{', ' ']).unwrap_or(line.len());
        let value = line
            .rsplit_once('}')
            .map_or(&line[name_end..], |(_, v)| v)
            .split_whitespace()
            .next()
            .and_then(|v| v.parse::<f64>().ok())
            .filter(|v| v.is_finite() && *v >= 0.0);
        let Some(v) = value else { continue };
        let hist = match &line[..name_end] {
            "sglang:time_to_first_token_seconds_bucket"
            | "vllm:time_to_first_token_seconds_bucket" => Some(0),
            "sglang:inter_token_latency_seconds_bucket"
            | "vllm:inter_token_latency_seconds_bucket" => Some(1),
            "vllm:time_per_output_token_seconds_bucket" => Some(2),
            _ => None,
        };
        if let Some(h) = hist {
            if let Some(le) = le_of(line) {
                add_bucket(&mut hists[h], le, v);
            }
            continue;
        }
        let slot = match &line[..name_end] {
            "sglang:num_running_reqs"
            | "vllm:num_requests_running"
            | "llamacpp:requests_processing" => 0,
            "sglang:num_queue_reqs"
            | "vllm:num_requests_waiting"
            | "llamacpp:requests_deferred" => 1,
            "sglang:generation_tokens_total"
            | "vllm:generation_tokens_total"
            | "llamacpp:tokens_predicted_total" => 2,
            "sglang:gen_throughput" => 3,
            _ => continue,
        };
        *sums[slot].get_or_insert(0.0) += v;
    }
    let [ttft, itl, tpot] = hists;
    Metrics {
        running: sums[0].map(|v| v.round() as u32),
        queued: sums[1].map(|v| v.round() as u32),
        generated: sums[2],
        gen_throughput: sums[3],
        ttft,
        itl: if itl.is_empty() { tpot } else { itl },
    }
}

/// The `le` label of a bucket line, `+Inf` as infinity.
fn le_of(line: &str) -> Option<f64> {
    let labels = &line[line.find('{')? + 1..];
    // `le` itself, not a label whose name ends in it (`role`, `module`).
    let at = labels
        .match_indices("le=\"")
        .map(|(i, _)| i)
        .find(|i| *i == 0 || matches!(labels.as_bytes()[i - 1], b',' | b' '))?;
    let (le, _) = labels[at + 4..].split_once('"')?;
    match le {
        "+Inf" => Some(f64::INFINITY),
        v => v.parse().ok(),
    }
}

/// Adds `count` to the bucket bounded by `le`, keeping the bounds in order.
fn add_bucket(b: &mut Buckets, le: f64, count: f64) {
    match b.iter().position(|(bound, _)| *bound >= le) {
        Some(i) if b[i].0 == le => b[i].1 += count,
        Some(i) => b.insert(i, (le, count)),
        None => b.push((le, count)),
    }
}

/// The `q` quantile of what was observed between two readings of a histogram
/// (as Prometheus's `histogram_quantile` estimates it: linear within the bucket
/// it falls in); `None` when nothing was observed. A counter that went down (the
/// server restarted) counts from zero.
pub(crate) fn quantile(before: &Buckets, now: &Buckets, q: f64) -> Option<f64> {
    let restarted = now.iter().zip(before).any(|(n, b)| n.1 < b.1) || now.len() != before.len();
    let delta: Vec<(f64, f64)> = now
        .iter()
        .enumerate()
        .map(|(i, (le, c))| {
            let was = if restarted { 0.0 } else { before[i].1 };
            (*le, c - was)
        })
        .collect();
    let total = delta.last().map(|(_, c)| *c).filter(|c| *c > 0.0)?;
    let rank = q * total;
    let mut below = (0.0, 0.0);
    for (le, c) in delta {
        if c >= rank {
            if le.is_infinite() {
                // Beyond the last bound: the last bound is all that can be said.
                return Some(below.0);
            }
            let within = if c > below.1 {
                (rank - below.1) / (c - below.1)
            } else {
                1.0
            };
            return Some(below.0 + (le - below.0) * within);
        }
        below = (le, c);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn llama_cpp_names_feed_the_same_load_and_counter() {
        // As llama-server --metrics writes them (counters first, then gauges).
        let text = "# HELP llamacpp:tokens_predicted_total Number of generation tokens processed\n\
                    # TYPE llamacpp:tokens_predicted_total counter\n\
                    llamacpp:tokens_predicted_total 1234\n\
                    llamacpp:prompt_tokens_total 99\n\
                    llamacpp:predicted_tokens_seconds 41.5\n\
                    llamacpp:requests_processing 3\n\
                    llamacpp:requests_deferred 2\n";
        let m = parse(text);
        assert_eq!(m.generated, Some(1234.0));
        assert_eq!((m.running, m.queued), (Some(3), Some(2)));
        // Its gauge is an average since start, not a rate now: not read.
        assert_eq!(m.gen_throughput, None);
    }

    #[test]
    fn latency_histograms_from_either_server() {
        let sglang = "sglang:time_to_first_token_seconds_bucket{tp_rank=\"0\",le=\"0.05\"} 2\n\
                      sglang:time_to_first_token_seconds_bucket{tp_rank=\"0\",le=\"0.1\"} 6\n\
                      sglang:time_to_first_token_seconds_bucket{tp_rank=\"0\",le=\"+Inf\"} 8\n\
                      sglang:time_to_first_token_seconds_bucket{tp_rank=\"1\",le=\"0.05\"} 1\n\
                      sglang:time_to_first_token_seconds_bucket{tp_rank=\"1\",le=\"0.1\"} 1\n\
                      sglang:time_to_first_token_seconds_bucket{tp_rank=\"1\",le=\"+Inf\"} 2\n\
                      sglang:time_to_first_token_seconds_sum{tp_rank=\"0\"} 0.7\n\
                      sglang:gen_throughput{tp_rank=\"0\"} 612.5\n";
        let m = parse(sglang);
        assert_eq!(m.ttft, vec![(0.05, 3.0), (0.1, 7.0), (f64::INFINITY, 10.0)]);
        assert_eq!(m.gen_throughput, Some(612.5));
        assert!(m.itl.is_empty());
        // vLLM's older name stands in for the inter-token latency.
        let v = parse("vllm:time_per_output_token_seconds_bucket{role=\"x\",le=\"0.02\"} 4\n");
        assert_eq!(v.itl, vec![(0.02, 4.0)]);
        let both = parse(
            "vllm:time_per_output_token_seconds_bucket{le=\"0.02\"} 4\n\
             vllm:inter_token_latency_seconds_bucket{le=\"0.01\"} 9\n",
        );
        assert_eq!(both.itl, vec![(0.01, 9.0)]);
    }

    #[test]
    fn quantiles_of_what_was_observed_between_two_readings() {
        let inf = f64::INFINITY;
        let before = vec![(0.01, 0.0), (0.02, 0.0), (0.04, 0.0), (inf, 0.0)];
        // 10 observations in (0.02, 0.04]: the median is halfway through it.
        let now = vec![(0.01, 0.0), (0.02, 0.0), (0.04, 10.0), (inf, 10.0)];
        let p50 = quantile(&before, &now, 0.5).expect("p50");
        assert!((p50 - 0.03).abs() < 1e-9, "{p50}");
        // Only the change counts: 10 more, all at or under 10 ms.
        let later = vec![(0.01, 10.0), (0.02, 10.0), (0.04, 20.0), (inf, 20.0)];
        let p50 = quantile(&now, &later, 0.5).expect("p50");
        assert!((p50 - 0.005).abs() < 1e-9, "{p50}");
        // Nothing new: nothing to say.
        assert_eq!(quantile(&later, &later, 0.5), None);
        // Beyond the last bound: the last bound.
        let slow = vec![(0.01, 10.0), (0.02, 10.0), (0.04, 20.0), (inf, 30.0)];
        assert_eq!(quantile(&later, &slow, 0.9), Some(0.04));
        // The server restarted (its counters went down): from zero.
        let fresh = vec![(0.01, 2.0), (0.02, 2.0), (0.04, 2.0), (inf, 2.0)];
        let p50 = quantile(&later, &fresh, 0.5).expect("p50");
        assert!((p50 - 0.005).abs() < 1e-9, "{p50}");
    }

    #[test]
    fn load_from_either_server() {
        let sglang = "# HELP sglang:num_running_reqs x\n\
                      sglang:num_running_reqs{model_name=\"m\",tp_rank=\"0\"} 7.0\n\
                      sglang:num_running_reqs{model_name=\"m\",tp_rank=\"1\"} 2.0\n\
                      sglang:num_queue_reqs{model_name=\"m\"} 3.0\n\
                      sglang:generation_tokens_total{model_name=\"m\"} 1234\n";
        let m = parse(sglang);
        assert_eq!(
            (m.running, m.queued, m.generated),
            (Some(9), Some(3), Some(1234.0))
        );
        let v = parse(
            "vllm:num_requests_running{model_name=\"q\"} 4\nvllm:num_requests_waiting 1\nvllm:generation_tokens_total 10\n",
        );
        assert_eq!(
            (v.running, v.queued, v.generated),
            (Some(4), Some(1), Some(10.0))
        );
        assert_eq!(parse("other 1\n"), Metrics::default());
        assert_eq!(parse("sglang:num_running_reqs NaN\n").running, None);
    }
}
