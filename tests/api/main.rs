//! API tests: the real `drainwatch` binary over real HTTP and WebSockets, reading a
//! simulated host through the fake NVML library.

mod auth;
mod cli;
mod fleet;
mod hardening;
mod health;
mod hooks;
mod metrics;
mod nvml_errors;
mod other_clients;
mod prometheus;
mod redact;
mod remote;
mod state;
mod walk;
mod ws;
