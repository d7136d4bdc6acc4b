//! drainwatch's backend: reads the GPUs (NVML) and the process tree (`/proc`) of
//! the host it runs on and serves them live to a browser UI.
//!
//! Layout:
//! - [`clock`]: the wall clock in Unix milliseconds; the ground floor.
//! - [`config`]: command-line settings, validated once.
//! - [`identity`]: who a process is (PID + start time), its descendants, and
//!   the server's processes as published to telemetry; the ground floor that
//!   telemetry, the supervisor and the restart manager share.
//! - [`telemetry`]: NVML (`telemetry/nvml.rs` is the only NVML user) and `/proc`
//!   readers, joined into one [`shared::Sample`] by the sampler thread.
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
pub mod hub;
pub mod identity;
pub mod redact;
pub mod restart;
pub mod scrape;
pub mod startup;
pub mod store;
pub mod supervisor;
pub mod telemetry;
