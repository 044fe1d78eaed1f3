//! Links the druidctl executables as position-dependent (non-PIE) executables on Linux with glibc.
//!
//! A PIE of this size carries about 2 MB of dynamic relocations (`.rela.dyn`) that the dynamic loader reads
//! and applies to about 2 MB of `.data.rel.ro` at every start, before `main`: about 4 MiB of the peak RSS of a
//! one-shot command such as `druidctl status` (measured with `perf record -e page-faults`, see
//! docs/performance.md). A non-PIE executable has those addresses fixed at link time, so nothing is read or
//! written at start, and pages of `.data.rel.ro` stay shared file pages until used. The cost is that the
//! executable's own code is not randomised by ASLR (shared libraries, heap and stacks still are).
//!
//! `-no-pie` comes after rustc's own `-pie` on the linker command line, and the last of the two wins. musl
//! targets are left alone: they link a static PIE (`-static-pie`) that `-no-pie` would contradict.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let var = |name: &str| std::env::var(name).unwrap_or_default();
    if var("CARGO_CFG_TARGET_OS") == "linux" && var("CARGO_CFG_TARGET_ENV") == "gnu" {
        println!("cargo:rustc-link-arg-bins=-no-pie");
    }
}
