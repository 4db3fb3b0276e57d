//! Untrusted signature and key text: key parsing, signature decoding and verification against a
//! fixed key, and the bundle trusted-comment check. Never a panic; a signature by another key
//! or over other data is never accepted.
//! The body lives in `fuzz/bodies.rs`, shared with the bounded run in `cargo test`.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[allow(dead_code)]
#[path = "../bodies.rs"]
mod bodies;

fuzz_target!(|data: &[u8]| {
    bodies::signature(data);
});
