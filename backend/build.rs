//! Rebuilds the binary when the UI bundle changes: `frontend/dist` is embedded at
//! compile time (and an absent one compiles to a page saying how to build it).

fn main() {
    println!("cargo:rerun-if-changed=../frontend/dist");
    println!("cargo:rerun-if-changed=build.rs");
}
