//! Flag combinations that fail on their own, as real ones do, so that a
//! campaign over the simulated server meets every outcome:
//!
//! | flags | what happens |
//! |---|---|
//! | `--ep-size 8` with `--speculative-algorithm` | out of GPU memory halfway through the warm-up (the draft model does not fit beside eight experts' buffers) |
//! | `--enable-torch-compile` with `--ep-size` ≥ 4 | a worker dies halfway through the warm-up (a compile error) |
//! | `SGLANG_OPT_USE_TILELANG_INDEXER=1` with `--speculative-algorithm` | it serves, but its answers are wrong (`tok0 tok1 tok2 tok0 …`) |
//!
//! Each is a `SIMSERVER_MODE` of its own (`oom`, `crash-warmup`,
//! `wrong-answers`) that these flags switch on.

use crate::rate::SpeedFlags;

/// The modes the flags switch on (comma-separated, as `SIMSERVER_MODE`).
pub fn modes(f: &SpeedFlags) -> Vec<&'static str> {
    let mut out = Vec::new();
    if f.ep_size >= 8 && f.speculative {
        out.push("oom");
    }
    if f.torch_compile && f.ep_size >= 4 {
        out.push("crash-warmup");
    }
    if f.tilelang_indexer && f.speculative {
        out.push("wrong-answers");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_documented_combinations_fail() {
        let f = |ep_size, speculative, torch_compile, tilelang_indexer| SpeedFlags {
            ep_size,
            speculative,
            torch_compile,
            tilelang_indexer,
            cuda_graph_max_bs: None,
            attention_backend: None,
        };
        assert!(modes(&f(1, false, false, false)).is_empty());
        assert!(modes(&f(8, false, true, true)) == ["crash-warmup"]);
        assert_eq!(modes(&f(8, true, false, false)), ["oom"]);
        assert_eq!(modes(&f(4, true, false, false)), Vec::<&str>::new());
        assert_eq!(modes(&f(1, true, false, true)), ["wrong-answers"]);
        assert_eq!(modes(&f(2, false, true, false)), Vec::<&str>::new());
    }
}
