//! Untrusted call arguments (and schemas) through the router's argument validation and its
//! repairable error messages: never a panic. The input is split at the first NUL: a schema, then
//! the arguments; a fixed schema with every keyword kind is used when the first part is not one.
//! The body lives in `fuzz/bodies.rs`, shared with the bounded run in `cargo test`.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[allow(dead_code)]
#[path = "../bodies.rs"]
mod bodies;

fuzz_target!(|data: &[u8]| {
    bodies::arguments(data);
});
