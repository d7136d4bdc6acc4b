//! Throughput per flag set: drainwatch's benchmark against the simulated server
//! whose true rate is known, the flag-set ledger, and export.

mod accuracy;
mod ledger;

/// Held by the tests that compare measured rates with the true ones: each
/// measures with the machine's cores to itself, not beside another benchmark.
pub(crate) static MEASURING: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
