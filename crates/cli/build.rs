//! Link settings of the `quiver` executable (this package's binary only: plugin libraries and
//! the other crates link as before; no code is changed).
//!
//! On `x86_64-unknown-linux-gnu` with Rust's default linker (`rust-lld`), the executable is
//! linked with `link-order.txt` as its symbol order: the functions its sessions run come first,
//! next to each other, so the code it maps stays a few megabytes instead of most of `.text`
//! (docs/BENCHMARKS.md, "Memory, first breakdown"). Regenerate the list with
//! `cargo xtask link-order`. Names the linker does not find are skipped silently: a stale list
//! costs memory, never the build. Skipped when another linker is configured (`RUSTC_LINKER`,
//! `-fuse-ld`, linker flavor/features in the rustflags; GNU ld has no symbol order) or with
//! `QUIVER_LINK_ORDER=0`.

use std::env;
use std::path::Path;

fn main() {
    println!("cargo:rerun-if-changed=link-order.txt");
    println!("cargo:rerun-if-env-changed=QUIVER_LINK_ORDER");
    println!("cargo:rerun-if-env-changed=RUSTC_LINKER");
    if env::var("TARGET").as_deref() != Ok("x86_64-unknown-linux-gnu")
        || env::var_os("QUIVER_LINK_ORDER").is_some_and(|v| v == "0")
        || env::var_os("RUSTC_LINKER").is_some()
    {
        return;
    }
    let flags = env::var("CARGO_ENCODED_RUSTFLAGS").unwrap_or_default();
    if ["fuse-ld", "linker-flavor", "linker-features", "linker="].iter().any(|f| flags.contains(f)) {
        return;
    }
    let dir = env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    let order = Path::new(&dir).join("link-order.txt");
    if order.is_file() {
        println!("cargo:rustc-link-arg-bins=-Wl,--symbol-ordering-file={}", order.display());
        println!("cargo:rustc-link-arg-bins=-Wl,--no-warn-symbol-ordering");
    }
}
