//! Guarded restarts of the managed server: the pure [`machine`], the pure
//! health [`gate`] it consults before a launch, and the manager that feeds it
//! observations and carries out its effects.

pub mod gate;
pub mod machine;
pub mod manager;
mod observe;
mod probe;
