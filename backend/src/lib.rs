//! drainwatch's backend: reads the GPUs (NVML) and the process tree (`/proc`) of
//! the host it runs on and serves them live to a browser UI.
//!
//! Layout (the floors, bottom first, are `FLOORS` in `tests/tidy/main.rs`,
//! which fails on a use that goes up or across):
//! - [`clock`]: the wall clock in Unix milliseconds; the ground floor.
//! - [`config`]: settings as data (serving's and the managed server's file),
//!   validated once.
//! - [`identity`]: who a process is (PID + start time), its descendants, and
//!   the server's processes as published to telemetry; the ground floor that
//!   telemetry, the supervisor and the restart manager share.
//! - [`telemetry`]: NVML (the only module that uses it) and `/proc` readers,
//!   joined into one [`shared::Sample`] by the sampler thread.
//! - [`hub`]: latest sample, live stream and history, shared by all clients.
//! - [`scrape`]: what the managed server's own `/metrics` says it serves now.
//! - [`campaign`]: unattended searches over flag sets, driving the manager
//!   step by step, resumable after a crash.
//! - [`api`]: `/healthz`, `/api/state`, `/ws` and the embedded UI.
//! - [`cli`]: the client commands (`status`, `restart`, `bench`, `watch`).
//! - [`startup`]: [`startup::Application`] ties them together; `main.rs` only
//!   parses the command line and waits for Ctrl-C.

pub mod api;
pub mod auth;
pub mod bench;
pub mod campaign;
pub mod cli;
pub mod clock;
pub mod config;
pub mod fleet;
pub mod http;
pub mod hub;
pub mod identity;
pub mod redact;
pub mod restart;
pub mod scrape;
pub mod startup;
pub mod store;
pub mod supervisor;
pub mod telemetry;
