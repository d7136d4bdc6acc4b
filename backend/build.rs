//! Rebuilds the binary when the UI bundle changes: `frontend/dist` is embedded at
//! compile time (and an absent one compiles to a page saying how to build it,
//! with a warning here, so that `cargo install` without the UI says so).

fn main() {
    println!("cargo:rerun-if-changed=../frontend/dist");
    println!("cargo:rerun-if-changed=build.rs");
    if !std::path::Path::new("../frontend/dist/index.html").exists() {
        println!(
            "cargo:warning=frontend/dist is missing: this drainwatch will serve no UI \
             (run `cargo xtask build` first, then build again)"
        );
    }
}
