//! Untrusted bytes as an incoming MCP message (stdio line or HTTP body): decoded or refused with
//! a JSON-RPC error, never a panic.
//! The body lives in `fuzz/bodies.rs`, shared with the bounded run in `cargo test`.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[allow(dead_code)]
#[path = "../bodies.rs"]
mod bodies;

fuzz_target!(|data: &[u8]| {
    bodies::mcp_message(data);
});
