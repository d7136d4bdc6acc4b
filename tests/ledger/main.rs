//! Throughput per flag set: drainwatch's benchmark against the simulated server
//! whose true rate is known, the flag-set ledger, and export.

mod accuracy;
mod ledger;
