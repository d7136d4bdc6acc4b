//! Throughput per flag set: drainwatch's benchmark against the simulated server
//! whose true rate is known, the flag-set ledger, and export; a server that
//! wants an API key.

mod accuracy;
mod api_key;
mod client;
mod ledger;
mod open_loop;
mod token_counts;
mod workloads;

/// The tests that compare measured rates with the true ones hold it alone
/// (`write`): each measures with the machine's cores to itself. Tests that only
/// put load on a server (a benchmark whose rate they do not compare) share it
/// (`read`), so they run beside each other but never beside a measurement.
pub(crate) static MEASURING: tokio::sync::RwLock<()> = tokio::sync::RwLock::const_new(());
