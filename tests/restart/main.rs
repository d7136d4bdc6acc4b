//! Guarded restarts end to end: the real drainwatch managing the simulated server
//! (real processes, signals and SQLite) on a simulated host, driven over HTTP.

mod containers;
mod containment;
mod coordinated;
mod crash;
mod flow;
mod guards;
mod health;
mod hub_crash;
mod launch;
mod modes;
mod multinode;
mod person;
mod verify;
