//! Untrusted YAML through the manifest and configuration readers: never a panic, never a hang
//! (size and nesting caps), only `Ok` or a list of issues.
//! The body lives in `fuzz/bodies.rs`, shared with the bounded run in `cargo test`.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[allow(dead_code)]
#[path = "../bodies.rs"]
mod bodies;

fuzz_target!(|data: &[u8]| {
    bodies::manifest(data);
});
