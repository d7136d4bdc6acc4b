//! What the simulated server shares: with `gpuhog` (tests/gpuhog), which holds
//! real GPU memory behind the same launch shape, how a launcher keeps its
//! worker processes; with the tests and benchmarks that must know the truth,
//! its documented pace ([`rate`]).

pub mod quirks;
pub mod rate;
pub mod workers;
