//! Gives the cdylib the SONAME a real driver's NVML has, so that loaders and
//! tools see `libnvidia-ml.so.1` whatever the file is called.

fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libnvidia-ml.so.1");
}
