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
//!
//! With the same linker, and when the C library it links against is glibc 2.36 or newer, the
//! executable's relative relocations are packed (`-z pack-relative-relocs`, `DT_RELR`): 13 KB
//! instead of a 1.1 MB `.rela.dyn` that the dynamic loader reads at every start. The executable
//! then needs glibc 2.36 or newer at run time too (the loader names the missing
//! `GLIBC_ABI_DT_RELR` otherwise); builds on an older glibc, or with `QUIVER_PACK_RELOCS=0`,
//! keep the usual `.rela.dyn`. It stays position independent (ASLR unchanged).

use std::env;
use std::path::Path;

fn main() {
    println!("cargo:rerun-if-changed=link-order.txt");
    println!("cargo:rerun-if-env-changed=QUIVER_LINK_ORDER");
    println!("cargo:rerun-if-env-changed=RUSTC_LINKER");
    println!("cargo:rerun-if-env-changed=QUIVER_PACK_RELOCS");
    if env::var("TARGET").as_deref() != Ok("x86_64-unknown-linux-gnu") || env::var_os("RUSTC_LINKER").is_some() {
        return;
    }
    let flags = env::var("CARGO_ENCODED_RUSTFLAGS").unwrap_or_default();
    if ["fuse-ld", "linker-flavor", "linker-features", "linker="].iter().any(|f| flags.contains(f)) {
        return;
    }
    // The build script runs on the machine the executable is linked on (TARGET is that
    // machine's own triple here), so this is the glibc the link sees.
    if env::var("HOST").as_deref() == Ok("x86_64-unknown-linux-gnu")
        && env::var_os("QUIVER_PACK_RELOCS").is_none_or(|v| v != "0")
        && glibc_at_least(2, 36)
    {
        println!("cargo:rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
    }
    if env::var_os("QUIVER_LINK_ORDER").is_some_and(|v| v == "0") {
        return;
    }
    let dir = env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    let order = Path::new(&dir).join("link-order.txt");
    if order.is_file() {
        println!("cargo:rustc-link-arg-bins=-Wl,--symbol-ordering-file={}", order.display());
        println!("cargo:rustc-link-arg-bins=-Wl,--no-warn-symbol-ordering");
    }
}

/// Whether the glibc this build script runs with is `major.minor` or newer (a build script is
/// compiled for the build machine, so `target_env` here is that machine's: no glibc, no check).
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn glibc_at_least(_major: u32, _minor: u32) -> bool {
    false
}

/// Whether the glibc this build script runs with is `major.minor` or newer.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn glibc_at_least(major: u32, minor: u32) -> bool {
    unsafe extern "C" {
        fn gnu_get_libc_version() -> *const std::ffi::c_char;
    }
    // SAFETY: glibc's gnu_get_libc_version takes no arguments and returns a pointer to a static
    // NUL-terminated string ("2.36"), valid for the life of the process.
    let version = unsafe { std::ffi::CStr::from_ptr(gnu_get_libc_version()) };
    let mut parts = version.to_str().unwrap_or("").split('.').map(|p| p.parse::<u32>().unwrap_or(0));
    let found = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    found >= (major, minor)
}
