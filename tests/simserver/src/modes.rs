//! Misbehaviour, chosen per launch by `SIMSERVER_MODE` (comma-separated, so a
//! restart's environment flag can pick it): the ways real servers make restarts
//! go wrong, for tests and the demo.

use std::time::Duration;

/// The modes of one launch. Workers inherit the variable, so they see the same.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Modes {
    /// Launcher and workers ignore SIGTERM.
    pub(crate) ignore_sigterm: bool,
    /// Rank 0 leaves a process that escapes the process group and keeps GPU memory.
    pub(crate) orphan: bool,
    /// On SIGTERM, finish in-flight requests (up to this long) before exiting.
    pub(crate) slow_drain: Option<Duration>,
    /// Warm-up dies with a CUDA out-of-memory error halfway.
    pub(crate) oom: bool,
    /// A worker dies this long after the server is ready.
    pub(crate) crash_after: Option<Duration>,
    /// `/health` says 200, completions never answer.
    pub(crate) hang_completions: bool,
    /// Every n-th request's stream is cut off halfway (the connection drops).
    pub(crate) drop_every: Option<u64>,
    /// Every n-th request is generated at a third of the pace (three times the
    /// inter-token latency), and counted as slow in `/metrics`.
    pub(crate) slow_every: Option<u64>,
    /// Usage only in the final chunk, as SGLang does: `continuous_usage_stats`
    /// (vLLM's per-chunk counts) is ignored.
    pub(crate) final_usage: bool,
    /// Events carry a varying number of tokens, as with speculative decoding:
    /// every fifth event after the first carries three, the others one.
    pub(crate) mixed_events: bool,
    /// This long after it is warm, rank 0 leaves a process that setsids and
    /// double-forks (so it is nobody's descendant once its parent is gone) and
    /// keeps 4 GiB of GPU memory.
    pub(crate) escape_after: Option<Duration>,
    /// On SIGTERM, rank 0 keeps spawning short-lived children in sessions of
    /// their own for a while (a bounded number) before it exits.
    pub(crate) fork_bomb_lite: bool,
    /// A worker dies halfway through its warm-up (a compile error, say).
    pub(crate) crash_warmup: bool,
    /// Answers are wrong: the words never count past two.
    pub(crate) wrong_answers: bool,
    /// On SIGTERM the launcher exits at once, and its workers tear down for
    /// this long, holding their memory (as CUDA contexts do): they outlive
    /// the root.
    pub(crate) slow_teardown: Option<Duration>,
    /// Rank 0's memory outlives it: the driver leaks it (SGLang PR #39612),
    /// charged with no process until the GPU is reset.
    pub(crate) leak: bool,
    /// On SIGTERM, rank 0 gets stuck in the kernel where SIGKILL cannot end
    /// it (vLLM #25127), holding its memory.
    pub(crate) stuck_in_driver: bool,
}

pub(crate) const ENV: &str = "SIMSERVER_MODE";

impl Modes {
    pub(crate) fn from_env() -> Result<Self, String> {
        Self::parse(&std::env::var(ENV).unwrap_or_default())
    }

    /// `"orphan,slow-drain=3000"` and the like; `normal` or empty is none.
    pub(crate) fn parse(s: &str) -> Result<Self, String> {
        let mut m = Self::default();
        for item in s.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            let (name, value) = match item.split_once('=') {
                Some((n, v)) => (n, Some(v)),
                None => (item, None),
            };
            let ms = |default: u64| -> Result<Duration, String> {
                match value {
                    None => Ok(Duration::from_millis(default)),
                    Some(v) => v
                        .parse()
                        .map(Duration::from_millis)
                        .map_err(|_| format!("{ENV}: `{item}` needs milliseconds")),
                }
            };
            match name {
                "normal" => {}
                "ignore-sigterm" => m.ignore_sigterm = true,
                "orphan" => m.orphan = true,
                "slow-drain" => m.slow_drain = Some(ms(5_000)?),
                "oom" => m.oom = true,
                "crash" => m.crash_after = Some(ms(10_000)?),
                "hang-completions" => m.hang_completions = true,
                "final-usage" => m.final_usage = true,
                "mixed-events" => m.mixed_events = true,
                "escape" => m.escape_after = Some(ms(1_000)?),
                "fork-bomb-lite" => m.fork_bomb_lite = true,
                "crash-warmup" => m.crash_warmup = true,
                "wrong-answers" => m.wrong_answers = true,
                "slow-teardown" => m.slow_teardown = Some(ms(1_500)?),
                "leak" => m.leak = true,
                "stuck-in-driver" => m.stuck_in_driver = true,
                "drop-every" | "slow-every" => {
                    let every = value
                        .and_then(|v| v.parse().ok())
                        .filter(|n| *n > 0)
                        .ok_or_else(|| format!("{ENV}: `{item}` needs a count, e.g. {name}=5"))?;
                    if name == "drop-every" {
                        m.drop_every = Some(every);
                    } else {
                        m.slow_every = Some(every);
                    }
                }
                other => return Err(format!("{ENV}: unknown mode `{other}`")),
            }
        }
        Ok(m)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_lists_and_values() {
        let m = Modes::parse("orphan, slow-drain=2500,ignore-sigterm").expect("valid");
        assert!(m.orphan && m.ignore_sigterm && !m.final_usage);
        assert!(Modes::parse("final-usage").expect("valid").final_usage);
        let mixed = Modes::parse("mixed-events,final-usage").expect("valid");
        assert!(mixed.mixed_events && mixed.final_usage && !m.mixed_events);
        assert_eq!(m.slow_drain, Some(Duration::from_millis(2500)));
        assert_eq!(Modes::parse("normal").expect("valid"), Modes::default());
        assert_eq!(
            Modes::parse("crash").expect("valid").crash_after,
            Some(Duration::from_secs(10))
        );
        let e = Modes::parse("escape=2500,fork-bomb-lite").expect("valid");
        assert_eq!(e.escape_after, Some(Duration::from_millis(2500)));
        assert!(e.fork_bomb_lite);
        assert!(Modes::parse("explode").is_err());
        assert!(Modes::parse("crash=soon").is_err());
        assert_eq!(
            Modes::parse("slow-every=7").expect("valid").slow_every,
            Some(7)
        );
        assert!(Modes::parse("slow-every").is_err());
    }
}
