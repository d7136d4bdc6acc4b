//! What the simulated server shares with `gpuhog` (tests/gpuhog), which holds
//! real GPU memory behind the same launch shape: how a launcher keeps its
//! worker processes.

pub mod workers;
