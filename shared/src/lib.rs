//! drainwatch's wire protocol: the types the backend sends over `/ws` and `/api/*`
//! and the browser UI reads.
//!
//! Layout:
//! - [`protocol`]: the socket messages ([`ServerMsg`], [`ClientMsg`]) and [`PROTOCOL_VERSION`].
//! - [`auth`]: roles, the caller's session, who is connected.
//! - [`bench`]: flag sets, serving benchmarks and their results.
//! - [`campaign`]: unattended searches over flag sets, step by step, and what views compute from them.
//! - [`decimal`]: decimal text to a number, as `str::parse` reads it.
//! - [`flags`]: the allow-list's entries, the one check of a value, applying changes, diffs.
//! - [`gpu`]: one GPU as NVML reported it, field by field.
//! - [`health`]: a GPU's clocks and health (throttling, ECC, rows, PCIe, MIG, XID) and what is wrong.
//! - [`process`]: one process that holds GPU memory or belongs to the managed server.
//! - [`restart`]: the managed server, its flags, guarded restarts and their history.
//! - [`sample`]: one reading of the whole host, the host's static facts and the history.
//! - [`units`]: how the UI writes numbers (bytes, watts, ages), with their units.
//! - [`tree`]: how deep each listed process sits in the process tree.
//! - [`failure`]: why an operation failed, and the processes it names.
//! - [`flat`]: how the tagged enums are read, each as one flat struct.
//! - [`holders`]: how a GPU's memory splits among server, foreign and the rest.
//!
//! This crate builds for wasm32 and the host alike: no tokio, axum or I/O here.
//! Every type is serialized: changing a field name is a wire change, caught by the
//! golden fixtures in `tests/fixtures`. Units are part of field names
//! (`mem_used_bytes`, `power_mw`, `at_ms`).

/// `as_str` for a unit enum of the wire: each variant's name as serde writes it
/// (`warming_up`). The UI's attributes and the CLI's words take the names from
/// here; a test in each enum's module holds them to serde's.
macro_rules! wire_names {
    ($ty:ty { $($variant:ident => $name:literal),+ $(,)? }) => {
        impl $ty {
            /// The variant's wire name, as serde writes it.
            pub fn as_str(self) -> &'static str {
                match self {
                    $(Self::$variant => $name,)+
                }
            }
        }
    };
}

pub mod auth;
pub mod bench;
pub mod campaign;
pub mod decimal;
pub mod failure;
pub mod flags;
pub mod flat;
pub mod fleet;
pub mod gpu;
pub mod health;
pub mod holders;
pub mod html;
pub mod process;
pub mod protocol;
pub mod restart;
pub mod sample;
pub mod tree;
pub mod units;

pub use gpu::{FieldError, GpuSample};
pub use holders::MemHolders;
pub use process::{GpuMemUse, ProcId, ProcessInfo, ProcessRole};
pub use protocol::{ClientMsg, ErrorCode, PROTOCOL_VERSION, ServerMsg};
pub use sample::{HistoryPoint, HostInfo, NvmlStatus, Sample, ServerIdentity, Snapshot};
