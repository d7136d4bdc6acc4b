//! Guarded restarts of the managed server: the pure [`machine`], and the manager
//! that feeds it observations and carries out its effects.

pub mod machine;
pub mod manager;
mod observe;
mod probe;
